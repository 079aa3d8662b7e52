/* Statistics of a snapshot file (kvix/snapshot_stats.h). Counts come from
 * the records; memory and unique blocks from an index the records are loaded
 * into, as kvix_snapshot_apply loads them, so they are the index's own
 * figures (kvix_index_stats) and never a model of it kept here. */
#include "kvix/snapshot_stats.h"

#include <stdlib.h>
#include <string.h>

#include "index_front_int.h"
#include "snapshot_int.h"

void kvix_snapshot_stats_release(kvix_snapshot_stats *st)
{
    for (size_t i = 0; i < st->n; i++) {
        free(st->rows[i].model);
        free(st->rows[i].tenant);
    }
    free(st->rows);
    memset(st, 0, sizeof *st);
}

typedef struct gather {
    kvix_snapshot_stats *st;
    kvix_index_opts opts;
    kvix_index *idx;         /* every counted record */
    size_t part;             /* the current partition's row, or SIZE_MAX */
    kvix_index_stats before; /* idx before the current partition */
    uint64_t empty_part;     /* bytes of an index holding only the current partition, empty */
    kvix_event scratch;
    kvix_err *err;
    size_t *up;              /* a record's parent indexes */
    size_t up_cap;
    kvix_ix_chain *nodes;    /* kvix__ix_load_group's */
    size_t nodes_cap;
    size_t sized;            /* the partition whose tables idx sized (kvix__snap_part_no) */
} gather;

static kvix_snapshot_row *add_row(gather *x, const kvix_snapshot_group *g)
{
    kvix_snapshot_stats *st = x->st;
    if (st->n == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 64;
        kvix_snapshot_row *r = realloc(st->rows, cap * sizeof *r);
        if (!r)
            return NULL;
        st->rows = r;
        st->cap = cap;
    }
    kvix_snapshot_row *r = &st->rows[st->n];
    memset(r, 0, sizeof *r);
    r->model = strdup(g->model);
    r->tenant = strdup(g->tenant);
    if (!r->model || !r->tenant) {
        free(r->model);
        free(r->tenant);
        return NULL;
    }
    r->bs = g->bs;
    st->n++;
    return r;
}

/* Load g into idx exactly as kvix_snapshot_apply does: each block's parent
 * known (its order, by position, puts parents first), and the partition's
 * tables sized at its first block (reserve: that count, or 0). */
static int load(gather *x, kvix_index *idx, const kvix_snapshot_group *g, size_t reserve)
{
    if (g->n > x->up_cap) {
        size_t *u = realloc(x->up, g->n * sizeof *u);
        if (!u)
            return kvix_err_set(x->err, KVIX_ENOMEM, "out of memory for %zu blocks", g->n);
        x->up = u;
        x->up_cap = g->n;
    }
    char why[160];
    if (kvix__snap_check_blocks(g->blocks, g->n, x->up, why, sizeof why)) /* verified: never */
        return kvix_err_set(x->err, KVIX_ECORRUPT, "%s", why);
    return kvix__ix_load_group(idx, g->model, g->tenant, g->bs, g->worker, g->dp, g->has_eid,
                              g->eid, g->blocks, x->up, g->n, reserve, &x->nodes, &x->nodes_cap,
                              x->err);
}

/* Bytes of a new index holding g alone (g with worker UINT64_MAX and no
 * blocks: only its partition). */
static int bytes_alone(gather *x, const kvix_snapshot_group *g, uint64_t *out)
{
    kvix_index *idx;
    int rc = kvix_index_new(&idx, &x->opts, x->err);
    if (rc)
        return rc;
    rc = load(x, idx, g, 0);
    if (!rc) {
        kvix_index_stats s;
        kvix_index_stats_get(idx, &s);
        *out = s.bytes;
    }
    kvix_index_free(idx);
    return rc;
}

static void close_part(gather *x)
{
    if (x->part == SIZE_MAX)
        return;
    kvix_index_stats now;
    kvix_index_stats_get(x->idx, &now);
    kvix_snapshot_row *p = &x->st->rows[x->part];
    p->memory = now.bytes - x->before.bytes;
    p->unique = now.unique_blocks - x->before.unique_blocks;
}

static int open_part(gather *x, const kvix_snapshot_group *g)
{
    close_part(x);
    if (!add_row(x, g))
        return kvix_err_set(x->err, KVIX_ENOMEM, "out of memory");
    x->part = x->st->n - 1;
    x->st->rows[x->part].is_part = 1;
    kvix_index_stats_get(x->idx, &x->before);
    kvix_snapshot_group empty = *g;
    empty.worker = UINT64_MAX;
    empty.n = 0;
    empty.has_eid = 0;
    return bytes_alone(x, &empty, &x->empty_part);
}

static int count_only(void *ctx, const kvix_event *ev)
{
    (void)ctx, (void)ev;
    return 0;
}

static int add_worker(gather *x, const kvix_snapshot_group *g)
{
    size_t orphans = 0;
    int rc = kvix_snapshot_group_events(g, &x->scratch, count_only, NULL, &orphans, x->err);
    uint64_t alone = 0;
    if (!rc)
        rc = bytes_alone(x, g, &alone);
    if (rc)
        return rc;
    kvix_snapshot_row *r = add_row(x, g);
    if (!r)
        return kvix_err_set(x->err, KVIX_ENOMEM, "out of memory");
    r->worker = g->worker;
    r->dp = g->dp;
    r->has_eid = g->has_eid;
    r->eid = g->eid;
    r->blocks = g->n;
    r->has_depth = g->n > 0;
    r->depth = g->n ? g->blocks[g->n - 1].position : 0;
    for (size_t i = 0; i < g->n; i++)
        for (unsigned m = 0; m < KVIX_MEDIUM_COUNT; m++)
            r->tiers[m] += g->blocks[i].tiers >> m & 1;
    r->orphans = orphans;
    r->memory = alone - x->empty_part;
    kvix_snapshot_row *p = &x->st->rows[x->part]; /* after add_row: rows may move */
    p->orphans += orphans;
    p->workers++;
    p->blocks += g->n;
    if (r->has_depth && (!p->has_depth || r->depth > p->depth))
        p->depth = r->depth;
    p->has_depth |= r->has_depth;
    for (unsigned m = 0; m < KVIX_MEDIUM_COUNT; m++)
        p->tiers[m] += r->tiers[m];
    return KVIX_OK;
}

static int gather_all(gather *x, kvix_snapshot *s, const kvix_snapshot_filter *f)
{
    kvix_snapshot_group g;
    int rc;
    kvix_snapshot_rewind(s);
    while ((rc = kvix_snapshot_next(s, &g, x->err)) == KVIX_OK) {
        if (!kvix_snapshot_filter_match(f, &g))
            continue;
        x->st->matched++;
        const kvix_snapshot_row *p = x->part == SIZE_MAX ? NULL : &x->st->rows[x->part];
        if ((!p || strcmp(p->model, g.model) || strcmp(p->tenant, g.tenant)) &&
            (rc = open_part(x, &g)))
            return rc;
        size_t reserve = 0;
        if (g.n && x->sized != kvix__snap_part_no(s)) { /* as kvix_snapshot_apply sizes them */
            reserve = kvix__snap_load_reserve(s);
            x->sized = kvix__snap_part_no(s);
        }
        if ((rc = load(x, x->idx, &g, reserve)))
            return rc;
        if (!kvix_snapshot_group_is_partition(&g) && (rc = add_worker(x, &g)))
            return rc;
    }
    if (rc != KVIX_EOF)
        return rc;
    close_part(x);
    kvix_index_stats all;
    kvix_index_stats_get(x->idx, &all);
    x->st->memory = all.bytes;
    return KVIX_OK;
}

int kvix_snapshot_stats_get(kvix_snapshot *s, const kvix_snapshot_filter *f,
                            const kvix_index_opts *opts, kvix_snapshot_stats *out,
                            kvix_err *err)
{
    memset(out, 0, sizeof *out);
    gather x = {.st = out, .part = SIZE_MAX, .err = err};
    if (opts)
        x.opts = *opts;
    else
        kvix_index_opts_init(&x.opts);
    x.opts.threads = 0; /* loads run on this thread; no writer pool to size */
    x.opts.on_reject = NULL;
    int rc = kvix_index_new(&x.idx, &x.opts, err);
    if (rc)
        return rc;
    kvix_event_init(&x.scratch);
    rc = gather_all(&x, s, f);
    kvix_event_release(&x.scratch);
    free(x.up);
    free(x.nodes);
    kvix_index_free(x.idx);
    return rc;
}
