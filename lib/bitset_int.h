/* libkvix private: worker sets of index blocks, shared by the positional and
 * radix backends.
 *
 * A block's holders are a bitset over slots. The any-tier set lives inline in
 * the block's node (sized for the slots known when the node was made); when a
 * higher slot appears the set moves to a larger out-of-line copy published by
 * RCU. Per-tier sets exist only once a non-gpu tier holds the block, so a
 * gpu-only workload pays one NULL pointer per block for tiers.
 *
 * Writers modify a node's sets only under that node's lock (so plain
 * load/store of relaxed atomics is enough); readers load them lock-free.
 */
#ifndef KVIX_BITSET_INT_H
#define KVIX_BITSET_INT_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "index_int.h"
#include "kvix/error.h"
#include "kvix/event.h"
#include "rcu_int.h"

#define KVIX_WORDS(nslots) (((nslots) + 63u) / 64u)

typedef _Atomic uint64_t kvix_aword;

/* Counters a backend shares with its nodes' sets. */
typedef struct kvix_bmem {
    _Atomic long bytes;  /* bytes held */
    _Atomic long tiered; /* nodes with per-tier sets: queries count tiers only when > 0 */
} kvix_bmem;

/* A grown any-tier set. rcu first: freed with kvix_rcu_free. */
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

typedef struct kvix_holders {
    _Atomic(kvix_wset *) ext;  /* grown any-tier set, or NULL: the inline words */
    _Atomic(kvix_tset *) tiers; /* NULL: every holder holds the block on gpu */
    uint32_t nw;               /* inline words */
    uint32_t count;            /* holders in any tier (writer side) */
} kvix_holders;

static inline uint64_t kvix_ld(const kvix_aword *w)
{
    return atomic_load_explicit(w, memory_order_relaxed);
}

static inline void kvix_st(kvix_aword *w, uint64_t v)
{
    atomic_store_explicit(w, v, memory_order_relaxed);
}

static inline kvix_aword *kvix_holders_words(const kvix_holders *h, kvix_aword *inl, uint32_t *nw)
{
    kvix_wset *e = atomic_load_explicit(&h->ext, memory_order_acquire);
    if (e) {
        *nw = e->nw;
        return e->w;
    }
    *nw = h->nw;
    return inl;
}

static inline int kvix_holders_has(const kvix_holders *h, kvix_aword *inl, uint32_t s)
{
    uint32_t nw;
    kvix_aword *w = kvix_holders_words(h, inl, &nw);
    return s / 64 < nw && (kvix_ld(&w[s / 64]) >> (s % 64) & 1);
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

/* Make the any-tier set hold at least nw words. */
static inline int kvix_holders_grow(kvix_holders *h, kvix_aword *inl, uint32_t nw, kvix_bmem *mem)
{
    uint32_t onw;
    kvix_aword *ow = kvix_holders_words(h, inl, &onw);
    if (nw <= onw)
        return KVIX_OK;
    kvix_wset *e = calloc(1, sizeof *e + nw * sizeof(uint64_t));
    if (!e)
        return KVIX_ENOMEM;
    e->nw = nw;
    for (uint32_t i = 0; i < onw; i++)
        kvix_st(&e->w[i], kvix_ld(&ow[i]));
    atomic_fetch_add_explicit(&mem->bytes, (long)(sizeof *e + nw * sizeof(uint64_t)),
                              memory_order_relaxed);
    kvix_wset *old = atomic_load_explicit(&h->ext, memory_order_relaxed);
    atomic_store_explicit(&h->ext, e, memory_order_release);
    if (old)
        kvix_wset_retire(old, mem);
    return KVIX_OK;
}

/* Per-tier sets holding at least nw words, made on first need with gpu = the
 * any-tier set (until now every holder held the block on gpu). */
static inline kvix_tset *kvix_holders_tiers(kvix_holders *h, kvix_aword *inl, uint32_t nw,
                                            kvix_bmem *mem)
{
    kvix_tset *ts = atomic_load_explicit(&h->tiers, memory_order_relaxed);
    if (ts && ts->nw >= nw)
        return ts;
    uint32_t anw;
    kvix_aword *aw = kvix_holders_words(h, inl, &anw);
    if (anw > nw)
        nw = anw;
    if (ts && ts->nw > nw)
        nw = ts->nw;
    kvix_tset *n = kvix_tset_new(nw, mem);
    if (!n)
        return NULL;
    if (ts) {
        n->nongpu = ts->nongpu;
        for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
            for (uint32_t i = 0; i < ts->nw; i++)
                kvix_st(&n->w[t * nw + i], kvix_ld(&ts->w[t * ts->nw + i]));
    } else {
        for (uint32_t i = 0; i < anw; i++)
            kvix_st(&n->w[KVIX_MEDIUM_GPU * nw + i], kvix_ld(&aw[i]));
        atomic_fetch_add_explicit(&mem->tiered, 1, memory_order_relaxed);
    }
    atomic_store_explicit(&h->tiers, n, memory_order_release);
    if (ts)
        kvix_tset_retire(ts, mem);
    return n;
}

/* Slot s now holds the block in tier t. *any_new: s did not hold it in any
 * tier before. hint_nw: words to size a grown set for (the backend's slots). */
static inline int kvix_holders_add(kvix_holders *h, kvix_aword *inl, uint32_t s, unsigned t,
                                   uint32_t hint_nw, kvix_bmem *mem, int *any_new)
{
    uint32_t need = s / 64 + 1;
    if (hint_nw < need)
        hint_nw = need;
    *any_new = 0;
    if (t != KVIX_MEDIUM_GPU || atomic_load_explicit(&h->tiers, memory_order_relaxed)) {
        kvix_tset *ts = kvix_holders_tiers(h, inl, need, mem);
        if (!ts)
            return KVIX_ENOMEM;
        kvix_aword *tw = &ts->w[t * ts->nw + s / 64];
        uint64_t v = kvix_ld(tw), bit = UINT64_C(1) << (s % 64);
        if (v & bit)
            return KVIX_OK; /* already held in that tier: nothing changes */
        kvix_st(tw, v | bit);
        if (t != KVIX_MEDIUM_GPU)
            ts->nongpu++;
    }
    uint32_t nw;
    kvix_aword *w = kvix_holders_words(h, inl, &nw);
    uint64_t bit = UINT64_C(1) << (s % 64);
    if (s / 64 < nw && (kvix_ld(&w[s / 64]) & bit))
        return KVIX_OK;
    if (s / 64 >= nw) {
        if (kvix_holders_grow(h, inl, hint_nw, mem) < 0)
            return KVIX_ENOMEM; /* tier bit may stay set: harmless, any-set rules matching */
        w = kvix_holders_words(h, inl, &nw);
    }
    kvix_st(&w[s / 64], kvix_ld(&w[s / 64]) | bit);
    h->count++;
    *any_new = 1;
    return KVIX_OK;
}

/* Slot s no longer holds the block in tier t. *any_gone: s holds it in no
 * tier now. Unknown (slot, tier) pairs change nothing. */
static inline void kvix_holders_del(kvix_holders *h, kvix_aword *inl, uint32_t s, unsigned t,
                                    kvix_bmem *mem, int *any_gone)
{
    *any_gone = 0;
    if (!kvix_holders_has(h, inl, s))
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
        for (unsigned u = 0; u < KVIX_MEDIUM_COUNT; u++)
            if (kvix_tset_has(ts, s, u))
                goto still_held;
        *any_gone = 1;
    still_held:
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
        uint32_t nw;
        kvix_aword *w = kvix_holders_words(h, inl, &nw);
        kvix_st(&w[s / 64], kvix_ld(&w[s / 64]) & ~bit);
        h->count--;
    }
}

/* Free the out-of-line sets now (quiet backend) or after a grace period. */
static inline void kvix_holders_free(kvix_holders *h)
{
    free(atomic_load_explicit(&h->ext, memory_order_relaxed));
    free(atomic_load_explicit(&h->tiers, memory_order_relaxed));
}

static inline void kvix_holders_retire(kvix_holders *h, kvix_bmem *mem)
{
    kvix_wset *e = atomic_load_explicit(&h->ext, memory_order_relaxed);
    kvix_tset *ts = atomic_load_explicit(&h->tiers, memory_order_relaxed);
    if (e)
        kvix_wset_retire(e, mem);
    if (ts) {
        atomic_fetch_sub_explicit(&mem->tiered, 1, memory_order_relaxed);
        kvix_tset_retire(ts, mem);
    }
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

/* Bitset helpers over plain words (query scratch). */
static inline void kvix_bits_load(uint64_t *dst, uint32_t qw, const kvix_holders *h,
                                  kvix_aword *inl)
{
    uint32_t nw;
    kvix_aword *w = kvix_holders_words(h, inl, &nw);
    uint32_t i = 0;
    for (; i < qw && i < nw; i++)
        dst[i] = kvix_ld(&w[i]);
    for (; i < qw; i++)
        dst[i] = 0;
}

static inline int kvix_bits_any(const uint64_t *a, uint32_t qw)
{
    for (uint32_t i = 0; i < qw; i++)
        if (a[i])
            return 1;
    return 0;
}

#endif
