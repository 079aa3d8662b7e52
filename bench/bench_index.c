/* bench_index: the index on a synthetic workload with realistic sharing.
 *
 * Workload: 256 workers; 32 system prompts (16..128 blocks, Zipf-popular);
 * conversations sticky to a worker, each turn extending the previous one by
 * 2..24 blocks; per worker an LRU of conversations under a block budget,
 * evicted leaf-first (the conversation's blocks tail-first, then its system
 * prompt when no conversation of that worker uses it). Every request is first
 * a router query (system prompt + history + the new turn), then a stored
 * event for the blocks the worker lacks.
 *
 *   bench_index [-r RUNS] [-n REQUESTS] [-q]     (-q: fewer requests)
 *
 * Prints markdown tables on stdout (medians of RUNS runs), progress on stderr.
 * Sections: library path (kvix_index_apply / _query) per backend with ratios
 * to reference; 2 writer threads (kvix_index_submit) with a query thread
 * running all the while; the backends alone (kvix_backend_ops) with the jump
 * and bisection sweep.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "index_int.h"
#include "kvix/hash.h"
#include "kvix/index.h"

#define WORKERS 256
#define NSYS 32
#define CAP_BLOCKS 1000 /* per worker */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of the calling thread: throughput per core on a shared machine */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x6b766978;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* ---- the generated workload ---- */

typedef struct op {
    int type; /* KVIX_EV_STORED / KVIX_EV_REMOVED / KVIX_EV_QUERY */
    uint32_t worker;
    int has_parent;
    uint64_t parent;
    size_t off, n; /* into blocks (stored), hashes (removed) or qlocal (query) */
} op;

/* One block change as a backend sees it. */
typedef struct bop {
    uint32_t pos, slot;
    int add;
    uint64_t local, canon, pcanon;
} bop;

static struct {
    op *ops;
    size_t nops, capops;
    kvix_block *blocks;
    size_t nblocks, capblocks;
    uint64_t *hashes;
    size_t nhashes, caphashes;
    uint64_t *qlocal;
    size_t nqlocal, capqlocal;
    bop *bops;
    size_t nbops, capbops;
    size_t stored_blocks, removed_blocks, query_blocks, queries;
} W;

#define PUSH(arr, n, cap, v)                                                  \
    do {                                                                      \
        if ((n) == (cap)) {                                                   \
            (cap) = (cap) ? (cap) * 2 : 1024;                                 \
            (arr) = realloc((arr), (cap) * sizeof *(arr));                    \
            if (!(arr)) {                                                     \
                perror("bench_index");                                        \
                exit(1);                                                      \
            }                                                                 \
        }                                                                     \
        (arr)[(n)++] = (v);                                                   \
    } while (0)

typedef struct conv {
    uint32_t sys, worker, turns, len; /* len: own blocks so far */
    uint32_t held;                    /* own blocks the worker holds */
    int in_lru;
    int64_t prev, next;               /* worker LRU */
} conv;

static conv *convs;
static uint32_t sys_len[NSYS];
static int sys_held[WORKERS][NSYS], sys_ref[WORKERS][NSYS];
static int64_t lru_head[WORKERS], lru_tail[WORKERS]; /* head: most recent */
static size_t worker_blocks[WORKERS];

static uint64_t sys_local(uint32_t s, uint32_t i) { return (UINT64_C(1) << 40) | (uint64_t)s << 20 | i; }
static uint64_t conv_local(uint64_t c, uint32_t i) { return (UINT64_C(2) << 40) ^ (c << 12) ^ i; }

static void lru_unlink(uint32_t w, int64_t c)
{
    conv *x = &convs[c];
    if (!x->in_lru)
        return;
    if (x->prev >= 0) convs[x->prev].next = x->next; else lru_head[w] = x->next;
    if (x->next >= 0) convs[x->next].prev = x->prev; else lru_tail[w] = x->prev;
    x->in_lru = 0;
}

static void lru_front(uint32_t w, int64_t c)
{
    lru_unlink(w, c);
    conv *x = &convs[c];
    x->prev = -1;
    x->next = lru_head[w];
    if (lru_head[w] >= 0) convs[lru_head[w]].prev = c; else lru_tail[w] = c;
    lru_head[w] = c;
    x->in_lru = 1;
}

/* The prompt of conversation c with `len` own blocks: locals and canon chain. */
static size_t prompt(int64_t c, uint32_t len, uint64_t *local, uint64_t *canon)
{
    uint32_t s = convs[c].sys, n = 0;
    for (uint32_t i = 0; i < sys_len[s]; i++)
        local[n++] = sys_local(s, i);
    for (uint32_t i = 0; i < len; i++)
        local[n++] = conv_local((uint64_t)c, i);
    for (uint32_t i = 0; i < n; i++)
        canon[i] = i ? kvix_hash_seq_next(canon[i - 1], local[i]) : local[i];
    return n;
}

static void emit_store(uint32_t w, const uint64_t *local, const uint64_t *canon, uint32_t from,
                       uint32_t to)
{
    if (from >= to)
        return;
    op o = {KVIX_EV_STORED, w, from > 0, from ? canon[from - 1] : 0, W.nblocks, to - from};
    for (uint32_t i = from; i < to; i++) {
        kvix_block b = {local[i], canon[i]};
        PUSH(W.blocks, W.nblocks, W.capblocks, b);
        bop bo = {i, w, 1, local[i], canon[i], i ? canon[i - 1] : 0};
        PUSH(W.bops, W.nbops, W.capbops, bo);
    }
    PUSH(W.ops, W.nops, W.capops, o);
    W.stored_blocks += to - from;
    worker_blocks[w] += to - from;
}

static void emit_remove(uint32_t w, const uint64_t *local, const uint64_t *canon, uint32_t from,
                        uint32_t to) /* tail-first */
{
    if (from >= to)
        return;
    op o = {KVIX_EV_REMOVED, w, 0, 0, W.nhashes, to - from};
    for (uint32_t i = to; i-- > from;) {
        PUSH(W.hashes, W.nhashes, W.caphashes, canon[i]);
        bop bo = {i, w, 0, local[i], canon[i], i ? canon[i - 1] : 0};
        PUSH(W.bops, W.nbops, W.capbops, bo);
    }
    PUSH(W.ops, W.nops, W.capops, o);
    W.removed_blocks += to - from;
    worker_blocks[w] -= to - from;
}

static void evict(uint32_t w, int64_t keep, uint64_t *local, uint64_t *canon)
{
    while (worker_blocks[w] > CAP_BLOCKS) {
        int64_t c = lru_tail[w];
        if (c < 0 || c == keep)
            return;
        conv *x = &convs[c];
        uint32_t sl = sys_len[x->sys];
        prompt(c, x->held, local, canon);
        emit_remove(w, local, canon, sl, sl + x->held);
        x->held = 0;
        lru_unlink(w, c);
        if (--sys_ref[w][x->sys] == 0) {
            emit_remove(w, local, canon, 0, sl);
            sys_held[w][x->sys] = 0;
        }
    }
}

static void generate(size_t requests, size_t nconv)
{
    memset(&W, 0, sizeof W);
    rng_state = 0x6b766978;
    for (uint32_t s = 0; s < NSYS; s++)
        sys_len[s] = 16 + (uint32_t)(rnd() % 113);
    convs = calloc(nconv, sizeof *convs);
    for (size_t c = 0; c < nconv; c++) {
        /* Zipf-ish system prompt popularity: s = floor(NSYS * u^2) */
        double u = (double)(rnd() >> 11) / 9007199254740992.0;
        convs[c].sys = (uint32_t)(NSYS * u * u);
        convs[c].worker = (uint32_t)(rnd() % WORKERS);
        convs[c].prev = convs[c].next = -1;
    }
    memset(sys_held, 0, sizeof sys_held);
    memset(sys_ref, 0, sizeof sys_ref);
    memset(worker_blocks, 0, sizeof worker_blocks);
    for (int w = 0; w < WORKERS; w++)
        lru_head[w] = lru_tail[w] = -1;
    uint64_t *local = malloc(4096 * sizeof *local), *canon = malloc(4096 * sizeof *canon);
    size_t live = nconv / 8; /* conversations in flight: a sliding window */
    for (size_t r = 0; r < requests; r++) {
        int64_t c = (int64_t)((r * nconv / requests) + rnd() % live) % (int64_t)nconv;
        conv *x = &convs[c];
        if (x->turns >= 12 || x->len > 2000)
            continue;
        uint32_t w = x->worker, sl = sys_len[x->sys];
        uint32_t newlen = x->len + 2 + (uint32_t)(rnd() % 23);
        size_t n = prompt(c, newlen, local, canon);
        /* the router's query: the whole prompt */
        op q = {KVIX_EV_QUERY, w, 0, 0, W.nqlocal, n};
        for (size_t i = 0; i < n; i++)
            PUSH(W.qlocal, W.nqlocal, W.capqlocal, local[i]);
        PUSH(W.ops, W.nops, W.capops, q);
        W.query_blocks += n;
        W.queries++;
        /* the worker stores what it lacks */
        if (!sys_held[w][x->sys]) {
            emit_store(w, local, canon, 0, sl);
            sys_held[w][x->sys] = 1;
        }
        if (!x->in_lru)
            sys_ref[w][x->sys]++;
        emit_store(w, local, canon, sl + x->held, (uint32_t)n);
        x->held = x->len = newlen;
        x->turns++;
        lru_front(w, c);
        evict(w, c, local, canon);
    }
    free(local);
    free(canon);
}

/* ---- the library path ---- */

typedef struct lat {
    double *v;
    size_t n, cap;
} lat;

static void lat_push(lat *l, double x)
{
    PUSH(l->v, l->n, l->cap, x);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(lat *l, double p)
{
    if (!l->n)
        return 0;
    size_t i = (size_t)(p * (double)(l->n - 1) + 0.5);
    return l->v[i];
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static kvix_event ev_store, ev_remove;

static void set_event(const op *o)
{
    kvix_event *ev = o->type == KVIX_EV_STORED ? &ev_store : &ev_remove;
    ev->worker = o->worker;
    if (o->type == KVIX_EV_STORED) {
        ev->has_parent = (unsigned)o->has_parent;
        ev->parent = o->parent;
        ev->blocks = W.blocks + o->off;
        ev->nblocks = o->n;
    } else {
        ev->hashes = W.hashes + o->off;
        ev->nhashes = o->n;
    }
}

static int apply_op(kvix_index *idx, const op *o, kvix_answer *ans)
{
    kvix_err err;
    if (o->type == KVIX_EV_QUERY)
        return kvix_index_query(idx, "default", "default", W.qlocal + o->off, o->n, ans, &err);
    set_event(o);
    int rc = kvix_index_apply(idx, o->type == KVIX_EV_STORED ? &ev_store : &ev_remove, NULL, &err);
    if (rc < 0) {
        fprintf(stderr, "bench_index: %s\n", err.msg);
        exit(1);
    }
    return rc;
}

typedef struct lib_res {
    double store_ops, remove_ops, query_ops; /* block-ops/s */
    double p50, p99, p999, max;              /* query latency, us */
    double bytes_per;                        /* bytes per (worker, block) at the end */
    double conc_write_ops, conc_query_ops, cp50, cp99, cp999, cmax;
} lib_res;

static kvix_index *new_index(kvix_backend b, unsigned threads, unsigned jump, int bsearch)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = b;
    o.threads = threads;
    o.jump = jump;
    o.binsearch = bsearch;
    kvix_index *idx;
    kvix_err err;
    if (kvix_index_new(&idx, &o, &err) < 0) {
        fprintf(stderr, "bench_index: %s\n", err.msg);
        exit(1);
    }
    return idx;
}

/* Single thread: the whole stream, timing each event and query. */
static void run_single(kvix_backend b, lib_res *r)
{
    kvix_index *idx = new_index(b, 0, 0, 1);
    kvix_answer ans;
    kvix_answer_init(&ans);
    double ts = 0, tr = 0, tq = 0;
    lat l = {0};
    double c0 = cpu_now();
    for (size_t i = 0; i < W.nops; i++) {
        const op *o = &W.ops[i];
        double t0 = now();
        apply_op(idx, o, &ans);
        double dt = now() - t0;
        if (o->type == KVIX_EV_QUERY) {
            tq += dt;
            lat_push(&l, dt * 1e6);
        } else if (o->type == KVIX_EV_STORED) {
            ts += dt;
        } else {
            tr += dt;
        }
    }
    /* the CPU time of the whole stream, shared out by wall time (reading the
     * thread CPU clock costs ~1.5 us here: too much to read per event) */
    double cpu = cpu_now() - c0, scale = cpu / (ts + tr + tq);
    ts *= scale;
    tr *= scale;
    tq *= scale;
    qsort(l.v, l.n, sizeof *l.v, cmp_d);
    r->store_ops = (double)W.stored_blocks / ts;
    r->remove_ops = (double)W.removed_blocks / tr;
    r->query_ops = (double)W.query_blocks / tq;
    r->p50 = pct(&l, 0.5);
    r->p99 = pct(&l, 0.99);
    r->p999 = pct(&l, 0.999);
    r->max = l.v[l.n - 1];
    kvix_index_stats st;
    kvix_index_stats_get(idx, &st);
    r->bytes_per = st.blocks ? (double)st.bytes / (double)st.blocks : 0;
    free(l.v);
    kvix_answer_release(&ans);
    kvix_index_free(idx);
}

typedef struct qthread {
    kvix_index *idx;
    _Atomic int *stop;
    lat l;
    size_t blocks;
    double busy;
} qthread;

static void *query_loop(void *arg)
{
    qthread *q = arg;
    kvix_answer ans;
    kvix_answer_init(&ans);
    kvix_err err;
    size_t i = 0;
    while (!atomic_load_explicit(q->stop, memory_order_relaxed)) {
        for (; i < W.nops && W.ops[i].type != KVIX_EV_QUERY; i++)
            ;
        if (i >= W.nops) {
            i = 0;
            continue;
        }
        const op *o = &W.ops[i++];
        double t0 = now();
        kvix_index_query(q->idx, "default", "default", W.qlocal + o->off, o->n, &ans, &err);
        double dt = now() - t0;
        q->busy += dt;
        q->blocks += o->n;
        lat_push(&q->l, dt * 1e6);
    }
    kvix_answer_release(&ans);
    return NULL;
}

/* Two writer threads behind kvix_index_submit, one query thread all along. */
static void run_concurrent(kvix_backend b, lib_res *r)
{
    kvix_index *idx = new_index(b, 2, 0, 1);
    _Atomic int stop = 0;
    qthread q = {idx, &stop, {0}, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, query_loop, &q);
    kvix_err err;
    double t0 = now();
    for (size_t i = 0; i < W.nops; i++) {
        const op *o = &W.ops[i];
        if (o->type == KVIX_EV_QUERY)
            continue;
        set_event(o);
        if (kvix_index_submit(idx, o->type == KVIX_EV_STORED ? &ev_store : &ev_remove, i, &err) <
            0) {
            fprintf(stderr, "bench_index: %s\n", err.msg);
            exit(1);
        }
    }
    kvix_index_sync(idx);
    double dt = now() - t0;
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    r->conc_write_ops = (double)(W.stored_blocks + W.removed_blocks) / dt;
    r->conc_query_ops = q.busy > 0 ? (double)q.blocks / q.busy : 0;
    qsort(q.l.v, q.l.n, sizeof *q.l.v, cmp_d);
    r->cp50 = pct(&q.l, 0.5);
    r->cp99 = pct(&q.l, 0.99);
    r->cp999 = pct(&q.l, 0.999);
    r->cmax = q.l.n ? q.l.v[q.l.n - 1] : 0;
    free(q.l.v);
    kvix_index_free(idx);
}

/* ---- the backends alone ---- */

typedef struct be_res {
    double add_ops, del_ops, query_ops, p50, p99, p999, max, bytes_per;
} be_res;

static void run_backend(const kvix_backend_ops *ops, unsigned jump, int bsearch, be_res *r)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.jump = jump;
    o.binsearch = bsearch;
    kvix_err err;
    void *be = ops->create(&o, &err);
    /* adds and dels as one stream, then the queries on the final state */
    double ta = 0, td = 0;
    size_t na = 0, nd = 0, held = 0, peak_held = 0;
    double peak_bytes = 0;
    size_t i = 0;
    double c0 = cpu_now();
    while (i < W.nbops) {
        int add = W.bops[i].add;
        size_t j = i;
        while (j < W.nbops && W.bops[j].add == add && j - i < 4096)
            j++;
        double t0 = now();
        for (size_t k = i; k < j; k++) {
            const bop *b = &W.bops[k];
            if (add)
                kvix_backend_add_key(ops, be, b->pos, b->local, b->canon, b->pcanon, b->slot, 0, &err);
            else
                kvix_backend_del_key(ops, be, b->pos, b->local, b->canon, b->pcanon, b->slot, 0);
        }
        double dt = now() - t0;
        if (add) {
            ta += dt;
            na += j - i;
            held += j - i;
        } else {
            td += dt;
            nd += j - i;
            held -= j - i;
        }
        if (held > peak_held) {
            peak_held = held;
            peak_bytes = (double)ops->memory(be);
        }
        i = j;
    }
    double scale = (cpu_now() - c0) / (ta + td);
    ta *= scale;
    td *= scale;
    r->add_ops = (double)na / ta;
    r->del_ops = (double)nd / td;
    r->bytes_per = peak_held ? peak_bytes / (double)peak_held : 0;
    kvix_qhits hits = {0};
    uint64_t *canon = malloc(4096 * sizeof *canon);
    lat l = {0};
    size_t qb = 0;
    c0 = cpu_now();
    for (size_t k = 0; k < W.nops; k++) {
        const op *op_ = &W.ops[k];
        if (op_->type != KVIX_EV_QUERY)
            continue;
        kvix_qchain q = {W.qlocal + op_->off, canon, op_->n, 0};
        kvix_qhits_clear(&hits);
        double t0 = now();
        ops->query(be, &q, &hits, &err);
        double dt = now() - t0;
        qb += op_->n;
        lat_push(&l, dt * 1e6);
    }
    double tq = cpu_now() - c0;
    qsort(l.v, l.n, sizeof *l.v, cmp_d);
    r->query_ops = (double)qb / tq;
    r->p50 = pct(&l, 0.5);
    r->p99 = pct(&l, 0.99);
    r->p999 = pct(&l, 0.999);
    r->max = l.n ? l.v[l.n - 1] : 0;
    free(l.v);
    kvix__qhits_release(&hits);
    free(canon);
    ops->destroy(be);
}

/* ---- main ---- */

#define MED(field, arr, n)                                                    \
    ({                                                                        \
        double v_[64];                                                        \
        for (int i_ = 0; i_ < (n); i_++)                                      \
            v_[i_] = (arr)[i_].field;                                         \
        median(v_, (n));                                                      \
    })

static const cli_tool tool = {.name = "bench_index"}; /* messages only */

int main(int argc, char **argv)
{
    cli_init(&tool);
    int runs = 5, opt, profile = 0, pjump = 0, pbs = 1;
    size_t requests = 200000;
    while ((opt = getopt(argc, argv, "r:n:qp:j:s:")) != -1) {
        switch (opt) {
        case 'j': pjump = (int)cli_parse_uint(optarg, 0, 65536, "-j"); break;
        case 's': pbs = (int)cli_parse_uint(optarg, 0, 1, "-s"); break;
        case 'p': profile = (int)cli_parse_uint(optarg, 1, 6, "-p"); break;
        case 'r': runs = (int)cli_parse_uint(optarg, 1, 64, "-r"); break;
        case 'n': requests = cli_parse_uint(optarg, 1, UINT32_MAX, "-n"); break;
        case 'q': requests = 30000; break;
        default:
            fprintf(stderr, "usage: bench_index [-r RUNS] [-n REQUESTS] [-q] [-p 1..6 [-j JUMP] [-s 0|1]]\n");
            return 2;
        }
    }
    if (runs < 1 || runs > 64)
        runs = 5;
    generate(requests, requests / 4 + 1);
    kvix_event_init(&ev_store);
    kvix_event_init(&ev_remove);
    ev_store.type = KVIX_EV_STORED;
    ev_store.bs = 16;
    ev_remove.type = KVIX_EV_REMOVED;
    kvix_block *keep_blocks = ev_store.blocks;
    uint64_t *keep_hashes = ev_remove.hashes;
    fprintf(stderr, "bench_index: %zu queries (%zu blocks), %zu stored and %zu removed blocks\n",
            W.queries, W.query_blocks, W.stored_blocks, W.removed_blocks);

    if (profile) { /* one configuration only, for perf / callgrind */
        be_res br;
        lib_res lr1;
        if (profile == 1)
            run_backend(&kvix__backend_positional_ops, (unsigned)pjump, pbs, &br);
        else if (profile == 2)
            run_backend(&kvix__backend_radix_ops, 0, 1, &br);
        else if (profile == 3)
            run_single(KVIX_BACKEND_POSITIONAL, &lr1);
        else
            run_concurrent(profile == 4 ? KVIX_BACKEND_POSITIONAL
                                        : profile == 5 ? KVIX_BACKEND_RADIX : KVIX_BACKEND_REFERENCE,
                           &lr1);
        if (profile <= 2)
            printf("adds %.2f M/s dels %.2f M/s queries %.1f Mblocks/s p50 %.2f p99 %.2f us\n",
                   br.add_ops / 1e6, br.del_ops / 1e6, br.query_ops / 1e6, br.p50, br.p99);
        else if (profile == 3)
            printf("stores %.2f M/s removes %.2f M/s queries %.1f Mblocks/s p50 %.2f p99 %.2f\n",
                   lr1.store_ops / 1e6, lr1.remove_ops / 1e6, lr1.query_ops / 1e6, lr1.p50,
                   lr1.p99);
        else
            printf("writes %.2f M/s queries %.1f Mblocks/s p50 %.2f p99 %.2f p99.9 %.2f max %.1f us\n",
                   lr1.conc_write_ops / 1e6, lr1.conc_query_ops / 1e6, lr1.cp50, lr1.cp99,
                   lr1.cp999, lr1.cmax);
        return 0;
    }
    printf("## Index (bench_index)\n\n");
    printf("Synthetic workload: %d workers, %d system prompts (16..128 blocks, Zipf-popular), "
           "%zu requests of sticky conversations (turns add 2..24 blocks), per-worker LRU of "
           "%d blocks evicting leaf-first. Each request: a router query of the whole prompt, then "
           "a stored event. %zu queries (%.0f blocks each on average), %zu stored and %zu "
           "removed blocks. Median of %d runs; block-ops/s count blocks in events and in "
           "queries, per core (thread CPU time: the machine is shared); latencies are wall "
           "time.\n\n",
           WORKERS, NSYS, requests, CAP_BLOCKS, W.queries,
           (double)W.query_blocks / (double)(W.queries ? W.queries : 1), W.stored_blocks,
           W.removed_blocks, runs);

    static const kvix_backend backends[] = {KVIX_BACKEND_POSITIONAL, KVIX_BACKEND_RADIX,
                                            KVIX_BACKEND_REFERENCE};
    lib_res lr[3][64];
    for (int b = 0; b < 3; b++)
        for (int k = 0; k < runs; k++) {
            fprintf(stderr, "bench_index: %s run %d\n", kvix_backend_name(backends[b]), k + 1);
            run_single(backends[b], &lr[b][k]);
            run_concurrent(backends[b], &lr[b][k]);
        }
    double ref_s = MED(store_ops, lr[2], runs), ref_r = MED(remove_ops, lr[2], runs),
           ref_q = MED(query_ops, lr[2], runs);
    printf("### Library path, one thread (kvix_index_apply, kvix_index_query)\n\n");
    printf("| backend | stores Mblock-ops/s | removes Mblock-ops/s | queries Mblock-ops/s | "
           "query p50 us | p99 us | p99.9 us | max us | bytes per (worker, block) |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int b = 0; b < 3; b++) {
        double s = MED(store_ops, lr[b], runs), r = MED(remove_ops, lr[b], runs),
               q = MED(query_ops, lr[b], runs);
        printf("| %s | %.2f (%.2fx) | %.2f (%.2fx) | %.1f (%.2fx) | %.2f | %.2f | %.2f | %.1f | "
               "%.0f |\n",
               kvix_backend_name(backends[b]), s / 1e6, s / ref_s, r / 1e6, r / ref_r, q / 1e6,
               q / ref_q, MED(p50, lr[b], runs), MED(p99, lr[b], runs), MED(p999, lr[b], runs),
               MED(max, lr[b], runs), MED(bytes_per, lr[b], runs));
    }
    printf("\n(x): ratio to the reference backend in the same run. Bytes: kvix_index_stats "
           "bytes (front end and backend) over stored (worker, block) pairs at the end.\n\n");
    printf("### Two writer threads (kvix_index_submit, threads=2) and one query thread\n\n");
    printf("| backend | writes Mblock-ops/s | queries Mblock-ops/s | query p50 us | p99 us | "
           "p99.9 us | max us |\n|---|---|---|---|---|---|---|\n");
    for (int b = 0; b < 3; b++)
        printf("| %s | %.2f | %.1f | %.2f | %.2f | %.2f | %.1f |\n",
               kvix_backend_name(backends[b]), MED(conc_write_ops, lr[b], runs) / 1e6,
               MED(conc_query_ops, lr[b], runs) / 1e6, MED(cp50, lr[b], runs),
               MED(cp99, lr[b], runs), MED(cp999, lr[b], runs), MED(cmax, lr[b], runs));
    printf("\nThe machine has %ld cores: the submitting thread, two writers and the query "
           "thread share them, so the max includes preemption.\n\n",
           sysconf(_SC_NPROCESSORS_ONLN));

    printf("### The backends alone (kvix_backend_ops, one thread, gpu tier)\n\n");
    printf("The same block changes and queries straight into the backend: what the front end "
           "(engine-hash maps, slots, sorting) adds is the difference to the tables above.\n\n");
    printf("| backend | jump | bisect | adds Mops/s | dels Mops/s | queries Mblock-ops/s | "
           "query p50 us | p99 us | p99.9 us | max us | bytes per (worker, block) |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    struct {
        const kvix_backend_ops *ops;
        unsigned jump;
        int bs;
    } cfg[] = {
        {&kvix__backend_reference_ops, 0, 1}, {&kvix__backend_radix_ops, 0, 1},
        {&kvix__backend_positional_ops, 0, 1}, {&kvix__backend_positional_ops, 1, 1},
        {&kvix__backend_positional_ops, 4, 1}, {&kvix__backend_positional_ops, 8, 1},
        {&kvix__backend_positional_ops, 8, 0}, {&kvix__backend_positional_ops, 16, 1},
        {&kvix__backend_positional_ops, 16, 0}, {&kvix__backend_positional_ops, 32, 1},
        {&kvix__backend_positional_ops, 32, 0}, {&kvix__backend_positional_ops, 64, 1},
        {&kvix__backend_positional_ops, 64, 0},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
        be_res br[64];
        for (int k = 0; k < runs; k++)
            run_backend(cfg[c].ops, cfg[c].jump, cfg[c].bs, &br[k]);
        char jb[16];
        snprintf(jb, sizeof jb, cfg[c].jump ? "%u" : "default", cfg[c].jump);
        int pos = cfg[c].ops == &kvix__backend_positional_ops;
        printf("| %s | %s | %s | %.2f | %.2f | %.1f | %.2f | %.2f | %.2f | %.1f | %.0f |\n",
               cfg[c].ops->name, pos ? jb : "-", pos ? (cfg[c].bs ? "yes" : "no") : "-",
               MED(add_ops, br, runs) / 1e6, MED(del_ops, br, runs) / 1e6,
               MED(query_ops, br, runs) / 1e6, MED(p50, br, runs), MED(p99, br, runs),
               MED(p999, br, runs), MED(max, br, runs), MED(bytes_per, br, runs));
        fprintf(stderr, "bench_index: backend %s jump %u done\n", cfg[c].ops->name, cfg[c].jump);
    }
    printf("\nBytes: the backend's memory() at the peak of held (worker, block) pairs, over "
           "that peak.\n");
    ev_store.blocks = keep_blocks;
    ev_store.nblocks = 0;
    ev_remove.hashes = keep_hashes;
    ev_remove.nhashes = 0;
    kvix_event_release(&ev_store);
    kvix_event_release(&ev_remove);
    return 0;
}
