/* Snapshots of a live index: save -> load -> foreach equal, byte-stable
 * re-save, queries answered alike, refusal of a non-empty index and of a
 * corrupt file (the index untouched), on every backend built. Loading on
 * several threads too: _mt, so ThreadSanitizer runs it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "kvix/hash.h"
#include "kvix/snapshot.h"
#include "snapshot_gen.h"

static const char *const backends[] = {"positional", "radix", "reference"};

static kvix_index *mk(const char *name)
{
    kvix_backend b;
    kvix_index_opts o;
    kvix_index *idx = NULL;
    kvix_err err;
    CHECK(kvix_backend_parse(name, &b) == KVIX_OK);
    kvix_index_opts_init(&o);
    o.backend = b;
    if (kvix_index_new(&idx, &o, &err) != KVIX_OK)
        return NULL; /* a backend not built into this library */
    return idx;
}

/* The first backend built: positional once it is, else the reference. */
static const char *any_backend(void)
{
    for (size_t k = 0; k < sizeof backends / sizeof *backends; k++) {
        kvix_index *idx = mk(backends[k]);
        if (idx) {
            kvix_index_free(idx);
            return backends[k];
        }
    }
    return "reference";
}

static kvix_event ev;

static int apply_stored(kvix_index *idx, const char *model, uint64_t worker, uint32_t dp,
                        int medium, uint32_t bs, const uint64_t *parent, const uint64_t *local,
                        size_t n, uint64_t salt, int has_eid, uint64_t eid)
{
    kvix_event_reset(&ev);
    ev.type = KVIX_EV_STORED;
    kvix_event_set_name(ev.model, model, strlen(model), NULL);
    ev.worker = worker;
    ev.dp = dp;
    ev.medium = medium;
    ev.bs = bs;
    ev.has_eid = (unsigned)has_eid;
    ev.eid = eid;
    if (parent) {
        ev.has_parent = 1;
        ev.parent = *parent;
    }
    kvix_event_reserve_blocks(&ev, n, NULL);
    for (size_t i = 0; i < n; i++) {
        ev.blocks[i].local = local[i];
        ev.blocks[i].seq = local[i] ^ salt;
    }
    ev.nblocks = n;
    kvix_err err;
    int rc = kvix_index_apply(idx, &ev, NULL, &err);
    if (rc)
        printf("#   apply: %s\n", err.msg);
    return rc;
}

static int apply_removed(kvix_index *idx, const char *model, uint64_t worker, uint32_t dp,
                         int medium, const uint64_t *hashes, size_t n, uint64_t eid)
{
    kvix_event_reset(&ev);
    ev.type = KVIX_EV_REMOVED;
    kvix_event_set_name(ev.model, model, strlen(model), NULL);
    ev.worker = worker;
    ev.dp = dp;
    ev.medium = medium;
    ev.has_eid = 1;
    ev.eid = eid;
    kvix_event_reserve_hashes(&ev, n, NULL);
    memcpy(ev.hashes, hashes, n * sizeof *hashes);
    ev.nhashes = n;
    return kvix_index_apply(idx, &ev, NULL, NULL);
}

/* A state with everything a snapshot must carry: two partitions, branches,
 * several tiers, an orphan (parent removed, child kept), eids, a worker with
 * only an eid left, dp ranks. */
static void build(kvix_index *idx)
{
    uint64_t a[6] = {11, 12, 13, 14, 15, 16}, b[3] = {21, 22, 23}, c[2] = {31, 32};
    CHECK(apply_stored(idx, "llama", 1, 0, KVIX_MEDIUM_GPU, 16, NULL, a, 6, 0x1000, 1, 5) == 0);
    uint64_t p = 12 ^ 0x1000;
    CHECK(apply_stored(idx, "llama", 1, 0, KVIX_MEDIUM_GPU, 16, &p, b, 3, 0x1000, 1, 6) == 0);
    CHECK(apply_stored(idx, "llama", 1, 0, KVIX_MEDIUM_CPU, 16, NULL, a, 4, 0x1000, 1, 7) == 0);
    /* remove block 13 from gpu only: its tier set shrinks; remove 21 wholly:
     * 22 and 23 stay as orphans */
    uint64_t r1 = 21 ^ 0x1000;
    CHECK(apply_removed(idx, "llama", 1, 0, KVIX_MEDIUM_GPU, &r1, 1, 8) == 0);
    CHECK(apply_stored(idx, "llama", 1, 1, KVIX_MEDIUM_DISK, 16, NULL, c, 2, 0x2000, 0, 0) == 0);
    CHECK(apply_stored(idx, "llama", 2, 0, KVIX_MEDIUM_GPU, 16, NULL, a, 3, 0x3000, 1, 100) == 0);
    uint64_t all[3] = {11 ^ 0x3000, 12 ^ 0x3000, 13 ^ 0x3000};
    CHECK(apply_removed(idx, "llama", 2, 0, KVIX_MEDIUM_GPU, all, 3, 101) == 0);
    CHECK(apply_stored(idx, "qwen", 9, 2, KVIX_MEDIUM_EXTERNAL, 4, NULL, b, 3, 0x4000, 1,
                       (uint64_t)INT64_MAX - 1) == 0); /* eids stop at 2^63-1 */
}

typedef struct dump {
    char *text;
    size_t len, cap;
} dump;

static int dump_visit(void *ctx, const char *model, const char *tenant, uint32_t bs,
                      uint64_t worker, uint32_t dp, int has_eid, uint64_t last_eid,
                      const kvix_block_info *blocks, size_t n)
{
    dump *d = ctx;
    char line[512];
    int k = snprintf(line, sizeof line, "%s/%s bs %u w %llu dp %u eid %d:%llu n %zu\n", model,
                     tenant, bs, (unsigned long long)worker, dp, has_eid,
                     (unsigned long long)last_eid, n);
    for (size_t i = 0; i <= n; i++) {
        if (d->len + 512 > d->cap) {
            d->cap = d->cap ? 2 * d->cap : 1 << 16;
            d->text = realloc(d->text, d->cap);
        }
        memcpy(d->text + d->len, line, (size_t)k);
        d->len += (size_t)k;
        if (i == n)
            break;
        const kvix_block_info *b = &blocks[i];
        k = snprintf(line, sizeof line, " %u %llx %llx %llx %x %llx %llx\n", b->position,
                     (unsigned long long)b->local, (unsigned long long)b->engine,
                     (unsigned long long)(b->position ? b->parent : 0), b->tiers,
                     (unsigned long long)b->canon,
                     (unsigned long long)(b->position ? b->parent_canon : 0));
    }
    return 0;
}

static char *dump_index(kvix_index *idx, size_t *len)
{
    dump d = {NULL, 0, 0};
    CHECK(kvix_index_foreach(idx, dump_visit, &d) == 0);
    *len = d.len;
    return d.text;
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
    if (fread(b, 1, (size_t)l, f) != (size_t)l)
        l = 0;
    fclose(f);
    *len = (size_t)l;
    return b;
}

/* Save idx, load it into a fresh index, and check the two agree. */
static void round_trip(kvix_index *idx, const char *backend, const char *name)
{
    kvix_err err;
    kvix_snapshot_info si, li;
    char p1[600], p2[700];
    snprintf(p1, sizeof p1, "%s", th_path(name));
    snprintf(p2, sizeof p2, "%s.again", p1);
    if (!CHECK(kvix_snapshot_save(idx, p1, &si, &err) == KVIX_OK)) {
        printf("#   save: %s\n", err.msg);
        return;
    }
    kvix_index *copy = mk(backend);
    if (!CHECK(kvix_snapshot_load(copy, p1, &li, &err) == KVIX_OK))
        printf("#   load: %s\n", err.msg);
    CHECK_U64(li.checksum, si.checksum);
    CHECK_U64(li.blocks, si.blocks);
    size_t l1, l2;
    char *d1 = dump_index(idx, &l1), *d2 = dump_index(copy, &l2);
    CHECK(l1 == l2 && (l1 == 0 || memcmp(d1, d2, l1) == 0));
    kvix_index_stats s1, s2;
    kvix_index_stats_get(idx, &s1);
    kvix_index_stats_get(copy, &s2);
    CHECK_U64(s2.blocks, s1.blocks);
    CHECK_U64(s2.unique_blocks, s1.unique_blocks);
    CHECK_U64(s2.workers, s1.workers);
    CHECK_U64(s2.partitions, s1.partitions);
    /* Equal states write equal bytes. */
    CHECK(kvix_snapshot_save(copy, p2, NULL, &err) == KVIX_OK);
    size_t b1, b2;
    unsigned char *f1 = slurp(p1, &b1), *f2 = slurp(p2, &b2);
    CHECK(f1 && f2 && b1 == b2 && memcmp(f1, f2, b1) == 0);
    free(f1);
    free(f2);
    free(d1);
    free(d2);
    kvix_index_free(copy);
}

TEST(save_load_round_trip_every_backend)
{
    for (size_t k = 0; k < sizeof backends / sizeof *backends; k++) {
        kvix_index *idx = mk(backends[k]);
        if (!idx)
            continue;
        build(idx);
        round_trip(idx, backends[k], "rt.kvix");
        kvix_index_free(idx);
    }
}

TEST(loaded_index_answers_alike)
{
    const char *be = any_backend();
    kvix_index *idx = mk(be);
    if (!CHECK(idx != NULL))
        return;
    build(idx);
    kvix_err err;
    CHECK(kvix_snapshot_save(idx, th_path("q.kvix"), NULL, &err) == KVIX_OK);
    kvix_index *copy = mk(be);
    CHECK(kvix_snapshot_load(copy, th_path("q.kvix"), NULL, &err) == KVIX_OK);
    uint64_t queries[3][6] = {{11, 12, 13, 14, 15, 16}, {11, 12, 21, 22, 23, 0}, {21, 22, 23, 0, 0, 0}};
    const char *models[2] = {"llama", "qwen"};
    for (int m = 0; m < 2; m++)
        for (int q = 0; q < 3; q++) {
            kvix_answer a1, a2;
            kvix_answer_init(&a1);
            kvix_answer_init(&a2);
            CHECK(kvix_index_query(idx, models[m], "default", queries[q], 6, &a1, &err) == 0);
            CHECK(kvix_index_query(copy, models[m], "default", queries[q], 6, &a2, &err) == 0);
            CHECK_U64(a1.nscores, a2.nscores);
            for (size_t i = 0; i < a1.nscores && i < a2.nscores; i++) {
                CHECK_U64(a1.scores[i].worker, a2.scores[i].worker);
                CHECK_U64(a1.scores[i].dp, a2.scores[i].dp);
                CHECK_U64(a1.scores[i].blocks, a2.scores[i].blocks);
                CHECK(memcmp(a1.scores[i].tier_blocks, a2.scores[i].tier_blocks,
                             sizeof a1.scores[i].tier_blocks) == 0);
            }
            kvix_answer_release(&a1);
            kvix_answer_release(&a2);
        }
    /* The first query matched something: the test is not vacuous. */
    kvix_answer a;
    kvix_answer_init(&a);
    CHECK(kvix_index_query(copy, "llama", "default", queries[0], 6, &a, &err) == 0);
    CHECK(a.nscores >= 1 && a.scores[0].blocks == 6);
    kvix_answer_release(&a);
    kvix_index_free(idx);
    kvix_index_free(copy);
}

TEST(load_refuses_non_empty_index_and_corrupt_file)
{
    const char *be = any_backend();
    kvix_index *idx = mk(be);
    if (!CHECK(idx != NULL))
        return;
    build(idx);
    kvix_err err;
    const char *p = th_path("c.kvix");
    CHECK(kvix_snapshot_save(idx, p, NULL, &err) == KVIX_OK);
    CHECK(kvix_snapshot_load(idx, p, NULL, &err) == KVIX_EINVAL);
    /* Flip one byte in the middle: refused before the index is touched. */
    size_t len;
    unsigned char *b = slurp(p, &len);
    b[len / 2] ^= 0x10;
    FILE *f = fopen(p, "wb");
    fwrite(b, 1, len, f);
    fclose(f);
    kvix_index *fresh = mk(be);
    CHECK(kvix_snapshot_load(fresh, p, NULL, &err) == KVIX_ECORRUPT);
    CHECK(strstr(err.msg, "checksum") != NULL);
    kvix_index_stats st;
    kvix_index_stats_get(fresh, &st);
    CHECK_U64(st.partitions, 0);
    CHECK_U64(st.blocks, 0);
    /* The corrupt file is left as it was. */
    size_t len2;
    unsigned char *b2 = slurp(p, &len2);
    CHECK(len2 == len && memcmp(b, b2, len) == 0);
    CHECK(kvix_snapshot_load(fresh, th_path("none.kvix"), NULL, &err) == KVIX_ENOTFOUND);
    free(b);
    free(b2);
    kvix_index_free(idx);
    kvix_index_free(fresh);
}

TEST(empty_index_and_empty_partition)
{
    const char *be = any_backend();
    kvix_index *idx = mk(be);
    if (!CHECK(idx != NULL))
        return;
    round_trip(idx, be, "empty.kvix");
    /* A partition whose only worker lost everything and has no eid: it
     * holds nothing, and is not saved (a restart does not keep what clears
     * emptied, so the partitions' limit does not outlive the run). */
    uint64_t a[2] = {1, 2};
    CHECK(apply_stored(idx, "m", 4, 0, KVIX_MEDIUM_GPU, 8, NULL, a, 2, 0, 0, 0) == 0);
    kvix_err err;
    CHECK(kvix_index_remove_worker(idx, 4, NULL, &err) == KVIX_OK);
    kvix_snapshot_info info;
    CHECK(kvix_snapshot_save(idx, th_path("emptypart.kvix"), &info, &err) == KVIX_OK);
    CHECK_U64(info.partitions, 0);
    CHECK_U64(info.groups, 0);
    kvix_index *copy = mk(be);
    CHECK(kvix_snapshot_load(copy, th_path("emptypart.kvix"), NULL, &err) == KVIX_OK);
    kvix_index_stats st;
    kvix_index_stats_get(copy, &st);
    CHECK_U64(st.partitions, 0);
    kvix_index_free(copy);
    kvix_index_free(idx);
}

TEST(large_random_state)
{
    const char *be = any_backend();
    kvix_index *idx = mk(be);
    if (!CHECK(idx != NULL))
        return;
    size_t n = (size_t)(20000 * th_scale());
    kvix_err err;
    for (uint64_t w = 0; w < 6; w++) {
        kvix_block_info *b = sg_group(th_seed() + w, n, (int)(w & 1));
        size_t m = w % 3 == 2 ? sg_orphan(b, n, 50) : n;
        if (!CHECK(kvix_index_load(idx, w < 4 ? "a" : "b", "t", 16, w, (uint32_t)(w % 2), b, m,
                                   &err) == KVIX_OK))
            printf("#   load: %s\n", err.msg);
        CHECK(kvix_index_set_eid(idx, w < 4 ? "a" : "b", "t", 16, w, (uint32_t)(w % 2), w * 10,
                                 &err) == KVIX_OK);
        free(b);
    }
    /* one worker in two partitions and two dp ranks: loaded on one thread */
    for (uint32_t dp = 0; dp < 2; dp++) {
        kvix_block_info *b = sg_group(th_seed() + 77 + dp, n / 2, 1);
        CHECK(kvix_index_load(idx, dp ? "a" : "b", "t", 16, 1, dp + 5, b, n / 2, &err) == KVIX_OK);
        free(b);
    }
    round_trip(idx, be, "large.kvix");
    /* and on several threads: the same index */
    for (unsigned threads = 2; threads <= 5; threads += 3) {
        kvix_snapshot *s;
        kvix_index *copy = mk(be);
        CHECK(kvix_snapshot_open(&s, th_path("large.kvix"), &err) == KVIX_OK);
        if (!CHECK(kvix_snapshot_apply_threads(s, copy, threads, &err) == KVIX_OK))
            printf("#   apply on %u threads: %s\n", threads, err.msg);
        kvix_snapshot_close(s);
        size_t l1, l2;
        char *d1 = dump_index(idx, &l1), *d2 = dump_index(copy, &l2);
        CHECK(l1 == l2 && l1 > 0 && memcmp(d1, d2, l1) == 0);
        free(d1);
        free(d2);
        kvix_index_free(copy);
    }
    kvix_index_free(idx);
}
