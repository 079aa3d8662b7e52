/* kvsub: subscribe to inference engines' KV-event streams (vLLM, SGLang over
 * ZMQ, see kvsub(1) and tests/fixtures/vllm) and print kvix events on stdout.
 *
 * The subscriber is the library's (kvix/enginesub.h): sequence tracking per
 * subscription, replay, losses as `cleared` events, the resume from a
 * snapshot; so is the NATS framing (kvix/natslog.h). Which workers, and the
 * workers file read again on SIGHUP and when it changes (--reload), is the
 * front end kvindex -w shares (cmd/tools/subfront.h). This file turns
 * options into their configuration, prints what the subscriber delivers and
 * its counters, and handles the signals. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "natspub.h"
#include "subfront.h"
#include "kvix/buf.h"
#include "kvix/enginesub.h"
#include "kvix/event.h"
#include "kvix/natslog.h"
#include "kvix/snapshot.h"
#include "kvix/stream.h"

enum {
    O_RESUME = 0x100,
    O_JSON,
    O_IDLE_EXIT,
};

static const cli_opt options[] = {
    {'w', 'w', "worker", "ID[:DP]=ENDPOINT", NULL,
     "subscribe to a worker's event endpoint (repeatable)"},
    {CLI_O_SUB_REPLAY, 0, "replay", "ID[:DP]=ENDPOINT", NULL,
     "replay endpoint of a worker and rank, asked for missed batches (repeatable)"},
    {CLI_O_SUB_MODEL, 'm', "model", "NAME", NULL, "model name of the events (default \"default\")"},
    {CLI_O_SUB_TENANT, 't', "tenant", "NAME", NULL, "tenant of the events (default \"default\")"},
    {CLI_O_SUB_BLOCK_SIZE, 'b', "block-size", "N", NULL,
     "configured block size; smaller (partial) blocks are skipped (default: each event's)"},
    {CLI_O_SUB_TOPIC, 0, "topic", "PREFIX", NULL,
     "subscribe to topics starting with PREFIX (default all)"},
    {CLI_O_SUB_BIND, 0, "bind", NULL, NULL,
     "bind the endpoints instead of connecting (engines connect)"},
    {'f', 'f', "format", "FMT", "ndjson|msgpack", "output format (default ndjson)"},
    CLI_SUB_FILE_OPTIONS,
    {CLI_O_SUB_MAX_SUBSCRIPTIONS, 0, "max-subscriptions", "N", NULL,
     "subscriptions held at once (default 1024, or what the open-file limit allows); more are refused"},
    {CLI_O_SUB_TOKENS, 0, "tokens", NULL, NULL,
     "keep each stored block's token ids in the events"},
    {CLI_O_SUB_REPLAY_TIMEOUT, 0, "replay-timeout", "MS", NULL,
     "give up a recovery MS milliseconds after asking (default 5000)"},
    {CLI_O_SUB_REPLAY_BUFFER, 0, "replay-buffer", "N", NULL,
     "live batches held per endpoint while a replay runs (default 10000)"},
    {CLI_O_SUB_REPLAY_BUFFER_BYTES, 0, "replay-buffer-bytes", "N", NULL,
     "bytes of batches held per endpoint while a replay runs (default 268435456)"},
    {CLI_O_SUB_MAX_MESSAGE, 0, "max-message", "N", NULL,
     "largest engine message in bytes; a larger one is a loss (default 67108864)"},
    {O_RESUME, 0, "resume", "SNAPSHOT", "file",
     "start each worker after the last eid the snapshot holds for it"},
    {O_JSON, 0, "json", NULL, NULL,
     "counters and worker status (SIGUSR1, exit) as JSON objects, one a line"},
    {O_IDLE_EXIT, 0, "idle-exit", "SECONDS", NULL,
     "once engine messages came, stop after SECONDS without one (default: run until stopped)"},
    {CLI_O_NATS_URL, 0, "nats", "URL", NULL,
     "also publish every batch printed to a NATS JetStream stream (one message per batch)"},
    CLI_NATS_AUTH_OPTIONS,
    {CLI_O_NATS_SUBJECT, 0, "subject", "PREFIX", NULL,
     "--nats: publish to PREFIX.<model>.<worker> (default kvix)"},
    {CLI_O_NATS_STREAM, 0, "stream", "NAME", NULL,
     "--nats: the stream, created on PREFIX.> if missing (default KVIX)"},
    {CLI_O_NATS_STREAM_MAX_AGE, 0, "stream-max-age", "SECONDS", NULL,
     "stream created: drop messages older than SECONDS (default 0: never)"},
    {CLI_O_NATS_STREAM_MAX_BYTES, 0, "stream-max-bytes", "BYTES", NULL,
     "stream created: keep at most BYTES, oldest dropped first (default 0: no limit)"},
    {CLI_O_NATS_STREAM_REPLICAS, 0, "stream-replicas", "N", NULL,
     "stream created: N copies in a NATS cluster (default 1)"},
    {CLI_O_NATS_STREAM_DUP_WINDOW, 0, "stream-dup-window", "SECONDS", NULL,
     "stream created: a batch published again within SECONDS is dropped (default 120)"},
    {CLI_O_NATS_WINDOW, 0, "nats-window", "N", NULL,
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

static struct {
    kvix_subfront front; /* -w, --workers-file, the subscriptions' defaults */
    const char *resume;
    bool json;
    uint64_t idle_exit_ms;
    kvix_format fmt;
    kvix_enginesub *sub;
    kvix_buf out;
    bool out_broken;
    kvix_natslog_opts nopt; /* --nats */
    kvix_natspub *nats;
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

/* --nats: what the publisher waits for, said */
static int stopping(void *ctx)
{
    (void)ctx;
    return sig_stop;
}

static void on_nats_note(void *ctx, const char *msg)
{
    (void)ctx;
    cli_warn("%s", msg);
}

/* ev (NULL: the batch gathered) published, once the server takes it; only
 * a stop while it is away loses the batch, and that is an error. */
static void nats_put(const kvix_event *ev)
{
    kvix_err err;
    int rc = S.nats ? kvix_natspub_put(S.nats, ev, &err) : KVIX_OK;
    if (rc)
        cli_die(rc == KVIX_EIO ? KVIX_EXIT_SYS : cli_exit_for(rc), "%s", err.msg);
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
    if (kvix_subfront_note_said(n))
        cli_warn("%s", n->msg);
}

/* ---- subscriptions ---------------------------------------------------------- */

/* Each (worker, dp) of the snapshot resumes after its last eid, in the
 * subscriptions of its model and tenant. */
static void load_resume(void)
{
    const kvix_enginesub_config *cfg = &S.front.cfg;
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
                 S.resume, cfg->model ? cfg->model : "default",
                 cfg->tenant ? cfg->tenant : "default");
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
        kvix_natspub_stats(S.nats, &ps);
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
    const char *state = !st->open             ? "closed"
                        : S.front.cfg.bind    ? "bound"
                        : st->connected       ? "connected"
                                              : "not connected";
    if (S.json) {
        print_json(json_pack(
            "{s:I, s:I, s:s, s:s, s:b, s:I, s:o, s:o, s:I, s:I}", "worker", (json_int_t)sp->worker,
            "dp", (json_int_t)sp->dp, "endpoint", sp->endpoint, "state", state, "replaying",
            (int)st->replaying, "batches", (json_int_t)st->batches, "last_seq",
            st->has_seq ? json_integer((json_int_t)st->last_seq) : json_null(), "idle_ms",
            st->idle_ms == UINT64_MAX ? json_null() : json_integer((json_int_t)st->idle_ms),
            "ranks", (json_int_t)st->ranks, "losses", (json_int_t)st->seq.losses));
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

static void run(void)
{
    kvix_err err;
    /* --idle-exit: the quiet spell counts from the last message, and only once
     * one came, so a kvsub started before its engines waits for them */
    uint64_t seen = 0, quiet_since = cli_mono_ms();
    while (!sig_stop) {
        if (sig_hup) {
            sig_hup = 0;
            kvix_subfront_ask(&S.front);
        }
        kvix_subfront_poll(&S.front);
        if (sig_usr1) {
            sig_usr1 = 0;
            print_stats();
            kvix_enginesub_list(S.sub, print_status, NULL);
        }
        if (S.idle_exit_ms) {
            kvix_enginesub_counts c;
            kvix_enginesub_counts_get(S.sub, &c);
            uint64_t now = cli_mono_ms();
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

int main(int argc, char **argv)
{
    cli_init(&tool);
    kvix_subfront_init(&S.front);
    kvix_enginesub_config *cfg = &S.front.cfg;
    S.fmt = KVIX_FMT_NDJSON;
    kvix_natslog_opts_init(&S.nopt);
    S.nopt.name = "kvsub";
    const char *arg;
    int c;
    while ((c = cli_next(argc, argv, &arg)) != -1) {
        if (cli_nats_option(c, arg, &S.nopt) || kvix_subfront_option(&S.front, c, arg))
            continue;
        switch (c) {
        case 'f':
            if (kvix_format_parse(arg, &S.fmt) != KVIX_OK || S.fmt == KVIX_FMT_AUTO)
                cli_usage_error("bad format '%s' (expected ndjson or msgpack)", arg);
            break;
        case O_RESUME: S.resume = arg; break;
        case O_JSON: S.json = true; break;
        case O_IDLE_EXIT:
            S.idle_exit_ms = cli_parse_uint(arg, 1, 31536000, "idle exit") * 1000;
            break;
        }
    }
    if (optind < argc)
        cli_usage_error("unexpected argument '%s'", argv[optind]);
    cli_nats_check(&S.nopt);
    if (!S.front.nw && !S.front.workers_file)
        cli_usage_error("no worker: give -w ID[:DP]=ENDPOINT or --workers-file FILE");
    kvix_subfront_check(&S.front);
    /* stdio, the NATS connection, the wake pipe: a few descriptors besides */
    cfg->subs_max = cli_size_subscriptions(S.front.subs_given, 64, "--max-subscriptions");

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
    kvix_err err;
    kvix_natspub_opts po = {&S.nopt, stopping, on_nats_note, NULL};
    int rc = S.nopt.url ? kvix_natspub_open(&S.nats, &po, &err) : KVIX_OK;
    if (rc)
        cli_die(rc == KVIX_EINVAL ? KVIX_EXIT_USAGE : KVIX_EXIT_SYS, "%s", err.msg);
    kvix_enginesub_ops ops = {on_event, on_note};
    rc = kvix_enginesub_new(&S.sub, cfg, &ops, NULL, &err);
    if (rc)
        cli_die(cli_exit_for(rc), "%s", err.msg);
    if (S.resume)
        load_resume();
    kvix_subfront_start(&S.front, S.sub);
    if ((rc = kvix_enginesub_apply(S.sub, &err)))
        cli_die(cli_exit_for(rc), "%s", err.msg);

    run();

    out_flush();
    if (S.nats && kvix_natspub_finish(S.nats, &err))
        cli_die(KVIX_EXIT_SYS, "%s", err.msg);
    print_stats();
    kvix_enginesub_counts cnt;
    kvix_enginesub_counts_get(S.sub, &cnt);
    kvix_enginesub_free(S.sub);
    kvix_subfront_release(&S.front);
    kvix_buf_release(&S.out);
    kvix_natspub_free(S.nats);
    int code = cnt.decode_errors || cnt.bad_frames ? KVIX_EXIT_REJECTED : KVIX_EXIT_OK;
    if (S.out_broken) { /* the reader left: nothing more to report about stdout */
        fclose(stdout);
        return code;
    }
    return cli_finish(code);
}
