/* Walking the index (snapshots, dumps), restoring it, and its stats. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "index_front_int.h"

static int part_cmp(const void *a, const void *b)
{
    const part *x = *(const part *const *)a, *y = *(const part *const *)b;
    int c = strcmp(x->model, y->model);
    return c ? c : strcmp(x->tenant, y->tenant);
}

static int ws_cmp(const void *a, const void *b)
{
    const wstate *x = *(const wstate *const *)a, *y = *(const wstate *const *)b;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return x->dp < y->dp ? -1 : x->dp > y->dp;
}

/* A pair without blocks: its eid alone (p->eids). */
typedef struct eid_only {
    uint64_t worker, eid;
    uint32_t dp;
} eid_only;

static int eo_cmp(const void *a, const void *b)
{
    const eid_only *x = a, *y = b;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return x->dp < y->dp ? -1 : x->dp > y->dp;
}

/* p's eid-only pairs, sorted; NULL with *n 0 when there are none, NULL
 * with *n > 0 when memory ran out. */
static eid_only *eids_sorted(part *p, size_t *n)
{
    pthread_mutex_lock(&p->lock);
    *n = kvix_hmap_size(&p->eids);
    eid_only *v = *n ? malloc(*n * sizeof *v) : NULL;
    size_t it = 0, k = 0;
    const uint64_t *key;
    const eidrec *e;
    while (v && (e = kvix_hmap_next(&p->eids, &it, &key)))
        v[k++] = (eid_only){key[0], e->eid, (uint32_t)key[1]};
    pthread_mutex_unlock(&p->lock);
    if (v && k > 1)
        qsort(v, k, sizeof *v, eo_cmp);
    return v;
}

static int info_cmp(const void *a, const void *b)
{
    const kvix_block_info *x = a, *y = b;
    if (x->position != y->position)
        return x->position < y->position ? -1 : 1;
    return x->engine < y->engine ? -1 : x->engine > y->engine;
}
int kvix_index_foreach(kvix_index *idx, kvix_foreach_fn fn, void *ctx)
{
    kvix_ix_parts_quiesce(idx); /* no departed worker's slot table goes meanwhile */
    size_t np;
    part **ps = kvix_ix_parts_list(idx, &np);
    if (!ps)
        return KVIX_ENOMEM;
    if (np > 1)
        qsort(ps, np, sizeof *ps, part_cmp);
    wstate **ws = NULL;
    kvix_block_info *info = NULL;
    size_t info_cap = 0;
    int rc = 0;
    for (size_t i = 0; i < np && !rc; i++) {
        part *p = ps[i];
        uint32_t ns = part_nslots(p), nw = 0;
        wstate **nws = realloc(ws, (ns ? ns : 1) * sizeof *ws);
        if (!nws) {
            rc = KVIX_ENOMEM;
            break;
        }
        ws = nws;
        for (uint32_t s = 0; s < ns; s++) {
            wstate *w = slot_ws(p, s);
            /* a state kept only for its KV cache groups' kinds holds neither a
             * block nor an eid: kvix_index_groups_save says it */
            if (w && (w->has_eid || kvix_ix_bm_size(&w->blocks)))
                ws[nw++] = w;
        }
        if (nw > 1)
            qsort(ws, nw, sizeof *ws, ws_cmp);
        size_t ne, ei = 0;
        eid_only *eo = eids_sorted(p, &ne);
        if (ne && !eo) {
            rc = KVIX_ENOMEM;
            break;
        }
        /* A partition that holds nothing is not walked (not saved, not
         * dumped): clears that emptied it left it in the index, but a
         * restart from the snapshot does not bring it back, so the
         * partitions' limit does not outlive the run. */
        for (uint32_t j = 0; (j < nw || ei < ne) && !rc;) {
            if (ei < ne && (j == nw || eo[ei].worker < ws[j]->worker ||
                            (eo[ei].worker == ws[j]->worker && eo[ei].dp < ws[j]->dp))) {
                rc = fn(ctx, p->model, p->tenant, p->bs, eo[ei].worker, eo[ei].dp, 1,
                        eo[ei].eid, NULL, 0);
                ei++;
                continue;
            }
            wstate *w = ws[j++];
            size_t nb = kvix_ix_bm_size(&w->blocks), k = 0, it = 0;
            if (nb > info_cap) {
                kvix_block_info *ni = realloc(info, nb * sizeof *info);
                if (!ni) {
                    rc = KVIX_ENOMEM;
                    break;
                }
                info = ni;
                info_cap = nb;
            }
            uint64_t engine;
            bent e;
            while ((e = kvix_ix_bm_next(&w->blocks, &it, &engine))) {
                kvix_block_info *b = &info[k++];
                kvix_binfo nd;
                p->ops->info(part_be(p), bent_node(e), &nd);
                b->position = nd.pos;
                b->local = nd.local;
                b->engine = engine;
                b->parent = kvix_ix_parent_engine(w, engine, &nd);
                b->tiers = bent_tiers(e);
                b->canon = nd.canon;
                b->parent_canon = nd.parent_canon;
            }
            if (nb > 1)
                qsort(info, nb, sizeof *info, info_cmp);
            rc = fn(ctx, p->model, p->tenant, p->bs, w->worker, w->dp, w->has_eid, w->eid, info,
                    nb);
        }
        free(eo);
    }
    free(info);
    free(ws);
    free(ps);
    return rc;
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
    if ((rc = kvix_ix_part_get(idx, model, tenant, bs, &p, err)))
        return rc;
    if (worker > KVIX_WORKER_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "worker %" PRIu64 " out of range (0 to %" PRId64 ")",
                            worker, (int64_t)KVIX_WORKER_MAX);
    if (!(w = kvix_ix_ws_find(p, worker, dp))) /* no blocks: no state, its eid alone */
        return kvix_ix_eid_set(p, worker, dp, eid, err);
    w->has_eid = 1;
    w->eid = eid;
    return KVIX_OK;
}

int kvix_index_load(kvix_index *idx, const char *model, const char *tenant, uint32_t bs,
                    uint64_t worker, uint32_t dp, const kvix_block_info *blocks, size_t n,
                    kvix_err *err)
{
    part *p;
    wstate *w;
    int rc;
    if ((rc = kvix_ix_part_get(idx, model, tenant, bs, &p, err)))
        return rc;
    if (n == 0) /* the partition alone (UINT64_MAX: one without workers) */
        return KVIX_OK;
    /* blocks stored: the partition's hashing is known, plain unless the KV
     * cache group state says EAGLE (kvix_index_groups_load) */
    uint8_t unknown = PART_HASH_UNKNOWN;
    __atomic_compare_exchange_n(&p->hashing, &unknown, PART_HASH_PLAIN, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
    if ((rc = kvix_ix_ws_get(p, worker, dp, &w, err)))
        return rc;
    if (kvix_ix_bm_reserve(&w->blocks, kvix_ix_bm_size(&w->blocks) + n))
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu blocks", n);
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
                rc = kvix_ix_store_block(w, b->engine, b->position, b->local, canon, b->parent, pcanon, t,
                                 NULL, &r, err);
    }
    kvix_ix_publish_held(w);
    kvix_ix_ws_done(w); /* nothing loaded (the first block refused): released */
    kvix_ix_add_totals(idx, &r);
    return rc;
}

size_t kvix_ix_count_blocks(kvix_index *idx, size_t *parts)
{
    kvix_ix_parts_quiesce(idx); /* no departed worker's slot table goes meanwhile */
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
    for (const wstate *w = kvix_ix_ws_first(p, worker); w;
         w = __atomic_load_n(&w->next_dp, __ATOMIC_ACQUIRE))
        if (ws_active(w))
            return w;
    return NULL;
}

/* Distinct worker ids with state, without allocating (when the set of ids
 * seen could not be had): a state counts when it is its worker's first
 * active one in its partition and no earlier partition of the table has the
 * worker. Partitions x workers lookups: only out of memory. */
size_t kvix_ix_instances_without_memory(const kvix_index *idx)
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
    kvix_ix_parts_quiesce(idx); /* what departed workers left is given back first */
    /* The table itself, not a copy (kvix_ix_parts_list): the index is quiet,
     * and a function that cannot fail must not let an allocation decide its
     * counts (a failed copy read as an empty index, and a snapshot load then
     * as a corrupt file); only instances needs memory, and is counted
     * another way without it. */
    ctab *t = __atomic_load_n(&idx->parts.t, __ATOMIC_ACQUIRE);
    out->bytes = sizeof *idx + kvix_ix_cmap_memory(&idx->parts);
    for (unsigned i = 0; i < idx->nq; i++) {
        const wqueue *q = &idx->q[i];
        out->bytes += sizeof *q + q->cap * (sizeof *q->ring + sizeof *q->tags);
        for (size_t j = 0; j < q->cap; j++)
            out->bytes += q->ring[j].cap_blocks * sizeof(kvix_block) +
                          q->ring[j].cap_hashes * sizeof(uint64_t);
    }
    kvix_hmap ids; /* worker ids seen: a worker of several ranks or partitions counts once */
    kvix_hmap_init(&ids, 1, 0);
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
                      kvix_ix_cmap_memory(&p->workers) + kvix_ix_cmap_memory(&p->wheads) +
                      p->wheads.n * sizeof(whead) +
                      /* free, order, fresh, spare; the ranking's keys */
                      p->fcap * (4 * sizeof *p->free_slots + sizeof *p->rkeys);
        uint32_t ns = part_nslots(p);
        out->bytes += (ns + SLOT_CHUNK - 1) / SLOT_CHUNK * SLOT_CHUNK * sizeof(srec) +
                      (p->chunks ? SLOT_CHUNKS * sizeof *p->chunks : 0);
        /* pairs with an eid and no block: they have state, in p->eids */
        pthread_mutex_lock(&p->lock);
        out->workers += kvix_hmap_size(&p->eids);
        out->bytes += kvix_hmap_memory(&p->eids);
        size_t it = 0;
        const uint64_t *key;
        while (ids_ok && kvix_hmap_next(&p->eids, &it, &key))
            if (!kvix_hmap_put(&ids, &key[0], NULL))
                ids_ok = 0;
        pthread_mutex_unlock(&p->lock);
        for (uint32_t s = 0; s < ns; s++) {
            wstate *w = slot_ws(p, s);
            if (!w)
                continue;
            out->workers += ws_active(w);
            if (ws_active(w) && ids_ok && !kvix_hmap_put(&ids, &w->worker, NULL))
                ids_ok = 0;
            out->blocks += kvix_ix_bm_size(&w->blocks);
            size_t fb = sizeof *w + kvix_ix_bm_memory(&w->blocks) + ws_side_memory(w) +
                        kvix_ix_xr_memory(w) +
                        kvix_ix_grp_memory(w);
            out->bytes += fb;
        }
    }
    out->instances = ids_ok ? kvix_hmap_size(&ids) : kvix_ix_instances_without_memory(idx);
    kvix_hmap_release(&ids);
}
