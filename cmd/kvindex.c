/* kvindex: apply kvix events read from stdin (or files) to the index, keep it
 * in a snapshot file, and answer the queries met in the input; with
 * --listen, serve the HTTP API; with -w and --workers-file, subscribe to the
 * engines; with --peers, start from a peer's state. The index's writers'
 * side (records applied, refusals counted, saves, subscriptions, recovery)
 * is the library's kvix_ingest; this file parses options, moves bytes and
 * chooses messages and exit codes.
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
#include "follow.h"
#include "ingest.h"
#include "subfront.h"
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
    O_RESET_ON_GAP,
    O_UNTIL_CAUGHT_UP,
    O_LISTEN,
    O_HTTP_THREADS,
    O_HTTP_NICE,
    O_PEERS,
    O_TOP,
    O_EXPLAIN,
    O_REMOVALS,
    O_PORT,
    O_WORKERS,
    O_HTTP_MAX_CONNS,
    O_HTTP_MAX_PER_ADDR,
    O_HTTP_TIMEOUT,
    O_HTTP_MEMORY,
    O_AUTH_TOKEN_FILE,
    O_AUTH_QUERIES,
    O_PEERS_TIMEOUT,
};

/* Dynamo's standalone indexer serves at this port when given none. */
#define DYNAMO_PORT "8090"

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
    {O_TOP, 0, "top", "K", NULL,
     "answer every query that says no \"top\" with its best K workers and how many were left "
     "out (default 0: all; Dynamo-shaped HTTP answers keep the full list)"},
    {O_EXPLAIN, 0, "explain", NULL, NULL,
     "explain every query's answer: where each best worker's match stops and why (as a query's "
     "\"explain\":true)"},
    {O_REMOVALS, 0, "removals", "N", NULL,
     "remember the last N blocks each worker dropped, for explain (default 64, 0: none)"},
    {'t', 't', "threads", "N", NULL,
     "apply events on N writer threads, each worker sticky to one (default 0: inline)"},
    {O_STRICT, 0, "strict", NULL, NULL, "stop at the first rejected record, save, exit 5"},
    {O_SAVE_SECS, 0, "save-every-seconds", "N", NULL,
     "also save every N seconds when the index changed"},
    {O_SAVE_EVENTS, 0, "save-every-events", "N", NULL, "also save after every N events applied from any source (input, stream, subscriptions)"},
    {O_QUIET, 0, "quiet", NULL, NULL,
     "no summary and no progress line on stderr (SIGUSR1 still prints the summary)"},
    {'v', 'v', "verbose", NULL, NULL, "report the snapshot loaded and every save on stderr"},
    {CLI_O_NATS_URL, 0, "nats", "URL", NULL,
     "consume a NATS JetStream stream instead of stdin, from the snapshot's position on"},
    CLI_NATS_AUTH_OPTIONS,
    {CLI_O_NATS_STREAM, 0, "stream", "NAME", NULL, "--nats: the stream to consume (default KVIX)"},
    {O_RESET_ON_GAP, 0, "reset-on-gap", NULL, NULL,
     "--nats: when the stream no longer holds the next message, start empty from its first "
     "(default: save and exit 7)"},
    {O_UNTIL_CAUGHT_UP, 0, "until-caught-up", NULL, NULL,
     "--nats: stop (and save) once the stream's last message at start is applied"},
    {O_LISTEN, 0, "listen", "[ADDR:]PORT", NULL,
     "serve the HTTP API on ADDR (default 127.0.0.1) and PORT (0: any) until SIGTERM"},
    {O_HTTP_THREADS, 0, "http-threads", "N", NULL, "HTTP server threads (default 2)"},
    {O_HTTP_NICE, 0, "http-nice", "N", NULL,
     "lower the HTTP threads' scheduling priority by N (0-19, default 0), so that ingest keeps "
     "its share of the CPU under a query load"},
    {O_HTTP_MAX_CONNS, 0, "http-max-connections", "N", NULL,
     "HTTP connections held at once (default 2048); past it the oldest idle one makes room"},
    {O_HTTP_MAX_PER_ADDR, 0, "http-max-per-address", "N", NULL,
     "of them, from one client address (default 512)"},
    {O_HTTP_TIMEOUT, 0, "http-timeout", "SECONDS", NULL,
     "a request must arrive whole within SECONDS of its connection or the answer before (default 10)"},
    {O_HTTP_MEMORY, 0, "http-memory", "BYTES", NULL,
     "request bodies and query parses together hold at most BYTES; past it 503 (default 134217728)"},
    {O_AUTH_TOKEN_FILE, 0, "auth-token-file", "FILE", "file",
     "--listen: the endpoints that change or export the state need 'Authorization: Bearer' and the first line of FILE (401 otherwise); also sent to --peers"},
    {O_AUTH_QUERIES, 0, "auth-queries", NULL, NULL,
     "--auth-token-file: /query and /query_by_hash need the token too"},
    {O_PEERS, 0, "peers", "URL,...", NULL,
     "start from the first peer whose GET /snapshot or GET /dump answers, after holding the "
     "input back 1 s (else from the snapshot); --nats: a new replica, or one the stream left "
     "behind, takes a peer's /snapshot and its stream position"},
    {O_PEERS_TIMEOUT, 0, "peers-timeout", "SECONDS", NULL,
     "--peers: a recovery takes at most SECONDS in all, however many peers hang (default 30)"},
    {'w', 'w', "worker", "ID[:DP]=ENDPOINT", NULL,
     "subscribe to a worker's event endpoint and apply its events (repeatable)"},
    CLI_SUB_FILE_OPTIONS,
    {CLI_O_SUB_MODEL, 0, "model", "NAME", NULL, "-w: model name of the events (default \"default\")"},
    {CLI_O_SUB_TENANT, 0, "tenant", "NAME", NULL, "-w: tenant of the events (default \"default\")"},
    {CLI_O_SUB_BLOCK_SIZE, 0, "block-size", "N", NULL,
     "-w: configured block size; smaller (partial) blocks are skipped (default: each event's)"},
    {CLI_O_SUB_REPLAY_TIMEOUT, 0, "replay-timeout", "MS", NULL,
     "-w: give up an engine's recovery MS milliseconds after asking (default 5000)"},
    {O_PORT, 0, "port", "PORT", NULL,
     "as Dynamo's indexer: serve the HTTP API on every interface at PORT (--listen "
     "0.0.0.0:PORT) and read no standard input (name - to read it)"},
    {O_WORKERS, 0, "workers", "ID[:DP]=ENDPOINT,...", NULL,
     "as Dynamo's indexer: -w for each comma-separated entry; serve at --port (default "
     DYNAMO_PORT ") and read no standard input"},
    {CLI_O_SUB_MODEL, 0, "model-name", "NAME", NULL, "Dynamo's name for --model"},
    {CLI_O_SUB_TENANT, 0, "tenant-id", "NAME", NULL, "Dynamo's name for --tenant"},
    {CLI_O_SUB_MAX_SUBSCRIPTIONS, 0, "max-subscriptions", "N", NULL,
     "engine subscriptions held at once (-w, --workers-file, POST /register; default 1024, or what the open-file limit allows); more are refused"},
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

#define PENDING_UNKNOWN_MAX 64 /* names whose warning waits for the end of input */

typedef struct kvi {
    kvix_ingest *g;
    const char *snap;
    int query_only, strict, quiet, verbose, progress, explain;
    unsigned threads; /* writer threads (0 with -q) */
    int http_nice;    /* --http-nice */
    kvix_service_limits http_limits; /* --http-max-*, --http-timeout, --http-memory */
    uint64_t files;   /* open files the subscriptions may hold */
    char *auth_token; /* --auth-token-file's, or NULL */
    int auth_queries; /* --auth-queries */
    unsigned peers_timeout_s; /* --peers-timeout */
    uint64_t save_every_events;
    double save_every_secs;
    const char **names;     /* source names, by number (kvix_ingest_opts.sources) */
    size_t feed_file;       /* the names[] slot of the subscriptions' rejections */
    double last_save, started;
    int io_error;
    int save_failed; /* the last save failed: its exit code, else 0 */
    int save_oom;    /* a save ran out of memory: exit 6 whatever follows */
    pthread_mutex_t mu; /* stderr: the progress line and other threads' messages */
    int progress_shown;
    uint64_t input_size;  /* what is left of a regular file when its reading began, else 0 */
    double input_started;
    /* --nats: every message up to seq is applied */
    kvix_natslog_opts nopt;
    int reset_on_gap, until_caught_up, gone;
    uint64_t seq;
    kvix_follow *follow;  /* --nats, while it runs */
    kvix_natslog_lag lag;
    kvix_reader *reader;  /* the input being read */
    kvix_service *svc; /* --listen: the HTTP API (the ingest's) */
    kvix_subfront front;  /* -w, --workers-file and the subscriptions' defaults */
    kvix_peers *peers;    /* --peers and POST /register_peer */
    int loaded;           /* the index was loaded (a snapshot, a peer's state) */
    /* POST /register's subscriptions kept in the snapshot, resubscribed at
     * start (read with the subscriptions' defaults, front.cfg) */
    kvix_enginesub_spec *regs;
    size_t nregs;
    /* unknown names met while the index held nothing yet: said at the end
     * if they are still unknown then (see on_unknown) */
    struct pending_unknown {
        char model[KVIX_NAME_MAX], tenant[KVIX_NAME_MAX];
        int why;
        size_t src;
        uint64_t pos;
    } pending[PENDING_UNKNOWN_MAX];
    size_t npending;
} kvi;

/* ---- signals ------------------------------------------------------------------ */

/* Set by the signal handlers; wake[0] becomes readable on every signal. */
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

/* ---- messages ----------------------------------------------------------------- */

static void clear_progress(kvi *k)
{
    if (k->progress_shown) {
        fputs("\r\033[K", stderr);
        k->progress_shown = 0;
    }
}

/* The ingest's callbacks, on any thread. */
static void on_reject(void *ctx, const kvix_ingest_reject *r)
{
    kvi *k = ctx;
    pthread_mutex_lock(&k->mu);
    clear_progress(k);
    cli_warn("bad %s at %s:%" PRIu64 ": %s", r->what, r->source, r->pos, r->err->msg);
    pthread_mutex_unlock(&k->mu);
}

static void on_wake(void *ctx)
{
    (void)ctx;
    ssize_t w = write(wake[1], "", 1); /* a full pipe is fine: a wake-up is pending */
    (void)w;
}

/* As kvsub reports them (kvix_subfront_note_said). */
static void on_note(void *ctx, const kvix_enginesub_note *n)
{
    kvi *k = ctx;
    if (k->quiet || !kvix_subfront_note_said(n))
        return;
    pthread_mutex_lock(&k->mu);
    clear_progress(k);
    cli_warn("%s", n->msg);
    pthread_mutex_unlock(&k->mu);
}

/* The workers file's reloads, from the subscriptions' thread (or the main
 * thread at the start). --quiet keeps only the refusals. */
static void on_front_say(void *ctx, bool routine, const char *msg)
{
    kvi *k = ctx;
    if (routine && k->quiet)
        return;
    pthread_mutex_lock(&k->mu);
    clear_progress(k);
    cli_warn("%s", msg);
    pthread_mutex_unlock(&k->mu);
}

/* Between two steps of the subscriptions' thread: --reload. */
static void on_feed_step(void *ctx)
{
    kvi *k = ctx;
    kvix_subfront_poll(&k->front);
}

/* One warning per unknown name: a query for a model or tenant the index
 * has never seen answers like a cache miss, with "unknown" saying why. */
static void warn_unknown(kvi *k, const char *name, uint64_t pos, const kvix_event *q, int why)
{
    clear_progress(k);
    if (why == KVIX_UNKNOWN_MODEL)
        cli_warn("unknown model \"%s\" at %s:%" PRIu64 ": the index has never seen it "
                 "(answered with \"unknown\":\"model\")",
                 q->model, name, pos);
    else
        cli_warn("unknown tenant \"%s\" of model \"%s\" at %s:%" PRIu64
                 ": the index has never seen it (answered with \"unknown\":\"tenant\")",
                 q->tenant, q->model, name, pos);
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
    kvix_ingest_counts c;
    kvix_ingest_counts_get(k->g, &c);
    kvix_index_stats st;
    kvix_index_stats_get(kvix_ingest_index(k->g), &st);
    pthread_mutex_lock(&k->mu);
    clear_progress(k);
    uint64_t ap[KVIX_EV_QUERY + 1];
    uint64_t events = 0;
    for (int t = KVIX_EV_STORED; t <= KVIX_EV_CLEARED; t++) {
        ap[t] = c.submitted[t] - c.refused[t];
        events += ap[t];
    }
    cli_warn("applied %" PRIu64 " event%s: %" PRIu64 " stored, %" PRIu64 " removed, %" PRIu64
             " cleared",
             events, events == 1 ? "" : "s", ap[KVIX_EV_STORED], ap[KVIX_EV_REMOVED],
             ap[KVIX_EV_CLEARED]);
    cli_warn("blocks: %" PRIu64 " stored, %" PRIu64 " duplicate, %" PRIu64 " removed, %" PRIu64
             " unknown removals",
             c.blocks.stored, c.blocks.duplicate, c.blocks.removed, c.blocks.unknown);
    if (c.blocks.skipped || c.blocks.kept) /* hybrid models: kvix-events(5) */
        cli_warn("kv cache groups: %" PRIu64 " blocks of other kinds skipped, %" PRIu64
                 " removals kept by another full group",
                 c.blocks.skipped, c.blocks.kept);
    if (k->svc) { /* the service's queries are the index's work too */
        uint64_t asked, answered;
        kvix_service_queries(k->svc, &asked, &answered);
        cli_warn("answered %" PRIu64 " of %" PRIu64 " quer%s; over HTTP %" PRIu64 " of %" PRIu64,
                 c.answered, c.queries, c.queries == 1 ? "y" : "ies", answered, asked);
    } else {
        cli_warn("answered %" PRIu64 " of %" PRIu64 " quer%s", c.answered, c.queries,
                 c.queries == 1 ? "y" : "ies");
    }
    if (c.rejected) {
        char line[512];
        size_t n = 0;
        for (int r = 0; r < KVIX_REASON_COUNT; r++)
            if (c.reasons[r] && n < sizeof line)
                n += (size_t)snprintf(line + n, sizeof line - n, "%s%" PRIu64 " %s",
                                      n ? ", " : "", c.reasons[r], kvix_reason_name(r));
        cli_warn("rejected %" PRIu64 " record%s: %s", c.rejected, c.rejected == 1 ? "" : "s",
                 line);
    } else {
        cli_warn("rejected 0 records");
    }
    char mem[32];
    human_bytes(st.bytes, mem);
    cli_warn("index: %zu partitions, %zu workers, %zu blocks, %zu unique blocks, %s",
             st.partitions, st.workers, st.blocks, st.unique_blocks, mem);
    kvix_enginefeed *feed = kvix_ingest_feed(k->g);
    if (feed) {
        kvix_enginefeed_counts f;
        kvix_enginefeed_counts_get(feed, &f);
        cli_warn("subscriptions: %" PRIu64 " now, %" PRIu64 " batches, %" PRIu64
                 " events applied; %" PRIu64 " gaps, %" PRIu64 " replays, %" PRIu64
                 " losses, %" PRIu64 " restarts",
                 f.sub.subscriptions, f.sub.batches, f.applied, f.sub.seq.gaps,
                 f.sub.seq.replays, f.sub.seq.losses, f.sub.seq.restarts);
    }
    pthread_mutex_unlock(&k->mu);
}

static void show_progress(kvi *k, kvix_reader *r)
{
    double el = now() - k->started;
    char eta[48];
    cli_progress_eta(kvix_reader_offset(r), k->input_size, now() - k->input_started, eta);
    uint64_t rejected = kvix_ingest_rejected(k->g), records = kvix_ingest_records(k->g);
    pthread_mutex_lock(&k->mu);
    fprintf(stderr, "\r%s: %s:%s %" PRIu64 " records, %.0f/s, %.1f MB read, %" PRIu64
                    " rejected\033[K",
            cli_name(), kvix_reader_name(r), eta, records,
            el > 0 ? (double)records / el : 0.0, (double)kvix_reader_offset(r) / 1e6,
            rejected);
    k->progress_shown = 1;
    pthread_mutex_unlock(&k->mu);
}

static void handle_flags(kvi *k, kvix_reader *r);

/* ---- the snapshot ------------------------------------------------------------- */

static int save(kvi *k, const char *why)
{
    if (!k->snap || k->query_only)
        return KVIX_OK;
    kvix_snapshot_info info;
    kvix_err err;
    int rc = kvix_ingest_save(k->g, k->snap, k->nopt.url ? k->nopt.stream : NULL, k->seq, &info,
                              &err);
    if (rc == 1) /* mid-message: later */
        return KVIX_OK;
    pthread_mutex_lock(&k->mu);
    clear_progress(k);
    pthread_mutex_unlock(&k->mu);
    if (rc) {
        cli_warn("cannot save %s: %s", k->snap, err.msg);
        /* out of memory is 6 like everywhere else, whatever failed is 3 */
        k->save_failed = rc == KVIX_ENOMEM || rc == KVIX_ESYS ? KVIX_EXIT_SYS : KVIX_EXIT_IO;
        k->save_oom |= rc == KVIX_ENOMEM;
        return rc;
    }
    k->save_failed = 0;
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
 * (nothing acknowledged is lost), stop the service and the subscriptions
 * that read and write the index, free it, exit 6. Called on the main thread. */
static _Noreturn void die_sys(kvi *k, const kvix_err *err)
{
    save(k, "failure");
    kvix_ingest_free(k->g); /* the service, the subscriptions, the index */
    k->g = NULL;
    cli_die(KVIX_EXIT_SYS, "%s", err->msg);
}

/* The registrations the open snapshot s keeps (extension record 65), into
 * k->regs: once (a start from peers reads them before any load), and never
 * for -q (which subscribes to nothing) or --nats (whose service takes none). */
static void take_registrations(kvi *k, const kvix_snapshot *s)
{
    if (k->regs || k->query_only || k->nopt.url)
        return;
    kvix_snapshot_ext e;
    for (size_t i = 0; kvix_snapshot_ext_get(s, i, &e) == KVIX_OK; i++) {
        if (e.type != KVIX_SNAPSHOT_EXT_REGISTRATIONS)
            continue;
        kvix_err err;
        int rc = kvix_service_registrations_decode(e.data, e.len, &k->front.cfg, &k->regs,
                                                   &k->nregs, &err);
        if (rc == KVIX_ENOMEM)
            cli_die(KVIX_EXIT_SYS, "out of memory");
        /* a file of ours that passed its checksum: a registration it keeps
         * that this kvindex refuses (another bind mode) is said, not fatal */
        if (rc)
            cli_warn("%s: registrations not resubscribed: %s", k->snap, err.msg);
        return;
    }
}

/* With --peers the snapshot is loaded only when no peer answers, but its
 * registrations are this replica's own: read before the subscriptions are. */
static void peek_registrations(kvi *k)
{
    kvix_snapshot *s;
    kvix_err err;
    if (!k->snap || k->query_only || kvix_snapshot_open(&s, k->snap, &err))
        return; /* a missing or bad file is said when it is loaded */
    take_registrations(k, s);
    kvix_snapshot_close(s);
}

/* Resubscribe the registrations the snapshot kept, after -w and the workers
 * file (which win a conflict). Each (worker, dp) resumes after the last eid
 * the index holds for it, as every subscription does (kvix_ingest_feed_new). */
static void restore_registrations(kvi *k)
{
    kvix_enginefeed *f = kvix_ingest_feed(k->g);
    if (!f || !k->nregs)
        return;
    size_t done = 0;
    for (size_t i = 0; i < k->nregs; i++) {
        const kvix_enginesub_spec *sp = &k->regs[i];
        kvix_err err;
        int rc = kvix_enginesub_add(kvix_enginefeed_sub(f), sp, KVIX_SERVICE_GROUP, &err);
        if (rc == KVIX_ENOMEM)
            cli_die(KVIX_EXIT_SYS, "out of memory");
        if (rc)
            cli_warn("%s: registration of worker %" PRIu64 " dp %" PRIu32 " (%s) not "
                     "resubscribed: %s", k->snap, sp->worker, sp->dp, sp->endpoint, err.msg);
        else
            done++;
    }
    if (!k->quiet)
        cli_warn("%s: resubscribed %zu of %zu registration%s (POST /register)", k->snap, done,
                 k->nregs, k->nregs == 1 ? "" : "s");
}

/* 1 if the snapshot was there and loaded. A failed load leaves part of
 * the file in the index, unusable: it is freed before the exit. */
static int load(kvi *k)
{
    kvix_snapshot_info info;
    kvix_err err;
    kvix_snapshot *s = NULL;
    int rc = kvix_snapshot_open(&s, k->snap, &err);
    if (!rc) {
        rc = kvix_snapshot_apply(s, kvix_ingest_index(k->g), &err);
        kvix_snapshot_get_info(s, &info);
        if (!rc)
            take_registrations(k, s);
        kvix_snapshot_close(s);
    }
    if (rc == KVIX_ENOTFOUND && !k->query_only) {
        if (k->verbose)
            cli_warn("no snapshot %s yet: starting empty", k->snap);
        return 0;
    }
    int wrong = !rc && k->nopt.url && (!info.has_stream || strcmp(info.stream, k->nopt.stream));
    if (rc || wrong) {
        kvix_ingest_free(k->g);
        k->g = NULL;
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
    if (wrong && !info.has_stream)
        cli_die(KVIX_EXIT_USAGE, "%s records no stream position: it was not made by kvindex --nats",
                k->snap);
    if (wrong)
        cli_die(KVIX_EXIT_USAGE, "%s reflects stream %s, not %s", k->snap, info.stream,
                k->nopt.stream);
    k->seq = info.has_stream ? info.stream_seq : 0;
    k->loaded = 1;
    if (k->verbose && info.has_stream)
        cli_warn("%s: stream %s applied up to sequence %" PRIu64, k->snap, info.stream, k->seq);
    return 1;
}

/* ---- peers, subscriptions, service -------------------------------------------- */

/* Start from the first peer that answers; 1 if one did. With --nats only
 * a snapshot of that stream is taken, and its position with it. */
static int recover(kvi *k)
{
    kvix_ingest_recovery rec;
    kvix_err err;
    int rc = kvix_ingest_recover(k->g, k->peers, k->nopt.url ? k->nopt.stream : NULL, &rec, &err);
    if (rc == KVIX_ENOTFOUND) {
        cli_warn("no peer answered (%s): starting from %s", err.msg,
                 k->snap ? "the snapshot" : "empty");
        return 0;
    }
    if (rc == KVIX_ENOMEM && !rec.peer[0])
        cli_die(KVIX_EXIT_SYS, "out of memory");
    if (rc)
        cli_die(cli_exit_for(rc), "cannot recover from %s: %s", rec.peer, err.msg);
    if (rec.from_snapshot && rec.info.has_stream && k->nopt.url)
        k->seq = rec.info.stream_seq;
    k->loaded = 1;
    if (!k->quiet && rec.from_snapshot && k->nopt.url)
        cli_warn("recovered from %s/snapshot: stream %s at %" PRIu64 ", %" PRIu64 " blocks",
                 rec.peer, k->nopt.stream, k->seq, rec.info.blocks);
    else if (!k->quiet && rec.from_snapshot)
        cli_warn("recovered from %s/snapshot: %" PRIu64 " blocks", rec.peer, rec.info.blocks);
    else if (!k->quiet)
        cli_warn("recovered from %s/dump: %" PRIu64 " events applied, %" PRIu64
                 " rejected (blocks below a removed parent)",
                 rec.peer, rec.applied, rec.rejected);
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

/* The subscriber, each (worker, dp) the index holds an eid for resumed
 * after it, and the -w and --workers-file subscriptions. Started by
 * start_feed. */
static void make_feed(kvi *k)
{
    kvix_err err;
    /* besides: the HTTP connections, snapshot files, peers, stdio */
    k->front.cfg.subs_max = cli_size_subscriptions(k->front.subs_given, 64, "--max-subscriptions");
    k->files = (uint64_t)k->front.cfg.subs_max * KVIX_ENGINESUB_FDS_PER_SUB;
    int rc = kvix_ingest_feed_new(k->g, &k->front.cfg, &err);
    if (rc)
        cli_die(cli_exit_for(rc), "%s", err.msg);
    k->front.say = on_front_say;
    k->front.ctx = k;
    kvix_subfront_start(&k->front, kvix_enginefeed_sub(kvix_ingest_feed(k->g)));
}

static void start_feed(kvi *k, bool hold)
{
    kvix_err err;
    int rc = kvix_ingest_feed_start(k->g, hold, &err);
    if (rc)
        cli_die(cli_exit_for(rc), "%s", err.msg);
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

static void start_service(kvi *k, const char *listen, unsigned http_threads)
{
    char addr[128];
    kvix_ingest_serve_opts so = {
        .addr = addr,
        .threads = http_threads,
        .tmpdir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
        .peers = k->peers,
        .stream = k->nopt.url ? k->nopt.stream : NULL,
        .seq = k->seq,
        .nice = k->http_nice,
        .no_sub_why = k->query_only
                          ? "kvindex -q answers from its snapshot and applies no event; "
                            "run kvindex without -q to take registrations"
                          : k->nopt.url ? "kvindex --nats applies the stream; the engines are "
                                          "subscribed by kvsub --nats, which publishes to it"
                                        : NULL,
        .limits = k->http_limits,
        .auth_token = k->auth_token,
        .auth_queries = k->auth_queries,
    };
    /* a descriptor a connection, beside the subscriptions' (sized before)
     * and a few hundred more: the default shrinks to what the open-file
     * limit allows */
    unsigned conns = so.limits.conns_max ? so.limits.conns_max : KVIX_SERVICE_CONNS_DEFAULT;
    uint64_t others = k->files + 256, have = cli_files_raise(others + conns);
    if (have < others + conns) {
        if (so.limits.conns_max)
            cli_usage_error("--http-max-connections %u needs %" PRIu64 " open files; the limit "
                            "is %" PRIu64 " (ulimit -Hn)", conns, others + conns, have);
        so.limits.conns_max = have > others ? (unsigned)(have - others) : 1;
    }
    parse_listen(listen, addr, sizeof addr, &so.port);
    kvix_err err;
    int rc = kvix_ingest_serve(k->g, &so, &err);
    if (rc == KVIX_EINVAL || rc == KVIX_ERANGE)
        cli_usage_error("%s", err.msg);
    if (rc)
        cli_die(rc == KVIX_ENOMEM ? KVIX_EXIT_SYS : KVIX_EXIT_IO, "%s", err.msg);
    k->svc = kvix_ingest_service(k->g);
    if (!k->quiet)
        cli_warn("listening on http://%s%s%s:%u", strchr(addr, ':') ? "[" : "", addr,
                 strchr(addr, ':') ? "]" : "", kvix_service_port(k->svc));
}

/* --listen or subscriptions, once input is done: serve until told to stop. */
static void serve(kvi *k)
{
    while (!sig_stop && !kvix_ingest_stopped(k->g) && !kvix_ingest_feed_failed(k->g)) {
        handle_flags(k, NULL);
        struct pollfd p = {wake[0], POLLIN, 0};
        poll(&p, 1, -1);
        drain_wake();
    }
}

/* ---- the input ---------------------------------------------------------------- */

/* What signals and timers asked for, between two records. */
static void handle_flags(kvi *k, kvix_reader *r)
{
    /* from every source: the subscriptions' thread wakes us when they
     * have applied enough */
    if (k->save_every_events && kvix_ingest_save_due(k->g))
        save(k, "event count");
    if (sig_summary) {
        sig_summary = 0;
        summary(k);
    }
    if (sig_save) {
        sig_save = 0;
        save(k, "SIGHUP");
        kvix_subfront_ask(&k->front); /* read on the subscriptions' thread */
    }
    if (sig_tick) {
        sig_tick = 0;
        if (k->save_every_secs > 0 && kvix_ingest_changed(k->g) &&
            now() - k->last_save >= k->save_every_secs)
            save(k, "timer");
        if (k->progress && r)
            show_progress(k, r);
    }
}

/* The reading loops' callbacks (kvix_ingest_loop). */
static int stopping(void *ctx)
{
    kvi *k = ctx;
    /* a subscriptions' thread that died applies nothing more: stop reading
     * too, save what was applied, exit 6 */
    return sig_stop || kvix_ingest_feed_failed(k->g);
}

static void between(void *ctx)
{
    kvi *k = ctx;
    if (k->follow)
        k->seq = kvix_follow_seq(k->follow);
    handle_flags(k, k->reader);
}

static void on_answer(void *ctx, const char *data, size_t len)
{
    (void)ctx;
    fwrite(data, 1, len, stdout);
}

/* A name the index has never seen: said at once when the index holds
 * something (a typo, most likely), but met while it holds nothing yet (a
 * log that starts with a query, as every --mooncake log does) it is said
 * only if the input ends without it: a partition about to be filled is not
 * unknown. --quiet says nothing; the answer says "unknown" anyway. */
static void on_unknown(void *ctx, size_t src, uint64_t pos, const kvix_event *q, int why)
{
    kvi *k = ctx;
    if (k->quiet)
        return;
    kvix_apply_result t;
    kvix_index_totals(kvix_ingest_index(k->g), &t);
    if (k->loaded || t.stored || t.duplicate) {
        warn_unknown(k, k->names[src], pos, q, why);
        return;
    }
    if (k->npending == PENDING_UNKNOWN_MAX)
        return;
    struct pending_unknown *u = &k->pending[k->npending++];
    snprintf(u->model, sizeof u->model, "%s", q->model);
    snprintf(u->tenant, sizeof u->tenant, "%s", q->tenant);
    u->why = why;
    u->src = src;
    u->pos = pos;
}

/* At the end: the names met early that no event brought since. */
static void warn_pending_unknown(kvi *k)
{
    kvix_index *idx = kvix_ingest_index(k->g);
    for (size_t i = 0; i < k->npending; i++) {
        struct pending_unknown *u = &k->pending[i];
        if (kvix_index_block_size(idx, u->model, u->tenant))
            continue;
        kvix_event q;
        memset(&q, 0, sizeof q);
        snprintf(q.model, sizeof q.model, "%s", u->model);
        snprintf(q.tenant, sizeof q.tenant, "%s", u->tenant);
        pthread_mutex_lock(&k->mu);
        warn_unknown(k, k->names[u->src], u->pos, &q, u->why);
        pthread_mutex_unlock(&k->mu);
    }
    k->npending = 0;
}

static kvix_ingest_loop loop_of(kvi *k)
{
    kvix_ingest_loop lp = {wake[0], stopping, between, on_answer, on_unknown, k};
    return lp;
}

/* Read one input to its end (or until told to stop). */
static void run_input(kvi *k, int fd, size_t file, kvix_format fmt)
{
    kvix_err err;
    if (kvix_reader_new(&k->reader, fd, k->names[file], fmt, &err))
        die_sys(k, &err);
    kvix_reader *r = k->reader;
    kvix_reader_set_wakeup_fd(r, wake[0]);
    /* -q reads queries only: every line is answered, a blank one too (an
     * empty query), so a coprocess that writes a line always gets one */
    kvix_reader_set_blank_queries(r, k->query_only);
    /* a regular file (named, or redirected to stdin) has a known size: the
     * progress line gives a percentage and an estimate of the time left */
    struct stat st;
    off_t at = lseek(fd, 0, SEEK_CUR);
    k->input_size = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && at >= 0 && st.st_size > at
                        ? (uint64_t)(st.st_size - at) : 0;
    k->input_started = now();
    kvix_ingest_loop lp = loop_of(k);
    int rc = kvix_ingest_run(k->g, r, file, &lp, &err);
    if (rc == KVIX_ENOMEM || rc == KVIX_ESYS)
        die_sys(k, &err);
    clear_progress(k);
    if (rc == KVIX_EOF && sig_stop && kvix_reader_pending(r))
        cli_warn("stopped with %zu bytes of an incomplete record from %s left unread",
                 kvix_reader_pending(r), kvix_reader_name(r));
    if (rc == KVIX_EIO) {
        cli_warn("%s", err.msg);
        k->io_error = 1;
    }
    if (k->progress) { /* the last figures, also for an input read in under a second */
        show_progress(k, r);
        clear_progress(k);
    }
    kvix_reader_free(r);
    k->reader = NULL;
}

/* ---- --nats ------------------------------------------------------------------- */

static void on_follow_note(void *ctx, const kvix_follow_note *n)
{
    kvi *k = ctx;
    if (n->kind == KVIX_FOLLOW_NOT_FROM_STREAM)
        cli_warn("%s: %s", k->snap ? k->snap : "the index", n->msg);
    else if (n->kind != KVIX_FOLLOW_BOOTSTRAPPED || !k->quiet)
        cli_warn("%s", n->msg);
}

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

/* The stream instead of stdin, from the snapshot's position on. */
static void run_nats(kvi *k)
{
    kvix_follow_opts fo = {
        .nats = &k->nopt,
        .peers = k->peers,
        .reset_on_gap = k->reset_on_gap,
        .until_caught_up = k->until_caught_up,
        .seq = k->seq,
        .on_note = on_follow_note,
        .ctx = k,
    };
    kvix_err err;
    if (kvix_follow_new(&k->follow, k->g, &fo, &err))
        cli_die(err.code == KVIX_EINVAL ? KVIX_EXIT_USAGE : KVIX_EXIT_SYS, "%s", err.msg);
    kvix_ingest_loop lp = loop_of(k);
    int rc = kvix_follow_run(k->follow, 0, &lp, &err);
    k->seq = kvix_follow_seq(k->follow);
    if (rc == KVIX_ENOTFOUND)
        k->gone = 1;
    else if (rc == KVIX_ENOMEM && !kvix_follow_lost(k->follow))
        die_sys(k, &err);
    else if (rc && rc != KVIX_EOF)
        cli_die(cli_exit_for(rc), "%s", err.msg);
    kvix_follow_lag(k->follow, &k->lag);
    kvix_follow_free(k->follow);
    k->follow = NULL;
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
        if (rc) /* the library's message says what is wrong with it */
            cli_usage_error("bad peer '%.*s': %s", (int)(len < 200 ? len : 200), t, err.msg);
        n += len > 0;
        t += len;
    }
    if (!n)
        cli_usage_error("--peers needs at least one URL");
    return n;
}

/* What the options say beyond kvi: how to start and what to read. */
typedef struct kvargs {
    kvix_index_opts io;
    kvix_format fmt;
    const char *listen;        /* --listen, or NULL */
    unsigned http_threads;
    size_t npeers;             /* URLs given with --peers */
    char **files;              /* the input files, nfiles of them ("-": stdin) */
    int nfiles;
    int subscribing;           /* -w or --workers-file */
    char label[300];           /* "<stream NAME>": the source name of --nats */
    const char *port;          /* --port, or NULL */
    int dynamo;                /* --port or --workers: run as Dynamo's indexer does */
    char dynamo_listen[32];    /* "0.0.0.0:PORT" */
} kvargs;

/* --workers "1=tcp://h:5557,1:1=tcp://h:5558", as Dynamo's indexer reads it:
 * entries split at commas (cut in place: argv is ours to write), blanks
 * around them dropped, empty ones skipped. */
static void add_workers(kvix_subfront *f, char *list)
{
    for (char *t = list; *t;) {
        size_t len = strcspn(t, ",");
        char *next = t + len + (t[len] == ',');
        t[len] = '\0';
        while (*t == ' ' || *t == '\t')
            t++;
        for (char *e = t + strlen(t); e > t && (e[-1] == ' ' || e[-1] == '\t');)
            *--e = '\0';
        if (*t)
            kvix_subfront_option(f, 'w', t);
        t = next;
    }
}

static void parse_options(kvi *k, kvargs *a, int argc, char **argv)
{
    const char *arg;
    int c;
    while ((c = cli_next(argc, argv, &arg)) != -1) {
        if (cli_nats_option(c, arg, &k->nopt) || kvix_subfront_option(&k->front, c, arg))
            continue;
        switch (c) {
        case 's': k->snap = arg; break;
        case 'q': k->query_only = 1; break;
        case 'f':
            if (kvix_format_parse(arg, &a->fmt))
                cli_usage_error("bad format for %s: '%s' (expected auto, ndjson or msgpack)",
                                cli_opt_given(), arg);
            break;
        case O_BACKEND:
            if (kvix_backend_parse(arg, &a->io.backend))
                cli_usage_error("bad backend for %s: '%s' (expected positional, radix or reference)",
                                cli_opt_given(), arg);
            break;
        case O_JUMP: a->io.jump = (unsigned)cli_parse_uint(arg, 1, 1u << 16, "jump"); break;
        case O_TOP: a->io.top = (uint32_t)cli_parse_uint(arg, 0, UINT32_MAX, "top"); break;
        case O_EXPLAIN: k->explain = 1; break;
        case O_REMOVALS:
            a->io.removals =
                (uint32_t)cli_parse_uint(arg, 0, KVIX_INDEX_REMOVALS_MAX, "removal count");
            break;
        case 't': k->threads = (unsigned)cli_parse_uint(arg, 0, 256, "thread count"); break;
        case O_STRICT: k->strict = 1; break;
        case O_SAVE_SECS:
            k->save_every_secs = (double)cli_parse_uint(arg, 1, 1u << 30, "save interval");
            break;
        case O_SAVE_EVENTS:
            k->save_every_events = cli_parse_uint(arg, 1, UINT64_MAX, "event count");
            break;
        case O_QUIET: k->quiet = 1; break;
        case 'v': k->verbose = 1; break;
        case O_RESET_ON_GAP: k->reset_on_gap = 1; break;
        case O_UNTIL_CAUGHT_UP: k->until_caught_up = 1; break;
        case O_LISTEN: a->listen = arg; break;
        case O_HTTP_THREADS:
            a->http_threads = (unsigned)cli_parse_uint(arg, 1, 256, "thread count");
            break;
        case O_HTTP_NICE: k->http_nice = (int)cli_parse_uint(arg, 0, 19, "nice value"); break;
        case O_HTTP_MAX_CONNS:
            k->http_limits.conns_max = (unsigned)cli_parse_uint(arg, 1, 1u << 20, "connection count");
            break;
        case O_HTTP_MAX_PER_ADDR:
            k->http_limits.conns_per_addr =
                (unsigned)cli_parse_uint(arg, 1, 1u << 20, "connection count");
            break;
        case O_HTTP_TIMEOUT:
            k->http_limits.timeout_s = (unsigned)cli_parse_uint(arg, 1, 86400, "timeout");
            break;
        case O_AUTH_TOKEN_FILE:
            free(k->auth_token);
            k->auth_token = cli_read_secret(arg, "--auth-token-file");
            {
                kvix_err e;
                if (kvix_peers_set_token(k->peers, k->auth_token, &e))
                    cli_usage_error("--auth-token-file: %s: %s", arg, e.msg);
            }
            break;
        case O_AUTH_QUERIES: k->auth_queries = 1; break;
        case O_PEERS_TIMEOUT:
            k->peers_timeout_s = (unsigned)cli_parse_uint(arg, 1, 86400, "timeout");
            break;
        case O_HTTP_MEMORY:
            k->http_limits.memory_max =
                (size_t)cli_parse_uint(arg, 1u << 20, UINT64_C(1) << 40, "memory");
            break;
        case O_PEERS: a->npeers += add_peers(k->peers, arg); break;
        case O_WORKERS:
            add_workers(&k->front, (char *)arg);
            a->dynamo = 1;
            break;
        case O_PORT:
            cli_parse_uint(arg, 0, 65535, "port");
            a->port = arg;
            a->dynamo = 1;
            break;
        }
    }
    a->files = argv + optind;
    cli_nats_check(&k->nopt);
    a->nfiles = argc - optind;
    a->subscribing = k->front.nw || k->front.workers_file;
    if (a->port && a->listen)
        cli_usage_error("--port and --listen both say where to listen: give one");
    if (a->dynamo && !a->listen) {
        snprintf(a->dynamo_listen, sizeof a->dynamo_listen, "0.0.0.0:%s",
                 a->port ? a->port : DYNAMO_PORT);
        a->listen = a->dynamo_listen;
    }
}

/* The options that go together, or not, before anything is opened. */
static void check_options(const kvi *k, const kvargs *a)
{
    if (k->snap && !*k->snap)
        cli_usage_error("empty snapshot path (-s)");
    if (k->query_only && !k->snap)
        cli_usage_error("-q needs a snapshot to answer from (-s FILE)");
    if (k->query_only && (k->save_every_events || k->save_every_secs))
        cli_usage_error("-q never saves: --save-every-* make no sense with it");
    if ((k->save_every_events || k->save_every_secs) && !k->snap)
        cli_usage_error("--save-every-* need a snapshot (-s FILE)");
    if (k->nopt.url && (a->nfiles || k->query_only))
        cli_usage_error("--nats reads the stream: no input files, no -q");
    if (!k->nopt.url && (k->reset_on_gap || k->until_caught_up))
        cli_usage_error("--reset-on-gap and --until-caught-up go with --nats");
    if (a->nfiles > 0xfffe)
        cli_usage_error("too many input files (limit 65534)");
    if (a->subscribing && (k->query_only || k->nopt.url))
        cli_usage_error("-w and --workers-file apply engines' events: not with -q or --nats");
    if (a->listen && k->front.cfg.model && strchr(k->front.cfg.model, ':'))
        cli_usage_error("bad model name '%s' for --listen: the HTTP API's /dump keys are "
                        "model:tenant, split at the first ':'", k->front.cfg.model);
    /* Dynamo's indexer takes its flags with no worker at start (they are
     * for the ones of --workers): so does kvindex when run as it */
    if (!a->subscribing && !a->dynamo && (k->front.given & CLI_SUB_GIVEN_DEFAULTS))
        cli_usage_error("--model, --tenant, --block-size and --replay-timeout go with -w or "
                        "--workers-file");
    if (a->listen && k->reset_on_gap)
        cli_usage_error("--reset-on-gap replaces the index: not with --listen, whose queries use it");
    if (k->auth_queries && !k->auth_token)
        cli_usage_error("--auth-queries goes with --auth-token-file");
    if (a->npeers && k->query_only)
        cli_usage_error("-q answers from the snapshot: --peers makes no sense with it");
    if (a->dynamo && (k->query_only || k->nopt.url))
        cli_usage_error("--port and --workers run kvindex as Dynamo's indexer, fed by its "
                        "engines: not with -q or --nats (use --listen)");
}

/* The sources, by number: the input files (or stdin, or the stream), then
 * the subscriptions. */
static void name_sources(kvi *k, kvargs *a)
{
    k->feed_file = a->nfiles ? (size_t)a->nfiles : 1;
    k->names = calloc(k->feed_file + 1, sizeof *k->names);
    if (!k->names)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    for (int i = 0; i < a->nfiles; i++)
        k->names[i] = strcmp(a->files[i], "-") ? a->files[i] : "<stdin>";
    snprintf(a->label, sizeof a->label, "<stream %s>", k->nopt.stream);
    if (!a->nfiles)
        k->names[0] = k->nopt.url ? a->label : "<stdin>";
    k->names[k->feed_file] = "<engines>";
}

static void make_ingest(kvi *k, kvargs *a)
{
    k->threads = a->io.threads = k->query_only ? 0 : k->threads;
    a->io.model_no_colon = a->listen != NULL; /* one rule for every source: see /register */
    k->front.model_no_colon = a->io.model_no_colon;
    kvix_ingest_opts go = {
        .index = a->io,
        .query_only = k->query_only,
        .explain = k->explain,
        .strict = k->strict,
        .save_every_events = k->save_every_events,
        .sources = k->names,
        .nsources = k->feed_file + 1,
        .feed_source = k->feed_file,
        .on_reject = on_reject,
        .on_wake = on_wake,
        .on_note = on_note,
        .on_feed_step = on_feed_step,
        .ctx = k,
    };
    kvix_err err;
    int rc = kvix_ingest_new(&k->g, &go, &err);
    if (rc)
        cli_die(cli_exit_for(rc), "%s", err.msg);
}

/* Before anything is read: the last of two savers would erase the other's
 * events, and a path that can never be saved must fail now, not at the end
 * of the input. */
static kvix_snapshot_lock *lock_snapshot(const kvi *k)
{
    kvix_snapshot_lock *lock = NULL;
    kvix_err err;
    int rc = k->snap && !k->query_only ? kvix_snapshot_lock_take(&lock, k->snap, &err) : KVIX_OK;
    if (rc)
        cli_die(cli_exit_for(rc), "cannot lock %s: %s", k->snap, err.msg);
    size_t stale = kvix_snapshot_lock_stale(lock);
    if (stale && !k->quiet)
        cli_warn("%s: removed %zu temporary file%s of interrupted saves", k->snap, stale,
                 stale == 1 ? "" : "s");
    return lock;
}

/* With --peers and no --nats: subscriptions connected and held, the
 * service up, then the peers; the snapshot only when no peer answered. */
static void start_from_peers(kvi *k, kvargs *a, int feeding)
{
    peek_registrations(k);
    if (feeding || k->nregs)
        make_feed(k);
    restore_registrations(k);
    if (a->listen)
        start_service(k, a->listen, a->http_threads);
    if (kvix_ingest_feed(k->g))
        start_feed(k, true);
    if (!recover_held(k) && k->snap) {
        if (k->svc)
            kvix_index_write_begin(kvix_ingest_index(k->g));
        load(k);
        if (k->svc)
            kvix_index_write_end(kvix_ingest_index(k->g));
    }
    kvix_ingest_rebase(k->g);
    if (kvix_ingest_feed(k->g))
        kvix_ingest_feed_release(k->g);
}

/* Otherwise the snapshot first. With --nats a replica resumes from its own
 * snapshot (exact), a new one takes a peer's, and one the stream left
 * behind bootstraps in run_nats. */
static void start_from_snapshot(kvi *k, kvargs *a, int feeding)
{
    if (!(k->snap && load(k)) && a->npeers && !recover(k))
        cli_warn("stream %s: starting empty from its first message", k->nopt.stream);
    kvix_ingest_rebase(k->g);
    if (feeding || k->nregs)
        make_feed(k);
    restore_registrations(k);
    if (a->listen)
        start_service(k, a->listen, a->http_threads);
    if (kvix_ingest_feed(k->g))
        start_feed(k, false);
}

/* The input files (or stdin) in turn, until a stop. */
static void read_inputs(kvi *k, const kvargs *a)
{
    for (int i = 0; i < (a->nfiles ? a->nfiles : 1) && !stopping(k) && !kvix_ingest_stopped(k->g);
         i++) {
        int fd = STDIN_FILENO;
        if (a->nfiles && strcmp(a->files[i], "-") != 0) {
            fd = open(a->files[i], O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                cli_warn("cannot open %s: %s", a->files[i], strerror(errno));
                k->io_error = 1;
                continue;
            }
        }
        run_input(k, fd, (size_t)i, a->fmt);
        if (fd != STDIN_FILENO)
            close(fd);
    }
}

/* Input done (or a stop): serve while there is a service or subscriptions,
 * then stop them, save, summarise; the exit code. */
static int finish(kvi *k, int subscribing)
{
    kvix_ingest_sync(k->g);
    int strict_hit = kvix_ingest_stopped(k->g);
    if ((k->svc || subscribing) && !stopping(k) && !strict_hit) {
        if (k->snap && !k->query_only)
            save(k, "end of input");
        if (!k->save_oom) /* out of memory stops the service, as it does mid-input */
            serve(k);
    }
    if (k->svc) /* stop accepting, let the requests in flight finish */
        kvix_service_shutdown(k->svc, 10000);
    kvix_err err;
    int feed_rc = kvix_ingest_feed_stop(k->g, &err);
    if (feed_rc)
        cli_warn("engine subscriptions stopped: %s", err.msg);
    strict_hit = kvix_ingest_stopped(k->g);
    if (k->snap && !k->query_only)
        save(k, sig_stop ? "signal" : strict_hit ? "--strict" : feed_rc ? "failure" : "end of input");
    warn_pending_unknown(k);
    if (!k->quiet) {
        summary(k);
        lag_summary(k);
    }
    /* A service counts rejected records in its metrics; only --strict, a
     * failed read or save, or the subscriptions' failure change its exit
     * status. */
    int code = kvix_ingest_rejected(k->g) && !k->svc ? KVIX_EXIT_REJECTED : KVIX_EXIT_OK;
    if (strict_hit)
        code = KVIX_EXIT_STRICT;
    if (k->io_error || k->save_failed)
        code = k->save_failed ? k->save_failed : KVIX_EXIT_IO;
    if (k->save_oom)
        code = KVIX_EXIT_SYS;
    if (feed_rc) /* out of memory or a system call: 6, as everywhere */
        code = feed_rc == KVIX_ENOMEM || feed_rc == KVIX_ESYS ? KVIX_EXIT_SYS : KVIX_EXIT_IO;
    if (k->gone)
        code = KVIX_EXIT_GONE;
    return code;
}

int main(int argc, char **argv)
{
    cli_init(&tool);
    static kvi k;
    static kvargs a;
    pthread_mutex_init(&k.mu, NULL);
    kvix_index_opts_init(&a.io);
    kvix_subfront_init(&k.front);
    a.fmt = KVIX_FMT_AUTO;
    kvix_natslog_opts_init(&k.nopt);
    k.nopt.name = "kvindex";
    kvix_err err;
    if (kvix_peers_new(&k.peers, &err))
        cli_die(KVIX_EXIT_SYS, "%s", err.msg);
    parse_options(&k, &a, argc, argv);
    check_options(&k, &a);
    kvix_subfront_check(&k.front);
    /* peers' answers are written to $TMPDIR as they come, never held in memory */
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if (kvix_peers_set_transfer(k.peers, tmp, 5000,
                                (uint64_t)(k.peers_timeout_s ? k.peers_timeout_s : 30) * 1000, &err))
        cli_die(KVIX_EXIT_SYS, "%s", err.msg);
    name_sources(&k, &a);
    make_ingest(&k, &a);
    k.progress = !k.quiet && cli_draws_progress();
    install_signals(k.progress || k.save_every_secs > 0);
    kvix_snapshot_lock *lock = lock_snapshot(&k);
    int feeding = a.subscribing || (a.listen && !k.query_only && !k.nopt.url);
    if (a.npeers && !k.nopt.url)
        start_from_peers(&k, &a, feeding);
    else
        start_from_snapshot(&k, &a, feeding);
    k.started = k.last_save = now();
    if (k.nopt.url)
        run_nats(&k);
    else if (!a.dynamo || a.nfiles) /* Dynamo's indexer reads no stdin */
        read_inputs(&k, &a);
    /* restored registrations are subscriptions too: served until a stop */
    int code = finish(&k, a.subscribing || k.nregs);
    free(k.regs);
    kvix_ingest_free(k.g);
    free(k.names);
    kvix_peers_free(k.peers);
    kvix_subfront_release(&k.front);
    free(k.auth_token);
    code = cli_finish(code);
    kvix_snapshot_lock_release(lock); /* after the last save and output */
    return code;
}
