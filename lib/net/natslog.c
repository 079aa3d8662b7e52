/* The event log on NATS JetStream (kvix/natslog.h), over nats.c.
 *
 * The consumer is nats.c's ordered push consumer (an ephemeral consumer that
 * the client makes again itself on a sequence gap), started at the exact
 * sequence wanted. Ephemeral consumers do not survive a server restart, so a
 * reconnection, a missed heartbeat or a closed subscription makes us drop
 * it and make a new one from the next sequence we have not handed out:
 * resuming never depends on state kept by the server. */
#define _GNU_SOURCE
#include "kvix/natslog.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "kvix/event.h"
#include "natslog_int.h"



void kvix_natslog_opts_init(kvix_natslog_opts *o)
{
    memset(o, 0, sizeof *o);
    o->subject = "kvix";
    o->stream = "KVIX";
    o->replicas = 1;
    o->timeout_ms = 5000;
    o->window = 256;
}

static void on_reconnected(natsConnection *nc, void *closure)
{
    (void)nc;
    kvix_natslog *l = closure;
    atomic_store(&l->reconnected, 1);
}

/* The first connection, made in the background: given, nats.c's connect
 * returns at once instead of trying in place (with MaxReconnect -1, for as
 * long as the server is away, deaf to the caller's stop). Nothing to do
 * here: kvix_natslog_connected asks the connection itself. */
static void on_connected(natsConnection *nc, void *closure)
{
    (void)nc;
    (void)closure;
}

/* nats.c reports slow consumers and other asynchronous errors here; the
 * ordered consumer recovers from them by itself, and we must not print. */
static void on_async_error(natsConnection *nc, natsSubscription *sub, natsStatus s, void *closure)
{
    (void)nc;
    (void)sub;
    (void)s;
    (void)closure;
}

static int name_ok(const char *s, size_t max, int dots)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= max)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c >= 0x7f || strchr("*>/\\\"", c) || (c == '.' && !dots))
            return 0;
    }
    return !dots || (s[0] != '.' && s[n - 1] != '.' && !strstr(s, ".."));
}

void kvix_natslog_free(kvix_natslog *l)
{
    if (!l)
        return;
    natsMsg_Destroy(l->msg);
    if (l->sub) {
        /* Destroy alone: it unsubscribes without deleting the ephemeral consumer
         * (the server reaps it). An explicit Unsubscribe deletes it, and in
         * libnats 3.4 that read the consumer's name while the ordered consumer's
         * reset thread freed it (use after free under ASan in nats_replicas.t). */
        natsSubscription_Destroy(l->sub);
    }
    jsCtx_Destroy(l->js);
    if (l->nc) {
        natsConnection_Close(l->nc);
        natsConnection_Destroy(l->nc);
    }
    free(l->f.lag);
    kvix__natslog_pub_release(l); /* after the close: no acknowledgement comes any more */
    kvix_buf_release(&l->pay);
    kvix_buf_release(&l->part);
    kvix_buf_release(&l->g.recs);
    free(l->recs);
    kvix_event_release(&l->ev);
    free(l->url);
    free(l->stream);
    free(l->subject);
    free(l->name);
    free(l);
}

int kvix_natslog_open(kvix_natslog **out, const kvix_natslog_opts *o, kvix_err *err)
{
    *out = NULL;
    if (!o->url || !*o->url)
        return kvix_err_set(err, KVIX_EINVAL, "nats: no server url");
    if (!name_ok(o->stream, 256, 0))
        return kvix_err_set(err, KVIX_EINVAL, "nats: bad stream name '%s'",
                            o->stream ? o->stream : "");
    if (!name_ok(o->subject, KVIX_NATSLOG_SUBJECT_MAX, 1))
        return kvix_err_set(err, KVIX_EINVAL, "nats: bad subject prefix '%s'",
                            o->subject ? o->subject : "");
    if (o->replicas < 1 || o->replicas > 5 || o->max_age_s < 0 || o->max_bytes < 0 ||
        o->dup_window_s < 0 || o->timeout_ms < 1 || o->window < 1 ||
        o->window > KVIX_NATSLOG_WINDOW_MAX)
        return kvix_err_set(err, KVIX_EINVAL, "nats: bad stream options");
    kvix_natslog *l = calloc(1, sizeof *l);
    if (!l)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    l->o = *o;
    l->url = strdup(o->url);
    l->stream = strdup(o->stream);
    l->subject = strdup(o->subject);
    l->name = strdup(o->name ? o->name : "kvix");
    kvix_buf_init(&l->pay);
    kvix_buf_init(&l->part);
    kvix_buf_init(&l->g.recs);
    kvix_event_init(&l->ev);
    l->next = 1;
    if (!l->url || !l->stream || !l->subject || !l->name) {
        kvix_natslog_free(l);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    int prc = kvix__natslog_pub_init(l, err);
    if (prc) {
        kvix_natslog_free(l);
        return prc;
    }
    natsOptions *no = NULL;
    natsStatus s = natsOptions_Create(&no);
    if (s == NATS_OK)
        s = natsOptions_SetURL(no, l->url);
    if (s == NATS_OK)
        s = natsOptions_SetName(no, l->name);
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(no, o->timeout_ms);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(no, -1); /* forever: the server comes back */
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(no, 100);
    /* No reconnection buffer (1 byte holds no message): a batch published
     * while the connection is down fails at once instead of reaching the
     * server after the reconnection, ahead of one lost with the old
     * connection (kvix/natslog.h: the order is kept). */
    if (s == NATS_OK)
        s = natsOptions_SetReconnectBufSize(no, 1);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectedCB(no, on_reconnected, l);
    if (s == NATS_OK)
        s = natsOptions_SetErrorHandler(no, on_async_error, l);
    const char *what = l->url;
    if (s == NATS_OK && (o->user || o->password) &&
        (s = natsOptions_SetUserInfo(no, o->user, o->password)) != NATS_OK)
        what = "user and password";
    if (s == NATS_OK && o->token && (s = natsOptions_SetToken(no, o->token)) != NATS_OK)
        what = "token";
    if (s == NATS_OK && o->creds &&
        (s = natsOptions_SetUserCredentialsFromFiles(no, o->creds, NULL)) != NATS_OK)
        what = o->creds;
    if (s == NATS_OK && (o->tls_ca || o->tls_cert) &&
        (s = natsOptions_SetSecure(no, true)) != NATS_OK)
        what = "tls (is libnats built with it?)";
    if (s == NATS_OK && o->tls_ca &&
        (s = natsOptions_LoadCATrustedCertificates(no, o->tls_ca)) != NATS_OK)
        what = o->tls_ca;
    if (s == NATS_OK && (o->tls_cert || o->tls_key) &&
        (s = natsOptions_LoadCertificatesChain(no, o->tls_cert, o->tls_key)) != NATS_OK)
        what = o->tls_cert ? o->tls_cert : o->tls_key;
    if (s != NATS_OK && what != l->url) {
        int rc = natslog_fail(err, KVIX_EINVAL, what, s, 0);
        natsOptions_Destroy(no);
        kvix_natslog_free(l);
        return rc;
    }
    if (s == NATS_OK) {
        /* One attempt in place first: a server that refuses our credentials
         * or our certificate says so now, an error, rather than at every
         * attempt of a wait that would never end. One that is not there
         * yet is waited for in the background. */
        s = natsConnection_Connect(&l->nc, no);
        int away = s == NATS_NO_SERVER || s == NATS_TIMEOUT || s == NATS_IO_ERROR ||
                   s == NATS_PROTOCOL_ERROR || s == NATS_CONNECTION_CLOSED ||
                   s == NATS_CONNECTION_DISCONNECTED || s == NATS_STALE_CONNECTION;
        if (away) {
            s = natsOptions_SetRetryOnFailedConnect(no, true, on_connected, l);
            if (s == NATS_OK)
                s = natsConnection_Connect(&l->nc, no);
            if (s == NATS_NOT_YET_CONNECTED)
                s = NATS_OK; /* retried in the background */
        } else if (s != NATS_OK) {
            what = l->url;
            int rc = natslog_fail(err, KVIX_EIO, what, s, 0);
            natsOptions_Destroy(no);
            kvix_natslog_free(l);
            return rc;
        }
    }
    natsOptions_Destroy(no);
    if (s != NATS_OK) {
        int rc = natslog_fail(err, KVIX_ESYS, l->url, s, 0);
        kvix_natslog_free(l);
        return rc;
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = o->timeout_ms;
    kvix__natslog_pub_jsopts(l, &jo);
    s = natsConnection_JetStream(&l->js, l->nc, &jo);
    if (s != NATS_OK) {
        int rc = natslog_fail(err, KVIX_ESYS, "jetstream context", s, 0);
        kvix_natslog_free(l);
        return rc;
    }
    *out = l;
    return KVIX_OK;
}

int kvix_natslog_connected(kvix_natslog *l)
{
    return natsConnection_Status(l->nc) == NATS_CONN_STATUS_CONNECTED;
}

int kvix_natslog_state_get(kvix_natslog *l, kvix_natslog_state *st, kvix_err *err)
{
    /* Not connected (yet, or any more): said at once, not after a request's
     * whole timeout, so a caller waiting for the server stays responsive. */
    if (!kvix_natslog_connected(l)) {
        /* why the last attempt failed: a server that refuses our
         * credentials or certificate says so at every attempt */
        const char *why = NULL;
        natsStatus ls = natsConnection_GetLastError(l->nc, &why);
        if (ls != NATS_OK && why && *why)
            return kvix_err_set(err, KVIX_EIO, "nats: not connected to %s (%s)", l->url, why);
        return kvix_err_set(err, KVIX_EIO, "nats: not connected to %s", l->url);
    }
    jsStreamInfo *si = NULL;
    jsErrCode je = 0;
    natsStatus s = js_GetStreamInfo(&si, l->js, l->stream, NULL, &je);
    if (s == NATS_NOT_FOUND || je == JSStreamNotFoundErr) {
        jsStreamInfo_Destroy(si);
        return kvix_err_set(err, KVIX_ENOTFOUND, "nats: no stream %s on %s", l->stream, l->url);
    }
    if (s != NATS_OK)
        return natslog_fail(err, KVIX_EIO, "stream info", s, je);
    st->first = si->State.FirstSeq;
    st->last = si->State.LastSeq;
    st->msgs = si->State.Msgs;
    st->bytes = si->State.Bytes;
    if (st->msgs == 0 && st->first <= st->last)
        st->first = st->last + 1;
    jsStreamInfo_Destroy(si);
    return KVIX_OK;
}

int kvix_natslog_ensure_stream(kvix_natslog *l, int *created, kvix_err *err)
{
    kvix_natslog_state st;
    int rc = kvix_natslog_state_get(l, &st, err);
    if (created)
        *created = 0;
    if (rc != KVIX_ENOTFOUND)
        return rc;
    char subj[KVIX_NATSLOG_SUBJECT_MAX + 3];
    snprintf(subj, sizeof subj, "%s.>", l->subject);
    const char *subjects[1] = {subj};
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = l->stream;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Retention = js_LimitsPolicy;
    cfg.MaxAge = l->o.max_age_s * INT64_C(1000000000);
    cfg.MaxBytes = l->o.max_bytes ? l->o.max_bytes : -1;
    cfg.Replicas = l->o.replicas;
    cfg.Duplicates = l->o.dup_window_s * INT64_C(1000000000);
    jsStreamInfo *si = NULL;
    jsErrCode je = 0;
    natsStatus s = js_AddStream(&si, l->js, &cfg, NULL, &je);
    jsStreamInfo_Destroy(si);
    if (s != NATS_OK && je != JSStreamNameExistErr) /* made by another kvsub meanwhile */
        return natslog_fail(err, KVIX_EIO, "creating the stream", s, je);
    if (created)
        *created = s == NATS_OK;
    return KVIX_OK;
}

/* ---- consuming ------------------------------------------------------------- */

static void drop_sub(kvix_natslog *l)
{
    if (l->sub) {
        /* Destroy alone: it unsubscribes without deleting the ephemeral consumer
         * (the server reaps it). An explicit Unsubscribe deletes it, and in
         * libnats 3.4 that read the consumer's name while the ordered consumer's
         * reset thread freed it (use after free under ASan in nats_replicas.t). */
        natsSubscription_Destroy(l->sub);
        l->sub = NULL;
    }
}

static int make_sub(kvix_natslog *l, kvix_err *err)
{
    drop_sub(l);
    atomic_store(&l->reconnected, 0);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = l->stream;
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverByStartSequence;
    so.Config.OptStartSeq = l->next;
    jsErrCode je = 0;
    natsStatus s = js_SubscribeSync(&l->sub, l->js, ">", NULL, &so, &je);
    if (s != NATS_OK) {
        l->sub = NULL;
        return natslog_fail(err, KVIX_EIO, "subscribing to the stream", s, je);
    }
    /* Bounded in bytes too: the flow control keeps the rest on the server. */
    natsSubscription_SetPendingLimits(l->sub, 65536, 256 << 20);
    return KVIX_OK;
}

int kvix_natslog_consume(kvix_natslog *l, uint64_t from, kvix_err *err)
{
    if (from < 1)
        return kvix_err_set(err, KVIX_EINVAL, "nats: sequences start at 1");
    l->next = from;
    l->consuming = 1;
    l->gap_from = 0;
    drop_sub(l);
    return KVIX_OK;
}

uint64_t kvix_natslog_position(const kvix_natslog *l)
{
    return l->next;
}

int64_t kvix_natslog_stored_ns(const kvix_natslog *l)
{
    return l->stored_ns;
}

/* A message after a gap: made again once; the same gap twice is checked
 * against the stream. */
static int on_gap(kvix_natslog *l, uint64_t seq, kvix_err *err)
{
    kvix_natslog_state st;
    int rc = kvix_natslog_state_get(l, &st, err);
    if (rc)
        return rc == KVIX_ENOTFOUND ? rc : 0;
    if (st.first > l->next)
        return kvix_err_set(err, KVIX_ENOTFOUND,
                            "stream %s: messages %" PRIu64 "..%" PRIu64
                            " are gone (the stream starts at %" PRIu64 " now)",
                            l->stream, l->next, st.first - 1, st.first);
    if (l->gap_from == l->next)
        return kvix_err_set(err, KVIX_ENOTFOUND,
                            "stream %s: messages %" PRIu64 "..%" PRIu64 " are gone (deleted)",
                            l->stream, l->next, seq - 1);
    l->gap_from = l->next;
    drop_sub(l);
    return 0;
}

int kvix_natslog_next(kvix_natslog *l, int timeout_ms, uint64_t *seq, const char **data,
                      size_t *len, kvix_err *err)
{
    natsMsg_Destroy(l->msg);
    l->msg = NULL;
    if (!l->consuming)
        return kvix_err_set(err, KVIX_EINVAL, "nats: kvix_natslog_consume first");
    if (atomic_load(&l->reconnected))
        drop_sub(l);
    if (!l->sub) {
        if (!kvix_natslog_connected(l)) {
            nats_Sleep(timeout_ms > 100 ? 100 : timeout_ms);
            return 0;
        }
        kvix_natslog_state st;
        int rc = kvix_natslog_state_get(l, &st, err);
        if (rc == KVIX_ENOTFOUND)
            return rc;
        if (rc) {
            nats_Sleep(timeout_ms > 100 ? 100 : timeout_ms);
            return 0; /* not answering yet: try again */
        }
        if (st.first > l->next)
            return kvix_err_set(err, KVIX_ENOTFOUND,
                                "stream %s: messages %" PRIu64 "..%" PRIu64
                                " are gone (the stream starts at %" PRIu64 " now)",
                                l->stream, l->next, st.first - 1, st.first);
        if (make_sub(l, err)) {
            nats_Sleep(timeout_ms > 100 ? 100 : timeout_ms);
            return 0;
        }
    }
    for (;;) {
        natsMsg *m = NULL;
        natsStatus s = natsSubscription_NextMsg(&m, l->sub, timeout_ms);
        if (s == NATS_TIMEOUT)
            return 0;
        if (s != NATS_OK) {
            /* missed heartbeats, a closed connection or subscription: the
             * consumer is made again on the next call */
            drop_sub(l);
            return 0;
        }
        jsMsgMetaData *meta = NULL;
        if (natsMsg_GetMetaData(&meta, m) != NATS_OK) {
            natsMsg_Destroy(m); /* not a stream message (status or control) */
            continue;
        }
        uint64_t sq = meta->Sequence.Stream;
        int64_t when = meta->Timestamp;
        jsMsgMetaData_Destroy(meta);
        if (sq < l->next) { /* delivered again: already handed out */
            natsMsg_Destroy(m);
            continue;
        }
        if (sq > l->next) {
            natsMsg_Destroy(m);
            int rc = on_gap(l, sq, err);
            return rc;
        }
        l->gap_from = 0;
        l->next = sq + 1;
        l->stored_ns = when;
        int n = natsMsg_GetDataLength(m);
        *seq = sq;
        if (n < 0 || (size_t)n > KVIX_NATSLOG_PAYLOAD_MAX) {
            natsMsg_Destroy(m);
            return kvix_err_set(err, KVIX_ELIMIT,
                                "stream %s: message %" PRIu64 " of %d bytes (limit %u)",
                                l->stream, sq, n, KVIX_NATSLOG_PAYLOAD_MAX);
        }
        l->msg = m;
        *data = natsMsg_GetData(m);
        *len = (size_t)n;
        return 1;
    }
}
