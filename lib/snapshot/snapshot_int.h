/* libkvix private: the snapshot format's shared bits (record layout, little-endian
 * fields, the checks both the writer and the reader apply), and more cursors
 * over one opened snapshot, for loading its records on several threads. */
#ifndef KVIX_SNAPSHOT_INT_H
#define KVIX_SNAPSHOT_INT_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#include "kvix/snapshot.h"

#define TAG_PART 1u
#define TAG_GROUP 2u
#define TAG_END 3u
#define TAG_STREAM 4u
#define STREAM_HEAD_BYTES 16u
#define HEADER_BYTES 16u
#define GROUP_HEAD_BYTES 40u
#define END_BYTES 40u
#define BLOCK_BYTES KVIX_SNAPSHOT_BLOCK_BYTES
#define TIERS_ALL ((1u << KVIX_MEDIUM_COUNT) - 1)
#define WBUF_BYTES (4u << 20)
#define NONE SIZE_MAX

/* ---- little-endian fields --------------------------------------------- */

/* endian.h's conversions are no-ops on a little-endian host, and the
 * memcpy is one load or store there */
static inline void put32(unsigned char *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, 4);
}

static inline void put64(unsigned char *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, 8);
}

static inline uint32_t get32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return le32toh(v);
}

static inline uint64_t get64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return le64toh(v);
}

/* ---- shared checks (snapshot.c) ------------------------------------------ */

/* Order of partitions: model, then tenant. */
int kvix_snap_cmp_part(const char *m1, const char *t1, const char *m2, const char *t2);
/* The internal consistency of one (worker, dp); see snapshot.c. Fills
 * parent_idx[i] (when non-NULL) with the parent's index or NONE; -1 with why
 * filled when inconsistent. */
int kvix_snap_check_blocks(const kvix_block_info *b, size_t n, size_t *parent_idx, char *why,
                           size_t whylen);
/* Whether two blocks of b[0..n) share an engine hash: 1 with *dup the
 * second one's index, 0, or KVIX_ENOMEM. */
int kvix_snap_repeated_engine(const kvix_block_info *b, size_t n, size_t *dup);
/* JetStream's rule for stream names, n bytes of p. */
int kvix_snap_stream_name_ok(const char *p, size_t n);

/* A second cursor over s's verified bytes, at the first record. It borrows
 * them: close it (kvix_snapshot_close) before s. NULL on ENOMEM. */
kvix_snapshot *kvix_snapshot_cursor(const kvix_snapshot *s, kvix_err *err);

/* From now on kvix_snapshot_next returns only the (worker, dp) records for
 * which want(ctx, worker, dp) is non-zero (and every partition without
 * workers); the others are jumped over without decoding. NULL: all. */
void kvix_snapshot_set_filter(kvix_snapshot *s,
                              int (*want)(void *ctx, uint64_t worker, uint32_t dp), void *ctx);

#endif
