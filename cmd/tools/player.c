/* kvix_player: records filtered, paced and written or published. See
 * cmd/tools/player.h. */
#include "player.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvix/buf.h"
#include "logio.h"

struct kvix_player {
    kvix_player_opts o;
    kvix_pace pace;
    kvix_pubset *ps;
    kvix_buf out;
    const char *at_name; /* the record being played, for notes */
    uint64_t at_line;
    kvix_player_counts c;
    kvix_player_end end;
    kvix_err err;        /* with KVIX_PLAYER_WRITE_ERROR, KVIX_PLAYER_FAILED */
};

static void note(kvix_player *p, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void note(kvix_player *p, int kind, const char *fmt, ...)
{
    if (!p->o.on_note)
        return;
    char msg[KVIX_ERR_MSG_MAX + 512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kvix_player_note n = {kind, msg};
    p->o.on_note(p->o.ctx, &n);
}

static int stopping(const kvix_player *p)
{
    return p->o.stopping && p->o.stopping(p->o.ctx);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Stop for good with an error (a socket, memory). */
static int fail(kvix_player *p, const kvix_err *e)
{
    p->err = *e;
    p->end = KVIX_PLAYER_FAILED;
    return 1;
}

int kvix_player_new(kvix_player **out, const kvix_player_opts *opts, kvix_err *err)
{
    *out = NULL;
    kvix_player *p = calloc(1, sizeof *p);
    if (!p)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    p->o = *opts;
    if (opts->pub) {
        int rc = kvix_pubset_new(&p->ps, opts->pub, err);
        if (rc) {
            free(p);
            return rc;
        }
    }
    kvix_buf_init(&p->out);
    kvix_pace_init(&p->pace, opts->timing, opts->factor);
    *out = p;
    return KVIX_OK;
}

void kvix_player_free(kvix_player *p)
{
    if (!p)
        return;
    kvix_pubset_free(p->ps, 5000); /* bounded: a stuck peer cannot hang us */
    kvix_buf_release(&p->out);
    free(p);
}

kvix_player_end kvix_player_ended(const kvix_player *p)
{
    return p->end;
}

const kvix_err *kvix_player_error(const kvix_player *p)
{
    return &p->err;
}

void kvix_player_counts_get(const kvix_player *p, kvix_player_counts *c)
{
    *c = p->c;
    if (p->ps) {
        c->batches = kvix_pubset_batches(p->ps);
        c->publishers = kvix_pubset_count(p->ps);
    }
}

const kvix_filter *kvix_player_filter(const kvix_player *p)
{
    return &p->o.filter;
}

double kvix_player_elapsed(const kvix_player *p)
{
    return kvix_pace_elapsed(&p->pace, now_s());
}

/* ---- publishers ------------------------------------------------------------ */

int kvix_player_bind(kvix_player *p, uint64_t worker, uint32_t dp, kvix_err *err)
{
    if (!kvix_filter_worker_match(&p->o.filter, worker, dp))
        return KVIX_OK;
    const char *ep;
    int rc = kvix_pubset_add(p->ps, worker, dp, &ep, err);
    if (rc < 0)
        return rc;
    if (rc == 1)
        note(p, KVIX_PLAYER_BOUND, "worker %" PRIu64 " dp %" PRIu32 " publishes on %s", worker,
             dp, ep);
    return KVIX_OK;
}

/* Wait until deadline (monotonic seconds), answering subscriptions and
 * replay requests meanwhile. */
static int serve_until(kvix_player *p, double deadline, kvix_err *err)
{
    for (;;) {
        double left = deadline - now_s();
        long ms = left <= 0 || stopping(p) ? 0 : (long)(left * 1000) + 1;
        int rc = kvix_pubset_serve(p->ps, ms > 100 ? 100 : (int)ms, err);
        if (rc)
            return rc;
        if (ms == 0)
            return KVIX_OK;
    }
}

int kvix_player_start(kvix_player *p, kvix_err *err)
{
    int rc = kvix_pubset_map_sync(p->ps, err);
    if (rc)
        return rc;
    /* ZMQ's slow joiner: what a PUB sends before a subscriber has joined is
     * lost, so wait (bounded) until each publisher has one. */
    double deadline = now_s() + p->o.pub_wait;
    for (;;) {
        if ((rc = serve_until(p, 0, err)))
            return rc;
        size_t missing = kvix_pubset_unsubscribed(p->ps);
        if (missing == 0 || stopping(p))
            return KVIX_OK;
        if (now_s() >= deadline) {
            if (p->o.pub_wait > 0)
                note(p, KVIX_PLAYER_UNSUBSCRIBED,
                     "%zu of %zu publishers have no subscriber after %g s; publishing anyway",
                     missing, kvix_pubset_count(p->ps), p->o.pub_wait);
            return KVIX_OK;
        }
        double step = now_s() + 0.02;
        if ((rc = serve_until(p, step < deadline ? step : deadline, err)))
            return rc;
    }
}

/* The pending batch published; one that cannot be is said and its events
 * counted as rejected. */
static void flush(kvix_player *p)
{
    size_t n;
    const kvix_event *b = kvix_pubset_pending(p->ps, &n);
    if (n == 0)
        return;
    uint64_t worker = b[0].worker;
    kvix_err err;
    int rc = kvix_pubset_flush(p->ps, &err);
    if (rc == KVIX_ESYS || rc == KVIX_ENOMEM) {
        fail(p, &err);
        return;
    }
    if (rc) {
        note(p, KVIX_PLAYER_UNPUBLISHED, "cannot publish a batch of worker %" PRIu64 ": %s",
             worker, err.msg);
        p->c.rejected += n;
        p->c.written -= n;
        for (size_t i = 0; i < n; i++)
            p->c.by_type[b[i].type]--;
        if (p->o.strict)
            p->end = KVIX_PLAYER_STRICT;
    }
}

void kvix_player_finish(kvix_player *p)
{
    if (!p->ps)
        return;
    if (p->end != KVIX_PLAYER_FAILED)
        flush(p);
    if (p->o.pub_hold > 0 && p->end != KVIX_PLAYER_FAILED) {
        note(p, KVIX_PLAYER_HOLDING, "all batches sent; serving replay requests for %g s",
             p->o.pub_hold);
        kvix_err err;
        if (serve_until(p, now_s() + p->o.pub_hold, &err))
            fail(p, &err);
    }
    p->c.batches = kvix_pubset_batches(p->ps);
    p->c.publishers = kvix_pubset_count(p->ps);
    kvix_pubset_free(p->ps, 5000); /* bounded: a stuck peer cannot hang us */
    p->ps = NULL;
}

/* ---- timing ---------------------------------------------------------------- */

static void sleep_for(kvix_player *p, double s)
{
    if (s <= 0)
        return;
    if (p->o.out)
        fflush(p->o.out); /* downstream sees everything due before we wait */
    if (p->ps) {
        kvix_err err;
        if (serve_until(p, now_s() + s, &err))
            fail(p, &err);
        return;
    }
    struct timespec d = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&d, &d) != 0 && errno == EINTR && !stopping(p)) {
    }
}

static void wait_for(kvix_player *p, const kvix_event *ev)
{
    double far;
    double wait = kvix_pace_wait(&p->pace, ev->has_ts, ev->ts, p->c.written, now_s(), &far);
    if (far > 0) {
        /* a ts far off (1e18, milliseconds taken for seconds) would wait for
         * ever without a word: say so and go on from it */
        if (p->at_name)
            note(p, KVIX_PLAYER_FAR,
                 "record at %s:%" PRIu64 " is due in %.3g s (ceiling %d s): sent at once, "
                 "the clock goes on from it",
                 p->at_name, p->at_line, far, KVIX_PACE_GAP_MAX);
        else
            note(p, KVIX_PLAYER_FAR,
                 "a record is due in %.3g s (ceiling %d s): sent at once, the clock goes on "
                 "from it",
                 far, KVIX_PACE_GAP_MAX);
        return;
    }
    sleep_for(p, wait);
}

/* ---- the record path ------------------------------------------------------- */

/* Written to the output: 0, or 1 to stop. */
static int write_record(kvix_player *p, const kvix_event *ev)
{
    kvix_err err;
    p->out.len = 0;
    int rc = p->o.fmt == KVIX_FMT_MSGPACK ? kvix_event_to_msgpack(ev, &p->out, &err)
                                         : kvix_event_to_json(ev, &p->out, &err);
    if (rc == KVIX_ENOMEM)
        return fail(p, &err);
    if (rc) {
        note(p, KVIX_PLAYER_UNWRITABLE, "cannot write a %s record: %s",
             kvix_event_type_name(ev->type), err.msg);
        p->c.rejected++;
        if (p->o.strict) {
            p->end = KVIX_PLAYER_STRICT;
            return 1;
        }
        return -1;
    }
    if (fwrite(p->out.data, 1, p->out.len, p->o.out) != p->out.len) {
        /* A reader that went away on purpose (head) ends the replay. */
        if (errno == EPIPE) {
            p->end = KVIX_PLAYER_CLOSED;
            return 1;
        }
        kvix_err_set(&p->err, KVIX_EIO, "error writing standard output: %s", strerror(errno));
        p->end = KVIX_PLAYER_WRITE_ERROR;
        return 1;
    }
    return 0;
}

int kvix_player_emit(void *ctx, const kvix_event *ev)
{
    kvix_player *p = ctx;
    if (stopping(p) || p->end)
        return 1;
    p->c.in++;
    if (p->o.on_record)
        p->o.on_record(p->o.ctx);
    if (!kvix_filter_keep(&p->o.filter, ev)) {
        p->c.filtered++;
        return 0;
    }
    p->c.kept++;
    if (p->ps && ev->type == KVIX_EV_QUERY) {
        p->c.pub_skipped++; /* engines do not publish queries */
        return 0;
    }
    if (p->ps) {
        if (!kvix_pubset_continues(p->ps, ev)) { /* a new engine batch: paced */
            flush(p);
            if (p->end == KVIX_PLAYER_FAILED)
                return 1;
            wait_for(p, ev);
        }
        kvix_err err;
        if (p->end != KVIX_PLAYER_FAILED && kvix_pubset_push(p->ps, ev, &err))
            return fail(p, &err);
    } else {
        wait_for(p, ev);
        int rc = write_record(p, ev);
        if (rc)
            return rc > 0;
    }
    if (p->end == KVIX_PLAYER_FAILED)
        return 1;
    p->c.written++;
    p->c.by_type[ev->type >= 0 && ev->type <= KVIX_EV_QUERY ? ev->type : 0]++;
    if (p->end)
        return 1;
    if (p->o.limit && p->c.written >= p->o.limit) {
        p->end = KVIX_PLAYER_LIMIT;
        return 1;
    }
    return 0;
}

/* ---- logs and traces ------------------------------------------------------- */

int kvix_player_play_log(kvix_player *p, int fd, const char *name, bool scan, kvix_err *err)
{
    kvix_logio *lio;
    int rc = kvix_logio_open(&lio, fd, name, err);
    if (rc)
        return rc;
    kvix_reader *rd;
    rc = kvix_reader_new(&rd, kvix_logio_fd(lio), name, KVIX_FMT_AUTO, err);
    if (rc) {
        kvix_logio_close(lio, NULL);
        return rc;
    }
    kvix_reader_set_eintr(rd, 1);
    kvix_event ev;
    kvix_event_init(&ev);
    for (;;) {
        kvix_err e;
        rc = kvix_reader_next(rd, &ev, &e);
        if (rc == KVIX_EOF || stopping(p)) {
            rc = KVIX_OK;
            break;
        }
        if (rc == KVIX_ESYS)
            continue; /* a signal that was not ours to act on */
        if (rc == KVIX_EIO) {
            kvix_err_set(err, KVIX_EIO, "%s: %s", name, e.msg);
            break;
        }
        if (rc) {
            rc = KVIX_OK;
            if (scan)
                continue;
            note(p, KVIX_PLAYER_REJECTED, "bad record at %s:%" PRIu64 ": %s", name,
                 kvix_reader_pos(rd), e.msg);
            p->c.rejected++;
            if (p->o.strict) {
                p->end = KVIX_PLAYER_STRICT;
                break;
            }
            continue;
        }
        p->at_name = name;
        p->at_line = kvix_reader_pos(rd);
        if (!scan && kvix_player_emit(p, &ev))
            break;
        if (scan && ev.type != KVIX_EV_QUERY && kvix_player_bind(p, ev.worker, ev.dp, &e)) {
            fail(p, &e); /* the endpoints a base makes: the caller's options */
            break;
        }
        if (scan && stopping(p))
            break;
    }
    kvix_event_release(&ev);
    kvix_reader_free(rd);
    kvix_err ce;
    int c2 = kvix_logio_close(lio, &ce);
    if (!rc && c2) {
        *err = ce;
        rc = KVIX_EIO;
    }
    return rc;
}

/* A trace request that cannot be played: said with its line and counted;
 * 1 when strict stops the run there. */
static int bad_request(kvix_player *p, const char *name, uint64_t line, const kvix_err *e)
{
    note(p, KVIX_PLAYER_BAD_REQUEST, "bad request at %s:%" PRIu64 ": %s", name, line, e->msg);
    p->c.rejected++;
    if (p->o.strict)
        p->end = KVIX_PLAYER_STRICT;
    return p->o.strict;
}

int kvix_player_play_mooncake(kvix_player *p, kvix_mooncake *m, int fd, const char *name,
                              kvix_err *err)
{
    kvix_logio *lio;
    int rc = kvix_logio_open(&lio, fd, name, err);
    if (rc)
        return rc;
    kvix_mooncake_trace *t;
    rc = kvix_mooncake_trace_new(&t, kvix_logio_fd(lio), err);
    if (rc) {
        kvix_logio_close(lio, NULL);
        return rc;
    }
    kvix_mooncake_req req;
    kvix_mooncake_req_init(&req);
    /* the limit counts trace requests here, not records */
    uint64_t limit = p->o.limit, n = 0;
    p->o.limit = 0;
    while (!limit || n < limit) {
        kvix_err e;
        rc = kvix_mooncake_trace_next(t, &req, &e);
        if (rc == KVIX_EOF) {
            rc = KVIX_OK;
            break;
        }
        if (rc == KVIX_EIO || rc == KVIX_ENOMEM) {
            kvix_err_set(err, rc, "%s: %s", name, e.msg);
            break;
        }
        if (rc) {
            rc = KVIX_OK;
            if (bad_request(p, name, kvix_mooncake_trace_line(t), &e))
                break;
            continue;
        }
        rc = kvix_mooncake_step(m, &req, kvix_mooncake_trace_line(t) - 1, kvix_player_emit, p, &e);
        n++;
        if (rc == KVIX_ERANGE) { /* nothing of it played */
            rc = KVIX_OK;
            if (bad_request(p, name, kvix_mooncake_trace_line(t), &e))
                break;
            continue;
        }
        if (rc < 0) {
            fail(p, &e);
            rc = KVIX_OK;
            break;
        }
        rc = KVIX_OK;
        if (p->end || stopping(p))
            break;
    }
    kvix_mooncake_req_release(&req);
    kvix_mooncake_trace_free(t);
    kvix_err ce;
    int c2 = kvix_logio_close(lio, &ce);
    if (!rc && c2) {
        *err = ce;
        rc = KVIX_EIO;
    }
    return rc;
}
