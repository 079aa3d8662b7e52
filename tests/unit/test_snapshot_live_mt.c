/* A snapshot saved while writers apply events at full speed (a live save:
 * kvix_index_foreach_live) is the index at the eids it records: every
 * (worker, dp) it holds equals that worker's events up to its eid, applied
 * alone. _mt: ThreadSanitizer runs it too. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvix/snapshot.h"

#define WORKERS 12
#define THREADS 2

/* One worker's events: what an engine with a prefix cache would publish
 * (stores that extend a held block or start a chain, removals of held
 * blocks, now and then a clear), eids 1, 2, ... */
typedef struct wlog {
    uint64_t worker;
    uint32_t dp;
    kvix_event *ev;
    size_t n;
    size_t applied; /* atomic: events applied so far */
} wlog;

static wlog logs[WORKERS];
static size_t applied_total; /* atomic */
static int saving;           /* atomic: a save is running */
static size_t during_save;   /* atomic: events applied while one was */

static void make_log(wlog *l, uint64_t seed, size_t n)
{
    uint64_t held[4096];
    size_t nh = 0;
    l->ev = calloc(n, sizeof *l->ev);
    l->n = n;
    for (size_t i = 0; i < n; i++) {
        kvix_event *e = &l->ev[i];
        kvix_event_init(e);
        e->worker = l->worker;
        e->dp = l->dp;
        e->bs = 16;
        e->has_eid = 1;
        e->eid = i + 1;
        kvix_event_set_name(e->model, "m", 1, NULL);
        uint64_t r = th_splitmix(&seed) % 100;
        if (r < 2 || nh > 4000) {
            e->type = KVIX_EV_CLEARED;
            nh = 0;
        } else if (r < 35 && nh) {
            e->type = KVIX_EV_REMOVED;
            size_t k = 1 + th_splitmix(&seed) % 4;
            kvix_event_reserve_hashes(e, k, NULL);
            for (size_t j = 0; j < k && nh; j++) {
                size_t at = th_splitmix(&seed) % nh;
                e->hashes[e->nhashes++] = held[at];
                held[at] = held[--nh];
            }
        } else {
            e->type = KVIX_EV_STORED;
            if (nh && th_splitmix(&seed) % 10 < 7) {
                e->has_parent = 1;
                e->parent = held[th_splitmix(&seed) % nh];
            }
            size_t k = 1 + th_splitmix(&seed) % 8;
            kvix_event_reserve_blocks(e, k, NULL);
            for (size_t j = 0; j < k; j++) {
                e->blocks[j].local = th_splitmix(&seed);
                e->blocks[j].seq = th_splitmix(&seed);
                held[nh++] = e->blocks[j].seq;
            }
            e->nblocks = k;
        }
    }
}

typedef struct writer {
    kvix_index *idx;
    int id;
    int rejected;
} writer;

static void *write_main(void *arg)
{
    writer *wr = arg;
    kvix_err err;
    for (size_t i = 0;; i++) {
        int more = 0;
        for (int w = wr->id; w < WORKERS; w += THREADS) {
            wlog *l = &logs[w];
            if (i >= l->n)
                continue;
            more = 1;
            int during = __atomic_load_n(&saving, __ATOMIC_ACQUIRE);
            if (kvix_index_apply(wr->idx, &l->ev[i], NULL, &err) != KVIX_OK)
                wr->rejected++;
            __atomic_store_n(&l->applied, i + 1, __ATOMIC_RELEASE);
            __atomic_fetch_add(&applied_total, 1, __ATOMIC_RELAXED);
            if (during && __atomic_load_n(&saving, __ATOMIC_ACQUIRE))
                __atomic_fetch_add(&during_save, 1, __ATOMIC_RELAXED);
        }
        if (!more)
            return NULL;
    }
}

/* The blocks of worker w's events up to eid, applied alone, and the
 * snapshot's record of it, are equal. */
static int check_group(const kvix_snapshot_group *g)
{
    wlog *l = NULL;
    for (int w = 0; w < WORKERS; w++)
        if (logs[w].worker == g->worker && logs[w].dp == g->dp)
            l = &logs[w];
    if (!CHECK(l != NULL) || !CHECK(g->has_eid) || !CHECK(g->eid >= 1 && g->eid <= l->n))
        return 0;
    kvix_index *one;
    kvix_err err;
    CHECK(kvix_index_new(&one, NULL, &err) == KVIX_OK);
    for (size_t i = 0; i < g->eid; i++)
        kvix_index_apply(one, &l->ev[i], NULL, &err);
    const char *p = th_path("alone.kvix");
    CHECK(kvix_snapshot_save(one, p, NULL, &err) == KVIX_OK);
    kvix_index_free(one);
    kvix_snapshot *s;
    int ok = 0;
    if (CHECK(kvix_snapshot_open(&s, p, &err) == KVIX_OK)) {
        kvix_snapshot_group e;
        ok = kvix_snapshot_next(s, &e, &err) == KVIX_OK && e.worker == g->worker &&
             e.dp == g->dp && e.eid == g->eid && e.n == g->n;
        for (size_t i = 0; ok && i < g->n; i++)
            ok = e.blocks[i].engine == g->blocks[i].engine &&
                 e.blocks[i].position == g->blocks[i].position &&
                 e.blocks[i].canon == g->blocks[i].canon &&
                 e.blocks[i].parent == g->blocks[i].parent &&
                 e.blocks[i].tiers == g->blocks[i].tiers;
        kvix_snapshot_close(s);
    }
    if (!ok)
        printf("#   worker %" PRIu64 " dp %u at eid %" PRIu64 ": not its events' state\n",
               g->worker, g->dp, g->eid);
    return ok;
}

TEST(live_save_is_the_index_at_its_eids)
{
    size_t n = (size_t)(20000 * th_scale());
    if (n < 200)
        n = 200;
    for (int w = 0; w < WORKERS; w++) {
        logs[w] = (wlog){.worker = (uint64_t)(w / 2) * 7 + 1, .dp = (uint32_t)(w % 2)};
        make_log(&logs[w], th_seed() + (uint64_t)w * 1000, n);
    }
    kvix_index *idx;
    kvix_err err;
    CHECK(kvix_index_new(&idx, NULL, &err) == KVIX_OK);
    writer wr[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        wr[t] = (writer){idx, t, 0};
        CHECK(pthread_create(&th[t], NULL, write_main, &wr[t]) == 0);
    }
    /* every worker has state before the first save: each is in every one */
    for (int w = 0; w < WORKERS; w++)
        while (!__atomic_load_n(&logs[w].applied, __ATOMIC_ACQUIRE))
            sched_yield();
    size_t saves = 0, groups = 0, good = 0;
    for (;;) {
        size_t before = __atomic_load_n(&applied_total, __ATOMIC_RELAXED);
        if (before == WORKERS * n && saves >= 2)
            break;
        char name[32];
        snprintf(name, sizeof name, "live%zu.kvix", saves % 4);
        const char *p = th_path(name);
        kvix_snapshot_info info;
        __atomic_store_n(&saving, 1, __ATOMIC_RELEASE);
        int rc = kvix_snapshot_save(idx, p, &info, &err);
        __atomic_store_n(&saving, 0, __ATOMIC_RELEASE);
        if (!CHECK(rc == KVIX_OK))
            break;
        saves++;
        CHECK_U64(info.walk.cuts, WORKERS);
        kvix_snapshot *s;
        if (!CHECK(kvix_snapshot_open(&s, p, &err) == KVIX_OK))
            break;
        kvix_snapshot_group g;
        size_t in_file = 0;
        while (kvix_snapshot_next(s, &g, &err) == KVIX_OK) {
            in_file++;
            groups++;
            good += check_group(&g);
        }
        CHECK_U64(in_file, WORKERS);
        kvix_snapshot_close(s);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        CHECK_U64(wr[t].rejected, 0);
    }
    printf("#   %zu saves, %zu events applied during them; %zu of %zu records checked equal\n",
           saves, during_save, good, groups);
    CHECK(saves >= 2);
    CHECK_U64(good, groups);
    /* the saves did run beside the writers */
    CHECK(during_save > 0);
    kvix_index_free(idx);
    for (int w = 0; w < WORKERS; w++) {
        for (size_t i = 0; i < logs[w].n; i++)
            kvix_event_release(&logs[w].ev[i]);
        free(logs[w].ev);
    }
}
