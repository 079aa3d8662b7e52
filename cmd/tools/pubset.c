/* A fleet of engine publishers: see cmd/tools/pubset.h. */
#include "pubset.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "kvix/buf.h"
#include "kvix/enginepub.h"
#include "kvix/enginesub.h"

typedef struct pubent {
    uint64_t worker;
    uint32_t dp;
    kvix_enginepub *p;
} pubent;

struct kvix_pubset {
    kvix_pubset_config cfg;
    void *zctx;
    pubent *pubs; /* sorted by (worker, dp) */
    size_t n, cap;
    size_t mapped;      /* publishers in the map file as last written */
    double map_written; /* when (monotonic s) */
    zmq_pollitem_t *items;
    size_t nitems, capitems; /* items as of n == nitems_for */
    size_t nitems_for;
    kvix_event batch[KVIX_PUBSET_BATCH_MAX];
    size_t nbatch;
    kvix_buf payload;
    uint64_t batches;
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void kvix_pubset_config_init(kvix_pubset_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->wire = KVIX_WIRE_MAP;
    cfg->map_every = 0.2;
}

/* The k-th publisher's endpoint from base (see cmd/tools/pubset.h). */
static int derive_endpoint(const char *base, const char *what, size_t k, uint64_t worker,
                           uint32_t dp, char *out, size_t cap, kvix_err *err)
{
    int len;
    if (strncmp(base, "tcp://", 6) == 0) {
        const char *colon = strrchr(base + 6, ':');
        if (!colon)
            return kvix_err_set(err, KVIX_EINVAL, "%s endpoint needs a port: '%s'", what, base);
        const char *port = colon + 1;
        if (strcmp(port, "*") == 0 || strcmp(port, "0") == 0) {
            len = snprintf(out, cap, "%.*s:*", (int)(colon - base), base);
        } else {
            char *end;
            errno = 0;
            unsigned long long pn = strtoull(port, &end, 10);
            if (port[0] < '0' || port[0] > '9' || *end || errno || pn < 1 || pn > 65535)
                return kvix_err_set(err, KVIX_EINVAL,
                                    "bad port '%s' in %s endpoint '%s' (1 to 65535)", port, what,
                                    base);
            if (pn + k > 65535)
                return kvix_err_set(err, KVIX_ERANGE,
                                    "%zu publishers do not fit above port %llu of %s endpoint '%s'",
                                    k + 1, pn, what, base);
            len = snprintf(out, cap, "%.*s:%llu", (int)(colon - base), base, pn + k);
        }
    } else if (strncmp(base, "ipc://", 6) == 0) {
        len = snprintf(out, cap, "%s-%" PRIu64 "-%" PRIu32, base, worker, dp);
    } else {
        return kvix_err_set(err, KVIX_EINVAL,
                            "%s endpoint must be tcp://HOST:PORT or ipc://PATH: '%s'", what, base);
    }
    if (len < 0 || (size_t)len >= cap)
        return kvix_err_set(err, KVIX_ELIMIT, "%s endpoint too long: '%s'", what, base);
    return KVIX_OK;
}

int kvix_pubset_new(kvix_pubset **out, const kvix_pubset_config *cfg, kvix_err *err)
{
    *out = NULL;
    char ep[KVIX_ENGINEPUB_ENDPOINT_MAX];
    if (!cfg->pub)
        return kvix_err_set(err, KVIX_EINVAL, "no endpoint to publish on");
    int rc = derive_endpoint(cfg->pub, "publisher", 0, 0, 0, ep, sizeof ep, err);
    if (!rc && cfg->replay)
        rc = derive_endpoint(cfg->replay, "replay", 0, 0, 0, ep, sizeof ep, err);
    if (rc)
        return rc;
    kvix_pubset *ps = calloc(1, sizeof *ps);
    if (!ps)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    ps->cfg = *cfg;
    kvix_buf_init(&ps->payload);
    for (size_t i = 0; i < KVIX_PUBSET_BATCH_MAX; i++)
        kvix_event_init(&ps->batch[i]);
    ps->zctx = zmq_ctx_new();
    if (!ps->zctx) {
        rc = kvix_err_set(err, KVIX_ESYS, "cannot create a zmq context: %s",
                          zmq_strerror(zmq_errno()));
        kvix_pubset_free(ps, 0);
        return rc;
    }
    *out = ps;
    return KVIX_OK;
}

void kvix_pubset_free(kvix_pubset *ps, int linger_ms)
{
    if (!ps)
        return;
    for (size_t i = 0; i < ps->n; i++)
        kvix_enginepub_free(ps->pubs[i].p, linger_ms);
    if (ps->zctx)
        zmq_ctx_term(ps->zctx);
    for (size_t i = 0; i < KVIX_PUBSET_BATCH_MAX; i++)
        kvix_event_release(&ps->batch[i]);
    kvix_buf_release(&ps->payload);
    free(ps->pubs);
    free(ps->items);
    free(ps);
}

/* Where (worker, dp) is or would go in the sorted list. */
static size_t find_at(const kvix_pubset *ps, uint64_t worker, uint32_t dp, int *found)
{
    size_t lo = 0, hi = ps->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const pubent *p = &ps->pubs[mid];
        if (p->worker < worker || (p->worker == worker && p->dp < dp))
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < ps->n && ps->pubs[lo].worker == worker && ps->pubs[lo].dp == dp;
    return lo;
}

/* What a subscriber connects to: a wildcard bind becomes loopback. */
static void connectable(const char *bound, char *out, size_t cap)
{
    const char *w = strstr(bound, "0.0.0.0");
    if (strncmp(bound, "tcp://", 6) == 0 && w == bound + 6)
        snprintf(out, cap, "tcp://127.0.0.1%s", w + 7);
    else
        snprintf(out, cap, "%s", bound);
}

static int set_connectable(char *dst, size_t cap, const char *bound, const char *path,
                           kvix_err *err)
{
    char ep[KVIX_ENGINEPUB_ENDPOINT_MAX + 32];
    connectable(bound, ep, sizeof ep);
    size_t len = strlen(ep);
    if (len >= cap)
        return kvix_err_set(err, KVIX_ELIMIT, "endpoint %s too long for %s", ep, path);
    memcpy(dst, ep, len + 1);
    return KVIX_OK;
}

static int map_write(kvix_pubset *ps, kvix_err *err)
{
    kvix_enginesub_spec *v = calloc(ps->n ? ps->n : 1, sizeof *v);
    if (!v)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    int rc = KVIX_OK;
    for (size_t i = 0; i < ps->n && !rc; i++) {
        v[i].worker = ps->pubs[i].worker;
        v[i].dp = ps->pubs[i].dp;
        rc = set_connectable(v[i].endpoint, sizeof v[i].endpoint,
                             kvix_enginepub_endpoint(ps->pubs[i].p), ps->cfg.map_file, err);
        const char *rep = kvix_enginepub_replay_endpoint(ps->pubs[i].p);
        if (!rc && rep)
            rc = set_connectable(v[i].replay, sizeof v[i].replay, rep, ps->cfg.map_file, err);
    }
    if (!rc)
        rc = kvix_enginesub_file_write(ps->cfg.map_file, v, ps->n, err);
    free(v);
    if (!rc) {
        ps->mapped = ps->n;
        ps->map_written = now_s();
    }
    return rc;
}

int kvix_pubset_map_sync(kvix_pubset *ps, kvix_err *err)
{
    if (!ps->cfg.map_file || ps->mapped == ps->n)
        return KVIX_OK;
    return map_write(ps, err);
}

int kvix_pubset_add(kvix_pubset *ps, uint64_t worker, uint32_t dp, const char **endpoint,
                    kvix_err *err)
{
    int found;
    size_t at = find_at(ps, worker, dp, &found);
    if (found)
        return 0;
    if (ps->n == ps->cap) {
        size_t c = ps->cap ? ps->cap * 2 : 16;
        pubent *nv = realloc(ps->pubs, c * sizeof *nv);
        if (!nv)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        ps->pubs = nv;
        ps->cap = c;
    }
    char ep[KVIX_ENGINEPUB_ENDPOINT_MAX], rep[KVIX_ENGINEPUB_ENDPOINT_MAX];
    int rc = derive_endpoint(ps->cfg.pub, "publisher", ps->n, worker, dp, ep, sizeof ep, err);
    if (!rc && ps->cfg.replay)
        rc = derive_endpoint(ps->cfg.replay, "replay", ps->n, worker, dp, rep, sizeof rep, err);
    kvix_enginepub *p = NULL;
    if (!rc)
        rc = kvix_enginepub_new(&p, ps->zctx, ep, ps->cfg.replay ? rep : NULL, ps->cfg.topic,
                                ps->cfg.replay_buffer, err);
    if (rc)
        return rc;
    kvix_enginepub_set_replay_topic(p, kvix_wire_style_replay_topic(ps->cfg.wire));
    memmove(ps->pubs + at + 1, ps->pubs + at, (ps->n - at) * sizeof *ps->pubs);
    ps->pubs[at] = (pubent){worker, dp, p};
    ps->n++;
    if (endpoint)
        *endpoint = kvix_enginepub_endpoint(p);
    if (ps->cfg.map_file && (ps->mapped == 0 || now_s() - ps->map_written >= ps->cfg.map_every)) {
        rc = map_write(ps, err);
        if (rc)
            return rc;
    }
    return 1;
}

size_t kvix_pubset_count(const kvix_pubset *ps)
{
    return ps->n;
}

size_t kvix_pubset_unsubscribed(const kvix_pubset *ps)
{
    size_t missing = 0;
    for (size_t i = 0; i < ps->n; i++)
        missing += kvix_enginepub_subscribers(ps->pubs[i].p) == 0;
    return missing;
}

/* The sockets to poll, remade when publishers were added. */
static int poll_items(kvix_pubset *ps, kvix_err *err)
{
    if (ps->nitems_for == ps->n && ps->items)
        return KVIX_OK;
    if (ps->n * 2 > ps->capitems) {
        size_t c = ps->n * 2;
        zmq_pollitem_t *nv = realloc(ps->items, c * sizeof *nv);
        if (!nv)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        ps->items = nv;
        ps->capitems = c;
    }
    ps->nitems = 0;
    for (size_t i = 0; i < ps->n; i++) {
        void *s[2];
        int k;
        kvix_enginepub_sockets(ps->pubs[i].p, s, &k);
        for (int j = 0; j < k; j++)
            ps->items[ps->nitems++] = (zmq_pollitem_t){s[j], 0, ZMQ_POLLIN, 0};
    }
    ps->nitems_for = ps->n;
    return KVIX_OK;
}

int kvix_pubset_serve(kvix_pubset *ps, int timeout_ms, kvix_err *err)
{
    for (size_t i = 0; i < ps->n; i++) {
        int rc = kvix_enginepub_service(ps->pubs[i].p, err);
        if (rc)
            return rc;
    }
    if (timeout_ms <= 0 || ps->n == 0)
        return KVIX_OK;
    int rc = poll_items(ps, err);
    if (rc)
        return rc;
    if (zmq_poll(ps->items, (int)ps->nitems, timeout_ms) < 0 && zmq_errno() != EINTR)
        return kvix_err_set(err, KVIX_ESYS, "zmq_poll: %s", zmq_strerror(zmq_errno()));
    return KVIX_OK;
}

int kvix_pubset_continues(const kvix_pubset *ps, const kvix_event *ev)
{
    const kvix_event *b0 = ps->nbatch ? &ps->batch[0] : NULL;
    return b0 && ev->has_eid && b0->has_eid && b0->eid == ev->eid && b0->worker == ev->worker &&
           b0->dp == ev->dp && ps->nbatch < KVIX_PUBSET_BATCH_MAX;
}

int kvix_pubset_push(kvix_pubset *ps, const kvix_event *ev, kvix_err *err)
{
    if (ps->nbatch && !kvix_pubset_continues(ps, ev))
        return kvix_err_set(err, KVIX_EINVAL, "event of another batch: flush first");
    int rc = kvix_event_copy(&ps->batch[ps->nbatch], ev, err);
    if (rc)
        return rc;
    ps->nbatch++;
    return KVIX_OK;
}

const kvix_event *kvix_pubset_pending(const kvix_pubset *ps, size_t *n)
{
    *n = ps->nbatch;
    return ps->batch;
}

int kvix_pubset_flush(kvix_pubset *ps, kvix_err *err)
{
    size_t n = ps->nbatch;
    if (n == 0)
        return KVIX_OK;
    ps->nbatch = 0;
    const kvix_event *ev[KVIX_PUBSET_BATCH_MAX];
    for (size_t i = 0; i < n; i++)
        ev[i] = &ps->batch[i];
    int found;
    size_t at = find_at(ps, ev[0]->worker, ev[0]->dp, &found);
    if (!found)
        return kvix_err_set(err, KVIX_ENOTFOUND, "no publisher for worker %" PRIu64 " dp %" PRIu32,
                            ev[0]->worker, ev[0]->dp);
    ps->payload.len = 0;
    double ts = ev[0]->has_ts ? ev[0]->ts : (double)time(NULL);
    int rc = kvix_wire_encode(ev, n, ts, ev[0]->dp, ps->cfg.wire, &ps->payload, err);
    if (!rc)
        rc = kvix_enginepub_send(ps->pubs[at].p, ps->payload.data, ps->payload.len, NULL, err);
    if (!rc)
        ps->batches++;
    return rc;
}

uint64_t kvix_pubset_batches(const kvix_pubset *ps)
{
    return ps->batches;
}
