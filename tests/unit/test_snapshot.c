/* The snapshot file on its own: writer -> reader round trips, determinism,
 * crash-safe replacement, and refusal of every kind of corrupt file.
 *
 * With KVIX_TEST_SNAPSHOT_SAVER=PATH in the environment this binary is
 * instead the saver of tests/cli/snapshot_crash.t: it writes two known large
 * states (A, then B, then A...) to PATH forever, until killed. With
 * KVIX_TEST_SNAPSHOT_STATES=DIR it writes DIR/a.kvix and DIR/b.kvix once and
 * exits, so the test knows what a whole file looks like. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "harness.h"
#include "kvix/snapshot.h"
#include "snapshot_gen.h"
#include "snapshot_int.h"

/* ---- a synthetic state ---------------------------------------------------- */

typedef struct grp {
    const char *model, *tenant;
    uint32_t bs;
    uint64_t worker;
    uint32_t dp;
    int has_eid;
    uint64_t eid;
    kvix_block_info *blocks;
    size_t n;
} grp;

typedef struct state {
    grp g[16];
    size_t n;
} state;

static void state_free(state *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->g[i].blocks);
    s->n = 0;
}

static void add(state *s, const char *model, const char *tenant, uint32_t bs, uint64_t worker,
                uint32_t dp, int has_eid, uint64_t eid, uint64_t seed, size_t n, int tiers)
{
    grp *g = &s->g[s->n++];
    *g = (grp){model, tenant, bs, worker, dp, has_eid, eid, sg_group(seed, n, tiers), n};
}

/* Two partitions with several workers and dp ranks, mixed tiers, a worker
 * with an eid and no block, a partition without workers. */
static void small_state(state *s, uint64_t salt)
{
    s->n = 0;
    add(s, "llama", "acme", 16, 1, 0, 1, 41 + salt, 1 + salt, 40, 1);
    add(s, "llama", "acme", 16, 1, 1, 0, 0, 2, 7, 0);
    add(s, "llama", "acme", 16, 7, 0, 1, 3, 3, 0, 0);
    add(s, "llama", "default", 32, UINT64_MAX, 0, 0, 0, 0, 0, 0);
    add(s, "qwen", "default", 4, 2, 0, 1, KVIX_EID_MAX, 4, 25, 1); /* the largest eid */
    add(s, "qwen", "default", 4, UINT64_C(1) << 40, 3, 0, 0, 5, 3, 0);
    /* worker 2's parents evicted before their children: orphans */
    grp *g = &s->g[4];
    g->n = sg_orphan(g->blocks, g->n, 3);
}

/* legacy: write format version 1 (the older files every kvix still reads) */
static int write_state_v(const state *s, const char *path, kvix_snapshot_info *info, int legacy)
{
    kvix_snapshot_writer *w;
    kvix_err err;
    int rc = kvix_snapshot_writer_open(&w, path, &err);
    if (rc)
        return rc;
    if (legacy)
        kvix__snap_writer_legacy(w);
    for (size_t i = 0; i < s->n && !rc; i++) {
        const grp *g = &s->g[i];
        rc = kvix_snapshot_writer_add(w, g->model, g->tenant, g->bs, g->worker, g->dp, g->has_eid,
                                      g->eid, g->blocks, g->n, &err);
    }
    if (rc) {
        printf("#   write: %s\n", err.msg);
        kvix_snapshot_writer_abort(w);
        return rc;
    }
    rc = kvix_snapshot_writer_commit(w, info, &err);
    if (rc)
        printf("#   commit: %s\n", err.msg);
    return rc;
}

static int write_state(const state *s, const char *path, kvix_snapshot_info *info)
{
    return write_state_v(s, path, info, 0);
}

static int same_blocks(const kvix_block_info *a, const kvix_block_info *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].position != b[i].position || a[i].local != b[i].local ||
            a[i].engine != b[i].engine || a[i].tiers != b[i].tiers ||
            a[i].canon != b[i].canon ||
            (a[i].position && (a[i].parent != b[i].parent ||
                               a[i].parent_canon != b[i].parent_canon)))
            return 0;
    return 1;
}

/* The snapshot holds exactly s, in order. */
static void check_equal(kvix_snapshot *snap, const state *s)
{
    kvix_snapshot_group g;
    kvix_err err;
    size_t i = 0;
    int rc;
    while ((rc = kvix_snapshot_next(snap, &g, &err)) == KVIX_OK) {
        if (!CHECK(i < s->n))
            return;
        const grp *e = &s->g[i++];
        CHECK_STR(g.model, e->model);
        CHECK_STR(g.tenant, e->tenant);
        CHECK_U64(g.bs, e->bs);
        CHECK_U64(g.worker, e->worker);
        CHECK_U64(g.dp, e->dp);
        CHECK_U64(g.has_eid, e->has_eid);
        if (e->has_eid)
            CHECK_U64(g.eid, e->eid);
        CHECK_U64(g.n, e->n);
        if (g.n == e->n)
            CHECK(same_blocks(g.blocks, e->blocks, g.n));
    }
    CHECK(rc == KVIX_EOF);
    CHECK_U64(i, s->n);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)l + 1);
    if (b && fread(b, 1, (size_t)l, f) != (size_t)l) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)l;
    return b;
}

static int count_dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.' || (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."));
    if (d)
        closedir(d);
    return n;
}

/* ---- round trips ------------------------------------------------------------ */

static void round_trip_file(int legacy)
{
    state s;
    small_state(&s, 0);
    kvix_snapshot_info wi, ri;
    const char *path = th_path("rt.kvix");
    CHECK(write_state_v(&s, path, &wi, legacy) == KVIX_OK);
    CHECK_U64(wi.partitions, 3);
    CHECK_U64(wi.groups, 5);
    CHECK_U64(wi.blocks, 40 + 7 + s.g[4].n + 3);
    CHECK(s.g[4].n < 25); /* some were evicted: orphans below them */
    kvix_snapshot *snap;
    kvix_err err;
    CHECK(kvix_snapshot_open(&snap, path, &err) == KVIX_OK);
    if (snap) {
        kvix_snapshot_get_info(snap, &ri);
        CHECK_U64(ri.partitions, wi.partitions);
        CHECK_U64(ri.groups, wi.groups);
        CHECK_U64(ri.blocks, wi.blocks);
        CHECK_U64(ri.bytes, wi.bytes);
        CHECK_U64(ri.checksum, wi.checksum);
        CHECK_U64(ri.version, legacy ? KVIX_SNAPSHOT_VERSION_V1 : KVIX_SNAPSHOT_VERSION);
        CHECK_U64(wi.version, ri.version);
        check_equal(snap, &s);
        kvix_snapshot_rewind(snap); /* a second pass sees the same */
        check_equal(snap, &s);
        kvix_snapshot_close(snap);
    }
    struct stat st;
    CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == wi.bytes);
    state_free(&s);
}

TEST(round_trip_file_v3)
{
    round_trip_file(0);
}

/* Version 1 files are still read (and written on request, for this). */
TEST(round_trip_file_v1)
{
    round_trip_file(1);
}

TEST(round_trip_pipe_and_memory)
{
    state s;
    small_state(&s, 0);
    const char *path = th_path("pipe.kvix");
    CHECK(write_state(&s, path, NULL) == KVIX_OK);
    size_t len;
    unsigned char *b = slurp(path, &len);
    kvix_snapshot *snap;
    kvix_err err;
    CHECK(kvix_snapshot_open_mem(&snap, b, len, &err) == KVIX_OK);
    if (snap) {
        check_equal(snap, &s);
        kvix_snapshot_close(snap);
    }
    int fd[2];
    CHECK(pipe(fd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        size_t off = 0;
        while (off < len) {
            ssize_t k = write(fd[1], b + off, len - off > 1000 ? 1000 : len - off);
            if (k <= 0)
                _exit(1);
            off += (size_t)k;
        }
        _exit(0);
    }
    close(fd[1]);
    CHECK(kvix_snapshot_open_fd(&snap, fd[0], "<pipe>", &err) == KVIX_OK);
    close(fd[0]);
    if (snap) {
        check_equal(snap, &s);
        kvix_snapshot_close(snap);
    }
    free(b);
    state_free(&s);
}

/* Count visits through the foreach shape shared with the index. */
static int count_visit(void *ctx, const char *model, const char *tenant, uint32_t bs,
                       uint64_t worker, uint32_t dp, int has_eid, uint64_t last_eid,
                       const kvix_block_info *blocks, size_t n)
{
    (void)model, (void)tenant, (void)bs, (void)worker, (void)dp, (void)has_eid, (void)last_eid,
        (void)blocks;
    size_t *c = ctx;
    c[0]++;
    c[1] += n;
    return c[0] == 100 ? 7 : 0;
}

TEST(foreach_matches_next)
{
    state s;
    small_state(&s, 0);
    const char *path = th_path("fe.kvix");
    CHECK(write_state(&s, path, NULL) == KVIX_OK);
    kvix_snapshot *snap;
    kvix_err err;
    CHECK(kvix_snapshot_open(&snap, path, &err) == KVIX_OK);
    if (snap) {
        size_t c[2] = {0, 0};
        kvix_snapshot_group g;
        kvix_snapshot_next(snap, &g, &err); /* foreach starts from the top anyway */
        CHECK(kvix_snapshot_foreach(snap, count_visit, c) == 0);
        CHECK_U64(c[0], s.n);
        CHECK_U64(c[1], 50 + s.g[4].n);
        kvix_snapshot_close(snap);
    }
    state_free(&s);
}

TEST(deterministic_bytes)
{
    state s;
    small_state(&s, 0);
    CHECK(write_state(&s, th_path("d1.kvix"), NULL) == KVIX_OK);
    /* Parents at position 0 are meaningless: garbage there must not show. */
    for (size_t i = 0; i < s.n; i++)
        for (size_t j = 0; j < s.g[i].n; j++)
            if (s.g[i].blocks[j].position == 0)
                s.g[i].blocks[j].parent = s.g[i].blocks[j].parent_canon = 0xdeadbeef;
    CHECK(write_state(&s, th_path("d2.kvix"), NULL) == KVIX_OK);
    size_t l1, l2;
    unsigned char *a = slurp(th_path("d1.kvix"), &l1), *b = slurp(th_path("d2.kvix"), &l2);
    CHECK(a && b && l1 == l2 && memcmp(a, b, l1) == 0);
    free(a);
    free(b);
    state_free(&s);
}

TEST(empty_index_snapshot)
{
    state s = {.n = 0};
    kvix_snapshot_info info;
    CHECK(write_state(&s, th_path("empty.kvix"), &info) == KVIX_OK);
    CHECK_U64(info.bytes, 16 + 48); /* the header and the end record */
    kvix_snapshot *snap;
    kvix_err err;
    CHECK(kvix_snapshot_open(&snap, th_path("empty.kvix"), &err) == KVIX_OK);
    if (snap) {
        kvix_snapshot_group g;
        CHECK(kvix_snapshot_next(snap, &g, &err) == KVIX_EOF);
        kvix_snapshot_close(snap);
    }
}

/* ---- replacement is atomic ---------------------------------------------------- */

TEST(commit_replaces_abort_keeps)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s", th_path("atomic"));
    CHECK(mkdir(dir, 0755) == 0);
    char path[700];
    snprintf(path, sizeof path, "%s/index.kvix", dir);
    state a, b;
    small_state(&a, 0);
    small_state(&b, 1);
    kvix_snapshot_info ia, ib;
    CHECK(write_state(&a, path, &ia) == KVIX_OK);
    CHECK(chmod(path, 0640) == 0);
    /* An aborted save, half written, leaves the old file and no litter. */
    kvix_snapshot_writer *w;
    kvix_err err;
    CHECK(kvix_snapshot_writer_open(&w, path, &err) == KVIX_OK);
    CHECK(count_dir_entries(dir) == 2);
    const grp *g = &b.g[0];
    CHECK(kvix_snapshot_writer_add(w, g->model, g->tenant, g->bs, g->worker, g->dp, g->has_eid,
                                   g->eid, g->blocks, g->n, &err) == KVIX_OK);
    kvix_snapshot_writer_abort(w);
    CHECK(count_dir_entries(dir) == 1);
    kvix_snapshot *snap;
    CHECK(kvix_snapshot_open(&snap, path, &err) == KVIX_OK);
    if (snap) {
        check_equal(snap, &a);
        kvix_snapshot_close(snap);
    }
    /* A committed one replaces it whole and keeps its mode. */
    CHECK(write_state(&b, path, &ib) == KVIX_OK);
    CHECK(ia.checksum != ib.checksum);
    CHECK(count_dir_entries(dir) == 1);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640);
    CHECK(kvix_snapshot_open(&snap, path, &err) == KVIX_OK);
    if (snap) {
        check_equal(snap, &b);
        kvix_snapshot_close(snap);
    }
    /* A folder that does not exist: an error, nothing created. */
    CHECK(kvix_snapshot_writer_open(&w, "/nonexistent-kvix-dir/x.kvix", &err) == KVIX_ENOTFOUND);
    CHECK(w == NULL);
    state_free(&a);
    state_free(&b);
}

TEST(writer_refuses_inconsistent_input)
{
    kvix_block_info blk[3] = {
        {0, 11, 100, 0, 1, 11, 0},
        {1, 12, 101, 100, 1, kvix_hash_seq_next(11, 12), 11},
        {2, 13, 102, 101, 0, 5, 6}, /* no tier */
    };
    kvix_snapshot_writer *w;
    kvix_err err;
    CHECK(kvix_snapshot_writer_open(&w, th_path("bad.kvix"), &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 16, 1, 0, 0, 0, blk, 3, &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, "tier mask") != NULL);
    CHECK(kvix_snapshot_writer_commit(w, NULL, &err) == KVIX_EINVAL);
    CHECK(access(th_path("bad.kvix"), F_OK) != 0);

    CHECK(kvix_snapshot_writer_open(&w, th_path("bad.kvix"), &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 16, 2, 0, 0, 0, blk, 2, &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 16, 1, 0, 0, 0, blk, 2, &err) == KVIX_EINVAL);
    kvix_snapshot_writer_abort(w);

    CHECK(kvix_snapshot_writer_open(&w, th_path("bad.kvix"), &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "n", "t", 16, 1, 0, 0, 0, blk, 2, &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 16, 1, 0, 0, 0, blk, 2, &err) == KVIX_EINVAL);
    kvix_snapshot_writer_abort(w);

    CHECK(kvix_snapshot_writer_open(&w, th_path("bad.kvix"), &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 16, 1, 0, 0, 0, blk, 2, &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 8, 2, 0, 0, 0, blk, 2, &err) == KVIX_EINVAL);
    kvix_snapshot_writer_abort(w);

    kvix_block_info swapped[2] = {blk[1], blk[0]};
    kvix_block_info badtier[1] = {{0, 1, 2, 0, 0, 1, 0}};
    CHECK(kvix_snapshot_writer_open(&w, th_path("bad.kvix"), &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 16, 1, 0, 0, 0, swapped, 2, &err) == KVIX_EINVAL);
    kvix_snapshot_writer_abort(w);
    CHECK(kvix_snapshot_writer_open(&w, th_path("bad.kvix"), &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 16, 1, 0, 0, 0, badtier, 1, &err) == KVIX_EINVAL);
    kvix_snapshot_writer_abort(w);
    CHECK(kvix_snapshot_writer_open(&w, th_path("bad.kvix"), &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 0, 1, 0, 0, 0, blk, 1, &err) == KVIX_EINVAL);
    kvix_snapshot_writer_abort(w);
    CHECK(access(th_path("bad.kvix"), F_OK) != 0);
}

static int open_bytes(const unsigned char *b, size_t len, kvix_err *err);

/* A stream position: a STREAM record right after the header (version 3),
 * or version 2 (version 1 with the STREAM record) for the legacy writer. */
static void stream_position_round_trip(int legacy)
{
    state a;
    small_state(&a, 0);
    kvix_snapshot_info i1, i2;
    char p1[600];
    snprintf(p1, sizeof p1, "%s", th_path("v1.kvix"));
    CHECK(write_state_v(&a, p1, &i1, legacy) == KVIX_OK);
    CHECK_U64(i1.version, legacy ? 1 : 3);
    kvix_snapshot_writer *w;
    kvix_err err;
    char p2[600];
    snprintf(p2, sizeof p2, "%s", th_path("v2.kvix"));
    CHECK(kvix_snapshot_writer_open(&w, p2, &err) == KVIX_OK);
    if (legacy)
        kvix__snap_writer_legacy(w);
    CHECK(kvix_snapshot_writer_set_stream(w, "", 1, &err) == KVIX_EINVAL);
    CHECK(kvix_snapshot_writer_set_stream(w, "a.b", 1, &err) == KVIX_EINVAL);
    CHECK(kvix_snapshot_writer_set_stream(w, "KVIX", UINT64_C(1) << 40, &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_set_stream(w, "KVIX", 2, &err) == KVIX_EINVAL);
    for (size_t i = 0; i < a.n; i++) {
        const grp *g = &a.g[i];
        CHECK(kvix_snapshot_writer_add(w, g->model, g->tenant, g->bs, g->worker, g->dp,
                                       g->has_eid, g->eid, g->blocks, g->n, &err) == KVIX_OK);
    }
    CHECK(kvix_snapshot_writer_commit(w, &i2, &err) == KVIX_OK);
    CHECK_U64(i2.version, legacy ? 2 : 3);
    CHECK_U64(i2.bytes, i1.bytes + (legacy ? 16 + 4 : 16 + 8 + 4));
    kvix_snapshot *snap;
    CHECK(kvix_snapshot_open(&snap, p2, &err) == KVIX_OK);
    if (snap) {
        kvix_snapshot_info ri;
        kvix_snapshot_get_info(snap, &ri);
        CHECK_U64(ri.version, legacy ? 2 : 3);
        CHECK(ri.has_stream);
        CHECK_U64(ri.stream_seq, UINT64_C(1) << 40);
        CHECK_STR(ri.stream, "KVIX");
        check_equal(snap, &a);
        kvix_snapshot_rewind(snap);
        check_equal(snap, &a);
        kvix_snapshot_close(snap);
    }
    CHECK(kvix_snapshot_open(&snap, p1, &err) == KVIX_OK);
    if (snap) {
        kvix_snapshot_info ri;
        kvix_snapshot_get_info(snap, &ri);
        CHECK(!ri.has_stream);
        kvix_snapshot_close(snap);
    }
    /* Too late once a record is written. */
    CHECK(kvix_snapshot_writer_open(&w, th_path("late.kvix"), &err) == KVIX_OK);
    const grp *g = &a.g[0];
    CHECK(kvix_snapshot_writer_add(w, g->model, g->tenant, g->bs, g->worker, g->dp, g->has_eid,
                                   g->eid, g->blocks, g->n, &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_set_stream(w, "KVIX", 2, &err) == KVIX_EINVAL);
    kvix_snapshot_writer_abort(w);
    /* Every flipped byte of a version 2 file is refused, and a name that
     * runs past the records too. */
    size_t len;
    unsigned char *b = slurp(p2, &len);
    if (CHECK(b != NULL)) {
        size_t refused = 0;
        for (size_t i = 0; i < len; i++) {
            b[i] ^= 0x10;
            refused += open_bytes(b, len, &err) == KVIX_ECORRUPT;
            b[i] ^= 0x10;
        }
        CHECK_U64(refused, len);
        /* name_len past the limit, with the checksum fixed */
        if (legacy)
            b[21] = 0xff;
        else
            b[24] = 0xff, b[25] = 0x01; /* the record's length: 8 + 511 */
        uint64_t sum = XXH3_64bits(b, len - 8);
        memcpy(b + len - 8, &sum, 8);
        CHECK(open_bytes(b, len, &err) == KVIX_ECORRUPT && strstr(err.msg, "stream position"));
        free(b);
    }
    state_free(&a);
}

TEST(stream_position_round_trip_v3)
{
    stream_position_round_trip(0);
}

TEST(stream_position_round_trip_v2)
{
    stream_position_round_trip(1);
}

/* ---- corruption --------------------------------------------------------------- */

static int open_bytes(const unsigned char *b, size_t len, kvix_err *err)
{
    kvix_snapshot *snap = NULL;
    int rc = kvix_snapshot_open_mem(&snap, b, len, err);
    CHECK((rc == KVIX_OK) == (snap != NULL));
    kvix_snapshot_close(snap);
    return rc;
}

static unsigned char *small_file(size_t *len)
{
    state s;
    small_state(&s, 0);
    const char *path = th_path("small.kvix");
    CHECK(write_state(&s, path, NULL) == KVIX_OK);
    state_free(&s);
    return slurp(path, len);
}

TEST(every_flipped_byte_is_refused)
{
    size_t len;
    unsigned char *b = small_file(&len);
    if (!CHECK(b != NULL))
        return;
    kvix_err err;
    CHECK(open_bytes(b, len, &err) == KVIX_OK);
    size_t refused = 0;
    for (size_t i = 0; i < len; i++) {
        for (unsigned bit = 0; bit < 8; bit += 3) {
            b[i] ^= (unsigned char)(1u << bit);
            int rc = open_bytes(b, len, &err);
            refused += rc == KVIX_ECORRUPT;
            if (rc != KVIX_ECORRUPT)
                printf("#   flip of byte %zu bit %u: %d\n", i, bit, rc);
            b[i] ^= (unsigned char)(1u << bit);
        }
    }
    CHECK_U64(refused, len * 3);
    /* The messages say what is wrong. */
    b[0] ^= 1;
    CHECK(open_bytes(b, len, &err) == KVIX_ECORRUPT && strstr(err.msg, "bad magic"));
    b[0] ^= 1;
    b[8] = 4;
    CHECK(open_bytes(b, len, &err) == KVIX_ECORRUPT && strstr(err.msg, "version 4"));
    b[8] = 3;
    b[100] ^= 0x40;
    CHECK(open_bytes(b, len, &err) == KVIX_ECORRUPT && strstr(err.msg, "checksum mismatch"));
    free(b);
}

TEST(every_truncation_is_refused)
{
    size_t len;
    unsigned char *b = small_file(&len);
    if (!CHECK(b != NULL))
        return;
    kvix_err err;
    size_t refused = 0;
    for (size_t l = 0; l < len; l++)
        refused += open_bytes(b, l, &err) == KVIX_ECORRUPT;
    CHECK_U64(refused, len);
    CHECK(open_bytes(b, len - 1, &err) == KVIX_ECORRUPT);
    /* Trailing bytes after a good file: no end record where expected. */
    unsigned char *c = malloc(len + 8);
    memcpy(c, b, len);
    memset(c + len, 0, 8);
    CHECK(open_bytes(c, len + 8, &err) == KVIX_ECORRUPT);
    free(c);
    free(b);
}

/* Crafted files whose checksum is right: the structure checks must hold on
 * their own, before any allocation sized by the file. */
static void fix_sum(unsigned char *b, size_t len)
{
    uint64_t s = XXH3_64bits(b, len - 8);
    memcpy(b + len - 8, &s, 8); /* the tests run on little-endian hosts */
}

static void put32le(unsigned char *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void put64le(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

/* A file: one partition "m"/"t" bs 16, one group worker 5 with 2 blocks. */
static size_t craft(unsigned char *b)
{
    size_t o = 0;
    memcpy(b, "KVIXSNAP", 8);
    put32le(b + 8, 1);
    put32le(b + 12, 0);
    o = 16;
    put32le(b + o, 1), put32le(b + o + 4, 16), put32le(b + o + 8, 1), put32le(b + o + 12, 1);
    o += 16;
    b[o++] = 'm';
    b[o++] = 't';
    put32le(b + o, 2), put32le(b + o + 4, 0), put64le(b + o + 8, 5), put32le(b + o + 16, 1);
    put32le(b + o + 20, 0), put64le(b + o + 24, 9), put64le(b + o + 32, 2);
    o += 40;
    /* block 0: pos 0 tiers 1 local 0xa engine 0x100 parent 0; block 1 below it */
    put32le(b + o, 0), put32le(b + o + 4, 1), put64le(b + o + 8, 0xa), put64le(b + o + 16, 0x100);
    put64le(b + o + 24, 0), put64le(b + o + 32, 0);
    o += 40;
    put32le(b + o, 1), put32le(b + o + 4, 1), put64le(b + o + 8, 0xb), put64le(b + o + 16, 0x200);
    put64le(b + o + 24, 0x100), put64le(b + o + 32, 0xa);
    o += 40;
    put32le(b + o, 3), put32le(b + o + 4, 0), put64le(b + o + 8, 1), put64le(b + o + 16, 1);
    put64le(b + o + 24, 2);
    o += 40;
    fix_sum(b, o);
    return o;
}

#define PART_AT 16u
#define GROUP_AT 34u
#define BLOCK0_AT 74u
#define BLOCK1_AT 114u
#define END_AT 154u

/* Version 1's reader, which every kvix keeps. */
TEST(crafted_structure_errors_v1)
{
    unsigned char b[512];
    kvix_err err;
    size_t len = craft(b);
    CHECK_U64(len, END_AT + 40);
    CHECK(open_bytes(b, len, &err) == KVIX_OK);
    struct {
        size_t off;
        int width;
        uint64_t val;
        const char *msg;
    } cases[] = {
        {GROUP_AT + 32, 8, UINT64_C(1) << 60, "claims"},          /* huge block count */
        {GROUP_AT + 32, 8, 3, "claims"},                          /* one block too many */
        {PART_AT + 8, 4, 0xffffffffu, "model name"},              /* huge name */
        {PART_AT + 12, 4, 300, "tenant name"},
        {PART_AT + 4, 4, 0, "block size"},
        {PART_AT + 4, 4, 65537, "block size"},
        {PART_AT, 4, 9, "unknown record"},
        {GROUP_AT, 4, 7, "unknown record"},
        {GROUP_AT + 16, 4, 2, "flags"},
        {GROUP_AT + 16, 4, 0, "eid 9 with the eid flag clear"}, /* an eid a load would drop */
        {GROUP_AT + 24, 8, UINT64_C(1) << 63, "eid 9223372036854775808 out of range"},
        {GROUP_AT + 8, 8, UINT64_C(1) << 63, "worker 9223372036854775808 out of range"},
        {BLOCK1_AT, 4, 1u << 24, "limit"},                        /* too deep */
        {BLOCK1_AT, 4, 0, "position 0"},                          /* a root with a parent */
        {BLOCK0_AT + 4, 4, 0, "tier"},
        {BLOCK0_AT + 4, 4, 16, "tier"},
        {BLOCK0_AT + 24, 8, 0x5, "position 0"},
        {BLOCK0_AT + 32, 8, 0x5, "position 0"},
        {END_AT + 24, 8, 3, "totals"},
        {END_AT + 8, 8, 2, "totals"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char c[512];
        memcpy(c, b, len);
        if (cases[i].width == 4)
            put32le(c + cases[i].off, (uint32_t)cases[i].val);
        else
            put64le(c + cases[i].off, cases[i].val);
        fix_sum(c, len);
        int rc = open_bytes(c, len, &err);
        if (!CHECK(rc == KVIX_ECORRUPT) || !CHECK(strstr(err.msg, cases[i].msg) != NULL))
            printf("#   case %zu: rc %d: %s\n", i, rc, err.msg);
    }
    /* Two roots in the wrong order. */
    unsigned char c[512];
    memcpy(c, b, len);
    put32le(c + BLOCK1_AT, 0);
    put64le(c + BLOCK1_AT + 16, 0x50);
    put64le(c + BLOCK1_AT + 24, 0);
    put64le(c + BLOCK1_AT + 32, 0);
    fix_sum(c, len);
    CHECK(open_bytes(c, len, &err) == KVIX_ECORRUPT && strstr(err.msg, "out of order"));
    /* A NUL inside a name. */
    memcpy(c, b, len);
    c[PART_AT + 16] = 0;
    fix_sum(c, len);
    CHECK(open_bytes(c, len, &err) == KVIX_ECORRUPT && strstr(err.msg, "NUL"));
    /* A name that is not UTF-8: no tool could print it as an event. */
    memcpy(c, b, len);
    c[PART_AT + 16] = 0xff;
    fix_sum(c, len);
    CHECK(open_bytes(c, len, &err) == KVIX_ECORRUPT && strstr(err.msg, "not valid utf-8"));
    /* A parent hash held with other content (stored again): an orphan, legal. */
    memcpy(c, b, len);
    put64le(c + BLOCK1_AT + 32, 0xb);
    fix_sum(c, len);
    CHECK(open_bytes(c, len, &err) == KVIX_OK);
    /* An orphan (its parent not held) is a legal state: it opens. */
    memcpy(c, b, len);
    put64le(c + BLOCK1_AT + 24, 0x999);
    put64le(c + BLOCK1_AT + 32, 0x12345);
    fix_sum(c, len);
    CHECK(open_bytes(c, len, &err) == KVIX_OK);
    memcpy(c, b, len);
    put32le(c + BLOCK1_AT, 7);
    fix_sum(c, len);
    CHECK(open_bytes(c, len, &err) == KVIX_OK);
    /* Two blocks of one worker under one engine hash (found by the fuzzer):
     * the index keys a worker's blocks by it, so the file would load as
     * fewer blocks than it says. The block below its namesake, too. */
    memcpy(c, b, len);
    put64le(c + BLOCK1_AT + 16, 0x100);
    fix_sum(c, len);
    CHECK(open_bytes(c, len, &err) == KVIX_ECORRUPT &&
          strstr(err.msg, "block 1 repeats engine hash 0000000000000100"));
}

TEST(writer_refuses_an_engine_hash_twice)
{
    kvix_block_info blk[2] = {
        {0, 11, 100, 0, 1, 11, 0},
        {1, 12, 100, 100, 1, kvix_hash_seq_next(11, 12), 11},
    };
    kvix_snapshot_writer *w;
    kvix_err err;
    CHECK(kvix_snapshot_writer_open(&w, th_path("dup.kvix"), &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 16, 1, 0, 0, 0, blk, 2, &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, "repeats engine hash") != NULL);
    kvix_snapshot_writer_abort(w);
    CHECK(access(th_path("dup.kvix"), F_OK) != 0);
    /* engine hash 0 is a hash like any other */
    blk[0].engine = blk[1].engine = 0;
    blk[1].parent = 0;
    CHECK(kvix_snapshot_writer_open(&w, th_path("dup.kvix"), &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 16, 1, 0, 0, 0, blk, 2, &err) == KVIX_EINVAL);
    kvix_snapshot_writer_abort(w);
    blk[1].engine = 1;
    CHECK(kvix_snapshot_writer_open(&w, th_path("dup.kvix"), &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 16, 1, 0, 0, 0, blk, 2, &err) == KVIX_OK);
    kvix_snapshot_writer_abort(w);
}

TEST(missing_file_and_garbage)
{
    kvix_snapshot *snap;
    kvix_err err;
    CHECK(kvix_snapshot_open(&snap, th_path("does-not-exist"), &err) == KVIX_ENOTFOUND);
    CHECK(snap == NULL);
    CHECK(open_bytes((const unsigned char *)"", 0, &err) == KVIX_ECORRUPT);
    const char *text = "{\"type\":\"stored\"}\n";
    CHECK(open_bytes((const unsigned char *)text, strlen(text), &err) == KVIX_ECORRUPT);
    CHECK(strstr(err.msg, "not a kvix snapshot") != NULL);
}

/* ---- rebuilding events --------------------------------------------------------- */

typedef struct collect {
    kvix_block_info *seen; /* per (engine, tier) as applied */
    size_t n, cap;
    size_t events, maxlen;
    int order_ok;
    const kvix_snapshot_group *g;
} collect;

static int held(const collect *c, uint64_t engine)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->seen[i].engine == engine)
            return 1;
    return 0;
}

static int collect_event(void *ctx, const kvix_event *ev)
{
    collect *c = ctx;
    c->events++;
    if (ev->nblocks > c->maxlen)
        c->maxlen = ev->nblocks;
    if (ev->type != KVIX_EV_STORED || ev->worker != c->g->worker || ev->dp != c->g->dp ||
        ev->bs != c->g->bs || strcmp(ev->model, c->g->model) || ev->has_eid || ev->nblocks == 0)
        c->order_ok = 0;
    if (ev->has_parent && !held(c, ev->parent))
        c->order_ok = 0; /* a parent must come before its children */
    for (size_t i = 0; i < ev->nblocks; i++) {
        if (c->n == c->cap) {
            c->cap = c->cap ? 2 * c->cap : 256;
            c->seen = realloc(c->seen, c->cap * sizeof *c->seen);
        }
        c->seen[c->n++] = (kvix_block_info){0, ev->blocks[i].local, ev->blocks[i].seq,
                                            i ? ev->blocks[i - 1].seq : ev->parent,
                                            1u << ev->medium, 0, 0};
    }
    return 0;
}

static int count_only(void *ctx, const kvix_event *ev)
{
    collect *c = ctx;
    c->events++;
    if (c->events == 2 && (!ev->has_parent || ev->parent != 101 || ev->nblocks != 2))
        c->order_ok = 0;
    return 0;
}

/* Every block of g shows up once per tier it is held in, with its parent. */
static void check_events_cover(const kvix_snapshot_group *g, collect *c)
{
    size_t want = 0;
    for (size_t i = 0; i < g->n; i++)
        want += (size_t)__builtin_popcount(g->blocks[i].tiers);
    CHECK_U64(c->n, want);
    for (size_t i = 0; i < g->n; i++) {
        unsigned tiers = 0;
        for (size_t j = 0; j < c->n; j++)
            if (c->seen[j].engine == g->blocks[i].engine) {
                tiers |= c->seen[j].tiers;
                if (g->blocks[i].position && c->seen[j].parent != g->blocks[i].parent)
                    c->order_ok = 0;
                if (c->seen[j].local != g->blocks[i].local)
                    c->order_ok = 0;
            }
        if (tiers != g->blocks[i].tiers) {
            CHECK_U64(tiers, g->blocks[i].tiers);
            break;
        }
    }
    CHECK(c->order_ok);
}

TEST(group_events_chains_and_tiers)
{
    for (int tiers = 0; tiers < 2; tiers++) {
        kvix_block_info *b = sg_group(th_seed() + (uint64_t)tiers, 600, tiers);
        kvix_snapshot_group g = {"m", "t", 16, 3, 1, 0, 0, b, 600};
        collect c = {.order_ok = 1, .g = &g};
        kvix_event ev;
        kvix_event_init(&ev);
        kvix_err err;
        CHECK(kvix_snapshot_group_events(&g, &ev, collect_event, &c, NULL, &err) == KVIX_OK);
        check_events_cover(&g, &c);
        if (!tiers) /* chains make far fewer events than blocks */
            CHECK(c.events < 150);
        kvix_event_release(&ev);
        free(c.seen);
        free(b);
    }
}

TEST(group_events_long_chain_splits)
{
    size_t n = KVIX_EVENT_BLOCKS_MAX + 10;
    kvix_block_info *b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++) {
        uint64_t pc = i ? b[i - 1].canon : 0, local = i * 7 + 1;
        b[i] = (kvix_block_info){(uint32_t)i, local, i + 1, i, 1,
                                 i ? kvix_hash_seq_next(pc, local) : local, pc};
    }
    kvix_snapshot_group g = {"m", "t", 16, 3, 0, 0, 0, b, n};
    collect c = {.order_ok = 1, .g = &g};
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_err err;
    CHECK(kvix_snapshot_group_events(&g, &ev, collect_event, &c, NULL, &err) == KVIX_OK);
    CHECK_U64(c.events, 2);
    CHECK_U64(c.maxlen, KVIX_EVENT_BLOCKS_MAX);
    CHECK_U64(c.n, n);
    kvix_event_release(&ev);
    free(c.seen);
    free(b);
}

TEST(group_events_counts_orphans)
{
    /* 0 <- 1 <- 2 and 0 <- 3, with 1 evicted: 2 is an orphan; so is 4 below it */
    kvix_block_info b[4] = {
        {0, 11, 100, 0, 1, 11, 0},
        {1, 14, 103, 100, 1, kvix_hash_seq_next(11, 14), 11},
        {2, 13, 102, 101, 1, kvix_hash_seq_next(77, 13), 77},
        {3, 15, 104, 102, 1, kvix_hash_seq_next(kvix_hash_seq_next(77, 13), 15),
         kvix_hash_seq_next(77, 13)},
    };
    kvix_snapshot_group g = {"m", "t", 16, 3, 0, 0, 0, b, 4};
    collect c = {.order_ok = 1, .g = &g};
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_err err;
    size_t orphans = 0;
    CHECK(kvix_snapshot_group_events(&g, &ev, count_only, &c, &orphans, &err) == KVIX_OK);
    CHECK_U64(orphans, 2);
    CHECK_U64(c.events, 2); /* [100, 103] and [102, 104] with parent 101 */
    CHECK(c.order_ok);
    kvix_event_release(&ev);
}

/* ---- the saver of tests/cli/snapshot_crash.t ------------------------------------ */

/* Big enough that a save takes a good fraction of a second. */
static void big_state(state *s, int which)
{
    s->n = 0;
    double scale = th_scale();
    size_t n = (size_t)(600000 * scale);
    add(s, "llama", "default", 16, 1, 0, 1, which ? 2000 : 1000, 11, n, 1);
    add(s, "llama", "default", 16, 2, 0, 1, which ? 2001 : 1001, which ? 13 : 12, n, 0);
    add(s, "llama", "default", 16, 3, 0, 1, 5, 14, n, 1);
}

__attribute__((constructor)) static void saver_mode(void)
{
    const char *dir = getenv("KVIX_TEST_SNAPSHOT_STATES");
    const char *path = getenv("KVIX_TEST_SNAPSHOT_SAVER");
    if (!dir && !path)
        return;
    state s[2];
    big_state(&s[0], 0);
    big_state(&s[1], 1);
    if (dir) {
        char p[4096];
        for (int i = 0; i < 2; i++) {
            snprintf(p, sizeof p, "%s/%c.kvix", dir, "ab"[i]);
            if (write_state(&s[i], p, NULL))
                exit(1);
        }
        exit(0);
    }
    fprintf(stderr, "ready\n");
    for (unsigned long k = 0;; k++) {
        if (write_state(&s[k & 1], path, NULL))
            exit(1);
        fprintf(stderr, "saved %lu\n", k);
    }
}
