/* kvreplay: replay captured event logs, or generate one from a Mooncake
 * trace, at recorded speed, faster, at a fixed rate or as fast as possible;
 * to stdout (NDJSON or msgpack records) or as engines on the ZMQ wire.
 *
 * Logs are read in the order given (concatenated, not merged by time), plain
 * or compressed (xz, zstd, gzip: told by their first bytes). Timing follows
 * each record's ts: the first record with a ts starts the clock; a record
 * without ts, or one recorded earlier than the clock, goes out at once.
 * Filters (--worker, --since/--until, --since-eid/--until-eid) drop records
 * before timing, so a filtered stretch costs no waiting. The player (the
 * record path, the pace, the publishers) is the library's kvix_player: this
 * file parses options, opens the inputs, draws the progress line and
 * chooses messages and exit codes. */
#define _GNU_SOURCE /* strptime, timegm */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kvix/enginepub.h"
#include "logio.h"
#include "mooncake.h"
#include "player.h"

enum {
    O_FAST = 0x100, O_SINCE, O_UNTIL, O_SINCE_EID, O_UNTIL_EID, O_NO_QUERIES, O_STRICT,
    O_PUB, O_REPLAY_EP, O_REPLAY_BUFFER, O_WIRE, O_PUB_WAIT, O_PUB_HOLD, O_MAP_FILE, O_TOPIC,
    O_MOONCAKE, O_WORKERS, O_CAPACITY, O_ROUTE, O_SEED, O_MODEL, O_TOKENS, O_FINAL_STATE, O_COPIES,
    O_WORKER_IDS,
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
    {O_WIRE, 0, "wire", "VERSION", "vllm-0.26|vllm-0.25|vllm-0.9|sglang-array|sglang-map|map|array",
     "the engine generation to speak (default vllm-0.26; kvsub(1) lists them)"},
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
    {O_WORKER_IDS, 0, "worker-ids", "KIND", "dense|random",
     "mooncake: workers numbered 0..N-1 (default) or named by random 63-bit ids from --seed"},
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

/* One run: the player, and what the progress line and messages need. */
typedef struct replay {
    kvix_player *p;
    int quiet, progress;
    int opened; /* the last input could be opened */
    const char *map_file;
    const char *wf_given[KVIX_FILTER_WORKERS_MAX]; /* --worker as given, for the warning */
    struct timespec last_progress;
    /* input read so far, for the percentage and eta: the logs' sizes (0 when
     * one is not a regular file), the bytes of the logs done, and a dup of
     * the open log's descriptor whose offset is how far it is read (the
     * compressed bytes for a compressed log) */
    uint64_t in_total, in_before;
    int pos_fd;
    const char *in_name;
    double in_started;
    /* --mooncake: the generator, and the requests it is to play (--limit;
     * 0: unknown). Its trace is read ahead in large pieces, so its
     * progress is counted in requests, not in bytes read. */
    kvix_mooncake *mc;
    uint64_t mc_limit;
    int drawn; /* a progress line is on the terminal */
} replay;

/* SIGINT / SIGTERM: stop reading, flush what is pending, report, exit. */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- the player's callbacks ------------------------------------------------ */

static int stopping(void *ctx)
{
    (void)ctx;
    return interrupted;
}

/* Before any other line on the terminal: the progress line goes. */
static void clear_progress(replay *r)
{
    if (r->drawn)
        fputs("\r\033[K", stderr);
    r->drawn = 0;
}

static void on_note(void *ctx, const kvix_player_note *n)
{
    replay *r = ctx;
    if (n->kind == KVIX_PLAYER_BOUND && (r->map_file || r->quiet))
        return;
    if ((n->kind == KVIX_PLAYER_UNSUBSCRIBED || n->kind == KVIX_PLAYER_HOLDING) && r->quiet)
        return;
    clear_progress(r);
    cli_warn("%s", n->msg);
}

static uint64_t input_done(const replay *r)
{
    off_t at = r->pos_fd >= 0 ? lseek(r->pos_fd, 0, SEEK_CUR) : 0;
    return r->in_before + (at > 0 ? (uint64_t)at : 0);
}

static void progress(replay *r, int final)
{
    if (!r->progress)
        return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    double dt = (double)(t.tv_sec - r->last_progress.tv_sec) +
                (double)(t.tv_nsec - r->last_progress.tv_nsec) / 1e9;
    if (!final && dt < 0.25)
        return;
    r->last_progress = t;
    kvix_player_counts c;
    kvix_player_counts_get(r->p, &c);
    double el = kvix_player_elapsed(r->p);
    char eta[48], reqs[48] = "";
    if (r->mc) {
        kvix_mooncake_stats ms;
        kvix_mooncake_stats_get(r->mc, &ms);
        uint64_t done = ms.requests + ms.skipped;
        cli_progress_eta(done, r->mc_limit, now_s() - r->in_started, eta);
        snprintf(reqs, sizeof reqs, " %" PRIu64 " requests,", done);
    } else {
        cli_progress_eta(input_done(r), r->in_total, now_s() - r->in_started, eta);
    }
    fprintf(stderr, "\r%s: %s:%s%s %" PRIu64 " read, %" PRIu64 " written, %.0f/s\033[K",
            cli_name(), r->in_name ? r->in_name : "", eta, reqs, c.in, c.written,
            el > 0 ? (double)c.written / el : 0.0);
    r->drawn = 1;
    if (final)
        clear_progress(r);
}

static void on_record(void *ctx)
{
    progress(ctx, 0);
}

/* The publishers' errors: a base that makes no endpoint is a usage error;
 * so is the player's stop for good (a socket, memory: their own codes). */
static _Noreturn void pub_die(const kvix_err *e)
{
    if (e->code == KVIX_EINVAL || e->code == KVIX_ERANGE)
        cli_usage_error("%s", e->msg);
    cli_die(e->code == KVIX_ELIMIT ? KVIX_EXIT_USAGE : cli_exit_for(e->code), "%s", e->msg);
}

/* ---- inputs ---------------------------------------------------------------- */

/* The size of a regular file, 0 for anything else (a pipe, a terminal). */
static uint64_t file_size(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 ? (uint64_t)st.st_size
                                                                         : 0;
}

/* The sum of the inputs' sizes, or 0 when one of them has no size known. */
static uint64_t inputs_size(char *const *paths, int n)
{
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        struct stat st;
        int ok = strcmp(paths[i], "-") == 0 ? fstat(STDIN_FILENO, &st) == 0
                                            : stat(paths[i], &st) == 0;
        if (!ok || !S_ISREG(st.st_mode))
            return 0;
        total += (uint64_t)st.st_size;
    }
    return total;
}

/* Play one log (or a trace, with m) from path: an exit code (0 ok). */
static int play(replay *r, const char *path, bool scan, kvix_mooncake *m)
{
    const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
    int fd = strcmp(path, "-") == 0 ? dup(STDIN_FILENO) : open(path, O_RDONLY | O_CLOEXEC);
    r->opened = fd >= 0;
    if (fd < 0) {
        cli_warn("cannot open %s: %s", path, strerror(errno));
        return KVIX_EXIT_IO;
    }
    r->in_name = name;
    if (r->progress && file_size(fd))
        r->pos_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0); /* shares the offset: how far it is read */
    kvix_err err;
    int rc = m ? kvix_player_play_mooncake(r->p, m, fd, name, &err)
               : kvix_player_play_log(r->p, fd, name, scan, &err);
    if (r->pos_fd >= 0) {
        r->in_before += file_size(r->pos_fd);
        close(r->pos_fd);
        r->pos_fd = -1;
    }
    if (kvix_player_ended(r->p) == KVIX_PLAYER_FAILED)
        pub_die(kvix_player_error(r->p));
    if (rc)
        cli_warn("%s", err.msg);
    return rc ? cli_exit_for(rc) : 0;
}

/* ---- report ---------------------------------------------------------------- */

/* Filters that matched nothing are said (even with --quiet): an empty
 * output would otherwise look like an empty log. */
static void warn_empty_filters(const replay *r, const kvix_player_counts *c)
{
    if (!c->in)
        return;
    const kvix_filter *f = kvix_player_filter(r->p);
    for (size_t i = 0; i < f->nworkers; i++)
        if (!f->workers[i].hits)
            cli_warn("--worker %s matched no event of the %" PRIu64 " records read",
                     r->wf_given[i], c->in);
    if (!c->kept && kvix_filter_active(f))
        cli_warn("the filters kept none of the %" PRIu64 " records read", c->in);
}

static void report(const replay *r, int pub)
{
    kvix_player_counts c;
    kvix_player_counts_get(r->p, &c);
    warn_empty_filters(r, &c);
    if (r->quiet)
        return;
    if (pub)
        cli_warn("%" PRIu64 " records read, %" PRIu64 " events published in %" PRIu64
                 " batches by %zu publishers (%" PRIu64 " stored, %" PRIu64 " removed, %" PRIu64
                 " cleared), %" PRIu64 " queries not published, %" PRIu64 " filtered, %" PRIu64
                 " rejected",
                 c.in, c.written, c.batches, c.publishers, c.by_type[KVIX_EV_STORED],
                 c.by_type[KVIX_EV_REMOVED], c.by_type[KVIX_EV_CLEARED], c.pub_skipped,
                 c.filtered, c.rejected);
    else
        cli_warn("%" PRIu64 " records read, %" PRIu64 " written (%" PRIu64 " stored, %" PRIu64
                 " removed, %" PRIu64 " cleared, %" PRIu64 " queries), %" PRIu64
                 " filtered, %" PRIu64 " rejected",
                 c.in, c.written, c.by_type[KVIX_EV_STORED], c.by_type[KVIX_EV_REMOVED],
                 c.by_type[KVIX_EV_CLEARED], c.by_type[KVIX_EV_QUERY], c.filtered,
                 c.rejected);
}

/* ---- --mooncake -------------------------------------------------------------- */

typedef struct mooncake_args {
    const char *trace;
    kvix_mooncake_opts o;
    const char *final_state;
    uint64_t limit; /* --limit: requests to play (0: the whole trace) */
    int msgpack;    /* -f msgpack */
} mooncake_args;

/* Bytes of one token written as text ("123,") or msgpack (an unsigned int). */
static unsigned token_bytes(uint64_t t, int msgpack)
{
    if (msgpack)
        return t < 128 ? 1 : t < 65536 ? 3 : 5;
    unsigned d = 1;
    while (t >= 10) {
        t /= 10;
        d++;
    }
    return d + 1;
}

/* Before a --mooncake run that writes a lot, how much: every whole block
 * of the requests played, stored once per copy (cache hits only make it
 * less), with its tokens when they are carried (block i of a request is
 * 512 copies of its hash id, moved into its copy's range). Bytes a block
 * costs beside its tokens, measured on the bundled trace: 80 (NDJSON), 42
 * (msgpack). Said from 1 GB on: --copies 20 --tokens wrote 28.9 GB with no
 * hint of the size to come. The trace is read twice, so only a file's. */
static void say_estimate(const replay *r, const mooncake_args *a)
{
    struct stat st;
    if (r->quiet || strcmp(a->trace, "-") == 0 || stat(a->trace, &st) != 0 ||
        !S_ISREG(st.st_mode))
        return;
    int fd = open(a->trace, O_RDONLY | O_CLOEXEC);
    kvix_logio *lio = NULL;
    kvix_mooncake_trace *t = NULL;
    kvix_err err;
    if (fd < 0 || kvix_logio_open(&lio, fd, a->trace, &err) ||
        kvix_mooncake_trace_new(&t, kvix_logio_fd(lio), &err)) {
        if (lio)
            kvix_logio_close(lio, NULL);
        else if (fd >= 0)
            close(fd);
        return; /* the run itself says what is wrong with it */
    }
    kvix_mooncake_req q;
    kvix_mooncake_req_init(&q);
    uint32_t copies = a->o.copies ? a->o.copies : 1;
    uint64_t stride = (UINT64_C(1) << 32) / copies, n = 0, blocks = 0;
    double bytes = 0;
    int rc;
    while ((!a->limit || n < a->limit) && (rc = kvix_mooncake_trace_next(t, &q, &err)) != KVIX_EOF) {
        if (rc == KVIX_EIO || rc == KVIX_ENOMEM)
            break;
        if (rc)
            continue;
        n++;
        size_t whole = q.input_length / 512 < q.nids ? (size_t)(q.input_length / 512) : q.nids;
        blocks += whole;
        bytes += (double)whole * copies * (a->msgpack ? 42 : 80);
        if (a->o.tokens)
            for (size_t i = 0; i < whole; i++)
                for (uint32_t k = 0; k < copies; k++)
                    bytes += 512.0 * token_bytes(q.ids[i] + k * stride, a->msgpack);
    }
    kvix_mooncake_req_release(&q);
    kvix_mooncake_trace_free(t);
    kvix_logio_close(lio, NULL);
    if (bytes >= 1e9)
        cli_warn("mooncake: up to about %.1f GB to write (%" PRIu64 " requests, %" PRIu64
                 " whole blocks, %" PRIu32 " cop%s%s); --limit or fewer --copies write less",
                 bytes / 1e9, n, blocks, copies, copies == 1 ? "y" : "ies",
                 a->o.tokens ? ", token ids included" : "");
}

/* The trace played as engines would; an exit code. */
static int run_mooncake(replay *r, mooncake_args *a, int pub)
{
    kvix_err err;
    kvix_mooncake *m;
    if (kvix_mooncake_new(&m, &a->o, &err))
        cli_usage_error("%s", err.msg);
    if (pub) {
        for (uint32_t w = 0; w < a->o.workers * a->o.copies; w++)
            if (kvix_player_bind(r->p, kvix_mooncake_worker(m, w), 0, &err))
                pub_die(&err);
        if (kvix_player_start(r->p, &err))
            pub_die(&err);
    }
    if (!pub)
        say_estimate(r, a);
    char *trace[] = {(char *)a->trace};
    r->in_total = inputs_size(trace, 1);
    r->in_started = now_s();
    r->mc = m;
    r->mc_limit = a->limit;
    int code = play(r, a->trace, false, m);
    progress(r, 1); /* its last figures, gone before the summary below */
    r->mc = NULL;
    if (!r->opened) {
        kvix_mooncake_free(m);
        return code;
    }
    if (a->final_state) {
        FILE *f = fopen(a->final_state, "w");
        if (!f)
            cli_die(KVIX_EXIT_IO, "cannot write %s: %s", a->final_state, strerror(errno));
        int rc = kvix_mooncake_state_write(m, f, &err);
        if (rc == KVIX_ENOMEM)
            cli_die(cli_exit_for(rc), "%s", err.msg);
        if (rc || fflush(f) != 0 || ferror(f) | fclose(f))
            cli_die(KVIX_EXIT_IO, "cannot write %s: %s", a->final_state, strerror(errno));
    }
    if (!r->quiet) {
        kvix_mooncake_stats s;
        kvix_mooncake_stats_get(m, &s);
        cli_warn("mooncake: %" PRIu64 " requests (%" PRIu64 " skipped), %" PRIu64
                 " blocks asked, %" PRIu64 " hit (%.1f%%), %" PRIu64 " stored in %" PRIu64
                 " events, %" PRIu64 " removed in %" PRIu64 " events, %" PRIu64
                 " cached at the end (%" PRIu64 " partial, %" PRIu64 " past capacity)",
                 s.requests, s.skipped, s.query_blocks, s.hit_blocks,
                 s.query_blocks ? 100.0 * (double)s.hit_blocks / (double)s.query_blocks : 0.0,
                 s.stored_blocks, s.stored_events, s.removed_blocks, s.removed_events,
                 s.cached_blocks, s.partial_blocks, s.truncated_blocks);
    }
    kvix_mooncake_free(m);
    return code;
}

/* ---- option parsing ------------------------------------------------------ */

static void parse_worker(kvix_filter *f, const char **given, const char *s)
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
    given[f->nworkers] = s;
    kvix_err err;
    if (kvix_filter_worker_add(f, worker, dp, colon == NULL, &err))
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
    r.pos_fd = -1;
    kvix_player_opts po = {
        .fmt = KVIX_FMT_NDJSON,
        .out = stdout,
        .pub_wait = 1,
        .stopping = stopping,
        .on_note = on_note,
        .on_record = on_record,
        .ctx = &r,
    };
    kvix_filter_init(&po.filter);
    kvix_pubset_config pc;
    kvix_pubset_config_init(&pc);
    pc.wire = KVIX_WIRE_MAP;
    double speed = 1, rate = 0;
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
            if (kvix_format_parse(arg, &po.fmt) || po.fmt == KVIX_FMT_AUTO)
                cli_usage_error("bad %s: '%s' (ndjson or msgpack)", cli_opt_given(), arg);
            break;
        case O_FAST: po.timing = KVIX_PACE_FAST; timing_set = 1; timing_opt[0] = "--fast"; break;
        case 'x':
            speed = cli_parse_double(arg, 1e-6, 1e9, "--speed");
            po.timing = KVIX_PACE_RECORDED;
            timing_set = 1;
            timing_opt[1] = "--speed";
            break;
        case 'r':
            rate = cli_parse_double(arg, 1e-6, 1e12, "--rate");
            po.timing = KVIX_PACE_RATE;
            timing_set = 1;
            timing_opt[2] = "--rate";
            break;
        case O_SINCE: parse_time(&po.filter.since, arg, "--since"); since_arg = arg; break;
        case O_UNTIL: parse_time(&po.filter.until, arg, "--until"); until_arg = arg; break;
        case O_SINCE_EID:
            po.filter.since_eid = cli_parse_uint(arg, 0, UINT64_MAX, "--since-eid");
            po.filter.has_since_eid = 1;
            break;
        case O_UNTIL_EID:
            po.filter.until_eid = cli_parse_uint(arg, 0, UINT64_MAX, "--until-eid");
            po.filter.has_until_eid = 1;
            break;
        case 'w': parse_worker(&po.filter, r.wf_given, arg); break;
        case O_NO_QUERIES: po.filter.no_queries = 1; break;
        case 'n': po.limit = cli_parse_uint(arg, 1, UINT64_MAX, "--limit"); break;
        case O_STRICT: po.strict = 1; break;
        case 'q': r.quiet = 1; break;
        case O_PUB: pc.pub = arg; break;
        case O_MAP_FILE: pc.map_file = r.map_file = arg; break;
        case O_REPLAY_EP: pc.replay = arg; break;
        case O_REPLAY_BUFFER:
            pc.replay_buffer = cli_parse_uint(arg, 1, KVIX_ENGINEPUB_BUFFER_MAX, "--replay-buffer");
            break;
        case O_WIRE:
            if (kvix_wire_style_parse(arg, &pc.wire) != KVIX_OK)
                cli_usage_error("bad %s: '%s' (vllm-0.26, vllm-0.25, vllm-0.9, sglang-array or "
                                "sglang-map)",
                                cli_opt_given(), arg);
            break;
        case O_TOPIC: pc.topic = arg; break;
        case O_PUB_WAIT: po.pub_wait = cli_parse_double(arg, 0, 86400, "--pub-wait"); break;
        case O_PUB_HOLD: po.pub_hold = cli_parse_double(arg, 0, 86400, "--pub-hold"); break;
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
        case O_WORKER_IDS:
            if (strcmp(arg, "dense") == 0)
                mc.o.worker_ids = KVIX_MOONCAKE_IDS_DENSE;
            else if (strcmp(arg, "random") == 0)
                mc.o.worker_ids = KVIX_MOONCAKE_IDS_RANDOM;
            else
                cli_usage_error("bad %s: '%s' (dense or random)", cli_opt_given(), arg);
            mooncake_only = 1;
            break;
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
    const kvix_filter *fl = &po.filter;
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
    if ((pc.map_file || pc.replay || pc.topic || pc.replay_buffer) && !pc.pub)
        cli_usage_error("--map-file, --replay-endpoint, --replay-buffer and --topic need --pub");
    if (pc.pub && po.fmt == KVIX_FMT_MSGPACK)
        cli_usage_error("--format applies to stdout, not to --pub");
    int pub = pc.pub != NULL;
    if (mc.trace && !timing_set)
        po.timing = KVIX_PACE_FAST; /* a generator: an hour of trace should not take an hour */
    if (mc.trace && pub)
        mc.o.tokens = 1; /* engines send token ids */
    /* one progress line per terminal: kvreplay draws it when its output goes
     * down a pipe (or to publishers), not when it shares the terminal */
    r.progress = !r.quiet && isatty(STDERR_FILENO) && (pub || !isatty(STDOUT_FILENO));
    po.factor = po.timing == KVIX_PACE_RATE ? rate : speed;
    po.pub = pub ? &pc : NULL;
    kvix_err err;
    if (kvix_player_new(&r.p, &po, &err)) /* endpoints checked before any log is read */
        pub_die(&err);

    int code = 0;
    if (mc.trace) {
        mc.limit = po.limit;
        mc.msgpack = po.fmt == KVIX_FMT_MSGPACK;
        code = run_mooncake(&r, &mc, pub);
    } else {
        static char dash[] = "-";
        char *stdin_only[] = {dash};
        char **logs = optind < argc ? argv + optind : stdin_only;
        int nlogs = optind < argc ? argc - optind : 1;
        if (pub) {
            /* Publishers are bound before the first batch (subscribers must
             * know them all up front), so the logs are read twice; each is
             * bound, and the map file written, as soon as the first read
             * finds it. */
            for (int i = 0; i < nlogs; i++)
                if (strcmp(logs[i], "-") == 0)
                    cli_usage_error("--pub reads its logs twice: give files, not standard input");
            for (int i = 0; i < nlogs && !code && !interrupted; i++)
                code = play(&r, logs[i], true, NULL);
            kvix_player_counts pc0;
            kvix_player_counts_get(r.p, &pc0);
            if (code || pc0.publishers == 0) {
                if (!code && !r.quiet)
                    cli_warn("no events to publish");
                kvix_player_free(r.p); /* no --pub-hold: nothing was sent */
                return cli_finish(code);
            }
            if (kvix_player_start(r.p, &err))
                pub_die(&err);
        }
        r.in_total = inputs_size(logs, nlogs);
        r.in_before = 0; /* the replay's read, after the publishers' scan */
        r.in_started = now_s();
        for (int i = 0; i < nlogs && !kvix_player_ended(r.p) && !interrupted; i++) {
            int c2 = play(&r, logs[i], false, NULL);
            if (c2 && !code)
                code = c2;
        }
    }
    kvix_player_end end = kvix_player_ended(r.p);
    if (end == KVIX_PLAYER_WRITE_ERROR)
        cli_warn("%s", kvix_player_error(r.p)->msg);
    if (!mc.trace) /* run_mooncake drew its last one */
        progress(&r, 1);
    kvix_player_finish(r.p); /* the last batch, --pub-hold */
    if (kvix_player_ended(r.p) == KVIX_PLAYER_FAILED)
        pub_die(kvix_player_error(r.p));
    end = kvix_player_ended(r.p);
    report(&r, pub);
    kvix_player_counts cnt;
    kvix_player_counts_get(r.p, &cnt);
    if (!code && end == KVIX_PLAYER_STRICT)
        code = KVIX_EXIT_STRICT;
    if (!code && end == KVIX_PLAYER_WRITE_ERROR)
        code = KVIX_EXIT_IO;
    if (!code && cnt.rejected)
        code = KVIX_EXIT_REJECTED;
    kvix_player_free(r.p);
    return cli_finish(code);
}
