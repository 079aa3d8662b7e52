/* kvbench: replay a captured event+query log against every index backend.
 *
 * The log (NDJSON or msgpack, e.g. `kvreplay --mooncake TRACE`) is decoded
 * into memory first; parsing is never timed. Each run of a backend
 * configuration replays it from an empty index in a child process of its own
 * (so peak RSS and the allocator's state belong to that run alone), twice:
 * the second replay, on a warm heap, is the measured one, the first is
 * reported as "cold". Runs are interleaved across the backends of a group,
 * so a change of machine load hits them alike; figures are medians.
 *
 *  - writes go to T writer lanes, sticky by (worker, dp), through
 *    kvix_index_apply on our own threads (or kvix_index_submit with the
 *    library's writer pool, --submit); queries go to R reader lanes
 *    (kvix_index_query_event), handed out one at a time;
 *  - causality: the log is cut into segments of consecutive writes and
 *    consecutive queries with a barrier between segments. Rule "exact": the
 *    log order, so every query sees exactly the writes before it, as a
 *    sequential replay does. Rule "timestamp": per timestamp, all its writes,
 *    a barrier, then all its queries, so a query also sees the writes of its
 *    own timestamp that come after it in the log;
 *  - every answer feeds a checksum (scored (query, worker) pairs, the sum of
 *    matched blocks, and an order-independent hash of all answers) that must
 *    equal a sequential replay's on the reference backend under the same
 *    rule; a mismatch is reported loudly and the exit status is 1;
 *  - the dispatching thread is writer lane 0 and reader lane 0 itself, so
 *    1 writer x 1 reader runs on one thread without any hand-off.
 *
 * Block-ops, as Dynamo counts them: one per query block hash and one per
 * block of a stored event; removals count 0 (the hashes of removed events
 * and the blocks cleared events drop are reported beside, not counted).
 * Throughput is reported per wall second and per CPU
 * second of the process ("per core").
 *
 * Sweep: the log's timestamps are divided by a speed-up factor and the
 * dispatcher paces each segment to its scaled timestamp; the offered load is
 * block-ops / scaled span. Offered load rises (from a fraction of the
 * unpaced ceiling by a constant factor) until the achieved rate falls below
 * 95% of it; the last offered load achieved is the saturation point.
 *
 * Output: markdown tables on stdout (one per rule x threads group, ratios to
 * the reference backend), --json results, --dat gnuplot data (bench/plot.gp);
 * progress on stderr. Exit status: 0, 1 on a checksum mismatch or a failed
 * configuration, 2 on bad usage or input. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <malloc.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvix/error.h"
#include "kvix/event.h"
#include "kvix/index.h"
#include "kvix/stream.h"

#include "kvbench_qcost.h"

#define PROG "kvbench"
#define MAX_LANES 64
#define MAX_RUNS 64
#define MAX_SWEEP 48
#define MAX_CONFIGS 64
#define MAX_THREADCFG 8

enum { RULE_EXACT = 0, RULE_TS = 1, RULE_COUNT };
static const char *const rule_names[RULE_COUNT] = {"exact", "timestamp"};
enum { SEG_W = 0, SEG_Q = 1 };

/* ------------------------------------------------------------------ utils */

static int g_tty;
static double g_load[2]; /* 1-minute load average at the start and at the end */
static int g_perf_fd = -1; /* perf record --control fd: profile only the replays */
static qcost *g_qcost;     /* set only around --query-cost's own replay */

static void perf_ctl(const char *cmd)
{
    if (g_perf_fd >= 0 && write(g_perf_fd, cmd, strlen(cmd)) < 0)
        g_perf_fd = -1;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", PROG);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void warnx_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warnx_(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (g_tty)
        fputs("\r\033[K", stderr);
    fprintf(stderr, "%s: ", PROG);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (g_tty) {
        fputs("\r\033[K" PROG ": ", stderr);
        vfprintf(stderr, fmt, ap);
    }
    va_end(ap);
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p)
        die("out of memory");
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        die("out of memory");
    return p;
}

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t ns_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    if (n <= 0)
        return 0;
    double t[MAX_RUNS];
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

static long rss_now_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static double loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

static long rss_peak_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* ------------------------------------------------------ latency histogram */

/* Nanoseconds: exact below 128, then 64 sub-buckets per power of two
 * (1.6% resolution). */
#define H_LIN 128
#define H_SUB 64
#define H_BUCKETS (H_LIN + 57 * H_SUB)

typedef struct hist {
    uint64_t n, max;
    uint32_t b[H_BUCKETS];
} hist;

static inline unsigned hist_bucket(uint64_t v)
{
    if (v < H_LIN)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= 7 */
    return H_LIN + (e - 7) * H_SUB + (unsigned)((v >> (e - 6)) & (H_SUB - 1));
}

static uint64_t hist_low(unsigned i)
{
    if (i < H_LIN)
        return i;
    unsigned e = (i - H_LIN) / H_SUB + 7, s = (i - H_LIN) % H_SUB;
    return ((uint64_t)1 << e) + ((uint64_t)s << (e - 6));
}

static inline void hist_add(hist *h, uint64_t v)
{
    h->b[hist_bucket(v)]++;
    h->n++;
    if (v > h->max)
        h->max = v;
}

static void hist_merge(hist *dst, const hist *src)
{
    for (unsigned i = 0; i < H_BUCKETS; i++)
        dst->b[i] += src->b[i];
    dst->n += src->n;
    if (src->max > dst->max)
        dst->max = src->max;
}

/* The value below which a fraction q of samples fall: the midpoint of its
 * bucket (exact below 128 ns). */
static double hist_quantile(const hist *h, double q)
{
    if (!h->n)
        return 0;
    uint64_t rank = (uint64_t)ceil(q * (double)h->n);
    if (rank < 1)
        rank = 1;
    uint64_t c = 0;
    for (unsigned i = 0; i < H_BUCKETS; i++) {
        c += h->b[i];
        if (c >= rank) {
            if (i < H_LIN)
                return (double)i;
            double lo = (double)hist_low(i), hi = (double)hist_low(i + 1);
            double mid = (lo + hi) / 2;
            return mid > (double)h->max ? (double)h->max : mid;
        }
    }
    return (double)h->max;
}

/* ------------------------------------------------------------- the log */

typedef struct logdata {
    kvix_event *ev;
    size_t n, cap;
    uint32_t *ops;      /* block-ops of each record */
    double *ts;         /* each record's time: its ts, else the next record's (queries
                           of a request come before its writes), else the last one */
    size_t no_ts;       /* records without ts */
    size_t nwrites, nqueries, rejected;
    uint64_t ops_query, ops_stored, ops_removed, ops_cleared;
    uint64_t ops_total;
    int ts_ok;          /* every record carries ts */
    char name[256];
    char format[16];
} logdata;

static void log_load(logdata *lg, const char *path)
{
    int fd = 0;
    if (strcmp(path, "-") != 0) {
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            die("cannot open %s: %s", path, strerror(errno));
    }
    snprintf(lg->name, sizeof lg->name, "%s", strcmp(path, "-") ? path : "<stdin>");
    kvix_reader *r;
    kvix_err err = {0};
    if (kvix_reader_new(&r, fd, lg->name, KVIX_FMT_AUTO, &err))
        die("%s: %s", lg->name, err.msg);
    kvix_event tmp;
    kvix_event_init(&tmp);
    lg->ts_ok = 1;
    for (;;) {
        int rc = kvix_reader_next(r, &tmp, &err);
        if (rc == KVIX_EOF)
            break;
        if (rc == KVIX_EIO)
            die("%s: %s", lg->name, err.msg);
        if (rc) {
            if (lg->rejected++ < 5)
                warnx_("bad record at %s:%" PRIu64 ": %s", lg->name, kvix_reader_pos(r), err.msg);
            continue;
        }
        if (tmp.type == KVIX_EV_NONE)
            continue;
        if (lg->n == lg->cap) {
            lg->cap = lg->cap ? lg->cap * 2 : 4096;
            lg->ev = xrealloc(lg->ev, lg->cap * sizeof *lg->ev);
        }
        kvix_event *e = &lg->ev[lg->n];
        kvix_event_init(e);
        if (kvix_event_copy(e, &tmp, &err))
            die("%s: %s", lg->name, err.msg);
        if (e->type == KVIX_EV_QUERY)
            lg->nqueries++;
        else
            lg->nwrites++;
        lg->n++;
        if ((lg->n & 0xffff) == 0)
            progress("loading %s: %zu records", lg->name, lg->n);
    }
    snprintf(lg->format, sizeof lg->format, "%s", kvix_format_name(kvix_reader_format(r)));
    kvix_reader_free(r);
    kvix_event_release(&tmp);
    if (fd > 0)
        close(fd);
    if (lg->rejected)
        warnx_("%zu records of %s rejected by the decoder", lg->rejected, lg->name);
    lg->ops = xcalloc(lg->n, sizeof *lg->ops);
    lg->ts = xcalloc(lg->n, sizeof *lg->ts);
    int have = 0;
    double next = 0;
    for (size_t i = lg->n; i-- > 0;) {
        if (lg->ev[i].has_ts) {
            next = lg->ev[i].ts;
            have = 1;
        } else {
            lg->no_ts++;
        }
        lg->ts[i] = next;
    }
    lg->ts_ok = have;
    size_t last = lg->n;
    for (size_t i = 0; i < lg->n; i++)
        if (lg->ev[i].has_ts)
            last = i;
    for (size_t i = last + 1; last < lg->n && i < lg->n; i++)
        lg->ts[i] = lg->ev[last].ts;
}

/* ------------------------------------------------------------ schedules */

typedef struct seg {
    uint32_t start, end; /* into sched.ord */
    int kind;            /* SEG_W / SEG_Q */
    double ts;           /* pacing time (seconds, from the log) */
} seg;

typedef struct sched {
    int rule;
    uint32_t *ord;       /* record indices in replay order */
    size_t n;
    seg *segs;
    size_t nseg;
    /* Writer lanes (for T lanes): each W segment's records regrouped by lane,
     * in log order within a lane: lane_ev[lane_off[s*(T+1)+l] ..
     * lane_off[s*(T+1)+l+1]). */
    unsigned T;
    uint32_t *lane_ev;
    uint32_t *lane_off;
    double ts0, span;
} sched;

static int is_query(const kvix_event *e) { return e->type == KVIX_EV_QUERY; }

static void sched_push_seg(sched *sc, size_t *cap, uint32_t start, uint32_t end, int kind,
                           double ts)
{
    if (start == end)
        return;
    if (sc->nseg == *cap) {
        *cap = *cap ? *cap * 2 : 1024;
        sc->segs = xrealloc(sc->segs, *cap * sizeof *sc->segs);
    }
    sc->segs[sc->nseg++] = (seg){start, end, kind, ts};
}

static void sched_build(sched *sc, const logdata *lg, int rule)
{
    memset(sc, 0, sizeof *sc);
    sc->rule = rule;
    sc->n = lg->n;
    sc->ord = xcalloc(lg->n ? lg->n : 1, sizeof *sc->ord);
    size_t cap = 0;
    if (rule == RULE_EXACT) {
        for (size_t i = 0; i < lg->n; i++)
            sc->ord[i] = (uint32_t)i;
        size_t s = 0;
        while (s < lg->n) {
            int q = is_query(&lg->ev[s]);
            size_t e = s;
            while (e < lg->n && is_query(&lg->ev[e]) == q)
                e++;
            sched_push_seg(sc, &cap, (uint32_t)s, (uint32_t)e, q ? SEG_Q : SEG_W, lg->ts[s]);
            s = e;
        }
    } else {
        /* Group consecutive records of equal time: writes first, then
         * queries. */
        size_t k = 0, s = 0;
        while (s < lg->n) {
            double ts = lg->ts[s];
            size_t e = s + 1;
            while (e < lg->n && lg->ts[e] == ts)
                e++;
            uint32_t w0 = (uint32_t)k;
            for (size_t i = s; i < e; i++)
                if (!is_query(&lg->ev[i]))
                    sc->ord[k++] = (uint32_t)i;
            uint32_t q0 = (uint32_t)k;
            for (size_t i = s; i < e; i++)
                if (is_query(&lg->ev[i]))
                    sc->ord[k++] = (uint32_t)i;
            sched_push_seg(sc, &cap, w0, q0, SEG_W, ts);
            sched_push_seg(sc, &cap, q0, (uint32_t)k, SEG_Q, ts);
            s = e;
        }
    }
    if (sc->nseg) {
        sc->ts0 = sc->segs[0].ts;
        sc->span = sc->segs[sc->nseg - 1].ts - sc->ts0;
    }
}

static unsigned lane_of(const kvix_event *e, unsigned T)
{
    if (T <= 1)
        return 0;
    return (unsigned)(mix64(e->worker * 0x9e3779b97f4a7c15u ^ ((uint64_t)e->dp << 48)) % T);
}

static void sched_lanes(sched *sc, const logdata *lg, unsigned T)
{
    free(sc->lane_ev);
    free(sc->lane_off);
    sc->T = T;
    sc->lane_ev = xcalloc(sc->n, sizeof *sc->lane_ev);
    sc->lane_off = xcalloc(sc->nseg * (T + 1) + 1, sizeof *sc->lane_off);
    uint32_t k = 0;
    for (size_t s = 0; s < sc->nseg; s++) {
        const seg *g = &sc->segs[s];
        uint32_t *off = &sc->lane_off[s * (T + 1)];
        for (unsigned l = 0; l < T; l++) {
            off[l] = k;
            if (g->kind != SEG_W)
                continue;
            for (uint32_t i = g->start; i < g->end; i++)
                if (lane_of(&lg->ev[sc->ord[i]], T) == l)
                    sc->lane_ev[k++] = sc->ord[i];
        }
        off[T] = k;
    }
}

static void sched_free(sched *sc)
{
    free(sc->ord);
    free(sc->segs);
    free(sc->lane_ev);
    free(sc->lane_off);
}

/* ----------------------------------------------------------- checksums */

typedef struct checksum {
    uint64_t pairs;   /* scored (query, worker, dp) */
    uint64_t sum;     /* sum of matched blocks */
    uint64_t hash;    /* sum of a mix of (query, worker, dp, blocks) */
    uint64_t rejects; /* writes the index rejected */
    uint64_t qerrs;   /* queries that failed */
} checksum;

static int checksum_eq(const checksum *a, const checksum *b)
{
    return a->pairs == b->pairs && a->sum == b->sum && a->hash == b->hash &&
           a->rejects == b->rejects && a->qerrs == b->qerrs;
}

/* A few instructions per score, since it runs inside the timed replay: the
 * answer (sorted, so its order is part of it) folded into one word, then
 * mixed with the query's index and added (the sum does not depend on which
 * reader answered what). */
static inline void checksum_answer(checksum *c, uint32_t q, const kvix_answer *ans)
{
    uint64_t acc = ans->nscores, sum = 0;
    for (size_t i = 0; i < ans->nscores; i++) {
        const kvix_score *s = &ans->scores[i];
        acc = acc * 0x100000001b3u + (s->worker << 24 ^ (uint64_t)s->dp << 16 ^ s->blocks);
        sum += s->blocks;
    }
    c->pairs += ans->nscores;
    c->sum += sum;
    c->hash += mix64(acc ^ (uint64_t)q * 0x9e3779b97f4a7c15u);
}

/* ------------------------------------------------------------- replay */

typedef struct __attribute__((aligned(64))) reader_lane {
    hist h;
    checksum ck;
    uint64_t nq, last_ns;
    kvix_answer ans;
    kvix_err err;
} reader_lane;

typedef struct __attribute__((aligned(64))) writer_lane {
    uint64_t applied, rejects;
    kvix_err err;
} writer_lane;

typedef struct replay {
    kvix_index *idx;
    const logdata *lg;
    const sched *sc;
    unsigned T, R;
    int submit;
    int timing;     /* time each query */
    int spin;       /* spin iterations before sleeping */
    double speedup; /* 0: as fast as possible */
    qcost *qc;      /* --query-cost's samples (its own replay only), else NULL */
    _Alignas(64) _Atomic uint32_t seq; /* 1 + the segment in progress; UINT32_MAX = stop */
    _Atomic uint32_t sleepers;
    _Alignas(64) _Atomic uint32_t done;
    _Atomic uint32_t main_waiting;
    _Alignas(64) _Atomic uint32_t qnext;
    _Atomic uint64_t submit_rejects;
    writer_lane wl[MAX_LANES];
    reader_lane rl[MAX_LANES];
    char first_err[KVIX_ERR_MSG_MAX];
    _Atomic int have_err;
} replay;

typedef struct helper {
    replay *rp;
    int writer; /* else reader */
    unsigned id;
    pthread_t th;
} helper;

static long futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void note_err(replay *rp, const kvix_err *err)
{
    int expect = 0;
    if (atomic_compare_exchange_strong(&rp->have_err, &expect, 1))
        snprintf(rp->first_err, sizeof rp->first_err, "%s", err->msg);
}

static void do_writes(replay *rp, size_t s, unsigned l)
{
    const sched *sc = rp->sc;
    const uint32_t *off = &sc->lane_off[s * (sc->T + 1)];
    writer_lane *w = &rp->wl[l];
    for (uint32_t i = off[l]; i < off[l + 1]; i++) {
        const kvix_event *e = &rp->lg->ev[sc->lane_ev[i]];
        if (kvix_index_apply(rp->idx, e, NULL, &w->err)) {
            w->rejects++;
        }
        w->applied++;
    }
}

static void do_queries(replay *rp, const seg *g, unsigned r)
{
    reader_lane *rl = &rp->rl[r];
    const sched *sc = rp->sc;
    for (;;) {
        uint32_t i = atomic_fetch_add_explicit(&rp->qnext, 1, memory_order_relaxed);
        if (i >= g->end)
            break;
        uint32_t q = sc->ord[i];
        const kvix_event *e = &rp->lg->ev[q];
        int rc;
        if (rp->timing) {
            uint64_t t0 = ns_mono();
            rc = kvix_index_query_event(rp->idx, e, &rl->ans, &rl->err);
            uint64_t t1 = ns_mono();
            hist_add(&rl->h, t1 - t0);
            rl->last_ns = t1 - t0;
        } else {
            rc = kvix_index_query_event(rp->idx, e, &rl->ans, &rl->err);
        }
        rl->nq++;
        if (rc) {
            rl->ck.qerrs++;
            note_err(rp, &rl->err);
            continue;
        }
        checksum_answer(&rl->ck, q, &rl->ans);
        if (rp->qc && rp->timing)
            qcost_note(rp->qc, q, &rl->ans, rl->last_ns);
    }
}

/* Which helpers take part in segment s: writer lanes 1.. with work, readers
 * 1.. while there are more queries than readers before them. */
static int helper_takes_part(const replay *rp, size_t s, int writer, unsigned id)
{
    const seg *g = &rp->sc->segs[s];
    if (writer) {
        if (g->kind != SEG_W || rp->submit)
            return 0;
        const uint32_t *off = &rp->sc->lane_off[s * (rp->sc->T + 1)];
        return off[id + 1] > off[id];
    }
    return g->kind == SEG_Q && id < g->end - g->start;
}

static void helper_done(replay *rp)
{
    atomic_fetch_add(&rp->done, 1);
    if (atomic_load(&rp->main_waiting))
        futex(&rp->done, FUTEX_WAKE_PRIVATE, 1);
}

static void *helper_main(void *arg)
{
    helper *h = arg;
    replay *rp = h->rp;
    uint32_t last = 0;
    for (;;) {
        uint32_t v;
        int spins = rp->spin;
        while ((v = atomic_load_explicit(&rp->seq, memory_order_acquire)) == last) {
            if (spins-- > 0) {
                cpu_relax();
                continue;
            }
            atomic_fetch_add(&rp->sleepers, 1);
            futex(&rp->seq, FUTEX_WAIT_PRIVATE, last);
            atomic_fetch_sub(&rp->sleepers, 1);
        }
        last = v;
        if (v == UINT32_MAX)
            break;
        size_t s = v - 1;
        if (!helper_takes_part(rp, s, h->writer, h->id))
            continue;
        if (h->writer)
            do_writes(rp, s, h->id);
        else
            do_queries(rp, &rp->sc->segs[s], h->id);
        helper_done(rp);
    }
    return NULL;
}

static void wait_done(replay *rp, uint32_t need)
{
    int spins = rp->spin;
    uint32_t d;
    while ((d = atomic_load(&rp->done)) < need) {
        if (spins-- > 0) {
            cpu_relax();
            continue;
        }
        atomic_store(&rp->main_waiting, 1);
        d = atomic_load(&rp->done);
        if (d < need)
            futex(&rp->done, FUTEX_WAIT_PRIVATE, d);
        atomic_store(&rp->main_waiting, 0);
    }
}

static void pace_until(double t)
{
    for (;;) {
        double left = t - now_mono();
        if (left <= 0)
            return;
        if (left > 100e-6) {
            struct timespec ts;
            double sl = left - 50e-6;
            ts.tv_sec = (time_t)sl;
            ts.tv_nsec = (long)((sl - (double)ts.tv_sec) * 1e9);
            nanosleep(&ts, NULL);
        } else {
            cpu_relax();
        }
    }
}

static void on_reject(void *ctx, uint64_t tag, const kvix_err *err)
{
    (void)tag;
    replay *rp = ctx;
    atomic_fetch_add(&rp->submit_rejects, 1);
    (void)err;
}

typedef struct run_out {
    double wall, cpu;
    checksum ck;
    hist h;
    uint64_t nq, nw;
    kvix_index_stats st;
    int stats_ok;
    char err[KVIX_ERR_MSG_MAX];
} run_out;

typedef struct bconf {
    char spec[48];
    char label[48];
    kvix_backend backend;
    unsigned jump;
    int binsearch;
} bconf;

/* One replay of sched from an empty index. */
static int replay_run(const logdata *lg, const sched *sc, const bconf *bc, unsigned T,
                      unsigned R, int submit, double speedup, int timing, int spin,
                      int want_stats, run_out *out)
{
    replay *rp = xcalloc(1, sizeof *rp);
    memset(out, 0, sizeof *out);
    rp->lg = lg;
    rp->sc = sc;
    rp->T = T;
    rp->R = R;
    rp->submit = submit;
    rp->timing = timing;
    rp->spin = spin;
    rp->speedup = speedup;
    rp->qc = g_qcost;
    for (unsigned r = 0; r < R; r++)
        kvix_answer_init(&rp->rl[r].ans);
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = bc->backend;
    o.jump = bc->jump;
    o.binsearch = bc->binsearch;
    o.threads = submit ? T : 0;
    o.on_reject = on_reject;
    o.reject_ctx = rp;
    kvix_err err = {0};
    if (kvix_index_new(&rp->idx, &o, &err)) {
        snprintf(out->err, sizeof out->err, "kvix_index_new: %.200s", err.msg);
        free(rp);
        return -1;
    }
    helper hs[2 * MAX_LANES];
    unsigned nh = 0;
    for (unsigned l = 1; l < (submit ? 1 : T); l++)
        hs[nh++] = (helper){rp, 1, l, 0};
    for (unsigned r = 1; r < R; r++)
        hs[nh++] = (helper){rp, 0, r, 0};
    for (unsigned i = 0; i < nh; i++)
        if (pthread_create(&hs[i].th, NULL, helper_main, &hs[i]))
            die("cannot create a thread");

    perf_ctl("enable\n");
    double c0 = now_cpu(), t0 = now_mono();
    for (size_t s = 0; s < sc->nseg; s++) {
        const seg *g = &sc->segs[s];
        if (speedup > 0)
            pace_until(t0 + (g->ts - sc->ts0) / speedup);
        uint32_t need = 0;
        if (g->kind == SEG_W && !submit) {
            const uint32_t *off = &sc->lane_off[s * (T + 1)];
            for (unsigned l = 1; l < T; l++)
                need += off[l + 1] > off[l];
        } else if (g->kind == SEG_Q) {
            uint32_t nq = g->end - g->start;
            need = (nq < R ? nq : R);
            need = need ? need - 1 : 0;
            atomic_store_explicit(&rp->qnext, g->start, memory_order_relaxed);
        }
        if (need) {
            atomic_store_explicit(&rp->done, 0, memory_order_relaxed);
            atomic_store(&rp->seq, (uint32_t)(s + 1));
            if (atomic_load(&rp->sleepers))
                futex(&rp->seq, FUTEX_WAKE_PRIVATE, INT_MAX);
        }
        if (g->kind == SEG_W) {
            if (submit) {
                for (uint32_t i = g->start; i < g->end; i++) {
                    const kvix_event *e = &lg->ev[sc->ord[i]];
                    if (kvix_index_submit(rp->idx, e, sc->ord[i], &rp->wl[0].err))
                        if (!o.threads)
                            rp->wl[0].rejects++;
                    rp->wl[0].applied++;
                }
                kvix_index_sync(rp->idx);
            } else {
                do_writes(rp, s, 0);
            }
        } else {
            do_queries(rp, g, 0);
        }
        if (need)
            wait_done(rp, need);
    }
    double t1 = now_mono(), c1 = now_cpu();
    perf_ctl("disable\n");

    atomic_store(&rp->seq, UINT32_MAX);
    futex(&rp->seq, FUTEX_WAKE_PRIVATE, INT_MAX);
    for (unsigned i = 0; i < nh; i++)
        pthread_join(hs[i].th, NULL);

    out->wall = t1 - t0;
    out->cpu = c1 - c0;
    for (unsigned r = 0; r < R; r++) {
        reader_lane *rl = &rp->rl[r];
        out->ck.pairs += rl->ck.pairs;
        out->ck.sum += rl->ck.sum;
        out->ck.hash += rl->ck.hash;
        out->ck.qerrs += rl->ck.qerrs;
        out->nq += rl->nq;
        hist_merge(&out->h, &rl->h);
        kvix_answer_release(&rl->ans);
    }
    for (unsigned l = 0; l < T; l++) {
        out->ck.rejects += rp->wl[l].rejects;
        out->nw += rp->wl[l].applied;
    }
    if (submit && o.threads)
        out->ck.rejects += atomic_load(&rp->submit_rejects);
    if (atomic_load(&rp->have_err))
        snprintf(out->err, sizeof out->err, "%s", rp->first_err);
    if (want_stats) {
        kvix_index_stats_get(rp->idx, &out->st);
        out->stats_ok = 1;
    }
    kvix_index_free(rp->idx);
    free(rp);
    return 0;
}

/* The sequential replay on the reference backend: the checksum every
 * configuration must reproduce, and the block-ops of each record (query
 * blocks as the index counts them, blocks a cleared event dropped). */
static void sequential(logdata *lg, const sched *sc, checksum *ck, int count_ops)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = KVIX_BACKEND_REFERENCE;
    kvix_index *idx;
    kvix_err err = {0};
    if (kvix_index_new(&idx, &o, &err))
        die("kvix_index_new: %s", err.msg);
    kvix_answer ans;
    kvix_answer_init(&ans);
    memset(ck, 0, sizeof *ck);
    uint64_t nerr = 0;
    for (size_t i = 0; i < sc->n; i++) {
        uint32_t k = sc->ord[i];
        const kvix_event *e = &lg->ev[k];
        if (e->type == KVIX_EV_QUERY) {
            if (kvix_index_query_event(idx, e, &ans, &err)) {
                ck->qerrs++;
                if (nerr++ < 3)
                    warnx_("query %u of the log failed: %s", k, err.msg);
                continue;
            }
            checksum_answer(ck, k, &ans);
            if (count_ops)
                lg->ops[k] = ans.query_blocks;
        } else {
            kvix_apply_result res = {0};
            if (kvix_index_apply(idx, e, &res, &err)) {
                ck->rejects++;
                if (nerr++ < 3)
                    warnx_("record %u of the log rejected by the index: %s", k, err.msg);
            }
            if (count_ops)
                lg->ops[k] = e->type == KVIX_EV_STORED    ? (uint32_t)e->nblocks
                             : e->type == KVIX_EV_REMOVED ? (uint32_t)e->nhashes
                                                          : res.removed;
        }
        if ((i & 0x3fff) == 0)
            progress("sequential %s replay on the reference backend: %zu/%zu",
                     rule_names[sc->rule], i, sc->n);
    }
    kvix_answer_release(&ans);
    kvix_index_free(idx);
    if (count_ops) {
        for (size_t k = 0; k < lg->n; k++) {
            const kvix_event *e = &lg->ev[k];
            switch (e->type) {
            case KVIX_EV_QUERY: lg->ops_query += lg->ops[k]; break;
            case KVIX_EV_STORED: lg->ops_stored += lg->ops[k]; break;
            case KVIX_EV_REMOVED: lg->ops_removed += lg->ops[k]; break;
            default: lg->ops_cleared += lg->ops[k]; break;
            }
        }
        lg->ops_total = lg->ops_query + lg->ops_stored; /* removals count 0, as Dynamo's */
    }
}

/* Without a reference replay: query blocks from the record (local hashes,
 * or whole blocks of tokens at the query's bs), cleared events as 0. */
static void count_ops_unverified(logdata *lg)
{
    for (size_t k = 0; k < lg->n; k++) {
        const kvix_event *e = &lg->ev[k];
        switch (e->type) {
        case KVIX_EV_QUERY:
            lg->ops[k] = (uint32_t)(e->has_tokens ? (e->bs ? e->ntokens / e->bs : 0) : e->nhashes);
            lg->ops_query += lg->ops[k];
            break;
        case KVIX_EV_STORED: lg->ops_stored += lg->ops[k] = (uint32_t)e->nblocks; break;
        case KVIX_EV_REMOVED: lg->ops_removed += lg->ops[k] = (uint32_t)e->nhashes; break;
        default: break;
        }
    }
    lg->ops_total = lg->ops_query + lg->ops_stored;
}

/* ------------------------------------------------- one configuration */

typedef struct sweep_pt {
    double speedup, offered, achieved; /* block-ops/s */
    double p99;                        /* query latency, ns */
} sweep_pt;

typedef struct cfg_result {
    bconf bc;
    int rule;
    unsigned T, R;
    int submit;
    int nruns;
    double wall[MAX_RUNS], cpu[MAX_RUNS];
    double cold_wall[MAX_RUNS]; /* the first replay in a fresh process */
    int ncold;
    double cold_ops_s;
    double p50[MAX_RUNS], p99[MAX_RUNS], p999[MAX_RUNS], max[MAX_RUNS];
    /* medians */
    double m_wall, m_cpu, ops_s, ops_cpu_s, ev_s, q_s, lat50, lat99, lat999, latmax;
    checksum ck;
    int ck_ok;       /* every run matched the sequential checksum */
    int nbad;
    kvix_index_stats st;
    long rss_base_kb, rss_peak_kb;
    int nsweep;
    sweep_pt sweep[MAX_SWEEP];
    double saturation; /* block-ops/s; 0 if not measured */
    int saturated;     /* the sweep found the knee */
    char err[KVIX_ERR_MSG_MAX];
} cfg_result;

typedef struct bench_opts {
    int runs;
    int sweep;
    double sweep_from; /* first offered load, fraction of the ceiling */
    double sweep_step; /* factor between offered loads */
    double threshold;  /* achieved/offered below this: saturated */
    double sweep_budget; /* seconds of paced replay per configuration */
    int spin;
    int timing;
    int fork;
    int verify;
    int warm; /* time a second replay in the process, on a warm heap */
} bench_opts;

/* Run fn(ctx, out) in a child process and copy its out (size bytes) back
 * over a pipe, so each replay has a fresh heap and its own peak RSS; with
 * --no-fork, here. Returns 0, or -1 with msg set when the child failed. */
static int in_child(const bench_opts *bo, void (*fn)(void *ctx, void *out), void *ctx, void *out,
                    size_t size, char *msg, size_t msgsz)
{
    if (!bo->fork) {
        fn(ctx, out);
        return 0;
    }
    int p[2];
    if (pipe(p))
        die("pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        close(p[0]);
        fn(ctx, out);
        const char *b = out;
        size_t left = size;
        while (left) {
            ssize_t w = write(p[1], b, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                _exit(3);
            b += w;
            left -= (size_t)w;
        }
        _exit(0);
    }
    close(p[1]);
    char *b = out;
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(p[0], b + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(p[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (got == size && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    snprintf(msg, msgsz, "replay process %s %d",
             WIFSIGNALED(status) ? "killed by signal" : "exited with",
             WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    return -1;
}

/* Keep freed memory in the heap: the next replay reuses the pages of the
 * last one instead of faulting fresh ones in, as a long-running index
 * whose blocks churn does. */
static void warm_heap(void)
{
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TOP_PAD, 64 << 20);
}

typedef struct once_ctx {
    const logdata *lg;
    const sched *sc;
    const cfg_result *cr;
    const bench_opts *bo;
    int want_stats;
} once_ctx;

typedef struct once_out {
    run_out ro, cold;
    int have_cold;
    int rc;
    long rss_base_kb, rss_peak_kb;
} once_out;

static void once_fn(void *vctx, void *vout)
{
    const once_ctx *c = vctx;
    once_out *o = vout;
    memset(o, 0, sizeof *o);
    o->rss_base_kb = rss_now_kb();
    if (c->bo->warm) {
        warm_heap();
        o->rc = replay_run(c->lg, c->sc, &c->cr->bc, c->cr->T, c->cr->R, c->cr->submit, 0,
                           c->bo->timing, c->bo->spin, 0, &o->cold);
        if (o->rc) {
            o->ro = o->cold;
            return;
        }
        o->have_cold = 1;
    }
    o->rc = replay_run(c->lg, c->sc, &c->cr->bc, c->cr->T, c->cr->R, c->cr->submit, 0,
                       c->bo->timing, c->bo->spin, c->want_stats, &o->ro);
    o->rss_peak_kb = rss_peak_kb();
}

/* One unpaced run of configuration cr (run number i). */
static void config_run(const logdata *lg, const sched *sc, const checksum *ref,
                       const bench_opts *bo, cfg_result *cr, int i)
{
    static once_out o;
    once_ctx ctx = {lg, sc, cr, bo, i == 0};
    progress("%s %s %ux%u%s: run %d/%d", cr->bc.label, rule_names[cr->rule], cr->T, cr->R,
             cr->submit ? " submit" : "", i + 1, bo->runs);
    if (in_child(bo, once_fn, &ctx, &o, sizeof o, cr->err, sizeof cr->err))
        return;
    if (o.rc) {
        snprintf(cr->err, sizeof cr->err, "%s", o.ro.err);
        return;
    }
    const run_out *ro = &o.ro;
    if (cr->nruns == 0) {
        cr->st = ro->st;
        cr->ck = ro->ck;
        cr->ck_ok = 1;
        cr->rss_base_kb = o.rss_base_kb;
        cr->rss_peak_kb = o.rss_peak_kb;
    }
    if (ref && !checksum_eq(&ro->ck, ref)) {
        cr->ck_ok = 0;
        cr->nbad++;
        cr->ck = ro->ck;
    }
    if (ro->err[0] && !cr->err[0])
        snprintf(cr->err, sizeof cr->err, "%s", ro->err);
    if (o.have_cold) {
        if (ref && !checksum_eq(&o.cold.ck, ref)) {
            cr->ck_ok = 0;
            cr->nbad++;
            cr->ck = o.cold.ck;
        }
        cr->cold_wall[cr->ncold++] = o.cold.wall;
    }
    int k = cr->nruns++;
    cr->wall[k] = ro->wall;
    cr->cpu[k] = ro->cpu;
    cr->p50[k] = hist_quantile(&ro->h, 0.50);
    cr->p99[k] = hist_quantile(&ro->h, 0.99);
    cr->p999[k] = hist_quantile(&ro->h, 0.999);
    cr->max[k] = (double)ro->h.max;
}

static void config_finish(const logdata *lg, cfg_result *cr)
{
    if (!cr->nruns)
        return;
    cr->m_wall = median(cr->wall, cr->nruns);
    cr->m_cpu = median(cr->cpu, cr->nruns);
    double ops = (double)lg->ops_total;
    cr->ops_s = ops / cr->m_wall;
    if (cr->ncold)
        cr->cold_ops_s = ops / median(cr->cold_wall, cr->ncold);
    cr->ops_cpu_s = cr->m_cpu > 0 ? ops / cr->m_cpu : 0;
    cr->ev_s = (double)lg->nwrites / cr->m_wall;
    cr->q_s = (double)lg->nqueries / cr->m_wall;
    cr->lat50 = median(cr->p50, cr->nruns);
    cr->lat99 = median(cr->p99, cr->nruns);
    cr->lat999 = median(cr->p999, cr->nruns);
    cr->latmax = median(cr->max, cr->nruns);
}

typedef struct sweep_ctx {
    const logdata *lg;
    const sched *sc;
    const checksum *ref;
    const cfg_result *cr;
    const bench_opts *bo;
} sweep_ctx;

typedef struct sweep_out {
    int n, nbad, saturated;
    double saturation;
    sweep_pt pts[MAX_SWEEP];
} sweep_out;

static int cmp_pt(const void *a, const void *b)
{
    const sweep_pt *x = a, *y = b;
    return x->offered < y->offered ? -1 : x->offered > y->offered;
}

/* Offered load rises from sweep_from x the ceiling by sweep_step a step
 * until two points fall below threshold x offered; when already the first
 * point falls below, it falls instead until one is achieved. The budget of
 * paced time ends the search early. */
static void sweep_fn(void *vctx, void *vout)
{
    const sweep_ctx *c = vctx;
    sweep_out *o = vout;
    memset(o, 0, sizeof *o);
    const cfg_result *cr = c->cr;
    const bench_opts *bo = c->bo;
    double ops = (double)c->lg->ops_total, span = c->sc->span;
    double f = bo->sweep_from, spent = 0;
    int below = 0, down = 0;
    run_out *ro = xcalloc(1, sizeof *ro);
    if (bo->warm) {
        warm_heap();
        if (replay_run(c->lg, c->sc, &cr->bc, cr->T, cr->R, cr->submit, 0, bo->timing, bo->spin,
                       0, ro) == 0 &&
            c->ref && !checksum_eq(&ro->ck, c->ref))
            o->nbad++;
    }
    while (o->n < MAX_SWEEP) {
        double offered = f * cr->ops_s;
        double speedup = offered * span / ops;
        if (spent + span / speedup > bo->sweep_budget && o->n > 0)
            break;
        progress("%s %s %ux%u: sweep at %.3g M block-ops/s", cr->bc.label, rule_names[cr->rule],
                 cr->T, cr->R, offered / 1e6);
        if (replay_run(c->lg, c->sc, &cr->bc, cr->T, cr->R, cr->submit, speedup, bo->timing,
                       bo->spin, 0, ro))
            break;
        if (c->ref && !checksum_eq(&ro->ck, c->ref))
            o->nbad++;
        spent += ro->wall;
        sweep_pt *p = &o->pts[o->n++];
        p->speedup = speedup;
        p->offered = ops * speedup / span;
        p->achieved = ops / ro->wall;
        p->p99 = hist_quantile(&ro->h, 0.99);
        int pass = p->achieved >= bo->threshold * p->offered;
        if (o->n == 1 && !pass)
            down = 1;
        if (down) {
            if (pass) {
                o->saturation = p->offered;
                o->saturated = 1;
                break;
            }
            f /= bo->sweep_step;
            continue;
        }
        if (pass) {
            if (!below)
                o->saturation = p->offered;
        } else {
            o->saturated = 1;
            if (++below >= 2)
                break;
        }
        f *= bo->sweep_step;
    }
    qsort(o->pts, (size_t)o->n, sizeof *o->pts, cmp_pt);
    free(ro);
}

static void config_sweep(const logdata *lg, const sched *sc, const checksum *ref,
                         const bench_opts *bo, cfg_result *cr)
{
    if (!cr->nruns || !lg->ts_ok || sc->span <= 0)
        return;
    static sweep_out o;
    sweep_ctx ctx = {lg, sc, ref, cr, bo};
    char msg[KVIX_ERR_MSG_MAX];
    if (in_child(bo, sweep_fn, &ctx, &o, sizeof o, msg, sizeof msg)) {
        snprintf(cr->err, sizeof cr->err, "sweep: %.200s", msg);
        cr->ck_ok = 0;
        return;
    }
    cr->nsweep = o.n;
    memcpy(cr->sweep, o.pts, sizeof o.pts);
    cr->saturation = o.saturation;
    cr->saturated = o.saturated;
    if (o.nbad) {
        cr->ck_ok = 0;
        cr->nbad += o.nbad;
    }
}

/* --------------------------------------------------------------- output */

static const cfg_result *find_ref(const cfg_result *cr, int n, const cfg_result *like)
{
    for (int i = 0; i < n; i++)
        if (cr[i].bc.backend == KVIX_BACKEND_REFERENCE && cr[i].rule == like->rule &&
            cr[i].T == like->T && cr[i].R == like->R && cr[i].submit == like->submit)
            return &cr[i];
    return NULL;
}

static void fmt_ratio(char *buf, size_t n, double a, double b)
{
    if (b > 0 && a > 0)
        snprintf(buf, n, "%.2f", a / b);
    else
        snprintf(buf, n, "-");
}

static void print_tables(const logdata *lg, const cfg_result *cr, int n, const checksum *refs,
                         const bench_opts *bo)
{
    printf("Input: `%s` (%s): %zu records, %zu writes, %zu queries; %" PRIu64
           " block-ops as Dynamo counts them (%" PRIu64 " query blocks + %" PRIu64
           " stored; %" PRIu64 " removed and %" PRIu64 " cleared count 0).",
           lg->name, lg->format, lg->n, lg->nwrites, lg->nqueries, lg->ops_total, lg->ops_query,
           lg->ops_stored, lg->ops_removed, lg->ops_cleared);
    if (bo->verify && lg->nqueries)
        printf(" An answer scores %.1f (worker, dp) pairs on average (exact rule).",
               (double)refs[RULE_EXACT].pairs / (double)lg->nqueries);
    printf("\n\n");
    for (int ru = 0; ru < RULE_COUNT; ru++) {
        int any = 0;
        for (int i = 0; i < n; i++)
            any |= cr[i].rule == ru;
        if (any && bo->verify)
            printf("Sequential checksum, rule %s (reference backend): %" PRIu64
                   " scored pairs, score sum %" PRIu64 ", answer hash %016" PRIx64
                   ", %" PRIu64 " rejected writes.\n",
                   rule_names[ru], refs[ru].pairs, refs[ru].sum, refs[ru].hash, refs[ru].rejects);
    }
    printf("\nMachine load (1-minute load average, %ld cores): %.2f at the start, %.2f at the "
           "end.\n\n",
           sysconf(_SC_NPROCESSORS_ONLN), g_load[0], g_load[1]);
    /* One table per (rule, threads, mode), in first-appearance order. */
    int done[MAX_CONFIGS * RULE_COUNT * MAX_THREADCFG] = {0};
    for (int i = 0; i < n; i++) {
        if (done[i])
            continue;
        const cfg_result *a = &cr[i];
        const cfg_result *ref = find_ref(cr, n, a);
        printf("Rule **%s**, %u writer%s x %u reader%s%s, median of %d runs "
               "(ratios: to the reference backend):\n\n",
               rule_names[a->rule], a->T, a->T == 1 ? "" : "s", a->R, a->R == 1 ? "" : "s",
               a->submit ? " (kvix_index_submit pool)" : "", bo->runs);
        printf("| backend | M block-ops/s | x ref | M block-ops/cpu-s | cold M block-ops/s "
               "| events/s | queries/s | p50 ns | p99 ns | p99.9 ns | max ns | index MiB | B/(worker,block) "
               "| peak RSS MiB | saturation M ops/s | x ref | checksum |\n");
        printf("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
        for (int j = i; j < n; j++) {
            const cfg_result *c = &cr[j];
            if (c->rule != a->rule || c->T != a->T || c->R != a->R || c->submit != a->submit)
                continue;
            done[j] = 1;
            if (c->err[0] && !c->nruns) {
                printf("| %s | error: %s |%s\n", c->bc.label, c->err,
                       " - | - | - | - | - | - | - | - | - | - | - | - | - | - | **ERROR** |");
                continue;
            }
            char r1[16], r2[16], sat[32];
            fmt_ratio(r1, sizeof r1, c->ops_s, ref ? ref->ops_s : 0);
            fmt_ratio(r2, sizeof r2, c->saturation, ref ? ref->saturation : 0);
            if (c->saturation > 0)
                snprintf(sat, sizeof sat, "%s%.2f", c->saturated ? "" : ">", c->saturation / 1e6);
            else
                snprintf(sat, sizeof sat, "-");
            double bpb = c->st.blocks ? (double)c->st.bytes / (double)c->st.blocks : 0;
            char cold[32];
            if (c->cold_ops_s > 0)
                snprintf(cold, sizeof cold, "%.2f", c->cold_ops_s / 1e6);
            else
                snprintf(cold, sizeof cold, "-");
            printf("| %s | %.2f | %s | %.2f | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f "
                   "| %.1f | %.1f | %s | %s | %s |\n",
                   c->bc.label, c->ops_s / 1e6, r1, c->ops_cpu_s / 1e6, cold, c->ev_s, c->q_s,
                   c->lat50,
                   c->lat99, c->lat999, c->latmax, (double)c->st.bytes / 1048576.0, bpb,
                   (double)(c->rss_peak_kb - c->rss_base_kb) / 1024.0, sat, r2,
                   !bo->verify ? "unverified" : c->ck_ok ? "ok" : "**MISMATCH**");
        }
        printf("\n");
    }
}

static json_t *checksum_json(const checksum *c)
{
    char h[20];
    snprintf(h, sizeof h, "%016" PRIx64, c->hash);
    return json_pack("{s:I,s:I,s:s,s:I,s:I}", "pairs", (json_int_t)c->pairs, "score_sum",
                     (json_int_t)c->sum, "hash", h, "rejected_writes", (json_int_t)c->rejects,
                     "failed_queries", (json_int_t)c->qerrs);
}

static json_t *darr(const double *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_real(v[i]));
    return a;
}

static void write_json(const char *path, const char *cmdline, const logdata *lg,
                       const cfg_result *cr, int n, const checksum *refs, const bench_opts *bo)
{
    struct utsname u;
    uname(&u);
    json_t *root = json_object();
    json_object_set_new(root, "tool", json_string(PROG));
    json_object_set_new(root, "command", json_string(cmdline));
    json_object_set_new(root, "machine",
                        json_pack("{s:i,s:s,s:s,s:[f,f]}", "cores",
                                  (int)sysconf(_SC_NPROCESSORS_ONLN), "kernel", u.release, "arch",
                                  u.machine, "loadavg_start_end", g_load[0], g_load[1]));
    json_object_set_new(
        root, "input",
        json_pack("{s:s,s:s,s:I,s:I,s:I,s:{s:I,s:I,s:I,s:I,s:I}}", "name", lg->name, "format",
                  lg->format, "records", (json_int_t)lg->n, "writes", (json_int_t)lg->nwrites,
                  "queries", (json_int_t)lg->nqueries, "block_ops", "total",
                  (json_int_t)lg->ops_total, "query", (json_int_t)lg->ops_query, "stored",
                  (json_int_t)lg->ops_stored, "removed", (json_int_t)lg->ops_removed, "cleared",
                  (json_int_t)lg->ops_cleared));
    if (bo->verify && lg->nqueries)
        json_object_set_new(json_object_get(root, "input"), "mean_scores_per_query",
                            json_real((double)refs[RULE_EXACT].pairs / (double)lg->nqueries));
    json_object_set_new(root, "runs", json_integer(bo->runs));
    json_object_set_new(root, "threshold", json_real(bo->threshold));
    json_t *seqs = json_object();
    for (int ru = 0; ru < RULE_COUNT; ru++)
        json_object_set_new(seqs, rule_names[ru], checksum_json(&refs[ru]));
    json_object_set_new(root, "sequential_checksum", seqs);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        const cfg_result *c = &cr[i];
        const cfg_result *ref = find_ref(cr, n, c);
        json_t *o = json_object();
        json_object_set_new(o, "backend", json_string(kvix_backend_name(c->bc.backend)));
        json_object_set_new(o, "label", json_string(c->bc.label));
        json_object_set_new(o, "jump", json_integer(c->bc.jump));
        json_object_set_new(o, "binsearch", json_boolean(c->bc.binsearch));
        json_object_set_new(o, "rule", json_string(rule_names[c->rule]));
        json_object_set_new(o, "writers", json_integer(c->T));
        json_object_set_new(o, "readers", json_integer(c->R));
        json_object_set_new(o, "writer_mode", json_string(c->submit ? "submit" : "apply"));
        json_object_set_new(o, "runs", json_integer(c->nruns));
        json_object_set_new(o, "wall_s", darr(c->wall, c->nruns));
        json_object_set_new(o, "cpu_s", darr(c->cpu, c->nruns));
        json_object_set_new(o, "cold_wall_s", darr(c->cold_wall, c->ncold));
        json_object_set_new(o, "cold_block_ops_per_s",
                            c->cold_ops_s > 0 ? json_real(c->cold_ops_s) : json_null());
        json_object_set_new(
            o, "median",
            json_pack("{s:f,s:f,s:f,s:f,s:f,s:f}", "wall_s", c->m_wall, "cpu_s", c->m_cpu,
                      "block_ops_per_s", c->ops_s, "block_ops_per_cpu_s", c->ops_cpu_s,
                      "events_per_s", c->ev_s, "queries_per_s", c->q_s));
        json_object_set_new(o, "ratio_to_reference",
                            ref && ref->ops_s > 0 ? json_real(c->ops_s / ref->ops_s) : json_null());
        json_object_set_new(o, "query_latency_ns",
                            json_pack("{s:f,s:f,s:f,s:f}", "p50", c->lat50, "p99", c->lat99,
                                      "p99_9", c->lat999, "max", c->latmax));
        json_object_set_new(o, "memory",
                            json_pack("{s:I,s:I,s:I,s:I,s:I,s:f,s:I}", "index_bytes",
                                      (json_int_t)c->st.bytes, "backend_bytes",
                                      (json_int_t)c->st.backend_bytes, "blocks", (json_int_t)c->st.blocks,
                                      "unique_blocks", (json_int_t)c->st.unique_blocks, "workers",
                                      (json_int_t)c->st.workers, "bytes_per_worker_block",
                                      c->st.blocks ? (double)c->st.bytes / (double)c->st.blocks
                                                   : 0.0,
                                      "peak_rss_growth_kb",
                                      (json_int_t)(c->rss_peak_kb - c->rss_base_kb)));
        json_object_set_new(o, "checksum", checksum_json(&c->ck));
        json_object_set_new(o, "checksum_ok", json_boolean(c->ck_ok));
        json_t *sw = json_array();
        for (int k = 0; k < c->nsweep; k++)
            json_array_append_new(sw, json_pack("{s:f,s:f,s:f,s:f}", "speedup",
                                                c->sweep[k].speedup, "offered",
                                                c->sweep[k].offered, "achieved",
                                                c->sweep[k].achieved, "p99_ns", c->sweep[k].p99));
        json_object_set_new(o, "sweep", sw);
        json_object_set_new(o, "saturation_block_ops_per_s",
                            c->saturation > 0 ? json_real(c->saturation) : json_null());
        json_object_set_new(o, "saturation_found", json_boolean(c->saturated));
        if (c->err[0])
            json_object_set_new(o, "error", json_string(c->err));
        json_array_append_new(arr, o);
    }
    json_object_set_new(root, "configs", arr);
    if (json_dump_file(root, path, JSON_INDENT(1) | JSON_REAL_PRECISION(6)))
        die("cannot write %s", path);
    json_decref(root);
}

/* Plot data: one gnuplot data block per swept configuration, its title on
 * its first line (title columnheader(1)). */
static void write_dat(const char *path, const cfg_result *cr, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot write %s: %s", path, strerror(errno));
    int blocks = 0;
    for (int i = 0; i < n; i++) {
        const cfg_result *c = &cr[i];
        if (!c->nsweep)
            continue;
        fprintf(f, "%s\"%s (%s, %ux%u)\"\n", blocks ? "\n\n" : "", c->bc.label,
                rule_names[c->rule], c->T, c->R);
        for (int k = 0; k < c->nsweep; k++)
            fprintf(f, "%.6g %.6g\n", c->sweep[k].offered / 1e6, c->sweep[k].achieved / 1e6);
        blocks++;
    }
    if (fclose(f))
        die("cannot write %s", path);
}

/* One more replay of each configuration of the first group, in this
 * process, sampling every query (kvbench_qcost.h). Returns 1 when a replay
 * failed or its answers differ from the sequential replay. */
static int query_cost(const char *path, const logdata *lg, sched *sc, const cfg_result *cr, int n,
                      const checksum *refs, const bench_opts *bo)
{
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot write %s: %s", path, strerror(errno));
    static run_out ro;
    int bad = 0;
    sched_lanes(&sc[cr[0].rule], lg, cr[0].T);
    for (int b = 0; b < n; b++) {
        const cfg_result *c = &cr[b];
        qcost qc = {xcalloc(lg->n, sizeof *qc.v), xcalloc(lg->n, 1), lg->n};
        progress("%s: query cost", c->bc.label);
        g_qcost = &qc;
        int rc = replay_run(lg, &sc[c->rule], &c->bc, c->T, c->R, c->submit, 0, 1, bo->spin, 0,
                            &ro);
        g_qcost = NULL;
        if (rc || ro.err[0] || (refs && !checksum_eq(&ro.ck, &refs[c->rule]))) {
            warnx_("ERROR: %s: the query-cost replay %s", c->bc.label,
                   rc || ro.err[0] ? ro.err : "answered differently from the sequential replay");
            bad = 1;
        } else {
            qcost_write(f, &qc, c->bc.label, b == 0);
        }
        free(qc.v);
        free(qc.seen);
    }
    if (fclose(f))
        die("cannot write %s", path);
    return bad;
}

/* ---------------------------------------------------------------- main */

static int parse_backend(const char *s, bconf *b)
{
    memset(b, 0, sizeof *b);
    snprintf(b->spec, sizeof b->spec, "%s", s);
    char name[32];
    const char *colon = strchr(s, ':');
    size_t len = colon ? (size_t)(colon - s) : strlen(s);
    if (len >= sizeof name)
        return -1;
    memcpy(name, s, len);
    name[len] = '\0';
    if (kvix_backend_parse(name, &b->backend))
        return -1;
    b->binsearch = 1;
    if (colon) {
        if (b->backend != KVIX_BACKEND_POSITIONAL)
            return -1;
        char *end;
        unsigned long j = strtoul(colon + 1, &end, 10);
        if (end == colon + 1 || j > 1u << 20)
            return -1;
        b->jump = (unsigned)j;
        if (*end == ':') {
            if (strcmp(end + 1, "nobs") == 0 || strcmp(end + 1, "scan") == 0)
                b->binsearch = 0;
            else if (strcmp(end + 1, "bs") != 0)
                return -1;
        } else if (*end) {
            return -1;
        }
    }
    if (b->backend == KVIX_BACKEND_POSITIONAL) {
        if (b->jump)
            snprintf(b->label, sizeof b->label, "positional j=%u %s", b->jump,
                     b->binsearch ? "bsearch" : "scan");
        else
            snprintf(b->label, sizeof b->label, "positional (default%s)",
                     b->binsearch ? "" : ", scan");
    } else {
        snprintf(b->label, sizeof b->label, "%s", kvix_backend_name(b->backend));
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [options] LOG\n"
            "replay an event+query log (NDJSON or msgpack; - for stdin) against index backends\n"
            "  -b, --backends LIST   comma-separated: reference, radix, positional,\n"
            "                        positional:JUMP, positional:JUMP:scan (no binary search)\n"
            "                        (default reference,radix,positional)\n"
            "  -t, --threads LIST    writers x readers, comma-separated (default 1x1)\n"
            "  -T, --writers N       writer threads (same as -t Nx<readers>)\n"
            "  -R, --readers N       reader threads\n"
            "      --rule RULE       exact, timestamp or both (default both)\n"
            "      --submit          writes through kvix_index_submit (library writer pool)\n"
            "  -n, --runs N          unpaced runs per configuration; medians (default 5)\n"
            "      --no-sweep        only the as-fast-as-possible runs\n"
            "      --sweep-from F    first offered load, fraction of the ceiling (default 0.25)\n"
            "      --sweep-step F    factor between offered loads (default 1.19)\n"
            "      --sweep-budget S  seconds of paced replay per configuration (default 20)\n"
            "      --threshold F     saturated when achieved < F x offered (default 0.95)\n"
            "      --sweep-only LIST sweep only these backends (default: all)\n"
            "      --other-backends LIST  backends for every (threads, rule) group after\n"
            "                        the first (default: the same as -b)\n"
            "      --cold            time only the first replay of each process (default: a\n"
            "                        second replay on a warm heap, the first as \"cold\")\n"
            "      --no-verify       no sequential reference replay (profiling): no checksum\n"
            "                        check; query block-ops counted from the records\n"
            "      --spin N          spin iterations before a thread sleeps (default 2000)\n"
            "      --no-timing       do not time each query\n"
            "      --no-fork         run every configuration in this process\n"
            "      --json FILE       write results as JSON\n"
            "      --dat FILE        write the sweep as gnuplot data\n"
            "      --query-cost FILE one more replay per backend (in this process, after\n"
            "                        the timed runs) writing each query's latency grouped\n"
            "                        by scored workers and matched blocks, as gnuplot data\n"
            "      --perf-ctl FD     write enable/disable around each replay to FD\n"
            "                        (perf record -D -1 --control fd:FD)\n"
            "  -q, --quiet           no progress on stderr\n"
            "  -h, --help\n");
}

int main(int argc, char **argv)
{
    const char *backends = "reference,radix,positional";
    const char *threads = NULL;
    const char *json_path = NULL, *dat_path = NULL, *sweep_only = NULL, *more_bes = NULL;
    const char *qcost_path = NULL;
    unsigned wT = 0, wR = 0;
    int rules = 3, submit = 0, quiet = 0;
    bench_opts bo = {.runs = 5, .sweep = 1, .sweep_from = 0.25, .sweep_step = 1.19,
                     .threshold = 0.95, .sweep_budget = 20, .spin = 2000, .timing = 1,
                     .fork = 1, .verify = 1, .warm = 1};
    enum { O_RULE = 256, O_SUBMIT, O_NOSWEEP, O_FROM, O_STEP, O_BUDGET, O_THRESH, O_SPIN,
           O_NOTIME, O_NOFORK, O_JSON, O_DAT, O_SWONLY, O_MOREBES, O_NOVERIFY, O_COLD, O_PERF,
           O_QCOST };
    static const struct option lo[] = {
        {"backends", required_argument, 0, 'b'}, {"threads", required_argument, 0, 't'},
        {"writers", required_argument, 0, 'T'},  {"readers", required_argument, 0, 'R'},
        {"rule", required_argument, 0, O_RULE},  {"submit", no_argument, 0, O_SUBMIT},
        {"runs", required_argument, 0, 'n'},     {"no-sweep", no_argument, 0, O_NOSWEEP},
        {"sweep-from", required_argument, 0, O_FROM},
        {"sweep-step", required_argument, 0, O_STEP},
        {"sweep-budget", required_argument, 0, O_BUDGET},
        {"threshold", required_argument, 0, O_THRESH},
        {"sweep-only", required_argument, 0, O_SWONLY},
        {"other-backends", required_argument, 0, O_MOREBES},
        {"no-verify", no_argument, 0, O_NOVERIFY},
        {"cold", no_argument, 0, O_COLD},
        {"perf-ctl", required_argument, 0, O_PERF},
        {"query-cost", required_argument, 0, O_QCOST},
        {"spin", required_argument, 0, O_SPIN},  {"no-timing", no_argument, 0, O_NOTIME},
        {"no-fork", no_argument, 0, O_NOFORK},   {"json", required_argument, 0, O_JSON},
        {"dat", required_argument, 0, O_DAT},    {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "b:t:T:R:n:qh", lo, NULL)) != -1) {
        switch (opt) {
        case 'b': backends = optarg; break;
        case 't': threads = optarg; break;
        case 'T': wT = (unsigned)atoi(optarg); break;
        case 'R': wR = (unsigned)atoi(optarg); break;
        case 'n': bo.runs = atoi(optarg); break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        case O_RULE:
            if (!strcmp(optarg, "exact")) rules = 1;
            else if (!strcmp(optarg, "timestamp")) rules = 2;
            else if (!strcmp(optarg, "both")) rules = 3;
            else die("unknown rule %s (exact, timestamp, both)", optarg);
            break;
        case O_SUBMIT: submit = 1; break;
        case O_NOSWEEP: bo.sweep = 0; break;
        case O_FROM: bo.sweep_from = atof(optarg); break;
        case O_STEP: bo.sweep_step = atof(optarg); break;
        case O_BUDGET: bo.sweep_budget = atof(optarg); break;
        case O_THRESH: bo.threshold = atof(optarg); break;
        case O_SWONLY: sweep_only = optarg; break;
        case O_MOREBES: more_bes = optarg; break;
        case O_NOVERIFY: bo.verify = 0; break;
        case O_COLD: bo.warm = 0; break;
        case O_PERF: g_perf_fd = atoi(optarg); break;
        case O_SPIN: bo.spin = atoi(optarg); break;
        case O_NOTIME: bo.timing = 0; break;
        case O_NOFORK: bo.fork = 0; break;
        case O_JSON: json_path = optarg; break;
        case O_DAT: dat_path = optarg; break;
        case O_QCOST: qcost_path = optarg; break;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    if (bo.runs < 1 || bo.runs > MAX_RUNS)
        die("--runs must be 1..%d", MAX_RUNS);
    if (bo.sweep_step <= 1.0 || bo.sweep_from <= 0 || bo.threshold <= 0 || bo.threshold > 1)
        die("bad sweep parameters");
    g_tty = !quiet && isatty(2);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

    /* Thread configurations. */
    unsigned tc[MAX_THREADCFG][2];
    int ntc = 0;
    if (threads) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", threads);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            unsigned a, b;
            if (sscanf(tok, "%ux%u", &a, &b) != 2 || !a || !b || a > MAX_LANES || b > MAX_LANES ||
                ntc == MAX_THREADCFG)
                die("bad thread configuration %s (WRITERSxREADERS, at most %d each)", tok,
                    MAX_LANES);
            tc[ntc][0] = a;
            tc[ntc][1] = b;
            ntc++;
        }
    } else {
        tc[0][0] = wT ? wT : 1;
        tc[0][1] = wR ? wR : 1;
        if (tc[0][0] > MAX_LANES || tc[0][1] > MAX_LANES)
            die("at most %d writers and readers", MAX_LANES);
        ntc = 1;
    }

    /* Backends: bcs[0] for the first (threads, rule) group, bcs[1] for the
     * others. */
    bconf bcs[2][MAX_CONFIGS];
    int nbc[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", k && more_bes ? more_bes : backends);
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            if (nbc[k] == MAX_CONFIGS)
                die("too many backends");
            if (parse_backend(tok, &bcs[k][nbc[k]]))
                die("bad backend %s", tok);
            nbc[k]++;
        }
    }

    char cmdline[1024] = "";
    for (int i = 0; i < argc; i++) {
        size_t l = strlen(cmdline);
        snprintf(cmdline + l, sizeof cmdline - l, "%s%s", i ? " " : "", argv[i]);
    }

    g_load[0] = loadavg();
    logdata lg;
    memset(&lg, 0, sizeof lg);
    double tl = now_mono();
    log_load(&lg, argv[optind]);
    if (!lg.n)
        die("%s: no records", lg.name);
    if (!lg.nqueries)
        warnx_("%s holds no queries: only write throughput is measured", lg.name);
    if (!lg.ts_ok && bo.sweep) {
        warnx_("%s: no record carries a ts: no sweep", lg.name);
        bo.sweep = 0;
    } else if (lg.no_ts) {
        warnx_("%zu records carry no ts: each takes the next record's", lg.no_ts);
    }
    warnx_("loaded %zu records (%zu writes, %zu queries) from %s in %.1f s", lg.n, lg.nwrites,
           lg.nqueries, lg.name, now_mono() - tl);

    sched sc[RULE_COUNT];
    checksum refs[RULE_COUNT];
    memset(refs, 0, sizeof refs);
    for (int ru = 0; ru < RULE_COUNT; ru++) {
        sched_build(&sc[ru], &lg, ru);
        /* The exact rule's sequential replay also counts block-ops. */
        if (bo.verify && ((rules & (1 << ru)) || ru == RULE_EXACT))
            sequential(&lg, &sc[ru], &refs[ru], ru == RULE_EXACT);
    }
    if (!bo.verify)
        count_ops_unverified(&lg);
    warnx_("%" PRIu64 " block-ops; %zu segments (exact), %zu (timestamp); span %.0f s", lg.ops_total,
           sc[RULE_EXACT].nseg, sc[RULE_TS].nseg, sc[RULE_EXACT].span);
    if (refs[RULE_EXACT].rejects)
        warnx_("the index rejects %" PRIu64 " writes of the log (counted in the checksum)",
               refs[RULE_EXACT].rejects);

    cfg_result *cr = xcalloc((size_t)MAX_CONFIGS * RULE_COUNT * MAX_THREADCFG, sizeof *cr);
    int ncr = 0, bad = 0, group = 0;
    for (int t = 0; t < ntc; t++) {
        for (int ru = 0; ru < RULE_COUNT; ru++) {
            if (!(rules & (1 << ru)))
                continue;
            sched_lanes(&sc[ru], &lg, tc[t][0]);
            const bconf *bl = bcs[group > 0];
            const checksum *ref = bo.verify ? &refs[ru] : NULL;
            cfg_result *grp = &cr[ncr];
            int ng = nbc[group > 0];
            group++;
            for (int b = 0; b < ng; b++) {
                cfg_result *c = &grp[b];
                memset(c, 0, sizeof *c);
                c->bc = bl[b];
                c->rule = ru;
                c->T = tc[t][0];
                c->R = tc[t][1];
                c->submit = submit;
            }
            ncr += ng;
            /* Runs interleaved across backends, so a change of machine load
             * hits them all alike. */
            for (int i = 0; i < bo.runs; i++)
                for (int b = 0; b < ng; b++)
                    if (!grp[b].err[0] || grp[b].nruns)
                        config_run(&lg, &sc[ru], ref, &bo, &grp[b], i);
            for (int b = 0; b < ng; b++) {
                cfg_result *c = &grp[b];
                config_finish(&lg, c);
                int sw = bo.sweep;
                if (sweep_only) {
                    char buf[1024];
                    int hit = 0;
                    snprintf(buf, sizeof buf, "%s", sweep_only);
                    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
                         tok = strtok_r(NULL, ",", &save))
                        hit |= !strcmp(tok, bl[b].spec);
                    sw = sw && hit;
                }
                if (sw)
                    config_sweep(&lg, &sc[ru], ref, &bo, c);
                if (c->err[0] && !c->nruns) {
                    bad = 1;
                    warnx_("ERROR: %s, rule %s, %ux%u: %s", c->bc.label, rule_names[ru], c->T,
                           c->R, c->err);
                } else if (!c->ck_ok) {
                    bad = 1;
                    warnx_("CHECKSUM MISMATCH: %s, rule %s, %ux%u (%d runs of %d): %" PRIu64
                           " pairs, sum %" PRIu64 ", hash %016" PRIx64 ", %" PRIu64
                           " rejects, %" PRIu64 " failed queries (sequential: %" PRIu64
                           ", %" PRIu64 ", %016" PRIx64 ", %" PRIu64 ", %" PRIu64 ")%s%s",
                           c->bc.label, rule_names[ru], c->T, c->R, c->nbad, c->nruns + c->nsweep,
                           c->ck.pairs, c->ck.sum, c->ck.hash, c->ck.rejects, c->ck.qerrs,
                           refs[ru].pairs, refs[ru].sum, refs[ru].hash, refs[ru].rejects,
                           refs[ru].qerrs, c->err[0] ? ": " : "", c->err);
                } else if (!g_tty) {
                    warnx_("%s, rule %s, %ux%u: %.2f M block-ops/s, p99 %.0f ns%s", c->bc.label,
                           rule_names[ru], c->T, c->R, c->ops_s / 1e6, c->lat99,
                           c->nsweep ? ", swept" : "");
                }
            }
        }
    }
    if (qcost_path && ncr)
        bad |= query_cost(qcost_path, &lg, sc, cr, nbc[0], bo.verify ? refs : NULL, &bo);
    if (g_tty)
        fputs("\r\033[K", stderr);
    g_load[1] = loadavg();

    print_tables(&lg, cr, ncr, refs, &bo);
    if (json_path)
        write_json(json_path, cmdline, &lg, cr, ncr, refs, &bo);
    if (dat_path)
        write_dat(dat_path, cr, ncr);
    if (fflush(stdout) || ferror(stdout))
        die("cannot write stdout");

    for (int ru = 0; ru < RULE_COUNT; ru++)
        sched_free(&sc[ru]);
    for (size_t i = 0; i < lg.n; i++)
        kvix_event_release(&lg.ev[i]);
    free(lg.ev);
    free(lg.ops);
    free(lg.ts);
    free(cr);
    if (bad)
        warnx_("FAILED: a configuration failed or its answers differ from the sequential replay");
    return bad ? 1 : 0;
}
