/* The index front end: partitions, per-(worker, dp) state and engine-hash
 * bookkeeping, canonical hashing, queries, and the writer pool. Backends
 * (lib/index_int.h) hold the shared query-side structure.
 *
 * Concurrency design. Readers (queries) never lock in the front end:
 *  - partitions and (worker, dp) states live in insert-only tables of
 *    pointers; an insertion (rare: a new partition or worker) takes a mutex,
 *    fills a slot with a release store, and a growing table is copied and
 *    published while the old copy stays allocated until kvix_index_free.
 *    Nothing a reader can reach is ever freed while the index lives, so no
 *    reclamation scheme is needed;
 *  - slot numbers are dense per partition and never reused: a (worker, dp)
 *    keeps its slot after its blocks are removed, so a query that sees a
 *    slot in a backend always maps it to the right (worker, dp);
 *  - a (worker, dp)'s engine-hash map is touched only by that worker's
 *    writer (the caller's contract), so it has no lock.
 *
 * Block bookkeeping per (worker, dp):
 *  - blocks: engine hash -> {position, local, parent engine hash, parent
 *    canonical, tier mask} (the block's canonical hash follows from the last
 *    two: recomputed when needed, 8 bytes a block less);
 *  - canon: (position, canonical) -> per-tier count of engine hashes holding
 *    it. Two engine hashes may name the same canonical block (vLLM salts its
 *    hashes with things the local hash does not see), and a backend must hear
 *    about a (block, tier) only on its first arrival and last departure.
 *    Keyed by the canonical hash alone (16-byte entries rather than 24); the
 *    same canonical hash at a second position (only crafted input does that:
 *    a local at position 0 equal to a rolling hash) goes to an overflow map
 *    keyed by both. */
#include "kvix/index.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "hashmap_int.h"
#include "index_int.h"

/* ---- insert-only table of pointers, lock-free for readers ------------- */

typedef struct ctab {
    struct ctab *retired; /* older copies, freed with the index */
    size_t cap;
    void *v[];
} ctab;

typedef struct cmap {
    ctab *t;  /* published with release stores */
    size_t n; /* writers only, under their lock */
} cmap;

/* Every element starts with its 64-bit hash. */
typedef int (*cmatch_fn)(const void *elem, const void *key);

static inline uint64_t elem_hash(const void *e) { return *(const uint64_t *)e; }

static void *cmap_find(const cmap *m, uint64_t h, cmatch_fn match, const void *key)
{
    ctab *t = __atomic_load_n(&m->t, __ATOMIC_ACQUIRE);
    if (!t)
        return NULL;
    size_t mask = t->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        void *e = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (!e)
            return NULL;
        if (elem_hash(e) == h && match(e, key))
            return e;
    }
}

static void ctab_put(ctab *t, void *e)
{
    size_t mask = t->cap - 1, i = elem_hash(e) & mask;
    while (t->v[i])
        i = (i + 1) & mask;
    __atomic_store_n(&t->v[i], e, __ATOMIC_RELEASE);
}

/* Under the writers' lock. */
static int cmap_insert(cmap *m, void *e)
{
    ctab *t = m->t;
    if (!t || (m->n + 1) * 2 > t->cap) {
        size_t cap = t ? t->cap * 2 : 16;
        ctab *nt = calloc(1, sizeof *nt + cap * sizeof nt->v[0]);
        if (!nt)
            return -1;
        nt->cap = cap;
        for (size_t i = 0; t && i < t->cap; i++)
            if (t->v[i])
                ctab_put(nt, t->v[i]);
        nt->retired = t;
        __atomic_store_n(&m->t, nt, __ATOMIC_RELEASE);
        t = nt;
    }
    ctab_put(t, e);
    m->n++;
    return 0;
}

static size_t cmap_memory(const cmap *m)
{
    size_t b = 0;
    for (const ctab *t = m->t; t; t = t->retired)
        b += sizeof *t + t->cap * sizeof t->v[0];
    return b;
}

static void cmap_release(cmap *m, void (*free_elem)(void *))
{
    ctab *t = m->t;
    if (t && free_elem)
        for (size_t i = 0; i < t->cap; i++)
            if (t->v[i])
                free_elem(t->v[i]);
    while (t) {
        ctab *r = t->retired;
        free(t);
        t = r;
    }
    m->t = NULL;
    m->n = 0;
}

/* ---- partitions and (worker, dp) states ------------------------------- */

#define SLOT_CHUNK 256u
#define SLOT_CHUNKS (KVIX_SLOTS_MAX / SLOT_CHUNK)

typedef struct bent { /* one block a (worker, dp) holds; key: engine hash */
    uint64_t local, parent, parent_canon;
    uint32_t pos;
    uint8_t tiers;
} bent;

static inline uint64_t canon_of(const bent *e)
{
    return e->pos ? kvix_hash_seq_next(e->parent_canon, e->local) : e->local;
}

typedef struct cref { /* key: canonical; or (position, canonical) in the overflow */
    uint32_t pos;
    uint8_t n[KVIX_MEDIUM_COUNT]; /* engine hashes holding it, per tier */
} cref;

#define CREF_MAX UINT8_MAX

struct part;

typedef struct wstate {
    uint64_t h;
    uint64_t worker;
    uint32_t dp, slot;
    struct part *p;
    kvix_hmap blocks; /* engine hash -> bent */
    kvix_hmap canon;  /* canon -> cref */
    kvix_hmap canon2; /* (pos, canon) -> cref, when canon is taken at another pos */
    int has_eid;
    uint64_t eid;
} wstate;

typedef struct part {
    uint64_t h;
    char *model, *tenant;
    uint32_t bs;
    const kvix_backend_ops *ops;
    void *be;
    pthread_mutex_t lock; /* registration of new (worker, dp) */
    cmap workers;
    uint32_t nslots;                  /* atomic */
    uint32_t depth;                   /* atomic: 1 + the deepest position ever stored */
    wstate **chunks[SLOT_CHUNKS];     /* atomic pointers; slot -> state */
} part;

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
    uint64_t tot_stored, tot_dup, tot_removed, tot_unknown; /* atomic */
    wqueue *q;
    unsigned nq;
};

typedef struct part_key {
    const char *model, *tenant;
} part_key;

static uint64_t part_hash(const char *model, const char *tenant)
{
    uint64_t seed = XXH3_64bits(tenant, strlen(tenant));
    return XXH3_64bits_withSeed(model, strlen(model), seed);
}

static int part_match(const void *e, const void *key)
{
    const part *p = e;
    const part_key *k = key;
    return strcmp(p->model, k->model) == 0 && strcmp(p->tenant, k->tenant) == 0;
}

static part *part_find(const kvix_index *idx, const char *model, const char *tenant)
{
    part_key k = {model, tenant};
    return cmap_find(&idx->parts, part_hash(model, tenant), part_match, &k);
}

typedef struct ws_key {
    uint64_t worker;
    uint32_t dp;
} ws_key;

static uint64_t ws_hash(uint64_t worker, uint32_t dp)
{
    return kvix_mix64(worker ^ kvix_mix64((uint64_t)dp + UINT64_C(0x9e3779b97f4a7c15)));
}

static int ws_match(const void *e, const void *key)
{
    const wstate *w = e;
    const ws_key *k = key;
    return w->worker == k->worker && w->dp == k->dp;
}

static wstate *ws_find(const part *p, uint64_t worker, uint32_t dp)
{
    ws_key k = {worker, dp};
    return cmap_find(&p->workers, ws_hash(worker, dp), ws_match, &k);
}

static uint32_t part_nslots(const part *p)
{
    return __atomic_load_n(&p->nslots, __ATOMIC_ACQUIRE);
}

static wstate *slot_ws(const part *p, uint32_t slot)
{
    if (slot >= part_nslots(p))
        return NULL;
    wstate **c = __atomic_load_n(&p->chunks[slot / SLOT_CHUNK], __ATOMIC_ACQUIRE);
    return c ? __atomic_load_n(&c[slot % SLOT_CHUNK], __ATOMIC_ACQUIRE) : NULL;
}

static void ws_free(void *e)
{
    wstate *w = e;
    kvix_hmap_release(&w->blocks);
    kvix_hmap_release(&w->canon);
    kvix_hmap_release(&w->canon2);
    free(w);
}

static void part_free(void *e)
{
    part *p = e;
    cmap_release(&p->workers, ws_free);
    for (unsigned i = 0; i < SLOT_CHUNKS; i++)
        free(p->chunks[i]);
    if (p->be)
        p->ops->destroy(p->be);
    pthread_mutex_destroy(&p->lock);
    free(p->model);
    free(p->tenant);
    free(p);
}

/* Queries need not hash past the deepest position ever stored. Raised before
 * the blocks reach the backend, so a query that can see them can reach them. */
static void raise_depth(part *p, uint32_t depth)
{
    uint32_t d = __atomic_load_n(&p->depth, __ATOMIC_RELAXED);
    while (d < depth &&
           !__atomic_compare_exchange_n(&p->depth, &d, depth, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
        ;
}

static int check_name(const char *s, const char *what, kvix_err *err)
{
    if (!s)
        return kvix_err_set(err, KVIX_EINVAL, "no %s name", what);
    if (strnlen(s, KVIX_NAME_MAX) >= KVIX_NAME_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%s name longer than %d bytes", what,
                            KVIX_NAME_MAX - 1);
    return KVIX_OK;
}

static int bs_mismatch(const part *p, uint32_t bs, kvix_err *err)
{
    return kvix_err_set(err, KVIX_EBLOCKSIZE,
                        "block size %" PRIu32 " differs from %" PRIu32
                        " of partition model \"%s\" tenant \"%s\"",
                        bs, p->bs, p->model, p->tenant);
}

/* The partition (model, tenant), created with block size bs if absent. */
static int part_get(kvix_index *idx, const char *model, const char *tenant, uint32_t bs,
                    part **out, kvix_err *err)
{
    int rc;
    if ((rc = check_name(model, "model", err)) || (rc = check_name(tenant, "tenant", err)))
        return rc;
    part *p = part_find(idx, model, tenant);
    if (!p) {
        if (bs == 0 || bs > KVIX_BS_MAX)
            return kvix_err_set(err, KVIX_ERANGE, "block size %" PRIu32 " out of range 1..%d",
                                bs, KVIX_BS_MAX);
        pthread_mutex_lock(&idx->lock);
        p = part_find(idx, model, tenant);
        if (!p && idx->parts.n >= KVIX_INDEX_PARTITIONS_MAX) {
            pthread_mutex_unlock(&idx->lock);
            return kvix_err_set(err, KVIX_ELIMIT, "more than %u partitions",
                                KVIX_INDEX_PARTITIONS_MAX);
        }
        if (!p) {
            rc = KVIX_ENOMEM;
            p = calloc(1, sizeof *p);
            if (p) {
                p->h = part_hash(model, tenant);
                p->model = strdup(model);
                p->tenant = strdup(tenant);
                p->bs = bs;
                p->ops = idx->ops;
                pthread_mutex_init(&p->lock, NULL);
                if (p->model && p->tenant) {
                    p->be = p->ops->create(&idx->opts, err);
                    rc = p->be ? KVIX_OK : err ? err->code : KVIX_ENOMEM;
                    if (!rc && cmap_insert(&idx->parts, p))
                        rc = KVIX_ENOMEM;
                }
                if (rc) {
                    part_free(p);
                    p = NULL;
                }
            }
            if (rc) {
                pthread_mutex_unlock(&idx->lock);
                return rc == KVIX_ENOMEM
                           ? kvix_err_set(err, KVIX_ENOMEM, "out of memory for a partition")
                           : rc;
            }
        }
        pthread_mutex_unlock(&idx->lock);
    }
    if (bs && p->bs != bs)
        return bs_mismatch(p, bs, err);
    *out = p;
    return KVIX_OK;
}

/* The state of (worker, dp) in p, registered with the next slot if absent. */
static int ws_get(part *p, uint64_t worker, uint32_t dp, wstate **out, kvix_err *err)
{
    wstate *w = ws_find(p, worker, dp);
    if (w) {
        *out = w;
        return KVIX_OK;
    }
    int rc = KVIX_OK;
    pthread_mutex_lock(&p->lock);
    w = ws_find(p, worker, dp);
    if (!w) {
        uint32_t slot = p->nslots;
        if (slot >= KVIX_SLOTS_MAX) {
            rc = kvix_err_set(err, KVIX_ELIMIT,
                              "more than %u (worker, dp) in partition model \"%s\" tenant \"%s\"",
                              KVIX_SLOTS_MAX, p->model, p->tenant);
            goto out;
        }
        wstate **c = p->chunks[slot / SLOT_CHUNK];
        if (!c) {
            c = calloc(SLOT_CHUNK, sizeof *c);
            if (!c)
                goto nomem;
            __atomic_store_n(&p->chunks[slot / SLOT_CHUNK], c, __ATOMIC_RELEASE);
        }
        w = calloc(1, sizeof *w);
        if (!w)
            goto nomem;
        w->h = ws_hash(worker, dp);
        w->worker = worker;
        w->dp = dp;
        w->slot = slot;
        w->p = p;
        kvix_hmap_init(&w->blocks, 1, sizeof(bent));
        kvix_hmap_init(&w->canon, 1, sizeof(cref));
        kvix_hmap_init(&w->canon2, 2, sizeof(cref));
        if (cmap_insert(&p->workers, w)) {
            free(w);
            goto nomem;
        }
        __atomic_store_n(&c[slot % SLOT_CHUNK], w, __ATOMIC_RELEASE);
        __atomic_store_n(&p->nslots, slot + 1, __ATOMIC_RELEASE);
    }
    *out = w;
out:
    pthread_mutex_unlock(&p->lock);
    return rc;
nomem:
    pthread_mutex_unlock(&p->lock);
    return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a worker");
}

/* ---- block bookkeeping ------------------------------------------------ */

/* The count of (pos, canon), or NULL; *over: found in the overflow map. */
static cref *cref_get(wstate *w, uint32_t pos, uint64_t canon, int *over)
{
    cref *c = kvix_hmap_get(&w->canon, &canon);
    *over = 0;
    if (c && c->pos == pos)
        return c;
    uint64_t key[2] = {pos, canon};
    *over = 1;
    return kvix_hmap_size(&w->canon2) ? kvix_hmap_get(&w->canon2, key) : NULL;
}

static void cref_del(wstate *w, uint32_t pos, uint64_t canon, int over)
{
    uint64_t key[2] = {pos, canon};
    if (over)
        kvix_hmap_del(&w->canon2, key);
    else
        kvix_hmap_del(&w->canon, &canon);
}

static int cref_empty(const cref *c)
{
    for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
        if (c->n[t])
            return 0;
    return 1;
}

static int tier_ref(wstate *w, uint32_t pos, uint64_t local, uint64_t canon, uint64_t pcanon,
                    unsigned tier, kvix_err *err)
{
    int over, inserted = 0;
    cref *c = cref_get(w, pos, canon, &over);
    if (!c) {
        c = kvix_hmap_put(&w->canon, &canon, &inserted);
        if (c && !inserted) { /* canon taken at another position */
            uint64_t key[2] = {pos, canon};
            c = kvix_hmap_put(&w->canon2, key, &inserted);
            over = 1;
        }
        if (!c)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a block");
        c->pos = pos;
    }
    if (c->n[tier] == CREF_MAX)
        return kvix_err_set(err, KVIX_ELIMIT,
                            "more than %u engine hashes for one block of worker %" PRIu64,
                            CREF_MAX, w->worker);
    if (c->n[tier]++ == 0) {
        struct part *p = w->p;
        int rc = p->ops->add(p->be, pos, local, canon, pcanon, w->slot, tier, err);
        if (rc) {
            c->n[tier]--;
            if (cref_empty(c))
                cref_del(w, pos, canon, over);
            return rc;
        }
    }
    return KVIX_OK;
}

static void tier_unref(wstate *w, const bent *e, unsigned tier)
{
    uint64_t canon = canon_of(e);
    int over;
    cref *c = cref_get(w, e->pos, canon, &over);
    if (!c || !c->n[tier])
        return; /* cannot happen: every held tier was counted */
    if (--c->n[tier] == 0) {
        struct part *p = w->p;
        p->ops->del(p->be, e->pos, e->local, canon, e->parent_canon, w->slot, tier);
        if (cref_empty(c))
            cref_del(w, e->pos, canon, over);
    }
}

static void untier_all(wstate *w, const bent *e)
{
    for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
        if (e->tiers & (1u << t))
            tier_unref(w, e, t);
}

/* Whether e sits at (pos, local, parent canonical): the same canonical block
 * without rehashing. */
static inline int same_place(const bent *e, uint32_t pos, uint64_t local, uint64_t pcanon)
{
    return e->pos == pos && e->local == local && e->parent_canon == (pos ? pcanon : 0);
}

/* w holds engine at (pos, canon) in tier. An engine hash names one block per
 * worker: a store of a held hash at another place moves it there. */
static int store_block(wstate *w, uint64_t engine, uint32_t pos, uint64_t local, uint64_t canon,
                       uint64_t parent, uint64_t pcanon, unsigned tier, kvix_apply_result *r,
                       kvix_err *err)
{
    int rc, inserted = 0;
    bent *e = kvix_hmap_put(&w->blocks, &engine, &inserted); /* one probe, new or not */
    if (!e)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a block");
    if (!inserted && same_place(e, pos, local, pcanon)) {
        if (e->tiers & (1u << tier)) {
            r->duplicate++;
            return KVIX_OK;
        }
        if ((rc = tier_ref(w, pos, e->local, canon, e->parent_canon, tier, err)))
            return rc;
        e->tiers |= (uint8_t)(1u << tier);
        r->stored++;
        return KVIX_OK;
    }
    if (!inserted)
        untier_all(w, e);
    e->pos = pos;
    e->local = local;
    e->parent = pos ? parent : 0;
    e->parent_canon = pos ? pcanon : 0;
    e->tiers = 0;
    if ((rc = tier_ref(w, pos, local, canon, e->parent_canon, tier, err))) {
        kvix_hmap_del(&w->blocks, &engine);
        return rc;
    }
    e->tiers = (uint8_t)(1u << tier);
    r->stored++;
    return KVIX_OK;
}

static void remove_hash(wstate *w, uint64_t engine, unsigned tier, kvix_apply_result *r)
{
    bent *e = kvix_hmap_get(&w->blocks, &engine);
    if (!e || !(e->tiers & (1u << tier))) {
        r->unknown++;
        return;
    }
    tier_unref(w, e, tier);
    e->tiers &= (uint8_t)~(1u << tier);
    if (!e->tiers)
        kvix_hmap_del(&w->blocks, &engine);
    r->removed++;
}

static void clear_ws(wstate *w, kvix_apply_result *r)
{
    size_t it = 0;
    const bent *e;
    while ((e = kvix_hmap_next(&w->blocks, &it, NULL)))
        untier_all(w, e);
    r->removed += (uint32_t)kvix_hmap_size(&w->blocks);
    kvix_hmap_release(&w->blocks);
    kvix_hmap_release(&w->canon);
    kvix_hmap_release(&w->canon2);
}

/* ---- events ----------------------------------------------------------- */

static void record_eid(wstate *w, const kvix_event *ev)
{
    if (w && ev->has_eid) {
        w->has_eid = 1;
        w->eid = ev->eid;
    }
}

static int apply_stored(kvix_index *idx, const kvix_event *ev, kvix_apply_result *r,
                        kvix_err *err)
{
    if (ev->bs == 0 || ev->bs > KVIX_BS_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "block size %" PRIu32 " out of range 1..%d",
                            ev->bs, KVIX_BS_MAX);
    if (ev->nblocks > KVIX_EVENT_BLOCKS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%zu blocks in one event (limit %d)",
                            ev->nblocks, KVIX_EVENT_BLOCKS_MAX);
    part *p = part_find(idx, ev->model, ev->tenant);
    if (p && p->bs != ev->bs)
        return bs_mismatch(p, ev->bs, err);
    wstate *w = p ? ws_find(p, ev->worker, ev->dp) : NULL;
    uint32_t pos0 = 0;
    uint64_t prev = 0, parent = 0;
    if (ev->has_parent) {
        const bent *pe = w ? kvix_hmap_get(&w->blocks, &ev->parent) : NULL;
        if (!pe)
            return kvix_err_set(err, KVIX_EPARENT,
                                "parent %016" PRIx64 " is not held by worker %" PRIu64
                                " dp %" PRIu32,
                                ev->parent, ev->worker, ev->dp);
        pos0 = pe->pos + 1;
        prev = canon_of(pe);
        parent = ev->parent;
    }
    if ((uint64_t)pos0 + ev->nblocks > KVIX_INDEX_DEPTH_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "block position %" PRIu64 " too deep (limit %u)",
                            (uint64_t)pos0 + ev->nblocks - 1, KVIX_INDEX_DEPTH_MAX - 1);
    int rc;
    if (!p && (rc = part_get(idx, ev->model, ev->tenant, ev->bs, &p, err)))
        return rc;
    if (!w && (rc = ws_get(p, ev->worker, ev->dp, &w, err)))
        return rc;
    raise_depth(p, pos0 + (uint32_t)ev->nblocks);
    for (size_t i = 0; i < ev->nblocks; i++) {
        uint32_t pos = pos0 + (uint32_t)i;
        uint64_t local = ev->blocks[i].local;
        uint64_t canon = pos == 0 ? local : kvix_hash_seq_next(prev, local);
        if ((rc = store_block(w, ev->blocks[i].seq, pos, local, canon, parent, prev,
                              (unsigned)ev->medium, r, err)))
            return rc;
        prev = canon;
        parent = ev->blocks[i].seq;
    }
    record_eid(w, ev);
    return KVIX_OK;
}

/* The state an eid-carrying removed/cleared event is recorded in: created
 * when the partition exists (or the event has a block size to create it). */
static int eid_state(kvix_index *idx, part *p, const kvix_event *ev, wstate *w, kvix_err *err)
{
    int rc;
    if (!ev->has_eid || w)
        return (record_eid(w, ev), KVIX_OK);
    if (!p && !ev->bs)
        return KVIX_OK;
    if ((!p && (rc = part_get(idx, ev->model, ev->tenant, ev->bs, &p, err))) ||
        (rc = ws_get(p, ev->worker, ev->dp, &w, err)))
        return rc;
    record_eid(w, ev);
    return KVIX_OK;
}

static int apply_removed(kvix_index *idx, const kvix_event *ev, kvix_apply_result *r,
                         kvix_err *err)
{
    if (ev->nhashes > KVIX_EVENT_BLOCKS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%zu hashes in one event (limit %d)",
                            ev->nhashes, KVIX_EVENT_BLOCKS_MAX);
    part *p = part_find(idx, ev->model, ev->tenant);
    if (p && ev->bs && p->bs != ev->bs)
        return bs_mismatch(p, ev->bs, err);
    wstate *w = p ? ws_find(p, ev->worker, ev->dp) : NULL;
    if (!w)
        r->unknown += (uint32_t)ev->nhashes;
    else
        for (size_t i = 0; i < ev->nhashes; i++)
            remove_hash(w, ev->hashes[i], (unsigned)ev->medium, r);
    return eid_state(idx, p, ev, w, err);
}

static int apply_cleared(kvix_index *idx, const kvix_event *ev, kvix_apply_result *r,
                         kvix_err *err)
{
    part *p = part_find(idx, ev->model, ev->tenant);
    if (p && ev->bs && p->bs != ev->bs)
        return bs_mismatch(p, ev->bs, err);
    wstate *w = p ? ws_find(p, ev->worker, ev->dp) : NULL;
    if (w)
        clear_ws(w, r);
    return eid_state(idx, p, ev, w, err);
}

static void add_totals(kvix_index *idx, const kvix_apply_result *r)
{
    if (r->stored)
        __atomic_fetch_add(&idx->tot_stored, r->stored, __ATOMIC_RELAXED);
    if (r->duplicate)
        __atomic_fetch_add(&idx->tot_dup, r->duplicate, __ATOMIC_RELAXED);
    if (r->removed)
        __atomic_fetch_add(&idx->tot_removed, r->removed, __ATOMIC_RELAXED);
    if (r->unknown)
        __atomic_fetch_add(&idx->tot_unknown, r->unknown, __ATOMIC_RELAXED);
}

int kvix_index_apply(kvix_index *idx, const kvix_event *ev, kvix_apply_result *res,
                     kvix_err *err)
{
    kvix_apply_result r = {0, 0, 0, 0};
    int rc;
    if (!idx || !ev)
        rc = kvix_err_set(err, KVIX_EINVAL, "no index or event");
    else if (!memchr(ev->model, 0, KVIX_NAME_MAX) || !memchr(ev->tenant, 0, KVIX_NAME_MAX))
        rc = kvix_err_set(err, KVIX_EINVAL, "model or tenant name not terminated");
    else if (ev->medium < 0 || ev->medium >= KVIX_MEDIUM_COUNT)
        rc = kvix_err_set(err, KVIX_EINVAL, "unknown medium %d", ev->medium);
    else if (ev->type == KVIX_EV_STORED)
        rc = apply_stored(idx, ev, &r, err);
    else if (ev->type == KVIX_EV_REMOVED)
        rc = apply_removed(idx, ev, &r, err);
    else if (ev->type == KVIX_EV_CLEARED)
        rc = apply_cleared(idx, ev, &r, err);
    else
        rc = kvix_err_set(err, KVIX_EINVAL, "not an event (%s)", kvix_event_type_name(ev->type));
    if (idx)
        add_totals(idx, &r);
    if (res)
        *res = r;
    return rc;
}

void kvix_index_totals(const kvix_index *idx, kvix_apply_result *out)
{
    out->stored = (uint32_t)__atomic_load_n(&idx->tot_stored, __ATOMIC_RELAXED);
    out->duplicate = (uint32_t)__atomic_load_n(&idx->tot_dup, __ATOMIC_RELAXED);
    out->removed = (uint32_t)__atomic_load_n(&idx->tot_removed, __ATOMIC_RELAXED);
    out->unknown = (uint32_t)__atomic_load_n(&idx->tot_unknown, __ATOMIC_RELAXED);
}

static int remove_workers(kvix_index *idx, uint64_t worker, int all_dp, uint32_t dp,
                          kvix_apply_result *res, kvix_err *err)
{
    kvix_apply_result r = {0, 0, 0, 0};
    (void)err;
    if (!idx)
        return kvix_err_set(err, KVIX_EINVAL, "no index");
    ctab *t = __atomic_load_n(&idx->parts.t, __ATOMIC_ACQUIRE);
    for (size_t i = 0; t && i < t->cap; i++) {
        part *p = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (!p)
            continue;
        uint32_t n = part_nslots(p);
        for (uint32_t s = 0; s < n; s++) {
            wstate *w = slot_ws(p, s);
            if (w && w->worker == worker && (all_dp || w->dp == dp)) {
                clear_ws(w, &r);
                w->has_eid = 0;
                w->eid = 0;
            }
        }
    }
    add_totals(idx, &r);
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

/* ---- queries ---------------------------------------------------------- */

void kvix_answer_init(kvix_answer *ans)
{
    memset(ans, 0, sizeof *ans);
}

void kvix_answer_release(kvix_answer *ans)
{
    free(ans->scores);
    free(ans->scratch);
    free(ans->hits);
    kvix_answer_init(ans);
}

int kvix_qhits_push(kvix_qhits *h, const kvix_qhit *hit, kvix_err *err)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        kvix_qhit *v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for query hits");
        h->v = v;
        h->cap = cap;
    }
    h->v[h->n++] = *hit;
    return KVIX_OK;
}

static int scratch_reserve(kvix_answer *ans, size_t n, kvix_err *err)
{
    if (n <= ans->scratch_cap)
        return KVIX_OK;
    size_t cap = ans->scratch_cap ? ans->scratch_cap : 64;
    while (cap < n)
        cap *= 2;
    uint64_t *v = realloc(ans->scratch, cap * sizeof *v);
    if (!v)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a query of %zu blocks", n);
    ans->scratch = v;
    ans->scratch_cap = cap;
    return KVIX_OK;
}

/* The answer order: blocks descending, then worker, then dp ascending. */
static inline int score_before(const kvix_score *x, const kvix_score *y)
{
    if (x->blocks != y->blocks)
        return x->blocks > y->blocks;
    if (x->worker != y->worker)
        return x->worker < y->worker;
    return x->dp < y->dp;
}

static void insertion_sort_scores(kvix_score *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        kvix_score x = v[i];
        size_t j = i;
        while (j > 0 && score_before(&x, &v[j - 1])) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

/* Answers often score every worker (every conversation shares the system
 * prompt's first block), and glibc's qsort calls its comparator through a
 * pointer n log n times: that was 68% of a Mooncake replay's instructions.
 * Long answers get a stable LSD radix sort on the key (dp, worker, ~blocks)
 * that skips every key byte equal across the answer (found by one OR/AND
 * pass): worker ids below 2^16, dp 0 and short matches need 2 or 3 passes.
 * tmp has room for n scores. */
#define RADIX_MIN 32

static void radix_pass(kvix_score **src, kvix_score **dst, size_t n, int field, unsigned shift)
{
    size_t count[256] = {0};
    kvix_score *s = *src, *d = *dst;
#define KEY_BYTE(x)                                                                 \
    (unsigned)(((field == 0   ? (uint64_t)(x).dp                                     \
                 : field == 1 ? (x).worker                                           \
                              : (uint64_t)(uint32_t) ~(x).blocks) >> shift) & 0xff)
    for (size_t i = 0; i < n; i++)
        count[KEY_BYTE(s[i])]++;
    size_t sum = 0;
    for (unsigned b = 0; b < 256; b++) {
        size_t c = count[b];
        count[b] = sum;
        sum += c;
    }
    for (size_t i = 0; i < n; i++)
        d[count[KEY_BYTE(s[i])]++] = s[i];
#undef KEY_BYTE
    *src = d;
    *dst = s;
}

static void sort_scores(kvix_score *v, kvix_score *tmp, size_t n)
{
    if (n < RADIX_MIN) {
        insertion_sort_scores(v, n);
        return;
    }
    uint64_t or_[3] = {0, 0, 0}, and_[3] = {~UINT64_C(0), ~UINT64_C(0), ~UINT64_C(0)};
    for (size_t i = 0; i < n; i++) {
        uint64_t k[3] = {v[i].dp, v[i].worker, (uint32_t)~v[i].blocks};
        for (int f = 0; f < 3; f++) {
            or_[f] |= k[f];
            and_[f] &= k[f];
        }
    }
    kvix_score *src = v, *dst = tmp;
    static const unsigned bytes[3] = {4, 8, 4};
    for (int f = 0; f < 3; f++)
        for (unsigned b = 0; b < bytes[f]; b++)
            if (((or_[f] ^ and_[f]) >> (8 * b)) & 0xff)
                radix_pass(&src, &dst, n, f, 8 * b);
    if (src != v)
        memcpy(v, src, n * sizeof *v);
}

/* The blocks of an n-block query that can match at all. */
static size_t query_depth(const part *p, size_t n)
{
    uint32_t d = __atomic_load_n(&p->depth, __ATOMIC_ACQUIRE);
    return n < d ? n : d;
}

/* n: already cut to query_depth; canon: scratch of n entries. */
static int query_part(part *p, const uint64_t *local, uint64_t *canon, size_t n,
                      kvix_answer *ans, kvix_err *err)
{
    if (!n)
        return KVIX_OK;
    kvix_qchain q = {local, canon, n, 0};
    kvix_qhits hits = {ans->hits, 0, ans->hits_cap};
    int rc = p->ops->query(p->be, &q, &hits, err);
    ans->hits = hits.v;
    ans->hits_cap = hits.cap;
    if (rc)
        return rc;
    /* Twice the scores: the upper half is the merge sort's buffer. */
    if (2 * hits.n > ans->cap) {
        kvix_score *s = realloc(ans->scores, 2 * hits.n * sizeof *s);
        if (!s)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu scores", hits.n);
        ans->scores = s;
        ans->cap = 2 * hits.n;
    }
    for (size_t i = 0; i < hits.n; i++) {
        const kvix_qhit *h = &hits.v[i];
        wstate *w = h->blocks ? slot_ws(p, h->slot) : NULL;
        if (!w)
            continue;
        kvix_score *s = &ans->scores[ans->nscores++];
        s->worker = w->worker;
        s->dp = w->dp;
        s->blocks = h->blocks;
        memcpy(s->tier_blocks, h->tier_blocks, sizeof s->tier_blocks);
    }
    sort_scores(ans->scores, ans->scores + ans->nscores, ans->nscores);
    return KVIX_OK;
}

static void answer_reset(kvix_answer *ans)
{
    ans->query_blocks = 0;
    ans->bs = 0;
    ans->nscores = 0;
}

int kvix_index_query(kvix_index *idx, const char *model, const char *tenant,
                     const uint64_t *local, size_t n, kvix_answer *ans, kvix_err *err)
{
    answer_reset(ans);
    if (n > KVIX_INDEX_DEPTH_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "query of %zu blocks (limit %u)", n,
                            KVIX_INDEX_DEPTH_MAX);
    ans->query_blocks = (uint32_t)n;
    part *p = part_find(idx, model ? model : "default", tenant ? tenant : "default");
    if (!p)
        return KVIX_OK;
    ans->bs = p->bs;
    n = query_depth(p, n);
    int rc = scratch_reserve(ans, n, err);
    return rc ? rc : query_part(p, local, ans->scratch, n, ans, err);
}

static int query_tokens_bs(kvix_index *idx, const char *model, const char *tenant,
                           const char *lora, uint32_t bs, const uint32_t *tokens, size_t ntokens,
                           kvix_answer *ans, kvix_err *err)
{
    answer_reset(ans);
    if (ntokens > KVIX_TOKENS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "query of %zu tokens (limit %u)", ntokens,
                            KVIX_TOKENS_MAX);
    part *p = part_find(idx, model ? model : "default", tenant ? tenant : "default");
    if (p && bs && bs != p->bs)
        return bs_mismatch(p, bs, err);
    if (p)
        bs = p->bs;
    if (!bs)
        return KVIX_OK; /* unknown partition, no block size: nothing to hash */
    size_t n = ntokens / bs;
    ans->query_blocks = (uint32_t)n;
    if (!p || !n)
        return KVIX_OK;
    ans->bs = p->bs;
    n = query_depth(p, n); /* hash no more blocks than can match */
    int rc = scratch_reserve(ans, 2 * n, err);
    if (rc)
        return rc;
    uint64_t seed = kvix_hash_lora_seed(lora, lora ? strlen(lora) : 0);
    kvix_hash_blocks(tokens, n * bs, bs, seed, ans->scratch, NULL);
    return query_part(p, ans->scratch, ans->scratch + n, n, ans, err);
}

int kvix_index_query_tokens(kvix_index *idx, const char *model, const char *tenant,
                            const char *lora, const uint32_t *tokens, size_t ntokens,
                            kvix_answer *ans, kvix_err *err)
{
    return query_tokens_bs(idx, model, tenant, lora, 0, tokens, ntokens, ans, err);
}

int kvix_index_query_event(kvix_index *idx, const kvix_event *q, kvix_answer *ans,
                           kvix_err *err)
{
    if (q->type != KVIX_EV_QUERY && q->type != KVIX_EV_NONE) {
        answer_reset(ans);
        return kvix_err_set(err, KVIX_EINVAL, "not a query (%s)", kvix_event_type_name(q->type));
    }
    if (!memchr(q->model, 0, KVIX_NAME_MAX) || !memchr(q->tenant, 0, KVIX_NAME_MAX) ||
        !memchr(q->lora, 0, KVIX_NAME_MAX)) {
        answer_reset(ans);
        return kvix_err_set(err, KVIX_EINVAL, "model, tenant or lora name not terminated");
    }
    if (q->has_tokens)
        return query_tokens_bs(idx, q->model, q->tenant, q->lora, q->bs, q->tokens, q->ntokens,
                               ans, err);
    part *p = part_find(idx, q->model, q->tenant);
    if (p && q->bs && q->bs != p->bs) {
        answer_reset(ans);
        return bs_mismatch(p, q->bs, err);
    }
    return kvix_index_query(idx, q->model, q->tenant, q->hashes, q->nhashes, ans, err);
}

uint32_t kvix_index_block_size(const kvix_index *idx, const char *model, const char *tenant)
{
    const part *p = part_find(idx, model ? model : "default", tenant ? tenant : "default");
    return p ? p->bs : 0;
}

/* ---- walking, restoring, stats ---------------------------------------- */

static int ws_active(const wstate *w)
{
    return w->has_eid || kvix_hmap_size(&w->blocks) > 0;
}

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

static int info_cmp(const void *a, const void *b)
{
    const kvix_block_info *x = a, *y = b;
    if (x->position != y->position)
        return x->position < y->position ? -1 : 1;
    return x->engine < y->engine ? -1 : x->engine > y->engine;
}

/* The partitions, in no order; *n set. Caller frees. */
static part **parts_list(const kvix_index *idx, size_t *n)
{
    ctab *t = __atomic_load_n(&idx->parts.t, __ATOMIC_ACQUIRE);
    *n = 0;
    part **v = malloc((t ? t->cap : 1) * sizeof *v);
    if (!v)
        return NULL;
    for (size_t i = 0; t && i < t->cap; i++) {
        part *p = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (p)
            v[(*n)++] = p;
    }
    return v;
}

int kvix_index_foreach(kvix_index *idx, kvix_foreach_fn fn, void *ctx)
{
    size_t np;
    part **ps = parts_list(idx, &np);
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
            if (w && ws_active(w))
                ws[nw++] = w;
        }
        if (nw > 1)
            qsort(ws, nw, sizeof *ws, ws_cmp);
        if (!nw)
            rc = fn(ctx, p->model, p->tenant, p->bs, UINT64_MAX, 0, 0, 0, NULL, 0);
        for (uint32_t j = 0; j < nw && !rc; j++) {
            wstate *w = ws[j];
            size_t nb = kvix_hmap_size(&w->blocks), k = 0, it = 0;
            if (nb > info_cap) {
                kvix_block_info *ni = realloc(info, nb * sizeof *info);
                if (!ni) {
                    rc = KVIX_ENOMEM;
                    break;
                }
                info = ni;
                info_cap = nb;
            }
            const uint64_t *key;
            const bent *e;
            while ((e = kvix_hmap_next(&w->blocks, &it, &key))) {
                kvix_block_info *b = &info[k++];
                b->position = e->pos;
                b->local = e->local;
                b->engine = key[0];
                b->parent = e->parent;
                b->tiers = e->tiers;
                b->canon = canon_of(e);
                b->parent_canon = e->parent_canon;
            }
            if (nb > 1)
                qsort(info, nb, sizeof *info, info_cmp);
            rc = fn(ctx, p->model, p->tenant, p->bs, w->worker, w->dp, w->has_eid, w->eid, info,
                    nb);
        }
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
    if ((rc = part_get(idx, model, tenant, bs, &p, err)) || (rc = ws_get(p, worker, dp, &w, err)))
        return rc;
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
    if ((rc = part_get(idx, model, tenant, bs, &p, err)) || (rc = ws_get(p, worker, dp, &w, err)))
        return rc;
    if (kvix_hmap_reserve(&w->blocks, kvix_hmap_size(&w->blocks) + n) ||
        kvix_hmap_reserve(&w->canon, kvix_hmap_size(&w->canon) + n))
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu blocks", n);
    kvix_apply_result r = {0, 0, 0, 0};
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
                rc = store_block(w, b->engine, b->position, b->local, canon, b->parent, pcanon, t,
                                 &r, err);
    }
    add_totals(idx, &r);
    return rc;
}

void kvix_index_stats_get(kvix_index *idx, kvix_index_stats *out)
{
    memset(out, 0, sizeof *out);
    size_t np;
    part **ps = parts_list(idx, &np);
    out->partitions = np;
    out->bytes = sizeof *idx + cmap_memory(&idx->parts);
    for (unsigned i = 0; i < idx->nq; i++) {
        const wqueue *q = &idx->q[i];
        out->bytes += sizeof *q + q->cap * (sizeof *q->ring + sizeof *q->tags);
        for (size_t j = 0; j < q->cap; j++)
            out->bytes += q->ring[j].cap_blocks * sizeof(kvix_block) +
                          q->ring[j].cap_hashes * sizeof(uint64_t);
    }
    for (size_t i = 0; ps && i < np; i++) {
        part *p = ps[i];
        size_t be = p->ops->memory(p->be);
        out->backend_bytes += be;
        out->unique_blocks += p->ops->unique_blocks(p->be);
        out->bytes += be + sizeof *p + strlen(p->model) + strlen(p->tenant) + 2 +
                      cmap_memory(&p->workers);
        uint32_t ns = part_nslots(p);
        out->bytes += (ns + SLOT_CHUNK - 1) / SLOT_CHUNK * SLOT_CHUNK * sizeof(wstate *);
        for (uint32_t s = 0; s < ns; s++) {
            wstate *w = slot_ws(p, s);
            if (!w)
                continue;
            out->workers += ws_active(w);
            out->blocks += kvix_hmap_size(&w->blocks);
            size_t fb = sizeof *w + kvix_hmap_memory(&w->blocks) + kvix_hmap_memory(&w->canon) +
                        kvix_hmap_memory(&w->canon2);
            out->bytes += fb;
        }
    }
    free(ps);
}

/* ---- writer pool ------------------------------------------------------ */

static void reject(kvix_index *idx, uint64_t tag, const kvix_err *err)
{
    if (idx->opts.on_reject)
        idx->opts.on_reject(idx->opts.reject_ctx, tag, err);
}

static void *writer_main(void *arg)
{
    wqueue *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->head == q->tail && !q->stop)
            pthread_cond_wait(&q->nonempty, &q->mu);
        if (q->head == q->tail)
            break;
        size_t i = q->head % q->cap;
        pthread_mutex_unlock(&q->mu);
        /* The slot at head is the writer's until head moves on. */
        kvix_err err = {0, ""};
        kvix_event *ev = &q->ring[i];
        if (kvix_index_apply(q->idx, ev, NULL, &err))
            reject(q->idx, q->tags[i], &err);
        if (ev->cap_blocks > SLOT_KEEP || ev->cap_hashes > SLOT_KEEP) {
            kvix_event_release(ev); /* one huge event does not pin its arrays */
            kvix_event_init(ev);
        }
        pthread_mutex_lock(&q->mu);
        q->head++;
        pthread_cond_broadcast(&q->progress);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void pool_stop(kvix_index *idx)
{
    for (unsigned i = 0; i < idx->nq; i++) {
        wqueue *q = &idx->q[i];
        pthread_mutex_lock(&q->mu);
        q->stop = 1;
        pthread_cond_signal(&q->nonempty);
        pthread_mutex_unlock(&q->mu);
        pthread_join(q->th, NULL);
    }
    for (unsigned i = 0; i < idx->nq; i++) {
        wqueue *q = &idx->q[i];
        for (size_t j = 0; j < q->cap; j++)
            kvix_event_release(&q->ring[j]);
        free(q->ring);
        free(q->tags);
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->nonempty);
        pthread_cond_destroy(&q->progress);
    }
    free(idx->q);
    idx->q = NULL;
    idx->nq = 0;
}

static int pool_start(kvix_index *idx, unsigned threads, kvix_err *err)
{
    idx->q = calloc(threads, sizeof *idx->q);
    if (!idx->q)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for writer threads");
    for (unsigned i = 0; i < threads; i++) {
        wqueue *q = &idx->q[i];
        q->idx = idx;
        q->cap = QUEUE_CAP;
        q->ring = calloc(q->cap, sizeof *q->ring);
        q->tags = calloc(q->cap, sizeof *q->tags);
        pthread_mutex_init(&q->mu, NULL);
        pthread_cond_init(&q->nonempty, NULL);
        pthread_cond_init(&q->progress, NULL);
        for (size_t j = 0; q->ring && j < q->cap; j++)
            kvix_event_init(&q->ring[j]);
        if (!q->ring || !q->tags || pthread_create(&q->th, NULL, writer_main, q)) {
            free(q->ring);
            free(q->tags);
            pthread_mutex_destroy(&q->mu);
            pthread_cond_destroy(&q->nonempty);
            pthread_cond_destroy(&q->progress);
            pool_stop(idx); /* the i threads already running */
            return kvix_err_set(err, KVIX_ESYS, "cannot start writer thread %u", i);
        }
        idx->nq = i + 1;
    }
    return KVIX_OK;
}

/* kvix_event_copy without the forensic tokens: the index never reads them,
 * and they may be far bigger than the rest. */
static int queue_copy(kvix_event *dst, const kvix_event *src, kvix_err *err)
{
    int rc;
    if ((rc = kvix_event_reserve_blocks(dst, src->nblocks, err)) ||
        (rc = kvix_event_reserve_hashes(dst, src->nhashes, err)))
        return rc;
    kvix_block *b = dst->blocks;
    uint64_t *h = dst->hashes;
    uint32_t *t = dst->tokens;
    size_t cb = dst->cap_blocks, ch = dst->cap_hashes, ct = dst->cap_tokens;
    *dst = *src;
    dst->blocks = b;
    dst->hashes = h;
    dst->tokens = t;
    dst->cap_blocks = cb;
    dst->cap_hashes = ch;
    dst->cap_tokens = ct;
    dst->ntokens = 0;
    dst->has_tokens = 0;
    if (src->nblocks)
        memcpy(b, src->blocks, src->nblocks * sizeof *b);
    if (src->nhashes)
        memcpy(h, src->hashes, src->nhashes * sizeof *h);
    return KVIX_OK;
}

int kvix_index_submit(kvix_index *idx, const kvix_event *ev, uint64_t tag, kvix_err *err)
{
    kvix_err e = {0, ""};
    int rc;
    if (!idx->nq) {
        rc = kvix_index_apply(idx, ev, NULL, &e);
        goto done;
    }
    if (ev->type != KVIX_EV_STORED && ev->type != KVIX_EV_REMOVED &&
        ev->type != KVIX_EV_CLEARED) {
        rc = kvix_err_set(&e, KVIX_EINVAL, "not an event (%s)", kvix_event_type_name(ev->type));
        goto done;
    }
    wqueue *q = &idx->q[kvix_mix64(ev->worker) % idx->nq];
    pthread_mutex_lock(&q->mu);
    while (q->tail - q->head == q->cap) /* full: the submitter waits, nothing is dropped */
        pthread_cond_wait(&q->progress, &q->mu);
    size_t i = q->tail % q->cap;
    pthread_mutex_unlock(&q->mu);
    /* The slot at tail is the submitter's until tail moves on. */
    rc = queue_copy(&q->ring[i], ev, &e);
    if (rc)
        goto done;
    q->tags[i] = tag;
    pthread_mutex_lock(&q->mu);
    q->tail++;
    pthread_cond_signal(&q->nonempty);
    pthread_mutex_unlock(&q->mu);
    return KVIX_OK;
done:
    if (rc) {
        reject(idx, tag, &e);
        if (err)
            *err = e;
    }
    return rc;
}

void kvix_index_sync(kvix_index *idx)
{
    for (unsigned i = 0; i < idx->nq; i++) {
        wqueue *q = &idx->q[i];
        pthread_mutex_lock(&q->mu);
        while (q->head != q->tail)
            pthread_cond_wait(&q->progress, &q->mu);
        pthread_mutex_unlock(&q->mu);
    }
}

/* ---- lifecycle -------------------------------------------------------- */

static const kvix_backend_ops *backend_ops(kvix_backend b)
{
    switch (b) {
    case KVIX_BACKEND_REFERENCE: return &kvix_backend_reference_ops;
    case KVIX_BACKEND_POSITIONAL: return &kvix_backend_positional_ops;
    case KVIX_BACKEND_RADIX: return &kvix_backend_radix_ops;
    }
    return NULL;
}

void kvix_index_opts_init(kvix_index_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->backend = KVIX_BACKEND_POSITIONAL;
    opts->binsearch = 1;
}

#define THREADS_MAX 256u

int kvix_index_new(kvix_index **out, const kvix_index_opts *opts, kvix_err *err)
{
    kvix_index_opts def;
    if (!opts) {
        kvix_index_opts_init(&def);
        opts = &def;
    }
    const kvix_backend_ops *ops = backend_ops(opts->backend);
    if (!ops)
        return kvix_err_set(err, KVIX_EINVAL, "backend %s not built",
                            kvix_backend_name(opts->backend));
    if (opts->threads > THREADS_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "%u writer threads (limit %u)", opts->threads,
                            THREADS_MAX);
    kvix_index *idx = calloc(1, sizeof *idx);
    if (!idx)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for an index");
    idx->opts = *opts;
    idx->ops = ops;
    pthread_mutex_init(&idx->lock, NULL);
    int rc;
    if (opts->threads && (rc = pool_start(idx, opts->threads, err))) {
        pthread_mutex_destroy(&idx->lock);
        free(idx);
        return rc;
    }
    *out = idx;
    return KVIX_OK;
}

void kvix_index_free(kvix_index *idx)
{
    if (!idx)
        return;
    pool_stop(idx);
    cmap_release(&idx->parts, part_free);
    pthread_mutex_destroy(&idx->lock);
    free(idx);
}

static const char *const backend_names[] = {"positional", "radix", "reference"};

const char *kvix_backend_name(kvix_backend b)
{
    return (unsigned)b < sizeof backend_names / sizeof *backend_names ? backend_names[b] : "?";
}

int kvix_backend_parse(const char *s, kvix_backend *out)
{
    for (unsigned i = 0; i < sizeof backend_names / sizeof *backend_names; i++) {
        if (s && strcmp(s, backend_names[i]) == 0) {
            *out = (kvix_backend)i;
            return KVIX_OK;
        }
    }
    return KVIX_EINVAL;
}
