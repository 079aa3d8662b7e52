/* The engine subscriber: see kvix/enginesub.h.
 *
 * Two views of the subscriptions. The registry (reg, under mu) is what
 * callers asked for; any thread edits it. The poll thread's own list (live)
 * holds the subscriptions whose sockets it opened; at each step it takes the
 * registry's pending additions and removals (under mu) and then opens and
 * closes sockets without the lock. A sub is freed only by the poll thread,
 * once it left the registry (gone list), so its pointer stays valid while a
 * step uses it. The spec of a sub is immutable but for its replay endpoint,
 * which is read and written under mu. */
#define _GNU_SOURCE /* memmem, pipe2 */
#include "kvix/enginesub.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "kvix/wire.h"

#define SEQ_FRAME 8
#define DRAIN_MAX 256      /* messages taken from one socket per step */
#define RECONNECT_MS 100
#define RECONNECT_MAX_MS 2000
#define RCVHWM 100000      /* the engines' own high-water mark */
#define GIVEUP_GRACE_MS 250 /* a disconnect with no reconnect attempt this long after:
                               ZMQ gave the connection up (protocol error) */
#define NOTE_MAX 512

typedef struct sub sub;

/* A batch on its way through the tracker: borrowed frames, or a held copy. */
typedef struct item {
    uint64_t seq;
    const void *data;
    size_t len;
    bool owned;
} item;

typedef struct resume_ent {
    uint64_t worker, eid;
    uint32_t dp;
} resume_ent;

struct sub {
    kvix_enginesub *s;
    kvix_enginesub_spec spec;
    int group;
    bool removed;   /* under mu: left the registry */
    bool opened;    /* poll thread: sockets open, in live */
    void *sock, *mon, *dealer;
    bool connected, giveup_pending;
    uint64_t disc_at;
    kvix_seqtrack st;
    uint32_t *ranks; /* sorted */
    unsigned nranks, capranks;
    uint64_t batches, losses_extra, last_seq, last_msg_at;
    bool has_seq, has_msg;
    /* published at the end of a step (under mu) */
    kvix_seqtrack_counts pub_seq;
    uint64_t pub_batches, pub_last_seq, pub_last_msg_at;
    bool pub_has_msg;
    unsigned pub_ranks;
    bool pub_open, pub_connected, pub_replaying, pub_has_seq;
};

typedef struct vec {
    sub **v;
    size_t n, cap;
} vec;

struct kvix_enginesub {
    kvix_enginesub_config cfg;
    char model[KVIX_NAME_MAX], tenant[KVIX_NAME_MAX], *topic;
    kvix_enginesub_ops ops;
    void *ctx;
    void *zctx;
    int wake_rd, wake_wr;
    pthread_mutex_t mu;
    vec reg, pending, gone; /* under mu */
    vec live;               /* poll thread */
    zmq_pollitem_t *items;
    sub **owners;
    char *kinds;
    size_t capitems;
    resume_ent *res;
    size_t nres;
    uint64_t mon_id;
    kvix_enginesub_counts c;   /* poll thread; seq: of the subs freed */
    kvix_enginesub_counts pub; /* under mu */
    unsigned repeat[16];
    kvix_event ev;             /* the clears' scratch */
    /* the batch being delivered */
    sub *cur;
    int cur_drop;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int vec_push(vec *v, sub *x)
{
    if (v->n == v->cap) {
        size_t c = v->cap ? v->cap * 2 : 16;
        sub **n = realloc(v->v, c * sizeof *n);
        if (!n)
            return KVIX_ENOMEM;
        v->v = n;
        v->cap = c;
    }
    v->v[v->n++] = x;
    return KVIX_OK;
}

static void vec_del(vec *v, size_t i)
{
    memmove(v->v + i, v->v + i + 1, (v->n - i - 1) * sizeof *v->v);
    v->n--;
}

static void note(kvix_enginesub *s, int kind, const sub *b, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void note(kvix_enginesub *s, int kind, const sub *b, const char *fmt, ...)
{
    unsigned r = ++s->repeat[kind & 15];
    if (!s->ops.note)
        return;
    char msg[NOTE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kvix_enginesub_note n = {kind, b->spec.worker, b->spec.dp, b->spec.endpoint, r, msg};
    s->ops.note(s->ctx, &n);
}

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
static bool rank_add(sub *b, uint32_t dp)
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

static const char *model_of(const sub *b)
{
    return b->spec.model[0] ? b->spec.model : b->s->model;
}

static const char *tenant_of(const sub *b)
{
    return b->spec.tenant[0] ? b->spec.tenant : b->s->tenant;
}

/* Every (worker, dp) seen on b can no longer be vouched for. */
static void clear_all(sub *b)
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
        if (!rank_add(b, ev->dp)) {
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
    kvix_wire_counts cnt = {0, 0, b->spec.dp};
    kvix_err err = {0, ""};
    s->cur = b;
    s->cur_drop = 0;
    int rc = kvix_wire_decode(x->data, x->len, seq, &src, on_wire_event, s, &cnt, &err);
    s->cur = NULL;
    b->has_seq = true;
    b->last_seq = seq;
    if (rc == 1 && s->cur_drop == 1) {
        s->c.dropped++;
        note(s, KVIX_ENGINESUB_DROPPED, b,
             "worker %" PRIu64 ": batch %" PRIu64 " of dp %" PRIu32
             " dropped: more than %u ranks on %s",
             b->spec.worker, seq, cnt.dp, s->cfg.ranks_max, b->spec.endpoint);
        return;
    }
    if (rc != KVIX_OK) {
        /* Its events are unknown: what the index holds for these ranks may be wrong. */
        s->c.decode_errors++;
        b->losses_extra++;
        note(s, KVIX_ENGINESUB_BAD_BATCH, b,
             "worker %" PRIu64 ": bad batch %" PRIu64 " from %s: %s: cleared", b->spec.worker,
             seq, b->spec.endpoint, err.msg);
        clear_all(b);
        return;
    }
    s->c.partial_blocks += cnt.partial_blocks;
    s->c.unknown_events += cnt.unknown_events;
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
    void *d = zmq_socket(s->zctx, ZMQ_DEALER);
    if (!d)
        return -1;
    int zero = 0;
    int64_t maxmsg = (int64_t)s->cfg.msg_max;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(d, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if (zmq_connect(d, url) != 0) {
        note(s, KVIX_ENGINESUB_FAILED, b,
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
        note(s, KVIX_ENGINESUB_RESTART, b,
             "worker %" PRIu64 " dp %" PRIu32 ": new epoch in the topic at seq %" PRIu64
             ": engine restarted, cleared",
             w, dp, c->seq);
    else if (c->why == KVIX_SEQTRACK_RESTART)
        note(s, KVIX_ENGINESUB_RESTART, b,
             "worker %" PRIu64 " dp %" PRIu32 ": seq %" PRIu64 " after %" PRIu64
             ": engine restarted, cleared",
             w, dp, c->seq, c->prev);
    else if (c->to == UINT64_MAX)
        note(s, KVIX_ENGINESUB_LOSS, b,
             "worker %" PRIu64 " dp %" PRIu32 ": batches from %" PRIu64 " lost (%s): cleared", w,
             dp, c->from, loss_why[c->why]);
    else
        note(s, KVIX_ENGINESUB_LOSS, b,
             "worker %" PRIu64 " dp %" PRIu32 ": batches %" PRIu64 "..%" PRIu64
             " lost (%s): cleared",
             w, dp, c->from, c->to, loss_why[c->why]);
    clear_all(b);
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

static const kvix_seqtrack_ops track_ops = {
    cb_deliver, cb_replay_start, cb_replay_stop, cb_cleared, cb_hold, cb_release, cb_size,
};

/* ---- lifecycle ------------------------------------------------------------- */

void kvix_enginesub_config_init(kvix_enginesub_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->replay_timeout_ms = KVIX_ENGINESUB_TIMEOUT_DEFAULT;
    cfg->hold_max = KVIX_ENGINESUB_HOLD_DEFAULT;
    cfg->hold_bytes_max = KVIX_ENGINESUB_HOLD_BYTES_DEFAULT;
    cfg->msg_max = KVIX_ENGINESUB_MSG_DEFAULT;
    cfg->ranks_max = KVIX_ENGINESUB_RANKS_DEFAULT;
}

int kvix_enginesub_new(kvix_enginesub **out, const kvix_enginesub_config *cfg,
                       const kvix_enginesub_ops *ops, void *ctx, kvix_err *err)
{
    *out = NULL;
    const char *m = cfg->model ? cfg->model : "default";
    const char *t = cfg->tenant ? cfg->tenant : "default";
    if (!*m || strlen(m) >= KVIX_NAME_MAX || !*t || strlen(t) >= KVIX_NAME_MAX)
        return kvix_err_set(err, KVIX_EINVAL, "bad model or tenant name");
    if (cfg->msg_max == 0 || cfg->msg_max > KVIX_WIRE_FRAME_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "largest message of %zu bytes (1..%u)",
                            cfg->msg_max, KVIX_WIRE_FRAME_MAX);
    if (!ops || !ops->event)
        return kvix_err_set(err, KVIX_EINVAL, "no event callback");
    kvix_enginesub *s = calloc(1, sizeof *s);
    if (!s)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    s->cfg = *cfg;
    if (!s->cfg.hold_max)
        s->cfg.hold_max = 1;
    if (!s->cfg.ranks_max)
        s->cfg.ranks_max = 1;
    snprintf(s->model, sizeof s->model, "%s", m); /* lengths checked above */
    snprintf(s->tenant, sizeof s->tenant, "%s", t);
    s->topic = strdup(cfg->topic ? cfg->topic : "");
    s->ops = *ops;
    s->ctx = ctx;
    s->wake_rd = s->wake_wr = -1;
    kvix_event_init(&s->ev);
    int p[2];
    if (!s->topic) {
        free(s);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
        int rc = kvix_err_set(err, KVIX_ESYS, "cannot make a pipe: %s", strerror(errno));
        free(s->topic);
        free(s);
        return rc;
    }
    s->wake_rd = p[0];
    s->wake_wr = p[1];
    pthread_mutex_init(&s->mu, NULL);
    s->zctx = zmq_ctx_new();
    if (!s->zctx) {
        kvix_err_set(err, KVIX_ESYS, "cannot create a zmq context: %s", zmq_strerror(errno));
        kvix_enginesub_free(s);
        return KVIX_ESYS;
    }
    *out = s;
    return KVIX_OK;
}

static void sub_close(sub *b)
{
    kvix_seqtrack_release(&b->st); /* closes the dealer */
    if (b->mon)
        zmq_close(b->mon);
    if (b->sock)
        zmq_close(b->sock);
    b->mon = b->sock = NULL;
    b->opened = false;
}

static void counts_add(kvix_seqtrack_counts *a, const kvix_seqtrack_counts *b)
{
    a->gaps += b->gaps;
    a->replays += b->replays;
    a->replayed += b->replayed;
    a->losses += b->losses;
    a->restarts += b->restarts;
    a->duplicates += b->duplicates;
    a->stale += b->stale;
    a->refused += b->refused;
}

static void sub_free(kvix_enginesub *s, sub *b)
{
    if (b->opened) {
        counts_add(&s->c.seq, &b->st.counts);
        s->c.seq.losses += b->losses_extra;
        sub_close(b);
    }
    free(b->ranks);
    free(b);
}

void kvix_enginesub_free(kvix_enginesub *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->live.n; i++)
        sub_close(s->live.v[i]);
    for (size_t i = 0; i < s->reg.n; i++)
        sub_free(s, s->reg.v[i]);
    for (size_t i = 0; i < s->gone.n; i++)
        sub_free(s, s->gone.v[i]);
    free(s->reg.v);
    free(s->gone.v);
    free(s->pending.v);
    free(s->live.v);
    free(s->items);
    free(s->owners);
    free(s->kinds);
    free(s->res);
    if (s->zctx)
        zmq_ctx_term(s->zctx);
    if (s->wake_rd >= 0)
        close(s->wake_rd);
    if (s->wake_wr >= 0)
        close(s->wake_wr);
    pthread_mutex_destroy(&s->mu);
    kvix_event_release(&s->ev);
    free(s->topic);
    free(s);
}

void kvix_enginesub_wake(kvix_enginesub *s)
{
    int e = errno;
    ssize_t r = write(s->wake_wr, "", 1); /* full pipe: a wake is pending anyway */
    (void)r;
    errno = e;
}

/* ---- the registry (any thread) ------------------------------------------- */

/* Conflicts of sp with the registry but for `except`. Under mu. */
static int conflict(kvix_enginesub *s, const kvix_enginesub_spec *sp, const sub *except,
                    kvix_err *err)
{
    for (size_t i = 0; i < s->reg.n; i++) {
        const sub *b = s->reg.v[i];
        if (b == except)
            continue;
        if (!strcmp(b->spec.endpoint, sp->endpoint))
            return kvix_err_set(err, KVIX_ELIMIT, "endpoint %s already subscribed",
                                sp->endpoint);
        if (b->spec.worker == sp->worker && b->spec.dp == sp->dp)
            return kvix_err_set(err, KVIX_ELIMIT,
                                "worker %" PRIu64 " dp %" PRIu32 " already registered (%s)",
                                sp->worker, sp->dp, b->spec.endpoint);
    }
    return KVIX_OK;
}

static int check_spec(const kvix_enginesub *s, const kvix_enginesub_spec *sp, kvix_err *err)
{
    if (memchr(sp->endpoint, 0, sizeof sp->endpoint) == NULL ||
        memchr(sp->replay, 0, sizeof sp->replay) == NULL ||
        memchr(sp->model, 0, sizeof sp->model) == NULL ||
        memchr(sp->tenant, 0, sizeof sp->tenant) == NULL)
        return kvix_err_set(err, KVIX_EINVAL, "unterminated string in a subscription");
    int rc = kvix_enginesub_endpoint_check(sp->endpoint, s->cfg.bind, err);
    if (!rc && sp->replay[0])
        rc = kvix_enginesub_endpoint_check(sp->replay, false, err);
    if (!rc && sp->worker > KVIX_WORKER_MAX) /* the index's range: its events would be refused */
        rc = kvix_err_set(err, KVIX_ERANGE, "worker %" PRIu64 " past 2^63-1", sp->worker);
    if (!rc && sp->block_size > KVIX_BS_MAX)
        rc = kvix_err_set(err, KVIX_ERANGE, "block size %" PRIu32 " (1..%d)", sp->block_size,
                          KVIX_BS_MAX);
    return rc;
}

static sub *sub_new(kvix_enginesub *s, const kvix_enginesub_spec *sp, int group)
{
    sub *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->s = s;
    b->spec = *sp;
    b->group = group;
    return b;
}

/* Enter b into the registry and the pending list. Under mu. */
static int enter(kvix_enginesub *s, sub *b)
{
    if (vec_push(&s->reg, b))
        return KVIX_ENOMEM;
    if (vec_push(&s->pending, b)) {
        s->reg.n--;
        return KVIX_ENOMEM;
    }
    return KVIX_OK;
}

/* Take b out of the registry; the poll thread frees it. Under mu. */
static void leave(kvix_enginesub *s, size_t i)
{
    sub *b = s->reg.v[i];
    b->removed = true;
    vec_del(&s->reg, i);
    if (vec_push(&s->gone, b)) {
        /* No room to hand it over: it stays in the registry, removed. Rare
         * enough (out of memory) to leak nothing: it is freed with s. */
        s->reg.v[s->reg.n++] = b;
    }
}

int kvix_enginesub_add(kvix_enginesub *s, const kvix_enginesub_spec *sp, int group,
                       kvix_err *err)
{
    int rc = check_spec(s, sp, err);
    if (rc)
        return rc;
    sub *b = sub_new(s, sp, group);
    if (!b)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    pthread_mutex_lock(&s->mu);
    rc = conflict(s, sp, NULL, err);
    if (!rc && (rc = enter(s, b)))
        kvix_err_set(err, rc, "out of memory");
    pthread_mutex_unlock(&s->mu);
    if (rc)
        free(b);
    else
        kvix_enginesub_wake(s);
    return rc;
}

int kvix_enginesub_remove(kvix_enginesub *s, const char *endpoint, kvix_err *err)
{
    int rc = KVIX_ENOTFOUND;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->reg.n; i++)
        if (!s->reg.v[i]->removed && !strcmp(s->reg.v[i]->spec.endpoint, endpoint)) {
            leave(s, i);
            rc = KVIX_OK;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    if (rc)
        return kvix_err_set(err, rc, "no subscription to %s", endpoint);
    kvix_enginesub_wake(s);
    return KVIX_OK;
}

size_t kvix_enginesub_remove_worker(kvix_enginesub *s, uint64_t worker, const char *model,
                                    const char *tenant, uint32_t dp)
{
    size_t n = 0;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->reg.n;) {
        const sub *b = s->reg.v[i];
        if (!b->removed && b->spec.worker == worker && (dp == UINT32_MAX || b->spec.dp == dp) &&
            (!model || !strcmp(model_of(b), model)) && (!tenant || !strcmp(tenant_of(b), tenant))) {
            size_t before = s->reg.n;
            leave(s, i);
            n++;
            if (s->reg.n == before) /* could not hand it over */
                i++;
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (n)
        kvix_enginesub_wake(s);
    return n;
}

static const kvix_enginesub_spec *find_spec(const kvix_enginesub_spec *v, size_t n,
                                            const char *endpoint)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i].endpoint, endpoint))
            return &v[i];
    return NULL;
}

static bool same_sub(const kvix_enginesub_spec *a, const kvix_enginesub_spec *b)
{
    return a->worker == b->worker && a->dp == b->dp && !strcmp(a->model, b->model) &&
           !strcmp(a->tenant, b->tenant) && a->block_size == b->block_size;
}

int kvix_enginesub_replace(kvix_enginesub *s, int group, const kvix_enginesub_spec *v,
                           size_t n, size_t *added, size_t *removed, kvix_err *err)
{
    int rc = KVIX_OK;
    size_t nadd = 0, ndel = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        rc = check_spec(s, &v[i], err);
        for (size_t j = 0; j < i && !rc; j++)
            if (!strcmp(v[i].endpoint, v[j].endpoint) ||
                (v[i].worker == v[j].worker && v[i].dp == v[j].dp))
                rc = kvix_err_set(err, KVIX_EINVAL, "%s listed twice", v[i].endpoint);
    }
    if (rc)
        return rc;
    sub **fresh = calloc(n ? n : 1, sizeof *fresh);
    if (!fresh)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    pthread_mutex_lock(&s->mu);
    /* Check everything against the other groups before changing anything. */
    for (size_t i = 0; i < n && !rc; i++) {
        for (size_t k = 0; k < s->reg.n && !rc; k++) {
            const sub *b = s->reg.v[k];
            if (b->removed)
                continue;
            bool same_ep = !strcmp(b->spec.endpoint, v[i].endpoint);
            bool keep = b->group == group && same_ep && same_sub(&b->spec, &v[i]);
            if (keep)
                continue;
            if (b->group == group && find_spec(v, n, b->spec.endpoint) == NULL)
                continue; /* leaves */
            if (b->group == group && same_ep)
                continue; /* replaced: leaves, then enters anew */
            if (same_ep || (b->spec.worker == v[i].worker && b->spec.dp == v[i].dp))
                rc = kvix_err_set(err, KVIX_ELIMIT,
                                  "%s: worker %" PRIu64 " dp %" PRIu32 " or endpoint already "
                                  "subscribed otherwise (%s)",
                                  v[i].endpoint, v[i].worker, v[i].dp, b->spec.endpoint);
        }
        bool kept = false;
        for (size_t k = 0; k < s->reg.n; k++) {
            const sub *b = s->reg.v[k];
            if (!b->removed && b->group == group && !strcmp(b->spec.endpoint, v[i].endpoint) &&
                same_sub(&b->spec, &v[i]))
                kept = true;
        }
        if (!rc && !kept && !(fresh[i] = sub_new(s, &v[i], group)))
            rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    if (!rc && (s->reg.cap < s->reg.n + n || s->pending.cap < s->pending.n + n ||
                s->gone.cap < s->gone.n + s->reg.n)) {
        /* Room first, so nothing below can fail half way. */
        size_t need[3] = {s->reg.n + n, s->pending.n + n, s->gone.n + s->reg.n};
        vec *vs[3] = {&s->reg, &s->pending, &s->gone};
        for (int k = 0; k < 3 && !rc; k++) {
            if (vs[k]->cap >= need[k])
                continue;
            sub **nv = realloc(vs[k]->v, need[k] * sizeof *nv);
            if (!nv)
                rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory");
            else {
                vs[k]->v = nv;
                vs[k]->cap = need[k];
            }
        }
    }
    if (!rc) {
        for (size_t k = 0; k < s->reg.n;) {
            sub *b = s->reg.v[k];
            const kvix_enginesub_spec *sp = b->group == group && !b->removed
                                                ? find_spec(v, n, b->spec.endpoint)
                                                : NULL;
            if (b->group == group && !b->removed && (!sp || !same_sub(&b->spec, sp))) {
                leave(s, k);
                ndel++;
                continue;
            }
            if (sp)
                memcpy(b->spec.replay, sp->replay, sizeof b->spec.replay);
            k++;
        }
        for (size_t i = 0; i < n; i++)
            if (fresh[i]) {
                enter(s, fresh[i]); /* room reserved above */
                fresh[i] = NULL;
                nadd++;
            }
    }
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < n; i++)
        free(fresh[i]);
    free(fresh);
    if (rc)
        return rc;
    if (added)
        *added = nadd;
    if (removed)
        *removed = ndel;
    kvix_enginesub_wake(s);
    return KVIX_OK;
}

int kvix_enginesub_resume(kvix_enginesub *s, uint64_t worker, uint32_t dp, uint64_t eid,
                          kvix_err *err)
{
    resume_ent *n = realloc(s->res, (s->nres + 1) * sizeof *n);
    if (!n)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    s->res = n;
    s->res[s->nres++] = (resume_ent){worker, eid, dp};
    return KVIX_OK;
}

/* ---- opening and closing (poll thread) ----------------------------------- */

/* Resume a new subscription from the snapshot's eids of its worker. */
static void resume_sub(kvix_enginesub *s, sub *b)
{
    size_t subs_of_worker = 0;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->reg.n; i++)
        subs_of_worker += s->reg.v[i]->spec.worker == b->spec.worker;
    pthread_mutex_unlock(&s->mu);
    bool found = false;
    uint64_t eid = 0;
    for (size_t i = 0; i < s->nres; i++) {
        const resume_ent *r = &s->res[i];
        if (r->worker != b->spec.worker || (subs_of_worker > 1 && r->dp != b->spec.dp))
            continue;
        rank_add(b, r->dp);
        if (!found || r->eid > eid)
            eid = r->eid;
        found = true;
    }
    if (found && eid < UINT64_MAX)
        kvix_seqtrack_resume(&b->st, eid + 1);
}

static int open_monitor(kvix_enginesub *s, sub *b, kvix_err *err)
{
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://kvix-enginesub-mon-%" PRIu64, ++s->mon_id);
    if (zmq_socket_monitor(b->sock, ep,
                           ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_DELAYED |
                               ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_DISCONNECTED) != 0)
        return kvix_err_set(err, KVIX_ESYS, "cannot monitor %s: %s", b->spec.endpoint,
                            zmq_strerror(errno));
    b->mon = zmq_socket(s->zctx, ZMQ_PAIR);
    int zero = 0;
    if (!b->mon || zmq_setsockopt(b->mon, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(b->mon, ep) != 0)
        return kvix_err_set(err, KVIX_ESYS, "cannot monitor %s: %s", b->spec.endpoint,
                            zmq_strerror(errno));
    return KVIX_OK;
}

static int open_socket(kvix_enginesub *s, sub *b, kvix_err *err)
{
    int zero = 0, ivl = RECONNECT_MS, ivlmax = RECONNECT_MAX_MS, hwm = RCVHWM;
    int64_t maxmsg = (int64_t)s->cfg.msg_max;
    b->sock = zmq_socket(s->zctx, ZMQ_SUB);
    if (!b->sock)
        return kvix_err_set(err, KVIX_ESYS, "cannot create a socket: %s", zmq_strerror(errno));
    zmq_setsockopt(b->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(b->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(b->sock, ZMQ_RECONNECT_IVL_MAX, &ivlmax, sizeof ivlmax);
    zmq_setsockopt(b->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(b->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(b->sock, ZMQ_SUBSCRIBE, s->topic, strlen(s->topic));
    int rc = KVIX_OK;
    if (!s->cfg.bind && (rc = open_monitor(s, b, err)))
        return rc;
    if ((s->cfg.bind ? zmq_bind(b->sock, b->spec.endpoint)
                     : zmq_connect(b->sock, b->spec.endpoint)) != 0)
        return kvix_err_set(err, KVIX_ESYS, "cannot %s %s: %s",
                            s->cfg.bind ? "bind" : "connect to", b->spec.endpoint,
                            zmq_strerror(errno));
    b->connected = false;
    b->giveup_pending = false;
    return KVIX_OK;
}

static int sub_open(kvix_enginesub *s, sub *b, kvix_err *err)
{
    kvix_seqtrack_config tc = {s->cfg.hold_max, s->cfg.replay_timeout_ms, s->cfg.hold_bytes_max};
    kvix_seqtrack_init(&b->st, &tc, &track_ops, b);
    if (!rank_add(b, b->spec.dp))
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    if (s->nres)
        resume_sub(s, b);
    int rc = open_socket(s, b, err);
    if (rc) {
        sub_close(b);
        return rc;
    }
    if (vec_push(&s->live, b)) {
        sub_close(b);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    b->opened = true;
    return KVIX_OK;
}

/* ZMQ gave the connection up: what it dropped is lost. Open it again, with
 * a fresh tracker (the next batch is taken as it comes). */
static void reopen(kvix_enginesub *s, sub *b, uint64_t now)
{
    (void)now;
    s->c.disconnects++;
    b->losses_extra++;
    note(s, KVIX_ENGINESUB_DISCONNECT, b,
         "worker %" PRIu64 " dp %" PRIu32 ": zmq closed the connection to %s (a message over "
         "%zu bytes?): batches lost, cleared",
         b->spec.worker, b->spec.dp, b->spec.endpoint, s->cfg.msg_max);
    clear_all(b);
    kvix_seqtrack_counts keep = b->st.counts;
    kvix_seqtrack_release(&b->st);
    if (b->mon)
        zmq_close(b->mon);
    if (b->sock)
        zmq_close(b->sock);
    b->mon = b->sock = NULL;
    kvix_seqtrack_config tc = {s->cfg.hold_max, s->cfg.replay_timeout_ms, s->cfg.hold_bytes_max};
    kvix_seqtrack_init(&b->st, &tc, &track_ops, b);
    b->st.counts = keep;
    kvix_err err;
    if (open_socket(s, b, &err) != KVIX_OK) {
        note(s, KVIX_ENGINESUB_FAILED, b, "worker %" PRIu64 ": %s", b->spec.worker, err.msg);
        if (b->mon)
            zmq_close(b->mon);
        if (b->sock)
            zmq_close(b->sock);
        b->mon = b->sock = NULL; /* stays silent until removed */
    }
}

/* Take the registry's changes: close what left, open what came. */
static int reconcile(kvix_enginesub *s, kvix_err *err)
{
    pthread_mutex_lock(&s->mu);
    vec gone = s->gone, pend = s->pending;
    s->gone = (vec){NULL, 0, 0};
    s->pending = (vec){NULL, 0, 0};
    for (size_t i = 0; i < pend.n;)
        if (pend.v[i]->removed)
            vec_del(&pend, i);
        else
            i++;
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < gone.n; i++) {
        sub *b = gone.v[i];
        if (b->opened) {
            note(s, KVIX_ENGINESUB_REMOVED, b,
                 "worker %" PRIu64 " dp %" PRIu32 " (%s) removed: cleared", b->spec.worker,
                 b->spec.dp, b->spec.endpoint);
            clear_all(b);
            for (size_t k = 0; k < s->live.n; k++)
                if (s->live.v[k] == b) {
                    vec_del(&s->live, k);
                    break;
                }
        }
        sub_free(s, b);
    }
    free(gone.v);
    int first = KVIX_OK;
    for (size_t i = 0; i < pend.n; i++) {
        sub *b = pend.v[i];
        kvix_err e;
        int rc = sub_open(s, b, &e);
        if (rc == KVIX_OK)
            continue;
        if (!first) {
            first = rc;
            if (err)
                *err = e;
        }
        note(s, KVIX_ENGINESUB_FAILED, b, "%s: subscription dropped", e.msg);
        pthread_mutex_lock(&s->mu);
        for (size_t k = 0; k < s->reg.n; k++)
            if (s->reg.v[k] == b) {
                leave(s, k);
                break;
            }
        pthread_mutex_unlock(&s->mu);
    }
    free(pend.v);
    return first;
}

int kvix_enginesub_apply(kvix_enginesub *s, kvix_err *err)
{
    return reconcile(s, err);
}

/* ---- messages ------------------------------------------------------------ */

static uint64_t get_be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* One whole message; frames past the first 4 are counted, not kept. */
static int recv_msg(void *sock, zmq_msg_t *f, int *nf)
{
    int n = 0, more;
    do {
        zmq_msg_t m;
        zmq_msg_init(&m);
        while (zmq_msg_recv(&m, sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            if (errno == EINTR && n > 0)
                continue;
            zmq_msg_close(&m);
            for (int i = 0; i < n && i < 4; i++)
                zmq_msg_close(&f[i]);
            return -1;
        }
        more = zmq_msg_more(&m);
        if (n < 4)
            f[n] = m;
        else
            zmq_msg_close(&m);
        n++;
    } while (more);
    *nf = n;
    return 0;
}

static void close_frames(zmq_msg_t *f, int nf)
{
    for (int i = 0; i < nf && i < 4; i++)
        zmq_msg_close(&f[i]);
}

static void bad_live(kvix_enginesub *s, sub *b, zmq_msg_t *f, int nf)
{
    s->c.bad_frames++;
    if (nf != 3)
        note(s, KVIX_ENGINESUB_BAD_FRAMES, b,
             "worker %" PRIu64 ": message of %d frames from %s dropped (expected topic, seq, "
             "payload)",
             b->spec.worker, nf, b->spec.endpoint);
    else
        note(s, KVIX_ENGINESUB_BAD_FRAMES, b,
             "worker %" PRIu64 ": message from %s dropped: seq frame of %zu bytes (expected 8)",
             b->spec.worker, b->spec.endpoint, zmq_msg_size(&f[1]));
}

static void bad_reply(kvix_enginesub *s, sub *b, zmq_msg_t *f, int nf)
{
    s->c.bad_frames++;
    if ((nf != 3 && nf != 4) || zmq_msg_size(&f[0]) != 0)
        note(s, KVIX_ENGINESUB_BAD_FRAMES, b,
             "worker %" PRIu64 ": replay message of %d frames from %s dropped (expected \"\", "
             "[topic,] seq, payload)",
             b->spec.worker, nf, b->spec.endpoint);
    else
        note(s, KVIX_ENGINESUB_BAD_FRAMES, b,
             "worker %" PRIu64 ": replay message from %s dropped: seq frame of %zu bytes "
             "(expected 8)",
             b->spec.worker, b->spec.endpoint, zmq_msg_size(&f[nf - 2]));
}

static int on_live(kvix_enginesub *s, sub *b, zmq_msg_t *f, int nf, uint64_t now)
{
    s->c.messages++;
    b->has_msg = true;
    b->last_msg_at = now;
    if (nf != 3 || zmq_msg_size(&f[1]) != SEQ_FRAME) {
        bad_live(s, b, f, nf);
        return KVIX_OK;
    }
    uint64_t seq = get_be64(zmq_msg_data(&f[1]));
    static const char mark[] = "sgl-kv-epoch=";
    const char *topic = zmq_msg_data(&f[0]), *epoch = NULL;
    size_t tlen = zmq_msg_size(&f[0]), elen = 0;
    const char *m = tlen ? memmem(topic, tlen, mark, sizeof mark - 1) : NULL;
    if (m) {
        epoch = m + sizeof mark - 1;
        elen = (size_t)(topic + tlen - epoch);
    }
    item x = {seq, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]), false};
    return kvix_seqtrack_live(&b->st, seq, epoch, elen, &x, now);
}

/* ["", topic, seq, payload] (current vLLM) or ["", seq, payload]. */
static int on_reply(kvix_enginesub *s, sub *b, zmq_msg_t *f, int nf, uint64_t now)
{
    s->c.messages++;
    b->has_msg = true;
    b->last_msg_at = now;
    if ((nf != 3 && nf != 4) || zmq_msg_size(&f[0]) != 0 ||
        zmq_msg_size(&f[nf - 2]) != SEQ_FRAME) {
        bad_reply(s, b, f, nf);
        return KVIX_OK;
    }
    uint64_t r = get_be64(zmq_msg_data(&f[nf - 2]));
    if (r == KVIX_WIRE_SEQ_END)
        return kvix_seqtrack_replay_end(&b->st, now);
    uint64_t refused = b->st.counts.refused;
    if (!kvix_seqtrack_replay_want(&b->st, r, now)) {
        /* An honest answer may overtake the live stream by a little: only
         * what no engine could have sent is worth a warning. */
        if (b->st.counts.refused != refused &&
            (r < b->st.want || r - b->st.live_seq > s->cfg.hold_max))
            note(s, KVIX_ENGINESUB_REFUSED, b,
                 "worker %" PRIu64 ": replay answer with seq %" PRIu64
                 " refused: outside the range asked (from %" PRIu64 " to the newest live, %" PRIu64
                 ")",
                 b->spec.worker, r, b->st.want, b->st.live_seq);
        return KVIX_OK;
    }
    item x = {r, zmq_msg_data(&f[nf - 1]), zmq_msg_size(&f[nf - 1]), false};
    kvix_seqtrack_replayed(&b->st, r, &x);
    return KVIX_OK;
}

static void on_monitor(kvix_enginesub *s, sub *b, uint64_t now)
{
    (void)s;
    for (int k = 0; k < DRAIN_MAX; k++) {
        zmq_msg_t f[4];
        int nf;
        if (recv_msg(b->mon, f, &nf) < 0)
            break;
        if (nf >= 1 && zmq_msg_size(&f[0]) >= 6) {
            uint16_t ev; /* host order */
            memcpy(&ev, zmq_msg_data(&f[0]), sizeof ev);
            if (ev == ZMQ_EVENT_DISCONNECTED) {
                b->connected = false;
                b->giveup_pending = true;
                b->disc_at = now;
            } else if (ev == ZMQ_EVENT_CONNECTED) {
                b->connected = true;
                b->giveup_pending = false;
            } else {
                b->giveup_pending = false; /* it tries again by itself */
            }
        }
        close_frames(f, nf);
    }
}

/* ---- the step -------------------------------------------------------------- */

static int grow_items(kvix_enginesub *s, size_t n)
{
    if (n <= s->capitems)
        return KVIX_OK;
    size_t c = n * 2;
    zmq_pollitem_t *it = realloc(s->items, c * sizeof *it);
    if (!it)
        return KVIX_ENOMEM;
    s->items = it;
    sub **ow = realloc(s->owners, c * sizeof *ow);
    if (!ow)
        return KVIX_ENOMEM;
    s->owners = ow;
    char *k = realloc(s->kinds, c);
    if (!k)
        return KVIX_ENOMEM;
    s->kinds = k;
    s->capitems = c;
    return KVIX_OK;
}

static void publish(kvix_enginesub *s)
{
    kvix_enginesub_counts t = s->c;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->live.n; i++) {
        sub *b = s->live.v[i];
        counts_add(&t.seq, &b->st.counts);
        t.seq.losses += b->losses_extra;
        b->pub_seq = b->st.counts;
        b->pub_seq.losses += b->losses_extra;
        b->pub_batches = b->batches;
        b->pub_last_seq = b->last_seq;
        b->pub_has_seq = b->has_seq;
        b->pub_has_msg = b->has_msg;
        b->pub_last_msg_at = b->last_msg_at;
        b->pub_ranks = b->nranks;
        b->pub_open = b->sock != NULL;
        b->pub_connected = s->cfg.bind ? b->sock != NULL : b->connected;
        b->pub_replaying = kvix_seqtrack_replaying(&b->st, NULL);
    }
    t.subscriptions = s->reg.n;
    s->pub = t;
    pthread_mutex_unlock(&s->mu);
}

static int fail_nomem(kvix_err *err)
{
    return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
}

int kvix_enginesub_step(kvix_enginesub *s, int timeout_ms, kvix_err *err)
{
    kvix_err e;
    if (reconcile(s, &e) != KVIX_OK) {
        /* told through ops.note; the subscription was dropped */
    }
    size_t nl = s->live.n;
    if (grow_items(s, 1 + nl * 3))
        return fail_nomem(err);
    size_t k = 0;
    uint64_t now = now_ms();
    long timeout = timeout_ms;
    s->items[k] = (zmq_pollitem_t){NULL, s->wake_rd, ZMQ_POLLIN, 0};
    s->owners[k] = NULL;
    s->kinds[k++] = 'w';
    for (size_t i = 0; i < nl; i++) {
        sub *b = s->live.v[i];
        uint64_t deadline;
        if (b->dealer && kvix_seqtrack_replaying(&b->st, &deadline)) {
            long ms = deadline > now ? (long)(deadline - now) : 0;
            if (timeout < 0 || ms < timeout)
                timeout = ms;
            s->items[k] = (zmq_pollitem_t){b->dealer, 0, ZMQ_POLLIN, 0};
            s->owners[k] = b;
            s->kinds[k++] = 'r';
        }
    }
    for (size_t i = 0; i < nl; i++) {
        sub *b = s->live.v[i];
        if (!b->sock)
            continue;
        s->items[k] = (zmq_pollitem_t){b->sock, 0, ZMQ_POLLIN, 0};
        s->owners[k] = b;
        s->kinds[k++] = 'l';
        if (b->mon) {
            s->items[k] = (zmq_pollitem_t){b->mon, 0, ZMQ_POLLIN, 0};
            s->owners[k] = b;
            s->kinds[k++] = 'm';
        }
        if (b->giveup_pending) {
            uint64_t at = b->disc_at + GIVEUP_GRACE_MS;
            long ms = at > now ? (long)(at - now) : 0;
            if (timeout < 0 || ms < timeout)
                timeout = ms;
        }
    }
    int rc = zmq_poll(s->items, (int)k, timeout);
    if (rc < 0) {
        if (errno == EINTR)
            return KVIX_OK;
        return kvix_err_set(err, KVIX_ESYS, "zmq_poll: %s", zmq_strerror(errno));
    }
    now = now_ms();
    int st = KVIX_OK;
    /* Replay answers first: they come before the live batches held. A
     * callback may stop a replay, so the dealer is checked before each use. */
    for (size_t i = 0; i < k && !st; i++) {
        zmq_pollitem_t *it = &s->items[i];
        if (!(it->revents & ZMQ_POLLIN))
            continue;
        sub *b = s->owners[i];
        if (s->kinds[i] == 'w') {
            char buf[64];
            while (read(s->wake_rd, buf, sizeof buf) > 0) {
            }
            continue;
        }
        if (s->kinds[i] != 'r')
            continue;
        for (int m = 0; m < DRAIN_MAX && !st && b->dealer == it->socket; m++) {
            zmq_msg_t f[4];
            int nf;
            if (recv_msg(b->dealer, f, &nf) < 0)
                break;
            st = on_reply(s, b, f, nf, now);
            close_frames(f, nf);
        }
    }
    for (size_t i = 0; i < k && !st; i++) {
        zmq_pollitem_t *it = &s->items[i];
        sub *b = s->owners[i];
        if (!(it->revents & ZMQ_POLLIN))
            continue;
        if (s->kinds[i] == 'm' && b->mon == it->socket)
            on_monitor(s, b, now);
        if (s->kinds[i] != 'l')
            continue;
        for (int m = 0; m < DRAIN_MAX && !st && b->sock == it->socket; m++) {
            zmq_msg_t f[4];
            int nf;
            if (recv_msg(b->sock, f, &nf) < 0)
                break;
            st = on_live(s, b, f, nf, now);
            close_frames(f, nf);
        }
    }
    for (size_t i = 0; i < s->live.n && !st; i++) {
        sub *b = s->live.v[i];
        st = kvix_seqtrack_tick(&b->st, now);
        if (!st && b->giveup_pending && now >= b->disc_at + GIVEUP_GRACE_MS) {
            /* Messages already queued on the monitor may still say it retries. */
            if (b->mon)
                on_monitor(s, b, now);
            if (b->giveup_pending)
                reopen(s, b, now);
        }
    }
    publish(s);
    if (st)
        return kvix_err_set(err, st, "out of memory holding batches");
    return KVIX_OK;
}

void kvix_enginesub_counts_get(kvix_enginesub *s, kvix_enginesub_counts *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->pub;
    pthread_mutex_unlock(&s->mu);
}

int kvix_enginesub_list(kvix_enginesub *s, int (*fn)(void *ctx, const kvix_enginesub_status *st),
                        void *ctx)
{
    int rc = 0;
    uint64_t now = now_ms();
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->reg.n && !rc; i++) {
        const sub *b = s->reg.v[i];
        if (b->removed)
            continue;
        uint64_t idle = b->pub_has_msg && now >= b->pub_last_msg_at ? now - b->pub_last_msg_at
                                                                     : UINT64_MAX;
        kvix_enginesub_status st = {&b->spec,         b->group,         b->pub_open,
                                    b->pub_connected, b->pub_replaying, b->pub_ranks,
                                    b->pub_batches,   b->pub_has_seq,   b->pub_last_seq,
                                    idle,             b->pub_seq};
        rc = fn(ctx, &st);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}
