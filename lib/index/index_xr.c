/* The record of recent removals (explain, kvix/index.h): per (worker, dp),
 * the last blocks it dropped and the events that dropped them, so a query
 * that stops at a block the worker held a moment ago can say when and how
 * it went.
 *
 * Bounded and off the store path: a ring of kvix_index_opts.removals block
 * entries (position and canonical hash, 16 bytes) and a quarter as many
 * event entries (the event's eid, ts, the index's clock, its kind), made on
 * the (worker, dp)'s first removal and written only by its removals and
 * clears, by its own writer. A clear writes one event entry, not its
 * blocks. Read only on a quiet index (kvix_index_explain), so nothing here
 * is atomic. Out of memory, a removal goes unrecorded: the record is a
 * diagnosis, never the index's truth. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "index_front_int.h"

static uint32_t ring_events(uint32_t nb)
{
    return nb / 4 > 4 ? nb / 4 : 4;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* w's ring, made on first need (NULL: the record is off, or no memory). */
static xr *ring_of(wstate *w)
{
    if (w->xr)
        return w->xr;
    uint32_t nb = w->p->opts->removals;
    if (!nb)
        return NULL;
    uint32_t ne = ring_events(nb);
    xr *r = calloc(1, sizeof *r + nb * sizeof(xr_blk) + ne * sizeof(xr_evt));
    if (!r)
        return NULL;
    r->nb = nb;
    r->ne = ne;
    r->ev = (xr_evt *)(void *)(r->b + nb);
    r->cur = r->ev;
    w->xr = r;
    return r;
}

int kvix__ix_xr_event(wstate *w, const kvix_event *ev, int kind, uint32_t blocks)
{
    xr *r = ring_of(w);
    if (!r)
        return -1;
    xr_evt *e = &r->ev[r->evn % r->ne];
    *e = (xr_evt){ev && ev->has_ts ? ev->ts : 0, ev && ev->has_eid ? ev->eid : 0, wall_now(),
                  r->evn, blocks, (uint8_t)kind, ev && ev->has_eid, ev && ev->has_ts};
    r->cur = e;
    r->evn++;
    return 0;
}

/* Event entry number evn, if the ring still holds it. */
static const xr_evt *event_at(const xr *r, uint32_t evn)
{
    const xr_evt *e = &r->ev[evn % r->ne];
    return r->evn - evn <= r->ne && e->evn == evn ? e : NULL;
}

int kvix__ix_xr_find(const wstate *w, uint32_t pos, uint64_t canon, xr_evt *out, int *known)
{
    const xr *r = w->xr;
    if (!r)
        return 0;
    uint64_t n = r->bn < r->nb ? r->bn : r->nb;
    for (uint64_t k = 1; k <= n; k++) { /* the latest first: bpos is bn % nb */
        const xr_blk *b = &r->b[(r->bpos + r->nb - k) % r->nb];
        if (b->pos != pos || b->canon != canon)
            continue;
        const xr_evt *e = event_at(r, b->evn);
        *known = e != NULL;
        if (e)
            *out = *e;
        return 1;
    }
    return 0;
}

int kvix__ix_xr_last_clear(const wstate *w, xr_evt *out)
{
    const xr *r = w->xr;
    if (!r)
        return 0;
    uint32_t n = r->evn < r->ne ? r->evn : r->ne;
    for (uint32_t k = 1; k <= n; k++) {
        const xr_evt *e = &r->ev[(r->evn - k) % r->ne];
        if (e->kind == KVIX_EV_CLEARED) {
            *out = *e;
            return 1;
        }
    }
    return 0;
}

void kvix__ix_xr_free(wstate *w)
{
    free(w->xr);
    w->xr = NULL;
}

size_t kvix__ix_xr_memory(const wstate *w)
{
    const xr *r = w->xr;
    return r ? sizeof *r + r->nb * sizeof(xr_blk) + r->ne * sizeof(xr_evt) : 0;
}
