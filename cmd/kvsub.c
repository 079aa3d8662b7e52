/* kvsub: subscribe to inference engines' KV-event streams (vLLM, SGLang over
 * ZMQ, see kvsub(1) and tests/fixtures/vllm) and print kvix events on stdout.
 *
 * The subscriber is the library's (kvix/enginesub.h): sequence tracking per
 * subscription, replay, losses as `cleared` events. This file only turns
 * options into its configuration, prints what it delivers, and handles the
 * signals (SIGHUP re-reads the workers file, SIGUSR1 prints the counters).
 * The workers file is also re-read when it changes (--reload), so a file
 * that grows while its writer binds (kvreplay --map-file) is followed. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <netdb.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kvix/buf.h"
#include "kvix/enginesub.h"
#include "kvix/event.h"
#include "kvix/natslog.h"
#include "kvix/snapshot.h"
#include "kvix/stream.h"
#include "kvix/wire.h"

enum {
    O_REPLAY = 0x100,
    O_TOPIC,
    O_BIND,
    O_WORKERS_FILE,
    O_TOKENS,
    O_REPLAY_TIMEOUT,
    O_REPLAY_BUFFER,
    O_REPLAY_BUFFER_BYTES,
    O_MAX_MESSAGE,
    O_RESUME,
    O_NATS,
    O_SUBJECT,
    O_STREAM,
    O_STREAM_MAX_AGE,
    O_STREAM_MAX_BYTES,
    O_STREAM_REPLICAS,
    O_STREAM_DUP_WINDOW,
    O_NATS_WINDOW,
    O_JSON,
    O_IDLE_EXIT,
    O_RELOAD,
    O_MAX_SUBSCRIPTIONS,
};

static const cli_opt options[] = {
    {'w', 'w', "worker", "ID[:DP]=ENDPOINT", NULL,
     "subscribe to a worker's event endpoint (repeatable)"},
    {O_REPLAY, 0, "replay", "ID[:DP]=ENDPOINT", NULL,
     "replay endpoint of a worker and rank, asked for missed batches (repeatable)"},
    {'m', 'm', "model", "NAME", NULL, "model name of the events (default \"default\")"},
    {'t', 't', "tenant", "NAME", NULL, "tenant of the events (default \"default\")"},
    {'b', 'b', "block-size", "N", NULL,
     "configured block size; smaller (partial) blocks are skipped (default: each event's)"},
    {O_TOPIC, 0, "topic", "PREFIX", NULL, "subscribe to topics starting with PREFIX (default all)"},
    {O_BIND, 0, "bind", NULL, NULL, "bind the endpoints instead of connecting (engines connect)"},
    {'f', 'f', "format", "FMT", "ndjson|msgpack", "output format (default ndjson)"},
    {O_WORKERS_FILE, 0, "workers-file", "FILE", "file",
     "read ID[:DP]=ENDPOINT [replay=ENDPOINT] lines from FILE; re-read on SIGHUP"},
    {O_RELOAD, 0, "reload", "SECONDS", NULL,
     "re-read the workers file when it changes, checked every SECONDS (default 0.25; 0: on SIGHUP only)"},
    {O_MAX_SUBSCRIPTIONS, 0, "max-subscriptions", "N", NULL,
     "subscriptions held at once (default 1024, or what the open-file limit allows); more are refused"},
    {O_TOKENS, 0, "tokens", NULL, NULL, "keep each stored block's token ids in the events"},
    {O_REPLAY_TIMEOUT, 0, "replay-timeout", "MS", NULL,
     "give up a recovery MS milliseconds after asking (default 5000)"},
    {O_REPLAY_BUFFER, 0, "replay-buffer", "N", NULL,
     "live batches held per endpoint while a replay runs (default 10000)"},
    {O_REPLAY_BUFFER_BYTES, 0, "replay-buffer-bytes", "N", NULL,
     "bytes of batches held per endpoint while a replay runs (default 268435456)"},
    {O_MAX_MESSAGE, 0, "max-message", "N", NULL,
     "largest engine message in bytes; a larger one is a loss (default 67108864)"},
    {O_RESUME, 0, "resume", "SNAPSHOT", "file",
     "start each worker after the last eid the snapshot holds for it"},
    {O_JSON, 0, "json", NULL, NULL,
     "counters and worker status (SIGUSR1, exit) as JSON objects, one a line"},
    {O_IDLE_EXIT, 0, "idle-exit", "SECONDS", NULL,
     "once engine messages came, stop after SECONDS without one (default: run until stopped)"},
    {O_NATS, 0, "nats", "URL", NULL,
     "also publish every batch printed to a NATS JetStream stream (one message per batch)"},
    CLI_NATS_AUTH_OPTIONS,
    {O_SUBJECT, 0, "subject", "PREFIX", NULL,
     "--nats: publish to PREFIX.<model>.<worker> (default kvix)"},
    {O_STREAM, 0, "stream", "NAME", NULL,
     "--nats: the stream, created on PREFIX.> if missing (default KVIX)"},
    {O_STREAM_MAX_AGE, 0, "stream-max-age", "SECONDS", NULL,
     "stream created: drop messages older than SECONDS (default 0: never)"},
    {O_STREAM_MAX_BYTES, 0, "stream-max-bytes", "BYTES", NULL,
     "stream created: keep at most BYTES, oldest dropped first (default 0: no limit)"},
    {O_STREAM_REPLICAS, 0, "stream-replicas", "N", NULL,
     "stream created: N copies in a NATS cluster (default 1)"},
    {O_STREAM_DUP_WINDOW, 0, "stream-dup-window", "SECONDS", NULL,
     "stream created: a batch published again within SECONDS is dropped (default 120)"},
    {O_NATS_WINDOW, 0, "nats-window", "N", NULL,
     "--nats: batches awaiting the server's acknowledgement at most, one per worker "
     "(default 256; 1: each before the next)"},
    {0, 0, NULL, NULL, NULL, NULL},
};

static const cli_tool tool = {
    .name = "kvsub",
    .usage = "-w ID[:DP]=ENDPOINT [-w ...] [options]",
    .summary = "subscribe to engines' kv-cache event streams and print kvix events",
    .opts = options,
    .operands = NULL,
    .exits = "012346",
};

#define WARN_MAX 20 /* warnings of one kind of rejected input before they are only counted */

static struct {
    const char *workers_file, *resume;
    uint64_t reload_ms;
    struct stat wf_seen; /* the workers file as last read, to see it change */
    bool bind, json;
    uint64_t idle_exit_ms;
    kvix_format fmt;
    kvix_enginesub *sub;
    kvix_enginesub_spec *specs, *replays;
    size_t nspecs, nreplays;
    kvix_buf out;
    bool out_broken;
    kvix_natslog_opts nopt; /* --nats */
    kvix_natslog *nats;
} S;

static volatile sig_atomic_t sig_stop, sig_hup, sig_usr1;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        sig_hup = 1;
    else if (sig == SIGUSR1)
        sig_usr1 = 1;
    else
        sig_stop = 1;
}

/* ---- output --------------------------------------------------------------- */

static void out_flush(void)
{
    if (S.out_broken)
        return;
    if (fflush(stdout) != 0) {
        if (errno == EPIPE) { /* the reader left: a clean stop */
            S.out_broken = true;
            sig_stop = 1;
            return;
        }
        cli_die(KVIX_EXIT_IO, "error writing standard output: %s", strerror(errno));
    }
}

/* Take ev into the batch being gathered (NULL: hand that batch over),
 * the library's framing (kvix_natslog_publish_event). A window full of
 * batches the server has not acknowledged (the server away) is waited for;
 * only a stop while it is away loses the batch, and that is an error. Each
 * new reason is said once: first the window full, then a batch sent again
 * unanswered (named by its subject). */
static void nats_put(const kvix_event *ev)
{
    if (!S.nats)
        return;
    char warned[KVIX_ERR_MSG_MAX] = "";
    kvix_natslog_pubstats before, now;
    kvix_natslog_pubstats_get(S.nats, &before);
    kvix_err err;
    int rc;
    while ((rc = ev ? kvix_natslog_publish_event(S.nats, ev, &err)
                    : kvix_natslog_publish_pending(S.nats, &err)) == KVIX_EIO) {
        if (sig_stop)
            cli_die(KVIX_EXIT_SYS, "stopped with a batch not published: %s", err.msg);
        if (strcmp(warned, err.msg) != 0) {
            cli_warn("%s: waiting for the server", err.msg);
            snprintf(warned, sizeof warned, "%s", err.msg);
        }
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (rc)
        cli_die(cli_exit_for(rc), "cannot publish %s: %s", ev ? "an event" : "a batch", err.msg);
    if (warned[0])
        cli_warn("nats: publishing again");
    kvix_natslog_pubstats_get(S.nats, &now);
    if (now.lost != before.lost)
        cli_warn("nats: worker %" PRIu64 " dp %" PRIu32 ": %" PRIu64 " event%s of batch %" PRIu64
                 " over the server's largest message: published as a clear",
                 now.lost_worker, now.lost_dp, now.lost - before.lost,
                 now.lost - before.lost == 1 ? "" : "s", now.lost_eid);
}

/* At exit: every batch taken acknowledged by the server, or an error
 * (stdout has printed them: it shows what kvsub received, the stream what
 * the server acknowledged, and the exit status says when they differ). */
static void nats_finish(void)
{
    if (!S.nats)
        return;
    nats_put(NULL);
    kvix_err err;
    if (kvix_natslog_flush(S.nats, S.nopt.timeout_ms, &err) != KVIX_OK)
        cli_die(KVIX_EXIT_SYS, "stopped with batches the server did not acknowledge: %s",
                err.msg);
}

/* The stream must exist before the first batch: made from the options when
 * missing, the server waited for if it is not up yet. */
static void nats_open(void)
{
    kvix_err err;
    if (kvix_natslog_open(&S.nats, &S.nopt, &err))
        cli_die(err.code == KVIX_EINVAL ? KVIX_EXIT_USAGE : KVIX_EXIT_SYS, "%s", err.msg);
    int warned = 0, created = 0;
    while (kvix_natslog_ensure_stream(S.nats, &created, &err) != KVIX_OK) {
        if (sig_stop)
            cli_die(KVIX_EXIT_SYS, "%s", err.msg);
        if (!warned++)
            cli_warn("%s: waiting for the server", err.msg);
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (created)
        cli_warn("nats: created stream %s on %s.>", S.nopt.stream, S.nopt.subject);
}

static void on_event(void *ctx, const kvix_event *ev)
{
    (void)ctx;
    nats_put(ev);
    if (S.out_broken)
        return;
    kvix_err err;
    S.out.len = 0;
    int rc = S.fmt == KVIX_FMT_MSGPACK ? kvix_event_to_msgpack(ev, &S.out, &err)
                                       : kvix_event_to_json(ev, &S.out, &err);
    if (rc != KVIX_OK)
        cli_die(cli_exit_for(rc), "cannot write an event: %s", err.msg);
    if (fwrite(S.out.data, 1, S.out.len, stdout) != S.out.len) {
        if (errno == EPIPE) {
            S.out_broken = true;
            sig_stop = 1;
            return;
        }
        cli_die(KVIX_EXIT_IO, "error writing standard output: %s", strerror(errno));
    }
}

static void on_note(void *ctx, const kvix_enginesub_note *n)
{
    (void)ctx;
    bool always = n->kind == KVIX_ENGINESUB_LOSS || n->kind == KVIX_ENGINESUB_RESTART ||
                  n->kind == KVIX_ENGINESUB_REMOVED || n->kind == KVIX_ENGINESUB_FAILED ||
                  n->kind == KVIX_ENGINESUB_DISCONNECT || n->kind == KVIX_ENGINESUB_NO_CONNECTION ||
                  n->kind == KVIX_ENGINESUB_CONNECTED || n->kind == KVIX_ENGINESUB_UNRESOLVED;
    if (always || n->repeat <= WARN_MAX)
        cli_warn("%s", n->msg);
}

/* ---- subscriptions ---------------------------------------------------------- */

/* --replay ID[:DP]=EP names the replay endpoint of a worker and rank,
 * wherever it is subscribed (-w or the workers file, whose replay= wins). */
static void apply_replays(kvix_enginesub_spec *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < S.nreplays && !v[i].replay[0]; k++)
            if (S.replays[k].worker == v[i].worker && S.replays[k].dp == v[i].dp)
                snprintf(v[i].replay, sizeof v[i].replay, "%s", S.replays[k].endpoint);
}

static int count_one(void *ctx, const kvix_enginesub_status *st)
{
    (void)st;
    ++*(size_t *)ctx;
    return 0;
}

static void load_workers(bool initial)
{
    kvix_enginesub_spec *v;
    size_t n, added, removed;
    kvix_err err;
    /* stat before reading: a change made while we read is seen next time */
    if (stat(S.workers_file, &S.wf_seen) != 0)
        memset(&S.wf_seen, 0, sizeof S.wf_seen);
    int rc = kvix_enginesub_file_read(S.workers_file, S.bind, &v, &n, &err);
    if (rc) {
        cli_warn("%s", err.msg);
        if (initial)
            exit(cli_finish(KVIX_EXIT_IO));
        cli_warn("keeping the workers of %s as they were", S.workers_file);
        return;
    }
    apply_replays(v, n);
    rc = kvix_enginesub_replace(S.sub, 1, v, n, &added, &removed, &err);
    free(v);
    if (rc) {
        cli_warn("%s: %s%s", S.workers_file, err.msg,
                 rc == KVIX_EBUSY ? " (--max-subscriptions)" : "");
        if (initial)
            exit(cli_finish(KVIX_EXIT_USAGE));
        cli_warn("keeping the workers of %s as they were", S.workers_file);
        return;
    }
    if (!initial) {
        size_t total = 0;
        kvix_enginesub_list(S.sub, count_one, &total);
        cli_warn("reloaded %s: %zu workers, %zu added, %zu removed", S.workers_file, total,
                 added, removed);
    }
}

/* Each (worker, dp) of the snapshot resumes after its last eid, in the
 * subscriptions of its model and tenant. */
static void load_resume(const char *model, const char *tenant)
{
    kvix_snapshot *snap;
    kvix_err err;
    size_t mine = 0;
    int rc = kvix_snapshot_open(&snap, S.resume, &err);
    if (rc)
        cli_die(cli_exit_for(rc), "%s", err.msg);
    rc = kvix_enginesub_resume_snapshot(S.sub, snap, &mine, &err);
    kvix_snapshot_close(snap);
    if (rc)
        cli_die(cli_exit_for(rc), "%s", err.msg);
    if (mine == 0)
        cli_warn("%s holds no eid of model %s tenant %s: starting from the first batches",
                 S.resume, model, tenant);
}

/* ---- counters ----------------------------------------------------------------- */

static void print_json(json_t *o)
{
    char *t = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (!t)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    fprintf(stderr, "%s\n", t);
    free(t);
    json_decref(o);
}

static void print_stats(void)
{
    kvix_enginesub_counts c;
    kvix_enginesub_counts_get(S.sub, &c);
    kvix_natslog_pubstats ps = {0};
    if (S.nats)
        kvix_natslog_pubstats_get(S.nats, &ps);
    struct { const char *k; uint64_t v; } f[] = {
        {"batches", c.batches},
        {"stored", c.events[KVIX_EV_STORED]},
        {"removed", c.events[KVIX_EV_REMOVED]},
        {"cleared", c.events[KVIX_EV_CLEARED]},
        {"cleared_by_kvsub", c.cleared},
        {"gaps", c.seq.gaps},
        {"replays", c.seq.replays},
        {"replayed", c.seq.replayed},
        {"losses", c.seq.losses},
        {"restarts", c.seq.restarts},
        {"stale", c.seq.stale + c.seq.duplicates},
        {"refused", c.seq.refused},
        {"decode_errors", c.decode_errors},
        {"bad_frames", c.bad_frames},
        {"partial_blocks", c.partial_blocks},
        {"unknown_events", c.unknown_events},
        {"remote", c.remote},
        {"unknown_media", c.unknown_media},
        {"refused_events", c.refused_events},
        {"placeholders", c.placeholders},
        {"other_kinds", c.other_kinds},
        {"dropped", c.dropped},
        {"disconnects", c.disconnects},
        {"workers", c.subscriptions},
    };
    size_t n = sizeof f / sizeof *f;
    if (S.json) {
        json_t *o = json_object();
        for (size_t i = 0; o && i < n; i++)
            json_object_set_new(o, f[i].k, json_integer((json_int_t)f[i].v));
        if (o && S.nats) {
            json_object_set_new(o, "nats_published", json_integer((json_int_t)ps.acked));
            json_object_set_new(o, "nats_duplicates", json_integer((json_int_t)ps.duplicates));
            json_object_set_new(o, "nats_pending", json_integer((json_int_t)ps.pending));
            json_object_set_new(o, "nats_resent", json_integer((json_int_t)ps.resent));
            json_object_set_new(o, "nats_reordered", json_integer((json_int_t)ps.reordered));
            json_object_set_new(o, "nats_split", json_integer((json_int_t)ps.split));
            json_object_set_new(o, "nats_lost", json_integer((json_int_t)ps.lost));
        }
        print_json(o);
        return;
    }
    fputs("kvsub:", stderr);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %s=%" PRIu64, f[i].k, f[i].v);
    fputc('\n', stderr);
    if (S.nats) /* published: acknowledged by the server */
        fprintf(stderr, "kvsub: nats published=%" PRIu64 " duplicates=%" PRIu64 "\n", ps.acked,
                ps.duplicates);
    if (S.nats && (ps.split || ps.lost))
        fprintf(stderr, "kvsub: nats split=%" PRIu64 " lost=%" PRIu64 "\n", ps.split, ps.lost);
    /* always, zeros too: a reader (nats_replicas.t) must not have to guess
     * whether a missing line means nothing was in flight */
    if (S.nats)
        fprintf(stderr, "kvsub: nats pending=%" PRIu64 " resent=%" PRIu64 " reordered=%" PRIu64
                        "\n", ps.pending, ps.resent, ps.reordered);
}

/* SIGUSR1: one line per worker after the counters. */
static int print_status(void *ctx, const kvix_enginesub_status *st)
{
    (void)ctx;
    const kvix_enginesub_spec *sp = st->spec;
    const char *state = !st->open ? "closed" : S.bind ? "bound" : st->connected ? "connected"
                                                                          : "not connected";
    if (S.json) {
        json_t *o = json_object();
        if (!o)
            cli_die(KVIX_EXIT_SYS, "out of memory");
        json_object_set_new(o, "worker", json_integer((json_int_t)sp->worker));
        json_object_set_new(o, "dp", json_integer(sp->dp));
        json_object_set_new(o, "endpoint", json_string(sp->endpoint));
        json_object_set_new(o, "state", json_string(state));
        json_object_set_new(o, "replaying", json_boolean(st->replaying));
        json_object_set_new(o, "batches", json_integer((json_int_t)st->batches));
        json_object_set_new(o, "last_seq", st->has_seq ? json_integer((json_int_t)st->last_seq)
                                                       : json_null());
        json_object_set_new(o, "idle_ms", st->idle_ms == UINT64_MAX
                                              ? json_null()
                                              : json_integer((json_int_t)st->idle_ms));
        json_object_set_new(o, "ranks", json_integer(st->ranks));
        json_object_set_new(o, "losses", json_integer((json_int_t)st->seq.losses));
        print_json(o);
        return 0;
    }
    char seq[32] = "none", idle[32] = "never";
    if (st->has_seq)
        snprintf(seq, sizeof seq, "%" PRIu64, st->last_seq);
    if (st->idle_ms != UINT64_MAX)
        snprintf(idle, sizeof idle, "%.1f s ago", (double)st->idle_ms / 1000);
    fprintf(stderr,
            "kvsub: worker %" PRIu64 " dp %" PRIu32 " %s: %s%s, last seq %s, last message %s, "
            "batches=%" PRIu64 " losses=%" PRIu64 "\n",
            sp->worker, sp->dp, sp->endpoint, state, st->replaying ? ", replaying" : "", seq,
            idle, st->batches, st->seq.losses);
    return 0;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ZMQ retries a host that does not resolve forever and silently: say so. */

/* The workers file was replaced or rewritten since it was last read (a file
 * gone for now is not a change: the workers are kept). */
static bool workers_file_changed(void)
{
    struct stat st;
    if (stat(S.workers_file, &st) != 0)
        return false;
    return st.st_ino != S.wf_seen.st_ino || st.st_dev != S.wf_seen.st_dev ||
           st.st_size != S.wf_seen.st_size || st.st_mtim.tv_sec != S.wf_seen.st_mtim.tv_sec ||
           st.st_mtim.tv_nsec != S.wf_seen.st_mtim.tv_nsec;
}

static void run(void)
{
    kvix_err err;
    /* --idle-exit: the quiet spell counts from the last message, and only once
     * one came, so a kvsub started before its engines waits for them */
    uint64_t seen = 0, quiet_since = mono_ms(), checked = quiet_since;
    while (!sig_stop) {
        if (sig_hup) {
            sig_hup = 0;
            if (S.workers_file)
                load_workers(false);
        }
        if (S.workers_file && S.reload_ms && mono_ms() - checked >= S.reload_ms) {
            checked = mono_ms();
            if (workers_file_changed())
                load_workers(false);
        }
        if (sig_usr1) {
            sig_usr1 = 0;
            print_stats();
            kvix_enginesub_list(S.sub, print_status, NULL);
        }
        if (S.idle_exit_ms) {
            kvix_enginesub_counts c;
            kvix_enginesub_counts_get(S.sub, &c);
            uint64_t now = mono_ms();
            if (c.messages != seen) {
                seen = c.messages;
                quiet_since = now;
            } else if (seen > 0 && now - quiet_since >= S.idle_exit_ms) {
                break;
            }
        }
        out_flush(); /* everything so far is visible before waiting */
        nats_put(NULL);
        int rc = kvix_enginesub_step(S.sub, 200, &err);
        if (rc)
            cli_die(cli_exit_for(rc), "%s", err.msg);
    }
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    return q;
}

/* -w and --replay: checked in full here, so a bad one is a usage error. */
static void add_spec(kvix_enginesub_spec **v, size_t *n, const char *arg, bool bind,
                     const char *what)
{
    kvix_enginesub_spec sp;
    kvix_err err;
    kvix_enginesub_spec_init(&sp);
    if (kvix_enginesub_spec_parse(&sp, arg, &err) ||
        kvix_enginesub_endpoint_check(sp.endpoint, bind, &err))
        cli_usage_error("%s%s", what, err.msg);
    *v = xrealloc(*v, (*n + 1) * sizeof **v);
    (*v)[(*n)++] = sp;
}

int main(int argc, char **argv)
{
    cli_init(&tool);
    kvix_enginesub_config cfg;
    kvix_enginesub_config_init(&cfg);
    S.fmt = KVIX_FMT_NDJSON;
    kvix_natslog_opts_init(&S.nopt);
    S.nopt.name = "kvsub";
    const char *arg;
    const char **wargs = NULL;
    size_t nw = 0;
    bool reload_set = false;
    size_t subs_given = 0;
    S.reload_ms = 250;
    int c;
    while ((c = cli_next(argc, argv, &arg)) != -1) {
        if (cli_nats_option(c, arg, &S.nopt))
            continue;
        switch (c) {
        case 'w':
            wargs = xrealloc(wargs, (nw + 1) * sizeof *wargs);
            wargs[nw++] = arg; /* checked once --bind is known */
            break;
        case O_REPLAY: add_spec(&S.replays, &S.nreplays, arg, false, "--replay: "); break;
        case 'm':
        case 't':
            if (!*arg || strlen(arg) >= KVIX_NAME_MAX)
                cli_usage_error("bad %s name '%s'", c == 'm' ? "model" : "tenant", arg);
            *(c == 'm' ? &cfg.model : &cfg.tenant) = arg;
            break;
        case 'b':
            cfg.block_size = (uint32_t)cli_parse_uint(arg, 1, KVIX_BS_MAX, "block size");
            break;
        case O_TOPIC: cfg.topic = arg; break;
        case O_BIND: cfg.bind = S.bind = true; break;
        case 'f':
            if (kvix_format_parse(arg, &S.fmt) != KVIX_OK || S.fmt == KVIX_FMT_AUTO)
                cli_usage_error("bad format '%s' (expected ndjson or msgpack)", arg);
            break;
        case O_WORKERS_FILE: S.workers_file = arg; break;
        case O_TOKENS: cfg.keep_tokens = true; break;
        case O_REPLAY_TIMEOUT:
            cfg.replay_timeout_ms = cli_parse_uint(arg, 1, 3600000, "replay timeout");
            break;
        case O_REPLAY_BUFFER:
            cfg.hold_max = (size_t)cli_parse_uint(arg, 1, 10000000, "replay buffer");
            break;
        case O_REPLAY_BUFFER_BYTES:
            cfg.hold_bytes_max =
                (size_t)cli_parse_uint(arg, 1024, UINT64_C(1) << 40, "replay buffer bytes");
            break;
        case O_MAX_MESSAGE:
            cfg.msg_max = (size_t)cli_parse_uint(arg, 1024, KVIX_WIRE_FRAME_MAX, "max message");
            break;
        case O_MAX_SUBSCRIPTIONS:
            subs_given = (size_t)cli_parse_uint(arg, 1, kvix_enginesub_subs_limit(),
                                                "subscription count");
            break;
        case O_RESUME: S.resume = arg; break;
        case O_JSON: S.json = true; break;
        case O_IDLE_EXIT:
            S.idle_exit_ms = cli_parse_uint(arg, 1, 31536000, "idle exit") * 1000;
            break;
        case O_RELOAD:
        {
            double sec = cli_parse_double(arg, 0, 86400, "--reload");
            S.reload_ms = sec > 0 && sec < 0.001 ? 1 : (uint64_t)(sec * 1000);
        }
            reload_set = true;
            break;
        case O_NATS: S.nopt.url = arg; break;
        case O_NATS_WINDOW:
            S.nopt.window = (unsigned)cli_parse_uint(arg, 1, KVIX_NATSLOG_WINDOW_MAX, "window");
            break;
        case O_SUBJECT: S.nopt.subject = arg; break;
        case O_STREAM: S.nopt.stream = arg; break;
        case O_STREAM_MAX_AGE:
            S.nopt.max_age_s = (int64_t)cli_parse_uint(arg, 0, UINT64_C(1) << 32, "max age");
            break;
        case O_STREAM_MAX_BYTES:
            S.nopt.max_bytes = (int64_t)cli_parse_uint(arg, 0, INT64_MAX, "max bytes");
            break;
        case O_STREAM_REPLICAS:
            S.nopt.replicas = (int)cli_parse_uint(arg, 1, 5, "replicas");
            break;
        case O_STREAM_DUP_WINDOW:
            S.nopt.dup_window_s = (int64_t)cli_parse_uint(arg, 1, UINT64_C(1) << 32, "dup window");
            break;
        }
    }
    if (optind < argc)
        cli_usage_error("unexpected argument '%s'", argv[optind]);
    cli_nats_check(&S.nopt);
    if (!nw && !S.workers_file)
        cli_usage_error("no worker: give -w ID[:DP]=ENDPOINT or --workers-file FILE");
    if (reload_set && !S.workers_file)
        cli_usage_error("--reload needs --workers-file");
    /* stdio, the NATS connection, the wake pipe: a few descriptors besides */
    cfg.subs_max = cli_size_subscriptions(subs_given, 64, "--max-subscriptions");
    for (size_t i = 0; i < nw; i++)
        add_spec(&S.specs, &S.nspecs, wargs[i], cfg.bind, "");
    free(wargs);
    apply_replays(S.specs, S.nspecs);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: zmq_poll returns at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Events are flushed whenever kvsub waits, so a reader sees each batch
     * at once without a write per line. */
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    kvix_buf_init(&S.out);
    if (S.nopt.url)
        nats_open();

    kvix_err err;
    kvix_enginesub_ops ops = {on_event, on_note};
    int rc = kvix_enginesub_new(&S.sub, &cfg, &ops, NULL, &err);
    if (rc)
        cli_die(cli_exit_for(rc), "%s", err.msg);
    if (S.resume)
        load_resume(cfg.model ? cfg.model : "default", cfg.tenant ? cfg.tenant : "default");
    for (size_t i = 0; i < S.nspecs; i++)
        if ((rc = kvix_enginesub_add(S.sub, &S.specs[i], 0, &err)))
            cli_usage_error("%s%s", err.msg, rc == KVIX_EBUSY ? " (--max-subscriptions)" : "");
    if (S.workers_file)
        load_workers(true);
    if ((rc = kvix_enginesub_apply(S.sub, &err)))
        cli_die(cli_exit_for(rc), "%s", err.msg);

    run();

    out_flush();
    nats_finish();
    print_stats();
    kvix_enginesub_counts cnt;
    kvix_enginesub_counts_get(S.sub, &cnt);
    kvix_enginesub_free(S.sub);
    free(S.specs);
    free(S.replays);
    kvix_buf_release(&S.out);
    kvix_natslog_free(S.nats);
    int code = cnt.decode_errors || cnt.bad_frames ? KVIX_EXIT_REJECTED : KVIX_EXIT_OK;
    if (S.out_broken) { /* the reader left: nothing more to report about stdout */
        fclose(stdout);
        return code;
    }
    return cli_finish(code);
}
