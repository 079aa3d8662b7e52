/* kvreplay: replay captured event logs, or generate one from a Mooncake
 * trace, at recorded speed, faster, at a fixed rate or as fast as possible;
 * to stdout (NDJSON or msgpack records) or as engines on the ZMQ wire.
 *
 * Logs are read in the order given (concatenated, not merged by time), plain
 * or compressed (xz, zstd, gzip: told by their first bytes). Timing follows
 * each record's ts: the first record with a ts starts the clock; a record
 * without ts, or one recorded earlier than the clock, goes out at once.
 * Filters (--worker, --since/--until, --since-eid/--until-eid) drop records
 * before timing, so a filtered stretch costs no waiting. */
#define _GNU_SOURCE /* strptime, timegm */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kvix/enginepub.h"
#include "kvreplay.h"

enum {
    O_FAST = 0x100, O_SINCE, O_UNTIL, O_SINCE_EID, O_UNTIL_EID, O_NO_QUERIES, O_STRICT,
    O_PUB, O_REPLAY_EP, O_REPLAY_BUFFER, O_WIRE, O_PUB_WAIT, O_PUB_HOLD, O_MAP_FILE, O_TOPIC,
    O_MOONCAKE, O_WORKERS, O_CAPACITY, O_ROUTE, O_SEED, O_MODEL, O_TOKENS, O_FINAL_STATE, O_COPIES,
};

static const cli_opt options[] = {
    {'f', 'f', "format", "FMT", "ndjson|msgpack", "output records as ndjson (default) or msgpack"},
    {O_FAST, 0, "fast", NULL, NULL, "as fast as possible (default with --mooncake)"},
    {'x', 'x', "speed", "X", NULL, "X times the recorded speed (default 1: as recorded)"},
    {'r', 'r', "rate", "N", NULL, "a fixed N records per second, ignoring ts"},
    {O_SINCE, 0, "since", "T", NULL,
     "drop records before ts T: seconds since the epoch, +S after the first ts, or utc iso 8601"},
    {O_UNTIL, 0, "until", "T", NULL, "drop records after ts T (same forms as --since)"},
    {O_SINCE_EID, 0, "since-eid", "N", NULL, "drop events whose eid is below N"},
    {O_UNTIL_EID, 0, "until-eid", "N", NULL, "drop events whose eid is above N"},
    {'w', 'w', "worker", "ID[:DP]", NULL, "keep only events of this worker (repeatable)"},
    {O_NO_QUERIES, 0, "no-queries", NULL, NULL, "drop query records"},
    {'n', 'n', "limit", "N", NULL, "stop after N records written (--mooncake: N trace requests)"},
    {O_STRICT, 0, "strict", NULL, NULL, "stop at the first rejected record (exit 5)"},
    {'q', 'q', "quiet", NULL, NULL, "no progress and no counters on stderr"},
    {O_PUB, 0, "pub", "ENDPOINT", NULL,
     "publish as engines: one bound socket per worker and dp (tcp port + k, or ipc path-W-DP)"},
    {O_MAP_FILE, 0, "map-file", "FILE", "file",
     "write the publishers as worker:dp=endpoint lines (kvsub --workers-file)"},
    {O_REPLAY_EP, 0, "replay-endpoint", "ENDPOINT", NULL,
     "also serve replay requests per publisher (derived like --pub)"},
    {O_REPLAY_BUFFER, 0, "replay-buffer", "N", NULL, "batches kept for replay (default 10000)"},
    {O_WIRE, 0, "wire", "STYLE", "map|array", "engine events as maps (current vllm, default) or arrays"},
    {O_TOPIC, 0, "topic", "TOPIC", NULL, "topic frame of every message (default empty)"},
    {O_PUB_WAIT, 0, "pub-wait", "SECONDS", NULL,
     "wait up to SECONDS for every publisher to have a subscriber (default 1)"},
    {O_PUB_HOLD, 0, "pub-hold", "SECONDS", NULL,
     "after the last batch, keep serving replay requests for SECONDS (default 0)"},
    {O_MOONCAKE, 0, "mooncake", "TRACE", "file",
     "generate the log from a mooncake trace (jsonl, may be compressed) instead of reading logs"},
    {O_WORKERS, 0, "workers", "N", NULL, "mooncake: workers (default 256)"},
    {O_CAPACITY, 0, "capacity", "N", NULL, "mooncake: blocks cached per worker (default 16384)"},
    {O_ROUTE, 0, "route", "HOW", "random|best", "mooncake: route requests at random (default) or to the best prefix"},
    {O_SEED, 0, "seed", "N", NULL, "mooncake: seed of the routing generator (default 0)"},
    {O_MODEL, 0, "model", "NAME", NULL, "mooncake: model name of the records (default \"default\")"},
    {O_TOKENS, 0, "tokens", NULL, NULL, "mooncake: stored events carry their token ids (needed by --pub)"},
    {O_COPIES, 0, "copies", "K", NULL,
     "mooncake: play the trace K times side by side (disjoint hash ids and workers; default 1)"},
    {O_FINAL_STATE, 0, "final-state", "FILE", "file",
     "mooncake: write each worker's final cache as 'worker engine local depth' lines"},
    {0, 0, NULL, NULL, NULL, NULL},
};

static const cli_tool tool = {
    .name = "kvreplay",
    .usage = "[options] [LOG...]",
    .summary = "replay kv event logs (or a mooncake trace) to stdout or as zmq engine publishers",
    .opts = options,
    .operands = "file",
    .exits = "0123456",
};

/* SIGINT / SIGTERM: stop reading, flush what is pending, report, exit. */
volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- option parsing ------------------------------------------------------ */

static void parse_worker(replay *r, const char *s)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    char *colon = strchr(buf, ':');
    uint32_t dp = 0;
    if (colon) {
        *colon = '\0';
        dp = (uint32_t)cli_parse_uint(colon + 1, 0, UINT32_MAX, "--worker dp rank");
    }
    uint64_t worker = cli_parse_uint(buf, 0, UINT64_MAX, "--worker id");
    r->wf_given[r->filter.nworkers] = s;
    kvix_err err;
    if (kvix_filter_worker_add(&r->filter, worker, dp, colon == NULL, &err))
        cli_usage_error("at most %d --worker filters", KVIX_FILTER_WORKERS_MAX);
}

static void parse_time(kvix_filter_time *b, const char *s, const char *what)
{
    b->set = 1;
    if (s[0] == '+') {
        b->relative = 1;
        b->v = cli_parse_double(s + 1, 0, 1e12, what);
        return;
    }
    if (strchr(s, '-') && strchr(s, 'T')) {
        struct tm tm;
        memset(&tm, 0, sizeof tm);
        const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
        double frac = 0;
        if (end && *end == '.') {
            char *e2;
            frac = strtod(end, &e2);
            end = e2;
        }
        if (end && *end == 'Z')
            end++;
        if (!end || *end)
            cli_usage_error("bad %s: '%s' (expected YYYY-MM-DDTHH:MM:SS[.frac][Z], utc)", what, s);
        b->v = (double)timegm(&tm) + frac;
        return;
    }
    b->v = cli_parse_double(s, -1e12, 1e12, what);
}

/* ---- main ------------------------------------------------------------------ */

/* Filters that matched nothing are said (even with --quiet): an empty
 * output would otherwise look like an empty log. */
static void warn_empty_filters(const replay *r)
{
    if (!r->in)
        return;
    for (size_t i = 0; i < r->filter.nworkers; i++)
        if (!r->filter.workers[i].hits)
            cli_warn("--worker %s matched no event of the %" PRIu64 " records read",
                     r->wf_given[i], r->in);
    if (!r->kept && kvix_filter_active(&r->filter))
        cli_warn("the filters kept none of the %" PRIu64 " records read", r->in);
}

static void report(const replay *r)
{
    warn_empty_filters(r);
    if (r->quiet)
        return;
    if (r->pub)
        cli_warn("%" PRIu64 " records read, %" PRIu64 " events published in %" PRIu64
                 " batches by %zu publishers (%" PRIu64 " stored, %" PRIu64 " removed, %" PRIu64
                 " cleared), %" PRIu64 " queries not published, %" PRIu64 " filtered, %" PRIu64
                 " rejected",
                 r->in, r->written, r->batches, r->npubs, r->by_type[KVIX_EV_STORED],
                 r->by_type[KVIX_EV_REMOVED], r->by_type[KVIX_EV_CLEARED], r->pub_skipped,
                 r->filtered, r->rejected);
    else
        cli_warn("%" PRIu64 " records read, %" PRIu64 " written (%" PRIu64 " stored, %" PRIu64
                 " removed, %" PRIu64 " cleared, %" PRIu64 " queries), %" PRIu64
                 " filtered, %" PRIu64 " rejected",
                 r->in, r->written, r->by_type[KVIX_EV_STORED], r->by_type[KVIX_EV_REMOVED],
                 r->by_type[KVIX_EV_CLEARED], r->by_type[KVIX_EV_QUERY], r->filtered,
                 r->rejected);
}

int main(int argc, char **argv)
{
    cli_init(&tool);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: waits end at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    static replay r;
    r.fmt = KVIX_FMT_NDJSON;
    r.speed = 1;
    r.pub_wait = 1;
    r.wire = KVIX_WIRE_MAP;
    r.pos_fd = -1;
    mooncake_args mc = {0};
    kvix_mooncake_opts_init(&mc.o);
    int timing_set = 0, mooncake_only = 0;
    const char *timing_opt[3] = {NULL, NULL, NULL}; /* --fast, --speed, --rate as given */
    const char *since_arg = "", *until_arg = "";
    const char *arg;
    int c;
    while ((c = cli_next(argc, argv, &arg)) != -1) {
        switch (c) {
        case 'f':
            if (kvix_format_parse(arg, &r.fmt) || r.fmt == KVIX_FMT_AUTO)
                cli_usage_error("bad %s: '%s' (ndjson or msgpack)", cli_opt_given(), arg);
            break;
        case O_FAST: r.timing = KVIX_PACE_FAST; timing_set = 1; timing_opt[0] = "--fast"; break;
        case 'x':
            r.speed = cli_parse_double(arg, 1e-6, 1e9, "--speed");
            r.timing = KVIX_PACE_RECORDED;
            timing_set = 1;
            timing_opt[1] = "--speed";
            break;
        case 'r':
            r.rate = cli_parse_double(arg, 1e-6, 1e12, "--rate");
            r.timing = KVIX_PACE_RATE;
            timing_set = 1;
            timing_opt[2] = "--rate";
            break;
        case O_SINCE: parse_time(&r.filter.since, arg, "--since"); since_arg = arg; break;
        case O_UNTIL: parse_time(&r.filter.until, arg, "--until"); until_arg = arg; break;
        case O_SINCE_EID:
            r.filter.since_eid = cli_parse_uint(arg, 0, UINT64_MAX, "--since-eid");
            r.filter.has_since_eid = 1;
            break;
        case O_UNTIL_EID:
            r.filter.until_eid = cli_parse_uint(arg, 0, UINT64_MAX, "--until-eid");
            r.filter.has_until_eid = 1;
            break;
        case 'w': parse_worker(&r, arg); break;
        case O_NO_QUERIES: r.filter.no_queries = 1; break;
        case 'n': r.limit = cli_parse_uint(arg, 1, UINT64_MAX, "--limit"); break;
        case O_STRICT: r.strict = 1; break;
        case 'q': r.quiet = 1; break;
        case O_PUB: r.pub = arg; break;
        case O_MAP_FILE: r.map_file = arg; break;
        case O_REPLAY_EP: r.replay_ep = arg; break;
        case O_REPLAY_BUFFER:
            r.replay_buffer = cli_parse_uint(arg, 1, KVIX_ENGINEPUB_BUFFER_MAX, "--replay-buffer");
            break;
        case O_WIRE:
            if (strcmp(arg, "map") == 0)
                r.wire = KVIX_WIRE_MAP;
            else if (strcmp(arg, "array") == 0)
                r.wire = KVIX_WIRE_ARRAY;
            else
                cli_usage_error("bad %s: '%s' (map or array)", cli_opt_given(), arg);
            break;
        case O_TOPIC: r.topic = arg; break;
        case O_PUB_WAIT: r.pub_wait = cli_parse_double(arg, 0, 86400, "--pub-wait"); break;
        case O_PUB_HOLD: r.pub_hold = cli_parse_double(arg, 0, 86400, "--pub-hold"); break;
        case O_MOONCAKE: mc.trace = arg; break;
        case O_WORKERS:
            mc.o.workers = (uint32_t)cli_parse_uint(arg, 1, KVIX_MOONCAKE_WORKERS_MAX, "--workers");
            mooncake_only = 1;
            break;
        case O_CAPACITY:
            mc.o.capacity =
                (uint32_t)cli_parse_uint(arg, 1, KVIX_MOONCAKE_CAPACITY_MAX, "--capacity");
            mooncake_only = 1;
            break;
        case O_ROUTE:
            if (strcmp(arg, "random") == 0)
                mc.o.route = KVIX_ROUTE_RANDOM;
            else if (strcmp(arg, "best") == 0)
                mc.o.route = KVIX_ROUTE_BEST;
            else
                cli_usage_error("bad %s: '%s' (random or best)", cli_opt_given(), arg);
            mooncake_only = 1;
            break;
        case O_SEED: mc.o.seed = cli_parse_uint(arg, 0, UINT64_MAX, "--seed"); mooncake_only = 1; break;
        case O_MODEL: mc.o.model = arg; mooncake_only = 1; break;
        case O_TOKENS: mc.o.tokens = 1; mooncake_only = 1; break;
        case O_FINAL_STATE: mc.final_state = arg; mooncake_only = 1; break;
        case O_COPIES:
            mc.o.copies = (uint32_t)cli_parse_uint(arg, 1, KVIX_MOONCAKE_COPIES_MAX, "--copies");
            mooncake_only = 1;
            break;
        }
    }
    /* Contradictions are refused, not settled by the order of the options. */
    if (!!timing_opt[0] + !!timing_opt[1] + !!timing_opt[2] > 1)
        cli_usage_error("%s%s%s%s%s: choose one timing (--fast, --speed or --rate)",
                        timing_opt[0] ? timing_opt[0] : "",
                        timing_opt[0] && (timing_opt[1] || timing_opt[2]) ? " and " : "",
                        timing_opt[1] ? timing_opt[1] : "",
                        timing_opt[1] && timing_opt[2] ? " and " : "",
                        timing_opt[2] ? timing_opt[2] : "");
    const kvix_filter *fl = &r.filter;
    if (fl->since.set && fl->until.set && fl->since.relative == fl->until.relative &&
        fl->since.v > fl->until.v)
        cli_usage_error("--since %s is after --until %s: nothing would be kept", since_arg,
                        until_arg);
    if (fl->has_since_eid && fl->has_until_eid && fl->since_eid > fl->until_eid)
        cli_usage_error("--since-eid %" PRIu64 " is above --until-eid %" PRIu64
                        ": nothing would be kept", fl->since_eid, fl->until_eid);
    if (mooncake_only && !mc.trace)
        cli_usage_error("--workers, --capacity, --route, --seed, --model, --tokens, "
                        "--final-state and --copies need --mooncake");
    if (mc.trace && optind < argc)
        cli_usage_error("--mooncake reads a trace, not logs: '%s'", argv[optind]);
    if ((r.map_file || r.replay_ep || r.topic || r.replay_buffer) && !r.pub)
        cli_usage_error("--map-file, --replay-endpoint, --replay-buffer and --topic need --pub");
    if (r.pub && r.fmt == KVIX_FMT_MSGPACK)
        cli_usage_error("--format applies to stdout, not to --pub");
    if (r.pub)
        open_pubs(&r); /* endpoints checked before any log is read */
    if (mc.trace && !timing_set)
        r.timing = KVIX_PACE_FAST; /* a generator: an hour of trace should not take an hour */
    if (mc.trace && r.pub)
        mc.o.tokens = 1; /* engines send token ids */
    /* one progress line per terminal: kvreplay draws it when its output goes
     * down a pipe (or to publishers), not when it shares the terminal */
    r.progress = !r.quiet && isatty(STDERR_FILENO) && (r.pub || !isatty(STDOUT_FILENO));
    kvix_buf_init(&r.out);
    kvix_pace_init(&r.pace, r.timing, r.timing == KVIX_PACE_RATE ? r.rate : r.speed);

    int code = 0;
    if (mc.trace) {
        code = run_mooncake(&r, &mc);
    } else {
        static char dash[] = "-";
        char *stdin_only[] = {dash};
        char **logs = optind < argc ? argv + optind : stdin_only;
        int nlogs = optind < argc ? argc - optind : 1;
        if (r.pub) {
            /* Publishers are bound before the first batch (subscribers must
             * know them all up front), so the logs are read twice; each is
             * bound, and the map file written, as soon as the first read
             * finds it. */
            for (int i = 0; i < nlogs; i++)
                if (strcmp(logs[i], "-") == 0)
                    cli_usage_error("--pub reads its logs twice: give files, not standard input");
            for (int i = 0; i < nlogs && !code && !interrupted; i++)
                code = read_log(&r, logs[i], collect_pub, 1);
            if (code || kvix_pubset_count(r.ps) == 0) {
                if (!code && !r.quiet)
                    cli_warn("no events to publish");
                r.pub_hold = 0;
                stop_pubs(&r);
                return cli_finish(code);
            }
            start_pubs(&r);
        }
        r.in_total = inputs_size(logs, nlogs);
        r.in_before = 0; /* the replay's read, after the publishers' scan */
        r.in_started = now_s();
        for (int i = 0; i < nlogs && !r.stop && !r.fatal && !interrupted; i++) {
            int c2 = read_log(&r, logs[i], emit_record, 0);
            if (c2 && !code)
                code = c2;
            if (code == KVIX_EXIT_STRICT)
                break;
        }
        if (r.ps)
            flush_batch(&r);
    }
    progress(&r, 1);
    stop_pubs(&r);
    report(&r);
    if (r.fatal && !code)
        code = r.fatal;
    if (!code && r.rejected)
        code = KVIX_EXIT_REJECTED;
    kvix_buf_release(&r.out);
    return cli_finish(code);
}
