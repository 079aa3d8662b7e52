/* Which records a replay keeps: see cmd/tools/filter.h. */
#include "filter.h"

#include <string.h>

void kvix_filter_init(kvix_filter *f)
{
    memset(f, 0, sizeof *f);
}

int kvix_filter_worker_add(kvix_filter *f, uint64_t worker, uint32_t dp, int any_dp,
                           kvix_err *err)
{
    if (f->nworkers == KVIX_FILTER_WORKERS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "at most %d worker filters",
                            KVIX_FILTER_WORKERS_MAX);
    f->workers[f->nworkers++] = (kvix_filter_worker){worker, dp, !!any_dp, 0};
    return KVIX_OK;
}

static int matches(const kvix_filter_worker *w, uint64_t worker, uint32_t dp)
{
    return w->worker == worker && (w->any_dp || w->dp == dp);
}

int kvix_filter_worker_match(const kvix_filter *f, uint64_t worker, uint32_t dp)
{
    if (f->nworkers == 0)
        return 1;
    for (size_t i = 0; i < f->nworkers; i++)
        if (matches(&f->workers[i], worker, dp))
            return 1;
    return 0;
}

static double bound(const kvix_filter *f, const kvix_filter_time *b)
{
    return b->relative ? f->first_ts + b->v : b->v;
}

static int keep_time(kvix_filter *f, const kvix_event *ev)
{
    if (ev->has_ts) {
        f->last_ts = ev->ts;
        f->have_last_ts = 1;
    }
    if (!f->have_last_ts)
        return 1;
    double ts = f->last_ts;
    if (f->since.set && ts < bound(f, &f->since))
        return 0;
    if (f->until.set && ts > bound(f, &f->until))
        return 0;
    return 1;
}

int kvix_filter_keep(kvix_filter *f, const kvix_event *ev)
{
    if (ev->has_ts && !f->have_first_ts) {
        f->have_first_ts = 1;
        f->first_ts = ev->ts;
    }
    int kept;
    if (ev->type == KVIX_EV_QUERY)
        kept = !f->no_queries;
    else
        kept = kvix_filter_worker_match(f, ev->worker, ev->dp) &&
               !(ev->has_eid && ((f->has_since_eid && ev->eid < f->since_eid) ||
                                 (f->has_until_eid && ev->eid > f->until_eid)));
    if (!keep_time(f, ev) || !kept)
        return 0;
    for (size_t i = 0; i < f->nworkers && ev->type != KVIX_EV_QUERY; i++)
        if (matches(&f->workers[i], ev->worker, ev->dp))
            f->workers[i].hits++;
    return 1;
}

int kvix_filter_active(const kvix_filter *f)
{
    return f->since.set || f->until.set || f->has_since_eid || f->has_until_eid ||
           f->nworkers || f->no_queries;
}
