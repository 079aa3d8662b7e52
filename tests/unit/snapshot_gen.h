/* Synthetic index states for the snapshot tests and benchmark: per (worker,
 * dp) forests of blocks that look like prompt caches (long chains that branch
 * now and then), sorted as kvix_index_foreach gives them. Header-only so the
 * unit tests and bench/ share it without another object file. */
#ifndef KVIX_SNAPSHOT_GEN_H
#define KVIX_SNAPSHOT_GEN_H

#include <stdint.h>
#include <stdlib.h>

#include "kvix/hash.h"
#include "kvix/index.h"

static inline uint64_t sg_rand(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static inline int sg_cmp(const void *a, const void *b)
{
    const kvix_block_info *x = a, *y = b;
    if (x->position != y->position)
        return x->position < y->position ? -1 : 1;
    return x->engine < y->engine ? -1 : x->engine > y->engine;
}

/* Drop every k-th block that has children, as an engine evicting a parent
 * before its children would: what stays below it are orphans. Returns the
 * new count (the array is compacted in place, order kept). */
static inline size_t sg_orphan(kvix_block_info *b, size_t n, size_t k)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int has_child = 0;
        for (size_t j = i + 1; j < n && b[j].position <= b[i].position + 1 && !has_child; j++)
            has_child = b[j].position == b[i].position + 1 && b[j].parent == b[i].engine;
        if (has_child && i % k == 0)
            continue;
        b[o++] = b[i];
    }
    return o;
}

/* n blocks for one (worker, dp) from seed; tiers: 0 = gpu only, 1 = mixed.
 * Returns a malloc'ed array sorted by (position, engine), NULL on ENOMEM. */
static inline kvix_block_info *sg_group(uint64_t seed, size_t n, int tiers)
{
    kvix_block_info *b = malloc((n ? n : 1) * sizeof *b);
    if (!b)
        return NULL;
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = sg_rand(&s);
        size_t p;
        if (i == 0 || r % 100 < 2)
            p = SIZE_MAX; /* a new root */
        else if (r % 100 < 90)
            p = i - 1;    /* extend the current chain */
        else
            p = (size_t)(sg_rand(&s) % i); /* branch off anywhere */
        b[i].position = p == SIZE_MAX ? 0 : b[p].position + 1;
        b[i].parent = p == SIZE_MAX ? 0 : b[p].engine;
        b[i].engine = sg_rand(&s);
        b[i].local = sg_rand(&s);
        b[i].parent_canon = p == SIZE_MAX ? 0 : b[p].canon;
        b[i].canon = p == SIZE_MAX ? b[i].local : kvix_hash_seq_next(b[i].parent_canon, b[i].local);
        b[i].tiers = 1;
        if (tiers) {
            uint64_t t = sg_rand(&s) % 10;
            b[i].tiers = t < 6 ? 1u : t < 8 ? 2u : t < 9 ? 3u : (1u << (sg_rand(&s) % 4));
        }
    }
    qsort(b, n, sizeof *b, sg_cmp);
    return b;
}

#endif
