/* A snapshot record as the stored events that rebuild it. */
#define _GNU_SOURCE
#include "kvix/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "kvix/hash.h"
#include "hashmap_int.h"
#include "snapshot_int.h"
#include "utf8_int.h"

/* ---- rebuilding ----------------------------------------------------------- */


/* Emit runs of chain[0..n) (indexes into g->blocks) as stored events.
 * tier < 0: every block, split where the lowest tier changes, each run in
 * its lowest tier (chain order, so a parent always precedes its children);
 * tier >= 0: the blocks also held in that tier (not their lowest), in runs
 * of consecutive ones, once every block is already held somewhere. */
static unsigned run_tier(unsigned tiers, int tier)
{
    if (tier < 0)
        return (unsigned)__builtin_ctz(tiers);
    return ((tiers >> tier & 1) && (unsigned)__builtin_ctz(tiers) != (unsigned)tier)
               ? (unsigned)tier
               : KVIX_MEDIUM_COUNT;
}

static int emit_runs(const kvix_snapshot_group *g, const size_t *chain, size_t n, int tier,
                     int orphan_head, kvix_event *ev, kvix_snapshot_event_fn fn, void *ctx,
                     kvix_err *err)
{
    size_t i = 0;
    while (i < n) {
        unsigned t = run_tier(g->blocks[chain[i]].tiers, tier);
        if (t == KVIX_MEDIUM_COUNT) {
            i++;
            continue;
        }
        kvix_event_reset(ev);
        ev->type = KVIX_EV_STORED;
        ev->worker = g->worker;
        ev->dp = g->dp;
        ev->bs = g->bs;
        ev->medium = (int)t;
        int rc = kvix_event_set_name(ev->model, g->model, strlen(g->model), err);
        if (!rc)
            rc = kvix_event_set_name(ev->tenant, g->tenant, strlen(g->tenant), err);
        if (rc)
            return rc;
        const kvix_block_info *first = &g->blocks[chain[i]];
        ev->has_parent = first->position > 0;
        ev->parent = first->position > 0 ? first->parent : 0;
        /* A chain below a parent no longer held there says where that
         * parent sat, so a replay puts it back exactly (kvix-events(5)). */
        ev->has_parent_at = i == 0 && orphan_head;
        ev->parent_position = ev->has_parent_at ? first->position - 1 : 0;
        ev->parent_canon = ev->has_parent_at ? first->parent_canon : 0;
        size_t j = i;
        while (j < n && j - i < KVIX_EVENT_BLOCKS_MAX &&
               run_tier(g->blocks[chain[j]].tiers, tier) == t)
            j++;
        if ((rc = kvix_event_reserve_blocks(ev, j - i, err)))
            return rc;
        for (size_t k = i; k < j; k++) {
            ev->blocks[k - i].local = g->blocks[chain[k]].local;
            ev->blocks[k - i].seq = g->blocks[chain[k]].engine;
        }
        ev->nblocks = j - i;
        if ((rc = fn(ctx, ev)))
            return rc;
        i = j;
    }
    return KVIX_OK;
}

int kvix_snapshot_group_events(const kvix_snapshot_group *g, kvix_event *scratch,
                               kvix_snapshot_event_fn fn, void *ctx, size_t *orphans,
                               kvix_err *err)
{
    size_t n = g->n;
    if (orphans)
        *orphans = 0;
    if (n == 0)
        return KVIX_OK;
    if (n > SIZE_MAX / (3 * sizeof(size_t)))
        return kvix_err_set(err, KVIX_ELIMIT, "too many blocks");
    size_t *mem = malloc(3 * n * sizeof(size_t));
    unsigned char *done = calloc(n, 1);
    if (!mem || !done) {
        free(mem);
        free(done);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu blocks", n);
    }
    size_t *parent = mem, *child = mem + n, *chain = mem + 2 * n;
    char why[160];
    int rc = KVIX_OK;
    if (kvix__snap_check_blocks(g->blocks, n, parent, why, sizeof why)) {
        rc = kvix_err_set(err, KVIX_ECORRUPT, "worker %" PRIu64 " dp %" PRIu32 ": %s", g->worker,
                          g->dp, why);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        child[i] = NONE;
    /* Blocks come by engine hash within a position: the first child seen
     * is the smallest, so chains are the same on every run. */
    for (size_t i = 0; i < n; i++) {
        if (parent[i] != NONE && child[parent[i]] == NONE)
            child[parent[i]] = i;
        /* bit 1: an orphan or below one; a replay cannot store it */
        if ((g->blocks[i].position > 0 && parent[i] == NONE) ||
            (parent[i] != NONE && (done[parent[i]] & 2))) {
            done[i] = 2;
            if (orphans)
                (*orphans)++;
        }
    }
    for (size_t i = 0; i < n && !rc; i++) {
        if (done[i] & 1)
            continue;
        size_t len = 0;
        for (size_t k = i; k != NONE; k = child[k]) {
            chain[len++] = k;
            done[k] |= 1;
        }
        int orphan_head = g->blocks[i].position > 0 && parent[i] == NONE;
        rc = emit_runs(g, chain, len, -1, orphan_head, scratch, fn, ctx, err);
        for (int t = 0; t < KVIX_MEDIUM_COUNT && !rc; t++)
            rc = emit_runs(g, chain, len, t, orphan_head, scratch, fn, ctx, err);
    }
out:
    free(mem);
    free(done);
    return rc;
}


