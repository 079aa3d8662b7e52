/* The index front end: partitions, per-(worker, dp) state and engine-hash
 * bookkeeping, canonical hashing, queries, and the writer pool. Backends
 * (lib/index/index_int.h) hold the shared query-side structure. This file: block
 * bookkeeping, events and the index's lifecycle; the others are listed in
 * lib/index/index_front_int.h.
 *
 * Concurrency design: lib/index/index_front_int.h (lock-free readers; (worker,
 * dp) states and slots reclaimed after a grace period).
 *
 * Block bookkeeping per (worker, dp): lib/index/index_front_int.h. In short, a
 * (worker, dp) keeps engine hash -> backend node handle | tier mask, and the
 * block's hashes are read from the node, kept there once for all holders. */
#include "kvix/index.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "index_front_int.h"

/* ---- block bookkeeping ------------------------------------------------ */

/* The block was held in that tier already: count its second engine hash. */
static int tier_ref_more(wstate *w, const kvix_binfo *b, unsigned tier, kvix_err *err)
{
    uint64_t key[2] = {b->pos, b->canon};
    int inserted;
    wside *sd = kvix__ix_ws_side(w);
    cref *c = sd ? kvix__hmap_put(&sd->extra, key, &inserted) : NULL;
    if (!c)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a block");
    if (c->n[tier] == CREF_MAX - 1)
        return kvix_err_set(err, KVIX_ELIMIT,
                            "more than %u engine hashes for one block of worker %" PRIu64,
                            CREF_MAX, w->worker);
    c->n[tier]++;
    return KVIX_OK;
}

/* The backend says whether the slot already held the block in a tier, so
 * only a second engine hash of the same block costs an entry here. */
static inline int tier_ref(wstate *w, kvix_binfo *b, unsigned tier, void **node, kvix_err *err)
{
    struct part *p = w->p;
    int rc = p->ops->add(part_be(p), b, w->slot, tier, node, err);
    return rc <= 0 ? rc /* new in the backend, or an error */ : tier_ref_more(w, b, tier, err);
}

static int cref_empty(const cref *c)
{
    for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
        if (c->n[t])
            return 0;
    return 1;
}

/* Whether another engine hash of w holds node's block in tier: if so, one
 * fewer does now (w has an extra map). */
static int tier_unref_more(wstate *w, void *node, unsigned tier)
{
    struct part *p = w->p;
    kvix_binfo b;
    p->ops->info(part_be(p), node, &b);
    uint64_t key[2] = {b.pos, b.canon};
    cref *c = kvix__hmap_get(&w->side->extra, key);
    if (!c || !c->n[tier])
        return 0;
    if (--c->n[tier] == 0 && cref_empty(c))
        kvix__hmap_del(&w->side->extra, key);
    return 1;
}

/* node leaves tier: the backend hears of it when no other engine hash of
 * this (worker, dp) holds the block in that tier. */
static inline void tier_unref(wstate *w, void *node, unsigned tier)
{
    struct part *p = w->p;
    if (w->side && kvix_hmap_size(&w->side->extra) && tier_unref_more(w, node, tier))
        return;
    p->ops->del(part_be(p), node, w->slot, tier);
}

static void untier_all(wstate *w, bent e)
{
    for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
        if (bent_tiers(e) & (1u << t))
            tier_unref(w, bent_node(e), t);
}

/* The parent engine hash of engine (held at a node of info b). */
uint64_t kvix__ix_parent_engine(const wstate *w, uint64_t engine, const kvix_binfo *b)
{
    if (b->pos && w->side && kvix_hmap_size(&w->side->pexc)) {
        const uint64_t *x = kvix__hmap_get(&w->side->pexc, &engine);
        if (x)
            return *x;
    }
    return b->parent_engine;
}

static int note_parent_other(wstate *w, uint64_t engine, uint64_t parent, kvix_err *err);

/* Record engine's parent engine hash where the node's hint is not it. */
static inline int note_parent(wstate *w, uint64_t engine, uint64_t parent, uint64_t hint,
                              kvix_err *err)
{
    if (hint != parent)
        return note_parent_other(w, engine, parent, err);
    if (w->side && kvix_hmap_size(&w->side->pexc))
        kvix__hmap_del(&w->side->pexc, &engine);
    return KVIX_OK;
}

static int note_parent_other(wstate *w, uint64_t engine, uint64_t parent, kvix_err *err)
{
    int inserted;
    wside *sd = kvix__ix_ws_side(w);
    uint64_t *x = sd ? kvix__hmap_put(&sd->pexc, &engine, &inserted) : NULL;
    if (!x)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a block");
    *x = parent;
    return KVIX_OK;
}

/* Drop engine's entry (its node still valid: before the backend hears). */
static void forget_hash(wstate *w, uint64_t engine)
{
    kvix__ix_bm_del(&w->blocks, engine);
    if (w->side && kvix_hmap_size(&w->side->pexc))
        kvix__hmap_del(&w->side->pexc, &engine);
}

/* w holds engine at (pos, canon) in tier. An engine hash names one block per
 * worker: a store of a held hash at another place moves it there. Inlined in
 * the stored event's loop (eleven arguments a block). */
static inline __attribute__((always_inline)) int
store_block(wstate *w, uint64_t engine, uint32_t pos, uint64_t local, uint64_t canon,
            uint64_t parent, uint64_t pcanon, unsigned tier, kvix_ix_chain *chain,
            kvix_apply_result *r, kvix_err *err)
{
    const kvix_backend_ops *ops = w->p->ops;
    kvix_binfo b = {.pos = pos,
                    .local = local,
                    .canon = canon,
                    .parent_canon = pos ? pcanon : 0,
                    .parent_engine = pos ? parent : 0,
                    .engine = engine,
                    .parent_node = pos && chain ? chain->node : NULL,
                    .parent_num = pos && chain ? chain->num : 0};
    int rc;
    void *node;
    size_t at;
    bent e = kvix__ix_bm_get(&w->blocks, engine, &at);
    if (e) {
        kvix_binfo o;
        ops->info(part_be(w->p), bent_node(e), &o);
        if (o.pos == pos && o.canon == canon) { /* the same block: the canon says it */
            if (chain)
                *chain = (kvix_ix_chain){bent_node(e), kvix_ix_bm_num(&w->blocks, at)};
            if (bent_tiers(e) & (1u << tier)) {
                r->duplicate++;
                return KVIX_OK;
            }
            if ((rc = tier_ref(w, &b, tier, &node, err)))
                return rc;
            /* at still names it: no change to w->blocks since */
            kvix__ix_bm_set(&w->blocks, at, engine, e | 1u << tier);
            r->stored++;
            return KVIX_OK;
        }
        bent old = e;
        forget_hash(w, engine); /* while the old node is valid */
        untier_all(w, old);
        b.parent_node = NULL; /* the old node may have been the parent's, now let go */
        at = (size_t)-1;      /* the map changed: no place to add at */
    }
    if (chain)
        chain->node = NULL;
    if ((rc = tier_ref(w, &b, tier, &node, err)))
        return rc;
    if ((uintptr_t)node & BENT_TIERS) /* backends align their nodes: never met */
        rc = kvix_err_set(err, KVIX_ESYS, "misaligned index node");
    else if (!(rc = note_parent(w, engine, pos ? parent : 0, b.parent_engine,
                                err)) &&
             kvix__ix_bm_add_at(&w->blocks, at, engine, (bent)(uintptr_t)node | (1u << tier), b.num))
        rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory for a block");
    if (rc) {
        if (w->side && kvix_hmap_size(&w->side->pexc))
            kvix__hmap_del(&w->side->pexc, &engine);
        tier_unref(w, node, tier);
        return rc;
    }
    if (chain)
        *chain = (kvix_ix_chain){node, b.num};
    r->stored++;
    return KVIX_OK;
}

int kvix__ix_store_block(wstate *w, uint64_t engine, uint32_t pos, uint64_t local, uint64_t canon,
                       uint64_t parent, uint64_t pcanon, unsigned tier, kvix_ix_chain *chain,
                       kvix_apply_result *r, kvix_err *err)
{
    return store_block(w, engine, pos, local, canon, parent, pcanon, tier, chain, r, err);
}

/* ---- loading a (worker, dp) whole ----------------------------------------- */

/* A load's blocks are taken LOAD_AHEAD at a time: the table slots of the
 * next batch but one are asked for, then the nodes of the next batch (their
 * slots arrived meanwhile), then this batch is added: in an index far larger
 * than the caches each block's two dependent misses (its slot, then its
 * node) overlap with the other blocks' instead of coming one after another. */
#define LOAD_AHEAD 16u

static void load_prefetch(const kvix_backend_ops *ops, void *be, const kvix_block_info *b,
                          size_t from, size_t n, int nodes)
{
    uint32_t pos[LOAD_AHEAD];
    uint64_t canon[LOAD_AHEAD];
    size_t k = 0;
    for (; k < LOAD_AHEAD && from + k < n; k++) {
        pos[k] = b[from + k].position;
        canon[k] = b[from + k].canon;
    }
    if (!k)
        return;
    if (nodes)
        ops->prefetch_key_nodes(be, pos, canon, k);
    else
        ops->prefetch_keys(be, pos, canon, k);
}

int kvix__ix_load_tree(wstate *w, const kvix_block_info *b, const size_t *up, size_t n,
                      kvix_ix_chain *nodes, kvix_apply_result *r, kvix_err *err)
{
    part *p = w->p;
    const kvix_backend_ops *ops = p->ops;
    void *be = part_be(p);
    int ahead = ops->prefetch_keys && ops->prefetch_key_nodes;
    uint32_t depth = 0;
    int rc = KVIX_OK;
    if (kvix__ix_bm_reserve(&w->blocks, kvix_ix_bm_size(&w->blocks) + n))
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu blocks", n);
    for (size_t i = 0; i < n && !rc; i++)
        if (b[i].position + 1 > depth)
            depth = b[i].position + 1;
    raise_depth(p, depth);
    if (ahead) {
        load_prefetch(ops, be, b, 0, n, 0);
        load_prefetch(ops, be, b, LOAD_AHEAD, n, 0);
        load_prefetch(ops, be, b, 0, n, 1);
    }
    for (size_t i = 0; i < n && !rc; i++) {
        if (ahead && i % LOAD_AHEAD == 0) {
            load_prefetch(ops, be, b, i + 2 * LOAD_AHEAD, n, 0);
            load_prefetch(ops, be, b, i + LOAD_AHEAD, n, 1);
        }
        const kvix_block_info *x = &b[i];
        size_t par = up[i];
        kvix_binfo bi = {.pos = x->position,
                         .local = x->local,
                         .canon = x->canon,
                         .parent_canon = x->position ? x->parent_canon : 0,
                         .parent_engine = x->position ? x->parent : 0,
                         .engine = x->engine,
                         .parent_node = par != (size_t)-1 ? nodes[par].node : NULL,
                         .parent_num = par != (size_t)-1 ? nodes[par].num : 0};
        void *node = NULL;
        uint64_t hint = 0;
        for (unsigned t = 0; t < KVIX_MEDIUM_COUNT && !rc; t++) {
            if (!(x->tiers & (1u << t)))
                continue;
            kvix_binfo tb = bi; /* add sets its num and parent hint */
            if ((rc = tier_ref(w, &tb, t, &node, err)))
                break;
            r->stored++;
            bi.num = tb.num;
            hint = tb.parent_engine;
        }
        if (rc)
            break;
        if ((uintptr_t)node & BENT_TIERS) /* backends align their nodes: never met */
            rc = kvix_err_set(err, KVIX_ESYS, "misaligned index node");
        else if (!(rc = note_parent(w, x->engine, x->position ? x->parent : 0, hint, err)) &&
                 kvix__ix_bm_add(&w->blocks, x->engine, (bent)(uintptr_t)node | x->tiers, bi.num))
            rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory for a block");
        nodes[i] = (kvix_ix_chain){node, bi.num};
    }
    kvix_ix_publish_held(w);
    return rc;
}

/* engine leaves tier in w's map: its node, which the backend is still to
 * hear about (tier_unref), or NULL when w did not hold it there; *gone: it
 * was the block's last tier in w. */
static void *forget_tier(wstate *w, uint64_t engine, unsigned tier, kvix_apply_result *r,
                         int *gone)
{
    size_t at;
    bent v = kvix__ix_bm_get(&w->blocks, engine, &at);
    *gone = 0;
    if (!v || !(bent_tiers(v) & (1u << tier))) {
        r->unknown++;
        return NULL;
    }
    if (bent_tiers(v) == (1u << tier)) { /* forget it first: the backend may free the node */
        kvix__ix_bm_del_at(&w->blocks, at, engine);
        if (w->side && kvix_hmap_size(&w->side->pexc))
            kvix__hmap_del(&w->side->pexc, &engine);
        *gone = 1;
    } else
        kvix__ix_bm_set(&w->blocks, at, engine, v & ~(bent)(1u << tier));
    r->removed++;
    return bent_node(v);
}

/* A removed event's hashes are taken REMOVE_BATCH at a time, in passes,
 * so that in an index larger than the caches the loads of one pass overlap
 * instead of missing one after another (a worker whose cache is full
 * evicts about a block for each block it stores): their blocks-map slots
 * are asked for; then (the slots loaded) the nodes their lookups read; then
 * the entries are dropped (each node stays valid: the slot holds it in the
 * backend until its del); then what the backend's dels will read is asked
 * for (the nodes loaded); then the backend hears. Each of the two sees its
 * changes in the hashes' order, the map's for a batch before the backend's,
 * as a hash-by-hash loop would leave them. */
#define REMOVE_BATCH 16u

/* hashes[0..n): ev's, or those of them no other full group holds
 * (remove_grouped). */
static void remove_hashes(wstate *w, const kvix_event *ev, const uint64_t *hashes, size_t n,
                          kvix_apply_result *r)
{
    const kvix_backend_ops *ops = w->p->ops;
    unsigned tier = (unsigned)ev->medium;
    bmap *m = &w->blocks;
    void *nodes[REMOVE_BATCH];
    int gone[REMOVE_BATCH];
    int record = 0; /* 1: the event has its entry in the record; -1: not recorded */
    for (size_t i0 = 0; i0 < n; i0 += REMOVE_BATCH) {
        size_t nb = n - i0 < REMOVE_BATCH ? n - i0 : REMOVE_BATCH;
        const uint64_t *h = hashes + i0;
        for (size_t k = 0; k < nb; k++)
            kvix_ix_bm_prefetch(m, h[k]);
        for (size_t k = 0; k < nb; k++)
            kvix__ix_bm_prefetch_nodes(m, h[k]);
        for (size_t k = 0; k < nb; k++)
            nodes[k] = forget_tier(w, h[k], tier, r, &gone[k]);
        if (ops->prefetch_del)
            for (size_t k = 0; k < nb; k++)
                if (nodes[k])
                    ops->prefetch_del(part_be(w->p), nodes[k]);
        for (size_t k = 0; k < nb; k++) {
            if (!nodes[k])
                continue;
            if (gone[k] && record >= 0) { /* the node is valid until its del */
                if (!record)
                    record = kvix__ix_xr_event(w, ev, KVIX_EV_REMOVED, 0) ? -1 : 1;
                if (record > 0)
                    kvix_ix_xr_block(w, nodes[k]);
            }
            tier_unref(w, nodes[k], tier);
        }
    }
}

static void clear_ws(wstate *w, kvix_apply_result *r)
{
    size_t it = 0;
    bent e;
    while ((e = kvix__ix_bm_next(&w->blocks, &it, NULL)))
        untier_all(w, e);
    r->removed += kvix_ix_bm_size(&w->blocks);
    kvix__ix_bm_release(&w->blocks);
    kvix_ix_publish_held(w);
    kvix__ix_ws_side_free(w);
    kvix__ix_grp_members_free(w); /* the kinds stay: the engine's, not its cache's */
}

/* ---- events ----------------------------------------------------------- */

static void record_eid(wstate *w, const kvix_event *ev)
{
    if (w && ev->has_eid) {
        w->has_eid = 1;
        w->eid = ev->eid;
    }
}

/* A stored event's blocks are taken STORE_AHEAD at a time: their canonical
 * hashes first, then a load of the blocks-map slot and the backend's table
 * slot each will read is started for all of them, so that at thousands of
 * workers (an index far larger than the caches) their misses overlap
 * instead of coming one block after another. */
#define STORE_AHEAD 16u

static void prefetch_blocks(wstate *w, const kvix_event *ev, size_t i0, uint32_t pos,
                            uint64_t prev, uint64_t *canon, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        uint64_t local = ev->blocks[i0 + k].local;
        prev = canon[k] = pos + k == 0 ? local : kvix_hash_seq_next(prev, local);
        kvix_ix_bm_prefetch(&w->blocks, ev->blocks[i0 + k].seq);
    }
    const kvix_backend_ops *ops = w->p->ops;
    if (ops->prefetch)
        ops->prefetch(part_be(w->p), pos, canon, n);
}

/* A partition's blocks are hashed one way: the first store of blocks says
 * which (PART_HASH_*), and a store hashed the other way is refused. Any
 * writer thread: a compare-and-swap. */
static inline int part_hashing(part *p, const kvix_event *ev, kvix_err *err)
{
    uint8_t want = ev->eagle ? PART_HASH_EAGLE : PART_HASH_PLAIN;
    uint8_t cur = __atomic_load_n(&p->hashing, __ATOMIC_RELAXED);
    if (cur == want || (cur == PART_HASH_UNKNOWN &&
                        (__atomic_compare_exchange_n(&p->hashing, &cur, want, 0, __ATOMIC_RELAXED,
                                                     __ATOMIC_RELAXED) ||
                         cur == want)))
        return KVIX_OK;
    return kvix_err_set(err, KVIX_EBLOCKSIZE,
                        "partition %s/%s hashes %s blocks, this event %s ones", p->model,
                        p->tenant, cur == PART_HASH_EAGLE ? "eagle" : "plain",
                        ev->eagle ? "eagle" : "plain");
}

/* A store of a KV cache group: its kind learned (with the partition and
 * state that takes), then 1 when the group is not indexed (the store
 * counted and skipped, its eid recorded), 0 to go on storing, or an error. */
static int group_store(kvix_index *idx, const kvix_event *ev, part **pp, wstate **wp,
                       kvix_apply_result *r, kvix_err *err)
{
    int rc;
    if (!*pp && (rc = kvix__ix_part_get(idx, ev->model, ev->tenant, ev->bs, pp, err)))
        return rc;
    if (!*wp && (rc = kvix__ix_ws_get(*pp, ev->worker, ev->dp, wp, err)))
        return rc;
    wstate *w = *wp;
    ws_lock(w);
    rc = kvix__ix_grp_learn(w, ev->group, ev->kind, err);
    int indexed = !rc && kvix__ix_grp_indexed(w, ev);
    if (!rc && !indexed)
        record_eid(w, ev);
    ws_unlock(w);
    if (indexed)
        return 0;
    if (!rc)
        r->skipped += ev->nblocks ? ev->nblocks : ev->nhashes;
    kvix__ix_ws_done(w);
    return rc ? rc : 1;
}

static int eid_state(kvix_index *idx, part *p, const kvix_event *ev, wstate **w, kvix_err *err);

/* A placeholder store: the tier added to each hash the worker holds, the
 * block's place and hashes its own (it has no tokens to say otherwise); a
 * hash not held counted unknown. */
static int apply_placeholder(kvix_index *idx, const kvix_event *ev, kvix_apply_result *r,
                             kvix_err *err)
{
    if (ev->nhashes > KVIX_EVENT_BLOCKS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%zu hashes in one event (limit %d)",
                            ev->nhashes, KVIX_EVENT_BLOCKS_MAX);
    part *p = kvix__ix_part_find(idx, ev->model, ev->tenant);
    if (p && ev->bs && p->bs != ev->bs)
        return kvix__ix_bs_mismatch(p, ev->bs, err);
    wstate *w = p ? kvix__ix_ws_find(p, ev->worker, ev->dp) : NULL;
    int rc = KVIX_OK;
    size_t done = 0;
    if (w)
        ws_lock(w);
    if (!kvix__ix_grp_indexed(w, ev)) {
        r->skipped += ev->nhashes;
    } else if (!w) {
        r->unknown += ev->nhashes;
    } else {
        for (; done < ev->nhashes && !rc; done++) {
            uint64_t engine = ev->hashes[done];
            bent e = kvix__ix_bm_get(&w->blocks, engine, NULL);
            if (!e) {
                r->unknown++;
                continue;
            }
            kvix_binfo o;
            p->ops->info(part_be(p), bent_node(e), &o);
            rc = store_block(w, engine, o.pos, o.local, o.canon,
                             kvix__ix_parent_engine(w, engine, &o), o.parent_canon,
                             (unsigned)ev->medium, NULL, r, err);
        }
        if (rc)
            done--;
        int mrc = kvix__ix_grp_stored(w, ev, done, err);
        rc = rc ? rc : mrc;
    }
    if (w && !rc)
        record_eid(w, ev);
    if (w)
        ws_unlock(w);
    int erc = rc ? KVIX_OK : eid_state(idx, p, ev, &w, err);
    if (w)
        kvix__ix_ws_done(w);
    return rc ? rc : erc;
}

static int apply_stored(kvix_index *idx, const kvix_event *ev, kvix_apply_result *r,
                        kvix_err *err)
{
    if (ev->placeholder)
        return apply_placeholder(idx, ev, r, err);
    if (ev->bs == 0 || ev->bs > KVIX_BS_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "block size %" PRIu32 " out of range 1..%d",
                            ev->bs, KVIX_BS_MAX);
    if (ev->nblocks > KVIX_EVENT_BLOCKS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%zu blocks in one event (limit %d)",
                            ev->nblocks, KVIX_EVENT_BLOCKS_MAX);
    if (ev->has_parent_at && !ev->has_parent)
        return kvix_err_set(err, KVIX_EINVAL, "a parent's placement without its hash");
    part *p = kvix__ix_part_find(idx, ev->model, ev->tenant);
    if (p && p->bs != ev->bs)
        return kvix__ix_bs_mismatch(p, ev->bs, err);
    wstate *w = p ? kvix__ix_ws_find(p, ev->worker, ev->dp) : NULL;
    int rc = ev->has_group ? group_store(idx, ev, &p, &w, r, err) : KVIX_OK;
    if (rc)
        return rc > 0 ? KVIX_OK : rc;
    uint32_t pos0 = 0;
    uint64_t prev = 0, parent = 0;
    kvix_ix_chain chain = {NULL, 0}; /* the previous block's node, which w holds: the next one's parent */
    if (ev->has_parent_at) { /* the event says where the parent sat: held there or not */
        pos0 = ev->parent_position + 1;
        prev = ev->parent_canon;
        parent = ev->parent;
    } else if (ev->has_parent) {
        size_t at;
        bent pe = w ? kvix__ix_bm_get(&w->blocks, ev->parent, &at) : 0;
        if (!pe) {
            if (w)
                kvix__ix_ws_done(w); /* made for a group's kind, perhaps */
            return kvix_err_set(err, KVIX_EPARENT,
                                "parent %016" PRIx64 " is not held by worker %" PRIu64
                                " dp %" PRIu32,
                                ev->parent, ev->worker, ev->dp);
        }
        kvix_binfo pb;
        p->ops->info(part_be(p), bent_node(pe), &pb);
        pos0 = pb.pos + 1;
        prev = pb.canon;
        parent = ev->parent;
        chain = (kvix_ix_chain){bent_node(pe), kvix_ix_bm_num(&w->blocks, at)};
    }
    if ((uint64_t)pos0 + ev->nblocks > KVIX_INDEX_DEPTH_MAX)
        rc = kvix_err_set(err, KVIX_ERANGE, "block position %" PRIu64 " too deep (limit %u)",
                          (uint64_t)pos0 + ev->nblocks - 1, KVIX_INDEX_DEPTH_MAX - 1);
    else if (!p)
        rc = kvix__ix_part_get(idx, ev->model, ev->tenant, ev->bs, &p, err);
    if (!rc && ev->nblocks)
        rc = part_hashing(p, ev, err);
    if (rc) {
        if (w)
            kvix__ix_ws_done(w); /* made for a group's kind, perhaps */
        return rc;
    }
    if (!w && (rc = kvix__ix_ws_get(p, ev->worker, ev->dp, &w, err)))
        return rc;
    ws_lock(w);
    kvix_ix_rank_if_asked(p);
    raise_depth(p, pos0 + (uint32_t)ev->nblocks);
    if (ev->lora[0])
        kvix__ix_note_lora(p, ev->lora);
    /* Room for the event's blocks at once: a map grown block by block
     * rehashes (reading each entry's node) at every doubling on the way.
     * Engines send stored events for blocks they did not hold, so this is
     * the size the adds reach. */
    rc = kvix__ix_bm_reserve(&w->blocks, (size_t)w->blocks.n + ev->nblocks)
             ? kvix_err_set(err, KVIX_ENOMEM, "out of memory for a block")
             : KVIX_OK;
    uint64_t canons[STORE_AHEAD];
    for (size_t i0 = 0; i0 < ev->nblocks && !rc; i0 += STORE_AHEAD) {
        size_t nw = ev->nblocks - i0 < STORE_AHEAD ? ev->nblocks - i0 : STORE_AHEAD;
        prefetch_blocks(w, ev, i0, pos0 + (uint32_t)i0, prev, canons, nw);
        for (size_t k = 0; k < nw && !rc; k++) {
            size_t i = i0 + k;
            uint64_t canon = canons[k];
            rc = store_block(w, ev->blocks[i].seq, pos0 + (uint32_t)i, ev->blocks[i].local, canon,
                             parent, prev, (unsigned)ev->medium, &chain, r, err);
            prev = canon;
            parent = ev->blocks[i].seq;
        }
    }
    if (!rc && w->grp && w->grp->member) /* a worker of several full groups */
        rc = kvix__ix_grp_stored(w, ev, ev->nblocks, err);
    kvix_ix_publish_held(w);
    if (!rc)
        record_eid(w, ev);
    ws_unlock(w);
    kvix__ix_ws_done(w); /* nothing held (an empty event, or a first block refused): released */
    return rc;
}

/* The state an eid-carrying removed/cleared event is recorded in when the
 * (worker, dp) has none: created when the partition exists (or the event
 * has a block size to create it). */
static int eid_state(kvix_index *idx, part *p, const kvix_event *ev, wstate **w, kvix_err *err)
{
    int rc;
    if (!ev->has_eid || *w || (!p && !ev->bs))
        return KVIX_OK;
    if (!p && (rc = kvix__ix_part_get(idx, ev->model, ev->tenant, ev->bs, &p, err)))
        return rc;
    if (ev->worker > KVIX_WORKER_MAX) /* a snapshot could not hold it */
        return kvix_err_set(err, KVIX_ERANGE, "worker %" PRIu64 " out of range (0 to %" PRId64 ")",
                            ev->worker, (int64_t)KVIX_WORKER_MAX);
    /* a pair without blocks has no state: its eid alone is kept */
    return kvix__ix_eid_set(p, ev->worker, ev->dp, ev->eid, err);
}

/* A removal for a worker of several full groups: only the hashes no other
 * full group holds leave. */
static int remove_grouped(wstate *w, const kvix_event *ev, kvix_apply_result *r, kvix_err *err)
{
    uint64_t small[64], *keep = ev->nhashes <= 64 ? small : malloc(ev->nhashes * sizeof *keep);
    if (!keep)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a removal");
    size_t n = kvix__ix_grp_removed(w, ev, keep, r);
    remove_hashes(w, ev, keep, n, r);
    kvix_ix_publish_held(w);
    if (keep != small)
        free(keep);
    return KVIX_OK;
}

/* The blocks an event drops and the eid it records change together, under
 * the state's cut lock: a walk sees both or neither. */
static int apply_removed(kvix_index *idx, const kvix_event *ev, kvix_apply_result *r,
                         kvix_err *err)
{
    if (ev->nhashes > KVIX_EVENT_BLOCKS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%zu hashes in one event (limit %d)",
                            ev->nhashes, KVIX_EVENT_BLOCKS_MAX);
    part *p = kvix__ix_part_find(idx, ev->model, ev->tenant);
    if (p && ev->bs && p->bs != ev->bs)
        return kvix__ix_bs_mismatch(p, ev->bs, err);
    wstate *w = p ? kvix__ix_ws_find(p, ev->worker, ev->dp) : NULL;
    int rc = KVIX_OK;
    if (w)
        ws_lock(w);
    if (!kvix__ix_grp_indexed(w, ev))
        r->skipped += ev->nhashes; /* another kind's group: never what a prompt hits */
    else if (!w)
        r->unknown += (uint32_t)ev->nhashes;
    else if (w->grp && w->grp->member)
        rc = remove_grouped(w, ev, r, err);
    else {
        remove_hashes(w, ev, ev->hashes, ev->nhashes, r);
        kvix_ix_publish_held(w);
    }
    if (w && !rc)
        record_eid(w, ev);
    if (w)
        ws_unlock(w);
    if (!rc)
        rc = eid_state(idx, p, ev, &w, err); /* no state: the eid alone */
    if (w)
        kvix__ix_ws_done(w); /* its last block gone and no eid: released */
    return rc;
}

static int apply_cleared(kvix_index *idx, const kvix_event *ev, kvix_apply_result *r,
                         kvix_err *err)
{
    part *p = kvix__ix_part_find(idx, ev->model, ev->tenant);
    if (p && ev->bs && p->bs != ev->bs)
        return kvix__ix_bs_mismatch(p, ev->bs, err);
    wstate *w = p ? kvix__ix_ws_find(p, ev->worker, ev->dp) : NULL, *held = w;
    int rc = eid_state(idx, p, ev, &w, err);
    if (w) {
        ws_lock(w);
        if (held) {
            uint64_t before = r->removed;
            clear_ws(w, r);
            if (r->removed > before)
                kvix__ix_xr_event(w, ev, KVIX_EV_CLEARED, (uint32_t)(r->removed - before));
        }
        record_eid(w, ev);
        ws_unlock(w);
        kvix__ix_ws_done(w); /* cleared without an eid: released */
    }
    return rc;
}

void kvix__ix_add_totals(kvix_index *idx, const kvix_apply_result *r)
{
    if (r->stored)
        __atomic_fetch_add(&idx->tot_stored, r->stored, __ATOMIC_RELAXED);
    if (r->duplicate)
        __atomic_fetch_add(&idx->tot_dup, r->duplicate, __ATOMIC_RELAXED);
    if (r->removed)
        __atomic_fetch_add(&idx->tot_removed, r->removed, __ATOMIC_RELAXED);
    if (r->unknown)
        __atomic_fetch_add(&idx->tot_unknown, r->unknown, __ATOMIC_RELAXED);
    if (r->skipped)
        __atomic_fetch_add(&idx->tot_skipped, r->skipped, __ATOMIC_RELAXED);
    if (r->kept)
        __atomic_fetch_add(&idx->tot_kept, r->kept, __ATOMIC_RELAXED);
}

int kvix_index_apply(kvix_index *idx, const kvix_event *ev, kvix_apply_result *res,
                     kvix_err *err)
{
    kvix_apply_result r = {0, 0, 0, 0, 0, 0};
    int rc;
    if (!idx || !ev)
        rc = kvix_err_set(err, KVIX_EINVAL, "no index or event");
    else if (!kvix_name_ok(ev->model) || !kvix_name_ok(ev->tenant))
        rc = kvix_err_set(err, KVIX_EINVAL, "model or tenant name not terminated");
    else if (ev->medium < 0 || ev->medium >= KVIX_MEDIUM_COUNT)
        rc = kvix_err_set(err, KVIX_EINVAL, "unknown medium %d", ev->medium);
    else if (ev->has_eid && ev->eid > KVIX_EID_MAX) /* a snapshot could not hold it */
        rc = kvix_err_set(err, KVIX_ERANGE, "eid %" PRIu64 " out of range (0 to %" PRId64 ")",
                          ev->eid, (int64_t)KVIX_EID_MAX);
    else if (ev->type == KVIX_EV_STORED)
        rc = apply_stored(idx, ev, &r, err);
    else if (ev->type == KVIX_EV_REMOVED)
        rc = apply_removed(idx, ev, &r, err);
    else if (ev->type == KVIX_EV_CLEARED)
        rc = apply_cleared(idx, ev, &r, err);
    else
        rc = kvix_err_set(err, KVIX_EINVAL, "not an event (%s)", kvix_event_type_name(ev->type));
    if (idx)
        kvix__ix_add_totals(idx, &r);
    if (res)
        *res = r;
    return rc;
}

void kvix_index_totals(const kvix_index *idx, kvix_apply_result *out)
{
    out->stored = __atomic_load_n(&idx->tot_stored, __ATOMIC_RELAXED);
    out->duplicate = __atomic_load_n(&idx->tot_dup, __ATOMIC_RELAXED);
    out->removed = __atomic_load_n(&idx->tot_removed, __ATOMIC_RELAXED);
    out->unknown = __atomic_load_n(&idx->tot_unknown, __ATOMIC_RELAXED);
    out->skipped = __atomic_load_n(&idx->tot_skipped, __ATOMIC_RELAXED);
    out->kept = __atomic_load_n(&idx->tot_kept, __ATOMIC_RELAXED);
}

static int remove_workers(kvix_index *idx, uint64_t worker, int all_dp, uint32_t dp,
                          kvix_apply_result *res, kvix_err *err)
{
    kvix_apply_result r = {0, 0, 0, 0, 0, 0};
    (void)err;
    if (!idx)
        return kvix_err_set(err, KVIX_EINVAL, "no index");
    kvix_rcu_lock(); /* the partitions' table may be replaced meanwhile */
    ctab *t = __atomic_load_n(&idx->parts.t, __ATOMIC_ACQUIRE);
    for (size_t i = 0; t && i < t->cap; i++) {
        part *p = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (!p)
            continue;
        /* the worker's own states, not every slot of the partition */
        wstate *w = all_dp ? kvix__ix_ws_first(p, worker) : kvix__ix_ws_find(p, worker, dp);
        for (wstate *next; w; w = next) {
            next = all_dp ? w->next_dp : NULL; /* w is released below */
            ws_lock(w);
            clear_ws(w, &r);
            kvix__ix_grp_free(w);
            w->has_eid = 0;
            w->eid = 0;
            ws_unlock(w);
            kvix__ix_ws_done(w);
        }
        kvix__ix_eid_forget(p, worker, all_dp, dp);
    }
    kvix_rcu_unlock();
    kvix__ix_add_totals(idx, &r);
    if (res)
        *res = r;
    return KVIX_OK;
}

int kvix_index_remove_worker(kvix_index *idx, uint64_t worker, kvix_apply_result *res,
                             kvix_err *err)
{
    return remove_workers(idx, worker, 1, 0, res, err);
}

int kvix_index_remove_worker_dp(kvix_index *idx, uint64_t worker, uint32_t dp,
                                kvix_apply_result *res, kvix_err *err)
{
    return remove_workers(idx, worker, 0, dp, res, err);
}

int kvix_index_forget_worker(kvix_index *idx, const char *model, const char *tenant,
                             uint64_t worker, uint32_t dp, kvix_apply_result *res, kvix_err *err)
{
    kvix_apply_result r = {0, 0, 0, 0, 0, 0};
    if (!idx)
        return kvix_err_set(err, KVIX_EINVAL, "no index");
    part *p = kvix__ix_part_find(idx, model ? model : "default", tenant ? tenant : "default");
    wstate *w = p ? kvix__ix_ws_find(p, worker, dp) : NULL;
    if (w) {
        ws_lock(w);
        clear_ws(w, &r);
        kvix__ix_grp_free(w);
        w->has_eid = 0;
        w->eid = 0;
        ws_unlock(w);
        kvix__ix_ws_done(w);
        kvix__ix_add_totals(idx, &r);
    }
    if (p)
        kvix__ix_eid_forget(p, worker, 0, dp);
    if (res)
        *res = r;
    return KVIX_OK;
}
