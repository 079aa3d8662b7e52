/* The positional backend's query: jump search over the candidates' slot
 * lists (see lib/index/backends/index_positional.c for why it is exact). */
#include <stdlib.h>
#include <string.h>

#include "canon_int.h"
#include "index_pos_int.h"

/* ---- query ----
 * Candidates are lists of slot ids, not bitsets over the fleet: a probe costs
 * one membership test per candidate (a few inline ids, a binary search of a
 * sorted array, or one bit), so a query costs its candidates times its
 * probes, whatever the number of slots.
 * A list is split in place (holders first), so bisection needs no scratch. */

typedef struct qctx {
    pos_be *be;
    kvix_qchain *q;
    kvix_qhits *out;
    kvix_err *err;
    uint64_t *marks; /* kvix__hs_marks(), on first need */
    uint32_t *tmp;   /* room for the candidates: splits keep them ascending */
    int rc;
} qctx;

static inline pnode *probe(qctx *c, uint32_t pos)
{
    return be_find(c->be, pos, kvix_canon_at(c->q, pos));
}

/* Start loading the table slot a probe at pos will read (a hint). */
static inline void prefetch_probe(qctx *c, uint32_t pos)
{
    uint64_t h = key_hash(pos, kvix_canon_at(c->q, pos));
    const ptable *t = atomic_load_explicit(&c->be->shard[shard_of(h)].t, memory_order_acquire);
    if (t)
        __builtin_prefetch(&t->s[h & t->mask]);
}

/* The slots of v (a piece of the candidate list, which lives in the hits'
 * own slots) all matched `blocks` blocks (on gpu until tiers are counted):
 * one run, nothing copied. */
static void push_list(qctx *c, const uint32_t *v, uint32_t n, uint32_t blocks)
{
    if (c->rc == KVIX_OK)
        c->rc = kvix__qhits_run(c->out, (size_t)(v - c->out->slot), n, blocks, c->err);
}

/* Reorder v[0..n): the holders of node nd first; returns how many. The set
 * is read once (a state of the set since the split began), not once per
 * candidate. */
static uint32_t split(qctx *c, pnode *nd, uint32_t *v, uint32_t n)
{
    return nd ? kvix_hv_split(kvix_hs_view(&nd->h), v, n, &c->marks, c->tmp) : 0;
}

/* Slots of d (trusted: monotone) have their match length in [lo, hi]. */
static void bisect(qctx *c, uint32_t *d, uint32_t nd, uint32_t lo, uint32_t hi)
{
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint32_t k = split(c, probe(c, mid), d, nd); /* d[0..k): length in [mid+1, hi] */
        if (k && k < nd) {
            bisect(c, d, k, mid + 1, hi);
            d += k;
            nd -= k;
            hi = mid;
        } else if (k) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    push_list(c, d, nd, lo);
}

/* Slots of d have their match length in [lo, hi]: scan. */
static void scan(qctx *c, uint32_t *d, uint32_t nd, uint32_t lo, uint32_t hi)
{
    for (uint32_t x = lo; x < hi && nd; x++) {
        uint32_t k = split(c, probe(c, x), d, nd);
        push_list(c, d + k, nd - k, x);
        nd = k;
    }
    push_list(c, d, nd, hi);
}

/* Per-tier counts of the runs from first on: only when some node of this
 * backend has a non-gpu holder. */
static void count_tiers(qctx *c, size_t first)
{
    kvix_qhits *out = c->out;
    if ((c->rc = kvix__qhits_tiers(out, c->err)))
        return;
    uint32_t maxlen = 0;
    for (size_t r = first; r < out->nrun; r++)
        if (out->run[r].blocks > maxlen)
            maxlen = out->run[r].blocks;
    for (uint32_t pos = 0; pos < maxlen; pos++) {
        pnode *n = probe(c, pos);
        kvix_tset *ts = n ? kvix_hs_tset(&n->h) : NULL;
        if (!ts)
            continue;
        for (size_t r = first; r < out->nrun; r++) {
            const kvix_qrun *run = &out->run[r];
            if (run->blocks <= pos)
                continue;
            for (size_t k = run->first; k < (size_t)run->first + run->n; k++) {
                uint32_t *tb = out->tier[k];
                unsigned m = kvix_tset_mask(ts, out->slot[k]);
                if (!(m & KVIX_TM_GPU))
                    tb[KVIX_MEDIUM_GPU]--;
                for (unsigned t = 1; t < KVIX_MEDIUM_COUNT; t++)
                    tb[t] += m >> t & 1;
            }
        }
    }
}

static inline int untrusted(pos_be *be, uint32_t s)
{
    /* a slot with orphans has its chunk */
    const porph *c = atomic_load_explicit(&be->orph[s / ORPH_CHUNK], memory_order_acquire);
    return c && atomic_load_explicit(&c->untrusted[s % ORPH_CHUNK / 64], memory_order_relaxed) >>
                        (s % 64) & 1;
}

/* The candidates are listed straight into the hits' slots (every one of
 * them is a hit: it holds block 0), split there in place, and each drop
 * position's piece is reported as a run. */
int kvix__pos_query(void *vbe, kvix_qchain *q, kvix_qhits *out, kvix_err *err)
{
    pos_be *be = vbe;
    if (q->n == 0)
        return KVIX_OK;
    uint32_t n = q->n > UINT32_MAX ? UINT32_MAX : (uint32_t)q->n;
    kvix_rcu_lock();
    qctx c = {.be = be, .q = q, .out = out, .err = err, .marks = NULL, .tmp = NULL, .rc = KVIX_OK};
    size_t first = out->nrun;
    pnode *n0 = probe(&c, 0);
    if (!n0)
        goto done;
    uint32_t jump = be->jump;
    if (n > 1) {
        /* the first window's probes (its end, then its first position for
         * those that drop in it) come after block 0's holders are listed:
         * their table slots load meanwhile */
        uint32_t p1 = (n - 1 > jump ? 1 + jump : n) - 1;
        prefetch_probe(&c, p1);
        if (p1 != 1)
            prefetch_probe(&c, 1);
    }
    kvix_hview hv0 = kvix_hs_view(&n0->h);
    uint32_t room = kvix_hv_room(hv0);
    /* the list, then the splits' scratch past the hits (no run reaches it) */
    if ((c.rc = kvix__qhits_reserve(out, 2 * (size_t)room, err)))
        goto done;
    uint32_t *cand = out->slot + out->n;
    uint32_t nc = kvix_hv_list(hv0, cand);
    c.tmp = cand + room;
    out->n += nc;
    int have_untr = atomic_load_explicit(&be->nuntrusted, memory_order_relaxed) > 0;
    uint32_t i = 1;
    while (i < n && nc) {
        uint32_t step = jump;
        if (have_untr)
            for (uint32_t k = 0; k < nc; k++)
                if (untrusted(be, cand[k])) {
                    step = 1; /* an untrusted candidate: the definition, position by position */
                    break;
                }
        uint32_t p = (n - i > step ? i + step : n) - 1;
        uint32_t keep = split(&c, probe(&c, p), cand, nc);
        if (keep < nc) {
            uint32_t *drop = cand + keep, nd = nc - keep;
            if (p == i) {
                push_list(&c, drop, nd, i);
            } else if (be->binsearch) {
                /* Most that drop in a window drop at its first position (a
                 * shared prompt's first block, then each its own): split
                 * there first, bisect only those that go further. */
                uint32_t k = split(&c, probe(&c, i), drop, nd);
                push_list(&c, drop + k, nd - k, i);
                if (k)
                    bisect(&c, drop, k, i + 1, p);
            }
            else
                scan(&c, drop, nd, i, p);
        }
        nc = keep;
        i = p + 1;
    }
    push_list(&c, cand, nc, i);
    if (c.rc == KVIX_OK && out->nrun > first &&
        atomic_load_explicit(&be->mem.tiered, memory_order_relaxed) > 0)
        count_tiers(&c, first);
done:
    kvix_rcu_unlock();
    return c.rc;
}
