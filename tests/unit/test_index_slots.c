/* Slots reclaimed (kvindex(1) LIMITS): far more (worker, dp) pairs than a
 * partition has slots (65,536) come and go, each storing a few blocks and
 * leaving by every way there is (cleared without eid, its blocks removed,
 * worker or (worker, dp) removal, forgotten, cleared with an eid then
 * removed); new pairs are still accepted, every query equals a brute-force
 * model of the live window, and when the last pair has left the partition
 * holds what a fresh empty partition holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "index_events.h"
#include "kvix/hash.h"
#include "kvix/index.h"

#define NP 5
#define DEPTH 6
#define WINDOW 48 /* pairs live at once */

static uint8_t *held;  /* the model: pair k holds blocks 0..held[k]-1 of prompt k % NP */
static uint64_t local[NP][DEPTH], canon[NP][DEPTH];
static uint64_t rng_s;
static long bad;

static uint64_t rnd(void) { return th_splitmix(&rng_s); }

/* Pair k: worker k / 2, dp k % 2 (so removing a worker takes its two dp). */
static uint64_t worker_of(long k) { return (uint64_t)(k / 2) * 7 + 3; }
static uint32_t dp_of(long k) { return (uint32_t)(k % 2); }

static void event(kvix_event *ev, int type, long k) { ie_event(ev, type, worker_of(k), dp_of(k)); }

static void apply(kvix_index *idx, kvix_event *ev, long k) { ie_apply(idx, ev, &bad, "pair", k); }

static void arrive(kvix_index *idx, kvix_event *ev, long k)
{
    unsigned p = (unsigned)(k % NP), n = 1 + (unsigned)(rnd() % DEPTH);
    event(ev, KVIX_EV_STORED, k);
    ev->bs = 16;
    kvix_event_reserve_blocks(ev, n, NULL);
    for (unsigned i = 0; i < n; i++) {
        ev->blocks[i].local = local[p][i];
        ev->blocks[i].seq = canon[p][i] ^ (uint64_t)k; /* engine hashes of its own */
    }
    ev->nblocks = n;
    apply(idx, ev, k);
    held[k] = (uint8_t)n;
}

static void leave(kvix_index *idx, kvix_event *ev, long k)
{
    kvix_err err;
    int rc = KVIX_OK;
    switch (k % 6) {
    case 0: /* cleared without eid */
        event(ev, KVIX_EV_CLEARED, k);
        apply(idx, ev, k);
        break;
    case 1: /* every block removed, leaves first */
        event(ev, KVIX_EV_REMOVED, k);
        kvix_event_reserve_hashes(ev, held[k], NULL);
        for (unsigned i = held[k]; i-- > 0;)
            ev->hashes[ev->nhashes++] = canon[k % NP][i] ^ (uint64_t)k;
        apply(idx, ev, k);
        break;
    case 2:
        rc = kvix_index_remove_worker_dp(idx, worker_of(k), dp_of(k), NULL, &err);
        break;
    case 3:
        rc = kvix_index_forget_worker(idx, "default", "default", worker_of(k), dp_of(k), NULL,
                                      &err);
        break;
    case 4: /* the worker and its other dp (pair k - 1, already gone: k is odd... or live) */
        rc = kvix_index_remove_worker(idx, worker_of(k), NULL, &err);
        held[k ^ 1] = 0;
        break;
    default: /* cleared with an eid: it stays (it holds an eid) until removed */
        event(ev, KVIX_EV_CLEARED, k);
        ev->has_eid = 1;
        ev->eid = (uint64_t)k;
        apply(idx, ev, k);
        rc = kvix_index_remove_worker_dp(idx, worker_of(k), dp_of(k), NULL, &err);
        break;
    }
    if (rc && bad++ < 5)
        printf("#   pair %ld: leaving failed: %s\n", k, err.msg);
    held[k] = 0;
}

/* The live window's answer for prompt p: blocks descending, then worker,
 * then dp (both grow with k). */
static void query(kvix_index *idx, kvix_answer *ans, long lo, long hi, unsigned p)
{
    kvix_err err;
    long want[WINDOW + 2];
    size_t nw = 0;
    for (unsigned b = DEPTH; b > 0; b--)
        for (long k = lo; k < hi; k++)
            if (k % NP == p && held[k] == b)
                want[nw++] = k;
    if (kvix_index_query(idx, "default", "default", local[p], DEPTH, ans, &err)) {
        if (bad++ < 5)
            printf("#   query failed: %s\n", err.msg);
        return;
    }
    int ok = ans->nscores == nw;
    for (size_t i = 0; ok && i < nw; i++)
        ok = ans->scores[i].worker == worker_of(want[i]) && ans->scores[i].dp == dp_of(want[i]) &&
             ans->scores[i].blocks == held[want[i]] && ans->scores[i].held == held[want[i]];
    if (!ok && bad++ < 5)
        printf("#   window [%ld, %ld) prompt %u: %zu scores, model %zu\n", lo, hi, p,
               ans->nscores, nw);
}

static void run(kvix_backend b, long npairs)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = b;
    kvix_index *idx, *fresh;
    CHECK(kvix_index_new(&idx, &o, NULL) == KVIX_OK);
    CHECK(kvix_index_new(&fresh, &o, NULL) == KVIX_OK);
    held = calloc((size_t)npairs + 1, 1);
    rng_s = th_seed();
    bad = 0;
    for (unsigned p = 0; p < NP; p++)
        ie_chain(local[p], canon[p], DEPTH, &rng_s);
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_answer ans;
    kvix_answer_init(&ans);
    for (long k = 0; k < npairs + WINDOW && bad < 5; k++) {
        if (k >= WINDOW)
            leave(idx, &ev, k - WINDOW);
        if (k < npairs)
            arrive(idx, &ev, k);
        if (k % 3 == 0) {
            long lo = k >= WINDOW ? k - WINDOW + 1 : 0, hi = k < npairs ? k + 1 : npairs;
            query(idx, &ans, lo, hi, (unsigned)(rnd() % NP));
        }
    }
    CHECK_U64(bad, 0);
    /* Every pair has gone: the partition (still known, with its block size)
     * holds what one made empty holds. */
    kvix_err err;
    CHECK(kvix_index_load(fresh, "default", "default", 16, UINT64_MAX, 0, NULL, 0, &err) ==
          KVIX_OK);
    kvix_index_stats st, st0;
    kvix_index_stats_get(idx, &st);
    kvix_index_stats_get(fresh, &st0);
    CHECK_U64(st.partitions, 1);
    CHECK_U64(st.workers, 0);
    CHECK_U64(st.blocks, 0);
    CHECK_U64(st.unique_blocks, 0);
    CHECK_U64(st.backend_bytes, 0);
    CHECK_U64(st.bytes, st0.bytes);
    CHECK_U64(kvix_index_block_size(idx, "default", "default"), 16);
    /* and takes workers again */
    arrive(idx, &ev, npairs);
    query(idx, &ans, npairs, npairs + 1, (unsigned)(npairs % NP));
    CHECK_U64(bad, 0);
    if (bad)
        printf("#   backend %s, seed %" PRIu64 "\n", kvix_backend_name(b), th_seed());
    free(held);
    kvix_answer_release(&ans);
    kvix_event_release(&ev);
    kvix_index_free(fresh);
    kvix_index_free(idx);
}

TEST(pairs_200000_come_and_go_positional) { run(KVIX_BACKEND_POSITIONAL, 200000); }
TEST(pairs_70000_come_and_go_radix) { run(KVIX_BACKEND_RADIX, 70000); }
TEST(pairs_70000_come_and_go_reference) { run(KVIX_BACKEND_REFERENCE, 70000); }

/* Pairs that store a block and remove it, each with an eid: they hold only
 * their eid (the resume position), which used to keep their slot for ever
 * (70,000 such workers: 8,928 refused at the 65,536 wall). Now the slot is
 * given back and the eid kept apart: every pair is accepted, every eid is
 * walked (saved) and taken back by the pair's next state, and worker removal
 * forgets it. */
static uint64_t eo_sum, eo_n, eo_blocks;
static int eo_visit(void *ctx, const char *model, const char *tenant, uint32_t bs,
                    uint64_t worker, uint32_t dp, int has_eid, uint64_t eid,
                    const kvix_block_info *b, size_t n)
{
    (void)ctx;
    (void)model;
    (void)tenant;
    (void)bs;
    (void)b;
    (void)dp;
    if (worker == UINT64_MAX)
        return 0;
    eo_n++;
    eo_blocks += n;
    if (has_eid)
        eo_sum += eid - 2 * (worker / 7); /* eid 2k + 1 of pair k: 1 each */
    return 0;
}

TEST(pairs_that_keep_only_their_eid_give_their_slots_back)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    kvix_index *idx;
    CHECK(kvix_index_new(&idx, &o, NULL) == KVIX_OK);
    kvix_event ev;
    kvix_event_init(&ev);
    long n = 70000;
    bad = 0;
    for (long k = 0; k < n && bad < 5; k++) {
        uint64_t w = (uint64_t)k * 7;
        ie_event(&ev, KVIX_EV_STORED, w, 0);
        ev.bs = 16;
        ev.has_eid = 1;
        ev.eid = (uint64_t)(2 * k);
        kvix_event_reserve_blocks(&ev, 1, NULL);
        ev.blocks[0].local = (uint64_t)k + 1;
        ev.blocks[0].seq = (uint64_t)k + 1;
        ev.nblocks = 1;
        ie_apply(idx, &ev, &bad, "store of pair", k);
        ie_event(&ev, KVIX_EV_REMOVED, w, 0);
        ev.has_eid = 1;
        ev.eid = (uint64_t)(2 * k + 1);
        kvix_event_reserve_hashes(&ev, 1, NULL);
        ev.hashes[0] = (uint64_t)k + 1;
        ev.nhashes = 1;
        ie_apply(idx, &ev, &bad, "removal of pair", k);
    }
    CHECK_U64(bad, 0);
    kvix_index_stats st;
    kvix_index_stats_get(idx, &st);
    CHECK_U64(st.workers, (uint64_t)n);
    CHECK_U64(st.blocks, 0);
    eo_sum = eo_n = eo_blocks = 0;
    CHECK(kvix_index_foreach(idx, eo_visit, NULL) == 0);
    CHECK_U64(eo_n, (uint64_t)n);
    CHECK_U64(eo_sum, (uint64_t)n);
    /* pair 3 stores again without an eid: its state takes its eid back */
    ie_event(&ev, KVIX_EV_STORED, 21, 0);
    ev.bs = 16;
    kvix_event_reserve_blocks(&ev, 1, NULL);
    ev.blocks[0].local = 99;
    ev.blocks[0].seq = 99;
    ev.nblocks = 1;
    ie_apply(idx, &ev, &bad, "store again of pair", 3);
    eo_sum = eo_n = eo_blocks = 0;
    CHECK(kvix_index_foreach(idx, eo_visit, NULL) == 0);
    CHECK_U64(eo_n, (uint64_t)n);
    CHECK_U64(eo_sum, (uint64_t)n);
    CHECK_U64(eo_blocks, 1);
    /* removal forgets eids, held or alone */
    kvix_err err;
    CHECK(kvix_index_remove_worker(idx, 21, NULL, &err) == KVIX_OK);
    CHECK(kvix_index_remove_worker(idx, 28, NULL, &err) == KVIX_OK);
    CHECK(kvix_index_forget_worker(idx, "default", "default", 35, 0, NULL, &err) == KVIX_OK);
    kvix_index_stats_get(idx, &st);
    CHECK_U64(st.workers, (uint64_t)n - 3);
    kvix_event_release(&ev);
    kvix_index_free(idx);
}
