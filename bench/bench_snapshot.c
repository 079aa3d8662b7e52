/* Snapshot save and load rates at scale.
 *
 *   bench_snapshot [-n ENTRIES] [-r RUNS] [-d DIR] [-b BACKEND] [-k FILE]
 *
 * Builds an index of ENTRIES (worker, block) entries (default 10 million:
 * 20 workers, 4 distinct prompt forests shared by 5 workers each, mixed
 * tiers, some orphans), then times, RUNS times each, median reported:
 *   save         kvix_snapshot_save into DIR (index walk, encode, write, fsync, rename)
 *   open+verify  kvix_snapshot_open (mmap, checksum, full structural check): kvdump --check
 *   load         kvix_snapshot_load into a fresh index (open + verify + kvix_index_load),
 *                and the same on one thread per core
 *   replay       the baseline: the same state rebuilt by applying its events
 *                (kvix_snapshot_group_events + kvix_index_apply, no parsing)
 * With -k the snapshot is kept as FILE (for timing kvdump on it).
 * Prints a markdown table on stdout; progress on stderr. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kvix/snapshot.h"
#include "../tests/unit/snapshot_gen.h"

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

static kvix_index *mk(kvix_backend be)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = be;
    kvix_index *idx;
    kvix_err err;
    if (kvix_index_new(&idx, &o, &err))
        die("index", &err);
    return idx;
}

#define WORKERS 20
#define FORESTS 4

static kvix_index *build(kvix_backend be, size_t entries)
{
    kvix_index *idx = mk(be);
    size_t per = entries / WORKERS;
    kvix_block_info *forest[FORESTS];
    size_t nf[FORESTS];
    for (int f = 0; f < FORESTS; f++) {
        forest[f] = sg_group(1000 + (uint64_t)f, per + per / 50, f & 1);
        if (!forest[f])
            die("out of memory", NULL);
        /* one forest in four lost some parents before their children */
        nf[f] = f == 3 ? sg_orphan(forest[f], per + per / 50, 40) : per + per / 50;
        if (nf[f] > per)
            nf[f] = per; /* the first per entries: still sorted, parents first */
    }
    kvix_err err;
    for (uint64_t w = 0; w < WORKERS; w++) {
        int f = (int)(w % FORESTS);
        if (kvix_index_load(idx, "llama", "default", 16, w, 0, forest[f], nf[f], &err))
            die("kvix_index_load", &err);
        if (kvix_index_set_eid(idx, "llama", "default", 16, w, 0, w * 1000, &err))
            die("set_eid", &err);
    }
    for (int f = 0; f < FORESTS; f++)
        free(forest[f]);
    return idx;
}

typedef struct replay_ctx {
    kvix_index *idx;
    kvix_err *err;
} replay_ctx;

static int replay_one(void *ctx, const kvix_event *ev)
{
    replay_ctx *r = ctx;
    int rc = kvix_index_apply(r->idx, ev, NULL, r->err);
    return rc == KVIX_EPARENT ? 0 : rc; /* orphans cannot be replayed: skipped */
}

/* The baseline: rebuild from events (what a restart without a snapshot does,
 * minus reading and parsing the event log). */
static double replay(kvix_snapshot *s, kvix_backend be, size_t *blocks, double *cpu_out)
{
    kvix_index *idx = mk(be);
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_err err;
    replay_ctx r = {idx, &err};
    kvix_snapshot_group g;
    kvix_snapshot_rewind(s);
    double t0 = now(), c0 = cpu();
    while (kvix_snapshot_next(s, &g, &err) == KVIX_OK)
        if (kvix_snapshot_group_events(&g, &ev, replay_one, &r, NULL, &err))
            die("replay", &err);
    double t = now() - t0;
    *cpu_out = cpu() - c0;
    kvix_index_stats st;
    kvix_index_stats_get(idx, &st);
    *blocks = st.blocks;
    kvix_event_release(&ev);
    kvix_index_free(idx);
    return t;
}

static const cli_tool tool = {.name = "bench_snapshot"}; /* messages only */

int main(int argc, char **argv)
{
    cli_init(&tool);
    size_t entries = 10000000;
    int runs = 3;
    const char *dir = "/tmp", *keep = NULL;
    kvix_backend be = KVIX_BACKEND_POSITIONAL;
    int c;
    while ((c = getopt(argc, argv, "n:r:d:b:k:")) != -1) {
        switch (c) {
        case 'n': entries = cli_parse_uint(optarg, 1, UINT32_MAX, "-n"); break;
        case 'r': runs = (int)cli_parse_uint(optarg, 1, 101, "-r"); break;
        case 'd': dir = optarg; break;
        case 'k': keep = optarg; break;
        case 'b':
            if (kvix_backend_parse(optarg, &be)) {
                fprintf(stderr, "bench_snapshot: unknown backend %s\n", optarg);
                return 2;
            }
            break;
        default:
            fprintf(stderr, "usage: bench_snapshot [-n ENTRIES] [-r RUNS] [-d DIR] [-b BACKEND] [-k FILE]\n");
            return 2;
        }
    }
    if (runs < 1 || runs > 100 || entries < WORKERS)
        return 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/bench-%ld.kvix", dir, (long)getpid());

    fprintf(stderr, "bench_snapshot: building an index of %zu entries (%s)\n", entries,
            kvix_backend_name(be));
    double t0 = now();
    kvix_index *idx = build(be, entries);
    kvix_index_stats st;
    kvix_index_stats_get(idx, &st);
    fprintf(stderr, "bench_snapshot: built in %.2f s: %zu entries, %zu unique, %.0f MiB\n",
            now() - t0, st.blocks, st.unique_blocks, (double)st.bytes / 1048576);

    double *ts = calloc((size_t)runs, sizeof *ts), *to = calloc((size_t)runs, sizeof *to),
           *tl = calloc((size_t)runs, sizeof *tl), *tr = calloc((size_t)runs, sizeof *tr),
           *t1 = calloc((size_t)runs, sizeof *t1), *c1 = calloc((size_t)runs, sizeof *c1);
    double *cs = calloc((size_t)runs, sizeof *cs), *co = calloc((size_t)runs, sizeof *co),
           *cl = calloc((size_t)runs, sizeof *cl), *cr = calloc((size_t)runs, sizeof *cr);
    double c0;
    kvix_err err;
    kvix_snapshot_info info;
    for (int i = 0; i < runs; i++) {
        fprintf(stderr, "bench_snapshot: save %d/%d\n", i + 1, runs);
        t0 = now(), c0 = cpu();
        if (kvix_snapshot_save(idx, path, &info, &err))
            die("save", &err);
        ts[i] = now() - t0, cs[i] = cpu() - c0;
    }
    size_t n = st.blocks;
    kvix_index_free(idx);
    for (int i = 0; i < runs; i++) {
        fprintf(stderr, "bench_snapshot: open+verify, load %d/%d\n", i + 1, runs);
        kvix_snapshot *s;
        t0 = now(), c0 = cpu();
        if (kvix_snapshot_open(&s, path, &err))
            die("open", &err);
        to[i] = now() - t0, co[i] = cpu() - c0;
        kvix_snapshot_close(s);
        kvix_index *fresh = mk(be);
        t0 = now(), c0 = cpu();
        if (kvix_snapshot_load(fresh, path, NULL, &err))
            die("load", &err);
        tl[i] = now() - t0, cl[i] = cpu() - c0;
        kvix_index_stats ls;
        kvix_index_stats_get(fresh, &ls);
        if (ls.blocks != n) {
            fprintf(stderr, "bench_snapshot: loaded %zu entries of %zu\n", ls.blocks, n);
            return 1;
        }
        kvix_index_free(fresh);
        fresh = mk(be);
        t0 = now(), c0 = cpu();
        if (kvix_snapshot_open(&s, path, &err) || kvix_snapshot_apply_threads(s, fresh, 0, &err))
            die("load on one thread per core", &err);
        kvix_snapshot_close(s);
        t1[i] = now() - t0, c1[i] = cpu() - c0;
        kvix_index_free(fresh);
    }
    size_t replayed = 0;
    {
        kvix_snapshot *s;
        if (kvix_snapshot_open(&s, path, &err))
            die("open", &err);
        for (int i = 0; i < runs; i++) {
            fprintf(stderr, "bench_snapshot: replay %d/%d\n", i + 1, runs);
            tr[i] = replay(s, be, &replayed, &cr[i]);
        }
        kvix_snapshot_close(s);
    }
    if (!keep || rename(path, keep) != 0)
        unlink(path);
    double ms = median(ts, runs), mo = median(to, runs), ml = median(tl, runs),
           mr = median(tr, runs);
    double xs = median(cs, runs), xo = median(co, runs), xl = median(cl, runs),
           xr = median(cr, runs), m1 = median(t1, runs), x1 = median(c1, runs);
    double mb = (double)info.bytes / 1e6, N = (double)n;
    printf("| operation | wall s | M entries/s | MB/s | cpu s | M entries/cpu-s |\n"
           "|---|---|---|---|---|---|\n");
    printf("| save (walk, encode, write, fsync, rename) | %.3f | %.2f | %.0f | %.3f | %.2f |\n", ms,
           N / ms / 1e6, mb / ms, xs, N / xs / 1e6);
    printf("| open + verify (mmap, checksum, structure) | %.3f | %.2f | %.0f | %.3f | %.2f |\n", mo,
           N / mo / 1e6, mb / mo, xo, N / xo / 1e6);
    printf("| load (open + verify + kvix_index_load) | %.3f | %.2f | %.0f | %.3f | %.2f |\n", ml,
           N / ml / 1e6, mb / ml, xl, N / xl / 1e6);
    printf("| load on one thread per core (kvix_snapshot_apply_threads) | %.3f | %.2f | %.0f | %.3f | %.2f |\n", m1, N / m1 / 1e6,
           mb / m1, x1, N / x1 / 1e6);
    printf("| baseline: replay as events (kvix_index_apply) | %.3f | %.2f | - | %.3f | %.2f |\n", mr,
           (double)replayed / mr / 1e6, xr, (double)replayed / xr / 1e6);
    printf("\n%zu entries (%zu unique blocks, %d workers), file %.1f MB (%.1f bytes/entry), "
           "%s backend, index %.0f MiB; median of %d runs. Load rate / replay rate: %.2fx wall, "
           "%.2fx cpu (replay skips the %zu entries below an evicted parent, which events "
           "cannot restore).\n",
           n, st.unique_blocks, WORKERS, mb, (double)info.bytes / N, kvix_backend_name(be),
           (double)st.bytes / 1048576, runs, (N / ml) / ((double)replayed / mr),
           (N / xl) / ((double)replayed / xr), n - replayed);
    free(t1);
    free(c1);
    free(cs);
    free(co);
    free(cl);
    free(cr);
    free(ts);
    free(to);
    free(tl);
    free(tr);
    return 0;
}
