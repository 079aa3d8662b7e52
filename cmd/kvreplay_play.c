/* kvreplay: the publishers, the pace and the records written, and the logs
 * read. See kvreplay.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "kvreplay.h"

/* ---- publishers ------------------------------------------------------------ */

/* The set's errors: a base that makes no endpoint is a usage error. */
static void pub_die(int rc, const kvix_err *err)
{
    if (rc == KVIX_EINVAL || rc == KVIX_ERANGE)
        cli_usage_error("%s", err->msg);
    cli_die(rc == KVIX_ELIMIT ? KVIX_EXIT_USAGE : cli_exit_for(rc), "%s", err->msg);
}

/* The publishers and their ZMQ context, made before any log is read. */
void open_pubs(replay *r)
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
void add_pub(replay *r, uint64_t worker, uint32_t dp)
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
void start_pubs(replay *r)
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

void stop_pubs(replay *r)
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

void flush_batch(replay *r)
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

void progress(replay *r, int final)
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
int emit(void *ctx, const kvix_event *ev)
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
uint64_t inputs_size(char *const *paths, int n)
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

int open_input(replay *r, const char *path, kvix_logio **lio)
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

int close_input(replay *r, kvix_logio *lio)
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


/* Read one log, passing each good record to fn. Returns an exit code (0 ok). */
int read_log(replay *r, const char *path, record_fn fn, int quiet_rejects)
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

int emit_record(replay *r, const kvix_event *ev)
{
    return emit(r, ev);
}

int collect_pub(replay *r, const kvix_event *ev)
{
    if (ev->type != KVIX_EV_QUERY && kvix_filter_worker_match(&r->filter, ev->worker, ev->dp))
        add_pub(r, ev->worker, ev->dp);
    return interrupted;
}

