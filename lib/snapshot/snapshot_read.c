/* Reading a snapshot file's records (kvix-snapshot(5), layout in
 * snapshot.c), once it is opened and verified (snapshot_open.c), by cursors:
 * versions 1 and 2 (fixed-size records) and 3 (length-prefixed records,
 * each group's blocks as a forest: snapshot_group.c). */
#define _GNU_SOURCE
#include "kvix/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "kvix/hash.h"
#include "hashmap_int.h"
#include "snapshot_read_int.h"
#include "utf8_int.h"


kvix_snapshot *kvix__snap_new(const char *name, kvix_err *err)
{
    kvix_snapshot *s = calloc(1, sizeof *s);
    if (s)
        s->name = strdup(name ? name : "<snapshot>");
    if (!s || !s->name) {
        free(s);
        kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        return NULL;
    }
    return s;
}

void kvix_snapshot_close(kvix_snapshot *s)
{
    if (!s)
        return;
    if (s->map)
        munmap(s->map, s->len);
    free(s->owned);
    free(s->name);
    free(s->blocks);
    free(s->pre);
    free(s->up);
    free(s->ext);
    if (!s->borrowed)
        free(s->est);
    kvix__snap_scratch_release(&s->sc);
    free(s);
}

void kvix_snapshot_rewind(kvix_snapshot *s)
{
    s->pos = s->first;
    s->part_no = 0;
    s->in_part = 0;
    s->part_groups = 0;
    s->have_group = 0;
    s->model[0] = s->tenant[0] = '\0';
}

void kvix_snapshot_get_info(const kvix_snapshot *s, kvix_snapshot_info *out)
{
    *out = s->info;
}

int kvix__snap_corrupt(kvix_snapshot *s, size_t off, kvix_err *err, const char *fmt, ...)
{
    char m[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return kvix_err_set(err, KVIX_ECORRUPT, "%s: corrupt snapshot at byte %zu: %s", s->name, off,
                        m);
}

/* A name of len bytes at s->pos, within end. */
static int read_name(kvix_snapshot *s, size_t off, size_t end, uint32_t len, char *dst,
                     const char *what, kvix_err *err)
{
    if (len >= KVIX_NAME_MAX)
        return CORRUPT(s, off, err, "%s name of %" PRIu32 " bytes (limit %d)", what, len,
                       KVIX_NAME_MAX - 1);
    if (len > end - s->pos)
        return CORRUPT(s, off, err, "%s name runs past the end", what);
    if (memchr(s->data + s->pos, '\0', len))
        return CORRUPT(s, off, err, "%s name contains a NUL byte", what);
    if (!kvix_utf8_valid((const char *)s->data + s->pos, len))
        return CORRUPT(s, off, err, "%s name is not valid utf-8", what);
    memcpy(dst, s->data + s->pos, len);
    dst[len] = '\0';
    s->pos += len;
    return KVIX_OK;
}

/* The partition's fields (from the bytes at p), its names at s->pos. */
static int set_part(kvix_snapshot *s, size_t off, size_t end, uint32_t bs, uint32_t ml,
                    uint32_t tl, kvix_err *err)
{
    if (bs == 0 || bs > KVIX_BS_MAX)
        return CORRUPT(s, off, err, "block size %" PRIu32 " (expected 1 to %d)", bs,
                       KVIX_BS_MAX);
    char model[KVIX_NAME_MAX], tenant[KVIX_NAME_MAX];
    int rc = read_name(s, off, end, ml, model, "model", err);
    if (!rc)
        rc = read_name(s, off, end, tl, tenant, "tenant", err);
    if (rc)
        return rc;
    if (s->in_part && kvix__snap_cmp_part(model, tenant, s->model, s->tenant) <= 0)
        return CORRUPT(s, off, err, "partition %s/%s out of order", model, tenant);
    memcpy(s->model, model, sizeof model);
    memcpy(s->tenant, tenant, sizeof tenant);
    s->bs = bs;
    s->part_no++;
    s->in_part = 1;
    s->part_groups = 0;
    s->have_group = 0;
    return KVIX_OK;
}

static int parse_part(kvix_snapshot *s, kvix_err *err)
{
    size_t off = s->pos;
    if (s->body_end - s->pos < 16)
        return CORRUPT(s, off, err, "partition record runs past the end");
    const unsigned char *p = s->data + s->pos;
    s->pos += 16;
    return set_part(s, off, s->body_end, get32(p + 4), get32(p + 8), get32(p + 12), err);
}

/* Version 3: the record's payload is p[0..len), s->pos at it. */
static int parse_part3(kvix_snapshot *s, size_t off, uint64_t len, kvix_err *err)
{
    const unsigned char *p = s->data + s->pos;
    if (len < PART3_HEAD_BYTES)
        return CORRUPT(s, off, err, "partition record of %" PRIu64 " bytes", len);
    uint32_t ml = get32(p + 4), tl = get32(p + 8);
    if (get32(p + 12) != 0)
        return CORRUPT(s, off, err, "reserved field of a partition record is set");
    if ((uint64_t)PART3_HEAD_BYTES + ml + tl != len)
        return CORRUPT(s, off, err, "partition record of %" PRIu64 " bytes holds names of %" PRIu32
                       " and %" PRIu32, len, ml, tl);
    size_t end = s->pos + (size_t)len;
    s->pos += PART3_HEAD_BYTES;
    return set_part(s, off, end, get32(p), ml, tl, err);
}

/* Room for n blocks of a group (and their parent indexes). */
static int group_room(kvix_snapshot *s, uint64_t n, kvix_err *err)
{
    if (n <= s->cap)
        return KVIX_OK;
    size_t c = s->cap ? s->cap : 64;
    while (c < n)
        c *= 2;
    kvix_block_info *nb = realloc(s->blocks, c * sizeof *nb);
    if (nb)
        s->blocks = nb;
    kvix_block_info *np = nb && s->version == KVIX_SNAPSHOT_VERSION
                              ? realloc(s->pre, c * sizeof *np)
                              : s->pre;
    if (np)
        s->pre = np;
    size_t *nu = nb && (np || s->version != KVIX_SNAPSHOT_VERSION)
                     ? realloc(s->up, c * sizeof *nu)
                     : NULL;
    if (!nu)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %" PRIu64 " blocks", n);
    s->up = nu;
    s->cap = c;
    return KVIX_OK;
}

/* The checks both layouts make of a group's head; 1: skipped (want). */
static int group_head(kvix_snapshot *s, size_t off, uint64_t worker, uint32_t dp,
                      uint32_t flags, uint64_t eid, kvix_err *err)
{
    if (flags & ~1u)
        return CORRUPT(s, off, err, "unknown flags 0x%" PRIx32 " in a worker record", flags);
    /* One state, one file: an eid without its flag would be dropped on load
     * and the file re-saved differently. */
    if (!(flags & 1) && eid)
        return CORRUPT(s, off, err, "eid %" PRIu64 " with the eid flag clear", eid);
    /* The index never holds these (kvix-events(5)): no tool could print them. */
    if (worker > KVIX_WORKER_MAX)
        return CORRUPT(s, off, err, "worker %" PRIu64 " out of range", worker);
    if (eid > KVIX_EID_MAX)
        return CORRUPT(s, off, err, "eid %" PRIu64 " out of range", eid);
    if (s->have_group && (worker < s->worker || (worker == s->worker && dp <= s->dp)))
        return CORRUPT(s, off, err, "worker %" PRIu64 " dp %" PRIu32 " out of order", worker, dp);
    s->have_group = 1;
    s->worker = worker;
    s->dp = dp;
    s->part_groups++;
    return s->want && !s->want(s->want_ctx, worker, dp) ? 1 : KVIX_OK;
}

static void fill_group(kvix_snapshot *s, kvix_snapshot_group *g, uint32_t flags, uint64_t eid,
                       const kvix_block_info *blocks, uint64_t n)
{
    g->model = s->model;
    g->tenant = s->tenant;
    g->bs = s->bs;
    g->worker = s->worker;
    g->dp = s->dp;
    g->has_eid = flags & 1;
    g->eid = eid;
    g->blocks = blocks;
    g->n = (size_t)n;
}

static int parse_group(kvix_snapshot *s, kvix_snapshot_group *g, kvix_err *err)
{
    size_t off = s->pos;
    if (!s->in_part)
        return CORRUPT(s, off, err, "worker record before any partition");
    if (s->body_end - s->pos < GROUP_HEAD_BYTES)
        return CORRUPT(s, off, err, "worker record runs past the end");
    const unsigned char *p = s->data + s->pos;
    uint32_t dp = get32(p + 4), flags = get32(p + 16), pad = get32(p + 20);
    uint64_t worker = get64(p + 8), eid = get64(p + 24), n = get64(p + 32);
    s->pos += GROUP_HEAD_BYTES;
    if (pad)
        return CORRUPT(s, off, err, "unknown flags 0x%" PRIx32 " in a worker record", flags);
    /* Bounded by the bytes present before anything is allocated. */
    size_t left = s->body_end - s->pos;
    if (n > left / BLOCK_BYTES)
        return CORRUPT(s, off, err, "worker record claims %" PRIu64 " blocks, %zu bytes remain", n,
                       left);
    if (worker == UINT64_MAX && n == 0 && !(flags & 1))
        return CORRUPT(s, off, err, "empty worker record");
    int rc = group_head(s, off, worker, dp, flags, eid, err);
    if (rc == 1) {
        s->pos += n * BLOCK_BYTES;
        return 1; /* skipped: next goes on */
    }
    if (rc || (rc = group_room(s, n, err)))
        return rc;
    const unsigned char *b = s->data + s->pos;
    for (size_t i = 0; i < n; i++, b += BLOCK_BYTES) {
        kvix_block_info *bi = &s->blocks[i];
        bi->position = get32(b);
        bi->tiers = get32(b + 4);
        bi->local = get64(b + 8);
        bi->engine = get64(b + 16);
        bi->parent = get64(b + 24);
        bi->parent_canon = get64(b + 32);
        if (bi->position == 0 && (bi->parent != 0 || bi->parent_canon != 0))
            return CORRUPT(s, s->pos + i * BLOCK_BYTES, err, "parent set at position 0");
        bi->canon = bi->position == 0 ? bi->local
                                      : kvix_hash_seq_next(bi->parent_canon, bi->local);
    }
    char why[160];
    if (kvix__snap_check_blocks(s->blocks, n, s->up, why, sizeof why))
        return CORRUPT(s, off, err, "worker %" PRIu64 " dp %" PRIu32 ": %s", worker, dp, why);
    size_t dup;
    int rep = kvix__snap_repeated_engine(s->blocks, n, &dup);
    if (rep < 0)
        return kvix_err_set(err, rep, "out of memory checking %zu blocks", (size_t)n);
    if (rep)
        return CORRUPT(s, s->pos + dup * BLOCK_BYTES, err,
                       "worker %" PRIu64 " dp %" PRIu32 ": block %zu repeats engine hash %016" PRIx64
                       " of an earlier one (an engine hash names one block)",
                       worker, dp, dup, s->blocks[dup].engine);
    s->pos += n * BLOCK_BYTES;
    fill_group(s, g, flags, eid, s->blocks, n);
    return KVIX_OK;
}

static int info_cmp(const void *a, const void *b)
{
    const kvix_block_info *x = a, *y = b;
    if (x->position != y->position)
        return x->position < y->position ? -1 : 1;
    return x->engine < y->engine ? -1 : x->engine > y->engine;
}

/* Version 3 (sorted: the blocks by (position, engine) as
 * kvix_snapshot_next gives them, else in the file's order). */
static int parse_group3(kvix_snapshot *s, size_t off, uint64_t len, kvix_snapshot_group *g,
                        int sorted, kvix_err *err)
{
    if (!s->in_part)
        return CORRUPT(s, off, err, "worker record before any partition");
    if (len < GROUP3_HEAD_BYTES)
        return CORRUPT(s, off, err, "worker record of %" PRIu64 " bytes", len);
    const unsigned char *p = s->data + s->pos;
    uint64_t worker = get64(p), eid = get64(p + 16), n = get64(p + 24);
    uint32_t dp = get32(p + 8), flags = get32(p + 12);
    size_t body = (size_t)len - GROUP3_HEAD_BYTES, start = s->pos + GROUP3_HEAD_BYTES;
    /* Bounded by the bytes present before anything is allocated. */
    if (n > body / SG_BLOCK_MIN)
        return CORRUPT(s, off, err, "worker record claims %" PRIu64 " blocks in %zu bytes", n,
                       body);
    if (n == 0 && !(flags & 1))
        return CORRUPT(s, off, err, "worker record without block nor eid");
    int rc = group_head(s, off, worker, dp, flags, eid, err);
    s->pos += (size_t)len;
    if (rc == 1)
        return 1;
    if (rc || (rc = group_room(s, n, err)))
        return rc;
    char why[200];
    size_t at = 0;
    rc = kvix__snap_group_decode(&s->sc, s->data + start, body, (size_t)n, s->verified, s->pre,
                                s->up, why, sizeof why, &at);
    if (rc == -2)
        return kvix_err_set(err, KVIX_ENOMEM, "%s", why);
    if (rc)
        return CORRUPT(s, start + at, err, "worker %" PRIu64 " dp %" PRIu32 ": %s", worker, dp,
                       why);
    if (!sorted) {
        fill_group(s, g, flags, eid, s->pre, n);
        return KVIX_OK;
    }
    if (n) { /* an eid alone: no block array yet */
        memcpy(s->blocks, s->pre, (size_t)n * sizeof *s->blocks);
        qsort(s->blocks, (size_t)n, sizeof *s->blocks, info_cmp);
    }
    fill_group(s, g, flags, eid, s->blocks, n);
    return KVIX_OK;
}

static void empty_part(kvix_snapshot *s, kvix_snapshot_group *g)
{
    g->model = s->model;
    g->tenant = s->tenant;
    g->bs = s->bs;
    g->worker = UINT64_MAX;
    g->dp = 0;
    g->has_eid = 0;
    g->eid = 0;
    g->blocks = s->blocks;
    g->n = 0;
}

/* Versions 1 and 2. */
static int next1(kvix_snapshot *s, kvix_snapshot_group *g, kvix_err *err)
{
    for (;;) {
        int at_end = s->pos == s->body_end;
        uint32_t tag = 0;
        if (!at_end) {
            if (s->body_end - s->pos < 4)
                return CORRUPT(s, s->pos, err, "record runs past the end");
            tag = get32(s->data + s->pos);
        }
        /* A partition followed by no worker record is reported once, alone. */
        if (s->in_part && s->part_groups == 0 && tag != TAG_GROUP) {
            s->part_groups = -1;
            empty_part(s, g);
            return KVIX_OK;
        }
        if (at_end)
            return KVIX_EOF;
        if (tag == TAG_PART) {
            int rc = parse_part(s, err);
            if (rc)
                return rc;
            continue;
        }
        if (tag == TAG_GROUP) {
            int rc = parse_group(s, g, err);
            if (rc == 1)
                continue;
            return rc;
        }
        return CORRUPT(s, s->pos, err, "unknown record type %" PRIu32, tag);
    }
}

/* Version 3: records after the stream position and the extensions. */
static int next3(kvix_snapshot *s, kvix_snapshot_group *g, int sorted, kvix_err *err)
{
    for (;;) {
        int at_end = s->pos == s->body_end;
        uint32_t tag = 0, flags = 0;
        uint64_t len = 0;
        size_t off = s->pos;
        if (!at_end) {
            if (s->body_end - s->pos < REC_HEAD_BYTES)
                return CORRUPT(s, off, err, "record runs past the end");
            const unsigned char *h = s->data + s->pos;
            tag = get32(h);
            flags = get32(h + 4);
            len = get64(h + 8);
            if (len > s->body_end - s->pos - REC_HEAD_BYTES)
                return CORRUPT(s, off, err, "record of %" PRIu64 " bytes runs past the end", len);
        }
        if (s->in_part && s->part_groups == 0 && tag != TAG_GROUP) {
            s->part_groups = -1;
            empty_part(s, g);
            return KVIX_OK;
        }
        if (at_end)
            return KVIX_EOF;
        if ((tag == TAG_PART || tag == TAG_GROUP) && flags)
            return CORRUPT(s, off, err, "flags 0x%" PRIx32 " on a record of type %" PRIu32, flags,
                           tag);
        s->pos += REC_HEAD_BYTES;
        int rc;
        switch (tag) {
        case TAG_PART:
            if ((rc = parse_part3(s, off, len, err)))
                return rc;
            continue;
        case TAG_GROUP:
            rc = parse_group3(s, off, len, g, sorted, err);
            if (rc == 1)
                continue;
            return rc;
        case TAG_STREAM:
            return CORRUPT(s, off, err, "a stream position after other records");
        case TAG_END:
            return CORRUPT(s, off, err, "an end record before the end");
        default:
            if (tag >= KVIX_SNAPSHOT_EXT_MIN)
                return CORRUPT(s, off, err, "extension record (type %" PRIu32
                               ") after the partitions", tag);
            if (!(flags & REC_OPTIONAL) || (flags & ~REC_OPTIONAL))
                return CORRUPT(s, off, err, "unknown record type %" PRIu32
                               " (written by a newer kvix?)", tag);
            s->pos += (size_t)len; /* a later kvix's optional record */
            continue;
        }
    }
}

int kvix_snapshot_next(kvix_snapshot *s, kvix_snapshot_group *g, kvix_err *err)
{
    return s->version == KVIX_SNAPSHOT_VERSION ? next3(s, g, 1, err) : next1(s, g, err);
}

int kvix__snap_next_tree(kvix_snapshot *s, kvix_snapshot_group *g, const size_t **up,
                        kvix_err *err)
{
    int rc = s->version == KVIX_SNAPSHOT_VERSION ? next3(s, g, 0, err) : next1(s, g, err);
    *up = s->up;
    return rc;
}

size_t kvix__snap_part_no(const kvix_snapshot *s)
{
    return s->part_no;
}

size_t kvix__snap_load_reserve(const kvix_snapshot *s)
{
    uint64_t e = s->part_no && s->part_no <= s->nest ? s->est[s->part_no - 1] : 0;
    return (size_t)(e + e / 20); /* the sketch's error, and then some */
}

int kvix_snapshot_ext_get(const kvix_snapshot *s, size_t i, kvix_snapshot_ext *out)
{
    if (i >= s->next)
        return KVIX_EOF;
    const unsigned char *h = s->data + s->ext[i];
    out->type = get32(h);
    out->flags = get32(h + 4) & REC_OPTIONAL ? KVIX_SNAPSHOT_EXT_OPTIONAL : 0;
    out->len = (size_t)get64(h + 8);
    out->data = h + REC_HEAD_BYTES;
    return KVIX_OK;
}

int kvix_snapshot_foreach(kvix_snapshot *s, kvix_foreach_fn fn, void *ctx)
{
    kvix_snapshot_group g;
    kvix_snapshot_rewind(s);
    int rc;
    /* Verified at open: next cannot fail past EOF here. */
    while ((rc = kvix_snapshot_next(s, &g, NULL)) == KVIX_OK) {
        int r = fn(ctx, g.model, g.tenant, g.bs, g.worker, g.dp, g.has_eid, g.eid, g.blocks, g.n);
        if (r)
            return r;
    }
    return rc == KVIX_EOF ? 0 : rc;
}

kvix_snapshot *kvix__snapshot_cursor(const kvix_snapshot *s, kvix_err *err)
{
    kvix_snapshot *c = kvix__snap_new(s->name, err);
    if (!c)
        return NULL;
    c->data = s->data; /* borrowed: c must be closed before s */
    c->version = s->version;
    c->verified = s->verified;
    c->est = s->est;
    c->nest = s->nest;
    c->borrowed = 1;
    c->len = s->len;
    c->body_end = s->body_end;
    c->first = s->first;
    c->info = s->info;
    kvix_snapshot_rewind(c);
    return c;
}

void kvix__snapshot_set_filter(kvix_snapshot *s,
                              int (*want)(void *ctx, uint64_t worker, uint32_t dp), void *ctx)
{
    s->want = want;
    s->want_ctx = ctx;
}

