/* Writing a snapshot file (kvix-snapshot(5), layout in snapshot.c): crash-safe,
 * through a large buffer, every record checked as it is added. Version 3
 * is written; version 1 (and 2, with a stream position) only when asked
 * (kvix__snap_writer_legacy: tests of the older readers' files). */
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
    uint32_t version; /* 3, or 1 (legacy: 2 once a stream position is set) */
    int have_ext, have_record;
    uint64_t next; /* extension records written */
    kvix_snap_scratch sc;
    kvix_sbuf enc;    /* one group's encoded blocks */
    size_t *pidx;     /* one group's parent indexes */
    size_t pcap;
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
    if (n) /* p may be NULL then (an empty group's blocks) */
        memcpy(w->buf + w->len, p, n);
    w->len += n;
    return KVIX_OK;
}

/* n bytes that may exceed the buffer: past it they go straight to the file. */
static int wbig(kvix_snapshot_writer *w, const void *p, size_t n, kvix_err *err)
{
    if (n <= WBUF_BYTES)
        return wbytes(w, p, n, err);
    int rc = wflush(w, err);
    if (rc)
        return rc;
    XXH3_64bits_update(w->xs, p, n);
    for (size_t off = 0; off < n;) {
        ssize_t k = write(w->fd, (const char *)p + off, n - off);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            w->broken = 1;
            return kvix_err_set(err, KVIX_EIO, "%s: write: %s", w->tmp, strerror(errno));
        }
        off += (size_t)k;
    }
    w->bytes += n;
    return KVIX_OK;
}

/* A version 3 record's head. */
static int rec_head(kvix_snapshot_writer *w, uint32_t type, uint32_t flags, uint64_t len,
                    kvix_err *err)
{
    unsigned char h[REC_HEAD_BYTES];
    put32(h, type);
    put32(h + 4, flags);
    put64(h + 8, len);
    return wbytes(w, h, sizeof h, err);
}

void kvix__snap_writer_legacy(kvix_snapshot_writer *w)
{
    if (w->len == HEADER_BYTES && !w->have_record && !w->has_stream) {
        w->version = KVIX_SNAPSHOT_VERSION_V1;
        put32(w->buf + 8, w->version);
    }
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
    kvix__snap_scratch_release(&w->sc);
    free(w->enc.data);
    free(w->pidx);
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
    w->version = KVIX_SNAPSHOT_VERSION;
    memcpy(w->buf, KVIX_SNAPSHOT_MAGIC, 8);
    put32(w->buf + 8, KVIX_SNAPSHOT_VERSION);
    put32(w->buf + 12, 0);
    w->len = HEADER_BYTES;
    *out = w;
    return KVIX_OK;
}

int kvix_snapshot_writer_set_stream(kvix_snapshot_writer *w, const char *stream, uint64_t seq,
                                    kvix_err *err)
{
    size_t nl = stream ? strlen(stream) : 0;
    if (!kvix__snap_stream_name_ok(stream, nl))
        return kvix_err_set(err, KVIX_EINVAL, "snapshot: bad stream name '%s'",
                            stream ? stream : "");
    /* Only the header is buffered yet: the version can still change. */
    if (w->broken || w->has_stream || w->have_record || w->len != HEADER_BYTES)
        return kvix_err_set(err, KVIX_EINVAL,
                            "snapshot: the stream position goes before every record");
    int rc;
    if (w->version == KVIX_SNAPSHOT_VERSION) {
        unsigned char h[8];
        put64(h, seq);
        rc = rec_head(w, TAG_STREAM, 0, 8 + nl, err);
        if (!rc)
            rc = wbytes(w, h, 8, err);
    } else {
        w->version = KVIX_SNAPSHOT_VERSION_V2;
        put32(w->buf + 8, w->version);
        unsigned char h[STREAM_HEAD_BYTES];
        put32(h, TAG_STREAM);
        put32(h + 4, (uint32_t)nl);
        put64(h + 8, seq);
        rc = wbytes(w, h, sizeof h, err);
    }
    if (!rc)
        rc = wbytes(w, stream, nl, err);
    if (rc)
        return rc;
    w->has_stream = 1;
    return KVIX_OK;
}

int kvix_snapshot_writer_ext(kvix_snapshot_writer *w, const kvix_snapshot_ext *e, kvix_err *err)
{
    if (w->broken)
        return kvix_err_set(err, KVIX_EINVAL, "snapshot writer used after a failure");
    if (w->version != KVIX_SNAPSHOT_VERSION)
        return kvix_err_set(err, KVIX_EINVAL, "snapshot: version %u holds no extension records",
                            w->version);
    if (w->have_part)
        return kvix_err_set(err, KVIX_EINVAL,
                            "snapshot: extension records go before the partitions");
    if (e->type < KVIX_SNAPSHOT_EXT_MIN || (e->flags & ~KVIX_SNAPSHOT_EXT_OPTIONAL) ||
        (uint64_t)e->len > KVIX_SNAPSHOT_EXT_BYTES_MAX || (e->len && !e->data))
        return kvix_err_set(err, KVIX_EINVAL,
                            "snapshot: bad extension record (type %" PRIu32 ", flags %#x, %zu bytes)",
                            e->type, e->flags, e->len);
    int rc = rec_head(w, e->type, e->flags & KVIX_SNAPSHOT_EXT_OPTIONAL ? REC_OPTIONAL : 0,
                      e->len, err);
    if (!rc && e->len)
        rc = wbig(w, e->data, e->len, err);
    if (rc)
        return rc;
    w->have_ext = w->have_record = 1;
    w->next++;
    return KVIX_OK;
}

static int write_part(kvix_snapshot_writer *w, const char *model, const char *tenant,
                      uint32_t bs, kvix_err *err)
{
    size_t ml = strlen(model), tl = strlen(tenant);
    unsigned char h[16];
    int rc = KVIX_OK;
    if (w->version == KVIX_SNAPSHOT_VERSION) {
        rc = rec_head(w, TAG_PART, 0, PART3_HEAD_BYTES + ml + tl, err);
        put32(h, bs);
        put32(h + 4, (uint32_t)ml);
        put32(h + 8, (uint32_t)tl);
        put32(h + 12, 0);
    } else {
        put32(h, TAG_PART);
        put32(h + 4, bs);
        put32(h + 8, (uint32_t)ml);
        put32(h + 12, (uint32_t)tl);
    }
    if (!rc)
        rc = wbytes(w, h, 16, err);
    if (!rc)
        rc = wbytes(w, model, ml, err);
    if (!rc)
        rc = wbytes(w, tenant, tl, err);
    if (rc)
        return rc;
    memcpy(w->model, model, ml + 1);
    memcpy(w->tenant, tenant, tl + 1);
    w->bs = bs;
    w->have_part = w->have_record = 1;
    w->have_group = 0;
    w->partitions++;
    return KVIX_OK;
}

/* Version 1: a 40-byte head, then 40 bytes a block. */
static int write_group1(kvix_snapshot_writer *w, uint64_t worker, uint32_t dp, int has_eid,
                        uint64_t last_eid, const kvix_block_info *blocks, size_t n,
                        kvix_err *err)
{
    int rc;
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
    return KVIX_OK;
}

/* Version 3: the head, then the blocks as their forest (snapshot_group.c),
 * whose canonical hashes must follow from their parents'. */
static int write_group3(kvix_snapshot_writer *w, uint64_t worker, uint32_t dp, int has_eid,
                        uint64_t last_eid, const kvix_block_info *blocks, size_t n,
                        kvix_err *err)
{
    for (size_t i = 0; i < n; i++) {
        const kvix_block_info *b = &blocks[i];
        uint64_t canon = b->position ? kvix_hash_seq_next(b->parent_canon, b->local) : b->local;
        if (b->canon != canon)
            return kvix_err_set(err, KVIX_EINVAL,
                                "snapshot: worker %" PRIu64 " dp %" PRIu32 ": block %zu's canonical "
                                "hash does not follow from its parent's",
                                worker, dp, i);
    }
    if (kvix__snap_group_encode(&w->sc, blocks, n, w->pidx, &w->enc))
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory encoding %zu blocks", n);
    unsigned char h[GROUP3_HEAD_BYTES];
    put64(h, worker);
    put32(h + 8, dp);
    put32(h + 12, has_eid ? 1u : 0u);
    put64(h + 16, has_eid ? last_eid : 0);
    put64(h + 24, (uint64_t)n);
    int rc = rec_head(w, TAG_GROUP, 0, GROUP3_HEAD_BYTES + w->enc.len, err);
    if (!rc)
        rc = wbytes(w, h, sizeof h, err);
    if (!rc)
        rc = wbig(w, w->enc.data, w->enc.len, err);
    return rc;
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
    int c = w->have_part ? kvix__snap_cmp_part(model, tenant, w->model, w->tenant) : 1;
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
    if (n == 0 && !has_eid && w->version == KVIX_SNAPSHOT_VERSION) {
        /* no block and no eid: no state (a load would make nothing of it) */
        w->have_group = 1;
        w->worker = worker;
        w->dp = dp;
        w->broken = 0;
        return KVIX_OK;
    }
    char why[160];
    if (w->version == KVIX_SNAPSHOT_VERSION && n > w->pcap) {
        size_t *pi = realloc(w->pidx, n * sizeof *pi);
        if (!pi)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu blocks", n);
        w->pidx = pi;
        w->pcap = n;
    }
    size_t *pidx = w->version == KVIX_SNAPSHOT_VERSION ? w->pidx : NULL;
    if (kvix__snap_check_blocks(blocks, n, pidx, why, sizeof why))
        return kvix_err_set(err, KVIX_EINVAL, "snapshot: worker %" PRIu64 " dp %" PRIu32 ": %s",
                            worker, dp, why);
    size_t dup;
    if ((rc = kvix__snap_repeated_engine(blocks, n, &dup)) < 0)
        return kvix_err_set(err, rc, "out of memory checking %zu blocks", n);
    if (rc)
        return kvix_err_set(err, KVIX_EINVAL,
                            "snapshot: worker %" PRIu64 " dp %" PRIu32 ": block %zu repeats engine "
                            "hash %016" PRIx64 " of an earlier one",
                            worker, dp, dup, blocks[dup].engine);
    rc = w->version == KVIX_SNAPSHOT_VERSION
             ? write_group3(w, worker, dp, has_eid, last_eid, blocks, n, err)
             : write_group1(w, worker, dp, has_eid, last_eid, blocks, n, err);
    if (rc)
        return rc;
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
    if (w->version == KVIX_SNAPSHOT_VERSION) {
        if ((rc = rec_head(w, TAG_END, 0, END3_BYTES - REC_HEAD_BYTES, err)) ||
            (rc = wroom(w, 24, err)))
            goto fail;
        unsigned char *e = w->buf + w->len;
        put64(e, w->partitions);
        put64(e + 8, w->groups);
        put64(e + 16, w->blocks);
        w->len += 24;
    } else {
        if ((rc = wroom(w, END_BYTES, err)))
            goto fail;
        unsigned char *e = w->buf + w->len;
        put32(e, TAG_END);
        put32(e + 4, 0);
        put64(e + 8, w->partitions);
        put64(e + 16, w->groups);
        put64(e + 24, w->blocks);
        w->len += END_BYTES - 8;
    }
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
        memset(info, 0, sizeof *info);
        info->has_stream = w->has_stream;
        info->extensions = w->next;
        info->version = w->version;
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

