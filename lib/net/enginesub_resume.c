/* Where the subscriptions start: after the eids an index or a snapshot
 * holds (kvix_enginesub_resume for each), the one rule kvsub --resume and
 * kvindex -w (a snapshot loaded) share. */
#include <stdint.h>
#include <string.h>

#include "enginesub_int.h"
#include "kvix/index.h"
#include "kvix/snapshot.h"

typedef struct resume_walk {
    kvix_enginesub *s;
    const char *model, *tenant; /* the config's */
    size_t mine;
    kvix_err *err;
} resume_walk;

/* A kvix_foreach_fn: one (partition, worker, dp). A partition without
 * workers, or a pair that never saw an eid, says nothing about a stream. */
static int resume_one(void *ctx, const char *model, const char *tenant, uint32_t bs,
                      uint64_t worker, uint32_t dp, int has_eid, uint64_t last_eid,
                      const kvix_block_info *blocks, size_t n)
{
    (void)bs, (void)blocks, (void)n;
    resume_walk *c = ctx;
    if (!has_eid || worker == UINT64_MAX)
        return 0;
    c->mine += !strcmp(model, c->model) && !strcmp(tenant, c->tenant);
    return kvix_enginesub_resume(c->s, model, tenant, worker, dp, last_eid, c->err);
}

static resume_walk ctx_of(kvix_enginesub *s, kvix_err *err)
{
    resume_walk c = {s, s->model, s->tenant, 0, err};
    return c;
}

int kvix_enginesub_resume_index(kvix_enginesub *s, kvix_index *idx, size_t *mine, kvix_err *err)
{
    resume_walk c = ctx_of(s, err);
    int rc = kvix_index_foreach(idx, resume_one, &c);
    if (mine)
        *mine = c.mine;
    return rc;
}

int kvix_enginesub_resume_snapshot(kvix_enginesub *s, kvix_snapshot *snap, size_t *mine,
                                   kvix_err *err)
{
    resume_walk c = ctx_of(s, err);
    int rc = kvix_snapshot_foreach(snap, resume_one, &c);
    if (mine)
        *mine = c.mine;
    return rc;
}
