/* kvix_follow: a replica following a NATS stream, with its waits, gaps,
 * bootstraps from peers and resets. See cmd/tools/follow.h. */
#include "follow.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvix/snapshot.h"

/* A pause between two tries while the server or the stream is away. */
#define RETRY_MS 100

/* A record handed out by next(). */
typedef struct kvix_follow_rec {
    uint64_t seq; /* its message's sequence */
    int last;     /* the message's last record */
    int refused;  /* it did not decode (err says why): KVIX_EINVAL a record, KVIX_ELIMIT a
                   * whole message over the ceiling */
} kvix_follow_rec;

struct kvix_follow {
    kvix_ingest *g;
    kvix_follow_opts o;
    kvix_natslog *l;
    uint64_t seq;     /* the last message wholly handed out */
    uint64_t target;  /* until_caught_up: the stream's last message at the first start */
    int targeted;
    int waiting;      /* not (re)started yet: kvix_natslog_start to call */
    int warned_wait, warned_retry;
    int mid;          /* some records of message seq + 1 handed out */
    kvix_err why;     /* while waiting: why */
    int lost;         /* the index was being replaced or reset and is unusable */
    kvix_event ev;    /* the records' buffers */
    kvix_answer ans;
    kvix_buf out;
};

static void note(kvix_follow *f, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void note(kvix_follow *f, int kind, const char *fmt, ...)
{
    if (!f->o.on_note)
        return;
    char msg[KVIX_ERR_MSG_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kvix_follow_note n = {kind, msg};
    f->o.on_note(f->o.ctx, &n);
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int kvix_follow_new(kvix_follow **out, kvix_ingest *g, const kvix_follow_opts *opts,
                    kvix_err *err)
{
    *out = NULL;
    kvix_follow *f = calloc(1, sizeof *f);
    if (!f)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    int rc = kvix_natslog_open(&f->l, opts->nats, err);
    if (rc) {
        free(f);
        return rc;
    }
    f->g = g;
    f->o = *opts;
    f->seq = opts->seq;
    f->waiting = 1;
    kvix_event_init(&f->ev);
    kvix_answer_init(&f->ans);
    kvix_buf_init(&f->out);
    *out = f;
    return KVIX_OK;
}

void kvix_follow_free(kvix_follow *f)
{
    if (!f)
        return;
    kvix_natslog_free(f->l);
    kvix_event_release(&f->ev);
    kvix_answer_release(&f->ans);
    kvix_buf_release(&f->out);
    free(f);
}

uint64_t kvix_follow_seq(const kvix_follow *f)
{
    return f->seq;
}

void kvix_follow_lag(kvix_follow *f, kvix_natslog_lag *out)
{
    kvix_natslog_lag_get(f->l, out);
}

/* Follow the stream from seq + 1, once the server and the stream are there:
 * 1 started, 0 not yet, KVIX_ENOTFOUND when the index is not from this
 * stream. */
static int start(kvix_follow *f, kvix_err *err)
{
    kvix_natslog_state st;
    kvix_err e;
    int rc = kvix_natslog_start(f->l, f->seq, &st, &e);
    if (rc == KVIX_EIO || rc == KVIX_ENOTFOUND) {
        f->why = e;
        if (!f->warned_wait++)
            note(f, KVIX_FOLLOW_WAITING, "%s: waiting%s", e.msg,
                 rc == KVIX_ENOTFOUND ? " for it" : " for the server");
        pause_ms(RETRY_MS);
        return 0;
    }
    if (rc) {
        note(f, KVIX_FOLLOW_NOT_FROM_STREAM, "%s", e.msg);
        *err = e;
        return KVIX_ENOTFOUND;
    }
    f->waiting = 0;
    if (!f->targeted) {
        f->target = st.last;
        f->targeted = 1;
    }
    return 1;
}

/* Start again from seq + 1 (after a bootstrap or a reset). */
static void restart(kvix_follow *f)
{
    f->waiting = 1;
    f->warned_wait = 0;
}

/* The stream no longer holds message first - 1 (or the replica is new):
 * the first peer's snapshot that reflects this stream at first - 1 or
 * later replaces the index, and its position is taken. 1 if one did, 0 if
 * none, an error when the index was being replaced (f->lost). */
static int bootstrap(kvix_follow *f, uint64_t first, kvix_err *err)
{
    char **urls;
    size_t n, who = 0;
    if (!f->o.peers)
        return 0;
    int rc = kvix_peers_list(f->o.peers, &urls, &n, err);
    if (rc)
        return rc;
    const char *stream = f->o.nats->stream;
    kvix_peers_recover_opts po;
    kvix_peers_opts(f->o.peers, &po);
    po.stream = stream;
    po.min_seq = first ? first - 1 : 0;
    kvix_snapshot *s = NULL;
    kvix_err e;
    rc = n ? kvix_peers_fetch_snapshot((const char *const *)urls, n, &po, &s, &who, &e)
           : KVIX_ENOTFOUND;
    if (rc && n)
        note(f, KVIX_FOLLOW_NO_HANDOVER, "no peer could hand over stream %s at %" PRIu64
             " or later (%s)", stream, po.min_seq, e.msg);
    if (rc) {
        kvix_peers_list_free(urls, n);
        return 0;
    }
    kvix_snapshot_info info;
    kvix_snapshot_get_info(s, &info);
    rc = kvix_ingest_replace(f->g, s, info.stream_seq, &e);
    kvix_snapshot_close(s);
    f->seq = info.stream_seq;
    if (rc) {
        f->lost = 1;
        kvix_err_set(err, rc == KVIX_ENOMEM ? KVIX_ENOMEM : KVIX_ECORRUPT,
                     "cannot take %s/snapshot: %s", urls[who], e.msg);
    } else {
        note(f, KVIX_FOLLOW_BOOTSTRAPPED, "bootstrapped from %s/snapshot: stream %s at %" PRIu64
             ", %" PRIu64 " blocks", urls[who], stream, f->seq, info.blocks);
    }
    kvix_peers_list_free(urls, n);
    return rc ? err->code : 1;
}

/* The stream lost the next message: a peer's snapshot, or a reset, or the
 * end. 0 to go on (restarted), else as kvix_follow_run. */
static int gap(kvix_follow *f, const kvix_natslog_state *st, kvix_err *err)
{
    int rc = bootstrap(f, st->first, err);
    if (rc < 0)
        return rc;
    if (!rc && !f->o.reset_on_gap) {
        note(f, KVIX_FOLLOW_CANNOT, "this replica cannot follow stream %s any more (give "
             "--peers, or run with --reset-on-gap to start empty)", f->o.nats->stream);
        return kvix_err_set(err, KVIX_ENOTFOUND, "stream %s cannot be followed",
                            f->o.nats->stream);
    }
    if (!rc) {
        note(f, KVIX_FOLLOW_RESET, "--reset-on-gap: WARNING: the index is dropped and starts "
             "empty from message %" PRIu64, st->first);
        rc = kvix_ingest_reset(f->g, err);
        if (rc) {
            f->lost = 1;
            return rc;
        }
        f->seq = st->first - 1;
    }
    restart(f);
    return 0;
}

/* The next record, waiting at most about timeout_ms: 1 with *ev and *rec
 * (a refused record too: rec->refused, err filled); 0 when none came in
 * time (or while waiting); else as kvix_follow_run. */
static int next(kvix_follow *f, int timeout_ms, kvix_event *ev, kvix_follow_rec *rec,
                kvix_err *err)
{
    memset(rec, 0, sizeof *rec);
    if (f->waiting) {
        int rc = start(f, err);
        if (rc <= 0)
            return rc;
    }
    if (!f->mid && f->o.until_caught_up && f->seq >= f->target)
        return KVIX_EOF;
    uint64_t seq = 0;
    int last = 1;
    kvix_err e;
    int rc = kvix_natslog_next_record(f->l, timeout_ms, ev, &seq, &last, &e);
    if (rc == 1 || (rc < 0 && rc != KVIX_ENOTFOUND && rc != KVIX_ENOMEM)) {
        f->mid = !last;
        if (last)
            f->seq = seq;
        rec->seq = seq;
        rec->last = last;
        if (rc < 0) {
            rec->refused = rc;
            *err = e;
        }
        f->warned_retry = 0;
        return 1;
    }
    if (rc == KVIX_ENOMEM) {
        *err = e;
        return rc;
    }
    if (rc == 0)
        return 0;
    kvix_natslog_state st;
    if (rc == KVIX_ENOTFOUND && kvix_natslog_connected(f->l) &&
        kvix_natslog_state_get(f->l, &st, NULL) == KVIX_OK) {
        note(f, KVIX_FOLLOW_GAP, "%s", e.msg);
        return gap(f, &st, err);
    }
    if (!f->warned_retry++)
        note(f, KVIX_FOLLOW_RETRYING, "%s: retrying", e.msg);
    pause_ms(RETRY_MS);
    return 0;
}

int kvix_follow_lost(const kvix_follow *f)
{
    return f->lost;
}

/* One record of the stream, like one of a reader; a message's sequence is
 * the index's once its last record is in (saves wait for that). */
static int take(kvix_follow *f, size_t source, const kvix_follow_rec *rec,
                const kvix_ingest_loop *lp, const kvix_err *refused, kvix_err *err)
{
    kvix_event *ev = &f->ev;
    kvix_buf *out = &f->out;
    kvix_ingest_message_begin(f->g);
    if (rec->refused) {
        kvix_ingest_refuse(f->g, rec->refused == KVIX_ELIMIT, source, rec->seq, refused);
    } else {
        int unknown;
        int rc = kvix_ingest_take(f->g, source, rec->seq, ev, NULL, &f->ans, out, &unknown, err);
        if (rc)
            return rc;
        if (unknown && lp->on_unknown)
            lp->on_unknown(lp->ctx, source, rec->seq, ev, unknown);
        if (out->len && lp->on_answer)
            lp->on_answer(lp->ctx, out->data, out->len);
    }
    if (rec->last)
        kvix_ingest_message_end(f->g, rec->seq);
    return KVIX_OK;
}

int kvix_follow_run(kvix_follow *f, size_t source, const kvix_ingest_loop *lp, kvix_err *err)
{
    kvix_event *ev = &f->ev;
    for (;;) {
        int stop = lp->stopping && lp->stopping(lp->ctx);
        if (f->waiting && stop)
            return kvix_err_set(err, KVIX_ESYS, "%s", f->why.msg);
        /* a stop or a save waits for the end of the message under way */
        if (kvix_ingest_stopped(f->g) || (stop && !f->mid))
            return KVIX_OK;
        if (!f->mid && !f->waiting && lp->between)
            lp->between(lp->ctx);
        kvix_follow_rec rec;
        kvix_err e;
        int rc = next(f, 200, ev, &rec, &e);
        if (rc == 1)
            rc = take(f, source, &rec, lp, &e, err);
        else if (rc < 0)
            *err = e;
        else if (lp->wake_fd >= 0) {
            char b[64];
            while (read(lp->wake_fd, b, sizeof b) > 0)
                ;
        }
        if (rc < 0)
            return rc;
    }
}
