/* Answer order while workers come and go on other threads: queries file
 * their hits by slot ranks that registrations (and queries themselves)
 * rewrite meanwhile (lib/index/index_part.c). Two writers register and remove
 * workers with random 63-bit ids, never the same id twice; two readers
 * query a chain that 200 kept workers hold and check every answer: sorted
 * strictly (blocks descending, then worker, then dp), every kept worker
 * there with its own match length. On every backend; also run under
 * ThreadSanitizer. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvix/index.h"

static const char *const backends[] = {"positional", "radix", "reference"};

#define KEPT 200
static const uint64_t chain[3] = {0xc1, 0xc2, 0xc3};
static uint64_t kept[KEPT];
static uint32_t kept_len[KEPT];

static int store(kvix_index *idx, uint64_t worker, uint32_t dp, uint32_t len)
{
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_event_set_name(ev.model, "m", 1, NULL);
    kvix_event_set_name(ev.tenant, "default", 7, NULL);
    ev.type = KVIX_EV_STORED;
    ev.worker = worker;
    ev.dp = dp;
    ev.bs = 16;
    int rc = kvix_event_reserve_blocks(&ev, len, NULL);
    for (uint32_t i = 0; !rc && i < len; i++) {
        ev.blocks[i].local = chain[i];
        ev.blocks[i].seq = chain[i] ^ 0x77;
    }
    ev.nblocks = len;
    kvix_err err;
    if (!rc)
        rc = kvix_index_apply(idx, &ev, NULL, &err);
    kvix_event_release(&ev);
    return rc;
}

typedef struct arg {
    kvix_index *idx;
    uint64_t seed;
    int errors;
} arg;

/* Workers whose ids have this writer's low bit: the two never share one. */
static void *writer(void *p)
{
    arg *a = p;
    uint64_t rng = a->seed, mine[24];
    unsigned n = 0;
    int rounds = (int)(1000 * th_scale());
    for (int i = 0; i < rounds; i++) {
        if (n == 24 || (n && th_splitmix(&rng) % 3 == 0)) {
            unsigned k = (unsigned)(th_splitmix(&rng) % n);
            kvix_err err;
            a->errors += kvix_index_remove_worker(a->idx, mine[k], NULL, &err) != KVIX_OK;
            mine[k] = mine[--n];
        } else {
            uint64_t w = ((th_splitmix(&rng) >> 2) << 1) | (a->seed & 1);
            w |= UINT64_C(1) << 61; /* never a kept worker's id */
            a->errors += store(a->idx, w, (uint32_t)(i % 2), 1 + (uint32_t)(i % 3)) != KVIX_OK;
            mine[n++] = w;
        }
    }
    return NULL;
}

static void *reader(void *p)
{
    arg *a = p;
    kvix_answer ans;
    kvix_answer_init(&ans);
    int rounds = (int)(1000 * th_scale());
    for (int q = 0; q < rounds; q++) {
        kvix_err err;
        if (kvix_index_query(a->idx, "m", NULL, chain, 3, &ans, &err) != KVIX_OK) {
            a->errors++;
            continue;
        }
        size_t found = 0;
        for (size_t i = 0; i < ans.nscores; i++) {
            const kvix_score *s = &ans.scores[i];
            if (i) {
                const kvix_score *t = &ans.scores[i - 1];
                int ok = t->blocks > s->blocks ||
                         (t->blocks == s->blocks &&
                          (t->worker < s->worker || (t->worker == s->worker && t->dp < s->dp)));
                a->errors += !ok;
            }
            if (s->worker >> 61)
                continue;
            for (size_t k = 0; k < KEPT; k++)
                if (kept[k] == s->worker) {
                    found++;
                    a->errors += s->blocks != kept_len[k] || s->dp != 0;
                }
        }
        a->errors += found != KEPT;
    }
    kvix_answer_release(&ans);
    return NULL;
}

TEST(answers_stay_sorted_while_random_workers_come_and_go)
{
    for (unsigned b = 0; b < sizeof backends / sizeof *backends; b++) {
        kvix_backend be;
        kvix_index_opts o;
        kvix_index *idx;
        kvix_err err;
        CHECK(kvix_backend_parse(backends[b], &be) == KVIX_OK);
        kvix_index_opts_init(&o);
        o.backend = be;
        if (kvix_index_new(&idx, &o, &err) != KVIX_OK)
            continue; /* not built into this library */
        uint64_t rng = th_seed();
        for (size_t k = 0; k < KEPT; k++) {
            kept[k] = th_splitmix(&rng) >> 4; /* below 2^60 */
            kept_len[k] = 1 + (uint32_t)(k % 3);
            CHECK(store(idx, kept[k], 0, kept_len[k]) == KVIX_OK);
        }
        arg a[4] = {{idx, (rng & ~UINT64_C(1)), 0}, {idx, rng | 1, 0}, {idx, 0, 0}, {idx, 0, 0}};
        pthread_t th[4];
        for (int i = 0; i < 4; i++)
            CHECK(pthread_create(&th[i], NULL, i < 2 ? writer : reader, &a[i]) == 0);
        for (int i = 0; i < 4; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < 4; i++)
            CHECK_U64(a[i].errors, 0);
        kvix_index_free(idx);
    }
}
