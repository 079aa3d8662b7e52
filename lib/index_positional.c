/* The positional backend (default): every block is an entry of a sharded
 * hash table keyed by (position, canonical rolling hash), after NVIDIA
 * Dynamo's "Flash Indexer" but sound, with jump search.
 *
 * Why the key holds the canonical hash and not only the local one: a query
 * must check the canonical hash at every probed position anyway (a local hash
 * recurs under other prefixes), and the rolling chain is computed through
 * every position up to the probe, so keying by canon costs the query nothing,
 * makes a "Multi" entry unnecessary (the same local hash at the same position
 * under different prefixes is simply two keys), and lets a writer find a
 * block's parent, which exact hole handling needs (below).
 *
 * Jump search. Let C be the slots known to hold positions 0..i-1. Probe
 * p = i + jump - 1: slots of C holding (p, canon_p) stay; the others (D) have
 * their matched length in [i, p], found by bisection (binsearch) or a scan.
 * This is exact only for slots without holes: a slot holding (p, canon_p)
 * holds the query's exact prefix chain at p (canon is a rolling hash over the
 * prefix) but, after a middle block was removed, maybe not every position
 * below p. So each node links to its parent node and the backend keeps, per
 * slot, the number of "orphans": blocks the slot holds whose parent it does
 * not hold. A slot with no orphan holds every ancestor of every block it holds
 * (induction over parents), so for it "holds (p, canon_p)" implies "holds
 * every (x, canon_x), x <= p" and its match is monotone (bisection is exact).
 * Slots with orphans are "untrusted": while one is a candidate the search
 * steps one position at a time, which is the definition itself.
 * Keeping the counts exact: an orphan can only appear or vanish when the slot
 * itself adds or removes a block (its bits are the only ones involved), by
 * looking at the parent's bit and, only when it may matter, at the children's
 * bits (add: only if the slot already has orphans; remove: only if the node
 * has children). A node stays (as an empty "ghost") while children link to it.
 * Known cost: a slot removing a block with many children (the last block of
 * a shared system prompt) checks each child, O(children); a per-slot count of
 * held children on high-fanout nodes would make that O(1).
 *
 * Concurrency. Readers are lock-free under RCU (rcu_int.h): shard tables and
 * nodes are published with release stores and freed after a grace period.
 * Writers lock the shard of the node they change (two shards, in index order,
 * when a parent is involved); a shard's table is rebuilt (grown, cleaned or
 * shrunk) under its lock into a fresh table that readers switch to, so no
 * query ever waits, and a rebuild touches 1/NSHARD of the index.
 */
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "canon_int.h"
#include "hset_int.h"
#include "index_int.h"
#include "rcu_int.h"

#define SHARD_BITS 6
#define NSHARD (1u << SHARD_BITS)
#define TABLE_MIN 8u
#define JUMP_DEFAULT 32u /* bench_index jump sweep: fewest instructions, best median */
#define JUMP_MAX 1024u
#define ORPH_CHUNK 256u
#define TOMB UINT64_C(1) /* a table slot's word for a removed entry */
#define LIMBO_BATCH 1024
#define POOL_MIN 32

/* ---- shard locks: held for a few hundred instructions, so a spinlock
 * (yielding when the holder is descheduled) beats a mutex's two calls ---- */

typedef _Atomic int spin_t;

static inline int spin_trylock(spin_t *l)
{
    return !atomic_load_explicit(l, memory_order_relaxed) &&
           !atomic_exchange_explicit(l, 1, memory_order_acquire);
}

static inline void spin_lock(spin_t *l)
{
    for (unsigned n = 0; !spin_trylock(l); n++) {
        if (n < 100) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
            sched_yield();
        }
    }
}

static inline void spin_unlock(spin_t *l)
{
    atomic_store_explicit(l, 0, memory_order_release);
}

/* ---- nodes and shard tables ---- */

typedef struct pnode pnode;
struct pnode {
    /* writer side, under the node's shard lock */
    pnode *parent; /* node of (pos - 1, parent canon); NULL at 0 or for a ghost */
    pnode *next;   /* next sibling (under the parent's shard lock); in limbo: next retired */
    union {
        struct {
            pnode *kids; /* nodes whose parent this is */
            pnode *prev; /* previous sibling */
        };
        /* a retired node has no kids and no siblings, and readers never look
         * at either: the limbo batch's grace period reuses their bytes */
        struct rcu_head rcu;
    };
    uint32_t nkids;
    /* read side */
    uint32_t pos;
    uint64_t canon;
    kvix_hset h;
    uint64_t engine; /* made under (the front end's key): fixed for life */
    uint64_t local;  /* set when the node becomes held */
};

/* A table slot is one word: 0 never used (ends a probe), TOMB removed, else
 * 16 bits of the key's hash above the node's address (user-space addresses
 * fit in 48 bits: node_new refuses one that does not), so most mismatches
 * never touch the node, a slot costs 8 bytes rather than 16, and a reader
 * loads the tag and the node together. */
typedef _Atomic uint64_t pslot;
#define PTR_BITS 48
#define PTR_MASK ((UINT64_C(1) << PTR_BITS) - 1)

static inline uint64_t slot_tag(uint64_t h)
{
    return (h >> 24) & 0xffff; /* not the top bits: they pick the shard */
}

static inline uint64_t slot_word(uint64_t h, const pnode *n)
{
    return slot_tag(h) << PTR_BITS | (uint64_t)(uintptr_t)n;
}

static inline pnode *slot_node(uint64_t w)
{
    return (pnode *)(uintptr_t)(w & PTR_MASK);
}

typedef struct ptable {
    struct rcu_head rcu;
    uint64_t mask;
    pslot s[];
} ptable;

typedef struct pshard {
    spin_t mu;
    _Atomic(ptable *) t;
    size_t used, tomb;
} __attribute__((aligned(64))) pshard;

typedef struct pos_be {
    kvix_bmem mem;
    unsigned jump;
    int binsearch;
    _Atomic uint32_t nw;       /* words covering the highest slot seen */
    _Atomic long unique;       /* nodes with holders */
    _Atomic long nuntrusted;   /* slots with orphans */
    _Atomic(uint32_t *) orph[KVIX_SLOTS_MAX / ORPH_CHUNK]; /* per-slot orphan counts */
    kvix_aword untrusted[KVIX_SLOTS_MAX / 64];             /* bit: slot has orphans */
    /* retired nodes wait in limbo for one grace period per batch, then are
     * reused (malloc and call_rcu per block cost more than the rest of an add) */
    _Atomic(pnode *) limbo;
    _Atomic long nlimbo;
    _Atomic long pending; /* limbo batches waiting for their grace period */
    spin_t poolmu;
    size_t npool;
    _Atomic(pnode *) pool; /* retired nodes to reuse; peeked without the lock */
    pshard shard[NSHARD];
} pos_be;

static inline uint64_t key_hash(uint32_t pos, uint64_t canon)
{
    uint64_t h = canon ^ ((uint64_t)pos * UINT64_C(0x9E3779B97F4A7C15));
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    return h ? h : 1;
}

static inline unsigned shard_of(uint64_t h)
{
    return (unsigned)(h >> (64 - SHARD_BITS));
}

static inline pnode *table_find(const ptable *t, uint64_t h, uint32_t pos, uint64_t canon)
{
    uint64_t tag = slot_tag(h);
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint64_t w = atomic_load_explicit(&t->s[i], memory_order_acquire);
        if (!w)
            return NULL;
        if (w >> PTR_BITS == tag && w != TOMB) {
            pnode *n = slot_node(w);
            if (n->canon == canon && n->pos == pos)
                return n;
        }
    }
}

/* Lock-free lookup (inside a read-side section, or under the shard lock). */
static inline pnode *be_find(pos_be *be, uint32_t pos, uint64_t canon)
{
    uint64_t h = key_hash(pos, canon);
    ptable *t = atomic_load_explicit(&be->shard[shard_of(h)].t, memory_order_acquire);
    return table_find(t, h, pos, canon);
}

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
    kvix_rcu_free(&t->rcu);
}

static void table_put(ptable *t, uint64_t h, pnode *n)
{
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint64_t o = atomic_load_explicit(&t->s[i], memory_order_relaxed);
        if (!o || o == TOMB) {
            atomic_store_explicit(&t->s[i], slot_word(h, n), memory_order_release);
            return;
        }
    }
}

/* Rebuild a shard's table for `want` live entries at load <= 1/2. */
static int shard_rebuild(pshard *sh, size_t want, kvix_bmem *mem)
{
    uint64_t cap = TABLE_MIN;
    while (cap < want * 2)
        cap *= 2;
    ptable *old = atomic_load_explicit(&sh->t, memory_order_relaxed);
    ptable *t = table_new(cap, mem);
    if (!t)
        return KVIX_ENOMEM;
    for (uint64_t i = 0; i <= old->mask; i++) {
        uint64_t w = atomic_load_explicit(&old->s[i], memory_order_relaxed);
        if (w && w != TOMB) { /* the slot keeps 16 bits of the hash: rehash */
            pnode *n = slot_node(w);
            table_put(t, key_hash(n->pos, n->canon), n);
        }
    }
    atomic_store_explicit(&sh->t, t, memory_order_release);
    sh->tomb = 0;
    table_retire(old, mem);
    return KVIX_OK;
}

static int shard_insert(pshard *sh, uint64_t h, pnode *n, kvix_bmem *mem)
{
    ptable *t = atomic_load_explicit(&sh->t, memory_order_relaxed);
    if ((sh->used + sh->tomb + 1) * 4 > (t->mask + 1) * 3) {
        if (shard_rebuild(sh, sh->used + 1, mem) < 0)
            return KVIX_ENOMEM;
        t = atomic_load_explicit(&sh->t, memory_order_relaxed);
    }
    /* a tombstone slot is reused only when it is the first free one */
    uint64_t i = h & t->mask;
    for (;; i = (i + 1) & t->mask) {
        uint64_t o = atomic_load_explicit(&t->s[i], memory_order_relaxed);
        if (!o || o == TOMB)
            break;
    }
    if (atomic_load_explicit(&t->s[i], memory_order_relaxed) == TOMB)
        sh->tomb--;
    atomic_store_explicit(&t->s[i], slot_word(h, n), memory_order_release);
    sh->used++;
    return KVIX_OK;
}

static void shard_remove(pshard *sh, uint64_t h, pnode *n, kvix_bmem *mem)
{
    ptable *t = atomic_load_explicit(&sh->t, memory_order_relaxed);
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint64_t o = atomic_load_explicit(&t->s[i], memory_order_relaxed);
        if (!o)
            return;
        if (o == slot_word(h, n)) {
            atomic_store_explicit(&t->s[i], TOMB, memory_order_release);
            sh->used--;
            sh->tomb++;
            break;
        }
    }
    if (t->mask + 1 > TABLE_MIN && sh->used * 8 < t->mask + 1)
        (void)shard_rebuild(sh, sh->used, mem); /* shrinking is optional: ENOMEM keeps it */
}

static pnode *node_new(pos_be *be, uint32_t pos, uint64_t canon, uint64_t engine)
{
    pnode *n = NULL;
    if (atomic_load_explicit(&be->pool, memory_order_relaxed)) {
        spin_lock(&be->poolmu); /* the peek may be stale: the lock decides */
        if ((n = atomic_load_explicit(&be->pool, memory_order_relaxed))) {
            atomic_store_explicit(&be->pool, n->next, memory_order_relaxed);
            be->npool--;
        }
        spin_unlock(&be->poolmu);
    }
    if (!n) {
        if (!(n = malloc(sizeof *n)))
            return NULL;
        if ((uintptr_t)n >> PTR_BITS) { /* no room for a table slot's tag */
            free(n);
            return NULL;
        }
        atomic_fetch_add_explicit(&be->mem.bytes, (long)sizeof *n, memory_order_relaxed);
    }
    memset(n, 0, offsetof(pnode, pos));
    n->pos = pos;
    n->canon = canon;
    n->engine = engine;
    kvix_hs_init(&n->h);
    return n;
}

static void node_free(pos_be *be, pnode *n)
{
    atomic_fetch_sub_explicit(&be->mem.bytes, (long)sizeof *n, memory_order_relaxed);
    free(n);
}

/* n is out of the table: readers may still see it until a grace period. */
static void node_retire(pos_be *be, pnode *n)
{
    kvix_hs_retire(&n->h, &be->mem);
    pnode *head = atomic_load_explicit(&be->limbo, memory_order_relaxed);
    do
        n->next = head;
    while (!atomic_compare_exchange_weak_explicit(&be->limbo, &head, n, memory_order_release,
                                                  memory_order_relaxed));
    atomic_fetch_add_explicit(&be->nlimbo, 1, memory_order_relaxed);
}

/* After the grace period of a limbo batch (call_rcu thread): its nodes go to
 * the pool (kept at most 1/8 of the live nodes) or back to malloc. The batch's
 * first node carries the backend in its (retired, unused) parent field. */
static void limbo_cb(struct rcu_head *head)
{
    KVIX_RCU_TSAN_ACQUIRE();
    pnode *n = (pnode *)(void *)((char *)head - offsetof(pnode, rcu));
    pos_be *be = (pos_be *)(void *)n->parent;
    size_t cap = (size_t)atomic_load_explicit(&be->unique, memory_order_relaxed) / 8;
    if (cap < POOL_MIN)
        cap = POOL_MIN;
    spin_lock(&be->poolmu);
    while (n) {
        pnode *next = n->next;
        if (be->npool < cap) {
            n->next = atomic_load_explicit(&be->pool, memory_order_relaxed);
            atomic_store_explicit(&be->pool, n, memory_order_relaxed);
            be->npool++;
        } else {
            node_free(be, n);
        }
        n = next;
    }
    /* the index shrank: let the pool go with it */
    while (atomic_load_explicit(&be->pool, memory_order_relaxed) && be->npool > cap) {
        pnode *k = atomic_load_explicit(&be->pool, memory_order_relaxed);
        atomic_store_explicit(&be->pool, k->next, memory_order_relaxed);
        be->npool--;
        node_free(be, k);
    }
    spin_unlock(&be->poolmu);
    atomic_fetch_sub_explicit(&be->pending, 1, memory_order_release);
}

/* After a batch of retirements (or when the index is empty), hand the limbo
 * to one call_rcu: one grace period per batch, and writers never wait. */
static void limbo_drain(pos_be *be)
{
    long nl = atomic_load_explicit(&be->nlimbo, memory_order_relaxed);
    if (nl < LIMBO_BATCH && !(nl > 0 && atomic_load_explicit(&be->unique, memory_order_relaxed) == 0))
        return;
    pnode *n = atomic_exchange_explicit(&be->limbo, NULL, memory_order_acquire);
    if (!n)
        return;
    long taken = 0;
    for (pnode *k = n; k; k = k->next)
        taken++;
    atomic_fetch_sub_explicit(&be->nlimbo, taken, memory_order_relaxed);
    n->parent = (pnode *)(void *)be;
    atomic_fetch_add_explicit(&be->pending, 1, memory_order_relaxed);
    kvix_rcu_writer();
    KVIX_RCU_TSAN_RELEASE();
    call_rcu(&n->rcu, limbo_cb);
}

static inline int node_removable(const pnode *n)
{
    return n->h.count == 0 && n->nkids == 0 &&
           !atomic_load_explicit(&n->h.tiers, memory_order_relaxed);
}

static void kid_link(pnode *p, pnode *k)
{
    k->parent = p;
    k->prev = NULL;
    k->next = p->kids;
    if (p->kids)
        p->kids->prev = k;
    p->kids = k;
    p->nkids++;
}

static void kid_unlink(pnode *p, pnode *k)
{
    if (k->prev)
        k->prev->next = k->next;
    else
        p->kids = k->next;
    if (k->next)
        k->next->prev = k->prev;
    p->nkids--;
}

static void lock2(pos_be *be, unsigned a, unsigned b)
{
    if (a > b) {
        unsigned x = a;
        a = b;
        b = x;
    }
    spin_lock(&be->shard[a].mu);
    if (b != a)
        spin_lock(&be->shard[b].mu);
}

static void unlock2(pos_be *be, unsigned a, unsigned b)
{
    spin_unlock(&be->shard[a].mu);
    if (b != a)
        spin_unlock(&be->shard[b].mu);
}

/* ---- per-slot orphan counts (written only by the slot's own writer) ---- */

static uint32_t *orph_slot(pos_be *be, uint32_t s)
{
    _Atomic(uint32_t *) *cp = &be->orph[s / ORPH_CHUNK];
    uint32_t *c = atomic_load_explicit(cp, memory_order_acquire);
    if (!c) {
        uint32_t *n = calloc(ORPH_CHUNK, sizeof *n);
        if (!n)
            return NULL;
        if (atomic_compare_exchange_strong_explicit(cp, &c, n, memory_order_acq_rel,
                                                    memory_order_acquire)) {
            atomic_fetch_add_explicit(&be->mem.bytes, (long)(ORPH_CHUNK * sizeof *n),
                                      memory_order_relaxed);
            c = n;
        } else {
            free(n);
        }
    }
    return &c[s % ORPH_CHUNK];
}

static void orph_change(pos_be *be, uint32_t *o, uint32_t s, int delta)
{
    uint32_t before = *o;
    *o = (uint32_t)((int64_t)before + delta);
    uint64_t bit = UINT64_C(1) << (s % 64);
    if (before == 0 && *o > 0) {
        atomic_fetch_or_explicit(&be->untrusted[s / 64], bit, memory_order_relaxed);
        atomic_fetch_add_explicit(&be->nuntrusted, 1, memory_order_relaxed);
    } else if (before > 0 && *o == 0) {
        atomic_fetch_and_explicit(&be->untrusted[s / 64], ~bit, memory_order_relaxed);
        atomic_fetch_sub_explicit(&be->nuntrusted, 1, memory_order_relaxed);
    }
}

static inline int node_has(pnode *n, uint32_t s)
{
    return kvix_hs_has(&n->h, s);
}

/* ---- backend ops ---- */

static void *pos_create(const kvix_index_opts *opts, kvix_err *err)
{
    pos_be *be = aligned_alloc(64, (sizeof(pos_be) + 63) & ~(size_t)63);
    if (!be) {
        kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        return NULL;
    }
    memset(be, 0, sizeof *be);
    be->jump = opts && opts->jump ? opts->jump : JUMP_DEFAULT;
    if (be->jump > JUMP_MAX)
        be->jump = JUMP_MAX;
    be->binsearch = opts ? opts->binsearch : 1;
    atomic_store(&be->mem.bytes, (long)sizeof *be);
    for (unsigned i = 0; i < NSHARD; i++) {
        ptable *t = table_new(TABLE_MIN, &be->mem);
        if (!t) {
            for (unsigned j = 0; j < i; j++)
                free(atomic_load(&be->shard[j].t));
            free(be);
            kvix_err_set(err, KVIX_ENOMEM, "out of memory");
            return NULL;
        }
        atomic_store(&be->shard[i].t, t);
    }
    kvix_rcu_writer();
    return be;
}

static int pos_busy(void *vbe)
{
    pos_be *be = vbe;
    return atomic_load_explicit(&be->pending, memory_order_acquire) > 0;
}

static void pos_destroy(void *vbe)
{
    pos_be *be = vbe;
    if (!be)
        return;
    /* limbo batches point back to the backend: wait for their callbacks
     * (tables and bitsets retired alone do not, and free themselves) */
    while (atomic_load_explicit(&be->pending, memory_order_acquire) > 0)
        sched_yield();
    for (unsigned i = 0; i < NSHARD; i++) {
        ptable *t = atomic_load(&be->shard[i].t);
        for (uint64_t j = 0; j <= t->mask; j++) {
            uint64_t w = atomic_load(&t->s[j]);
            pnode *n = slot_node(w);
            if (w && w != TOMB) {
                kvix_hs_free(&n->h);
                free(n);
            }
        }
        free(t);
    }
    for (size_t i = 0; i < KVIX_SLOTS_MAX / ORPH_CHUNK; i++)
        free(atomic_load(&be->orph[i]));
    for (pnode *n = atomic_load(&be->limbo), *next; n; n = next) {
        next = n->next;
        free(n);
    }
    for (pnode *n = atomic_load(&be->pool), *next; n; n = next) {
        next = n->next;
        free(n);
    }
    free(be);
}

static void note_slot(pos_be *be, uint32_t s)
{
    uint32_t need = s / 64 + 1, cur = atomic_load_explicit(&be->nw, memory_order_relaxed);
    while (cur < need &&
           !atomic_compare_exchange_weak_explicit(&be->nw, &cur, need, memory_order_release,
                                                  memory_order_relaxed))
        ;
}

/* Remove n (found by key) and every ghost ancestor it leaves childless. */
static void reclaim(pos_be *be, uint32_t pos, uint64_t canon)
{
    for (;;) {
        uint64_t h = key_hash(pos, canon);
        unsigned si = shard_of(h), pi;
        spin_lock(&be->shard[si].mu);
        pnode *n = table_find(atomic_load_explicit(&be->shard[si].t, memory_order_relaxed), h,
                              pos, canon);
        if (!n || !node_removable(n)) {
            spin_unlock(&be->shard[si].mu);
            return;
        }
        pnode *p = n->parent;
        if (!p) {
            shard_remove(&be->shard[si], h, n, &be->mem);
            spin_unlock(&be->shard[si].mu);
            node_retire(be, n);
            return;
        }
        uint64_t hp = key_hash(p->pos, p->canon);
        pi = shard_of(hp);
        if (pi > si) {
            spin_lock(&be->shard[pi].mu);
        } else if (pi < si) {
            spin_unlock(&be->shard[si].mu);
            lock2(be, si, pi);
            n = table_find(atomic_load_explicit(&be->shard[si].t, memory_order_relaxed), h, pos,
                           canon);
            /* n's parent never changes once set; a re-made n may have a re-made
             * parent at the same address, with the same key: still right */
            if (!n || !node_removable(n) || n->parent != p) {
                unlock2(be, si, pi);
                return;
            }
        }
        shard_remove(&be->shard[si], h, n, &be->mem);
        kid_unlink(p, n);
        int more = node_removable(p);
        pos = p->pos;
        canon = p->canon;
        unlock2(be, si, pi);
        node_retire(be, n);
        if (!more)
            return;
    }
}

static int pos_add(void *vbe, kvix_binfo *b, uint32_t slot, unsigned tier, void **node,
                   kvix_err *err)
{
    pos_be *be = vbe;
    uint32_t pos = b->pos;
    uint64_t canon = b->canon, parent_canon = b->parent_canon;
    if (slot >= KVIX_SLOTS_MAX || tier >= KVIX_MEDIUM_COUNT)
        return kvix_err_set(err, KVIX_ERANGE, "slot %u or tier %u out of range", slot, tier);
    kvix_rcu_writer();
    uint32_t *orph = orph_slot(be, slot);
    if (!orph)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    note_slot(be, slot);
    uint64_t h = key_hash(pos, canon);
    unsigned si = shard_of(h), pi = si;
    pshard *sh = &be->shard[si];
    spin_lock(&sh->mu);
    pnode *n = table_find(atomic_load_explicit(&sh->t, memory_order_relaxed), h, pos, canon);
    if (!n || (pos > 0 && !n->parent)) {
        /* a new node (or a ghost learning its parent): lock the parent's shard
         * too, in index order, or by trylock to keep the one we hold */
        uint64_t hp = 0;
        if (pos > 0) {
            hp = key_hash(pos - 1, parent_canon);
            pi = shard_of(hp);
        }
        if (pi > si) {
            spin_lock(&be->shard[pi].mu);
        } else if (pi < si && !spin_trylock(&be->shard[pi].mu)) {
            spin_unlock(&sh->mu);
            lock2(be, si, pi);
            n = table_find(atomic_load_explicit(&sh->t, memory_order_relaxed), h, pos, canon);
        }
        int made = 0;
        if (!n) {
            n = node_new(be, pos, canon, b->engine);
            if (!n || shard_insert(sh, h, n, &be->mem) < 0) {
                if (n)
                    node_free(be, n);
                unlock2(be, si, pi);
                return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
            }
            made = 1;
        }
        if (pos > 0 && !n->parent) {
            pshard *ps = &be->shard[pi];
            pnode *p = table_find(atomic_load_explicit(&ps->t, memory_order_relaxed), hp, pos - 1,
                                  parent_canon);
            if (!p) { /* a parent nobody holds: a ghost, so holes stay exact */
                p = node_new(be, pos - 1, parent_canon, b->parent_engine);
                if (!p || shard_insert(ps, hp, p, &be->mem) < 0) {
                    if (p)
                        node_free(be, p);
                    unlock2(be, si, pi);
                    if (made)
                        reclaim(be, pos, canon);
                    return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
                }
            }
            kid_link(p, n);
        }
        if (pi != si)
            spin_unlock(&be->shard[pi].mu);
    }
    /* n's shard lock held; n->parent (if any) is pinned by n */
    int any_new;
    uint32_t before = n->h.count;
    int held = kvix_hs_add(&n->h, slot, tier, atomic_load_explicit(&be->nw, memory_order_relaxed),
                           &be->mem, &any_new);
    if (held < 0) {
        spin_unlock(&sh->mu);
        reclaim(be, pos, canon);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    if (any_new) {
        uint32_t o_before = *orph;
        if (pos > 0 && !node_has(n->parent, slot))
            orph_change(be, orph, slot, +1);
        if (o_before > 0)
            for (pnode *k = n->kids; k; k = k->next)
                if (node_has(k, slot))
                    orph_change(be, orph, slot, -1);
        if (before == 0) {
            atomic_fetch_add_explicit(&be->unique, 1, memory_order_relaxed);
            n->local = b->local; /* nobody held it: no front end reads it */
        }
    }
    b->parent_engine = pos ? n->parent->engine : 0;
    spin_unlock(&sh->mu);
    *node = n;
    return held; /* 1: held in that tier already */
}

static void pos_del(void *vbe, void *node, uint32_t slot, unsigned tier)
{
    pos_be *be = vbe;
    pnode *n = node; /* held by slot: in the table, and pos, canon stay */
    if (slot >= KVIX_SLOTS_MAX || tier >= KVIX_MEDIUM_COUNT)
        return;
    kvix_rcu_writer();
    uint32_t pos = n->pos;
    uint64_t canon = n->canon;
    pshard *sh = &be->shard[shard_of(key_hash(pos, canon))];
    spin_lock(&sh->mu);
    int gone;
    kvix_hs_del(&n->h, slot, tier, &be->mem, &gone);
    if (gone) {
        uint32_t *orph = orph_slot(be, slot); /* exists: the slot added this block */
        if (orph) {
            if (pos > 0 && (!n->parent || !node_has(n->parent, slot)))
                orph_change(be, orph, slot, -1);
            for (pnode *k = n->kids; k; k = k->next)
                if (node_has(k, slot))
                    orph_change(be, orph, slot, +1);
        }
        if (n->h.count == 0)
            atomic_fetch_sub_explicit(&be->unique, 1, memory_order_relaxed);
    }
    int rm = node_removable(n);
    spin_unlock(&sh->mu);
    if (rm) {
        reclaim(be, pos, canon);
        limbo_drain(be);
    }
}

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
        h[k] = (kvix_qhit){.slot = v[k], .blocks = blocks,
                           .tier_blocks = {[KVIX_MEDIUM_GPU] = blocks}};
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
    uint32_t id[KVIX_HS_INLINE];
    for (unsigned j = 0; j < KVIX_HS_INLINE; j++)
        id[j] = kvix_hs_id(&nd->h, j); /* KVIX_HS_NONE matches no slot */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = v[i];
        int has = 0;
        for (unsigned j = 0; j < KVIX_HS_INLINE; j++)
            has |= s == id[j];
        if (has) {
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
    uint32_t maxlen = 0;
    for (size_t k = first; k < out->n; k++)
        if (out->v[k].blocks > maxlen)
            maxlen = out->v[k].blocks;
    for (uint32_t pos = 0; pos < maxlen; pos++) {
        pnode *n = probe(c, pos);
        kvix_tset *ts = n ? atomic_load_explicit(&n->h.tiers, memory_order_acquire) : NULL;
        if (!ts)
            continue;
        for (size_t k = first; k < out->n; k++) {
            kvix_qhit *hit = &out->v[k];
            if (hit->blocks <= pos)
                continue;
            if (!kvix_tset_has(ts, hit->slot, KVIX_MEDIUM_GPU))
                hit->tier_blocks[KVIX_MEDIUM_GPU]--;
            for (unsigned t = 1; t < KVIX_MEDIUM_COUNT; t++)
                hit->tier_blocks[t] += (uint32_t)kvix_tset_has(ts, hit->slot, t);
        }
    }
}

static inline int untrusted(pos_be *be, uint32_t s)
{
    return atomic_load_explicit(&be->untrusted[s / 64], memory_order_relaxed) >> (s % 64) & 1;
}

#define QSTACK 512

static int pos_query(void *vbe, kvix_qchain *q, kvix_qhits *out, kvix_err *err)
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

static size_t pos_memory(void *vbe)
{
    pos_be *be = vbe;
    long b = atomic_load(&be->mem.bytes);
    return b > 0 ? (size_t)b : 0;
}

static size_t pos_unique(void *vbe)
{
    pos_be *be = vbe;
    long u = atomic_load(&be->unique);
    return u > 0 ? (size_t)u : 0;
}

static void pos_info(const void *node, kvix_binfo *out)
{
    const pnode *n = node;
    out->pos = n->pos;
    out->local = n->local;
    out->canon = n->canon;
    out->parent_canon = n->pos ? n->parent->canon : 0; /* a held node has its parent */
    out->parent_engine = n->pos ? n->parent->engine : 0;
}

const kvix_backend_ops kvix_backend_positional_ops = {
    .name = "positional",
    .create = pos_create,
    .destroy = pos_destroy,
    .busy = pos_busy,
    .add = pos_add,
    .del = pos_del,
    .info = pos_info,
    .query = pos_query,
    .memory = pos_memory,
    .unique_blocks = pos_unique,
    .engine_off = offsetof(pnode, engine),
};
