/* Walking the index (snapshots, dumps), restoring it, and its stats. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "index_front_int.h"

static int part_cmp(const void *a, const void *b)
{
    const part *x = *(const part *const *)a, *y = *(const part *const *)b;
    int c = strcmp(x->model, y->model);
    return c ? c : strcmp(x->tenant, y->tenant);
}

static int info_cmp(const void *a, const void *b)
{
    const kvix_block_info *x = a, *y = b;
    if (x->position != y->position)
        return x->position < y->position ? -1 : 1;
    return x->engine < y->engine ? -1 : x->engine > y->engine;
}

/* ---- walking a live index ----------------------------------------------- *
 * One (worker, dp) at a time, under its cut lock (index_front_int.h): its
 * writer waits while its entries are copied, every other writer goes on,
 * and each record is the state of its (worker, dp) at one moment (its eid
 * says which). The copy reads each entry's node (its engine hash and the
 * block's hashes): those loads are started ahead of use, so that an index
 * larger than the caches costs the writer overlapping misses, not one
 * after another. */

typedef struct wdp {
    uint64_t worker;
    uint32_t dp;
} wdp;

static int wdp_cmp(const void *a, const void *b)
{
    const wdp *x = a, *y = b;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return x->dp < y->dp ? -1 : x->dp > y->dp;
}

typedef struct walker {
    wdp *ids;
    size_t nids, ids_cap;
    bent *ents;          /* one state's entries, then */
    uint64_t *engines;   /* their engine hashes where the map keeps them */
    uint8_t *keyed;
    kvix_block_info *info;
    size_t cap;
    kvix_walk_stats *st;
} walker;

static int walker_room(walker *k, size_t n)
{
    if (n <= k->cap)
        return 0;
    size_t c = k->cap ? k->cap : 256;
    while (c < n)
        c *= 2;
    bent *e = realloc(k->ents, c * sizeof *e);
    if (e)
        k->ents = e;
    uint64_t *g = e ? realloc(k->engines, c * sizeof *g) : NULL;
    if (g)
        k->engines = g;
    uint8_t *y = g ? realloc(k->keyed, c) : NULL;
    if (y)
        k->keyed = y;
    kvix_block_info *i = y ? realloc(k->info, c * sizeof *i) : NULL;
    if (!i)
        return -1;
    k->info = i;
    k->cap = c;
    return 0;
}

static int ids_room(walker *k)
{
    if (k->nids < k->ids_cap)
        return 0;
    size_t c = k->ids_cap ? 2 * k->ids_cap : 64;
    wdp *v = realloc(k->ids, c * sizeof *v);
    if (!v)
        return -1;
    k->ids = v;
    k->ids_cap = c;
    return 0;
}

/* The (worker, dp) pairs p has now, sorted (a state registered later is
 * not in this walk: its record would be of a moment after the walk's). */
static int list_states(walker *k, part *p)
{
    k->nids = 0;
    int rc = 0;
    /* Both lists under the partition's lock, where pairs are made and
     * released: a pair that moved between its state and p->eids between
     * two separate looks was in neither (a save missed a worker). */
    kvix_rcu_lock();
    pthread_mutex_lock(&p->lock);
    slotmap m = slots_of(p);
    for (uint32_t s = 0; s < m.n && !rc; s++) {
        wstate *w = slotmap_ws(m, s);
        if (w && !(rc = ids_room(k)))
            k->ids[k->nids++] = (wdp){w->worker, w->dp};
    }
    /* pairs that hold only their eid have no state: p->eids keeps them */
    size_t it = 0;
    const uint64_t *key;
    while (!rc && kvix__hmap_next(&p->eids, &it, &key))
        if (!(rc = ids_room(k)))
            k->ids[k->nids++] = (wdp){key[0], (uint32_t)key[1]};
    pthread_mutex_unlock(&p->lock);
    kvix_rcu_unlock();
    if (rc)
        return -1;
    if (k->nids > 1)
        qsort(k->ids, k->nids, sizeof *k->ids, wdp_cmp);
    size_t u = 0; /* a pair is a state or an eid, never both: kept whole if not */
    for (size_t i = 0; i < k->nids; i++)
        if (!u || wdp_cmp(&k->ids[u - 1], &k->ids[i]))
            k->ids[u++] = k->ids[i];
    k->nids = u;
    return 0;
}

#define CUT_AHEAD 16u

/* Copy w's blocks into k->info (w's cut lock held, w active). */
static void cut_blocks(walker *k, part *p, wstate *w, size_t n)
{
    const kvix_backend_ops *ops = p->ops;
    void *be = part_be(p);
    size_t it = 0, got = 0;
    int keyed;
    bent e;
    while (got < n && (e = kvix__ix_bm_next_key(&w->blocks, &it, &k->engines[got], &keyed))) {
        k->keyed[got] = (uint8_t)keyed;
        k->ents[got++] = e;
    }
    for (size_t i = 0; i < got && i < CUT_AHEAD; i++)
        __builtin_prefetch(bent_node(k->ents[i]));
    for (size_t i = 0; i < got; i++) {
        if (i + CUT_AHEAD < got)
            __builtin_prefetch(bent_node(k->ents[i + CUT_AHEAD]));
        if (ops->prefetch_del && i + CUT_AHEAD / 2 < got) /* its parent, once it is loaded */
            ops->prefetch_del(be, bent_node(k->ents[i + CUT_AHEAD / 2]));
        const void *node = bent_node(k->ents[i]);
        uint64_t engine =
            k->keyed[i] ? k->engines[i] : kvix_ix_node_engine(node, w->blocks.eoff);
        kvix_binfo nd;
        ops->info(be, node, &nd);
        kvix_block_info *b = &k->info[i];
        b->position = nd.pos;
        b->local = nd.local;
        b->engine = engine;
        b->parent = kvix__ix_parent_engine(w, engine, &nd);
        b->tiers = bent_tiers(k->ents[i]);
        b->canon = nd.canon;
        b->parent_canon = nd.parent_canon;
    }
}

static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Read (worker, dp) of p under its cut lock: 1 with *n blocks in k->info
 * and its eid, 0 when its state holds neither (kept for its KV cache
 * groups' kinds: kvix_index_groups_save says those), 2 when it has no
 * state now, -1 out of memory. */
static int cut_state(walker *k, part *p, uint64_t worker, uint32_t dp, size_t *n, int *has_eid,
                     uint64_t *eid)
{
    int rc = 0;
    kvix_rcu_lock(); /* a state its writer releases meanwhile stays readable */
    wstate *w = kvix__ix_ws_find(p, worker, dp);
    /* room before the lock, for what it held a moment ago and some more */
    size_t guess = w ? __atomic_load_n(&w->rec->held, __ATOMIC_RELAXED) : 0;
    if (w && walker_room(k, guess + guess / 8 + 16))
        rc = -1;
    if (!w)
        rc = 2;
    if (w && !rc) {
        ws_lock(w);
        double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        size_t nb = kvix_ix_bm_size(&w->blocks);
        if (!ws_active(w)) {
            rc = 2; /* released meanwhile */
        } else if (!nb && !w->has_eid) {
            rc = 0;
        } else if (walker_room(k, nb)) {
            rc = -1;
        } else {
            cut_blocks(k, p, w, nb);
            *n = nb;
            *has_eid = w->has_eid;
            *eid = w->eid;
            rc = 1;
        }
        double held = clock_s(CLOCK_MONOTONIC) - t0, cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
        ws_unlock(w);
        if (k->st) {
            k->st->cuts++;
            k->st->hold_total += held;
            if (held > k->st->hold_max)
                k->st->hold_max = held;
            if (cpu > k->st->hold_cpu_max)
                k->st->hold_cpu_max = cpu;
        }
    }
    kvix_rcu_unlock();
    return rc;
}

/* (worker, dp) without a state: its eid alone, read under p->lock, where
 * states are made and released. 1 found, 0 not, 2 a state was made since. */
static int cut_eid(part *p, uint64_t worker, uint32_t dp, uint64_t *eid)
{
    uint64_t key[2] = {worker, dp};
    kvix_rcu_lock();
    pthread_mutex_lock(&p->lock);
    const eidrec *e = kvix__hmap_get(&p->eids, key);
    int rc = e ? 1 : kvix__ix_ws_find(p, worker, dp) ? 2 : 0;
    if (e)
        *eid = e->eid;
    pthread_mutex_unlock(&p->lock);
    kvix_rcu_unlock();
    return rc;
}

/* One pair's record as it is now: its state, or its eid alone; a pair that
 * moves between the two meanwhile is read again. */
static int cut_pair(walker *k, part *p, const wdp *id, size_t *n, int *has_eid, uint64_t *eid)
{
    for (;;) {
        int got = cut_state(k, p, id->worker, id->dp, n, has_eid, eid);
        if (got != 2)
            return got;
        if ((got = cut_eid(p, id->worker, id->dp, eid)) != 2) {
            *n = 0;
            *has_eid = got;
            if (got && k->st) /* a cut too, that held no writer */
                k->st->cuts++;
            return got;
        }
    }
}

static int walk_part(walker *k, part *p, kvix_foreach_fn fn, void *ctx)
{
    if (list_states(k, p))
        return KVIX_ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < k->nids && !rc; i++) {
        size_t n = 0;
        int has_eid = 0;
        uint64_t eid = 0;
        int got = cut_pair(k, p, &k->ids[i], &n, &has_eid, &eid);
        if (got < 0)
            return KVIX_ENOMEM;
        if (!got)
            continue;
        if (n > 1)
            qsort(k->info, n, sizeof *k->info, info_cmp);
        rc = fn(ctx, p->model, p->tenant, p->bs, k->ids[i].worker, k->ids[i].dp, has_eid, eid,
                k->info, n);
    }
    /* A partition that holds nothing is not walked (not saved, not dumped):
     * clears that emptied it left it in the index, but a restart from the
     * snapshot does not bring it back, so the partitions' limit does not
     * outlive the run. */
    return rc;
}

int kvix_index_foreach_live(kvix_index *idx, kvix_foreach_fn fn, void *ctx,
                            kvix_walk_stats *st)
{
    if (st)
        memset(st, 0, sizeof *st);
    size_t np;
    part **ps = kvix__ix_parts_list(idx, &np);
    if (!ps)
        return KVIX_ENOMEM;
    if (np > 1)
        qsort(ps, np, sizeof *ps, part_cmp);
    walker k = {.st = st};
    int rc = 0;
    for (size_t i = 0; i < np && !rc; i++)
        rc = walk_part(&k, ps[i], fn, ctx);
    free(k.ids);
    free(k.ents);
    free(k.engines);
    free(k.keyed);
    free(k.info);
    free(ps);
    return rc;
}

int kvix_index_foreach(kvix_index *idx, kvix_foreach_fn fn, void *ctx)
{
    kvix__ix_parts_quiesce(idx); /* no departed worker's slot table goes meanwhile */
    return kvix_index_foreach_live(idx, fn, ctx, NULL);
}

int kvix_index_set_eid(kvix_index *idx, const char *model, const char *tenant, uint32_t bs,
                       uint64_t worker, uint32_t dp, uint64_t eid, kvix_err *err)
{
    part *p;
    wstate *w;
    int rc;
    if (eid > KVIX_EID_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "eid %" PRIu64 " out of range (0 to %" PRId64 ")",
                            eid, (int64_t)KVIX_EID_MAX);
    if ((rc = kvix__ix_part_get(idx, model, tenant, bs, &p, err)))
        return rc;
    if (worker > KVIX_WORKER_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "worker %" PRIu64 " out of range (0 to %" PRId64 ")",
                            worker, (int64_t)KVIX_WORKER_MAX);
    if (!(w = kvix__ix_ws_find(p, worker, dp))) /* no blocks: no state, its eid alone */
        return kvix__ix_eid_set(p, worker, dp, eid, err);
    ws_lock(w);
    w->has_eid = 1;
    w->eid = eid;
    ws_unlock(w);
    return KVIX_OK;
}

int kvix_index_load(kvix_index *idx, const char *model, const char *tenant, uint32_t bs,
                    uint64_t worker, uint32_t dp, const kvix_block_info *blocks, size_t n,
                    kvix_err *err)
{
    part *p;
    wstate *w;
    int rc;
    if ((rc = kvix__ix_part_get(idx, model, tenant, bs, &p, err)))
        return rc;
    if (n == 0) /* the partition alone (UINT64_MAX: one without workers) */
        return KVIX_OK;
    /* blocks stored: the partition's hashing is known, plain unless the KV
     * cache group state says EAGLE (kvix_index_groups_load) */
    uint8_t unknown = PART_HASH_UNKNOWN;
    __atomic_compare_exchange_n(&p->hashing, &unknown, PART_HASH_PLAIN, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
    if ((rc = kvix__ix_ws_get(p, worker, dp, &w, err)))
        return rc;
    ws_lock(w);
    if (kvix__ix_bm_reserve(&w->blocks, kvix_ix_bm_size(&w->blocks) + n)) {
        ws_unlock(w);
        kvix__ix_ws_done(w);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu blocks", n);
    }
    kvix_apply_result r = {0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < n && !rc; i++) {
        const kvix_block_info *b = &blocks[i];
        uint64_t canon = b->local, pcanon = 0;
        if (b->position >= KVIX_INDEX_DEPTH_MAX) {
            rc = kvix_err_set(err, KVIX_ECORRUPT,
                              "block %016" PRIx64 " at position %" PRIu32 " too deep", b->engine,
                              b->position);
            break;
        }
        if (!b->tiers || b->tiers >= (1u << KVIX_MEDIUM_COUNT)) {
            rc = kvix_err_set(err, KVIX_ECORRUPT, "block %016" PRIx64 " with tiers %#x",
                              b->engine, b->tiers);
            break;
        }
        if (b->position > 0) {
            /* The parent engine hash is the one the block was stored under;
             * it may since have been removed, or stored again elsewhere (a
             * move): the block then stays where it was, an orphan. So a held
             * parent that does not fit is no corruption: parent_canon rules. */
            pcanon = b->parent_canon;
            canon = kvix_hash_seq_next(pcanon, b->local);
        }
        if (b->canon != canon) {
            rc = kvix_err_set(err, KVIX_ECORRUPT,
                              "block %016" PRIx64 " at position %" PRIu32
                              ": canonical hash does not follow from its parent's",
                              b->engine, b->position);
            break;
        }
        raise_depth(p, b->position + 1);
        for (unsigned t = 0; t < KVIX_MEDIUM_COUNT && !rc; t++)
            if (b->tiers & (1u << t))
                rc = kvix__ix_store_block(w, b->engine, b->position, b->local, canon, b->parent, pcanon, t,
                                 NULL, &r, err);
    }
    kvix_ix_publish_held(w);
    ws_unlock(w);
    kvix__ix_ws_done(w); /* nothing loaded (the first block refused): released */
    kvix__ix_add_totals(idx, &r);
    return rc;
}

int kvix__ix_load_group(kvix_index *idx, const char *model, const char *tenant, uint32_t bs,
                       uint64_t worker, uint32_t dp, int has_eid, uint64_t eid,
                       const kvix_block_info *b, const size_t *up, size_t n, size_t reserve,
                       kvix_ix_chain **nodes, size_t *cap, kvix_err *err)
{
    part *p;
    wstate *w;
    int rc;
    if ((rc = kvix__ix_part_get(idx, model, tenant, bs, &p, err)))
        return rc;
    if (n == 0) /* the partition alone (UINT64_MAX: one without workers), or an eid alone */
        return has_eid ? kvix_index_set_eid(idx, model, tenant, bs, worker, dp, eid, err) : KVIX_OK;
    /* blocks stored: the partition's hashing is known, plain unless the KV
     * cache group state says EAGLE (kvix_index_groups_load) */
    uint8_t unknown = PART_HASH_UNKNOWN;
    __atomic_compare_exchange_n(&p->hashing, &unknown, PART_HASH_PLAIN, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
    if (n > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < n)
            c *= 2;
        kvix_ix_chain *v = realloc(*nodes, c * sizeof *v);
        if (!v)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu blocks", n);
        *nodes = v;
        *cap = c;
    }
    if ((rc = kvix__ix_ws_get(p, worker, dp, &w, err)))
        return rc;
    if (reserve && p->ops->reserve) /* the backend exists with its first state */
        p->ops->reserve(part_be(p), reserve);
    if (kvix_ix_bm_size(&w->blocks) || w->has_eid) { /* held something: merged */
        rc = kvix_index_load(idx, model, tenant, bs, worker, dp, b, n, err);
        if (!rc && has_eid)
            rc = kvix_index_set_eid(idx, model, tenant, bs, worker, dp, eid, err);
        return rc;
    }
    kvix_apply_result r = {0, 0, 0, 0, 0, 0};
    ws_lock(w);
    rc = kvix__ix_load_tree(w, b, up, n, *nodes, &r, err);
    if (!rc && has_eid) {
        w->has_eid = 1;
        w->eid = eid;
    }
    ws_unlock(w);
    kvix__ix_ws_done(w); /* nothing loaded (the first block refused): released */
    kvix__ix_add_totals(idx, &r);
    return rc;
}

size_t kvix__ix_count_blocks(kvix_index *idx, size_t *parts)
{
    kvix__ix_parts_quiesce(idx); /* no departed worker's slot table goes meanwhile */
    ctab *t = __atomic_load_n(&idx->parts.t, __ATOMIC_ACQUIRE);
    size_t blocks = 0;
    *parts = 0;
    for (size_t i = 0; t && i < t->cap; i++) {
        part *p = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (!p)
            continue;
        ++*parts;
        uint32_t ns = part_nslots(p);
        for (uint32_t s = 0; s < ns; s++) {
            wstate *w = slot_ws(p, s);
            if (w)
                blocks += kvix_ix_bm_size(&w->blocks);
        }
    }
    return blocks;
}

/* worker's first active state in p (through its dp ranks), or NULL. */
static const wstate *first_active(const part *p, uint64_t worker)
{
    for (const wstate *w = kvix__ix_ws_first(p, worker); w;
         w = __atomic_load_n(&w->next_dp, __ATOMIC_ACQUIRE))
        if (ws_active(w))
            return w;
    return NULL;
}

/* Distinct worker ids with state, without allocating (when the set of ids
 * seen could not be had): a state counts when it is its worker's first
 * active one in its partition and no earlier partition of the table has the
 * worker. Partitions x workers lookups: only out of memory. */
size_t kvix__ix_instances_without_memory(const kvix_index *idx)
{
    const ctab *t = __atomic_load_n(&idx->parts.t, __ATOMIC_ACQUIRE);
    size_t n = 0;
    for (size_t i = 0; t && i < t->cap; i++) {
        part *p = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (!p)
            continue;
        uint32_t ns = part_nslots(p);
        for (uint32_t s = 0; s < ns; s++) {
            wstate *w = slot_ws(p, s);
            if (!w || !ws_active(w) || first_active(p, w->worker) != w)
                continue;
            int seen = 0;
            for (size_t j = 0; j < i && !seen; j++) {
                part *q = __atomic_load_n(&t->v[j], __ATOMIC_ACQUIRE);
                seen = q && first_active(q, w->worker);
            }
            n += !seen;
        }
    }
    return n;
}

void kvix_index_stats_get(kvix_index *idx, kvix_index_stats *out)
{
    memset(out, 0, sizeof *out);
    kvix__ix_parts_quiesce(idx); /* what departed workers left is given back first */
    /* The table itself, not a copy (kvix__ix_parts_list): the index is quiet,
     * and a function that cannot fail must not let an allocation decide its
     * counts (a failed copy read as an empty index, and a snapshot load then
     * as a corrupt file); only instances needs memory, and is counted
     * another way without it. */
    ctab *t = __atomic_load_n(&idx->parts.t, __ATOMIC_ACQUIRE);
    out->bytes = sizeof *idx + kvix__ix_cmap_memory(&idx->parts);
    for (unsigned i = 0; i < idx->nq; i++) {
        const wqueue *q = &idx->q[i];
        out->bytes += sizeof *q + q->cap * (sizeof *q->ring + sizeof *q->tags);
        for (size_t j = 0; j < q->cap; j++)
            out->bytes += q->ring[j].cap_blocks * sizeof(kvix_block) +
                          q->ring[j].cap_hashes * sizeof(uint64_t);
    }
    kvix_hmap ids; /* worker ids seen: a worker of several ranks or partitions counts once */
    kvix__hmap_init(&ids, 1, 0);
    int ids_ok = 1;
    for (size_t i = 0; t && i < t->cap; i++) {
        part *p = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (!p)
            continue;
        out->partitions++;
        void *pb = __atomic_load_n(&p->be, __ATOMIC_ACQUIRE);
        size_t be = pb ? p->ops->memory(pb) : 0;
        out->backend_bytes += be;
        out->unique_blocks += pb ? p->ops->unique_blocks(pb) : 0;
        out->bytes += be + sizeof *p + strlen(p->model) + strlen(p->tenant) + 2 +
                      kvix__ix_cmap_memory(&p->workers) + kvix__ix_cmap_memory(&p->wheads) +
                      p->wheads.n * sizeof(whead) +
                      /* free, order, fresh, spare; the ranking's keys */
                      p->fcap * (4 * sizeof *p->free_slots + sizeof *p->rkeys);
        uint32_t ns = part_nslots(p);
        out->bytes += (ns + SLOT_CHUNK - 1) / SLOT_CHUNK * SLOT_CHUNK * sizeof(srec) +
                      (p->chunks ? SLOT_CHUNKS * sizeof *p->chunks : 0);
        /* pairs with an eid and no block: they have state, in p->eids */
        pthread_mutex_lock(&p->lock);
        out->workers += kvix_hmap_size(&p->eids);
        out->bytes += kvix__hmap_memory(&p->eids);
        size_t it = 0;
        const uint64_t *key;
        while (ids_ok && kvix__hmap_next(&p->eids, &it, &key))
            if (!kvix__hmap_put(&ids, &key[0], NULL))
                ids_ok = 0;
        pthread_mutex_unlock(&p->lock);
        for (uint32_t s = 0; s < ns; s++) {
            wstate *w = slot_ws(p, s);
            if (!w)
                continue;
            out->workers += ws_active(w);
            if (ws_active(w) && ids_ok && !kvix__hmap_put(&ids, &w->worker, NULL))
                ids_ok = 0;
            out->blocks += kvix_ix_bm_size(&w->blocks);
            size_t fb = sizeof *w + kvix__ix_bm_memory(&w->blocks) + ws_side_memory(w) +
                        kvix__ix_xr_memory(w) +
                        kvix__ix_grp_memory(w);
            out->bytes += fb;
        }
    }
    out->instances = ids_ok ? kvix_hmap_size(&ids) : kvix__ix_instances_without_memory(idx);
    kvix__hmap_release(&ids);
}
