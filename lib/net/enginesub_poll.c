/* The poll thread's side: sockets opened and closed as the registry changes,
 * messages read (live batches, replay replies, monitor events), and the step.
 * See enginesub_int.h. */
#define _GNU_SOURCE /* memmem */
#include "enginesub_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kvix/wire.h"

/* ---- opening and closing (poll thread) ----------------------------------- */

/* Subscriptions a and b are of one engine's (model, tenant, worker). */
static bool same_engine(const sub *a, const sub *b)
{
    return a->spec.worker == b->spec.worker && !strcmp(model_of(a), model_of(b)) &&
           !strcmp(tenant_of(a), tenant_of(b));
}

/* Position r is of subscription b's model and tenant. */
static bool resume_names_match(const kvix_enginesub *s, const resume_ent *r, const sub *b)
{
    const resume_names *n = &s->resnames[r->names];
    return (!n->model[0] || !strcmp(n->model, model_of(b))) &&
           (!n->tenant[0] || !strcmp(n->tenant, tenant_of(b)));
}

/* Resume a new subscription from the snapshot's eids of its worker (of its
 * model and tenant). */
static void resume_sub(kvix_enginesub *s, sub *b)
{
    size_t subs_of_worker = 0;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->reg.n; i++)
        subs_of_worker += same_engine(s->reg.v[i], b);
    pthread_mutex_unlock(&s->mu);
    bool found = false;
    uint64_t eid = 0;
    for (size_t i = 0; i < s->nres; i++) {
        const resume_ent *r = &s->res[i];
        if (r->worker != b->spec.worker || !resume_names_match(s, r, b) ||
            (subs_of_worker > 1 && r->dp != b->spec.dp))
            continue;
        kvix__esub_rank_add(b, r->dp);
        if (!found || r->eid > eid)
            eid = r->eid;
        found = true;
    }
    if (found && eid < UINT64_MAX)
        kvix__seqtrack_resume(&b->st, eid + 1);
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
    b->connected = false;
    b->giveup_pending = false;
    b->noconn_since = now_ms();
    b->noconn_noted = false;
    /* a name is connected to its address once the resolver has it (ZMQ
     * would resolve it in its one I/O thread, every attempt) */
    b->named = !s->cfg.bind && kvix__esub_host_is_name(b->spec.endpoint);
    const char *ep = b->named ? b->addr_ep : b->spec.endpoint;
    if (b->named && !b->res_id && !b->res_at)
        b->res_at = now_ms();
    if (!ep[0])
        return KVIX_OK;
    if ((s->cfg.bind ? zmq_bind(b->sock, ep) : zmq_connect(b->sock, ep)) != 0)
        return kvix_err_set(err, KVIX_ESYS, "cannot %s %s: %s",
                            s->cfg.bind ? "bind" : "connect to", b->spec.endpoint,
                            zmq_strerror(errno));
    snprintf(b->conn_ep, sizeof b->conn_ep, "%s", ep);
    return KVIX_OK;
}

/* Ask the resolver for b's name (and its replay's) when due. */
static void resolve_due(kvix_enginesub *s, sub *b, uint64_t now)
{
    if (!b->named || b->res_id || !b->res_at || now < b->res_at)
        return;
    pthread_mutex_lock(&s->mu); /* spec.replay changes under mu (replace) */
    memcpy(b->asked_replay, b->spec.replay, sizeof b->asked_replay);
    pthread_mutex_unlock(&s->mu);
    uint64_t id = ++s->res_seq;
    if (kvix__esub_resolver_ask(s->resolver, id, b->spec.endpoint,
                          kvix__esub_host_is_name(b->asked_replay) ? b->asked_replay : NULL))
        return; /* out of memory: asked again at the next step */
    b->res_id = id;
    b->res_at = 0;
    b->res_last = now;
}

/* The resolver's answer for b: connect to the address found (leaving the
 * one before, if it moved), or say the name does not resolve. */
static void resolved(kvix_enginesub *s, sub *b, const esub_resolved *r, uint64_t now)
{
    b->res_id = 0;
    if (!r->ok) {
        if (!b->unresolved_said) {
            const char *h = b->spec.endpoint + 6, *colon = strrchr(h, ':');
            kvix__esub_note(s, KVIX_ENGINESUB_UNRESOLVED, b,
                      "worker %" PRIu64 ": host '%.*s' of %s does not resolve (%s); asked again "
                      "every second",
                      b->spec.worker, (int)(colon - h), h, b->spec.endpoint, r->why);
        }
        b->unresolved_said = true;
        b->res_at = now + RESOLVE_EVERY_MS;
        return;
    }
    b->unresolved_said = false;
    snprintf(b->addr_ep, sizeof b->addr_ep, "%s", r->ep);
    if (r->replay[0]) {
        memcpy(b->replay_for, b->asked_replay, sizeof b->replay_for);
        snprintf(b->replay_ep, sizeof b->replay_ep, "%s", r->replay);
    }
    if (!b->sock || !strcmp(b->conn_ep, r->ep))
        return;
    if (b->conn_ep[0])
        (void)zmq_disconnect(b->sock, b->conn_ep);
    b->conn_ep[0] = '\0';
    if (zmq_connect(b->sock, r->ep) == 0)
        snprintf(b->conn_ep, sizeof b->conn_ep, "%s", r->ep);
    else
        b->res_at = now + RESOLVE_EVERY_MS;
}

static void take_resolved(kvix_enginesub *s, uint64_t now)
{
    esub_resolved r;
    while (kvix__esub_resolver_take(s->resolver, &r))
        for (size_t i = 0; i < s->live.n; i++)
            if (s->live.v[i]->res_id == r.id) {
                resolved(s, s->live.v[i], &r, now);
                break;
            }
}

static int sub_open(kvix_enginesub *s, sub *b, kvix_err *err)
{
    kvix_seqtrack_config tc = {s->cfg.hold_max, s->cfg.replay_timeout_ms, s->cfg.hold_bytes_max};
    kvix__seqtrack_init(&b->st, &tc, &kvix__esub_track_ops, b);
    if (!kvix__esub_rank_add(b, b->spec.dp))
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    if (s->nres)
        resume_sub(s, b);
    int rc = open_socket(s, b, err);
    if (rc) {
        kvix__esub_sub_close(b);
        return rc;
    }
    if (kvix__esub_vec_push(&s->live, b)) {
        kvix__esub_sub_close(b);
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
    kvix__esub_note(s, KVIX_ENGINESUB_DISCONNECT, b,
         "worker %" PRIu64 " dp %" PRIu32 ": zmq closed the connection to %s (a message over "
         "%zu bytes?): batches lost, cleared",
         b->spec.worker, b->spec.dp, b->spec.endpoint, s->cfg.msg_max);
    kvix__esub_clear_all(b);
    kvix_seqtrack_counts keep = b->st.counts;
    kvix__seqtrack_release(&b->st);
    kvix__esub_sockets_close(b);
    kvix_seqtrack_config tc = {s->cfg.hold_max, s->cfg.replay_timeout_ms, s->cfg.hold_bytes_max};
    kvix__seqtrack_init(&b->st, &tc, &kvix__esub_track_ops, b);
    b->st.counts = keep;
    kvix_err err;
    if (open_socket(s, b, &err) != KVIX_OK) {
        kvix__esub_note(s, KVIX_ENGINESUB_FAILED, b, "worker %" PRIu64 ": %s", b->spec.worker, err.msg);
        kvix__esub_sockets_close(b); /* stays silent until removed */
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
            kvix__esub_note(s, KVIX_ENGINESUB_REMOVED, b,
                 "worker %" PRIu64 " dp %" PRIu32 " (%s) removed: cleared", b->spec.worker,
                 b->spec.dp, b->spec.endpoint);
            kvix__esub_clear_all(b);
            for (size_t k = 0; k < s->live.n; k++)
                if (s->live.v[k] == b) {
                    vec_del(&s->live, k);
                    break;
                }
        }
        kvix__esub_sub_free(s, b);
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
        kvix__esub_note(s, KVIX_ENGINESUB_FAILED, b, "%s: subscription dropped", e.msg);
        pthread_mutex_lock(&s->mu);
        for (size_t k = 0; k < s->reg.n; k++)
            if (s->reg.v[k] == b) {
                kvix__esub_leave(s, k);
                break;
            }
        pthread_mutex_unlock(&s->mu);
    }
    free(pend.v);
    return first;
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

/* A message not framed as the wire says: counted and noted, with the frame
 * count (seq NULL) or the size of its seq frame. */
static void bad_frames(kvix_enginesub *s, sub *b, const char *kind, int nf, const char *frames,
                       const zmq_msg_t *seq)
{
    s->c.bad_frames++;
    if (!seq)
        kvix__esub_note(s, KVIX_ENGINESUB_BAD_FRAMES, b,
                  "worker %" PRIu64 ": %smessage of %d frames from %s dropped (expected %s)",
                  b->spec.worker, kind, nf, b->spec.endpoint, frames);
    else
        kvix__esub_note(s, KVIX_ENGINESUB_BAD_FRAMES, b,
                  "worker %" PRIu64 ": %smessage from %s dropped: seq frame of %zu bytes "
                  "(expected at least 8)",
                  b->spec.worker, kind, b->spec.endpoint, zmq_msg_size((zmq_msg_t *)seq));
}

static void bad_live(kvix_enginesub *s, sub *b, zmq_msg_t *f, int nf)
{
    bad_frames(s, b, "", nf, "topic, seq, payload", nf != 3 ? NULL : &f[1]);
}

static void bad_reply(kvix_enginesub *s, sub *b, zmq_msg_t *f, int nf)
{
    int framed = (nf == 3 || nf == 4) && zmq_msg_size(&f[0]) == 0;
    bad_frames(s, b, "replay ", nf, "\"\", [topic,] seq, payload", framed ? &f[nf - 2] : NULL);
}

static int on_live(kvix_enginesub *s, sub *b, zmq_msg_t *f, int nf, uint64_t now)
{
    s->c.messages++;
    b->has_msg = true;
    b->last_msg_at = now;
    /* A seq frame longer than 8 bytes (a proposed publisher id after the
     * seq) is read by its first 8. */
    if (nf != 3 || zmq_msg_size(&f[1]) < SEQ_FRAME) {
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
    return kvix__seqtrack_live(&b->st, seq, epoch, elen, &x, now);
}

/* ["", topic, seq, payload] (current vLLM) or ["", seq, payload]. */
static int on_reply(kvix_enginesub *s, sub *b, zmq_msg_t *f, int nf, uint64_t now)
{
    s->c.messages++;
    b->has_msg = true;
    b->last_msg_at = now;
    if ((nf != 3 && nf != 4) || zmq_msg_size(&f[0]) != 0 ||
        zmq_msg_size(&f[nf - 2]) < SEQ_FRAME) {
        bad_reply(s, b, f, nf);
        return KVIX_OK;
    }
    uint64_t r = get_be64(zmq_msg_data(&f[nf - 2]));
    if (r == KVIX_WIRE_SEQ_END)
        return kvix__seqtrack_replay_end(&b->st, now);
    uint64_t refused = b->st.counts.refused;
    if (!kvix__seqtrack_replay_want(&b->st, r, now)) {
        /* An honest answer may overtake the live stream by a little: only
         * what no engine could have sent is worth a warning. */
        if (b->st.counts.refused != refused &&
            (r < b->st.want || r - b->st.live_seq > s->cfg.hold_max))
            kvix__esub_note(s, KVIX_ENGINESUB_REFUSED, b,
                 "worker %" PRIu64 ": replay answer with seq %" PRIu64
                 " refused: outside the range asked (from %" PRIu64 " to the newest live, %" PRIu64
                 ")",
                 b->spec.worker, r, b->st.want, b->st.live_seq);
        return KVIX_OK;
    }
    item x = {r, zmq_msg_data(&f[nf - 1]), zmq_msg_size(&f[nf - 1]), false};
    kvix__seqtrack_replayed(&b->st, r, &x);
    return KVIX_OK;
}

/* A connecting subscription without a connection whose silence is not said
 * yet. Messages prove a connection the monitor has not reported yet. */
static bool noconn_due(const kvix_enginesub *s, const sub *b)
{
    return b->mon && !b->connected && !b->noconn_noted && s->cfg.noconn_warn_ms &&
           !(b->has_msg && b->last_msg_at >= b->noconn_since);
}

static void on_monitor(kvix_enginesub *s, sub *b, uint64_t now)
{
    for (int k = 0; k < DRAIN_MAX; k++) {
        zmq_msg_t f[4];
        int nf;
        if (recv_msg(b->mon, f, &nf) < 0)
            break;
        if (nf >= 1 && zmq_msg_size(&f[0]) >= 6) {
            uint16_t ev; /* host order */
            memcpy(&ev, zmq_msg_data(&f[0]), sizeof ev);
            if ((ev == ZMQ_EVENT_DISCONNECTED || ev == ZMQ_EVENT_CONNECT_RETRIED) && b->named &&
                !b->res_id && !b->res_at) /* the engine may have moved: its name again */
                b->res_at = b->res_last + RESOLVE_EVERY_MS > now ? b->res_last + RESOLVE_EVERY_MS
                                                                 : now;
            if (ev == ZMQ_EVENT_DISCONNECTED) {
                if (b->connected)
                    b->noconn_since = now;
                b->connected = false;
                b->giveup_pending = true;
                b->disc_at = now;
            } else if (ev == ZMQ_EVENT_CONNECTED) {
                b->connected = true;
                b->giveup_pending = false;
                if (b->noconn_noted)
                    kvix__esub_note(s, KVIX_ENGINESUB_CONNECTED, b,
                              "worker %" PRIu64 " dp %" PRIu32 ": connected to %s",
                              b->spec.worker, b->spec.dp, b->spec.endpoint);
                b->noconn_noted = false;
            } else {
                b->giveup_pending = false; /* it tries again by itself */
            }
        }
        close_frames(f, nf);
    }
}

/* Take at most DRAIN_MAX messages from b's socket *sockp, polled as polled,
 * through on. A message may close or reopen the socket: draining stops
 * when *sockp is no longer the one polled. */
static int drain(kvix_enginesub *s, sub *b, void **sockp, void *polled,
                 int (*on)(kvix_enginesub *, sub *, zmq_msg_t *, int, uint64_t), uint64_t now)
{
    int st = 0;
    for (int m = 0; m < DRAIN_MAX && !st && *sockp == polled; m++) {
        zmq_msg_t f[4];
        int nf;
        if (recv_msg(*sockp, f, &nf) < 0)
            break;
        st = on(s, b, f, nf, now);
        close_frames(f, nf);
    }
    return st;
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
        kvix__esub_counts_add(&t.seq, &b->st.counts);
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
        b->pub_replaying = kvix__seqtrack_replaying(&b->st, NULL);
    }
    t.subscriptions = s->reg.n;
    s->pub = t;
    pthread_mutex_unlock(&s->mu);
}

int kvix_enginesub_apply(kvix_enginesub *s, kvix_err *err)
{
    int rc = reconcile(s, err);
    publish(s); /* the sockets it opened are in the list before any step */
    return rc;
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
    if (grow_items(s, 2 + nl * 3))
        return fail_nomem(err);
    size_t k = 0;
    uint64_t now = now_ms();
    long timeout = timeout_ms;
    s->items[k] = (zmq_pollitem_t){NULL, s->wake_rd, ZMQ_POLLIN, 0};
    s->owners[k] = NULL;
    s->kinds[k++] = 'w';
    if (s->resolver) {
        s->items[k] = (zmq_pollitem_t){NULL, kvix__esub_resolver_fd(s->resolver), ZMQ_POLLIN, 0};
        s->owners[k] = NULL;
        s->kinds[k++] = 'd';
        for (size_t i = 0; i < nl; i++) {
            sub *b = s->live.v[i];
            resolve_due(s, b, now);
            if (b->named && !b->res_id && b->res_at) {
                long ms = b->res_at > now ? (long)(b->res_at - now) : 0;
                if (timeout < 0 || ms < timeout)
                    timeout = ms;
            }
        }
    }
    for (size_t i = 0; i < nl; i++) {
        sub *b = s->live.v[i];
        uint64_t deadline;
        if (b->dealer && kvix__seqtrack_replaying(&b->st, &deadline)) {
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
        if (noconn_due(s, b)) {
            uint64_t at = b->noconn_since + s->cfg.noconn_warn_ms;
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
        if (s->kinds[i] == 'd') {
            take_resolved(s, now);
            continue;
        }
        if (s->kinds[i] != 'r')
            continue;
        st = drain(s, b, &b->dealer, it->socket, on_reply, now);
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
        st = drain(s, b, &b->sock, it->socket, on_live, now);
    }
    for (size_t i = 0; i < s->live.n && !st; i++) {
        sub *b = s->live.v[i];
        st = kvix__seqtrack_tick(&b->st, now);
        if (!st && b->giveup_pending && now >= b->disc_at + GIVEUP_GRACE_MS) {
            /* Messages already queued on the monitor may still say it retries. */
            if (b->mon)
                on_monitor(s, b, now);
            if (b->giveup_pending)
                reopen(s, b, now);
        }
        if (!st && noconn_due(s, b) && now >= b->noconn_since + s->cfg.noconn_warn_ms) {
            /* an engine that is not there (yet), a wrong host or port, a
             * firewall: ZMQ retries without a word, so say it once */
            b->noconn_noted = true;
            kvix__esub_note(s, KVIX_ENGINESUB_NO_CONNECTION, b,
                      "worker %" PRIu64 " dp %" PRIu32 ": no connection to %s for %" PRIu64
                      " s; still trying (is the engine up and publishing there?)",
                      b->spec.worker, b->spec.dp, b->spec.endpoint,
                      (now - b->noconn_since + 500) / 1000);
        }
    }
    publish(s);
    if (st)
        return kvix_err_set(err, st, "out of memory holding batches");
    return KVIX_OK;
}
