/* The radix backend: a prefix tree of canonical blocks. A node is one
 * (position, canonical hash) held by some slots; its children are kept in a
 * small open-addressing table keyed by their canonical hash. A node's holders
 * are a kvix_hset (hset_int.h: a few slot ids inline, then a sorted array
 * of them, a bitset when dense).
 * A query walks down from the root splitting its list of candidate slots at
 * each node, so a slot that lost a middle block drops out there by
 * construction (no hole bookkeeping), and the walk stops where the query's
 * chain leaves the tree. Good for short or divergent
 * workloads; the positional backend's jump search wins on long shared chains.
 *
 * Concurrency: readers are lock-free under RCU (child tables and nodes are
 * published with release stores, replaced copies and removed nodes are freed
 * after a grace period). Writers take one backend mutex for each add or del,
 * which is O(1) amortised (a child table grows by copying its entries), so
 * writers for different slots serialise but never hold it across more than
 * one block. Writers find nodes through a writer-only hash index of
 * (position, canon) -> node. A block whose parent nobody holds hangs under a
 * "ghost" parent that is attached to the tree once someone stores it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "canon_int.h"
#include "hset_write_int.h"
#include "index_int.h"
#include "rcu_int.h"

#define TOMB ((rnode *)(uintptr_t)1)
#define ROOT_POS UINT32_MAX

typedef struct rnode rnode;

typedef struct rkids {
    struct rcu_head rcu;
    uint64_t mask;
    _Atomic(rnode *) s[];
} rkids;

struct rnode {
    struct rcu_head rcu;
    rnode *parent;          /* NULL: detached (root, or a ghost not yet placed) */
    _Atomic(rkids *) kids;  /* children by canon; NULL when none */
    uint32_t nkids, ktomb;  /* writer side */
    uint32_t pos;
    uint64_t canon;
    kvix_hset h;
    uint64_t engine; /* made under (the front end's key): fixed for life */
    uint64_t local;  /* set when the node becomes held */
};

typedef struct ridx { /* writer-only (pos, canon) -> node, linear probing */
    rnode **s;
    size_t cap, used;
} ridx;

typedef struct radix_be {
    kvix_bmem mem;
    pthread_mutex_t mu;
    _Atomic uint32_t nw; /* words covering the highest slot seen: promoted sets' width */
    long unique;
    _Atomic long unique_pub;
    rnode *root;
    ridx idx;
} radix_be;

static inline uint64_t key_hash(uint32_t pos, uint64_t canon)
{
    uint64_t h = canon ^ ((uint64_t)pos * UINT64_C(0x9E3779B97F4A7C15));
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    return h;
}

/* ---- writer index ---- */

static rnode **idx_slot(ridx *x, uint32_t pos, uint64_t canon)
{
    for (size_t i = key_hash(pos, canon) & (x->cap - 1);; i = (i + 1) & (x->cap - 1)) {
        rnode *n = x->s[i];
        if (!n || (n->pos == pos && n->canon == canon))
            return &x->s[i];
    }
}

static int idx_resize(ridx *x, size_t cap, kvix_bmem *mem)
{
    rnode **s = calloc(cap, sizeof *s);
    if (!s)
        return KVIX_ENOMEM;
    ridx nx = {s, cap, x->used};
    for (size_t i = 0; i < x->cap; i++)
        if (x->s[i])
            *idx_slot(&nx, x->s[i]->pos, x->s[i]->canon) = x->s[i];
    atomic_fetch_add_explicit(&mem->bytes, ((long)cap - (long)x->cap) * (long)sizeof *s,
                              memory_order_relaxed);
    free(x->s);
    *x = nx;
    return KVIX_OK;
}

static void idx_del(ridx *x, rnode *n)
{
    size_t m = x->cap - 1, i = key_hash(n->pos, n->canon) & m;
    while (x->s[i] != n)
        i = (i + 1) & m;
    /* backward-shift deletion keeps probe chains without tombstones */
    for (size_t j = (i + 1) & m;; j = (j + 1) & m) {
        rnode *e = x->s[j];
        if (!e)
            break;
        size_t home = key_hash(e->pos, e->canon) & m;
        if (((j - home) & m) >= ((j - i) & m)) {
            x->s[i] = e;
            i = j;
        }
    }
    x->s[i] = NULL;
    x->used--;
}

static void idx_shrink(ridx *x, kvix_bmem *mem)
{
    if (x->cap > 64 && x->used * 8 < x->cap)
        (void)idx_resize(x, x->cap / 2, mem); /* optional: ENOMEM keeps the table */
}

/* ---- nodes and child tables ---- */

static rnode *node_new(radix_be *be, uint32_t pos, uint64_t canon, uint64_t engine)
{
    rnode *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->pos = pos;
    n->canon = canon;
    n->engine = engine;
    kvix_hs_init(&n->h);
    atomic_fetch_add_explicit(&be->mem.bytes, (long)sizeof *n, memory_order_relaxed);
    return n;
}

static size_t kids_size(uint64_t cap)
{
    return sizeof(rkids) + cap * sizeof(rnode *);
}

static inline rnode *kids_find(const rkids *k, uint64_t canon)
{
    if (!k)
        return NULL;
    for (uint64_t i = canon & k->mask;; i = (i + 1) & k->mask) {
        rnode *n = atomic_load_explicit(&k->s[i], memory_order_acquire);
        if (!n)
            return NULL;
        if (n != TOMB && n->canon == canon)
            return n;
    }
}

static void kids_retire(radix_be *be, rkids *k)
{
    atomic_fetch_sub_explicit(&be->mem.bytes, (long)kids_size(k->mask + 1), memory_order_relaxed);
    kvix__rcu_free(&k->rcu);
}

/* Replace p's child table by one sized for `want` children (NULL for 0). */
static int kids_rebuild(radix_be *be, rnode *p, size_t want)
{
    rkids *old = atomic_load_explicit(&p->kids, memory_order_relaxed), *k = NULL;
    if (want) {
        uint64_t cap = 2;
        while (cap < want * 2)
            cap *= 2;
        k = calloc(1, kids_size(cap));
        if (!k)
            return KVIX_ENOMEM;
        k->mask = cap - 1;
        atomic_fetch_add_explicit(&be->mem.bytes, (long)kids_size(cap), memory_order_relaxed);
        for (uint64_t i = 0; old && i <= old->mask; i++) {
            rnode *n = atomic_load_explicit(&old->s[i], memory_order_relaxed);
            if (!n || n == TOMB)
                continue;
            uint64_t j = n->canon & k->mask;
            while (atomic_load_explicit(&k->s[j], memory_order_relaxed))
                j = (j + 1) & k->mask;
            atomic_store_explicit(&k->s[j], n, memory_order_relaxed);
        }
    }
    atomic_store_explicit(&p->kids, k, memory_order_release);
    p->ktomb = 0;
    if (old)
        kids_retire(be, old);
    return KVIX_OK;
}

static int kids_add(radix_be *be, rnode *p, rnode *n)
{
    rkids *k = atomic_load_explicit(&p->kids, memory_order_relaxed);
    if (!k || (p->nkids + p->ktomb + 1) * 4 > (k->mask + 1) * 3) {
        if (kids_rebuild(be, p, p->nkids + 1) < 0)
            return KVIX_ENOMEM;
        k = atomic_load_explicit(&p->kids, memory_order_relaxed);
    }
    uint64_t i = n->canon & k->mask;
    for (;; i = (i + 1) & k->mask) {
        rnode *o = atomic_load_explicit(&k->s[i], memory_order_relaxed);
        if (!o || o == TOMB) {
            if (o == TOMB)
                p->ktomb--;
            break;
        }
    }
    atomic_store_explicit(&k->s[i], n, memory_order_release);
    p->nkids++;
    n->parent = p;
    return KVIX_OK;
}

static void kids_del(radix_be *be, rnode *p, rnode *n)
{
    rkids *k = atomic_load_explicit(&p->kids, memory_order_relaxed);
    for (uint64_t i = n->canon & k->mask;; i = (i + 1) & k->mask) {
        rnode *o = atomic_load_explicit(&k->s[i], memory_order_relaxed);
        if (o == n) {
            atomic_store_explicit(&k->s[i], TOMB, memory_order_release);
            break;
        }
        if (!o)
            return;
    }
    p->nkids--;
    p->ktomb++;
    if (p->nkids == 0 || (k->mask + 1 > 4 && p->nkids * 8 < k->mask + 1))
        (void)kids_rebuild(be, p, p->nkids); /* shrinking is optional */
}

static inline int node_removable(const rnode *n)
{
    return n->pos != ROOT_POS && kvix_hs_empty(&n->h) && n->nkids == 0 &&
           !kvix_hs_tset(&n->h);
}

/* Remove n and every ancestor it leaves empty; under be->mu. */
static void reclaim(radix_be *be, rnode *n)
{
    while (n && node_removable(n)) {
        rnode *p = n->parent;
        if (p)
            kids_del(be, p, n);
        idx_del(&be->idx, n);
        idx_shrink(&be->idx, &be->mem);
        kvix_hs_retire(&n->h, &be->mem);
        rkids *k = atomic_load_explicit(&n->kids, memory_order_relaxed);
        if (k)
            kids_retire(be, k);
        atomic_fetch_sub_explicit(&be->mem.bytes, (long)sizeof *n, memory_order_relaxed);
        kvix__rcu_free(&n->rcu);
        n = p;
    }
}

/* The node of (pos, canon), made (detached) if missing. */
static rnode *get_node(radix_be *be, uint32_t pos, uint64_t canon, uint64_t engine)
{
    if ((be->idx.used + 1) * 4 > be->idx.cap * 3 &&
        idx_resize(&be->idx, be->idx.cap ? be->idx.cap * 2 : 64, &be->mem) < 0)
        return NULL;
    rnode **sl = idx_slot(&be->idx, pos, canon);
    if (!*sl) {
        rnode *n = node_new(be, pos, canon, engine);
        if (!n)
            return NULL;
        *sl = n;
        be->idx.used++;
    }
    return *sl;
}

/* ---- backend ops ---- */

static void *radix_create(const kvix_index_opts *opts, kvix_err *err)
{
    (void)opts;
    radix_be *be = calloc(1, sizeof *be);
    if (!be || !(be->root = calloc(1, sizeof(rnode)))) {
        free(be);
        kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        return NULL;
    }
    be->root->pos = ROOT_POS;
    kvix_hs_init(&be->root->h);
    pthread_mutex_init(&be->mu, NULL);
    atomic_store(&be->mem.bytes, (long)(sizeof *be + sizeof(rnode)));
    kvix_rcu_writer();
    return be;
}

static void radix_destroy(void *vbe)
{
    radix_be *be = vbe;
    if (!be)
        return;
    for (size_t i = 0; i < be->idx.cap; i++) {
        rnode *n = be->idx.s[i];
        if (n) {
            kvix_hs_free(&n->h);
            free(atomic_load(&n->kids));
            free(n);
        }
    }
    free(atomic_load(&be->root->kids));
    free(be->root);
    free(be->idx.s);
    kvix__bmem_release(&be->mem);
    pthread_mutex_destroy(&be->mu);
    free(be);
}

static int radix_add(void *vbe, kvix_binfo *b, uint32_t slot, unsigned tier, void **node,
                     kvix_err *err)
{
    radix_be *be = vbe;
    uint32_t pos = b->pos;
    uint64_t canon = b->canon, parent_canon = b->parent_canon;
    if (slot >= KVIX_SLOTS_MAX || tier >= KVIX_MEDIUM_COUNT || pos == ROOT_POS)
        return kvix_err_set(err, KVIX_ERANGE, "slot %u, tier %u or position out of range", slot,
                            tier);
    kvix_rcu_writer();
    uint32_t need = slot / 64 + 1, cur = atomic_load_explicit(&be->nw, memory_order_relaxed);
    pthread_mutex_lock(&be->mu);
    if (cur < need)
        atomic_store_explicit(&be->nw, need, memory_order_release);
    int rc = KVIX_ENOMEM;
    rnode *n = get_node(be, pos, canon, b->engine);
    if (!n)
        goto out;
    if (!n->parent) {
        rnode *p = pos == 0 ? be->root : get_node(be, pos - 1, parent_canon, b->parent_engine);
        if (!p || kids_add(be, p, n) < 0) {
            if (p)
                reclaim(be, p);
            reclaim(be, n);
            goto out;
        }
    }
    int any_new;
    int was_empty = kvix_hs_empty(&n->h);
    int held = kvix_hs_add(&n->h, slot, tier, atomic_load_explicit(&be->nw, memory_order_relaxed),
                           &be->mem, &any_new);
    if (held < 0) {
        reclaim(be, n);
        goto out;
    }
    if (any_new && was_empty) {
        atomic_store_explicit(&be->unique_pub, ++be->unique, memory_order_relaxed);
        n->local = b->local; /* nobody held it: no front end reads it */
    }
    b->parent_engine = pos ? n->parent->engine : 0;
    *node = n;
    rc = held; /* 1: held in that tier already */
out:
    pthread_mutex_unlock(&be->mu);
    return rc >= KVIX_OK ? rc : kvix_err_set(err, rc, "out of memory");
}

static void radix_del(void *vbe, void *node, uint32_t slot, unsigned tier)
{
    radix_be *be = vbe;
    rnode *n = node; /* held by slot: still in the tree */
    if (slot >= KVIX_SLOTS_MAX || tier >= KVIX_MEDIUM_COUNT)
        return;
    kvix_rcu_writer();
    pthread_mutex_lock(&be->mu);
    int gone;
    kvix_hs_del(&n->h, slot, tier, &be->mem, &gone);
    if (gone && kvix_hs_empty(&n->h))
        atomic_store_explicit(&be->unique_pub, --be->unique, memory_order_relaxed);
    reclaim(be, n);
    pthread_mutex_unlock(&be->mu);
}

static void radix_info(void *be, const void *node, kvix_binfo *out)
{
    (void)be;
    const rnode *n = node;
    out->pos = n->pos;
    out->local = n->local;
    out->canon = n->canon;
    out->parent_canon = n->pos ? n->parent->canon : 0; /* a held node hangs under its parent */
    out->parent_engine = n->pos ? n->parent->engine : 0;
}

/* The slots of v (a piece of the candidate list, which lives in the hits'
 * own slots) all matched `blocks` blocks: one run, nothing copied. */
static int push_list(kvix_qhits *out, const uint32_t *v, uint32_t n, uint32_t blocks,
                     kvix_err *err)
{
    return kvix__qhits_run(out, (size_t)(v - out->slot), n, blocks, err);
}

/* Reorder v[0..n): the holders of k first; returns how many. */
static uint32_t split(const rnode *k, uint32_t *v, uint32_t n, uint64_t **marks)
{
    return kvix_hv_split(kvix_hs_view(&k->h), v, n, marks, NULL); /* one state of the set */
}

/* Candidates are a list of slot ids (the first block's holders, listed
 * straight into the hits' slots: each is a hit), split at each block
 * walked: a query costs its candidates times its blocks, whatever the
 * number of slots. */
static int radix_query(void *vbe, kvix_qchain *q, kvix_qhits *out, kvix_err *err)
{
    radix_be *be = vbe;
    if (q->n == 0)
        return KVIX_OK;
    int rc = KVIX_OK;
    kvix_rcu_lock();
    int tiered = atomic_load_explicit(&be->mem.tiered, memory_order_relaxed) > 0;
    uint64_t *marks = NULL; /* kvix__hs_marks(), on first need */
    uint32_t *cand;
    rnode *pathbuf[64], **path = pathbuf; /* nodes walked, for tier counts */
    size_t first = out->nrun;
    uint32_t i = 0, nc = 0, n = q->n > UINT32_MAX ? UINT32_MAX : (uint32_t)q->n;
    rnode *k = kids_find(atomic_load_explicit(&be->root->kids, memory_order_acquire),
                         kvix_canon_at(q, 0));
    if (!k)
        goto done;
    kvix_hview hv0 = kvix_hs_view(&k->h);
    if ((rc = kvix__qhits_reserve(out, kvix_hv_room(hv0), err)) < 0)
        goto done;
    cand = out->slot + out->n;
    nc = kvix_hv_list(hv0, cand);
    out->n += nc;
    while (nc) {
        if (tiered) {
            if (i == 64) {
                if (!(path = malloc(n * sizeof *path))) {
                    path = pathbuf;
                    rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory");
                    goto done;
                }
                memcpy(path, pathbuf, sizeof pathbuf);
            }
            path[i] = k;
        }
        if (++i == n)
            break;
        k = kids_find(atomic_load_explicit(&k->kids, memory_order_acquire), kvix_canon_at(q, i));
        if (!k)
            break;
        uint32_t keep = split(k, cand, nc, &marks);
        if ((rc = push_list(out, cand + keep, nc - keep, i, err)) < 0)
            goto done;
        nc = keep;
    }
    /* the rest matched up to where the tree or the query ended */
    if ((rc = push_list(out, cand, nc, i, err)) < 0)
        goto done;
    if (tiered && out->nrun > first) {
        if ((rc = kvix__qhits_tiers(out, err)) < 0)
            goto done;
        for (size_t r = first; r < out->nrun; r++) {
            const kvix_qrun *run = &out->run[r];
            for (size_t h = run->first; h < (size_t)run->first + run->n; h++) {
                uint32_t *tb = out->tier[h], slot = out->slot[h];
                for (uint32_t pos = 0; pos < run->blocks; pos++) {
                    kvix_tset *ts = kvix_hs_tset(&path[pos]->h);
                    if (!ts)
                        continue;
                    unsigned m = kvix_tset_mask(ts, slot);
                    if (!(m & KVIX_TM_GPU))
                        tb[KVIX_MEDIUM_GPU]--;
                    for (unsigned t = 1; t < KVIX_MEDIUM_COUNT; t++)
                        tb[t] += m >> t & 1;
                }
            }
        }
    }
done:
    kvix_rcu_unlock();
    if (path != pathbuf)
        free(path);
    return rc;
}

static size_t radix_memory(void *vbe)
{
    radix_be *be = vbe;
    long b = atomic_load(&be->mem.bytes);
    return b > 0 ? (size_t)b : 0;
}

static size_t radix_unique(void *vbe)
{
    radix_be *be = vbe;
    long u = atomic_load(&be->unique_pub);
    return u > 0 ? (size_t)u : 0;
}

const kvix_backend_ops kvix__backend_radix_ops = {
    .name = "radix",
    .create = radix_create,
    .destroy = radix_destroy,
    .add = radix_add,
    .del = radix_del,
    .info = radix_info,
    .query = radix_query,
    .memory = radix_memory,
    .unique_blocks = radix_unique,
    .engine_off = offsetof(rnode, engine),
    .pos_off = offsetof(rnode, pos),
    .canon_off = offsetof(rnode, canon),
};
