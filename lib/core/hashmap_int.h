/* libkvix private: a small open-addressing hash map with fixed-size u64 keys
 * (one or two words) and fixed-size values stored inline.
 *
 * Linear probing with one control byte per slot (empty, or 7 bits of the
 * hash, so most failed comparisons never touch the entry) and backward-shift
 * deletion (no tombstones, so a map that churns never degrades). Grows at
 * 80% load, shrinks below 10%. Any key value is allowed, 0 included.
 *
 * Not thread-safe: the index gives each map a single writer and no readers
 * on other threads. Value pointers returned by get/put are valid until the
 * next put or del on the same map. */
#ifndef KVIX_HASHMAP_INT_H
#define KVIX_HASHMAP_INT_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvix_hmap {
    uint8_t *ctrl;      /* cap control bytes: 0 = empty, 0x80 | top 7 hash bits = full */
    unsigned char *ent; /* cap entries of esize bytes: key words, then the value */
    size_t cap, n, esize;
    unsigned kw;        /* key words: 1 or 2 */
} kvix_hmap;

/* An empty map (allocates nothing until the first put). key_words is 1 or 2;
 * value_size may be 0 (a set). */
void kvix__hmap_init(kvix_hmap *m, unsigned key_words, size_t value_size);
/* Free the storage; the map is empty and reusable with the same shape. */
void kvix__hmap_release(kvix_hmap *m);

/* The value stored under key (kw words), or NULL. */
void *kvix__hmap_get(const kvix_hmap *m, const uint64_t *key);
/* The value under key, inserting a zeroed one (*inserted = 1) if absent.
 * NULL when memory runs out (the map is unchanged). */
void *kvix__hmap_put(kvix_hmap *m, const uint64_t *key, int *inserted);
/* Make room for n entries in all, so that as many puts never grow the map
 * (a restore knows its count: one allocation instead of log2(n) rehashes).
 * Returns 0, or -1 when memory runs out (the map is unchanged). */
int kvix__hmap_reserve(kvix_hmap *m, size_t n);
/* Remove key; returns 1 if it was present. */
int kvix__hmap_del(kvix_hmap *m, const uint64_t *key);

/* Iterate: it starts at 0; returns the next value (and its key in *key when
 * key is non-NULL) or NULL at the end. The map must not change meanwhile. */
void *kvix__hmap_next(const kvix_hmap *m, size_t *it, const uint64_t **key);

/* Bytes of heap held (not counting the kvix_hmap struct itself). */
size_t kvix__hmap_memory(const kvix_hmap *m);

static inline size_t kvix_hmap_size(const kvix_hmap *m) { return m->n; }

/* A 64-bit finaliser (MurmurHash3 fmix64): engine and test hashes may be
 * small integers, so keys are always mixed before use. */
static inline uint64_t kvix_mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= UINT64_C(0xff51afd7ed558ccd);
    k ^= k >> 33;
    k *= UINT64_C(0xc4ceb9fe1a85ec53);
    k ^= k >> 33;
    return k;
}

/* The table policy kvix_hmap and the front end's keyless blocks map
 * (index_bmap.c) share: a control byte a slot (0 empty, else 0x80 | the
 * hash's top 7 bits), linear probing, load at most 80%, capacity doubled
 * from KVIX_HM_MIN_CAP, halved below 10% past 64 slots, and backward-shift
 * deletion. */
#define KVIX_HM_MIN_CAP 8

static inline uint8_t kvix_hm_tag(uint64_t h) { return (uint8_t)(0x80 | (h >> 57)); }

/* The capacity holding n entries, doubled from cur (0: none yet), or 0 when
 * a table of esize-byte entries that large could overflow. */
static inline size_t kvix_hm_cap_for(size_t cur, size_t n, size_t esize)
{
    size_t cap = cur ? cur : KVIX_HM_MIN_CAP;
    while (n * 5 > cap * 4) {
        if (cap > SIZE_MAX / 4 / esize)
            return 0;
        cap *= 2;
    }
    return cap;
}

/* The empty slot hash h probes to first (the table has one). */
static inline size_t kvix_hm_free_slot(const uint8_t *ctrl, size_t mask, uint64_t h)
{
    size_t i = h & mask;
    while (ctrl[i])
        i = (i + 1) & mask;
    return i;
}

/* Backward shift: the entry at j, whose home slot is home, moves into the
 * hole at i when the hole lies between its home and where it sits. */
static inline int kvix_hm_fills_hole(size_t i, size_t j, size_t home, size_t mask)
{
    return ((j - home) & mask) >= ((j - i) & mask);
}

/* A table of cap slots holding n (after a removal, n > 0) is halved. */
static inline int kvix_hm_shrinks(size_t n, size_t cap) { return cap > 64 && n * 10 < cap; }

#endif
