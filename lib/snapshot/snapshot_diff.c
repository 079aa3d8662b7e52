/* The differences between two snapshot files (kvix/snapshot_diff.h): both
 * are walked once, side by side, in their common key order; a record's
 * blocks are sorted the same way in both, so one merge finds what only one
 * side holds. */
#include "kvix/snapshot_diff.h"

#include <stdlib.h>
#include <string.h>

typedef struct side {
    kvix_snapshot *s;
    kvix_snapshot_group g;
    int more;
    kvix_block_info *only; /* scratch: blocks of this side not in the other */
    size_t n, cap;
} side;

static int side_next(side *x, kvix_err *err)
{
    int rc = kvix_snapshot_next(x->s, &x->g, err);
    x->more = rc == KVIX_OK;
    return rc == KVIX_EOF ? KVIX_OK : rc;
}

static int cmp_key(const kvix_snapshot_group *a, const kvix_snapshot_group *b)
{
    int c = strcmp(a->model, b->model);
    if (!c)
        c = strcmp(a->tenant, b->tenant);
    if (c)
        return c;
    if (a->worker != b->worker)
        return a->worker < b->worker ? -1 : 1;
    if (a->dp != b->dp)
        return a->dp < b->dp ? -1 : 1;
    return 0;
}

#define CMP_FIELD(f)                                                                          \
    if (a->f != b->f)                                                                          \
    return a->f < b->f ? -1 : 1

static int cmp_block(const kvix_block_info *a, const kvix_block_info *b)
{
    CMP_FIELD(position);
    CMP_FIELD(engine);
    CMP_FIELD(local);
    CMP_FIELD(parent);
    CMP_FIELD(parent_canon);
    CMP_FIELD(tiers);
    return 0;
}

/* x->only = blocks of x's record (x absent: none) not in other's (NULL:
 * none), both sorted by cmp_block's order. */
static int only_in(side *x, const kvix_snapshot_group *mine, const kvix_snapshot_group *other)
{
    size_t na = mine ? mine->n : 0, nb = other ? other->n : 0, i = 0, j = 0;
    x->n = 0;
    if (na > x->cap) {
        kvix_block_info *v = realloc(x->only, na * sizeof *v);
        if (!v)
            return KVIX_ENOMEM;
        x->only = v;
        x->cap = na;
    }
    while (i < na) {
        int c = j < nb ? cmp_block(&mine->blocks[i], &other->blocks[j]) : -1;
        if (c < 0)
            x->only[x->n++] = mine->blocks[i++];
        else if (c > 0)
            j++;
        else
            i++, j++;
    }
    return KVIX_OK;
}

/* Compare one key present in a, b or both. */
static int diff_key(side *sa, side *sb, const kvix_snapshot_group *a,
                    const kvix_snapshot_group *b, kvix_snapshot_delta_fn fn, void *ctx,
                    kvix_snapshot_diff_totals *t, kvix_err *err)
{
    int same_bs = a && b && a->bs == b->bs;
    if (only_in(sa, a, same_bs ? b : NULL) || only_in(sb, b, same_bs ? a : NULL))
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    int eid_same = a && b && a->has_eid == b->has_eid && (!a->has_eid || a->eid == b->eid);
    if (same_bs && eid_same && sa->n == 0 && sb->n == 0)
        return 0;
    t->differing++;
    t->only_a += sa->n;
    t->only_b += sb->n;
    if (!fn)
        return 0;
    kvix_snapshot_delta d = {a, b, sa->only, sb->only, sa->n, sb->n};
    return fn(ctx, &d);
}

static int walk(side *a, side *b, kvix_snapshot_delta_fn fn, void *ctx,
                kvix_snapshot_diff_totals *t, kvix_err *err)
{
    int rc;
    if ((rc = side_next(a, err)) || (rc = side_next(b, err)))
        return rc;
    while (a->more || b->more) {
        int c = !a->more ? 1 : !b->more ? -1 : cmp_key(&a->g, &b->g);
        rc = diff_key(a, b, c <= 0 ? &a->g : NULL, c >= 0 ? &b->g : NULL, fn, ctx, t, err);
        if (rc)
            return rc;
        if (c <= 0 && (rc = side_next(a, err)))
            return rc;
        if (c >= 0 && (rc = side_next(b, err)))
            return rc;
    }
    return 0;
}

int kvix_snapshot_diff(kvix_snapshot *a, kvix_snapshot *b, kvix_snapshot_delta_fn fn,
                       void *ctx, kvix_snapshot_diff_totals *t, kvix_err *err)
{
    memset(t, 0, sizeof *t);
    kvix_snapshot_rewind(a);
    kvix_snapshot_rewind(b);
    side sa = {.s = a}, sb = {.s = b};
    int rc = walk(&sa, &sb, fn, ctx, t, err);
    free(sa.only);
    free(sb.only);
    return rc;
}
