/* A version 3 GROUP record's blocks (kvix-snapshot(5), "Blocks of a
 * group"): one (worker, dp)'s blocks as the forest their parent links make,
 * in preorder, so that a block's position, parent engine hash and parent
 * canonical hash are its parent's and cost nothing, and its canonical hash
 * is computed, not stored. What remains per block is a control byte and the
 * local hash (9 bytes), plus the engine hash when it is not the canonical
 * one (engines whose hashes are Dynamo's rolling hash need none) and a tier
 * mask when it is not gpu alone.
 *
 * One state, one encoding: trees are ordered by their root's (position,
 * canonical, engine), a block's children by (canonical, engine), every
 * optional field is present exactly when it differs from its default, and
 * varints are minimal. The reader refuses anything else, so that two equal
 * states still give equal files. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvix/hash.h"
#include "hashmap_int.h"
#include "snapshot_int.h"

void kvix__snap_scratch_release(kvix_snap_scratch *sc)
{
    free(sc->a);
    free(sc->b);
    free(sc->c);
    free(sc->d);
    free(sc->set);
    memset(sc, 0, sizeof *sc);
}

/* Room for n entries in each of the four index arrays (n + 1 in c). */
static int scratch_room(kvix_snap_scratch *sc, size_t n)
{
    if (n <= sc->cap)
        return 0;
    size_t c = sc->cap ? sc->cap : 64;
    while (c < n)
        c *= 2;
    size_t *a = realloc(sc->a, c * sizeof *a);
    if (a)
        sc->a = a;
    size_t *b = a ? realloc(sc->b, c * sizeof *b) : NULL;
    if (b)
        sc->b = b;
    size_t *d = b ? realloc(sc->c, (c + 1) * sizeof *d) : NULL;
    if (d)
        sc->c = d;
    size_t *e = d ? realloc(sc->d, c * sizeof *e) : NULL;
    if (!e)
        return -1;
    sc->d = e;
    sc->cap = c;
    return 0;
}

/* ---- the engine-hash set of one group -------------------------------------- */

/* engine -> block index, open addressing over a power of two at least twice
 * n; the hash 0 is a key like any other (slot value NONE: empty). */
static int set_reset(kvix_snap_scratch *sc, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    if (cap > sc->set_cap) {
        struct kvix_snap_slot *s = realloc(sc->set, cap * sizeof *s);
        if (!s)
            return -1;
        sc->set = s;
        sc->set_cap = cap;
    }
    sc->set_mask = cap - 1;
    for (size_t i = 0; i < cap; i++)
        sc->set[i].idx = NONE;
    return 0;
}

/* The index holding engine, or NONE after putting idx there. */
static size_t set_put(kvix_snap_scratch *sc, uint64_t engine, size_t idx)
{
    size_t k = (size_t)kvix_mix64(engine) & sc->set_mask;
    while (sc->set[k].idx != NONE) {
        if (sc->set[k].engine == engine)
            return sc->set[k].idx;
        k = (k + 1) & sc->set_mask;
    }
    sc->set[k].engine = engine;
    sc->set[k].idx = idx;
    return NONE;
}

static size_t set_get(const kvix_snap_scratch *sc, uint64_t engine)
{
    size_t k = (size_t)kvix_mix64(engine) & sc->set_mask;
    while (sc->set[k].idx != NONE) {
        if (sc->set[k].engine == engine)
            return sc->set[k].idx;
        k = (k + 1) & sc->set_mask;
    }
    return NONE;
}

/* ---- varints ----------------------------------------------------------------- */

static inline size_t put_varint(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (unsigned char)v;
    return n;
}

/* A minimal LEB128 of at most 10 bytes from p[*off .. len): 0, or -1. */
static inline int get_varint(const unsigned char *p, size_t len, size_t *off, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned i = 0, shift = 0; i < 10; i++, shift += 7) {
        if (*off >= len)
            return -1;
        unsigned char c = p[(*off)++];
        if (i == 9 && c > 1)
            return -1; /* past 64 bits */
        x |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            if (c == 0 && i > 0)
                return -1; /* over-long */
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* ---- order ---------------------------------------------------------------------- */

static inline int cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : a > b;
}

/* Roots: (position, canonical, engine); children of one block: the same
 * (position and parent shared). */
static int root_cmp(const void *x, const void *y, void *ctx)
{
    const kvix_block_info *b = ctx, *p = &b[*(const size_t *)x], *q = &b[*(const size_t *)y];
    int c = cmp_u64(p->position, q->position);
    if (!c)
        c = cmp_u64(p->canon, q->canon);
    return c ? c : cmp_u64(p->engine, q->engine);
}

/* ---- encoding ------------------------------------------------------------------- */

int kvix__snap_group_encode(kvix_snap_scratch *sc, const kvix_block_info *b, size_t n,
                           const size_t *pidx, kvix_sbuf *out)
{
    out->len = 0;
    if (n == 0)
        return 0;
    if (scratch_room(sc, n))
        return -1;
    /* children in CSR: c[i] .. c[i + 1] of b (a: kid lists, b: fill cursor) */
    size_t *kids = sc->a, *fill = sc->b, *start = sc->c, nroots = 0;
    memset(start, 0, (n + 1) * sizeof *start);
    for (size_t i = 0; i < n; i++)
        if (pidx[i] != NONE)
            start[pidx[i] + 1]++;
        else
            nroots++;
    for (size_t i = 0; i < n; i++)
        start[i + 1] += start[i];
    /* roots go after every kid list: kids[start[n] ..) */
    size_t r = start[n];
    for (size_t i = 0; i < n; i++)
        fill[i] = start[i];
    for (size_t i = 0; i < n; i++) {
        if (pidx[i] != NONE)
            kids[fill[pidx[i]]++] = i;
        else
            kids[r++] = i;
    }
    for (size_t i = 0; i < n; i++)
        if (start[i + 1] - start[i] > 1)
            qsort_r(kids + start[i], start[i + 1] - start[i], sizeof *kids, root_cmp, (void *)b);
    qsort_r(kids + start[n], nroots, sizeof *kids, root_cmp, (void *)b);
    /* at most 1 + 10 + 8 + 8 + 8 + 8 + 1 + 10 bytes a block */
    if (kvix__sbuf_room(out, n * 54))
        return -1;
    unsigned char *o = out->data;
    size_t len = 0;
    /* preorder: a stack of blocks whose kids are being written, each with
     * its cursor into its kid list (fill, reset to the list's start) */
    size_t *stack = sc->d, depth = 0;
    memcpy(fill, start, n * sizeof *fill);
    for (size_t ri = start[n]; ri < start[n] + nroots; ri++) {
        size_t i = kids[ri];
        for (;;) {
            const kvix_block_info *x = &b[i];
            size_t nk = start[i + 1] - start[i];
            unsigned ctl = nk < 3 ? (unsigned)nk : 3u;
            if (x->engine != x->canon)
                ctl |= SG_ENGINE;
            if (x->tiers != 1u)
                ctl |= SG_TIERS;
            if (depth == 0 && x->position > 0)
                ctl |= SG_ROOT_AT;
            o[len++] = (unsigned char)ctl;
            if (ctl & SG_ROOT_AT) {
                len += put_varint(o + len, x->position);
                put64(o + len, x->parent);
                put64(o + len + 8, x->parent_canon);
                len += 16;
            }
            put64(o + len, x->local);
            len += 8;
            if (ctl & SG_ENGINE) {
                put64(o + len, x->engine);
                len += 8;
            }
            if (ctl & SG_TIERS)
                o[len++] = (unsigned char)x->tiers;
            if (nk >= 3)
                len += put_varint(o + len, nk);
            if (nk)
                stack[depth++] = i;
            /* the next kid of the deepest block that has one left */
            while (depth && fill[stack[depth - 1]] == start[stack[depth - 1] + 1])
                depth--;
            if (!depth)
                break;
            i = kids[fill[stack[depth - 1]]++];
        }
    }
    out->len = len;
    return 0;
}

/* ---- decoding ------------------------------------------------------------------- */

#define BAD(...) (snprintf(why, whylen, __VA_ARGS__), *at = off0, -1)

int kvix__snap_group_decode(kvix_snap_scratch *sc, const unsigned char *p, size_t len, size_t n,
                           int trusted, kvix_block_info *out, size_t *up, char *why,
                           size_t whylen, size_t *at)
{
    size_t off = 0, off0 = 0;
    if (n == 0)
        return len ? (snprintf(why, whylen, "%zu bytes after the last block", len), *at = 0, -1)
                   : 0;
    if (scratch_room(sc, n) || (!trusted && set_reset(sc, n)))
        return (snprintf(why, whylen, "out of memory for %zu blocks", n), *at = 0, -2);
    /* stack of (block, kids left); the previous sibling of each level's next
     * block, NONE before its first */
    size_t *stk = sc->a, *left = sc->b, *prev = sc->c, depth = 0, last_root = NONE;
    for (size_t i = 0; i < n; i++) {
        off0 = off;
        if (off >= len)
            return BAD("block %zu runs past the record", i);
        unsigned ctl = p[off++];
        if (ctl & ~(unsigned)(SG_KIDS | SG_ENGINE | SG_TIERS | SG_ROOT_AT))
            return BAD("block %zu: unknown control bits 0x%x", i, ctl);
        kvix_block_info *x = &out[i];
        size_t par = depth ? stk[depth - 1] : NONE;
        if (par == NONE) {
            if (ctl & SG_ROOT_AT) {
                uint64_t pos;
                if (get_varint(p, len, &off, &pos) || pos == 0 || pos >= KVIX_INDEX_DEPTH_MAX)
                    return BAD("block %zu: bad root position", i);
                if (len - off < 16)
                    return BAD("block %zu runs past the record", i);
                x->position = (uint32_t)pos;
                x->parent = get64(p + off);
                x->parent_canon = get64(p + off + 8);
                off += 16;
            } else {
                x->position = 0;
                x->parent = x->parent_canon = 0;
            }
        } else {
            if (ctl & SG_ROOT_AT)
                return BAD("block %zu: a root's position inside a tree", i);
            const kvix_block_info *q = &out[par];
            if (q->position + 1 >= KVIX_INDEX_DEPTH_MAX)
                return BAD("block %zu at position %u (limit %u)", i, q->position + 1,
                           KVIX_INDEX_DEPTH_MAX - 1);
            x->position = q->position + 1;
            x->parent = q->engine;
            x->parent_canon = q->canon;
        }
        if (len - off < 8)
            return BAD("block %zu runs past the record", i);
        x->local = get64(p + off);
        off += 8;
        x->canon = x->position ? kvix_hash_seq_next(x->parent_canon, x->local) : x->local;
        x->engine = x->canon;
        if (ctl & SG_ENGINE) {
            if (len - off < 8)
                return BAD("block %zu runs past the record", i);
            x->engine = get64(p + off);
            off += 8;
            if (x->engine == x->canon)
                return BAD("block %zu: an engine hash equal to the canonical one is implied", i);
        }
        x->tiers = 1;
        if (ctl & SG_TIERS) {
            if (off >= len)
                return BAD("block %zu runs past the record", i);
            x->tiers = p[off++];
            if (x->tiers <= 1 || x->tiers > TIERS_ALL)
                return BAD("block %zu has a bad tier mask 0x%x", i, x->tiers);
        }
        uint64_t nk = ctl & SG_KIDS;
        if (nk == 3 && (get_varint(p, len, &off, &nk) || nk < 3))
            return BAD("block %zu: bad count of children", i);
        if (nk > n - 1 - i)
            return BAD("block %zu claims %" PRIu64 " children, %zu blocks remain", i, nk,
                       n - 1 - i);
        /* canonical order among its siblings (or the roots) */
        size_t sib = par == NONE ? last_root : prev[depth - 1];
        if (sib != NONE && !trusted) {
            const kvix_block_info *s = &out[sib];
            int c = par == NONE ? cmp_u64(s->position, x->position) : 0;
            if (!c)
                c = cmp_u64(s->canon, x->canon);
            if (!c)
                c = cmp_u64(s->engine, x->engine);
            if (c >= 0)
                return BAD("block %zu out of order", i);
        }
        if (par == NONE)
            last_root = i;
        else
            prev[depth - 1] = i;
        up[i] = par;
        size_t dup = trusted ? NONE : set_put(sc, x->engine, i);
        if (dup != NONE)
            return BAD("block %zu repeats engine hash %016" PRIx64 " of block %zu (an engine hash "
                       "names one block)",
                       i, x->engine, dup);
        if (par != NONE)
            left[depth - 1]--;
        if (nk) {
            stk[depth] = i;
            left[depth] = (size_t)nk;
            prev[depth] = NONE;
            depth++;
        }
        while (depth && left[depth - 1] == 0)
            depth--;
    }
    off0 = off;
    if (depth)
        return BAD("the last tree misses %zu children", left[depth - 1]);
    if (off != len)
        return BAD("%zu bytes after the last block", len - off);
    /* a root past position 0 is an orphan: its parent is not in the group
     * (else it is that block's child, and encoded as one) */
    for (size_t i = 0; i < n && !trusted; i++) {
        const kvix_block_info *x = &out[i];
        if (up[i] != NONE || x->position == 0)
            continue;
        size_t q = set_get(sc, x->parent);
        if (q != NONE && out[q].position + 1 == x->position && out[q].canon == x->parent_canon) {
            off0 = 0;
            return BAD("block %zu is a root, yet its parent is block %zu", i, q);
        }
    }
    return 0;
}

/* ---- the bytes of a record ---------------------------------------------------- */

int kvix__sbuf_room(kvix_sbuf *b, size_t more)
{
    if (b->cap - b->len >= more)
        return 0;
    size_t c = b->cap ? b->cap : 4096;
    while (c - b->len < more)
        c *= 2;
    unsigned char *d = realloc(b->data, c);
    if (!d)
        return -1;
    b->data = d;
    b->cap = c;
    return 0;
}
