/* The snapshot file (kvix-snapshot(5)).
 *
 *   header  magic "KVIXSNAP", u32 version, u32 flags (0)                 16 bytes
 *   STREAM  (version 2 only, right after the header) u32 4, u32 name_len,
 *           u64 sequence, name: the stream position the state reflects
 *   PART    u32 1, u32 bs, u32 model_len, u32 tenant_len, model, tenant
 *   GROUP   u32 2, u32 dp, u64 worker, u32 flags (bit 0: has eid), u32 0,
 *           u64 eid, u64 nblocks, nblocks x block                       40 + 40n bytes
 *   block   u32 position, u32 tiers, u64 local, u64 engine, u64 parent,
 *           u64 parent_canon                                            40 bytes
 *   END     u32 3, u32 0, u64 partitions, u64 groups, u64 blocks,
 *           u64 XXH3-64 (seed 0) of every byte before it                 40 bytes
 *
 * Everything is little-endian. Records are strictly ordered, so one index
 * state has exactly one file: snapshots compare with cmp(1).
 *
 * A block's parent may be absent: the index keeps blocks whose parent was
 * evicted before them ("orphans"). The parent's canonical hash is stored so
 * such a block keeps its place; where the parent is present it must agree. */
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
#include "snapshot_int.h"
#include "utf8_int.h"

#define TAG_PART 1u
#define TAG_GROUP 2u
#define TAG_END 3u
#define TAG_STREAM 4u
#define STREAM_HEAD_BYTES 16u
#define HEADER_BYTES 16u
#define GROUP_HEAD_BYTES 40u
#define END_BYTES 40u
#define BLOCK_BYTES KVIX_SNAPSHOT_BLOCK_BYTES
#define TIERS_ALL ((1u << KVIX_MEDIUM_COUNT) - 1)
#define WBUF_BYTES (4u << 20)
#define NONE SIZE_MAX

/* ---- little-endian fields --------------------------------------------- */

static inline void put32(unsigned char *p, uint32_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &v, 4);
#else
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
#endif
}

static inline void put64(unsigned char *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &v, 8);
#else
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
#endif
}

static inline uint32_t get32(const unsigned char *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#endif
}

static inline uint64_t get64(const unsigned char *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
#endif
}

/* ---- shared checks ------------------------------------------------------ */

static int cmp_part(const char *m1, const char *t1, const char *m2, const char *t2)
{
    int c = strcmp(m1, m2);
    return c ? c : strcmp(t1, t2);
}

/* Index of the block with engine hash h in blocks[lo, hi) (sorted by engine
 * within one position), or NONE. */
static size_t find_engine(const kvix_block_info *b, size_t lo, size_t hi, uint64_t h)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b[mid].engine < h)
            lo = mid + 1;
        else if (b[mid].engine > h)
            hi = mid;
        else
            return mid;
    }
    return NONE;
}

/* The internal consistency of one (worker, dp): blocks ascending by
 * (position, engine) and tiers valid. A block's parent is the block held at
 * position - 1 under the recorded engine hash with the recorded canonical
 * hash; when there is none the block is an orphan, which is allowed: its
 * parent was removed, or its engine hash was stored again with other
 * content (the index keeps the child where it was, see kvix_index_load), so
 * whatever the index holds can be saved. Position-0 parents are ignored.
 * Fills parent_idx[i] (when non-NULL) with the parent's index or NONE. */
static int check_blocks(const kvix_block_info *b, size_t n, size_t *parent_idx, char *why,
                        size_t whylen)
{
    size_t prev_lo = 0, prev_hi = 0, cur = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && (b[i].position < b[i - 1].position ||
                      (b[i].position == b[i - 1].position && b[i].engine <= b[i - 1].engine))) {
            snprintf(why, whylen, "block %zu out of order (position %" PRIu32 " after %" PRIu32 ")",
                     i, b[i].position, b[i - 1].position);
            return -1;
        }
        if (i == 0 || b[i].position != b[i - 1].position) {
            if (i > 0 && b[i].position == b[i - 1].position + 1) {
                prev_lo = cur;
                prev_hi = i;
            } else {
                prev_lo = prev_hi = i;
            }
            cur = i;
        }
        if (b[i].tiers == 0 || (b[i].tiers & ~TIERS_ALL)) {
            snprintf(why, whylen, "block %zu has a bad tier mask 0x%x", i, b[i].tiers);
            return -1;
        }
        if (b[i].position >= KVIX_INDEX_DEPTH_MAX) {
            snprintf(why, whylen, "block %zu at position %" PRIu32 " (limit %u)", i,
                     b[i].position, KVIX_INDEX_DEPTH_MAX - 1);
            return -1;
        }
        size_t p = NONE;
        if (b[i].position > 0) {
            p = find_engine(b, prev_lo, prev_hi, b[i].parent);
            if (p != NONE && b[p].canon != b[i].parent_canon)
                p = NONE; /* that hash now names other content: an orphan */
        }
        if (parent_idx)
            parent_idx[i] = p;
    }
    return 0;
}

/* An engine hash names one block per (worker, dp) (index.h): whether two
 * blocks of b[0..n) share one. Blocks are sorted by position first, so a
 * repeat at another position needs a set: open addressing over twice n
 * slots, the hash 0 kept aside. Returns 1 with *dup the second block's
 * index, 0 when all differ, KVIX_ENOMEM. */
static int repeated_engine(const kvix_block_info *b, size_t n, size_t *dup)
{
    if (n < 2)
        return 0;
    size_t cap = 4;
    while (cap < 2 * n)
        cap *= 2;
    uint64_t *set = calloc(cap, sizeof *set);
    if (!set)
        return KVIX_ENOMEM;
    int zero = 0, found = 0;
    for (size_t i = 0; i < n && !found; i++) {
        uint64_t h = b[i].engine;
        if (h == 0) {
            found = zero;
            zero = 1;
        } else {
            size_t k = (size_t)(kvix_mix64(h) & (cap - 1));
            while (set[k] && set[k] != h)
                k = (k + 1) & (cap - 1);
            found = set[k] == h;
            set[k] = h;
        }
        if (found)
            *dup = i;
    }
    free(set);
    return found;
}

/* ---- writer ------------------------------------------------------------- */

struct kvix_snapshot_writer {
    int fd;
    char *path, *tmp;
    unsigned char *buf;
    size_t len;
    XXH3_state_t *xs;
    uint64_t bytes, partitions, groups, blocks;
    int broken;
    int have_part, have_group;
    char model[KVIX_NAME_MAX], tenant[KVIX_NAME_MAX];
    uint32_t bs;
    uint64_t worker;
    uint32_t dp;
    int has_stream;
};

static int wflush(kvix_snapshot_writer *w, kvix_err *err)
{
    XXH3_64bits_update(w->xs, w->buf, w->len);
    size_t off = 0;
    while (off < w->len) {
        ssize_t k = write(w->fd, w->buf + off, w->len - off);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            w->broken = 1;
            return kvix_err_set(err, KVIX_EIO, "%s: write: %s", w->tmp, strerror(errno));
        }
        off += (size_t)k;
    }
    w->bytes += w->len;
    w->len = 0;
    return KVIX_OK;
}

/* Room for n more bytes in the buffer (n <= WBUF_BYTES). */
static inline int wroom(kvix_snapshot_writer *w, size_t n, kvix_err *err)
{
    return w->len + n <= WBUF_BYTES ? KVIX_OK : wflush(w, err);
}

static int wbytes(kvix_snapshot_writer *w, const void *p, size_t n, kvix_err *err)
{
    int rc = wroom(w, n, err);
    if (rc)
        return rc;
    memcpy(w->buf + w->len, p, n);
    w->len += n;
    return KVIX_OK;
}

void kvix_snapshot_writer_abort(kvix_snapshot_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    if (w->tmp)
        unlink(w->tmp);
    free(w->path);
    free(w->tmp);
    free(w->buf);
    if (w->xs)
        XXH3_freeState(w->xs);
    free(w);
}

int kvix_snapshot_writer_open(kvix_snapshot_writer **out, const char *path, kvix_err *err)
{
    *out = NULL;
    if (!path || !*path)
        return kvix_err_set(err, KVIX_EINVAL, "empty snapshot path");
    kvix_snapshot_writer *w = calloc(1, sizeof *w);
    if (!w)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a snapshot writer");
    w->fd = -1;
    int rc = kvix_snapshot_resolve(path, &w->path, err);
    if (rc) {
        kvix_snapshot_writer_abort(w);
        return rc;
    }
    /* From here on the file the path names (messages keep the caller's
     * path: w, and real with it, are freed on failure). */
    const char *real = w->path;
    size_t pl = strlen(real);
    w->tmp = malloc(pl + 16);
    w->buf = malloc(WBUF_BYTES);
    w->xs = XXH3_createState();
    if (!w->tmp || !w->buf || !w->xs) {
        free(w->tmp);
        w->tmp = NULL;
        kvix_snapshot_writer_abort(w);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a snapshot writer");
    }
    /* Beside the target, so rename(2) is atomic; unique, so two savers
     * never write into each other's file. */
    memcpy(w->tmp, real, pl);
    memcpy(w->tmp + pl, ".tmp.XXXXXX", 12);
    w->fd = mkostemp(w->tmp, O_CLOEXEC);
    if (w->fd < 0) {
        int e = errno;
        free(w->tmp);
        w->tmp = NULL;
        kvix_snapshot_writer_abort(w);
        return kvix_err_set(err, e == ENOENT ? KVIX_ENOTFOUND : KVIX_EIO,
                            "%s: cannot create a temporary file beside it: %s", path,
                            strerror(e));
    }
    /* Keep the mode of the file being replaced; a new one gets 0644. */
    struct stat st;
    mode_t mode = stat(real, &st) == 0 ? (st.st_mode & 07777) : 0644;
    if (fchmod(w->fd, mode) != 0) {
        int e = errno;
        kvix_snapshot_writer_abort(w);
        return kvix_err_set(err, KVIX_EIO, "%s: chmod: %s", path, strerror(e));
    }
    XXH3_64bits_reset(w->xs);
    memcpy(w->buf, KVIX_SNAPSHOT_MAGIC, 8);
    put32(w->buf + 8, KVIX_SNAPSHOT_VERSION);
    put32(w->buf + 12, 0);
    w->len = HEADER_BYTES;
    *out = w;
    return KVIX_OK;
}

/* JetStream's rule for stream names (printable, no space, '.', '*', '>',
 * path separators), and nothing a JSON string would need to escape. */
static int stream_name_ok(const char *p, size_t n)
{
    if (n == 0 || n >= KVIX_SNAPSHOT_STREAM_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= ' ' || c >= 0x7f || strchr(".*>/\\\"", c))
            return 0;
    }
    return 1;
}

int kvix_snapshot_writer_set_stream(kvix_snapshot_writer *w, const char *stream, uint64_t seq,
                                    kvix_err *err)
{
    size_t nl = stream ? strlen(stream) : 0;
    if (!stream_name_ok(stream, nl))
        return kvix_err_set(err, KVIX_EINVAL, "snapshot: bad stream name '%s'",
                            stream ? stream : "");
    /* Only the header is buffered yet: the version can still change. */
    if (w->broken || w->has_stream || w->have_part || w->len != HEADER_BYTES)
        return kvix_err_set(err, KVIX_EINVAL,
                            "snapshot: the stream position goes before every record");
    put32(w->buf + 8, KVIX_SNAPSHOT_VERSION_STREAM);
    unsigned char h[STREAM_HEAD_BYTES];
    put32(h, TAG_STREAM);
    put32(h + 4, (uint32_t)nl);
    put64(h + 8, seq);
    int rc = wbytes(w, h, sizeof h, err);
    if (!rc)
        rc = wbytes(w, stream, nl, err);
    if (rc)
        return rc;
    w->has_stream = 1;
    return KVIX_OK;
}

static int write_part(kvix_snapshot_writer *w, const char *model, const char *tenant,
                      uint32_t bs, kvix_err *err)
{
    size_t ml = strlen(model), tl = strlen(tenant);
    unsigned char h[16];
    put32(h, TAG_PART);
    put32(h + 4, bs);
    put32(h + 8, (uint32_t)ml);
    put32(h + 12, (uint32_t)tl);
    int rc = wbytes(w, h, 16, err);
    if (!rc)
        rc = wbytes(w, model, ml, err);
    if (!rc)
        rc = wbytes(w, tenant, tl, err);
    if (rc)
        return rc;
    memcpy(w->model, model, ml + 1);
    memcpy(w->tenant, tenant, tl + 1);
    w->bs = bs;
    w->have_part = 1;
    w->have_group = 0;
    w->partitions++;
    return KVIX_OK;
}

int kvix_snapshot_writer_add(kvix_snapshot_writer *w, const char *model, const char *tenant,
                             uint32_t bs, uint64_t worker, uint32_t dp, int has_eid,
                             uint64_t last_eid, const kvix_block_info *blocks, size_t n,
                             kvix_err *err)
{
    if (w->broken)
        return kvix_err_set(err, KVIX_EINVAL, "snapshot writer used after a failure");
    w->broken = 1; /* until this record is complete */
    if (!model || !tenant || strlen(model) >= KVIX_NAME_MAX || strlen(tenant) >= KVIX_NAME_MAX ||
        !kvix_utf8_valid(model, strlen(model)) || !kvix_utf8_valid(tenant, strlen(tenant)))
        return kvix_err_set(err, KVIX_EINVAL, "snapshot: bad partition name");
    if (bs == 0 || bs > KVIX_BS_MAX)
        return kvix_err_set(err, KVIX_EINVAL, "snapshot: bad block size %" PRIu32, bs);
    int c = w->have_part ? cmp_part(model, tenant, w->model, w->tenant) : 1;
    if (c < 0)
        return kvix_err_set(err, KVIX_EINVAL, "snapshot: partition %s/%s out of order", model,
                            tenant);
    if (c == 0 && bs != w->bs)
        return kvix_err_set(err, KVIX_EINVAL, "snapshot: partition %s/%s with two block sizes",
                            model, tenant);
    int rc;
    if (c > 0 && (rc = write_part(w, model, tenant, bs, err)))
        return rc;
    if (worker == UINT64_MAX && n == 0 && !has_eid) {
        w->broken = 0; /* a partition without workers: the PART record says it */
        return KVIX_OK;
    }
    if (worker > KVIX_WORKER_MAX || (has_eid && last_eid > KVIX_EID_MAX))
        return kvix_err_set(err, KVIX_EINVAL, "snapshot: worker %" PRIu64 " or its eid out of range",
                            worker);
    if (w->have_group && (worker < w->worker || (worker == w->worker && dp <= w->dp)))
        return kvix_err_set(err, KVIX_EINVAL,
                            "snapshot: worker %" PRIu64 " dp %" PRIu32 " out of order", worker, dp);
    char why[160];
    if (check_blocks(blocks, n, NULL, why, sizeof why))
        return kvix_err_set(err, KVIX_EINVAL, "snapshot: worker %" PRIu64 " dp %" PRIu32 ": %s",
                            worker, dp, why);
    size_t dup;
    if ((rc = repeated_engine(blocks, n, &dup)) < 0)
        return kvix_err_set(err, rc, "out of memory checking %zu blocks", n);
    if (rc)
        return kvix_err_set(err, KVIX_EINVAL,
                            "snapshot: worker %" PRIu64 " dp %" PRIu32 ": block %zu repeats engine "
                            "hash %016" PRIx64 " of an earlier one",
                            worker, dp, dup, blocks[dup].engine);
    if ((rc = wroom(w, GROUP_HEAD_BYTES, err)))
        return rc;
    unsigned char *h = w->buf + w->len;
    put32(h, TAG_GROUP);
    put32(h + 4, dp);
    put64(h + 8, worker);
    put32(h + 16, has_eid ? 1u : 0u);
    put32(h + 20, 0);
    put64(h + 24, has_eid ? last_eid : 0);
    put64(h + 32, (uint64_t)n);
    w->len += GROUP_HEAD_BYTES;
    for (size_t i = 0; i < n; i++) {
        if ((rc = wroom(w, BLOCK_BYTES, err)))
            return rc;
        unsigned char *p = w->buf + w->len;
        put32(p, blocks[i].position);
        put32(p + 4, blocks[i].tiers);
        put64(p + 8, blocks[i].local);
        put64(p + 16, blocks[i].engine);
        /* "meaningless at position 0": store 0 so equal states give equal files */
        put64(p + 24, blocks[i].position ? blocks[i].parent : 0);
        put64(p + 32, blocks[i].position ? blocks[i].parent_canon : 0);
        w->len += BLOCK_BYTES;
    }
    w->have_group = 1;
    w->worker = worker;
    w->dp = dp;
    w->groups++;
    w->blocks += n;
    w->broken = 0;
    return KVIX_OK;
}

static int fsync_dir(const char *path, kvix_err *err)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    if (!slash)
        dir = strdup(".");
    else if (slash == path)
        dir = strdup("/");
    else
        dir = strndup(path, (size_t)(slash - path));
    if (!dir)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = KVIX_OK;
    if (fd < 0 || fsync(fd) != 0)
        rc = kvix_err_set(err, KVIX_EIO, "%s: fsync of the folder: %s", dir, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(dir);
    return rc;
}

int kvix_snapshot_writer_commit(kvix_snapshot_writer *w, kvix_snapshot_info *info,
                                kvix_err *err)
{
    int rc;
    if (w->broken) {
        kvix_snapshot_writer_abort(w);
        return kvix_err_set(err, KVIX_EINVAL, "snapshot writer used after a failure");
    }
    if ((rc = wroom(w, END_BYTES, err)))
        goto fail;
    unsigned char *e = w->buf + w->len;
    put32(e, TAG_END);
    put32(e + 4, 0);
    put64(e + 8, w->partitions);
    put64(e + 16, w->groups);
    put64(e + 24, w->blocks);
    w->len += END_BYTES - 8;
    if ((rc = wflush(w, err)))
        goto fail;
    uint64_t sum = XXH3_64bits_digest(w->xs);
    put64(w->buf, sum);
    w->len = 8;
    size_t off = 0;
    while (off < 8) {
        ssize_t k = write(w->fd, w->buf + off, 8 - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = kvix_err_set(err, KVIX_EIO, "%s: write: %s", w->tmp, strerror(errno));
            goto fail;
        }
        off += (size_t)k;
    }
    w->bytes += 8;
    if (fsync(w->fd) != 0) {
        rc = kvix_err_set(err, KVIX_EIO, "%s: fsync: %s", w->tmp, strerror(errno));
        goto fail;
    }
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) {
        rc = kvix_err_set(err, KVIX_EIO, "%s: close: %s", w->tmp, strerror(errno));
        goto fail;
    }
    if (rename(w->tmp, w->path) != 0) {
        rc = kvix_err_set(err, KVIX_EIO, "%s: rename to %s: %s", w->tmp, w->path,
                          strerror(errno));
        goto fail;
    }
    free(w->tmp);
    w->tmp = NULL; /* renamed: nothing to remove any more */
    /* The rename is durable only once the folder is. */
    rc = fsync_dir(w->path, err);
    if (info) {
        info->version = w->has_stream ? KVIX_SNAPSHOT_VERSION_STREAM : KVIX_SNAPSHOT_VERSION;
        info->partitions = w->partitions;
        info->groups = w->groups;
        info->blocks = w->blocks;
        info->bytes = w->bytes;
        info->checksum = sum;
    }
fail:
    kvix_snapshot_writer_abort(w);
    return rc;
}

/* ---- reader ------------------------------------------------------------- */

struct kvix_snapshot {
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
    kvix_block_info *blocks;
    size_t cap;
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
    free(s);
}

void kvix_snapshot_rewind(kvix_snapshot *s)
{
    s->pos = s->first;
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

static int read_name(kvix_snapshot *s, size_t off, uint32_t len, char *dst, const char *what,
                     kvix_err *err)
{
    if (len >= KVIX_NAME_MAX)
        return CORRUPT(s, off, err, "%s name of %" PRIu32 " bytes (limit %d)", what, len,
                       KVIX_NAME_MAX - 1);
    if (len > s->body_end - s->pos)
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

static int parse_part(kvix_snapshot *s, kvix_err *err)
{
    size_t off = s->pos;
    if (s->body_end - s->pos < 16)
        return CORRUPT(s, off, err, "partition record runs past the end");
    const unsigned char *p = s->data + s->pos;
    uint32_t bs = get32(p + 4), ml = get32(p + 8), tl = get32(p + 12);
    s->pos += 16;
    if (bs == 0 || bs > KVIX_BS_MAX)
        return CORRUPT(s, off, err, "block size %" PRIu32 " (expected 1 to %d)", bs,
                       KVIX_BS_MAX);
    char model[KVIX_NAME_MAX], tenant[KVIX_NAME_MAX];
    int rc = read_name(s, off, ml, model, "model", err);
    if (!rc)
        rc = read_name(s, off, tl, tenant, "tenant", err);
    if (rc)
        return rc;
    if (s->in_part && cmp_part(model, tenant, s->model, s->tenant) <= 0)
        return CORRUPT(s, off, err, "partition %s/%s out of order", model, tenant);
    memcpy(s->model, model, sizeof model);
    memcpy(s->tenant, tenant, sizeof tenant);
    s->bs = bs;
    s->in_part = 1;
    s->part_groups = 0;
    s->have_group = 0;
    return KVIX_OK;
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
    if (flags & ~1u || pad)
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
    /* Bounded by the bytes present before anything is allocated. */
    size_t left = s->body_end - s->pos;
    if (n > left / BLOCK_BYTES)
        return CORRUPT(s, off, err, "worker record claims %" PRIu64 " blocks, %zu bytes remain", n,
                       left);
    if (s->have_group && (worker < s->worker || (worker == s->worker && dp <= s->dp)))
        return CORRUPT(s, off, err, "worker %" PRIu64 " dp %" PRIu32 " out of order", worker, dp);
    if (worker == UINT64_MAX && n == 0 && !(flags & 1))
        return CORRUPT(s, off, err, "empty worker record");
    if (s->want && !s->want(s->want_ctx, worker, dp)) {
        s->pos += n * BLOCK_BYTES;
        s->have_group = 1;
        s->worker = worker;
        s->dp = dp;
        s->part_groups++;
        return 1; /* skipped: next goes on */
    }
    if (n > s->cap) {
        size_t c = s->cap ? s->cap : 64;
        while (c < n)
            c *= 2;
        kvix_block_info *nb = realloc(s->blocks, c * sizeof *nb);
        if (!nb)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %" PRIu64 " blocks", n);
        s->blocks = nb;
        s->cap = c;
    }
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
    if (check_blocks(s->blocks, n, NULL, why, sizeof why))
        return CORRUPT(s, off, err, "worker %" PRIu64 " dp %" PRIu32 ": %s", worker, dp, why);
    size_t dup;
    int rep = repeated_engine(s->blocks, n, &dup);
    if (rep < 0)
        return kvix_err_set(err, rep, "out of memory checking %zu blocks", n);
    if (rep)
        return CORRUPT(s, s->pos + dup * BLOCK_BYTES, err,
                       "worker %" PRIu64 " dp %" PRIu32 ": block %zu repeats engine hash %016" PRIx64
                       " of an earlier one (an engine hash names one block)",
                       worker, dp, dup, s->blocks[dup].engine);
    s->pos += n * BLOCK_BYTES;
    s->have_group = 1;
    s->worker = worker;
    s->dp = dp;
    s->part_groups++;
    g->model = s->model;
    g->tenant = s->tenant;
    g->bs = s->bs;
    g->worker = worker;
    g->dp = dp;
    g->has_eid = flags & 1;
    g->eid = eid;
    g->blocks = s->blocks;
    g->n = n;
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

int kvix_snapshot_next(kvix_snapshot *s, kvix_snapshot_group *g, kvix_err *err)
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
    if (version != KVIX_SNAPSHOT_VERSION && version != KVIX_SNAPSHOT_VERSION_STREAM)
        return kvix_err_set(err, KVIX_ECORRUPT,
                            "%s: unsupported snapshot format version %" PRIu32
                            " (this kvix reads %u and %u)",
                            s->name, version, KVIX_SNAPSHOT_VERSION, KVIX_SNAPSHOT_VERSION_STREAM);
    if (get32(d + 12) != 0)
        return kvix_err_set(err, KVIX_ECORRUPT, "%s: unknown snapshot flags 0x%" PRIx32, s->name,
                            get32(d + 12));
    if (s->len < HEADER_BYTES + END_BYTES || get32(d + s->len - END_BYTES) != TAG_END ||
        get32(d + s->len - END_BYTES + 4) != 0)
        return kvix_err_set(err, KVIX_ECORRUPT,
                            "%s: truncated or corrupt snapshot (no end record)", s->name);
    uint64_t stored = get64(d + s->len - 8);
    uint64_t sum = XXH3_64bits(d, s->len - 8);
    if (sum != stored)
        return kvix_err_set(err, KVIX_ECORRUPT,
                            "%s: checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64
                            "): the file is corrupt",
                            s->name, stored, sum);
    s->body_end = s->len - END_BYTES;
    s->first = HEADER_BYTES;
    if (version == KVIX_SNAPSHOT_VERSION_STREAM) {
        size_t nl = s->body_end >= HEADER_BYTES + STREAM_HEAD_BYTES ? get32(d + HEADER_BYTES + 4) : 0;
        if (s->body_end < HEADER_BYTES + STREAM_HEAD_BYTES ||
            get32(d + HEADER_BYTES) != TAG_STREAM || nl == 0 ||
            nl >= KVIX_SNAPSHOT_STREAM_MAX || nl > s->body_end - HEADER_BYTES - STREAM_HEAD_BYTES)
            return CORRUPT(s, HEADER_BYTES, err, "bad stream position record");
        const char *name = (const char *)d + HEADER_BYTES + STREAM_HEAD_BYTES;
        if (!stream_name_ok(name, nl))
            return CORRUPT(s, HEADER_BYTES, err, "bad stream name in the stream position record");
        s->info.has_stream = 1;
        s->info.stream_seq = get64(d + HEADER_BYTES + 8);
        memcpy(s->info.stream, name, nl);
        s->info.stream[nl] = '\0';
        s->first = HEADER_BYTES + STREAM_HEAD_BYTES + nl;
    }
    s->info.version = version;
    s->info.bytes = s->len;
    s->info.checksum = stored;
    return KVIX_OK;
}

/* One full pass: every record parsed and checked, totals compared. */
static int verify_records(kvix_snapshot *s, kvix_err *err)
{
    const unsigned char *e = s->data + s->body_end;
    uint64_t parts = 0, groups = 0, blocks = 0;
    kvix_snapshot_group g;
    int rc;
    kvix_snapshot_rewind(s);
    int seen_part = 0;
    char last_model[KVIX_NAME_MAX] = "", last_tenant[KVIX_NAME_MAX] = "";
    while ((rc = kvix_snapshot_next(s, &g, err)) == KVIX_OK) {
        if (!seen_part || strcmp(last_model, g.model) || strcmp(last_tenant, g.tenant)) {
            parts++;
            seen_part = 1;
            snprintf(last_model, sizeof last_model, "%s", g.model);
            snprintf(last_tenant, sizeof last_tenant, "%s", g.tenant);
        }
        if (!(g.worker == UINT64_MAX && g.n == 0 && !g.has_eid)) {
            groups++;
            blocks += g.n;
        }
    }
    if (rc != KVIX_EOF)
        return rc;
    if (parts != get64(e + 8) || groups != get64(e + 16) || blocks != get64(e + 24))
        return CORRUPT(s, s->body_end, err,
                       "totals %" PRIu64 "/%" PRIu64 "/%" PRIu64 " do not match the records (%" PRIu64
                       " partitions, %" PRIu64 " workers, %" PRIu64 " blocks)",
                       get64(e + 8), get64(e + 16), get64(e + 24), parts, groups, blocks);
    s->info.partitions = parts;
    s->info.groups = groups;
    s->info.blocks = blocks;
    kvix_snapshot_rewind(s);
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

/* ---- rebuilding ----------------------------------------------------------- */


/* Emit runs of chain[0..n) (indexes into g->blocks) as stored events.
 * tier < 0: every block, split where the lowest tier changes, each run in
 * its lowest tier (chain order, so a parent always precedes its children);
 * tier >= 0: the blocks also held in that tier (not their lowest), in runs
 * of consecutive ones, once every block is already held somewhere. */
static unsigned run_tier(unsigned tiers, int tier)
{
    if (tier < 0)
        return (unsigned)__builtin_ctz(tiers);
    return ((tiers >> tier & 1) && (unsigned)__builtin_ctz(tiers) != (unsigned)tier)
               ? (unsigned)tier
               : KVIX_MEDIUM_COUNT;
}

static int emit_runs(const kvix_snapshot_group *g, const size_t *chain, size_t n, int tier,
                     kvix_event *ev, kvix_snapshot_event_fn fn, void *ctx, kvix_err *err)
{
    size_t i = 0;
    while (i < n) {
        unsigned t = run_tier(g->blocks[chain[i]].tiers, tier);
        if (t == KVIX_MEDIUM_COUNT) {
            i++;
            continue;
        }
        kvix_event_reset(ev);
        ev->type = KVIX_EV_STORED;
        ev->worker = g->worker;
        ev->dp = g->dp;
        ev->bs = g->bs;
        ev->medium = (int)t;
        int rc = kvix_event_set_name(ev->model, g->model, strlen(g->model), err);
        if (!rc)
            rc = kvix_event_set_name(ev->tenant, g->tenant, strlen(g->tenant), err);
        if (rc)
            return rc;
        const kvix_block_info *first = &g->blocks[chain[i]];
        ev->has_parent = first->position > 0;
        ev->parent = first->position > 0 ? first->parent : 0;
        size_t j = i;
        while (j < n && j - i < KVIX_EVENT_BLOCKS_MAX &&
               run_tier(g->blocks[chain[j]].tiers, tier) == t)
            j++;
        if ((rc = kvix_event_reserve_blocks(ev, j - i, err)))
            return rc;
        for (size_t k = i; k < j; k++) {
            ev->blocks[k - i].local = g->blocks[chain[k]].local;
            ev->blocks[k - i].seq = g->blocks[chain[k]].engine;
        }
        ev->nblocks = j - i;
        if ((rc = fn(ctx, ev)))
            return rc;
        i = j;
    }
    return KVIX_OK;
}

int kvix_snapshot_group_events(const kvix_snapshot_group *g, kvix_event *scratch,
                               kvix_snapshot_event_fn fn, void *ctx, size_t *orphans,
                               kvix_err *err)
{
    size_t n = g->n;
    if (orphans)
        *orphans = 0;
    if (n == 0)
        return KVIX_OK;
    if (n > SIZE_MAX / (3 * sizeof(size_t)))
        return kvix_err_set(err, KVIX_ELIMIT, "too many blocks");
    size_t *mem = malloc(3 * n * sizeof(size_t));
    unsigned char *done = calloc(n, 1);
    if (!mem || !done) {
        free(mem);
        free(done);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu blocks", n);
    }
    size_t *parent = mem, *child = mem + n, *chain = mem + 2 * n;
    char why[160];
    int rc = KVIX_OK;
    if (check_blocks(g->blocks, n, parent, why, sizeof why)) {
        rc = kvix_err_set(err, KVIX_ECORRUPT, "worker %" PRIu64 " dp %" PRIu32 ": %s", g->worker,
                          g->dp, why);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        child[i] = NONE;
    /* Blocks come by engine hash within a position: the first child seen
     * is the smallest, so chains are the same on every run. */
    for (size_t i = 0; i < n; i++) {
        if (parent[i] != NONE && child[parent[i]] == NONE)
            child[parent[i]] = i;
        /* bit 1: an orphan or below one; a replay cannot store it */
        if ((g->blocks[i].position > 0 && parent[i] == NONE) ||
            (parent[i] != NONE && (done[parent[i]] & 2))) {
            done[i] = 2;
            if (orphans)
                (*orphans)++;
        }
    }
    for (size_t i = 0; i < n && !rc; i++) {
        if (done[i] & 1)
            continue;
        size_t len = 0;
        for (size_t k = i; k != NONE; k = child[k]) {
            chain[len++] = k;
            done[k] |= 1;
        }
        rc = emit_runs(g, chain, len, -1, scratch, fn, ctx, err);
        for (int t = 0; t < KVIX_MEDIUM_COUNT && !rc; t++)
            rc = emit_runs(g, chain, len, t, scratch, fn, ctx, err);
    }
out:
    free(mem);
    free(done);
    return rc;
}


kvix_snapshot *kvix_snapshot_cursor(const kvix_snapshot *s, kvix_err *err)
{
    kvix_snapshot *c = snap_new(s->name, err);
    if (!c)
        return NULL;
    c->data = s->data; /* borrowed: c must be closed before s */
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
