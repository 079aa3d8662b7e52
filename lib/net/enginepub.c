#include "kvix/enginepub.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "kvix/wire.h"

typedef struct batch {
    uint64_t seq;
    char *data;
    size_t len;
} batch;

struct kvix_enginepub {
    void *pub, *router;
    char ep[KVIX_ENGINEPUB_ENDPOINT_MAX], rep[KVIX_ENGINEPUB_ENDPOINT_MAX];
    char topic[256];
    size_t tlen;
    int replay_topic; /* replay answers carry the topic frame */
    uint64_t seq;
    batch *ring; /* the last cap batches, oldest at head */
    size_t cap, head, count;
    unsigned subs;
    uint64_t replays;
};

static int zfail(kvix_err *err, const char *what, const char *ep)
{
    return kvix_err_set(err, KVIX_ESYS, "%s %s: %s", what, ep, zmq_strerror(zmq_errno()));
}

static void put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static int bind_at(void *sock, const char *endpoint, char *bound, kvix_err *err)
{
    if (zmq_bind(sock, endpoint) != 0)
        return zfail(err, "cannot bind", endpoint);
    size_t n = KVIX_ENGINEPUB_ENDPOINT_MAX;
    if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, bound, &n) != 0)
        snprintf(bound, KVIX_ENGINEPUB_ENDPOINT_MAX, "%s", endpoint);
    return KVIX_OK;
}

int kvix_enginepub_new(kvix_enginepub **out, void *zctx, const char *endpoint,
                       const char *replay_endpoint, const char *topic, size_t buffer_steps,
                       kvix_err *err)
{
    *out = NULL;
    size_t tlen = topic ? strlen(topic) : 0;
    if (tlen >= sizeof ((kvix_enginepub *)0)->topic)
        return kvix_err_set(err, KVIX_ELIMIT, "topic of %zu bytes (limit 255)", tlen);
    if (buffer_steps == 0)
        buffer_steps = KVIX_ENGINEPUB_BUFFER_DEFAULT;
    if (buffer_steps > KVIX_ENGINEPUB_BUFFER_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "replay buffer of %zu batches (limit %d)",
                            buffer_steps, KVIX_ENGINEPUB_BUFFER_MAX);
    kvix_enginepub *p = calloc(1, sizeof *p);
    if (!p)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    if (tlen)
        memcpy(p->topic, topic, tlen);
    p->tlen = tlen;
    p->replay_topic = 1;
    int rc = KVIX_OK;
    int hwm = KVIX_ENGINEPUB_HWM, one = 1, zero = 0;
    p->pub = zmq_socket(zctx, ZMQ_XPUB);
    if (!p->pub) {
        rc = zfail(err, "cannot create a publisher for", endpoint);
        goto fail;
    }
    zmq_setsockopt(p->pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(p->pub, ZMQ_LINGER, &zero, sizeof zero);
    /* Every subscribe and unsubscribe is reported, so subscribers count. */
#ifdef ZMQ_XPUB_VERBOSER
    zmq_setsockopt(p->pub, ZMQ_XPUB_VERBOSER, &one, sizeof one);
#else
    zmq_setsockopt(p->pub, ZMQ_XPUB_VERBOSE, &one, sizeof one);
#endif
    if ((rc = bind_at(p->pub, endpoint, p->ep, err)))
        goto fail;
    if (replay_endpoint) {
        p->ring = calloc(buffer_steps, sizeof *p->ring);
        p->cap = buffer_steps;
        p->router = p->ring ? zmq_socket(zctx, ZMQ_ROUTER) : NULL;
        if (!p->ring) {
            rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory for the replay buffer");
            goto fail;
        }
        if (!p->router) {
            rc = zfail(err, "cannot create a replay socket for", replay_endpoint);
            goto fail;
        }
        int rhwm = (int)buffer_steps + 16;
        zmq_setsockopt(p->router, ZMQ_SNDHWM, &rhwm, sizeof rhwm);
        zmq_setsockopt(p->router, ZMQ_LINGER, &zero, sizeof zero);
        if ((rc = bind_at(p->router, replay_endpoint, p->rep, err)))
            goto fail;
    }
    *out = p;
    return KVIX_OK;
fail:
    kvix_enginepub_free(p, 0);
    return rc;
}

void kvix_enginepub_free(kvix_enginepub *p, int linger_ms)
{
    if (!p)
        return;
    if (p->pub) {
        zmq_setsockopt(p->pub, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
        zmq_close(p->pub);
    }
    if (p->router) {
        zmq_setsockopt(p->router, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
        zmq_close(p->router);
    }
    for (size_t i = 0; i < p->count; i++)
        free(p->ring[(p->head + i) % p->cap].data);
    free(p->ring);
    free(p);
}

const char *kvix_enginepub_endpoint(const kvix_enginepub *p)
{
    return p->ep;
}

const char *kvix_enginepub_replay_endpoint(const kvix_enginepub *p)
{
    return p->router ? p->rep : NULL;
}

unsigned kvix_enginepub_subscribers(const kvix_enginepub *p)
{
    return p->subs;
}

uint64_t kvix_enginepub_replays(const kvix_enginepub *p)
{
    return p->replays;
}

void kvix_enginepub_sockets(const kvix_enginepub *p, void *socks[2], int *n)
{
    *n = 0;
    socks[(*n)++] = p->pub;
    if (p->router)
        socks[(*n)++] = p->router;
}

/* Three frames; the caller's flags go on the last. */
static int send3(void *s, const void *a, size_t na, const void *b, size_t nb, const void *c,
                 size_t nc, int more_after)
{
    int f = ZMQ_DONTWAIT;
    if (zmq_send(s, a, na, f | ZMQ_SNDMORE) < 0 || zmq_send(s, b, nb, f | ZMQ_SNDMORE) < 0 ||
        zmq_send(s, c, nc, f | (more_after ? ZMQ_SNDMORE : 0)) < 0)
        return -1;
    return 0;
}

int kvix_enginepub_send(kvix_enginepub *p, const void *payload, size_t len, uint64_t *seq,
                        kvix_err *err)
{
    if (len > KVIX_WIRE_FRAME_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "batch of %zu bytes (limit %u)", len,
                            KVIX_WIRE_FRAME_MAX);
    uint64_t s = p->seq++;
    if (seq)
        *seq = s;
    unsigned char s8[8];
    put_be64(s8, s);
    if (p->ring) {
        batch *b;
        if (p->count == p->cap) { /* the oldest leaves the buffer */
            b = &p->ring[p->head];
            free(b->data);
            p->head = (p->head + 1) % p->cap;
            p->count--;
        }
        b = &p->ring[(p->head + p->count) % p->cap];
        b->data = malloc(len ? len : 1);
        if (!b->data)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for the replay buffer");
        memcpy(b->data, payload, len);
        b->len = len;
        b->seq = s;
        p->count++;
    }
    /* XPUB never blocks: with no subscriber or a full queue it drops, as the
     * engine's PUB does. EAGAIN is that drop, not an error. */
    if (send3(p->pub, p->topic, p->tlen, s8, 8, payload, len, 0) != 0 && zmq_errno() != EAGAIN)
        return zfail(err, "cannot publish on", p->ep);
    return KVIX_OK;
}

static void take_subscriptions(kvix_enginepub *p)
{
    unsigned char msg[300];
    int n;
    while ((n = zmq_recv(p->pub, msg, sizeof msg, ZMQ_DONTWAIT)) >= 0) {
        if (n >= 1 && msg[0] == 1)
            p->subs++;
        else if (n >= 1 && msg[0] == 0 && p->subs)
            p->subs--;
    }
}

/* Read one whole multipart message into up to 3 frames; extra frames make
 * it invalid. Returns the frame count, 0 when nothing is pending, -1 when
 * the message is malformed (drained). */
static int recv_request(void *s, zmq_msg_t fr[3])
{
    int n = 0, more = 1, bad = 0;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (n < 3)
            fr[n] = m;
        else {
            zmq_msg_close(&m);
            bad = 1;
        }
        n++;
    }
    if (bad) {
        for (int i = 0; i < 3; i++)
            zmq_msg_close(&fr[i]);
        return -1;
    }
    return n;
}

/* A replay answer's frames before its seq: [identity, ""] and the topic
 * when the generation sends it. */
static int reply_head(kvix_enginepub *p, const void *id, size_t idlen)
{
    if (p->replay_topic)
        return send3(p->router, id, idlen, "", 0, p->topic, p->tlen, 1);
    return zmq_send(p->router, id, idlen, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0 ||
           zmq_send(p->router, "", 0, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0;
}

void kvix_enginepub_set_replay_topic(kvix_enginepub *p, int with_topic)
{
    p->replay_topic = with_topic != 0;
}

static int answer_replays(kvix_enginepub *p, kvix_err *err)
{
    zmq_msg_t fr[3];
    int n;
    while ((n = recv_request(p->router, fr)) != 0) {
        if (n < 0)
            continue;
        /* [identity, "", start_seq 8B]: anything else is ignored. */
        int ok = n == 3 && zmq_msg_size(&fr[1]) == 0 && zmq_msg_size(&fr[2]) == 8;
        uint64_t start = 0;
        if (ok) {
            const unsigned char *b = zmq_msg_data(&fr[2]);
            for (int i = 0; i < 8; i++)
                start = start << 8 | b[i];
        }
        const void *id = n >= 1 ? zmq_msg_data(&fr[0]) : NULL;
        size_t idlen = n >= 1 ? zmq_msg_size(&fr[0]) : 0;
        int rc = 0;
        for (size_t i = 0; ok && !rc && i < p->count; i++) {
            const batch *b = &p->ring[(p->head + i) % p->cap];
            if (b->seq < start)
                continue;
            unsigned char s8[8];
            put_be64(s8, b->seq);
            rc = reply_head(p, id, idlen) ||
                 zmq_send(p->router, s8, 8, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0 ||
                 zmq_send(p->router, b->data, b->len, ZMQ_DONTWAIT) < 0;
        }
        if (ok && !rc) {
            unsigned char end[8];
            put_be64(end, KVIX_WIRE_SEQ_END);
            rc = reply_head(p, id, idlen) ||
                 zmq_send(p->router, end, 8, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0 ||
                 zmq_send(p->router, "", 0, ZMQ_DONTWAIT) < 0;
        }
        for (int i = 0; i < n && i < 3; i++)
            zmq_msg_close(&fr[i]);
        if (ok)
            p->replays++;
        /* A client that went away (EHOSTUNREACH) or a full queue loses its
         * answer; the engine does the same. Other failures are ours. */
        if (rc && zmq_errno() != EAGAIN && zmq_errno() != EHOSTUNREACH)
            return zfail(err, "cannot answer a replay request on", p->rep);
    }
    return KVIX_OK;
}

int kvix_enginepub_service(kvix_enginepub *p, kvix_err *err)
{
    take_subscriptions(p);
    return p->router ? answer_replays(p, err) : KVIX_OK;
}
