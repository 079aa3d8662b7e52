/* The index's rules for hybrid models' KV cache groups, placeholder stores
 * and EAGLE partitions (kvix/index.h), on every backend built: a prompt
 * scores exactly what the full-attention groups hold. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvix/hash.h"
#include "kvix/index.h"
#include "kvix/snapshot.h"

static const char *const backends[] = {"positional", "radix", "reference"};

static kvix_index *mk(const char *name)
{
    kvix_backend b;
    kvix_index_opts o;
    kvix_index *idx = NULL;
    kvix_err err;
    CHECK(kvix_backend_parse(name, &b) == KVIX_OK);
    kvix_index_opts_init(&o);
    o.backend = b;
    if (kvix_index_new(&idx, &o, &err)) {
        CHECK(strstr(err.msg, "not built") && b != KVIX_BACKEND_REFERENCE);
        return NULL;
    }
    return idx;
}

/* Four blocks: locals 1..4, engine hashes 101..104. */
#define N 4
static const uint64_t L[N] = {11, 12, 13, 14};
static const uint64_t H[N] = {101, 102, 103, 104};

static kvix_event ev;
static kvix_apply_result res;
static kvix_err err;

/* A store of blocks [from, to) under their parents, of group g (-1: no
 * group field) and kind k, in medium m, eid e. */
static int store(kvix_index *idx, uint64_t worker, int g, int k, int m, size_t from, size_t to,
                 uint64_t e)
{
    kvix_event_reset(&ev);
    ev.type = KVIX_EV_STORED;
    ev.worker = worker;
    ev.medium = m;
    ev.bs = 4;
    ev.has_eid = 1;
    ev.eid = e;
    if (g >= 0) {
        ev.has_group = 1;
        ev.group = (uint32_t)g;
        ev.kind = k;
    }
    if (from) {
        ev.has_parent = 1;
        ev.parent = H[from - 1];
    }
    if (g >= 0 && !kvix_kind_full(k)) { /* hashes only, as the decoders give them */
        kvix_event_reserve_hashes(&ev, N, NULL);
        for (size_t i = from; i < to; i++)
            ev.hashes[ev.nhashes++] = H[i];
    } else {
        kvix_event_reserve_blocks(&ev, N, NULL);
        for (size_t i = from; i < to; i++)
            ev.blocks[ev.nblocks++] = (kvix_block){L[i], H[i]};
    }
    return kvix_index_apply(idx, &ev, &res, &err);
}

static int removed(kvix_index *idx, uint64_t worker, int g, int m, size_t i, uint64_t e)
{
    kvix_event_reset(&ev);
    ev.type = KVIX_EV_REMOVED;
    ev.worker = worker;
    ev.medium = m;
    ev.has_eid = 1;
    ev.eid = e;
    if (g >= 0) {
        ev.has_group = 1;
        ev.group = (uint32_t)g;
    }
    kvix_event_reserve_hashes(&ev, 1, NULL);
    ev.hashes[0] = H[i];
    ev.nhashes = 1;
    return kvix_index_apply(idx, &ev, &res, &err);
}

static int placeholder(kvix_index *idx, uint64_t worker, int m, const uint64_t *h, size_t n)
{
    kvix_event_reset(&ev);
    ev.type = KVIX_EV_STORED;
    ev.placeholder = 1;
    ev.worker = worker;
    ev.medium = m;
    kvix_event_reserve_hashes(&ev, n, NULL);
    memcpy(ev.hashes, h, n * sizeof *h);
    ev.nhashes = n;
    return kvix_index_apply(idx, &ev, &res, &err);
}

static kvix_answer ans;

/* Blocks worker matches of the prompt L[0..N). */
static uint32_t score(kvix_index *idx, uint64_t worker)
{
    CHECK(kvix_index_query(idx, "default", "default", L, N, &ans, &err) == KVIX_OK);
    for (size_t i = 0; i < ans.nscores; i++)
        if (ans.scores[i].worker == worker)
            return ans.scores[i].blocks;
    return 0;
}

static uint64_t last_eid(kvix_index *idx, uint64_t worker);

#define SW KVIX_KIND_SLIDING_WINDOW
#define FULL KVIX_KIND_FULL_ATTENTION
#define GPU KVIX_MEDIUM_GPU

TEST(sliding_window_evictions_leave_the_full_group_alone)
{
    for (size_t b = 0; b < 3; b++) {
        kvix_index *idx = mk(backends[b]);
        if (!idx)
            continue;
        CHECK(store(idx, 1, 0, FULL, GPU, 0, N, 1) == KVIX_OK);
        CHECK_U64(res.stored, N);
        CHECK(store(idx, 1, 1, SW, GPU, N - 1, N, 2) == KVIX_OK); /* sparse: the last only */
        CHECK_U64(res.skipped, 1);
        CHECK_U64(res.stored, 0);
        /* the sliding window evicts block 0: the full group still holds it */
        CHECK(removed(idx, 1, 1, GPU, 0, 3) == KVIX_OK);
        CHECK_U64(res.skipped, 1);
        CHECK_U64(res.removed, 0);
        CHECK_U64(score(idx, 1), N);
        CHECK_U64(last_eid(idx, 1), 3); /* skipped events still count as applied */
        /* a group never seen storing is another kind's; group 0 is not */
        CHECK(removed(idx, 1, 5, GPU, 1, 4) == KVIX_OK);
        CHECK_U64(res.skipped, 1);
        CHECK_U64(score(idx, 1), N);
        CHECK(removed(idx, 1, 0, GPU, 3, 5) == KVIX_OK);
        CHECK_U64(res.removed, 1);
        CHECK_U64(score(idx, 1), N - 1);
        /* a cleared worker keeps the kinds it taught: its engine's, not its cache's */
        kvix_event_reset(&ev);
        ev.type = KVIX_EV_CLEARED;
        ev.worker = 1;
        CHECK(kvix_index_apply(idx, &ev, &res, &err) == KVIX_OK);
        CHECK(store(idx, 1, 0, FULL, GPU, 0, N, 6) == KVIX_OK);
        CHECK(removed(idx, 1, 1, GPU, 0, 7) == KVIX_OK);
        CHECK_U64(res.skipped, 1);
        CHECK_U64(score(idx, 1), N);
        kvix_apply_result t;
        kvix_index_totals(idx, &t);
        CHECK_U64(t.skipped, 4);
        kvix_index_free(idx);
    }
}

TEST(mamba_stores_alone_score_nothing)
{
    for (size_t b = 0; b < 3; b++) {
        kvix_index *idx = mk(backends[b]);
        if (!idx)
            continue;
        CHECK(store(idx, 2, 1, KVIX_KIND_MAMBA, GPU, 0, N, 0) == KVIX_OK);
        CHECK_U64(res.skipped, N);
        CHECK_U64(score(idx, 2), 0);
        /* even with blocks (a record written by hand): not indexed */
        kvix_event_reset(&ev);
        ev.type = KVIX_EV_STORED;
        ev.worker = 2;
        ev.bs = 4;
        ev.has_group = 1;
        ev.group = 1;
        kvix_event_reserve_blocks(&ev, N, NULL);
        for (size_t i = 0; i < N; i++)
            ev.blocks[ev.nblocks++] = (kvix_block){L[i], H[i]};
        CHECK(kvix_index_apply(idx, &ev, &res, &err) == KVIX_OK); /* kind learned: mamba */
        CHECK_U64(res.skipped, N);
        CHECK_U64(score(idx, 2), 0);
        kvix_index_stats st;
        kvix_index_stats_get(idx, &st);
        CHECK_U64(st.blocks, 0);
        kvix_index_free(idx);
    }
}

TEST(two_full_groups_hold_a_block_until_both_evict_it)
{
    for (size_t b = 0; b < 3; b++) {
        kvix_index *idx = mk(backends[b]);
        if (!idx)
            continue;
        /* group 0 first alone (no membership), then an MLA group: what
         * group 0 held is group 0's */
        CHECK(store(idx, 3, 0, FULL, GPU, 0, N, 1) == KVIX_OK);
        CHECK(store(idx, 3, 2, KVIX_KIND_MLA_ATTENTION, GPU, 0, 2, 2) == KVIX_OK);
        CHECK_U64(res.duplicate, 2);
        CHECK(removed(idx, 3, 0, GPU, 0, 3) == KVIX_OK); /* group 2 holds it too */
        CHECK_U64(res.kept, 1);
        CHECK_U64(res.removed, 0);
        CHECK_U64(score(idx, 3), N);
        CHECK(removed(idx, 3, 0, GPU, 2, 4) == KVIX_OK); /* group 0's alone */
        CHECK_U64(res.removed, 1);
        CHECK_U64(score(idx, 3), 2);
        CHECK(removed(idx, 3, 2, GPU, 0, 5) == KVIX_OK); /* now no group holds block 0 */
        CHECK_U64(res.removed, 1);
        CHECK_U64(score(idx, 3), 0);
        /* a removal without group fields speaks for every group */
        CHECK(removed(idx, 3, -1, GPU, 1, 6) == KVIX_OK);
        CHECK_U64(res.removed, 1);
        CHECK_U64(res.kept, 0);
        /* a store without group fields is every full group's */
        CHECK(store(idx, 3, -1, 0, GPU, 0, N, 7) == KVIX_OK);
        CHECK(removed(idx, 3, 2, GPU, 0, 8) == KVIX_OK);
        CHECK_U64(res.kept, 1);
        CHECK(removed(idx, 3, 0, GPU, 0, 9) == KVIX_OK);
        CHECK_U64(res.removed, 1);
        /* membership is per tier: group 2's cpu copy is its own */
        CHECK(store(idx, 3, 2, KVIX_KIND_MLA_ATTENTION, KVIX_MEDIUM_CPU, 0, N, 10) == KVIX_OK);
        CHECK(removed(idx, 3, 0, KVIX_MEDIUM_CPU, 0, 11) == KVIX_OK);
        CHECK_U64(res.kept, 1); /* group 0 never held it in cpu: group 2 still does */
        CHECK_U64(res.removed, 0);
        CHECK(removed(idx, 3, 2, KVIX_MEDIUM_CPU, 0, 12) == KVIX_OK);
        CHECK_U64(res.removed, 1);
        kvix_index_free(idx);
    }
}

/* A hybrid model whose first store is the full group's, group 1: group 0,
 * of another kind, said so after; what group 1 holds stays. */
TEST(group_zero_of_another_kind_after_a_full_group)
{
    kvix_index *idx = mk("positional");
    CHECK(store(idx, 4, 1, FULL, GPU, 0, N, 1) == KVIX_OK);
    CHECK(store(idx, 4, 0, SW, GPU, N - 1, N, 1) == KVIX_OK);
    CHECK_U64(res.removed, 0);
    CHECK_U64(res.skipped, 1);
    CHECK(removed(idx, 4, 0, GPU, 0, 2) == KVIX_OK);
    CHECK_U64(res.skipped, 1);
    CHECK_U64(score(idx, 4), N);
    CHECK(removed(idx, 4, 1, GPU, N - 1, 3) == KVIX_OK);
    CHECK_U64(res.removed, 1);
    CHECK_U64(score(idx, 4), N - 1);
    /* a store that names no kind keeps what was said */
    kvix_event_reset(&ev);
    ev.type = KVIX_EV_STORED;
    ev.worker = 4;
    ev.bs = 4;
    ev.has_group = 1;
    kvix_event_reserve_blocks(&ev, 1, NULL);
    ev.blocks[ev.nblocks++] = (kvix_block){L[0], H[0]};
    CHECK(kvix_index_apply(idx, &ev, &res, &err) == KVIX_OK);
    CHECK_U64(res.skipped, 1);
    /* a group that says another kind lets go of its blocks in nothing else */
    CHECK(store(idx, 4, 1, SW, GPU, 0, 1, 4) == KVIX_OK);
    CHECK_U64(res.skipped, 1);
    CHECK_U64(score(idx, 4), N - 1);
    /* a removed worker forgets its kinds */
    CHECK(kvix_index_remove_worker(idx, 4, NULL, &err) == KVIX_OK);
    CHECK(store(idx, 4, 1, KVIX_KIND_NONE, GPU, 0, 1, 5) == KVIX_OK);
    CHECK_U64(res.stored, 1);
    kvix_index_free(idx);
}

TEST(placeholders_add_a_tier_to_what_is_held)
{
    for (size_t b = 0; b < 3; b++) {
        kvix_index *idx = mk(backends[b]);
        if (!idx)
            continue;
        uint64_t h[3] = {H[0], H[1], 999};
        CHECK(placeholder(idx, 5, KVIX_MEDIUM_CPU, h, 3) == KVIX_OK); /* nothing held yet */
        CHECK_U64(res.unknown, 3);
        CHECK(store(idx, 5, -1, 0, GPU, 0, N, 1) == KVIX_OK);
        CHECK(placeholder(idx, 5, KVIX_MEDIUM_CPU, h, 3) == KVIX_OK);
        CHECK_U64(res.stored, 2);
        CHECK_U64(res.unknown, 1);
        CHECK(placeholder(idx, 5, KVIX_MEDIUM_CPU, h, 2) == KVIX_OK);
        CHECK_U64(res.duplicate, 2);
        CHECK_U64(score(idx, 5), N);
        CHECK_U64(ans.scores[0].tier_blocks[KVIX_MEDIUM_CPU], 2);
        /* the gpu copy goes, the cpu copy stays */
        CHECK(removed(idx, 5, -1, GPU, 0, 2) == KVIX_OK);
        CHECK_U64(score(idx, 5), N);
        CHECK_U64(ans.scores[0].tier_blocks[KVIX_MEDIUM_GPU], N - 1);
        kvix_index_free(idx);
    }
}

TEST(eagle_partitions_hash_queries_alike)
{
    kvix_index *idx = mk("positional");
    uint32_t t[13];
    for (uint32_t i = 0; i < 13; i++)
        t[i] = 7 + i;
    uint64_t loc[3];
    CHECK_U64(kvix_hash_blocks_eagle(t, 13, 4, KVIX_HASH_SEED, loc, NULL), 3);
    kvix_event_reset(&ev);
    ev.type = KVIX_EV_STORED;
    ev.worker = 6;
    ev.bs = 4;
    ev.eagle = 1;
    kvix_event_reserve_blocks(&ev, 3, NULL);
    for (size_t i = 0; i < 3; i++)
        ev.blocks[ev.nblocks++] = (kvix_block){loc[i], 500 + i};
    CHECK(kvix_index_apply(idx, &ev, &res, &err) == KVIX_OK);
    CHECK(kvix_index_eagle(idx, "default", "default"));
    /* 13 tokens: 3 blocks of 4 and the token after; 12 tokens make 2 */
    CHECK(kvix_index_query_tokens(idx, "default", "default", NULL, t, 13, &ans, &err) == KVIX_OK);
    CHECK_U64(ans.query_blocks, 3);
    CHECK(ans.nscores == 1 && ans.scores[0].blocks == 3);
    CHECK(kvix_index_query_tokens(idx, "default", "default", NULL, t, 12, &ans, &err) == KVIX_OK);
    CHECK_U64(ans.query_blocks, 2);
    CHECK(ans.nscores == 1 && ans.scores[0].blocks == 2);
    /* a plain store in an EAGLE partition is refused */
    ev.eagle = 0;
    ev.worker = 7;
    CHECK(kvix_index_apply(idx, &ev, &res, &err) == KVIX_EBLOCKSIZE);
    CHECK_STR(err.msg, "partition default/default hashes eagle blocks, this event plain ones");
    CHECK(!kvix_index_eagle(idx, "default", "other"));
    kvix_index_free(idx);
}

static uint64_t eid_seen;

static int eid_fn(void *ctx, const char *model, const char *tenant, uint32_t bs, uint64_t worker,
                  uint32_t dp, int has_eid, uint64_t eid, const kvix_block_info *b, size_t n)
{
    (void)model, (void)tenant, (void)bs, (void)dp, (void)b, (void)n;
    if (worker == *(uint64_t *)ctx && has_eid)
        eid_seen = eid;
    return 0;
}

static uint64_t last_eid(kvix_index *idx, uint64_t worker)
{
    eid_seen = UINT64_MAX;
    kvix_index_foreach(idx, eid_fn, &worker);
    return eid_seen;
}

TEST(release_answer)
{
    kvix_answer_release(&ans);
    kvix_event_release(&ev);
    CHECK(1);
}

/* The common case, one full group (vLLM names it group 0, full_attention,
 * on every event of a model without hybrid layers), is the state of a
 * worker whose events name no group: not a byte more. */
TEST(group_zero_full_costs_nothing)
{
    kvix_index *a = mk("positional"), *b = mk("positional");
    for (uint64_t w = 1; w <= 8; w++) {
        CHECK(store(a, w, 0, FULL, GPU, 0, N, 1) == KVIX_OK);
        CHECK(removed(a, w, 0, GPU, N - 1, 2) == KVIX_OK);
        CHECK(store(b, w, -1, 0, GPU, 0, N, 1) == KVIX_OK);
        CHECK(removed(b, w, -1, GPU, N - 1, 2) == KVIX_OK);
    }
    kvix_index_stats sa, sb;
    kvix_index_stats_get(a, &sa);
    kvix_index_stats_get(b, &sb);
    CHECK_U64(sa.bytes, sb.bytes);
    CHECK_U64(sa.blocks, 8 * (N - 1));
    CHECK_U64(sb.blocks, 8 * (N - 1));
    kvix_index_free(a);
    kvix_index_free(b);
}

/* ---- the state a snapshot keeps (kvix_index_groups_save / _load) ------- */

static int copy_fn(void *ctx, const char *model, const char *tenant, uint32_t bs, uint64_t worker,
                   uint32_t dp, int has_eid, uint64_t eid, const kvix_block_info *b, size_t n)
{
    kvix_index *to = ctx;
    kvix_err e;
    int rc = kvix_index_load(to, model, tenant, bs, worker, dp, b, n, &e);
    if (!rc && has_eid)
        rc = kvix_index_set_eid(to, model, tenant, bs, worker, dp, eid, &e);
    return rc;
}

/* A copy of from, as a snapshot restores it: blocks, then the group state. */
static kvix_index *restored(kvix_index *from, kvix_buf *payload)
{
    kvix_index *to = mk("positional");
    payload->len = 0;
    CHECK(kvix_index_groups_save(from, payload, &err) == KVIX_OK);
    CHECK(kvix_index_foreach(from, copy_fn, to) == KVIX_OK);
    if (payload->len)
        CHECK(kvix_index_groups_load(to, payload->data, payload->len, &err) == KVIX_OK);
    return to;
}

TEST(group_state_saves_and_loads_exactly)
{
    kvix_index *a = mk("positional");
    kvix_buf p1, p2;
    kvix_buf_init(&p1);
    kvix_buf_init(&p2);
    /* none: no payload */
    CHECK(store(a, 1, 0, FULL, GPU, 0, N, 1) == KVIX_OK);
    CHECK(kvix_index_groups_save(a, &p1, &err) == KVIX_OK);
    CHECK_U64(p1.len, 0);
    /* worker 2: group 0 a sliding window, group 1 full; worker 3: two full
     * groups and their membership; an EAGLE partition */
    CHECK(store(a, 2, 1, FULL, GPU, 0, N, 1) == KVIX_OK);
    CHECK(store(a, 2, 0, SW, GPU, N - 1, N, 1) == KVIX_OK);
    CHECK(store(a, 3, 0, FULL, GPU, 0, N, 1) == KVIX_OK);
    CHECK(store(a, 3, 2, KVIX_KIND_MLA_ATTENTION, GPU, 0, 2, 2) == KVIX_OK);
    CHECK(store(a, 3, 2, KVIX_KIND_MLA_ATTENTION, KVIX_MEDIUM_CPU, 0, 1, 3) == KVIX_OK);
    kvix_event_reset(&ev);
    ev.type = KVIX_EV_STORED;
    kvix_event_set_name(ev.model, "e", 1, NULL);
    ev.worker = 9;
    ev.bs = 4;
    ev.eagle = 1;
    kvix_event_reserve_blocks(&ev, 1, NULL);
    ev.blocks[ev.nblocks++] = (kvix_block){5, 6};
    CHECK(kvix_index_apply(a, &ev, &res, &err) == KVIX_OK);
    kvix_index *b = restored(a, &p1);
    CHECK(p1.len > 24);
    CHECK(kvix_index_groups_save(b, &p2, &err) == KVIX_OK);
    CHECK(p1.len == p2.len && !memcmp(p1.data, p2.data, p1.len)); /* one state, one payload */
    CHECK(kvix_index_eagle(b, "e", "default"));
    CHECK(!kvix_index_eagle(b, "default", "default"));
    /* the restored index behaves as the first */
    for (int k = 0; k < 2; k++) {
        kvix_index *x = k ? b : a;
        CHECK(removed(x, 2, 0, GPU, 0, 10) == KVIX_OK); /* group 0 a window: skipped */
        CHECK_U64(res.skipped, 1);
        CHECK(removed(x, 3, 0, GPU, 1, 10) == KVIX_OK); /* group 2 holds block 1 too */
        CHECK_U64(res.kept, 1);
        CHECK(removed(x, 3, 0, KVIX_MEDIUM_CPU, 0, 11) == KVIX_OK);
        CHECK_U64(res.kept, 1);
        CHECK_U64(score(x, 2), N);
        CHECK_U64(score(x, 3), N);
        /* a plain store in the EAGLE partition: refused in both */
        kvix_event_reset(&ev);
        ev.type = KVIX_EV_STORED;
        kvix_event_set_name(ev.model, "e", 1, NULL);
        ev.worker = 10;
        ev.bs = 4;
        kvix_event_reserve_blocks(&ev, 1, NULL);
        ev.blocks[ev.nblocks++] = (kvix_block){5, 6};
        CHECK(kvix_index_apply(x, &ev, &res, &err) == KVIX_EBLOCKSIZE);
    }
    /* every cut and some flips of the payload: refused cleanly or loaded;
     * what the check passes loads whatever the index holds */
    CHECK(kvix_index_groups_check(p1.data, p1.len, &err) == KVIX_OK);
    for (size_t cut = 0; cut < p1.len; cut++) {
        CHECK(kvix_index_groups_check(p1.data, cut, &err) == KVIX_ECORRUPT);
        kvix_index *c = mk("positional");
        CHECK(kvix_index_foreach(a, copy_fn, c) == KVIX_OK);
        CHECK(kvix_index_groups_load(c, p1.data, cut, &err) == KVIX_ECORRUPT);
        kvix_index_free(c);
    }
    uint64_t rng = th_seed() | 1;
    for (int round = 0; round < 200; round++) {
        kvix_index *c = mk("positional");
        CHECK(kvix_index_foreach(a, copy_fn, c) == KVIX_OK);
        char *m = malloc(p1.len);
        memcpy(m, p1.data, p1.len);
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        m[rng % p1.len] ^= (char)(1u << (rng >> 40) % 8);
        int checked = kvix_index_groups_check(m, p1.len, &err);
        int rc = kvix_index_groups_load(c, m, p1.len, &err);
        CHECK(rc == checked);
        kvix_index *empty = mk("positional");
        CHECK(kvix_index_groups_load(empty, m, p1.len, &err) == checked);
        kvix_index_free(empty);
        free(m);
        kvix_index_free(c);
    }
    kvix_buf_release(&p1);
    kvix_buf_release(&p2);
    kvix_index_free(a);
    kvix_index_free(b);
}

/* The extension records of type 64 a snapshot file holds. */
static size_t ext_records(const char *path)
{
    kvix_snapshot *s;
    size_t n = 0;
    kvix_snapshot_ext e;
    if (kvix_snapshot_open(&s, path, &err))
        return SIZE_MAX;
    for (size_t i = 0; kvix_snapshot_ext_get(s, i, &e) == KVIX_OK; i++)
        n += e.type == KVIX_SNAPSHOT_EXT_KVGROUPS;
    kvix_snapshot_close(s);
    return n;
}

/* Through a snapshot file: the group state is its extension record 64, and
 * an index without any writes none. */
TEST(snapshot_keeps_the_group_state)
{
    kvix_index *a = mk("positional");
    CHECK(store(a, 1, 0, FULL, GPU, 0, N, 1) == KVIX_OK);
    kvix_snapshot_info info;
    CHECK(kvix_snapshot_save(a, th_path("plain.kvix"), &info, &err) == KVIX_OK);
    CHECK_U64(ext_records(th_path("plain.kvix")), 0);
    CHECK(store(a, 2, 1, FULL, GPU, 0, N, 1) == KVIX_OK);
    CHECK(store(a, 2, 0, SW, GPU, N - 1, N, 2) == KVIX_OK);
    CHECK(store(a, 3, 0, FULL, GPU, 0, N, 1) == KVIX_OK);
    CHECK(store(a, 3, 2, KVIX_KIND_MLA_ATTENTION, GPU, 0, 2, 2) == KVIX_OK);
    CHECK(kvix_snapshot_save(a, th_path("g.kvix"), &info, &err) == KVIX_OK);
    CHECK_U64(ext_records(th_path("g.kvix")), 1);
    kvix_index *b = mk("positional");
    if (!CHECK(kvix_snapshot_load(b, th_path("g.kvix"), NULL, &err) == KVIX_OK))
        printf("#   %s\n", err.msg);
    kvix_buf p1, p2;
    kvix_buf_init(&p1);
    kvix_buf_init(&p2);
    CHECK(kvix_index_groups_save(a, &p1, &err) == KVIX_OK);
    CHECK(kvix_index_groups_save(b, &p2, &err) == KVIX_OK);
    CHECK(p1.len > 0 && p1.len == p2.len && !memcmp(p1.data, p2.data, p1.len));
    CHECK(kvix_snapshot_save(b, th_path("g2.kvix"), &info, &err) == KVIX_OK);
    CHECK(removed(b, 2, 0, GPU, 0, 3) == KVIX_OK); /* group 0 is a window: skipped */
    CHECK_U64(res.skipped, 1);
    CHECK(removed(b, 3, 0, GPU, 0, 3) == KVIX_OK); /* group 2 still holds it */
    CHECK_U64(res.kept, 1);
    CHECK_U64(score(b, 2), N);
    CHECK_U64(score(b, 3), N);
    /* the same state saves to the same bytes */
    FILE *f1 = fopen(th_path("g.kvix"), "rb"), *f2 = fopen(th_path("g2.kvix"), "rb");
    int same = f1 && f2;
    for (int c1, c2; same && ((c1 = fgetc(f1)) != EOF || (c2 = fgetc(f2)) != EOF);) {
        c2 = c1 == EOF ? c2 : fgetc(f2);
        same = c1 == c2;
    }
    CHECK(same);
    if (f1)
        fclose(f1);
    if (f2)
        fclose(f2);
    kvix_buf_release(&p1);
    kvix_buf_release(&p2);
    kvix_index_free(a);
    kvix_index_free(b);
}
