/* kvbench's parts (bench/kvbench*.c): the types they share and what each
 * part offers the others. kvbench.c: options and main; kvbench_utils.c:
 * messages, allocation, clocks, the latency histogram; kvbench_log.c: the
 * log in memory and its schedules; kvbench_replay.c: one replay of a
 * schedule (checked answers, timing) and the sequential reference;
 * kvbench_config.c: the runs and the sweep of one configuration, each in a
 * child process; kvbench_report.c: tables, JSON and plot data. */
#ifndef KVBENCH_H
#define KVBENCH_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "kvix/error.h"
#include "kvix/event.h"
#include "kvix/index.h"

#define PROG "kvbench"
#define MAX_LANES 64
#define MAX_RUNS 64
#define MAX_SWEEP 48
#define MAX_CONFIGS 64
#define MAX_THREADCFG 8

enum { RULE_EXACT = 0, RULE_TS = 1, RULE_COUNT };
extern const char *const rule_names[RULE_COUNT];
enum { SEG_W = 0, SEG_Q = 1 };

extern int g_tty;
extern double g_load[2]; /* 1-minute load average at the start and at the end */
extern int g_perf_fd;    /* perf record --control fd: profile only the replays */
extern uint32_t g_top;   /* --top: every index answers its best g_top (0: all) */
extern uint32_t g_removals; /* --removals: each index's record of removals */

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

static inline void hist_add(hist *h, uint64_t v)
{
    h->b[hist_bucket(v)]++;
    h->n++;
    if (v > h->max)
        h->max = v;
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

/* ----------------------------------------------------------- checksums */

typedef struct checksum {
    uint64_t pairs;   /* scored (query, worker, dp) */
    uint64_t sum;     /* sum of matched blocks */
    uint64_t hash;    /* sum of a mix of (query, worker, dp, blocks) */
    uint64_t rejects; /* writes the index rejected */
    uint64_t qerrs;   /* queries that failed */
} checksum;

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

/* kvbench_utils.c */
void perf_ctl(const char *cmd);
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void warnx_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *xcalloc(size_t n, size_t sz);
void *xrealloc(void *p, size_t n);
double now_mono(void);
double now_cpu(void);
double median(const double *v, int n);
long rss_now_kb(void);
double loadavg(void);
long rss_peak_kb(void);
void hist_merge(hist *dst, const hist *src);
double hist_quantile(const hist *h, double q);

/* kvbench_log.c */
void log_load(logdata *lg, const char *path);
void sched_build(sched *sc, const logdata *lg, int rule);
void sched_lanes(sched *sc, const logdata *lg, unsigned T);
void sched_free(sched *sc);

/* kvbench_replay.c */
int checksum_eq(const checksum *a, const checksum *b);
int replay_run(const logdata *lg, const sched *sc, const bconf *bc, unsigned T,
               unsigned R, int submit, double speedup, int timing, int spin,
               int want_stats, run_out *out);
void sequential(logdata *lg, const sched *sc, checksum *ck, int count_ops);
void count_ops_unverified(logdata *lg);
int query_cost(const char *path, const logdata *lg, sched *sc, const cfg_result *cr, int n,
               const checksum *refs, const bench_opts *bo);

/* kvbench_config.c */
void config_run(const logdata *lg, const sched *sc, const checksum *ref,
                const bench_opts *bo, cfg_result *cr, int i);
void config_finish(const logdata *lg, cfg_result *cr);
void config_sweep(const logdata *lg, const sched *sc, const checksum *ref,
                  const bench_opts *bo, cfg_result *cr);

/* kvbench_report.c */
void print_tables(const logdata *lg, const cfg_result *cr, int n, const checksum *refs,
                  const bench_opts *bo);
void write_json(const char *path, const char *cmdline, const logdata *lg,
                const cfg_result *cr, int n, const checksum *refs, const bench_opts *bo);
void write_dat(const char *path, const cfg_result *cr, int n);

#endif
