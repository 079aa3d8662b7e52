/* Reading a snapshot file (kvix-snapshot(5), layout in snapshot.c): verified
 * whole when opened, then walked record by record by cursors. Versions 1
 * and 2 (fixed-size records) and 3 (length-prefixed records, each group's
 * blocks as a forest: snapshot_group.c). */
#define _GNU_SOURCE
#include "kvix/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
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
#include "snapshot_int.h"
#include "utf8_int.h"

/* ---- reader ------------------------------------------------------------- */

struct kvix_snapshot {
    uint32_t version;
    int verified; /* every record checked once: a second read checks less */
    const unsigned char *data;
    size_t len;
    void *map;            /* mmap'ed file, or NULL */
    unsigned char *owned; /* read or copied bytes, or NULL */
    char *name;
    size_t body_end;      /* offset of the END record */
    size_t first;         /* offset of the first record after the header (and STREAM) */
    size_t pos;
    kvix_snapshot_info info;
    int in_part, part_groups;
    char model[KVIX_NAME_MAX], tenant[KVIX_NAME_MAX];
    uint32_t bs;
    int have_group;
    uint64_t worker;
    uint32_t dp;
    kvix_block_info *blocks; /* the last group's, sorted by (position, engine) */
    kvix_block_info *pre;    /* version 3: the last group's, in the file's order */
    size_t *up;              /* parent index of each block of the last group (NONE: none) */
    size_t cap;
    kvix_snap_scratch sc;
    size_t *ext;             /* offsets of the extension records */
    size_t next;
    size_t part_no;          /* partition records met since the first record */
    uint64_t *est;           /* per partition: about how many distinct blocks (verify) */
    size_t nest;
    int borrowed;            /* a cursor: data and est are its snapshot's */
    /* next: records for which want() is 0 are jumped over undecoded */
    int (*want)(void *ctx, uint64_t worker, uint32_t dp);
    void *want_ctx;
};

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
    kvix_snap_scratch_release(&s->sc);
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

#define CORRUPT(s, off, ...) corrupt_at((s), (off), __VA_ARGS__)

__attribute__((format(printf, 4, 5))) static int corrupt_at(kvix_snapshot *s, size_t off,
                                                           kvix_err *err, const char *fmt, ...)
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
    if (s->in_part && kvix_snap_cmp_part(model, tenant, s->model, s->tenant) <= 0)
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
    if (kvix_snap_check_blocks(s->blocks, n, s->up, why, sizeof why))
        return CORRUPT(s, off, err, "worker %" PRIu64 " dp %" PRIu32 ": %s", worker, dp, why);
    size_t dup;
    int rep = kvix_snap_repeated_engine(s->blocks, n, &dup);
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
    rc = kvix_snap_group_decode(&s->sc, s->data + start, body, (size_t)n, s->verified, s->pre,
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

int kvix_snap_next_tree(kvix_snapshot *s, kvix_snapshot_group *g, const size_t **up,
                        kvix_err *err)
{
    int rc = s->version == KVIX_SNAPSHOT_VERSION ? next3(s, g, 0, err) : next1(s, g, err);
    *up = s->up;
    return rc;
}

/* Version 3's frame: the stream position, then the extension records
 * (checked and listed here); s->first is the first record after them. */
static int frame3(kvix_snapshot *s, kvix_err *err)
{
    const unsigned char *d = s->data;
    size_t pos = HEADER_BYTES;
    size_t *ext = NULL, next = 0, cap = 0;
    while (s->body_end - pos >= REC_HEAD_BYTES) {
        uint32_t tag = get32(d + pos), flags = get32(d + pos + 4);
        uint64_t len = get64(d + pos + 8);
        if (len > s->body_end - pos - REC_HEAD_BYTES) {
            free(ext);
            return CORRUPT(s, pos, err, "record of %" PRIu64 " bytes runs past the end", len);
        }
        if (tag == TAG_STREAM && pos == HEADER_BYTES) {
            size_t nl = len >= 8 ? (size_t)len - 8 : 0;
            const char *name = (const char *)d + pos + REC_HEAD_BYTES + 8;
            if (flags || len < 9 || nl >= KVIX_SNAPSHOT_STREAM_MAX ||
                !kvix_snap_stream_name_ok(name, nl)) {
                free(ext);
                return CORRUPT(s, pos, err, "bad stream position record");
            }
            s->info.has_stream = 1;
            s->info.stream_seq = get64(d + pos + REC_HEAD_BYTES);
            memcpy(s->info.stream, name, nl);
            s->info.stream[nl] = '\0';
        } else if (tag >= KVIX_SNAPSHOT_EXT_MIN) {
            if (flags & ~REC_OPTIONAL) {
                free(ext);
                return CORRUPT(s, pos, err, "flags 0x%" PRIx32 " on extension record type %" PRIu32,
                               flags, tag);
            }
            if (tag > KVIX_SNAPSHOT_EXT_KNOWN_MAX && !(flags & REC_OPTIONAL)) {
                free(ext);
                return kvix_err_set(err, KVIX_ECORRUPT,
                                    "%s: snapshot holds extension record type %" PRIu32
                                    ", unknown to this kvix (written by a newer one?)",
                                    s->name, tag);
            }
            /* the index's own: checked whole now, so a verified file loads */
            kvix_err why;
            if (tag == KVIX_SNAPSHOT_EXT_KVGROUPS &&
                kvix_index_groups_check(d + pos + REC_HEAD_BYTES, (size_t)len, &why)) {
                free(ext);
                return CORRUPT(s, pos, err, "%s", why.msg);
            }
            if (next == cap) {
                size_t c = cap ? 2 * cap : 8;
                size_t *e = realloc(ext, c * sizeof *e);
                if (!e) {
                    free(ext);
                    return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
                }
                ext = e;
                cap = c;
            }
            ext[next++] = pos;
        } else {
            break;
        }
        pos += REC_HEAD_BYTES + (size_t)len;
    }
    s->ext = ext;
    s->next = next;
    s->info.extensions = next;
    s->first = pos;
    return KVIX_OK;
}

/* Everything but the records' contents: magic, version, trailer, checksum. */
static int verify_frame(kvix_snapshot *s, kvix_err *err)
{
    const unsigned char *d = s->data;
    if (s->len < 8 || memcmp(d, KVIX_SNAPSHOT_MAGIC, 8) != 0)
        return kvix_err_set(err, KVIX_ECORRUPT, "%s: not a kvix snapshot (bad magic)", s->name);
    if (s->len < HEADER_BYTES)
        return kvix_err_set(err, KVIX_ECORRUPT, "%s: truncated snapshot (%zu bytes)", s->name,
                            s->len);
    uint32_t version = get32(d + 8);
    if (version != KVIX_SNAPSHOT_VERSION && version != KVIX_SNAPSHOT_VERSION_V1 &&
        version != KVIX_SNAPSHOT_VERSION_V2)
        return kvix_err_set(err, KVIX_ECORRUPT,
                            "%s: unsupported snapshot format version %" PRIu32
                            " (this kvix reads %u to %u)",
                            s->name, version, KVIX_SNAPSHOT_VERSION_V1, KVIX_SNAPSHOT_VERSION);
    if (get32(d + 12) != 0)
        return kvix_err_set(err, KVIX_ECORRUPT, "%s: unknown snapshot flags 0x%" PRIx32, s->name,
                            get32(d + 12));
    s->version = version;
    size_t end = version == KVIX_SNAPSHOT_VERSION ? END3_BYTES : END_BYTES;
    if (s->len < HEADER_BYTES + end || get32(d + s->len - end) != TAG_END ||
        get32(d + s->len - end + 4) != 0 ||
        (version == KVIX_SNAPSHOT_VERSION &&
         get64(d + s->len - end + 8) != END3_BYTES - REC_HEAD_BYTES))
        return kvix_err_set(err, KVIX_ECORRUPT,
                            "%s: truncated or corrupt snapshot (no end record)", s->name);
    uint64_t stored = get64(d + s->len - 8);
    uint64_t sum = XXH3_64bits(d, s->len - 8);
    if (sum != stored)
        return kvix_err_set(err, KVIX_ECORRUPT,
                            "%s: checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64
                            "): the file is corrupt",
                            s->name, stored, sum);
    s->body_end = s->len - end;
    s->first = HEADER_BYTES;
    s->info.version = version;
    s->info.bytes = s->len;
    s->info.checksum = stored;
    if (version == KVIX_SNAPSHOT_VERSION)
        return frame3(s, err);
    if (version == KVIX_SNAPSHOT_VERSION_V2) {
        size_t nl = s->body_end >= HEADER_BYTES + STREAM_HEAD_BYTES ? get32(d + HEADER_BYTES + 4) : 0;
        if (s->body_end < HEADER_BYTES + STREAM_HEAD_BYTES ||
            get32(d + HEADER_BYTES) != TAG_STREAM || nl == 0 ||
            nl >= KVIX_SNAPSHOT_STREAM_MAX || nl > s->body_end - HEADER_BYTES - STREAM_HEAD_BYTES)
            return CORRUPT(s, HEADER_BYTES, err, "bad stream position record");
        const char *name = (const char *)d + HEADER_BYTES + STREAM_HEAD_BYTES;
        if (!kvix_snap_stream_name_ok(name, nl))
            return CORRUPT(s, HEADER_BYTES, err, "bad stream name in the stream position record");
        s->info.has_stream = 1;
        s->info.stream_seq = get64(d + HEADER_BYTES + 8);
        memcpy(s->info.stream, name, nl);
        s->info.stream[nl] = '\0';
        s->first = HEADER_BYTES + STREAM_HEAD_BYTES + nl;
    }
    return KVIX_OK;
}

/* A partition's distinct blocks, about: a HyperLogLog sketch of their
 * (position, canonical hash) (2^12 one-byte registers, about 1.6 % off), so
 * a load can size the backend's tables once instead of growing them. */
#define HLL_BITS 12u
#define HLL_M (1u << HLL_BITS)

static void hll_add(uint8_t *r, uint32_t pos, uint64_t canon)
{
    uint64_t h = kvix_mix64(canon ^ ((uint64_t)pos * UINT64_C(0x9e3779b97f4a7c15)));
    uint32_t j = (uint32_t)(h >> (64 - HLL_BITS));
    uint8_t rho = (uint8_t)(__builtin_clzll((h << HLL_BITS) | (UINT64_C(1) << (HLL_BITS - 1))) + 1);
    if (rho > r[j])
        r[j] = rho;
}

static uint64_t hll_count(const uint8_t *r)
{
    double sum = 0, m = HLL_M;
    unsigned zeros = 0;
    for (unsigned j = 0; j < HLL_M; j++) {
        sum += 1.0 / (double)(UINT64_C(1) << r[j]);
        zeros += !r[j];
    }
    double e = 0.7213 / (1 + 1.079 / m) * m * m / sum;
    if (e < 2.5 * m && zeros) /* few: linear counting */
        e = m * log(m / zeros);
    return (uint64_t)e;
}

/* One full pass: every record parsed and checked, totals compared. */
static int verify_records(kvix_snapshot *s, kvix_err *err)
{
    const unsigned char *e =
        s->data + s->body_end + (s->version == KVIX_SNAPSHOT_VERSION ? REC_HEAD_BYTES : 8);
    uint64_t parts = 0, groups = 0, blocks = 0;
    kvix_snapshot_group g;
    int rc;
    kvix_snapshot_rewind(s);
    const size_t *up;
    uint8_t *hll = calloc(HLL_M, 1);
    size_t cap = 0, at = 0; /* the partition the sketch counts (part_no) */
    if (!hll)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    while ((rc = kvix_snap_next_tree(s, &g, &up, err)) == KVIX_OK) {
        if (s->part_no != at) { /* a partition begins */
            if (at && at <= cap)
                s->est[at - 1] = hll_count(hll);
            memset(hll, 0, HLL_M);
            at = s->part_no;
            parts++;
            if (at > cap) {
                size_t c = cap ? 2 * cap : 4;
                uint64_t *v = realloc(s->est, c * sizeof *v);
                if (!v) {
                    free(hll);
                    return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
                }
                s->est = v;
                cap = c;
            }
        }
        for (size_t i = 0; i < g.n; i++)
            hll_add(hll, g.blocks[i].position, g.blocks[i].canon);
        if (!(g.worker == UINT64_MAX && g.n == 0 && !g.has_eid)) {
            groups++;
            blocks += g.n;
        }
    }
    if (at && at <= cap)
        s->est[at - 1] = hll_count(hll);
    s->nest = at;
    free(hll);
    if (rc != KVIX_EOF)
        return rc;
    if (parts != get64(e) || groups != get64(e + 8) || blocks != get64(e + 16))
        return CORRUPT(s, s->body_end, err,
                       "totals %" PRIu64 "/%" PRIu64 "/%" PRIu64 " do not match the records (%" PRIu64
                       " partitions, %" PRIu64 " workers, %" PRIu64 " blocks)",
                       get64(e), get64(e + 8), get64(e + 16), parts, groups, blocks);
    s->info.partitions = parts;
    s->info.groups = groups;
    s->info.blocks = blocks;
    s->verified = 1;
    kvix_snapshot_rewind(s);
    return KVIX_OK;
}

size_t kvix_snap_part_no(const kvix_snapshot *s)
{
    return s->part_no;
}

size_t kvix_snap_load_reserve(const kvix_snapshot *s)
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

static int finish_open(kvix_snapshot *s, kvix_snapshot **out, kvix_err *err)
{
    int rc = verify_frame(s, err);
    if (!rc)
        rc = verify_records(s, err);
    if (rc) {
        kvix_snapshot_close(s);
        return rc;
    }
    *out = s;
    return KVIX_OK;
}

static kvix_snapshot *snap_new(const char *name, kvix_err *err)
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

int kvix_snapshot_open_mem(kvix_snapshot **out, const void *data, size_t len, kvix_err *err)
{
    *out = NULL;
    kvix_snapshot *s = snap_new("<memory>", err);
    if (!s)
        return KVIX_ENOMEM;
    s->owned = malloc(len ? len : 1);
    if (!s->owned) {
        kvix_snapshot_close(s);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu bytes", len);
    }
    if (len)
        memcpy(s->owned, data, len);
    s->data = s->owned;
    s->len = len;
    return finish_open(s, out, err);
}

static int read_all(kvix_snapshot *s, int fd, kvix_err *err)
{
    size_t cap = 1 << 20, len = 0;
    unsigned char *b = malloc(cap);
    if (!b)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    for (;;) {
        if (len == cap) {
            if (cap > SIZE_MAX / 2) {
                free(b);
                return kvix_err_set(err, KVIX_ELIMIT, "%s: input too large", s->name);
            }
            unsigned char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                return kvix_err_set(err, KVIX_ENOMEM, "out of memory reading %s", s->name);
            }
            b = nb;
            cap *= 2;
        }
        ssize_t k = read(fd, b + len, cap - len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int e = errno;
            free(b);
            return kvix_err_set(err, KVIX_EIO, "%s: read: %s", s->name, strerror(e));
        }
        if (k == 0)
            break;
        len += (size_t)k;
    }
    s->owned = b;
    s->data = b;
    s->len = len;
    return KVIX_OK;
}

int kvix_snapshot_open_fd(kvix_snapshot **out, int fd, const char *name, kvix_err *err)
{
    *out = NULL;
    kvix_snapshot *s = snap_new(name, err);
    if (!s)
        return KVIX_ENOMEM;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
        (uint64_t)st.st_size <= SIZE_MAX) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m != MAP_FAILED) {
            madvise(m, (size_t)st.st_size, MADV_SEQUENTIAL);
            s->map = m;
            s->data = m;
            s->len = (size_t)st.st_size;
            return finish_open(s, out, err);
        }
    }
    int rc = read_all(s, fd, err);
    if (rc) {
        kvix_snapshot_close(s);
        return rc;
    }
    return finish_open(s, out, err);
}

int kvix_snapshot_open(kvix_snapshot **out, const char *path, kvix_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kvix_err_set(err, errno == ENOENT ? KVIX_ENOTFOUND : KVIX_EIO, "%s: %s", path,
                            strerror(errno));
    int rc = kvix_snapshot_open_fd(out, fd, path, err);
    close(fd);
    return rc;
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

kvix_snapshot *kvix_snapshot_cursor(const kvix_snapshot *s, kvix_err *err)
{
    kvix_snapshot *c = snap_new(s->name, err);
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

void kvix_snapshot_set_filter(kvix_snapshot *s,
                              int (*want)(void *ctx, uint64_t worker, uint32_t dp), void *ctx)
{
    s->want = want;
    s->want_ctx = ctx;
}

