/* libkvix private: the snapshot format's shared bits (record layout, little-endian
 * fields, the checks both the writer and the reader apply), and more cursors
 * over one opened snapshot, for loading its records on several threads. */
#ifndef KVIX_SNAPSHOT_INT_H
#define KVIX_SNAPSHOT_INT_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#include "kvix/snapshot.h"

/* record types (both layouts) */
#define TAG_PART 1u
#define TAG_GROUP 2u
#define TAG_END 3u
#define TAG_STREAM 4u
#define HEADER_BYTES 16u
/* versions 1 and 2: fixed-size records */
#define STREAM_HEAD_BYTES 16u
#define GROUP_HEAD_BYTES 40u
#define END_BYTES 40u
#define BLOCK_BYTES 40u
/* version 3: every record is u32 type, u32 flags, u64 length, payload */
#define REC_HEAD_BYTES 16u
#define REC_OPTIONAL 1u                 /* flags: a reader that does not know the type skips it */
#define PART3_HEAD_BYTES 16u            /* u32 bs, u32 model_len, u32 tenant_len, u32 0 */
#define GROUP3_HEAD_BYTES 32u           /* u64 worker, u32 dp, u32 flags, u64 eid, u64 nblocks */
#define END3_BYTES (REC_HEAD_BYTES + 32u) /* totals and the checksum */
#define SG_BLOCK_MIN 9u                 /* the shortest block: control byte and local hash */
/* a block's control byte (snapshot_group.c) */
#define SG_KIDS 3u     /* 0, 1, 2 children, or 3: a varint count follows */
#define SG_ENGINE 4u   /* an engine hash follows (else it is the canonical hash) */
#define SG_TIERS 8u    /* a tier mask follows (else gpu) */
#define SG_ROOT_AT 16u /* a root past position 0: position, parent and parent_canon follow */
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

/* ---- a growable byte buffer ------------------------------------------------ */

typedef struct kvix_sbuf {
    unsigned char *data;
    size_t len, cap;
} kvix_sbuf;

/* Room for more bytes past len: 0, or -1 (out of memory, b unchanged). */
int kvix__sbuf_room(kvix_sbuf *b, size_t more);

/* ---- a version 3 group's blocks (snapshot_group.c) ------------------------ */

/* Arrays reused from one group to the next. */
typedef struct kvix_snap_scratch {
    size_t *a, *b, *c, *d; /* cap entries each (c: cap + 1) */
    size_t cap;
    struct kvix_snap_slot {
        uint64_t engine;
        size_t idx; /* NONE: empty */
    } *set;
    size_t set_cap, set_mask;
} kvix_snap_scratch;

void kvix__snap_scratch_release(kvix_snap_scratch *sc);
/* Encode b[0..n) (sorted by (position, engine), consistent by
 * kvix__snap_check_blocks, whose parent indexes are pidx, canon filled) into
 * out (replaced). 0, or -1 when memory runs out. */
int kvix__snap_group_encode(kvix_snap_scratch *sc, const kvix_block_info *b, size_t n,
                           const size_t *pidx, kvix_sbuf *out);
/* Decode the n blocks of p[0..len) into out[0..n) in the file's order
 * (preorder: a parent before its children), every field filled, and each
 * block's parent index in up (NONE: a root), checking that this is the one
 * encoding of those blocks (order, defaults, engine hashes distinct, roots
 * past position 0 without a parent in the group). trusted: bytes verified
 * before (by this decoder, untrusted): what cannot have changed is not
 * checked again. 0; -1 with why and *at (the offset in p of the first
 * byte in question); -2 out of memory. */
int kvix__snap_group_decode(kvix_snap_scratch *sc, const unsigned char *p, size_t len, size_t n,
                           int trusted, kvix_block_info *out, size_t *up, char *why,
                           size_t whylen, size_t *at);

/* ---- shared checks (snapshot.c) ------------------------------------------ */

/* Order of partitions: model, then tenant. */
int kvix__snap_cmp_part(const char *m1, const char *t1, const char *m2, const char *t2);
/* The internal consistency of one (worker, dp); see snapshot.c. Fills
 * parent_idx[i] (when non-NULL) with the parent's index or NONE; -1 with why
 * filled when inconsistent. */
int kvix__snap_check_blocks(const kvix_block_info *b, size_t n, size_t *parent_idx, char *why,
                           size_t whylen);
/* Whether two blocks of b[0..n) share an engine hash: 1 with *dup the
 * second one's index, 0, or KVIX_ENOMEM. */
int kvix__snap_repeated_engine(const kvix_block_info *b, size_t n, size_t *dup);
/* JetStream's rule for stream names, n bytes of p. */
int kvix__snap_stream_name_ok(const char *p, size_t n);

/* The next record as kvix_snapshot_next gives it, but its blocks in the
 * file's order, each block's parent before it, with *up the parent index of
 * each (NONE: none held; valid until the next call): what a load wants. */
int kvix__snap_next_tree(kvix_snapshot *s, kvix_snapshot_group *g, const size_t **up,
                        kvix_err *err);

/* The distinct blocks a load sizes the tables of the partition of s's last
 * record for: a little more than it holds (estimated when s was verified);
 * 0 when unknown. */
size_t kvix__snap_load_reserve(const kvix_snapshot *s);
/* The number of s's partition records met so far this pass (the last
 * record's partition is the part_no-th, from 1). */
size_t kvix__snap_part_no(const kvix_snapshot *s);

/* Write format version 1 (2 with a stream position) instead of 3: only
 * right after kvix_snapshot_writer_open (tests of the older files). */
void kvix__snap_writer_legacy(kvix_snapshot_writer *w);

/* A second cursor over s's verified bytes, at the first record. It borrows
 * them: close it (kvix_snapshot_close) before s. NULL on ENOMEM. */
kvix_snapshot *kvix__snapshot_cursor(const kvix_snapshot *s, kvix_err *err);

/* From now on kvix_snapshot_next returns only the (worker, dp) records for
 * which want(ctx, worker, dp) is non-zero (and every partition without
 * workers); the others are jumped over without decoding. NULL: all. */
void kvix__snapshot_set_filter(kvix_snapshot *s,
                              int (*want)(void *ctx, uint64_t worker, uint32_t dp), void *ctx);

#endif
