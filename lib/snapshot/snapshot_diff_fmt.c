/* Differences between two snapshots as kvdump --diff writes them: a JSON
 * line per differing record, then a summary (kvix/snapshot_diff.h). */
#include "kvix/snapshot_diff.h"

#include <inttypes.h>
#include <string.h>

#include "kvix/hash.h"
#include "kvix/snapshot_stats.h"
#include "dec64_int.h"
#include "json_text_int.h"

#define PUT_LIT(p, lit) (memcpy((p), (lit), sizeof(lit) - 1), (p) += sizeof(lit) - 1)

/* Most bytes one block takes: the keys, a u32, three quoted hex hashes and
 * every tier's name (at most 8 bytes each), with the comma before it. */
#define BLOCK_MAX 200

static char *put_hex(char *p, uint64_t v)
{
    *p++ = '"';
    kvix_hex64(v, p); /* and a NUL, overwritten next */
    p[16] = '"';
    return p + 17;
}

static char *put_block(char *p, const kvix_block_info *b, int first)
{
    if (!first)
        *p++ = ',';
    PUT_LIT(p, "{\"position\":");
    p += kvix_dec64_put(b->position, p);
    PUT_LIT(p, ",\"local\":");
    p = put_hex(p, b->local);
    PUT_LIT(p, ",\"seq\":");
    p = put_hex(p, b->engine);
    PUT_LIT(p, ",\"parent\":");
    if (b->position)
        p = put_hex(p, b->parent);
    else
        PUT_LIT(p, "null");
    PUT_LIT(p, ",\"tiers\":[");
    int k = 0;
    for (unsigned m = 0; m < KVIX_MEDIUM_COUNT; m++) {
        if (!(b->tiers >> m & 1))
            continue;
        if (k++)
            *p++ = ',';
        const char *name = kvix_medium_name((int)m);
        size_t nl = strlen(name);
        *p++ = '"';
        memcpy(p, name, nl);
        p += nl;
        *p++ = '"';
    }
    PUT_LIT(p, "]}");
    return p;
}

static int put_blocks(const char *key, const kvix_block_info *b, size_t n, kvix_buf *out,
                      kvix_buf_drain_fn drain, void *ctx, kvix_err *err)
{
    int rc = kvix_buf_append(out, key, strlen(key), err);
    for (size_t i = 0; i < n && !rc; i++) {
        if ((rc = kvix_buf_reserve(out, BLOCK_MAX, err)))
            break;
        char *p = put_block(out->data + out->len, &b[i], i == 0);
        out->len = (size_t)(p - out->data);
        out->data[out->len] = '\0';
        if (drain && out->len >= KVIX_BUF_DRAIN_AT)
            rc = drain(ctx, out);
    }
    return rc ? rc : kvix_buf_append(out, "]", 1, err);
}

static int put_side(char side, const kvix_snapshot_group *x, kvix_buf *out, kvix_err *err)
{
    int rc = x ? kvix_buf_printf(out, err, ",\"bs_%c\":%" PRIu32, side, x->bs)
               : kvix_buf_printf(out, err, ",\"bs_%c\":null", side);
    if (rc)
        return rc;
    return x && x->has_eid ? kvix_buf_printf(out, err, ",\"eid_%c\":%" PRIu64, side, x->eid)
                           : kvix_buf_printf(out, err, ",\"eid_%c\":null", side);
}

int kvix_snapshot_delta_write(const kvix_snapshot_delta *d, kvix_buf *out,
                              kvix_buf_drain_fn drain, void *ctx, kvix_err *err)
{
    const kvix_snapshot_group *k = d->a ? d->a : d->b;
    int rc = kvix_buf_append(out, "{\"model\":", 9, err);
    if (!rc)
        rc = kvix__json_str_append(out, k->model, strlen(k->model), err);
    if (!rc)
        rc = kvix_buf_append(out, ",\"tenant\":", 10, err);
    if (!rc)
        rc = kvix__json_str_append(out, k->tenant, strlen(k->tenant), err);
    if (!rc)
        rc = kvix_snapshot_group_is_partition(k)
                 ? kvix_buf_printf(out, err, ",\"worker\":null,\"dp\":null")
                 : kvix_buf_printf(out, err, ",\"worker\":%" PRIu64 ",\"dp\":%" PRIu32, k->worker,
                                   k->dp);
    if (!rc)
        rc = put_side('a', d->a, out, err);
    if (!rc)
        rc = put_side('b', d->b, out, err);
    if (!rc)
        rc = put_blocks(",\"only_a\":[", d->only_a, d->n_only_a, out, drain, ctx, err);
    if (!rc)
        rc = put_blocks(",\"only_b\":[", d->only_b, d->n_only_b, out, drain, ctx, err);
    return rc ? rc : kvix_buf_append(out, "}\n", 2, err);
}

int kvix_snapshot_diff_summary_write(const kvix_snapshot_diff_totals *t, uint64_t blocks_a,
                                     uint64_t blocks_b, kvix_buf *out, kvix_err *err)
{
    return kvix_buf_printf(out, err,
                           "{\"summary\":true,\"equal\":%s,\"differing\":%" PRIu64
                           ",\"only_a\":%" PRIu64 ",\"only_b\":%" PRIu64 ",\"blocks_a\":%" PRIu64
                           ",\"blocks_b\":%" PRIu64 "}\n",
                           t->differing ? "false" : "true", t->differing, t->only_a, t->only_b,
                           blocks_a, blocks_b);
}
