/* Answer order however workers are named. The front end files a run of
 * hits by its slots' ranks (a dense numbering of the partition's (worker,
 * dp) in answer order, redone as workers come) and sorts apart and merges
 * the slots registered since the last ranking. Here: random 63-bit worker
 * ids (Dynamo's lease ids) and dense ones, coming and going in waves and one
 * by one (slots reused, rankings redone by registrations and by queries),
 * every answer checked against a brute-force sort, on every backend. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvix/index.h"

static const char *const backends[] = {"positional", "radix", "reference"};

typedef struct live {
    uint64_t worker;
    uint32_t dp, len; /* blocks of the chain it holds */
} live;

#define MAXW 1400
static live model[MAXW];
static size_t nlive;
static kvix_score want[MAXW];
static const uint64_t chain[3] = {0xa1, 0xa2, 0xa3};

static int exp_cmp(const void *a, const void *b)
{
    const kvix_score *x = a, *y = b;
    if (x->blocks != y->blocks)
        return x->blocks > y->blocks ? -1 : 1;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return x->dp < y->dp ? -1 : x->dp > y->dp;
}

static void add(kvix_index *idx, uint64_t worker, uint32_t dp, uint32_t len)
{
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_event_set_name(ev.model, "m", 1, NULL);
    kvix_event_set_name(ev.tenant, "default", 7, NULL);
    ev.type = KVIX_EV_STORED;
    ev.worker = worker;
    ev.dp = dp;
    ev.bs = 16;
    CHECK(kvix_event_reserve_blocks(&ev, len, NULL) == KVIX_OK);
    for (uint32_t i = 0; i < len; i++) {
        ev.blocks[i].local = chain[i];
        ev.blocks[i].seq = chain[i] ^ 0x5a5a;
    }
    ev.nblocks = len;
    kvix_err err;
    CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
    kvix_event_release(&ev);
    model[nlive++] = (live){worker, dp, len};
}

static void drop(kvix_index *idx, size_t i)
{
    kvix_err err;
    uint64_t w = model[i].worker;
    CHECK(kvix_index_remove_worker(idx, w, NULL, &err) == KVIX_OK);
    size_t m = 0;
    for (size_t k = 0; k < nlive; k++)
        if (model[k].worker != w)
            model[m++] = model[k];
    nlive = m;
}

static void check_answer(kvix_index *idx, kvix_answer *ans)
{
    kvix_err err;
    CHECK(kvix_index_query(idx, "m", NULL, chain, 3, ans, &err) == KVIX_OK);
    for (size_t i = 0; i < nlive; i++)
        want[i] = (kvix_score){.worker = model[i].worker, .dp = model[i].dp,
                               .blocks = model[i].len};
    qsort(want, nlive, sizeof *want, exp_cmp);
    CHECK_U64(ans->nscores, nlive);
    size_t bad = 0;
    for (size_t i = 0; i < ans->nscores && i < nlive; i++)
        bad += ans->scores[i].worker != want[i].worker || ans->scores[i].dp != want[i].dp ||
               ans->scores[i].blocks != want[i].blocks || ans->scores[i].held != want[i].blocks;
    CHECK_U64(bad, 0);
}

static uint64_t fresh_id(uint64_t *rng, int random_ids, uint64_t *next_dense)
{
    if (!random_ids)
        return (*next_dense)++;
    for (;;) {
        uint64_t w = th_splitmix(rng) >> 1;
        int taken = 0;
        for (size_t k = 0; k < nlive; k++)
            taken |= model[k].worker == w;
        if (!taken)
            return w;
    }
}

static void waves(const char *backend, int random_ids)
{
    kvix_backend b;
    kvix_index_opts o;
    kvix_index *idx;
    kvix_err err;
    CHECK(kvix_backend_parse(backend, &b) == KVIX_OK);
    kvix_index_opts_init(&o);
    o.backend = b;
    if (kvix_index_new(&idx, &o, &err) != KVIX_OK)
        return; /* a backend not built into this library */
    kvix_answer ans;
    kvix_answer_init(&ans);
    uint64_t rng = th_seed() ^ (uint64_t)random_ids, next_dense = 1000;
    nlive = 0;
    for (int round = 0; round < 14; round++) {
        /* a wave of workers (some with two dp), or just one or two */
        size_t n = round % 3 == 2 ? 1 + th_splitmix(&rng) % 2 : 20 + th_splitmix(&rng) % 160;
        for (size_t i = 0; i < n && nlive + 2 < MAXW; i++) {
            uint64_t w = fresh_id(&rng, random_ids, &next_dense);
            uint32_t ndp = th_splitmix(&rng) % 4 == 0 ? 2 : 1;
            for (uint32_t dp = 0; dp < ndp; dp++)
                add(idx, w, dp, 1 + (uint32_t)(th_splitmix(&rng) % 3));
        }
        check_answer(idx, &ans);
        /* some go (their slots come back for later workers) */
        size_t gone = round % 4 == 3 ? nlive / 3 : th_splitmix(&rng) % 4;
        for (size_t i = 0; i < gone && nlive; i++)
            drop(idx, th_splitmix(&rng) % nlive);
        check_answer(idx, &ans);
        /* queries alone (they may rank the last comers themselves) */
        for (int q = 0; q < 40; q++)
            check_answer(idx, &ans);
    }
    CHECK(nlive > 300); /* runs long enough to span several words of ranks */
    kvix_answer_release(&ans);
    kvix_index_free(idx);
}

TEST(random_worker_ids_in_order_as_they_come_and_go)
{
    for (unsigned b = 0; b < sizeof backends / sizeof *backends; b++)
        waves(backends[b], 1);
}

TEST(dense_worker_ids_in_order_as_they_come_and_go)
{
    for (unsigned b = 0; b < sizeof backends / sizeof *backends; b++)
        waves(backends[b], 0);
}
