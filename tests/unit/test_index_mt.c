/* The index under concurrency, on every backend: a writer pool fed by one
 * submitter (2 threads, sticky by worker), two threads applying directly for
 * their own workers (including worker removals), and two query threads.
 * Each worker's events come from a deterministic generator, so the final
 * state must equal a sequential run of the same events (foreach compared as
 * text, totals and rejections too); while running, answers must be sorted,
 * well-formed, and for the workers whose chain only grows, never longer than
 * what was handed to the index and never shrinking. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "kvix/buf.h"
#include "kvix/hash.h"
#include "kvix/index.h"

#define KMAX 120 /* length of the growing chains */
#define NPOOL 4  /* workers 1..4 through submit; worker 1 grows */
#define NDIRECT 4 /* workers 10, 11 (thread A), 20, 21 (thread B); 10 grows */

static uint64_t G[KMAX]; /* the locals of the growing chain, shared by everyone */

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

typedef struct chain {
    uint64_t eng[64];
    int n;
    uint32_t dp;
} chain;

typedef struct gen {
    uint64_t worker, rng;
    int growing, direct;
    long step, steps;
    uint32_t grow_n;
    chain ch[4];
} gen;

static unsigned g_below(gen *g, unsigned n)
{
    g->rng = mix(g->rng + UINT64_C(0x9e3779b97f4a7c15));
    return (unsigned)(g->rng % n);
}

static void gen_init(gen *g, uint64_t worker, int growing, int direct, long steps)
{
    memset(g, 0, sizeof *g);
    g->worker = worker;
    g->rng = mix(worker * 1000003 + th_seed());
    g->growing = growing;
    g->direct = direct;
    g->steps = steps;
}

static uint64_t grow_engine(uint64_t worker, uint32_t pos) { return mix(worker << 20 | pos); }

enum { GEN_END, GEN_EVENT, GEN_REMOVE_WORKER, GEN_REMOVE_DP };

/* The next thing worker g does; *blocks_after: for a growing worker, the
 * length of its chain once this event is applied. */
static int gen_next(gen *g, kvix_event *ev, uint32_t *dp_out)
{
    if (g->step >= g->steps)
        return GEN_END;
    g->step++;
    kvix_event_reset(ev);
    ev->worker = g->worker;
    ev->has_eid = 1;
    ev->eid = (uint64_t)g->step;
    ev->bs = 4;
    if (g->growing) {
        ev->type = KVIX_EV_STORED;
        if (g->grow_n < KMAX && g_below(g, 4)) {
            uint32_t k = 1 + g_below(g, 2);
            if (g->grow_n + k > KMAX)
                k = KMAX - g->grow_n;
            if (g->grow_n) {
                ev->has_parent = 1;
                ev->parent = grow_engine(g->worker, g->grow_n - 1);
            }
            kvix_event_reserve_blocks(ev, k, NULL);
            for (uint32_t i = 0; i < k; i++) {
                ev->blocks[i].local = G[g->grow_n + i];
                ev->blocks[i].seq = grow_engine(g->worker, g->grow_n + i);
            }
            ev->nblocks = k;
            g->grow_n += k;
        } else if (g->grow_n) { /* a prefix again, to the cpu tier: nothing shrinks */
            uint32_t k = 1 + g_below(g, g->grow_n < 8 ? g->grow_n : 8);
            ev->medium = KVIX_MEDIUM_CPU;
            kvix_event_reserve_blocks(ev, k, NULL);
            for (uint32_t i = 0; i < k; i++) {
                ev->blocks[i].local = G[i];
                ev->blocks[i].seq = grow_engine(g->worker, i);
            }
            ev->nblocks = k;
        }
        return GEN_EVENT;
    }
    chain *c = &g->ch[g_below(g, 4)];
    unsigned kind = g_below(g, 100);
    ev->medium = g_below(g, 3) ? 0 : (int)g_below(g, KVIX_MEDIUM_COUNT);
    ev->dp = c->dp;
    if (kind < 55) {
        ev->type = KVIX_EV_STORED;
        int extend = c->n > 0 && c->n < 60 && g_below(g, 3);
        if (!extend) {
            c->n = 0;
            c->dp = g_below(g, 2);
            ev->dp = c->dp;
        } else {
            ev->has_parent = 1;
            ev->parent = c->eng[c->n - 1];
        }
        if (g_below(g, 30) == 0) {
            ev->has_parent = 1;
            ev->parent = mix(g->rng); /* unknown: rejected */
        }
        uint32_t k = 1 + g_below(g, 3);
        if (c->n + (int)k > 64)
            k = (uint32_t)(64 - c->n);
        kvix_event_reserve_blocks(ev, k, NULL);
        int shared = g_below(g, 2);
        for (uint32_t i = 0; i < k; i++) {
            int pos = c->n + (int)i;
            uint64_t local = shared && pos < KMAX ? G[pos] : 100 + g_below(g, 4);
            uint64_t prev = pos ? c->eng[pos - 1] : 0;
            ev->blocks[i].local = local;
            ev->blocks[i].seq = mix(prev * 31 + local + (g->worker << 8) + c->dp);
            c->eng[pos] = ev->blocks[i].seq;
        }
        ev->nblocks = k;
        if (!(ev->has_parent && !extend))
            c->n += (int)k;
        else
            c->n = 0;
    } else if (kind < 80) {
        ev->type = KVIX_EV_REMOVED;
        kvix_event_reserve_hashes(ev, 2, NULL);
        ev->nhashes = 0;
        if (c->n) {
            if (g_below(g, 3)) /* a leaf first, as engines do */
                ev->hashes[ev->nhashes++] = c->eng[--c->n];
            else /* a parent with its children still held */
                ev->hashes[ev->nhashes++] = c->eng[g_below(g, (unsigned)c->n)];
        }
        ev->hashes[ev->nhashes++] = mix(g->rng + 1);
    } else if (kind < 81) {
        ev->type = KVIX_EV_CLEARED;
        for (int i = 0; i < 4; i++)
            if (g->ch[i].dp == c->dp)
                g->ch[i].n = 0;
    } else if (kind < 82 && g->direct && g_below(g, 2)) {
        for (int i = 0; i < 4; i++)
            g->ch[i].n = 0;
        *dp_out = c->dp;
        return g_below(g, 2) ? GEN_REMOVE_WORKER : GEN_REMOVE_DP;
    } else { /* a store of another tier for a held chain */
        ev->type = KVIX_EV_STORED;
        ev->medium = KVIX_MEDIUM_DISK;
        if (c->n > 1) {
            ev->has_parent = 1;
            ev->parent = c->eng[0];
            kvix_event_reserve_blocks(ev, 1, NULL);
            ev->blocks[0].seq = c->eng[1];
            ev->blocks[0].local = 100; /* maybe not its local: then it moves */
            ev->nblocks = 1;
            c->n = 0;
        }
    }
    return GEN_EVENT;
}

/* ---- shared run state ------------------------------------------------- */

typedef struct run {
    kvix_index *idx;
    long steps;
    int stop;             /* atomic: readers stop */
    uint32_t grown[2];    /* atomic: blocks handed over for workers 1 and 10 */
    long rejects;         /* atomic */
    long queries, bad;    /* atomic */
    char why[160];
} run;

static void on_reject(void *ctx, uint64_t tag, const kvix_err *err)
{
    (void)tag;
    (void)err;
    run *r = ctx;
    __atomic_fetch_add(&r->rejects, 1, __ATOMIC_RELAXED);
}

static void *submitter(void *arg)
{
    run *r = arg;
    gen g[NPOOL];
    kvix_event ev;
    kvix_event_init(&ev);
    for (int i = 0; i < NPOOL; i++)
        gen_init(&g[i], (uint64_t)i + 1, i == 0, 0, r->steps);
    for (int live = NPOOL; live;) {
        live = 0;
        for (int i = 0; i < NPOOL; i++) {
            uint32_t dp = 0;
            if (gen_next(&g[i], &ev, &dp) == GEN_END)
                continue;
            live++;
            if (i == 0)
                __atomic_store_n(&r->grown[0], g[0].grow_n, __ATOMIC_RELEASE);
            kvix_index_submit(r->idx, &ev, (uint64_t)g[i].step, NULL);
        }
    }
    kvix_index_sync(r->idx);
    kvix_event_release(&ev);
    return NULL;
}

typedef struct direct_arg {
    run *r;
    uint64_t w0, w1;
} direct_arg;

static void *direct(void *arg)
{
    direct_arg *d = arg;
    run *r = d->r;
    gen g[2];
    kvix_event ev;
    kvix_event_init(&ev);
    gen_init(&g[0], d->w0, d->w0 == 10, 1, r->steps);
    gen_init(&g[1], d->w1, 0, 1, r->steps);
    for (int live = 2; live;) {
        live = 0;
        for (int i = 0; i < 2; i++) {
            uint32_t dp = 0;
            int k = gen_next(&g[i], &ev, &dp);
            if (k == GEN_END)
                continue;
            live++;
            if (g[i].growing) /* before the apply: an upper bound for readers */
                __atomic_store_n(&r->grown[1], g[i].grow_n, __ATOMIC_RELEASE);
            int rc;
            if (k == GEN_REMOVE_WORKER)
                rc = kvix_index_remove_worker(r->idx, g[i].worker, NULL, NULL);
            else if (k == GEN_REMOVE_DP)
                rc = kvix_index_remove_worker_dp(r->idx, g[i].worker, dp, NULL, NULL);
            else
                rc = kvix_index_apply(r->idx, &ev, NULL, NULL);
            if (rc)
                __atomic_fetch_add(&r->rejects, 1, __ATOMIC_RELAXED);
        }
    }
    kvix_event_release(&ev);
    return NULL;
}

static int known_worker(uint64_t w)
{
    return (w >= 1 && w <= NPOOL) || w == 10 || w == 11 || w == 20 || w == 21;
}

static void bad(run *r, const char *why)
{
    if (__atomic_fetch_add(&r->bad, 1, __ATOMIC_RELAXED) == 0)
        snprintf(r->why, sizeof r->why, "%s", why);
}

static void *reader(void *arg)
{
    run *r = arg;
    kvix_answer ans;
    kvix_answer_init(&ans);
    uint32_t last[2] = {0, 0};
    uint64_t q[KMAX], rng = 77;
    long n = 0;
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE) || n < 10) {
        size_t len = KMAX;
        memcpy(q, G, sizeof q);
        if (n % 3 == 2) { /* a random one of the shared alphabet */
            rng = mix(rng + 1);
            len = 1 + rng % 8;
            for (size_t i = 0; i < len; i++)
                q[i] = (i < 2 && (rng >> (10 + i)) & 1) ? G[i] : 100 + ((rng >> (20 + 2 * i)) & 3);
        }
        if (kvix_index_query(r->idx, "default", "default", q, len, &ans, NULL)) {
            bad(r, "query failed");
            break;
        }
        uint32_t bound[2] = {__atomic_load_n(&r->grown[0], __ATOMIC_ACQUIRE),
                             __atomic_load_n(&r->grown[1], __ATOMIC_ACQUIRE)};
        for (size_t i = 0; i < ans.nscores; i++) {
            const kvix_score *s = &ans.scores[i];
            if (!known_worker(s->worker) || s->dp > 1 || s->blocks == 0 || s->blocks > len)
                bad(r, "a score out of range");
            for (int t = 0; t < KVIX_MEDIUM_COUNT; t++)
                if (s->tier_blocks[t] > s->blocks)
                    bad(r, "a tier count above the prefix");
            if (i && (s->blocks > s[-1].blocks ||
                      (s->blocks == s[-1].blocks &&
                       (s->worker < s[-1].worker ||
                        (s->worker == s[-1].worker && s->dp <= s[-1].dp)))))
                bad(r, "scores out of order");
            if (len == KMAX && s->dp == 0 && (s->worker == 1 || s->worker == 10)) {
                int gi = s->worker == 10;
                if (s->blocks > bound[gi])
                    bad(r, "a growing worker matched more than it was given");
                if (s->blocks < last[gi])
                    bad(r, "a growing worker's prefix shrank");
                last[gi] = s->blocks;
            }
        }
        n++;
    }
    __atomic_fetch_add(&r->queries, n, __ATOMIC_RELAXED);
    kvix_answer_release(&ans);
    return NULL;
}

/* ---- comparison ------------------------------------------------------- */

static int dump_visit(void *ctx, const char *model, const char *tenant, uint32_t bs,
                      uint64_t worker, uint32_t dp, int has_eid, uint64_t eid,
                      const kvix_block_info *b, size_t n)
{
    kvix_buf *buf = ctx;
    kvix_buf_printf(buf, NULL, "%s/%s bs %u worker %" PRIu64 " dp %u eid %d:%" PRIu64 "\n",
                    model, tenant, bs, worker, dp, has_eid, eid);
    for (size_t i = 0; i < n; i++)
        kvix_buf_printf(buf, NULL,
                        "  %u %016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %x %016" PRIx64
                        " %016" PRIx64 "\n",
                        b[i].position, b[i].engine, b[i].local, b[i].parent, b[i].tiers,
                        b[i].canon, b[i].parent_canon);
    return 0;
}

static void dump(kvix_index *idx, kvix_buf *buf)
{
    buf->len = 0;
    kvix_buf_append(buf, "", 0, NULL);
    CHECK(kvix_index_foreach(idx, dump_visit, buf) == 0);
}

/* The same events, one thread, no pool. */
static void sequential(long steps, kvix_buf *out, kvix_apply_result *tot, long *rejects)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = KVIX_BACKEND_REFERENCE;
    kvix_index *idx = NULL;
    CHECK(kvix_index_new(&idx, &o, NULL) == KVIX_OK);
    kvix_event ev;
    kvix_event_init(&ev);
    *rejects = 0;
    uint64_t ids[NPOOL + NDIRECT] = {1, 2, 3, 4, 10, 11, 20, 21};
    for (int i = 0; i < NPOOL + NDIRECT; i++) {
        gen g;
        gen_init(&g, ids[i], ids[i] == 1 || ids[i] == 10, i >= NPOOL, steps);
        uint32_t dp = 0;
        int k, rc;
        while ((k = gen_next(&g, &ev, &dp)) != GEN_END) {
            if (k == GEN_REMOVE_WORKER)
                rc = kvix_index_remove_worker(idx, g.worker, NULL, NULL);
            else if (k == GEN_REMOVE_DP)
                rc = kvix_index_remove_worker_dp(idx, g.worker, dp, NULL, NULL);
            else
                rc = kvix_index_apply(idx, &ev, NULL, NULL);
            *rejects += rc != 0;
        }
    }
    dump(idx, out);
    kvix_index_totals(idx, tot);
    kvix_event_release(&ev);
    kvix_index_free(idx);
}

static void run_backend(const char *name)
{
    for (int i = 0; i < KMAX; i++)
        G[i] = 100 + (uint64_t)(mix((uint64_t)i) % 4);
    run r;
    memset(&r, 0, sizeof r);
    r.steps = (long)(10000 * th_scale());
    kvix_backend b;
    CHECK(kvix_backend_parse(name, &b) == KVIX_OK);
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = b;
    o.threads = 2;
    o.on_reject = on_reject;
    o.reject_ctx = &r;
    kvix_err err;
    if (kvix_index_new(&r.idx, &o, &err)) {
        CHECK(strstr(err.msg, "not built") && b != KVIX_BACKEND_REFERENCE);
        return;
    }
    pthread_t ts, td[2], tr[2];
    direct_arg da[2] = {{&r, 10, 11}, {&r, 20, 21}};
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&tr[i], NULL, reader, &r) == 0);
    CHECK(pthread_create(&ts, NULL, submitter, &r) == 0);
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&td[i], NULL, direct, &da[i]) == 0);
    pthread_join(ts, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(td[i], NULL);
    __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++)
        pthread_join(tr[i], NULL);
    if (r.bad)
        printf("#   %s: %ld bad answers, first: %s\n", name, r.bad, r.why);
    CHECK_U64(r.bad, 0);
    CHECK(r.queries >= 20);

    kvix_buf got, want;
    kvix_buf_init(&got);
    kvix_buf_init(&want);
    kvix_apply_result tot, wtot;
    long wrejects;
    dump(r.idx, &got);
    sequential(r.steps, &want, &wtot, &wrejects);
    CHECK(got.len == want.len && memcmp(got.data, want.data, got.len) == 0);
    CHECK(got.len > 1000);
    kvix_index_totals(r.idx, &tot);
    CHECK_U64(tot.stored, wtot.stored);
    CHECK_U64(tot.duplicate, wtot.duplicate);
    CHECK_U64(tot.removed, wtot.removed);
    CHECK_U64(tot.unknown, wtot.unknown);
    CHECK_U64(r.rejects, wrejects);
    CHECK(wrejects > 0);
    /* quiet now: the growing chains are whole */
    kvix_answer ans;
    kvix_answer_init(&ans);
    CHECK(kvix_index_query(r.idx, "default", "default", G, KMAX, &ans, NULL) == KVIX_OK);
    int seen = 0;
    for (size_t i = 0; i < ans.nscores; i++)
        if (ans.scores[i].dp == 0 && (ans.scores[i].worker == 1 || ans.scores[i].worker == 10)) {
            seen++;
            CHECK_U64(ans.scores[i].blocks, r.grown[ans.scores[i].worker == 10]);
        }
    CHECK_U64(seen, 2);
    kvix_index_stats st;
    kvix_index_stats_get(r.idx, &st);
    printf("# %s: %ld steps per worker, %ld queries, %zu blocks held, %ld rejected\n", name,
           r.steps, r.queries, st.blocks, r.rejects);
    kvix_answer_release(&ans);
    kvix_buf_release(&got);
    kvix_buf_release(&want);
    kvix_index_free(r.idx);
}

TEST(concurrent_reference) { run_backend("reference"); }
TEST(concurrent_positional) { run_backend("positional"); }
TEST(concurrent_radix) { run_backend("radix"); }

/* Freeing an index with submitted, unsynced events applies them first (no
 * leak, no race), and a full queue blocks the submitter rather than dropping. */
TEST(free_with_pending_submits)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = KVIX_BACKEND_REFERENCE;
    o.threads = 1;
    kvix_index *idx = NULL;
    CHECK(kvix_index_new(&idx, &o, NULL) == KVIX_OK);
    kvix_event ev;
    kvix_event_init(&ev);
    ev.type = KVIX_EV_STORED;
    ev.bs = 4;
    kvix_event_reserve_blocks(&ev, 1, NULL);
    ev.nblocks = 1;
    long n = (long)(5000 * th_scale());
    for (long i = 0; i < n; i++) {
        ev.worker = (uint64_t)(i % 3);
        ev.blocks[0].local = (uint64_t)i;
        ev.blocks[0].seq = (uint64_t)i;
        CHECK(kvix_index_submit(idx, &ev, 0, NULL) == KVIX_OK);
    }
    kvix_index_sync(idx);
    kvix_index_stats st;
    kvix_index_stats_get(idx, &st);
    CHECK_U64(st.blocks, n);
    for (long i = 0; i < 300; i++) {
        ev.blocks[0].seq = (uint64_t)(n + i);
        CHECK(kvix_index_submit(idx, &ev, 0, NULL) == KVIX_OK);
    }
    kvix_event_release(&ev);
    kvix_index_free(idx);
}

/* Partition creation and slot registration racing with queries: writers each
 * create their own partitions and register many workers in a shared one
 * (tables grow and are republished while readers probe them). */
#define REG_THREADS 3
#define REG_WORKERS 300
#define REG_PARTS 100

typedef struct reg_run {
    kvix_index *idx;
    int stop;
    long bad, queries;
} reg_run;

typedef struct reg_arg {
    reg_run *r;
    int id;
} reg_arg;

static void *reg_writer(void *arg)
{
    reg_arg *a = arg;
    kvix_event ev;
    kvix_event_init(&ev);
    ev.type = KVIX_EV_STORED;
    kvix_event_reserve_blocks(&ev, 1, NULL);
    ev.nblocks = 1;
    ev.blocks[0].local = 5;
    ev.blocks[0].seq = 5;
    for (int i = 0; i < REG_WORKERS; i++) {
        ev.worker = (uint64_t)(a->id * 100000 + i);
        ev.bs = 4;
        kvix_event_set_name(ev.model, "shared", 6, NULL);
        if (kvix_index_apply(a->r->idx, &ev, NULL, NULL))
            __atomic_fetch_add(&a->r->bad, 1, __ATOMIC_RELAXED);
        if (i < REG_PARTS) {
            char name[32];
            int len = snprintf(name, sizeof name, "p%d-%d", a->id, i);
            kvix_event_set_name(ev.model, name, (size_t)len, NULL);
            ev.bs = (uint32_t)(1 + i % 8);
            if (kvix_index_apply(a->r->idx, &ev, NULL, NULL))
                __atomic_fetch_add(&a->r->bad, 1, __ATOMIC_RELAXED);
        }
    }
    kvix_event_release(&ev);
    return NULL;
}

static void *reg_reader(void *arg)
{
    reg_run *r = arg;
    kvix_answer ans;
    kvix_answer_init(&ans);
    uint64_t q[2] = {5, 6};
    long n = 0;
    uint64_t rng = 5;
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE) || n < 10) {
        rng = mix(rng + 1);
        char name[32];
        int id = (int)(rng % REG_THREADS), i = (int)((rng >> 8) % REG_PARTS);
        snprintf(name, sizeof name, "p%d-%d", id, i);
        uint32_t bs = kvix_index_block_size(r->idx, name, "default");
        if (bs && bs != (uint32_t)(1 + i % 8))
            __atomic_fetch_add(&r->bad, 1, __ATOMIC_RELAXED);
        const char *m = rng >> 40 & 1 ? name : "shared";
        if (kvix_index_query(r->idx, m, "default", q, 2, &ans, NULL))
            __atomic_fetch_add(&r->bad, 1, __ATOMIC_RELAXED);
        for (size_t k = 0; k < ans.nscores; k++) {
            const kvix_score *s = &ans.scores[k];
            if (s->blocks != 1 || s->dp != 0 || s->worker % 100000 >= REG_WORKERS ||
                s->worker / 100000 >= REG_THREADS || (k && s->worker <= s[-1].worker))
                __atomic_fetch_add(&r->bad, 1, __ATOMIC_RELAXED);
        }
        n++;
    }
    __atomic_fetch_add(&r->queries, n, __ATOMIC_RELAXED);
    kvix_answer_release(&ans);
    return NULL;
}

TEST(registration_races_queries)
{
    for (int bi = 0; bi < 3; bi++) {
        static const char *const names[] = {"positional", "radix", "reference"};
        kvix_backend b;
        kvix_backend_parse(names[bi], &b);
        kvix_index_opts o;
        kvix_index_opts_init(&o);
        o.backend = b;
        reg_run r;
        memset(&r, 0, sizeof r);
        CHECK(kvix_index_new(&r.idx, &o, NULL) == KVIX_OK);
        if (!r.idx)
            continue;
        pthread_t tw[REG_THREADS], tr[2];
        reg_arg args[REG_THREADS];
        for (int i = 0; i < 2; i++)
            CHECK(pthread_create(&tr[i], NULL, reg_reader, &r) == 0);
        for (int i = 0; i < REG_THREADS; i++) {
            args[i].r = &r;
            args[i].id = i;
            CHECK(pthread_create(&tw[i], NULL, reg_writer, &args[i]) == 0);
        }
        for (int i = 0; i < REG_THREADS; i++)
            pthread_join(tw[i], NULL);
        __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < 2; i++)
            pthread_join(tr[i], NULL);
        CHECK_U64(r.bad, 0);
        kvix_index_stats st;
        kvix_index_stats_get(r.idx, &st);
        CHECK_U64(st.partitions, 1 + REG_THREADS * REG_PARTS);
        CHECK_U64(st.workers, REG_THREADS * (REG_WORKERS + REG_PARTS));
        kvix_answer ans;
        kvix_answer_init(&ans);
        uint64_t q[1] = {5};
        CHECK(kvix_index_query(r.idx, "shared", "default", q, 1, &ans, NULL) == KVIX_OK);
        CHECK_U64(ans.nscores, REG_THREADS * REG_WORKERS);
        kvix_answer_release(&ans);
        kvix_index_free(r.idx);
    }
}

/* One prompt's holder sets pushed through every form and back (lib/core/hset_int.h:
 * a few holders inline, an array, a bitset past 40 of these 601 slots, with
 * tiers or not) by two threads storing and removing it for their workers,
 * again and again, while two threads query it: every answer sorted, each
 * worker once, within the prompt, and worker 0, which holds it all along,
 * always with all of it on gpu. */
#define CH_WRITERS 2
#define CH_WORKERS 300 /* each */
#define CH_BLOCKS 3

typedef struct ch_run {
    kvix_index *idx;
    int stop, rounds;
    long bad, queries;
} ch_run;

typedef struct ch_arg {
    ch_run *r;
    int id;
} ch_arg;

static const uint64_t ch_local[CH_BLOCKS] = {901, 902, 903};

static void ch_event(kvix_event *ev, int type, uint64_t worker, kvix_medium medium)
{
    kvix_event_reset(ev);
    ev->type = type;
    ev->worker = worker;
    ev->bs = 4;
    ev->medium = medium;
    if (type == KVIX_EV_STORED) {
        kvix_event_reserve_blocks(ev, CH_BLOCKS, NULL);
        for (int i = 0; i < CH_BLOCKS; i++) {
            ev->blocks[i].local = ch_local[i];
            ev->blocks[i].seq = 5000 + (uint64_t)i;
        }
        ev->nblocks = CH_BLOCKS;
    } else {
        kvix_event_reserve_hashes(ev, CH_BLOCKS, NULL);
        for (int i = 0; i < CH_BLOCKS; i++)
            ev->hashes[i] = 5000 + (uint64_t)(CH_BLOCKS - 1 - i);
        ev->nhashes = CH_BLOCKS;
    }
}

static void *ch_writer(void *arg)
{
    ch_arg *a = arg;
    kvix_event ev;
    kvix_event_init(&ev);
    for (int round = 0; round < a->r->rounds; round++)
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < CH_WORKERS; i++) {
                /* interleaved workers: each thread's slots spread over all */
                uint64_t w = 1 + (uint64_t)(pass ? CH_WORKERS - 1 - i : i) * CH_WRITERS +
                             (uint64_t)a->id;
                ch_event(&ev, pass ? KVIX_EV_REMOVED : KVIX_EV_STORED, w, KVIX_MEDIUM_GPU);
                if (kvix_index_apply(a->r->idx, &ev, NULL, NULL))
                    __atomic_fetch_add(&a->r->bad, 1, __ATOMIC_RELAXED);
                if (w % 7 == 0 && (pass || round % 2)) {
                    ch_event(&ev, pass ? KVIX_EV_REMOVED : KVIX_EV_STORED, w, KVIX_MEDIUM_CPU);
                    if (kvix_index_apply(a->r->idx, &ev, NULL, NULL))
                        __atomic_fetch_add(&a->r->bad, 1, __ATOMIC_RELAXED);
                }
            }
    kvix_event_release(&ev);
    return NULL;
}

static void *ch_reader(void *arg)
{
    ch_run *r = arg;
    kvix_answer ans;
    kvix_answer_init(&ans);
    static __thread uint8_t seen[1 + CH_WRITERS * CH_WORKERS];
    long n = 0;
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE) || n < 10) {
        if (kvix_index_query(r->idx, "default", "default", ch_local, CH_BLOCKS, &ans, NULL)) {
            __atomic_fetch_add(&r->bad, 1, __ATOMIC_RELAXED);
            break;
        }
        int pinned = 0;
        for (size_t i = 0; i < ans.nscores; i++) {
            const kvix_score *s = &ans.scores[i];
            if (s->worker > CH_WRITERS * CH_WORKERS || seen[s->worker] || s->blocks == 0 ||
                s->blocks > CH_BLOCKS || s->dp != 0 ||
                (i && (s->blocks > s[-1].blocks ||
                       (s->blocks == s[-1].blocks && s->worker <= s[-1].worker)))) {
                __atomic_fetch_add(&r->bad, 1, __ATOMIC_RELAXED);
                break;
            }
            seen[s->worker] = 1;
            if (s->worker == 0)
                pinned = s->blocks == CH_BLOCKS && s->tier_blocks[KVIX_MEDIUM_GPU] == CH_BLOCKS;
        }
        for (size_t i = 0; i < ans.nscores; i++)
            if (ans.scores[i].worker <= CH_WRITERS * CH_WORKERS)
                seen[ans.scores[i].worker] = 0;
        if (!pinned)
            __atomic_fetch_add(&r->bad, 1, __ATOMIC_RELAXED);
        n++;
    }
    __atomic_fetch_add(&r->queries, n, __ATOMIC_RELAXED);
    kvix_answer_release(&ans);
    return NULL;
}

TEST(sets_churn_through_every_form)
{
    for (int bi = 0; bi < 2; bi++) {
        static const char *const names[] = {"positional", "radix"};
        kvix_backend b;
        kvix_backend_parse(names[bi], &b);
        kvix_index_opts o;
        kvix_index_opts_init(&o);
        o.backend = b;
        ch_run r;
        memset(&r, 0, sizeof r);
        r.rounds = (int)(6 * th_scale()) + 1;
        CHECK(kvix_index_new(&r.idx, &o, NULL) == KVIX_OK);
        if (!r.idx)
            continue;
        kvix_event ev;
        kvix_event_init(&ev);
        ch_event(&ev, KVIX_EV_STORED, 0, KVIX_MEDIUM_GPU);
        CHECK(kvix_index_apply(r.idx, &ev, NULL, NULL) == KVIX_OK);
        pthread_t tw[CH_WRITERS], tr[2];
        ch_arg args[CH_WRITERS];
        for (int i = 0; i < 2; i++)
            CHECK(pthread_create(&tr[i], NULL, ch_reader, &r) == 0);
        for (int i = 0; i < CH_WRITERS; i++) {
            args[i].r = &r;
            args[i].id = i;
            CHECK(pthread_create(&tw[i], NULL, ch_writer, &args[i]) == 0);
        }
        for (int i = 0; i < CH_WRITERS; i++)
            pthread_join(tw[i], NULL);
        __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < 2; i++)
            pthread_join(tr[i], NULL);
        CHECK_U64(r.bad, 0);
        CHECK(r.queries > 0);
        kvix_index_stats st;
        kvix_index_stats_get(r.idx, &st);
        CHECK_U64(st.blocks, CH_BLOCKS); /* worker 0's only */
        kvix_event_release(&ev);
        kvix_index_free(r.idx);
    }
}
