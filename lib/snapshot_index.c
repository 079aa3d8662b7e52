/* Snapshots and the live index: save an index, rebuild one from a file.
 * Kept apart from the format (snapshot.c) so tools that only read files
 * (kvdump) do not link the index. */
#include "kvix/snapshot.h"

#include <inttypes.h>
#include <string.h>

typedef struct save_ctx {
    kvix_snapshot_writer *w;
    kvix_err *err;
    int rc;
} save_ctx;

static int save_visit(void *ctx, const char *model, const char *tenant, uint32_t bs,
                      uint64_t worker, uint32_t dp, int has_eid, uint64_t last_eid,
                      const kvix_block_info *blocks, size_t n)
{
    save_ctx *s = ctx;
    s->rc = kvix_snapshot_writer_add(s->w, model, tenant, bs, worker, dp, has_eid, last_eid,
                                     blocks, n, s->err);
    return s->rc ? 1 : 0;
}

int kvix_snapshot_save(kvix_index *idx, const char *path, kvix_snapshot_info *info,
                       kvix_err *err)
{
    save_ctx s = {NULL, err, 0};
    int rc = kvix_snapshot_writer_open(&s.w, path, err);
    if (rc)
        return rc;
    int stop = kvix_index_foreach(idx, save_visit, &s);
    if (stop || s.rc) {
        kvix_snapshot_writer_abort(s.w);
        return s.rc ? s.rc : kvix_err_set(err, KVIX_EINVAL, "index walk stopped (%d)", stop);
    }
    return kvix_snapshot_writer_commit(s.w, info, err);
}

int kvix_snapshot_apply(kvix_snapshot *s, kvix_index *idx, kvix_err *err)
{
    kvix_index_stats st;
    kvix_index_stats_get(idx, &st);
    if (st.partitions != 0 || st.blocks != 0)
        return kvix_err_set(err, KVIX_EINVAL, "a snapshot loads only into an empty index");
    kvix_snapshot_group g;
    int rc;
    kvix_snapshot_rewind(s);
    while ((rc = kvix_snapshot_next(s, &g, err)) == KVIX_OK) {
        /* n == 0 still creates the partition: one without workers survives. */
        if ((rc = kvix_index_load(idx, g.model, g.tenant, g.bs, g.worker, g.dp, g.blocks, g.n,
                                  err)))
            return rc;
        if (g.has_eid &&
            (rc = kvix_index_set_eid(idx, g.model, g.tenant, g.bs, g.worker, g.dp, g.eid, err)))
            return rc;
    }
    if (rc != KVIX_EOF)
        return rc;
    kvix_snapshot_info info;
    kvix_snapshot_get_info(s, &info);
    kvix_index_stats_get(idx, &st);
    if (st.blocks != info.blocks)
        return kvix_err_set(err, KVIX_ECORRUPT,
                            "the index rebuilt %zu blocks from the snapshot's %" PRIu64,
                            st.blocks, info.blocks);
    return KVIX_OK;
}

int kvix_snapshot_load(kvix_index *idx, const char *path, kvix_snapshot_info *info,
                       kvix_err *err)
{
    kvix_snapshot *s;
    int rc = kvix_snapshot_open(&s, path, err);
    if (rc)
        return rc;
    rc = kvix_snapshot_apply(s, idx, err);
    if (!rc && info)
        kvix_snapshot_get_info(s, info);
    kvix_snapshot_close(s);
    return rc;
}
