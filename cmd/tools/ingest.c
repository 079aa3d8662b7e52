/* kvix_ingest: records into a live index, refusals counted, saves and
 * recoveries kept apart from the index's other users. See cmd/tools/ingest.h. */
#include "ingest.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvix/service.h"
#include "kvix/stream.h"
#include "ingest_int.h"

uint64_t ingest_tag(int type, size_t src, uint64_t pos)
{
    return (uint64_t)type << (TAG_POS_BITS + TAG_SRC_BITS) |
           (uint64_t)(src & 0xffff) << TAG_POS_BITS | (pos & ((UINT64_C(1) << TAG_POS_BITS) - 1));
}

/* from_source: the record came from a source whose submitted[] counts it;
 * the subscriptions' refusals are counted by their feed. */
void ingest_refuse(kvix_ingest *g, const char *what, size_t src, uint64_t pos, int type,
                   int from_source, const kvix_err *e)
{
    int reason = e->reason >= 0 && e->reason < KVIX_REASON_COUNT ? e->reason : KVIX_REASON_OTHER;
    pthread_mutex_lock(&g->mu);
    if (g->o.on_reject) {
        kvix_ingest_reject r = {what, src < g->o.nsources ? g->o.sources[src] : "?", pos, type, e};
        g->o.on_reject(g->o.ctx, &r);
    }
    g->c.rejected++;
    g->c.reasons[reason]++;
    if (g->svc)
        kvix_service_note_event(g->svc, type, reason);
    if (from_source && type >= 0 && type <= KVIX_EV_QUERY)
        g->c.refused[type]++;
    if (g->o.strict) {
        __atomic_store_n(&g->stopped, 1, __ATOMIC_RELEASE);
        if (g->feed) /* nothing after the first refused event, as with a source */
            kvix_enginefeed_halt(g->feed);
        /* the caller may be waiting: a refusal on the subscriptions' or a
         * writer's thread must wake it */
        if (g->o.on_wake)
            g->o.on_wake(g->o.ctx);
    }
    pthread_mutex_unlock(&g->mu);
}

/* On a writer thread (kvix_index_submit). */
static void index_reject(void *ctx, uint64_t tag, const kvix_err *e)
{
    kvix_ingest *g = ctx;
    int type = (int)(tag >> (TAG_POS_BITS + TAG_SRC_BITS));
    size_t src = (size_t)(tag >> TAG_POS_BITS) & 0xffff;
    uint64_t pos = tag & ((UINT64_C(1) << TAG_POS_BITS) - 1);
    ingest_refuse(g, "event", src, pos, type, !g->feed || src != g->o.feed_source, e);
}

int kvix_ingest_new(kvix_ingest **out, const kvix_ingest_opts *opts, kvix_err *err)
{
    *out = NULL;
    if (opts->nsources > KVIX_INGEST_SOURCES_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%zu sources (limit %d)", opts->nsources,
                            KVIX_INGEST_SOURCES_MAX);
    kvix_ingest *g = calloc(1, sizeof *g);
    if (!g)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    g->o = *opts;
    if (g->o.query_only)
        g->o.index.threads = 0;
    g->o.index.on_reject = index_reject;
    g->o.index.reject_ctx = g;
    int rc = kvix_index_new(&g->idx, &g->o.index, err);
    if (rc) {
        free(g);
        return rc;
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_mutex_init(&g->write_mu, NULL);
    kvix_event_init(&g->ev);
    kvix_answer_init(&g->ans);
    kvix_buf_init(&g->out);
    *out = g;
    return KVIX_OK;
}

void kvix_ingest_free(kvix_ingest *g)
{
    if (!g)
        return;
    if (g->svc) {
        if (g->svc_held) /* our own write section: the requests waiting on it may end */
            kvix_index_write_end(g->idx);
        kvix_service_shutdown(g->svc, 1000);
        kvix_service_free(g->svc);
    }
    if (g->feed) {
        kvix_enginefeed_stop(g->feed, NULL);
        kvix_enginefeed_free(g->feed);
    }
    kvix_index_free(g->idx);
    for (size_t i = 0; i < g->nunknown; i++)
        free(g->unknown[i]);
    free(g->unknown);
    kvix_event_release(&g->ev);
    kvix_answer_release(&g->ans);
    if (g->xp)
        kvix_explain_release(g->xp);
    free(g->xp);
    kvix_buf_release(&g->out);
    pthread_mutex_destroy(&g->mu);
    pthread_mutex_destroy(&g->write_mu);
    free(g);
}

kvix_index *kvix_ingest_index(kvix_ingest *g)
{
    return g->idx;
}

kvix_enginefeed *kvix_ingest_feed(kvix_ingest *g)
{
    return g->feed;
}

void kvix_ingest_rebase(kvix_ingest *g)
{
    kvix_index_totals(g->idx, &g->base);
}

int kvix_ingest_reset(kvix_ingest *g, kvix_err *err)
{
    kvix_ingest_sync(g);
    kvix_index *idx;
    int rc = kvix_index_new(&idx, &g->o.index, err);
    if (rc)
        return rc;
    kvix_index_free(g->idx);
    g->idx = idx;
    kvix_ingest_rebase(g);
    g->dirty = 1;
    return KVIX_OK;
}

/* ---- writers ---------------------------------------------------------------- */

/* The subscriptions' thread writes the index too: every writer takes
 * write_mu (cmd/tools/enginefeed.h), and so does whatever needs it quiet. */
static void lock_writes(kvix_ingest *g)
{
    if (g->feed)
        pthread_mutex_lock(&g->write_mu);
}

static void unlock_writes(kvix_ingest *g)
{
    if (g->feed)
        pthread_mutex_unlock(&g->write_mu);
}

void kvix_ingest_sync(kvix_ingest *g)
{
    if (g->o.index.threads) {
        lock_writes(g);
        kvix_index_sync(g->idx);
        unlock_writes(g);
    }
}

/* Every writer (the feed's too) held and synced: for a save, a replace, the
 * counters. */
static void quiet_begin(kvix_ingest *g)
{
    lock_writes(g);
    if (g->o.index.threads)
        kvix_index_sync(g->idx);
}

static void quiet_end(kvix_ingest *g)
{
    unlock_writes(g);
}

/* ---- records ------------------------------------------------------------------ */

/* Every query line gets one answer line (contract section 4), so a
 * coprocess reading the answers never waits for one that will not come: a
 * refused query, or a line whose kind could not be told, is answered with
 * its error. With query_only every line is a query. */
static int answer_error(kvix_ingest *g, const kvix_event *ev, const kvix_err *e, kvix_buf *out,
                        kvix_err *err)
{
    out->len = 0;
    if (!g->o.query_only && ev->type != KVIX_EV_QUERY && ev->type != KVIX_EV_NONE)
        return KVIX_OK;
    return kvix_error_to_json(ev->type == KVIX_EV_QUERY && ev->has_id ? ev->id : NULL, e->msg,
                              out, err);
}

/* 1 when (model, tenant) of an unknown answer was not asked for before. */
static int first_unknown(kvix_ingest *g, const kvix_event *q, int why, kvix_err *err)
{
    char key[2 * KVIX_NAME_MAX + 1];
    snprintf(key, sizeof key, "%s\t%s", q->model, why == KVIX_UNKNOWN_MODEL ? "" : q->tenant);
    for (size_t i = 0; i < g->nunknown; i++)
        if (strcmp(g->unknown[i], key) == 0)
            return 0;
    if (g->nunknown == KVIX_INGEST_UNKNOWN_MAX)
        return 0;
    char **v = realloc(g->unknown, (g->nunknown + 1) * sizeof *v);
    if (v)
        g->unknown = v;
    char *dup = v ? strdup(key) : NULL;
    if (!dup)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    v[g->nunknown++] = dup;
    return 1;
}

/* q answered and explained, the index quiet meanwhile (every writer of it
 * held: this thread is the only other one). */
static int explain(kvix_ingest *g, const kvix_event *q, kvix_answer *ans, kvix_buf *out,
                   kvix_err *err)
{
    if (!g->xp && (g->xp = malloc(sizeof *g->xp)))
        kvix_explain_init(g->xp);
    if (!g->xp)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    quiet_begin(g);
    int rc = kvix_index_explain(g->idx, q, ans, g->xp, err);
    quiet_end(g);
    if (!rc) {
        out->len = 0;
        rc = kvix_answer_explain_to_json(ans, q, g->xp, out, err);
    }
    return rc;
}

static int query(kvix_ingest *g, size_t src, uint64_t pos, const kvix_event *q, kvix_answer *ans,
                 kvix_buf *out, int *unknown, kvix_err *err)
{
    g->c.queries++;
    kvix_ingest_sync(g); /* answer against every event read before the query */
    int rc;
    if (q->explain || g->o.explain) {
        rc = explain(g, q, ans, out, err);
    } else {
        rc = kvix_index_query_event(g->idx, q, ans, err);
        if (!rc) {
            out->len = 0;
            rc = kvix_answer_to_json(ans, q, out, err);
        }
    }
    if (rc == KVIX_ENOMEM)
        return rc;
    if (rc) {
        ingest_refuse(g, "query", src, pos, KVIX_EV_QUERY, 1, err);
        kvix_err e = *err;
        return answer_error(g, q, &e, out, err);
    }
    if (ans->unknown) {
        rc = first_unknown(g, q, ans->unknown, err);
        if (rc < 0)
            return rc;
        if (rc && unknown)
            *unknown = ans->unknown;
    }
    g->c.answered++;
    return KVIX_OK;
}

static int apply(kvix_ingest *g, size_t src, uint64_t pos, const kvix_event *ev, kvix_buf *out,
                 kvix_err *err)
{
    g->c.submitted[ev->type]++;
    if (g->o.query_only) {
        kvix_err e;
        kvix_err_set_reason(&e, KVIX_EINVAL, KVIX_REASON_QUERYONLY, "event in query-only mode (-q)");
        ingest_refuse(g, "event", src, pos, ev->type, 1, &e);
        return answer_error(g, ev, &e, out, err);
    }
    if (g->svc)
        kvix_service_note_event(g->svc, ev->type, -1);
    if (g->svc && !g->svc_held)
        kvix_index_write_begin(g->idx);
    lock_writes(g);
    int rc;
    if (g->o.index.threads)
        rc = kvix_index_submit(g->idx, ev, ingest_tag(ev->type, src, pos), err);
    else
        rc = kvix_index_apply(g->idx, ev, NULL, err);
    unlock_writes(g);
    if (g->svc && !g->svc_held)
        kvix_index_write_end(g->idx);
    if (rc == KVIX_ENOMEM || rc == KVIX_ESYS)
        return rc;
    if (rc && !g->o.index.threads) { /* with threads, index_reject has reported it */
        ingest_refuse(g, "event", src, pos, ev->type, 1, err);
        return KVIX_OK;
    }
    g->dirty = 1;
    __atomic_add_fetch(&g->since_save, 1, __ATOMIC_RELAXED);
    return KVIX_OK;
}

int kvix_ingest_take(kvix_ingest *g, size_t source, uint64_t pos, const kvix_event *ev,
                     const kvix_err *refused, kvix_answer *ans, kvix_buf *out, int *unknown,
                     kvix_err *err)
{
    out->len = 0;
    if (unknown)
        *unknown = 0;
    g->c.records++;
    if (refused) {
        kvix_err e = *refused;
        ingest_refuse(g, "event", source, pos, -1, 1, &e);
        return answer_error(g, ev, &e, out, err);
    }
    if (ev->type == KVIX_EV_QUERY)
        return query(g, source, pos, ev, ans, out, unknown, err);
    return apply(g, source, pos, ev, out, err);
}

void kvix_ingest_refuse(kvix_ingest *g, int message, size_t source, uint64_t pos,
                        const kvix_err *why)
{
    g->c.records += !message;
    ingest_refuse(g, message ? "message" : "event", source, pos, -1, 1, why);
}

void kvix_ingest_message_begin(kvix_ingest *g)
{
    /* GET /snapshot pairs a state only with the sequence of the last
     * message wholly in it: the writers' side is held across a message */
    if (g->svc && !g->svc_held) {
        kvix_index_write_begin(g->idx);
        g->svc_held = 1;
    }
}

void kvix_ingest_message_end(kvix_ingest *g, uint64_t seq)
{
    if (g->svc_held) {
        kvix_service_set_stream_seq(g->svc, seq);
        g->svc_held = 0;
        kvix_index_write_end(g->idx);
    }
    g->dirty = 1;
}

int kvix_ingest_stopped(kvix_ingest *g)
{
    /* asked before every record: no lock (set once, under mu) */
    return __atomic_load_n(&g->stopped, __ATOMIC_ACQUIRE);
}

uint64_t kvix_ingest_records(const kvix_ingest *g)
{
    return g->c.records;
}

uint64_t kvix_ingest_rejected(kvix_ingest *g)
{
    pthread_mutex_lock(&g->mu);
    uint64_t n = g->c.rejected;
    pthread_mutex_unlock(&g->mu);
    return n;
}

void kvix_ingest_counts_get(kvix_ingest *g, kvix_ingest_counts *c)
{
    quiet_begin(g);
    pthread_mutex_lock(&g->mu);
    *c = g->c;
    pthread_mutex_unlock(&g->mu);
    kvix_apply_result tot;
    kvix_index_totals(g->idx, &tot);
    quiet_end(g);
    c->blocks.stored = tot.stored - g->base.stored;
    c->blocks.duplicate = tot.duplicate - g->base.duplicate;
    c->blocks.removed = tot.removed - g->base.removed;
    c->blocks.unknown = tot.unknown - g->base.unknown;
    c->blocks.skipped = tot.skipped - g->base.skipped;
    c->blocks.kept = tot.kept - g->base.kept;
}

/* ---- reading a source ------------------------------------------------------- */

static void drain(int fd)
{
    char b[64];
    while (fd >= 0 && read(fd, b, sizeof b) > 0)
        ;
}

int kvix_ingest_run(kvix_ingest *g, kvix_reader *r, size_t source, const kvix_ingest_loop *lp,
                    kvix_err *err)
{
    kvix_event *ev = &g->ev;
    kvix_buf *out = &g->out;
    int stopping = 0;
    for (;;) {
        if (lp->between)
            lp->between(lp->ctx);
        if (kvix_ingest_stopped(g))
            return KVIX_OK;
        if (!stopping && lp->stopping && lp->stopping(lp->ctx)) {
            /* apply what was already taken from the input, read nothing more */
            kvix_reader_stop(r);
            stopping = 1;
        }
        int rc = kvix_reader_next(r, ev, err);
        if (rc == KVIX_EOF || rc == KVIX_EIO || rc == KVIX_ENOMEM)
            return rc;
        if (rc == KVIX_ESYS) { /* woken: the caller's flags are seen above */
            drain(lp->wake_fd);
            continue;
        }
        kvix_err e;
        int unknown;
        int fatal = kvix_ingest_take(g, source, kvix_reader_pos(r), ev, rc ? err : NULL, &g->ans,
                                     out, &unknown, &e);
        if (fatal) {
            *err = e;
            return fatal;
        }
        if (unknown && lp->on_unknown)
            lp->on_unknown(lp->ctx, source, kvix_reader_pos(r), ev, unknown);
        if (out->len && lp->on_answer)
            lp->on_answer(lp->ctx, out->data, out->len);
    }
}

/* ---- saves -------------------------------------------------------------------- */

/* The subscriptions' events applied, and applied or refused: the latter is
 * a change of the index since the last save when it moved. */
static uint64_t feed_count(kvix_ingest *g, int with_refused)
{
    if (!g->feed)
        return 0;
    kvix_enginefeed_counts c;
    kvix_enginefeed_counts_get(g->feed, &c);
    return c.applied + (with_refused ? c.rejected : 0);
}

/* Any thread: the subscriptions' asks with its own count. */
int ingest_due(kvix_ingest *g, uint64_t fed_applied)
{
    return g->o.save_every_events &&
           __atomic_load_n(&g->since_save, __ATOMIC_RELAXED) + fed_applied -
                   __atomic_load_n(&g->fed_applied_at_save, __ATOMIC_RELAXED) >=
               g->o.save_every_events;
}

int kvix_ingest_save_due(kvix_ingest *g)
{
    /* the feed's counts take its lock: only asked when the option is set */
    return g->o.save_every_events && ingest_due(g, feed_count(g, 0));
}

int kvix_ingest_changed(kvix_ingest *g)
{
    return g->dirty || feed_count(g, 1) != g->fed_at_save ||
           (g->feed && kvix_enginesub_changes(kvix_enginefeed_sub(g->feed)) != g->subs_at_save);
}

static double seconds(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int kvix_ingest_save(kvix_ingest *g, const char *path, const char *stream, uint64_t seq,
                     kvix_snapshot_info *info, kvix_err *err)
{
    if (g->svc_held) /* mid-message: a half message has no sequence; the stream keeps the rest */
        return 1;
    kvix_snapshot_info tmp;
    double t0 = seconds(CLOCK_MONOTONIC);
    /* POST /register's subscriptions go with the index they feed
     * (kvix-snapshot(5), EXTENSIONS, record 65), so a restart resubscribes
     * them; a file without any is as before */
    kvix_buf regs;
    kvix_buf_init(&regs);
    size_t nregs = 0;
    uint64_t subs = g->feed ? kvix_enginesub_changes(kvix_enginefeed_sub(g->feed)) : 0;
    int rc = g->feed ? kvix_service_registrations_encode(kvix_enginefeed_sub(g->feed), &regs,
                                                         &nregs, err)
                     : KVIX_OK;
    if (rc) {
        kvix_buf_release(&regs);
        return rc;
    }
    kvix_snapshot_ext ext = {KVIX_SNAPSHOT_EXT_REGISTRATIONS, 0, regs.data, regs.len};
    kvix_snapshot_save_opts so = {stream, seq, nregs ? &ext : NULL, nregs ? 1 : 0};
    uint64_t fed, fed_applied, since;
    if (stream) {
        /* one state for one stream sequence: every writer held throughout */
        if (g->svc)
            kvix_index_quiet_begin(g->idx);
        quiet_begin(g);
        since = __atomic_load_n(&g->since_save, __ATOMIC_RELAXED);
        rc = kvix_snapshot_save_with(g->idx, path, &so, info ? info : &tmp, err);
        fed = feed_count(g, 1), fed_applied = feed_count(g, 0);
        quiet_end(g);
        if (g->svc)
            kvix_index_quiet_end(g->idx);
    } else {
        /* What was submitted so far goes in; then the writers go on while
         * the save reads one (worker, dp) at a time (kvix_snapshot_save):
         * what they apply meanwhile may be in this save or the next. */
        kvix_ingest_sync(g);
        since = __atomic_load_n(&g->since_save, __ATOMIC_RELAXED);
        fed = feed_count(g, 1), fed_applied = feed_count(g, 0);
        rc = kvix_snapshot_save_with(g->idx, path, &so, info ? info : &tmp, err);
    }
    kvix_buf_release(&regs);
    if (rc)
        return rc;
    if (g->svc)
        kvix_service_note_save(g->svc, seconds(CLOCK_MONOTONIC) - t0, seconds(CLOCK_REALTIME));
    g->dirty = 0;
    g->fed_at_save = fed;
    g->subs_at_save = subs;
    __atomic_store_n(&g->fed_applied_at_save, fed_applied, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&g->since_save, since, __ATOMIC_RELAXED);
    __atomic_store_n(&g->save_woken, 0, __ATOMIC_RELAXED);
    return KVIX_OK;
}

int kvix_ingest_replace(kvix_ingest *g, kvix_snapshot *s, uint64_t seq, kvix_err *err)
{
    if (g->svc)
        kvix_index_quiet_begin(g->idx);
    quiet_begin(g);
    int rc = kvix_snapshot_replace(s, g->idx, err);
    quiet_end(g);
    if (g->svc) {
        kvix_service_set_stream_seq(g->svc, seq);
        kvix_index_quiet_end(g->idx);
    }
    if (rc)
        return rc;
    kvix_ingest_rebase(g);
    g->dirty = 1;
    return KVIX_OK;
}

