/* Snapshot format version 3 (kvix-snapshot(5)): each (worker, dp)'s blocks
 * as a forest, length-prefixed records, extension records; and the files of
 * versions 1 and 2 that kvix wrote before, which it still reads. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "harness.h"
#include "kvix/snapshot.h"
#include "kvix/snapshot_stats.h"
#include "snapshot_gen.h"
#include "snapshot_int.h"

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

static int open_bytes(const unsigned char *b, size_t len, kvix_err *err)
{
    kvix_snapshot *snap = NULL;
    int rc = kvix_snapshot_open_mem(&snap, b, len, err);
    CHECK((rc == KVIX_OK) == (snap != NULL));
    kvix_snapshot_close(snap);
    return rc;
}

/* Engines whose hashes are the canonical rolling hash (Dynamo's, the
 * Mooncake replays'): engine = canon, parent = the parent's canon. */
static void canon_engines(kvix_block_info *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        b[i].engine = b[i].canon;
        b[i].parent = b[i].position ? b[i].parent_canon : 0;
    }
    qsort(b, n, sizeof *b, sg_cmp);
}

typedef struct grp {
    uint64_t worker;
    uint32_t dp;
    int has_eid;
    uint64_t eid;
    kvix_block_info *b;
    size_t n;
} grp;

#define NGRP 24

/* Groups of every shape: chains that branch, orphans, tiers, both kinds of
 * engine hashes, one block, an eid and nothing else. */
static void make_groups(grp *g, uint64_t seed)
{
    for (int i = 0; i < NGRP; i++) {
        size_t n = i == 0 ? 0 : i == 1 ? 1 : (size_t)(th_splitmix(&seed) % 900) + 2;
        g[i] = (grp){(uint64_t)i * 3 + 1, (uint32_t)(i % 3), i % 2 == 0, (uint64_t)i * 11,
                     sg_group(seed + (uint64_t)i, n, i % 4 == 1), n};
        if (i % 5 == 2)
            g[i].n = sg_orphan(g[i].b, g[i].n, 4);
        if (i % 3 == 0)
            canon_engines(g[i].b, g[i].n);
    }
    g[0].has_eid = 1;
}

static int write_groups(const grp *g, int ng, const char *path, const kvix_snapshot_ext *ext,
                        size_t next, kvix_snapshot_info *info)
{
    kvix_snapshot_writer *w;
    kvix_err err;
    int rc = kvix_snapshot_writer_open(&w, path, &err);
    for (size_t i = 0; !rc && i < next; i++)
        rc = kvix_snapshot_writer_ext(w, &ext[i], &err);
    for (int i = 0; !rc && i < ng; i++)
        rc = kvix_snapshot_writer_add(w, "m", "t", 16, g[i].worker, g[i].dp, g[i].has_eid,
                                      g[i].eid, g[i].b, g[i].n, &err);
    if (!rc)
        return kvix_snapshot_writer_commit(w, info, &err);
    printf("#   %s\n", err.msg);
    kvix_snapshot_writer_abort(w);
    return rc;
}

static int same(const kvix_block_info *a, const kvix_block_info *b)
{
    return a->position == b->position && a->local == b->local && a->engine == b->engine &&
           a->tiers == b->tiers && a->canon == b->canon &&
           (!a->position || (a->parent == b->parent && a->parent_canon == b->parent_canon));
}

TEST(forest_round_trip)
{
    grp g[NGRP];
    make_groups(g, th_seed());
    kvix_snapshot_info wi;
    const char *path = th_path("forest.kvix");
    CHECK(write_groups(g, NGRP, path, NULL, 0, &wi) == KVIX_OK);
    CHECK_U64(wi.version, 3);
    kvix_snapshot *s;
    kvix_err err;
    if (!CHECK(kvix_snapshot_open(&s, path, &err) == KVIX_OK)) {
        printf("#   %s\n", err.msg);
        return;
    }
    kvix_snapshot_group sg;
    int i = 0, rc;
    while ((rc = kvix_snapshot_next(s, &sg, &err)) == KVIX_OK) {
        if (!CHECK(i < NGRP))
            break;
        CHECK_U64(sg.worker, g[i].worker);
        CHECK_U64(sg.dp, g[i].dp);
        CHECK_U64(sg.has_eid, g[i].has_eid);
        CHECK_U64(sg.n, g[i].n);
        size_t bad = 0;
        for (size_t k = 0; k < sg.n && k < g[i].n; k++)
            bad += !same(&sg.blocks[k], &g[i].b[k]);
        CHECK_U64(bad, 0);
        i++;
    }
    CHECK(rc == KVIX_EOF);
    CHECK_U64(i, NGRP);
    /* In the file's order each block's parent comes first, and is the
     * block the sorted form names. */
    kvix_snapshot_rewind(s);
    const size_t *up;
    size_t blocks = 0, bad = 0;
    while (kvix__snap_next_tree(s, &sg, &up, &err) == KVIX_OK) {
        for (size_t k = 0; k < sg.n; k++) {
            const kvix_block_info *x = &sg.blocks[k];
            blocks++;
            if (up[k] == NONE)
                continue;
            const kvix_block_info *p = &sg.blocks[up[k]];
            bad += up[k] >= k || p->position + 1 != x->position || p->engine != x->parent ||
                   p->canon != x->parent_canon;
        }
    }
    CHECK_U64(bad, 0);
    CHECK_U64(blocks, wi.blocks);
    kvix_snapshot_close(s);
    for (int k = 0; k < NGRP; k++)
        free(g[k].b);
}

/* What the format is for: a block costs its control byte and local hash
 * when the engine hash is the canonical one, 8 bytes more when it is not. */
TEST(bytes_per_block)
{
    size_t n = 20000;
    for (int canon = 0; canon < 2; canon++) {
        grp g = {1, 0, 1, 5, sg_group(th_seed() + 7, n, 0), n};
        if (canon)
            canon_engines(g.b, n);
        kvix_snapshot_info wi;
        CHECK(write_groups(&g, 1, th_path("size.kvix"), NULL, 0, &wi) == KVIX_OK);
        double per = (double)wi.bytes / (double)n;
        printf("#   %s engine hashes: %.2f bytes a block\n", canon ? "canonical" : "other", per);
        CHECK(per < (canon ? 9.2 : 17.2));
        CHECK(per > (canon ? 9.0 : 17.0));
        free(g.b);
    }
}

/* The same state through two writers gives the same bytes, whatever order
 * a caller's equal blocks were produced in. */
TEST(one_state_one_file)
{
    grp g[NGRP];
    make_groups(g, th_seed() + 1);
    kvix_snapshot_info a, b;
    CHECK(write_groups(g, NGRP, th_path("a.kvix"), NULL, 0, &a) == KVIX_OK);
    /* garbage where the format has no field: parents at position 0 */
    for (int i = 0; i < NGRP; i++)
        for (size_t k = 0; k < g[i].n; k++)
            if (!g[i].b[k].position)
                g[i].b[k].parent = g[i].b[k].parent_canon = 77;
    CHECK(write_groups(g, NGRP, th_path("b.kvix"), NULL, 0, &b) == KVIX_OK);
    CHECK_U64(a.checksum, b.checksum);
    CHECK_U64(a.bytes, b.bytes);
    for (int k = 0; k < NGRP; k++)
        free(g[k].b);
}

/* ---- extension records ---------------------------------------------------------- */

TEST(extension_records)
{
    grp g[NGRP];
    make_groups(g, th_seed() + 2); /* the first two are written */
    /* record 64's payload is checked at open (kvix_index_groups_check): a
     * well-formed one, partition m/t hashes EAGLE's blocks of 16 */
    static const char kvgroups[38] = {1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                                      0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0,
                                      'm', 't', 16, 0, 0, 0};
    kvix_snapshot_ext ext[3] = {
        {KVIX_SNAPSHOT_EXT_REGISTRATIONS, 0, "[{\"instance_id\":1}]", 19},
        {KVIX_SNAPSHOT_EXT_KVGROUPS, KVIX_SNAPSHOT_EXT_OPTIONAL, kvgroups, sizeof kvgroups},
        {900, KVIX_SNAPSHOT_EXT_OPTIONAL, "later", 5}, /* a later kvix's, optional */
    };
    kvix_snapshot_info wi;
    const char *path = th_path("ext.kvix");
    CHECK(write_groups(g, 2, path, ext, 3, &wi) == KVIX_OK);
    kvix_snapshot *s;
    kvix_err err;
    if (CHECK(kvix_snapshot_open(&s, path, &err) == KVIX_OK)) {
        kvix_snapshot_info ri;
        kvix_snapshot_get_info(s, &ri);
        CHECK_U64(ri.extensions, 3);
        kvix_snapshot_ext e;
        for (size_t i = 0; i < 3; i++) {
            CHECK(kvix_snapshot_ext_get(s, i, &e) == KVIX_OK);
            CHECK_U64(e.type, ext[i].type);
            CHECK_U64(e.flags, ext[i].flags);
            CHECK(e.len == ext[i].len && memcmp(e.data, ext[i].data, e.len) == 0);
        }
        CHECK(kvix_snapshot_ext_get(s, 3, &e) == KVIX_EOF);
        kvix_snapshot_group sg;
        CHECK(kvix_snapshot_next(s, &sg, &err) == KVIX_OK && sg.worker == g[0].worker);
        kvix_snapshot_close(s);
    }
    /* The writer's rules. */
    kvix_snapshot_writer *w;
    CHECK(kvix_snapshot_writer_open(&w, th_path("ext2.kvix"), &err) == KVIX_OK);
    kvix_snapshot_ext low = {KVIX_SNAPSHOT_EXT_MIN - 1, 0, "x", 1}, flag = {70, 2, "x", 1};
    CHECK(kvix_snapshot_writer_ext(w, &low, &err) == KVIX_EINVAL);
    CHECK(kvix_snapshot_writer_ext(w, &flag, &err) == KVIX_EINVAL);
    CHECK(kvix_snapshot_writer_add(w, "m", "t", 16, 1, 0, 1, 1, NULL, 0, &err) == KVIX_OK);
    CHECK(kvix_snapshot_writer_ext(w, &ext[0], &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, "before the partitions") != NULL);
    kvix_snapshot_writer_abort(w);
    CHECK(kvix_snapshot_writer_open(&w, th_path("ext2.kvix"), &err) == KVIX_OK);
    kvix__snap_writer_legacy(w);
    CHECK(kvix_snapshot_writer_ext(w, &ext[0], &err) == KVIX_EINVAL);
    kvix_snapshot_writer_abort(w);
    /* A type this kvix does not know, not optional: refused with why. */
    kvix_snapshot_ext unknown = {900, 0, "later", 5};
    CHECK(write_groups(g, 2, path, &unknown, 1, NULL) == KVIX_OK);
    size_t len;
    unsigned char *b = slurp(path, &len);
    CHECK(b && open_bytes(b, len, &err) == KVIX_ECORRUPT &&
          strstr(err.msg, "extension record type 900, unknown to this kvix"));
    free(b);
    for (int k = 0; k < NGRP; k++)
        free(g[k].b);
}

/* ---- crafted files ------------------------------------------------------------- */

static void fix_sum(unsigned char *b, size_t len)
{
    uint64_t s = XXH3_64bits(b, len - 8);
    memcpy(b + len - 8, &s, 8); /* the tests run on little-endian hosts */
}

static void p32(unsigned char *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void p64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

/* One partition "m"/"t" bs 16; worker 5 (eid 9) holds a root (local 0xa,
 * engine 0x100) and its child (local 0xb, engine 0x200). */
#define PART_AT 16u
#define GROUP_AT 50u
#define BLOCK0_AT 98u
#define BLOCK1_AT 115u
#define END_AT 132u
#define FILE_LEN (END_AT + 48u)

static size_t craft(unsigned char *b)
{
    memset(b, 0, FILE_LEN);
    memcpy(b, "KVIXSNAP", 8);
    p32(b + 8, 3);
    p32(b + PART_AT, 1), p64(b + PART_AT + 8, 18);
    p32(b + PART_AT + 16, 16), p32(b + PART_AT + 20, 1), p32(b + PART_AT + 24, 1);
    b[PART_AT + 32] = 'm', b[PART_AT + 33] = 't';
    p32(b + GROUP_AT, 2), p64(b + GROUP_AT + 8, 32 + 34);
    p64(b + GROUP_AT + 16, 5), p32(b + GROUP_AT + 28, 1), p64(b + GROUP_AT + 32, 9);
    p64(b + GROUP_AT + 40, 2);
    b[BLOCK0_AT] = 1 | SG_ENGINE, p64(b + BLOCK0_AT + 1, 0xa), p64(b + BLOCK0_AT + 9, 0x100);
    b[BLOCK1_AT] = SG_ENGINE, p64(b + BLOCK1_AT + 1, 0xb), p64(b + BLOCK1_AT + 9, 0x200);
    p32(b + END_AT, 3), p64(b + END_AT + 8, 32);
    p64(b + END_AT + 16, 1), p64(b + END_AT + 24, 1), p64(b + END_AT + 32, 2);
    fix_sum(b, FILE_LEN);
    return FILE_LEN;
}

TEST(crafted_structure_errors_v3)
{
    unsigned char b[FILE_LEN];
    kvix_err err;
    size_t len = craft(b);
    if (!CHECK(open_bytes(b, len, &err) == KVIX_OK))
        printf("#   %s\n", err.msg);
    struct {
        size_t off;
        int width;
        uint64_t val;
        const char *msg;
    } cases[] = {
        {GROUP_AT + 40, 8, UINT64_C(1) << 60, "claims"},   /* huge block count */
        {GROUP_AT + 40, 8, 3, "runs past the record"},      /* one block too many */
        {GROUP_AT + 40, 8, 1, "claims 1 children"},          /* one too few */
        {GROUP_AT + 8, 8, 100, "runs past the end"},        /* a record's length */
        {PART_AT + 8, 8, 17, "partition record of 17 bytes"},
        {PART_AT + 20, 4, 0xffffffffu, "partition record"}, /* huge name */
        {PART_AT + 28, 4, 1, "reserved"},
        {PART_AT + 16, 4, 0, "block size"},
        {PART_AT + 4, 4, 1, "flags"},
        {GROUP_AT + 4, 4, 1, "flags"},
        {PART_AT, 4, 9, "unknown record type 9"},
        {GROUP_AT, 4, 7, "unknown record type 7"},
        {GROUP_AT, 4, 4, "stream position after"},
        {GROUP_AT, 4, 3, "end record before the end"},
        {GROUP_AT + 28, 4, 2, "flags"},
        {GROUP_AT + 28, 4, 0, "eid 9 with the eid flag clear"},
        {GROUP_AT + 32, 8, UINT64_C(1) << 63, "out of range"},
        {GROUP_AT + 16, 8, UINT64_C(1) << 63, "out of range"},
        {BLOCK0_AT, 1, 1 | SG_ENGINE | 0x20, "control bits"},
        {BLOCK0_AT, 1, 2 | SG_ENGINE, "claims 2 children"},
        {BLOCK1_AT, 1, SG_ENGINE | SG_ROOT_AT, "inside a tree"},
        {BLOCK0_AT + 9, 8, 0xa, "implied"},       /* an engine hash equal to the canonical */
        {BLOCK1_AT + 9, 8, 0x100, "repeats engine hash"},
        {END_AT + 8, 8, 33, "no end record"},
        {END_AT + 32, 8, 3, "totals"},
        {END_AT + 16, 8, 2, "totals"},
        {8, 4, 4, "version 4"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char c[FILE_LEN];
        memcpy(c, b, len);
        if (cases[i].width == 1)
            c[cases[i].off] = (unsigned char)cases[i].val;
        else if (cases[i].width == 4)
            p32(c + cases[i].off, (uint32_t)cases[i].val);
        else
            p64(c + cases[i].off, cases[i].val);
        fix_sum(c, len);
        int rc = open_bytes(c, len, &err);
        if (!CHECK(rc == KVIX_ECORRUPT) || !CHECK(strstr(err.msg, cases[i].msg) != NULL))
            printf("#   case %zu: rc %d: %s\n", i, rc, err.msg);
    }
    /* The child made a root of its own (no kid, ROOT_AT): an orphan whose
     * parent the group holds is a child, and must be written as one. */
    unsigned char c[FILE_LEN + 32];
    memcpy(c, b, BLOCK1_AT);
    c[BLOCK0_AT] = SG_ENGINE;
    size_t o = BLOCK1_AT;
    c[o++] = SG_ENGINE | SG_ROOT_AT;
    c[o++] = 1;                                        /* position 1 */
    p64(c + o, 0x100), p64(c + o + 8, 0xa), o += 16; /* parent, parent_canon */
    p64(c + o, 0xb), p64(c + o + 8, 0x200), o += 16;
    p64(c + GROUP_AT + 8, o - GROUP_AT - 16);
    memcpy(c + o, b + END_AT, 48);
    fix_sum(c, o + 48);
    CHECK(open_bytes(c, o + 48, &err) == KVIX_ECORRUPT && strstr(err.msg, "yet its parent"));
    /* The same with another parent canonical hash: a real orphan, legal. */
    p64(c + BLOCK1_AT + 10, 0xc);
    fix_sum(c, o + 48);
    CHECK(open_bytes(c, o + 48, &err) == KVIX_OK);
    /* Its position in an over-long varint (0x81 0x00): one state, one file. */
    unsigned char d[FILE_LEN + 48];
    memcpy(d, c, BLOCK1_AT + 1);
    d[BLOCK1_AT + 1] = 0x81, d[BLOCK1_AT + 2] = 0x00;
    memcpy(d + BLOCK1_AT + 3, c + BLOCK1_AT + 2, o + 48 - (BLOCK1_AT + 2));
    p64(d + GROUP_AT + 8, o + 1 - GROUP_AT - 16);
    fix_sum(d, o + 49);
    CHECK(open_bytes(d, o + 49, &err) == KVIX_ECORRUPT && strstr(err.msg, "root position"));
    /* Two roots in the wrong order. */
    memcpy(c, b, len);
    c[BLOCK0_AT] = SG_ENGINE;
    p64(c + BLOCK1_AT + 1, 0x9); /* local 9 < 0xa: a root at 0 that must come first */
    fix_sum(c, len);
    CHECK(open_bytes(c, len, &err) == KVIX_ECORRUPT && strstr(err.msg, "out of order"));
    /* A later kvix's optional core record is skipped; its extension too. */
    memcpy(c, b, len);
    p32(c + PART_AT, 9), p32(c + PART_AT + 4, REC_OPTIONAL);
    fix_sum(c, len);
    CHECK(open_bytes(c, len, &err) == KVIX_ECORRUPT); /* then the group has no partition */
    CHECK(strstr(err.msg, "before any partition") != NULL);
}

/* A GROUP record between the partitions and an extension record. */
TEST(extension_after_partitions_is_refused)
{
    unsigned char b[FILE_LEN + 16];
    size_t len = craft(b);
    memmove(b + END_AT + 16, b + END_AT, 48);
    p32(b + END_AT, 64), p32(b + END_AT + 4, 0), p64(b + END_AT + 8, 0);
    len += 16;
    fix_sum(b, len);
    kvix_err err;
    CHECK(open_bytes(b, len, &err) == KVIX_ECORRUPT && strstr(err.msg, "after the partitions"));
}

/* ---- the files kvix wrote before ------------------------------------------------ */

/* tests/fixtures/snapshot: v1.kvix and v2.kvix were written by kvix before
 * version 3 (from events.ndjson; v2 with a stream position); every version
 * must read them as the same state. */
TEST(older_versions_read_alike)
{
    char p[3][1024];
    snprintf(p[0], sizeof p[0], "%s/snapshot/v1.kvix", th_fixture_dir());
    snprintf(p[1], sizeof p[1], "%s/snapshot/v2.kvix", th_fixture_dir());
    kvix_index *idx;
    kvix_err err;
    CHECK(kvix_index_new(&idx, NULL, &err) == KVIX_OK);
    kvix_snapshot_info i1;
    if (!CHECK(kvix_snapshot_load(idx, p[0], &i1, &err) == KVIX_OK)) {
        printf("#   %s\n", err.msg);
        kvix_index_free(idx);
        return;
    }
    CHECK_U64(i1.version, 1);
    snprintf(p[2], sizeof p[2], "%s", th_path("v3.kvix"));
    kvix_snapshot_info i3;
    CHECK(kvix_snapshot_save(idx, p[2], &i3, &err) == KVIX_OK);
    kvix_index_free(idx);
    CHECK_U64(i3.version, 3);
    CHECK(i3.bytes * 3 < i1.bytes * 2);
    kvix_snapshot *s[3];
    for (int i = 0; i < 3; i++)
        CHECK(kvix_snapshot_open(&s[i], p[i], &err) == KVIX_OK);
    kvix_snapshot_info i2;
    kvix_snapshot_get_info(s[1], &i2);
    CHECK_U64(i2.version, 2);
    CHECK(i2.has_stream && strcmp(i2.stream, "KVIX_EVENTS") == 0 && i2.stream_seq == 4242);
    kvix_snapshot_group g[3];
    size_t groups = 0, bad = 0, empty[3] = {0, 0, 0};
    int rc[3];
    for (;;) {
        /* a partition that holds nothing is not saved any more: v1 and v2
         * have one, v3 does not */
        for (int i = 0; i < 3; i++)
            while ((rc[i] = kvix_snapshot_next(s[i], &g[i], &err)) == KVIX_OK &&
                   kvix_snapshot_group_is_partition(&g[i]))
                empty[i]++;
        if (rc[0] || rc[1] || rc[2])
            break;
        groups++;
        for (int i = 1; i < 3; i++) {
            bad += strcmp(g[0].model, g[i].model) || strcmp(g[0].tenant, g[i].tenant) ||
                   g[0].worker != g[i].worker || g[0].dp != g[i].dp ||
                   g[0].has_eid != g[i].has_eid || g[0].eid != g[i].eid || g[0].n != g[i].n;
            for (size_t k = 0; k < g[0].n && k < g[i].n; k++)
                bad += !same(&g[0].blocks[k], &g[i].blocks[k]);
        }
    }
    CHECK(rc[0] == KVIX_EOF && rc[1] == KVIX_EOF && rc[2] == KVIX_EOF);
    CHECK_U64(bad, 0);
    CHECK_U64(groups, 35); /* 35 workers */
    CHECK_U64(empty[0], 1);
    CHECK_U64(empty[1], 1);
    CHECK_U64(empty[2], 0);
    for (int i = 0; i < 3; i++)
        kvix_snapshot_close(s[i]);
}
