/* libkvix private: the index front end's shared state, for the files that
 * make it up:
 *   lib/index/index.c        block bookkeeping per (worker, dp), events, lifecycle
 *   lib/index/index_part.c   partitions and (worker, dp) states, and their reclamation
 *   lib/index/index_query.c  queries: hashing the chain, the backend, the answer
 *   lib/index/index_walk.c   walking, restoring (snapshots) and stats
 *   lib/index/index_pool.c   the writer pool
 * Backends (lib/index/index_int.h) hold the shared query-side structure.
 *
 * Concurrency design. Readers (queries) never lock in the front end:
 *  - partitions and (worker, dp) states live in open-addressing tables of
 *    pointers; a change (a new or departing partition entry or worker) takes
 *    a mutex and stores a slot with a release store (a departing entry
 *    becomes a tombstone); a rebuilt table is published and the old copy,
 *    like a departed state, is freed after an RCU grace period. Every
 *    lock-free search runs inside a read-side section (lib/core/rcu_int.h);
 *  - partitions live as long as the index (a partition whose workers have
 *    all gone keeps its name and block size, and gives its backend and slot
 *    tables back);
 *  - slot numbers are dense per partition and reused: a (worker, dp) with no
 *    block and no eid (cleared without eid, removed worker, its last block
 *    removed) gives its slot back. Its blocks left every holder set first
 *    (the backend's del for each), and the slot maps to no state from then
 *    on; only after a grace period does it return to the free slots, so a
 *    query (whose backend walk and slot-to-worker mapping are one read-side
 *    section) never maps an old holder's slot to a new (worker, dp);
 *  - a (worker, dp)'s engine-hash map is touched only by that worker's
 *    writer (the caller's contract), and only that writer registers or
 *    releases its state. The writer changes the state only while it holds
 *    the state's cut lock (a mutex nobody else wants, but a live walk:
 *    kvix_index_foreach_live reads one (worker, dp) at a time under it, so
 *    a save or a dump stops one worker's writer for one worker's blocks at
 *    most, and the others never).
 *
 * Block bookkeeping per (worker, dp):
 *  - blocks: engine hash -> the backend node's handle, with the tier mask in
 *    its low bits (lib/index/index_bmap.c: 9 bytes a slot, the key being the
 *    node's own engine hash; 5 with a backend that numbers its nodes). The block's position, local, canonical and
 *    parent canonical hashes are the node's, kept once for all its holders
 *    (kvix_backend_ops.info): an entry of its own copies cost 40 bytes per
 *    (worker, block);
 *  - pexc and extra live in a side record (wside) made on first need, and
 *    the blocks map's keyed side map likewise: most workers need none;
 *  - pexc: engine hash -> parent engine hash, only for blocks whose parent
 *    engine hash differs from the node's hint (the engine hash its parent
 *    node was made under: workers hashing alike agree with it);
 *  - extra: (position, canonical) -> per-tier count of engine hashes holding
 *    it beyond the first (two engine hashes may name the same canonical
 *    block: vLLM salts its hashes with things the local hash does not see).
 *    A backend hears about a (block, tier) only on its first arrival and last
 *    departure; its add says whether the slot held it already, so a block
 *    with one engine hash has no entry here.
 */
#ifndef KVIX_INDEX_FRONT_INT_H
#define KVIX_INDEX_FRONT_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hashmap_int.h"
#include "index_int.h"
#include "kvix/index.h"
#include "rcu_int.h"

/* ---- table of pointers, lock-free for readers ------------------------- */

typedef struct ctab {
    struct rcu_head rcu; /* a replaced copy is freed after a grace period */
    size_t cap;
    void *v[];
} ctab;

typedef struct cmap {
    ctab *t;        /* published with release stores */
    size_t n, tomb; /* entries and tombstones; writers only, under their lock */
} cmap;

#define CTAB_TOMB ((void *)1) /* a departed entry: probes go on past it */


/* ---- partitions and (worker, dp) states ------------------------------- */

#define SLOT_CHUNK 256u
#define SLOT_CHUNKS (KVIX_SLOTS_MAX / SLOT_CHUNK)

/* A blocks entry: node handle | tier mask (KVIX_NODE_ALIGN keeps the low
 * bits free). */
typedef uint64_t bent;
#define BENT_TIERS ((uint64_t)KVIX_NODE_ALIGN - 1)

_Static_assert((1u << KVIX_MEDIUM_COUNT) <= KVIX_NODE_ALIGN, "tier mask fits a handle's low bits");

static inline void *bent_node(bent e)
{
    return (void *)(uintptr_t)(e & ~BENT_TIERS);
}

static inline unsigned bent_tiers(bent e)
{
    return (unsigned)(e & BENT_TIERS);
}

typedef struct cref { /* key: (position, canonical) */
    uint8_t n[KVIX_MEDIUM_COUNT]; /* engine hashes holding it beyond the first, per tier */
} cref;

#define CREF_MAX UINT8_MAX

/* The engine hash a backend node was made under (never changes while the
 * node lives), at byte offset eoff (kvix_backend_ops.engine_off). */
static inline uint64_t kvix_ix_node_engine(const void *node, size_t eoff)
{
    uint64_t e;
    memcpy(&e, (const char *)node + eoff, sizeof e);
    return e;
}

/* engine hash -> bent (lib/index/index_bmap.c). */
typedef struct bmap {
    uint8_t *ctrl; /* 0 empty, else 0x80 | 7 bits of the key's hash */
    void *v;       /* entries keyed by their node's engine hash: bents, or with
                    * a numbered backend uint32_t (node number << 4 | tiers) */
    _Atomic(kvix_nodedir *) *dir; /* the backend's (kvix_backend_ops.nodedir), or NULL */
    kvix_hmap *other; /* engine hash -> bent, where the node's engine hash is another
                       * (made on first need: most workers hash alike) */
    uint32_t cap, n, tomb; /* slots, entries, tombstones */
    uint16_t eoff;         /* 48 bytes in all: one per (worker, dp) */
    uint8_t nsize;         /* a numbered backend's node size */
    uint8_t young;         /* no entry deleted since the map was made or emptied */
} bmap;

/* ops: the partition's backend's, be: its instance (outlives the map). */
void kvix__ix_bm_init(bmap *m, const kvix_backend_ops *ops, void *be);
void kvix__ix_bm_release(bmap *m);
/* engine's entry, or 0 (no node handle is 0); *at (if not NULL) names the
 * entry for kvix__ix_bm_set until the next add or del, or on a miss (at &
 * BM_MISS) where kvix__ix_bm_add_at would put engine. */
bent kvix__ix_bm_get(const bmap *m, uint64_t engine, size_t *at);
#define BM_MISS ((size_t)1 << (sizeof(size_t) * 8 - 2))
/* Add engine (absent) -> v at the place kvix__ix_bm_get's miss named (no add
 * or del since): no second search. 0, or -1 when memory runs out. num: the
 * node's number (kvix_binfo.num from the backend's add; unused unless
 * numbered). */
int kvix__ix_bm_add_at(bmap *m, size_t at, uint64_t engine, bent v, uint32_t num);
/* A get or add of engine is coming soon: start loading the slot it reads
 * (inline: a stored event asks it of every block). always_inline: GCC 12
 * finds a function that only prefetches free of side effects and deletes
 * its calls before inlining them, prefetches and all. */
static inline __attribute__((always_inline)) void kvix_ix_bm_prefetch(const bmap *m,
                                                                      uint64_t engine)
{
    if (!m->cap)
        return;
    size_t i = kvix_mix64(engine) & (m->cap - 1);
    __builtin_prefetch(&m->ctrl[i]);
    __builtin_prefetch((const char *)m->v + (m->dir ? i * sizeof(uint32_t) : i * sizeof(bent)));
}
/* A get of engine is coming, its slot loaded or loading
 * (kvix_ix_bm_prefetch): start loading the node it will compare engine
 * with, the first of its probe whose tag is engine's (no node is read
 * here). */
void kvix__ix_bm_prefetch_nodes(const bmap *m, uint64_t engine);
/* Replace the entry named by at (from kvix__ix_bm_get of engine) with v, the
 * same node in other tiers. */
void kvix__ix_bm_set(bmap *m, size_t at, uint64_t engine, bent v);
/* Add engine (absent) -> v: 0, or -1 when memory runs out. num: as for
 * kvix__ix_bm_add_at. */
int kvix__ix_bm_add(bmap *m, uint64_t engine, bent v, uint32_t num);
/* Remove engine (present; its node still valid). */
void kvix__ix_bm_del(bmap *m, uint64_t engine);
/* The same, engine's entry named by at (from kvix__ix_bm_get, no add or del
 * since): no second search. */
void kvix__ix_bm_del_at(bmap *m, size_t at, uint64_t engine);
int kvix__ix_bm_reserve(bmap *m, size_t n);
/* The node number of the entry named by at (kvix__ix_bm_get), or 0 when not
 * known (a backend without numbers, or an entry of the keyed side map). */
static inline uint32_t kvix_ix_bm_num(const bmap *m, size_t at)
{
    return m->dir && !(at & BM_MISS) ? ((const uint32_t *)m->v)[at] >> 4 : 0;
}
/* Iterate (it from 0): the next entry and its engine hash (when engine is
 * not NULL: reads the node, which must be valid), or 0 at the end. */
bent kvix__ix_bm_next(const bmap *m, size_t *it, uint64_t *engine);
/* As kvix__ix_bm_next, without reading any node: *keyed 1 with *engine set
 * for an entry of the keyed side map, else 0 (the entry's engine hash is its
 * node's: kvix_ix_node_engine). */
bent kvix__ix_bm_next_key(const bmap *m, size_t *it, uint64_t *engine, int *keyed);
size_t kvix__ix_bm_memory(const bmap *m);

static inline size_t kvix_ix_bm_size(const bmap *m)
{
    return m->n + (m->other ? kvix_hmap_size(m->other) : 0);
}

struct part;

/* A (worker, dp)'s maps that most never use, made on first need. */
typedef struct wside {
    kvix_hmap pexc;  /* engine hash -> parent engine hash, where the node's hint is not it */
    kvix_hmap extra; /* (pos, canon) -> cref, for blocks with two engine hashes or more */
} wside;

/* A slot's record, what a query needs of its (worker, dp) in one place:
 * records live in chunks that never move while the partition holds any
 * state, so writers update held in place. Fields are atomic (relaxed):
 * worker, dp and rank are written before w is published (release) or, for
 * rank, inside the partition's ranking window (part.rank_seq). */
typedef struct srec {
    uint64_t worker;
    uint32_t dp;
    uint32_t held; /* blocks the (worker, dp) holds (kvix_ix_publish_held) */
    uint32_t rank; /* place in (worker, dp) order at the last ranking; RANK_NONE
                    * when registered since */
    uint32_t pad_;
    struct wstate *w; /* the slot's state, NULL while free */
} srec;

#define RANK_NONE UINT32_MAX

/* The record of a (worker, dp)'s recent removals (lib/index/index_xr.c). */

/* An event that dropped blocks, as the record keeps it. */
typedef struct xr_evt {
    double ts;       /* the event's, when has_ts */
    uint64_t eid;    /* the event's, when has_eid */
    double at;       /* the index's clock (seconds since the epoch) when applied */
    uint32_t evn;    /* its number in the record */
    uint32_t blocks; /* blocks it dropped (a removal: those recorded) */
    uint8_t kind;    /* KVIX_EV_REMOVED or KVIX_EV_CLEARED */
    uint8_t has_eid, has_ts;
} xr_evt;

typedef struct xr_blk {
    uint64_t canon;
    uint32_t pos;
    uint32_t evn; /* the event entry that dropped it (its number) */
} xr_blk;

typedef struct xr {
    uint32_t nb, ne;   /* ring sizes */
    uint32_t bpos;     /* the next block entry: bn % nb */
    uint32_t evn;      /* event entries written so far */
    uint64_t bn;       /* block entries written so far */
    xr_evt *cur;       /* the last event entered (its blocks follow) */
    xr_evt *ev;        /* ne entries, after the blocks */
    xr_blk b[];
} xr;

/* A (worker, dp)'s KV cache groups (lib/index/index_groups.c), made when its
 * first event with a group field comes. */
typedef struct wgroups {
    uint64_t learned;  /* groups whose kind a store said */
    uint64_t full;     /* the full ones: said so, or group 0 while it said nothing */
    kvix_hmap *member; /* (engine hash, tier) -> the full groups holding it; only while
                        * two full groups or more were learned */
    uint8_t kind[KVIX_GROUPS_MAX]; /* kvix_kind per learned group */
} wgroups;

typedef struct wstate {
    uint64_t h;
    uint64_t worker;
    uint32_t dp, slot;
    struct part *p;
    srec *rec;        /* its slot's record */
    bmap blocks;      /* engine hash -> bent */
    wside *side;      /* NULL while both its maps would be empty */
    wgroups *grp;     /* NULL until an event names a KV cache group */
    struct wstate *next_dp; /* the same worker's state of another dp (atomic pointer) */
    int has_eid;
    uint64_t eid;
    xr *xr;           /* NULL until its first removal (or with the record off) */
    pthread_mutex_t cut;  /* held by its writer while it changes blocks, side or eid */
    struct rcu_head rcu; /* a released state is freed, and its slot reused, after a grace period */
} wstate;

/* The writer's side of the cut lock: around every change of w's blocks,
 * side maps or eid (not around kvix__ix_ws_done, which may release w). */
static inline void ws_lock(wstate *w)
{
    pthread_mutex_lock(&w->cut);
}

static inline void ws_unlock(wstate *w)
{
    pthread_mutex_unlock(&w->cut);
}

/* ---- the record of removals (lib/index/index_xr.c); the writer of w ---- */

/* An event of kind (KVIX_EV_REMOVED, KVIX_EV_CLEARED) that dropped blocks
 * (a clear: how many; a removal: counted as its blocks are recorded) starts
 * an entry; ev may be NULL (a worker forgotten). 0, or -1: not recorded
 * (the record is off, or no memory), and neither are its blocks. */
int kvix__ix_xr_event(wstate *w, const kvix_event *ev, int kind, uint32_t blocks);
/* kvix_ix_xr_block (below the partition): a block left w. */
/* Quiet index: 1 when w dropped the block (pos, canon) within the record,
 * the latest time; *known says whether the event is still in the record
 * (then in *out). */
int kvix__ix_xr_find(const wstate *w, uint32_t pos, uint64_t canon, xr_evt *out, int *known);
/* Quiet index: 1 and the latest clear in the record. */
int kvix__ix_xr_last_clear(const wstate *w, xr_evt *out);
void kvix__ix_xr_free(wstate *w);
size_t kvix__ix_xr_memory(const wstate *w);

/* w's side maps, made on first need (NULL: out of memory). */
wside *kvix__ix_ws_side(wstate *w);
/* Free w's side maps (w holds no block). */
void kvix__ix_ws_side_free(wstate *w);

static inline size_t ws_side_memory(const wstate *w)
{
    return w->side ? sizeof *w->side + kvix__hmap_memory(&w->side->pexc) +
                         kvix__hmap_memory(&w->side->extra)
                   : 0;
}

/* Publish the count of blocks held after a change (one plain store on x86). */
static inline void kvix_ix_publish_held(wstate *w)
{
    __atomic_store_n(&w->rec->held, (uint32_t)kvix_ix_bm_size(&w->blocks), __ATOMIC_RELAXED);
}

typedef struct whead { /* a worker's (worker, dp) states in a partition; key: worker */
    uint64_t h;
    uint64_t worker;
    wstate *first; /* atomic: the latest registered; then through next_dp */
    struct rcu_head rcu;
} whead;

/* A slot's key in a ranking of the partition's slots (lib/index/index_part.c). */
typedef struct rkey {
    uint64_t worker;
    uint32_t dp, slot;
} rkey;

typedef struct part {
    uint64_t h;
    char *model, *tenant;
    uint32_t bs;
    uint8_t hashing; /* atomic: PART_HASH_*, fixed by the first store of blocks */
    const kvix_backend_ops *ops;
    const kvix_index_opts *opts;
    void *be; /* atomic; NULL while the partition has no (worker, dp) (made on the first) */
    pthread_mutex_t lock; /* registration and release of (worker, dp) states */
    cmap workers;
    cmap wheads; /* worker -> whead, so removing a worker costs its own states */
    uint32_t nslots;              /* atomic: slots handed out at most (free ones included) */
    uint32_t depth;               /* atomic: 1 + the deepest position stored since the
                                   * partition was last empty */
    srec **chunks; /* atomic: SLOT_CHUNKS atomic pointers to chunks of SLOT_CHUNK slot
                    * records (kvix__ix_no_slots' chunk until made); NULL while the
                    * partition is empty */
    /* The (worker, dp) order as ranks in the records, so a query files its
     * hits by rank instead of sorting worker ids (lib/index/index_part.c). */
    uint32_t rank_seq; /* atomic: odd while ranks are rewritten */
    uint32_t nranked;  /* atomic: ranks are below it */
    uint32_t unranked_seen; /* atomic: unranked hits queries merged since the ranking */
    uint32_t rank_due;      /* atomic: past it, a writer ranks (kvix_ix_rank_if_asked) */
    /* under lock: */
    uint32_t live;    /* registered states */
    kvix_hmap eids;   /* (worker, dp) -> eidrec of the pairs that hold no block: their
                       * state is released (its slot free for another pair) and the eid,
                       * their resume position, kept here; taken back by the pair's
                       * next state */
    uint32_t limbo;   /* released slots waiting for their grace period */
    uint32_t nfree, fcap; /* free slots (below nslots) reusable now; room for fcap >= nslots */
    uint32_t *free_slots;
    uint32_t *order, norder; /* slots by (worker, dp) at the last ranking (some gone since) */
    uint32_t *fresh, nfresh; /* slots registered since (some gone or listed twice) */
    uint32_t *spare;         /* the next ranking's order, swapped with order */
    rkey *rkeys;             /* the next ranking's sort keys; these four arrays have
                              * room for fcap, grown with the slots: a ranking never
                              * allocates, so it cannot fail */
    /* atomic: call_rcu callbacks that will touch the partition, queued or
     * running; each drops it as its very last access to the partition */
    uint32_t inflight;
    /* LoRA adapters the partition's stored events named (explain tries them
     * on a query's block 0): made on the first, PART_LORAS at most; names
     * written under lock before nloras counts them (release) */
    char (*loras)[KVIX_NAME_MAX];
    uint32_t nloras;
} part;

#define PART_LORAS 8

/* The block at node (held no more in any tier) left w, by the last event
 * entered (kvix__ix_xr_event returned 0). Inline: a removal's every block. */
static inline void kvix_ix_xr_block(wstate *w, const void *node)
{
    xr *r = w->xr;
    const kvix_backend_ops *ops = w->p->ops;
    xr_blk *b = &r->b[r->bpos];
    if (++r->bpos == r->nb)
        r->bpos = 0;
    r->bn++;
    memcpy(&b->canon, (const char *)node + ops->canon_off, sizeof b->canon);
    memcpy(&b->pos, (const char *)node + ops->pos_off, sizeof b->pos);
    b->evn = r->cur->evn;
    r->cur->blocks++;
}

/* A stored event of p named adapter lora (not ""): remember it. */
void kvix__ix_note_lora(part *p, const char *lora);

/* How a partition's blocks were hashed: not known yet (no block stored),
 * plain, or EAGLE's windows (kvix_hash_blocks_eagle): queries by tokens hash
 * alike. */
enum { PART_HASH_UNKNOWN = 0, PART_HASH_PLAIN, PART_HASH_EAGLE };

typedef struct wqueue {
    struct kvix_index *idx;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t nonempty, progress;
    kvix_event *ring;
    uint64_t *tags;
    size_t cap, head, tail; /* head, tail: monotonic counts */
    int stop;
} wqueue;

#define QUEUE_CAP 128
#define SLOT_KEEP 4096 /* blocks or hashes a queue slot keeps allocated */

struct kvix_index {
    kvix_index_opts opts;
    const kvix_backend_ops *ops;
    pthread_mutex_t lock; /* partition creation */
    cmap parts;
    struct part *last; /* atomic: the partition found last (partitions live with
                        * the index: a hint that needs no read-side section) */
    uint64_t tot_stored, tot_dup, tot_removed, tot_unknown, tot_skipped, tot_kept; /* atomic */
    wqueue *q;
    unsigned nq;
    pthread_rwlock_t gate; /* writers shared, a quiet index exclusive (index_gate.c) */
};

static inline uint32_t part_nslots(const part *p)
{
    return __atomic_load_n(&p->nslots, __ATOMIC_ACQUIRE);
}

/* A partition's slot -> record map as loaded once: inside a read-side
 * section it stays valid for the whole section (its tables are freed only
 * after a grace period), so a query maps all its hits with one load. */
typedef struct slotmap {
    srec **top;
    uint32_t n;
} slotmap;

/* lib/index/index_part.c: SLOT_CHUNKS pointers to one chunk of free records (rank
 * RANK_NONE, no state), the top of a partition without slots and what a
 * partition's top holds where no chunk was made yet. */
extern srec *const kvix__ix_no_slots[SLOT_CHUNKS];
/* Free a top and its chunks (NULL is fine). */
void kvix__ix_slots_free(srec **top);

static inline slotmap slots_of(const part *p)
{
    slotmap m;
    m.n = part_nslots(p); /* before top: a raised count's tables are published first */
    m.top = __atomic_load_n(&p->chunks, __ATOMIC_ACQUIRE);
    if (!m.top) {
        m.n = 0;
        m.top = (srec **)kvix__ix_no_slots;
    }
    return m;
}

/* slot's record in m's table (slot below KVIX_SLOTS_MAX) */
static inline const srec *slot_at(slotmap m, uint32_t slot)
{
    return __atomic_load_n(&m.top[slot / SLOT_CHUNK], __ATOMIC_ACQUIRE) + slot % SLOT_CHUNK;
}

/* The record of a hit's slot, never NULL: a slot without a state (free, or
 * not yet registered) has rank RANK_NONE and w NULL, so a query filing by
 * rank tests w only for unranked records. Hits' slots are below
 * KVIX_SLOTS_MAX (holder sets keep 16-bit ids); the mask only keeps a wrong
 * one inside the table. Outside a quiet index, use it only within the
 * read-side section the map was loaded in. */
_Static_assert((KVIX_SLOTS_MAX & (KVIX_SLOTS_MAX - 1)) == 0, "a slot is masked into the table");

static inline const srec *slotmap_any(slotmap m, uint32_t slot)
{
    return slot_at(m, slot & (KVIX_SLOTS_MAX - 1));
}

/* The record of a slot with a state (NULL: free); same rule. */
static inline const srec *slotmap_rec(slotmap m, uint32_t slot)
{
    if (slot >= m.n)
        return NULL;
    const srec *c = slot_at(m, slot);
    return __atomic_load_n(&c->w, __ATOMIC_ACQUIRE) ? c : NULL;
}

/* The state of a slot (NULL: free); same rule. */
static inline wstate *slotmap_ws(slotmap m, uint32_t slot)
{
    const srec *r = slotmap_rec(m, slot);
    return r ? __atomic_load_n(&r->w, __ATOMIC_ACQUIRE) : NULL;
}

static inline wstate *slot_ws(const part *p, uint32_t slot)
{
    return slotmap_ws(slots_of(p), slot);
}

/* A state with state: blocks, an eid, or group kinds learned (a state
 * holding only its eid is released by kvix__ix_ws_done, the eid kept in
 * p->eids; one with group kinds is kept). */
static inline int ws_active(const wstate *w)
{
    return w->has_eid || kvix_ix_bm_size(&w->blocks) > 0 || w->grp;
}

/* Queries need not hash past the deepest position ever stored. Raised before
 * the blocks reach the backend, so a query that can see them can reach them. */
static inline void raise_depth(part *p, uint32_t depth)
{
    uint32_t d = __atomic_load_n(&p->depth, __ATOMIC_RELAXED);
    while (d < depth &&
           !__atomic_compare_exchange_n(&p->depth, &d, depth, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
        ;
}

/* lib/index/index_walk.c: kvix_index_stats's instances counted without allocating
 * (what it falls back on out of memory); partitions x workers lookups. */
size_t kvix__ix_instances_without_memory(const kvix_index *idx);

/* lib/index/index_part.c */
size_t kvix__ix_cmap_memory(const cmap *m);
void kvix__ix_cmap_release(cmap *m, void (*free_elem)(void *));
part *kvix__ix_part_find(const kvix_index *idx, const char *model, const char *tenant);
wstate *kvix__ix_ws_find(const part *p, uint64_t worker, uint32_t dp);
/* The first of worker's states in p (then through next_dp), or NULL. */
wstate *kvix__ix_ws_first(const part *p, uint64_t worker);
/* The partition (model, tenant), created with block size bs if absent. */
int kvix__ix_part_get(kvix_index *idx, const char *model, const char *tenant, uint32_t bs, part **out,
             kvix_err *err);
/* The state of (worker, dp) in p, registered with a free slot if absent. */
int kvix__ix_ws_get(part *p, uint64_t worker, uint32_t dp, wstate **out, kvix_err *err);
/* The worker's writer is done with w: if it holds no block, its state is
 * unregistered (its eid, if any, kept in p->eids), its slot maps to nothing,
 * and both are reclaimed after a grace period (w must not be used after
 * this call). When it was the partition's last, the partition gives its
 * backend and slot tables back. */
void kvix__ix_ws_done(wstate *w);
/* The last eid of (worker, dp), which has no state (it holds no block):
 * kept in p->eids. KVIX_ENOMEM. */
int kvix__ix_eid_set(part *p, uint64_t worker, uint32_t dp, uint64_t eid, kvix_err *err);
/* What p->eids keeps of a pair without blocks: its eid, and the last clear
 * its record of removals held when its state went (explain's answer for a
 * pair that holds nothing). */
typedef struct eidrec {
    uint64_t eid;
    int has_clear;
    xr_evt clear;
} eidrec;
/* (worker, dp)'s record: 1, or 0 when it has none. */
int kvix__ix_eid_get(part *p, uint64_t worker, uint32_t dp, eidrec *out);
/* The ranks of worker's pairs without blocks, up to max of them; how many. */
size_t kvix__ix_eid_dps(part *p, uint64_t worker, uint32_t *dps, size_t max);
/* Forget the eids of worker's pairs without a state (every rank when
 * all_dp, else dp's). */
void kvix__ix_eid_forget(part *p, uint64_t worker, int all_dp, uint32_t dp);
/* A query merged n hits of unranked slots: counted, so that past a bound
 * (amortized against that work) a writer ranks them. */
static inline void kvix_ix_unranked_seen(part *p, uint32_t n)
{
    __atomic_fetch_add(&p->unranked_seen, n, __ATOMIC_RELAXED);
}
/* Rank p's slots now unless p's lock is busy (a writer asked by queries). */
void kvix__ix_rank_asked(part *p);
/* Called by writers at each stored event: one compare when nothing is asked. */
static inline void kvix_ix_rank_if_asked(part *p)
{
    if (__atomic_load_n(&p->unranked_seen, __ATOMIC_RELAXED) >
        __atomic_load_n(&p->rank_due, __ATOMIC_RELAXED))
        kvix__ix_rank_asked(p);
}
/* The backend of p for a writer that holds a registered state of p. */
static inline void *part_be(const part *p)
{
    return __atomic_load_n(&p->be, __ATOMIC_RELAXED);
}
/* Wait until every deferred release of idx's partitions has run and let go
 * of them (grace periods: milliseconds). Call outside any read-side
 * section, on a quiet index. */
void kvix__ix_parts_quiesce(kvix_index *idx);
void kvix__ix_part_free(void *p);
int kvix__ix_bs_mismatch(const part *p, uint32_t bs, kvix_err *err);
/* The partitions, in no order; *n set. Caller frees. */
part **kvix__ix_parts_list(const kvix_index *idx, size_t *n);
/* Blocks (stored (worker, block) pairs) of a quiet index, and its partitions
 * in *parts: what kvix_index_stats_get counts, without allocating. */
size_t kvix__ix_count_blocks(kvix_index *idx, size_t *parts);

/* lib/index/index.c */
/* A node handle and, with a numbered backend, its number (0: unknown). */
typedef struct kvix_ix_chain {
    void *node;
    uint32_t num;
} kvix_ix_chain;
/* w holds engine at (pos, canon) in tier. chain (NULL: none): on entry node
 * NULL or the node of the parent block, which w holds; set to the block's
 * node when w holds it after the call, else node NULL. */
int kvix__ix_store_block(wstate *w, uint64_t engine, uint32_t pos, uint64_t local, uint64_t canon,
                uint64_t parent, uint64_t pcanon, unsigned tier, kvix_ix_chain *chain,
                kvix_apply_result *r, kvix_err *err);
void kvix__ix_add_totals(kvix_index *idx, const kvix_apply_result *r);
/* Add b[0..n) to w, which holds nothing yet and whose cut lock the caller
 * holds: each block's parent (up[i], SIZE_MAX: none held) comes before it,
 * no two share an engine hash (a verified snapshot group). nodes: room for
 * n, each block's node as it is added (the next blocks' parent hints).
 * Blocks before a failing one stay; r counts them. */
int kvix__ix_load_tree(wstate *w, const kvix_block_info *b, const size_t *up, size_t n,
                      kvix_ix_chain *nodes, kvix_apply_result *r, kvix_err *err);
/* lib/index/index_walk.c: one snapshot group into idx (kvix__ix_load_tree
 * when its (worker, dp) holds nothing yet, else kvix_index_load), its eid
 * too; n == 0 without an eid makes the partition alone. reserve: about how
 * many distinct blocks the partition will hold (0: unknown; its tables are
 * sized for them). *nodes and *cap: the caller's buffer, grown as needed
 * (free it after). */
int kvix__ix_load_group(kvix_index *idx, const char *model, const char *tenant, uint32_t bs,
                       uint64_t worker, uint32_t dp, int has_eid, uint64_t eid,
                       const kvix_block_info *b, const size_t *up, size_t n, size_t reserve,
                       kvix_ix_chain **nodes, size_t *cap, kvix_err *err);
/* The parent engine hash w stored engine under (b: the info of its node). */
uint64_t kvix__ix_parent_engine(const wstate *w, uint64_t engine, const kvix_binfo *b);

/* lib/index/index_groups.c */
/* Learn that group's kind from a store of w (KVIX_KIND_NONE: the event did
 * not say; kept as what was said, else full). KVIX_ENOMEM. */
int kvix__ix_grp_learn(wstate *w, uint32_t group, int kind, kvix_err *err);
/* Whether ev (stored or removed; w may be NULL) is of a group the index
 * indexes: no group, a full kind learned or said, an unlearned group 0's
 * removal. */
int kvix__ix_grp_indexed(const wstate *w, const kvix_event *ev);
/* ev's first n blocks (a placeholder: hashes) were stored by w: the groups
 * holding them, when w keeps membership. KVIX_ENOMEM. */
int kvix__ix_grp_stored(wstate *w, const kvix_event *ev, size_t n, kvix_err *err);
/* The hashes of removed event ev that no other full group of w holds, into
 * out (room for ev->nhashes); the others counted in r->kept. w keeps
 * membership. */
size_t kvix__ix_grp_removed(wstate *w, const kvix_event *ev, uint64_t *out, kvix_apply_result *r);
/* Drop the membership (w holds no block any more), or the whole record. */
void kvix__ix_grp_members_free(wstate *w);
void kvix__ix_grp_free(wstate *w);
size_t kvix__ix_grp_memory(const wstate *w);

/* lib/index/index_pool.c */
int kvix__ix_pool_start(kvix_index *idx, unsigned threads, kvix_err *err);
void kvix__ix_pool_stop(kvix_index *idx);

/* lib/index/index_gate.c: the gate's lock, made with the index. */
void kvix__ix_gate_init(kvix_index *idx);

#endif
