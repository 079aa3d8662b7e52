/* Top answers: the best k scores of a query, chosen without sorting the
 * rest, must be exactly the first k of the full answer put in rank order
 * (blocks desc, tiers from the fastest, worker, dp), with the others
 * counted as omitted; on every backend, for random fleets whose answers
 * come in few runs and in many (more lengths than the front end files by
 * runs), with blocks held off gpu, and whatever order the workers came in. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvix/index.h"

static const char *const backends[] = {"positional", "radix", "reference"};

#define CHAIN 48
#define MAXW 600

static uint64_t chain[CHAIN];

static void store(kvix_index *idx, uint64_t worker, uint32_t dp, uint32_t len, int medium)
{
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_event_set_name(ev.model, "m", 1, NULL);
    ev.type = KVIX_EV_STORED;
    ev.worker = worker;
    ev.dp = dp;
    ev.bs = 16;
    ev.medium = medium;
    CHECK(kvix_event_reserve_blocks(&ev, len, NULL) == KVIX_OK);
    for (uint32_t i = 0; i < len; i++) {
        ev.blocks[i].local = chain[i];
        ev.blocks[i].seq = chain[i] ^ (worker << 8);
    }
    ev.nblocks = len;
    kvix_err err;
    CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
    kvix_event_release(&ev);
}

static int rank_cmp(const void *a, const void *b)
{
    const kvix_score *x = a, *y = b;
    if (x->blocks != y->blocks)
        return x->blocks > y->blocks ? -1 : 1;
    for (int m = 0; m < KVIX_MEDIUM_COUNT; m++)
        if (x->tier_blocks[m] != y->tier_blocks[m])
            return x->tier_blocks[m] > y->tier_blocks[m] ? -1 : 1;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return x->dp < y->dp ? -1 : x->dp > y->dp;
}

static int same_score(const kvix_score *a, const kvix_score *b)
{
    return a->worker == b->worker && a->dp == b->dp && a->blocks == b->blocks &&
           a->held == b->held && memcmp(a->tier_blocks, b->tier_blocks, sizeof a->tier_blocks) == 0;
}

/* The full answer, re-sorted by rank, against top answers for several k. */
static void check_tops(kvix_index *idx, size_t *checked)
{
    static kvix_score full[MAXW * 2];
    kvix_answer ans;
    kvix_answer_init(&ans);
    kvix_err err;
    CHECK(kvix_index_query(idx, "m", NULL, chain, CHAIN, &ans, &err) == KVIX_OK);
    CHECK_U64(ans.top, 0);
    size_t n = ans.nscores;
    CHECK(n <= MAXW * 2);
    memcpy(full, ans.scores, n * sizeof *full);
    qsort(full, n, sizeof *full, rank_cmp);
    static const size_t ks[] = {1, 2, 3, 4, 7, 16, 33, 100, 1000, 100000};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        kvix_event q;
        kvix_event_init(&q);
        kvix_event_set_name(q.model, "m", 1, NULL);
        q.type = KVIX_EV_QUERY;
        CHECK(kvix_event_reserve_hashes(&q, CHAIN, NULL) == KVIX_OK);
        memcpy(q.hashes, chain, sizeof chain);
        q.nhashes = CHAIN;
        q.has_top = 1;
        q.top = (uint32_t)ks[ki];
        CHECK(kvix_index_query_event(idx, &q, &ans, &err) == KVIX_OK);
        size_t want = ks[ki] < n ? ks[ki] : n;
        CHECK_U64(ans.top, ks[ki]);
        CHECK_U64(ans.nscores, want);
        CHECK_U64(ans.omitted, n - want);
        size_t bad = 0;
        for (size_t i = 0; i < want && i < ans.nscores; i++)
            bad += !same_score(&ans.scores[i], &full[i]);
        CHECK_U64(bad, 0);
        kvix_event_release(&q);
        (*checked)++;
    }
    kvix_answer_release(&ans);
}

/* nw workers (ids random or dense, dp 0 or 1) holding prefixes of the chain
 * of lengths drawn from nlen values; some hold part of it on cpu too. */
static void fleet(const char *be, uint64_t *rng, size_t nw, unsigned nlen, int dense,
                  size_t *checked)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    CHECK(kvix_backend_parse(be, &o.backend) == KVIX_OK);
    kvix_index *idx;
    kvix_err err;
    CHECK(kvix_index_new(&idx, &o, &err) == KVIX_OK);
    for (size_t i = 0; i < nw; i++) {
        uint64_t w = dense ? i : th_splitmix(rng) >> 1;
        uint32_t dp = (uint32_t)(th_splitmix(rng) % 2);
        uint32_t len = 1 + (uint32_t)(th_splitmix(rng) % nlen);
        store(idx, w, dp, len, KVIX_MEDIUM_GPU);
        if (th_splitmix(rng) % 4 == 0)
            store(idx, w, dp, 1 + (uint32_t)(th_splitmix(rng) % len), KVIX_MEDIUM_CPU);
    }
    check_tops(idx, checked);
    kvix_index_free(idx);
}

TEST(top_answers_are_the_first_of_the_full_answer_in_rank_order)
{
    uint64_t rng = th_seed();
    for (size_t i = 0; i < CHAIN; i++)
        chain[i] = th_splitmix(&rng);
    size_t checked = 0;
    for (size_t b = 0; b < 3; b++) {
        static const unsigned lens[] = {1, 3, 12, 40};
        for (size_t l = 0; l < 4; l++) {
            fleet(backends[b], &rng, 40, lens[l], 1, &checked);
            fleet(backends[b], &rng, (size_t)(MAXW * th_scale()) % MAXW + 1, lens[l], 0,
                  &checked);
        }
    }
    CHECK(checked > 0);
}

/* The index's default top, and a query's own overriding it (0: all). */
TEST(the_index_default_top_and_a_query_that_says_otherwise)
{
    uint64_t rng = th_seed() ^ 7;
    for (size_t i = 0; i < CHAIN; i++)
        chain[i] = th_splitmix(&rng);
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.top = 2;
    kvix_index *idx;
    kvix_err err;
    CHECK(kvix_index_new(&idx, &o, &err) == KVIX_OK);
    for (uint64_t w = 1; w <= 5; w++)
        store(idx, w, 0, (uint32_t)w, KVIX_MEDIUM_GPU);
    kvix_answer ans;
    kvix_answer_init(&ans);
    CHECK(kvix_index_query(idx, "m", NULL, chain, 8, &ans, &err) == KVIX_OK);
    CHECK_U64(ans.nscores, 2);
    CHECK_U64(ans.omitted, 3);
    CHECK_U64(ans.scores[0].worker, 5);
    CHECK_U64(ans.scores[1].worker, 4);
    kvix_event q;
    kvix_event_init(&q);
    kvix_event_set_name(q.model, "m", 1, NULL);
    q.type = KVIX_EV_QUERY;
    CHECK(kvix_event_reserve_hashes(&q, 8, NULL) == KVIX_OK);
    memcpy(q.hashes, chain, 8 * sizeof *chain);
    q.nhashes = 8;
    CHECK(kvix_index_query_event(idx, &q, &ans, &err) == KVIX_OK);
    CHECK_U64(ans.nscores, 2); /* no "top": the index's */
    q.has_top = 1;
    q.top = 0;
    CHECK(kvix_index_query_event(idx, &q, &ans, &err) == KVIX_OK);
    CHECK_U64(ans.nscores, 5);
    CHECK_U64(ans.top, 0);
    CHECK_U64(ans.omitted, 0);
    q.top = 1;
    CHECK(kvix_index_query_event(idx, &q, &ans, &err) == KVIX_OK);
    CHECK_U64(ans.nscores, 1);
    CHECK_U64(ans.omitted, 4);
    /* an unknown partition: no scores, nothing omitted */
    kvix_event_set_name(q.model, "x", 1, NULL);
    CHECK(kvix_index_query_event(idx, &q, &ans, &err) == KVIX_OK);
    CHECK_U64(ans.nscores, 0);
    CHECK_U64(ans.omitted, 0);
    CHECK(ans.unknown == KVIX_UNKNOWN_MODEL);
    kvix_event_release(&q);
    kvix_answer_release(&ans);
    kvix_index_free(idx);
}

/* Ties fall the same way whatever order the workers were stored in. */
TEST(ties_fall_the_same_way_whatever_the_order_of_arrival)
{
    uint64_t rng = th_seed() ^ 11;
    for (size_t i = 0; i < CHAIN; i++)
        chain[i] = th_splitmix(&rng);
    kvix_score first[4];
    for (int round = 0; round < 2; round++) {
        kvix_index_opts o;
        kvix_index_opts_init(&o);
        kvix_index *idx;
        kvix_err err;
        CHECK(kvix_index_new(&idx, &o, &err) == KVIX_OK);
        for (uint64_t i = 0; i < 300; i++) {
            uint64_t w = round ? 299 - i : i;
            store(idx, 1000 + w, 0, 3, KVIX_MEDIUM_GPU);
            if (w % 7 == 3)
                store(idx, 1000 + w, 0, 2, KVIX_MEDIUM_CPU);
        }
        kvix_event q;
        kvix_event_init(&q);
        kvix_event_set_name(q.model, "m", 1, NULL);
        q.type = KVIX_EV_QUERY;
        CHECK(kvix_event_reserve_hashes(&q, 3, NULL) == KVIX_OK);
        memcpy(q.hashes, chain, 3 * sizeof *chain);
        q.nhashes = 3;
        q.has_top = 1;
        q.top = 4;
        kvix_answer ans;
        kvix_answer_init(&ans);
        CHECK(kvix_index_query_event(idx, &q, &ans, &err) == KVIX_OK);
        CHECK_U64(ans.nscores, 4);
        /* the cpu holders first (worker 1003, 1010, ...), by worker */
        CHECK_U64(ans.scores[0].worker, 1003);
        CHECK_U64(ans.scores[1].worker, 1010);
        if (round == 0)
            memcpy(first, ans.scores, sizeof first);
        else
            for (int i = 0; i < 4; i++)
                CHECK(same_score(&first[i], &ans.scores[i]));
        kvix_answer_release(&ans);
        kvix_event_release(&q);
        kvix_index_free(idx);
    }
}
