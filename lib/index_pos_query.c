/* The positional backend's query: jump search over the candidates' slot
 * lists (see lib/index_positional.c for why it is exact). */
#include <stdlib.h>
#include <string.h>

#include "canon_int.h"
#include "index_pos_int.h"

/* ---- query ----
 * Candidates are lists of slot ids, not bitsets over the fleet: a probe costs
 * one membership test per candidate (O(1): a few inline ids or one bit), so a
 * query costs its candidates times its probes, whatever the number of slots.
 * A list is split in place (holders first), so bisection needs no scratch. */

typedef struct qctx {
    pos_be *be;
    kvix_qchain *q;
    kvix_qhits *out;
    kvix_err *err;
    int rc;
} qctx;

static inline pnode *probe(qctx *c, uint32_t pos)
{
    return be_find(c->be, pos, kvix_canon_at(c->q, pos));
}

/* The slots of v all matched `blocks` blocks (on gpu until tiers are
 * counted): one reservation, then plain stores. */
static void push_list(qctx *c, const uint32_t *v, uint32_t n, uint32_t blocks)
{
    if (!n || c->rc != KVIX_OK || (c->rc = kvix_qhits_reserve(c->out, n, c->err)))
        return;
    kvix_qhit *h = c->out->v + c->out->n;
    for (uint32_t k = 0; k < n; k++)
        h[k] = (kvix_qhit){v[k], blocks};
    c->out->n += n;
}

/* Reorder v[0..n): the holders of node nd first; returns how many. The set
 * is read once (its bitset, or its inline ids: a state of the set since the
 * split began), not once per candidate. */
static uint32_t split(pnode *nd, uint32_t *v, uint32_t n)
{
    if (!nd)
        return 0;
    uint32_t k = 0;
    kvix_wset *big = kvix_hs_big(&nd->h);
    if (big) {
        for (uint32_t i = 0; i < n; i++)
            if (kvix_wset_has(big, v[i])) {
                uint32_t x = v[k];
                v[k++] = v[i];
                v[i] = x;
            }
        return k;
    }
    uint64_t ids = kvix_hs_ids(&nd->h);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = v[i];
        if (kvix_ids_have(ids, s)) {
            v[i] = v[k];
            v[k++] = s;
        }
    }
    return k;
}

/* Slots of d (trusted: monotone) have their match length in [lo, hi]. */
static void bisect(qctx *c, uint32_t *d, uint32_t nd, uint32_t lo, uint32_t hi)
{
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint32_t k = split(probe(c, mid), d, nd); /* d[0..k): length in [mid+1, hi] */
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
        uint32_t k = split(probe(c, x), d, nd);
        push_list(c, d + k, nd - k, x);
        nd = k;
    }
    push_list(c, d, nd, hi);
}

/* Per-tier counts: only when some node of this backend has a non-gpu holder. */
static void count_tiers(qctx *c, size_t first)
{
    kvix_qhits *out = c->out;
    if ((c->rc = kvix_qhits_tiers(out, c->err)))
        return;
    uint32_t maxlen = 0;
    for (size_t k = first; k < out->n; k++)
        if (out->v[k].blocks > maxlen)
            maxlen = out->v[k].blocks;
    for (uint32_t pos = 0; pos < maxlen; pos++) {
        pnode *n = probe(c, pos);
        kvix_tset *ts = n ? kvix_hs_tset(&n->h) : NULL;
        if (!ts)
            continue;
        for (size_t k = first; k < out->n; k++) {
            const kvix_qhit *hit = &out->v[k];
            uint32_t *tb = out->tier[k];
            if (hit->blocks <= pos)
                continue;
            if (!kvix_tset_has(ts, hit->slot, KVIX_MEDIUM_GPU))
                tb[KVIX_MEDIUM_GPU]--;
            for (unsigned t = 1; t < KVIX_MEDIUM_COUNT; t++)
                tb[t] += (uint32_t)kvix_tset_has(ts, hit->slot, t);
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

#define QSTACK 512

int kvix_pos_query(void *vbe, kvix_qchain *q, kvix_qhits *out, kvix_err *err)
{
    pos_be *be = vbe;
    if (q->n == 0)
        return KVIX_OK;
    uint32_t n = q->n > UINT32_MAX ? UINT32_MAX : (uint32_t)q->n;
    kvix_rcu_lock();
    qctx c = {.be = be, .q = q, .out = out, .err = err, .rc = KVIX_OK};
    size_t first = out->n;
    uint32_t stackbuf[QSTACK];
    uint32_t *cand = stackbuf;
    pnode *n0 = probe(&c, 0);
    if (!n0)
        goto done;
    kvix_wset *big0 = kvix_hs_big(&n0->h);
    uint32_t room = kvix_hs_room(big0);
    if (room > QSTACK && !(cand = malloc(room * sizeof *cand))) {
        c.rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        goto done;
    }
    uint32_t nc = kvix_hs_list(&n0->h, big0, cand);
    int have_untr = atomic_load_explicit(&be->nuntrusted, memory_order_relaxed) > 0;
    uint32_t i = 1, jump = be->jump;
    while (i < n && nc) {
        uint32_t step = jump;
        if (have_untr)
            for (uint32_t k = 0; k < nc; k++)
                if (untrusted(be, cand[k])) {
                    step = 1; /* an untrusted candidate: the definition, position by position */
                    break;
                }
        uint32_t p = (n - i > step ? i + step : n) - 1;
        uint32_t keep = split(probe(&c, p), cand, nc);
        if (keep < nc) {
            uint32_t *drop = cand + keep, nd = nc - keep;
            if (p == i) {
                push_list(&c, drop, nd, i);
            } else if (be->binsearch) {
                /* Most that drop in a window drop at its first position (a
                 * shared prompt's first block, then each its own): split
                 * there first, bisect only those that go further. */
                uint32_t k = split(probe(&c, i), drop, nd);
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
    if (c.rc == KVIX_OK && out->n > first &&
        atomic_load_explicit(&be->mem.tiered, memory_order_relaxed) > 0)
        count_tiers(&c, first);
done:
    kvix_rcu_unlock();
    if (cand != stackbuf)
        free(cand);
    return c.rc;
}
