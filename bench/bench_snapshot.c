/* Snapshot save and load at fleet scale, beside their baseline.
 *
 *   bench_snapshot -t TRACE [-n ENTRIES] [-w WORKERS] [-c CAPACITY] [-r RUNS]
 *                  [-d DIR] [-b BACKEND] [-T THREADS] [-K COPIES] [-k FILE] [-B] [-S]
 *
 * Builds a fleet-shaped index: the Mooncake trace TRACE played as copies of
 * itself side by side (Dynamo's duplicate_hash_space, kvreplay --mooncake
 * --copies: disjoint hash ids and worker ranges), each copy WORKERS workers
 * (default 16) with prefix caches of CAPACITY blocks (default 16384),
 * random routing; copies are added until the index holds ENTRIES (worker,
 * block) entries (default 10 million; -K: exactly COPIES copies). Their
 * events are applied as they
 * come (kvix_index_apply), so the index is what kvindex would hold.
 * Then, RUNS times each (default 3), medians:
 *   save         kvix_snapshot_save (the live walk, encode, write, fsync, rename)
 *   stall        a save while a writer thread applies more copies' events at
 *                full speed: the longest any writer was held back
 *                (kvix_walk_stats.hold_max), and the writer's own slowest
 *                event during saves and outside them
 *   open+verify  kvix_snapshot_open (mmap, checksum, every record decoded and checked)
 *   load         kvix_snapshot_load into a fresh index, and on THREADS threads
 *                (kvix_snapshot_apply_threads; default 0: one per core)
 * and the same operations as they were before format version 3, in the same
 * process on the same index: a version 1 file (40 bytes a block), a save
 * with every writer held (kvix_index_quiet_begin) and a load that hands each
 * record to kvix_index_load (unless -B). -S: file sizes only (no timing).
 * With -k the version 3 snapshot is kept as FILE. Prints markdown on
 * stdout; progress on stderr. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kvix/snapshot.h"
#include "logio.h"
#include "mooncake.h"
#include "snapshot_int.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what, const kvix_err *err)
{
    fprintf(stderr, "bench_snapshot: %s: %s\n", what, err ? err->msg : strerror(errno));
    exit(1);
}

static kvix_backend backend = KVIX_BACKEND_POSITIONAL;

static kvix_index *mk(void)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = backend;
    kvix_index *idx;
    kvix_err err;
    if (kvix_index_new(&idx, &o, &err))
        die("index", &err);
    return idx;
}

/* ---- the fleet ------------------------------------------------------------ */

typedef struct trace {
    kvix_mooncake_req *r;
    size_t n;
} trace;

static void read_trace(trace *t, const char *path)
{
    kvix_err err;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die(path, NULL);
    kvix_logio *lio;
    kvix_mooncake_trace *mt;
    if (kvix_logio_open(&lio, fd, path, &err) ||
        kvix_mooncake_trace_new(&mt, kvix_logio_fd(lio), &err))
        die(path, &err);
    size_t cap = 0;
    t->n = 0;
    t->r = NULL;
    for (;;) {
        if (t->n == cap) {
            cap = cap ? 2 * cap : 4096;
            t->r = realloc(t->r, cap * sizeof *t->r);
            if (!t->r)
                die("out of memory", NULL);
        }
        kvix_mooncake_req_init(&t->r[t->n]);
        int rc = kvix_mooncake_trace_next(mt, &t->r[t->n], &err);
        if (rc == KVIX_EOF) {
            kvix_mooncake_req_release(&t->r[t->n]);
            break;
        }
        if (rc)
            die(path, &err);
        t->n++;
    }
    kvix_mooncake_trace_free(mt);
    kvix_logio_close(lio, NULL);
}

/* Copy k of the trace: its hash ids moved past the others', its workers
 * k * W .. (k + 1) * W - 1. */
#define COPY_SPAN (UINT32_C(1) << 20) /* the conversation trace's ids are below 2^18 */

typedef struct player {
    kvix_index *idx;
    uint64_t worker0;
    int64_t held; /* entries added less removed */
    double lat_max; /* with timing: the slowest event */
    int timing, *saving;
    double lat_in, lat_out; /* the slowest during saves, outside them */
    kvix_err err;
} player;

static int play_event(void *ctx, const kvix_event *ev)
{
    player *p = ctx;
    kvix_event e = *ev; /* a shallow copy: only its worker changes */
    e.worker += p->worker0;
    kvix_apply_result r;
    double t0 = p->timing ? now() : 0;
    int during = p->timing ? __atomic_load_n(p->saving, __ATOMIC_ACQUIRE) : 0;
    if (kvix_index_apply(p->idx, &e, &r, &p->err))
        return 1;
    if (p->timing) {
        double t = now() - t0;
        if (during && __atomic_load_n(p->saving, __ATOMIC_ACQUIRE)) {
            if (t > p->lat_in)
                p->lat_in = t;
        } else if (t > p->lat_out) {
            p->lat_out = t;
        }
    }
    p->held += (int64_t)r.stored - (int64_t)r.removed;
    return 0;
}

static uint32_t workers = 16, capacity = 16384;

static void play_copy(const trace *t, unsigned k, player *p)
{
    kvix_mooncake_opts o;
    kvix_mooncake_opts_init(&o);
    o.workers = workers;
    o.capacity = capacity;
    o.seed = k;
    o.queries = 0;
    o.model = "llama";
    kvix_mooncake *m;
    if (kvix_mooncake_new(&m, &o, &p->err))
        die("mooncake", &p->err);
    p->worker0 = (uint64_t)k * workers;
    kvix_mooncake_req r;
    kvix_mooncake_req_init(&r);
    for (size_t i = 0; i < t->n; i++) {
        const kvix_mooncake_req *q = &t->r[i];
        if (q->nids > r.cap) {
            r.ids = realloc(r.ids, q->nids * sizeof *r.ids);
            r.cap = q->nids;
        }
        r.timestamp_ms = q->timestamp_ms;
        r.input_length = q->input_length;
        r.output_length = q->output_length;
        r.nids = q->nids;
        for (size_t j = 0; j < q->nids; j++)
            r.ids[j] = q->ids[j] + k * COPY_SPAN;
        if (kvix_mooncake_step(m, &r, i, play_event, p, &p->err))
            die("replaying the fleet", &p->err);
    }
    kvix_mooncake_req_release(&r);
    kvix_mooncake_free(m);
}

/* Copies until the index holds entries, or exactly `copies` when not 0. */
static unsigned build(kvix_index *idx, const trace *t, size_t entries, unsigned copies)
{
    player p = {.idx = idx};
    unsigned k = 0;
    while (copies ? k < copies : (size_t)p.held < entries) {
        play_copy(t, k++, &p);
        if (k % 16 == 0)
            fprintf(stderr, "bench_snapshot: %u copies, %" PRId64 " entries\n", k, p.held);
    }
    return k;
}

/* ---- a save beside a writer ------------------------------------------------- */

typedef struct feeder {
    const trace *t;
    player p;
    unsigned next_copy;
    int stop, saving;
} feeder;

#define FEED_COPIES 8 /* at most, a run: the index grows by as many copies */

static void *feed_main(void *arg)
{
    feeder *f = arg;
    for (int n = 0; n < FEED_COPIES && !__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE); n++)
        play_copy(f->t, f->next_copy++, &f->p);
    return NULL;
}

/* ---- the baseline: what version 1 did ------------------------------------------ */

typedef struct v1ctx {
    kvix_snapshot_writer *w;
    kvix_err *err;
    int rc;
} v1ctx;

static int v1_visit(void *ctx, const char *model, const char *tenant, uint32_t bs,
                    uint64_t worker, uint32_t dp, int has_eid, uint64_t last_eid,
                    const kvix_block_info *blocks, size_t n)
{
    v1ctx *c = ctx;
    c->rc = kvix_snapshot_writer_add(c->w, model, tenant, bs, worker, dp, has_eid, last_eid,
                                     blocks, n, c->err);
    return c->rc != 0;
}

/* A version 1 file, every writer held throughout (as kvindex saved). */
static void save_v1(kvix_index *idx, const char *path, kvix_snapshot_info *info)
{
    kvix_err err;
    v1ctx c = {NULL, &err, 0};
    if (kvix_snapshot_writer_open(&c.w, path, &err))
        die("save v1", &err);
    kvix__snap_writer_legacy(c.w);
    kvix_index_quiet_begin(idx);
    int stop = kvix_index_foreach(idx, v1_visit, &c);
    kvix_index_quiet_end(idx);
    if (stop || c.rc)
        die("save v1", &err);
    if (kvix_snapshot_writer_commit(c.w, info, &err))
        die("save v1", &err);
}

/* Each record handed to kvix_index_load (kvix_snapshot_apply before). */
static void load_v1(kvix_index *idx, const char *path)
{
    kvix_err err;
    kvix_snapshot *s;
    if (kvix_snapshot_open(&s, path, &err))
        die("open v1", &err);
    kvix_snapshot_group g;
    int rc;
    while ((rc = kvix_snapshot_next(s, &g, &err)) == KVIX_OK) {
        if (g.worker == UINT64_MAX && g.n == 0 && !g.has_eid)
            continue;
        if (kvix_index_load(idx, g.model, g.tenant, g.bs, g.worker, g.dp, g.blocks, g.n, &err) ||
            (g.has_eid &&
             kvix_index_set_eid(idx, g.model, g.tenant, g.bs, g.worker, g.dp, g.eid, &err)))
            die("load v1", &err);
    }
    if (rc != KVIX_EOF)
        die("load v1", &err);
    kvix_snapshot_close(s);
}

/* ---- main ---------------------------------------------------------------------- */

static const cli_tool tool = {.name = "bench_snapshot"}; /* messages only */

#define ROWS 12

int main(int argc, char **argv)
{
    cli_init(&tool);
    size_t entries = 10000000;
    int runs = 3, baseline = 1, sizes_only = 0;
    unsigned threads = 0, force_copies = 0;
    const char *dir = "/tmp", *keep = NULL, *trace_path = NULL;
    int c;
    while ((c = getopt(argc, argv, "n:w:c:r:d:b:k:t:T:K:BS")) != -1) {
        switch (c) {
        case 'n': entries = cli_parse_uint(optarg, 1, UINT32_MAX, "-n"); break;
        case 'w': workers = (uint32_t)cli_parse_uint(optarg, 1, 65536, "-w"); break;
        case 'c': capacity = (uint32_t)cli_parse_uint(optarg, 1, 1u << 26, "-c"); break;
        case 'r': runs = (int)cli_parse_uint(optarg, 1, 101, "-r"); break;
        case 'd': dir = optarg; break;
        case 'k': keep = optarg; break;
        case 't': trace_path = optarg; break;
        case 'T': threads = (unsigned)cli_parse_uint(optarg, 0, 64, "-T"); break;
        case 'K': force_copies = (unsigned)cli_parse_uint(optarg, 1, 4000, "-K"); break;
        case 'B': baseline = 0; break;
        case 'S': sizes_only = 1; break;
        case 'b':
            if (kvix_backend_parse(optarg, &backend)) {
                fprintf(stderr, "bench_snapshot: unknown backend %s\n", optarg);
                return 2;
            }
            break;
        default:
            fprintf(stderr, "usage: bench_snapshot -t TRACE [-n ENTRIES] [-w WORKERS] [-c CAPACITY] "
                            "[-r RUNS] [-d DIR] [-b BACKEND] [-T THREADS] [-K COPIES] [-k FILE] [-B] [-S]\n");
            return 2;
        }
    }
    if (!trace_path) {
        fprintf(stderr, "bench_snapshot: -t TRACE is needed (a Mooncake trace)\n");
        return 2;
    }
    char p3[4096], p1[4096];
    snprintf(p3, sizeof p3, "%s/bench-%ld.kvix", dir, (long)getpid());
    snprintf(p1, sizeof p1, "%s/bench-%ld-v1.kvix", dir, (long)getpid());
    trace t;
    read_trace(&t, trace_path);

    fprintf(stderr, "bench_snapshot: building a fleet of %zu entries (%s, %u workers a copy)\n",
            entries, kvix_backend_name(backend), workers);
    double t0 = now();
    kvix_index *idx = mk();
    unsigned copies = build(idx, &t, entries, force_copies);
    kvix_index_stats st;
    kvix_index_stats_get(idx, &st);
    fprintf(stderr, "bench_snapshot: built in %.1f s: %zu entries, %zu unique, %zu workers, %.0f MiB\n",
            now() - t0, st.blocks, st.unique_blocks, st.workers, (double)st.bytes / 1048576);
    kvix_err err;
    kvix_snapshot_info i3, i1;
    if (kvix_snapshot_save(idx, p3, &i3, &err))
        die("save", &err);
    if (baseline || sizes_only)
        save_v1(idx, p1, &i1);
    double N = (double)st.blocks;
    printf("%zu (worker, block) entries: %u workers (%u copies of %u), caches of %u blocks, "
           "%zu unique blocks, %s backend, index %.0f MiB (%.1f bytes an entry).\n\n",
           st.blocks, copies * workers, copies, workers, capacity, st.unique_blocks,
           kvix_backend_name(backend), (double)st.bytes / 1048576, (double)st.bytes / N);
    printf("| file | bytes | bytes an entry |\n|---|---|---|\n");
    printf("| version 3 | %" PRIu64 " | %.2f |\n", i3.bytes, (double)i3.bytes / N);
    if (baseline || sizes_only)
        printf("| version 1 (baseline) | %" PRIu64 " | %.2f |\n", i1.bytes, (double)i1.bytes / N);
    if (sizes_only) {
        if (!keep || rename(p3, keep) != 0)
            unlink(p3);
        unlink(p1);
        kvix_index_free(idx);
        return 0;
    }

    double v[ROWS][101], w[ROWS][101];
    enum { SAVE, SAVE1, STALL, LAT_IN, LAT_OUT, OPEN, OPEN1, LOAD, LOADT, LOAD1, STALL1, STALLC };
    memset(v, 0, sizeof v);
    memset(w, 0, sizeof w);
    double c0;
    for (int i = 0; i < runs; i++) {
        fprintf(stderr, "bench_snapshot: save %d/%d\n", i + 1, runs);
        t0 = now(), c0 = cpu();
        if (kvix_snapshot_save(idx, p3, &i3, &err))
            die("save", &err);
        v[SAVE][i] = now() - t0, w[SAVE][i] = cpu() - c0;
        if (baseline) {
            t0 = now(), c0 = cpu();
            save_v1(idx, p1, &i1);
            v[SAVE1][i] = now() - t0, w[SAVE1][i] = cpu() - c0;
        }
    }
    /* a writer at full speed beside the saves: more copies, more workers */
    for (int i = 0; i < runs; i++) {
        fprintf(stderr, "bench_snapshot: save beside a writer %d/%d\n", i + 1, runs);
        feeder f = {.t = &t, .next_copy = copies + (unsigned)i * 1000};
        f.p.idx = idx;
        f.p.timing = 1;
        f.p.saving = &f.saving;
        pthread_t th;
        if (pthread_create(&th, NULL, feed_main, &f))
            die("thread", NULL);
        struct timespec warm = {0, 200000000};
        nanosleep(&warm, NULL); /* the writer well under way (a timing, not a sync) */
        __atomic_store_n(&f.saving, 1, __ATOMIC_RELEASE);
        if (kvix_snapshot_save(idx, p3, &i3, &err))
            die("save", &err);
        __atomic_store_n(&f.saving, 0, __ATOMIC_RELEASE);
        v[STALL][i] = i3.walk.hold_max;
        v[STALLC][i] = i3.walk.hold_cpu_max;
        if (baseline) {
            /* before: the save held every writer from its start to its end */
            __atomic_store_n(&f.saving, 1, __ATOMIC_RELEASE);
            t0 = now();
            save_v1(idx, p1, &i1);
            v[STALL1][i] = now() - t0;
            __atomic_store_n(&f.saving, 0, __ATOMIC_RELEASE);
        }
        nanosleep(&warm, NULL);
        __atomic_store_n(&f.stop, 1, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
        v[LAT_IN][i] = f.p.lat_in;
        v[LAT_OUT][i] = f.p.lat_out;
    }
    kvix_index_stats_get(idx, &st);
    size_t n_saved = st.blocks;
    kvix_index_free(idx);
    /* the files of the last save: the index as it stood then */
    kvix_snapshot_info li;
    {
        kvix_snapshot *s;
        if (kvix_snapshot_open(&s, p3, &err))
            die("open", &err);
        kvix_snapshot_get_info(s, &li);
        kvix_snapshot_close(s);
    }
    double L = (double)li.blocks;
    for (int i = 0; i < runs; i++) {
        fprintf(stderr, "bench_snapshot: open+verify, load %d/%d\n", i + 1, runs);
        kvix_snapshot *s;
        t0 = now(), c0 = cpu();
        if (kvix_snapshot_open(&s, p3, &err))
            die("open", &err);
        v[OPEN][i] = now() - t0, w[OPEN][i] = cpu() - c0;
        kvix_snapshot_close(s);
        kvix_index *fresh = mk();
        t0 = now(), c0 = cpu();
        if (kvix_snapshot_load(fresh, p3, NULL, &err))
            die("load", &err);
        v[LOAD][i] = now() - t0, w[LOAD][i] = cpu() - c0;
        kvix_index_stats ls;
        kvix_index_stats_get(fresh, &ls);
        if (ls.blocks != li.blocks) {
            fprintf(stderr, "bench_snapshot: loaded %zu entries of %" PRIu64 "\n", ls.blocks,
                    li.blocks);
            return 1;
        }
        kvix_index_free(fresh);
        fresh = mk();
        t0 = now(), c0 = cpu();
        if (kvix_snapshot_open(&s, p3, &err) ||
            kvix_snapshot_apply_threads(s, fresh, threads, &err))
            die("load on threads", &err);
        kvix_snapshot_close(s);
        v[LOADT][i] = now() - t0, w[LOADT][i] = cpu() - c0;
        kvix_index_free(fresh);
        if (baseline) {
            t0 = now(), c0 = cpu();
            if (kvix_snapshot_open(&s, p1, &err))
                die("open v1", &err);
            v[OPEN1][i] = now() - t0, w[OPEN1][i] = cpu() - c0;
            kvix_snapshot_close(s);
            fresh = mk();
            t0 = now(), c0 = cpu();
            load_v1(fresh, p1);
            v[LOAD1][i] = now() - t0, w[LOAD1][i] = cpu() - c0;
            kvix_index_free(fresh);
        }
    }
    if (!keep || rename(p3, keep) != 0)
        unlink(p3);
    unlink(p1);
    double m[ROWS], x[ROWS];
    for (int r = 0; r < ROWS; r++) {
        m[r] = median(v[r], runs);
        x[r] = median(w[r], runs);
    }
    printf("\n| operation | wall s | cpu s | M entries/s | M entries/cpu-s | baseline wall s | "
           "baseline cpu s | baseline M entries/cpu-s | ratio (cpu) |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
#define ROW(name, a, b, na, nb)                                                                   \
    do {                                                                                          \
        printf("| %s | %.3f | %.3f | %.2f | %.2f | ", name, m[a], x[a], (na) / m[a] / 1e6,         \
               (na) / x[a] / 1e6);                                                                \
        if (baseline && (b) >= 0)                                                                 \
            printf("%.3f | %.3f | %.2f | %.2fx |\n", m[b], x[b], (nb) / x[b] / 1e6,              \
                   ((na) / x[a]) / ((nb) / x[b]));                                                \
        else                                                                                      \
            printf("- | - | - | - |\n");                                                          \
    } while (0)
    double L1 = (double)i1.blocks;
    ROW("save (live walk, encode, write, fsync, rename)", SAVE, SAVE1, N, N);
    ROW("open + verify (mmap, checksum, every record)", OPEN, OPEN1, L, L1);
    ROW("load, one thread (open + verify + apply)", LOAD, LOAD1, L, L1);
    char name[64];
    snprintf(name, sizeof name, "load, %u threads",
             threads ? threads : (unsigned)sysconf(_SC_NPROCESSORS_ONLN));
    ROW(name, LOADT, -1, L, L);
    printf("\nWriters during a save (a writer thread applying more copies' events at full "
           "speed): the longest one was held back %.2f ms (kvix_walk_stats.hold_max), of which "
           "the save's own work %.2f ms (hold_cpu_max: the rest its thread waited for a core); "
           "the baseline held every writer for the whole save: %.3f s. The writer's slowest "
           "event: %.2f ms during saves, %.2f ms outside them. Medians of %d runs; the loads "
           "read the last save's file (%.0f entries; the index had %zu after the writer's "
           "copies).\n",
           m[STALL] * 1e3, m[STALLC] * 1e3, baseline ? m[STALL1] : 0.0, m[LAT_IN] * 1e3,
           m[LAT_OUT] * 1e3, runs, L, n_saved);
    for (size_t i = 0; i < t.n; i++)
        kvix_mooncake_req_release(&t.r[i]);
    free(t.r);
    return 0;
}
