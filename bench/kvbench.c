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
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "cli.h"
#include "kvbench.h"

const char *const rule_names[RULE_COUNT] = {"exact", "timestamp"};

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
            "      --top K           every answer keeps its best K scores (default 0: all)\n"
            "      --removals N      each index's record of removals (explain; default 64)\n"
            "      --no-fork         run every configuration in this process\n"
            "      --json FILE       write results as JSON\n"
            "      --dat FILE        write the sweep as gnuplot data\n"
            "      --query-cost FILE one more replay per backend (in this process, after\n"
            "                        the timed runs) writing each query's latency grouped\n"
            "                        by scored workers and matched blocks, as gnuplot data\n"
            "      --perf-ctl FD     write enable/disable around each timed replay to FD\n"
            "                        (perf record -D -1 --control fd:FD; not the cold\n"
            "                        replay before a warm one)\n"
            "  -q, --quiet           no progress on stderr\n"
            "  -h, --help\n");
}

static const cli_tool tool = {.name = "kvbench"}; /* messages only */

int main(int argc, char **argv)
{
    cli_init(&tool);
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
           O_QCOST, O_TOP, O_REMOVALS };
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
        {"top", required_argument, 0, O_TOP},
        {"removals", required_argument, 0, O_REMOVALS},
        {"spin", required_argument, 0, O_SPIN},  {"no-timing", no_argument, 0, O_NOTIME},
        {"no-fork", no_argument, 0, O_NOFORK},   {"json", required_argument, 0, O_JSON},
        {"dat", required_argument, 0, O_DAT},    {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "b:t:T:R:n:qh", lo, NULL)) != -1) {
        switch (opt) {
        case 'b': backends = optarg; break;
        case 't': threads = optarg; break;
        case 'T': wT = (unsigned)cli_parse_uint(optarg, 1, 64, "--writers"); break;
        case 'R': wR = (unsigned)cli_parse_uint(optarg, 1, 64, "--readers"); break;
        case 'n': bo.runs = (int)cli_parse_uint(optarg, 1, 64, "--runs"); break;
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
        case O_FROM: bo.sweep_from = cli_parse_double(optarg, 0.001, 1e6, "--sweep-from"); break;
        case O_STEP: bo.sweep_step = cli_parse_double(optarg, 1.001, 100, "--sweep-step"); break;
        case O_BUDGET: bo.sweep_budget = cli_parse_double(optarg, 0.001, 1e6, "--sweep-budget"); break;
        case O_THRESH: bo.threshold = cli_parse_double(optarg, 0.001, 1, "--threshold"); break;
        case O_SWONLY: sweep_only = optarg; break;
        case O_MOREBES: more_bes = optarg; break;
        case O_NOVERIFY: bo.verify = 0; break;
        case O_COLD: bo.warm = 0; break;
        case O_PERF: g_perf_fd = (int)cli_parse_uint(optarg, 0, INT_MAX, "--perf-ctl"); break;
        case O_SPIN: bo.spin = (int)cli_parse_uint(optarg, 0, INT_MAX, "--spin"); break;
        case O_NOTIME: bo.timing = 0; break;
        case O_NOFORK: bo.fork = 0; break;
        case O_JSON: json_path = optarg; break;
        case O_DAT: dat_path = optarg; break;
        case O_QCOST: qcost_path = optarg; break;
        case O_TOP: g_top = (uint32_t)cli_parse_uint(optarg, 0, UINT32_MAX, "--top"); break;
        case O_REMOVALS:
            g_removals = (uint32_t)cli_parse_uint(optarg, 0, KVIX_INDEX_REMOVALS_MAX, "--removals");
            break;
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
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
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
