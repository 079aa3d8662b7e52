/* libkvix private: more cursors over one opened snapshot, for loading its
 * records on several threads. */
#ifndef KVIX_SNAPSHOT_INT_H
#define KVIX_SNAPSHOT_INT_H

#include "kvix/snapshot.h"

/* A second cursor over s's verified bytes, at the first record. It borrows
 * them: close it (kvix_snapshot_close) before s. NULL on ENOMEM. */
kvix_snapshot *kvix_snapshot_cursor(const kvix_snapshot *s, kvix_err *err);

/* From now on kvix_snapshot_next returns only the (worker, dp) records for
 * which want(ctx, worker, dp) is non-zero (and every partition without
 * workers); the others are jumped over without decoding. NULL: all. */
void kvix_snapshot_set_filter(kvix_snapshot *s,
                              int (*want)(void *ctx, uint64_t worker, uint32_t dp), void *ctx);

#endif
