/* Opening a snapshot (kvix-snapshot(5), layout in snapshot.c): from a file,
 * a descriptor or memory; the frame (magic, version, trailer, checksum,
 * version 3's stream position and extension records), then one pass over
 * every record that checks it (snapshot_read.c decodes them) and sketches
 * each partition's distinct blocks for a load. A file that fails any of it
 * is refused whole. */
#define _GNU_SOURCE
#include "kvix/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "hashmap_int.h"
#include "snapshot_read_int.h"

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
                !kvix__snap_stream_name_ok(name, nl)) {
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
        if (!kvix__snap_stream_name_ok(name, nl))
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
    while ((rc = kvix__snap_next_tree(s, &g, &up, err)) == KVIX_OK) {
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


int kvix_snapshot_open_mem(kvix_snapshot **out, const void *data, size_t len, kvix_err *err)
{
    *out = NULL;
    kvix_snapshot *s = kvix__snap_new("<memory>", err);
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
    kvix_snapshot *s = kvix__snap_new(name, err);
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

