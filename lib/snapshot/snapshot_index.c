/* Snapshots and the live index: save an index, rebuild one from a file.
 * Kept apart from the format (snapshot.c) so tools that only read files
 * (kvdump) do not link the index. */
#include "kvix/snapshot.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index_front_int.h"
#include "snapshot_int.h"

typedef struct save_ctx {
    kvix_snapshot_writer *w;
    kvix_err *err;
    int rc;
} save_ctx;

static int save_visit(void *ctx, const char *model, const char *tenant, uint32_t bs,
                      uint64_t worker, uint32_t dp, int has_eid, uint64_t last_eid,
                      const kvix_block_info *blocks, size_t n)
{
    save_ctx *s = ctx;
    s->rc = kvix_snapshot_writer_add(s->w, model, tenant, bs, worker, dp, has_eid, last_eid,
                                     blocks, n, s->err);
    return s->rc ? 1 : 0;
}

int kvix_snapshot_save(kvix_index *idx, const char *path, kvix_snapshot_info *info,
                       kvix_err *err)
{
    return kvix_snapshot_save_at(idx, path, NULL, 0, info, err);
}

int kvix_snapshot_save_at(kvix_index *idx, const char *path, const char *stream, uint64_t seq,
                          kvix_snapshot_info *info, kvix_err *err)
{
    kvix_snapshot_save_opts o = {stream, seq, NULL, 0};
    return kvix_snapshot_save_with(idx, path, &o, info, err);
}

/* The index's KV cache group state, when it has any: extension record 64
 * (kvix_index_groups_save), not optional (an older kvix refuses the file
 * rather than lose it). */
static int save_groups(kvix_index *idx, kvix_snapshot_writer *w, kvix_err *err)
{
    kvix_buf b;
    kvix_buf_init(&b);
    int rc = kvix_index_groups_save(idx, &b, err);
    if (!rc && b.len) {
        kvix_snapshot_ext e = {KVIX_SNAPSHOT_EXT_KVGROUPS, 0, b.data, b.len};
        rc = kvix_snapshot_writer_ext(w, &e, err);
    }
    kvix_buf_release(&b);
    return rc;
}

int kvix_snapshot_save_with(kvix_index *idx, const char *path, const kvix_snapshot_save_opts *o,
                            kvix_snapshot_info *info, kvix_err *err)
{
    save_ctx s = {NULL, err, 0};
    int rc = kvix_snapshot_writer_open(&s.w, path, err);
    if (rc)
        return rc;
    if (o && o->stream && (rc = kvix_snapshot_writer_set_stream(s.w, o->stream, o->seq, err))) {
        kvix_snapshot_writer_abort(s.w);
        return rc;
    }
    if ((rc = save_groups(idx, s.w, err))) {
        kvix_snapshot_writer_abort(s.w);
        return rc;
    }
    for (size_t i = 0; o && i < o->next; i++)
        if ((rc = kvix_snapshot_writer_ext(s.w, &o->ext[i], err))) {
            kvix_snapshot_writer_abort(s.w);
            return rc;
        }
    kvix_walk_stats walk;
    int stop = kvix_index_foreach_live(idx, save_visit, &s, &walk);
    if (stop || s.rc) {
        kvix_snapshot_writer_abort(s.w);
        if (s.rc)
            return s.rc;
        return kvix_err_set(err, stop < 0 ? stop : KVIX_EINVAL, "%s while walking the index",
                            stop < 0 ? kvix_status_name(stop) : "stopped");
    }
    rc = kvix_snapshot_writer_commit(s.w, info, err);
    if (info)
        info->walk = walk;
    return rc;
}

/* Loading may run on several threads: kvix_index_load may run concurrently
 * for different workers, so each thread takes the workers that hash to it
 * (all dp ranks and partitions of one worker on one thread) and jumps over
 * the other records without decoding them. It is not the default: workers
 * that share blocks contend in the backend, and at 10M entries two threads
 * took 17.2 s where one took 12.1 s (bench_snapshot, median of 3). */
#define LOAD_THREADS_MAX 8

typedef struct loader {
    kvix_snapshot *cur;
    kvix_index *idx;
    unsigned id, n;
    int rc;
    kvix_err err;
} loader;

static int mine(void *ctx, uint64_t worker, uint32_t dp)
{
    const loader *l = ctx;
    (void)dp;
    return (unsigned)((worker * UINT64_C(0x9e3779b97f4a7c15)) >> 32) % l->n == l->id;
}

static void *load_part(void *arg)
{
    loader *l = arg;
    kvix_snapshot_group g;
    const size_t *up;
    kvix_ix_chain *nodes = NULL;
    size_t cap = 0;
    size_t sized = 0; /* the partition whose tables were sized (kvix__snap_part_no) */
    int rc;
    if (l->n > 1)
        kvix__snapshot_set_filter(l->cur, mine, l);
    /* each record's blocks as the file has them, parents first */
    while ((rc = kvix__snap_next_tree(l->cur, &g, &up, &l->err)) == KVIX_OK) {
        if (g.worker == UINT64_MAX && g.n == 0 && !g.has_eid && l->id != 0)
            continue; /* a partition without workers: thread 0 creates it */
        size_t reserve = 0;
        if (g.n && sized != kvix__snap_part_no(l->cur)) {
            reserve = kvix__snap_load_reserve(l->cur);
            sized = kvix__snap_part_no(l->cur);
        }
        /* n == 0 still creates the partition: one without workers survives. */
        if ((rc = kvix__ix_load_group(l->idx, g.model, g.tenant, g.bs, g.worker, g.dp, g.has_eid,
                                     g.eid, g.blocks, up, g.n, reserve, &nodes, &cap, &l->err)))
            break;
    }
    free(nodes);
    l->rc = rc == KVIX_EOF ? KVIX_OK : rc;
    return NULL;
}

typedef struct wdp {
    uint64_t worker;
    uint32_t dp;
} wdp;

typedef struct wdp_list {
    wdp *v;
    size_t n, cap;
} wdp_list;

static int collect_visit(void *ctx, const char *model, const char *tenant, uint32_t bs,
                         uint64_t worker, uint32_t dp, int has_eid, uint64_t last_eid,
                         const kvix_block_info *blocks, size_t n)
{
    wdp_list *l = ctx;
    (void)model, (void)tenant, (void)bs, (void)has_eid, (void)last_eid, (void)blocks, (void)n;
    if (worker == UINT64_MAX)
        return 0; /* a partition without workers */
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        wdp *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return 1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (wdp){worker, dp};
    return 0;
}

/* The file's KV cache group state onto idx, its blocks loaded. */
static int load_groups(kvix_snapshot *s, kvix_index *idx, kvix_err *err)
{
    kvix_snapshot_ext e;
    for (size_t i = 0; kvix_snapshot_ext_get(s, i, &e) == KVIX_OK; i++) {
        int rc;
        if (e.type == KVIX_SNAPSHOT_EXT_KVGROUPS &&
            (rc = kvix_index_groups_load(idx, e.data, e.len, err)))
            return rc;
    }
    return KVIX_OK;
}

int kvix_snapshot_replace(kvix_snapshot *s, kvix_index *idx, kvix_err *err)
{
    wdp_list l = {NULL, 0, 0};
    if (kvix_index_foreach(idx, collect_visit, &l)) {
        free(l.v);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    int rc = KVIX_OK;
    for (size_t i = 0; !rc && i < l.n; i++) /* a worker in several partitions comes twice: harmless */
        rc = kvix_index_remove_worker_dp(idx, l.v[i].worker, l.v[i].dp, NULL, err);
    free(l.v);
    if (rc)
        return rc;
    kvix_index_groups_reset(idx);
    kvix_snapshot_rewind(s);
    loader one = {s, idx, 0, 1, KVIX_OK, {0, "", KVIX_REASON_OTHER}};
    load_part(&one);
    if (one.rc && err)
        *err = one.err;
    return one.rc ? one.rc : load_groups(s, idx, err);
}

static unsigned load_threads(const kvix_snapshot_info *info, unsigned want)
{
    unsigned n = want;
    if (n == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        n = cpus > 1 ? (unsigned)cpus : 1;
    }
    if (n > LOAD_THREADS_MAX)
        n = LOAD_THREADS_MAX;
    if (info->groups < n)
        n = info->groups ? (unsigned)info->groups : 1;
    return n;
}

int kvix_snapshot_apply(kvix_snapshot *s, kvix_index *idx, kvix_err *err)
{
    return kvix_snapshot_apply_threads(s, idx, 1, err);
}

int kvix_snapshot_apply_threads(kvix_snapshot *s, kvix_index *idx, unsigned threads,
                                kvix_err *err)
{
    size_t parts, blocks = kvix__ix_count_blocks(idx, &parts); /* allocates nothing */
    if (parts != 0 || blocks != 0)
        return kvix_err_set(err, KVIX_EINVAL, "a snapshot loads only into an empty index");
    kvix_snapshot_info info;
    kvix_snapshot_get_info(s, &info);
    unsigned n = load_threads(&info, threads);
    loader l[LOAD_THREADS_MAX];
    pthread_t th[LOAD_THREADS_MAX];
    int started[LOAD_THREADS_MAX] = {0};
    int rc = KVIX_OK;
    for (unsigned i = 0; i < n; i++) {
        l[i] = (loader){kvix__snapshot_cursor(s, err), idx, i, n, KVIX_OK, {0, "", KVIX_REASON_OTHER}};
        if (!l[i].cur) {
            while (i--)
                kvix_snapshot_close(l[i].cur);
            return KVIX_ENOMEM;
        }
    }
    for (unsigned i = 1; i < n; i++)
        started[i] = pthread_create(&th[i], NULL, load_part, &l[i]) == 0;
    load_part(&l[0]);
    for (unsigned i = 1; i < n; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            load_part(&l[i]); /* no thread: do its share here */
    }
    for (unsigned i = 0; i < n; i++) {
        if (l[i].rc && !rc) {
            rc = l[i].rc;
            if (err)
                *err = l[i].err;
        }
        kvix_snapshot_close(l[i].cur);
    }
    if (rc)
        return rc;
    blocks = kvix__ix_count_blocks(idx, &parts);
    if (blocks != info.blocks)
        return kvix_err_set(err, KVIX_ECORRUPT,
                            "the index rebuilt %zu blocks from the snapshot's %" PRIu64,
                            blocks, info.blocks);
    return load_groups(s, idx, err);
}

int kvix_snapshot_load(kvix_index *idx, const char *path, kvix_snapshot_info *info,
                       kvix_err *err)
{
    kvix_snapshot *s;
    int rc = kvix_snapshot_open(&s, path, err);
    if (rc)
        return rc;
    rc = kvix_snapshot_apply(s, idx, err);
    if (!rc && info)
        kvix_snapshot_get_info(s, info);
    kvix_snapshot_close(s);
    return rc;
}
