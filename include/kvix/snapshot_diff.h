/* kvix: the differences between two snapshot files, record by record
 * (kvdump --diff). Two files are equal when every (partition, worker, dp)
 * record has the same block size, eid and blocks in both. */
#ifndef KVIX_SNAPSHOT_DIFF_H
#define KVIX_SNAPSHOT_DIFF_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/error.h"
#include "kvix/snapshot.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One record key that differs. a and b are its records in A and B (either
 * NULL where the file has none). only_a / only_b are the blocks one side
 * holds and the other does not (compared by position, engine, local,
 * parent, parent_canon and tiers; every block of a side when the block
 * sizes differ). Everything is owned by the diff and valid only during the
 * call. */
typedef struct kvix_snapshot_delta {
    const kvix_snapshot_group *a, *b;
    const kvix_block_info *only_a, *only_b;
    size_t n_only_a, n_only_b;
} kvix_snapshot_delta;

/* Receives one differing record key; non-zero stops the diff (returned). */
typedef int (*kvix_snapshot_delta_fn)(void *ctx, const kvix_snapshot_delta *d);

typedef struct kvix_snapshot_diff_totals {
    uint64_t differing; /* record keys that differ */
    uint64_t only_a;    /* blocks only in A */
    uint64_t only_b;    /* blocks only in B */
} kvix_snapshot_diff_totals;

/* Walk A and B (two snapshots, not one twice: each is a cursor), from their
 * first records whatever next has consumed, in
 * key order (model, tenant, worker, dp) and call fn (may be NULL) for each
 * key that differs. *t gets the totals. Returns 0, fn's non-zero value, or
 * an error (KVIX_ENOMEM; reading errors of a or b). */
int kvix_snapshot_diff(kvix_snapshot *a, kvix_snapshot *b, kvix_snapshot_delta_fn fn,
                       void *ctx, kvix_snapshot_diff_totals *t, kvix_err *err);

#ifdef __cplusplus
}
#endif
#endif
