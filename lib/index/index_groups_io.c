/* The index's KV cache group state as bytes (kvix_index_groups_save and
 * _load): the payload of the snapshot's extension record 64, laid out in
 * kvix-snapshot(5), EXTENSIONS. One state, one payload: entries sorted, a
 * (worker, dp) whose record says no more than a state without one (group 0
 * full) left out, and a payload with no entry is no payload at all. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "index_front_int.h"
#include "utf8_int.h"

#define GROUPS_IO_VERSION 1u

/* ---- writing ------------------------------------------------------------ */

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static int app32(kvix_buf *b, uint32_t v, kvix_err *err)
{
    unsigned char x[4];
    put32(x, v);
    return kvix_buf_append(b, x, 4, err);
}

static int app64(kvix_buf *b, uint64_t v, kvix_err *err)
{
    unsigned char x[8];
    put64(x, v);
    return kvix_buf_append(b, x, 8, err);
}

static int app_names(kvix_buf *b, const part *p, kvix_err *err)
{
    size_t m = strlen(p->model), t = strlen(p->tenant);
    int rc;
    if ((rc = app32(b, (uint32_t)m, err)) || (rc = app32(b, (uint32_t)t, err)) ||
        (rc = kvix_buf_append(b, p->model, m, err)) || (rc = kvix_buf_append(b, p->tenant, t, err)))
        return rc;
    return KVIX_OK;
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

typedef struct mrow {
    uint64_t engine, groups;
    uint32_t tier;
} mrow;

static int mrow_cmp(const void *a, const void *b)
{
    const mrow *x = a, *y = b;
    if (x->engine != y->engine)
        return x->engine < y->engine ? -1 : 1;
    return x->tier < y->tier ? -1 : x->tier > y->tier;
}

/* Whether w's record says more than a state without one: group 0 full,
 * nothing else said. */
static int says_more(const wstate *w)
{
    const wgroups *g = w->grp;
    return g && (g->learned & ~UINT64_C(1) || g->full != 1 || g->member);
}

/* One (worker, dp): worker, dp, learned, full, a kind per learned group,
 * then its membership rows sorted by (engine, tier), zero masks left out. */
static int save_ws(kvix_buf *b, const part *p, const wstate *w, kvix_err *err)
{
    const wgroups *g = w->grp;
    size_t n = 0, it = 0, cap = g->member ? kvix_hmap_size(g->member) : 0;
    mrow *rows = cap ? malloc(cap * sizeof *rows) : NULL;
    if (cap && !rows)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory saving KV cache groups");
    const uint64_t *key;
    uint64_t *m;
    while (g->member && (m = kvix__hmap_next(g->member, &it, &key)))
        if (*m)
            rows[n++] = (mrow){key[0], *m, (uint32_t)key[1]};
    if (n > 1)
        qsort(rows, n, sizeof *rows, mrow_cmp);
    int rc;
    if ((rc = app_names(b, p, err)) || (rc = app64(b, w->worker, err)) ||
        (rc = app32(b, w->dp, err)) || (rc = app32(b, g->member ? 1 : 0, err)) ||
        (rc = app64(b, g->learned, err)) || (rc = app64(b, g->full, err)))
        goto out;
    for (uint32_t k = 0; k < KVIX_GROUPS_MAX && !rc; k++)
        if (g->learned & (UINT64_C(1) << k))
            rc = kvix_buf_append(b, &g->kind[k], 1, err);
    if (!rc)
        rc = app64(b, n, err);
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char x[17];
        put64(x, rows[i].engine);
        x[8] = (unsigned char)rows[i].tier;
        put64(x + 9, rows[i].groups);
        rc = kvix_buf_append(b, x, sizeof x, err);
    }
out:
    free(rows);
    return rc;
}

/* Live, as a snapshot's walk is (lib/index/index_walk.c): the partitions
 * from their RCU-protected table, each (worker, dp)'s groups read under its
 * cut lock, its state kept readable by the read-side section. */
int kvix_index_groups_save(kvix_index *idx, kvix_buf *out, kvix_err *err)
{
    size_t np;
    part **ps = kvix__ix_parts_list(idx, &np);
    if (!ps)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory saving KV cache groups");
    if (np > 1)
        qsort(ps, np, sizeof *ps, part_cmp);
    size_t start = out->len, neagle = 0, nws = 0;
    kvix_buf body;
    kvix_buf_init(&body);
    wstate **ws = NULL;
    int rc = KVIX_OK;
    /* the partitions whose blocks are EAGLE's */
    for (size_t i = 0; i < np && !rc; i++)
        if (__atomic_load_n(&ps[i]->hashing, __ATOMIC_RELAXED) == PART_HASH_EAGLE) {
            rc = app_names(&body, ps[i], err);
            if (!rc)
                rc = app32(&body, ps[i]->bs, err);
            neagle++;
        }
    size_t eagle_end = body.len;
    for (size_t i = 0; i < np && !rc; i++) {
        part *p = ps[i];
        uint32_t ns = part_nslots(p), nw = 0;
        wstate **nws_ = realloc(ws, (ns ? ns : 1) * sizeof *ws);
        if (!nws_) {
            rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory saving KV cache groups");
            break;
        }
        ws = nws_;
        kvix_rcu_lock();
        ns = part_nslots(p) < ns ? part_nslots(p) : ns; /* slots seen now, room made for */
        for (uint32_t s = 0; s < ns; s++) {
            wstate *w = slot_ws(p, s);
            if (w)
                ws[nw++] = w;
        }
        if (nw > 1)
            qsort(ws, nw, sizeof *ws, ws_cmp);
        for (uint32_t j = 0; j < nw && !rc; j++) {
            ws_lock(ws[j]);
            if (says_more(ws[j])) {
                rc = save_ws(&body, p, ws[j], err);
                nws++;
            }
            ws_unlock(ws[j]);
        }
        kvix_rcu_unlock();
    }
    if (!rc && (neagle || nws)) {
        unsigned char h[24];
        put32(h, GROUPS_IO_VERSION);
        put32(h + 4, 0);
        put64(h + 8, neagle);
        put64(h + 16, nws);
        rc = kvix_buf_append(out, h, sizeof h, err);
        if (!rc)
            rc = kvix_buf_append(out, body.data, eagle_end, err);
        if (!rc)
            rc = kvix_buf_append(out, body.data + eagle_end, body.len - eagle_end, err);
    }
    if (rc)
        out->len = start;
    kvix_buf_release(&body);
    free(ws);
    free(ps);
    return rc;
}

/* ---- reading ------------------------------------------------------------ */

typedef struct rd {
    const unsigned char *p;
    size_t n, off;
    kvix_err *err;
} rd;

static int bad(rd *r, const char *what)
{
    return kvix_err_set(r->err, KVIX_ECORRUPT, "kv cache group state at byte %zu: %s", r->off,
                        what);
}

static int need(rd *r, size_t k)
{
    return r->n - r->off < k ? bad(r, "truncated") : KVIX_OK;
}

static uint32_t take32(rd *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)r->p[r->off + i] << (8 * i);
    r->off += 4;
    return v;
}

static uint64_t take64(rd *r)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)r->p[r->off + i] << (8 * i);
    r->off += 8;
    return v;
}

/* A partition's names into model, tenant (NUL-terminated). */
static int take_names(rd *r, char model[KVIX_NAME_MAX], char tenant[KVIX_NAME_MAX])
{
    int rc = need(r, 8);
    if (rc)
        return rc;
    uint32_t m = take32(r), t = take32(r);
    if (m >= KVIX_NAME_MAX || t >= KVIX_NAME_MAX)
        return bad(r, "a name too long");
    if ((rc = need(r, (size_t)m + t)))
        return rc;
    const char *s = (const char *)r->p + r->off;
    if (memchr(s, '\0', (size_t)m + t) || !kvix_utf8_valid(s, m) || !kvix_utf8_valid(s + m, t))
        return bad(r, "a name with a NUL byte or not UTF-8");
    memcpy(model, s, m);
    model[m] = '\0';
    memcpy(tenant, s + m, t);
    tenant[t] = '\0';
    r->off += (size_t)m + t;
    return KVIX_OK;
}

/* Strictly ascending (model, tenant[, worker, dp]) against the previous. */
static int after(const char *pm, const char *pt, uint64_t pw, uint32_t pd, const char *m,
                 const char *t, uint64_t w, uint32_t d, int first)
{
    if (first)
        return 1;
    int c = strcmp(pm, m);
    if (!c)
        c = strcmp(pt, t);
    if (!c)
        c = pw != w ? (pw < w ? -1 : 1) : (pd < d ? -1 : pd > d);
    return c < 0;
}

/* The EAGLE partitions (idx NULL: only checked). */
static int load_eagle(kvix_index *idx, rd *r, uint64_t n)
{
    char m[KVIX_NAME_MAX], t[KVIX_NAME_MAX], pm[KVIX_NAME_MAX] = "", pt[KVIX_NAME_MAX] = "";
    for (uint64_t i = 0; i < n; i++) {
        int rc = take_names(r, m, t);
        if (rc || (rc = need(r, 4)))
            return rc;
        uint32_t bs = take32(r);
        if (!after(pm, pt, 0, 0, m, t, 0, 0, i == 0))
            return bad(r, "partitions out of order");
        if (bs == 0 || bs > KVIX_BS_MAX)
            return bad(r, "a block size out of range");
        memcpy(pm, m, sizeof pm);
        memcpy(pt, t, sizeof pt);
        if (!idx)
            continue;
        part *p = kvix__ix_part_find(idx, m, t);
        if (!p && (rc = kvix__ix_part_get(idx, m, t, bs, &p, r->err)))
            return rc;
        /* before or after its blocks (kvix_index_load takes them as plain) */
        __atomic_store_n(&p->hashing, PART_HASH_EAGLE, __ATOMIC_RELAXED);
    }
    return KVIX_OK;
}

/* One (worker, dp)'s record (idx NULL: only checked). What the snapshot's
 * reader checked (everything but its blocks) holds; a membership row of a
 * block the worker does not hold, or a worker of a partition the index does
 * not have, says nothing of what it holds: skipped. */
static int load_ws(kvix_index *idx, rd *r, wstate **out, const char *m, const char *t)
{
    int rc = need(r, 32);
    if (rc)
        return rc;
    uint64_t worker = take64(r);
    uint32_t dp = take32(r), has_member = take32(r);
    uint64_t learned = take64(r), full = take64(r), want_full = 0;
    if (has_member > 1)
        return bad(r, "a flag out of range");
    if (worker > KVIX_WORKER_MAX)
        return bad(r, "a worker out of range");
    uint8_t kind[KVIX_GROUPS_MAX] = {0};
    for (uint32_t k = 0; k < KVIX_GROUPS_MAX; k++) {
        if (!(learned & (UINT64_C(1) << k)))
            continue;
        if ((rc = need(r, 1)))
            return rc;
        kind[k] = r->p[r->off++];
        if (kind[k] == KVIX_KIND_NONE || kind[k] >= KVIX_KIND_COUNT)
            return bad(r, "a kind out of range");
        if (kvix_kind_full(kind[k]))
            want_full |= UINT64_C(1) << k;
    }
    if (!(learned & 1))
        want_full |= 1; /* group 0 is full until it says otherwise */
    if (full != want_full)
        return bad(r, "full groups that do not follow from the kinds");
    if (has_member != (__builtin_popcountll(full) >= 2))
        return bad(r, "membership kept for a worker without two full groups, or not kept");
    if (!(learned & ~UINT64_C(1)) && full == 1 && !has_member)
        return bad(r, "a record that says nothing more than none");
    if ((rc = need(r, 8)))
        return rc;
    uint64_t n = take64(r);
    if (n && !has_member)
        return bad(r, "membership rows for a worker that keeps none");
    if (n > (r->n - r->off) / 17)
        return bad(r, "more membership rows than bytes");
    part *p = idx ? kvix__ix_part_find(idx, m, t) : NULL;
    wstate *w = NULL;
    if (p && (rc = kvix__ix_ws_get(p, worker, dp, &w, r->err)))
        return rc;
    *out = w;
    wgroups *g = NULL;
    if (w) {
        kvix__ix_grp_free(w); /* the file's word, whatever the index held (a replace) */
        if (!(w->grp = g = calloc(1, sizeof *w->grp)))
            return kvix_err_set(r->err, KVIX_ENOMEM, "out of memory loading KV cache groups");
        g->learned = learned;
        g->full = full;
        memcpy(g->kind, kind, sizeof kind);
    }
    if (g && has_member) {
        if (!(g->member = malloc(sizeof *g->member)))
            return kvix_err_set(r->err, KVIX_ENOMEM, "out of memory loading KV cache groups");
        kvix__hmap_init(g->member, 2, sizeof(uint64_t));
        if (kvix__hmap_reserve(g->member, (size_t)n))
            return kvix_err_set(r->err, KVIX_ENOMEM, "out of memory loading KV cache groups");
    }
    uint64_t pe = 0;
    uint32_t ptier = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t engine = take64(r);
        uint32_t tier = r->p[r->off++];
        uint64_t groups = take64(r);
        if (i && (engine < pe || (engine == pe && tier <= ptier)))
            return bad(r, "membership rows out of order");
        if (tier >= KVIX_MEDIUM_COUNT || !groups || (groups & ~full))
            return bad(r, "a membership row out of range");
        pe = engine;
        ptier = tier;
        bent e = g ? kvix__ix_bm_get(&w->blocks, engine, NULL) : 0;
        if (!e || !(bent_tiers(e) & (1u << tier)))
            continue;
        uint64_t key[2] = {engine, tier};
        int inserted;
        uint64_t *v = kvix__hmap_put(g->member, key, &inserted);
        if (!v)
            return kvix_err_set(r->err, KVIX_ENOMEM, "out of memory loading KV cache groups");
        *v = groups;
    }
    return KVIX_OK;
}

int kvix_index_groups_check(const void *payload, size_t len, kvix_err *err)
{
    return kvix_index_groups_load(NULL, payload, len, err);
}

int kvix_index_groups_load(kvix_index *idx, const void *payload, size_t len, kvix_err *err)
{
    rd r = {payload, len, 0, err};
    int rc = need(&r, 24);
    if (rc)
        return rc;
    uint32_t version = take32(&r), flags = take32(&r);
    uint64_t neagle = take64(&r), nws = take64(&r);
    if (version != GROUPS_IO_VERSION)
        return bad(&r, "an unknown version");
    if (flags)
        return bad(&r, "flags set");
    if (!neagle && !nws)
        return bad(&r, "nothing in it");
    if ((rc = load_eagle(idx, &r, neagle)))
        return rc;
    char m[KVIX_NAME_MAX], t[KVIX_NAME_MAX], pm[KVIX_NAME_MAX] = "", pt[KVIX_NAME_MAX] = "";
    uint64_t pw = 0;
    uint32_t pd = 0;
    for (uint64_t i = 0; i < nws; i++) {
        if ((rc = take_names(&r, m, t)))
            return rc;
        if (need(&r, 12) == KVIX_OK) {
            uint64_t w = 0;
            uint32_t d = 0;
            for (int k = 0; k < 8; k++)
                w |= (uint64_t)r.p[r.off + k] << (8 * k);
            for (int k = 0; k < 4; k++)
                d |= (uint32_t)r.p[r.off + 8 + k] << (8 * k);
            if (!after(pm, pt, pw, pd, m, t, w, d, i == 0))
                return bad(&r, "workers out of order");
            pw = w;
            pd = d;
        }
        wstate *w = NULL;
        rc = load_ws(idx, &r, &w, m, t);
        if (w)
            kvix__ix_ws_done(w); /* a state made for nothing: released */
        if (rc)
            return rc;
        memcpy(pm, m, sizeof pm);
        memcpy(pt, t, sizeof pt);
    }
    if (r.off != r.n)
        return bad(&r, "bytes after the last record");
    return KVIX_OK;
}

void kvix_index_groups_reset(kvix_index *idx)
{
    kvix__ix_parts_quiesce(idx);
    size_t np;
    part **ps = kvix__ix_parts_list(idx, &np);
    for (size_t i = 0; ps && i < np; i++) {
        part *p = ps[i];
        uint32_t ns = part_nslots(p);
        int blocks = 0;
        for (uint32_t s = 0; s < ns; s++) {
            wstate *w = slot_ws(p, s);
            if (!w)
                continue;
            blocks |= kvix_ix_bm_size(&w->blocks) > 0;
            if (w->grp) {
                kvix__ix_grp_free(w);
                kvix__ix_ws_done(w); /* kept only for its kinds: released */
            }
        }
        if (!blocks)
            __atomic_store_n(&p->hashing, PART_HASH_UNKNOWN, __ATOMIC_RELAXED);
    }
    free(ps);
}
