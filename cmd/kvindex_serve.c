/* kvindex --listen, --peers, -w and --workers-file: the HTTP service, the
 * recovery from peers, and the engine subscriptions applied on their own
 * thread. */
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "kvindex.h"

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

/* Start from the first peer that answers; 1 if one did. With --nats only
 * a snapshot of that stream is taken, and its position with it. The service
 * is up meanwhile: peers registered over HTTP (POST /register_peer) while
 * the others are asked are asked too, after them, until none is left. */
int recover(kvi *k)
{
    char **urls = NULL, **tried = NULL;
    size_t n = 0, ntried = 0;
    const char **fresh = NULL;
    kvix_err err;
    kvix_peers_recover_opts o = {.stream = k->nopt.url ? k->nopt.stream : NULL};
    kvix_peers_result res;
    int rc = KVIX_ENOTFOUND;
    if (k->svc)
        kvix_service_write_begin(k->svc);
    for (;;) {
        if (kvix_peers_list(k->peers, &urls, &n, &err) ||
            !(fresh = realloc(fresh, (n ? n : 1) * sizeof *fresh)) ||
            !(tried = realloc(tried, (ntried + n + 1) * sizeof *tried)))
            cli_die(KVIX_EXIT_SYS, "out of memory");
        size_t nf = 0;
        for (size_t i = 0; i < n; i++) {
            size_t j = 0;
            while (j < ntried && strcmp(tried[j], urls[i]) != 0)
                j++;
            if (j == ntried)
                fresh[nf++] = urls[i];
        }
        if (!nf)
            break;
        rc = kvix_peers_recover(k->idx, (const char *const *)fresh, nf, &o, &res, &err);
        if (rc != KVIX_ENOTFOUND)
            break;
        for (size_t i = 0; i < nf; i++)
            if (!(tried[ntried++] = strdup(fresh[i])))
                cli_die(KVIX_EXIT_SYS, "out of memory");
        kvix_peers_list_free(urls, n);
        urls = NULL;
    }
    if (k->svc)
        kvix_service_write_end(k->svc);
    if (rc == KVIX_ENOTFOUND) {
        if (!ntried)
            kvix_err_set(&err, KVIX_ENOTFOUND, "no peer given");
        cli_warn("no peer answered (%s): starting from %s", err.msg,
                 k->snap ? "the snapshot" : "empty");
    } else if (rc) {
        cli_die(cli_exit_for(rc), "cannot recover from %s: %s", fresh[res.winner], err.msg);
    } else {
        const char *who = fresh[res.winner];
        if (res.from_snapshot && res.info.has_stream && k->nopt.url)
            k->seq = res.info.stream_seq;
        if (!k->quiet && res.from_snapshot && k->nopt.url)
            cli_warn("recovered from %s/snapshot: stream %s at %" PRIu64 ", %" PRIu64 " blocks",
                     who, k->nopt.stream, k->seq, res.info.blocks);
        else if (!k->quiet && res.from_snapshot)
            cli_warn("recovered from %s/snapshot: %" PRIu64 " blocks", who, res.info.blocks);
        else if (!k->quiet)
            cli_warn("recovered from %s/dump: %" PRIu64 " events applied, %" PRIu64
                     " rejected (blocks below a removed parent)",
                     who, res.applied, res.rejected);
        k->dirty = 1;
    }
    kvix_peers_list_free(urls, n);
    for (size_t i = 0; i < ntried; i++)
        free(tried[i]);
    free(tried);
    free(fresh);
    return rc == KVIX_OK;
}

/* Peer recovery of a replica fed by its input and its subscriptions: both
 * are held back (the input waits in its pipe, the engines' messages in the
 * sockets of a held feed) about 1 s so a peer's state has moved past the
 * moment the feed connected; then the first peer that answers wins, and
 * what was held drains after it through the sequence checks. A signal cuts
 * the wait short. */
int recover_held(kvi *k)
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

/* On the subscriptions' thread: wake the main loop when --save-every-events
 * is due (it saves; the index is written under write_mu meanwhile). */
static void feed_applied_cb(void *ctx, uint64_t applied)
{
    kvi *k = ctx;
    if (save_due(k, applied) && !__atomic_exchange_n(&k->save_woken, 1, __ATOMIC_RELAXED)) {
        ssize_t w = write(wake[1], "", 1); /* a full pipe is fine: a wake-up is pending */
        (void)w;
    }
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
void load_workers(kvi *k, int initial)
{
    kvix_enginesub_spec *v;
    size_t n, added, removed;
    kvix_err err;
    int rc = kvix_enginesub_file_read(k->workers_file, false, &v, &n, &err);
    for (size_t i = 0; !rc && k->io.model_no_colon && i < n; i++)
        if (strchr(v[i].model, ':')) {
            rc = kvix_err_set(&err, KVIX_EINVAL,
                              "%s: model name \"%.64s\" contains ':', which the HTTP API's "
                              "/dump keys (model:tenant) cannot carry",
                              k->workers_file, v[i].model);
            free(v);
        }
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
void make_feed(kvi *k, const kvix_enginesub_config *cfg, const char **wargs, size_t nw)
{
    kvix_enginefeed_opts fo = {
        .idx = k->idx,
        .write_mu = &k->write_mu,
        .submit = k->threads > 0,
        .tag = feed_tag,
        .on_reject = feed_reject,
        .on_note = feed_note,
        .on_applied = feed_applied_cb,
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

void start_feed(kvi *k, bool hold)
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

void serve(kvi *k)
{
    while (!sig_stop && !strict_stop(k)) {
        handle_flags(k, NULL);
        struct pollfd p = {wake[0], POLLIN, 0};
        poll(&p, 1, -1);
        drain_wake();
    }
}

void start_service(kvi *k, const char *listen, unsigned http_threads)
{
    static const char *reasons[KVIX_REASON_COUNT];
    for (int r = 0; r < KVIX_REASON_COUNT; r++)
        reasons[r] = kvix_reason_key(r);
    char addr[128];
    unsigned port;
    parse_listen(listen, addr, sizeof addr, &port);
    kvix_service_opts so = {
        .idx = k->idx,
        .feed = k->feed,
        .writer_threads = k->threads > 0,
        .tmpdir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
        .reject_reasons = reasons,
        .nreasons = KVIX_REASON_COUNT,
        .peers = k->peers,
        .stream = k->nopt.url ? k->nopt.stream : NULL,
        .server_nice = k->http_nice,
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
