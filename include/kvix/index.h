/* kvix: the global KV-cache block index (contract sections 3 and 4).
 *
 * One index holds partitions keyed by (model, tenant); each partition's block
 * size is fixed by its first event. Per (worker, dp) the index keeps the
 * engine hash of every block only as the key for later removals, and places
 * each block by position and by a canonical rolling hash it computes itself
 * from the parent's canonical hash and the block's local hash, so opaque
 * engine hashes (vLLM's SHA-256 chain) still index positionally.
 *
 * Semantics of events (per (worker, dp), in the event's partition):
 *  - stored: block i sits at position p + 1 + i where p is the parent's
 *    position (no parent: position i); canonical hash = local at position 0,
 *    else kvix_hash_seq_next(parent's canonical, local). A parent the (worker,
 *    dp) does not hold rejects the whole event (KVIX_EPARENT). Tiers are per
 *    (worker, block): storing a held block in another medium adds that tier.
 *    Counting is per (block, tier): newly held in the event's tier = stored,
 *    already held there = duplicate (idempotent). An engine hash names one
 *    block per worker, and a store is the engine's latest word on it (it
 *    reuses a hash after an eviction whose removed event was lost or came
 *    late): stored again at another place or with other content, the block
 *    moves there (counted stored); blocks stored below its old placement
 *    stay where they were as orphans (their parent's hash now names other
 *    content), as after a removal. Every such state saves and reloads to an
 *    equal index (kvix-snapshot(5)). Two
 *    engine hashes may name the same canonical block (aliases: salted engine
 *    hashes); the worker holds the block while either does.
 *  - removed: each hash drops the event's medium tier of that block (counted
 *    removed); the block is gone when no tier remains. A hash not held in
 *    that tier is counted unknown and skipped. A removed parent's children
 *    stay indexed at their positions with the canonical hashes they had
 *    (engines evict leaves first, but need not): queries stop at the hole,
 *    and storing the parent again by its engine hash joins them up again.
 *  - cleared: every block of the (worker, dp), all tiers (removed counts
 *    blocks). Worker removal likewise, and it forgets the eid too (and the
 *    group kinds below).
 *  - KV cache groups (hybrid models; events with has_group): a store teaches
 *    its group's kind for the (worker, dp) (a store that names no kind: the
 *    one said, else full). Only the full kinds (kvix_kind_full) are
 *    indexed: a store of another kind, a removal of a group learned as
 *    another kind, and a removal of a group never seen storing (group 0
 *    excepted, as Dynamo) are counted skipped and change nothing but the
 *    eid. A removal from one group never removes what another full group
 *    holds: a (worker, dp) with two full groups or more keeps which of them
 *    hold each (block, tier), and a hash leaves once none does (the others
 *    counted kept); an event without group fields speaks for every full
 *    group, and what a (worker, dp) held before its groups were told is
 *    group 0's. A group's kind is the last one its stores said (an engine
 *    changes it only with a restart, which clears). A (worker, dp) that
 *    names no group but group 0 of a full kind pays for none of this.
 *  - placeholder stored: each hash the (worker, dp) holds gets the event's
 *    tier (counted stored, or duplicate when it had it); a hash not held is
 *    counted unknown: nothing is guessed of blocks without tokens.
 *  - EAGLE: a partition's blocks are hashed one way, fixed by its first
 *    store of blocks (ev->eagle or not); a store hashed the other way is
 *    refused (KVIX_EBLOCKSIZE), and token queries hash as the partition
 *    does (kvix_index_eagle).
 *  - eid: an applied event with an eid records it as the (worker, dp)'s last
 *    (a rejected event does not); a removed/cleared event for a partition
 *    the index does not know (and that carries no bs) creates nothing and
 *    records nothing.
 *
 * Concurrency (what may run at the same time as what):
 *  - kvix_index_query* may be called from any number of threads, concurrently
 *    with each other and with every writer call below; only kvix_index_free
 *    must not overlap anything.
 *  - kvix_index_apply and the kvix_index_remove_* calls may run concurrently
 *    for DIFFERENT workers; calls touching the same worker must be serialised
 *    by the caller, in event order.
 *  - kvix_index_submit queues an event for the index's own writer pool: each
 *    worker is sticky to one writer thread, so per-worker order is kept while
 *    different workers proceed in parallel. Submit from one thread only (or
 *    serialise submits); mixing submit and apply for the same worker is not
 *    allowed. kvix_index_sync waits until everything submitted is applied.
 *  - kvix_index_foreach_live may run concurrently with every call above
 *    (not kvix_index_free): it holds back one (worker, dp)'s writer at a
 *    time, while it copies that (worker, dp)'s blocks.
 *  - kvix_index_foreach and kvix_index_stats_get read a quiet
 *    index: no writer call (and no unsynced submit) may overlap them. They
 *    first wait (milliseconds) until what departed workers held is given
 *    back: a (worker, dp) left with no block and no eid frees its number
 *    for a later one, and a partition whose workers have all gone frees its
 *    structures, each after the queries that may still see them (an RCU
 *    grace period).
 */
#ifndef KVIX_INDEX_H
#define KVIX_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/answer.h"
#include "kvix/buf.h"
#include "kvix/error.h"
#include "kvix/event.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvix_index kvix_index;

/* Ceiling on block positions (a stored event past it is KVIX_ERANGE). */
#define KVIX_INDEX_DEPTH_MAX (1u << 24)
/* Ceiling on (model, tenant) partitions (past it: KVIX_ELIMIT). */
#define KVIX_INDEX_PARTITIONS_MAX (1u << 14)

typedef enum kvix_backend {
    KVIX_BACKEND_POSITIONAL = 0, /* default: position-keyed maps, jump search */
    KVIX_BACKEND_RADIX,          /* radix tree of canonical hashes */
    KVIX_BACKEND_REFERENCE,      /* simplest obviously-correct model */
} kvix_backend;

/* Called for an event submitted with kvix_index_submit that the index
 * rejected; tag is the one given to submit. Runs on a writer thread, or on
 * the submitting thread for an event refused at once (not an event, out of
 * memory, or any rejection when threads == 0): calls may be concurrent. */
typedef void (*kvix_reject_fn)(void *ctx, uint64_t tag, const kvix_err *err);

typedef struct kvix_index_opts {
    kvix_backend backend;
    unsigned jump;      /* positional: jump size in positions; 0 = the measured default */
    int binsearch;      /* positional: binary search inside a failed jump (default 1) */
    unsigned threads;   /* writer threads behind kvix_index_submit; 0 = submit applies inline */
    kvix_reject_fn on_reject;
    void *reject_ctx;
    /* Refuse a partition whose model name holds a ':' (KVIX_EINVAL): an index
     * served over HTTP, whose /dump keys are "model:tenant", split at the
     * first ':' by every reader, Dynamo's included. Default 0. */
    int model_no_colon;
    /* Keep only the best top scores of every answer whose query does not say
     * otherwise (a query record's "top"); 0 = all of them (default). */
    uint32_t top;
    /* The record of recent removals kvix_index_explain reads: the last
     * `removals` blocks each (worker, dp) dropped (16 bytes each, and a
     * quarter as many events of 32), made on its first removal. Default
     * KVIX_INDEX_REMOVALS; 0: no record; at most KVIX_INDEX_REMOVALS_MAX. */
    uint32_t removals;
} kvix_index_opts;

#define KVIX_INDEX_REMOVALS 64
#define KVIX_INDEX_REMOVALS_MAX 65536

/* What applying one event did, for the caller's counters. */
/* 64-bit: the same struct carries kvix_index_totals, which grow with a
 * long run (a day of a busy fleet passes 2^32 blocks). */
typedef struct kvix_apply_result {
    uint64_t stored;     /* blocks newly stored */
    uint64_t duplicate;  /* blocks the worker already held (idempotent store) */
    uint64_t removed;    /* blocks removed (by removed, cleared or worker removal) */
    uint64_t unknown;    /* removed hashes the worker did not hold: counted, skipped */
    uint64_t skipped;    /* blocks or hashes of KV cache groups the index keeps out of its
                          * answers (another kind), counted, not applied */
    uint64_t kept;       /* removed hashes another full group of the worker still holds */
} kvix_apply_result;

/* Defaults: positional backend, measured jump, binary search on, no threads,
 * full answers, a record of the last KVIX_INDEX_REMOVALS removals. */
void kvix_index_opts_init(kvix_index_opts *opts);

/* Create an empty index; *out is owned by the caller (kvix_index_free). */
int kvix_index_new(kvix_index **out, const kvix_index_opts *opts, kvix_err *err);
/* Stop the writer pool (applying what was submitted) and free. NULL is fine. */
void kvix_index_free(kvix_index *idx);

/* Apply one stored / removed / cleared event on the caller's thread.
 * Errors: KVIX_EBLOCKSIZE (bs differs from the partition's), KVIX_EPARENT
 * (the parent is unknown to that worker: nothing of the event is applied),
 * KVIX_EINVAL (not an event, or a query), KVIX_ERANGE (too deep). Unknown
 * removed hashes are not an error: they are counted in res. res may be NULL.
 * ev is only read during the call. */
int kvix_index_apply(kvix_index *idx, const kvix_event *ev, kvix_apply_result *res,
                     kvix_err *err);

/* Queue a copy of ev for the writer pool (or apply inline when threads == 0,
 * reporting a rejection through on_reject as well as the return value). */
int kvix_index_submit(kvix_index *idx, const kvix_event *ev, uint64_t tag, kvix_err *err);
/* Wait until every submitted event has been applied. */
void kvix_index_sync(kvix_index *idx);
/* The index's gate, for a program whose threads write the index while
 * others need it quiet (kvix_index_foreach, kvix_index_stats_get, a
 * snapshot save, a service's /dump). Writers hold the shared side around
 * each apply or submit; the exclusive side waits for them, syncs the writer
 * pool, and keeps every writer out until its end. The exclusive side is
 * preferred: a busy writer never starves it. Neither side nests. A program
 * with one thread for everything needs none of this. */
void kvix_index_write_begin(kvix_index *idx);
void kvix_index_write_end(kvix_index *idx);
void kvix_index_quiet_begin(kvix_index *idx);
void kvix_index_quiet_end(kvix_index *idx);

/* Totals of kvix_apply_result over every event applied so far (including
 * submitted ones once synced). */
void kvix_index_totals(const kvix_index *idx, kvix_apply_result *out);

/* Drop every block of a worker in every partition (all dp ranks), or of one
 * (worker, dp). res may be NULL. */
int kvix_index_remove_worker(kvix_index *idx, uint64_t worker, kvix_apply_result *res,
                             kvix_err *err);
int kvix_index_remove_worker_dp(kvix_index *idx, uint64_t worker, uint32_t dp,
                                kvix_apply_result *res, kvix_err *err);

/* Forget (worker, dp) in one partition: its blocks, as a cleared event
 * drops them, and its last eid (an unregistered subscription: the worker
 * no longer holds state there). Nothing known: nothing done, KVIX_OK. Same
 * concurrency as kvix_index_apply for that worker. */
int kvix_index_forget_worker(kvix_index *idx, const char *model, const char *tenant,
                             uint64_t worker, uint32_t dp, kvix_apply_result *res, kvix_err *err);

/* Query by local hashes: for each (worker, dp), the number of leading blocks
 * it holds contiguously from position 0 whose canonical rolling hash equals
 * the query's. An unknown partition answers no scores (not an error) and
 * sets ans->unknown. These two answer the index's top (kvix_index_opts). */
int kvix_index_query(kvix_index *idx, const char *model, const char *tenant,
                     const uint64_t *local, size_t n, kvix_answer *ans, kvix_err *err);
/* Query by tokens: hashed with the partition's block size (or bs when the
 * partition is unknown and bs > 0) and the LoRA name (NULL or "" = none). */
int kvix_index_query_tokens(kvix_index *idx, const char *model, const char *tenant,
                            const char *lora, const uint32_t *tokens, size_t ntokens,
                            kvix_answer *ans, kvix_err *err);
/* Query with a decoded query record (tokens or local hashes, model, tenant,
 * lora, bs, and its top when has_top, else the index's). */
int kvix_index_query_event(kvix_index *idx, const kvix_event *q, kvix_answer *ans,
                           kvix_err *err);

/* ---- explain: why a prompt's prefix stops where it does (kvix/answer.h) -- */

/* Answer q (as kvix_index_query_event, into ans) and explain it into x:
 * for its best workers (the answer's first KVIX_EXPLAIN_BEST; with none,
 * the partition's first (worker, dp) in order) and every dp of the workers
 * it names (q->xworkers), where the match stops and what the index knows
 * there. A query whose "bs" differs from the partition's is not an error
 * here: the answer is empty and x says both sizes. The index must be quiet
 * (as for kvix_index_foreach): no writer call may overlap. */
int kvix_index_explain(kvix_index *idx, const kvix_event *q, kvix_answer *ans, kvix_explain *x,
                       kvix_err *err);

/* Block size of a partition, 0 when unknown. */
uint32_t kvix_index_block_size(const kvix_index *idx, const char *model, const char *tenant);
/* 1 when a partition's blocks are EAGLE's (its first store of blocks was
 * eagle: kvix_hash_blocks_eagle), so token queries hash alike; 0 otherwise
 * (plain, not known yet, or no such partition). */
int kvix_index_eagle(const kvix_index *idx, const char *model, const char *tenant);

/* One stored block as the index holds it, for snapshots and dumps. */
typedef struct kvix_block_info {
    uint32_t position;
    uint64_t local;
    uint64_t engine;      /* the engine's hash (key for removals) */
    uint64_t parent;      /* the engine hash of the parent it was stored under (that hash
                           * may since be gone or moved: parent_canon is what counts);
                           * meaningless at position 0 */
    unsigned tiers;       /* bit (1 << kvix_medium) per tier holding it; never 0 */
    uint64_t canon;       /* the index's canonical rolling hash of the block */
    uint64_t parent_canon; /* the parent's canonical hash (0 at position 0) */
} kvix_block_info;

/* Visitor of kvix_index_foreach: called once per (partition, worker, dp) with
 * its blocks sorted by position, then by engine hash. Arrays are only valid
 * during the call. Return non-zero to stop (the value is returned). */
typedef int (*kvix_foreach_fn)(void *ctx, const char *model, const char *tenant, uint32_t bs,
                               uint64_t worker, uint32_t dp, int has_eid, uint64_t last_eid,
                               const kvix_block_info *blocks, size_t n);

/* Visit every (partition, worker, dp) in a stable order: model, tenant,
 * worker, dp ascending. Partitions with no worker are visited once with
 * worker = UINT64_MAX and n = 0, so an empty partition survives a snapshot. */
int kvix_index_foreach(kvix_index *idx, kvix_foreach_fn fn, void *ctx);

/* What a live walk cost the writers. */
typedef struct kvix_walk_stats {
    uint64_t cuts;       /* (worker, dp) states read */
    double hold_max;     /* seconds: the longest one writer was held back */
    double hold_total;   /* seconds: all of them */
    double hold_cpu_max; /* seconds: of the walk's own work in a hold (hold_max less the
                          * time the walk's thread waited for a core meanwhile) */
} kvix_walk_stats;

/* kvix_index_foreach while writers keep applying events (any of the writer
 * calls above, and submitted events): each (worker, dp) is read at one
 * moment, under that worker's writer exclusion, one after another, so each
 * record is the state of its (worker, dp) after the event its eid names
 * (workers are independent: the walk equals the index at those eids), and
 * no writer waits longer than one (worker, dp)'s copy. A (worker, dp) that
 * registers after its partition was listed is not visited. Same order and
 * visitor as kvix_index_foreach; st (may be NULL) gets the writers' cost. */
int kvix_index_foreach_live(kvix_index *idx, kvix_foreach_fn fn, void *ctx,
                            kvix_walk_stats *st);

/* Restore the blocks of one (worker, dp) as kvix_index_foreach gave them
 * (snapshots), sorted by position. No parent needs to be held, so blocks
 * whose parent was removed while they stayed (orphans, see kvix_index_apply)
 * are restored too; canon must follow from parent_canon and local (else
 * KVIX_ECORRUPT). The parent engine hash is only recorded: it names the
 * parent the block was stored under, and that hash may since have been
 * removed or stored again elsewhere (an engine hash moves), so a held block
 * of that hash need not sit at position - 1 nor have canonical hash
 * parent_canon. Blocks already held are merged (tiers added). Creates the partition with bs if it is
 * unknown (KVIX_EBLOCKSIZE if it differs); n == 0 creates only the partition.
 * worker must be at most KVIX_WORKER_MAX (KVIX_ERANGE). Same concurrency as
 * kvix_index_apply for that worker. blocks is only read during the call; on
 * error the blocks before the failing one stay loaded. */
int kvix_index_load(kvix_index *idx, const char *model, const char *tenant, uint32_t bs,
                    uint64_t worker, uint32_t dp, const kvix_block_info *blocks, size_t n,
                    kvix_err *err);

/* The state kvix_index_foreach does not visit, for a snapshot to stay exact
 * (its extension record 64, kvix-snapshot(5)): the KV cache group kinds each
 * (worker, dp) was told, which full groups hold each block of a (worker, dp)
 * with several, and the partitions whose blocks are EAGLE's. Appended to out
 * (grown as needed), nothing when there is none: an index without hybrid
 * models nor EAGLE has none. The index must be quiet, as for
 * kvix_index_foreach. KVIX_ENOMEM (out unchanged). */
int kvix_index_groups_save(kvix_index *idx, kvix_buf *out, kvix_err *err);
/* Check a payload whole without an index: KVIX_ECORRUPT for one that is
 * not one (truncated, out of order, a kind out of range, full groups that do
 * not follow from the kinds, ...). A snapshot's reader does so at open. */
int kvix_index_groups_check(const void *payload, size_t len, kvix_err *err);
/* Restore it onto an index whose blocks are loaded (kvix_index_load): what
 * kvix_index_groups_check refuses is refused, KVIX_ECORRUPT (on error what
 * came before the failing entry stays applied); a membership row of a block
 * the worker does not hold, or a worker of a partition the index does not
 * have, is skipped. After a check, only KVIX_ENOMEM can fail. Same
 * concurrency as kvix_index_load. */
int kvix_index_groups_load(kvix_index *idx, const void *payload, size_t len, kvix_err *err);

/* Forget the KV cache group state: every (worker, dp)'s kinds and
 * membership (one kept only for them goes), and the hashing of partitions
 * that hold no block. Before a snapshot replaces the index's content
 * (kvix_snapshot_replace). The index must be quiet. */
void kvix_index_groups_reset(kvix_index *idx);

/* Restore the last applied eid of a (worker, dp) (from a snapshot). */
int kvix_index_set_eid(kvix_index *idx, const char *model, const char *tenant, uint32_t bs,
                       uint64_t worker, uint32_t dp, uint64_t eid, kvix_err *err);

typedef struct kvix_index_stats {
    size_t partitions;
    size_t workers;        /* distinct (partition, worker, dp) with state */
    size_t instances;      /* distinct worker ids among those */
    size_t blocks;         /* stored (worker, block) pairs */
    size_t unique_blocks;  /* distinct (partition, position, canonical hash) */
    size_t bytes;          /* memory held by the index */
    size_t backend_bytes;  /* of bytes, held by the backends (the rest: front end) */
} kvix_index_stats;

/* Counts of a quiet index, once what departed workers held is given back. */
void kvix_index_stats_get(kvix_index *idx, kvix_index_stats *out);

/* "positional", "radix", "reference"; parse returns KVIX_EINVAL if unknown. */
const char *kvix_backend_name(kvix_backend b);
int kvix_backend_parse(const char *s, kvix_backend *out);

#ifdef __cplusplus
}
#endif
#endif
