/* Statistics and differences of snapshot files (kvix/snapshot_stats.h,
 * kvix/snapshot_diff.h): memory and unique blocks are the index's own
 * figures for the same file, on every backend; a diff finds exactly the
 * blocks changed. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvix/snapshot_diff.h"
#include "kvix/snapshot_stats.h"
#include "snapshot_gen.h"

/* Two partitions; workers with branches, tiers, orphans, a worker with an
 * eid and no block, and a partition without workers. tweak != 0 drops the
 * last block of worker 1 and changes worker 2's eid. */
static int write_file(const char *path, int tweak)
{
    kvix_snapshot_writer *w;
    kvix_err err;
    if (kvix_snapshot_writer_open(&w, path, &err))
        return -1;
    struct {
        const char *model;
        uint32_t bs;
        uint64_t worker, seed;
        size_t n;
        int orphans, has_eid;
    } g[] = {
        {"llama", 16, 1, 1, 60, 0, 1}, {"llama", 16, 2, 1, 40, 0, 1}, {"llama", 16, 3, 9, 30, 1, 0},
        {"llama", 16, 4, 0, 0, 0, 1},  {"mistral", 8, UINT64_MAX, 0, 0, 0, 0},
        {"qwen", 4, 5, 3, 25, 0, 1},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof g / sizeof g[0] && !rc; i++) {
        kvix_block_info *b = sg_group(g[i].seed, g[i].n, 1);
        size_t n = g[i].n;
        if (g[i].orphans)
            n = sg_orphan(b, n, 3);
        if (tweak && g[i].worker == 1)
            n--;
        uint64_t eid = 10 + g[i].worker + (tweak && g[i].worker == 2);
        rc = kvix_snapshot_writer_add(w, g[i].model, "default", g[i].bs, g[i].worker, 0,
                                      g[i].has_eid, eid, b, n, &err);
        free(b);
    }
    if (rc) {
        printf("#   %s\n", err.msg);
        kvix_snapshot_writer_abort(w);
        return rc;
    }
    return kvix_snapshot_writer_commit(w, NULL, &err);
}

static kvix_snapshot *open_file(const char *path)
{
    kvix_snapshot *s = NULL;
    kvix_err err;
    if (kvix_snapshot_open(&s, path, &err))
        printf("#   %s\n", err.msg);
    return s;
}

TEST(memory_and_unique_are_the_indexs_own)
{
    char path[64];
    snprintf(path, sizeof path, "%s/a.kvix", th_dir());
    if (!CHECK(write_file(path, 0) == 0))
        return;
    kvix_snapshot *s = open_file(path);
    if (!CHECK(s))
        return;
    kvix_backend be[] = {KVIX_BACKEND_POSITIONAL, KVIX_BACKEND_RADIX, KVIX_BACKEND_REFERENCE};
    for (size_t k = 0; k < 3; k++) {
        kvix_index_opts o;
        kvix_index_opts_init(&o);
        o.backend = be[k];
        kvix_snapshot_stats st;
        kvix_err err;
        CHECK(kvix_snapshot_stats_get(s, NULL, &o, &st, &err) == KVIX_OK);
        kvix_index *idx, *empty;
        CHECK(kvix_index_new(&idx, &o, &err) == KVIX_OK);
        CHECK(kvix_index_new(&empty, &o, &err) == KVIX_OK);
        CHECK(kvix_snapshot_apply(s, idx, &err) == KVIX_OK);
        kvix_index_stats is, es;
        kvix_index_stats_get(idx, &is);
        kvix_index_stats_get(empty, &es);
        CHECK_U64(st.memory, is.bytes);
        uint64_t parts = 0, unique = 0, blocks = 0, orphans = 0, rows = 0;
        for (size_t i = 0; i < st.n; i++) {
            const kvix_snapshot_row *r = &st.rows[i];
            if (r->is_part) {
                parts += r->memory;
                unique += r->unique;
                blocks += r->blocks;
                CHECK(r->memory > 0);
            } else {
                orphans += r->orphans;
                rows++;
                CHECK(r->memory > 0); /* even worker 4: its eid has a state */
            }
        }
        /* the partitions' rows are the whole index less the empty index */
        CHECK_U64(parts + es.bytes, is.bytes);
        CHECK_U64(unique, is.unique_blocks);
        CHECK_U64(blocks, is.blocks);
        CHECK_U64(rows, 5);
        CHECK_U64(st.n, 5 + 3);
        CHECK(orphans > 0);
        CHECK_U64(st.matched, 6);
        kvix_index_free(idx);
        kvix_index_free(empty);
        kvix_snapshot_stats_release(&st);
    }
    /* a filter: one worker, its partition row counts only it */
    kvix_snapshot_filter f = {NULL, NULL, 1, 2};
    kvix_snapshot_stats st;
    kvix_err err;
    CHECK(kvix_snapshot_stats_get(s, &f, NULL, &st, &err) == KVIX_OK);
    if (CHECK_U64(st.n, 2)) {
        CHECK(st.rows[0].is_part);
        CHECK_U64(st.rows[0].blocks, 40);
        CHECK_U64(st.rows[1].worker, 2);
        CHECK_U64(st.rows[1].eid, 12);
    }
    kvix_snapshot_stats_release(&st);
    kvix_snapshot_close(s);
    unlink(path);
}

typedef struct seen {
    int calls;
    uint64_t worker[4];
    size_t only_a[4], only_b[4];
} seen;

static int note(void *ctx, const kvix_snapshot_delta *d)
{
    seen *x = ctx;
    if (x->calls < 4) {
        x->worker[x->calls] = (d->a ? d->a : d->b)->worker;
        x->only_a[x->calls] = d->n_only_a;
        x->only_b[x->calls] = d->n_only_b;
    }
    x->calls++;
    return 0;
}

TEST(diff_finds_the_changed_records)
{
    char pa[64], pb[64];
    snprintf(pa, sizeof pa, "%s/a.kvix", th_dir());
    snprintf(pb, sizeof pb, "%s/b.kvix", th_dir());
    if (!CHECK(write_file(pa, 0) == 0) || !CHECK(write_file(pb, 1) == 0))
        return;
    kvix_snapshot *a = open_file(pa), *a2 = open_file(pa), *b = open_file(pb);
    if (CHECK(a && a2 && b)) {
        kvix_snapshot_diff_totals t;
        kvix_err err;
        seen x = {0};
        CHECK(kvix_snapshot_diff(a, a2, note, &x, &t, &err) == 0);
        CHECK_U64(x.calls, 0);
        CHECK_U64(t.differing, 0);
        CHECK(kvix_snapshot_diff(a, b, note, &x, &t, &err) == 0);
        CHECK_U64(t.differing, 2);
        CHECK_U64(t.only_a, 1);
        CHECK_U64(t.only_b, 0);
        if (CHECK_U64(x.calls, 2)) {
            CHECK_U64(x.worker[0], 1);
            CHECK_U64(x.only_a[0], 1);
            CHECK_U64(x.worker[1], 2); /* its eid */
            CHECK_U64(x.only_a[1] + x.only_b[1], 0);
        }
    }
    kvix_snapshot_close(a);
    kvix_snapshot_close(a2);
    kvix_snapshot_close(b);
    unlink(pa);
    unlink(pb);
}
