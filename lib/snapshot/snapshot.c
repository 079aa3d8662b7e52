/* The snapshot file (kvix-snapshot(5)).
 *
 *   header  magic "KVIXSNAP", u32 version, u32 flags (0)                 16 bytes
 *   STREAM  (version 2 only, right after the header) u32 4, u32 name_len,
 *           u64 sequence, name: the stream position the state reflects
 *   PART    u32 1, u32 bs, u32 model_len, u32 tenant_len, model, tenant
 *   GROUP   u32 2, u32 dp, u64 worker, u32 flags (bit 0: has eid), u32 0,
 *           u64 eid, u64 nblocks, nblocks x block                       40 + 40n bytes
 *   block   u32 position, u32 tiers, u64 local, u64 engine, u64 parent,
 *           u64 parent_canon                                            40 bytes
 *   END     u32 3, u32 0, u64 partitions, u64 groups, u64 blocks,
 *           u64 XXH3-64 (seed 0) of every byte before it                 40 bytes
 *
 * Everything is little-endian. Records are strictly ordered, so one index
 * state has exactly one file: snapshots compare with cmp(1).
 *
 * A block's parent may be absent: the index keeps blocks whose parent was
 * evicted before them ("orphans"). The parent's canonical hash is stored so
 * such a block keeps its place; where the parent is present it must agree.
 *
 * This file holds the checks the writer (snapshot_write.c) and the reader
 * (snapshot_read.c) share; snapshot_events.c turns records into events. */
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

/* ---- shared checks ------------------------------------------------------ */

int kvix__snap_cmp_part(const char *m1, const char *t1, const char *m2, const char *t2)
{
    int c = strcmp(m1, m2);
    return c ? c : strcmp(t1, t2);
}

/* Index of the block with engine hash h in blocks[lo, hi) (sorted by engine
 * within one position), or NONE. */
static size_t find_engine(const kvix_block_info *b, size_t lo, size_t hi, uint64_t h)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b[mid].engine < h)
            lo = mid + 1;
        else if (b[mid].engine > h)
            hi = mid;
        else
            return mid;
    }
    return NONE;
}

/* The internal consistency of one (worker, dp): blocks ascending by
 * (position, engine) and tiers valid. A block's parent is the block held at
 * position - 1 under the recorded engine hash with the recorded canonical
 * hash; when there is none the block is an orphan, which is allowed: its
 * parent was removed, or its engine hash was stored again with other
 * content (the index keeps the child where it was, see kvix_index_load), so
 * whatever the index holds can be saved. Position-0 parents are ignored.
 * Fills parent_idx[i] (when non-NULL) with the parent's index or NONE. */
int kvix__snap_check_blocks(const kvix_block_info *b, size_t n, size_t *parent_idx, char *why,
                        size_t whylen)
{
    size_t prev_lo = 0, prev_hi = 0, cur = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && (b[i].position < b[i - 1].position ||
                      (b[i].position == b[i - 1].position && b[i].engine <= b[i - 1].engine))) {
            snprintf(why, whylen, "block %zu out of order (position %" PRIu32 " after %" PRIu32 ")",
                     i, b[i].position, b[i - 1].position);
            return -1;
        }
        if (i == 0 || b[i].position != b[i - 1].position) {
            if (i > 0 && b[i].position == b[i - 1].position + 1) {
                prev_lo = cur;
                prev_hi = i;
            } else {
                prev_lo = prev_hi = i;
            }
            cur = i;
        }
        if (b[i].tiers == 0 || (b[i].tiers & ~TIERS_ALL)) {
            snprintf(why, whylen, "block %zu has a bad tier mask 0x%x", i, b[i].tiers);
            return -1;
        }
        if (b[i].position >= KVIX_INDEX_DEPTH_MAX) {
            snprintf(why, whylen, "block %zu at position %" PRIu32 " (limit %u)", i,
                     b[i].position, KVIX_INDEX_DEPTH_MAX - 1);
            return -1;
        }
        size_t p = NONE;
        if (b[i].position > 0) {
            p = find_engine(b, prev_lo, prev_hi, b[i].parent);
            if (p != NONE && b[p].canon != b[i].parent_canon)
                p = NONE; /* that hash now names other content: an orphan */
        }
        if (parent_idx)
            parent_idx[i] = p;
    }
    return 0;
}

/* An engine hash names one block per (worker, dp) (index.h): whether two
 * blocks of b[0..n) share one. Blocks are sorted by position first, so a
 * repeat at another position needs a set: open addressing over twice n
 * slots, the hash 0 kept aside. Returns 1 with *dup the second block's
 * index, 0 when all differ, KVIX_ENOMEM. */
int kvix__snap_repeated_engine(const kvix_block_info *b, size_t n, size_t *dup)
{
    if (n < 2)
        return 0;
    size_t cap = 4;
    while (cap < 2 * n)
        cap *= 2;
    uint64_t *set = calloc(cap, sizeof *set);
    if (!set)
        return KVIX_ENOMEM;
    int zero = 0, found = 0;
    for (size_t i = 0; i < n && !found; i++) {
        uint64_t h = b[i].engine;
        if (h == 0) {
            found = zero;
            zero = 1;
        } else {
            size_t k = (size_t)(kvix_mix64(h) & (cap - 1));
            while (set[k] && set[k] != h)
                k = (k + 1) & (cap - 1);
            found = set[k] == h;
            set[k] = h;
        }
        if (found)
            *dup = i;
    }
    free(set);
    return found;
}

/* JetStream's rule for stream names (printable, no space, '.', '*', '>',
 * path separators), and nothing a JSON string would need to escape. */
int kvix__snap_stream_name_ok(const char *p, size_t n)
{
    if (n == 0 || n >= KVIX_SNAPSHOT_STREAM_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= ' ' || c >= 0x7f || strchr(".*>/\\\"", c))
            return 0;
    }
    return 1;
}
