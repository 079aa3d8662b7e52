/* kvindex: apply kvix events read from stdin (or files) to the index, keep it
 * in a snapshot file, and answer the queries met in the input.
 *
 * Signals only set flags and write a byte to a self-pipe that the reader
 * polls with its input, so a blocked read wakes at once and every decision
 * (save, stop, print the summary) is taken in the main loop, never inside a
 * handler. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "kvindex.h"
#include "kvix/snapshot.h"

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
    O_HTTP_NICE,
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
    {O_SAVE_EVENTS, 0, "save-every-events", "N", NULL, "also save after every N events applied from any source (input, stream, subscriptions)"},
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
    {O_HTTP_NICE, 0, "http-nice", "N", NULL,
     "lower the HTTP threads' scheduling priority by N (0-19, default 0), so that ingest keeps "
     "its share of the CPU under a query load"},
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
        case O_HTTP_NICE: k.http_nice = (int)cli_parse_uint(arg, 0, 19, "nice value"); break;
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
    if (listen && cfg.model && strchr(cfg.model, ':'))
        cli_usage_error("bad model name '%s' for --listen: the HTTP API's /dump keys are "
                        "model:tenant, split at the first ':'", cfg.model);
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
    io.model_no_colon = listen != NULL; /* one rule for every source: see /register */
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
