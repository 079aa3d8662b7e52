/* libkvix private: the query's canonical chain, computed inline.
 *
 * Same values as kvix_qchain_at (kvix_hash_seq_next: XXH3-64 of
 * le64(prev) || le64(local), seed 1337), but with xxHash inlined and the two
 * words stored with memcpy on little-endian hosts: the chain is most of a
 * query's work (every position up to the furthest probe), and the
 * out-of-line version spends ~150 instructions per block against ~30 here.
 * Include in one translation unit per backend (XXH_INLINE_ALL makes private
 * static copies).
 */
#ifndef KVIX_CANON_INT_H
#define KVIX_CANON_INT_H

#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "index_int.h"

static inline uint64_t kvix_canon_next(uint64_t prev, uint64_t local)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t buf[2] = {prev, local};
    return XXH3_64bits_withSeed(buf, sizeof buf, KVIX_HASH_SEED);
#else
    return kvix_hash_seq_next(prev, local);
#endif
}

/* kvix_qchain_at, inlined. */
static inline uint64_t kvix_canon_at(kvix_qchain *q, size_t i)
{
    if (__builtin_expect(q->done > i, 1))
        return q->canon[i];
    size_t j = q->done;
    uint64_t c = j ? q->canon[j - 1] : 0;
    for (; j <= i; j++) {
        c = j == 0 ? q->local[0] : kvix_canon_next(c, q->local[j]);
        q->canon[j] = c;
    }
    q->done = j;
    return c;
}

#endif
