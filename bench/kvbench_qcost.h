/* kvbench --query-cost: each query's latency with its scored workers and its
 * matched blocks (the answer's longest match), grouped by powers of two of
 * both, written as gnuplot data (bench/plot_fleet.gp). Included by kvbench_replay.c
 * only; it has a replay of its own (in the parent process, after the timed
 * runs), so the timed runs never record a sample. */
#ifndef KVBENCH_QCOST_H
#define KVBENCH_QCOST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct qsample {
    uint32_t scored;  /* scores in the answer */
    uint32_t blocks;  /* its longest match */
    uint64_t ns;      /* the query's latency */
} qsample;

/* Indexed by the query's record number: each record is queried once per
 * replay, so readers on several threads never write the same entry. */
typedef struct qcost {
    qsample *v;
    uint8_t *seen;
    size_t n; /* records */
} qcost;

static inline void qcost_note(qcost *qc, uint32_t q, const kvix_answer *ans, uint64_t ns)
{
    qsample *s = &qc->v[q];
    s->scored = (uint32_t)ans->nscores;
    s->blocks = ans->nscores ? ans->scores[0].blocks : 0;
    s->ns = ns;
    qc->seen[q] = 1;
}

/* Group of a count: 0 for 0, else 1 + floor(log2(x)) (1, 2-3, 4-7, ...). */
static unsigned qcost_group(uint32_t x)
{
    return x ? 32u - (unsigned)__builtin_clz(x) : 0;
}

static int qcost_cmp_ns(const void *a, const void *b)
{
    uint64_t x = ((const qsample *)a)->ns, y = ((const qsample *)b)->ns;
    return x < y ? -1 : x > y;
}

/* One line per non-empty group of v[0..n): key selects the grouping (0: by
 * scored workers, 1: by matched blocks, 2: both). v is reordered. */
static void qcost_write_groups(FILE *f, qsample *v, size_t n, int key)
{
    /* Sort by group, then latency: each group is a run, its quantiles at
     * fixed ranks. */
    for (size_t i = 0; i < n; i++) {
        unsigned gw = qcost_group(v[i].scored), gb = qcost_group(v[i].blocks);
        uint64_t g = key == 0 ? gw : key == 1 ? gb : (uint64_t)gw * 64 + gb;
        v[i].ns = (v[i].ns & ((UINT64_C(1) << 48) - 1)) | g << 48;
    }
    qsort(v, n, sizeof *v, qcost_cmp_ns);
    for (size_t a = 0, b; a < n; a = b) {
        uint64_t g = v[a].ns >> 48;
        double sw = 0, sb = 0;
        for (b = a; b < n && v[b].ns >> 48 == g; b++) {
            sw += v[b].scored;
            sb += v[b].blocks;
        }
        size_t m = b - a;
        uint64_t mask = (UINT64_C(1) << 48) - 1;
        fprintf(f, "%zu %.6g %.6g %.6g %.6g %.6g\n", m, sw / (double)m, sb / (double)m,
                (double)(v[a + m / 2].ns & mask) / 1000.0,
                (double)(v[a + (m * 9) / 10].ns & mask) / 1000.0,
                (double)(v[a + (m * 99) / 100].ns & mask) / 1000.0);
    }
}

/* Append the samples of one configuration to f as three gnuplot data blocks
 * (by scored workers, by matched blocks, by both), each titled. */
static void qcost_write(FILE *f, const qcost *qc, const char *label, int first)
{
    qsample *v = malloc((qc->n ? qc->n : 1) * sizeof *v);
    if (!v)
        return;
    size_t n = 0;
    for (size_t i = 0; i < qc->n; i++)
        if (qc->seen[i] && qc->v[i].ns < (UINT64_C(1) << 48))
            v[n++] = qc->v[i];
    static const char *what[3] = {"by scored workers", "by matched blocks",
                                  "by scored workers and matched blocks"};
    for (int key = 0; key < 3; key++) {
        qsample *w = malloc((n ? n : 1) * sizeof *w);
        if (!w)
            break;
        memcpy(w, v, n * sizeof *w);
        fprintf(f, "%s\"%s, %s\"\n", first && key == 0 ? "" : "\n\n", label, what[key]);
        fprintf(f, "# queries mean_scored_workers mean_matched_blocks p50_us p90_us p99_us\n");
        qcost_write_groups(f, w, n, key);
        free(w);
    }
    free(v);
}

#endif
