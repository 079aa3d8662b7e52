/* kvindex: apply kvix events read from stdin (or files) to the index, keep it
 * in a snapshot file, and answer the queries met in the input.
 *
 * Signals only set flags and write a byte to a self-pipe that the reader
 * polls with its input, so a blocked read wakes at once and every decision
 * (save, stop, print the summary) is taken in the main loop, never inside a
 * handler. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kvix/enginefeed.h"
#include "kvix/index.h"
#include "kvix/natslog.h"
#include "kvix/peers.h"
#include "kvix/service.h"
#include "kvix/snapshot.h"
#include "kvix/stream.h"

enum {
    O_BACKEND = 0x100,
    O_JUMP,
    O_STRICT,
    O_SAVE_SECS,
    O_SAVE_EVENTS,
    O_QUIET,
    O_NATS,
    O_STREAM,
    O_RESET_ON_GAP,
    O_UNTIL_CAUGHT_UP,
    O_LISTEN,
    O_HTTP_THREADS,
    O_PEERS,
    O_WORKERS_FILE,
    O_MODEL,
    O_TENANT,
    O_BLOCK_SIZE,
};

static const cli_opt options[] = {
    {'s', 's', "snapshot", "FILE", "file",
     "load FILE first if it exists; save it at end of input, on SIGTERM, SIGINT and SIGHUP"},
    {'q', 'q', "query-only", NULL, NULL,
     "answer queries against the snapshot (-s) without applying events"},
    {'f', 'f', "format", "FMT", "auto|ndjson|msgpack",
     "input format (default auto: from the first byte)"},
    {O_BACKEND, 0, "backend", "NAME", "positional|radix|reference",
     "index backend (default positional)"},
    {O_JUMP, 0, "jump", "N", NULL, "positional backend: jump size in positions (default: tuned)"},
    {'t', 't', "threads", "N", NULL,
     "apply events on N writer threads, each worker sticky to one (default 0: inline)"},
    {O_STRICT, 0, "strict", NULL, NULL, "stop at the first rejected record, save, exit 5"},
    {O_SAVE_SECS, 0, "save-every-seconds", "N", NULL,
     "also save every N seconds when the index changed"},
    {O_SAVE_EVENTS, 0, "save-every-events", "N", NULL, "also save after every N applied events"},
    {O_QUIET, 0, "quiet", NULL, NULL,
     "no summary and no progress line on stderr (SIGUSR1 still prints the summary)"},
    {'v', 'v', "verbose", NULL, NULL, "report the snapshot loaded and every save on stderr"},
    {O_NATS, 0, "nats", "URL", NULL,
     "consume a NATS JetStream stream instead of stdin, from the snapshot's position on"},
    {O_STREAM, 0, "stream", "NAME", NULL, "--nats: the stream to consume (default KVIX)"},
    {O_RESET_ON_GAP, 0, "reset-on-gap", NULL, NULL,
     "--nats: when the stream no longer holds the next message, start empty from its first "
     "(default: save and exit 7)"},
    {O_UNTIL_CAUGHT_UP, 0, "until-caught-up", NULL, NULL,
     "--nats: stop (and save) once the stream's last message at start is applied"},
    {O_LISTEN, 0, "listen", "[ADDR:]PORT", NULL,
     "serve the HTTP API on ADDR (default 127.0.0.1) and PORT (0: any) until SIGTERM"},
    {O_HTTP_THREADS, 0, "http-threads", "N", NULL, "HTTP server threads (default 2)"},
    {O_PEERS, 0, "peers", "URL,...", NULL,
     "start from the first peer whose GET /snapshot or GET /dump answers, after holding the "
     "input back 1 s (else from the snapshot); --nats: a new replica, or one the stream left "
     "behind, takes a peer's /snapshot and its stream position"},
    {'w', 'w', "worker", "ID[:DP]=ENDPOINT", NULL,
     "subscribe to a worker's event endpoint and apply its events (repeatable)"},
    {O_WORKERS_FILE, 0, "workers-file", "FILE", "file",
     "subscribe to the ID[:DP]=ENDPOINT [replay=ENDPOINT] lines of FILE; re-read on SIGHUP"},
    {O_MODEL, 0, "model", "NAME", NULL, "-w: model name of the events (default \"default\")"},
    {O_TENANT, 0, "tenant", "NAME", NULL, "-w: tenant of the events (default \"default\")"},
    {O_BLOCK_SIZE, 0, "block-size", "N", NULL,
     "-w: configured block size; smaller (partial) blocks are skipped (default: each event's)"},
    {0, 0, NULL, NULL, NULL, NULL},
};

static const cli_tool tool = {
    "kvindex",
    "[-s SNAPSHOT] [options] [FILE...]",
    "apply kvix events (NDJSON or msgpack) to the KV-cache block index and answer queries",
    options,
    "file",
    .exits = "01234567",
};

/* Why records were rejected, for the summary. */
enum {
    R_JSON, R_MSGPACK, R_MISSING, R_TYPE, R_HASH, R_VALUE, R_RANGE, R_LIMIT, R_BS, R_PARENT,
    R_QONLY, R_OTHER, R_COUNT
};
static const char *const reason_names[R_COUNT] = {
    "malformed json", "malformed msgpack", "missing field", "wrong type", "bad hash",
    "bad value", "out of range", "over a limit", "block size mismatch", "unknown parent",
    "event in query-only mode", "invalid",
};

static int classify(const kvix_err *e)
{
    const char *m = e->msg;
    switch (e->code) {
    case KVIX_EBLOCKSIZE: return R_BS;
    case KVIX_EPARENT: return R_PARENT;
    case KVIX_ELIMIT: return R_LIMIT;
    case KVIX_ERANGE: return R_RANGE;
    }
    if (strncmp(m, "malformed json", 14) == 0)
        return R_JSON;
    if (strstr(m, "msgpack"))
        return R_MSGPACK;
    if (strncmp(m, "missing ", 8) == 0 || strncmp(m, "query has neither", 17) == 0)
        return R_MISSING;
    if (strncmp(m, "bad hash", 8) == 0)
        return R_HASH;
    if (strstr(m, " is not ") || strncmp(m, "record is ", 10) == 0)
        return R_TYPE;
    if (strncmp(m, "event in query-only", 19) == 0)
        return R_QONLY;
    if (e->code == KVIX_EINVAL)
        return R_VALUE;
    return R_OTHER;
}

/* Tags given to kvix_index_submit: event type, input file, position. */
#define TAG_POS_BITS 44
#define TAG_FILE_BITS 16
static uint64_t make_tag(int type, size_t file, uint64_t pos)
{
    return (uint64_t)type << (TAG_POS_BITS + TAG_FILE_BITS) |
           (uint64_t)(file & 0xffff) << TAG_POS_BITS | (pos & ((UINT64_C(1) << TAG_POS_BITS) - 1));
}

typedef struct kvi {
    kvix_index *idx;
    const char *snap;
    int query_only, strict, quiet, verbose, progress;
    unsigned threads;
    uint64_t save_every_events;
    double save_every_secs;
    const char **names;     /* input names, by file index (for rejections from threads) */
    /* counters of the main thread */
    uint64_t submitted[KVIX_EV_QUERY + 1];
    uint64_t queries, answered, since_save, records;
    double last_save, started;
    int dirty, io_error;
    int save_failed; /* the last save failed: its exit code, else 0 */
    /* rejections: also written by writer threads */
    pthread_mutex_t mu;
    uint64_t rejected, reasons[R_COUNT], rejected_type[KVIX_EV_QUERY + 1];
    int strict_hit;
    int progress_shown;
    uint64_t input_size;  /* what is left of a regular file when its reading began, else 0 */
    double input_started;
    kvix_apply_result base; /* totals after loading the snapshot */
    /* --nats: every message up to seq is applied */
    kvix_natslog_opts nopt;
    int reset_on_gap, until_caught_up, gone, has_seq;
    uint64_t seq;
    int mid_message; /* --nats: some records of message seq + 1 applied (no save now) */
    kvix_natslog_lag lag;
    kvix_index_opts io;
    kvix_buf out;
    kvix_answer ans;
    char **unknown;         /* "model\ttenant" already warned about */
    size_t nunknown;
    kvix_service *svc; /* --listen: the HTTP API */
    /* -w, --workers-file, --listen: engine subscriptions applied on their own
     * thread; write_mu is taken by every writer of the index then */
    kvix_enginefeed *feed;
    pthread_mutex_t write_mu;
    const char *workers_file;
    size_t feed_file;    /* the names[] slot of the subscriptions' rejections */
    uint64_t fed_at_save; /* feed_events() at the last save */
    kvix_peers *peers;    /* --peers and POST /register_peer */
    int svc_held;         /* --nats: the service's writers' side held for a whole message */
} kvi;

/* Distinct unknown names warned about; past this many, no more warnings. */
#define UNKNOWN_WARN_MAX 1024

static volatile sig_atomic_t sig_stop, sig_save, sig_summary, sig_tick;
static int wake[2] = {-1, -1};

static void on_signal(int s)
{
    int saved = errno;
    if (s == SIGTERM || s == SIGINT)
        sig_stop = 1;
    else if (s == SIGHUP)
        sig_save = 1;
    else if (s == SIGUSR1)
        sig_summary = 1;
    else if (s == SIGALRM)
        sig_tick = 1;
    ssize_t w = write(wake[1], "", 1); /* a full pipe is fine: a wake-up is pending */
    (void)w;
    errno = saved;
}

static void install_signals(int with_timer)
{
    if (pipe(wake) != 0)
        cli_die(KVIX_EXIT_SYS, "cannot create a pipe: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
        fcntl(wake[i], F_SETFL, fcntl(wake[i], F_GETFL) | O_NONBLOCK);
        fcntl(wake[i], F_SETFD, FD_CLOEXEC);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART; /* stdout writes restart; the reader wakes via the pipe */
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGALRM};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    /* A reader of our answers that goes away must not kill us before we save. */
    signal(SIGPIPE, SIG_IGN);
    if (with_timer) {
        struct itimerval it = {{1, 0}, {1, 0}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
}

static void drain_wake(void)
{
    char b[64];
    while (read(wake[0], b, sizeof b) > 0)
        ;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void clear_progress(kvi *k)
{
    if (k->progress_shown) {
        fputs("\r\033[K", stderr);
        k->progress_shown = 0;
    }
}

/* from_input: the record came from stdin or a stream, whose submitted[]
 * counts it; the subscriptions' rejections are counted by their feed */
static void reject_from(kvi *k, const char *what, const char *name, uint64_t pos, int type,
                        int from_input, const kvix_err *e)
{
    pthread_mutex_lock(&k->mu);
    clear_progress(k);
    cli_warn("bad %s at %s:%" PRIu64 ": %s", what, name, pos, e->msg);
    k->rejected++;
    int reason = classify(e);
    k->reasons[reason]++;
    if (k->svc)
        kvix_service_note_event(k->svc, type, reason);
    if (from_input && type >= 0 && type <= KVIX_EV_QUERY)
        k->rejected_type[type]++;
    if (k->strict) {
        k->strict_hit = 1;
        if (k->feed) /* nothing after the first refused event, as with stdin */
            kvix_enginefeed_halt(k->feed);
        /* the main thread may be waiting (serve): a rejection on the
         * subscriptions' or a writer's thread must wake it */
        ssize_t w = write(wake[1], "", 1);
        (void)w;
    }
    pthread_mutex_unlock(&k->mu);
}

static void reject(kvi *k, const char *what, const char *name, uint64_t pos, int type,
                   const kvix_err *e)
{
    reject_from(k, what, name, pos, type, 1, e);
}

/* Every query line gets one answer line (contract section 4), so a
 * coprocess reading our answers never waits for one that will not come: a
 * rejected query, or a line whose kind could not be told, is answered with
 * its error. With -q every line is a query. */
static void answer_error(kvi *k, const kvix_event *ev, const kvix_err *e)
{
    if (!k->query_only && ev->type != KVIX_EV_QUERY && ev->type != KVIX_EV_NONE)
        return;
    kvix_err err;
    k->out.len = 0;
    int rc = kvix_error_to_json(ev->type == KVIX_EV_QUERY && ev->has_id ? ev->id : NULL, e->msg,
                                &k->out, &err);
    if (rc)
        cli_die(KVIX_EXIT_SYS, "%s", err.msg);
    fwrite(k->out.data, 1, k->out.len, stdout);
}

/* One warning per unknown name: a query for a model or tenant the index
 * has never seen answers like a cache miss, with "unknown" saying why. */
static void warn_unknown(kvi *k, const char *name, uint64_t pos, const kvix_event *q)
{
    int model = k->ans.unknown == KVIX_UNKNOWN_MODEL;
    char key[2 * KVIX_NAME_MAX + 1];
    snprintf(key, sizeof key, "%s\t%s", q->model, model ? "" : q->tenant);
    for (size_t i = 0; i < k->nunknown; i++)
        if (strcmp(k->unknown[i], key) == 0)
            return;
    if (k->nunknown == UNKNOWN_WARN_MAX)
        return;
    char **v = realloc(k->unknown, (k->nunknown + 1) * sizeof *v);
    char *dup = strdup(key);
    if (!v || !dup)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    k->unknown = v;
    v[k->nunknown++] = dup;
    clear_progress(k);
    if (model)
        cli_warn("unknown model \"%s\" at %s:%" PRIu64 ": the index has never seen it "
                 "(answered with \"unknown\":\"model\")",
                 q->model, name, pos);
    else
        cli_warn("unknown tenant \"%s\" of model \"%s\" at %s:%" PRIu64
                 ": the index has never seen it (answered with \"unknown\":\"tenant\")",
                 q->tenant, q->model, name, pos);
}

/* Called on a writer thread (kvix_index_submit). */
static void on_reject(void *ctx, uint64_t tag, const kvix_err *e)
{
    kvi *k = ctx;
    int type = (int)(tag >> (TAG_POS_BITS + TAG_FILE_BITS));
    size_t file = (size_t)(tag >> TAG_POS_BITS) & 0xffff;
    uint64_t pos = tag & ((UINT64_C(1) << TAG_POS_BITS) - 1);
    reject_from(k, "event", k->names[file], pos, type, !k->feed || file != k->feed_file, e);
}

/* The subscriptions' thread writes the index too: every writer takes
 * write_mu (kvix/enginefeed.h), and so does whatever needs it quiet. */
static void lock_writes(kvi *k)
{
    if (k->feed)
        pthread_mutex_lock(&k->write_mu);
}

static void unlock_writes(kvi *k)
{
    if (k->feed)
        pthread_mutex_unlock(&k->write_mu);
}

static void sync_writers(kvi *k)
{
    if (k->threads) {
        lock_writes(k);
        kvix_index_sync(k->idx);
        unlock_writes(k);
    }
}

static void human_bytes(uint64_t b, char out[32])
{
    if (b < 10240)
        snprintf(out, 32, "%" PRIu64 " bytes", b);
    else if (b < 10u << 20)
        snprintf(out, 32, "%.1f KiB", (double)b / 1024);
    else
        snprintf(out, 32, "%.1f MiB", (double)b / 1048576);
}

static void summary(kvi *k)
{
    lock_writes(k);
    if (k->threads)
        kvix_index_sync(k->idx);
    pthread_mutex_lock(&k->mu);
    clear_progress(k);
    uint64_t ap[KVIX_EV_QUERY + 1];
    uint64_t events = 0;
    for (int t = KVIX_EV_STORED; t <= KVIX_EV_CLEARED; t++) {
        ap[t] = k->submitted[t] - k->rejected_type[t];
        events += ap[t];
    }
    cli_warn("applied %" PRIu64 " events: %" PRIu64 " stored, %" PRIu64 " removed, %" PRIu64
             " cleared",
             events, ap[KVIX_EV_STORED], ap[KVIX_EV_REMOVED], ap[KVIX_EV_CLEARED]);
    kvix_apply_result tot;
    kvix_index_totals(k->idx, &tot);
    tot.stored -= k->base.stored;
    tot.duplicate -= k->base.duplicate;
    tot.removed -= k->base.removed;
    tot.unknown -= k->base.unknown;
    cli_warn("blocks: %" PRIu64 " stored, %" PRIu64 " duplicate, %" PRIu64 " removed, %" PRIu64
             " unknown removals",
             tot.stored, tot.duplicate, tot.removed, tot.unknown);
    cli_warn("answered %" PRIu64 " of %" PRIu64 " queries", k->answered, k->queries);
    if (k->rejected) {
        char line[512];
        size_t n = 0;
        for (int r = 0; r < R_COUNT; r++)
            if (k->reasons[r] && n < sizeof line)
                n += (size_t)snprintf(line + n, sizeof line - n, "%s%" PRIu64 " %s",
                                      n ? ", " : "", k->reasons[r], reason_names[r]);
        cli_warn("rejected %" PRIu64 " records: %s", k->rejected, line);
    } else {
        cli_warn("rejected 0 records");
    }
    kvix_index_stats st;
    kvix_index_stats_get(k->idx, &st);
    char mem[32];
    human_bytes(st.bytes, mem);
    cli_warn("index: %zu partitions, %zu workers, %zu blocks, %zu unique blocks, %s",
             st.partitions, st.workers, st.blocks, st.unique_blocks, mem);
    if (k->feed) {
        kvix_enginefeed_counts c;
        kvix_enginefeed_counts_get(k->feed, &c);
        cli_warn("subscriptions: %" PRIu64 " now, %" PRIu64 " batches, %" PRIu64
                 " events applied; %" PRIu64 " gaps, %" PRIu64 " replays, %" PRIu64
                 " losses, %" PRIu64 " restarts",
                 c.sub.subscriptions, c.sub.batches, c.applied, c.sub.seq.gaps,
                 c.sub.seq.replays, c.sub.seq.losses, c.sub.seq.restarts);
    }
    pthread_mutex_unlock(&k->mu);
    unlock_writes(k);
}

/* Events the subscriptions applied or had refused: a change of the index
 * since the last save when it moved. */
static uint64_t feed_events(kvi *k)
{
    if (!k->feed)
        return 0;
    kvix_enginefeed_counts c;
    kvix_enginefeed_counts_get(k->feed, &c);
    return c.applied + c.rejected;
}

static int save(kvi *k, const char *why)
{
    if (!k->snap || k->query_only)
        return KVIX_OK;
    if (k->svc_held) /* mid-message: a half message has no sequence; the stream keeps the rest */
        return KVIX_OK;
    double t0 = now();
    if (k->svc)
        kvix_service_quiet_begin(k->svc); /* no /dump or /snapshot walks the index meanwhile */
    lock_writes(k);
    if (k->threads)
        kvix_index_sync(k->idx);
    kvix_snapshot_info info;
    kvix_err err;
    int rc = kvix_snapshot_save_at(k->idx, k->snap, k->nopt.url ? k->nopt.stream : NULL, k->seq,
                                   &info, &err);
    uint64_t fed = feed_events(k);
    unlock_writes(k);
    if (k->svc)
        kvix_service_quiet_end(k->svc);
    clear_progress(k);
    if (rc) {
        cli_warn("cannot save %s: %s", k->snap, err.msg);
        /* out of memory is 6 like everywhere else, whatever failed is 3 */
        k->save_failed = rc == KVIX_ENOMEM || rc == KVIX_ESYS ? KVIX_EXIT_SYS : KVIX_EXIT_IO;
        return rc;
    }
    k->save_failed = 0;
    if (k->svc) {
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        kvix_service_note_save(k->svc, now() - t0,
                               (double)wall.tv_sec + (double)wall.tv_nsec / 1e9);
    }
    k->dirty = 0;
    k->fed_at_save = fed;
    k->since_save = 0;
    k->last_save = now();
    if (k->verbose && k->nopt.url)
        cli_warn("saved %s (%s): %" PRIu64 " blocks, %" PRIu64 " bytes, stream %s at %" PRIu64,
                 k->snap, why, info.blocks, info.bytes, k->nopt.stream, k->seq);
    else if (k->verbose)
        cli_warn("saved %s (%s): %" PRIu64 " blocks, %" PRIu64 " bytes", k->snap, why,
                 info.blocks, info.bytes);
    return KVIX_OK;
}

/* Out of memory (or threads) mid-run: save what was applied, as on any stop
 * (nothing acknowledged is lost), free the index when nothing else uses it
 * (a leak checker sees the pointers the backends keep tagged as lost), exit 6. */
static void die_sys(kvi *k, const kvix_err *err) __attribute__((noreturn));
static void die_sys(kvi *k, const kvix_err *err)
{
    save(k, "failure");
    if (!k->svc && k->idx) {
        kvix_index_free(k->idx);
        k->idx = NULL;
    }
    cli_die(KVIX_EXIT_SYS, "%s", err->msg);
}

static void show_progress(kvi *k, kvix_reader *r)
{
    double el = now() - k->started;
    char eta[48];
    cli_progress_eta(kvix_reader_offset(r), k->input_size, now() - k->input_started, eta);
    pthread_mutex_lock(&k->mu);
    fprintf(stderr, "\r%s: %s:%s %" PRIu64 " records, %.0f/s, %.1f MB read, %" PRIu64
                    " rejected\033[K",
            cli_name(), kvix_reader_name(r), eta, k->records,
            el > 0 ? (double)k->records / el : 0.0, (double)kvix_reader_offset(r) / 1e6,
            k->rejected);
    k->progress_shown = 1;
    pthread_mutex_unlock(&k->mu);
}

static void load_workers(kvi *k, int initial);

/* What signals and timers asked for, between two records. */
static void handle_flags(kvi *k, kvix_reader *r)
{
    if (sig_summary) {
        sig_summary = 0;
        summary(k);
    }
    if (sig_save) {
        sig_save = 0;
        save(k, "SIGHUP");
        if (k->workers_file)
            load_workers(k, 0);
    }
    if (sig_tick) {
        sig_tick = 0;
        int dirty = k->dirty || feed_events(k) != k->fed_at_save;
        if (k->save_every_secs > 0 && dirty && now() - k->last_save >= k->save_every_secs)
            save(k, "timer");
        if (k->progress && r)
            show_progress(k, r);
    }
}

static void answer(kvi *k, const char *name, uint64_t pos, const kvix_event *q)
{
    kvix_err err;
    k->queries++;
    sync_writers(k); /* answer against every event read before the query */
    int rc = kvix_index_query_event(k->idx, q, &k->ans, &err);
    if (!rc) {
        k->out.len = 0;
        rc = kvix_answer_to_json(&k->ans, q, &k->out, &err);
    }
    if (rc) {
        if (rc == KVIX_ENOMEM)
            die_sys(k, &err);
        reject(k, "query", name, pos, KVIX_EV_QUERY, &err);
        answer_error(k, q, &err);
        return;
    }
    if (k->ans.unknown)
        warn_unknown(k, name, pos, q);
    fwrite(k->out.data, 1, k->out.len, stdout);
    k->answered++;
}

static void apply(kvi *k, const char *name, uint64_t pos, size_t file, const kvix_event *ev)
{
    kvix_err err;
    k->submitted[ev->type]++;
    if (k->query_only) {
        kvix_err_set(&err, KVIX_EINVAL, "event in query-only mode (-q)");
        reject(k, "event", name, pos, ev->type, &err);
        answer_error(k, ev, &err);
        return;
    }
    int rc;
    if (k->svc)
        kvix_service_note_event(k->svc, ev->type, -1);
    if (k->svc && !k->svc_held)
        kvix_service_write_begin(k->svc);
    lock_writes(k);
    if (k->threads)
        rc = kvix_index_submit(k->idx, ev, make_tag(ev->type, file, pos), &err);
    else
        rc = kvix_index_apply(k->idx, ev, NULL, &err);
    unlock_writes(k);
    if (k->svc && !k->svc_held)
        kvix_service_write_end(k->svc);
    if (rc == KVIX_ENOMEM || rc == KVIX_ESYS)
        die_sys(k, &err);
    if (rc && !k->threads) { /* with threads, on_reject has reported it (even when refused at submit) */
        reject(k, "event", name, pos, ev->type, &err);
        return;
    }
    k->dirty = 1;
    if (k->save_every_events && ++k->since_save >= k->save_every_events && !k->mid_message)
        save(k, "event count");
}

/* Read one input to its end (or until told to stop). */
static void run_input(kvi *k, int fd, size_t file, kvix_format fmt, kvix_event *ev)
{
    kvix_reader *r;
    kvix_err err;
    if (kvix_reader_new(&r, fd, k->names[file], fmt, &err))
        die_sys(k, &err);
    kvix_reader_set_wakeup_fd(r, wake[0]);
    /* a regular file (named, or redirected to stdin) has a known size: the
     * progress line gives a percentage and an estimate of the time left */
    struct stat st;
    off_t at = lseek(fd, 0, SEEK_CUR);
    k->input_size = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && at >= 0 && st.st_size > at
                        ? (uint64_t)(st.st_size - at) : 0;
    k->input_started = now();
    int stopping = 0;
    for (;;) {
        handle_flags(k, r);
        if (k->strict_hit)
            break;
        if (sig_stop && !stopping) {
            /* apply what was already taken from the input, read nothing more */
            kvix_reader_stop(r);
            stopping = 1;
        }
        int rc = kvix_reader_next(r, ev, &err);
        if (rc == KVIX_EOF) {
            if (stopping && kvix_reader_pending(r)) {
                clear_progress(k);
                cli_warn("stopped with %zu bytes of an incomplete record from %s left unread",
                         kvix_reader_pending(r), kvix_reader_name(r));
            }
            break;
        }
        if (rc == KVIX_ESYS) { /* woken by a signal: flags are handled above */
            drain_wake();
            continue;
        }
        if (rc == KVIX_EIO) {
            clear_progress(k);
            cli_warn("%s", err.msg);
            k->io_error = 1;
            break;
        }
        if (rc == KVIX_ENOMEM)
            die_sys(k, &err);
        k->records++;
        if (rc) {
            reject(k, "event", kvix_reader_name(r), kvix_reader_pos(r), -1, &err);
            answer_error(k, ev, &err);
            continue;
        }
        if (ev->type == KVIX_EV_QUERY)
            answer(k, kvix_reader_name(r), kvix_reader_pos(r), ev);
        else
            apply(k, kvix_reader_name(r), kvix_reader_pos(r), file, ev);
    }
    if (k->progress) { /* the last figures, also for an input read in under a second */
        show_progress(k, r);
        clear_progress(k);
    }
    kvix_reader_free(r);
}

/* 1 if the snapshot was there and loaded. */
static int load(kvi *k)
{
    kvix_snapshot_info info;
    kvix_err err;
    int rc = kvix_snapshot_load(k->idx, k->snap, &info, &err);
    if (rc == KVIX_ENOTFOUND && !k->query_only) {
        if (k->verbose)
            cli_warn("no snapshot %s yet: starting empty", k->snap);
        return 0;
    }
    if (rc && rc != KVIX_ENOTFOUND) { /* a failed load leaves part of the file: unusable */
        kvix_index_free(k->idx);
        k->idx = NULL;
    }
    if (rc == KVIX_ECORRUPT)
        cli_die(KVIX_EXIT_CORRUPT, "cannot load %s: %s (the file is left as it is)", k->snap,
                err.msg);
    if (rc)
        cli_die(cli_exit_for(rc) == KVIX_EXIT_REJECTED ? KVIX_EXIT_IO : cli_exit_for(rc),
                "cannot load %s: %s", k->snap, err.msg);
    if (k->verbose)
        cli_warn("loaded %s: %" PRIu64 " partitions, %" PRIu64 " blocks", k->snap,
                 info.partitions, info.blocks);
    if (k->nopt.url && (!info.has_stream || strcmp(info.stream, k->nopt.stream) != 0)) {
        /* freed first: the positional backend's slots hide their node pointers
         * from LeakSanitizer, which would call the loaded blocks leaked */
        kvix_index_free(k->idx);
        k->idx = NULL;
        if (!info.has_stream)
            cli_die(KVIX_EXIT_USAGE,
                    "%s records no stream position: it was not made by kvindex --nats", k->snap);
        cli_die(KVIX_EXIT_USAGE, "%s reflects stream %s, not %s", k->snap, info.stream,
                k->nopt.stream);
    }
    k->seq = info.has_stream ? info.stream_seq : 0;
    if (k->verbose && info.has_stream)
        cli_warn("%s: stream %s applied up to sequence %" PRIu64, k->snap, info.stream, k->seq);
    return 1;
}

/* ---- --nats: the stream instead of stdin ---------------------------------- */

static void lag_summary(kvi *k)
{
    if (!k->nopt.url)
        return;
    if (!k->lag.messages) {
        cli_warn("stream %s: applied up to sequence %" PRIu64, k->nopt.stream, k->seq);
        return;
    }
    cli_warn("stream %s: applied up to sequence %" PRIu64 "; lag from stored to applied: "
             "p50 %.3f ms, p99 %.3f ms, max %.3f ms over %" PRIu64 " messages",
             k->nopt.stream, k->seq, k->lag.p50_ms, k->lag.p99_ms, k->lag.max_ms,
             k->lag.messages);
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The index dropped, to start again from the stream's first message. */
static void reset_index(kvi *k)
{
    kvix_err err;
    sync_writers(k);
    kvix_index_free(k->idx);
    if (kvix_index_new(&k->idx, &k->io, &err))
        cli_die(cli_exit_for(err.code), "%s", err.msg);
    kvix_index_totals(k->idx, &k->base);
    k->dirty = 1;
}

/* Follow the stream from k->seq + 1, waiting for the server and the stream
 * to be there; 0 when the index is not from this stream. */
static int follow(kvi *k, kvix_natslog *l, kvix_natslog_state *st)
{
    kvix_err err;
    int warned = 0, rc;
    while ((rc = kvix_natslog_start(l, k->seq, st, &err)) == KVIX_EIO || rc == KVIX_ENOTFOUND) {
        if (sig_stop)
            cli_die(KVIX_EXIT_SYS, "%s", err.msg);
        if (!warned++)
            cli_warn("%s: waiting%s", err.msg, rc == KVIX_ENOTFOUND ? " for it" : " for the server");
        pause_ms(100);
        drain_wake();
    }
    if (rc)
        cli_warn("%s: %s", k->snap ? k->snap : "the index", err.msg);
    return rc == KVIX_OK;
}

/* One record of the stream, like one of stdin; a message's sequence is the
 * index's once its last record is in (saves wait for that). */
static void take_record(kvi *k, int rc, uint64_t seq, int last, const kvix_event *ev,
                        const kvix_err *err)
{
    const char *label = k->names[0];
    k->mid_message = !last;
    if (last)
        k->seq = seq;
    /* GET /snapshot pairs a state only with the sequence of the last
     * message wholly in it: the writers' side is held across a message */
    if (k->svc && !k->svc_held) {
        kvix_service_write_begin(k->svc);
        k->svc_held = 1;
    }
    if (rc == 1) {
        k->records++;
        if (ev->type == KVIX_EV_QUERY)
            answer(k, label, seq, ev);
        else
            apply(k, label, seq, 0, ev);
    } else {
        k->records += rc != KVIX_ELIMIT;
        reject(k, rc == KVIX_ELIMIT ? "message" : "event", label, seq, -1, err);
    }
    if (last && k->svc_held) {
        kvix_service_set_stream_seq(k->svc, seq);
        k->svc_held = 0;
        kvix_service_write_end(k->svc);
    }
    k->dirty = 1;
}

/* The stream no longer holds message `first - 1` (or the replica is new):
 * take the first peer's snapshot that reflects this stream at first - 1 or
 * later, in place of the index (queries go on meanwhile), and its position.
 * 1 if one did. */
static int bootstrap(kvi *k, uint64_t first)
{
    char **urls;
    size_t n, who = 0;
    kvix_err err;
    if (kvix_peers_list(k->peers, &urls, &n, &err))
        cli_die(KVIX_EXIT_SYS, "%s", err.msg);
    if (!n) {
        kvix_peers_list_free(urls, n);
        return 0;
    }
    kvix_peers_recover_opts o = {.stream = k->nopt.stream, .min_seq = first ? first - 1 : 0};
    kvix_snapshot *s;
    int rc = kvix_peers_fetch_snapshot((const char *const *)urls, n, &o, &s, &who, &err);
    if (rc) {
        cli_warn("no peer could hand over stream %s at %" PRIu64 " or later (%s)",
                 k->nopt.stream, o.min_seq, err.msg);
        kvix_peers_list_free(urls, n);
        return 0;
    }
    kvix_snapshot_info info;
    kvix_snapshot_get_info(s, &info);
    if (k->svc)
        kvix_service_quiet_begin(k->svc);
    lock_writes(k);
    if (k->threads)
        kvix_index_sync(k->idx);
    rc = kvix_snapshot_replace(s, k->idx, &err);
    unlock_writes(k);
    kvix_snapshot_close(s);
    k->seq = info.stream_seq;
    if (k->svc) {
        kvix_service_set_stream_seq(k->svc, k->seq);
        kvix_service_quiet_end(k->svc);
    }
    if (rc)
        cli_die(rc == KVIX_ENOMEM ? KVIX_EXIT_SYS : KVIX_EXIT_CORRUPT, "cannot take %s/snapshot: %s",
                urls[who], err.msg);
    if (!k->quiet)
        cli_warn("bootstrapped from %s/snapshot: stream %s at %" PRIu64 ", %" PRIu64 " blocks",
                 urls[who], k->nopt.stream, k->seq, info.blocks);
    kvix_peers_list_free(urls, n);
    kvix_index_totals(k->idx, &k->base);
    k->dirty = 1;
    return 1;
}

static void run_nats(kvi *k, kvix_event *ev)
{
    kvix_natslog *l;
    kvix_err err;
    if (kvix_natslog_open(&l, &k->nopt, &err))
        cli_die(err.code == KVIX_EINVAL ? KVIX_EXIT_USAGE : KVIX_EXIT_SYS, "%s", err.msg);
    kvix_natslog_state st;
    if (!follow(k, l, &st)) {
        k->gone = 1;
        kvix_natslog_free(l);
        return;
    }
    uint64_t target = st.last;
    int warned = 0;
    /* a stop or a save waits for the end of the message under way */
    while (!k->strict_hit && !(sig_stop && !k->mid_message)) {
        if (!k->mid_message) {
            handle_flags(k, NULL);
            if (k->until_caught_up && k->seq >= target)
                break;
        }
        uint64_t seq = 0;
        int last = 1;
        int rc = kvix_natslog_next_record(l, 200, ev, &seq, &last, &err);
        if (rc == 1 || (rc < 0 && rc != KVIX_ENOTFOUND && rc != KVIX_ENOMEM)) {
            take_record(k, rc, seq, last, ev, &err);
            warned = 0;
            continue;
        }
        if (rc == KVIX_ENOMEM)
            die_sys(k, &err);
        if (rc == 0)
            continue;
        if (rc == KVIX_ENOTFOUND && kvix_natslog_connected(l) &&
            kvix_natslog_state_get(l, &st, NULL) == KVIX_OK) {
            cli_warn("%s", err.msg);
            if (bootstrap(k, st.first)) {
                if (!follow(k, l, &st)) {
                    k->gone = 1;
                    break;
                }
                continue;
            }
            if (!k->reset_on_gap) {
                cli_warn("this replica cannot follow stream %s any more (give --peers, or run "
                         "with --reset-on-gap to start empty)",
                         k->nopt.stream);
                k->gone = 1;
                break;
            }
            cli_warn("--reset-on-gap: WARNING: the index is dropped and starts empty "
                     "from message %" PRIu64,
                     st.first);
            reset_index(k);
            k->seq = st.first - 1;
            if (!follow(k, l, &st)) {
                k->gone = 1;
                break;
            }
            continue;
        }
        if (!warned++)
            cli_warn("%s: retrying", err.msg);
        pause_ms(100);
    }
    kvix_natslog_lag_get(l, &k->lag);
    kvix_natslog_free(l);
}

/* --listen [ADDR:]PORT; an IPv6 address in brackets: [::1]:8090. */
static void parse_listen(const char *arg, char *addr, size_t cap, unsigned *port)
{
    const char *p = arg;
    snprintf(addr, cap, "127.0.0.1");
    if (arg[0] == '[') {
        const char *end = strchr(arg, ']');
        if (!end || end[1] != ':' || (size_t)(end - arg - 1) >= cap)
            cli_usage_error("bad --listen '%s' (expected [ADDR:]PORT, IPv6 as [ADDR]:PORT)", arg);
        snprintf(addr, cap, "%.*s", (int)(end - arg - 1), arg + 1);
        p = end + 2;
    } else if (strrchr(arg, ':')) {
        const char *c = strrchr(arg, ':');
        if ((size_t)(c - arg) >= cap || c == arg)
            cli_usage_error("bad --listen '%s' (expected [ADDR:]PORT)", arg);
        snprintf(addr, cap, "%.*s", (int)(c - arg), arg);
        p = c + 1;
    }
    *port = (unsigned)cli_parse_uint(p, 0, 65535, "port");
}

/* --peers URL,...: into the set; the number given. */
static size_t add_peers(kvix_peers *set, const char *list)
{
    size_t n = 0;
    for (const char *t = list; *t; t += *t == ',') {
        size_t len = strcspn(t, ",");
        kvix_err err;
        int rc = len ? kvix_peers_add(set, t, len, NULL, &err) : KVIX_OK;
        if (rc == KVIX_ELIMIT && len < KVIX_PEER_URL_MAX)
            cli_usage_error("too many --peers (limit %d)", KVIX_PEERS_MAX);
        if (rc)
            cli_usage_error("bad peer '%.*s' (expected an http:// or https:// URL): %s",
                            (int)(len < 200 ? len : 200), t, err.msg);
        n += len > 0;
        t += len;
    }
    if (!n)
        cli_usage_error("--peers needs at least one URL");
    return n;
}

/* Start from the first peer that answers; 1 if one did. With --nats only
 * a snapshot of that stream is taken, and its position with it. */
static int recover(kvi *k)
{
    char **urls;
    size_t n;
    kvix_err err;
    if (kvix_peers_list(k->peers, &urls, &n, &err))
        cli_die(KVIX_EXIT_SYS, "%s", err.msg);
    kvix_peers_recover_opts o = {.stream = k->nopt.url ? k->nopt.stream : NULL};
    kvix_peers_result res;
    if (k->svc)
        kvix_service_write_begin(k->svc);
    int rc = kvix_peers_recover(k->idx, (const char *const *)urls, n, &o, &res, &err);
    if (k->svc)
        kvix_service_write_end(k->svc);
    if (rc == KVIX_ENOTFOUND) {
        cli_warn("no peer answered (%s): starting from %s", err.msg,
                 k->snap ? "the snapshot" : "empty");
        kvix_peers_list_free(urls, n);
        return 0;
    }
    if (rc)
        cli_die(cli_exit_for(rc), "cannot recover from %s: %s", urls[res.winner], err.msg);
    if (res.from_snapshot && res.info.has_stream && k->nopt.url)
        k->seq = res.info.stream_seq;
    if (!k->quiet && res.from_snapshot && k->nopt.url)
        cli_warn("recovered from %s/snapshot: stream %s at %" PRIu64 ", %" PRIu64 " blocks",
                 urls[res.winner], k->nopt.stream, k->seq, res.info.blocks);
    else if (!k->quiet && res.from_snapshot)
        cli_warn("recovered from %s/snapshot: %" PRIu64 " blocks", urls[res.winner],
                 res.info.blocks);
    else if (!k->quiet)
        cli_warn("recovered from %s/dump: %" PRIu64 " events applied, %" PRIu64
                 " rejected (blocks below a removed parent)",
                 urls[res.winner], res.applied, res.rejected);
    kvix_peers_list_free(urls, n);
    k->dirty = 1;
    return 1;
}

/* Peer recovery of a replica fed by its input and its subscriptions: both
 * are held back (the input waits in its pipe, the engines' messages in the
 * sockets of a held feed) about 1 s so a peer's state has moved past the
 * moment the feed connected; then the first peer that answers wins, and
 * what was held drains after it through the sequence checks. A signal cuts
 * the wait short. */
static int recover_held(kvi *k)
{
    double until = now() + 1.0;
    while (!sig_stop && now() < until) {
        struct pollfd p = {wake[0], POLLIN, 0};
        poll(&p, 1, (int)((until - now()) * 1000) + 1);
        drain_wake();
    }
    return !sig_stop && recover(k);
}

/* ---- -w, --workers-file: engine subscriptions ------------------------------ */

#define NOTE_WARN_MAX 20 /* warnings of one kind of rejected input before they are only counted */

static uint64_t feed_tag(void *ctx, const kvix_event *ev)
{
    kvi *k = ctx;
    return make_tag(ev->type, k->feed_file, ev->has_eid ? ev->eid : 0);
}

static void feed_reject(void *ctx, const kvix_event *ev, const kvix_err *e)
{
    kvi *k = ctx;
    reject_from(k, "event", k->names[k->feed_file], ev->has_eid ? ev->eid : 0, ev->type, 0,
                e);
}

/* As kvsub reports them: losses, restarts and removals always, rejected
 * input the first few times of each kind. */
static void feed_note(void *ctx, const kvix_enginesub_note *n)
{
    kvi *k = ctx;
    int always = n->kind == KVIX_ENGINESUB_LOSS || n->kind == KVIX_ENGINESUB_RESTART ||
                 n->kind == KVIX_ENGINESUB_REMOVED || n->kind == KVIX_ENGINESUB_FAILED ||
                 n->kind == KVIX_ENGINESUB_DISCONNECT;
    if (k->quiet || (!always && n->repeat > NOTE_WARN_MAX))
        return;
    pthread_mutex_lock(&k->mu);
    clear_progress(k);
    cli_warn("%s", n->msg);
    pthread_mutex_unlock(&k->mu);
}

/* --workers-file: the whole file or nothing (kept as it was on SIGHUP). */
static void load_workers(kvi *k, int initial)
{
    kvix_enginesub_spec *v;
    size_t n, added, removed;
    kvix_err err;
    int rc = kvix_enginesub_file_read(k->workers_file, false, &v, &n, &err);
    if (!rc) {
        rc = kvix_enginesub_replace(kvix_enginefeed_sub(k->feed), 1, v, n, &added, &removed,
                                    &err);
        free(v);
    }
    if (rc && initial)
        cli_die(rc == KVIX_EINVAL || rc == KVIX_ELIMIT ? KVIX_EXIT_USAGE : KVIX_EXIT_IO, "%s",
                err.msg);
    pthread_mutex_lock(&k->mu);
    clear_progress(k);
    if (rc)
        cli_warn("%s: keeping the workers of %s as they were", err.msg, k->workers_file);
    else if (!initial && !k->quiet)
        cli_warn("reloaded %s: %zu added, %zu removed", k->workers_file, added, removed);
    pthread_mutex_unlock(&k->mu);
}

/* The subscriber, its -w and --workers-file subscriptions, each (worker,
 * dp) the index holds an eid for resumed after it. Started by start_feed. */
static void make_feed(kvi *k, const kvix_enginesub_config *cfg, const char **wargs, size_t nw)
{
    kvix_enginefeed_opts fo = {
        .idx = k->idx,
        .write_mu = &k->write_mu,
        .submit = k->threads > 0,
        .tag = feed_tag,
        .on_reject = feed_reject,
        .on_note = feed_note,
        .ctx = k,
    };
    kvix_err err;
    pthread_mutex_init(&k->write_mu, NULL);
    int rc = kvix_enginefeed_new(&k->feed, cfg, &fo, &err);
    if (!rc)
        rc = kvix_enginefeed_resume(k->feed, &err);
    if (rc)
        cli_die(cli_exit_for(rc), "%s", err.msg);
    for (size_t i = 0; i < nw; i++) {
        kvix_enginesub_spec sp;
        kvix_enginesub_spec_init(&sp);
        if (kvix_enginesub_spec_parse(&sp, wargs[i], &err) ||
            kvix_enginesub_add(kvix_enginefeed_sub(k->feed), &sp, 0, &err))
            cli_usage_error("%s", err.msg);
    }
    if (k->workers_file)
        load_workers(k, 1);
}

static void start_feed(kvi *k, bool hold)
{
    kvix_err err;
    kvix_enginefeed_attach(k->feed, k->svc);
    int rc = kvix_enginefeed_start(k->feed, hold, &err);
    if (rc)
        cli_die(cli_exit_for(rc), "%s", err.msg);
}

/* --listen, once input is done: serve until told to stop. */
static int strict_stop(kvi *k)
{
    pthread_mutex_lock(&k->mu);
    int hit = k->strict_hit;
    pthread_mutex_unlock(&k->mu);
    return hit;
}

static void serve(kvi *k)
{
    while (!sig_stop && !strict_stop(k)) {
        handle_flags(k, NULL);
        struct pollfd p = {wake[0], POLLIN, 0};
        poll(&p, 1, -1);
        drain_wake();
    }
}

static void start_service(kvi *k, const char *listen, unsigned http_threads)
{
    static const char *const reasons[R_COUNT] = {
        "malformed_json", "malformed_msgpack", "missing_field", "wrong_type", "bad_hash",
        "bad_value", "out_of_range", "over_limit", "block_size_mismatch", "unknown_parent",
        "query_only", "invalid",
    };
    char addr[128];
    unsigned port;
    parse_listen(listen, addr, sizeof addr, &port);
    kvix_service_opts so = {
        .idx = k->idx,
        .feed = k->feed,
        .writer_threads = k->threads > 0,
        .tmpdir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
        .reject_reasons = reasons,
        .nreasons = R_COUNT,
        .peers = k->peers,
        .stream = k->nopt.url ? k->nopt.stream : NULL,
    };
    kvix_err err;
    int rc = kvix_service_new(&k->svc, &so, &err);
    if (!rc)
        rc = kvix_service_listen(k->svc, addr, port, http_threads, &err);
    if (rc == KVIX_EINVAL || rc == KVIX_ERANGE)
        cli_usage_error("%s", err.msg);
    if (rc)
        cli_die(rc == KVIX_ENOMEM ? KVIX_EXIT_SYS : KVIX_EXIT_IO, "%s", err.msg);
    kvix_service_set_stream_seq(k->svc, k->seq);
    if (!k->quiet)
        cli_warn("listening on http://%s%s%s:%u", strchr(addr, ':') ? "[" : "", addr,
                 strchr(addr, ':') ? "]" : "", kvix_service_port(k->svc));
}

int main(int argc, char **argv)
{
    cli_init(&tool);
    kvi k;
    memset(&k, 0, sizeof k);
    pthread_mutex_init(&k.mu, NULL);
    kvix_index_opts io;
    kvix_index_opts_init(&io);
    kvix_natslog_opts_init(&k.nopt);
    k.nopt.name = "kvindex";
    kvix_format fmt = KVIX_FMT_AUTO;
    const char *listen = NULL;
    unsigned http_threads = 0;
    size_t npeers = 0;
    {
        kvix_err e;
        if (kvix_peers_new(&k.peers, &e))
            cli_die(KVIX_EXIT_SYS, "%s", e.msg);
    }
    kvix_enginesub_config cfg;
    kvix_enginesub_config_init(&cfg);
    const char **wargs = NULL;
    size_t nw = 0;
    const char *arg;
    int c;
    while ((c = cli_next(argc, argv, &arg)) != -1) {
        switch (c) {
        case 's': k.snap = arg; break;
        case 'q': k.query_only = 1; break;
        case 'f':
            if (kvix_format_parse(arg, &fmt))
                cli_usage_error("bad format for %s: '%s' (expected auto, ndjson or msgpack)",
                                cli_opt_given(), arg);
            break;
        case O_BACKEND:
            if (kvix_backend_parse(arg, &io.backend))
                cli_usage_error("bad backend for %s: '%s' (expected positional, radix or reference)",
                                cli_opt_given(), arg);
            break;
        case O_JUMP: io.jump = (unsigned)cli_parse_uint(arg, 1, 1u << 16, "jump"); break;
        case 't': k.threads = (unsigned)cli_parse_uint(arg, 0, 256, "thread count"); break;
        case O_STRICT: k.strict = 1; break;
        case O_SAVE_SECS:
            k.save_every_secs = (double)cli_parse_uint(arg, 1, 1u << 30, "save interval");
            break;
        case O_SAVE_EVENTS:
            k.save_every_events = cli_parse_uint(arg, 1, UINT64_MAX, "event count");
            break;
        case O_QUIET: k.quiet = 1; break;
        case 'v': k.verbose = 1; break;
        case O_NATS: k.nopt.url = arg; break;
        case O_STREAM: k.nopt.stream = arg; break;
        case O_RESET_ON_GAP: k.reset_on_gap = 1; break;
        case O_UNTIL_CAUGHT_UP: k.until_caught_up = 1; break;
        case O_LISTEN: listen = arg; break;
        case O_HTTP_THREADS:
            http_threads = (unsigned)cli_parse_uint(arg, 1, 256, "thread count");
            break;
        case O_PEERS: npeers += add_peers(k.peers, arg); break;
        case 'w':
            if (!(wargs = realloc(wargs, (nw + 1) * sizeof *wargs)))
                cli_die(KVIX_EXIT_SYS, "out of memory");
            wargs[nw++] = arg;
            break;
        case O_WORKERS_FILE: k.workers_file = arg; break;
        case O_MODEL:
        case O_TENANT:
            if (!*arg || strlen(arg) >= KVIX_NAME_MAX)
                cli_usage_error("bad %s name '%s'", c == O_MODEL ? "model" : "tenant", arg);
            *(c == O_MODEL ? &cfg.model : &cfg.tenant) = arg;
            break;
        case O_BLOCK_SIZE:
            cfg.block_size = (uint32_t)cli_parse_uint(arg, 1, KVIX_BS_MAX, "block size");
            break;
        }
    }
    if (k.snap && !*k.snap)
        cli_usage_error("empty snapshot path (-s)");
    if (k.query_only && !k.snap)
        cli_usage_error("-q needs a snapshot to answer from (-s FILE)");
    if (k.query_only && (k.save_every_events || k.save_every_secs))
        cli_usage_error("-q never saves: --save-every-* make no sense with it");
    if ((k.save_every_events || k.save_every_secs) && !k.snap)
        cli_usage_error("--save-every-* need a snapshot (-s FILE)");
    int nfiles = argc - optind;
    if (k.nopt.url && (nfiles || k.query_only))
        cli_usage_error("--nats reads the stream: no input files, no -q");
    if (!k.nopt.url && (k.reset_on_gap || k.until_caught_up))
        cli_usage_error("--reset-on-gap and --until-caught-up go with --nats");
    if (nfiles > 0xfffe)
        cli_usage_error("too many input files (limit 65534)");
    int subscribing = nw || k.workers_file;
    if (subscribing && (k.query_only || k.nopt.url))
        cli_usage_error("-w and --workers-file apply engines' events: not with -q or --nats");
    if (!subscribing && (cfg.model || cfg.tenant || cfg.block_size))
        cli_usage_error("--model, --tenant and --block-size go with -w or --workers-file");
    k.feed_file = nfiles ? (size_t)nfiles : 1;
    k.names = calloc(k.feed_file + 1, sizeof *k.names);
    if (!k.names)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    for (int i = 0; i < nfiles; i++)
        k.names[i] = strcmp(argv[optind + i], "-") ? argv[optind + i] : "<stdin>";
    char label[300];
    snprintf(label, sizeof label, "<stream %s>", k.nopt.stream);
    if (!nfiles)
        k.names[0] = k.nopt.url ? label : "<stdin>";
    k.names[k.feed_file] = "<engines>";

    io.threads = k.query_only ? 0 : k.threads;
    k.threads = io.threads;
    io.on_reject = on_reject;
    io.reject_ctx = &k;
    kvix_err err;
    k.io = io;
    int rc = kvix_index_new(&k.idx, &io, &err);
    if (rc)
        cli_die(cli_exit_for(rc), "%s", err.msg);
    k.progress = !k.quiet && cli_draws_progress();
    install_signals(k.progress || k.save_every_secs > 0);
    kvix_snapshot_lock *lock = NULL;
    if (k.snap && !k.query_only) {
        /* Before anything is read: the last of two savers would erase the
         * other's events, and a path that can never be saved must fail now,
         * not at the end of the input. */
        rc = kvix_snapshot_lock_take(&lock, k.snap, &err);
        if (rc)
            cli_die(cli_exit_for(rc), "cannot lock %s: %s", k.snap, err.msg);
    }
    if (listen && k.reset_on_gap)
        cli_usage_error("--reset-on-gap replaces the index: not with --listen, whose queries use it");
    if (npeers && k.query_only)
        cli_usage_error("-q answers from the snapshot: --peers makes no sense with it");
    int feeding = subscribing || (listen && !k.query_only && !k.nopt.url);
    if (npeers && !k.nopt.url) {
        /* subscriptions connected and held, the service up, then the peers */
        if (feeding)
            make_feed(&k, &cfg, wargs, nw);
        if (listen)
            start_service(&k, listen, http_threads);
        if (k.feed)
            start_feed(&k, true);
        if (!recover_held(&k) && k.snap) {
            if (k.svc)
                kvix_service_write_begin(k.svc);
            load(&k);
            if (k.svc)
                kvix_service_write_end(k.svc);
        }
        kvix_index_totals(k.idx, &k.base);
        if (k.feed)
            kvix_enginefeed_release(k.feed);
    } else {
        /* --nats: a replica resumes from its own snapshot (exact); a new
         * one takes a peer's; one the stream left behind bootstraps in
         * run_nats */
        if (!(k.snap && load(&k)) && npeers && !recover(&k))
            cli_warn("stream %s: starting empty from its first message", k.nopt.stream);
        kvix_index_totals(k.idx, &k.base);
        if (feeding)
            make_feed(&k, &cfg, wargs, nw);
        if (listen)
            start_service(&k, listen, http_threads);
        if (k.feed)
            start_feed(&k, false);
    }
    free(wargs);
    k.started = k.last_save = now();
    kvix_buf_init(&k.out);
    kvix_answer_init(&k.ans);

    kvix_event ev;
    kvix_event_init(&ev);
    if (k.nopt.url)
        run_nats(&k, &ev);
    for (int i = 0; i < (nfiles ? nfiles : 1) && !k.nopt.url && !sig_stop && !k.strict_hit; i++) {
        int fd = STDIN_FILENO;
        if (nfiles && strcmp(argv[optind + i], "-") != 0) {
            fd = open(argv[optind + i], O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                cli_warn("cannot open %s: %s", argv[optind + i], strerror(errno));
                k.io_error = 1;
                continue;
            }
        }
        run_input(&k, fd, (size_t)i, fmt, &ev);
        if (fd != STDIN_FILENO)
            close(fd);
    }
    sync_writers(&k);
    if ((k.svc || subscribing) && !sig_stop && !k.strict_hit) {
        if (k.snap && !k.query_only)
            save(&k, "end of input");
        serve(&k);
    }
    if (k.svc) /* stop accepting, let the requests in flight finish */
        kvix_service_shutdown(k.svc, 10000);
    if (k.feed && kvix_enginefeed_stop(k.feed, &err)) {
        cli_warn("engine subscriptions stopped: %s", err.msg);
        k.io_error = 1;
    }
    if (k.snap && !k.query_only)
        save(&k, sig_stop ? "signal" : k.strict_hit ? "--strict" : "end of input");
    if (!k.quiet) {
        summary(&k);
        lag_summary(&k);
    }

    /* A service counts rejected records in its metrics; only --strict, a
     * failed read or a failed save change its exit status. */
    int code = k.rejected && !k.svc ? KVIX_EXIT_REJECTED : KVIX_EXIT_OK;
    if (k.strict_hit)
        code = KVIX_EXIT_STRICT;
    if (k.io_error || k.save_failed)
        code = k.save_failed ? k.save_failed : KVIX_EXIT_IO;
    if (k.gone)
        code = KVIX_EXIT_GONE;
    kvix_event_release(&ev);
    kvix_answer_release(&k.ans);
    kvix_buf_release(&k.out);
    kvix_service_free(k.svc);
    kvix_enginefeed_free(k.feed);
    kvix_index_free(k.idx);
    for (size_t i = 0; i < k.nunknown; i++)
        free(k.unknown[i]);
    free(k.unknown);
    free(k.names);
    kvix_peers_free(k.peers);
    code = cli_finish(code);
    kvix_snapshot_lock_release(lock); /* after the last save and output */
    return code;
}
