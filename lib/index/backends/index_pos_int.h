/* libkvix private: the positional backend's parts (lib/index/backends/index_positional.c:
 * the design, the backend ops, writers' add/del, orphan counts;
 * lib/index/backends/index_pos_store.c: the shard tables and node storage;
 * lib/index/backends/index_pos_query.c: the jump search). The design and its concurrency
 * are described at the top of lib/index/backends/index_positional.c.
 */
#ifndef KVIX_INDEX_POS_INT_H
#define KVIX_INDEX_POS_INT_H

#include <sched.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include "hset_int.h"
#include "index_int.h"
#include "rcu_int.h"

#define SHARD_BITS 6
#define NSHARD (1u << SHARD_BITS)
#define TABLE_MIN 8u
#define JUMP_DEFAULT 32u /* bench_index jump sweep: fewest instructions, best median */
#define JUMP_MAX 1024u
#define ORPH_CHUNK 256u
#define LIMBO_BATCH 1024

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

/* Nodes live in a slab per backend (lib/index/backends/index_pos_store.c) and link to each
 * other by 32-bit numbers in it, not by pointers: a node costs what the
 * index needs of it, not three words of links. A number is (chunk << 12 |
 * place); chunk k holds min(16 << k, 4096) nodes and never moves while the
 * backend holds a node. The shard tables and the front end's blocks maps
 * keep numbers, and whoever reaches a node got its number on the way (a
 * table slot, a link, the slab), so a node does not keep its own. 0 is no
 * node. */
typedef uint32_t pidx;
#define PNIL 0u
#define SLAB_SHIFT 12
#define SLAB_CHUNK (1u << SLAB_SHIFT)
#define SLAB_FIRST 16u

typedef struct pos_be pos_be;
typedef struct pnode pnode;
/* 48 bytes. Queries read canon, pos and h (also of a node retired within
 * their read-side section); the rest is the writers'. */
struct pnode {
    uint64_t canon;
    uint32_t pos;
    /* next sibling in the parent's ring (under the parent's shard lock);
     * retired: next in limbo; free: next free place */
    pidx next;
    uint64_t engine; /* made under (the front end's key): fixed for life */
    uint64_t local;  /* set when the node becomes held */
    pidx parent;     /* node of (pos - 1, parent canon); PNIL at 0 or for a ghost */
    /* the newest of the nodes whose parent this is (KIDS_NUM bits):
     * siblings are a ring through next, the newest linking to the oldest,
     * so a new kid is put last in O(1) and an unlink, which looks for the
     * kid's predecessor (singly linked: no prev), finds the oldest first
     * (evictions take them first). KIDS_WIDE: an unlink walked far, so the
     * predecessors of this node's kids are kept in its shard's ppred. */
    pidx kids;
    kvix_hset h;
};

#define KIDS_WIDE (UINT32_C(1) << 31)
#define KIDS_NUM(k) ((k) & ~KIDS_WIDE)

/* node handles keep a tier mask in their low bits */
_Static_assert(sizeof(pnode) % KVIX_NODE_ALIGN == 0, "pnode size breaks handle alignment");
_Static_assert(sizeof(pnode) == 48, "a node is paid per (worker, block) at thousands of workers");

typedef struct porph {
    uint32_t n[ORPH_CHUNK];                 /* orphans (the slot's own writer) */
    kvix_aword untrusted[ORPH_CHUNK / 64];  /* bit: the slot has orphans */
} porph;

/* the slab's directory of chunks (the front end reads it too: its blocks
 * maps keep node numbers) */
typedef kvix_nodedir pdir;
_Static_assert(SLAB_SHIFT == KVIX_NODEDIR_SHIFT, "slab chunks as the front end sees them");

/* A table slot is 32 bits: 0 never used (ends a probe), TOMB removed, else
 * 4 bits of the key's hash above the node's number (numbers stay below
 * 2^28: kvix__pos_node_new refuses more), so most mismatches never touch the
 * node and a slot costs 4 bytes, not a pointer's 8: the tables are a fifth
 * of the backend at thousands of workers. Number 1 is never handed out. */
typedef _Atomic uint32_t pslot;
#define NUM_BITS KVIX_NODENUM_BITS
#define NUM_MASK ((UINT32_C(1) << NUM_BITS) - 1)
#define TOMB UINT32_C(1)

static inline uint32_t slot_tag(uint64_t h)
{
    /* under the shard's top bits, far above any table's home bits */
    return (uint32_t)(h >> (64 - SHARD_BITS - (32 - NUM_BITS))) & ((1u << (32 - NUM_BITS)) - 1);
}

static inline uint32_t slot_word(uint64_t h, pidx i)
{
    return slot_tag(h) << NUM_BITS | i;
}

typedef struct ptable {
    struct rcu_head rcu;
    uint64_t mask;
    pslot s[];
} ptable;

/* Predecessors of the kids of the shard's KIDS_WIDE nodes (writers only,
 * under the shard's lock): kid -> the sibling linking to it, linear
 * probing. A kid may have no entry (no memory to grow): its unlink walks the
 * ring then; an entry present is always exact (every ring change of a wide
 * node updates it). Made with the first wide node, freed with the last
 * entry, so it costs only where fanouts are high. */
typedef struct ppred {
    uint32_t mask, n;
    struct {
        pidx kid, prev; /* kid PNIL: empty */
    } e[];
} ppred;

typedef struct pshard {
    spin_t mu;
    _Atomic(ptable *) t; /* NULL until the shard's first node */
    /* t's mask, stored after t: a prefetch computes a slot's address from
     * the two without reading the table (no read-side section), which may
     * be a replaced table's or past the end: a hint either way */
    _Atomic uint64_t mask;
    size_t used, tomb;
    ppred *pred;
} __attribute__((aligned(64))) pshard;

struct pos_be {
    kvix_bmem mem;
    unsigned jump;
    int binsearch;
    _Atomic uint32_t nw;       /* words covering the highest slot seen */
    _Atomic long unique;       /* nodes with holders */
    _Atomic long nuntrusted;   /* slots with orphans */
    /* per-slot orphan counts and untrusted bits, a chunk made when one of
     * its slots first adds a block (a small partition pays for its slots,
     * not for KVIX_SLOTS_MAX) */
    _Atomic(porph *) orph[KVIX_SLOTS_MAX / ORPH_CHUNK];
    _Atomic long pending; /* limbo batches waiting for their grace period */
    /* the slab, under slabmu (dir is also read by writers without it) */
    spin_t slabmu;
    /* retired nodes wait in limbo (under slabmu, linked by next, newest
     * first) for one grace period per batch, then go back to the free list
     * whole: the batch keeps its ends and count, so neither the drain nor
     * the grace period's callback walks its nodes */
    pidx limbo, limbo_tail;
    _Atomic long nlimbo; /* written under slabmu; read without it to decide a drain */
    _Atomic(pdir *) dir;
    uint32_t nchunk;     /* chunks made */
    pidx bump, bump_end; /* next never used place, end of the last chunk */
    pidx free;           /* places to reuse, linked by next */
    size_t nlive;        /* places handed out and not back on the free list */
    pshard shard[NSHARD];
};

/* The node numbered i (i != PNIL, a node the caller may use: held, linked
 * from one it holds the lock of, or its own new one). */
static inline pnode *pn(const pos_be *be, pidx i)
{
    const pdir *d = atomic_load_explicit(&be->dir, memory_order_acquire);
    return (pnode *)(void *)d->c[i >> SLAB_SHIFT] + (i & (SLAB_CHUNK - 1));
}

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

/* t may be NULL: a shard that never held a node has no table. *num (when
 * not NULL) gets the found node's number. */
static inline pnode *table_find(const pos_be *be, const ptable *t, uint64_t h, uint32_t pos,
                                uint64_t canon, pidx *num)
{
    if (!t)
        return NULL;
    uint32_t tag = slot_tag(h);
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint32_t w = atomic_load_explicit(&t->s[i], memory_order_acquire);
        if (!w)
            return NULL;
        if (w >> NUM_BITS == tag && w != TOMB) {
            pnode *n = pn(be, w & NUM_MASK);
            if (n->canon == canon && n->pos == pos) {
                if (num)
                    *num = w & NUM_MASK;
                return n;
            }
        }
    }
}

/* The number of node n, which t holds under hash h (PNIL if it does not):
 * compares addresses, so no node is read (under the shard lock). */
static inline pidx table_num(const pos_be *be, const ptable *t, uint64_t h, const pnode *n)
{
    if (!t)
        return PNIL;
    uint32_t tag = slot_tag(h);
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint32_t w = atomic_load_explicit(&t->s[i], memory_order_relaxed);
        if (!w)
            return PNIL;
        if (w >> NUM_BITS == tag && w != TOMB && pn(be, w & NUM_MASK) == n)
            return w & NUM_MASK;
    }
}

/* Lock-free lookup (inside a read-side section, or under the shard lock). */
static inline pnode *be_find(pos_be *be, uint32_t pos, uint64_t canon)
{
    uint64_t h = key_hash(pos, canon);
    ptable *t = atomic_load_explicit(&be->shard[shard_of(h)].t, memory_order_acquire);
    return table_find(be, t, h, pos, canon, NULL);
}

/* ---- lib/index/backends/index_pos_store.c: shard tables and node storage ---- */

/* Under the shard's lock; i: the node's number. insert: KVIX_OK or
 * KVIX_ENOMEM (nothing changed). */
int kvix__pos_shard_insert(pos_be *be, pshard *sh, uint64_t h, pidx i);
void kvix__pos_shard_remove(pos_be *be, pshard *sh, uint64_t h, pidx i);
/* Most nodes a backend holds at once (held blocks and their ghost parents):
 * node numbers and a table slot's tag share 32 bits. */
#define NODES_MAX (NUM_MASK - 1u)
/* A fresh node (no links, empty holder set) and its number in *num, or NULL
 * (out of memory, or NODES_MAX nodes: *full set). */
pnode *kvix__pos_node_new(pos_be *be, uint32_t pos, uint64_t canon, uint64_t engine, pidx *num,
                         int *full);
/* A node no reader ever saw (never published), numbered i. */
void kvix__pos_node_free(pos_be *be, pidx i);
/* n (numbered i) is out of the table: readers may still see it until a
 * grace period. */
void kvix__pos_node_retire(pos_be *be, pnode *n, pidx i);
/* Hand a full batch of retired nodes (or all, when the index is empty) to
 * one grace period. */
void kvix__pos_limbo_drain(pos_be *be);
/* kvix_backend_ops.prefetch: the table slots the adds will read first. */
void kvix__pos_prefetch(void *vbe, uint32_t pos0, const uint64_t *canon, size_t n);
/* kvix_backend_ops.reserve: every shard's table sized for its share of n. */
void kvix__pos_reserve(void *vbe, size_t n);
/* kvix_backend_ops.prefetch_keys and prefetch_key_nodes: a load's table
 * slots, then the nodes they name. */
void kvix__pos_prefetch_keys(void *vbe, const uint32_t *pos, const uint64_t *canon, size_t n);
void kvix__pos_prefetch_key_nodes(void *vbe, const uint32_t *pos, const uint64_t *canon,
                                 size_t n);
/* kvix_backend_ops.prefetch_del: the table slot and parent a del reads. */
void kvix__pos_prefetch_del(void *vbe, const void *node);
/* Free every node, table and the slab (quiet backend, no pending batch). */
void kvix__pos_store_free(pos_be *be);

/* ---- lib/index/backends/index_pos_query.c ---- */

int kvix__pos_query(void *vbe, kvix_qchain *q, kvix_qhits *out, kvix_err *err);

#endif
