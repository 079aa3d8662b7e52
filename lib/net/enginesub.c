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
#define _GNU_SOURCE /* pipe2 */
#include "enginesub_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kvix/wire.h"

int kvix__esub_vec_push(vec *v, sub *x)
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

void kvix__esub_note(kvix_enginesub *s, int kind, const sub *b, const char *fmt, ...)
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
/* ---- lifecycle ------------------------------------------------------------- */

void kvix_enginesub_config_init(kvix_enginesub_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->replay_timeout_ms = KVIX_ENGINESUB_TIMEOUT_DEFAULT;
    cfg->hold_max = KVIX_ENGINESUB_HOLD_DEFAULT;
    cfg->hold_bytes_max = KVIX_ENGINESUB_HOLD_BYTES_DEFAULT;
    cfg->msg_max = KVIX_ENGINESUB_MSG_DEFAULT;
    cfg->ranks_max = KVIX_ENGINESUB_RANKS_DEFAULT;
    cfg->noconn_warn_ms = KVIX_ENGINESUB_NOCONN_DEFAULT;
    cfg->subs_max = KVIX_ENGINESUB_SUBS_DEFAULT;
}

/* Sockets of the context beyond the subscriptions' own: sockets closed but
 * not yet reaped (libzmq frees a socket's slot after zmq_close returns). */
#define SOCKETS_SLACK 256

size_t kvix_enginesub_subs_limit(void)
{
    return (65535 - SOCKETS_SLACK) / KVIX_ENGINESUB_SOCKETS_PER_SUB;
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
    size_t subs_max = cfg->subs_max ? cfg->subs_max : KVIX_ENGINESUB_SUBS_DEFAULT;
    if (subs_max > kvix_enginesub_subs_limit())
        return kvix_err_set(err, KVIX_ERANGE, "%zu subscriptions: ZMQ holds at most %zu", subs_max,
                            kvix_enginesub_subs_limit());
    kvix_enginesub *s = calloc(1, sizeof *s);
    if (!s)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    s->cfg = *cfg;
    if (!s->cfg.hold_max)
        s->cfg.hold_max = 1;
    if (!s->cfg.ranks_max)
        s->cfg.ranks_max = 1;
    s->cfg.subs_max = subs_max;
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
    int rrc = cfg->bind ? KVIX_OK : kvix__esub_resolver_new(&s->resolver, err);
    if (rrc) {
        kvix_enginesub_free(s);
        return rrc;
    }
    s->zctx = zmq_ctx_new();
    /* libzmq's default, 1023 sockets, was 341 subscriptions; the limit ZMQ
     * itself has for a context is checked above */
    int nsock = (int)(subs_max * KVIX_ENGINESUB_SOCKETS_PER_SUB + SOCKETS_SLACK);
    if (!s->zctx || zmq_ctx_set(s->zctx, ZMQ_MAX_SOCKETS, nsock) != 0) {
        kvix_err_set(err, KVIX_ESYS, "cannot create a zmq context: %s", zmq_strerror(errno));
        kvix_enginesub_free(s);
        return KVIX_ESYS;
    }
    *out = s;
    return KVIX_OK;
}

void kvix__esub_sockets_close(sub *b)
{
    /* The monitor is stopped before its socket closes: closed without it,
     * libzmq keeps the monitor's own PAIR socket (and its eventfd) for the
     * life of the context, three descriptors per subscription removed. */
    if (b->sock)
        (void)zmq_socket_monitor(b->sock, NULL, 0);
    if (b->mon)
        zmq_close(b->mon);
    if (b->sock)
        zmq_close(b->sock);
    b->mon = b->sock = NULL;
    b->conn_ep[0] = '\0';
}

void kvix__esub_sub_close(sub *b)
{
    kvix__seqtrack_release(&b->st); /* closes the dealer */
    kvix__esub_sockets_close(b);
    b->opened = false;
}

void kvix__esub_counts_add(kvix_seqtrack_counts *a, const kvix_seqtrack_counts *b)
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

void kvix__esub_sub_free(kvix_enginesub *s, sub *b)
{
    if (b->opened) {
        kvix__esub_counts_add(&s->c.seq, &b->st.counts);
        s->c.seq.losses += b->losses_extra;
        kvix__esub_sub_close(b);
    }
    free(b->ranks);
    free(b);
}

void kvix_enginesub_free(kvix_enginesub *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->live.n; i++)
        kvix__esub_sub_close(s->live.v[i]);
    for (size_t i = 0; i < s->reg.n; i++)
        kvix__esub_sub_free(s, s->reg.v[i]);
    for (size_t i = 0; i < s->gone.n; i++)
        kvix__esub_sub_free(s, s->gone.v[i]);
    free(s->reg.v);
    free(s->gone.v);
    free(s->pending.v);
    free(s->live.v);
    free(s->items);
    free(s->owners);
    free(s->kinds);
    free(s->res);
    free(s->resnames);
    if (s->zctx)
        zmq_ctx_term(s->zctx);
    kvix__esub_resolver_free(s->resolver);
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

/* sp checked, into *out with its endpoints in canonical form. */
static int full(const kvix_enginesub *s, size_t want, kvix_err *err)
{
    return kvix_err_set(err, KVIX_EBUSY, "%zu subscriptions: the limit is %zu", want,
                        s->cfg.subs_max);
}

static int check_spec(const kvix_enginesub *s, const kvix_enginesub_spec *sp,
                      kvix_enginesub_spec *out, kvix_err *err)
{
    if (memchr(sp->endpoint, 0, sizeof sp->endpoint) == NULL ||
        memchr(sp->replay, 0, sizeof sp->replay) == NULL ||
        memchr(sp->model, 0, sizeof sp->model) == NULL ||
        memchr(sp->tenant, 0, sizeof sp->tenant) == NULL)
        return kvix_err_set(err, KVIX_EINVAL, "unterminated string in a subscription");
    *out = *sp;
    int rc = kvix_enginesub_endpoint_canon(sp->endpoint, s->cfg.bind, out->endpoint, err);
    if (!rc && sp->replay[0])
        rc = kvix_enginesub_endpoint_canon(sp->replay, false, out->replay, err);
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
    if (kvix__esub_vec_push(&s->reg, b))
        return KVIX_ENOMEM;
    if (kvix__esub_vec_push(&s->pending, b)) {
        s->reg.n--;
        return KVIX_ENOMEM;
    }
    __atomic_add_fetch(&s->changes, 1, __ATOMIC_RELAXED);
    return KVIX_OK;
}

/* Take b out of the registry; the poll thread frees it. Under mu. */
void kvix__esub_leave(kvix_enginesub *s, size_t i)
{
    sub *b = s->reg.v[i];
    b->removed = true;
    vec_del(&s->reg, i);
    __atomic_add_fetch(&s->changes, 1, __ATOMIC_RELAXED);
    if (kvix__esub_vec_push(&s->gone, b)) {
        /* No room to hand it over: it stays in the registry, removed. Rare
         * enough (out of memory) to leak nothing: it is freed with s. */
        s->reg.v[s->reg.n++] = b;
    }
}

int kvix_enginesub_add(kvix_enginesub *s, const kvix_enginesub_spec *given, int group,
                       kvix_err *err)
{
    kvix_enginesub_spec c, *sp = &c;
    int rc = check_spec(s, given, &c, err);
    if (rc)
        return rc;
    sub *b = sub_new(s, sp, group);
    if (!b)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    pthread_mutex_lock(&s->mu);
    rc = conflict(s, sp, NULL, err);
    if (!rc && s->reg.n >= s->cfg.subs_max)
        rc = full(s, s->reg.n + 1, err);
    if (!rc && (rc = enter(s, b)))
        kvix_err_set(err, rc, "out of memory");
    pthread_mutex_unlock(&s->mu);
    if (rc)
        free(b);
    else
        kvix_enginesub_wake(s);
    return rc;
}

int kvix_enginesub_remove(kvix_enginesub *s, const char *given, kvix_err *err)
{
    int rc = KVIX_ENOTFOUND;
    char endpoint[KVIX_ENGINESUB_ENDPOINT_MAX];
    if (kvix_enginesub_endpoint_canon(given, s->cfg.bind, endpoint, NULL) != KVIX_OK)
        return kvix_err_set(err, rc, "no subscription to %.*s", KVIX_ENGINESUB_ENDPOINT_MAX,
                            given);
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->reg.n; i++)
        if (!s->reg.v[i]->removed && !strcmp(s->reg.v[i]->spec.endpoint, endpoint)) {
            kvix__esub_leave(s, i);
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
            kvix__esub_leave(s, i);
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

int kvix_enginesub_replace(kvix_enginesub *s, int group, const kvix_enginesub_spec *given,
                           size_t n, size_t *added, size_t *removed, kvix_err *err)
{
    int rc = KVIX_OK;
    size_t nadd = 0, ndel = 0;
    kvix_enginesub_spec *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        rc = check_spec(s, &given[i], &v[i], err);
        for (size_t j = 0; j < i && !rc; j++)
            if (!strcmp(v[i].endpoint, v[j].endpoint) ||
                (v[i].worker == v[j].worker && v[i].dp == v[j].dp))
                rc = kvix_err_set(err, KVIX_EINVAL, "%s listed twice", v[i].endpoint);
    }
    sub **fresh = rc ? NULL : calloc(n ? n : 1, sizeof *fresh);
    if (!rc && !fresh)
        rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    if (rc) {
        free(v);
        return rc;
    }
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
    if (!rc) {
        size_t others = 0; /* what stays whatever the group becomes */
        for (size_t k = 0; k < s->reg.n; k++)
            others += !s->reg.v[k]->removed && s->reg.v[k]->group != group;
        if (others + n > s->cfg.subs_max)
            rc = full(s, others + n, err);
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
                kvix__esub_leave(s, k);
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
    free(v);
    if (rc)
        return rc;
    if (added)
        *added = nadd;
    if (removed)
        *removed = ndel;
    kvix_enginesub_wake(s);
    return KVIX_OK;
}

/* The index of (model, tenant) in s->resnames, added if new; -1 when out
 * of memory. Positions come a partition at a time: the last is tried first. */
static long resume_names_of(kvix_enginesub *s, const char *model, const char *tenant)
{
    model = model ? model : "";
    tenant = tenant ? tenant : "";
    for (size_t i = s->nresnames; i-- > 0;)
        if (!strcmp(s->resnames[i].model, model) && !strcmp(s->resnames[i].tenant, tenant))
            return (long)i;
    resume_names *v = realloc(s->resnames, (s->nresnames + 1) * sizeof *v);
    if (!v)
        return -1;
    s->resnames = v;
    snprintf(v[s->nresnames].model, sizeof v->model, "%s", model);
    snprintf(v[s->nresnames].tenant, sizeof v->tenant, "%s", tenant);
    return (long)s->nresnames++;
}

int kvix_enginesub_resume(kvix_enginesub *s, const char *model, const char *tenant,
                          uint64_t worker, uint32_t dp, uint64_t eid, kvix_err *err)
{
    if ((model && strlen(model) >= KVIX_NAME_MAX) || (tenant && strlen(tenant) >= KVIX_NAME_MAX))
        return kvix_err_set(err, KVIX_EINVAL, "bad model or tenant name");
    long names = resume_names_of(s, model, tenant);
    resume_ent *n = names < 0 ? NULL : realloc(s->res, (s->nres + 1) * sizeof *n);
    if (!n)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    s->res = n;
    s->res[s->nres++] = (resume_ent){worker, eid, dp, (uint32_t)names};
    return KVIX_OK;
}


void kvix_enginesub_counts_get(kvix_enginesub *s, kvix_enginesub_counts *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->pub;
    pthread_mutex_unlock(&s->mu);
}

uint64_t kvix_enginesub_changes(kvix_enginesub *s)
{
    return __atomic_load_n(&s->changes, __ATOMIC_RELAXED);
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
