/* Partitions and (worker, dp) states: tables of pointers that readers
 * search without a lock, and the reclamation of departed states, their
 * slots, and an empty partition's backend (see lib/index/index_front_int.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "index_front_int.h"
#include "utf8_int.h"

typedef int (*cmatch_fn)(const void *elem, const void *key);

static inline uint64_t elem_hash(const void *e) { return *(const uint64_t *)e; }

/* A worker state's side maps (index_front_int.h), made on first use. */
wside *kvix__ix_ws_side(wstate *w)
{
    if (!w->side && (w->side = malloc(sizeof *w->side))) {
        kvix__hmap_init(&w->side->pexc, 1, sizeof(uint64_t));
        kvix__hmap_init(&w->side->extra, 2, sizeof(cref));
    }
    return w->side;
}

void kvix__ix_ws_side_free(wstate *w)
{
    if (w->side) {
        kvix__hmap_release(&w->side->pexc);
        kvix__hmap_release(&w->side->extra);
        free(w->side);
        w->side = NULL;
    }
}

/* Inside a read-side section, or under the table's lock. */
static void *cmap_find_locked(const cmap *m, uint64_t h, cmatch_fn match, const void *key)
{
    ctab *t = __atomic_load_n(&m->t, __ATOMIC_ACQUIRE);
    if (!t)
        return NULL;
    size_t mask = t->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        void *e = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (!e)
            return NULL;
        if (e != CTAB_TOMB && elem_hash(e) == h && match(e, key))
            return e;
    }
}

/* Lock-free: what it returns must outlive the section by the caller's
 * contract (partitions live with the index; a state or head is released
 * only by its own worker's writer). */
static void *cmap_find(const cmap *m, uint64_t h, cmatch_fn match, const void *key)
{
    kvix_rcu_lock();
    void *e = cmap_find_locked(m, h, match, key);
    kvix_rcu_unlock();
    return e;
}

static void ctab_put(ctab *t, void *e)
{
    size_t mask = t->cap - 1, i = elem_hash(e) & mask;
    while (t->v[i])
        i = (i + 1) & mask;
    __atomic_store_n(&t->v[i], e, __ATOMIC_RELEASE);
}

static void free_cb(struct rcu_head *head)
{
    KVIX_RCU_TSAN_ACQUIRE();
    free(head); /* ctab: rcu is its first member */
}

/* Free a block whose first member is head after a grace period, from a
 * writer or from a call_rcu callback (already registered: kvix__rcu_free
 * would register it again). */
static void defer(struct rcu_head *head, void (*cb)(struct rcu_head *), int in_cb)
{
    if (!in_cb)
        kvix_rcu_writer();
    KVIX_RCU_TSAN_RELEASE();
    call_rcu(head, cb);
}

/* A fresh copy for n entries at load <= 1/4 (the old one is freed after a
 * grace period); under the writers' lock. */
static int cmap_rebuild(cmap *m, size_t n)
{
    ctab *t = m->t;
    size_t cap = 16;
    while (cap < n * 4)
        cap *= 2;
    ctab *nt = calloc(1, sizeof *nt + cap * sizeof nt->v[0]);
    if (!nt)
        return -1;
    nt->cap = cap;
    for (size_t i = 0; t && i < t->cap; i++)
        if (t->v[i] && t->v[i] != CTAB_TOMB)
            ctab_put(nt, t->v[i]);
    __atomic_store_n(&m->t, nt, __ATOMIC_RELEASE);
    m->tomb = 0;
    if (t)
        defer(&t->rcu, free_cb, 0);
    return 0;
}

/* Under the writers' lock. */
static int cmap_insert(cmap *m, void *e)
{
    ctab *t = m->t;
    if ((!t || (m->n + m->tomb + 1) * 2 > t->cap) && cmap_rebuild(m, m->n + 1))
        return -1;
    ctab_put(m->t, e);
    m->n++;
    return 0;
}

/* e leaves the table (under the writers' lock); readers may still hold it
 * until a grace period. A table far too big for what is left shrinks (a
 * failed shrink keeps it: harmless); an empty one goes. */
static void cmap_delete(cmap *m, void *e)
{
    ctab *t = m->t;
    size_t mask = t->cap - 1;
    for (size_t i = elem_hash(e) & mask; t->v[i]; i = (i + 1) & mask)
        if (t->v[i] == e) {
            __atomic_store_n(&t->v[i], CTAB_TOMB, __ATOMIC_RELEASE);
            m->n--;
            m->tomb++;
            break;
        }
    if (m->n == 0) {
        __atomic_store_n(&m->t, NULL, __ATOMIC_RELEASE);
        m->tomb = 0;
        defer(&t->rcu, free_cb, 0);
    } else if (t->cap > 16 && m->n * 8 < t->cap) {
        (void)cmap_rebuild(m, m->n);
    }
}

size_t kvix__ix_cmap_memory(const cmap *m)
{
    return m->t ? sizeof *m->t + m->t->cap * sizeof m->t->v[0] : 0;
}

void kvix__ix_cmap_release(cmap *m, void (*free_elem)(void *))
{
    ctab *t = m->t;
    if (t && free_elem)
        for (size_t i = 0; i < t->cap; i++)
            if (t->v[i] && t->v[i] != CTAB_TOMB)
                free_elem(t->v[i]);
    free(t);
    m->t = NULL;
    m->n = m->tomb = 0;
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

/* Events and queries mostly name the partition the last one named: two
 * string compares instead of hashing both names and a search. */
part *kvix__ix_part_find(const kvix_index *idx, const char *model, const char *tenant)
{
    part *p = __atomic_load_n(&idx->last, __ATOMIC_ACQUIRE);
    if (p && strcmp(p->model, model) == 0 && strcmp(p->tenant, tenant) == 0)
        return p;
    part_key k = {model, tenant};
    p = cmap_find(&idx->parts, part_hash(model, tenant), part_match, &k);
    if (p) /* the cache is not the index's state: a const search may set it */
        __atomic_store_n(&((kvix_index *)(uintptr_t)idx)->last, p, __ATOMIC_RELEASE);
    return p;
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

wstate *kvix__ix_ws_find(const part *p, uint64_t worker, uint32_t dp)
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

wstate *kvix__ix_ws_first(const part *p, uint64_t worker)
{
    whead *hd = cmap_find(&p->wheads, wh_hash(worker), wh_match, &worker);
    return hd ? __atomic_load_n(&hd->first, __ATOMIC_ACQUIRE) : NULL;
}

static void ws_free(void *e)
{
    wstate *w = e;
    kvix__ix_bm_release(&w->blocks);
    kvix__ix_ws_side_free(w);
    kvix__ix_xr_free(w);
    kvix__ix_grp_free(w);
    pthread_mutex_destroy(&w->cut);
    free(w);
}

void kvix__ix_note_lora(part *p, const char *lora)
{
    uint32_t n = __atomic_load_n(&p->nloras, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n; i++) /* an adapter's stores name it again and again */
        if (strcmp(p->loras[i], lora) == 0)
            return;
    if (n == PART_LORAS)
        return;
    pthread_mutex_lock(&p->lock);
    n = p->nloras;
    uint32_t i = 0;
    while (i < n && strcmp(p->loras[i], lora) != 0)
        i++;
    if (i == n && n < PART_LORAS && (p->loras || (p->loras = calloc(PART_LORAS, KVIX_NAME_MAX)))) {
        snprintf(p->loras[n], KVIX_NAME_MAX, "%s", lora);
        __atomic_store_n(&p->nloras, n + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&p->lock);
}

void kvix__ix_part_free(void *e)
{
    part *p = e;
    free(p->loras);
    kvix__hmap_release(&p->eids);
    kvix__ix_cmap_release(&p->workers, ws_free);
    kvix__ix_cmap_release(&p->wheads, free);
    kvix__ix_slots_free(p->chunks);
    free(p->free_slots);
    free(p->order);
    free(p->fresh);
    free(p->spare);
    free(p->rkeys);
    if (p->be)
        p->ops->destroy(p->be);
    pthread_mutex_destroy(&p->lock);
    free(p->model);
    free(p->tenant);
    free(p);
}

/* ---- reclamation ------------------------------------------------------ */

/* A callback that touches p is about to be queued / is done with p. */
static void inflight_add(part *p) { __atomic_fetch_add(&p->inflight, 1, __ATOMIC_RELAXED); }
static void inflight_done(part *p) { __atomic_fetch_sub(&p->inflight, 1, __ATOMIC_RELEASE); }

/* What an empty partition gives back, freed after a grace period: queries
 * that found the partition non-empty may still walk its backend or look a
 * slot up in its tables. */
typedef struct pempty {
    struct rcu_head rcu;
    part *p;
    void *be;
    srec **chunks;
} pempty;

static void empty_cb(struct rcu_head *head)
{
    KVIX_RCU_TSAN_ACQUIRE();
    pempty *x = (pempty *)(void *)head;
    part *p = x->p;
    if (x->be && p->ops->busy && p->ops->busy(x->be)) {
        defer(&x->rcu, empty_cb, 1); /* its own deferred work first: try again later */
        return;
    }
    if (x->be)
        p->ops->destroy(x->be);
    kvix__ix_slots_free(x->chunks);
    free(x);
    inflight_done(p);
}

/* The last state and the last slot in limbo are gone (under p->lock): give
 * the backend and the slot tables back; the next registration starts anew.
 * Out of memory: the partition keeps them (harmless). */
static void part_empty(part *p)
{
    pempty *x = calloc(1, sizeof *x);
    if (!x)
        return;
    x->p = p;
    x->be = p->be;
    __atomic_store_n(&p->be, NULL, __ATOMIC_RELEASE);
    x->chunks = p->chunks;
    __atomic_store_n(&p->chunks, NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&p->nslots, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&p->depth, 0, __ATOMIC_RELEASE);
    free(p->free_slots);
    p->free_slots = NULL;
    p->nfree = p->fcap = 0;
    free(p->order);
    free(p->fresh);
    free(p->spare);
    free(p->rkeys);
    p->order = p->fresh = p->spare = NULL;
    p->rkeys = NULL;
    p->norder = p->nfresh = 0;
    __atomic_store_n(&p->nranked, 0, __ATOMIC_RELAXED); /* no slot is left to rank */
    inflight_add(p);
    defer(&x->rcu, empty_cb, 1);
}

/* A released state's grace period is over: no query can still map its slot
 * to it, so the slot is free for the next (worker, dp). */
static void ws_reclaim_cb(struct rcu_head *head)
{
    KVIX_RCU_TSAN_ACQUIRE();
    wstate *w = (wstate *)(void *)((char *)head - offsetof(wstate, rcu));
    part *p = w->p;
    pthread_mutex_lock(&p->lock);
    p->free_slots[p->nfree++] = w->slot; /* room for every slot handed out */
    if (--p->limbo == 0 && p->live == 0)
        part_empty(p);
    pthread_mutex_unlock(&p->lock);
    ws_free(w);
    inflight_done(p);
}

static void head_free_cb(struct rcu_head *head)
{
    KVIX_RCU_TSAN_ACQUIRE();
    free((char *)head - offsetof(whead, rcu));
}

/* Under p->lock. clear: the pair's last clear, or NULL to keep what the
 * record had. */
static int eids_put(part *p, uint64_t worker, uint32_t dp, uint64_t eid, const xr_evt *clear)
{
    uint64_t key[2] = {worker, dp};
    int fresh = 0;
    eidrec *v = kvix__hmap_put(&p->eids, key, &fresh);
    if (!v)
        return KVIX_ENOMEM;
    v->eid = eid;
    if (clear) {
        v->has_clear = 1;
        v->clear = *clear;
    }
    return KVIX_OK;
}

int kvix__ix_eid_set(part *p, uint64_t worker, uint32_t dp, uint64_t eid, kvix_err *err)
{
    pthread_mutex_lock(&p->lock);
    int rc = eids_put(p, worker, dp, eid, NULL);
    pthread_mutex_unlock(&p->lock);
    return rc ? kvix_err_set(err, rc, "out of memory for an eid") : KVIX_OK;
}

int kvix__ix_eid_get(part *p, uint64_t worker, uint32_t dp, eidrec *out)
{
    uint64_t key[2] = {worker, dp};
    pthread_mutex_lock(&p->lock);
    const eidrec *v = kvix__hmap_get(&p->eids, key);
    if (v)
        *out = *v;
    pthread_mutex_unlock(&p->lock);
    return v != NULL;
}

size_t kvix__ix_eid_dps(part *p, uint64_t worker, uint32_t *dps, size_t max)
{
    size_t n = 0, it = 0;
    const uint64_t *k;
    pthread_mutex_lock(&p->lock);
    while (n < max && kvix__hmap_next(&p->eids, &it, &k))
        if (k[0] == worker)
            dps[n++] = (uint32_t)k[1];
    pthread_mutex_unlock(&p->lock);
    return n;
}

void kvix__ix_eid_forget(part *p, uint64_t worker, int all_dp, uint32_t dp)
{
    pthread_mutex_lock(&p->lock);
    if (!all_dp) {
        uint64_t key[2] = {worker, dp};
        kvix__hmap_del(&p->eids, key);
    } else {
        for (;;) { /* a deletion moves entries: look again from the start */
            size_t it = 0;
            const uint64_t *k;
            int found = 0;
            while (kvix__hmap_next(&p->eids, &it, &k))
                if (k[0] == worker) {
                    uint64_t key[2] = {k[0], k[1]};
                    kvix__hmap_del(&p->eids, key);
                    found = 1;
                    break;
                }
            if (!found)
                break;
        }
    }
    pthread_mutex_unlock(&p->lock);
}

void kvix__ix_ws_done(wstate *w)
{
    /* blocks, or the kinds of its KV cache groups learned, keep the state */
    if (kvix_ix_bm_size(&w->blocks) > 0 || w->grp)
        return;
    part *p = w->p;
    pthread_mutex_lock(&p->lock);
    /* A pair that holds only its eid gives its slot back (70,000 workers
     * that each stored and removed a block held 65,536 slots for ever, and
     * the rest were refused): the eid waits for it in p->eids. */
    xr_evt clear;
    int has_clear = w->has_eid && kvix__ix_xr_last_clear(w, &clear);
    if (w->has_eid && eids_put(p, w->worker, w->dp, w->eid, has_clear ? &clear : NULL) != KVIX_OK) {
        pthread_mutex_unlock(&p->lock); /* out of memory: it keeps its state */
        return;
    }
    cmap_delete(&p->workers, w);
    whead *hd = cmap_find_locked(&p->wheads, wh_hash(w->worker), wh_match, &w->worker);
    wstate **pp = &hd->first; /* only this worker's writer walks its chain */
    while (*pp != w)
        pp = &(*pp)->next_dp;
    __atomic_store_n(pp, w->next_dp, __ATOMIC_RELEASE);
    if (!hd->first) {
        cmap_delete(&p->wheads, hd);
        defer(&hd->rcu, head_free_cb, 0);
    }
    __atomic_store_n(&w->rec->rank, RANK_NONE, __ATOMIC_RELAXED); /* see slotmap_rec */
    __atomic_store_n(&w->rec->w, NULL, __ATOMIC_RELEASE);
    p->live--;
    p->limbo++;
    inflight_add(p);
    defer(&w->rcu, ws_reclaim_cb, 0);
    pthread_mutex_unlock(&p->lock);
}

/* Polls rather than rcu_barrier(): the callbacks it waits for need only a
 * grace period, and a barrier's own bookkeeping races (for ThreadSanitizer,
 * which does not see liburcu's futexes) with the call_rcu thread. */
void kvix__ix_parts_quiesce(kvix_index *idx)
{
    ctab *t = idx->parts.t;
    for (size_t i = 0; t && i < t->cap; i++) {
        part *p = t->v[i];
        while (p && __atomic_load_n(&p->inflight, __ATOMIC_ACQUIRE)) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
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
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "%s name is not valid utf-8", what);
    return KVIX_OK;
}

int kvix__ix_bs_mismatch(const part *p, uint32_t bs, kvix_err *err)
{
    return kvix_err_set(err, KVIX_EBLOCKSIZE,
                        "block size %" PRIu32 " differs from %" PRIu32
                        " of partition model \"%s\" tenant \"%s\"",
                        bs, p->bs, p->model, p->tenant);
}

int kvix__ix_part_get(kvix_index *idx, const char *model, const char *tenant, uint32_t bs,
                    part **out, kvix_err *err)
{
    int rc;
    if ((rc = check_name(model, "model", err)) || (rc = check_name(tenant, "tenant", err)))
        return rc;
    part *p = kvix__ix_part_find(idx, model, tenant);
    if (!p) {
        if (bs == 0 || bs > KVIX_BS_MAX)
            return kvix_err_set(err, KVIX_ERANGE, "block size %" PRIu32 " out of range 1..%d",
                                bs, KVIX_BS_MAX);
        if ((rc = check_new_name(model, "model", err)) ||
            (rc = check_new_name(tenant, "tenant", err)))
            return rc;
        if (idx->opts.model_no_colon && strchr(model, ':'))
            return kvix_err_set(err, KVIX_EINVAL,
                                "model name \"%.64s\" contains ':', which the HTTP API's /dump "
                                "keys (model:tenant, split at the first ':') cannot carry",
                                model);
        pthread_mutex_lock(&idx->lock);
        p = kvix__ix_part_find(idx, model, tenant);
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
                p->opts = &idx->opts;
                pthread_mutex_init(&p->lock, NULL);
                kvix__hmap_init(&p->eids, 2, sizeof(eidrec));
                if (p->model && p->tenant && !cmap_insert(&idx->parts, p))
                    rc = KVIX_OK; /* its backend comes with its first (worker, dp) */
                if (rc) {
                    kvix__ix_part_free(p);
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
        return kvix__ix_bs_mismatch(p, bs, err);
    *out = p;
    return KVIX_OK;
}

/* A slot for a new state (under p->lock): the last freed, or the next never
 * handed out. *fresh: the latter. */
static int slot_take(part *p, uint32_t *slot, int *fresh, kvix_err *err)
{
    if (p->nfree) {
        *slot = p->free_slots[p->nfree - 1];
        *fresh = 0;
        return KVIX_OK;
    }
    if (p->nslots >= KVIX_SLOTS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT,
                            "more than %u (worker, dp) at once in partition model \"%s\" tenant "
                            "\"%s\"",
                            KVIX_SLOTS_MAX, p->model, p->tenant);
    if (p->nslots == p->fcap) { /* the slot lists have room for every slot handed out */
        uint32_t cap = p->fcap ? 2 * p->fcap : 16;
        cap = cap < KVIX_SLOTS_MAX ? cap : KVIX_SLOTS_MAX;
        uint32_t **lists[4] = {&p->free_slots, &p->order, &p->fresh, &p->spare};
        for (unsigned i = 0; i < 4; i++) {
            uint32_t *v = realloc(*lists[i], cap * sizeof *v);
            if (!v)
                return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a worker");
            *lists[i] = v;
        }
        rkey *k = realloc(p->rkeys, cap * sizeof *k);
        if (!k)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a worker");
        p->rkeys = k;
        p->fcap = cap;
    }
    if (!p->chunks) {
        srec **top = malloc(SLOT_CHUNKS * sizeof *top);
        if (!top)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a worker");
        memcpy(top, kvix__ix_no_slots, SLOT_CHUNKS * sizeof *top);
        __atomic_store_n(&p->chunks, top, __ATOMIC_RELEASE);
    }
    if (p->chunks[p->nslots / SLOT_CHUNK] == kvix__ix_no_slots[0]) {
        srec *c = calloc(SLOT_CHUNK, sizeof *c);
        if (!c)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a worker");
        for (unsigned i = 0; i < SLOT_CHUNK; i++)
            c[i].rank = RANK_NONE;
        __atomic_store_n(&p->chunks[p->nslots / SLOT_CHUNK], c, __ATOMIC_RELEASE);
    }
    *slot = p->nslots;
    *fresh = 1;
    return KVIX_OK;
}

/* ---- ranks: the (worker, dp) order of the slots ------------------------- */

/* Answers list their scores by (worker, dp): a query files each hit under
 * its slot's rank (a dense number in that order) instead of sorting worker
 * ids, which fleets name sparsely (Dynamo's lease ids are random 64-bit).
 * Slots registered since the last ranking have no rank (RANK_NONE); the
 * query sorts those few apart and merges them in. The ranking is redone
 * when they pass 1/16 of the ranked ones, merging the sorted newcomers into
 * the kept order: O(slots) each time, amortized O(1) a registration; and
 * when queries have merged unranked slots an eighth as many times as
 * there are ranked ones (a merge costs about what ranking a few dozen
 * slots costs; the last few registrations of a fleet would otherwise stay
 * unranked): then the partition's next stored event ranks them, so the
 * O(slots) work stays off the query path (a query's tail latency). Ranks
 * change only inside the rank_seq window, which a query checks around its
 * filing (and falls back to sorting worker ids when it moved). */

static int rkey_cmp(const void *a, const void *b)
{
    const rkey *x = a, *y = b;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return x->dp < y->dp ? -1 : x->dp > y->dp;
}

/* Chunks not yet made are this one (static, never written): a query maps
 * any slot below KVIX_SLOTS_MAX without a test for a missing chunk. */
static const srec no_chunk[SLOT_CHUNK] = {[0 ... SLOT_CHUNK - 1] = {.rank = RANK_NONE}};
srec *const kvix__ix_no_slots[SLOT_CHUNKS] = {[0 ... SLOT_CHUNKS - 1] = (srec *)no_chunk};

void kvix__ix_slots_free(srec **top)
{
    for (unsigned i = 0; top && i < SLOT_CHUNKS; i++)
        if (top[i] != no_chunk)
            free(top[i]);
    free(top);
}

static inline srec *slot_rec(part *p, uint32_t s)
{
    return &p->chunks[s / SLOT_CHUNK][s % SLOT_CHUNK];
}

#define RANK_PICKED (RANK_NONE - 1) /* a fresh slot already taken by this ranking */

/* Under p->lock. Into the spare arrays slot_take keeps as large as the
 * slot lists. */
static void rank_slots(part *p)
{
    uint32_t *next = p->spare;
    rkey *k = p->rkeys;
    uint32_t nk = 0, n = 0, i = 0, j = 0;
    for (uint32_t f = 0; f < p->nfresh; f++) { /* still registered, listed once */
        srec *r = slot_rec(p, p->fresh[f]);
        if (r->w && r->rank == RANK_NONE) {
            __atomic_store_n(&r->rank, RANK_PICKED, __ATOMIC_RELAXED);
            k[nk++] = (rkey){r->worker, r->dp, p->fresh[f]};
        }
    }
    qsort(k, nk, sizeof *k, rkey_cmp);
    for (; i < p->norder; i++) {
        uint32_t s = p->order[i];
        const srec *r = slot_rec(p, s);
        if (!r->w || r->rank >= RANK_PICKED) /* gone, or taken again since */
            continue;
        while (j < nk && (k[j].worker < r->worker || (k[j].worker == r->worker && k[j].dp < r->dp)))
            next[n++] = k[j++].slot;
        next[n++] = s;
    }
    while (j < nk)
        next[n++] = k[j++].slot;
    uint32_t seq = p->rank_seq;
    __atomic_store_n(&p->rank_seq, seq + 1, __ATOMIC_RELAXED);
    /* release stores, not a release fence (which TSan cannot follow): a
     * query that reads a new rank then sees the odd rank_seq before it */
    for (uint32_t t = 0; t < n; t++)
        __atomic_store_n(&slot_rec(p, next[t])->rank, t, __ATOMIC_RELEASE);
    __atomic_store_n(&p->nranked, n, __ATOMIC_RELAXED);
    __atomic_store_n(&p->rank_seq, seq + 2, __ATOMIC_RELEASE);
    p->spare = p->order;
    p->order = next;
    p->norder = n;
    p->nfresh = 0;
    __atomic_store_n(&p->unranked_seen, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->rank_due, n / 8 + 64, __ATOMIC_RELAXED);
}

static void rank_if_due(part *p)
{
    if (p->nfresh * 16 > p->norder + 32)
        rank_slots(p);
}

void kvix__ix_rank_asked(part *p)
{
    if (pthread_mutex_trylock(&p->lock))
        return; /* another writer holds it: asked again at the next event */
    if (p->chunks && p->nfresh)
        rank_slots(p);
    else /* the unranked ones are gone meanwhile */
        __atomic_store_n(&p->unranked_seen, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&p->lock);
}

/* Under p->lock: the worker's head, made if absent (kept if the state then
 * fails: an empty head is harmless and freed with the partition). */
static whead *head_get(part *p, uint64_t worker)
{
    whead *hd = cmap_find_locked(&p->wheads, wh_hash(worker), wh_match, &worker);
    if (hd)
        return hd;
    if (!(hd = calloc(1, sizeof *hd)))
        return NULL;
    hd->h = wh_hash(worker);
    hd->worker = worker;
    if (cmap_insert(&p->wheads, hd)) {
        free(hd);
        return NULL;
    }
    return hd;
}

/* Under p->lock, every slot taken: wait (unlocked: the callbacks take the
 * lock) until a released slot's grace period ends or LIMBO_WAIT_MS pass, if
 * any is waiting. A writer that churns (worker, dp) pairs faster than the
 * call_rcu thread frees them (a loaded machine) would otherwise be refused a
 * pair while fewer than KVIX_SLOTS_MAX are registered. The caller is outside
 * any read-side section (a writer), or no grace period could end. 1: retry. */
#define LIMBO_WAIT_MS 10000
static int wait_limbo(part *p)
{
    for (unsigned t = 0; p->limbo && !p->nfree && p->nslots >= KVIX_SLOTS_MAX &&
                         t < LIMBO_WAIT_MS * 10;
         t++) {
        pthread_mutex_unlock(&p->lock);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&p->lock);
    }
    return p->nfree || p->nslots < KVIX_SLOTS_MAX;
}

static int ws_register(part *p, uint64_t worker, uint32_t dp, wstate **out, kvix_err *err)
{
    uint32_t slot = 0;
    int fresh = 0, rc = slot_take(p, &slot, &fresh, err);
    if (rc == KVIX_ELIMIT && wait_limbo(p))
        rc = slot_take(p, &slot, &fresh, err);
    if (rc)
        return rc;
    if (!p->be) { /* the partition's first state since it was made or last emptied */
        void *be = p->ops->create(p->opts, err);
        if (!be)
            return err ? err->code : KVIX_ENOMEM;
        __atomic_store_n(&p->be, be, __ATOMIC_RELEASE);
    }
    whead *hd = head_get(p, worker);
    wstate *w = hd ? calloc(1, sizeof *w) : NULL;
    if (!w)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a worker");
    w->h = ws_hash(worker, dp);
    w->worker = worker;
    w->dp = dp;
    w->slot = slot;
    w->p = p;
    uint64_t key[2] = {worker, dp};
    const eidrec *eid = kvix__hmap_get(&p->eids, key);
    if (eid) { /* the pair's last eid, kept while it held nothing */
        w->has_eid = 1;
        w->eid = eid->eid;
    }
    pthread_mutex_init(&w->cut, NULL);
    kvix__ix_bm_init(&w->blocks, p->ops, part_be(p));
    /* whole before it is found: a live walk reads rec->held of what it finds */
    srec *r = slot_rec(p, slot);
    w->rec = r;
    if (cmap_insert(&p->workers, w)) {
        pthread_mutex_destroy(&w->cut);
        free(w);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a worker");
    }
    if (eid)
        kvix__hmap_del(&p->eids, key);
    w->next_dp = hd->first;
    __atomic_store_n(&hd->first, w, __ATOMIC_RELEASE);
    __atomic_store_n(&r->worker, worker, __ATOMIC_RELAXED);
    __atomic_store_n(&r->dp, dp, __ATOMIC_RELAXED);
    __atomic_store_n(&r->held, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&r->rank, RANK_NONE, __ATOMIC_RELAXED);
    __atomic_store_n(&r->w, w, __ATOMIC_RELEASE);
    if (fresh)
        __atomic_store_n(&p->nslots, slot + 1, __ATOMIC_RELEASE);
    else
        p->nfree--;
    p->live++;
    if (p->nfresh < p->fcap) /* a guard: a ranking is due long before it fills (a
                              * slot left out stays unranked: queries sort it apart) */
        p->fresh[p->nfresh++] = slot;
    rank_if_due(p);
    *out = w;
    return KVIX_OK;
}

int kvix__ix_ws_get(part *p, uint64_t worker, uint32_t dp, wstate **out, kvix_err *err)
{
    wstate *w = kvix__ix_ws_find(p, worker, dp);
    if (w) {
        *out = w;
        return KVIX_OK;
    }
    if (worker > KVIX_WORKER_MAX) /* a snapshot could not hold it */
        return kvix_err_set(err, KVIX_ERANGE, "worker %" PRIu64 " out of range (0 to %" PRId64 ")",
                            worker, (int64_t)KVIX_WORKER_MAX);
    pthread_mutex_lock(&p->lock);
    int rc = ws_register(p, worker, dp, out, err);
    pthread_mutex_unlock(&p->lock);
    return rc;
}


part **kvix__ix_parts_list(const kvix_index *idx, size_t *n)
{
    *n = 0;
    kvix_rcu_lock(); /* the table may be replaced meanwhile */
    ctab *t = __atomic_load_n(&idx->parts.t, __ATOMIC_ACQUIRE);
    part **v = malloc((t ? t->cap : 1) * sizeof *v);
    for (size_t i = 0; v && t && i < t->cap; i++) {
        part *p = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (p)
            v[(*n)++] = p;
    }
    kvix_rcu_unlock();
    return v;
}
