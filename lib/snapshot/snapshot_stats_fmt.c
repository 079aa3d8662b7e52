/* A snapshot's statistics as kvdump --stats writes them: a table for
 * people, or JSON lines (kvix/snapshot_stats.h). */
#include "kvix/snapshot_stats.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "json_text_int.h"

/* ---- JSON lines ----------------------------------------------------------- */

static int json_names(const kvix_snapshot_row *r, kvix_buf *out, kvix_err *err)
{
    int rc = kvix_buf_printf(out, err, "{\"scope\":\"%s\",\"model\":",
                             r->is_part ? "partition" : "worker");
    if (!rc)
        rc = kvix__json_str_append(out, r->model, strlen(r->model), err);
    if (!rc)
        rc = kvix_buf_printf(out, err, ",\"tenant\":");
    if (!rc)
        rc = kvix__json_str_append(out, r->tenant, strlen(r->tenant), err);
    return rc;
}

static int json_row(const kvix_snapshot_row *r, kvix_buf *out, kvix_err *err)
{
    int rc = json_names(r, out, err);
    if (!rc)
        rc = kvix_buf_printf(out, err, ",\"bs\":%" PRIu32, r->bs);
    if (!rc && r->is_part)
        rc = kvix_buf_printf(out, err, ",\"workers\":%" PRIu64, r->workers);
    else if (!rc)
        rc = kvix_buf_printf(out, err, ",\"worker\":%" PRIu64 ",\"dp\":%" PRIu32, r->worker, r->dp);
    if (!rc)
        rc = kvix_buf_printf(out, err, ",\"blocks\":%" PRIu64, r->blocks);
    if (!rc && r->is_part)
        rc = kvix_buf_printf(out, err, ",\"unique_blocks\":%" PRIu64, r->unique);
    if (!rc)
        rc = kvix_buf_printf(out, err, ",\"orphans\":%" PRIu64, r->orphans);
    if (!rc)
        rc = r->has_depth ? kvix_buf_printf(out, err, ",\"depth\":%" PRIu64, r->depth)
                          : kvix_buf_printf(out, err, ",\"depth\":null");
    if (!rc)
        rc = kvix_buf_printf(out, err, ",\"tiers\":{");
    for (unsigned m = 0; m < KVIX_MEDIUM_COUNT && !rc; m++)
        rc = kvix_buf_printf(out, err, "%s\"%s\":%" PRIu64, m ? "," : "",
                             kvix_medium_name((int)m), r->tiers[m]);
    if (!rc)
        rc = kvix_buf_printf(out, err, "}");
    if (!rc && !r->is_part)
        rc = r->has_eid ? kvix_buf_printf(out, err, ",\"eid\":%" PRIu64, r->eid)
                        : kvix_buf_printf(out, err, ",\"eid\":null");
    if (!rc)
        rc = kvix_buf_printf(out, err, ",\"memory\":%" PRIu64 "}\n", r->memory);
    return rc;
}

static int json_file(const kvix_snapshot_stats *st, const kvix_snapshot_info *info,
                     kvix_buf *out, kvix_err *err)
{
    int rc = kvix_buf_printf(out, err,
                             "{\"scope\":\"file\",\"version\":%" PRIu32 ",\"partitions\":%" PRIu64
                             ",\"workers\":%" PRIu64 ",\"blocks\":%" PRIu64 ",\"bytes\":%" PRIu64
                             ",\"checksum\":\"%016" PRIx64 "\",\"memory\":%" PRIu64,
                             info->version, info->partitions, info->groups, info->blocks,
                             info->bytes, info->checksum, st->memory);
    if (rc)
        return rc;
    if (!info->has_stream)
        return kvix_buf_printf(out, err, ",\"stream\":null,\"stream_seq\":null}\n");
    if ((rc = kvix_buf_printf(out, err, ",\"stream\":")) ||
        (rc = kvix__json_str_append(out, info->stream, strlen(info->stream), err)))
        return rc;
    return kvix_buf_printf(out, err, ",\"stream_seq\":%" PRIu64 "}\n", info->stream_seq);
}

/* ---- the table ------------------------------------------------------------ */

#define NCOLS 14 /* padded; then memory, which is not */
#define CELL KVIX_NAME_MAX

static void human_bytes(uint64_t b, char *dst, size_t cap)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    unsigned u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(dst, cap, "%" PRIu64 " B", b);
    else
        snprintf(dst, cap, "%.1f %s", v, unit[u]);
}

/* Row i's cells (0: the heading, then st->rows[i - 1]). */
static void cells(const kvix_snapshot_stats *st, size_t i, char c[NCOLS + 1][CELL])
{
    static const char *head[NCOLS + 1] = {"model", "tenant", "bs",   "worker", "dp",
                                          "blocks", "unique", "depth", "gpu",   "cpu",
                                          "disk",  "external", "eid", "orphans", "memory"};
    if (i == 0) {
        for (int k = 0; k <= NCOLS; k++)
            snprintf(c[k], CELL, "%s", head[k]);
        return;
    }
    const kvix_snapshot_row *r = &st->rows[i - 1];
    snprintf(c[0], CELL, "%s", r->model);
    snprintf(c[1], CELL, "%s", r->tenant);
    snprintf(c[2], CELL, "%" PRIu32, r->bs);
    if (r->is_part) {
        snprintf(c[3], CELL, "*%" PRIu64, r->workers);
        snprintf(c[4], CELL, "-");
        snprintf(c[6], CELL, "%" PRIu64, r->unique);
        snprintf(c[12], CELL, "-");
    } else {
        snprintf(c[3], CELL, "%" PRIu64, r->worker);
        snprintf(c[4], CELL, "%" PRIu32, r->dp);
        snprintf(c[6], CELL, "-");
        if (r->has_eid)
            snprintf(c[12], CELL, "%" PRIu64, r->eid);
        else
            snprintf(c[12], CELL, "-");
    }
    snprintf(c[5], CELL, "%" PRIu64, r->blocks);
    if (r->has_depth)
        snprintf(c[7], CELL, "%" PRIu64, r->depth);
    else
        snprintf(c[7], CELL, "-");
    for (unsigned m = 0; m < KVIX_MEDIUM_COUNT; m++)
        snprintf(c[8 + m], CELL, "%" PRIu64, r->tiers[m]);
    snprintf(c[13], CELL, "%" PRIu64, r->orphans);
    human_bytes(r->memory, c[NCOLS], CELL);
}

/* Two passes over the rows, the cells made again in the second: the
 * columns' widths, then the lines (no table of every cell in memory). */
static int table(const kvix_snapshot_stats *st, const kvix_snapshot_info *info, kvix_buf *out,
                 kvix_err *err)
{
    char c[NCOLS + 1][CELL];
    size_t w[NCOLS] = {0};
    for (size_t i = 0; i <= st->n; i++) {
        cells(st, i, c);
        for (int k = 0; k < NCOLS; k++) {
            size_t l = strlen(c[k]);
            if (l > w[k])
                w[k] = l;
        }
    }
    int rc = KVIX_OK;
    for (size_t i = 0; i <= st->n && !rc; i++) {
        cells(st, i, c);
        /* names left-aligned, numbers right-aligned */
        for (int k = 0; k < NCOLS && !rc; k++)
            rc = kvix_buf_printf(out, err, k < 2 ? "%-*s  " : "%*s  ", (int)w[k], c[k]);
        if (!rc)
            rc = kvix_buf_printf(out, err, "%s\n", c[NCOLS]);
    }
    if (rc)
        return rc;
    char size[32], mem[32];
    human_bytes(info->bytes, size, sizeof size);
    human_bytes(st->memory, mem, sizeof mem);
    rc = kvix_buf_printf(out, err,
                         "\n%" PRIu64 " partitions, %" PRIu64 " workers, %" PRIu64
                         " blocks; file %s, format version %" PRIu32 ", checksum %016" PRIx64
                         "; index %s\n",
                         info->partitions, info->groups, info->blocks, size, info->version,
                         info->checksum, mem);
    if (!rc && info->has_stream)
        rc = kvix_buf_printf(out, err, "stream %s: every message up to sequence %" PRIu64
                                       " applied\n",
                             info->stream, info->stream_seq);
    return rc;
}

int kvix_snapshot_stats_write(const kvix_snapshot_stats *st, const kvix_snapshot_info *info,
                              kvix_snapshot_stats_form form, kvix_buf *out, kvix_err *err)
{
    size_t start = out->len;
    int rc = KVIX_OK;
    if (form == KVIX_SNAPSHOT_STATS_TABLE) {
        rc = table(st, info, out, err);
    } else if (form == KVIX_SNAPSHOT_STATS_JSON) {
        for (size_t i = 0; i < st->n && !rc; i++)
            rc = json_row(&st->rows[i], out, err);
        if (!rc)
            rc = json_file(st, info, out, err);
    } else {
        rc = kvix_err_set(err, KVIX_EINVAL, "unknown statistics form %d", (int)form);
    }
    if (rc && out->data) { /* never half a report */
        out->len = start;
        out->data[start] = '\0';
    }
    return rc;
}
