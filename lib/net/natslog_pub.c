/* Publishing to the event log: the window of batches in flight
 * (kvix/natslog.h says what it keeps: every batch, once, in order).
 *
 * nats.c sends each batch at once and calls on_ack from its own thread when
 * the server answers (or the answer's time ran out); the ring, under pub.mu,
 * is where the two threads meet. Only our thread sends, it sends nothing
 * new while a failed batch waits to be sent again, and a worker's next batch
 * only once its last is acknowledged, so the stream holds each worker's
 * batches in the order they were taken in. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "natslog_int.h"

static natslog_batch *at(natslog_pub *p, size_t i)
{
    return &p->ring[(p->head + i) % p->cap];
}

/* The server's answer to one batch (nats.c's thread). The message is ours
 * to destroy. */
static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    (void)js;
    natslog_pub *p = &((kvix_natslog *)closure)->pub;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->count; i++) {
        natslog_batch *b = at(p, i);
        if (b->msg != msg)
            continue;
        b->msg = NULL;
        p->inflight--;
        if (pa) {
            b->state = NB_DONE;
            b->seq = pa->Sequence;
            p->st.acked++;
            p->st.duplicates += pa->Duplicate;
        } else {
            b->state = NB_FAILED;
            p->failed = 1;
            snprintf(p->why, sizeof p->why, "%s",
                     pae && pae->ErrText ? pae->ErrText
                                         : natsStatus_GetText(pae ? pae->Err : NATS_ERR));
        }
        break;
    }
    natsMsg_Destroy(msg);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

int kvix__natslog_pub_init(kvix_natslog *l, kvix_err *err)
{
    natslog_pub *p = &l->pub;
    p->cap = l->o.window;
    p->ring = calloc(p->cap, sizeof *p->ring);
    if (!p->ring)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->cap; i++)
        kvix_buf_init(&p->ring[i].pay);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&p->mu, NULL);
    return KVIX_OK;
}

/* After the connection is closed: nats.c calls on_ack no more. */
void kvix__natslog_pub_release(kvix_natslog *l)
{
    natslog_pub *p = &l->pub;
    if (!p->ring)
        return;
    for (size_t i = 0; i < p->cap; i++)
        kvix_buf_release(&p->ring[i].pay);
    free(p->ring);
    p->ring = NULL;
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
}

void kvix__natslog_pub_jsopts(kvix_natslog *l, jsOptions *jo)
{
    jo->PublishAsync.AckHandler = on_ack;
    jo->PublishAsync.AckHandlerClosure = l;
    jo->PublishAsync.MaxPending = (int64_t)l->o.window + 1; /* our window is the bound */
}

/* A subject token from a model name: NATS tokens hold no '.', '*', '>' or
 * white space. */
static void put_token(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[i] = (c <= ' ' || c >= 0x7f || c == '.' || c == '*' || c == '>') ? '_' : (char)c;
    }
    dst[i] = '\0';
    if (i == 0 && cap > 1)
        snprintf(dst, cap, "_");
}

static int note_record(kvix_natslog *l, kvix_err *err)
{
    if (l->nrecs == l->caprecs) {
        size_t c = l->caprecs ? l->caprecs * 2 : 64;
        size_t *v = realloc(l->recs, c * sizeof *v);
        if (!v)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        l->recs = v;
        l->caprecs = c;
    }
    l->recs[l->nrecs++] = l->pay.len;
    return KVIX_OK;
}

/* The payload: the records as msgpack, where each starts in l->recs; the
 * first record kept in l->ev. */
static int build_payload(kvix_natslog *l, const char *data, size_t len, kvix_format fmt,
                         kvix_err *err)
{
    l->pay.len = 0;
    l->nrecs = 0;
    int first = 1, rc = KVIX_OK;
    kvix_event tmp;
    kvix_event_init(&tmp);
    size_t off = 0;
    while (off < len) {
        kvix_event *ev = first ? &l->ev : &tmp;
        if ((rc = note_record(l, err)))
            break;
        if (fmt == KVIX_FMT_MSGPACK) {
            size_t used = 0;
            rc = kvix_event_from_msgpack(data + off, len - off, &used, ev, err);
            if (!rc)
                rc = kvix_buf_append(&l->pay, data + off, used, err);
            off += used;
            if (!rc && used == 0)
                rc = kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MSGPACK, "empty msgpack record");
        } else {
            const char *nl = memchr(data + off, '\n', len - off);
            size_t n = nl ? (size_t)(nl - (data + off)) : len - off;
            if (n == 0) {
                l->nrecs--;
                off += 1;
                continue;
            }
            rc = kvix_event_from_json(data + off, n, ev, err);
            if (!rc)
                rc = kvix_event_to_msgpack(ev, &l->pay, err);
            off += n + (nl != NULL);
        }
        if (rc)
            break;
        first = 0;
    }
    kvix_event_release(&tmp);
    if (!rc && first)
        rc = kvix_err_set(err, KVIX_EINVAL, "nats: nothing to publish");
    return rc;
}

/* The subject of the batch in l->pay (its first record in l->ev). */
static void subject_of(kvix_natslog *l, char *dst, size_t cap)
{
    char model[KVIX_NAME_MAX];
    put_token(model, sizeof model, l->ev.model);
    snprintf(dst, cap, "%s.%s.%" PRIu64, l->subject, model, l->ev.worker);
}

/* Subject and id of the batch in l->pay (its first record in l->ev); part
 * >= 0: of that part of it. */
static void name_batch(kvix_natslog *l, natslog_batch *b, int part)
{
    subject_of(l, b->subj, sizeof b->subj);
    b->has_id = l->ev.has_eid;
    if (!b->has_id)
        return;
    int n = snprintf(b->id, sizeof b->id, "%" PRIu64 ".%" PRIu32 ".%" PRIu64, l->ev.worker,
                     l->ev.dp, l->ev.eid);
    /* The batch's own time tells an engine restarted (its eids from 0
     * again) from a batch published twice, which has the same. */
    if (l->ev.has_ts) {
        uint64_t bits;
        memcpy(&bits, &l->ev.ts, sizeof bits);
        n += snprintf(b->id + n, sizeof b->id - (size_t)n, ".%016" PRIx64, bits);
    }
    if (part >= 0)
        snprintf(b->id + n, sizeof b->id - (size_t)n, ".p%d", part);
}

static void pub_opts(kvix_natslog *l, const natslog_batch *b, jsPubOptions *po)
{
    jsPubOptions_Init(po);
    po->MaxWait = l->o.timeout_ms;
    if (b->has_id)
        po->MsgId = b->id;
}

/* Hand b (already in the ring) to nats.c; a batch it would not take is
 * marked failed, to be sent again. */
static void send_async(kvix_natslog *l, natslog_batch *b)
{
    natslog_pub *p = &l->pub;
    natsMsg *m = NULL;
    natsStatus s = natsMsg_Create(&m, b->subj, NULL, b->pay.data, (int)b->pay.len);
    jsPubOptions po;
    pub_opts(l, b, &po);
    pthread_mutex_lock(&p->mu);
    b->msg = m;
    b->state = NB_FLIGHT;
    p->inflight++;
    pthread_mutex_unlock(&p->mu);
    natsMsg *keep = m;
    if (s == NATS_OK)
        s = js_PublishMsgAsync(l->js, &m, &po);
    if (s == NATS_OK)
        return;
    pthread_mutex_lock(&p->mu);
    if (b->msg == keep) { /* not answered: nats.c did not take it */
        b->msg = NULL;
        b->state = NB_FAILED;
        p->inflight--;
        p->failed = 1;
        const char *last = nats_GetLastError(NULL);
        snprintf(p->why, sizeof p->why, "%s", last && *last ? last : natsStatus_GetText(s));
    }
    pthread_mutex_unlock(&p->mu);
    natsMsg_Destroy(m); /* NULL when nats.c kept it */
}

/* Drop the acknowledged batches from the front. Under mu. */
static void pop_done(natslog_pub *p)
{
    while (p->count && at(p, 0)->state == NB_DONE) {
        at(p, 0)->pay.len = 0;
        p->head = (p->head + 1) % p->cap;
        p->count--;
    }
    p->st.pending = p->count;
}

static struct timespec deadline(int64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* Wait (under mu) until done() or the deadline; 1 if done. */
static int wait_until(natslog_pub *p, const struct timespec *dl, int (*done)(natslog_pub *))
{
    while (!done(p))
        if (pthread_cond_timedwait(&p->cv, &p->mu, dl) == ETIMEDOUT)
            return done(p);
    return 1;
}

static int none_in_flight(natslog_pub *p)
{
    return p->inflight == 0;
}

/* Room for the next batch, or a failure to settle first. A subject (one
 * worker's batches) has one batch in flight at a time: the server may refuse
 * a batch (a restart, a stream not yet loaded) and store the next one sent
 * behind it, which the resend would then follow. Other workers' batches
 * overlap: a worker's blocks never depend on another's. Under mu. */
static int room_or_failed(natslog_pub *p)
{
    pop_done(p);
    if (p->failed)
        return 1;
    if (p->count >= p->cap)
        return 0;
    for (size_t i = 0; i < p->count; i++) {
        const natslog_batch *b = at(p, i);
        if (b->state == NB_FLIGHT && strcmp(b->subj, p->next_subj) == 0)
            return 0;
    }
    return 1;
}

/* A failure in the window: once nothing is in flight, the failed batches
 * again, in order, each acknowledged before the next (an acknowledgement
 * lost with a batch the server stored comes back as a duplicate). */
static int resend_failed(kvix_natslog *l, const struct timespec *dl, kvix_err *err)
{
    natslog_pub *p = &l->pub;
    pthread_mutex_lock(&p->mu);
    int settled = wait_until(p, dl, none_in_flight);
    size_t n = p->count;
    char why[sizeof p->why];
    memcpy(why, p->why, sizeof why);
    pthread_mutex_unlock(&p->mu);
    if (!settled)
        return kvix_err_set(err, KVIX_EIO, "nats: %zu batches not acknowledged (%s)", n, why);
    /* Nothing is in flight and only this thread sends: the ring is ours. */
    for (size_t i = 0; i < n; i++) {
        natslog_batch *b = at(p, i);
        if (b->state != NB_FAILED)
            continue;
        jsPubOptions po;
        pub_opts(l, b, &po);
        jsPubAck *pa = NULL;
        jsErrCode je = 0;
        natsStatus s = js_Publish(&pa, l->js, b->subj, b->pay.data, (int)b->pay.len, &po, &je);
        if (s != NATS_OK)
            return natslog_fail(err, KVIX_EIO, b->subj, s, je);
        uint64_t later = 0; /* a later batch of its worker the stream holds before it */
        for (size_t j = i + 1; j < n && !pa->Duplicate && !later; j++)
            if (at(p, j)->state == NB_DONE && at(p, j)->seq < pa->Sequence &&
                strcmp(at(p, j)->subj, b->subj) == 0)
                later = 1;
        pthread_mutex_lock(&p->mu);
        b->state = NB_DONE;
        b->seq = pa->Sequence;
        p->st.acked++;
        p->st.duplicates += pa->Duplicate;
        p->st.resent++;
        p->st.reordered += later;
        pthread_mutex_unlock(&p->mu);
        jsPubAck_Destroy(pa);
    }
    pthread_mutex_lock(&p->mu);
    p->failed = 0;
    pop_done(p);
    pthread_mutex_unlock(&p->mu);
    return KVIX_OK;
}

/* Take *pay into the window and send it (its buffer swapped with the ring
 * slot's): the batch in l->pay (its first record in l->ev), or its part
 * `part` (>= 0). */
static int take(kvix_natslog *l, kvix_buf *pay, int part, kvix_err *err)
{
    natslog_pub *p = &l->pub;
    int rc;
    struct timespec dl = deadline(l->o.timeout_ms);
    subject_of(l, p->next_subj, sizeof p->next_subj); /* read only by this thread */
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int room = wait_until(p, &dl, room_or_failed);
        int failed = p->failed;
        size_t n = p->count;
        pthread_mutex_unlock(&p->mu);
        if (failed) {
            if ((rc = resend_failed(l, &dl, err)))
                return rc;
            continue;
        }
        if (!room)
            return kvix_err_set(err, KVIX_EIO, "nats: %zu batches not acknowledged", n);
        break;
    }
    /* The slot past the last is ours: on_ack looks only at [head, head + count). */
    natslog_batch *b = &p->ring[(p->head + p->count) % p->cap];
    kvix_buf t = b->pay;
    b->pay = *pay;
    *pay = t;
    name_batch(l, b, part);
    b->state = NB_FLIGHT;
    pthread_mutex_lock(&p->mu);
    p->count++;
    p->st.pending = p->count;
    pthread_mutex_unlock(&p->mu);
    send_async(l, b);
    return KVIX_OK;
}

/* Record i of l->pay alone is over max: the clear of its (worker, dp) in
 * l->part instead (no eid: the subscriber's own, as for a loss). */
static int stand_in(kvix_natslog *l, size_t i, kvix_err *err)
{
    size_t end = i + 1 < l->nrecs ? l->recs[i + 1] : l->pay.len, used = 0;
    kvix_event ev;
    kvix_event_init(&ev);
    int rc = kvix_event_from_msgpack(l->pay.data + l->recs[i], end - l->recs[i], &used, &ev, err);
    if (!rc) {
        ev.type = KVIX_EV_CLEARED;
        ev.has_eid = 0;
        ev.nblocks = 0;
        ev.nhashes = 0;
        l->part.len = 0;
        rc = kvix_event_to_msgpack(&ev, &l->part, err);
    }
    kvix_event_release(&ev);
    return rc;
}

/* A batch over max: its records in parts of at most max bytes, each taken
 * on its own. */
static int take_parts(kvix_natslog *l, size_t max, kvix_err *err)
{
    natslog_pub *p = &l->pub;
    int part = 0, rc = KVIX_OK;
    uint64_t lost = 0;
    for (size_t i = 0; i < l->nrecs && !rc;) {
        size_t from = l->recs[i], j = i;
        while (j < l->nrecs && (j + 1 < l->nrecs ? l->recs[j + 1] : l->pay.len) - from <= max)
            j++;
        if (j == i) { /* one record over max by itself */
            rc = stand_in(l, i, err);
            lost++;
            j = i + 1;
        } else {
            size_t to = j < l->nrecs ? l->recs[j] : l->pay.len;
            l->part.len = 0;
            rc = kvix_buf_append(&l->part, l->pay.data + from, to - from, err);
        }
        if (!rc)
            rc = take(l, &l->part, part++, err);
        i = j;
    }
    pthread_mutex_lock(&p->mu);
    p->st.split += !rc;
    p->st.lost += rc ? 0 : lost;
    if (!rc && lost) {
        p->st.lost_worker = l->ev.worker;
        p->st.lost_dp = l->ev.dp;
        p->st.lost_eid = l->ev.eid;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int kvix_natslog_publish(kvix_natslog *l, const char *data, size_t len, kvix_format fmt,
                         kvix_err *err)
{
    int rc = build_payload(l, data, len, fmt, err);
    if (rc)
        return rc;
    /* nats.c refuses a message over the server's max_payload, every time:
     * sent whole again and again, it wedged the publisher */
    int64_t max = natsConnection_GetMaxPayload(l->nc);
    /* the server counts the headers (the message id) in: room for them */
    size_t room = max <= 0 ? SIZE_MAX : max > 1024 ? (size_t)max - 512 : (size_t)max / 2;
    if (l->pay.len > room)
        return take_parts(l, room, err);
    return take(l, &l->pay, -1, err);
}

/* ---- events gathered into batches ---------------------------------------- */

/* The batch gathered, complete now, handed to the window; kept (done) when
 * the window has no room, dropped on any other failure. */
static int hand_over(kvix_natslog *l, kvix_err *err)
{
    if (!l->g.open && !l->g.done)
        return KVIX_OK;
    l->g.open = 0;
    l->g.done = 1;
    int rc = kvix_natslog_publish(l, l->g.recs.data, l->g.recs.len, KVIX_FMT_MSGPACK, err);
    if (rc == KVIX_EIO)
        return rc;
    l->g.done = 0;
    l->g.recs.len = 0;
    return rc;
}

int kvix_natslog_publish_event(kvix_natslog *l, const kvix_event *ev, kvix_err *err)
{
    int joins = l->g.open && ev->has_eid && ev->worker == l->g.worker && ev->dp == l->g.dp &&
                ev->eid == l->g.eid;
    int rc = joins ? KVIX_OK : hand_over(l, err);
    if (rc)
        return rc;
    size_t at = l->g.recs.len;
    if ((rc = kvix_event_to_msgpack(ev, &l->g.recs, err))) {
        l->g.recs.len = at;
        return rc;
    }
    l->g.worker = ev->worker;
    l->g.dp = ev->dp;
    l->g.eid = ev->eid;
    l->g.open = ev->has_eid;
    l->g.done = !ev->has_eid; /* a subscriber's own clear: a message of its own */
    return KVIX_OK;
}

int kvix_natslog_publish_pending(kvix_natslog *l, kvix_err *err)
{
    return hand_over(l, err);
}

int kvix_natslog_flush(kvix_natslog *l, int64_t timeout_ms, kvix_err *err)
{
    natslog_pub *p = &l->pub;
    struct timespec dl = deadline(timeout_ms);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        wait_until(p, &dl, none_in_flight);
        pop_done(p);
        int failed = p->failed;
        size_t n = p->count;
        pthread_mutex_unlock(&p->mu);
        if (n == 0)
            return KVIX_OK;
        if (!failed)
            return kvix_err_set(err, KVIX_EIO, "nats: %zu batches not acknowledged yet", n);
        int rc = resend_failed(l, &dl, err);
        if (rc)
            return rc;
    }
}

void kvix_natslog_pubstats_get(kvix_natslog *l, kvix_natslog_pubstats *st)
{
    pthread_mutex_lock(&l->pub.mu);
    *st = l->pub.st;
    pthread_mutex_unlock(&l->pub.mu);
}
