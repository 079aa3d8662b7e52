/* kvix: statistics of a snapshot file, per partition and per (worker, dp),
 * with the memory an index holding it takes by the index's own accounting
 * (kvix_index_stats), so kvdump --stats and kvindex report one figure; and
 * the two forms kvdump writes them in. */
#ifndef KVIX_SNAPSHOT_STATS_H
#define KVIX_SNAPSHOT_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/buf.h"
#include "kvix/error.h"
#include "kvix/event.h"
#include "kvix/index.h"
#include "kvix/snapshot.h"

#ifdef __cplusplus
extern "C" {
#endif

/* (kvix_snapshot_filter, which records to count: kvix/snapshot.h) */

/* One row: a partition (is_part) followed by its (worker, dp) rows. */
typedef struct kvix_snapshot_row {
    int is_part;
    char *model, *tenant; /* owned by the stats */
    uint32_t bs;
    uint64_t worker;      /* worker rows */
    uint32_t dp;
    int has_eid;          /* worker rows: the last applied source eid */
    uint64_t eid;
    int has_depth;        /* depth: the deepest position held, when any block is */
    uint64_t depth;
    uint64_t workers;     /* partition rows: (worker, dp) records counted */
    uint64_t blocks;      /* stored (worker, block) entries */
    uint64_t unique;      /* partition rows: distinct (position, canonical hash), the
                           * index's kvix_index_stats.unique_blocks */
    uint64_t orphans;     /* blocks below a parent no longer held */
    uint64_t tiers[KVIX_MEDIUM_COUNT]; /* blocks per tier (a block in two counts twice) */
    /* Bytes by the index's own accounting (kvix_index_stats.bytes).
     * Partition rows: what loading the partition's counted records added to
     * the index (its shared structure included). Worker rows: what an index
     * holding only that (worker, dp) takes beyond its empty partition: blocks
     * shared with other workers count in each sharer's row. */
    uint64_t memory;
} kvix_snapshot_row;

typedef struct kvix_snapshot_stats {
    kvix_snapshot_row *rows; /* owned: kvix_snapshot_stats_release */
    size_t n, cap;
    uint64_t matched;        /* records the filter let through */
    /* kvix_index_stats.bytes of an index (of the options given) into which
     * the counted records were loaded as kvix_snapshot_apply loads them:
     * unfiltered, what kvindex reports after loading the file. */
    uint64_t memory;
} kvix_snapshot_stats;

/* Count every record of s that f lets through (from the first record,
 * whatever next has consumed), building an index with opts (NULL: the
 * defaults; its threads are ignored) to measure memory. Costs about two
 * loads of the counted records, and the memory of one. *out is filled and
 * owned by the caller: kvix_snapshot_stats_release (also after an error).
 * Errors: KVIX_ENOMEM, or what loading the records into an index says. */
int kvix_snapshot_stats_get(kvix_snapshot *s, const kvix_snapshot_filter *f,
                            const kvix_index_opts *opts, kvix_snapshot_stats *out,
                            kvix_err *err);
/* Free the rows; st is then empty. */
void kvix_snapshot_stats_release(kvix_snapshot_stats *st);

/* How kvix_snapshot_stats_write writes statistics (kvdump(1), --stats). */
typedef enum kvix_snapshot_stats_form {
    KVIX_SNAPSHOT_STATS_TABLE = 0, /* aligned columns, a line per row, then the file's
                                    * totals in a sentence (sizes in KiB, MiB...) */
    KVIX_SNAPSHOT_STATS_JSON,      /* a JSON object per row ("scope": "partition" or
                                    * "worker"), then one for the file ("scope": "file") */
} kvix_snapshot_stats_form;

/* Append st's rows and the file's totals to out in form; info is the
 * file's (kvix_snapshot_get_info of the snapshot st was counted from).
 * Nothing is kept. Returns KVIX_OK; KVIX_EINVAL (a name that is not UTF-8,
 * an unknown form) or KVIX_ENOMEM, out then as it was. */
int kvix_snapshot_stats_write(const kvix_snapshot_stats *st, const kvix_snapshot_info *info,
                              kvix_snapshot_stats_form form, kvix_buf *out, kvix_err *err);

#ifdef __cplusplus
}
#endif
#endif
