/* kvindex: the input side. Records from stdin or files are applied or
 * answered one by one, rejections counted by reason, the snapshot saved and
 * loaded, the summary and progress line drawn; also the signal handlers,
 * which only set flags and wake the reader through a self-pipe. */
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
#include "kvindex.h"
#include "kvix/snapshot.h"

/* Distinct unknown names warned about; past this many, no more warnings. */
#define UNKNOWN_WARN_MAX 1024

volatile sig_atomic_t sig_stop, sig_save, sig_summary, sig_tick;
int wake[2] = {-1, -1};

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

void install_signals(int with_timer)
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

void drain_wake(void)
{
    char b[64];
    while (read(wake[0], b, sizeof b) > 0)
        ;
}

double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void clear_progress(kvi *k)
{
    if (k->progress_shown) {
        fputs("\r\033[K", stderr);
        k->progress_shown = 0;
    }
}

/* from_input: the record came from stdin or a stream, whose submitted[]
 * counts it; the subscriptions' rejections are counted by their feed */
void reject_from(kvi *k, const char *what, const char *name, uint64_t pos, int type,
                        int from_input, const kvix_err *e)
{
    pthread_mutex_lock(&k->mu);
    clear_progress(k);
    cli_warn("bad %s at %s:%" PRIu64 ": %s", what, name, pos, e->msg);
    k->rejected++;
    int reason = e->reason >= 0 && e->reason < KVIX_REASON_COUNT ? e->reason : KVIX_REASON_OTHER;
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

void reject(kvi *k, const char *what, const char *name, uint64_t pos, int type,
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
    if (v)
        k->unknown = v;
    char *dup = v ? strdup(key) : NULL;
    if (!dup) { /* saved and freed as any out of memory: nothing left unreachable */
        kvix_err e;
        kvix_err_set(&e, KVIX_ENOMEM, "out of memory");
        die_sys(k, &e);
    }
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
void on_reject(void *ctx, uint64_t tag, const kvix_err *e)
{
    kvi *k = ctx;
    int type = (int)(tag >> (TAG_POS_BITS + TAG_FILE_BITS));
    size_t file = (size_t)(tag >> TAG_POS_BITS) & 0xffff;
    uint64_t pos = tag & ((UINT64_C(1) << TAG_POS_BITS) - 1);
    reject_from(k, "event", k->names[file], pos, type, !k->feed || file != k->feed_file, e);
}

/* The subscriptions' thread writes the index too: every writer takes
 * write_mu (kvix/enginefeed.h), and so does whatever needs it quiet. */
void lock_writes(kvi *k)
{
    if (k->feed)
        pthread_mutex_lock(&k->write_mu);
}

void unlock_writes(kvi *k)
{
    if (k->feed)
        pthread_mutex_unlock(&k->write_mu);
}

void sync_writers(kvi *k)
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

void summary(kvi *k)
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
        for (int r = 0; r < KVIX_REASON_COUNT; r++)
            if (k->reasons[r] && n < sizeof line)
                n += (size_t)snprintf(line + n, sizeof line - n, "%s%" PRIu64 " %s",
                                      n ? ", " : "", k->reasons[r], kvix_reason_name(r));
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

/* Events the subscriptions applied so far. */
static uint64_t feed_applied(kvi *k)
{
    if (!k->feed)
        return 0;
    kvix_enginefeed_counts c;
    kvix_enginefeed_counts_get(k->feed, &c);
    return c.applied;
}

/* --save-every-events: N events applied since the last save, from every
 * source (stdin or the stream, and the subscriptions: -w, --workers-file,
 * POST /register). Any thread: the subscriptions' asks with its own count. */
int save_due(kvi *k, uint64_t fed_applied)
{
    return k->save_every_events &&
           __atomic_load_n(&k->since_save, __ATOMIC_RELAXED) + fed_applied -
                   __atomic_load_n(&k->fed_applied_at_save, __ATOMIC_RELAXED) >=
               k->save_every_events;
}

int save(kvi *k, const char *why)
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
    uint64_t fed = feed_events(k), fed_applied = feed_applied(k);
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
    __atomic_store_n(&k->fed_applied_at_save, fed_applied, __ATOMIC_RELAXED);
    __atomic_store_n(&k->since_save, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&k->save_woken, 0, __ATOMIC_RELAXED);
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
 * that read and write the index, free it (a leak checker sees the pointers
 * the backends keep tagged as lost), exit 6. Called on the main thread. */
void die_sys(kvi *k, const kvix_err *err)
{
    save(k, "failure");
    if (k->svc) {
        if (k->svc_held) { /* our own write section: the requests waiting on it may end */
            kvix_service_write_end(k->svc);
            k->svc_held = 0;
        }
        kvix_service_shutdown(k->svc, 1000);
        kvix_service_free(k->svc);
        k->svc = NULL;
    }
    if (k->feed) {
        kvix_enginefeed_stop(k->feed, NULL);
        kvix_enginefeed_free(k->feed);
        k->feed = NULL;
    }
    kvix_index_free(k->idx);
    k->idx = NULL;
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

/* What signals and timers asked for, between two records. */
void handle_flags(kvi *k, kvix_reader *r)
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
    /* the subscriptions' thread wakes us when they have applied enough */
    if (k->save_every_events && k->feed && !k->mid_message && save_due(k, feed_applied(k)))
        save(k, "event count");
    if (sig_tick) {
        sig_tick = 0;
        int dirty = k->dirty || feed_events(k) != k->fed_at_save;
        if (k->save_every_secs > 0 && dirty && now() - k->last_save >= k->save_every_secs)
            save(k, "timer");
        if (k->progress && r)
            show_progress(k, r);
    }
}

void answer(kvi *k, const char *name, uint64_t pos, const kvix_event *q)
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

void apply(kvi *k, const char *name, uint64_t pos, size_t file, const kvix_event *ev)
{
    kvix_err err;
    k->submitted[ev->type]++;
    if (k->query_only) {
        kvix_err_set_reason(&err, KVIX_EINVAL, KVIX_REASON_QUERYONLY,
                            "event in query-only mode (-q)");
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
    __atomic_add_fetch(&k->since_save, 1, __ATOMIC_RELAXED);
    /* save_every_events first: the feed's counts take its lock, not for every record */
    if (k->save_every_events && !k->mid_message && save_due(k, feed_applied(k)))
        save(k, "event count");
}

/* Read one input to its end (or until told to stop). */
void run_input(kvi *k, int fd, size_t file, kvix_format fmt, kvix_event *ev)
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
int load(kvi *k)
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
