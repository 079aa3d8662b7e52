/* libkvix private: a block's holder set whose cost follows its holders, not
 * the fleet (the nodes of the positional and radix backends).
 *
 * Most blocks have one holder; the first blocks of shared prompts have
 * thousands. So a set holds up to KVIX_HS_INLINE slot ids inline and is
 * promoted, on the next add, to a bitset (kvix_wset) as wide as the
 * backend's slots, published by RCU. A promoted set stays a bitset until
 * its node is freed: a reader that loaded "not promoted" just before a
 * promotion then reads inline ids frozen at the promotion, a state of the set
 * within its read; demoting in place would let it see a mix that never was.
 * Per-tier sets (kvix_tset) exist only once a non-gpu tier holds the block.
 *
 * Inline ids: KVIX_HS_NONE marks a free entry; an add fills the first free
 * entry, a delete frees its entry, so a slot is in at most one entry at any
 * time (a reader that sees it twice, across a delete and a re-add, dedups).
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

/* A promoted any-tier set: a bitset over slots. rcu first: freed with
 * kvix_rcu_free. */
typedef struct kvix_wset {
    struct rcu_head rcu;
    uint32_t nw, pad;
    kvix_aword w[];
} kvix_wset;

/* Per-tier sets: tier t's words are w[t * nw .. t * nw + nw). */
typedef struct kvix_tset {
    struct rcu_head rcu;
    uint32_t nw;
    uint32_t nongpu; /* bits set in non-gpu tiers; the set goes when this reaches 0 */
    kvix_aword w[];
} kvix_tset;

static inline uint64_t kvix_ld(const kvix_aword *w)
{
    return atomic_load_explicit(w, memory_order_relaxed);
}

static inline void kvix_st(kvix_aword *w, uint64_t v)
{
    atomic_store_explicit(w, v, memory_order_relaxed);
}

/* Does s hold the block in tier t? (s is known to hold it in some tier.) */
static inline int kvix_tset_has(const kvix_tset *ts, uint32_t s, unsigned t)
{
    if (!ts)
        return t == KVIX_MEDIUM_GPU;
    return s / 64 < ts->nw && (kvix_ld(&ts->w[t * ts->nw + s / 64]) >> (s % 64) & 1);
}

static inline kvix_tset *kvix_tset_new(uint32_t nw, kvix_bmem *mem)
{
    size_t sz = sizeof(kvix_tset) + (size_t)KVIX_MEDIUM_COUNT * nw * sizeof(uint64_t);
    kvix_tset *ts = calloc(1, sz);
    if (ts) {
        ts->nw = nw;
        atomic_fetch_add_explicit(&mem->bytes, (long)sz, memory_order_relaxed);
    }
    return ts;
}

static inline void kvix_tset_retire(kvix_tset *ts, kvix_bmem *mem)
{
    size_t sz = sizeof(kvix_tset) + (size_t)KVIX_MEDIUM_COUNT * ts->nw * sizeof(uint64_t);
    atomic_fetch_sub_explicit(&mem->bytes, (long)sz, memory_order_relaxed);
    kvix_rcu_free(&ts->rcu);
}

static inline void kvix_wset_retire(kvix_wset *e, kvix_bmem *mem)
{
    atomic_fetch_sub_explicit(&mem->bytes, (long)(sizeof *e + e->nw * sizeof(uint64_t)),
                              memory_order_relaxed);
    kvix_rcu_free(&e->rcu);
}

/* Append a hit of `blocks` blocks (all on gpu until tiers are counted) for
 * slot s: in place while there is room, through kvix_qhits_push to grow. */
static inline int kvix_hit_push(kvix_qhits *out, uint32_t s, uint32_t blocks, kvix_err *err)
{
    if (__builtin_expect(out->n < out->cap, 1)) {
        kvix_qhit *h = &out->v[out->n++];
        memset(h, 0, sizeof *h);
        h->slot = s;
        h->blocks = blocks;
        h->tier_blocks[KVIX_MEDIUM_GPU] = blocks;
        return KVIX_OK;
    }
    kvix_qhit hit;
    memset(&hit, 0, sizeof hit);
    hit.slot = s;
    hit.blocks = blocks;
    hit.tier_blocks[KVIX_MEDIUM_GPU] = blocks;
    return kvix_qhits_push(out, &hit, err);
}

#define KVIX_HS_INLINE 3
#define KVIX_HS_NONE UINT32_MAX

typedef struct kvix_hset {
    _Atomic(kvix_wset *) big;   /* NULL: the holders are the inline ids */
    _Atomic(kvix_tset *) tiers; /* NULL: every holder holds the block on gpu */
    _Atomic uint32_t id[KVIX_HS_INLINE];
    uint32_t count; /* holders in any tier (writer side) */
} kvix_hset;

static inline void kvix_hs_init(kvix_hset *h)
{
    atomic_init(&h->big, NULL);
    atomic_init(&h->tiers, NULL);
    for (unsigned i = 0; i < KVIX_HS_INLINE; i++)
        atomic_init(&h->id[i], KVIX_HS_NONE);
    h->count = 0;
}

static inline uint32_t kvix_hs_id(const kvix_hset *h, unsigned i)
{
    return atomic_load_explicit(&h->id[i], memory_order_relaxed);
}

static inline int kvix_wset_has(const kvix_wset *e, uint32_t s)
{
    return s / 64 < e->nw && (kvix_ld(&e->w[s / 64]) >> (s % 64) & 1);
}

static inline int kvix_hs_has(const kvix_hset *h, uint32_t s)
{
    kvix_wset *e = atomic_load_explicit(&h->big, memory_order_acquire);
    if (e)
        return kvix_wset_has(e, s);
    for (unsigned i = 0; i < KVIX_HS_INLINE; i++)
        if (kvix_hs_id(h, i) == s)
            return 1;
    return 0;
}

/* The bitset of a promoted set, or NULL (the inline ids): load it once and
 * pass it to kvix_hs_list, so the room and the list agree. */
static inline kvix_wset *kvix_hs_big(const kvix_hset *h)
{
    return atomic_load_explicit(&h->big, memory_order_acquire);
}

/* Ids kvix_hs_list may write for big (from kvix_hs_big). */
static inline uint32_t kvix_hs_room(const kvix_wset *big)
{
    return big ? 64 * big->nw : KVIX_HS_INLINE;
}

/* Write the holders to out (kvix_hs_room(big) ids), each once; returns how
 * many. big: kvix_hs_big's answer (if the set was promoted since, its inline
 * ids are frozen at the promotion: a state of the set since big was read). */
static inline uint32_t kvix_hs_list(const kvix_hset *h, const kvix_wset *big, uint32_t *out)
{
    uint32_t n = 0;
    if (big) {
        for (uint32_t wi = 0; wi < big->nw; wi++)
            for (uint64_t v = kvix_ld(&big->w[wi]); v; v &= v - 1)
                out[n++] = wi * 64 + (uint32_t)__builtin_ctzll(v);
        return n;
    }
    for (unsigned i = 0; i < KVIX_HS_INLINE; i++) {
        uint32_t s = kvix_hs_id(h, i);
        int dup = s == KVIX_HS_NONE;
        for (uint32_t j = 0; j < n && !dup; j++)
            dup = out[j] == s;
        if (!dup)
            out[n++] = s;
    }
    return n;
}

static inline kvix_wset *kvix_wset_new(uint32_t nw, kvix_bmem *mem)
{
    kvix_wset *e = calloc(1, sizeof *e + nw * sizeof(uint64_t));
    if (e) {
        e->nw = nw;
        atomic_fetch_add_explicit(&mem->bytes, (long)(sizeof *e + nw * sizeof(uint64_t)),
                                  memory_order_relaxed);
    }
    return e;
}

/* Per-tier sets holding at least nw words, made on first need with gpu = the
 * any-tier set (until now every holder held the block on gpu). */
static inline kvix_tset *kvix_hs_tiers(kvix_hset *h, uint32_t nw, kvix_bmem *mem)
{
    kvix_tset *ts = atomic_load_explicit(&h->tiers, memory_order_relaxed);
    if (ts && ts->nw >= nw)
        return ts;
    kvix_wset *e = atomic_load_explicit(&h->big, memory_order_relaxed);
    if (e && e->nw > nw)
        nw = e->nw;
    if (!e)
        for (unsigned i = 0; i < KVIX_HS_INLINE; i++)
            if (kvix_hs_id(h, i) != KVIX_HS_NONE && kvix_hs_id(h, i) / 64 + 1 > nw)
                nw = kvix_hs_id(h, i) / 64 + 1;
    if (ts && ts->nw > nw)
        nw = ts->nw;
    kvix_tset *n = kvix_tset_new(nw, mem);
    if (!n)
        return NULL;
    kvix_aword *gpu = &n->w[KVIX_MEDIUM_GPU * nw];
    if (ts) {
        n->nongpu = ts->nongpu;
        for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
            for (uint32_t i = 0; i < ts->nw; i++)
                kvix_st(&n->w[t * nw + i], kvix_ld(&ts->w[t * ts->nw + i]));
    } else if (e) {
        for (uint32_t i = 0; i < e->nw; i++)
            kvix_st(&gpu[i], kvix_ld(&e->w[i]));
        atomic_fetch_add_explicit(&mem->tiered, 1, memory_order_relaxed);
    } else {
        for (unsigned i = 0; i < KVIX_HS_INLINE; i++) {
            uint32_t s = kvix_hs_id(h, i);
            if (s != KVIX_HS_NONE)
                kvix_st(&gpu[s / 64], kvix_ld(&gpu[s / 64]) | UINT64_C(1) << (s % 64));
        }
        atomic_fetch_add_explicit(&mem->tiered, 1, memory_order_relaxed);
    }
    atomic_store_explicit(&h->tiers, n, memory_order_release);
    if (ts)
        kvix_tset_retire(ts, mem);
    return n;
}

/* The any-tier set gains s (not a holder): inline, or in a bitset of at least
 * hint_nw words (grown or promoted to, published by RCU). */
static inline int kvix_hs_insert(kvix_hset *h, uint32_t s, uint32_t hint_nw, kvix_bmem *mem)
{
    uint32_t need = s / 64 + 1;
    kvix_wset *e = atomic_load_explicit(&h->big, memory_order_relaxed);
    if (!e) {
        for (unsigned i = 0; i < KVIX_HS_INLINE; i++)
            if (kvix_hs_id(h, i) == KVIX_HS_NONE) {
                atomic_store_explicit(&h->id[i], s, memory_order_relaxed);
                return KVIX_OK;
            }
    }
    if (!e || e->nw < need) {
        uint32_t nw = hint_nw > need ? hint_nw : need;
        if (e && e->nw > nw)
            nw = e->nw;
        kvix_wset *n = kvix_wset_new(nw, mem);
        if (!n)
            return KVIX_ENOMEM;
        if (e) {
            for (uint32_t i = 0; i < e->nw; i++)
                kvix_st(&n->w[i], kvix_ld(&e->w[i]));
        } else {
            for (unsigned i = 0; i < KVIX_HS_INLINE; i++) {
                uint32_t x = kvix_hs_id(h, i); /* all taken: the set was full */
                if (x / 64 >= nw)
                    continue; /* cannot happen: hint covers every slot seen */
                kvix_st(&n->w[x / 64], kvix_ld(&n->w[x / 64]) | UINT64_C(1) << (x % 64));
            }
        }
        kvix_st(&n->w[s / 64], kvix_ld(&n->w[s / 64]) | UINT64_C(1) << (s % 64));
        atomic_store_explicit(&h->big, n, memory_order_release);
        if (e)
            kvix_wset_retire(e, mem);
        return KVIX_OK;
    }
    kvix_st(&e->w[s / 64], kvix_ld(&e->w[s / 64]) | UINT64_C(1) << (s % 64));
    return KVIX_OK;
}

static inline void kvix_hs_remove(kvix_hset *h, uint32_t s)
{
    kvix_wset *e = atomic_load_explicit(&h->big, memory_order_relaxed);
    if (e) {
        kvix_st(&e->w[s / 64], kvix_ld(&e->w[s / 64]) & ~(UINT64_C(1) << (s % 64)));
        return;
    }
    for (unsigned i = 0; i < KVIX_HS_INLINE; i++)
        if (kvix_hs_id(h, i) == s)
            atomic_store_explicit(&h->id[i], KVIX_HS_NONE, memory_order_relaxed);
}

/* Slot s now holds the block in tier t: KVIX_OK, or 1 when it held it in
 * that tier already (nothing changes), or KVIX_ENOMEM (nothing changes).
 * *any_new: s did not hold it in any tier before. hint_nw: words covering
 * the backend's slots. */
static inline int kvix_hs_add(kvix_hset *h, uint32_t s, unsigned t, uint32_t hint_nw,
                              kvix_bmem *mem, int *any_new)
{
    *any_new = 0;
    kvix_aword *tw = NULL;
    uint64_t bit = UINT64_C(1) << (s % 64);
    if (t != KVIX_MEDIUM_GPU || atomic_load_explicit(&h->tiers, memory_order_relaxed)) {
        kvix_tset *ts = kvix_hs_tiers(h, s / 64 + 1, mem);
        if (!ts)
            return KVIX_ENOMEM;
        tw = &ts->w[t * ts->nw + s / 64];
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
        if (tw) { /* undo the tier bit: the front end will not count this add */
            kvix_tset *ts = atomic_load_explicit(&h->tiers, memory_order_relaxed);
            kvix_st(tw, kvix_ld(tw) & ~bit);
            if (t != KVIX_MEDIUM_GPU && --ts->nongpu == 0) {
                atomic_store_explicit(&h->tiers, NULL, memory_order_release);
                atomic_fetch_sub_explicit(&mem->tiered, 1, memory_order_relaxed);
                kvix_tset_retire(ts, mem);
            }
        }
        return KVIX_ENOMEM;
    }
    h->count++;
    *any_new = 1;
    return KVIX_OK;
}

/* Slot s no longer holds the block in tier t. *any_gone: s holds it in no
 * tier now. Unknown (slot, tier) pairs change nothing. */
static inline void kvix_hs_del(kvix_hset *h, uint32_t s, unsigned t, kvix_bmem *mem,
                               int *any_gone)
{
    *any_gone = 0;
    if (!kvix_hs_has(h, s))
        return;
    uint64_t bit = UINT64_C(1) << (s % 64);
    kvix_tset *ts = atomic_load_explicit(&h->tiers, memory_order_relaxed);
    if (ts) {
        if (!kvix_tset_has(ts, s, t))
            return;
        kvix_aword *tw = &ts->w[t * ts->nw + s / 64];
        kvix_st(tw, kvix_ld(tw) & ~bit);
        if (t != KVIX_MEDIUM_GPU)
            ts->nongpu--;
        *any_gone = 1;
        for (unsigned u = 0; u < KVIX_MEDIUM_COUNT; u++)
            if (kvix_tset_has(ts, s, u))
                *any_gone = 0;
        if (ts->nongpu == 0) { /* gpu only again: the any-tier set says it all */
            atomic_store_explicit(&h->tiers, NULL, memory_order_release);
            atomic_fetch_sub_explicit(&mem->tiered, 1, memory_order_relaxed);
            kvix_tset_retire(ts, mem);
        }
    } else {
        if (t != KVIX_MEDIUM_GPU)
            return;
        *any_gone = 1;
    }
    if (*any_gone) {
        kvix_hs_remove(h, s);
        h->count--;
    }
}

/* Free the out-of-line sets now (quiet backend) or after a grace period. */
static inline void kvix_hs_free(kvix_hset *h)
{
    free(atomic_load_explicit(&h->big, memory_order_relaxed));
    free(atomic_load_explicit(&h->tiers, memory_order_relaxed));
}

static inline void kvix_hs_retire(kvix_hset *h, kvix_bmem *mem)
{
    kvix_wset *e = atomic_load_explicit(&h->big, memory_order_relaxed);
    kvix_tset *ts = atomic_load_explicit(&h->tiers, memory_order_relaxed);
    if (e)
        kvix_wset_retire(e, mem);
    if (ts) {
        atomic_fetch_sub_explicit(&mem->tiered, 1, memory_order_relaxed);
        kvix_tset_retire(ts, mem);
    }
}

#endif
