/* Explain: for each cause a prompt misses by, an index that has it, and
 * what kvix_index_explain says of it, on every backend: a block removed a
 * moment ago (when, by which event), a clear, a prompt longer than anything
 * stored, another block where the match stops (at block 0, and after the
 * matched prefix), a LoRA adapter on one side only (confirmed by rehashing
 * with the adapters the partition's stores named), an unknown model or
 * tenant (the closest names), another block size, a worker the partition
 * does not know; the record bounded and accounted; the answer line's
 * explain object. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvix/hash.h"
#include "kvix/index.h"
#include "kvix/stream.h"

static const char *const backends[] = {"positional", "radix", "reference"};

#define BS 4

/* Prompt p's tokens: block b of prompt p is 4 tokens p*1000 + b*10 + i;
 * prompts share their first `shared` blocks with prompt 0. */
static void prompt(uint32_t *t, unsigned p, unsigned nblocks, unsigned shared)
{
    for (unsigned b = 0; b < nblocks; b++)
        for (unsigned i = 0; i < BS; i++)
            t[b * BS + i] = (b < shared ? 0 : p * 1000) + b * 10 + i + 1;
}

static kvix_index *make(const char *be, uint32_t removals)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    CHECK(kvix_backend_parse(be, &o.backend) == KVIX_OK);
    o.removals = removals;
    kvix_index *idx = NULL;
    kvix_err err;
    CHECK(kvix_index_new(&idx, &o, &err) == KVIX_OK);
    return idx;
}

/* worker stores the first n blocks of tokens t (engine hashes worker << 32 |
 * salt << 16 | block); lora: the adapter they were hashed with. */
static void store(kvix_index *idx, uint64_t worker, uint32_t dp, const uint32_t *t, unsigned n,
                  const char *lora, unsigned salt, uint64_t eid)
{
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_event_set_name(ev.model, "m", 1, NULL);
    ev.type = KVIX_EV_STORED;
    ev.worker = worker;
    ev.dp = dp;
    ev.bs = BS;
    ev.has_eid = 1;
    ev.eid = eid;
    if (lora)
        kvix_event_set_name(ev.lora, lora, strlen(lora), NULL);
    uint64_t local[16];
    kvix_hash_blocks(t, n * BS, BS, kvix_hash_lora_seed(lora, lora ? strlen(lora) : 0), local,
                     NULL);
    CHECK(kvix_event_reserve_blocks(&ev, n, NULL) == KVIX_OK);
    for (unsigned b = 0; b < n; b++)
        ev.blocks[b] = (kvix_block){local[b], worker << 32 | (uint64_t)salt << 16 | b};
    ev.nblocks = n;
    kvix_err err;
    CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
    kvix_event_release(&ev);
}

static void drop(kvix_index *idx, uint64_t worker, int type, const uint64_t *hashes, size_t n,
                 uint64_t eid, double ts)
{
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_event_set_name(ev.model, "m", 1, NULL);
    ev.type = type;
    ev.worker = worker;
    ev.has_eid = 1;
    ev.eid = eid;
    ev.has_ts = ts > 0;
    ev.ts = ts;
    CHECK(kvix_event_reserve_hashes(&ev, n ? n : 1, NULL) == KVIX_OK);
    if (n)
        memcpy(ev.hashes, hashes, n * sizeof *hashes);
    ev.nhashes = n;
    kvix_err err;
    CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
    kvix_event_release(&ev);
}

static void query(kvix_event *q, const uint32_t *t, unsigned nblocks)
{
    kvix_event_init(q);
    kvix_event_set_name(q->model, "m", 1, NULL);
    q->type = KVIX_EV_QUERY;
    q->explain = 1;
    CHECK(kvix_event_reserve_tokens(q, nblocks * BS, NULL) == KVIX_OK);
    memcpy(q->tokens, t, nblocks * BS * sizeof *t);
    q->ntokens = nblocks * BS;
    q->has_tokens = 1;
}

static const kvix_explained *find(const kvix_explain *x, uint64_t worker)
{
    for (uint32_t i = 0; i < x->nw; i++)
        if (x->w[i].worker == worker)
            return &x->w[i];
    return NULL;
}

static void explain(kvix_index *idx, const kvix_event *q, kvix_answer *ans, kvix_explain *x)
{
    kvix_err err;
    CHECK(kvix_index_explain(idx, q, ans, x, &err) == KVIX_OK);
}

TEST(each_cause_on_every_backend)
{
    uint32_t t0[8 * BS], t1[8 * BS], t2[8 * BS];
    prompt(t0, 0, 8, 8);
    prompt(t1, 1, 8, 2); /* the same first two blocks, then another prompt */
    prompt(t2, 2, 8, 0); /* nothing in common */
    for (size_t b = 0; b < 3; b++) {
        kvix_index *idx = make(backends[b], 64);
        store(idx, 1, 0, t0, 4, NULL, 0, 1);  /* holds 4 blocks: the longest match */
        store(idx, 2, 0, t0, 3, NULL, 0, 1);  /* then drops block 2 */
        uint64_t h2 = (uint64_t)2 << 32 | 2;
        drop(idx, 2, KVIX_EV_REMOVED, &h2, 1, 7, 1700000000.5);
        store(idx, 3, 0, t1, 3, NULL, 0, 1);  /* diverges after block 1 */
        store(idx, 4, 0, t2, 2, NULL, 0, 1);  /* another block 0 */
        store(idx, 5, 0, t0, 2, NULL, 0, 1);  /* cleared, then holds nothing */
        drop(idx, 5, KVIX_EV_CLEARED, NULL, 0, 9, 0);
        store(idx, 6, 0, t0, 1, NULL, 0, 1);  /* a shorter prefix, nothing after */
        store(idx, 9, 0, t0, 6, NULL, 0, 1);
        uint64_t h9[2] = {(uint64_t)9 << 32 | 4, (uint64_t)9 << 32 | 5};
        drop(idx, 9, KVIX_EV_REMOVED, h9, 2, 3, 0); /* 4 and 5 gone: depth stays 6 */
        kvix_event q;
        query(&q, t0, 8);
        q.has_top = 1;
        q.top = 2;
        uint64_t named[] = {2, 3, 4, 5, 6, 77};
        memcpy(q.xworkers, named, sizeof named);
        q.nxworkers = 6;
        kvix_answer ans;
        kvix_answer_init(&ans);
        kvix_explain *x = malloc(sizeof *x);
        kvix_explain_init(x);
        explain(idx, &q, &ans, x);
        CHECK_U64(ans.nscores, 2);
        CHECK_U64(x->bs, BS);
        CHECK_U64(x->depth, 6);
        const kvix_explained *e = find(x, 1);
        CHECK(e && !e->named && e->blocks == 4 && e->why == KVIX_WHY_ABSENT);
        e = find(x, 9); /* its blocks 4, 5 removed: the latest removal of block 4 */
        CHECK(e && e->blocks == 4 && e->why == KVIX_WHY_REMOVED && e->removal.eid == 3 &&
              e->removal.blocks == 2 && !e->removal.has_ts);
        e = find(x, 2);
        CHECK(e && e->named && e->blocks == 2 && e->why == KVIX_WHY_REMOVED);
        CHECK(e && e->removal.kind == KVIX_EV_REMOVED && e->removal.has_eid &&
              e->removal.eid == 7 && e->removal.has_ts && e->removal.ts == 1700000000.5 &&
              e->removal.blocks == 1 && e->removal.ago >= 0 && e->removal.ago < 600);
        uint64_t want2[8];
        kvix_hash_blocks(t0, 8 * BS, BS, KVIX_HASH_SEED, want2, NULL);
        CHECK(e && e->want == want2[2]);
        e = find(x, 3); /* holds its own block 2 after the shared prefix */
        uint64_t l1[8];
        kvix_hash_blocks(t1, 8 * BS, BS, KVIX_HASH_SEED, l1, NULL);
        CHECK(e && e->blocks == 2 && e->why == KVIX_WHY_DIFFERS && e->held_at == 1 &&
              e->held_after == 1 && e->nheld == 1 && e->held[0].local == l1[2] &&
              e->held[0].engine == ((uint64_t)3 << 32 | 2) && e->held[0].after_prefix &&
              e->held[0].tiers == 1u << KVIX_MEDIUM_GPU);
        CHECK(e && e->causes == (KVIX_CAUSE_TOKENS | KVIX_CAUSE_MULTIMODAL) && !e->likely);
        e = find(x, 4); /* another block 0 */
        uint64_t l2[8];
        kvix_hash_blocks(t2, 8 * BS, BS, KVIX_HASH_SEED, l2, NULL);
        CHECK(e && e->blocks == 0 && e->why == KVIX_WHY_DIFFERS && e->held_at == 1 &&
              e->held[0].local == l2[0] && (e->causes & KVIX_CAUSE_LORA) &&
              (e->causes & KVIX_CAUSE_TOKENS) && !(e->causes & KVIX_CAUSE_BLOCK_SIZE) &&
              !(e->causes & KVIX_CAUSE_SALT));
        e = find(x, 5);
        CHECK(e && e->blocks == 0 && e->why == KVIX_WHY_CLEARED &&
              e->removal.kind == KVIX_EV_CLEARED && e->removal.eid == 9 &&
              e->removal.blocks == 2);
        e = find(x, 6);
        CHECK(e && e->blocks == 1 && e->why == KVIX_WHY_ABSENT && e->held_at == 0);
        e = find(x, 77);
        CHECK(e && e->named && e->why == KVIX_WHY_UNKNOWN_WORKER);
        /* past the deepest block anyone stored: nobody */
        kvix_event q2;
        query(&q2, t0, 8);
        store(idx, 1, 0, t0, 6, NULL, 0, 2);
        explain(idx, &q2, &ans, x);
        e = find(x, 1);
        CHECK(e && e->blocks == 6 && e->why == KVIX_WHY_NOBODY);
        /* the line */
        kvix_buf out;
        kvix_buf_init(&out);
        kvix_err err;
        CHECK(kvix_answer_explain_to_json(&ans, &q2, x, &out, &err) == KVIX_OK);
        CHECK(strstr(out.data, "\"explain\":{\"bs\":4,\"depth\":6,\"workers\":[{\"worker\":1,"
                               "\"dp\":0,\"why\":\"nobody\",\"blocks\":6,\"want\":\"") != NULL);
        CHECK(out.len > 2 && memcmp(out.data + out.len - 3, "}}\n", 3) == 0);
        kvix_buf_release(&out);
        kvix_event_release(&q2);
        kvix_event_release(&q);
        kvix_answer_release(&ans);
        kvix_explain_release(x);
        free(x);
        kvix_index_free(idx);
    }
}

TEST(a_lora_adapter_on_one_side_only)
{
    uint32_t t0[4 * BS];
    prompt(t0, 0, 4, 4);
    for (size_t b = 0; b < 3; b++) {
        kvix_index *idx = make(backends[b], 64);
        store(idx, 1, 0, t0, 2, "adapter-a", 0, 1); /* the engine ran the adapter */
        store(idx, 2, 0, t0, 2, NULL, 0, 1);        /* this one did not */
        kvix_event q;
        query(&q, t0, 4);
        q.xworkers[0] = 1;
        q.nxworkers = 1;
        kvix_answer ans;
        kvix_answer_init(&ans);
        kvix_explain *x = malloc(sizeof *x);
        kvix_explain_init(x);
        explain(idx, &q, &ans, x);
        const kvix_explained *e = find(x, 1);
        CHECK(e && e->why == KVIX_WHY_DIFFERS && (e->likely & KVIX_CAUSE_LORA) &&
              strcmp(e->lora, "adapter-a") == 0);
        /* a query with the adapter, against the worker without it */
        kvix_event_set_name(q.lora, "adapter-a", 9, NULL);
        q.xworkers[0] = 2;
        explain(idx, &q, &ans, x);
        e = find(x, 2);
        CHECK(e && e->why == KVIX_WHY_DIFFERS && (e->likely & KVIX_CAUSE_LORA) &&
              strcmp(e->lora, "") == 0);
        e = find(x, 1);
        CHECK(e && e->why == KVIX_WHY_NOBODY && e->blocks == 2);
        kvix_event_release(&q);
        kvix_answer_release(&ans);
        kvix_explain_release(x);
        free(x);
        kvix_index_free(idx);
    }
}

TEST(an_unknown_partition_gets_the_closest_names_and_another_block_size_is_said)
{
    uint32_t t0[2 * BS];
    prompt(t0, 0, 2, 2);
    kvix_index *idx = make("positional", 64);
    static const char *const models[] = {"llama-3-8b", "llama-3-70b", "qwen3", "m"};
    for (size_t i = 0; i < 4; i++) {
        kvix_event ev;
        kvix_event_init(&ev);
        kvix_event_set_name(ev.model, models[i], strlen(models[i]), NULL);
        kvix_event_set_name(ev.tenant, i == 3 ? "team-a" : "default", i == 3 ? 6 : 7, NULL);
        ev.type = KVIX_EV_STORED;
        ev.worker = 1;
        ev.bs = BS;
        CHECK(kvix_event_reserve_blocks(&ev, 1, NULL) == KVIX_OK);
        ev.blocks[0] = (kvix_block){1, 1};
        ev.nblocks = 1;
        kvix_err err;
        CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
        kvix_event_release(&ev);
    }
    kvix_event q;
    query(&q, t0, 2);
    kvix_event_set_name(q.model, "llama-3-8B", 10, NULL);
    kvix_answer ans;
    kvix_answer_init(&ans);
    kvix_explain *x = malloc(sizeof *x);
    kvix_explain_init(x);
    explain(idx, &q, &ans, x);
    CHECK(ans.unknown == KVIX_UNKNOWN_MODEL && x->unknown == KVIX_UNKNOWN_MODEL);
    CHECK_U64(x->nclosest, 2); /* qwen3 and m are further than 8 edits */
    CHECK_STR(x->closest[0], "llama-3-8b");
    CHECK_STR(x->closest[1], "llama-3-70b");
    kvix_event_set_name(q.model, "m", 1, NULL);
    kvix_event_set_name(q.tenant, "team_a", 6, NULL);
    explain(idx, &q, &ans, x);
    CHECK(x->unknown == KVIX_UNKNOWN_TENANT && x->nclosest == 1);
    CHECK_STR(x->closest[0], "team-a");
    /* another block size: not an error, said */
    kvix_event_set_name(q.tenant, "team-a", 6, NULL);
    q.bs = 16;
    explain(idx, &q, &ans, x);
    CHECK(!x->unknown && x->query_bs == 16 && x->bs == BS && ans.nscores == 0);
    kvix_buf out;
    kvix_buf_init(&out);
    kvix_err err;
    CHECK(kvix_answer_explain_to_json(&ans, &q, x, &out, &err) == KVIX_OK);
    CHECK_STR(out.data, "{\"blocks\":0,\"scores\":[],\"explain\":{\"why\":\"block_size\",\"bs\":4,"
                        "\"query_bs\":16,\"depth\":1,\"workers\":[]}}\n");
    kvix_buf_release(&out);
    kvix_event_release(&q);
    kvix_answer_release(&ans);
    kvix_explain_release(x);
    free(x);
    kvix_index_free(idx);
}

/* The record keeps the last N blocks a worker dropped, no more; with none,
 * nothing is recorded; its bytes are the index's. */
TEST(the_record_is_bounded_and_accounted)
{
    uint32_t t0[12 * BS];
    prompt(t0, 0, 12, 12);
    for (uint32_t n = 0; n <= 8; n += 4) {
        kvix_index *idx = make("positional", n);
        store(idx, 1, 0, t0, 12, NULL, 0, 1);
        kvix_index_stats st0, st1;
        kvix_index_stats_get(idx, &st0);
        /* leaves first: 11 down to 2 */
        for (uint64_t b = 11; b >= 2; b--) {
            uint64_t h = (uint64_t)1 << 32 | b;
            drop(idx, 1, KVIX_EV_REMOVED, &h, 1, 100 + b, 0);
        }
        kvix_index_stats_get(idx, &st1);
        kvix_event q;
        query(&q, t0, 12);
        q.xworkers[0] = 1;
        q.nxworkers = 1;
        kvix_answer ans;
        kvix_answer_init(&ans);
        kvix_explain *x = malloc(sizeof *x);
        kvix_explain_init(x);
        explain(idx, &q, &ans, x);
        const kvix_explained *e = find(x, 1);
        CHECK(e && e->blocks == 2);
        if (n == 0) {
            CHECK(e && e->why == KVIX_WHY_ABSENT);
        } else {
            /* block 2 went last: in the record, with its event */
            CHECK(e && e->why == KVIX_WHY_REMOVED && e->removal.eid == 102);
            CHECK(st1.bytes >= st0.bytes + n * 16);
        }
        kvix_event_release(&q);
        kvix_answer_release(&ans);
        kvix_explain_release(x);
        free(x);
        kvix_index_free(idx);
    }
    /* the oldest fall out: with 4 entries, block 6's removal (the first of
     * five) is gone, and its place says nothing of it */
    kvix_index *idx = make("positional", 4);
    store(idx, 1, 0, t0, 12, NULL, 0, 1);
    store(idx, 2, 0, t0, 7, NULL, 0, 1);
    static const uint64_t order[] = {6, 11, 10, 9, 8};
    for (size_t i = 0; i < 5; i++) {
        uint64_t h = (uint64_t)1 << 32 | order[i];
        drop(idx, 1, KVIX_EV_REMOVED, &h, 1, 100 + order[i], 0);
    }
    kvix_event q;
    query(&q, t0, 12);
    q.xworkers[0] = 1;
    q.nxworkers = 1;
    kvix_answer ans;
    kvix_answer_init(&ans);
    kvix_explain *x = malloc(sizeof *x);
    kvix_explain_init(x);
    explain(idx, &q, &ans, x);
    const kvix_explained *e = find(x, 1);
    CHECK(e && e->blocks == 6 && e->why == KVIX_WHY_ABSENT); /* worker 2 holds 7: not nobody */
    kvix_event_release(&q);
    kvix_answer_release(&ans);
    kvix_explain_release(x);
    free(x);
    kvix_index_free(idx);
    /* a ceiling on the option */
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    CHECK_U64(o.removals, KVIX_INDEX_REMOVALS);
    o.removals = KVIX_INDEX_REMOVALS_MAX + 1;
    kvix_err err;
    CHECK(kvix_index_new(&idx, &o, &err) == KVIX_ERANGE);
}

/* Nothing scored and nobody named: the partition's first workers, so the
 * answer still shows what they hold at block 0. */
TEST(a_query_nobody_matches_explains_the_first_workers)
{
    uint32_t t0[2 * BS], t2[2 * BS];
    prompt(t0, 0, 2, 2);
    prompt(t2, 2, 2, 0);
    kvix_index *idx = make("radix", 64);
    for (uint64_t w = 10; w > 0; w--)
        store(idx, w, 0, t2, 2, NULL, 0, 1);
    kvix_event q;
    query(&q, t0, 2);
    kvix_answer ans;
    kvix_answer_init(&ans);
    kvix_explain *x = malloc(sizeof *x);
    kvix_explain_init(x);
    explain(idx, &q, &ans, x);
    CHECK_U64(ans.nscores, 0);
    CHECK_U64(x->nw, KVIX_EXPLAIN_BEST);
    for (uint32_t i = 0; i < x->nw; i++)
        CHECK(x->w[i].worker == i + 1 && x->w[i].why == KVIX_WHY_DIFFERS);
    kvix_event_release(&q);
    kvix_answer_release(&ans);
    kvix_explain_release(x);
    free(x);
    kvix_index_free(idx);
}

/* A partition of EAGLE's blocks (windows of bs + 1 tokens): a token query is
 * hashed as they are, so it matches and its explanation's hashes are
 * EAGLE's; a router's plain hashes against it are likely the cause. */
TEST(an_eagle_partition)
{
    uint32_t t0[4 * BS + 1];
    prompt(t0, 0, 4, 4);
    t0[4 * BS] = 99;
    uint64_t el[4], pl[4];
    CHECK_U64(kvix_hash_blocks_eagle(t0, 4 * BS + 1, BS, KVIX_HASH_SEED, el, NULL), 4);
    kvix_hash_blocks(t0, 4 * BS, BS, KVIX_HASH_SEED, pl, NULL);
    for (size_t b = 0; b < 3; b++) {
        kvix_index *idx = make(backends[b], 64);
        kvix_event ev;
        kvix_event_init(&ev);
        kvix_event_set_name(ev.model, "m", 1, NULL);
        ev.type = KVIX_EV_STORED;
        ev.worker = 1;
        ev.bs = BS;
        ev.eagle = 1;
        CHECK(kvix_event_reserve_blocks(&ev, 2, NULL) == KVIX_OK);
        ev.blocks[0] = (kvix_block){el[0], 10};
        ev.blocks[1] = (kvix_block){el[1], 11};
        ev.nblocks = 2;
        kvix_err err;
        CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
        kvix_event_release(&ev);
        CHECK(kvix_index_eagle(idx, "m", NULL) == 1);
        kvix_event q;
        query(&q, t0, 4);
        CHECK(kvix_event_reserve_tokens(&q, 4 * BS + 1, NULL) == KVIX_OK);
        q.tokens[4 * BS] = 99;
        q.ntokens = 4 * BS + 1;
        q.xworkers[0] = 1;
        q.nxworkers = 1;
        kvix_answer ans;
        kvix_answer_init(&ans);
        kvix_explain *x = malloc(sizeof *x);
        kvix_explain_init(x);
        explain(idx, &q, &ans, x);
        const kvix_explained *e = find(x, 1);
        CHECK(x->eagle && e && e->blocks == 2 && e->why == KVIX_WHY_NOBODY && e->want == el[2]);
        /* a router's plain hashes: block 0 differs, EAGLE the likely cause */
        kvix_event qh;
        kvix_event_init(&qh);
        kvix_event_set_name(qh.model, "m", 1, NULL);
        qh.type = KVIX_EV_QUERY;
        CHECK(kvix_event_reserve_hashes(&qh, 4, NULL) == KVIX_OK);
        memcpy(qh.hashes, pl, sizeof pl);
        qh.nhashes = 4;
        qh.xworkers[0] = 1;
        qh.nxworkers = 1;
        explain(idx, &qh, &ans, x);
        e = find(x, 1);
        CHECK(e && e->blocks == 0 && e->why == KVIX_WHY_DIFFERS && e->want == pl[0] &&
              (e->causes & KVIX_CAUSE_EAGLE) && (e->likely & KVIX_CAUSE_EAGLE) &&
              e->held[0].local == el[0]);
        /* a token query is never told EAGLE: it is hashed as the partition */
        kvix_event_release(&q);
        query(&q, t0, 4);
        q.tokens[0] = 12345;
        q.xworkers[0] = 1;
        q.nxworkers = 1;
        explain(idx, &q, &ans, x);
        e = find(x, 1);
        CHECK(e && e->why == KVIX_WHY_DIFFERS && !(e->causes & KVIX_CAUSE_EAGLE));
        kvix_event_release(&qh);
        kvix_event_release(&q);
        kvix_answer_release(&ans);
        kvix_explain_release(x);
        free(x);
        kvix_index_free(idx);
    }
}

/* A partition of EAGLE's blocks (each hashed with the next block's first
 * token) is explained as its queries are hashed: block 0 rehashed with the
 * adapters the partition's stores named spans bs + 1 tokens too, so a LoRA
 * adapter on one side only is still found, and the prompt with the adapter
 * matches whole. */
TEST(an_eagle_partition_is_explained_with_eagle_hashes)
{
    uint32_t t[2 * BS + 1];
    for (uint32_t i = 0; i < 2 * BS + 1; i++)
        t[i] = 700 + i;
    uint64_t local[2];
    CHECK_U64(kvix_hash_blocks_eagle(t, 2 * BS + 1, BS, kvix_hash_lora_seed("adapter-a", 9),
                                     local, NULL),
              2);
    kvix_index *idx = make("positional", 64);
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_event_set_name(ev.model, "m", 1, NULL);
    kvix_event_set_name(ev.lora, "adapter-a", 9, NULL);
    ev.type = KVIX_EV_STORED;
    ev.worker = 1;
    ev.bs = BS;
    ev.eagle = 1;
    CHECK(kvix_event_reserve_blocks(&ev, 2, NULL) == KVIX_OK);
    ev.blocks[0] = (kvix_block){local[0], 11};
    ev.blocks[1] = (kvix_block){local[1], 12};
    ev.nblocks = 2;
    kvix_err err;
    CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
    kvix_event_release(&ev);
    kvix_event q;
    kvix_event_init(&q);
    kvix_event_set_name(q.model, "m", 1, NULL);
    q.type = KVIX_EV_QUERY;
    q.explain = 1;
    CHECK(kvix_event_reserve_tokens(&q, 2 * BS + 1, NULL) == KVIX_OK);
    memcpy(q.tokens, t, sizeof t);
    q.ntokens = 2 * BS + 1;
    q.has_tokens = 1;
    q.xworkers[0] = 1;
    q.nxworkers = 1;
    kvix_answer ans;
    kvix_answer_init(&ans);
    kvix_explain *x = malloc(sizeof *x);
    kvix_explain_init(x);
    explain(idx, &q, &ans, x);
    const kvix_explained *e = find(x, 1);
    CHECK(e && e->why == KVIX_WHY_DIFFERS && (e->likely & KVIX_CAUSE_LORA) &&
          strcmp(e->lora, "adapter-a") == 0);
    kvix_event_set_name(q.lora, "adapter-a", 9, NULL);
    explain(idx, &q, &ans, x);
    CHECK(ans.nscores == 1 && ans.scores[0].blocks == 2);
    e = find(x, 1);
    CHECK(e && e->why == KVIX_WHY_MATCH && e->blocks == 2);
    kvix_event_release(&q);
    kvix_answer_release(&ans);
    kvix_explain_release(x);
    free(x);
    kvix_index_free(idx);
}
