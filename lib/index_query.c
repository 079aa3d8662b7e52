/* Queries: the partition, the query's canonical chain (hashed lazily, no
 * deeper than any stored block), the backend's hits, and the answer (scores
 * mapped from slots and sorted). */
#include <stdlib.h>
#include <string.h>

#include "index_front_int.h"

void kvix_answer_init(kvix_answer *ans)
{
    memset(ans, 0, sizeof *ans);
}

void kvix_answer_release(kvix_answer *ans)
{
    free(ans->scores_buf);
    free(ans->scratch);
    free(ans->hits);
    free(ans->hit_runs);
    free(ans->hit_tiers);
    kvix_answer_init(ans);
}

/* Room for cap hits' tier rows (copying the n in use). */
static int tiers_grow(kvix_qhits *h, size_t cap, kvix_err *err)
{
    if (h->tcap >= cap) {
        h->tier = h->tbuf;
        return KVIX_OK;
    }
    void *t = realloc(h->tbuf, cap * sizeof *h->tier);
    if (!t)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for query hits");
    h->tbuf = t;
    h->tcap = cap;
    h->tier = t;
    return KVIX_OK;
}

int kvix_qhits_reserve(kvix_qhits *h, size_t n, kvix_err *err)
{
    if (h->cap - h->n < n) {
        size_t cap = h->cap ? h->cap : 16;
        while (cap - h->n < n)
            cap *= 2;
        uint32_t *v = realloc(h->slot, cap * sizeof *v);
        if (!v)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for query hits");
        h->slot = v;
        h->cap = cap;
    }
    return h->tier ? tiers_grow(h, h->cap, err) : KVIX_OK;
}

int kvix_qhits_run(kvix_qhits *h, size_t first, size_t n, uint32_t blocks, kvix_err *err)
{
    if (!n)
        return KVIX_OK;
    if (h->nrun == h->rcap) {
        size_t cap = h->rcap ? 2 * h->rcap : 16;
        kvix_qrun *r = realloc(h->run, cap * sizeof *r);
        if (!r)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for query hits");
        h->run = r;
        h->rcap = cap;
    }
    h->run[h->nrun++] = (kvix_qrun){(uint32_t)first, (uint32_t)n, blocks};
    return KVIX_OK;
}

int kvix_qhits_push(kvix_qhits *h, uint32_t slot, uint32_t blocks, kvix_err *err)
{
    if (h->n == h->cap || (h->tier && h->tcap <= h->n)) {
        int rc = kvix_qhits_reserve(h, 1, err);
        if (rc)
            return rc;
    }
    kvix_qrun *last = h->nrun ? &h->run[h->nrun - 1] : NULL;
    if (last && last->blocks == blocks && last->first + last->n == h->n) {
        last->n++;
    } else {
        int rc = kvix_qhits_run(h, h->n, 1, blocks, err);
        if (rc)
            return rc;
    }
    if (h->tier)
        memcpy(h->tier[h->n], (uint32_t[KVIX_MEDIUM_COUNT]){[KVIX_MEDIUM_GPU] = blocks},
               sizeof h->tier[h->n]);
    h->slot[h->n++] = slot;
    return KVIX_OK;
}

int kvix_qhits_tiers(kvix_qhits *h, kvix_err *err)
{
    if (h->tier)
        return KVIX_OK;
    int rc = tiers_grow(h, h->cap ? h->cap : 16, err);
    if (rc)
        return rc;
    for (size_t r = 0; r < h->nrun; r++)
        for (size_t i = h->run[r].first; i < h->run[r].first + h->run[r].n; i++)
            memcpy(h->tier[i], (uint32_t[KVIX_MEDIUM_COUNT]){[KVIX_MEDIUM_GPU] = h->run[r].blocks},
                   sizeof h->tier[i]);
    return KVIX_OK;
}

void kvix_qhits_rows(const kvix_qhits *h, kvix_qhit *rows)
{
    for (size_t i = 0; i < h->n; i++)
        rows[i] = (kvix_qhit){h->slot[i], 0};
    for (size_t r = 0; r < h->nrun; r++)
        for (size_t i = h->run[r].first; i < h->run[r].first + h->run[r].n; i++)
            rows[i].blocks = h->run[r].blocks;
}

void kvix_qhits_release(kvix_qhits *h)
{
    free(h->slot);
    free(h->run);
    free(h->tbuf);
    memset(h, 0, sizeof *h);
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

/* Answers often score every worker (every conversation shares the system
 * prompt's first block), and glibc's qsort calls its comparator through a
 * pointer n log n times: that was 68% of a Mooncake replay's instructions.
 * Long answers get a stable LSD radix sort on the key (dp, worker, ~blocks)
 * that skips every key byte equal across the answer (the OR and AND of each
 * field, gathered while the scores are built): worker ids below 2^16, dp 0
 * and short matches need 2 or 3 passes. The passes go back and forth
 * between the two halves of the buffer: the answer is left in whichever
 * half the last pass wrote, never copied back. */
#define RADIX_MIN 32

typedef struct keybits {
    uint64_t or_[3], and_[3]; /* dp, worker, ~blocks */
} keybits;

static inline uint64_t key_field(const kvix_score *x, unsigned field)
{
    return field == 0   ? (uint64_t)x->dp
           : field == 1 ? x->worker
                        : (uint64_t)(uint32_t)~x->blocks;
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

/* A counting sort's byte counts become each byte's first place. */
static inline void counts_to_starts(uint32_t c[256])
{
    uint32_t sum = 0;
    for (unsigned b = 0; b < 256; b++) {
        uint32_t x = c[b];
        c[b] = sum;
        sum += x;
    }
}

/* One stable pass on key byte (field f, shift sh) from src to dst; f is a
 * constant in each caller below, so the key's choice leaves the loops. */
static inline __attribute__((always_inline)) void
radix_pass_f(const kvix_score *src, kvix_score *dst, size_t n, const unsigned f, unsigned sh)
{
    uint32_t c[256] = {0};
    for (size_t i = 0; i < n; i++)
        c[(key_field(&src[i], f) >> sh) & 0xff]++;
    counts_to_starts(c);
    for (size_t i = 0; i < n; i++)
        dst[c[(key_field(&src[i], f) >> sh) & 0xff]++] = src[i];
}

static void radix_pass(const kvix_score *src, kvix_score *dst, size_t n, unsigned f, unsigned sh)
{
    switch (f) {
    case 0:
        radix_pass_f(src, dst, n, 0, sh);
        break;
    case 1:
        radix_pass_f(src, dst, n, 1, sh);
        break;
    default:
        radix_pass_f(src, dst, n, 2, sh);
        break;
    }
}

/* Sort v[0..n) (tmp: room for n more); returns v or tmp, whichever holds the
 * sorted scores. */
static kvix_score *sort_scores(kvix_score *v, kvix_score *tmp, size_t n, const keybits *kb)
{
    if (n < RADIX_MIN) {
        insertion_sort_scores(v, n);
        return v;
    }
    static const unsigned bytes[3] = {4, 8, 4};
    kvix_score *src = v, *dst = tmp;
    for (unsigned f = 0; f < 3; f++)
        for (unsigned b = 0; b < bytes[f]; b++)
            if (((kb->or_[f] ^ kb->and_[f]) >> (8 * b)) & 0xff) {
                radix_pass(src, dst, n, f, 8 * b);
                kvix_score *t = src;
                src = dst;
                dst = t;
            }
    return src;
}

/* Backends report their hits in runs of equal match length (the positional
 * one: one run per drop position; most of an answer drops at one). When the
 * hits come in few runs, each of a different length, the answer is the runs
 * in descending length, each ordered by (worker, dp), and nothing sorts by
 * length. When the low byte of the worker ids is all that differs across a
 * run (fleets number their workers densely: 256 workers differ in the low
 * byte), its states are filed by that byte and each score is written once,
 * straight into its place (emit_run_byte). Otherwise a long run is read once
 * into entries (the hit and its slot's state) while that byte is counted
 * (one counting pass when it is still all that differs: the same run with a
 * byte taken twice), or its scores are written in hit order and sorted by
 * the LSD sort above; a short one by insertion. More runs than RUNS_MAX, or
 * one length in two runs: the whole answer goes through the LSD sort. */
#define RUNS_MAX 32

typedef struct hrun {
    size_t first, n; /* the run's hits: slot[first .. first + n) */
    uint32_t blocks;
} hrun;

typedef struct qent {
    const wstate *w;
    size_t hit;
} qent;

static inline void score_set(kvix_score *s, const wstate *w, const uint32_t *tier,
                             uint32_t blocks)
{
    s->worker = w->worker;
    s->dp = w->dp;
    s->blocks = blocks;
    s->held = __atomic_load_n(&w->held, __ATOMIC_RELAXED);
    memcpy(s->tier_blocks, tier, sizeof s->tier_blocks);
}

/* Hit i's per-tier counts: its row, or gpu (all its blocks on gpu) when the
 * backend counted none; tiered is a constant where it is inlined. */
static inline const uint32_t *hit_tier(const kvix_qhits *hs, size_t i, const uint32_t *gpu,
                                       const int tiered)
{
    return tiered ? hs->tier[i] : gpu;
}

/* Write run r's scores (mapped through sm; hits of gone slots skipped) into
 * v in (worker, dp) order; e: scratch for as many entries as the run has
 * hits, tmp: for as many scores (they may overlap: e is read before tmp is
 * written). Returns how many. */
static inline __attribute__((always_inline)) size_t
emit_run_t(const hrun *r, const kvix_qhits *hs, slotmap sm, kvix_score *v, qent *e,
           kvix_score *tmp, const int tiered)
{
    uint32_t gpu[KVIX_MEDIUM_COUNT] = {0};
    gpu[KVIX_MEDIUM_GPU] = r->blocks;
    size_t n = 0;
    if (r->n < RADIX_MIN) {
        for (size_t i = r->first; i < r->first + r->n; i++) {
            const wstate *w = slotmap_ws(sm, hs->slot[i]);
            if (w)
                score_set(&v[n++], w, hit_tier(hs, i, gpu, tiered), r->blocks);
        }
        insertion_sort_scores(v, n);
        return n;
    }
    uint32_t c[256] = {0};
    uint64_t or_dp = 0, and_dp = ~UINT64_C(0), or_w = 0, and_w = ~UINT64_C(0);
    for (size_t i = r->first; i < r->first + r->n; i++) {
        const wstate *w = slotmap_ws(sm, hs->slot[i]);
        if (!w)
            continue;
        uint64_t wk = w->worker, dp = w->dp;
        e[n++] = (qent){w, i};
        c[wk & 0xff]++;
        or_dp |= dp;
        and_dp &= dp;
        or_w |= wk;
        and_w &= wk;
    }
    if (or_dp == and_dp && ((or_w ^ and_w) >> 8) == 0) {
        counts_to_starts(c);
        for (size_t i = 0; i < n; i++)
            score_set(&v[c[e[i].w->worker & 0xff]++], e[i].w, hit_tier(hs, e[i].hit, gpu, tiered),
                      r->blocks);
        return n;
    }
    for (size_t i = 0; i < n; i++)
        score_set(&v[i], e[i].w, hit_tier(hs, e[i].hit, gpu, tiered), r->blocks);
    uint64_t nb = (uint32_t)~r->blocks;
    keybits kb = {{or_dp, or_w, nb}, {and_dp, and_w, nb}};
    kvix_score *s = sort_scores(v, tmp, n, &kb);
    if (s != v)
        memcpy(v, s, n * sizeof *v);
    return n;
}

/* Run r's scores written once each, in (worker, dp) order, when its workers
 * differ only in the low byte of their ids and share one dp (then each
 * (worker, dp) has its own byte): each state is filed under its byte in a
 * 256-bit map, and the map read in order writes the scores. No counts, no
 * prefix sums, no test per hit: what differs (the fields' OR against their
 * AND) and a byte taken twice (fewer bits than hits: one (worker, dp) in
 * two slots, which a query racing a worker's re-registration may see) are
 * checked once at the end. Returns how many, or SIZE_MAX when the run is
 * not of that kind (nothing useful written). */
static inline __attribute__((always_inline)) size_t
emit_run_byte(const hrun *r, const kvix_qhits *hs, slotmap sm, kvix_score *v, const int tiered)
{
    uint64_t map[4] = {0, 0, 0, 0};
    const wstate *at[256];
    size_t ah[tiered ? 256 : 1];
    const uint32_t *sp = hs->slot + r->first, *const se = sp + r->n;
    const wstate *w = NULL;
    while (sp < se && !(w = slotmap_ws(sm, *sp)))
        sp++;
    if (!w)
        return 0;
    /* what differs from the first state: the worker ids above their low
     * byte, or the dp */
    const uint64_t wk0 = w->worker;
    const uint32_t dp0 = w->dp;
    uint64_t diff = 0;
    size_t n = 0;
    for (; sp < se; sp++) {
        if (!(w = slotmap_ws(sm, *sp)))
            continue;
        uint64_t wk = w->worker;
        diff |= ((wk ^ wk0) >> 8) | (w->dp ^ dp0);
        unsigned x = (unsigned)(wk & 0xff);
        map[x >> 6] |= UINT64_C(1) << (x & 63);
        at[x] = w;
        if (tiered)
            ah[x] = (size_t)(sp - hs->slot);
        n++;
    }
    if (diff || (size_t)(__builtin_popcountll(map[0]) + __builtin_popcountll(map[1]) +
                         __builtin_popcountll(map[2]) + __builtin_popcountll(map[3])) != n)
        return SIZE_MAX;
    uint32_t gpu[KVIX_MEDIUM_COUNT] = {0};
    gpu[KVIX_MEDIUM_GPU] = r->blocks;
    kvix_score *s = v;
    for (unsigned k = 0; k < 4; k++)
        for (uint64_t b = map[k]; b; b &= b - 1) {
            unsigned x = 64 * k + (unsigned)__builtin_ctzll(b);
            score_set(s++, at[x], tiered ? hs->tier[ah[x]] : gpu, r->blocks);
        }
    return n;
}

static size_t emit_run(const hrun *r, const kvix_qhits *hs, slotmap sm, kvix_score *v, qent *e,
                       kvix_score *tmp)
{
    size_t n = hs->tier ? emit_run_byte(r, hs, sm, v, 1) : emit_run_byte(r, hs, sm, v, 0);
    if (n != SIZE_MAX)
        return n;
    return hs->tier ? emit_run_t(r, hs, sm, v, e, tmp, 1) : emit_run_t(r, hs, sm, v, e, tmp, 0);
}

/* The hits' runs with a block, longest first, into runs (RUNS_MAX); 0 when
 * they do not allow the answer by runs (see above). */
static unsigned order_runs(const kvix_qhits *hs, hrun *runs)
{
    unsigned nr = 0;
    for (size_t k = 0; k < hs->nrun; k++) {
        const kvix_qrun *q = &hs->run[k];
        if (!q->blocks)
            continue;
        if (nr == RUNS_MAX)
            return 0;
        hrun x = {q->first, q->n, q->blocks};
        unsigned j = nr++;
        while (j > 0 && runs[j - 1].blocks < x.blocks) {
            runs[j] = runs[j - 1];
            j--;
        }
        runs[j] = x;
    }
    for (unsigned i = 1; i < nr; i++)
        if (runs[i].blocks == runs[i - 1].blocks)
            return 0;
    return nr ? nr : 1; /* no hit with a block: one empty run */
}

/* The blocks of an n-block query that can match at all. */
static size_t query_depth(const part *p, size_t n)
{
    uint32_t d = __atomic_load_n(&p->depth, __ATOMIC_ACQUIRE);
    return n < d ? n : d;
}

/* n: already cut to query_depth; canon: scratch of n entries. */
static int query_part_rcu(part *p, const uint64_t *local, uint64_t *canon, size_t n,
                          kvix_answer *ans, kvix_err *err)
{
    void *be = __atomic_load_n(&p->be, __ATOMIC_ACQUIRE); /* NULL: no (worker, dp) */
    if (!n || !be)
        return KVIX_OK;
    kvix_qchain q = {local, canon, n, 0};
    kvix_qhits hits = {ans->hits,     0, ans->hits_cap, ans->hit_runs,  0,
                       ans->hit_runs_cap, NULL, ans->hit_tiers, ans->hit_tiers_cap};
    int rc = p->ops->query(be, &q, &hits, err);
    ans->hits = hits.slot;
    ans->hits_cap = hits.cap;
    ans->hit_runs = hits.run;
    ans->hit_runs_cap = hits.rcap;
    ans->hit_tiers = hits.tbuf;
    ans->hit_tiers_cap = hits.tcap;
    if (rc || !hits.n)
        return rc;
    /* Twice the scores: the answer in the lower half, entries or the sort's
     * other half in the upper. */
    _Static_assert(sizeof(qent) <= sizeof(kvix_score), "entries fit the upper half");
    if (2 * hits.n > ans->cap) {
        kvix_score *s = realloc(ans->scores_buf, 2 * hits.n * sizeof *s);
        if (!s)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu scores", hits.n);
        ans->scores_buf = s;
        ans->cap = 2 * hits.n;
    }
    kvix_score *v = ans->scores_buf, *up = v + hits.n;
    ans->scores = v;
    slotmap sm = slots_of(p);
    hrun runs[RUNS_MAX];
    unsigned nr = order_runs(&hits, runs);
    size_t ns = 0;
    if (nr) {
        for (unsigned i = 0; i < nr; i++)
            ns += emit_run(&runs[i], &hits, sm, v + ns, (qent *)(void *)up, up);
        ans->nscores = ns;
        return KVIX_OK;
    }
    keybits kb = {{0, 0, 0}, {~UINT64_C(0), ~UINT64_C(0), ~UINT64_C(0)}};
    for (size_t k = 0; k < hits.nrun; k++) {
        const kvix_qrun *r = &hits.run[k];
        uint32_t gpu[KVIX_MEDIUM_COUNT] = {0};
        gpu[KVIX_MEDIUM_GPU] = r->blocks;
        uint64_t nb = (uint32_t)~r->blocks;
        for (size_t i = r->first; r->blocks && i < (size_t)r->first + r->n; i++) {
            const wstate *w = slotmap_ws(sm, hits.slot[i]);
            if (!w)
                continue;
            kvix_score *s = &v[ns++];
            score_set(s, w, hits.tier ? hits.tier[i] : gpu, r->blocks);
            uint64_t dp = s->dp, wk = s->worker;
            kb.or_[0] |= dp;
            kb.and_[0] &= dp;
            kb.or_[1] |= wk;
            kb.and_[1] &= wk;
            kb.or_[2] |= nb;
            kb.and_[2] &= nb;
        }
    }
    ans->nscores = ns;
    ans->scores = ns > 1 ? sort_scores(v, v + ns, ns, &kb) : v;
    return KVIX_OK;
}

/* One read-side section from the backend's walk to the slots' mapping, so a
 * slot seen in a holder set cannot map to a later (worker, dp): a released
 * slot is reused only after a grace period (lib/index_front_int.h). */
static int query_part(part *p, const uint64_t *local, uint64_t *canon, size_t n,
                      kvix_answer *ans, kvix_err *err)
{
    kvix_rcu_lock();
    int rc = query_part_rcu(p, local, canon, n, ans, err);
    kvix_rcu_unlock();
    return rc;
}

static void answer_reset(kvix_answer *ans)
{
    ans->query_blocks = 0;
    ans->bs = 0;
    ans->nscores = 0;
    ans->unknown = KVIX_UNKNOWN_NONE;
}

/* Which name of a missing partition the index has never seen. A walk over
 * the partitions (at most KVIX_INDEX_PARTITIONS_MAX), only on the rare
 * unknown-partition answer; safe beside writers like kvix_ix_parts_list. */
static int unknown_reason(const kvix_index *idx, const char *model)
{
    int why = KVIX_UNKNOWN_MODEL;
    kvix_rcu_lock(); /* the table may be replaced meanwhile */
    ctab *t = __atomic_load_n(&idx->parts.t, __ATOMIC_ACQUIRE);
    for (size_t i = 0; t && i < t->cap && why == KVIX_UNKNOWN_MODEL; i++) {
        part *p = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (p && strcmp(p->model, model) == 0)
            why = KVIX_UNKNOWN_TENANT;
    }
    kvix_rcu_unlock();
    return why;
}

/* A query by local hashes in partition p (NULL: unknown, found by the
 * caller under model). */
static int query_hashes(kvix_index *idx, part *p, const char *model, const uint64_t *local,
                        size_t n, kvix_answer *ans, kvix_err *err)
{
    answer_reset(ans);
    if (n > KVIX_INDEX_DEPTH_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "query of %zu blocks (limit %u)", n,
                            KVIX_INDEX_DEPTH_MAX);
    ans->query_blocks = (uint32_t)n;
    if (!p) {
        ans->unknown = unknown_reason(idx, model);
        return KVIX_OK;
    }
    ans->bs = p->bs;
    n = query_depth(p, n);
    int rc = scratch_reserve(ans, n, err);
    return rc ? rc : query_part(p, local, ans->scratch, n, ans, err);
}

int kvix_index_query(kvix_index *idx, const char *model, const char *tenant,
                     const uint64_t *local, size_t n, kvix_answer *ans, kvix_err *err)
{
    model = model ? model : "default";
    part *p = kvix_ix_part_find(idx, model, tenant ? tenant : "default");
    return query_hashes(idx, p, model, local, n, ans, err);
}

static int query_tokens_bs(kvix_index *idx, const char *model, const char *tenant,
                           const char *lora, uint32_t bs, const uint32_t *tokens, size_t ntokens,
                           kvix_answer *ans, kvix_err *err)
{
    answer_reset(ans);
    if (ntokens > KVIX_TOKENS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "query of %zu tokens (limit %u)", ntokens,
                            KVIX_TOKENS_MAX);
    part *p = kvix_ix_part_find(idx, model ? model : "default", tenant ? tenant : "default");
    if (p && bs && bs != p->bs)
        return kvix_ix_bs_mismatch(p, bs, err);
    if (p)
        bs = p->bs;
    else
        ans->unknown = unknown_reason(idx, model ? model : "default");
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
    part *p = kvix_ix_part_find(idx, q->model, q->tenant);
    if (p && q->bs && q->bs != p->bs) {
        answer_reset(ans);
        return kvix_ix_bs_mismatch(p, q->bs, err);
    }
    return query_hashes(idx, p, q->model, q->hashes, q->nhashes, ans, err); /* p found once */
}

uint32_t kvix_index_block_size(const kvix_index *idx, const char *model, const char *tenant)
{
    const part *p = kvix_ix_part_find(idx, model ? model : "default", tenant ? tenant : "default");
    return p ? p->bs : 0;
}
