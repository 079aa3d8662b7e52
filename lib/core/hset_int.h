/* libkvix private: a block's holder set whose cost follows its holders, not
 * the fleet (the nodes of the positional and radix backends).
 *
 * Most blocks have one holder; the first blocks of shared prompts have
 * thousands, and at thousands of workers a block's holders are spread over
 * the whole slot range. So a set takes one of three forms, by its size:
 *  - inline: up to KVIX_HS_INLINE slot ids (16 bits each) in the node's set
 *    word, every holder on gpu: 8 bytes, no record;
 *  - array: a record of the holders' slot ids, sorted, 2 bytes each (and a
 *    tier mask byte each when some holder holds the block off gpu);
 *  - bits: a record with a bitset as wide as the backend's slots, only where
 *    it is smaller than the array (dense sets; and at a few hundred slots,
 *    where a bitset is a few words), plus a bitset per tier when tiered.
 * The form is chosen again at every change that replaces the record, so a
 * set that shrinks goes back down (bits to array when the array is well
 * below the bitset, anything to inline when it fits): lib/core/hset_write_int.h,
 * the writers' side.
 *
 * Concurrency: writers change a set only under its node's lock; readers load
 * lock-free and always see a state of the set, each holder once:
 *  - the inline ids are one word (an add fills a free lane, a delete frees
 *    its lane: each one store);
 *  - an array record is immutable once published: a change of its holders
 *    publishes a new record (copy on write, release store of the set word)
 *    and retires the old one after a grace period. Only a holder's tier mask
 *    changes in place (one byte store), and, when no memory is left for the
 *    copy, a delete marks its entry gone in place (kvix_arr_gone) so that a
 *    delete never fails;
 *  - a bitset changes in place, a bit per store, and is replaced whole when
 *    it must widen, gain or lose tiers, or change form.
 * A record always has a holder: the last holder's delete goes back inline.
 */
#ifndef KVIX_HSET_INT_H
#define KVIX_HSET_INT_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvix/error.h"
#include "kvix/event.h"
#include "rcu_int.h"

/* Holder ids are below this (16-bit lanes); the index's slots are these ids
 * (KVIX_HSET_IDS, lib/index/index_int.h). */
#define KVIX_HSET_IDS (1u << 16)

typedef _Atomic uint64_t kvix_aword;
typedef _Atomic uint16_t kvix_a16;
typedef _Atomic uint8_t kvix_a8;

/* Counters a backend shares with its nodes' sets, and the sets' records
 * retired and not yet handed to call_rcu (lib/core/hset.c: a batch at a time, so
 * that a copy on write does not cost a callback of its own). Zeroed with
 * the backend; kvix__bmem_release when it is freed. */
typedef struct kvix_rbatch kvix_rbatch;
typedef struct kvix_bmem {
    _Atomic long bytes;  /* bytes held */
    _Atomic long tiered; /* nodes with per-tier sets: queries count tiers only when > 0 */
    _Atomic int lock;    /* of batch */
    kvix_rbatch *batch;
} kvix_bmem;

/* Free block p (a malloc'd set record) after a grace period: kept with
 * others retired before it, the batch handed to call_rcu when full. Call
 * from a registered thread. */
void kvix__bmem_defer(kvix_bmem *m, void *p);
/* Free what waits in m's batch now (the backend is quiet: no reader). */
void kvix__bmem_release(kvix_bmem *m);

static inline uint64_t kvix_ld(const kvix_aword *w)
{
    return atomic_load_explicit(w, memory_order_relaxed);
}

static inline void kvix_st(kvix_aword *w, uint64_t v)
{
    atomic_store_explicit(w, v, memory_order_relaxed);
}

static inline uint32_t kvix_ld16(const kvix_a16 *p)
{
    return atomic_load_explicit(p, memory_order_relaxed);
}

static inline unsigned kvix_ld8(const kvix_a8 *p)
{
    return atomic_load_explicit(p, memory_order_relaxed);
}

/* ---- records ---- */

#define KVIX_WS_ARR 0
#define KVIX_WS_BITS 1
#define KVIX_TM_GPU (1u << KVIX_MEDIUM_GPU)
#define KVIX_TM_OFF (((1u << KVIX_MEDIUM_COUNT) - 1) & ~KVIX_TM_GPU) /* the non-gpu tiers */
/* The most entries an array keeps (a bitset over every slot is smaller long
 * before, kvix_hs_bits_ok). */
#define KVIX_ARR_MAX 30000u

/* A set's out-of-line record, published by RCU, rcu first (freed with
 * kvix__rcu_free). The payload, 8-aligned, is
 *  - array: n slot ids (kvix_arr_ids), sorted, then when tiered n tier masks
 *    (kvix_arr_tm: bit t, the holder holds the block in tier t; 0: the entry
 *    is gone). An untiered array may repeat an id (kvix_arr_gone): each
 *    holder is listed once all the same;
 *  - bits: n words of the any-tier bitset, then when tiered a bitset of n
 *    words per tier and one word counting the (holder, non-gpu tier) pairs
 *    (writer side). */
typedef struct kvix_wset {
    struct rcu_head rcu;
    uint8_t kind;   /* KVIX_WS_ARR, KVIX_WS_BITS */
    uint8_t tiered; /* some holder holds the block off gpu */
    uint16_t n;     /* array: entries, fixed once published; bits: words */
    /* holders in any tier: changed by the writer only; readers of an
     * untiered array compare it with n (kvix_hv_list) */
    _Atomic uint32_t live;
    kvix_aword w[];
} kvix_wset;
typedef kvix_wset kvix_tset; /* a record seen for its tier masks */

static inline kvix_a16 *kvix_arr_ids(const kvix_wset *r)
{
    return (kvix_a16 *)(void *)(uintptr_t)r->w;
}

static inline kvix_a8 *kvix_arr_tm(const kvix_wset *r)
{
    return (kvix_a8 *)(void *)(kvix_arr_ids(r) + r->n);
}

/* Tier t's bitset of a tiered bits record. */
static inline kvix_aword *kvix_bits_tier(const kvix_wset *r, unsigned t)
{
    return (kvix_aword *)(uintptr_t)&r->w[(1 + t) * (uint32_t)r->n];
}

static inline kvix_aword *kvix_bits_nongpu(const kvix_wset *r)
{
    return (kvix_aword *)(uintptr_t)&r->w[(1 + KVIX_MEDIUM_COUNT) * (uint32_t)r->n];
}

static inline size_t kvix_arr_size(uint32_t n, int tiered)
{
    return (sizeof(kvix_wset) + n * (tiered ? 3u : 2u) + 7) & ~(size_t)7;
}

static inline size_t kvix_bits_size(uint32_t nw, int tiered)
{
    return sizeof(kvix_wset) + (tiered ? (1 + KVIX_MEDIUM_COUNT) * nw + 1 : nw) * sizeof(uint64_t);
}

static inline size_t kvix_wset_size(const kvix_wset *r)
{
    return r->kind == KVIX_WS_ARR ? kvix_arr_size(r->n, r->tiered)
                                  : kvix_bits_size(r->n, r->tiered);
}

/* A set word whose top 16 bits are 0 is a record's address, kept as is (so
 * LeakSanitizer follows it): every user-space address of x86-64 and arm64
 * with 4-level tables is below 2^48; one above is refused like a failed
 * allocation. */
#define KVIX_HS_PTR ((UINT64_C(1) << 48) - 1)

/* ---- inline ids ----
 * Four 16-bit lanes of one word (ids are below KVIX_HSET_IDS = 2^16), so
 * a reader loads all four at once, a state of the set. A free lane is
 * 0xffff, so slot 0xffff is never kept inline (a set it joins takes a
 * record); and a top lane of 0 would make the word an address, so slot 0
 * never takes the top lane (a set rebuilt inline puts its ids in order, slot
 * 0 first). */
#define KVIX_HS_INLINE 4
#define KVIX_HS_FREE16 UINT64_C(0xffff)
#define KVIX_HS_LANES UINT64_C(0x0001000100010001)
#define KVIX_HS_EMPTY UINT64_MAX

typedef struct kvix_hset {
    _Atomic uint64_t w; /* inline ids (every holder on gpu), or the record's address */
} kvix_hset;

static inline void kvix_hs_init(kvix_hset *h)
{
    atomic_init(&h->w, KVIX_HS_EMPTY);
}

/* The record of set word w, or NULL (w is the inline ids). */
static inline kvix_wset *kvix_hw_rec(uint64_t w)
{
    return w >> 48 ? NULL : (kvix_wset *)(uintptr_t)w;
}

/* May slot s take the lane at bit sh of an inline word? */
static inline int kvix_lane_ok(uint32_t s, unsigned sh)
{
    return s != KVIX_HS_FREE16 && (s != 0 || sh < 48);
}

/* The set's word: acquire, so a record it names is seen whole. */
static inline uint64_t kvix_hs_word(const kvix_hset *h)
{
    return atomic_load_explicit(&h->w, memory_order_acquire);
}

/* The record (writer side, or a reader inside a read-side section). */
static inline kvix_wset *kvix_hs_rec(const kvix_hset *h)
{
    return kvix_hw_rec(kvix_hs_word(h));
}

/* Is s one of the inline ids of word w? (SWAR: a lane equal to s becomes 0,
 * and a zero lane borrows into its top bit.) */
static inline int kvix_ids_have(uint64_t w, uint32_t s)
{
    uint64_t x = w ^ (s * KVIX_HS_LANES);
    return ((x - KVIX_HS_LANES) & ~x & (KVIX_HS_LANES << 15)) != 0 && s != KVIX_HS_FREE16;
}

static inline uint32_t kvix_ids_count(uint64_t w)
{
    uint32_t n = 0;
    for (unsigned i = 0; i < KVIX_HS_INLINE; i++, w >>= 16)
        n += (w & KVIX_HS_FREE16) != KVIX_HS_FREE16;
    return n;
}

/* ---- reading a record ---- */

/* The first entry of the array a[0..n) (n > 0) not below s. */
static inline uint32_t kvix_arr_lb(const kvix_a16 *a, uint32_t n, uint32_t s)
{
    const kvix_a16 *b = a;
    while (n > 1) {
        uint32_t half = n / 2;
        b = kvix_ld16(&b[half - 1]) < s ? b + half : b;
        n -= half;
    }
    return (uint32_t)(b - a) + (kvix_ld16(b) < s);
}

/* Entry of holder s in array record r, or r->n. */
static inline uint32_t kvix_arr_find(const kvix_wset *r, uint32_t s)
{
    const kvix_a16 *a = kvix_arr_ids(r);
    uint32_t i = kvix_arr_lb(a, r->n, s);
    if (i < r->n && kvix_ld16(&a[i]) == s && (!r->tiered || kvix_ld8(&kvix_arr_tm(r)[i])))
        return i;
    return r->n;
}

static inline int kvix_bits_has(const kvix_aword *w, uint32_t nw, uint32_t s)
{
    return s / 64 < nw && (kvix_ld(&w[s / 64]) >> (s % 64) & 1);
}

static inline int kvix_wset_has(const kvix_wset *r, uint32_t s)
{
    if (r->kind == KVIX_WS_BITS)
        return kvix_bits_has(r->w, r->n, s);
    return kvix_arr_find(r, s) < r->n;
}

/* The tiers holder s holds the block in (a mask; 0: not a holder), r tiered. */
static inline unsigned kvix_tset_mask(const kvix_tset *r, uint32_t s)
{
    if (r->kind == KVIX_WS_ARR) {
        uint32_t i = kvix_arr_find(r, s);
        return i < r->n ? kvix_ld8(&kvix_arr_tm(r)[i]) : 0;
    }
    unsigned m = 0;
    if (s / 64 < r->n)
        for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
            m |= (unsigned)(kvix_ld(&kvix_bits_tier(r, t)[s / 64]) >> (s % 64) & 1) << t;
    return m;
}

/* Does s hold the block in tier t? (s is known to hold it in some tier;
 * ts: kvix_hs_tset's answer, NULL when every holder holds it on gpu.) */
static inline int kvix_tset_has(const kvix_tset *ts, uint32_t s, unsigned t)
{
    if (!ts)
        return t == KVIX_MEDIUM_GPU;
    return kvix_tset_mask(ts, s) >> t & 1;
}

/* ---- readers: one look at a set ---- */

/* The set's record, or its inline ids, read once (a state of the set). Take
 * it once per use, as the query does. */
typedef struct kvix_hview {
    const kvix_wset *r;
    uint64_t ids; /* when r is NULL */
} kvix_hview;

static inline kvix_hview kvix_hs_view(const kvix_hset *h)
{
    uint64_t w = kvix_hs_word(h);
    kvix_hview v = {kvix_hw_rec(w), w};
    return v;
}

static inline int kvix_hv_has(kvix_hview v, uint32_t s)
{
    return v.r ? kvix_wset_has(v.r, s) : kvix_ids_have(v.ids, s);
}

/* The per-tier sets, or NULL when every holder holds the block on gpu. */
static inline kvix_tset *kvix_hs_tset(const kvix_hset *h)
{
    kvix_wset *r = kvix_hs_rec(h);
    return r && r->tiered ? r : NULL;
}

static inline int kvix_hs_has(const kvix_hset *h, uint32_t s)
{
    return kvix_hv_has(kvix_hs_view(h), s);
}

/* Ids kvix_hv_list may write for view v. */
static inline uint32_t kvix_hv_room(kvix_hview v)
{
    if (!v.r)
        return KVIX_HS_INLINE;
    return v.r->kind == KVIX_WS_BITS ? 64u * v.r->n : v.r->n;
}

/* Write the holders of view v to out (kvix_hv_room(v) ids), each once, in
 * slot order but for inline ids; returns how many. */
static inline uint32_t kvix_hv_list(kvix_hview v, uint32_t *out)
{
    uint32_t n = 0;
    const kvix_wset *r = v.r;
    if (!r) {
        uint64_t w = v.ids; /* one state of the set: each id once */
        for (unsigned i = 0; i < KVIX_HS_INLINE; i++, w >>= 16)
            if ((w & KVIX_HS_FREE16) != KVIX_HS_FREE16)
                out[n++] = (uint32_t)(w & KVIX_HS_FREE16);
        return n;
    }
    if (r->kind == KVIX_WS_BITS) {
        uint32_t *o = out;
        for (uint32_t wi = 0; wi < r->n; wi++) {
            uint32_t base = wi * 64;
            for (uint64_t b = kvix_ld(&r->w[wi]); b; b &= b - 1)
                *o++ = base + (uint32_t)__builtin_ctzll(b);
        }
        return (uint32_t)(o - out);
    }
    const kvix_a16 *a = kvix_arr_ids(r);
    if (r->tiered) {
        const kvix_a8 *tm = kvix_arr_tm(r);
        for (uint32_t i = 0; i < r->n; i++)
            if (kvix_ld8(&tm[i]))
                out[n++] = kvix_ld16(&a[i]);
        return n;
    }
    /* Every entry a holder (live == n): copied as is. A delete that marks an
     * entry gone (kvix_arr_gone) lowers live before it changes an id, and
     * stores ids with release: a list that read a changed id sees live
     * lowered after it, and is made again, each id once. */
    uint32_t na = r->n;
    if (atomic_load_explicit(&r->live, memory_order_relaxed) == na) {
        for (uint32_t i = 0; i < na; i++)
            out[i] = atomic_load_explicit(&a[i], memory_order_acquire);
        if (atomic_load_explicit(&r->live, memory_order_relaxed) == na)
            return na;
    }
    uint32_t last = KVIX_HSET_IDS; /* an id repeated (kvix_arr_gone) is listed once */
    for (uint32_t i = 0; i < na; i++) {
        uint32_t s = kvix_ld16(&a[i]);
        out[n] = s;
        n += s != last;
        last = s;
    }
    return n;
}

/* The calling thread's marks: KVIX_HSET_IDS bits of scratch for
 * kvix_hv_split (whatever they hold between uses), made on the thread's
 * first call and freed when it exits; NULL when no memory (splits then
 * search). */
uint64_t *kvix__hs_marks(void);

/* One candidate s (at c[i]) classified: a holder goes to c[k] (k <= i,
 * so c[i] was read already); a non-holder to tmp[m] when the split keeps
 * order, else it stays where a holder swapped it. */
static inline void kvix_split_put(uint32_t *c, uint32_t *tmp, uint32_t i, uint32_t s, int has,
                                  uint32_t *k, uint32_t *m)
{
    if (tmp) {
        if (has)
            c[(*k)++] = s;
        else
            tmp[(*m)++] = s;
    } else if (has) {
        c[i] = c[*k];
        c[(*k)++] = s;
    }
}

/* Where s is in the ascending c[0..n), or n. */
static inline uint32_t kvix_sorted_find(const uint32_t *c, uint32_t n, uint32_t s)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c[mid] < s)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && c[lo] == s ? lo : n;
}

/* Move the candidates at the k ascending places at[] to the front of
 * c[0..n), both parts keeping their order; val: room for k. The others
 * shift right in k + 1 pieces, the last of which stays. */
static inline void kvix_split_gather(uint32_t *c, const uint32_t *at, uint32_t k, uint32_t *val)
{
    for (uint32_t j = 0; j < k; j++)
        val[j] = c[at[j]];
    for (uint32_t j = k; j-- > 0;) { /* the piece before at[j] moves right by k - j */
        uint32_t from = j ? at[j - 1] + 1 : 0;
        memmove(c + from + (k - j), c + from, (size_t)(at[j] - from) * sizeof *c);
    }
    memcpy(c, val, (size_t)k * sizeof *c);
}

/* The sorted split when the set is far smaller than the candidates: each
 * holder is searched for among them (n >= 32: a record's listing, so
 * ascending), instead of each candidate in the set. tmp: room for n.
 * Returns how many, or UINT32_MAX when the set is not small enough. */
static inline uint32_t kvix_hv_split_few(kvix_hview v, uint32_t *c, uint32_t n, uint32_t *tmp)
{
    const kvix_wset *r = v.r;
    uint32_t k = 0;
    if (!r) {
        uint64_t w = v.ids; /* one state of the set: each id once */
        for (unsigned l = 0; l < KVIX_HS_INLINE; l++, w >>= 16) {
            uint32_t s = (uint32_t)(w & KVIX_HS_FREE16), at;
            if (s == KVIX_HS_FREE16 || (at = kvix_sorted_find(c, n, s)) == n)
                continue;
            uint32_t j = k++; /* inline ids are in no order: insert */
            for (; j > 0 && tmp[j - 1] > at; j--)
                tmp[j] = tmp[j - 1];
            tmp[j] = at;
        }
    } else if (r->kind == KVIX_WS_ARR && (size_t)r->n * 8 <= n) {
        /* ascending ids, each read once; a gone entry repeats its
         * neighbour's id (kvix_arr_gone): found at the same place, kept once */
        const kvix_a16 *a = kvix_arr_ids(r);
        const kvix_a8 *tm = r->tiered ? kvix_arr_tm(r) : NULL;
        uint32_t from = 0;
        for (uint32_t j = 0; j < r->n && from < n; j++) {
            uint32_t s = kvix_ld16(&a[j]);
            if (tm && !kvix_ld8(&tm[j]))
                continue;
            uint32_t at = kvix_sorted_find(c + from, n - from, s);
            if (at == n - from)
                continue;
            tmp[k++] = from + at;
            from += at + 1;
        }
    } else {
        return UINT32_MAX;
    }
    kvix_split_gather(c, tmp, k, tmp + k);
    return k;
}

/* Reorder c[0..n): the holders of view v first, in their order; returns
 * how many. Against an array, many candidates are marked in the thread's
 * marks and the array read once (each candidate then costs a few bit
 * operations, as with a bitset), few are searched for. *marks: the marks,
 * fetched on first need (NULL before; marks NULL: never).
 * tmp (room for n) or NULL: with tmp, c must be ascending and both parts
 * stay so, and a set far smaller than the candidates is searched for in
 * them (a query's first block is often held by every worker, the next by
 * a few: a split then costs the few, not the fleet). */
static inline uint32_t kvix_hv_split(kvix_hview v, uint32_t *c, uint32_t n, uint64_t **marks,
                                     uint32_t *tmp)
{
    if (tmp && n >= 32) {
        uint32_t few = kvix_hv_split_few(v, c, n, tmp);
        if (few != UINT32_MAX)
            return few;
    }
    uint32_t k = 0, m = 0;
    const kvix_wset *r = v.r;
    if (!r) {
        uint64_t ids = v.ids;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t s = c[i];
            kvix_split_put(c, tmp, i, s, kvix_ids_have(ids, s), &k, &m);
        }
    } else if (r->kind == KVIX_WS_BITS) {
        const kvix_aword *w = r->w;
        uint32_t nw = r->n;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t s = c[i];
            kvix_split_put(c, tmp, i, s, kvix_bits_has(w, nw, s), &k, &m);
        }
    } else if (marks && n >= 8 && r->n <= 16 * n && (*marks || (*marks = kvix__hs_marks()))) {
        uint64_t *mk = *marks;
        /* mark the candidates, unmark the holders, keep the unmarked (a
         * candidate's bit is set first, so what other bits were matters not;
         * nor what the array held while it was read: each entry read was a
         * holder) */
        const kvix_a16 *a = kvix_arr_ids(r);
        const kvix_a8 *tm = r->tiered ? kvix_arr_tm(r) : NULL;
        for (uint32_t i = 0; i < n; i++)
            mk[c[i] / 64] |= UINT64_C(1) << (c[i] % 64);
        for (uint32_t j = 0; j < r->n; j++) {
            uint32_t s = kvix_ld16(&a[j]);
            if (!tm || kvix_ld8(&tm[j]))
                mk[s / 64] &= ~(UINT64_C(1) << (s % 64));
        }
        for (uint32_t i = 0; i < n; i++) {
            uint32_t s = c[i];
            kvix_split_put(c, tmp, i, s, !(mk[s / 64] >> (s % 64) & 1), &k, &m);
        }
    } else {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t s = c[i];
            kvix_split_put(c, tmp, i, s, kvix_arr_find(r, s) < r->n, &k, &m);
        }
    }
    if (m)
        memcpy(c + k, tmp, (size_t)m * sizeof *c);
    return k;
}

#endif
