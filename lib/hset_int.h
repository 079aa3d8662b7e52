/* libkvix private: a block's holder set whose cost follows its holders, not
 * the fleet (the nodes of the positional and radix backends).
 *
 * Most blocks have one holder; the first blocks of shared prompts have
 * thousands. So a set holds up to KVIX_HS_INLINE slot ids inline (16 bits
 * each) and is promoted, on the next add, to a bitset as wide as the
 * backend's slots, published by RCU. A promoted set stays a bitset until
 * its node is freed: a reader that loaded "not promoted" just before a
 * promotion then reads inline ids frozen at the promotion, a state of the set
 * within its read; demoting in place would let it see a mix that never was.
 * Per-tier sets exist only once a non-gpu tier holds the block. The bitset
 * and the tier sets share one out-of-line record (kvix_wset), and a set is
 * one 64-bit word: four inline ids, or the record's address (the record
 * then keeps the inline ids too while not promoted). So a set costs 8 bytes
 * in its node until it needs a record.
 *
 * Inline ids: an add fills the first free entry, a delete frees its entry;
 * the four share one word, so a reader sees each holder once.
 * Writers change a set only under its node's lock; readers load lock-free.
 */
#ifndef KVIX_HSET_INT_H
#define KVIX_HSET_INT_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "index_int.h"
#include "kvix/error.h"
#include "kvix/event.h"
#include "rcu_int.h"

typedef _Atomic uint64_t kvix_aword;

/* Counters a backend shares with its nodes' sets. */
typedef struct kvix_bmem {
    _Atomic long bytes;  /* bytes held */
    _Atomic long tiered; /* nodes with per-tier sets: queries count tiers only when > 0 */
} kvix_bmem;

/* A set's out-of-line record, published by RCU and replaced whole (copy on
 * write) when its shape changes, so a node pays one word for both:
 *  - big: w[0..nw) is the any-tier set, a bitset over slots (else the
 *    holders are the inline ids, kept in the record's ids; a big record's
 *    ids are those at the promotion, frozen);
 *  - tiered: tier t's bitset is w[tw + t * nw ..) with tw = big ? nw : 0.
 * rcu first: freed with kvix_rcu_free. */
typedef struct kvix_wset {
    struct rcu_head rcu;
    uint32_t nw;
    uint32_t count;  /* holders in any tier while big (writer side) */
    uint32_t nongpu; /* bits set in non-gpu tiers (writer side): the tiers go at 0 */
    uint8_t big, tiered;
    _Atomic uint64_t ids; /* the inline ids while not big */
    kvix_aword w[];
} kvix_wset;
typedef kvix_wset kvix_tset; /* a record seen for its tier sets */

static inline uint64_t kvix_ld(const kvix_aword *w)
{
    return atomic_load_explicit(w, memory_order_relaxed);
}

static inline void kvix_st(kvix_aword *w, uint64_t v)
{
    atomic_store_explicit(w, v, memory_order_relaxed);
}

static inline kvix_aword *kvix_tset_word(const kvix_tset *r, unsigned t, uint32_t wi)
{
    return (kvix_aword *)&r->w[(r->big ? r->nw : 0) + t * r->nw + wi];
}

/* Does s hold the block in tier t? (s is known to hold it in some tier;
 * ts: kvix_hs_tset's answer, NULL when every holder holds it on gpu.) */
static inline int kvix_tset_has(const kvix_tset *ts, uint32_t s, unsigned t)
{
    if (!ts)
        return t == KVIX_MEDIUM_GPU;
    return s / 64 < ts->nw && (kvix_ld(kvix_tset_word(ts, t, s / 64)) >> (s % 64) & 1);
}

static inline size_t kvix_wset_size(uint32_t nw, int big, int tiered)
{
    return sizeof(kvix_wset) +
           ((big ? 1u : 0u) + (tiered ? KVIX_MEDIUM_COUNT : 0u)) * (size_t)nw * sizeof(uint64_t);
}

/* A set word whose top 16 bits are 0 is a record's address, kept as is (so
 * LeakSanitizer follows it): every user-space address of x86-64 and arm64
 * with 4-level tables is below 2^48; one above is refused like a failed
 * allocation. */
#define KVIX_HS_PTR ((UINT64_C(1) << 48) - 1)

static inline kvix_wset *kvix_wset_new(uint32_t nw, int big, int tiered, kvix_bmem *mem)
{
    size_t sz = kvix_wset_size(nw, big, tiered);
    kvix_wset *r = calloc(1, sz);
    if (r && ((uint64_t)(uintptr_t)r & ~KVIX_HS_PTR)) {
        free(r);
        r = NULL;
    }
    if (r) {
        r->nw = nw;
        r->big = (uint8_t)big;
        r->tiered = (uint8_t)tiered;
        atomic_fetch_add_explicit(&mem->bytes, (long)sz, memory_order_relaxed);
    }
    return r;
}

static inline void kvix_wset_retire(kvix_wset *r, kvix_bmem *mem)
{
    atomic_fetch_sub_explicit(&mem->bytes, (long)kvix_wset_size(r->nw, r->big, r->tiered),
                              memory_order_relaxed);
    kvix_rcu_free(&r->rcu);
}

/* Inline ids: four 16-bit lanes of one word (slots are below KVIX_SLOTS_MAX
 * = 2^16), so a reader loads all four at once, a state of the set. A free
 * lane is 0xffff, so slot 0xffff is never kept inline (a set it joins goes
 * big); and a top lane of 0 would make the word an address, so slot 0 never
 * takes the top lane (a set it would join as a fourth goes big). */
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

static inline int kvix_wset_has(const kvix_wset *e, uint32_t s)
{
    return s / 64 < e->nw && (kvix_ld(&e->w[s / 64]) >> (s % 64) & 1);
}

/* One look at a set: its bitset when promoted, else its inline ids, read
 * once (a state of the set). Take it once per use, as the query does. */
typedef struct kvix_hview {
    const kvix_wset *big;
    uint64_t ids; /* when big is NULL */
} kvix_hview;

static inline kvix_hview kvix_hs_view(const kvix_hset *h)
{
    uint64_t w = kvix_hs_word(h);
    kvix_wset *r = kvix_hw_rec(w);
    kvix_hview v = {NULL, w};
    if (r) {
        if (r->big)
            v.big = r;
        else
            v.ids = atomic_load_explicit(&r->ids, memory_order_relaxed);
    }
    return v;
}

static inline int kvix_hv_has(kvix_hview v, uint32_t s)
{
    return v.big ? kvix_wset_has(v.big, s) : kvix_ids_have(v.ids, s);
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

/* Where the inline ids are now (writer side): the word, or the record's. */
static inline _Atomic uint64_t *kvix_hs_idsp(kvix_hset *h, kvix_wset *r)
{
    return r ? &r->ids : &h->w;
}

/* The inline ids (writer side; meaningless for a big set). */
static inline uint64_t kvix_hs_ids(const kvix_hset *h)
{
    uint64_t w = atomic_load_explicit(&h->w, memory_order_relaxed);
    kvix_wset *r = kvix_hw_rec(w);
    return r ? atomic_load_explicit(&r->ids, memory_order_relaxed) : w;
}

/* No holder in any tier (writer side). */
static inline int kvix_hs_empty(const kvix_hset *h)
{
    kvix_wset *r = kvix_hs_rec(h);
    return r && r->big ? r->count == 0 : kvix_hs_ids(h) == KVIX_HS_EMPTY;
}

/* Holders in any tier (writer side). */
static inline uint32_t kvix_hs_count(const kvix_hset *h)
{
    kvix_wset *r = kvix_hs_rec(h);
    if (r && r->big)
        return r->count;
    uint32_t n = 0;
    uint64_t w = kvix_hs_ids(h);
    for (unsigned i = 0; i < KVIX_HS_INLINE; i++, w >>= 16)
        n += (w & KVIX_HS_FREE16) != KVIX_HS_FREE16;
    return n;
}

/* Ids kvix_hv_list may write for view v. */
static inline uint32_t kvix_hv_room(kvix_hview v)
{
    return v.big ? 64 * v.big->nw : KVIX_HS_INLINE;
}

/* Write the holders of view v to out (kvix_hv_room(v) ids), each once;
 * returns how many. */
static inline uint32_t kvix_hv_list(kvix_hview v, uint32_t *out)
{
    uint32_t n = 0;
    const kvix_wset *big = v.big;
    if (big) {
        for (uint32_t wi = 0; wi < big->nw; wi++)
            for (uint64_t b = kvix_ld(&big->w[wi]); b; b &= b - 1)
                out[n++] = wi * 64 + (uint32_t)__builtin_ctzll(b);
        return n;
    }
    uint64_t w = v.ids; /* one state of the set: each id once */
    for (unsigned i = 0; i < KVIX_HS_INLINE; i++, w >>= 16)
        if ((w & KVIX_HS_FREE16) != KVIX_HS_FREE16)
            out[n++] = (uint32_t)(w & KVIX_HS_FREE16);
    return n;
}

static inline void kvix_bit_set(kvix_aword *w, uint32_t s)
{
    kvix_st(&w[s / 64], kvix_ld(&w[s / 64]) | UINT64_C(1) << (s % 64));
}

/* Set the bits of the inline ids of w (the bitset covers them). */
static inline void kvix_ids_to_bits(uint64_t w, kvix_aword *bits)
{
    for (unsigned i = 0; i < KVIX_HS_INLINE; i++, w >>= 16)
        if ((w & KVIX_HS_FREE16) != KVIX_HS_FREE16)
            kvix_bit_set(bits, (uint32_t)(w & KVIX_HS_FREE16));
}

/* The words covering the inline ids of w (at least nw). */
static inline uint32_t kvix_ids_nw(uint64_t w, uint32_t nw)
{
    for (unsigned i = 0; i < KVIX_HS_INLINE; i++, w >>= 16)
        if ((w & KVIX_HS_FREE16) != KVIX_HS_FREE16 && (w & KVIX_HS_FREE16) / 64 + 1 > nw)
            nw = (uint32_t)(w & KVIX_HS_FREE16) / 64 + 1;
    return nw;
}

/* Publish n in place of r (NULL allowed on either side: a set with no
 * record keeps r's inline ids in its word). */
static inline void kvix_hs_publish(kvix_hset *h, kvix_wset *r, kvix_wset *n, kvix_bmem *mem)
{
    uint64_t w = n ? (uint64_t)(uintptr_t)n : atomic_load_explicit(&r->ids, memory_order_relaxed);
    atomic_store_explicit(&h->w, w, memory_order_release);
    if (r)
        kvix_wset_retire(r, mem);
}

/* A copy of the set's record reshaped: nw words (at least r's), big and
 * tiered as asked. A new any-tier bitset gets the inline holders, new tier
 * sets get gpu = the any-tier set (until now every holder held it on gpu). */
static inline kvix_wset *kvix_hs_reshape(const kvix_hset *h, uint32_t nw, int big, int tiered,
                                         kvix_bmem *mem)
{
    kvix_wset *r = kvix_hs_rec(h);
    if (r && r->nw > nw)
        nw = r->nw;
    kvix_wset *n = kvix_wset_new(nw, big, tiered, mem);
    if (!n)
        return NULL;
    atomic_init(&n->ids, kvix_hs_ids(h));
    int rbig = r && r->big;
    if (big) {
        if (rbig) {
            for (uint32_t i = 0; i < r->nw; i++)
                kvix_st(&n->w[i], kvix_ld(&r->w[i]));
            n->count = r->count;
        } else {
            n->count = kvix_hs_count(h);
            kvix_ids_to_bits(kvix_hs_ids(h), n->w);
        }
    }
    if (tiered) {
        if (r && r->tiered) {
            n->nongpu = r->nongpu;
            for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
                for (uint32_t i = 0; i < r->nw; i++)
                    kvix_st(kvix_tset_word(n, t, i), kvix_ld(kvix_tset_word(r, t, i)));
        } else {
            kvix_aword *gpu = kvix_tset_word(n, KVIX_MEDIUM_GPU, 0);
            if (rbig) {
                for (uint32_t i = 0; i < r->nw; i++)
                    kvix_st(&gpu[i], kvix_ld(&r->w[i]));
            } else {
                kvix_ids_to_bits(kvix_hs_ids(h), gpu);
            }
        }
    }
    return n;
}

/* The set's record with per-tier sets of at least nw words (made or grown,
 * published), or NULL (out of memory: nothing changed). */
static inline kvix_tset *kvix_hs_tiers(kvix_hset *h, uint32_t nw, kvix_bmem *mem)
{
    kvix_wset *r = kvix_hs_rec(h);
    if (r && r->tiered && r->nw >= nw)
        return r;
    if (!(r && r->big))
        nw = kvix_ids_nw(kvix_hs_ids(h), nw);
    kvix_wset *n = kvix_hs_reshape(h, nw, r && r->big, 1, mem);
    if (!n)
        return NULL;
    if (!(r && r->tiered))
        atomic_fetch_add_explicit(&mem->tiered, 1, memory_order_relaxed);
    kvix_hs_publish(h, r, n, mem);
    return n;
}

/* No holder holds the block in a non-gpu tier any more: the tier sets go
 * (when a copy without them cannot be made, they stay, still exact). */
static inline void kvix_hs_untier(kvix_hset *h, kvix_bmem *mem)
{
    kvix_wset *r = kvix_hs_rec(h);
    kvix_wset *n = NULL;
    if (r->big && !(n = kvix_hs_reshape(h, r->nw, 1, 0, mem)))
        return;
    atomic_fetch_sub_explicit(&mem->tiered, 1, memory_order_relaxed);
    kvix_hs_publish(h, r, n, mem);
}

/* The any-tier set gains s (not a holder): inline, or in a bitset of at
 * least hint_nw words (grown or promoted to, published by RCU). */
static inline int kvix_hs_insert(kvix_hset *h, uint32_t s, uint32_t hint_nw, kvix_bmem *mem)
{
    uint32_t need = s / 64 + 1;
    kvix_wset *r = kvix_hs_rec(h);
    if (!(r && r->big)) {
        _Atomic uint64_t *ip = kvix_hs_idsp(h, r);
        uint64_t w = atomic_load_explicit(ip, memory_order_relaxed);
        for (unsigned sh = 0; sh < 64; sh += 16)
            if ((w >> sh & KVIX_HS_FREE16) == KVIX_HS_FREE16 && kvix_lane_ok(s, sh)) {
                atomic_store_explicit(ip, (w & ~(KVIX_HS_FREE16 << sh)) | (uint64_t)s << sh,
                                      memory_order_relaxed);
                return KVIX_OK;
            }
    }
    if (!(r && r->big) || r->nw < need) {
        uint32_t nw = hint_nw > need ? hint_nw : need;
        kvix_wset *n = kvix_hs_reshape(h, nw, 1, r && r->tiered, mem);
        if (!n)
            return KVIX_ENOMEM;
        kvix_bit_set(n->w, s);
        n->count++;
        kvix_hs_publish(h, r, n, mem);
        return KVIX_OK;
    }
    kvix_bit_set(r->w, s);
    r->count++;
    return KVIX_OK;
}

static inline void kvix_hs_remove(kvix_hset *h, uint32_t s)
{
    kvix_wset *e = kvix_hs_rec(h);
    if (e && e->big) {
        kvix_st(&e->w[s / 64], kvix_ld(&e->w[s / 64]) & ~(UINT64_C(1) << (s % 64)));
        e->count--;
        return;
    }
    _Atomic uint64_t *ip = kvix_hs_idsp(h, e);
    uint64_t w = atomic_load_explicit(ip, memory_order_relaxed);
    for (unsigned sh = 0; sh < 64; sh += 16)
        if ((w >> sh & KVIX_HS_FREE16) == s) {
            atomic_store_explicit(ip, w | KVIX_HS_FREE16 << sh, memory_order_relaxed);
            return;
        }
}

/* Slot s now holds the block in tier t: KVIX_OK, or 1 when it held it in
 * that tier already (nothing changes), or KVIX_ENOMEM (nothing changes).
 * *any_new: s did not hold it in any tier before. hint_nw: words covering
 * the backend's slots. */
static inline int kvix_hs_add(kvix_hset *h, uint32_t s, unsigned t, uint32_t hint_nw,
                              kvix_bmem *mem, int *any_new)
{
    *any_new = 0;
    uint64_t w0 = atomic_load_explicit(&h->w, memory_order_relaxed);
    if (t == KVIX_MEDIUM_GPU && !kvix_hw_rec(w0)) { /* most adds: inline, gpu only */
        if (kvix_ids_have(w0, s))
            return 1;
        for (unsigned sh = 0; sh < 64; sh += 16)
            if ((w0 >> sh & KVIX_HS_FREE16) == KVIX_HS_FREE16 && kvix_lane_ok(s, sh)) {
                atomic_store_explicit(&h->w, (w0 & ~(KVIX_HS_FREE16 << sh)) | (uint64_t)s << sh,
                                      memory_order_relaxed);
                *any_new = 1;
                return KVIX_OK;
            }
    }
    kvix_aword *tw = NULL;
    uint64_t bit = UINT64_C(1) << (s % 64);
    if (t != KVIX_MEDIUM_GPU || kvix_hs_tset(h)) {
        kvix_tset *ts = kvix_hs_tiers(h, s / 64 + 1, mem);
        if (!ts)
            return KVIX_ENOMEM;
        tw = kvix_tset_word(ts, t, s / 64);
        uint64_t v = kvix_ld(tw);
        if (v & bit)
            return 1; /* already held in that tier: nothing changes */
        kvix_st(tw, v | bit);
        if (t != KVIX_MEDIUM_GPU)
            ts->nongpu++;
    }
    if (kvix_hs_has(h, s))
        return tw ? KVIX_OK : 1; /* untiered: the any-tier set is the gpu set */
    if (kvix_hs_insert(h, s, hint_nw, mem) < 0) {
        if (tw) { /* undo the tier bit (the record was not replaced): the front
                   * end will not count this add */
            kvix_tset *ts = kvix_hs_rec(h);
            kvix_st(tw, kvix_ld(tw) & ~bit);
            if (t != KVIX_MEDIUM_GPU && --ts->nongpu == 0)
                kvix_hs_untier(h, mem);
        }
        return KVIX_ENOMEM;
    }
    *any_new = 1;
    return KVIX_OK;
}

/* Slot s no longer holds the block in tier t. *any_gone: s holds it in no
 * tier now. Unknown (slot, tier) pairs change nothing. */
static inline void kvix_hs_del(kvix_hset *h, uint32_t s, unsigned t, kvix_bmem *mem,
                               int *any_gone)
{
    *any_gone = 0;
    uint64_t w0 = atomic_load_explicit(&h->w, memory_order_relaxed);
    if (!kvix_hw_rec(w0)) { /* most deletes: inline, gpu only */
        if (t != KVIX_MEDIUM_GPU || !kvix_ids_have(w0, s))
            return;
        for (unsigned sh = 0; sh < 64; sh += 16)
            if ((w0 >> sh & KVIX_HS_FREE16) == s) {
                atomic_store_explicit(&h->w, w0 | KVIX_HS_FREE16 << sh, memory_order_relaxed);
                *any_gone = 1;
                return;
            }
    }
    if (!kvix_hs_has(h, s))
        return;
    uint64_t bit = UINT64_C(1) << (s % 64);
    kvix_tset *ts = kvix_hs_tset(h);
    if (ts) {
        if (!kvix_tset_has(ts, s, t))
            return;
        kvix_aword *tw = kvix_tset_word(ts, t, s / 64);
        kvix_st(tw, kvix_ld(tw) & ~bit);
        if (t != KVIX_MEDIUM_GPU)
            ts->nongpu--;
        *any_gone = 1;
        for (unsigned u = 0; u < KVIX_MEDIUM_COUNT; u++)
            if (kvix_tset_has(ts, s, u))
                *any_gone = 0;
        if (ts->nongpu == 0) /* gpu only again: the any-tier set says it all */
            kvix_hs_untier(h, mem);
    } else {
        if (t != KVIX_MEDIUM_GPU)
            return;
        *any_gone = 1;
    }
    if (*any_gone)
        kvix_hs_remove(h, s);
}

/* Free the out-of-line record now (quiet backend) or after a grace period. */
static inline void kvix_hs_free(kvix_hset *h)
{
    kvix_wset *r = kvix_hs_rec(h);
    if (r)
        free(r);
}

static inline void kvix_hs_retire(kvix_hset *h, kvix_bmem *mem)
{
    kvix_wset *r = kvix_hs_rec(h);
    if (r) {
        if (r->tiered)
            atomic_fetch_sub_explicit(&mem->tiered, 1, memory_order_relaxed);
        kvix_wset_retire(r, mem);
    }
}

#endif
