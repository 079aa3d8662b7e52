/* Explain (kvix/index.h): why a query's prefix stops where it does, worker by
 * worker, on a quiet index. For each worker explained, the first block that
 * did not match is looked up in what the index knows of that worker: the
 * record of its recent removals (lib/index/index_xr.c), the blocks it holds
 * at that position (a walk of its own blocks map: what it holds, not what
 * the fleet holds, so the cost follows one worker's cache), its last clear;
 * and in the partition: how deep anyone stored. An unknown partition gets
 * the known names closest to the query's.
 *
 * Nothing here runs on a writer's path; it reads what the writers keep
 * anyway, and the record they keep for it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "index_front_int.h"

static void explain_reset(kvix_explain *x)
{
    x->unknown = KVIX_UNKNOWN_NONE;
    x->nclosest = 0;
    x->eagle = 0;
    x->bs = x->query_bs = x->depth = 0;
    x->nw = 0;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- an unknown name: the known ones closest to it ---------------------- */

#define EDIT_CAP 8 /* names further than this are not offered */

/* Levenshtein distance of a and b when at most EDIT_CAP (a band of the
 * table), else EDIT_CAP + 1. */
static unsigned edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if ((la > lb ? la - lb : lb - la) > EDIT_CAP)
        return EDIT_CAP + 1;
    unsigned row[2][KVIX_NAME_MAX + 1];
    const unsigned inf = EDIT_CAP + 1;
    for (size_t j = 0; j <= lb; j++)
        row[0][j] = j <= EDIT_CAP ? (unsigned)j : inf;
    for (size_t i = 1; i <= la; i++) {
        unsigned *cur = row[i & 1], *prev = row[(i - 1) & 1];
        size_t lo = i > EDIT_CAP ? i - EDIT_CAP : 0, hi = i + EDIT_CAP < lb ? i + EDIT_CAP : lb;
        unsigned best = inf;
        for (size_t j = 0; j <= lb; j++) {
            unsigned v = inf;
            if (j >= lo && j <= hi) {
                if (j == 0)
                    v = (unsigned)i;
                else {
                    v = prev[j - 1] + (a[i - 1] != b[j - 1]);
                    if (prev[j] + 1 < v)
                        v = prev[j] + 1;
                    if (cur[j - 1] + 1 < v)
                        v = cur[j - 1] + 1;
                }
                if (v > inf)
                    v = inf;
            }
            cur[j] = v;
            if (v < best)
                best = v;
        }
        if (best >= inf)
            return inf;
    }
    return row[la & 1][lb];
}

/* Offer name at distance d: the KVIX_EXPLAIN_CLOSEST closest, ties by name. */
static void offer(kvix_explain *x, unsigned dist[KVIX_EXPLAIN_CLOSEST], const char *name,
                  unsigned d)
{
    if (d > EDIT_CAP)
        return;
    for (uint32_t i = 0; i < x->nclosest; i++)
        if (strcmp(x->closest[i], name) == 0)
            return;
    uint32_t j = x->nclosest < KVIX_EXPLAIN_CLOSEST ? x->nclosest++ : KVIX_EXPLAIN_CLOSEST;
    while (j > 0 && (d < dist[j - 1] || (d == dist[j - 1] && strcmp(name, x->closest[j - 1]) < 0))) {
        if (j < KVIX_EXPLAIN_CLOSEST) {
            dist[j] = dist[j - 1];
            memcpy(x->closest[j], x->closest[j - 1], KVIX_NAME_MAX);
        }
        j--;
    }
    if (j < KVIX_EXPLAIN_CLOSEST) {
        dist[j] = d;
        snprintf(x->closest[j], KVIX_NAME_MAX, "%s", name);
    }
}

/* The models (or, the model known, its tenants) closest to the query's. */
static void closest_names(kvix_index *idx, const kvix_event *q, int why, kvix_explain *x)
{
    unsigned dist[KVIX_EXPLAIN_CLOSEST] = {0};
    kvix_rcu_lock();
    ctab *t = __atomic_load_n(&idx->parts.t, __ATOMIC_ACQUIRE);
    for (size_t i = 0; t && i < t->cap; i++) {
        part *p = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (!p || p == CTAB_TOMB)
            continue;
        if (why == KVIX_UNKNOWN_MODEL)
            offer(x, dist, p->model, edit_distance(q->model, p->model));
        else if (strcmp(p->model, q->model) == 0)
            offer(x, dist, p->tenant, edit_distance(q->tenant, p->tenant));
    }
    kvix_rcu_unlock();
}

/* ---- the workers explained ------------------------------------------------ */

static kvix_explained *add_worker(kvix_explain *x, uint64_t worker, uint32_t dp, int named)
{
    for (uint32_t i = 0; i < x->nw; i++)
        if (x->w[i].worker == worker && x->w[i].dp == dp) {
            x->w[i].named |= named;
            return NULL;
        }
    if (x->nw == KVIX_EXPLAIN_MAX)
        return NULL;
    kvix_explained *e = &x->w[x->nw++];
    memset(e, 0, sizeof *e);
    e->worker = worker;
    e->dp = dp;
    e->named = named;
    return e;
}

static int ws_before(const wstate *a, const wstate *b)
{
    return a->worker != b->worker ? a->worker < b->worker : a->dp < b->dp;
}

/* Nothing scored and nobody named: the partition's first (worker, dp) in
 * order, so that the answer still shows what workers hold at block 0. */
static void first_workers(const part *p, kvix_explain *x)
{
    const wstate *best[KVIX_EXPLAIN_BEST];
    unsigned n = 0;
    ctab *t = __atomic_load_n(&p->workers.t, __ATOMIC_ACQUIRE);
    for (size_t i = 0; t && i < t->cap; i++) {
        const wstate *w = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (!w || w == CTAB_TOMB)
            continue;
        unsigned j = n < KVIX_EXPLAIN_BEST ? n++ : KVIX_EXPLAIN_BEST;
        for (; j > 0 && ws_before(w, best[j - 1]); j--)
            if (j < KVIX_EXPLAIN_BEST)
                best[j] = best[j - 1];
        if (j < KVIX_EXPLAIN_BEST)
            best[j] = w;
    }
    for (unsigned i = 0; i < n; i++)
        add_worker(x, best[i]->worker, best[i]->dp, 0);
}

/* The query's local hashes (all its blocks) and their canonical chain, in
 * the explain's scratch; n: how many. */
static int query_chain(const part *p, const kvix_event *q, kvix_explain *x, const uint64_t **local,
                       const uint64_t **canon, size_t *n, kvix_err *err)
{
    int eagle = x->eagle; /* hashed as the partition's blocks are, as the query was */
    size_t nb = !q->has_tokens ? q->nhashes
                : eagle        ? kvix_hash_eagle_count(q->ntokens, p->bs)
                               : q->ntokens / p->bs;
    if (nb && 2 * nb > x->scratch_cap) {
        uint64_t *s = realloc(x->scratch, 2 * nb * sizeof *s);
        if (!s)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a query of %zu blocks", nb);
        x->scratch = s;
        x->scratch_cap = 2 * nb;
    }
    uint64_t *l = x->scratch, *c = nb ? l + nb : l; /* no blocks: scratch may be NULL */
    uint64_t seed = kvix_hash_lora_seed(q->lora, strlen(q->lora));
    if (q->has_tokens && eagle && nb)
        kvix_hash_blocks_eagle(q->tokens, nb * p->bs + 1, p->bs, seed, l, NULL);
    else if (q->has_tokens)
        kvix_hash_blocks(q->tokens, nb * p->bs, p->bs, seed, l, NULL);
    else if (nb)
        memcpy(l, q->hashes, nb * sizeof *l);
    for (size_t i = 0; i < nb; i++)
        c[i] = i ? kvix_hash_seq_next(c[i - 1], l[i]) : l[0];
    *local = l;
    *canon = c;
    *n = nb;
    return KVIX_OK;
}

static void removal_of(const xr_evt *e, double now, kvix_removal *out)
{
    *out = (kvix_removal){e->kind, e->has_eid, e->has_ts, e->eid, e->ts, e->at, now - e->at,
                          e->blocks};
}

/* The query's block 0 hashed with the adapters the partition's stores
 * named, and without one, when those differ from the query's. */
typedef struct alts {
    uint32_t n;
    uint64_t local[PART_LORAS + 1];
    const char *lora[PART_LORAS + 1];
} alts;

static void lora_alts(const part *p, const kvix_event *q, int eagle, alts *a)
{
    a->n = 0;
    size_t w = p->bs + (eagle != 0); /* block 0's window */
    if (!q->has_tokens || q->ntokens < w)
        return;
    uint32_t n = __atomic_load_n(&p->nloras, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i <= n; i++) {
        const char *name = i < n ? p->loras[i] : "";
        if (strcmp(name, q->lora) == 0)
            continue;
        a->lora[a->n] = name;
        a->local[a->n++] =
            kvix_hash_local(q->tokens, w, kvix_hash_lora_seed(name, strlen(name)));
    }
}

/* The blocks w holds at position pos into e (after the prefix first);
 * pcanon: the query's canonical hash at pos - 1; a: block 0's other hashes
 * (pos 0). */
static void held_at(const part *p, const wstate *w, uint32_t pos, uint64_t pcanon,
                    const alts *a, kvix_explained *e)
{
    kvix_held other[KVIX_EXPLAIN_HELD_MAX];
    uint32_t nother = 0;
    size_t it = 0;
    uint64_t engine;
    bent v;
    while ((v = kvix__ix_bm_next(&w->blocks, &it, &engine))) {
        kvix_binfo b;
        p->ops->info(part_be(p), bent_node(v), &b);
        if (b.pos != pos)
            continue;
        e->held_at++;
        int after = pos == 0 || b.parent_canon == pcanon;
        e->held_after += (uint32_t)after;
        for (uint32_t i = 0; pos == 0 && i < a->n; i++)
            if (b.local == a->local[i] && !(e->likely & KVIX_CAUSE_LORA)) {
                e->likely |= KVIX_CAUSE_LORA;
                snprintf(e->lora, sizeof e->lora, "%s", a->lora[i]);
            }
        kvix_held h = {b.local, engine, bent_tiers(v), after};
        if (after && e->nheld < KVIX_EXPLAIN_HELD_MAX)
            e->held[e->nheld++] = h;
        else if (!after && nother < KVIX_EXPLAIN_HELD_MAX)
            other[nother++] = h;
    }
    for (uint32_t i = 0; i < nother && e->nheld < KVIX_EXPLAIN_HELD_MAX; i++)
        e->held[e->nheld++] = other[i];
}

/* What the index knows at position m for w (m below n). */
static void explain_at(const part *p, const kvix_event *q, const wstate *w,
                       const uint64_t *local, const uint64_t *canon, uint32_t m, int eagle,
                       double now, kvix_explained *e)
{
    e->want = local[m];
    xr_evt ev;
    int known = 0;
    if (kvix__ix_xr_find(w, m, canon[m], &ev, &known)) {
        e->why = KVIX_WHY_REMOVED;
        if (known)
            removal_of(&ev, now, &e->removal);
        return;
    }
    if (m >= __atomic_load_n(&p->depth, __ATOMIC_RELAXED)) {
        e->why = KVIX_WHY_NOBODY;
        return;
    }
    alts a = {0};
    if (m == 0)
        lora_alts(p, q, eagle, &a);
    held_at(p, w, m, m ? canon[m - 1] : 0, &a, e);
    if (m == 0 ? e->held_at > 0 : e->held_after > 0) {
        e->why = KVIX_WHY_DIFFERS;
        /* Past block 0 the prefix matched: the engine's and the router's
         * hashing agree (adapter, salt, window, block size), the content
         * differs. At block 0 anything may; a token query is hashed here,
         * with the partition's block size and no salt (kvix's local hashes
         * carry none: the salt enters only the engines' own hashes), so
         * only the hashes a router sends can differ by those. */
        /* A token query is hashed as the partition's blocks are, EAGLE's
         * windows or plain (kvix_index_eagle): only a router's own hashes
         * can differ by them, and against an EAGLE partition a router that
         * hashes plain windows (most do) is the likely one. */
        e->causes = m ? KVIX_CAUSE_TOKENS | KVIX_CAUSE_MULTIMODAL
                      : KVIX_CAUSE_TOKENS | KVIX_CAUSE_LORA | KVIX_CAUSE_MULTIMODAL |
                            (q->has_tokens ? 0
                                           : KVIX_CAUSE_SALT | KVIX_CAUSE_BLOCK_SIZE |
                                                 KVIX_CAUSE_EAGLE);
        if (m == 0 && !q->has_tokens && eagle)
            e->likely |= KVIX_CAUSE_EAGLE;
    } else if (kvix__ix_xr_last_clear(w, &ev)) {
        e->why = KVIX_WHY_CLEARED;
        removal_of(&ev, now, &e->removal);
    } else {
        e->why = KVIX_WHY_ABSENT;
    }
}

/* Why e's (worker, dp), w, stops where it does; n: the query's blocks. */
static void explain_worker(const part *p, const kvix_event *q, const wstate *w,
                           const uint64_t *local, const uint64_t *canon, size_t n, int eagle,
                           double now, kvix_explained *e)
{
    if (e->blocks >= n) {
        e->why = KVIX_WHY_MATCH;
        return;
    }
    explain_at(p, q, w, local, canon, e->blocks, eagle, now, e);
    xr_evt ev;
    if (e->why != KVIX_WHY_CLEARED && kvix__ix_xr_last_clear(w, &ev)) {
        e->has_clear = 1; /* what it held before may be the answer */
        removal_of(&ev, now, &e->clear);
    }
}

/* The match of (worker, dp) in the full answer (0: it matched nothing). */
static uint32_t matched(const kvix_answer *full, uint64_t worker, uint32_t dp)
{
    for (size_t i = 0; i < full->nscores; i++)
        if (full->scores[i].worker == worker && full->scores[i].dp == dp)
            return full->scores[i].blocks;
    return 0;
}

int kvix_index_explain(kvix_index *idx, const kvix_event *q, kvix_answer *ans, kvix_explain *x,
                       kvix_err *err)
{
    explain_reset(x);
    part *p = NULL;
    if ((q->type == KVIX_EV_QUERY || q->type == KVIX_EV_NONE) && kvix_name_ok(q->model) &&
        kvix_name_ok(q->tenant))
        p = kvix__ix_part_find(idx, q->model, q->tenant);
    if (p && q->bs && q->bs != p->bs) { /* the router's block size: said, not refused */
        kvix_event q0 = *q;
        q0.bs = 0;
        q0.ntokens = q0.nhashes = 0;
        int rc = kvix_index_query_event(idx, &q0, ans, err);
        x->bs = p->bs;
        x->query_bs = q->bs;
        x->depth = __atomic_load_n(&p->depth, __ATOMIC_RELAXED);
        return rc;
    }
    int rc = kvix_index_query_event(idx, q, ans, err);
    if (rc)
        return rc;
    if (ans->unknown) {
        x->unknown = ans->unknown;
        closest_names(idx, q, ans->unknown, x);
        return KVIX_OK;
    }
    if (!p)
        return KVIX_OK;
    x->bs = p->bs;
    x->depth = __atomic_load_n(&p->depth, __ATOMIC_RELAXED);
    x->eagle = __atomic_load_n(&p->hashing, __ATOMIC_RELAXED) == PART_HASH_EAGLE;
    kvix_event qf = *q; /* every scored worker's match, whatever the answer's top */
    qf.has_top = 1;
    qf.top = 0;
    if ((rc = kvix_index_query_event(idx, &qf, &x->full, err)))
        return rc;
    for (size_t i = 0; i < ans->nscores && i < KVIX_EXPLAIN_BEST; i++)
        add_worker(x, ans->scores[i].worker, ans->scores[i].dp, 0);
    for (uint32_t i = 0; i < q->nxworkers && i < KVIX_QUERY_WORKERS_MAX; i++) {
        const wstate *w = kvix__ix_ws_first(p, q->xworkers[i]);
        uint32_t dps[KVIX_EXPLAIN_MAX];
        /* ranks that hold nothing but their eid have no state: kept apart */
        size_t nd = kvix__ix_eid_dps(p, q->xworkers[i], dps, KVIX_EXPLAIN_MAX);
        kvix_explained *e;
        if (!w && !nd && (e = add_worker(x, q->xworkers[i], 0, 1)))
            e->why = KVIX_WHY_UNKNOWN_WORKER;
        for (; w; w = __atomic_load_n(&w->next_dp, __ATOMIC_ACQUIRE))
            add_worker(x, w->worker, w->dp, 1);
        for (size_t d = 0; d < nd; d++)
            add_worker(x, q->xworkers[i], dps[d], 1);
    }
    if (!x->nw)
        first_workers(p, x);
    const uint64_t *local = NULL, *canon = NULL;
    size_t n = 0;
    if ((rc = query_chain(p, q, x, &local, &canon, &n, err)))
        return rc;
    double now = wall_now();
    for (uint32_t i = 0; i < x->nw; i++) {
        kvix_explained *e = &x->w[i];
        if (e->why == KVIX_WHY_UNKNOWN_WORKER)
            continue;
        const wstate *w = kvix__ix_ws_find(p, e->worker, e->dp);
        eidrec er;
        if (!w && kvix__ix_eid_get(p, e->worker, e->dp, &er)) {
            /* it holds nothing: its last clear, when its record had one */
            e->blocks = 0;
            if (!n) {
                e->why = KVIX_WHY_MATCH;
                continue;
            }
            e->want = local[0];
            e->why = er.has_clear ? KVIX_WHY_CLEARED : KVIX_WHY_ABSENT;
            if (er.has_clear)
                removal_of(&er.clear, now, &e->removal);
            continue;
        }
        if (!w) { /* gone since the answer: not on a quiet index */
            e->why = KVIX_WHY_UNKNOWN_WORKER;
            continue;
        }
        e->blocks = matched(&x->full, e->worker, e->dp);
        explain_worker(p, q, w, local, canon, n, x->eagle, now, e);
    }
    return KVIX_OK;
}
