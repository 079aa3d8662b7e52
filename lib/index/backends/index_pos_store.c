/* The positional backend's storage: the sharded tables that map (position,
 * canonical hash) to nodes, and the nodes themselves (made, retired after a
 * grace period in batches, reused). See lib/index/backends/index_positional.c. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hset_write_int.h"
#include "index_pos_int.h"

static ptable *table_new(uint64_t cap, kvix_bmem *mem)
{
    size_t sz = sizeof(ptable) + cap * sizeof(pslot);
    ptable *t = calloc(1, sz);
    if (t) {
        t->mask = cap - 1;
        atomic_fetch_add_explicit(&mem->bytes, (long)sz, memory_order_relaxed);
    }
    return t;
}

static void table_retire(ptable *t, kvix_bmem *mem)
{
    atomic_fetch_sub_explicit(&mem->bytes, (long)(sizeof(ptable) + (t->mask + 1) * sizeof(pslot)),
                              memory_order_relaxed);
    kvix__rcu_free(&t->rcu);
}

static void table_put(ptable *t, uint64_t h, pidx n)
{
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint32_t o = atomic_load_explicit(&t->s[i], memory_order_relaxed);
        if (!o || o == TOMB) {
            atomic_store_explicit(&t->s[i], slot_word(h, n), memory_order_release);
            return;
        }
    }
}

#define REBUILD_AHEAD 16u

/* Rebuild a shard's table for `want` live entries at load <= 1/2. */
static int shard_rebuild(pos_be *be, pshard *sh, size_t want)
{
    kvix_bmem *mem = &be->mem;
    uint64_t cap = TABLE_MIN;
    while (cap < want * 2)
        cap *= 2;
    ptable *old = atomic_load_explicit(&sh->t, memory_order_relaxed);
    ptable *t = table_new(cap, mem);
    if (!t)
        return KVIX_ENOMEM;
    for (uint64_t i = 0; old && i <= old->mask; i++) {
        /* every live slot's node is read, in table order, scattered over the
         * slab: ask for the node REBUILD_AHEAD slots on while this one hashes */
        if (i + REBUILD_AHEAD <= old->mask) {
            uint32_t a = atomic_load_explicit(&old->s[i + REBUILD_AHEAD], memory_order_relaxed);
            if (a > TOMB)
                __builtin_prefetch(pn(be, a & NUM_MASK));
        }
        uint32_t w = atomic_load_explicit(&old->s[i], memory_order_relaxed);
        if (w && w != TOMB) { /* the slot keeps 4 bits of the hash: rehash */
            const pnode *n = pn(be, w & NUM_MASK);
            table_put(t, key_hash(n->pos, n->canon), w & NUM_MASK);
        }
    }
    atomic_store_explicit(&sh->t, t, memory_order_release);
    atomic_store_explicit(&sh->mask, t->mask, memory_order_relaxed);
    sh->tomb = 0;
    if (old)
        table_retire(old, mem);
    return KVIX_OK;
}

void kvix__pos_reserve(void *vbe, size_t n)
{
    pos_be *be = vbe;
    size_t want = n / NSHARD + n / NSHARD / 16 + 16; /* keys spread unevenly: some room */
    for (unsigned i = 0; i < NSHARD; i++) {
        pshard *sh = &be->shard[i];
        spin_lock(&sh->mu);
        ptable *t = atomic_load_explicit(&sh->t, memory_order_relaxed);
        if (!t || (t->mask + 1) < want * 2)
            (void)shard_rebuild(be, sh, want > sh->used ? want : sh->used);
        spin_unlock(&sh->mu);
    }
}

int kvix__pos_shard_insert(pos_be *be, pshard *sh, uint64_t h, pidx n)
{
    ptable *t = atomic_load_explicit(&sh->t, memory_order_relaxed);
    if (!t || (sh->used + sh->tomb + 1) * 4 > (t->mask + 1) * 3) {
        if (shard_rebuild(be, sh, sh->used + 1) < 0)
            return KVIX_ENOMEM;
        t = atomic_load_explicit(&sh->t, memory_order_relaxed);
    }
    /* a tombstone slot is reused only when it is the first free one */
    uint64_t i = h & t->mask;
    for (;; i = (i + 1) & t->mask) {
        uint32_t o = atomic_load_explicit(&t->s[i], memory_order_relaxed);
        if (!o || o == TOMB)
            break;
    }
    if (atomic_load_explicit(&t->s[i], memory_order_relaxed) == TOMB)
        sh->tomb--;
    atomic_store_explicit(&t->s[i], slot_word(h, n), memory_order_release);
    sh->used++;
    return KVIX_OK;
}

void kvix__pos_prefetch(void *vbe, uint32_t pos0, const uint64_t *canon, size_t n)
{
    pos_be *be = vbe;
    kvix_rcu_lock(); /* another writer may replace a table meanwhile */
    for (size_t k = 0; k < n; k++) {
        uint64_t h = key_hash(pos0 + (uint32_t)k, canon[k]);
        const ptable *t = atomic_load_explicit(&be->shard[shard_of(h)].t, memory_order_acquire);
        if (t)
            __builtin_prefetch(&t->s[h & t->mask]);
    }
    kvix_rcu_unlock();
}

void kvix__pos_prefetch_keys(void *vbe, const uint32_t *pos, const uint64_t *canon, size_t n)
{
    pos_be *be = vbe;
    for (size_t k = 0; k < n; k++) {
        uint64_t h = key_hash(pos[k], canon[k]);
        const pshard *sh = &be->shard[shard_of(h)];
        /* the table's address and mask, not its contents: no read-side
         * section (a replaced table's slot is a wasted hint) */
        const ptable *t = atomic_load_explicit(&sh->t, memory_order_relaxed);
        uint64_t mask = atomic_load_explicit(&sh->mask, memory_order_relaxed);
        if (t)
            __builtin_prefetch(&t->s[h & mask]);
    }
}

void kvix__pos_prefetch_key_nodes(void *vbe, const uint32_t *pos, const uint64_t *canon,
                                 size_t n)
{
    pos_be *be = vbe;
    kvix_rcu_lock(); /* the slots are read: their table may be replaced meanwhile */
    const pdir *d = atomic_load_explicit(&be->dir, memory_order_acquire);
    for (size_t k = 0; d && k < n; k++) {
        uint64_t h = key_hash(pos[k], canon[k]);
        const ptable *t = atomic_load_explicit(&be->shard[shard_of(h)].t, memory_order_acquire);
        if (!t)
            continue;
        uint32_t tag = slot_tag(h);
        /* the first slots of the probe: most keys are found in the first */
        for (uint64_t i = h & t->mask, j = 0; j < 2; i = (i + 1) & t->mask, j++) {
            uint32_t w = atomic_load_explicit(&t->s[i], memory_order_relaxed);
            if (!w)
                break;
            pidx num = w & NUM_MASK;
            if (w >> NUM_BITS == tag && w != TOMB && (num >> SLAB_SHIFT) < d->cap) {
                __builtin_prefetch(d->c[num >> SLAB_SHIFT] + (size_t)(num & (SLAB_CHUNK - 1)) *
                                                                sizeof(pnode));
                break;
            }
        }
    }
    kvix_rcu_unlock();
}

void kvix__pos_prefetch_del(void *vbe, const void *node)
{
    pos_be *be = vbe;
    const pnode *n = node;
    uint64_t h = key_hash(n->pos, n->canon);
    const pshard *sh = &be->shard[shard_of(h)];
    const ptable *t = atomic_load_explicit(&sh->t, memory_order_relaxed);
    uint64_t mask = atomic_load_explicit(&sh->mask, memory_order_relaxed);
    __builtin_prefetch(&t->s[h & mask]);
    /* a held node's parent is fixed (it was set before the slot's add
     * returned); its kids are other writers' (no hint read of them) */
    if (n->parent != PNIL)
        __builtin_prefetch(pn(be, n->parent));
}

void kvix__pos_shard_remove(pos_be *be, pshard *sh, uint64_t h, pidx n)
{
    ptable *t = atomic_load_explicit(&sh->t, memory_order_relaxed);
    uint32_t want = slot_word(h, n);
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint32_t o = atomic_load_explicit(&t->s[i], memory_order_relaxed);
        if (!o)
            return;
        if (o == want) {
            atomic_store_explicit(&t->s[i], TOMB, memory_order_release);
            sh->used--;
            sh->tomb++;
            break;
        }
    }
    if (t->mask + 1 > TABLE_MIN && sh->used * 8 < t->mask + 1)
        (void)shard_rebuild(be, sh, sh->used); /* shrinking is optional: ENOMEM keeps it */
}

/* ---- the slab ----
 * Past REGION_FROM chunks (about 36k nodes) the chunks are carved from
 * regions of REGION_CHUNKS, whole huge pages on huge-page boundaries, with
 * MADV_HUGEPAGE: a large index's nodes are read at random, and with 4 KB
 * pages nearly every node read also missed the TLB, and every 4 KB of new
 * nodes cost a page fault (measured: a tenth of a 2048-worker replay's time
 * in node_new's first write). A region is reserved whole, its pages are
 * touched as its chunks fill; it is freed with the slab. */

#define HUGE_PAGE ((size_t)2 << 20)
#define REGION_FROM 16u
/* SLAB_CHUNK * sizeof(pnode) is a multiple of 64 KB (nodes are multiples of
 * 16 bytes), so 32 chunks are whole huge pages */
#define REGION_CHUNKS 32u
#define REGION_BYTES (REGION_CHUNKS * SLAB_CHUNK * sizeof(pnode))
_Static_assert(REGION_BYTES % HUGE_PAGE == 0, "a slab region is whole huge pages");
_Static_assert(SLAB_FIRST << (REGION_FROM - 1) >= SLAB_CHUNK, "regions hold full chunks");

static uint32_t chunk_cap(uint32_t c)
{
    return c < 8 ? SLAB_FIRST << c : SLAB_CHUNK;
}

/* A new chunk at the slab's end (under slabmu). */
static int slab_grow(pos_be *be)
{
    uint32_t c = be->nchunk;
    if (c >= (NUM_MASK >> SLAB_SHIFT) + 1)
        return KVIX_ELIMIT; /* 2^28 node numbers */
    pdir *d = atomic_load_explicit(&be->dir, memory_order_relaxed);
    if (!d || d->cap == c) {
        uint32_t cap = d ? d->cap * 2 : 8;
        pdir *nd = malloc(sizeof *nd + cap * sizeof(char *));
        if (!nd)
            return KVIX_ENOMEM;
        nd->prev = d;
        nd->cap = cap;
        for (uint32_t k = 0; k < c; k++)
            nd->c[k] = d->c[k];
        atomic_fetch_add_explicit(&be->mem.bytes, (long)(sizeof *nd + cap * sizeof(char *)),
                                  memory_order_relaxed);
        atomic_store_explicit(&be->dir, nd, memory_order_release);
        d = nd;
    }
    size_t sz = chunk_cap(c) * sizeof(pnode);
    pnode *ch;
    if (c < REGION_FROM) {
        ch = aligned_alloc(64, sz);
    } else if ((c - REGION_FROM) % REGION_CHUNKS == 0) {
        ch = aligned_alloc(HUGE_PAGE, REGION_BYTES);
#ifdef MADV_HUGEPAGE
        if (ch) /* advice only: without huge pages it is a plain allocation */
            (void)madvise(ch, REGION_BYTES, MADV_HUGEPAGE);
#endif
    } else {
        ch = (pnode *)(void *)(d->c[c - 1] + sz); /* the region's next chunk */
    }
    if (!ch)
        return KVIX_ENOMEM;
    atomic_fetch_add_explicit(&be->mem.bytes, (long)sz, memory_order_relaxed);
    /* a writer that is given a number in it got it after this store */
    d->c[c] = (char *)ch;
    be->nchunk = c + 1;
    be->bump = (c << SLAB_SHIFT) + (c == 0 ? 2 : 0); /* 0 is no node, 1 a tombstone */
    be->bump_end = (c << SLAB_SHIFT) + chunk_cap(c);
    return KVIX_OK;
}

/* Give every chunk and directory back (under slabmu, no node handed out:
 * no writer holds a number, no reader a node). */
static void slab_release(pos_be *be)
{
    pdir *d = atomic_load_explicit(&be->dir, memory_order_relaxed);
    if (!d)
        return;
    long bytes = 0;
    for (uint32_t c = 0; c < be->nchunk; c++) {
        bytes += (long)(chunk_cap(c) * sizeof(pnode));
        if (c < REGION_FROM || (c - REGION_FROM) % REGION_CHUNKS == 0)
            free(d->c[c]); /* a chunk, or a region: its first chunk */
    }
    while (d) {
        pdir *prev = d->prev;
        bytes += (long)(sizeof *d + d->cap * sizeof(char *));
        free(d);
        d = prev;
    }
    atomic_fetch_sub_explicit(&be->mem.bytes, bytes, memory_order_relaxed);
    atomic_store_explicit(&be->dir, NULL, memory_order_relaxed);
    be->nchunk = 0;
    be->bump = be->bump_end = 0;
    be->free = PNIL;
}

pnode *kvix__pos_node_new(pos_be *be, uint32_t pos, uint64_t canon, uint64_t engine, pidx *num,
                         int *full)
{
    pnode *n;
    int rc;
    spin_lock(&be->slabmu);
    pidx i = be->free;
    if (i != PNIL) {
        n = pn(be, i);
        be->free = n->next;
    } else {
        if (be->bump == be->bump_end && (rc = slab_grow(be)) < 0) {
            spin_unlock(&be->slabmu);
            *full = rc == KVIX_ELIMIT;
            return NULL;
        }
        i = be->bump++;
        n = pn(be, i);
    }
    be->nlive++;
    spin_unlock(&be->slabmu);
    n->canon = canon;
    n->pos = pos;
    n->engine = engine;
    n->local = 0;
    n->parent = n->kids = n->next = PNIL;
    kvix_hs_init(&n->h);
    *num = i;
    return n;
}

void kvix__pos_node_free(pos_be *be, pidx i)
{
    spin_lock(&be->slabmu);
    pn(be, i)->next = be->free;
    be->free = i;
    be->nlive--;
    spin_unlock(&be->slabmu);
}

void kvix__pos_node_retire(pos_be *be, pnode *n, pidx i)
{
    kvix_hs_retire(&n->h, &be->mem);
    spin_lock(&be->slabmu);
    n->next = be->limbo;
    if (be->limbo == PNIL)
        be->limbo_tail = i;
    be->limbo = i;
    atomic_store_explicit(&be->nlimbo, atomic_load_explicit(&be->nlimbo, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    spin_unlock(&be->slabmu);
}

/* A batch of retired nodes waiting for its grace period (nodes keep no
 * room for it: a batch of LIMBO_BATCH pays for one). */
typedef struct plimbo {
    struct rcu_head rcu;
    pos_be *be;
    pidx first, last; /* linked by next, from first to last */
    long n;
} plimbo;

/* After the grace period of a limbo batch (call_rcu thread): its nodes go
 * back to the free list, spliced in front of it whole (one node written:
 * the nodes stay in the writer's cache, not pulled to this thread's); when
 * no node is left, the slab goes too (memory follows the index down to
 * nothing; short of that the slab keeps its high-water mark and hands
 * places out again). */
static void limbo_cb(struct rcu_head *head)
{
    KVIX_RCU_TSAN_ACQUIRE();
    plimbo *lb = (plimbo *)(void *)((char *)head - offsetof(plimbo, rcu));
    pos_be *be = lb->be;
    spin_lock(&be->slabmu);
    pn(be, lb->last)->next = be->free;
    be->free = lb->first;
    be->nlive -= (size_t)lb->n;
    if (be->nlive == 0)
        slab_release(be);
    spin_unlock(&be->slabmu);
    free(lb);
    atomic_fetch_sub_explicit(&be->pending, 1, memory_order_release);
}

void kvix__pos_limbo_drain(pos_be *be)
{
    long nl = atomic_load_explicit(&be->nlimbo, memory_order_relaxed);
    if (nl < LIMBO_BATCH && !(nl > 0 && atomic_load_explicit(&be->unique, memory_order_relaxed) == 0))
        return;
    plimbo *lb = malloc(sizeof *lb); /* none: the nodes wait for the next drain */
    if (!lb)
        return;
    spin_lock(&be->slabmu);
    lb->first = be->limbo;
    lb->last = be->limbo_tail;
    lb->n = atomic_load_explicit(&be->nlimbo, memory_order_relaxed);
    be->limbo = be->limbo_tail = PNIL;
    atomic_store_explicit(&be->nlimbo, 0, memory_order_relaxed);
    spin_unlock(&be->slabmu);
    if (lb->first == PNIL) {
        free(lb);
        return;
    }
    lb->be = be;
    atomic_fetch_add_explicit(&be->pending, 1, memory_order_relaxed);
    kvix_rcu_writer();
    KVIX_RCU_TSAN_RELEASE();
    call_rcu(&lb->rcu, limbo_cb);
}

void kvix__pos_store_free(pos_be *be)
{
    for (unsigned i = 0; i < NSHARD; i++) {
        ptable *t = atomic_load(&be->shard[i].t);
        for (uint64_t j = 0; t && j <= t->mask; j++) {
            uint32_t w = atomic_load(&t->s[j]);
            if (w && w != TOMB)
                kvix_hs_free(&pn(be, w & NUM_MASK)->h);
        }
        free(t);
        free(be->shard[i].pred);
    }
    slab_release(be);
}
