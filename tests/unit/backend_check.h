/* Shared by the backend unit tests (test_index_positional*.c,
 * test_index_radix*.c): an exact model of the backend contract and a random
 * block forest to drive kvix_backend_ops directly, without the front end.
 *
 * The forest has few distinct local hashes, so the same local hash recurs at
 * the same position under different prefixes (what would make a local-keyed
 * index promote an entry to "Multi"), and the model's answer is the
 * definition: for each slot, the first position i where the slot holds the
 * query's (i, canon_i) in no tier. */
#ifndef KVIX_TEST_BACKEND_CHECK_H
#define KVIX_TEST_BACKEND_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "index_int.h"

typedef struct bc_node {
    int parent; /* -1 at position 0 */
    uint32_t pos;
    uint64_t local, canon, pcanon;
} bc_node;

typedef struct bc_model {
    bc_node *nodes;
    int nnodes;
    int nslots;
    uint8_t *held; /* [slot * nnodes + node]: tier mask */
    int *rep;      /* first node with the same (pos, canon) */
    /* the backend's slot of model slot s: s * mul & mask (bc_spread), so
     * that holders are spread over the slot range as at thousands of
     * workers; mask 0: s itself */
    uint32_t mul, inv, mask;
} bc_model;

static inline uint32_t bc_bslot(const bc_model *m, int s)
{
    return m->mask ? (uint32_t)s * m->mul & m->mask : (uint32_t)s;
}

/* The model slot of backend slot b. */
static inline uint32_t bc_mslot(const bc_model *m, uint32_t b)
{
    return m->mask ? b * m->inv & m->mask : b;
}

/* Spread the model's slots: mul odd, mask + 1 a power of two and at least
 * nslots (s * mul & mask is then one to one). */
static inline void bc_spread(bc_model *m, uint32_t mul, uint32_t mask)
{
    uint32_t inv = mul;
    for (int i = 0; i < 5; i++) /* Newton: inverse of mul mod 2^32 */
        inv *= 2 - mul * inv;
    m->mul = mul;
    m->inv = inv;
    m->mask = mask;
}

static inline uint64_t bc_rand(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* A forest of nnodes blocks: each new node extends a random earlier one
 * (mostly the latest, for long chains) or starts a root; locals come from
 * `alphabet` values. */
static inline void bc_model_init(bc_model *m, int nnodes, int nslots, unsigned alphabet,
                                 uint64_t *rng)
{
    memset(m, 0, sizeof *m);
    m->nodes = calloc((size_t)nnodes, sizeof *m->nodes);
    m->nnodes = nnodes;
    m->nslots = nslots;
    m->held = calloc((size_t)nnodes * (size_t)nslots, 1);
    for (int k = 0; k < nnodes; k++) {
        bc_node *n = &m->nodes[k];
        uint64_t r = bc_rand(rng);
        if (k == 0 || r % 16 == 0)
            n->parent = -1;
        else if (r % 16 < 12)
            n->parent = k - 1;
        else
            n->parent = (int)(bc_rand(rng) % (uint64_t)k);
        n->local = 1000 + bc_rand(rng) % alphabet;
        if (n->parent < 0) {
            n->pos = 0;
            n->canon = n->local;
            n->pcanon = 0;
        } else {
            bc_node *p = &m->nodes[n->parent];
            n->pos = p->pos + 1;
            n->pcanon = p->canon;
            n->canon = kvix_hash_seq_next(p->canon, n->local);
        }
    }
    /* canonical duplicates (same pos and canon reached twice) are one block */
    m->rep = calloc((size_t)nnodes, sizeof *m->rep);
    for (int k = 0; k < nnodes; k++) {
        m->rep[k] = k;
        for (int j = 0; j < k; j++)
            if (m->nodes[j].pos == m->nodes[k].pos && m->nodes[j].canon == m->nodes[k].canon) {
                m->rep[k] = j;
                break;
            }
    }
}

static inline void bc_model_free(bc_model *m)
{
    free(m->nodes);
    free(m->held);
    free(m->rep);
}

static inline int bc_rep(const bc_model *m, int k)
{
    return m->rep[k];
}

static inline int bc_add(const kvix_backend_ops *ops, void *be, bc_model *m, int slot, int k,
                         unsigned tier)
{
    k = bc_rep(m, k);
    uint8_t *h = &m->held[(size_t)slot * (size_t)m->nnodes + (size_t)k];
    if (*h & (1u << tier))
        return 0;
    bc_node *n = &m->nodes[k];
    kvix_err err;
    int rc = kvix_backend_add_key(ops, be, n->pos, n->local, n->canon, n->pcanon, bc_bslot(m, slot),
                                  tier, &err);
    if (rc == KVIX_OK)
        *h |= (uint8_t)(1u << tier);
    return rc;
}

static inline void bc_del(const kvix_backend_ops *ops, void *be, bc_model *m, int slot, int k,
                          unsigned tier)
{
    k = bc_rep(m, k);
    uint8_t *h = &m->held[(size_t)slot * (size_t)m->nnodes + (size_t)k];
    if (!(*h & (1u << tier)))
        return;
    bc_node *n = &m->nodes[k];
    kvix_backend_del_key(ops, be, n->pos, n->local, n->canon, n->pcanon, bc_bslot(m, slot), tier);
    *h &= (uint8_t)~(1u << tier);
}

/* Locals of the path from the root to node k, then `extra` random locals. */
static inline size_t bc_path(const bc_model *m, int k, uint64_t *local, size_t cap, int extra,
                             uint64_t *rng)
{
    size_t n = m->nodes[k].pos + 1;
    if (n > cap)
        return 0;
    for (int j = k; j >= 0; j = m->nodes[j].parent)
        local[m->nodes[j].pos] = m->nodes[j].local;
    for (int e = 0; e < extra && n < cap; e++)
        local[n++] = 1000 + bc_rand(rng) % 4;
    return n;
}

/* The node of (pos, canon), or -1. */
static inline int bc_find(const bc_model *m, uint32_t pos, uint64_t canon)
{
    for (int k = 0; k < m->nnodes; k++)
        if (m->nodes[k].pos == pos && m->nodes[k].canon == canon)
            return m->rep[k];
    return -1;
}

/* A hit with its per-tier counts (kvix_qhits keeps them apart, and only
 * when the backend has blocks off gpu). */
typedef struct bc_hit {
    uint32_t slot, blocks;
    uint32_t tier_blocks[KVIX_MEDIUM_COUNT];
} bc_hit;

static int bc_row_cmp(const void *a, const void *b)
{
    const bc_hit *x = a, *y = b;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* 1 when every hit is in exactly one run, each run inside the hits. */
static inline int bc_runs_ok(const kvix_qhits *hs)
{
    unsigned char *seen = calloc(hs->n + 1, 1);
    int ok = 1;
    for (size_t r = 0; r < hs->nrun && ok; r++) {
        const kvix_qrun *q = &hs->run[r];
        ok = q->n > 0 && q->first + (size_t)q->n <= hs->n;
        for (size_t i = q->first; ok && i < q->first + (size_t)q->n; i++)
            ok = !seen[i]++;
    }
    for (size_t i = 0; i < hs->n && ok; i++)
        ok = seen[i];
    free(seen);
    return ok;
}

/* The hits as rows (slot, blocks, per-tier counts), hit i in out[i]; out:
 * room for hs->n (caller frees). */
static inline bc_hit *bc_unsorted_rows(const kvix_qhits *hs)
{
    kvix_qhit *h = calloc(hs->n + 1, sizeof *h);
    bc_hit *r = calloc(hs->n + 1, sizeof *r);
    kvix__qhits_rows(hs, h);
    for (size_t i = 0; i < hs->n; i++) {
        r[i].slot = h[i].slot;
        r[i].blocks = h[i].blocks;
        if (hs->tier)
            memcpy(r[i].tier_blocks, hs->tier[i], sizeof r[i].tier_blocks);
        else
            r[i].tier_blocks[KVIX_MEDIUM_GPU] = r[i].blocks;
    }
    free(h);
    return r;
}

/* The hits as rows, sorted by slot (caller frees). */
static inline bc_hit *bc_rows(const kvix_qhits *hs)
{
    bc_hit *r = bc_unsorted_rows(hs);
    qsort(r, hs->n, sizeof *r, bc_row_cmp);
    return r;
}

/* Run the query on the backend and on the model; 1 when they agree. */
static inline int bc_query_check(const kvix_backend_ops *ops, void *be, const bc_model *m,
                                 const uint64_t *local, size_t n, const char *what)
{
    uint64_t *canon = calloc(n + 1, sizeof *canon);
    kvix_qchain q = {local, canon, n, 0};
    kvix_qhits hits = {0};
    kvix_err err;
    int ok = ops->query(be, &q, &hits, &err) == KVIX_OK;
    if (ok && !bc_runs_ok(&hits)) {
        printf("#   %s: the runs do not cover each hit once\n", what);
        ok = 0;
    }
    bc_hit *rows = bc_unsorted_rows(&hits);
    for (size_t i = 0; i < hits.n; i++)
        rows[i].slot = bc_mslot(m, rows[i].slot);
    qsort(rows, hits.n, sizeof *rows, bc_row_cmp);
    int *at = malloc((n + 1) * sizeof *at);
    for (size_t i = 0; i < n; i++)
        at[i] = bc_find(m, (uint32_t)i, kvix_qchain_at(&q, i));
    size_t hi = 0;
    for (int s = 0; s < m->nslots && ok; s++) {
        uint32_t len = 0, tiers[KVIX_MEDIUM_COUNT] = {0};
        while (len < n) {
            unsigned t = at[len] < 0 ? 0 : m->held[(size_t)s * (size_t)m->nnodes + (size_t)at[len]];
            if (!t)
                break;
            for (unsigned u = 0; u < KVIX_MEDIUM_COUNT; u++)
                tiers[u] += t >> u & 1;
            len++;
        }
        if (len == 0) {
            if (hi < hits.n && rows[hi].slot == (uint32_t)s) {
                printf("#   %s: slot %d: backend says %u blocks, model 0\n", what, s,
                       rows[hi].blocks);
                ok = 0;
            }
            continue;
        }
        if (hi >= hits.n || rows[hi].slot != (uint32_t)s) {
            printf("#   %s: slot %d: backend has no hit, model %u blocks\n", what, s, len);
            ok = 0;
            continue;
        }
        const bc_hit *h = &rows[hi++];
        if (h->blocks != len ||
            memcmp(h->tier_blocks, tiers, sizeof tiers) != 0) {
            printf("#   %s: slot %d: backend %u blocks (%u/%u/%u/%u), model %u (%u/%u/%u/%u)\n",
                   what, s, h->blocks, h->tier_blocks[0], h->tier_blocks[1], h->tier_blocks[2],
                   h->tier_blocks[3], len, tiers[0], tiers[1], tiers[2], tiers[3]);
            ok = 0;
        }
    }
    if (ok && hi != hits.n) {
        printf("#   %s: %zu extra hits\n", what, hits.n - hi);
        ok = 0;
    }
    free(rows);
    kvix__qhits_release(&hits);
    free(canon);
    free(at);
    return ok;
}

/* Memory after removals: freed blocks wait for an RCU grace period and a
 * callback thread, so wait (up to 20 s, not a timing assertion) until the
 * backend is back under `limit` bytes; returns what it holds then. */
#include <time.h>
static inline size_t bc_settled_memory(const kvix_backend_ops *ops, void *be, size_t limit)
{
    size_t m = ops->memory(be);
    for (int i = 0; i < 20000 && m > limit; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        m = ops->memory(be);
    }
    return m;
}

/* ---- scenarios, each run on one backend configuration ---- */

static inline void *bc_create(const kvix_backend_ops *ops, unsigned jump, int binsearch)
{
    kvix_index_opts o;
    memset(&o, 0, sizeof o);
    o.jump = jump;
    o.binsearch = binsearch;
    kvix_err err;
    void *be = ops->create(&o, &err);
    CHECK(be != NULL);
    return be;
}

/* Query the chain of `len` blocks from locals; compare with the model. */
static inline int bc_check_locals(const kvix_backend_ops *ops, void *be, const bc_model *m,
                                  const uint64_t *local, size_t n, const char *what)
{
    return CHECK(bc_query_check(ops, be, m, local, n, what));
}

/* Chains with holes: the jump must not count a slot holding 0..k and j as
 * matching up to j. */
static inline void bc_scenario_holes(const kvix_backend_ops *ops, unsigned jump, int binsearch)
{
    void *be = bc_create(ops, jump, binsearch);
    if (!be)
        return;
    enum { L = 40 };
    bc_model m;
    memset(&m, 0, sizeof m);
    m.nnodes = L;
    m.nslots = 4;
    m.nodes = calloc(L, sizeof *m.nodes);
    m.held = calloc(L * 4, 1);
    m.rep = calloc(L, sizeof *m.rep);
    uint64_t local[L + 3];
    for (int k = 0; k < L; k++) {
        bc_node *n = &m.nodes[k];
        m.rep[k] = k;
        n->parent = k - 1;
        n->pos = (uint32_t)k;
        n->local = local[k] = 500 + (uint64_t)(k % 3); /* locals repeat along the chain */
        n->pcanon = k ? m.nodes[k - 1].canon : 0;
        n->canon = k ? kvix_hash_seq_next(n->pcanon, n->local) : n->local;
    }
    local[L] = local[L + 1] = local[L + 2] = 501;
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < (s == 2 ? 10 : L); k++)
            CHECK(bc_add(ops, be, &m, s, k, KVIX_MEDIUM_GPU) == KVIX_OK);
    bc_check_locals(ops, be, &m, local, L + 3, "holes: full chains");
    bc_del(ops, be, &m, 0, 5, KVIX_MEDIUM_GPU); /* a middle block: slot 0 holds 0..4, 6..39 */
    bc_check_locals(ops, be, &m, local, L, "holes: middle removed");
    bc_del(ops, be, &m, 1, 33, KVIX_MEDIUM_GPU);
    bc_del(ops, be, &m, 1, 17, KVIX_MEDIUM_GPU);
    bc_check_locals(ops, be, &m, local, L, "holes: two holes");
    bc_del(ops, be, &m, 0, 0, KVIX_MEDIUM_GPU); /* the root: slot 0 matches nothing */
    bc_check_locals(ops, be, &m, local, L, "holes: root removed");
    CHECK(bc_add(ops, be, &m, 0, 0, KVIX_MEDIUM_GPU) == KVIX_OK);
    CHECK(bc_add(ops, be, &m, 0, 5, KVIX_MEDIUM_GPU) == KVIX_OK);
    bc_check_locals(ops, be, &m, local, L, "holes: re-stored");
    /* slot 3: 0..4 then 20..39 without the middle (a parent it never held) */
    for (int k = 0; k < L; k++)
        if (k < 5 || k >= 20)
            CHECK(bc_add(ops, be, &m, 3, k, k % 2 ? KVIX_MEDIUM_CPU : KVIX_MEDIUM_GPU) == KVIX_OK);
    bc_check_locals(ops, be, &m, local, L, "holes: stored past a gap");
    for (int k = 5; k < 20; k++)
        CHECK(bc_add(ops, be, &m, 3, k, KVIX_MEDIUM_DISK) == KVIX_OK);
    bc_check_locals(ops, be, &m, local, L, "holes: gap filled");
    for (int k = 0; k < L; k++)
        for (int s = 0; s < 4; s++)
            for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
                bc_del(ops, be, &m, s, k, t);
    CHECK_U64(ops->unique_blocks(be), 0);
    bc_check_locals(ops, be, &m, local, L, "holes: empty");
    ops->destroy(be);
    bc_model_free(&m);
}

/* The same local hashes at the same positions under different prefixes. */
static inline void bc_scenario_collision(const kvix_backend_ops *ops, unsigned jump, int binsearch)
{
    void *be = bc_create(ops, jump, binsearch);
    if (!be)
        return;
    enum { L = 24 };
    uint64_t a[L], b[L], ca = 0, cb = 0;
    for (int i = 0; i < L; i++) {
        a[i] = 7000 + (uint64_t)i;
        b[i] = i == 0 ? 9999 : a[i]; /* differs only at position 0 */
    }
    kvix_err err;
    for (uint32_t i = 0; i < L; i++) {
        uint64_t na = i ? kvix_hash_seq_next(ca, a[i]) : a[i];
        uint64_t nb = i ? kvix_hash_seq_next(cb, b[i]) : b[i];
        CHECK(kvix_backend_add_key(ops, be, i, a[i], na, ca, 0, KVIX_MEDIUM_GPU, &err) == KVIX_OK);
        CHECK(kvix_backend_add_key(ops, be, i, b[i], nb, cb, 1, KVIX_MEDIUM_GPU, &err) == KVIX_OK);
        if (i >= 1) /* slot 2 holds b's blocks 1.. but also a's root: a jump may land on them */
            CHECK(kvix_backend_add_key(ops, be, i, b[i], nb, cb, 2, KVIX_MEDIUM_GPU, &err) == KVIX_OK);
        ca = na;
        cb = nb;
    }
    CHECK(kvix_backend_add_key(ops, be, 0, a[0], a[0], 0, 2, KVIX_MEDIUM_GPU, &err) == KVIX_OK);
    CHECK_U64(ops->unique_blocks(be), 2 * L);
    uint64_t canon[L];
    kvix_qchain q = {a, canon, L, 0};
    kvix_qhits hits = {0};
    CHECK(ops->query(be, &q, &hits, &err) == KVIX_OK);
    CHECK(bc_runs_ok(&hits));
    bc_hit *rows = bc_rows(&hits);
    CHECK_U64(hits.n, 2);
    if (hits.n == 2) {
        CHECK_U64(rows[0].slot, 0);
        CHECK_U64(rows[0].blocks, L);
        CHECK_U64(rows[1].slot, 2);
        CHECK_U64(rows[1].blocks, 1);
    }
    free(rows);
    kvix__qhits_release(&hits);
    ops->destroy(be);
}

/* Random stores (parent first, like an engine), evictions (any block, so
 * middle ones too), stray adds of blocks whose parent the slot lacks, tiers,
 * and slots appearing over time past 64 and 128; every few steps a query is
 * checked against the model. Slots spread by mul and mask (bc_spread; mask
 * 0: none), so that sets take every form (lib/core/hset_int.h). */
static inline void bc_scenario_random_spread(const kvix_backend_ops *ops, unsigned jump,
                                             int binsearch, uint64_t seed, int steps,
                                             uint32_t mul, uint32_t mask)
{
    void *be = bc_create(ops, jump, binsearch);
    if (!be)
        return;
    uint64_t rng = seed;
    bc_model m;
    enum { NODES = 500, SLOTS = 150, QMAX = 512 };
    bc_model_init(&m, NODES, SLOTS, 3, &rng);
    if (mask)
        bc_spread(&m, mul, mask);
    size_t base = ops->memory(be);
    uint64_t local[QMAX];
    int bad = 0;
    for (int step = 0; step < steps && !bad; step++) {
        int active = 3 + step * SLOTS / (steps > 0 ? steps : 1);
        if (active > SLOTS)
            active = SLOTS;
        int s = (int)(bc_rand(&rng) % (uint64_t)active);
        int k = (int)(bc_rand(&rng) % NODES);
        unsigned r = (unsigned)(bc_rand(&rng) % 100);
        unsigned tier = r % 7 == 0 ? (unsigned)(bc_rand(&rng) % KVIX_MEDIUM_COUNT) : 0;
        if (r < 40) {
            int path[512], np = 0;
            for (int j = k; j >= 0 && np < 512; j = m.nodes[j].parent)
                path[np++] = j;
            while (np > 0)
                bad |= bc_add(ops, be, &m, s, path[--np], tier) != KVIX_OK;
        } else if (r < 75) {
            for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
                bc_del(ops, be, &m, s, k, t);
        } else if (r < 85) {
            bad |= bc_add(ops, be, &m, s, k, tier) != KVIX_OK;
        } else {
            size_t n = bc_path(&m, k, local, QMAX, (int)(bc_rand(&rng) % 3), &rng);
            char what[64];
            snprintf(what, sizeof what, "random step %d (jump %u, bs %d)", step, jump, binsearch);
            if (n && !bc_check_locals(ops, be, &m, local, n, what))
                bad = 1;
        }
    }
    CHECK(!bad);
    /* every root-to-node path once more */
    for (int k = 0; k < NODES && !bad; k += 7) {
        size_t n = bc_path(&m, k, local, QMAX, 1, &rng);
        if (n && !bc_check_locals(ops, be, &m, local, n, "random: final"))
            bad = 1;
    }
    for (int s = 0; s < SLOTS; s++)
        for (int k = 0; k < NODES; k++)
            for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
                bc_del(ops, be, &m, s, k, t);
    CHECK_U64(ops->unique_blocks(be), 0);
    /* memory returns: nodes, tier sets and tables are reclaimed; what stays is
     * the per-slot bookkeeping for the slots seen (in chunks of 256 slots:
     * spread slots take one each) */
    size_t keep = 16384 + (mask ? (size_t)SLOTS * 1100 : 0);
    size_t after = bc_settled_memory(ops, be, base + keep);
    CHECK(after <= base + keep);
    if (after > base + keep)
        printf("#   memory %zu after removing everything, %zu when empty\n", after, base);
    ops->destroy(be);
    bc_model_free(&m);
}

static inline void bc_scenario_random(const kvix_backend_ops *ops, unsigned jump, int binsearch,
                                      uint64_t seed, int steps)
{
    bc_scenario_random_spread(ops, jump, binsearch, seed, steps, 1, 0);
}

/* Many blocks, then none: memory goes back down. */
static inline void bc_scenario_reclaim(const kvix_backend_ops *ops)
{
    void *be = bc_create(ops, 0, 1);
    if (!be)
        return;
    size_t base = ops->memory(be);
    kvix_err err;
    int n = (int)(20000 * th_scale());
    for (int round = 0; round < 2; round++) {
        for (int c = 0; c < n / 50; c++) {
            uint64_t canon = 0;
            for (uint32_t i = 0; i < 50; i++) {
                uint64_t local = (uint64_t)c * 1000 + i + 1, pc = canon;
                canon = i ? kvix_hash_seq_next(pc, local) : local;
                CHECK(kvix_backend_add_key(ops, be, i, local, canon, pc, (uint32_t)(c % 300), 0, &err) == 0);
            }
        }
        size_t full = ops->memory(be);
        CHECK(full > base + (size_t)n * 32);
        CHECK_U64(ops->unique_blocks(be), (uint64_t)(n / 50) * 50);
        for (int c = 0; c < n / 50; c++) {
            uint64_t canon = 0;
            for (uint32_t i = 0; i < 50; i++) {
                uint64_t local = (uint64_t)c * 1000 + i + 1, pc = canon;
                canon = i ? kvix_hash_seq_next(pc, local) : local;
                kvix_backend_del_key(ops, be, i, local, canon, pc, (uint32_t)(c % 300), 0);
            }
        }
        CHECK_U64(ops->unique_blocks(be), 0);
        size_t after = bc_settled_memory(ops, be, base + 16383);
        CHECK(after < base + 16384);
        if (after >= base + 16384)
            printf("#   memory %zu full, %zu after, %zu empty\n", full, after, base);
    }
    ops->destroy(be);
}

/* ---- concurrent: writers on disjoint slots, queries all the while ---- */

#include <pthread.h>
#include <stdatomic.h>

typedef struct bc_mt {
    const kvix_backend_ops *ops;
    void *be;
    bc_model *m;
    int steps, slot0, nslots; /* a writer's slots: slot0 .. slot0 + nslots - 1 */
    uint64_t seed;
    const uint64_t *stable; /* the stable slot's chain, held all along by slot 0 */
    size_t nstable;
    _Atomic int *writers_left;
    _Atomic long *bad, *queries;
} bc_mt;

static void *bc_mt_writer(void *arg)
{
    bc_mt *t = arg;
    uint64_t rng = t->seed;
    for (int step = 0; step < t->steps; step++) {
        int s = t->slot0 + (int)(bc_rand(&rng) % (uint64_t)t->nslots);
        int k = (int)(bc_rand(&rng) % (uint64_t)t->m->nnodes);
        unsigned r = (unsigned)(bc_rand(&rng) % 100);
        unsigned tier = r % 5 == 0 ? (unsigned)(bc_rand(&rng) % KVIX_MEDIUM_COUNT) : 0;
        if (r < 45) {
            int path[512], np = 0;
            for (int j = k; j >= 0 && np < 512; j = t->m->nodes[j].parent)
                path[np++] = j;
            while (np > 0)
                if (bc_add(t->ops, t->be, t->m, s, path[--np], tier) != KVIX_OK)
                    atomic_fetch_add(t->bad, 1);
        } else if (r < 90) {
            for (unsigned u = 0; u < KVIX_MEDIUM_COUNT; u++)
                bc_del(t->ops, t->be, t->m, s, k, u);
        } else if (bc_add(t->ops, t->be, t->m, s, k, tier) != KVIX_OK) {
            atomic_fetch_add(t->bad, 1);
        }
    }
    atomic_fetch_sub(t->writers_left, 1);
    return NULL;
}

/* Queries while writers run: the stable slot must always match its whole
 * chain on gpu; every answer must be well formed. */
static void *bc_mt_reader(void *arg)
{
    bc_mt *t = arg;
    uint64_t rng = t->seed;
    uint64_t local[600], canon[600];
    kvix_qhits hits = {0};
    kvix_err err;
    int total = t->m->nslots;
    uint8_t *seen = calloc((size_t)total, 1);
    do {
        size_t n;
        int stable = bc_rand(&rng) % 2 == 0;
        if (stable) {
            memcpy(local, t->stable, t->nstable * sizeof *local);
            n = t->nstable;
        } else {
            n = bc_path(t->m, (int)(bc_rand(&rng) % (uint64_t)t->m->nnodes), local, 600, 2, &rng);
        }
        kvix_qchain q = {local, canon, n, 0};
        kvix_qhits_clear(&hits);
        if (t->ops->query(t->be, &q, &hits, &err) != KVIX_OK) {
            atomic_fetch_add(t->bad, 1);
            continue;
        }
        atomic_fetch_add(t->queries, 1);
        if (!bc_runs_ok(&hits))
            atomic_fetch_add(t->bad, 1);
        int found0 = 0;
        bc_hit *rows = bc_unsorted_rows(&hits);
        for (size_t i = 0; i < hits.n; i++) {
            bc_hit *h = &rows[i];
            h->slot = bc_mslot(t->m, h->slot);
            uint32_t sum = 0;
            for (unsigned u = 0; u < KVIX_MEDIUM_COUNT; u++)
                sum += h->tier_blocks[u];
            if (h->slot >= (uint32_t)total || seen[h->slot] || h->blocks == 0 || h->blocks > n ||
                sum > KVIX_MEDIUM_COUNT * h->blocks)
                atomic_fetch_add(t->bad, 1);
            else
                seen[h->slot] = 1;
            if (h->slot == 0) {
                found0 = 1;
                if (stable && (h->blocks != n || h->tier_blocks[KVIX_MEDIUM_GPU] != n))
                    atomic_fetch_add(t->bad, 1);
            }
        }
        for (size_t i = 0; i < hits.n; i++)
            if (bc_mslot(t->m, hits.slot[i]) < (uint32_t)total)
                seen[bc_mslot(t->m, hits.slot[i])] = 0;
        free(rows);
        if (stable && !found0)
            atomic_fetch_add(t->bad, 1);
    } while (atomic_load(t->writers_left) > 0);
    kvix__qhits_release(&hits);
    free(seen);
    return NULL;
}

/* nw writer threads (writer; each per slots from slot 1 on, steps as its
 * loop counts them) and nr readers checking the stable chain meanwhile
 * (bc_mt_reader), started and joined: no wrong answer may be seen, and some
 * queries must have run. */
enum { BC_MT_MAX = 4 };
static void bc_mt_run(const kvix_backend_ops *ops, void *be, bc_model *m, int nw, int per,
                      int nr, int steps, uint64_t seed_mul, const uint64_t *stable,
                      size_t nstable, void *(*writer)(void *))
{
    _Atomic int left = nw;
    _Atomic long bad = 0, queries = 0;
    bc_mt t[2 * BC_MT_MAX];
    pthread_t th[2 * BC_MT_MAX];
    if (!CHECK(nw <= BC_MT_MAX && nr <= BC_MT_MAX))
        return;
    for (int i = 0; i < nw + nr; i++)
        t[i] = (bc_mt){ops, be, m, steps, 1 + i * per, per, th_seed() + seed_mul * (uint64_t)i,
                       stable, nstable, &left, &bad, &queries};
    for (int i = nw; i < nw + nr; i++) /* readers first: they watch every write */
        pthread_create(&th[i], NULL, bc_mt_reader, &t[i]);
    for (int i = 0; i < nw; i++)
        pthread_create(&th[i], NULL, writer, &t[i]);
    for (int i = 0; i < nw + nr; i++)
        pthread_join(th[i], NULL);
    CHECK_U64(atomic_load(&bad), 0);
    CHECK(atomic_load(&queries) > 0);
}


static inline void bc_scenario_mt_spread(const kvix_backend_ops *ops, unsigned jump,
                                         int binsearch, uint32_t mul, uint32_t mask)
{
    enum { WRITERS = 3, PER = 24, READERS = 2, NODES = 400 };
    void *be = bc_create(ops, jump, binsearch);
    if (!be)
        return;
    uint64_t rng = th_seed() ^ 0x5157;
    bc_model m;
    bc_model_init(&m, NODES, 1 + WRITERS * PER, 3, &rng);
    if (mask)
        bc_spread(&m, mul, mask);
    /* the stable chain: the deepest node's path, held by slot 0 on gpu */
    int deep = 0;
    for (int k = 0; k < NODES; k++)
        if (m.nodes[k].pos > m.nodes[deep].pos)
            deep = k;
    uint64_t stable[600];
    size_t nstable = bc_path(&m, deep, stable, 600, 0, &rng);
    for (int j = deep; j >= 0; j = m.nodes[j].parent)
        CHECK(bc_add(ops, be, &m, 0, j, KVIX_MEDIUM_GPU) == KVIX_OK);
    bc_mt_run(ops, be, &m, WRITERS, PER, READERS, (int)(20000 * th_scale()), 77, stable, nstable,
              bc_mt_writer);
    /* quiet again: every answer exact */
    uint64_t local[600];
    int wrong = 0;
    for (int k = 0; k < NODES && !wrong; k += 3) {
        size_t n = bc_path(&m, k, local, 600, 1, &rng);
        if (n && !bc_check_locals(ops, be, &m, local, n, "after concurrent writers"))
            wrong = 1;
    }
    for (int s = 0; s < m.nslots; s++)
        for (int k = 0; k < NODES; k++)
            for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
                bc_del(ops, be, &m, s, k, t);
    CHECK_U64(ops->unique_blocks(be), 0);
    ops->destroy(be);
    bc_model_free(&m);
}

static inline void bc_scenario_mt(const kvix_backend_ops *ops, unsigned jump, int binsearch)
{
    bc_scenario_mt_spread(ops, jump, binsearch, 1, 0);
}

/* ---- concurrent: one chain's holder sets through every form and back ---- */

/* Writer: each round, its slots (in random order) store the whole chain,
 * every seventh also on cpu in odd rounds, then (in random order) remove
 * it, deepest block first: the chain's sets go from a few holders inline to
 * an array and a bitset (with tiers or not) and back, again and again,
 * while readers query. */
static void *bc_churn_writer(void *arg)
{
    bc_mt *t = arg;
    uint64_t rng = t->seed;
    int *order = malloc((size_t)t->nslots * sizeof *order);
    for (int round = 0; round < t->steps; round++) {
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < t->nslots; i++)
                order[i] = t->slot0 + i;
            for (int i = t->nslots; i > 1; i--) {
                int j = (int)(bc_rand(&rng) % (uint64_t)i), x = order[i - 1];
                order[i - 1] = order[j];
                order[j] = x;
            }
            for (int i = 0; i < t->nslots; i++) {
                int s = order[i];
                for (int k = 0; k < t->m->nnodes; k++) {
                    if (pass == 1) {
                        for (unsigned u = 0; u < KVIX_MEDIUM_COUNT; u++)
                            bc_del(t->ops, t->be, t->m, s, t->m->nnodes - 1 - k, u);
                        continue;
                    }
                    if (bc_add(t->ops, t->be, t->m, s, k, KVIX_MEDIUM_GPU) != KVIX_OK ||
                        (round % 2 && s % 7 == 0 &&
                         bc_add(t->ops, t->be, t->m, s, k, KVIX_MEDIUM_CPU) != KVIX_OK))
                        atomic_fetch_add(t->bad, 1);
                }
            }
        }
    }
    free(order);
    atomic_fetch_sub(t->writers_left, 1);
    return NULL;
}

/* A chain of D blocks held by slot 0 all along (the stable chain) and by
 * 2 x PER more slots coming and going, spread over 1024 slots (nw 16: sets
 * of 5 to 63 holders are arrays, more a bitset, back to an array at 26;
 * with tiers, a bitset from 216): queries must always see slot 0 with the
 * whole chain on gpu, each hit once, well formed; exact against the model
 * once quiet. */
static inline void bc_scenario_churn(const kvix_backend_ops *ops)
{
    enum { WRITERS = 2, PER = 120, READERS = 2, D = 6 };
    void *be = bc_create(ops, 0, 1);
    if (!be)
        return;
    bc_model m;
    memset(&m, 0, sizeof m);
    m.nnodes = D;
    m.nslots = 1 + WRITERS * PER;
    m.nodes = calloc(D, sizeof *m.nodes);
    m.held = calloc((size_t)D * (size_t)m.nslots, 1);
    m.rep = calloc(D, sizeof *m.rep);
    bc_spread(&m, 0x9e37 | 1, 0x3ff);
    uint64_t stable[D];
    for (int k = 0; k < D; k++) {
        bc_node *n = &m.nodes[k];
        m.rep[k] = k;
        n->parent = k - 1;
        n->pos = (uint32_t)k;
        n->local = stable[k] = 7000 + (uint64_t)k;
        n->pcanon = k ? m.nodes[k - 1].canon : 0;
        n->canon = k ? kvix_hash_seq_next(n->pcanon, n->local) : n->local;
        CHECK(bc_add(ops, be, &m, 0, k, KVIX_MEDIUM_GPU) == KVIX_OK);
    }
    bc_mt_run(ops, be, &m, WRITERS, PER, READERS, (int)(12 * th_scale()) + 1, 31, stable, D,
              bc_churn_writer);
    CHECK(bc_check_locals(ops, be, &m, stable, D, "churn: quiet"));
    /* once more up to an array, a bitset, one with tiers, quiet, then down
     * to nothing */
    for (int s = 1; s < m.nslots; s++) {
        for (int k = 0; k < D; k++)
            CHECK(bc_add(ops, be, &m, s, k, KVIX_MEDIUM_GPU) == KVIX_OK);
        if (s == 40)
            CHECK(bc_check_locals(ops, be, &m, stable, D, "churn: 41 slots"));
    }
    CHECK(bc_check_locals(ops, be, &m, stable, D, "churn: all slots"));
    for (int s = 5; s < m.nslots; s += 5)
        for (int k = 0; k < D; k++)
            CHECK(bc_add(ops, be, &m, s, k, KVIX_MEDIUM_DISK) == KVIX_OK);
    CHECK(bc_check_locals(ops, be, &m, stable, D, "churn: tiers"));
    for (int s = 0; s < m.nslots; s++)
        for (int k = D; k-- > 0;)
            for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
                bc_del(ops, be, &m, s, k, t);
    CHECK_U64(ops->unique_blocks(be), 0);
    ops->destroy(be);
    bc_model_free(&m);
}

#endif
