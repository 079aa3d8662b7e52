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
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kvix/buf.h"
#include "kvix/enginepub.h"
#include "kvix/event.h"
#include "kvix/filter.h"
#include "kvix/hash.h"
#include "kvix/logio.h"
#include "kvix/mooncake.h"
#include "kvix/pace.h"
#include "kvix/pubset.h"
#include "kvix/stream.h"
#include "kvix/wire.h"

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


typedef struct replay {
    /* options */
    kvix_format fmt;
    kvix_pace_mode timing;
    double speed, rate;
    kvix_filter filter;
    const char *wf_given[KVIX_FILTER_WORKERS_MAX]; /* --worker as given, for the warning */
    int strict, quiet;
    uint64_t limit;
    const char *pub, *replay_ep, *map_file, *topic;
    size_t replay_buffer;
    kvix_wire_style wire;
    double pub_wait, pub_hold;

    /* clock */
    kvix_pace pace;
    const char *at_name; /* the record being replayed, for messages */
    uint64_t at_line;

    /* output */
    kvix_buf out;

    /* publishers (--pub) */
    kvix_pubset *ps;

    /* progress and counters */
    int progress;
    struct timespec last_progress;
    /* input read so far, for the percentage and eta: the logs' sizes (0 when
     * one is not a regular file), the bytes of the logs done, and a dup of
     * the open log's descriptor whose offset is how far it is read (the
     * compressed bytes for a compressed log) */
    uint64_t in_total, in_before;
    int pos_fd;
    const char *in_name;
    double in_started;
    uint64_t in, written, filtered, rejected, by_type[5], batches, pub_skipped;
    size_t npubs; /* publishers bound, for the report */
    uint64_t kept; /* records past the filters */
    int stop;     /* limit reached */
    int fatal;    /* an exit code when something failed for good */
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

/* ---- publishers ------------------------------------------------------------ */

/* The set's errors: a base that makes no endpoint is a usage error. */
static void pub_die(int rc, const kvix_err *err)
{
    if (rc == KVIX_EINVAL || rc == KVIX_ERANGE)
        cli_usage_error("%s", err->msg);
    cli_die(rc == KVIX_ELIMIT ? KVIX_EXIT_USAGE : cli_exit_for(rc), "%s", err->msg);
}

/* The publishers and their ZMQ context, made before any log is read. */
static void open_pubs(replay *r)
{
    kvix_pubset_config cfg;
    kvix_pubset_config_init(&cfg);
    cfg.pub = r->pub;
    cfg.replay = r->replay_ep;
    cfg.topic = r->topic;
    cfg.replay_buffer = r->replay_buffer;
    cfg.wire = r->wire;
    cfg.map_file = r->map_file;
    kvix_err err;
    int rc = kvix_pubset_new(&r->ps, &cfg, &err);
    if (rc)
        pub_die(rc, &err);
}

/* A publisher for (worker, dp), bound at once (the map file follows). */
static void add_pub(replay *r, uint64_t worker, uint32_t dp)
{
    kvix_err err;
    const char *ep;
    int rc = kvix_pubset_add(r->ps, worker, dp, &ep, &err);
    if (rc < 0)
        pub_die(rc, &err);
    if (rc == 1 && !r->map_file && !r->quiet)
        fprintf(stderr, "%s: worker %" PRIu64 " dp %" PRIu32 " publishes on %s\n", cli_name(),
                worker, dp, ep);
}

/* Wait until deadline (monotonic seconds), answering subscriptions and
 * replay requests meanwhile. */
static void pub_sleep_until(replay *r, double deadline)
{
    for (;;) {
        double left = deadline - now_s();
        long ms = left <= 0 || interrupted ? 0 : (long)(left * 1000) + 1;
        kvix_err err;
        int rc = kvix_pubset_serve(r->ps, ms > 100 ? 100 : (int)ms, &err);
        if (rc)
            cli_die(cli_exit_for(rc), "%s", err.msg);
        if (ms == 0)
            break;
    }
}

/* Every publisher is bound: the map file is made whole, then the wait for
 * subscribers. */
static void start_pubs(replay *r)
{
    kvix_err err;
    int rc = kvix_pubset_map_sync(r->ps, &err);
    if (rc)
        pub_die(rc, &err);
    /* ZMQ's slow joiner: what a PUB sends before a subscriber has joined is
     * lost, so wait (bounded) until each publisher has one. */
    double deadline = now_s() + r->pub_wait;
    for (;;) {
        pub_sleep_until(r, 0);
        size_t missing = kvix_pubset_unsubscribed(r->ps);
        if (missing == 0 || interrupted)
            break;
        if (now_s() >= deadline) {
            if (!r->quiet && r->pub_wait > 0)
                cli_warn("%zu of %zu publishers have no subscriber after %g s; publishing anyway",
                         missing, kvix_pubset_count(r->ps), r->pub_wait);
            break;
        }
        double step = now_s() + 0.02;
        pub_sleep_until(r, step < deadline ? step : deadline);
    }
}

static void stop_pubs(replay *r)
{
    if (!r->ps)
        return;
    if (r->pub_hold > 0) {
        if (!r->quiet)
            cli_warn("all batches sent; serving replay requests for %g s", r->pub_hold);
        pub_sleep_until(r, now_s() + r->pub_hold);
    }
    r->batches = kvix_pubset_batches(r->ps);
    r->npubs = kvix_pubset_count(r->ps);
    kvix_pubset_free(r->ps, 5000); /* bounded: a stuck peer cannot hang us */
    r->ps = NULL;
}

static void flush_batch(replay *r)
{
    size_t n;
    const kvix_event *b = kvix_pubset_pending(r->ps, &n);
    if (n == 0)
        return;
    uint64_t worker = b[0].worker;
    kvix_err err;
    int rc = kvix_pubset_flush(r->ps, &err);
    if (rc == KVIX_ESYS || rc == KVIX_ENOMEM)
        cli_die(cli_exit_for(rc), "%s", err.msg);
    if (rc) {
        cli_warn("cannot publish a batch of worker %" PRIu64 ": %s", worker, err.msg);
        r->rejected += n;
        r->written -= n;
        for (size_t i = 0; i < n; i++)
            r->by_type[b[i].type]--;
        if (r->strict)
            r->fatal = KVIX_EXIT_STRICT;
    }
}

/* ---- timing and progress --------------------------------------------------- */

static void sleep_for(replay *r, double s)
{
    if (s <= 0)
        return;
    fflush(stdout); /* downstream sees everything due before we wait */
    if (r->ps) {
        pub_sleep_until(r, now_s() + s);
        return;
    }
    struct timespec d = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&d, &d) != 0 && errno == EINTR && !interrupted) {
    }
}

static void wait_for(replay *r, const kvix_event *ev)
{
    double far;
    double wait = kvix_pace_wait(&r->pace, ev->has_ts, ev->ts, r->written, now_s(), &far);
    if (far > 0) {
        /* a ts far off (1e18, milliseconds taken for seconds) would wait for
         * ever without a word: say so and go on from it */
        if (r->at_name)
            cli_warn("record at %s:%" PRIu64 " is due in %.3g s (ceiling %d s): sent at once, "
                     "the clock goes on from it",
                     r->at_name, r->at_line, far, KVIX_PACE_GAP_MAX);
        else
            cli_warn("a record is due in %.3g s (ceiling %d s): sent at once, the clock goes on "
                     "from it",
                     far, KVIX_PACE_GAP_MAX);
        return;
    }
    sleep_for(r, wait);
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
    double el = kvix_pace_elapsed(&r->pace, now_s());
    char eta[48];
    cli_progress_eta(input_done(r), r->in_total, now_s() - r->in_started, eta);
    fprintf(stderr, "\r%s: %s:%s %" PRIu64 " read, %" PRIu64 " written, %.0f/s%s", cli_name(),
            r->in_name ? r->in_name : "", eta, r->in, r->written,
            el > 0 ? (double)r->written / el : 0.0, final ? "\033[K\r" : "\033[K");
    if (final)
        fputs("\r\033[K", stderr);
}

/* ---- the record path ------------------------------------------------------- */

/* One record in: filter, time, write or publish. Returns non-zero to stop. */
static int emit(void *ctx, const kvix_event *ev)
{
    replay *r = ctx;
    if (interrupted)
        return 1;
    r->in++;
    progress(r, 0);
    if (!kvix_filter_keep(&r->filter, ev)) {
        r->filtered++;
        return 0;
    }
    r->kept++;
    if (r->ps && ev->type == KVIX_EV_QUERY) {
        r->pub_skipped++; /* engines do not publish queries */
        return 0;
    }
    kvix_err err;
    if (r->ps) {
        if (!kvix_pubset_continues(r->ps, ev)) { /* a new engine batch: paced */
            flush_batch(r);
            wait_for(r, ev);
        }
        if (kvix_pubset_push(r->ps, ev, &err))
            cli_die(KVIX_EXIT_SYS, "%s", err.msg);
    } else {
        wait_for(r, ev);
        r->out.len = 0;
        int rc = r->fmt == KVIX_FMT_MSGPACK ? kvix_event_to_msgpack(ev, &r->out, &err)
                                            : kvix_event_to_json(ev, &r->out, &err);
        if (rc) {
            if (rc == KVIX_ENOMEM)
                cli_die(KVIX_EXIT_SYS, "%s", err.msg);
            cli_warn("cannot write a %s record: %s", kvix_event_type_name(ev->type), err.msg);
            r->rejected++;
            if (r->strict) {
                r->fatal = KVIX_EXIT_STRICT;
                return 1;
            }
            return 0;
        }
        if (fwrite(r->out.data, 1, r->out.len, stdout) != r->out.len) {
            /* A reader that went away on purpose (head) ends the replay. */
            if (errno == EPIPE) {
                r->stop = 1;
                return 1;
            }
            cli_warn("error writing standard output: %s", strerror(errno));
            r->fatal = KVIX_EXIT_IO;
            return 1;
        }
    }
    r->written++;
    r->by_type[ev->type >= 0 && ev->type < 5 ? ev->type : 0]++;
    if (r->fatal)
        return 1;
    if (r->limit && r->written >= r->limit) {
        r->stop = 1;
        return 1;
    }
    return 0;
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

static int open_input(replay *r, const char *path, kvix_logio **lio)
{
    int fd = strcmp(path, "-") == 0 ? dup(STDIN_FILENO) : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        cli_warn("cannot open %s: %s", path, strerror(errno));
        return KVIX_EXIT_IO;
    }
    r->in_name = strcmp(path, "-") == 0 ? "<stdin>" : path;
    if (r->progress && file_size(fd))
        r->pos_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0); /* shares the offset: how far it is read */
    kvix_err err;
    if (kvix_logio_open(lio, fd, strcmp(path, "-") == 0 ? "<stdin>" : path, &err)) {
        cli_warn("%s", err.msg);
        return cli_exit_for(err.code);
    }
    return 0;
}

static int close_input(replay *r, kvix_logio *lio)
{
    if (r->pos_fd >= 0) {
        r->in_before += file_size(r->pos_fd);
        close(r->pos_fd);
        r->pos_fd = -1;
    }
    kvix_err err;
    if (kvix_logio_close(lio, &err)) {
        cli_warn("%s", err.msg);
        return KVIX_EXIT_IO;
    }
    return 0;
}

typedef int (*record_fn)(replay *r, const kvix_event *ev);

/* Read one log, passing each good record to fn. Returns an exit code (0 ok). */
static int read_log(replay *r, const char *path, record_fn fn, int quiet_rejects)
{
    kvix_logio *lio;
    int code = open_input(r, path, &lio);
    if (code)
        return code;
    kvix_reader *rd;
    kvix_err err;
    const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
    if (kvix_reader_new(&rd, kvix_logio_fd(lio), name, KVIX_FMT_AUTO, &err)) {
        cli_warn("%s", err.msg);
        close_input(r, lio);
        return cli_exit_for(err.code);
    }
    kvix_reader_set_eintr(rd, 1);
    kvix_event ev;
    kvix_event_init(&ev);
    for (;;) {
        int rc = kvix_reader_next(rd, &ev, &err);
        if (rc == KVIX_EOF || interrupted)
            break;
        if (rc == KVIX_ESYS)
            continue; /* a signal that was not ours to act on */
        if (rc == KVIX_EIO) {
            cli_warn("%s: %s", name, err.msg);
            code = KVIX_EXIT_IO;
            break;
        }
        if (rc) {
            if (!quiet_rejects) {
                cli_warn("bad record at %s:%" PRIu64 ": %s", name, kvix_reader_pos(rd), err.msg);
                r->rejected++;
                if (r->strict) {
                    code = KVIX_EXIT_STRICT;
                    break;
                }
            }
            continue;
        }
        r->at_name = name;
        r->at_line = kvix_reader_pos(rd);
        if (fn(r, &ev))
            break;
    }
    kvix_event_release(&ev);
    kvix_reader_free(rd);
    int c2 = close_input(r, lio);
    return code ? code : c2;
}

static int emit_record(replay *r, const kvix_event *ev)
{
    return emit(r, ev);
}

static int collect_pub(replay *r, const kvix_event *ev)
{
    if (ev->type != KVIX_EV_QUERY && kvix_filter_worker_match(&r->filter, ev->worker, ev->dp))
        add_pub(r, ev->worker, ev->dp);
    return interrupted;
}

/* ---- mooncake -------------------------------------------------------------- */

typedef struct mooncake_args {
    const char *trace;
    kvix_mooncake_opts o;
    const char *final_state;
} mooncake_args;

static int write_block(void *ctx, uint32_t worker, uint64_t engine, uint64_t local, uint32_t depth)
{
    char e[17], l[17];
    kvix_hex64(engine, e);
    kvix_hex64(local, l);
    return fprintf(ctx, "%" PRIu32 " %s %s %" PRIu32 "\n", worker, e, l, depth) < 0;
}

/* A trace request that cannot be played: said with its line and counted; true
 * when --strict stops the run there. */
static bool reject_request(replay *r, const char *trace, uint64_t line, const kvix_err *err)
{
    cli_warn("bad request at %s:%" PRIu64 ": %s", trace, line, err->msg);
    r->rejected++;
    return r->strict;
}

static int run_mooncake(replay *r, mooncake_args *a)
{
    kvix_err err;
    kvix_mooncake *m;
    if (kvix_mooncake_new(&m, &a->o, &err))
        cli_usage_error("%s", err.msg);
    if (r->pub) {
        for (uint32_t w = 0; w < a->o.workers * a->o.copies; w++) {
            if (kvix_filter_worker_match(&r->filter, w, 0))
                add_pub(r, w, 0);
        }
        start_pubs(r);
    }
    kvix_logio *lio;
    char *trace[] = {(char *)a->trace};
    r->in_total = inputs_size(trace, 1);
    r->in_started = now_s();
    int code = open_input(r, a->trace, &lio);
    if (code) {
        kvix_mooncake_free(m);
        return code;
    }
    kvix_mooncake_trace *t;
    if (kvix_mooncake_trace_new(&t, kvix_logio_fd(lio), &err))
        cli_die(KVIX_EXIT_SYS, "%s", err.msg);
    kvix_mooncake_req req;
    kvix_mooncake_req_init(&req);
    uint64_t n = 0;
    /* --limit counts trace requests here, not records. */
    uint64_t limit = r->limit;
    r->limit = 0;
    while (!limit || n < limit) {
        int rc = kvix_mooncake_trace_next(t, &req, &err);
        if (rc == KVIX_EOF)
            break;
        if (rc == KVIX_EIO || rc == KVIX_ENOMEM) {
            cli_warn("%s: %s", a->trace, err.msg);
            code = cli_exit_for(rc);
            break;
        }
        if (rc) {
            if (reject_request(r, a->trace, kvix_mooncake_trace_line(t), &err)) {
                code = KVIX_EXIT_STRICT;
                break;
            }
            continue;
        }
        rc = kvix_mooncake_step(m, &req, kvix_mooncake_trace_line(t) - 1, emit, r, &err);
        n++;
        if (rc == KVIX_ERANGE) { /* nothing of it played */
            if (reject_request(r, a->trace, kvix_mooncake_trace_line(t), &err)) {
                code = KVIX_EXIT_STRICT;
                break;
            }
            continue;
        }
        if (rc < 0)
            cli_die(cli_exit_for(rc), "%s", err.msg);
        if (rc > 0 || r->fatal)
            break;
    }
    if (r->ps)
        flush_batch(r);
    kvix_mooncake_req_release(&req);
    kvix_mooncake_trace_free(t);
    int c2 = close_input(r, lio);
    if (!code)
        code = c2;
    if (a->final_state) {
        FILE *f = fopen(a->final_state, "w");
        if (!f)
            cli_die(KVIX_EXIT_IO, "cannot write %s: %s", a->final_state, strerror(errno));
        int bad = kvix_mooncake_foreach(m, write_block, f, &err);
        if (bad < 0)
            cli_die(cli_exit_for(bad), "%s", err.msg);
        if (bad || fflush(f) != 0 || ferror(f) | fclose(f))
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
