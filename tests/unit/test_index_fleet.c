/* The index at fleet scale, every backend against a brute-force model:
 * 20,000 workers coming and going (a window of active workers drifts over
 * the fleet twice; a worker that falls out of it is removed, by a cleared
 * event or kvix_index_remove_worker), storing and evicting prefixes of a few
 * prompts, one of them held by most active workers (so its blocks have
 * thousands of holders and slots far apart), and queries whose answers must
 * equal the model's exactly (scores sorted by blocks, then worker). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "index_events.h"
#include "kvix/hash.h"
#include "kvix/index.h"

#define NW 20000
#define NP 6
#define DEPTH 10
#define WINDOW 3000

static uint8_t held[NW][NP]; /* the model: worker w holds blocks 0..held-1 of prompt p */
static uint64_t local[NP][DEPTH], canon[NP][DEPTH];
static uint64_t rng_s;
static long bad;

static uint64_t rnd(void) { return th_splitmix(&rng_s); }

static unsigned below(unsigned n) { return (unsigned)(rnd() % n); }

static uint64_t worker_id(unsigned w) { return (uint64_t)w * 7919 + 11; }

static void event(kvix_event *ev, int type, unsigned w) { ie_event(ev, type, worker_id(w), 0); }

static void apply(kvix_index *idx, kvix_event *ev, long op) { ie_apply(idx, ev, &bad, "op", op); }

static void store(kvix_index *idx, kvix_event *ev, unsigned w, unsigned p, unsigned to, long op)
{
    unsigned from = held[w][p];
    event(ev, KVIX_EV_STORED, w);
    ev->bs = 16;
    if (from) {
        ev->has_parent = 1;
        ev->parent = canon[p][from - 1];
    }
    kvix_event_reserve_blocks(ev, to - from, NULL);
    for (unsigned i = from; i < to; i++) {
        ev->blocks[ev->nblocks].local = local[p][i];
        ev->blocks[ev->nblocks++].seq = canon[p][i];
    }
    apply(idx, ev, op);
    held[w][p] = (uint8_t)to;
}

static void trim(kvix_index *idx, kvix_event *ev, unsigned w, unsigned p, unsigned to, long op)
{
    event(ev, KVIX_EV_REMOVED, w);
    kvix_event_reserve_hashes(ev, held[w][p] - to, NULL);
    for (unsigned i = held[w][p]; i-- > to;)
        ev->hashes[ev->nhashes++] = canon[p][i];
    apply(idx, ev, op);
    held[w][p] = (uint8_t)to;
}

static void leave(kvix_index *idx, kvix_event *ev, unsigned w, long op)
{
    kvix_err err;
    if (below(8)) { /* kvix_index_remove_worker: the rarer way */
        event(ev, KVIX_EV_CLEARED, w);
        apply(idx, ev, op);
    } else if (kvix_index_remove_worker(idx, worker_id(w), NULL, &err) && bad++ < 5) {
        printf("#   op %ld: worker removal failed: %s\n", op, err.msg);
    }
    memset(held[w], 0, sizeof held[w]);
}

typedef struct want {
    uint64_t worker;
    uint32_t blocks;
} want;

/* The model's answer, by counting: blocks descending, then worker ascending
 * (worker_id grows with w). */
static void query(kvix_index *idx, kvix_answer *ans, want *wv, unsigned p, unsigned n, long op)
{
    kvix_err err;
    size_t at[DEPTH + 2] = {0}, nw = 0;
    for (unsigned w = 0; w < NW; w++)
        if (held[w][p])
            at[DEPTH - (held[w][p] < n ? held[w][p] : n) + 1]++;
    for (unsigned k = 1; k <= DEPTH + 1; k++)
        at[k] += at[k - 1];
    for (unsigned w = 0; w < NW; w++)
        if (held[w][p]) {
            uint32_t bl = held[w][p] < n ? held[w][p] : n;
            wv[at[DEPTH - bl]++] = (want){worker_id(w), bl};
            nw++;
        }
    if (kvix_index_query(idx, "default", "default", local[p], n, ans, &err)) {
        if (bad++ < 5)
            printf("#   op %ld: query failed: %s\n", op, err.msg);
        return;
    }
    int ok = ans->nscores == nw;
    for (size_t i = 0; ok && i < nw; i++)
        ok = ans->scores[i].worker == wv[i].worker && ans->scores[i].dp == 0 &&
             ans->scores[i].blocks == wv[i].blocks;
    if (!ok && bad++ < 5)
        printf("#   op %ld: query of prompt %u, %u blocks: %zu scores, model %zu\n", op, p, n,
               ans->nscores, nw);
}

static void run(kvix_backend b)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = b;
    kvix_index *idx;
    CHECK(kvix_index_new(&idx, &o, NULL) == KVIX_OK);
    memset(held, 0, sizeof held);
    rng_s = th_seed();
    bad = 0;
    for (unsigned p = 0; p < NP; p++)
        ie_chain(local[p], canon[p], DEPTH, &rng_s);
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_answer ans;
    kvix_answer_init(&ans);
    want *wv = malloc(NW * sizeof *wv);
    long ops = (long)(60000 * th_scale());
    if (ops < 2 * NW)
        ops = 2 * NW; /* the window must sweep the whole fleet, twice */
    unsigned base = 0;
    for (long op = 0; op < ops && bad < 5; op++) {
        unsigned nb = (unsigned)((uint64_t)op * 2 * NW / (uint64_t)ops);
        for (; base < nb; base++) /* the worker the window leaves behind goes */
            leave(idx, &ev, base % NW, op);
        unsigned w = (base + below(WINDOW)) % NW, p = below(3) ? 0 : below(NP);
        unsigned kind = below(100);
        if (kind < 55) {
            if (held[w][p] < DEPTH)
                store(idx, &ev, w, p, held[w][p] + 1 + below(DEPTH - held[w][p]), op);
        } else if (kind < 75) {
            if (held[w][p])
                trim(idx, &ev, w, p, below(held[w][p]), op);
        } else if (kind < 77) {
            leave(idx, &ev, w, op);
        } else if (kind < 87) {
            query(idx, &ans, wv, below(3) ? 0 : below(NP), 1 + below(DEPTH), op);
        } else if (held[w][p] < DEPTH) { /* more stores: a fuller fleet */
            store(idx, &ev, w, p, DEPTH, op);
        }
    }
    for (unsigned w = 0; w < NW; w++)
        for (unsigned p = 0; p < NP; p++)
            if (held[w][p]) {
                leave(idx, &ev, w, ops);
                break;
            }
    kvix_index_stats st;
    kvix_index_stats_get(idx, &st);
    CHECK_U64(st.blocks, 0);
    CHECK_U64(st.unique_blocks, 0);
    CHECK_U64(bad, 0);
    if (bad)
        printf("#   backend %s, seed %" PRIu64 "\n", kvix_backend_name(b), th_seed());
    free(wv);
    kvix_answer_release(&ans);
    kvix_event_release(&ev);
    kvix_index_free(idx);
}

TEST(fleet_20000_workers_positional) { run(KVIX_BACKEND_POSITIONAL); }
TEST(fleet_20000_workers_radix) { run(KVIX_BACKEND_RADIX); }
TEST(fleet_20000_workers_reference) { run(KVIX_BACKEND_REFERENCE); }

/* kvindex(1) LIMITS: 65536 (worker, dp) pairs at once in a partition; the
 * 65537th is rejected, naming the limit; once one has left (and its grace
 * period passed: kvix_index_stats_get waits for it) a new pair is taken. */
static int store_one(kvix_index *idx, kvix_event *ev, uint64_t worker, kvix_err *err)
{
    kvix_event_reset(ev);
    ev->type = KVIX_EV_STORED;
    ie_set_name(ev->model, "m");
    ev->worker = worker;
    ev->bs = 16;
    kvix_event_reserve_blocks(ev, 1, NULL);
    ev->blocks[0].local = ev->blocks[0].seq = 42;
    ev->nblocks = 1;
    return kvix_index_apply(idx, ev, NULL, err);
}

TEST(pairs_at_once_limit_is_named)
{
    kvix_index *idx;
    CHECK(kvix_index_new(&idx, NULL, NULL) == KVIX_OK);
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_err err;
    int rc = KVIX_OK;
    uint32_t w;
    for (w = 0; w <= 65536 && rc == KVIX_OK; w++)
        rc = store_one(idx, &ev, w, &err);
    CHECK_U64(w, 65537);
    CHECK(rc == KVIX_ELIMIT);
    CHECK(strstr(err.msg, "more than 65536 (worker, dp) at once in partition model \"m\"") != NULL);
    ev.type = KVIX_EV_CLEARED;
    ev.worker = 7;
    CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
    kvix_index_stats st;
    kvix_index_stats_get(idx, &st);
    CHECK_U64(st.workers, 65535);
    CHECK(store_one(idx, &ev, 65536, &err) == KVIX_OK);
    CHECK(store_one(idx, &ev, 65537, &err) == KVIX_ELIMIT);
    kvix_event_release(&ev);
    kvix_index_free(idx);
}
