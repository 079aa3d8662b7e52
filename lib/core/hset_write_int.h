/* libkvix private: how writers change a block's holder set (lib/core/hset_int.h
 * has its forms and how readers read them): the inline ids in place, a
 * bitset a bit at a time, an array by copy on write (a new record published,
 * the old one retired after a grace period), and the form chosen again at
 * each copy. Writers change a set only under its node's lock.
 */
#ifndef KVIX_HSET_WRITE_INT_H
#define KVIX_HSET_WRITE_INT_H

#include "hset_int.h"

/* Tests make allocations fail through this. */
#ifndef KVIX_HS_MALLOC
#define KVIX_HS_MALLOC(n) malloc(n)
#endif

/* Bitsets of at most this many payload bytes are taken whenever an inline
 * set overflows: at a few hundred slots they cost little more than the
 * array and change in place (bench/RESULTS.md, part 65). */
#ifndef KVIX_HS_BITS_FREE
#define KVIX_HS_BITS_FREE 32
#endif

/* Should a set of n holders over nw words be a bitset? was: it is one now;
 * it stays one until its array would be half its size or less. */
static inline int kvix_hs_bits_ok(uint32_t n, int tiered, uint32_t nw, int was)
{
    size_t b = kvix_bits_size(nw, tiered), a = kvix_arr_size(n, tiered);
    if (b - sizeof(kvix_wset) <= KVIX_HS_BITS_FREE || n > KVIX_ARR_MAX)
        return 1;
    return was ? 2 * a > b : a >= b;
}

static inline kvix_wset *kvix_wset_new(int kind, uint32_t n, int tiered, kvix_bmem *mem)
{
    size_t sz = kind == KVIX_WS_ARR ? kvix_arr_size(n, tiered) : kvix_bits_size(n, tiered);
    kvix_wset *r = KVIX_HS_MALLOC(sz);
    if (r && ((uint64_t)(uintptr_t)r & ~KVIX_HS_PTR)) {
        free(r);
        r = NULL;
    }
    if (!r)
        return NULL;
    memset(r, 0, kind == KVIX_WS_ARR ? sizeof *r : sz); /* an array's payload is all written */
    r->kind = (uint8_t)kind;
    r->tiered = (uint8_t)tiered;
    r->n = (uint16_t)n;
    atomic_fetch_add_explicit(&mem->bytes, (long)sz, memory_order_relaxed);
    return r;
}

static inline void kvix_wset_retire(kvix_wset *r, kvix_bmem *mem)
{
    atomic_fetch_sub_explicit(&mem->bytes, (long)kvix_wset_size(r), memory_order_relaxed);
    kvix__bmem_defer(mem, r);
}

/* Record r's holders, and setting them (writer side). */
static inline uint32_t kvix_live(const kvix_wset *r)
{
    return atomic_load_explicit(&r->live, memory_order_relaxed);
}

static inline void kvix_live_set(kvix_wset *r, uint32_t n)
{
    atomic_store_explicit(&r->live, n, memory_order_relaxed);
}

/* Holders in any tier (writer side). */
static inline uint32_t kvix_hs_count(const kvix_hset *h)
{
    uint64_t w = atomic_load_explicit(&h->w, memory_order_relaxed);
    kvix_wset *r = kvix_hw_rec(w);
    return r ? kvix_live(r) : kvix_ids_count(w);
}

/* No holder in any tier (writer side). */
static inline int kvix_hs_empty(const kvix_hset *h)
{
    return atomic_load_explicit(&h->w, memory_order_relaxed) == KVIX_HS_EMPTY;
}

/* The tiers s holds the block in (writer side; 0: not a holder). */
static inline unsigned kvix_hs_mask(const kvix_hset *h, uint32_t s)
{
    uint64_t w = atomic_load_explicit(&h->w, memory_order_relaxed);
    kvix_wset *r = kvix_hw_rec(w);
    if (!r)
        return kvix_ids_have(w, s) ? KVIX_TM_GPU : 0;
    if (r->tiered)
        return kvix_tset_mask(r, s);
    return kvix_wset_has(r, s) ? KVIX_TM_GPU : 0;
}

/* (holder, non-gpu tier) pairs of record r (writer side). */
static inline uint32_t kvix_wset_nongpu(const kvix_wset *r)
{
    if (!r || !r->tiered)
        return 0;
    if (r->kind == KVIX_WS_BITS)
        return (uint32_t)kvix_ld(kvix_bits_nongpu(r));
    uint32_t n = 0;
    const kvix_a8 *tm = kvix_arr_tm(r);
    for (uint32_t i = 0; i < r->n; i++)
        n += (uint32_t)__builtin_popcount(kvix_ld8(&tm[i]) & KVIX_TM_OFF);
    return n;
}

/* A set's holders in slot order with their tier masks (writer side). */
typedef struct kvix_hsrc {
    const kvix_wset *r; /* NULL: in[0..nin) */
    uint16_t in[KVIX_HS_INLINE];
    uint32_t nin, i, wi, last;
    uint64_t b;
} kvix_hsrc;

static inline void kvix_hsrc_init(kvix_hsrc *it, uint64_t w)
{
    memset(it, 0, sizeof *it);
    it->last = KVIX_HSET_IDS;
    it->r = kvix_hw_rec(w);
    if (it->r)
        return;
    for (unsigned l = 0; l < KVIX_HS_INLINE; l++, w >>= 16) {
        uint16_t s = (uint16_t)(w & KVIX_HS_FREE16);
        if (s == KVIX_HS_FREE16)
            continue;
        uint32_t j = it->nin++; /* insertion sort: four at most */
        for (; j > 0 && it->in[j - 1] > s; j--)
            it->in[j] = it->in[j - 1];
        it->in[j] = s;
    }
}

static inline int kvix_hsrc_next(kvix_hsrc *it, uint32_t *s, unsigned *m)
{
    const kvix_wset *r = it->r;
    if (!r) {
        if (it->i >= it->nin)
            return 0;
        *s = it->in[it->i++];
        *m = KVIX_TM_GPU;
        return 1;
    }
    if (r->kind == KVIX_WS_ARR) {
        const kvix_a16 *a = kvix_arr_ids(r);
        for (; it->i < r->n; it->i++) {
            uint32_t x = kvix_ld16(&a[it->i]);
            unsigned mk = r->tiered ? kvix_ld8(&kvix_arr_tm(r)[it->i]) : KVIX_TM_GPU;
            if (mk && x != it->last) {
                it->i++;
                it->last = *s = x;
                *m = mk;
                return 1;
            }
        }
        return 0;
    }
    while (!it->b) {
        if (it->wi >= r->n)
            return 0;
        it->b = kvix_ld(&r->w[it->wi++]);
    }
    *s = (it->wi - 1) * 64 + (uint32_t)__builtin_ctzll(it->b);
    it->b &= it->b - 1;
    *m = r->tiered ? kvix_tset_mask(r, *s) : KVIX_TM_GPU;
    return 1;
}

/* Where a rebuild writes: inline lanes, an array record or a bits record. */
typedef struct kvix_hdst {
    kvix_wset *r; /* NULL: lanes of w */
    uint64_t w;
    uint32_t k, nongpu;
} kvix_hdst;

static inline void kvix_hdst_put(kvix_hdst *d, uint32_t s, unsigned m)
{
    kvix_wset *r = d->r;
    if (!r) {
        d->w = (d->w & ~(KVIX_HS_FREE16 << 16 * d->k)) | (uint64_t)s << 16 * d->k;
    } else if (r->kind == KVIX_WS_ARR) {
        atomic_init(&kvix_arr_ids(r)[d->k], (uint16_t)s);
        if (r->tiered)
            atomic_init(&kvix_arr_tm(r)[d->k], (uint8_t)m);
    } else {
        uint64_t bit = UINT64_C(1) << (s % 64);
        kvix_st(&r->w[s / 64], kvix_ld(&r->w[s / 64]) | bit);
        if (r->tiered)
            for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
                if (m >> t & 1) {
                    kvix_aword *tw = &kvix_bits_tier(r, t)[s / 64];
                    kvix_st(tw, kvix_ld(tw) | bit);
                }
    }
    d->k++;
    d->nongpu += (uint32_t)__builtin_popcount(m & KVIX_TM_OFF);
}

/* Publish set word w in place of record old (NULL: the set was inline). */
static inline void kvix_hs_publish(kvix_hset *h, kvix_wset *old, uint64_t w, kvix_bmem *mem)
{
    kvix_wset *r = kvix_hw_rec(w);
    int was = old && old->tiered, now = r && r->tiered;
    atomic_store_explicit(&h->w, w, memory_order_release);
    if (now != was)
        atomic_fetch_add_explicit(&mem->tiered, now - was, memory_order_relaxed);
    if (old)
        kvix_wset_retire(old, mem);
}

/* Copy on write: the set with s's tier mask made m (0: s leaves), in the
 * form its size asks for (at least nw words if a bitset), published; the
 * old record retired. KVIX_OK, or KVIX_ENOMEM (nothing changed). */
static inline int kvix_hs_rebuild(kvix_hset *h, uint32_t s, unsigned m, uint32_t nw,
                                  kvix_bmem *mem)
{
    uint64_t w = atomic_load_explicit(&h->w, memory_order_relaxed);
    kvix_wset *old = kvix_hw_rec(w);
    unsigned om = kvix_hs_mask(h, s);
    uint32_t n = kvix_hs_count(h) - (om != 0) + (m != 0);
    uint32_t nongpu = kvix_wset_nongpu(old) - (uint32_t)__builtin_popcount(om & KVIX_TM_OFF) +
                      (uint32_t)__builtin_popcount(m & KVIX_TM_OFF);
    int tiered = nongpu > 0, was_bits = old && old->kind == KVIX_WS_BITS;
    kvix_hsrc it;
    kvix_hsrc_init(&it, w);
    /* the highest slot after: the last holder (s aside), or s */
    uint32_t hi = m ? s : 0;
    if (!old) {
        for (uint32_t i = 0; i < it.nin; i++)
            if (it.in[i] != s && it.in[i] > hi)
                hi = it.in[i];
    } else if (old->kind == KVIX_WS_ARR) {
        const kvix_a16 *a = kvix_arr_ids(old);
        for (uint32_t i = old->n; i-- > 0;) {
            uint32_t x = kvix_ld16(&a[i]);
            if (x != s && (!old->tiered || kvix_ld8(&kvix_arr_tm(old)[i]))) {
                hi = x > hi ? x : hi;
                break;
            }
        }
    } else {
        for (uint32_t wi = old->n; wi-- > 0;) {
            uint64_t b = kvix_ld(&old->w[wi]);
            if (wi == s / 64)
                b &= ~(UINT64_C(1) << (s % 64));
            if (b) {
                uint32_t x = wi * 64 + 63 - (uint32_t)__builtin_clzll(b);
                hi = x > hi ? x : hi;
                break;
            }
        }
        if (nw < old->n) /* a bitset keeps its width */
            nw = old->n;
    }
    kvix_hdst d = {NULL, KVIX_HS_EMPTY, 0, 0};
    if (tiered || n > KVIX_HS_INLINE || hi == KVIX_HS_FREE16) {
        if (nw < hi / 64 + 1)
            nw = hi / 64 + 1;
        int bits = kvix_hs_bits_ok(n, tiered, nw, was_bits);
        d.r = kvix_wset_new(bits ? KVIX_WS_BITS : KVIX_WS_ARR, bits ? nw : n, tiered, mem);
        if (!d.r)
            return KVIX_ENOMEM;
    }
    uint32_t x;
    unsigned xm;
    int more = kvix_hsrc_next(&it, &x, &xm);
    for (;;) {
        if (more && x == s) {
            more = kvix_hsrc_next(&it, &x, &xm);
        } else if (m && (!more || s < x)) {
            kvix_hdst_put(&d, s, m);
            m = 0;
        } else if (more) {
            kvix_hdst_put(&d, x, xm);
            more = kvix_hsrc_next(&it, &x, &xm);
        } else {
            break;
        }
    }
    if (d.r) {
        kvix_live_set(d.r, d.k);
        if (d.r->kind == KVIX_WS_BITS && tiered)
            kvix_st(kvix_bits_nongpu(d.r), d.nongpu);
    }
    kvix_hs_publish(h, old, d.r ? (uint64_t)(uintptr_t)d.r : d.w, mem);
    return KVIX_OK;
}

/* No memory to copy array r without its entry i, holder s: mark it gone in
 * place (readers see s or not, each other holder once). A tiered entry's
 * mask goes to 0; an untiered entry takes its neighbour's id (the run of
 * s's entries, written so that the array stays sorted and s stays until the
 * last store), which readers list once. r keeps other holders. */
static inline void kvix_arr_gone(kvix_wset *r, uint32_t i, uint32_t s)
{
    kvix_live_set(r, kvix_live(r) - 1); /* before any id changes: kvix_hv_list */
    if (r->tiered) {
        atomic_store_explicit(&kvix_arr_tm(r)[i], 0, memory_order_relaxed);
        return;
    }
    kvix_a16 *a = kvix_arr_ids(r);
    uint32_t j = i;
    while (j < r->n && kvix_ld16(&a[j]) == s)
        j++;
    if (i > 0) {
        uint16_t y = (uint16_t)kvix_ld16(&a[i - 1]);
        for (uint32_t k = i; k < j; k++)
            atomic_store_explicit(&a[k], y, memory_order_release);
    } else {
        uint16_t y = (uint16_t)kvix_ld16(&a[j]); /* j < n: another holder follows */
        for (uint32_t k = j; k-- > i;)
            atomic_store_explicit(&a[k], y, memory_order_release);
    }
}

/* A copy of untiered array r, whose entries are all holders (r->n ==
 * live), with s put at entry i (insert) or entry i left out; NULL when
 * no memory. */
static inline kvix_wset *kvix_arr_cow(const kvix_wset *r, uint32_t i, int insert, uint32_t s,
                                      kvix_bmem *mem)
{
    uint32_t n = insert ? r->n + 1u : r->n - 1u;
    kvix_wset *d = kvix_wset_new(KVIX_WS_ARR, n, 0, mem);
    if (!d)
        return NULL;
    const kvix_a16 *a = kvix_arr_ids(r);
    kvix_a16 *b = kvix_arr_ids(d);
    memcpy(b, a, i * sizeof *a); /* r is immutable while its writer holds the lock */
    if (insert) {
        atomic_init(&b[i], (uint16_t)s);
        memcpy(b + i + 1, a + i, (r->n - i) * sizeof *a);
    } else {
        memcpy(b + i, a + i + 1, (r->n - i - 1u) * sizeof *a);
    }
    kvix_live_set(d, n);
    return d;
}

/* A copy of bits record r nw words wide (nw > r->n); NULL when no memory. */
static inline kvix_wset *kvix_bits_widen(const kvix_wset *r, uint32_t nw, kvix_bmem *mem)
{
    kvix_wset *d = kvix_wset_new(KVIX_WS_BITS, nw, r->tiered, mem);
    if (!d)
        return NULL;
    for (uint32_t i = 0; i < r->n; i++)
        kvix_st(&d->w[i], kvix_ld(&r->w[i]));
    if (r->tiered) {
        for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
            for (uint32_t i = 0; i < r->n; i++)
                kvix_st(&kvix_bits_tier(d, t)[i], kvix_ld(&kvix_bits_tier(r, t)[i]));
        kvix_st(kvix_bits_nongpu(d), kvix_ld(kvix_bits_nongpu(r)));
    }
    kvix_live_set(d, kvix_live(r));
    return d;
}

/* Slot s now holds the block in tier t: KVIX_OK, or 1 when it held it in
 * that tier already (nothing changes), or KVIX_ENOMEM (nothing changes).
 * *any_new: s did not hold it in any tier before. hint_nw: words covering
 * the backend's slots (a new bitset's width). */
static inline int kvix_hs_add(kvix_hset *h, uint32_t s, unsigned t, uint32_t hint_nw,
                              kvix_bmem *mem, int *any_new)
{
    *any_new = 0;
    uint64_t w0 = atomic_load_explicit(&h->w, memory_order_relaxed);
    kvix_wset *r = kvix_hw_rec(w0);
    unsigned bit = 1u << t;
    if (!r) {
        if (kvix_ids_have(w0, s) && t == KVIX_MEDIUM_GPU)
            return 1;
        if (t == KVIX_MEDIUM_GPU) /* most adds: inline, gpu only */
            for (unsigned sh = 0; sh < 64; sh += 16)
                if ((w0 >> sh & KVIX_HS_FREE16) == KVIX_HS_FREE16 && kvix_lane_ok(s, sh)) {
                    atomic_store_explicit(&h->w,
                                          (w0 & ~(KVIX_HS_FREE16 << sh)) | (uint64_t)s << sh,
                                          memory_order_relaxed);
                    *any_new = 1;
                    return KVIX_OK;
                }
    } else if (r->kind == KVIX_WS_BITS) {
        uint64_t wb = UINT64_C(1) << (s % 64);
        if (s / 64 >= r->n && (r->tiered || t == KVIX_MEDIUM_GPU)) {
            /* a slot past the bitset (the fleet grew since it was made):
             * wider, word by word, unless an array is now the smaller */
            uint32_t nw = hint_nw > s / 64 + 1 ? hint_nw : s / 64 + 1;
            if (kvix_hs_bits_ok(kvix_live(r) + 1, r->tiered, nw, 1)) {
                kvix_wset *d = kvix_bits_widen(r, nw, mem);
                if (!d)
                    return KVIX_ENOMEM;
                kvix_hs_publish(h, r, (uint64_t)(uintptr_t)d, mem);
                r = d;
            }
        }
        if (s / 64 < r->n && (r->tiered || t == KVIX_MEDIUM_GPU)) { /* in place */
            kvix_aword *aw = &r->w[s / 64];
            int held = (kvix_ld(aw) & wb) != 0;
            if (r->tiered) {
                kvix_aword *tw = &kvix_bits_tier(r, t)[s / 64];
                if (kvix_ld(tw) & wb)
                    return 1;
                kvix_st(tw, kvix_ld(tw) | wb);
                if (t != KVIX_MEDIUM_GPU)
                    kvix_st(kvix_bits_nongpu(r), kvix_ld(kvix_bits_nongpu(r)) + 1);
            } else if (held) {
                return 1;
            }
            if (!held) {
                kvix_st(aw, kvix_ld(aw) | wb);
                kvix_live_set(r, kvix_live(r) + 1);
                *any_new = 1;
            }
            return KVIX_OK;
        }
    } else {
        const kvix_a16 *a = kvix_arr_ids(r);
        uint32_t i = kvix_arr_lb(a, r->n, s);
        int at = i < r->n && kvix_ld16(&a[i]) == s;
        if (r->tiered) {
            unsigned om = at ? kvix_ld8(&kvix_arr_tm(r)[i]) : 0;
            if (om & bit)
                return 1;
            if (om) { /* a holder's tiers change in place */
                atomic_store_explicit(&kvix_arr_tm(r)[i], (uint8_t)(om | bit),
                                      memory_order_relaxed);
                return KVIX_OK;
            }
        } else if (at) {
            if (t == KVIX_MEDIUM_GPU)
                return 1;
        } else if (t == KVIX_MEDIUM_GPU && r->n == kvix_live(r)) { /* most array adds */
            uint32_t hi = kvix_ld16(&a[r->n - 1]), nw = hint_nw;
            hi = hi > s ? hi : s;
            nw = nw > hi / 64 + 1 ? nw : hi / 64 + 1;
            if (!kvix_hs_bits_ok(r->n + 1u, 0, nw, 0)) {
                kvix_wset *d = kvix_arr_cow(r, i, 1, s, mem);
                if (!d)
                    return KVIX_ENOMEM;
                kvix_hs_publish(h, r, (uint64_t)(uintptr_t)d, mem);
                *any_new = 1;
                return KVIX_OK;
            }
        }
    }
    unsigned om = kvix_hs_mask(h, s);
    if (om & bit)
        return 1;
    if (kvix_hs_rebuild(h, s, om | bit, hint_nw, mem) < 0)
        return KVIX_ENOMEM;
    *any_new = om == 0;
    return KVIX_OK;
}

/* Slot s no longer holds the block in tier t. *any_gone: s holds it in no
 * tier now. Unknown (slot, tier) pairs change nothing. Never fails: a copy
 * that cannot be made leaves the old form, still exact. */
static inline void kvix_hs_del(kvix_hset *h, uint32_t s, unsigned t, kvix_bmem *mem,
                               int *any_gone)
{
    *any_gone = 0;
    uint64_t w0 = atomic_load_explicit(&h->w, memory_order_relaxed);
    kvix_wset *r = kvix_hw_rec(w0);
    unsigned bit = 1u << t;
    if (!r) { /* most deletes: inline, gpu only */
        if (t != KVIX_MEDIUM_GPU || !kvix_ids_have(w0, s))
            return;
        for (unsigned sh = 0; sh < 64; sh += 16)
            if ((w0 >> sh & KVIX_HS_FREE16) == s) {
                atomic_store_explicit(&h->w, w0 | KVIX_HS_FREE16 << sh, memory_order_relaxed);
                *any_gone = 1;
                return;
            }
        return;
    }
    unsigned om = kvix_hs_mask(h, s);
    if (!(om & bit))
        return;
    unsigned m = om & ~bit;
    *any_gone = m == 0;
    uint32_t nongpu = kvix_wset_nongpu(r) - (t != KVIX_MEDIUM_GPU);
    uint32_t live = kvix_live(r) - (m == 0);
    if (r->kind == KVIX_WS_BITS) {
        /* in place, unless the set is now small enough for another form */
        int keep = (nongpu > 0 || !r->tiered) && live > KVIX_HS_INLINE / 2 &&
                   kvix_hs_bits_ok(live, r->tiered, r->n, 1);
        if (keep || kvix_hs_rebuild(h, s, m, r->n, mem) < 0) {
            uint64_t wb = UINT64_C(1) << (s % 64);
            if (r->tiered) {
                kvix_aword *tw = &kvix_bits_tier(r, t)[s / 64];
                kvix_st(tw, kvix_ld(tw) & ~wb);
                if (t != KVIX_MEDIUM_GPU)
                    kvix_st(kvix_bits_nongpu(r), nongpu);
            }
            if (m == 0) {
                kvix_st(&r->w[s / 64], kvix_ld(&r->w[s / 64]) & ~wb);
                kvix_live_set(r, live);
            }
        }
        return;
    }
    uint32_t i = kvix_arr_find(r, s);
    if (!r->tiered && r->n == kvix_live(r) && live > KVIX_HS_INLINE) { /* most array deletes */
        kvix_wset *d = kvix_arr_cow(r, i, 0, s, mem);
        if (d)
            kvix_hs_publish(h, r, (uint64_t)(uintptr_t)d, mem);
        else
            kvix_arr_gone(r, i, s);
        return;
    }
    if (m && (nongpu > 0 || !r->tiered)) { /* s keeps other tiers: in place */
        atomic_store_explicit(&kvix_arr_tm(r)[i], (uint8_t)m, memory_order_relaxed);
        return;
    }
    if (kvix_hs_rebuild(h, s, m, 0, mem) == KVIX_OK)
        return;
    if (m) /* no memory to drop the tier masks: keep them, still exact */
        atomic_store_explicit(&kvix_arr_tm(r)[i], (uint8_t)m, memory_order_relaxed);
    else
        kvix_arr_gone(r, i, s);
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
