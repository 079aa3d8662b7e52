/* Explain beside writers: two writer threads store and remove (each apply
 * inside the index's gate, kvix_index_write_begin/_end, as kvindex's ingest
 * and subscriptions do) while a third explains queries inside the
 * exclusive side (kvix_index_quiet_begin/_end, as POST /explain does) and a
 * fourth answers plain queries without it. Under ThreadSanitizer: no race
 * between the record's writers and explain's reads; and every explanation
 * is one the state allows (a worker explained holds the match it says). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvix/hash.h"
#include "kvix/index.h"

#define WORKERS 8
#define CHAIN 6

static uint64_t chain[CHAIN];
static int stop; /* atomic */

typedef struct wctx {
    kvix_index *idx;
    uint64_t first; /* workers first, first + 2, ... */
    uint64_t rounds;
} wctx;

static void apply(kvix_index *idx, kvix_event *ev)
{
    kvix_err err;
    kvix_index_write_begin(idx);
    int rc = kvix_index_apply(idx, ev, NULL, &err);
    kvix_index_write_end(idx);
    CHECK(rc == KVIX_OK);
}

static void *writer(void *p)
{
    wctx *c = p;
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_event_set_name(ev.model, "m", 1, NULL);
    CHECK(kvix_event_reserve_blocks(&ev, CHAIN, NULL) == KVIX_OK);
    CHECK(kvix_event_reserve_hashes(&ev, CHAIN, NULL) == KVIX_OK);
    uint64_t rng = th_seed() ^ c->first;
    for (uint64_t r = 0; r < c->rounds; r++) {
        uint64_t w = c->first + 2 * (th_splitmix(&rng) % (WORKERS / 2));
        unsigned n = 1 + (unsigned)(th_splitmix(&rng) % CHAIN);
        ev.type = KVIX_EV_STORED;
        ev.worker = w;
        ev.bs = 4;
        ev.has_eid = 1;
        ev.eid = r;
        ev.has_parent = 0;
        for (unsigned b = 0; b < n; b++)
            ev.blocks[b] = (kvix_block){chain[b], w << 8 | b};
        ev.nblocks = n;
        apply(c->idx, &ev);
        ev.type = KVIX_EV_REMOVED; /* the leaves, some of them */
        unsigned k = (unsigned)(th_splitmix(&rng) % (n + 1));
        for (unsigned b = 0; b < k; b++)
            ev.hashes[b] = w << 8 | (n - 1 - b);
        ev.nhashes = k;
        apply(c->idx, &ev);
        if (th_splitmix(&rng) % 16 == 0) {
            ev.type = KVIX_EV_CLEARED;
            apply(c->idx, &ev);
        }
    }
    kvix_event_release(&ev);
    return NULL;
}

static void query_of(kvix_event *q)
{
    kvix_event_init(q);
    kvix_event_set_name(q->model, "m", 1, NULL);
    q->type = KVIX_EV_QUERY;
    CHECK(kvix_event_reserve_hashes(q, CHAIN, NULL) == KVIX_OK);
    memcpy(q->hashes, chain, sizeof chain);
    q->nhashes = CHAIN;
    q->explain = 1;
    for (uint32_t i = 0; i < WORKERS; i++)
        q->xworkers[i] = i;
    q->nxworkers = WORKERS;
}

static void *explainer(void *p)
{
    kvix_index *idx = p;
    kvix_event q;
    query_of(&q);
    kvix_answer ans;
    kvix_answer_init(&ans);
    kvix_explain *x = malloc(sizeof *x);
    kvix_explain_init(x);
    size_t n = 0, bad = 0;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE) || n < 20) {
        kvix_err err;
        kvix_index_quiet_begin(idx);
        int rc = kvix_index_explain(idx, &q, &ans, x, &err);
        /* still quiet: what it said is the state's */
        for (uint32_t i = 0; rc == KVIX_OK && i < x->nw; i++) {
            const kvix_explained *e = &x->w[i];
            if (e->why == KVIX_WHY_UNKNOWN_WORKER || e->why == KVIX_WHY_MATCH)
                continue;
            bad += e->blocks >= CHAIN;
        }
        kvix_index_quiet_end(idx);
        CHECK(rc == KVIX_OK);
        n++;
    }
    CHECK_U64(bad, 0);
    kvix_explain_release(x);
    free(x);
    kvix_answer_release(&ans);
    kvix_event_release(&q);
    return NULL;
}

static void *querier(void *p)
{
    kvix_index *idx = p;
    kvix_event q;
    query_of(&q);
    q.explain = 0;
    kvix_answer ans;
    kvix_answer_init(&ans);
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        kvix_err err;
        CHECK(kvix_index_query_event(idx, &q, &ans, &err) == KVIX_OK);
    }
    kvix_answer_release(&ans);
    kvix_event_release(&q);
    return NULL;
}

TEST(explain_beside_writers_and_queries)
{
    uint64_t rng = th_seed();
    for (int i = 0; i < CHAIN; i++)
        chain[i] = th_splitmix(&rng);
    static const char *const be[] = {"positional", "radix", "reference"};
    for (int b = 0; b < 3; b++) {
        kvix_index_opts o;
        kvix_index_opts_init(&o);
        CHECK(kvix_backend_parse(be[b], &o.backend) == KVIX_OK);
        o.removals = 8;
        kvix_index *idx;
        kvix_err err;
        CHECK(kvix_index_new(&idx, &o, &err) == KVIX_OK);
        stop = 0;
        uint64_t rounds = (uint64_t)(2000 * th_scale()) + 10;
        wctx w[2] = {{idx, 0, rounds}, {idx, 1, rounds}};
        pthread_t t[4];
        pthread_create(&t[0], NULL, writer, &w[0]);
        pthread_create(&t[1], NULL, writer, &w[1]);
        pthread_create(&t[2], NULL, explainer, idx);
        pthread_create(&t[3], NULL, querier, idx);
        pthread_join(t[0], NULL);
        pthread_join(t[1], NULL);
        __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
        pthread_join(t[2], NULL);
        pthread_join(t[3], NULL);
        kvix_index_free(idx);
    }
}
