/* Differential test of the index: random stores (shared prefixes, the same
 * local hash under other prefixes and at other positions, engine-hash
 * aliases, re-stores, moves, unknown parents, wrong block sizes), removes
 * (with unknown hashes, per tier), clears, worker removals and queries, on
 * every backend, each answer compared exactly with a brute-force model
 * written here independently of lib/index/index.c; foreach, stats and totals
 * compared periodically. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvix/hash.h"
#include "kvix/index.h"
#include "kvix/snapshot.h"

#define NPART 2
#define NWORK 5
#define NDP 2
#define NWS (NPART * NWORK * NDP)
#define MAXQ 48

static const char *const part_model[NPART] = {"default", "m2"};
static const uint32_t part_bs[NPART] = {4, 16};
static const uint64_t worker_id[NWORK] = {3, 1, 42, UINT64_C(1) << 40, 7};

static uint64_t rng_s;
static uint64_t rnd(void) { return th_splitmix(&rng_s); }
static unsigned below(unsigned n) { return (unsigned)(rnd() % n); }

/* ---- the model -------------------------------------------------------- */

typedef struct mblk {
    uint64_t engine, local, canon, parent, pcanon;
    uint32_t pos;
    unsigned tiers;
} mblk;

typedef struct mws {
    int part, registered, has_eid;
    uint64_t worker, eid;
    uint32_t dp;
    mblk *v;
    size_t n, cap;
} mws;

static mws model[NWS];
static int part_exists[NPART];
static kvix_apply_result mtot;

static mws *ws_of(int part, int w, int dp) { return &model[(part * NWORK + w) * NDP + dp]; }

static mblk *mfind(mws *m, uint64_t engine)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].engine == engine)
            return &m->v[i];
    return NULL;
}

static void model_reset(void)
{
    for (int p = 0; p < NPART; p++) {
        part_exists[p] = 0;
        for (int w = 0; w < NWORK; w++)
            for (int d = 0; d < NDP; d++) {
                mws *m = ws_of(p, w, d);
                free(m->v);
                memset(m, 0, sizeof *m);
                m->part = p;
                m->worker = worker_id[w];
                m->dp = (uint32_t)d;
            }
    }
    memset(&mtot, 0, sizeof mtot);
}

static void model_eid(mws *m, const kvix_event *ev)
{
    if (ev->has_eid) {
        m->registered = 1;
        m->has_eid = 1;
        m->eid = ev->eid;
    }
}

static int model_stored(mws *m, const kvix_event *ev, kvix_apply_result *r)
{
    if (part_exists[m->part] && ev->bs != part_bs[m->part])
        return KVIX_EBLOCKSIZE;
    uint32_t pos = 0;
    uint64_t prev = 0, parent = 0;
    if (ev->has_parent) {
        mblk *pe = mfind(m, ev->parent);
        if (!pe)
            return KVIX_EPARENT;
        pos = pe->pos + 1;
        prev = pe->canon;
        parent = ev->parent;
    }
    part_exists[m->part] = 1;
    m->registered = 1;
    unsigned bit = 1u << ev->medium;
    for (size_t i = 0; i < ev->nblocks; i++, pos++) {
        uint64_t local = ev->blocks[i].local, engine = ev->blocks[i].seq;
        uint64_t canon = pos ? kvix_hash_seq_next(prev, local) : local;
        mblk *e = mfind(m, engine);
        if (e && e->pos == pos && e->canon == canon) {
            if (e->tiers & bit) {
                r->duplicate++;
            } else {
                e->tiers |= bit;
                r->stored++;
            }
        } else {
            if (!e) {
                if (m->n == m->cap) {
                    m->cap = m->cap ? 2 * m->cap : 16;
                    m->v = realloc(m->v, m->cap * sizeof *m->v);
                }
                e = &m->v[m->n++];
            }
            e->engine = engine;
            e->local = local;
            e->canon = canon;
            e->pos = pos;
            e->parent = pos ? parent : 0;
            e->pcanon = pos ? prev : 0;
            e->tiers = bit;
            r->stored++;
        }
        prev = canon;
        parent = engine;
    }
    model_eid(m, ev);
    return KVIX_OK;
}

static void mdel(mws *m, mblk *e) { *e = m->v[--m->n]; }

static int model_removed(mws *m, const kvix_event *ev, kvix_apply_result *r)
{
    unsigned bit = 1u << ev->medium;
    for (size_t i = 0; i < ev->nhashes; i++) {
        mblk *e = mfind(m, ev->hashes[i]);
        if (!e || !(e->tiers & bit)) {
            r->unknown++;
            continue;
        }
        e->tiers &= ~bit;
        if (!e->tiers)
            mdel(m, e);
        r->removed++;
    }
    if (part_exists[m->part])
        model_eid(m, ev);
    return KVIX_OK;
}

static int model_cleared(mws *m, const kvix_event *ev, kvix_apply_result *r)
{
    r->removed += (uint32_t)m->n;
    m->n = 0;
    if (part_exists[m->part])
        model_eid(m, ev);
    return KVIX_OK;
}

static void model_remove_worker(int w, int dp, kvix_apply_result *r) /* dp < 0: all */
{
    for (int p = 0; p < NPART; p++)
        for (int d = 0; d < NDP; d++) {
            if (dp >= 0 && d != dp)
                continue;
            mws *m = ws_of(p, w, d);
            r->removed += (uint32_t)m->n;
            m->n = 0;
            m->has_eid = 0;
            m->eid = 0;
        }
}

static int score_cmp(const void *a, const void *b)
{
    const kvix_score *x = a, *y = b;
    if (x->blocks != y->blocks)
        return x->blocks > y->blocks ? -1 : 1;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return (x->dp > y->dp) - (x->dp < y->dp);
}

static size_t model_query(int part, const uint64_t *local, size_t n, kvix_score *out)
{
    uint64_t qc[MAXQ];
    for (size_t i = 0; i < n; i++)
        qc[i] = i ? kvix_hash_seq_next(qc[i - 1], local[i]) : local[i];
    size_t ns = 0;
    for (int w = 0; w < NWORK; w++)
        for (int d = 0; d < NDP; d++) {
            mws *m = ws_of(part, w, d);
            kvix_score s;
            memset(&s, 0, sizeof s);
            s.worker = m->worker;
            s.dp = m->dp;
            for (size_t i = 0; i < n; i++) {
                unsigned tiers = 0;
                for (size_t j = 0; j < m->n; j++)
                    if (m->v[j].pos == i && m->v[j].canon == qc[i])
                        tiers |= m->v[j].tiers;
                if (!tiers)
                    break;
                s.blocks++;
                for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
                    s.tier_blocks[t] += (tiers >> t) & 1;
            }
            if (s.blocks)
                out[ns++] = s;
        }
    if (ns > 1)
        qsort(out, ns, sizeof *out, score_cmp);
    return ns;
}

/* ---- checks against the index ----------------------------------------- */

static int failed; /* stop a seed after its first failure: one report, not thousands */

static void check_result(const char *what, int rc, int want, const kvix_apply_result *r,
                         const kvix_apply_result *m, long op)
{
    if (rc != want || r->stored != m->stored || r->duplicate != m->duplicate ||
        r->removed != m->removed || r->unknown != m->unknown) {
        printf("#   op %ld %s: rc %d want %d; stored %" PRIu64 "/%" PRIu64 " dup %" PRIu64
               "/%" PRIu64 " removed %" PRIu64 "/%" PRIu64 " unknown %" PRIu64 "/%" PRIu64 "\n",
               op, what, rc, want, r->stored, m->stored, r->duplicate, m->duplicate, r->removed,
               m->removed, r->unknown, m->unknown);
        CHECK(0);
        failed = 1;
    }
}

static kvix_answer ans;

static void check_query(kvix_index *idx, int part, const uint64_t *local, size_t n, long op)
{
    kvix_score want[NWS];
    size_t nw = model_query(part, local, n, want);
    kvix_err err;
    int rc = kvix_index_query(idx, part_model[part], "default", local, n, &ans, &err);
    int ok = rc == KVIX_OK && ans.nscores == nw && ans.query_blocks == n;
    for (size_t i = 0; ok && i < nw; i++) {
        const kvix_score *a = &ans.scores[i], *b = &want[i];
        ok = a->worker == b->worker && a->dp == b->dp && a->blocks == b->blocks &&
             memcmp(a->tier_blocks, b->tier_blocks, sizeof a->tier_blocks) == 0;
    }
    if (!ok) {
        printf("#   op %ld query of %zu blocks in %s: rc %d, %zu scores, model %zu\n", op, n,
               part_model[part], rc, ans.nscores, nw);
        for (size_t i = 0; i < ans.nscores && i < 8; i++)
            printf("#     index: worker %" PRIu64 " dp %u blocks %u\n", ans.scores[i].worker,
                   ans.scores[i].dp, ans.scores[i].blocks);
        for (size_t i = 0; i < nw && i < 8; i++)
            printf("#     model: worker %" PRIu64 " dp %u blocks %u\n", want[i].worker,
                   want[i].dp, want[i].blocks);
        CHECK(0);
        failed = 1;
    }
}

typedef struct walk_ctx {
    int part, wsi, bad;
    mblk *tmp;
    size_t tmp_cap;
} walk_ctx;

static int blk_cmp(const void *a, const void *b)
{
    const mblk *x = a, *y = b;
    if (x->pos != y->pos)
        return x->pos < y->pos ? -1 : 1;
    return (x->engine > y->engine) - (x->engine < y->engine);
}

static int visible(const mws *m) { return m->n > 0 || m->has_eid; }

/* Next visible model state at or after c->wsi in (partition, worker, dp)
 * order; worker ids are not sorted in worker_id[], so search the smallest. */
static mws *next_visible(int part, uint64_t after_w, uint32_t after_dp, int first)
{
    mws *best = NULL;
    for (int w = 0; w < NWORK; w++)
        for (int d = 0; d < NDP; d++) {
            mws *m = ws_of(part, w, d);
            if (!visible(m))
                continue;
            if (!first && (m->worker < after_w || (m->worker == after_w && m->dp <= after_dp)))
                continue;
            if (!best || m->worker < best->worker ||
                (m->worker == best->worker && m->dp < best->dp))
                best = m;
        }
    return best;
}

static mws *cursor;
static int cursor_part, cursor_first, visited_empty[NPART];

static int walk_visit(void *ctx, const char *model_name, const char *tenant, uint32_t bs,
                      uint64_t worker, uint32_t dp, int has_eid, uint64_t eid,
                      const kvix_block_info *b, size_t n)
{
    walk_ctx *c = ctx;
    int p = strcmp(model_name, part_model[0]) == 0 ? 0 : strcmp(model_name, part_model[1]) == 0 ? 1 : -1;
    if (p < 0 || strcmp(tenant, "default") || bs != part_bs[p] || !part_exists[p]) {
        c->bad = 1;
        return 1;
    }
    if (p != cursor_part) {
        if (p < cursor_part) {
            c->bad = 2;
            return 1;
        }
        cursor_part = p;
        cursor_first = 1;
    }
    if (worker == UINT64_MAX && n == 0 && !has_eid) {
        if (next_visible(p, 0, 0, 1))
            c->bad = 3;
        visited_empty[p] = 1;
        return c->bad;
    }
    mws *m = cursor_first ? next_visible(p, 0, 0, 1)
                          : next_visible(p, cursor->worker, cursor->dp, 0);
    cursor_first = 0;
    cursor = m;
    if (!m || m->worker != worker || m->dp != dp || m->has_eid != has_eid ||
        (has_eid && m->eid != eid) || m->n != n) {
        c->bad = 4;
        return 1;
    }
    if (n > c->tmp_cap) {
        c->tmp_cap = n * 2;
        c->tmp = realloc(c->tmp, c->tmp_cap * sizeof *c->tmp);
    }
    if (n) {
        memcpy(c->tmp, m->v, n * sizeof *m->v);
        qsort(c->tmp, n, sizeof *c->tmp, blk_cmp);
    }
    for (size_t i = 0; i < n; i++) {
        const mblk *e = &c->tmp[i];
        if (b[i].position != e->pos || b[i].engine != e->engine || b[i].local != e->local ||
            b[i].tiers != e->tiers || b[i].canon != e->canon ||
            (e->pos && (b[i].parent != e->parent || b[i].parent_canon != e->pcanon))) {
            c->bad = 5;
            return 1;
        }
    }
    return 0;
}

static void check_all(kvix_index *idx, long op)
{
    walk_ctx c = {0, 0, 0, NULL, 0};
    cursor = NULL;
    cursor_part = -1;
    memset(visited_empty, 0, sizeof visited_empty);
    int rc = kvix_index_foreach(idx, walk_visit, &c);
    free(c.tmp);
    /* every visible state was visited: count them */
    size_t vis = 0, blocks = 0, uniq = 0, parts = 0;
    for (int p = 0; p < NPART; p++) {
        parts += part_exists[p];
        size_t pv = 0;
        for (int i = 0; i < NWORK * NDP; i++) {
            mws *m = &model[p * NWORK * NDP + i];
            pv += visible(m);
            blocks += m->n;
            for (size_t j = 0; j < m->n; j++) { /* first holder of (pos, canon) counts */
                int seen = 0;
                for (int k = 0; k <= i && !seen; k++) {
                    mws *o = &model[p * NWORK * NDP + k];
                    size_t lim = k == i ? j : o->n;
                    for (size_t l = 0; l < lim && !seen; l++)
                        seen = o->v[l].pos == m->v[j].pos && o->v[l].canon == m->v[j].canon;
                }
                uniq += !seen;
            }
        }
        if (part_exists[p] && !pv && !visited_empty[p])
            c.bad = 6;
        vis += pv;
    }
    kvix_index_stats st;
    kvix_index_stats_get(idx, &st);
    if (rc || c.bad || st.partitions != parts || st.workers != vis || st.blocks != blocks ||
        st.unique_blocks != uniq) {
        printf("#   op %ld walk: rc %d bad %d; partitions %zu/%zu workers %zu/%zu blocks %zu/%zu "
               "unique %zu/%zu\n",
               op, rc, c.bad, st.partitions, parts, st.workers, vis, st.blocks, blocks,
               st.unique_blocks, uniq);
        CHECK(0);
        failed = 1;
    }
}

/* ---- random operations ------------------------------------------------ */

static kvix_event ev = {.model = "default", .tenant = "default"};

/* Locals from a tiny alphabet: the same chunk hash recurs under other
 * prefixes and at other positions all the time. One of them is crafted: the
 * rolling hash of (100, 101), so at position 0 it is the canonical hash that
 * (100, 101) has at position 1. */
static uint64_t rnd_local(void)
{
    unsigned r = below(6);
    return r < 5 ? 100 + r : kvix_hash_seq_next(100, 101);
}

/* Engine hashes: a function of (canonical place, salt), so a re-store of the
 * same place is a duplicate and another salt an alias; sometimes a hash the
 * worker already uses elsewhere (a move), or a fresh random one. */
static uint64_t rnd_engine(mws *m, uint64_t canon, uint32_t pos)
{
    unsigned r = below(100);
    if (r < 3 && m->n)
        return m->v[below((unsigned)m->n)].engine;
    if (r < 6)
        return rnd();
    return kvix_hash_seq_next(canon ^ pos, below(2));
}

/* A query: a held chain (rebuilt through parents), maybe changed or extended,
 * or random locals. */
static size_t rnd_query(int part, uint64_t *q)
{
    size_t n = 0;
    mws *m = ws_of(part, below(NWORK), below(NDP));
    if (below(10) < 7 && m->n) {
        mblk *e = &m->v[below((unsigned)m->n)];
        if (e->pos + 1 <= MAXQ - 4) {
            n = e->pos + 1;
            for (size_t i = 0; i < n; i++)
                q[i] = rnd_local();
            for (;;) { /* walk up through held parents */
                q[e->pos] = e->local;
                if (!e->pos)
                    break;
                mblk *pe = mfind(m, e->parent);
                if (!pe || pe->pos + 1 != e->pos)
                    break;
                e = pe;
            }
            if (below(4) == 0)
                q[below((unsigned)n)] = rnd_local();
        }
    }
    size_t extra = below(4);
    while (extra-- && n < MAXQ)
        q[n++] = rnd_local();
    return n;
}

static void one_op(kvix_index *idx, long op)
{
    int part = (int)below(NPART), w = (int)below(NWORK), dp = (int)below(NDP);
    mws *m = ws_of(part, w, dp);
    unsigned kind = below(100);
    kvix_apply_result r, mr;
    memset(&mr, 0, sizeof mr);
    kvix_err err;
    int rc, want;
    kvix_event_reset(&ev);
    kvix_event_set_name(ev.model, part_model[part], strlen(part_model[part]), NULL);
    ev.worker = m->worker;
    ev.dp = m->dp;
    ev.medium = below(3) ? KVIX_MEDIUM_GPU : (int)below(KVIX_MEDIUM_COUNT);
    ev.has_eid = below(2);
    ev.eid = (uint64_t)op;
    if (kind < 45) {
        ev.type = KVIX_EV_STORED;
        ev.bs = part_bs[part];
        if (part_exists[part] && below(50) == 0)
            ev.bs = part_bs[part] * 2; /* the wrong block size */
        uint32_t pos = 0;
        uint64_t prev = 0;
        unsigned how = below(10);
        if (how < 6 && m->n) { /* extend a held block, if not too deep */
            mblk *pe = &m->v[below((unsigned)m->n)];
            if (pe->pos < 30) {
                ev.has_parent = 1;
                ev.parent = pe->engine;
                pos = pe->pos + 1;
                prev = pe->canon;
            }
        } else if (how == 6) { /* a parent the worker does not hold */
            ev.has_parent = 1;
            ev.parent = below(2) ? rnd() : ws_of(part, below(NWORK), below(NDP))->worker;
        }
        size_t nb = 1 + below(below(4) ? 4 : 12);
        kvix_event_reserve_blocks(&ev, nb, NULL);
        for (size_t i = 0; i < nb; i++, pos++) {
            uint64_t local = rnd_local();
            uint64_t canon = pos ? kvix_hash_seq_next(prev, local) : local;
            ev.blocks[i].local = local;
            ev.blocks[i].seq = rnd_engine(m, canon, pos);
            prev = canon;
        }
        ev.nblocks = nb;
        want = model_stored(m, &ev, &mr);
        rc = kvix_index_apply(idx, &ev, &r, &err);
        check_result("stored", rc, want, &r, &mr, op);
    } else if (kind < 75) {
        ev.type = KVIX_EV_REMOVED;
        size_t nh = 1 + below(6);
        kvix_event_reserve_hashes(&ev, nh, NULL);
        for (size_t i = 0; i < nh; i++)
            ev.hashes[i] = m->n && below(5) ? m->v[below((unsigned)m->n)].engine : rnd();
        ev.nhashes = nh;
        want = model_removed(m, &ev, &mr);
        rc = kvix_index_apply(idx, &ev, &r, &err);
        check_result("removed", rc, want, &r, &mr, op);
    } else if (kind < 78) {
        ev.type = KVIX_EV_CLEARED;
        want = model_cleared(m, &ev, &mr);
        rc = kvix_index_apply(idx, &ev, &r, &err);
        check_result("cleared", rc, want, &r, &mr, op);
    } else if (kind < 79) {
        if (below(2)) {
            model_remove_worker(w, -1, &mr);
            rc = kvix_index_remove_worker(idx, m->worker, &r, &err);
        } else {
            model_remove_worker(w, dp, &mr);
            rc = kvix_index_remove_worker_dp(idx, m->worker, m->dp, &r, &err);
        }
        check_result("worker removal", rc, KVIX_OK, &r, &mr, op);
    } else {
        uint64_t q[MAXQ];
        size_t n = rnd_query(part, q);
        check_query(idx, part, q, n, op);
        return;
    }
    mtot.stored += mr.stored;
    mtot.duplicate += mr.duplicate;
    mtot.removed += mr.removed;
    mtot.unknown += mr.unknown;
}

static kvix_index *mk(const char *name);

static int reload_visit(void *ctx, const char *model_name, const char *tenant, uint32_t bs,
                        uint64_t worker, uint32_t dp, int has_eid, uint64_t eid,
                        const kvix_block_info *b, size_t n)
{
    kvix_index *two = ctx;
    kvix_err err;
    int rc = kvix_index_load(two, model_name, tenant, bs, worker, dp, b, n, &err);
    if (!rc && has_eid)
        rc = kvix_index_set_eid(two, model_name, tenant, bs, worker, dp, eid, &err);
    if (rc)
        printf("#   reload: %s\n", err.msg);
    return rc;
}

/* What foreach shows, loaded into a fresh index (orphans and all), is the
 * same index: same walk, same answers. */
static void check_reload(kvix_index *idx, const char *name, long op)
{
    kvix_index *two = mk(name);
    CHECK(kvix_index_foreach(idx, reload_visit, two) == 0);
    check_all(two, op);
    for (int i = 0; i < 2000 && !failed; i++) {
        uint64_t q[MAXQ];
        int part = (int)below(NPART);
        size_t n = rnd_query(part, q);
        check_query(two, part, q, n, op);
    }
    kvix_index_free(two);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)l + 1);
    if (b && fread(b, 1, (size_t)l, f) != (size_t)l) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)l;
    return b;
}

static int apply_visit(void *ctx, const kvix_event *e)
{
    kvix_err err;
    int rc = kvix_index_apply(ctx, e, NULL, &err);
    if (rc)
        printf("#   replay: %s\n", err.msg);
    return rc;
}

/* The snapshot at path as the events kvdump prints (orphans say where
 * their parent sat), applied to a fresh index: the same index again. */
static void check_events(const char *path, const char *name, long op)
{
    kvix_snapshot *s;
    kvix_err err;
    if (!CHECK(kvix_snapshot_open(&s, path, &err) == KVIX_OK))
        return;
    kvix_index *three = mk(name);
    kvix_event scratch;
    kvix_event_init(&scratch);
    kvix_snapshot_group g;
    int rc;
    while ((rc = kvix_snapshot_next(s, &g, &err)) == KVIX_OK) {
        if (g.worker == UINT64_MAX) /* a partition without workers: no event says it */
            rc = kvix_index_load(three, g.model, g.tenant, g.bs, 0, 0, NULL, 0, &err);
        else
            rc = kvix_snapshot_group_events(&g, &scratch, apply_visit, three, NULL, &err);
        if (!rc && g.has_eid)
            rc = kvix_index_set_eid(three, g.model, g.tenant, g.bs, g.worker, g.dp, g.eid, &err);
        if (!CHECK(rc == KVIX_OK)) {
            printf("#   %s: events after op %ld\n", name, op);
            failed = 1;
            break;
        }
    }
    if (!failed)
        check_all(three, op);
    kvix_event_release(&scratch);
    kvix_index_free(three);
    kvix_snapshot_close(s);
}

/* Whatever the index accepted (moves, re-stores with other content,
 * orphans) saves to a snapshot file, which loads into an equal index: the
 * same walk and answers as the model, and the same bytes when saved again. */
static void check_snapshot(kvix_index *idx, const char *name, long op)
{
    char a[64], b[64];
    snprintf(a, sizeof a, "/tmp/kvix-diff-%d-a.kvix", (int)getpid());
    snprintf(b, sizeof b, "/tmp/kvix-diff-%d-b.kvix", (int)getpid());
    kvix_err err;
    if (!CHECK(kvix_snapshot_save(idx, a, NULL, &err) == KVIX_OK)) {
        printf("#   %s: save after op %ld: %s\n", name, op, err.msg);
        failed = 1;
        return;
    }
    kvix_index *two = mk(name);
    if (!CHECK(kvix_snapshot_load(two, a, NULL, &err) == KVIX_OK)) {
        printf("#   %s: load after op %ld: %s\n", name, op, err.msg);
        failed = 1;
    } else {
        check_all(two, op);
        CHECK(kvix_snapshot_save(two, b, NULL, &err) == KVIX_OK);
        size_t la = 0, lb = 0;
        char *da = slurp(a, &la), *db = slurp(b, &lb);
        if (!CHECK(da && db && la == lb && memcmp(da, db, la) == 0))
            failed = 1;
        free(da);
        free(db);
        if (!failed)
            check_events(a, name, op);
    }
    unlink(a);
    unlink(b);
    kvix_index_free(two);
}

static kvix_index *mk(const char *name)
{
    kvix_backend b;
    kvix_index_opts o;
    kvix_index *idx = NULL;
    kvix_err err;
    CHECK(kvix_backend_parse(name, &b) == KVIX_OK);
    kvix_index_opts_init(&o);
    o.backend = b;
    if (kvix_index_new(&idx, &o, &err)) {
        /* only a backend not in this library may be missing */
        CHECK(strstr(err.msg, "not built") && b != KVIX_BACKEND_REFERENCE);
        return NULL;
    }
    return idx;
}

static void run_backend(const char *name)
{
    long ops_per_seed = (long)(50000 * th_scale());
    int seeds = 20;
    long total = 0;
    for (int s = 0; s < seeds; s++) {
        kvix_index *idx = mk(name);
        if (!idx)
            return;
        rng_s = th_seed() + (uint64_t)s * 7919;
        model_reset();
        failed = 0;
        for (long op = 0; op < ops_per_seed && !failed; op++) {
            one_op(idx, op);
            if (op % 5000 == 4999) {
                check_all(idx, op);
                if (!failed && op % 25000 == 24999) /* each save is fsync'ed */
                    check_snapshot(idx, name, op);
            }
        }
        if (!failed)
            check_all(idx, ops_per_seed);
        if (!failed)
            check_reload(idx, name, ops_per_seed);
        if (!failed)
            check_snapshot(idx, name, ops_per_seed);
        kvix_apply_result tot;
        kvix_index_totals(idx, &tot);
        CHECK(failed || (tot.stored == mtot.stored && tot.duplicate == mtot.duplicate &&
                         tot.removed == mtot.removed && tot.unknown == mtot.unknown));
        if (failed)
            printf("#   backend %s, seed %d of this run (KVIX_TEST_SEED base %" PRIu64 ")\n",
                   name, s, th_seed());
        total += ops_per_seed;
        kvix_index_free(idx);
    }
    printf("# %s: %ld random operations over %d seeds\n", name, total, seeds);
    model_reset(); /* frees the model's arrays */
    kvix_answer_release(&ans);
    kvix_event_release(&ev);
}

TEST(differential_reference) { run_backend("reference"); }
TEST(differential_positional) { run_backend("positional"); }
TEST(differential_radix) { run_backend("radix"); }

