/* The index front end, hand-checked semantics, on every backend built. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "kvix/buf.h"
#include "kvix/hash.h"
#include "kvix/index.h"

static const char *const backends[] = {"positional", "radix", "reference"};
#define NBACKENDS 3

/* An index on backend name; NULL (with the reason checked) when that backend
 * is not built into this library. */
static kvix_index *mk(const char *name, unsigned threads)
{
    kvix_backend b;
    kvix_index_opts o;
    kvix_index *idx = NULL;
    kvix_err err;
    CHECK(kvix_backend_parse(name, &b) == KVIX_OK);
    kvix_index_opts_init(&o);
    o.backend = b;
    o.threads = threads;
    int rc = kvix_index_new(&idx, &o, &err);
    if (rc) {
        CHECK(rc == KVIX_EINVAL && strstr(err.msg, "not built") && b != KVIX_BACKEND_REFERENCE);
        return NULL;
    }
    return idx;
}

static kvix_event ev = {.model = "default", .tenant = "default"};

static void ev_set(int type, const char *model, uint64_t worker, uint32_t dp, int medium)
{
    kvix_event_reset(&ev);
    ev.type = type;
    kvix_event_set_name(ev.model, model, strlen(model), NULL);
    ev.worker = worker;
    ev.dp = dp;
    ev.medium = medium;
}

/* Engine hashes are made distinct from locals: engine = local ^ salt. */
static int store(kvix_index *idx, const char *model, uint64_t worker, uint32_t dp, int medium,
                 uint32_t bs, const uint64_t *parent, const uint64_t *local, size_t n,
                 uint64_t salt, kvix_apply_result *r)
{
    ev_set(KVIX_EV_STORED, model, worker, dp, medium);
    ev.bs = bs;
    if (parent) {
        ev.has_parent = 1;
        ev.parent = *parent;
    }
    kvix_event_reserve_blocks(&ev, n, NULL);
    for (size_t i = 0; i < n; i++) {
        ev.blocks[i].local = local[i];
        ev.blocks[i].seq = local[i] ^ salt;
    }
    ev.nblocks = n;
    kvix_err err;
    return kvix_index_apply(idx, &ev, r, &err);
}

static int removed(kvix_index *idx, const char *model, uint64_t worker, uint32_t dp, int medium,
                   const uint64_t *hashes, size_t n, kvix_apply_result *r)
{
    ev_set(KVIX_EV_REMOVED, model, worker, dp, medium);
    kvix_event_reserve_hashes(&ev, n, NULL);
    memcpy(ev.hashes, hashes, n * sizeof *hashes);
    ev.nhashes = n;
    return kvix_index_apply(idx, &ev, r, NULL);
}

static int cleared(kvix_index *idx, const char *model, uint64_t worker, uint32_t dp,
                   kvix_apply_result *r)
{
    ev_set(KVIX_EV_CLEARED, model, worker, dp, KVIX_MEDIUM_GPU);
    return kvix_index_apply(idx, &ev, r, NULL);
}

static kvix_answer ans;

static void query(kvix_index *idx, const char *model, const uint64_t *local, size_t n)
{
    kvix_err err;
    CHECK(kvix_index_query(idx, model, "default", local, n, &ans, &err) == KVIX_OK);
    CHECK_U64(ans.query_blocks, n);
}

/* Blocks matched by (worker, dp) in the last answer, 0 when absent. */
static uint32_t matched(uint64_t worker, uint32_t dp)
{
    for (size_t i = 0; i < ans.nscores; i++)
        if (ans.scores[i].worker == worker && ans.scores[i].dp == dp)
            return ans.scores[i].blocks;
    return 0;
}

static const kvix_score *score_of(uint64_t worker, uint32_t dp)
{
    for (size_t i = 0; i < ans.nscores; i++)
        if (ans.scores[i].worker == worker && ans.scores[i].dp == dp)
            return &ans.scores[i];
    return NULL;
}

typedef struct visit {
    char model[32], tenant[32];
    uint32_t bs, dp;
    uint64_t worker, eid;
    int has_eid;
    size_t n;
    kvix_block_info b[16];
} visit;

static visit visits[32];
static int nvisits;

static int collect(void *ctx, const char *model, const char *tenant, uint32_t bs,
                   uint64_t worker, uint32_t dp, int has_eid, uint64_t last_eid,
                   const kvix_block_info *blocks, size_t n)
{
    (void)ctx;
    if (nvisits == 32)
        return 7;
    visit *v = &visits[nvisits++];
    snprintf(v->model, sizeof v->model, "%s", model);
    snprintf(v->tenant, sizeof v->tenant, "%s", tenant);
    v->bs = bs;
    v->worker = worker;
    v->dp = dp;
    v->has_eid = has_eid;
    v->eid = last_eid;
    v->n = n;
    if (n)
        memcpy(v->b, blocks, (n < 16 ? n : 16) * sizeof *blocks);
    return 0;
}

static int walk(kvix_index *idx)
{
    nvisits = 0;
    return kvix_index_foreach(idx, collect, NULL);
}

#define FOR_BACKENDS(idx, threads)                                                           \
    for (int bi_ = 0; bi_ < NBACKENDS; bi_++)                                                \
        for (kvix_index *idx = mk(backends[bi_], threads); idx; kvix_index_free(idx), idx = NULL)

static const uint64_t L[8] = {11, 22, 33, 44, 55, 66, 77, 88};

TEST(partitions_and_block_size)
{
    FOR_BACKENDS(idx, 0) {
        kvix_err err;
        CHECK(store(idx, "m1", 1, 0, 0, 4, NULL, L, 3, 0x100, NULL) == KVIX_OK);
        CHECK_U64(kvix_index_block_size(idx, "m1", "default"), 4);
        CHECK_U64(kvix_index_block_size(idx, "m2", "default"), 0);
        CHECK(store(idx, "m1", 2, 0, 0, 8, NULL, L, 3, 0x100, NULL) == KVIX_EBLOCKSIZE);
        CHECK(store(idx, "m2", 2, 0, 0, 8, NULL, L, 2, 0x100, NULL) == KVIX_OK);
        /* the same hashes in another partition are another partition's */
        query(idx, "m1", L, 3);
        CHECK_U64(ans.nscores, 1);
        CHECK_U64(matched(1, 0), 3);
        CHECK_U64(ans.bs, 4);
        query(idx, "m2", L, 3);
        CHECK_U64(ans.nscores, 1);
        CHECK_U64(matched(2, 0), 2);
        CHECK_U64(ans.unknown, KVIX_UNKNOWN_NONE);
        query(idx, "nope", L, 3);
        CHECK_U64(ans.nscores, 0);
        CHECK_U64(ans.bs, 0);
        CHECK_U64(ans.unknown, KVIX_UNKNOWN_MODEL);
        /* an unknown tenant of a known model; tokens too */
        CHECK(kvix_index_query(idx, "m1", "other", L, 3, &ans, &err) == KVIX_OK);
        CHECK_U64(ans.unknown, KVIX_UNKNOWN_TENANT);
        uint32_t toks[4] = {1, 2, 3, 4};
        CHECK(kvix_index_query_tokens(idx, "nope", "default", NULL, toks, 4, &ans, &err) ==
              KVIX_OK);
        CHECK_U64(ans.unknown, KVIX_UNKNOWN_MODEL);
        CHECK(kvix_index_query_tokens(idx, "m1", "default", NULL, toks, 4, &ans, &err) ==
              KVIX_OK);
        CHECK_U64(ans.unknown, KVIX_UNKNOWN_NONE);
        /* tenant isolation */
        ev_set(KVIX_EV_STORED, "m1", 3, 0, 0);
        kvix_event_set_name(ev.tenant, "t", 1, NULL);
        ev.bs = 16;
        CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
        CHECK_U64(kvix_index_block_size(idx, "m1", "t"), 16);
        /* a query naming another block size */
        kvix_event q;
        kvix_event_init(&q);
        q.type = KVIX_EV_QUERY;
        memcpy(q.model, "m1", 3);
        q.bs = 8;
        kvix_event_reserve_hashes(&q, 1, NULL);
        q.hashes[0] = L[0];
        q.nhashes = 1;
        CHECK(kvix_index_query_event(idx, &q, &ans, &err) == KVIX_EBLOCKSIZE);
        q.bs = 4;
        CHECK(kvix_index_query_event(idx, &q, &ans, &err) == KVIX_OK);
        CHECK_U64(matched(1, 0), 1);
        kvix_event_release(&q);
        kvix_index_stats st;
        kvix_index_stats_get(idx, &st);
        CHECK_U64(st.partitions, 3);
        CHECK_U64(st.workers, 2); /* worker 3 holds nothing and has no eid */
        CHECK_U64(st.blocks, 5);
        CHECK_U64(st.unique_blocks, 5);
        /* bad input */
        ev_set(KVIX_EV_STORED, "m1", 1, 0, 7);
        ev.bs = 4;
        CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_EINVAL);
        ev_set(KVIX_EV_QUERY, "m1", 1, 0, 0);
        CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_EINVAL);
        ev_set(KVIX_EV_STORED, "m3", 1, 0, 0);
        CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_ERANGE); /* no bs */
        CHECK_U64(kvix_index_block_size(idx, "m3", "default"), 0);
    }
}

TEST(canonical_hash_is_the_rolling_hash_of_locals)
{
    /* contract section 1: tokens 1..12, bs 4 */
    static const uint32_t tok[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    static const uint64_t seq[3] = {UINT64_C(14643705804678351452),
                                    UINT64_C(4945711292740353085),
                                    UINT64_C(12583592247330656132)};
    FOR_BACKENDS(idx, 0) {
        uint64_t local[3];
        kvix_hash_blocks(tok, 12, 4, KVIX_HASH_SEED, local, NULL);
        /* stored as two events: [0], then [1, 2] extending it by engine hash */
        CHECK(store(idx, "default", 5, 0, 0, 4, NULL, local, 1, 0xabc, NULL) == KVIX_OK);
        uint64_t parent = local[0] ^ 0xabc;
        CHECK(store(idx, "default", 5, 0, 0, 4, &parent, local + 1, 2, 0xabc, NULL) == KVIX_OK);
        kvix_err err;
        CHECK(kvix_index_query_tokens(idx, "default", "default", NULL, tok, 12, &ans, &err) ==
              KVIX_OK);
        CHECK_U64(ans.query_blocks, 3);
        CHECK_U64(matched(5, 0), 3);
        CHECK(kvix_index_query_tokens(idx, "default", "default", NULL, tok, 11, &ans, &err) ==
              KVIX_OK);
        CHECK_U64(ans.query_blocks, 2);
        CHECK_U64(matched(5, 0), 2);
        /* a LoRA changes every local hash */
        CHECK(kvix_index_query_tokens(idx, "default", "default", "adapter-a", tok, 12, &ans,
                                      &err) == KVIX_OK);
        CHECK_U64(ans.nscores, 0);
        uint32_t tok2[12];
        memcpy(tok2, tok, sizeof tok2);
        tok2[5] = 99; /* second block differs */
        CHECK(kvix_index_query_tokens(idx, "default", "default", "", tok2, 12, &ans, &err) ==
              KVIX_OK);
        CHECK_U64(matched(5, 0), 1);
        /* the canonical hash the index computed is the contract's rolling
         * hash: a query by the seq hashes as local hashes matches nothing
         * past block 0, a query by locals matches all */
        query(idx, "default", seq, 3);
        CHECK_U64(matched(5, 0), 1);
        query(idx, "default", local, 3);
        CHECK_U64(matched(5, 0), 3);
        CHECK(walk(idx) == 0);
        CHECK_U64(nvisits, 1);
        CHECK_U64(visits[0].n, 3);
        for (int i = 0; i < 3 && i < (int)visits[0].n; i++) {
            CHECK_U64(visits[0].b[i].position, i);
            CHECK_U64(visits[0].b[i].parent, i ? local[i - 1] ^ 0xabc : 0);
            CHECK_U64(visits[0].b[i].canon, seq[i]);
            CHECK_U64(visits[0].b[i].parent_canon, i ? seq[i - 1] : 0);
            CHECK_U64(visits[0].b[i].engine, local[i] ^ 0xabc);
        }
    }
}

TEST(unknown_parent_rejects_the_whole_event)
{
    FOR_BACKENDS(idx, 0) {
        kvix_apply_result r;
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, L, 2, 0, NULL) == KVIX_OK);
        uint64_t bad = 999;
        CHECK(store(idx, "default", 1, 0, 0, 4, &bad, L + 2, 3, 0, &r) == KVIX_EPARENT);
        CHECK_U64(r.stored, 0);
        /* a parent held by another worker, or another dp rank, is unknown too */
        uint64_t p = L[1];
        CHECK(store(idx, "default", 2, 0, 0, 4, &p, L + 2, 3, 0, NULL) == KVIX_EPARENT);
        CHECK(store(idx, "default", 1, 1, 0, 4, &p, L + 2, 3, 0, NULL) == KVIX_EPARENT);
        /* nor does a rejected event on an unknown partition create it */
        CHECK(store(idx, "fresh", 1, 0, 0, 4, &p, L + 2, 3, 0, NULL) == KVIX_EPARENT);
        CHECK_U64(kvix_index_block_size(idx, "fresh", "default"), 0);
        kvix_index_stats st;
        kvix_index_stats_get(idx, &st);
        CHECK_U64(st.blocks, 2);
        CHECK_U64(st.partitions, 1);
        CHECK(store(idx, "default", 1, 0, 0, 4, &p, L + 2, 3, 0, &r) == KVIX_OK);
        CHECK_U64(r.stored, 3);
        query(idx, "default", L, 8);
        CHECK_U64(matched(1, 0), 5);
        /* a parent in the middle of a chain: a branch */
        p = L[0];
        uint64_t other[2] = {1000, 2000};
        CHECK(store(idx, "default", 1, 0, 0, 4, &p, other, 2, 0, NULL) == KVIX_OK);
        uint64_t q[3] = {L[0], 1000, 2000};
        query(idx, "default", q, 3);
        CHECK_U64(matched(1, 0), 3);
        query(idx, "default", L, 8);
        CHECK_U64(matched(1, 0), 5);
    }
}

TEST(repeated_store_is_idempotent)
{
    FOR_BACKENDS(idx, 0) {
        kvix_apply_result r, tot;
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, L, 4, 0, &r) == KVIX_OK);
        CHECK_U64(r.stored, 4);
        CHECK_U64(r.duplicate, 0);
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, L, 6, 0, &r) == KVIX_OK);
        CHECK_U64(r.stored, 2);
        CHECK_U64(r.duplicate, 4);
        kvix_index_stats st;
        kvix_index_stats_get(idx, &st);
        CHECK_U64(st.blocks, 6);
        CHECK_U64(st.unique_blocks, 6);
        kvix_index_totals(idx, &tot);
        CHECK_U64(tot.stored, 6);
        CHECK_U64(tot.duplicate, 4);
        /* one removal undoes the block however often it was stored */
        CHECK(removed(idx, "default", 1, 0, 0, L, 1, &r) == KVIX_OK);
        CHECK_U64(r.removed, 1);
        query(idx, "default", L, 6);
        CHECK_U64(ans.nscores, 0);
    }
}

TEST(removes_count_unknown_hashes_and_keep_children)
{
    FOR_BACKENDS(idx, 0) {
        kvix_apply_result r;
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, L, 6, 0, NULL) == KVIX_OK);
        uint64_t h[4] = {L[5], 12345, L[2], L[5]};
        CHECK(removed(idx, "default", 1, 0, 0, h, 4, &r) == KVIX_OK);
        CHECK_U64(r.removed, 2);
        CHECK_U64(r.unknown, 2); /* 12345, and L[5] the second time */
        /* removing a parent leaves its children at their positions: the
         * prefix stops at the hole, the children are still walked */
        query(idx, "default", L, 6);
        CHECK_U64(matched(1, 0), 2);
        CHECK(walk(idx) == 0);
        CHECK_U64(nvisits, 1);
        CHECK_U64(visits[0].n, 4);
        CHECK_U64(visits[0].b[2].position, 3);
        CHECK_U64(visits[0].b[3].position, 4);
        CHECK_U64(visits[0].b[2].parent, L[2]); /* no longer held */
        /* a child of the orphan can still be stored by its engine hash */
        uint64_t p = L[4];
        CHECK(store(idx, "default", 1, 0, 0, 4, &p, L + 5, 1, 0, &r) == KVIX_OK);
        /* refilling the hole joins the prefix again */
        p = L[1];
        CHECK(store(idx, "default", 1, 0, 0, 4, &p, L + 2, 1, 0, NULL) == KVIX_OK);
        query(idx, "default", L, 8);
        CHECK_U64(matched(1, 0), 6);
        /* hashes of an unknown worker or partition */
        CHECK(removed(idx, "default", 9, 0, 0, h, 4, &r) == KVIX_OK);
        CHECK_U64(r.unknown, 4);
        CHECK(removed(idx, "nope", 1, 0, 0, h, 3, &r) == KVIX_OK);
        CHECK_U64(r.unknown, 3);
    }
}

TEST(cleared_and_worker_removal)
{
    FOR_BACKENDS(idx, 0) {
        kvix_apply_result r;
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, L, 3, 0, NULL) == KVIX_OK);
        CHECK(store(idx, "default", 1, 0, 1, 4, NULL, L, 2, 0, NULL) == KVIX_OK); /* cpu too */
        CHECK(store(idx, "default", 1, 1, 0, 4, NULL, L, 4, 0, NULL) == KVIX_OK);
        CHECK(store(idx, "default", 2, 0, 0, 4, NULL, L, 5, 0, NULL) == KVIX_OK);
        CHECK(store(idx, "other", 1, 0, 0, 4, NULL, L, 5, 0, NULL) == KVIX_OK);
        CHECK(cleared(idx, "default", 1, 0, &r) == KVIX_OK);
        CHECK_U64(r.removed, 3);
        query(idx, "default", L, 8);
        CHECK_U64(ans.nscores, 2);
        CHECK_U64(matched(1, 0), 0);
        CHECK_U64(matched(1, 1), 4);
        CHECK_U64(matched(2, 0), 5);
        CHECK(cleared(idx, "default", 7, 0, &r) == KVIX_OK);
        CHECK_U64(r.removed, 0);
        CHECK(kvix_index_remove_worker(idx, 1, &r, NULL) == KVIX_OK);
        CHECK_U64(r.removed, 9); /* dp 1 here, dp 0 in "other" */
        query(idx, "default", L, 8);
        CHECK_U64(ans.nscores, 1);
        CHECK_U64(matched(2, 0), 5);
        query(idx, "other", L, 8);
        CHECK_U64(ans.nscores, 0);
        CHECK(store(idx, "default", 2, 3, 0, 4, NULL, L, 1, 0, NULL) == KVIX_OK);
        CHECK(kvix_index_remove_worker_dp(idx, 2, 0, &r, NULL) == KVIX_OK);
        CHECK_U64(r.removed, 5);
        query(idx, "default", L, 8);
        CHECK_U64(ans.nscores, 1);
        CHECK_U64(matched(2, 3), 1);
        /* a removed worker may come back */
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, L, 2, 0, NULL) == KVIX_OK);
        query(idx, "default", L, 8);
        CHECK_U64(matched(1, 0), 2);
        kvix_index_stats st;
        kvix_index_stats_get(idx, &st);
        CHECK_U64(st.blocks, 3);
        CHECK_U64(st.workers, 2);
        CHECK_U64(st.unique_blocks, 2);
    }
}

TEST(tiers_per_worker_and_block)
{
    FOR_BACKENDS(idx, 0) {
        kvix_apply_result r;
        CHECK(store(idx, "default", 1, 0, KVIX_MEDIUM_GPU, 4, NULL, L, 4, 0, NULL) == KVIX_OK);
        CHECK(store(idx, "default", 1, 0, KVIX_MEDIUM_CPU, 4, NULL, L, 6, 0, &r) == KVIX_OK);
        CHECK_U64(r.stored, 6);
        CHECK_U64(r.duplicate, 0);
        CHECK(store(idx, "default", 1, 0, KVIX_MEDIUM_CPU, 4, NULL, L, 2, 0, &r) == KVIX_OK);
        CHECK_U64(r.duplicate, 2);
        query(idx, "default", L, 8);
        const kvix_score *s = score_of(1, 0);
        CHECK(s != NULL);
        if (s) {
            CHECK_U64(s->blocks, 6);
            CHECK_U64(s->tier_blocks[KVIX_MEDIUM_GPU], 4);
            CHECK_U64(s->tier_blocks[KVIX_MEDIUM_CPU], 6);
            CHECK_U64(s->tier_blocks[KVIX_MEDIUM_DISK], 0);
        }
        /* removal is per tier: gone from gpu, still on cpu */
        CHECK(removed(idx, "default", 1, 0, KVIX_MEDIUM_GPU, L + 1, 1, &r) == KVIX_OK);
        CHECK_U64(r.removed, 1);
        CHECK(removed(idx, "default", 1, 0, KVIX_MEDIUM_DISK, L + 1, 1, &r) == KVIX_OK);
        CHECK_U64(r.unknown, 1);
        query(idx, "default", L, 8);
        s = score_of(1, 0);
        CHECK(s && s->blocks == 6 && s->tier_blocks[KVIX_MEDIUM_GPU] == 3 &&
              s->tier_blocks[KVIX_MEDIUM_CPU] == 6);
        CHECK(removed(idx, "default", 1, 0, KVIX_MEDIUM_CPU, L + 1, 1, &r) == KVIX_OK);
        query(idx, "default", L, 8);
        s = score_of(1, 0);
        CHECK(s && s->blocks == 1 && s->tier_blocks[KVIX_MEDIUM_GPU] == 1 &&
              s->tier_blocks[KVIX_MEDIUM_CPU] == 1);
        CHECK(walk(idx) == 0);
        CHECK_U64(visits[0].n, 5);
        CHECK_U64(visits[0].b[0].tiers, 3);
        CHECK_U64(visits[0].b[2].tiers, 3);
        CHECK_U64(visits[0].b[3].tiers, 2);
        CHECK_U64(visits[0].b[4].tiers, 2);
    }
}

TEST(chunk_hash_collisions_never_match)
{
    FOR_BACKENDS(idx, 0) {
        /* worker 2 holds B, C under another prefix; worker 3 holds B at 0 */
        uint64_t abc[3] = {1, 2, 3}, xbc[3] = {9, 2, 3}, b[2] = {2, 3}, bbb[3] = {2, 2, 2};
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, abc, 3, 0x10, NULL) == KVIX_OK);
        CHECK(store(idx, "default", 2, 0, 0, 4, NULL, xbc, 3, 0x20, NULL) == KVIX_OK);
        CHECK(store(idx, "default", 3, 0, 0, 4, NULL, b, 2, 0x30, NULL) == KVIX_OK);
        /* the same local three times: three blocks, three engine hashes */
        uint64_t p = 0x42;
        CHECK(store(idx, "default", 4, 0, 0, 4, NULL, bbb, 1, 0x40, NULL) == KVIX_OK);
        CHECK(store(idx, "default", 4, 0, 0, 4, &p, bbb, 1, 0x50, NULL) == KVIX_OK);
        p = 0x52;
        CHECK(store(idx, "default", 4, 0, 0, 4, &p, bbb, 1, 0x60, NULL) == KVIX_OK);
        query(idx, "default", abc, 3);
        CHECK_U64(ans.nscores, 1);
        CHECK_U64(matched(1, 0), 3);
        query(idx, "default", xbc, 3);
        CHECK_U64(ans.nscores, 1);
        CHECK_U64(matched(2, 0), 3);
        query(idx, "default", b, 2);
        CHECK_U64(ans.nscores, 2);
        CHECK_U64(matched(3, 0), 2);
        CHECK_U64(matched(4, 0), 1);
        query(idx, "default", bbb, 3);
        CHECK_U64(ans.nscores, 2);
        CHECK_U64(matched(4, 0), 3);
        CHECK_U64(matched(3, 0), 1);
        kvix_index_stats st;
        kvix_index_stats_get(idx, &st);
        CHECK_U64(st.unique_blocks, 10); /* abc 3, xbc 3, bc 2, bbb 2 (its first is b's) */
    }
}

TEST(engine_hash_aliases_of_one_block)
{
    FOR_BACKENDS(idx, 0) {
        /* two engine hashes (say, two cache salts) for the same content */
        kvix_apply_result r;
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, L, 3, 0x1000, NULL) == KVIX_OK);
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, L, 3, 0x2000, &r) == KVIX_OK);
        CHECK_U64(r.stored, 3);
        kvix_index_stats st;
        kvix_index_stats_get(idx, &st);
        CHECK_U64(st.blocks, 6);
        CHECK_U64(st.unique_blocks, 3);
        uint64_t h = L[1] ^ 0x1000;
        CHECK(removed(idx, "default", 1, 0, 0, &h, 1, NULL) == KVIX_OK);
        query(idx, "default", L, 3);
        CHECK_U64(matched(1, 0), 3); /* still held through the other alias */
        h = L[1] ^ 0x2000;
        CHECK(removed(idx, "default", 1, 0, 0, &h, 1, NULL) == KVIX_OK);
        query(idx, "default", L, 3);
        CHECK_U64(matched(1, 0), 1);
        /* an engine hash stored again elsewhere moves */
        uint64_t one = L[2] ^ 0x2000, par = L[0] ^ 0x2000;
        ev_set(KVIX_EV_STORED, "default", 1, 0, 0);
        ev.bs = 4;
        ev.has_parent = 1;
        ev.parent = par;
        kvix_event_reserve_blocks(&ev, 1, NULL);
        ev.blocks[0].local = L[1];
        ev.blocks[0].seq = one;
        ev.nblocks = 1;
        CHECK(kvix_index_apply(idx, &ev, &r, NULL) == KVIX_OK);
        CHECK_U64(r.stored, 1);
        query(idx, "default", L, 3);
        CHECK_U64(matched(1, 0), 3); /* L[1] at 1 via the moved hash, L[2] at 2 via 0x1000 */
        kvix_index_stats_get(idx, &st);
        CHECK_U64(st.blocks, 4);
    }
}

TEST(answers_are_sorted)
{
    FOR_BACKENDS(idx, 0) {
        struct { uint64_t w; uint32_t dp; size_t n; } s[] = {
            {5, 0, 2}, {3, 1, 4}, {3, 0, 4}, {1, 0, 1}, {9, 2, 4}, {2, 0, 8}, {4, 0, 2}};
        for (size_t i = 0; i < sizeof s / sizeof *s; i++)
            CHECK(store(idx, "default", s[i].w, s[i].dp, 0, 4, NULL, L, s[i].n, s[i].w, NULL) ==
                  KVIX_OK);
        query(idx, "default", L, 8);
        static const struct { uint64_t w; uint32_t dp, b; } want[] = {
            {2, 0, 8}, {3, 0, 4}, {3, 1, 4}, {9, 2, 4}, {4, 0, 2}, {5, 0, 2}, {1, 0, 1}};
        CHECK_U64(ans.nscores, 7);
        for (size_t i = 0; i < 7 && i < ans.nscores; i++) {
            CHECK_U64(ans.scores[i].worker, want[i].w);
            CHECK_U64(ans.scores[i].dp, want[i].dp);
            CHECK_U64(ans.scores[i].blocks, want[i].b);
        }
        query(idx, "default", L, 0);
        CHECK_U64(ans.nscores, 0);
    }
}

/* Hundreds of scores take the long-answer sort: the order must be exactly
 * the contract's. Each of 100 workers holds three dp ranks, registered in a
 * scrambled worker order and descending dp, so every key field decides some
 * pair. The expected order is built independently: for each match length
 * from 8 down to 1, workers then dp ranks ascending. */
static uint32_t many_len(uint64_t w, uint32_t dp)
{
    return (uint32_t)((w * 31 + (dp == 2)) % 8) + 1; /* dp 0 and 1 tie */
}

/* Worker ids of partition "far" differ in their top byte too, so the sort
 * needs a pass on every byte of the worker id. */
static uint64_t many_id(const char *model, uint64_t w)
{
    return strcmp(model, "far") ? w : (w - 1000) << 56 | w;
}

TEST(many_scores_are_sorted)
{
    FOR_BACKENDS(idx, 0) {
        static const char *const models[] = {"default", "far"};
        for (int m = 0; m < 2; m++) {
            const char *model = models[m];
            for (uint64_t k = 0; k < 300; k++) {
                uint64_t w = (k * 7919) % 100 + 1000;
                uint32_t dp = 2 - (uint32_t)(k / 100);
                CHECK(store(idx, model, many_id(model, w), dp, 0, 4, NULL, L, many_len(w, dp),
                            w * 3 + dp, NULL) == KVIX_OK);
            }
            query(idx, model, L, 8);
            CHECK_U64(ans.nscores, 300);
            size_t i = 0;
            for (uint32_t b = 8; b >= 1; b--)
                for (uint64_t w = 1000; w < 1100; w++)
                    for (uint32_t dp = 0; dp < 3; dp++) {
                        if (many_len(w, dp) != b)
                            continue;
                        if (i < ans.nscores) {
                            CHECK_U64(ans.scores[i].worker, many_id(model, w));
                            CHECK_U64(ans.scores[i].dp, dp);
                            CHECK_U64(ans.scores[i].blocks, b);
                        }
                        i++;
                    }
            CHECK_U64(i, 300);
        }
    }
}

/* More match lengths than the answer's runs sort takes (32): 48 lengths,
 * 3 (worker, dp) each, stored in an order unlike the answer's. */
TEST(many_lengths_are_sorted)
{
    uint64_t chain[48];
    for (unsigned i = 0; i < 48; i++)
        chain[i] = 1000 + i;
    FOR_BACKENDS(idx, 0) {
        for (uint64_t k = 0; k < 144; k++) {
            uint64_t w = (k * 37) % 144;
            CHECK(store(idx, "default", 500 - w / 3, (uint32_t)(w % 3), 0, 4, NULL, chain,
                        48 - w / 3, w, NULL) == KVIX_OK);
        }
        query(idx, "default", chain, 48);
        CHECK_U64(ans.nscores, 144);
        for (size_t i = 0; i < ans.nscores && i < 144; i++) {
            /* blocks 48 first: worker 500 (dp 0, 1, 2), then 47: worker 499... */
            CHECK_U64(ans.scores[i].blocks, 48 - i / 3);
            CHECK_U64(ans.scores[i].worker, 500 - i / 3);
            CHECK_U64(ans.scores[i].dp, i % 3);
        }
    }
}

/* Long runs of one length in each key shape the answer assembly treats
 * apart: worker ids differing in the low byte only (scores placed by one
 * count), in two bytes, far apart, and with dp differing too; each against
 * a brute-force sort. */
static int exp_cmp(const void *a, const void *b)
{
    const kvix_score *x = a, *y = b;
    if (x->blocks != y->blocks)
        return x->blocks > y->blocks ? -1 : 1;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return x->dp < y->dp ? -1 : x->dp > y->dp;
}

TEST(long_runs_in_every_key_shape)
{
    static const struct {
        uint64_t base, step;
        unsigned nw, ndp;
    } shape[] = {{0x1200, 1, 200, 1}, {0, 1, 300, 1}, {7, 1000, 150, 1}, {0x1200, 1, 100, 3}};
    uint64_t chain[3] = {2001, 2002, 2003};
    static kvix_score want[300];
    for (unsigned sh = 0; sh < sizeof shape / sizeof shape[0]; sh++) {
        FOR_BACKENDS(idx, 0) {
            size_t n = 0;
            for (unsigned k = 0; k < shape[sh].nw; k++) {
                uint64_t w = shape[sh].base + (uint64_t)((k * 7) % shape[sh].nw) * shape[sh].step;
                for (uint32_t dp = 0; dp < shape[sh].ndp; dp++) {
                    uint32_t len = 1 + (uint32_t)((k + dp) % 3);
                    CHECK(store(idx, "default", w, dp, 0, 4, NULL, chain, len, 0, NULL) ==
                          KVIX_OK);
                    want[n++] = (kvix_score){.worker = w, .dp = dp, .blocks = len};
                }
            }
            /* a (worker, dp) gone before the query leaves every run */
            kvix_err err;
            CHECK(kvix_index_remove_worker(idx, shape[sh].base, NULL, &err) == KVIX_OK);
            size_t m = 0;
            for (size_t i = 0; i < n; i++)
                if (want[i].worker != shape[sh].base)
                    want[m++] = want[i];
            qsort(want, m, sizeof *want, exp_cmp);
            query(idx, "default", chain, 3);
            CHECK_U64(ans.nscores, m);
            for (size_t i = 0; i < ans.nscores && i < m; i++) {
                CHECK_U64(ans.scores[i].worker, want[i].worker);
                CHECK_U64(ans.scores[i].dp, want[i].dp);
                CHECK_U64(ans.scores[i].blocks, want[i].blocks);
                CHECK_U64(ans.scores[i].tier_blocks[KVIX_MEDIUM_GPU], want[i].blocks);
                CHECK_U64(ans.scores[i].held, want[i].blocks);
            }
        }
    }
}

TEST(foreach_order_and_eids)
{
    FOR_BACKENDS(idx, 0) {
        kvix_err err;
        uint64_t x[2] = {5, 6};
        CHECK(store(idx, "b", 2, 0, 0, 4, NULL, L, 2, 0, NULL) == KVIX_OK);
        CHECK(store(idx, "b", 1, 1, 0, 4, NULL, L, 1, 0, NULL) == KVIX_OK);
        CHECK(store(idx, "b", 1, 0, 0, 4, NULL, x, 2, 0, NULL) == KVIX_OK);
        CHECK(store(idx, "b", 1, 0, 0, 4, NULL, L, 2, 0, NULL) == KVIX_OK);
        CHECK(store(idx, "a", 7, 0, 0, 2, NULL, L, 1, 0, NULL) == KVIX_OK);
        /* eid recorded by the event that carries it */
        ev_set(KVIX_EV_CLEARED, "a", 7, 0, 0);
        ev.has_eid = 1;
        ev.eid = 41;
        CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
        CHECK(kvix_index_set_eid(idx, "b", "default", 4, 2, 0, 99, &err) == KVIX_OK);
        CHECK(kvix_index_set_eid(idx, "b", "default", 8, 2, 0, 99, &err) == KVIX_EBLOCKSIZE);
        CHECK(kvix_index_set_eid(idx, "c", "default", 3, 5, 0, 7, &err) == KVIX_OK);
        /* an empty partition: created, its only worker dropped; it stays
         * in the index but is not walked (so not saved: a restart does not
         * keep what holds nothing) */
        CHECK(store(idx, "d", 4, 0, 0, 4, NULL, L, 1, 0, NULL) == KVIX_OK);
        CHECK(kvix_index_remove_worker(idx, 4, NULL, &err) == KVIX_OK);
        CHECK(kvix_index_block_size(idx, "d", "default") == 4);
        CHECK(walk(idx) == 0);
        CHECK_U64(nvisits, 5);
        if (nvisits != 5)
            continue;
        CHECK_STR(visits[0].model, "a");
        CHECK_U64(visits[0].worker, 7);
        CHECK_U64(visits[0].has_eid, 1);
        CHECK_U64(visits[0].eid, 41);
        CHECK_U64(visits[0].n, 0);
        CHECK_U64(visits[0].bs, 2);
        CHECK_STR(visits[1].model, "b");
        CHECK_U64(visits[1].worker, 1);
        CHECK_U64(visits[1].dp, 0);
        CHECK_U64(visits[1].has_eid, 0);
        CHECK_U64(visits[1].n, 4);
        /* by position, then engine hash: (0, 5) (0, 11) (1, 6) (1, 22) */
        CHECK_U64(visits[1].b[0].engine, 5);
        CHECK_U64(visits[1].b[1].engine, 11);
        CHECK_U64(visits[1].b[2].engine, 6);
        CHECK_U64(visits[1].b[3].engine, 22);
        CHECK_U64(visits[1].b[3].position, 1);
        CHECK_U64(visits[1].b[3].parent, 11);
        CHECK_U64(visits[2].worker, 1);
        CHECK_U64(visits[2].dp, 1);
        CHECK_U64(visits[3].worker, 2);
        CHECK_U64(visits[3].eid, 99);
        CHECK_STR(visits[4].model, "c");
        CHECK_U64(visits[4].bs, 3);
        CHECK_U64(visits[4].worker, 5);
        CHECK_U64(visits[4].eid, 7);
        /* a visitor's non-zero return stops the walk and is returned */
        nvisits = 31;
        CHECK_U64(kvix_index_foreach(idx, collect, NULL), 7);
        /* worker removal forgets the eid too */
        CHECK(kvix_index_remove_worker(idx, 2, NULL, &err) == KVIX_OK);
        CHECK(walk(idx) == 0);
        CHECK_U64(nvisits, 4);
    }
}

/* Everything foreach shows, loaded into a fresh index, walks the same. */
static visit saved[32];
static int nsaved;

static int same_visits(const visit *a, const visit *b, int n)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(a[i].model, b[i].model) || strcmp(a[i].tenant, b[i].tenant) ||
            a[i].bs != b[i].bs || a[i].worker != b[i].worker || a[i].dp != b[i].dp ||
            a[i].has_eid != b[i].has_eid || a[i].eid != b[i].eid || a[i].n != b[i].n)
            return 0;
        for (size_t j = 0; j < a[i].n && j < 16; j++) {
            const kvix_block_info *x = &a[i].b[j], *y = &b[i].b[j];
            if (x->position != y->position || x->local != y->local || x->engine != y->engine ||
                x->parent != y->parent || x->tiers != y->tiers || x->canon != y->canon ||
                x->parent_canon != y->parent_canon)
                return 0;
        }
    }
    return 1;
}

TEST(load_restores_what_foreach_shows)
{
    FOR_BACKENDS(idx, 0) {
        kvix_err err;
        uint64_t p = L[1];
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, L, 6, 0, NULL) == KVIX_OK);
        CHECK(store(idx, "default", 1, 0, 1, 4, NULL, L, 3, 0, NULL) == KVIX_OK);
        CHECK(store(idx, "default", 1, 0, 2, 4, &p, L + 5, 3, 0x77, NULL) == KVIX_OK);
        CHECK(store(idx, "m", 2, 3, 2, 8, NULL, L + 4, 2, 0, NULL) == KVIX_OK);
        CHECK(kvix_index_set_eid(idx, "m", "default", 8, 2, 3, 5, &err) == KVIX_OK);
        /* an orphan: its parent removed, it stays */
        CHECK(store(idx, "o", 1, 0, 0, 4, NULL, L, 4, 0, NULL) == KVIX_OK);
        CHECK(removed(idx, "o", 1, 0, 0, L + 1, 1, NULL) == KVIX_OK);
        CHECK(walk(idx) == 0);
        memcpy(saved, visits, sizeof saved);
        nsaved = nvisits;
        kvix_index *two = mk(backends[bi_], 0);
        for (int i = 0; i < nsaved; i++) {
            visit *v = &saved[i];
            CHECK(kvix_index_load(two, v->model, v->tenant, v->bs, v->worker, v->dp, v->b, v->n,
                                  &err) == KVIX_OK);
            if (v->has_eid)
                CHECK(kvix_index_set_eid(two, v->model, v->tenant, v->bs, v->worker, v->dp,
                                         v->eid, &err) == KVIX_OK);
        }
        CHECK(walk(two) == 0);
        CHECK_U64(nvisits, nsaved);
        CHECK(same_visits(visits, saved, nsaved));
        query(two, "default", L, 6);
        const kvix_score *s = score_of(1, 0);
        CHECK(s && s->blocks == 6 && s->tier_blocks[0] == 6 && s->tier_blocks[1] == 3);
        uint64_t q[5] = {L[0], L[1], L[5], L[6], L[7]};
        query(two, "default", q, 5);
        s = score_of(1, 0);
        CHECK(s && s->blocks == 5 && s->tier_blocks[2] == 3 && s->tier_blocks[0] == 2);
        query(two, "o", L, 4);
        CHECK_U64(matched(1, 0), 1);
        uint64_t p2 = L[0];
        CHECK(store(two, "o", 1, 0, 0, 4, &p2, L + 1, 1, 0, NULL) == KVIX_OK);
        query(two, "o", L, 4);
        CHECK_U64(matched(1, 0), 4); /* the orphans were restored in place */
        /* inconsistent blocks: a canonical hash that does not follow, no
         * tier; a parent hash held elsewhere is not one (moves leave that) */
        kvix_block_info bad[2];
        memcpy(bad, saved[0].b, sizeof bad);
        bad[1].canon ^= 1;
        CHECK(kvix_index_load(two, "x", "default", 4, 1, 0, bad, 2, &err) == KVIX_ECORRUPT);
        bad[1].canon ^= 1;
        bad[1].tiers = 0;
        CHECK(kvix_index_load(two, "x", "default", 4, 1, 0, bad, 2, &err) == KVIX_ECORRUPT);
        bad[1].tiers = 1;
        CHECK(kvix_index_load(two, "x", "default", 4, 1, 0, bad, 2, &err) == KVIX_OK);
        bad[1].position = 2;
        bad[1].engine ^= 0x5555;
        CHECK(kvix_index_load(two, "x", "default", 4, 1, 0, bad + 1, 1, &err) == KVIX_OK);
        kvix_index_free(two);
    }
}

static uint64_t rejected[8];
static int nrejected;

static pthread_mutex_t reject_mu = PTHREAD_MUTEX_INITIALIZER;

/* Called from writer threads and from the submitting thread alike. */
static void on_reject(void *ctx, uint64_t tag, const kvix_err *err)
{
    (void)ctx;
    pthread_mutex_lock(&reject_mu);
    if (nrejected < 8)
        rejected[nrejected++] = tag * 100 + (uint64_t)-err->code;
    pthread_mutex_unlock(&reject_mu);
}

TEST(submit_inline_and_pooled)
{
    for (unsigned threads = 0; threads <= 3; threads += 3) {
        kvix_index_opts o;
        kvix_index_opts_init(&o);
        o.backend = KVIX_BACKEND_REFERENCE;
        o.threads = threads;
        o.on_reject = on_reject;
        kvix_index *idx = NULL;
        CHECK(kvix_index_new(&idx, &o, NULL) == KVIX_OK);
        nrejected = 0;
        kvix_err err;
        for (uint64_t w = 0; w < 20; w++) {
            ev_set(KVIX_EV_STORED, "default", w, 0, 0);
            ev.bs = 4;
            kvix_event_reserve_blocks(&ev, 8, NULL);
            for (size_t i = 0; i < 8; i++) {
                ev.blocks[i].local = L[i];
                ev.blocks[i].seq = L[i] + w;
            }
            ev.nblocks = 1 + w % 8;
            ev.has_eid = 1;
            ev.eid = w;
            CHECK(kvix_index_submit(idx, &ev, w, &err) == KVIX_OK);
        }
        ev_set(KVIX_EV_STORED, "default", 3, 0, 0);
        ev.bs = 4;
        ev.has_parent = 1;
        ev.parent = 12345;
        int rc = kvix_index_submit(idx, &ev, 77, &err);
        CHECK(threads ? rc == KVIX_OK : rc == KVIX_EPARENT);
        ev_set(KVIX_EV_QUERY, "default", 3, 0, 0);
        CHECK(kvix_index_submit(idx, &ev, 78, &err) == KVIX_EINVAL);
        kvix_index_sync(idx);
        CHECK_U64(nrejected, 2);
        CHECK(nrejected == 2 && ((rejected[0] == 7708 && rejected[1] == 7801) ||
                                 (rejected[0] == 7801 && rejected[1] == 7708)));
        query(idx, "default", L, 8);
        CHECK_U64(ans.nscores, 20);
        for (uint64_t w = 0; w < 20; w++)
            CHECK_U64(matched(w, 0), 1 + w % 8);
        kvix_apply_result tot;
        kvix_index_totals(idx, &tot);
        CHECK_U64(tot.stored, 20 + 2 * (0 + 1 + 2 + 3 + 4 + 5 + 6 + 7) + (0 + 1 + 2 + 3));
        /* a big event with its forensic tokens, through the queue */
        ev_set(KVIX_EV_STORED, "big", 1, 0, 0);
        ev.bs = 2;
        kvix_event_reserve_blocks(&ev, 5000, NULL);
        kvix_event_reserve_tokens(&ev, 10000, NULL);
        uint64_t *loc = malloc(5000 * sizeof *loc);
        for (size_t i = 0; i < 5000; i++) {
            ev.blocks[i].local = loc[i] = i * 7 + 1;
            ev.blocks[i].seq = i;
            ev.tokens[2 * i] = ev.tokens[2 * i + 1] = (uint32_t)i;
        }
        ev.nblocks = 5000;
        ev.has_tokens = 1;
        ev.ntokens = 10000;
        CHECK(kvix_index_submit(idx, &ev, 1, &err) == KVIX_OK);
        kvix_index_sync(idx);
        CHECK(kvix_index_query(idx, "big", "default", loc, 5000, &ans, &err) == KVIX_OK);
        CHECK_U64(matched(1, 0), 5000);
        free(loc);
        kvix_index_free(idx);
    }
}

TEST(backend_names)
{
    kvix_backend b;
    for (int i = 0; i < NBACKENDS; i++) {
        CHECK(kvix_backend_parse(backends[i], &b) == KVIX_OK);
        CHECK_STR(kvix_backend_name(b), backends[i]);
    }
    CHECK(kvix_backend_parse("trie", &b) == KVIX_EINVAL);
    CHECK(kvix_backend_parse(NULL, &b) == KVIX_EINVAL);
    CHECK_STR(kvix_backend_name((kvix_backend)42), "?");
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    CHECK(o.backend == KVIX_BACKEND_POSITIONAL);
    CHECK(o.binsearch == 1);
    kvix_index_free(NULL);
    kvix_answer_release(&ans);
    kvix_event_release(&ev);
}

/* Memory per stored (worker, block), front end and backend, on a realistic
 * shape: 16 workers, prompts of 32 blocks sharing 8-block system prefixes. */
TEST(memory_per_stored_block)
{
    FOR_BACKENDS(idx, 0) {
        size_t nprompts = (size_t)(2000 * th_scale());
        uint64_t loc[32];
        for (size_t p = 0; p < nprompts; p++) {
            uint64_t w = p % 16;
            for (size_t i = 0; i < 32; i++)
                loc[i] = i < 8 ? (p % 5) * 1000 + i : p * 100 + i;
            CHECK(store(idx, "default", w, 0, 0, 16, NULL, loc, 32, w << 56, NULL) == KVIX_OK);
        }
        kvix_index_stats st;
        kvix_index_stats_get(idx, &st);
        double fe = (double)(st.bytes - st.backend_bytes) / (double)st.blocks;
        double be = (double)st.backend_bytes / (double)st.blocks;
        printf("# %s: %zu stored (worker, block), %zu unique: front end %.1f B, backend %.1f B "
               "per stored block (%.1f B per unique)\n",
               backends[bi_], st.blocks, st.unique_blocks, fe, be,
               (double)st.backend_bytes / (double)st.unique_blocks);
        CHECK(st.blocks > 0 && fe < 256 && be < 1024);
    }
}

/* A (worker, dp) that keeps its state (an eid) while all its blocks go and
 * come back: the positional backend may give its whole node slab back in
 * between and number new nodes from a new one, which the blocks map (node
 * numbers, not addresses) must follow; tier bits are set and cleared in place,
 * and the map grows and shrinks through hundreds of entries. */
TEST(blocks_go_and_come_back_under_a_kept_state)
{
    enum { N = 300 };
    uint64_t loc[N], eng[N];
    for (size_t i = 0; i < N; i++)
        loc[i] = 5000 + i;
    FOR_BACKENDS(idx, 0) {
        kvix_err err;
        kvix_apply_result r;
        kvix_index_stats st;
        for (uint64_t round = 1; round <= 2; round++) {
            uint64_t salt = round << 40;
            CHECK(store(idx, "default", 9, 0, KVIX_MEDIUM_GPU, 4, NULL, loc, N, salt, &r) ==
                  KVIX_OK);
            CHECK_U64(r.stored, N);
            CHECK(store(idx, "default", 9, 0, KVIX_MEDIUM_CPU, 4, NULL, loc, 10, salt, &r) ==
                  KVIX_OK);
            CHECK_U64(r.stored, 10);
            CHECK(kvix_index_set_eid(idx, "default", "default", 4, 9, 0, 70 + round, &err) ==
                  KVIX_OK);
            query(idx, "default", loc, N);
            const kvix_score *s = score_of(9, 0);
            CHECK(s && s->blocks == N && s->tier_blocks[KVIX_MEDIUM_CPU] == 10);
            CHECK(walk(idx) == 0);
            CHECK_U64(nvisits, 1);
            CHECK_U64(visits[0].n, N);
            CHECK(visits[0].has_eid && visits[0].eid == 70 + round);
            for (size_t k = 0; k < 16; k++) {
                const kvix_block_info *b = &visits[0].b[k];
                CHECK(b->position < N && b->local == loc[b->position]);
                CHECK_U64(b->engine, loc[b->position] ^ salt);
                CHECK_U64(b->tiers, b->position < 10 ? 3 : 1);
            }
            for (size_t i = 0; i < N; i++)
                eng[i] = loc[i] ^ salt;
            CHECK(removed(idx, "default", 9, 0, KVIX_MEDIUM_CPU, eng, 10, &r) == KVIX_OK);
            CHECK_U64(r.removed, 10);
            query(idx, "default", loc, N);
            s = score_of(9, 0);
            CHECK(s && s->blocks == N && s->tier_blocks[KVIX_MEDIUM_CPU] == 0);
            CHECK(removed(idx, "default", 9, 0, KVIX_MEDIUM_GPU, eng, N, &r) == KVIX_OK);
            CHECK_U64(r.removed, N);
            query(idx, "default", loc, N);
            CHECK_U64(ans.nscores, 0);
            kvix_index_stats_get(idx, &st);
            CHECK_U64(st.blocks, 0);
            CHECK(walk(idx) == 0);
            CHECK(nvisits == 1 && visits[0].n == 0 && visits[0].eid == 70 + round);
        }
    }
}

TEST(ceilings_and_bad_names)
{
    kvix_index *idx = mk("reference", 0);
    kvix_err err;
    /* the deepest position: a block loaded there (its parent not held) can
     * not be extended */
    kvix_block_info deep;
    memset(&deep, 0, sizeof deep);
    deep.position = KVIX_INDEX_DEPTH_MAX - 1;
    deep.local = 5;
    deep.engine = 77;
    deep.parent = 76;
    deep.parent_canon = 123;
    deep.canon = kvix_hash_seq_next(123, 5);
    deep.tiers = 1;
    CHECK(kvix_index_load(idx, "default", "default", 4, 1, 0, &deep, 1, &err) == KVIX_OK);
    uint64_t p = 77;
    CHECK(store(idx, "default", 1, 0, 0, 4, &p, L, 1, 0, NULL) == KVIX_ERANGE);
    deep.position = KVIX_INDEX_DEPTH_MAX;
    CHECK(kvix_index_load(idx, "default", "default", 4, 1, 0, &deep, 1, &err) == KVIX_ECORRUPT);
    /* names must be terminated within the fixed fields */
    ev_set(KVIX_EV_STORED, "default", 1, 0, 0);
    ev.bs = 4;
    memset(ev.model, 'x', sizeof ev.model);
    CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_EINVAL);
    kvix_event q;
    kvix_event_init(&q);
    q.type = KVIX_EV_QUERY;
    memset(q.lora, 'x', sizeof q.lora);
    CHECK(kvix_index_query_event(idx, &q, &ans, &err) == KVIX_EINVAL);
    kvix_event_release(&q);
    CHECK(kvix_index_load(idx, NULL, "default", 4, 1, 0, NULL, 0, &err) == KVIX_EINVAL);
    char longname[KVIX_NAME_MAX + 1];
    memset(longname, 'a', KVIX_NAME_MAX);
    longname[KVIX_NAME_MAX] = '\0';
    CHECK(kvix_index_set_eid(idx, longname, "default", 4, 1, 0, 1, &err) == KVIX_ELIMIT);
    CHECK(kvix_index_set_eid(idx, "z", "default", 0, 1, 0, 1, &err) == KVIX_ERANGE);
    CHECK(kvix_index_set_eid(idx, "z", "default", KVIX_BS_MAX + 1, 1, 0, 1, &err) ==
          KVIX_ERANGE);
    /* a query longer than anything stored, by tokens on an unknown
     * partition, and too long */
    uint64_t big[64] = {5};
    query(idx, "default", big, 64);
    CHECK_U64(ans.nscores, 0);
    uint32_t tok[40] = {0};
    CHECK(kvix_index_query_tokens(idx, "nope", NULL, NULL, tok, 40, &ans, &err) == KVIX_OK);
    CHECK_U64(ans.query_blocks, 0);
    kvix_event_init(&q);
    q.type = KVIX_EV_QUERY;
    memcpy(q.model, "nope", 5);
    q.bs = 8;
    q.has_tokens = 1;
    kvix_event_reserve_tokens(&q, 40, NULL);
    q.ntokens = 40;
    memset(q.tokens, 0, 40 * sizeof *q.tokens);
    CHECK(kvix_index_query_event(idx, &q, &ans, &err) == KVIX_OK);
    CHECK_U64(ans.query_blocks, 5);
    CHECK_U64(ans.bs, 0);
    kvix_event_release(&q);
    CHECK(kvix_index_query(idx, "default", NULL, big, (size_t)KVIX_INDEX_DEPTH_MAX + 1, &ans,
                           &err) == KVIX_ELIMIT);
    kvix_index_free(idx);
}

TEST(partition_ceiling)
{
    kvix_index *idx = mk("reference", 0);
    kvix_err err;
    char name[32];
    int rc = KVIX_OK;
    unsigned i;
    for (i = 0; i <= KVIX_INDEX_PARTITIONS_MAX && rc == KVIX_OK; i++) {
        snprintf(name, sizeof name, "m%u", i);
        rc = kvix_index_set_eid(idx, name, "default", 16, 1, 0, i, &err);
    }
    CHECK(rc == KVIX_ELIMIT);
    CHECK_U64(i, KVIX_INDEX_PARTITIONS_MAX + 1);
    CHECK(kvix_index_set_eid(idx, "m7", "default", 16, 2, 0, 1, &err) == KVIX_OK);
    kvix_index_free(idx);
}

/* Garbage in: random types, media, block sizes, parents, counts, names. The
 * index answers every call with a status, never crashes, and what it holds
 * stays self-consistent (a reload through foreach walks the same). */
static uint64_t g_rng;
static uint64_t grnd(void) { return th_splitmix(&g_rng); }

static int reload_visit(void *ctx, const char *model, const char *tenant, uint32_t bs,
                        uint64_t worker, uint32_t dp, int has_eid, uint64_t eid,
                        const kvix_block_info *b, size_t n)
{
    kvix_index *two = ctx;
    int rc = kvix_index_load(two, model, tenant, bs, worker, dp, b, n, NULL);
    if (!rc && has_eid)
        rc = kvix_index_set_eid(two, model, tenant, bs, worker, dp, eid, NULL);
    return rc ? 1 : 0;
}

static kvix_buf walk_a, walk_b;

static int text_visit(void *ctx, const char *model, const char *tenant, uint32_t bs,
                      uint64_t worker, uint32_t dp, int has_eid, uint64_t eid,
                      const kvix_block_info *b, size_t n)
{
    kvix_buf *out = ctx;
    kvix_buf_printf(out, NULL, "%s %s %u %" PRIu64 " %u %d %" PRIu64 "\n", model, tenant, bs,
                    worker, dp, has_eid, eid);
    for (size_t i = 0; i < n; i++)
        kvix_buf_printf(out, NULL, " %u %" PRIx64 " %" PRIx64 " %" PRIx64 " %x %" PRIx64 "\n",
                        b[i].position, b[i].engine, b[i].local, b[i].parent, b[i].tiers,
                        b[i].canon);
    return 0;
}

TEST(garbage_events_never_corrupt)
{
    static const int ok_codes[] = {KVIX_OK, KVIX_EINVAL, KVIX_ERANGE, KVIX_ELIMIT,
                                   KVIX_EBLOCKSIZE, KVIX_EPARENT};
    FOR_BACKENDS(idx, 0) {
        g_rng = th_seed();
        long n = (long)(30000 * th_scale());
        uint64_t held[64] = {0};
        int bad = 0;
        for (long i = 0; i < n; i++) {
            kvix_event_reset(&ev);
            ev.type = (int)(grnd() % 6);
            ev.worker = grnd() % 4;
            ev.dp = (uint32_t)(grnd() % 3);
            ev.medium = (int)(grnd() % 7) - 1;
            ev.bs = (uint32_t)(grnd() % 5 == 0 ? grnd() : 4 + 4 * (grnd() % 2));
            if (grnd() % 3 == 0)
                memcpy(ev.model, "m2", 3);
            ev.has_parent = grnd() % 2;
            ev.parent = held[grnd() % 64];
            ev.has_eid = grnd() % 2;
            ev.eid = grnd();
            size_t k = grnd() % 8;
            kvix_event_reserve_blocks(&ev, k, NULL);
            kvix_event_reserve_hashes(&ev, k, NULL);
            for (size_t j = 0; j < k; j++) {
                ev.blocks[j].local = grnd() % 3;
                ev.blocks[j].seq = grnd() % 4 ? grnd() % 200 : grnd();
                held[grnd() % 64] = ev.blocks[j].seq;
                ev.hashes[j] = held[grnd() % 64];
            }
            ev.nblocks = ev.nhashes = k;
            int rc = kvix_index_apply(idx, &ev, NULL, NULL);
            int known = 0;
            for (size_t c = 0; c < sizeof ok_codes / sizeof *ok_codes; c++)
                known |= rc == ok_codes[c];
            bad |= !known;
            if (grnd() % 50 == 0)
                kvix_index_remove_worker(idx, grnd() % 4, NULL, NULL);
            if (grnd() % 4 == 0) {
                uint64_t q[6];
                for (int j = 0; j < 6; j++)
                    q[j] = grnd() % 3;
                bad |= kvix_index_query(idx, grnd() % 2 ? "m2" : "default", "default", q,
                                        grnd() % 7, &ans, NULL) != KVIX_OK;
            }
        }
        CHECK(!bad);
        kvix_index *two = mk(backends[bi_], 0);
        CHECK(kvix_index_foreach(idx, reload_visit, two) == 0);
        kvix_buf_init(&walk_a);
        kvix_buf_init(&walk_b);
        CHECK(kvix_index_foreach(idx, text_visit, &walk_a) == 0);
        CHECK(kvix_index_foreach(two, text_visit, &walk_b) == 0);
        CHECK(walk_a.len > 0 && walk_a.len == walk_b.len &&
              memcmp(walk_a.data, walk_b.data, walk_a.len) == 0);
        kvix_index_stats s1, s2;
        kvix_index_stats_get(idx, &s1);
        kvix_index_stats_get(two, &s2);
        CHECK_U64(s1.blocks, s2.blocks);
        CHECK_U64(s1.unique_blocks, s2.unique_blocks);
        CHECK(s1.blocks > 0);
        kvix_buf_release(&walk_a);
        kvix_buf_release(&walk_b);
        kvix_index_free(two);
    }
}

/* A canonical hash is position-free: a local at position 0 can be crafted to
 * equal the rolling hash at position 1. Both blocks are tracked apart. */
/* An engine hash twice in one stored event: the second moves it, and the
 * block it leaves (the next one's parent) is let go before the next block
 * links to it: the slot holds no parent there, so its blocks are orphans. */
TEST(one_engine_hash_twice_in_a_stored_event)
{
    FOR_BACKENDS(idx, 0) {
        const uint64_t e[3] = {0xe0, 0xe0, 0xf0};
        ev_set(KVIX_EV_STORED, "default", 1, 0, KVIX_MEDIUM_GPU);
        ev.bs = 4;
        kvix_event_reserve_blocks(&ev, 3, NULL);
        for (size_t i = 0; i < 3; i++) {
            ev.blocks[i].local = L[i];
            ev.blocks[i].seq = e[i];
        }
        ev.nblocks = 3;
        kvix_apply_result r;
        kvix_err err;
        CHECK(kvix_index_apply(idx, &ev, &r, &err) == KVIX_OK);
        CHECK_U64(r.stored, 3);
        kvix_index_stats st;
        kvix_index_stats_get(idx, &st);
        CHECK_U64(st.blocks, 2);
        CHECK_U64(st.unique_blocks, 2);
        query(idx, "default", L, 3); /* position 0 is not held: no prefix */
        CHECK_U64(matched(1, 0), 0);
        CHECK(walk(idx) == 0 && nvisits == 1 && visits[0].n == 2);
        CHECK(visits[0].b[0].position == 1 && visits[0].b[0].engine == 0xe0 &&
              visits[0].b[0].parent == 0xe0);
        CHECK(visits[0].b[1].position == 2 && visits[0].b[1].engine == 0xf0 &&
              visits[0].b[1].parent == 0xe0 &&
              visits[0].b[1].parent_canon == visits[0].b[0].canon);
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, L, 1, 0xa0 ^ L[0], &r) == KVIX_OK);
        query(idx, "default", L, 3);
        CHECK_U64(matched(1, 0), 3);
        CHECK(removed(idx, "default", 1, 0, 0, e, 1, &r) == KVIX_OK); /* a hole at 1 */
        CHECK_U64(r.removed, 1);
        query(idx, "default", L, 3);
        CHECK_U64(matched(1, 0), 1);
        const uint64_t gone[2] = {0xf0, 0xa0};
        CHECK(removed(idx, "default", 1, 0, 0, gone, 2, &r) == KVIX_OK);
        CHECK_U64(r.removed, 2);
        kvix_index_stats_get(idx, &st);
        CHECK_U64(st.blocks, 0);
        CHECK_U64(st.unique_blocks, 0);
    }
}

TEST(same_canonical_hash_at_two_positions)
{
    FOR_BACKENDS(idx, 0) {
        uint64_t ab[2] = {1, 2};
        uint64_t x[1] = {kvix_hash_seq_next(1, 2)}; /* position 0, canon of (1, 2) at 1 */
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, ab, 2, 0x10, NULL) == KVIX_OK);
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, x, 1, 0x20, NULL) == KVIX_OK);
        CHECK(store(idx, "default", 1, 0, 1, 4, NULL, x, 1, 0x30, NULL) == KVIX_OK);
        query(idx, "default", ab, 2);
        CHECK_U64(matched(1, 0), 2);
        query(idx, "default", x, 1);
        const kvix_score *s = score_of(1, 0);
        CHECK(s && s->blocks == 1 && s->tier_blocks[0] == 1 && s->tier_blocks[1] == 1);
        uint64_t h = 2 ^ 0x10; /* position 1 goes */
        CHECK(removed(idx, "default", 1, 0, 0, &h, 1, NULL) == KVIX_OK);
        query(idx, "default", ab, 2);
        CHECK_U64(matched(1, 0), 1);
        query(idx, "default", x, 1);
        CHECK_U64(matched(1, 0), 1);
        CHECK(store(idx, "default", 1, 0, 0, 4, NULL, ab, 2, 0x40, NULL) == KVIX_OK);
        h = x[0] ^ 0x20; /* position 0's gpu alias goes, cpu stays */
        CHECK(removed(idx, "default", 1, 0, 0, &h, 1, NULL) == KVIX_OK);
        query(idx, "default", x, 1);
        s = score_of(1, 0);
        CHECK(s && s->blocks == 1 && s->tier_blocks[0] == 0 && s->tier_blocks[1] == 1);
        query(idx, "default", ab, 2);
        CHECK_U64(matched(1, 0), 2);
        kvix_index_stats st;
        kvix_index_stats_get(idx, &st);
        CHECK_U64(st.unique_blocks, 3);
        CHECK_U64(st.blocks, 4);
        CHECK(cleared(idx, "default", 1, 0, NULL) == KVIX_OK);
        kvix_index_stats_get(idx, &st);
        CHECK_U64(st.unique_blocks, 0);
        /* at most 255 engine hashes per block and tier */
        kvix_apply_result r;
        int rc = KVIX_OK;
        uint64_t salt;
        for (salt = 1; salt <= 256 && rc == KVIX_OK; salt++)
            rc = store(idx, "default", 2, 0, 0, 4, NULL, ab, 1, salt << 8, &r);
        CHECK(rc == KVIX_ELIMIT);
        CHECK_U64(salt, 257);
        query(idx, "default", ab, 1);
        CHECK_U64(matched(2, 0), 1);
    }
}
