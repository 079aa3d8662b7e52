/* A whole snapshot as the events that rebuild it (kvdump's dump):
 * kvix_snapshot_events, and which records a dump, statistics or a diff
 * look at (kvix/snapshot.h). */
#include "kvix/snapshot.h"

#include <string.h>

int kvix_snapshot_group_is_partition(const kvix_snapshot_group *g)
{
    return g->worker == UINT64_MAX && g->n == 0 && !g->has_eid;
}

int kvix_snapshot_filter_match(const kvix_snapshot_filter *f, const kvix_snapshot_group *g)
{
    if (!f)
        return 1;
    if (f->model && strcmp(f->model, g->model) != 0)
        return 0;
    if (f->tenant && strcmp(f->tenant, g->tenant) != 0)
        return 0;
    return !f->has_worker || f->worker == g->worker;
}

/* Events go out one behind, so that a record's last one can carry its eid:
 * replaying the dump restores it. */
typedef struct dumper {
    kvix_snapshot_event_fn fn;
    void *ctx;
    kvix_event pending;
    int have_pending;
    kvix_err *err;
} dumper;

static int send_pending(dumper *d)
{
    int rc = d->have_pending ? d->fn(d->ctx, &d->pending) : 0;
    d->have_pending = 0;
    return rc;
}

static int hold(void *ctx, const kvix_event *ev)
{
    dumper *d = ctx;
    int rc = send_pending(d);
    if (!rc)
        rc = kvix_event_copy(&d->pending, ev, d->err);
    d->have_pending = !rc;
    return rc;
}

/* One record's events, its eid on the last. */
static int record_events(dumper *d, const kvix_snapshot_group *g, kvix_event *scratch)
{
    int rc = kvix_snapshot_group_events(g, scratch, hold, d, NULL, d->err);
    if (rc)
        return rc;
    if (g->has_eid && !d->have_pending) {
        /* Nothing stored, but an eid to restore: a clear is a no-op on an
         * empty worker and carries it. */
        kvix_event *ev = &d->pending;
        kvix_event_reset(ev);
        ev->type = KVIX_EV_CLEARED;
        ev->worker = g->worker;
        ev->dp = g->dp;
        ev->bs = g->bs; /* the first of its partition makes it */
        if ((rc = kvix_event_set_name(ev->model, g->model, strlen(g->model), d->err)) ||
            (rc = kvix_event_set_name(ev->tenant, g->tenant, strlen(g->tenant), d->err)))
            return rc;
        d->have_pending = 1;
    }
    if (g->has_eid) {
        d->pending.has_eid = 1;
        d->pending.eid = g->eid;
    }
    return send_pending(d);
}

int kvix_snapshot_events(kvix_snapshot *s, const kvix_snapshot_filter *f,
                         kvix_snapshot_event_fn fn, void *ctx, uint64_t *matched,
                         kvix_err *err)
{
    dumper d = {.fn = fn, .ctx = ctx, .err = err};
    kvix_event scratch;
    kvix_event_init(&d.pending);
    kvix_event_init(&scratch);
    kvix_snapshot_group g;
    uint64_t hits = 0;
    int rc;
    kvix_snapshot_rewind(s);
    while ((rc = kvix_snapshot_next(s, &g, err)) == KVIX_OK) {
        if (!kvix_snapshot_filter_match(f, &g))
            continue;
        hits++;
        if (!kvix_snapshot_group_is_partition(&g) && (rc = record_events(&d, &g, &scratch)))
            break;
    }
    if (rc == KVIX_EOF)
        rc = KVIX_OK;
    if (matched)
        *matched = hits;
    kvix_event_release(&d.pending);
    kvix_event_release(&scratch);
    return rc;
}
