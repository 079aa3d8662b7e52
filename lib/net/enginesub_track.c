/* A subscription's ranks and clears, and the sequence tracker's callbacks:
 * batches delivered, replays asked for and stopped, losses told. See
 * enginesub_int.h. */
#include "enginesub_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvix/wire.h"

/* ---- ranks of a subscription, and its clears ----------------------------- */

static bool rank_find(const sub *b, uint32_t dp, unsigned *at)
{
    unsigned lo = 0, hi = b->nranks;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (b->ranks[mid] < dp)
            lo = mid + 1;
        else
            hi = mid;
    }
    *at = lo;
    return lo < b->nranks && b->ranks[lo] == dp;
}

/* false: past ranks_max (or out of memory): the rank is not followed. */
bool kvix__esub_rank_add(sub *b, uint32_t dp)
{
    unsigned at;
    if (rank_find(b, dp, &at))
        return true;
    if (b->nranks >= b->s->cfg.ranks_max)
        return false;
    if (b->nranks == b->capranks) {
        unsigned c = b->capranks ? b->capranks * 2 : 4;
        uint32_t *n = realloc(b->ranks, c * sizeof *n);
        if (!n)
            return false;
        b->ranks = n;
        b->capranks = c;
    }
    memmove(b->ranks + at + 1, b->ranks + at, (b->nranks - at) * sizeof *b->ranks);
    b->ranks[at] = dp;
    b->nranks++;
    return true;
}

/* Every (worker, dp) seen on b can no longer be vouched for. */
void kvix__esub_clear_all(sub *b)
{
    kvix_enginesub *s = b->s;
    kvix_event *ev = &s->ev;
    for (unsigned i = 0; i < b->nranks; i++) {
        kvix_event_reset(ev);
        ev->type = KVIX_EV_CLEARED;
        ev->worker = b->spec.worker;
        ev->dp = b->ranks[i];
        kvix_event_set_name(ev->model, model_of(b), strlen(model_of(b)), NULL);
        kvix_event_set_name(ev->tenant, tenant_of(b), strlen(tenant_of(b)), NULL);
        s->c.cleared++;
        s->ops.event(s->ctx, ev);
    }
}

/* ---- delivering a batch ---------------------------------------------------- */

static int on_wire_event(void *ctx, const kvix_event *ev)
{
    kvix_enginesub *s = ctx;
    sub *b = s->cur;
    if (s->cur_drop == 0) { /* the first event: its rank is the batch's */
        if (!kvix__esub_rank_add(b, ev->dp)) {
            s->cur_drop = 1;
            return 1;
        }
        s->cur_drop = -1;
    }
    if (ev->type >= 0 && ev->type < 4)
        s->c.events[ev->type]++;
    s->ops.event(s->ctx, ev);
    return 0;
}

static void cb_deliver(void *ctx, uint64_t seq, void *it)
{
    sub *b = ctx;
    kvix_enginesub *s = b->s;
    const item *x = it;
    kvix_wire_source src = {b->spec.worker,        b->spec.dp,
                            model_of(b),           tenant_of(b),
                            b->spec.block_size ? b->spec.block_size : s->cfg.block_size,
                            s->cfg.keep_tokens};
    kvix_wire_counts cnt;
    memset(&cnt, 0, sizeof cnt);
    cnt.dp = b->spec.dp;
    kvix_err err = {0, "", KVIX_REASON_OTHER};
    s->cur = b;
    s->cur_drop = 0;
    int rc = kvix_wire_decode(x->data, x->len, seq, &src, on_wire_event, s, &cnt, &err);
    s->cur = NULL;
    b->has_seq = true;
    b->last_seq = seq;
    if (rc == 1 && s->cur_drop == 1) {
        s->c.dropped++;
        kvix__esub_note(s, KVIX_ENGINESUB_DROPPED, b,
             "worker %" PRIu64 ": batch %" PRIu64 " of dp %" PRIu32
             " dropped: more than %u ranks on %s",
             b->spec.worker, seq, cnt.dp, s->cfg.ranks_max, b->spec.endpoint);
        return;
    }
    if (rc != KVIX_OK) {
        /* Its events are unknown: what the index holds for these ranks may be wrong. */
        s->c.decode_errors++;
        b->losses_extra++;
        kvix__esub_note(s, KVIX_ENGINESUB_BAD_BATCH, b,
             "worker %" PRIu64 ": bad batch %" PRIu64 " from %s: %s: cleared", b->spec.worker,
             seq, b->spec.endpoint, err.msg);
        kvix__esub_clear_all(b);
        return;
    }
    s->c.partial_blocks += cnt.partial_blocks;
    s->c.unknown_events += cnt.unknown_events;
    s->c.remote += cnt.remote;
    s->c.unknown_media += cnt.unknown_media;
    s->c.refused_events += cnt.refused;
    s->c.placeholders += cnt.placeholders;
    s->c.other_kinds += cnt.other_kinds;
    s->c.batches++;
    b->batches++;
}

/* ---- the tracker's other callbacks -------------------------------------- */

static int cb_replay_start(void *ctx, uint64_t from)
{
    sub *b = ctx;
    kvix_enginesub *s = b->s;
    char url[KVIX_ENGINESUB_ENDPOINT_MAX];
    pthread_mutex_lock(&s->mu);
    memcpy(url, b->spec.replay, sizeof url);
    pthread_mutex_unlock(&s->mu);
    if (!url[0])
        return -1;
    /* a name's address from the resolver (ZMQ would resolve it in its I/O
     * thread); not known yet: the name, left to ZMQ */
    if (b->replay_ep[0] && !strcmp(url, b->replay_for))
        memcpy(url, b->replay_ep, sizeof url);
    void *d = zmq_socket(s->zctx, ZMQ_DEALER);
    if (!d)
        return -1;
    int zero = 0;
    int64_t maxmsg = (int64_t)s->cfg.msg_max;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(d, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if (zmq_connect(d, url) != 0) {
        kvix__esub_note(s, KVIX_ENGINESUB_FAILED, b,
             "worker %" PRIu64 " dp %" PRIu32 ": cannot connect to replay endpoint %s: %s",
             b->spec.worker, b->spec.dp, url, zmq_strerror(errno));
        zmq_close(d);
        return -1;
    }
    unsigned char seq[SEQ_FRAME];
    for (int i = 7; i >= 0; i--, from >>= 8)
        seq[i] = (unsigned char)from;
    if (zmq_send(d, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(d, seq, sizeof seq, ZMQ_DONTWAIT) < 0) {
        zmq_close(d);
        return -1;
    }
    b->dealer = d;
    return 0;
}

static void cb_replay_stop(void *ctx)
{
    sub *b = ctx;
    if (b->dealer)
        zmq_close(b->dealer);
    b->dealer = NULL;
}

static const char *const loss_why[] = {
    [KVIX_SEQTRACK_NO_REPLAY] = "no replay endpoint",
    [KVIX_SEQTRACK_REPLAY_LATER] = "the replay buffer starts later",
    [KVIX_SEQTRACK_REPLAY_SHORT] = "not in the replay buffer",
    [KVIX_SEQTRACK_REPLAY_MISSING] = "missing from the replay",
    [KVIX_SEQTRACK_UNDECODABLE] = "undecodable batch",
    [KVIX_SEQTRACK_TIMEOUT] = "replay timed out",
    [KVIX_SEQTRACK_OVERFLOW] = "too much held while replaying",
    [KVIX_SEQTRACK_RESTART_MISSED] = "missed at the restart, no replay endpoint",
};

static void cb_cleared(void *ctx, const kvix_seqtrack_clear *c)
{
    sub *b = ctx;
    kvix_enginesub *s = b->s;
    uint64_t w = b->spec.worker;
    uint32_t dp = b->spec.dp;
    if (c->why == KVIX_SEQTRACK_EPOCH)
        kvix__esub_note(s, KVIX_ENGINESUB_RESTART, b,
             "worker %" PRIu64 " dp %" PRIu32 ": new epoch in the topic at seq %" PRIu64
             ": engine restarted, cleared",
             w, dp, c->seq);
    else if (c->why == KVIX_SEQTRACK_RESTART)
        kvix__esub_note(s, KVIX_ENGINESUB_RESTART, b,
             "worker %" PRIu64 " dp %" PRIu32 ": seq %" PRIu64 " after %" PRIu64
             ": engine restarted, cleared",
             w, dp, c->seq, c->prev);
    else if (c->to == UINT64_MAX)
        kvix__esub_note(s, KVIX_ENGINESUB_LOSS, b,
             "worker %" PRIu64 " dp %" PRIu32 ": batches from %" PRIu64 " lost (%s): cleared", w,
             dp, c->from, loss_why[c->why]);
    else
        kvix__esub_note(s, KVIX_ENGINESUB_LOSS, b,
             "worker %" PRIu64 " dp %" PRIu32 ": batches %" PRIu64 "..%" PRIu64
             " lost (%s): cleared",
             w, dp, c->from, c->to, loss_why[c->why]);
    kvix__esub_clear_all(b);
}

static void *cb_hold(void *ctx, void *it)
{
    (void)ctx;
    const item *x = it;
    item *c = malloc(sizeof *c + (x->len ? x->len : 1));
    if (!c)
        return NULL;
    memcpy(c + 1, x->data, x->len);
    *c = (item){x->seq, c + 1, x->len, true};
    return c;
}

static void cb_release(void *ctx, void *it)
{
    (void)ctx;
    free(it);
}

static size_t cb_size(void *ctx, const void *it)
{
    (void)ctx;
    return sizeof(item) + ((const item *)it)->len;
}

const kvix_seqtrack_ops kvix__esub_track_ops = {
    cb_deliver, cb_replay_start, cb_replay_stop, cb_cleared, cb_hold, cb_release, cb_size,
};

