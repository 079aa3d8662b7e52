/* The reference backend: the simplest obviously-correct model of the
 * query-side structure, the yardstick the other backends are tested against.
 *
 * One hash map (position, canonical hash) -> node: the block (kvix_binfo) and
 * its holders, a sorted array of (slot, tier mask), under one reader-writer lock (writer-preferring, so a
 * stream of queries cannot starve the writers). A query walks positions
 * 0..n-1 and keeps the slots that held every position so far. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap_int.h"
#include "index_int.h"

typedef struct holder {
    uint32_t slot;
    uint32_t tiers;
} holder;

typedef struct holders {
    holder *v;
    uint32_t n, cap;
} holders;

typedef struct refnode { /* a handle: the map holds its address, which stays */
    holders h;
    kvix_binfo b; /* as the add that made it gave it; b.engine: the front end's key */
} __attribute__((aligned(KVIX_NODE_ALIGN))) refnode;

typedef struct refbe {
    pthread_rwlock_t lock;
    kvix_hmap map; /* (pos, canon) -> refnode * */
    size_t heap;   /* bytes of nodes and holder arrays */
} refbe;

static void *ref_create(const kvix_index_opts *opts, kvix_err *err)
{
    (void)opts;
    refbe *r = calloc(1, sizeof *r);
    if (!r) {
        kvix_err_set(err, KVIX_ENOMEM, "out of memory for an index partition");
        return NULL;
    }
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    int rc = pthread_rwlock_init(&r->lock, &a);
    pthread_rwlockattr_destroy(&a);
    if (rc) {
        free(r);
        kvix_err_set(err, KVIX_ESYS, "cannot create a lock");
        return NULL;
    }
    kvix__hmap_init(&r->map, 2, sizeof(refnode *));
    return r;
}

static void ref_destroy(void *be)
{
    refbe *r = be;
    if (!r)
        return;
    size_t it = 0;
    refnode **n;
    while ((n = kvix__hmap_next(&r->map, &it, NULL))) {
        free((*n)->h.v);
        free(*n);
    }
    kvix__hmap_release(&r->map);
    pthread_rwlock_destroy(&r->lock);
    free(r);
}

/* Index of slot in h, or of where it would go. */
static uint32_t hfind(const holders *h, uint32_t slot)
{
    uint32_t lo = 0, hi = h->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (h->v[mid].slot < slot)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int ref_add(void *be, kvix_binfo *b, uint32_t slot, unsigned tier, void **node,
                   kvix_err *err)
{
    refbe *r = be;
    uint64_t key[2] = {b->pos, b->canon};
    int rc = KVIX_OK, inserted = 0;
    pthread_rwlock_wrlock(&r->lock);
    refnode **np = kvix__hmap_put(&r->map, key, &inserted);
    if (np && inserted) {
        *np = aligned_alloc(KVIX_NODE_ALIGN, sizeof **np);
        if (*np) {
            memset(*np, 0, sizeof **np);
            (*np)->b = *b;
            r->heap += sizeof **np;
        } else {
            kvix__hmap_del(&r->map, key);
            np = NULL;
        }
    }
    if (!np) {
        rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory for an index block");
        goto out;
    }
    refnode *n = *np;
    holders *h = &n->h;
    uint32_t i = hfind(h, slot);
    if (i < h->n && h->v[i].slot == slot) {
        rc = h->v[i].tiers >> tier & 1; /* 1: held in that tier already */
        h->v[i].tiers |= 1u << tier;
        b->parent_engine = n->b.parent_engine;
        *node = n;
        goto out;
    }
    if (h->n == h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : 2;
        holder *v = realloc(h->v, cap * sizeof *v);
        if (!v) {
            if (inserted) {
                kvix__hmap_del(&r->map, key);
                r->heap -= sizeof *n;
                free(n);
            }
            rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory for an index block");
            goto out;
        }
        r->heap += (cap - h->cap) * sizeof *v;
        h->v = v;
        h->cap = cap;
    }
    memmove(h->v + i + 1, h->v + i, (h->n - i) * sizeof *h->v);
    h->v[i].slot = slot;
    h->v[i].tiers = 1u << tier;
    h->n++;
    b->parent_engine = n->b.parent_engine;
    *node = n;
out:
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

static void ref_del(void *be, void *node, uint32_t slot, unsigned tier)
{
    refbe *r = be;
    refnode *n = node;
    holders *h = &n->h;
    pthread_rwlock_wrlock(&r->lock);
    uint32_t i = hfind(h, slot);
    if (i < h->n && h->v[i].slot == slot) {
        h->v[i].tiers &= ~(1u << tier);
        if (!h->v[i].tiers) {
            memmove(h->v + i, h->v + i + 1, (h->n - i - 1) * sizeof *h->v);
            h->n--;
        }
    }
    if (!h->n) {
        uint64_t key[2] = {n->b.pos, n->b.canon};
        r->heap -= h->cap * sizeof *h->v + sizeof *n;
        free(h->v);
        kvix__hmap_del(&r->map, key);
        free(n);
    }
    pthread_rwlock_unlock(&r->lock);
}

static void ref_info(void *be, const void *node, kvix_binfo *out)
{
    (void)be;
    *out = ((const refnode *)node)->b;
}

static void count_tiers(uint32_t *tb, uint32_t tiers)
{
    for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
        if (tiers & (1u << t))
            tb[t]++;
}

static int ref_query(void *be, kvix_qchain *q, kvix_qhits *out, kvix_err *err)
{
    refbe *r = be;
    int rc = KVIX_OK;
    if (!q->n)
        return KVIX_OK;
    size_t base = out->n;
    uint32_t *blk = NULL; /* hit j's match length so far */
    pthread_rwlock_rdlock(&r->lock);
    uint64_t key[2] = {0, kvix_qchain_at(q, 0)};
    refnode *const *np = kvix__hmap_get(&r->map, key);
    const holders *h = np ? &(*np)->h : NULL;
    size_t m = h ? h->n : 0;
    /* Counts per tier always: the reference is the model, not the fast path. */
    if (m && ((rc = kvix__qhits_tiers(out, err)) || (rc = kvix__qhits_reserve(out, m, err))))
        goto out;
    if (m && !(blk = malloc(m * sizeof *blk))) {
        rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory for query hits");
        goto out;
    }
    for (size_t j = 0; j < m; j++) {
        out->slot[base + j] = h->v[j].slot;
        blk[j] = 1;
        uint32_t *tb = out->tier[base + j];
        memset(tb, 0, sizeof out->tier[0]);
        count_tiers(tb, h->v[j].tiers);
    }
    out->n += m;
    /* A hit is still extending while its blocks equal the position reached. */
    for (size_t pos = 1; pos < q->n && m; pos++) {
        key[0] = pos;
        key[1] = kvix_qchain_at(q, pos);
        np = kvix__hmap_get(&r->map, key);
        if (!np)
            break;
        h = &(*np)->h;
        size_t alive = 0;
        for (size_t j = 0; j < m; j++) {
            if (blk[j] != pos)
                continue;
            uint32_t slot = out->slot[base + j];
            uint32_t i = hfind(h, slot);
            if (i < h->n && h->v[i].slot == slot) {
                blk[j]++;
                count_tiers(out->tier[base + j], h->v[i].tiers);
                alive++;
            }
        }
        if (!alive)
            break;
    }
    /* runs: neighbours of one length */
    for (size_t j = 0, e; j < m; j = e) {
        for (e = j + 1; e < m && blk[e] == blk[j]; e++)
            ;
        if ((rc = kvix__qhits_run(out, base + j, e - j, blk[j], err)))
            goto out;
    }
out:
    pthread_rwlock_unlock(&r->lock);
    free(blk);
    return rc;
}

static size_t ref_memory(void *be)
{
    refbe *r = be;
    return sizeof *r + kvix__hmap_memory(&r->map) + r->heap;
}

static size_t ref_unique(void *be)
{
    refbe *r = be;
    return kvix_hmap_size(&r->map);
}

const kvix_backend_ops kvix__backend_reference_ops = {
    .name = "reference",
    .create = ref_create,
    .destroy = ref_destroy,
    .add = ref_add,
    .del = ref_del,
    .info = ref_info,
    .query = ref_query,
    .memory = ref_memory,
    .unique_blocks = ref_unique,
    .engine_off = offsetof(refnode, b.engine),
    .pos_off = offsetof(refnode, b.pos),
    .canon_off = offsetof(refnode, b.canon),
};
