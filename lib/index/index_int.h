/* libkvix private: the interface between the index front end (lib/index/index.c:
 * partitions, per-(worker, dp) state, engine-hash bookkeeping, writer pool)
 * and the backends that hold the shared, query-side structure (positional,
 * radix, reference).
 *
 * The front end turns every event into add/del calls on canonical blocks:
 * a block is identified by (position, canonical rolling hash). A backend node
 * keeps the block's hashes once for all its holders (its local hash, its
 * parent's canonical and engine hashes too), and each (worker, dp) keeps only
 * engine hash -> node handle: the hashes of a block are not repeated per
 * holder. A worker is a dense "slot" number per partition (worker, dp) ->
 * slot, so backends can keep worker sets as bitsets.
 * A slot is reused for another (worker, dp) once its holder has deleted
 * every block it added (so a backend's per-slot state must be back to what
 * a fresh slot has by then) and a grace period has passed.
 *
 * Concurrency every backend must provide:
 *  - add/del for DIFFERENT slots may run concurrently (one writer thread per
 *    slot at a time; the front end guarantees a slot's calls are ordered);
 *  - query may run concurrently with add/del and with other queries, and must
 *    never wait for a whole-table operation (no stop-the-world resize);
 *  - memory/unique/destroy run on a quiet backend.
 * Threads: the positional and radix backends use liburcu (memb flavour) and
 * register each calling thread themselves on its first call (thread-local
 * flag; unregistered by a pthread key destructor at thread exit), so callers
 * need no RCU calls of their own (lib/core/rcu_int.h).
 */
#ifndef KVIX_INDEX_INT_H
#define KVIX_INDEX_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kvix/error.h"
#include "kvix/event.h"
#include "kvix/hash.h"
#include "kvix/index.h"
#include "hset_int.h"

/* Ceiling on (worker, dp) slots per partition: (worker, dp) pairs holding a
 * block or an eid at once, plus those released in the last grace period.
 * Slots are the holder sets' ids (lib/core/hset_int.h). */
#define KVIX_SLOTS_MAX KVIX_HSET_IDS

/* The query side of one block position: lazily computed canonical chain, so a
 * query that fails at position 3 of 200 hashes 4 blocks, not 200. */
typedef struct kvix_qchain {
    const uint64_t *local; /* the query's local hashes */
    uint64_t *canon;       /* scratch of n entries, filled up to `done` */
    size_t n, done;
} kvix_qchain;

/* Whether a name field (model, tenant, lora: KVIX_NAME_MAX bytes) holds its
 * NUL. A byte loop, not memchr: every event and query asks, names are short,
 * and glibc's AVX-512 memchr took 4 % of a 256-worker replay's time on the
 * benchmark machine (perf: the samples on its first mask-register read). */
static inline int kvix_name_ok(const char *s)
{
    for (size_t i = 0; i < KVIX_NAME_MAX; i++)
        if (!s[i])
            return 1;
    return 0;
}

static inline uint64_t kvix_qchain_at(kvix_qchain *q, size_t i)
{
    while (q->done <= i) {
        size_t j = q->done;
        q->canon[j] = j == 0 ? q->local[0] : kvix_hash_seq_next(q->canon[j - 1], q->local[j]);
        q->done++;
    }
    return q->canon[i];
}

/* One matched slot of a query and its matched contiguous prefix, any tier
 * (a row, for tests: kvix_qhits keeps slots and runs apart). */
typedef struct kvix_qhit {
    uint32_t slot;
    uint32_t blocks;
} kvix_qhit;

/* Hits slot[first .. first + n) all matched `blocks` blocks. */
typedef struct kvix_qrun {
    uint32_t first, n, blocks;
} kvix_qrun;

/* Where a backend writes its hits; owned by the caller, grown by the backend
 * through kvix__qhits_push / _reserve / _run. A hit is a slot; its match
 * length is its run's: backends find hits in runs of one length (the
 * positional one: a drop position's candidates, a contiguous piece of its
 * candidate list), so they report runs, and the front end takes them
 * longest first without reading a length per hit. Per-tier counts exist
 * only when the backend has a block held off gpu (kvix__qhits_tiers): else
 * every hit holds its blocks on gpu, and nothing per hit is written or read
 * for tiers. */
typedef struct kvix_qhits {
    uint32_t *slot; /* hit i's slot */
    size_t n, cap;
    kvix_qrun *run; /* every hit of slot[0..n) in exactly one run, runs in any order */
    size_t nrun, rcap;
    /* NULL: every hit on gpu. Else hit i's blocks per tier, tier[i] (room
     * for cap hits); points into tbuf. */
    uint32_t (*tier)[KVIX_MEDIUM_COUNT];
    void *tbuf; /* the per-tier counts' buffer, kept across queries */
    size_t tcap;
} kvix_qhits;

/* Append a hit (on gpu, or tier[] = {blocks on gpu} when counts exist): it
 * joins the last run when that one ends at it with the same length. */
int kvix__qhits_push(kvix_qhits *h, uint32_t slot, uint32_t blocks, kvix_err *err);
/* Room for n more hits past h->n (the backend then writes their slots, adds
 * n to h->n and reports their runs; with counts, their tier rows too). */
int kvix__qhits_reserve(kvix_qhits *h, size_t n, kvix_err *err);
/* Hits slot[first .. first + n) (written, below h->n) matched `blocks`
 * blocks; n == 0 is no run. */
int kvix__qhits_run(kvix_qhits *h, size_t first, size_t n, uint32_t blocks, kvix_err *err);
/* Per-tier counts from now on: each hit so far gets {blocks on gpu}. */
int kvix__qhits_tiers(kvix_qhits *h, kvix_err *err);
/* Before each query on reused hits: none, and no per-tier counts. */
static inline void kvix_qhits_clear(kvix_qhits *h)
{
    h->n = 0;
    h->nrun = 0;
    h->tier = NULL;
}

/* The hits as (slot, blocks) rows, hit i in rows[i] (tests, benchmarks);
 * rows: room for h->n. */
void kvix__qhits_rows(const kvix_qhits *h, kvix_qhit *rows);

/* Free what the hits hold (tests, benchmarks; the index's answers keep
 * theirs across queries). */
void kvix__qhits_release(kvix_qhits *h);

/* A canonical block as a backend node keeps it, given to add and read back
 * through the node's handle (kvix_backend_ops.info). */
typedef struct kvix_binfo {
    uint32_t pos;
    uint64_t local, canon;
    uint64_t parent_canon;  /* 0 at position 0 */
    uint64_t parent_engine; /* add: the block's; info: a hint, the engine hash
                             * the parent node was made under (0 at 0) */
    uint64_t engine;        /* add: the block's engine hash (a new node keeps it) */
    const void *parent_node; /* add: NULL, or the parent's handle, which the adding slot
                              * holds (in some tier): a store of a chain passes the
                              * previous block's, so a backend need not look it up */
    uint32_t num;           /* add, numbered backends (nodedir): the node's number */
    uint32_t parent_num;    /* add, with parent_node: its number (nodedir), or 0: unknown */
} kvix_binfo;

/* Node handles are at least this aligned: the front end packs a tier mask
 * in their low bits. */
#define KVIX_NODE_ALIGN 16u

/* A backend whose nodes are numbered (below 2^28) in chunks lets the front
 * end keep 4-byte node references instead of 8-byte handles: node k << 12 | j
 * is at c[k] + j * node_size. A chunk never moves while a node in it is
 * held; a grown directory is a copy (the old ones stay until every node is
 * gone), published with a release store. */
typedef struct kvix_nodedir {
    struct kvix_nodedir *prev; /* the directory this one replaced */
    uint32_t cap;
    char *c[];
} kvix_nodedir;
#define KVIX_NODEDIR_SHIFT 12
#define KVIX_NODENUM_BITS 28

typedef struct kvix_backend_ops {
    const char *name;
    /* One backend instance per partition. */
    void *(*create)(const kvix_index_opts *opts, kvix_err *err);
    void (*destroy)(void *be);
    /* Optional: destroy would now wait for the backend's own deferred work
     * (an empty partition's backend is destroyed from a call_rcu callback,
     * which must not wait for later callbacks: it tries again after another
     * grace period). NULL: never. */
    int (*busy)(void *be);
    /* slot now holds block b in tier. Returns KVIX_OK (0) when it did not
     * hold it in that tier before, 1 when it did (nothing changes: the front
     * end counts a second engine hash of the block), or an error. On 0 or 1
     * *node is the block's handle: valid, and its info unchanged, while any
     * slot holds the block in any tier (a node is retired only once its
     * holder set is empty), so a (worker, dp) keeps the handle instead of the
     * block's hashes. A node made by add keeps b's engine (a parent made as a
     * ghost, b's parent_engine) at engine_off for its whole life; b's local
     * is kept when the node becomes held. On 0 or 1, b->parent_engine is set
     * to the hint info would give (saves an info call). b->parent_node is a
     * hint a backend may ignore. */
    int (*add)(void *be, kvix_binfo *b, uint32_t slot, unsigned tier, void **node,
               kvix_err *err);
    /* slot no longer holds node in tier; it did before (so node is valid). */
    void (*del)(void *be, void *node, uint32_t slot, unsigned tier);
    /* The block of a node some slot holds; writer side (no lock: what it
     * reads does not change while the node is held). be: the node's backend
     * (a node may link to others by their number in its backend). */
    void (*info)(void *be, const void *node, kvix_binfo *out);
    /* Append one hit per slot with at least one matched block (any order). */
    int (*query)(void *be, kvix_qchain *q, kvix_qhits *out, kvix_err *err);
    size_t (*memory)(void *be);        /* bytes held */
    size_t engine_off; /* where a node keeps its engine hash (a uint64_t) */
    /* where a node keeps its position (a uint32_t) and canonical hash (a
     * uint64_t), fixed for its life: the record of removals reads them of
     * a block leaving a worker without a call (lib/index/index_xr.c) */
    size_t pos_off, canon_off;
    size_t (*unique_blocks)(void *be); /* distinct (pos, canon) held by any slot */
    /* Optional (NULL: handles are only addresses): where the backend keeps
     * its node directory; add then sets b->num to the node's number, fixed
     * while the node is held (nodes do not keep their own). */
    _Atomic(kvix_nodedir *) *(*nodedir)(void *be);
    size_t node_size; /* engine_off: below 65536; node_size: below 256 */
    /* Optional: adds of (pos0 + k, canon[k]) for k < n are coming soon (a
     * stored event's next blocks): start loading what they will read first.
     * Writer side; a hint, it changes nothing. */
    void (*prefetch)(void *be, uint32_t pos0, const uint64_t *canon, size_t n);
    /* Optional: a del of node (held, its lines loading or loaded) is coming
     * soon: start loading what it will read next. Writer side; a hint. */
    void (*prefetch_del)(void *be, const void *node);
    /* Optional: about n distinct blocks are coming (a load): size the
     * tables for them now rather than grow them on the way. Writer side; a
     * hint (out of memory: nothing changes). */
    void (*reserve)(void *be, size_t n);
    /* Optional: adds of (pos[k], canon[k]) for k < n are coming (a load):
     * start loading the table slots they will read, reading nothing. Writer
     * side; a hint. */
    void (*prefetch_keys)(void *be, const uint32_t *pos, const uint64_t *canon, size_t n);
    /* Optional: the same adds, after prefetch_keys: start loading the nodes
     * their slots name (the slots are read). Writer side; a hint. */
    void (*prefetch_key_nodes)(void *be, const uint32_t *pos, const uint64_t *canon, size_t n);
} kvix_backend_ops;

/* Key-based calls for backend tests and benchmarks (the front end keeps
 * handles): add, and del through the handle an add of a held block returns
 * (which changes nothing). */
static inline int kvix_backend_add_key(const kvix_backend_ops *ops, void *be, uint32_t pos,
                                       uint64_t local, uint64_t canon, uint64_t parent_canon,
                                       uint32_t slot, unsigned tier, kvix_err *err)
{
    kvix_binfo b = {pos, local, canon, pos ? parent_canon : 0, 0, canon, NULL, 0, 0};
    void *node;
    return ops->add(be, &b, slot, tier, &node, err);
}

static inline void kvix_backend_del_key(const kvix_backend_ops *ops, void *be, uint32_t pos,
                                        uint64_t local, uint64_t canon, uint64_t parent_canon,
                                        uint32_t slot, unsigned tier)
{
    kvix_binfo b = {pos, local, canon, pos ? parent_canon : 0, 0, canon, NULL, 0, 0};
    void *node;
    kvix_err err;
    if (ops->add(be, &b, slot, tier, &node, &err) >= 0)
        ops->del(be, node, slot, tier);
}

extern const kvix_backend_ops kvix__backend_reference_ops;
extern const kvix_backend_ops kvix__backend_radix_ops;
extern const kvix_backend_ops kvix__backend_positional_ops;

#endif
