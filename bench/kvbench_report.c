/* kvbench: results as markdown tables, JSON and gnuplot data. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "kvbench.h"

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

void print_tables(const logdata *lg, const cfg_result *cr, int n, const checksum *refs,
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

void write_json(const char *path, const char *cmdline, const logdata *lg,
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
void write_dat(const char *path, const cfg_result *cr, int n)
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
