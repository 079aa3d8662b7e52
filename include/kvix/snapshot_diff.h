/* kvix: the differences between two snapshot files, record by record
 * (kvdump --diff), and the JSON lines kvdump writes them as. Two files are
 * equal when every (partition, worker, dp) record has the same block size,
 * eid and blocks in both. */
#ifndef KVIX_SNAPSHOT_DIFF_H
#define KVIX_SNAPSHOT_DIFF_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/buf.h"
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

/* ---- as kvdump --diff writes them (kvdump(1)) ---------------------------- */

/* Append d to out as one JSON line: the record's "model", "tenant",
 * "worker" and "dp" (null for a partition's own record), "bs_a", "eid_a",
 * "bs_b", "eid_b" (null where a side has none), then "only_a" and "only_b",
 * arrays of {"position", "local", "seq", "parent" (null at position 0),
 * "tiers"} with hashes as hex strings. A delta can hold millions of
 * blocks: with drain (may be NULL) the line goes out in pieces
 * (kvix_buf_drain_fn). Returns KVIX_OK, drain's non-zero value, KVIX_EINVAL
 * (a name that is not UTF-8) or KVIX_ENOMEM; on failure out holds part of
 * the line. */
int kvix_snapshot_delta_write(const kvix_snapshot_delta *d, kvix_buf *out,
                              kvix_buf_drain_fn drain, void *ctx, kvix_err *err);

/* Append the line that ends kvdump --diff's output to out: {"summary":true,
 * "equal", "differing", "only_a", "only_b" (t's), "blocks_a", "blocks_b"
 * (the files' blocks, kvix_snapshot_info.blocks)}. KVIX_OK or KVIX_ENOMEM. */
int kvix_snapshot_diff_summary_write(const kvix_snapshot_diff_totals *t, uint64_t blocks_a,
                                     uint64_t blocks_b, kvix_buf *out, kvix_err *err);

#ifdef __cplusplus
}
#endif
#endif
