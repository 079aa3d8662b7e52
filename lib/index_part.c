/* Partitions and (worker, dp) states: insert-only tables of pointers that
 * readers search without a lock (see lib/index_front_int.h). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "index_front_int.h"
#include "utf8_int.h"

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

size_t kvix_ix_cmap_memory(const cmap *m)
{
    size_t b = 0;
    for (const ctab *t = m->t; t; t = t->retired)
        b += sizeof *t + t->cap * sizeof t->v[0];
    return b;
}

void kvix_ix_cmap_release(cmap *m, void (*free_elem)(void *))
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

part *kvix_ix_part_find(const kvix_index *idx, const char *model, const char *tenant)
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

wstate *kvix_ix_ws_find(const part *p, uint64_t worker, uint32_t dp)
{
    ws_key k = {worker, dp};
    return cmap_find(&p->workers, ws_hash(worker, dp), ws_match, &k);
}

static uint64_t wh_hash(uint64_t worker)
{
    return kvix_mix64(worker + UINT64_C(0x632be59bd9b4e019));
}

static int wh_match(const void *e, const void *key)
{
    return ((const whead *)e)->worker == *(const uint64_t *)key;
}

wstate *kvix_ix_ws_first(const part *p, uint64_t worker)
{
    whead *hd = cmap_find(&p->wheads, wh_hash(worker), wh_match, &worker);
    return hd ? __atomic_load_n(&hd->first, __ATOMIC_ACQUIRE) : NULL;
}

static void ws_free(void *e)
{
    wstate *w = e;
    kvix_ix_bm_release(&w->blocks);
    kvix_hmap_release(&w->extra);
    kvix_hmap_release(&w->pexc);
    free(w);
}

void kvix_ix_part_free(void *e)
{
    part *p = e;
    kvix_ix_cmap_release(&p->workers, ws_free);
    kvix_ix_cmap_release(&p->wheads, free);
    for (unsigned i = 0; i < SLOT_CHUNKS; i++)
        free(p->chunks[i]);
    if (p->be)
        p->ops->destroy(p->be);
    pthread_mutex_destroy(&p->lock);
    free(p->model);
    free(p->tenant);
    free(p);
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

/* Checked once, when a partition is made: a name a snapshot or an NDJSON
 * line could not hold would make the index unsaveable. */
static int check_new_name(const char *s, const char *what, kvix_err *err)
{
    if (!kvix_utf8_valid(s, strlen(s)))
        return kvix_err_set(err, KVIX_EINVAL, "%s name is not valid utf-8", what);
    return KVIX_OK;
}

int kvix_ix_bs_mismatch(const part *p, uint32_t bs, kvix_err *err)
{
    return kvix_err_set(err, KVIX_EBLOCKSIZE,
                        "block size %" PRIu32 " differs from %" PRIu32
                        " of partition model \"%s\" tenant \"%s\"",
                        bs, p->bs, p->model, p->tenant);
}

int kvix_ix_part_get(kvix_index *idx, const char *model, const char *tenant, uint32_t bs,
                    part **out, kvix_err *err)
{
    int rc;
    if ((rc = check_name(model, "model", err)) || (rc = check_name(tenant, "tenant", err)))
        return rc;
    part *p = kvix_ix_part_find(idx, model, tenant);
    if (!p) {
        if (bs == 0 || bs > KVIX_BS_MAX)
            return kvix_err_set(err, KVIX_ERANGE, "block size %" PRIu32 " out of range 1..%d",
                                bs, KVIX_BS_MAX);
        if ((rc = check_new_name(model, "model", err)) ||
            (rc = check_new_name(tenant, "tenant", err)))
            return rc;
        pthread_mutex_lock(&idx->lock);
        p = kvix_ix_part_find(idx, model, tenant);
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
                    kvix_ix_part_free(p);
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
        return kvix_ix_bs_mismatch(p, bs, err);
    *out = p;
    return KVIX_OK;
}

int kvix_ix_ws_get(part *p, uint64_t worker, uint32_t dp, wstate **out, kvix_err *err)
{
    wstate *w = kvix_ix_ws_find(p, worker, dp);
    if (w) {
        *out = w;
        return KVIX_OK;
    }
    if (worker > KVIX_WORKER_MAX) /* a snapshot could not hold it */
        return kvix_err_set(err, KVIX_ERANGE, "worker %" PRIu64 " out of range (0 to %" PRId64 ")",
                            worker, (int64_t)KVIX_WORKER_MAX);
    int rc = KVIX_OK;
    pthread_mutex_lock(&p->lock);
    w = kvix_ix_ws_find(p, worker, dp);
    if (!w) {
        uint32_t slot = p->nslots;
        if (slot >= KVIX_SLOTS_MAX) {
            rc = kvix_err_set(err, KVIX_ELIMIT,
                              "more than %u (worker, dp) in partition model \"%s\" tenant \"%s\"",
                              KVIX_SLOTS_MAX, p->model, p->tenant);
            goto out;
        }
        whead *hd = cmap_find(&p->wheads, wh_hash(worker), wh_match, &worker);
        if (!hd) { /* kept even if the state below fails: an empty head is harmless */
            if (!(hd = calloc(1, sizeof *hd)))
                goto nomem;
            hd->h = wh_hash(worker);
            hd->worker = worker;
            if (cmap_insert(&p->wheads, hd)) {
                free(hd);
                goto nomem;
            }
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
        kvix_ix_bm_init(&w->blocks, p->ops->engine_off);
        kvix_hmap_init(&w->extra, 2, sizeof(cref));
        kvix_hmap_init(&w->pexc, 1, sizeof(uint64_t));
        if (cmap_insert(&p->workers, w)) {
            free(w);
            goto nomem;
        }
        w->next_dp = hd->first;
        __atomic_store_n(&hd->first, w, __ATOMIC_RELEASE);
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


part **kvix_ix_parts_list(const kvix_index *idx, size_t *n)
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
