/* kvix_ingest: the subscriptions fed into the index, the HTTP service, and
 * the recovery from peers. See cmd/tools/ingest.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvix/service.h"
#include "ingest_int.h"

/* ---- subscriptions ---------------------------------------------------------- */

static uint64_t feed_tag(void *ctx, const kvix_event *ev)
{
    kvix_ingest *g = ctx;
    return ingest_tag(ev->type, g->o.feed_source, ev->has_eid ? ev->eid : 0);
}

static void feed_reject(void *ctx, const kvix_event *ev, const kvix_err *e)
{
    kvix_ingest *g = ctx;
    ingest_refuse(g, "event", g->o.feed_source, ev->has_eid ? ev->eid : 0, ev->type, 0, e);
}

/* On the subscriptions' thread: wake the caller when a save is due (it
 * saves; the index is written under write_mu meanwhile). */
static void feed_applied(void *ctx, uint64_t applied)
{
    kvix_ingest *g = ctx;
    if (ingest_due(g, applied) && !__atomic_exchange_n(&g->save_woken, 1, __ATOMIC_RELAXED) &&
        g->o.on_wake)
        g->o.on_wake(g->o.ctx);
}

/* On the subscriptions' thread, as it ends on an error: the caller's main
 * loop must learn of it now, not at its own end. */
static void feed_failed(void *ctx, const kvix_err *e)
{
    (void)e; /* kvix_ingest_feed_stop gives it */
    kvix_ingest *g = ctx;
    __atomic_store_n(&g->feed_failed, 1, __ATOMIC_RELEASE);
    if (g->o.on_wake)
        g->o.on_wake(g->o.ctx);
}

int kvix_ingest_feed_failed(kvix_ingest *g)
{
    return __atomic_load_n(&g->feed_failed, __ATOMIC_ACQUIRE);
}

static void feed_note(void *ctx, const kvix_enginesub_note *n)
{
    kvix_ingest *g = ctx;
    if (g->o.on_note)
        g->o.on_note(g->o.ctx, n);
}

static void feed_step(void *ctx)
{
    kvix_ingest *g = ctx;
    if (g->o.on_feed_step)
        g->o.on_feed_step(g->o.ctx);
}

int kvix_ingest_feed_new(kvix_ingest *g, const kvix_enginesub_config *cfg, kvix_err *err)
{
    if (g->feed)
        return kvix_err_set(err, KVIX_EINVAL, "the subscriptions are already there");
    kvix_enginefeed_opts fo = {
        .idx = g->idx,
        .write_mu = &g->write_mu,
        .submit = g->o.index.threads > 0,
        .tag = feed_tag,
        .on_reject = feed_reject,
        .on_note = feed_note,
        .on_step = feed_step,
        .on_applied = feed_applied,
        .on_failed = feed_failed,
        .ctx = g,
    };
    kvix_enginefeed *f;
    int rc = kvix_enginefeed_new(&f, cfg, &fo, err);
    if (rc)
        return rc;
    rc = kvix_enginefeed_resume(f, err);
    if (rc) {
        kvix_enginefeed_free(f);
        return rc;
    }
    g->feed = f;
    return KVIX_OK;
}

int kvix_ingest_feed_start(kvix_ingest *g, bool hold, kvix_err *err)
{
    kvix_enginefeed_attach(g->feed, g->svc);
    return kvix_enginefeed_start(g->feed, hold, err);
}

void kvix_ingest_feed_release(kvix_ingest *g)
{
    kvix_enginefeed_release(g->feed);
}

int kvix_ingest_feed_stop(kvix_ingest *g, kvix_err *err)
{
    return g->feed ? kvix_enginefeed_stop(g->feed, err) : KVIX_OK;
}

/* ---- the HTTP service --------------------------------------------------------- */

int kvix_ingest_serve(kvix_ingest *g, const kvix_ingest_serve_opts *o, kvix_err *err)
{
    static const char *reasons[KVIX_REASON_COUNT];
    if (g->svc)
        return kvix_err_set(err, KVIX_EINVAL, "the service is already there");
    for (int r = 0; r < KVIX_REASON_COUNT; r++)
        reasons[r] = kvix_reason_key(r);
    kvix_service_opts so = {
        .idx = g->idx,
        .sub = g->feed ? kvix_enginefeed_sub(g->feed) : NULL,
        .sub_cfg = g->feed ? kvix_enginefeed_config(g->feed) : NULL,
        .no_sub_why = o->no_sub_why,
        .tmpdir = o->tmpdir,
        .reject_reasons = reasons,
        .nreasons = KVIX_REASON_COUNT,
        .peers = o->peers,
        .stream = o->stream,
        .server_nice = o->nice,
        .limits = o->limits,
        .auth_token = o->auth_token,
        .auth_queries = o->auth_queries,
    };
    kvix_service *s;
    int rc = kvix_service_new(&s, &so, err);
    if (rc)
        return rc;
    rc = kvix_service_listen(s, o->addr, o->port, o->threads, err);
    if (rc) {
        kvix_service_free(s);
        return rc;
    }
    kvix_service_set_stream_seq(s, o->seq);
    g->svc = s;
    return KVIX_OK;
}

struct kvix_service *kvix_ingest_service(kvix_ingest *g)
{
    return g->svc;
}

/* ---- recovery from peers ----------------------------------------------------- */

/* urls[0..n) not in tried[0..ntried), into fresh; their number. */
static size_t unasked(char **urls, size_t n, char **tried, size_t ntried, const char **fresh)
{
    size_t nf = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < ntried && strcmp(tried[j], urls[i]) != 0)
            j++;
        if (j == ntried)
            fresh[nf++] = urls[i];
    }
    return nf;
}

int kvix_ingest_recover(kvix_ingest *g, kvix_peers *peers, const char *stream,
                        kvix_ingest_recovery *rec, kvix_err *err)
{
    char **urls = NULL, **tried = NULL;
    size_t n = 0, ntried = 0;
    const char **fresh = NULL;
    kvix_peers_recover_opts o;
    kvix_peers_opts(peers, &o); /* one deadline for every peer asked, late ones too */
    o.stream = stream;
    kvix_peers_result res;
    int rc = KVIX_ENOTFOUND;
    memset(rec, 0, sizeof *rec);
    if (g->svc)
        kvix_index_write_begin(g->idx);
    for (;;) {
        if (kvix_peers_list(peers, &urls, &n, err) ||
            !(fresh = realloc(fresh, (n ? n : 1) * sizeof *fresh)) ||
            !(tried = realloc(tried, (ntried + n + 1) * sizeof *tried))) {
            rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory");
            break;
        }
        size_t nf = unasked(urls, n, tried, ntried, fresh);
        if (!nf)
            break;
        rc = kvix_peers_recover(g->idx, (const char *const *)fresh, nf, &o, &res, err);
        rec->asked += rc == KVIX_ENOTFOUND ? nf : res.winner + 1;
        if (rc != KVIX_ENOTFOUND) {
            snprintf(rec->peer, sizeof rec->peer, "%s", fresh[res.winner]);
            break;
        }
        for (size_t i = 0; i < nf; i++)
            if (!(tried[ntried++] = strdup(fresh[i]))) {
                ntried--;
                rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory");
                goto out;
            }
        kvix_peers_list_free(urls, n);
        urls = NULL;
        rc = KVIX_ENOTFOUND;
    }
out:
    if (g->svc)
        kvix_index_write_end(g->idx);
    if (rc == KVIX_ENOTFOUND && !ntried)
        kvix_err_set(err, KVIX_ENOTFOUND, "no peer given");
    if (rc == KVIX_OK) {
        rec->from_snapshot = res.from_snapshot;
        rec->applied = res.applied;
        rec->rejected = res.rejected;
        rec->info = res.info;
        g->dirty = 1;
    }
    kvix_peers_list_free(urls, n);
    for (size_t i = 0; i < ntried; i++)
        free(tried[i]);
    free(tried);
    free(fresh);
    return rc;
}
