/* The Mooncake trace simulator: trace parsing, LRU-of-leaves eviction by
 * hand-worked cases, invariants on random traces (ancestor-closed caches
 * within capacity, the event stream replaying to the final state), and
 * determinism. The whole-trace cross-check against an independent Python
 * simulation is tests/cli/kvreplay_mooncake.t. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kvix/hash.h"
#include "mooncake.h"

TEST(splitmix64_reference)
{
    uint64_t s = 0;
    CHECK_U64(kvix_splitmix64(&s), UINT64_C(0xe220a8397b1dcdaf));
    CHECK_U64(kvix_splitmix64(&s), UINT64_C(0x6e789e6aa1b965f4));
}

static int parse(const char *line, kvix_mooncake_req *r)
{
    return kvix_mooncake_parse(line, strlen(line), r, NULL);
}

TEST(parse_lines)
{
    kvix_mooncake_req r;
    kvix_mooncake_req_init(&r);
    CHECK(parse("{\"timestamp\": 27, \"input_length\": 6758, \"output_length\": 500, "
                "\"hash_ids\": [0, 1, 2]}", &r) == KVIX_OK);
    CHECK_U64(r.timestamp_ms, 27);
    CHECK_U64(r.input_length, 6758);
    CHECK_U64(r.output_length, 500);
    CHECK_U64(r.nids, 3);
    CHECK_U64(r.ids[2], 2);
    kvix_err err;
    CHECK(kvix_mooncake_parse("{\"timestamp\":1}", 15, &r, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "missing \"input_length\"");
    CHECK(parse("{\"timestamp\":1,\"input_length\":5}", &r) == KVIX_EINVAL);
    CHECK(parse("{\"timestamp\":-1,\"input_length\":5,\"hash_ids\":[]}", &r) == KVIX_ERANGE);
    CHECK(parse("{\"timestamp\":1,\"input_length\":5,\"hash_ids\":[4294967296]}", &r) ==
          KVIX_ERANGE);
    CHECK(parse("{\"timestamp\":1,\"input_length\":5,\"hash_ids\":[\"a\"]}", &r) == KVIX_EINVAL);
    CHECK(parse("{\"timestamp\":1,\"input_length\":5,\"hash_ids\":{}}", &r) == KVIX_EINVAL);
    CHECK(parse("[1,2]", &r) == KVIX_EINVAL);
    CHECK(parse("{\"timestamp\":1,", &r) == KVIX_EINVAL);
    CHECK_U64(r.nids, 0); /* a rejected line leaves no ids behind */
    kvix_mooncake_req_release(&r);
}

TEST(trace_reader_lines_and_ceiling)
{
    int p[2];
    CHECK(pipe(p) == 0);
    FILE *w = fdopen(p[1], "w");
    kvix_mooncake_trace *t;
    CHECK(kvix_mooncake_trace_new(&t, p[0], NULL) == KVIX_OK);
    /* Written from a child so the pipe never fills while we are not reading. */
    pid_t pid = fork();
    if (pid == 0) {
        fprintf(w, "{\"timestamp\":0,\"input_length\":512,\"hash_ids\":[7]}\r\n\n  \n");
        fputs("{\"timestamp\":1,\"input_length\":512,\"hash_ids\":[", w);
        for (unsigned i = 0; i < KVIX_MOONCAKE_LINE_MAX / 2; i++)
            fputs("1,", w);
        fputs("1]}\nnot json\n{\"timestamp\":3,\"input_length\":1024,\"hash_ids\":[1,2]}", w);
        fclose(w);
        _exit(0);
    }
    fclose(w);
    kvix_mooncake_req r;
    kvix_mooncake_req_init(&r);
    kvix_err err;
    CHECK(kvix_mooncake_trace_next(t, &r, &err) == KVIX_OK);
    CHECK_U64(r.ids[0], 7);
    CHECK_U64(kvix_mooncake_trace_line(t), 1);
    CHECK(kvix_mooncake_trace_next(t, &r, &err) == KVIX_ELIMIT);
    CHECK_U64(kvix_mooncake_trace_line(t), 4);
    CHECK(kvix_mooncake_trace_next(t, &r, &err) == KVIX_EINVAL);
    CHECK_U64(kvix_mooncake_trace_line(t), 5);
    CHECK(kvix_mooncake_trace_next(t, &r, &err) == KVIX_OK); /* no final newline */
    CHECK_U64(r.timestamp_ms, 3);
    CHECK_U64(r.nids, 2);
    CHECK(kvix_mooncake_trace_next(t, &r, &err) == KVIX_EOF);
    kvix_mooncake_trace_free(t);
    kvix_mooncake_req_release(&r);
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
}

/* -- a recorder of emitted records, and a replica that applies them */

#define REC_MAX 4096
typedef struct rec {
    int type;
    uint64_t worker, eid, parent;
    int has_parent;
    size_t n;
    uint64_t h[64];     /* stored: engine hashes; removed: hashes; query: locals */
    uint64_t local[64];
    size_t ntokens;
} rec;

typedef struct recorder {
    rec *r;
    size_t n;
    uint64_t digest;
} recorder;

static int record(void *ctx, const kvix_event *ev)
{
    recorder *c = ctx;
    rec *x = c->n < REC_MAX ? &c->r[c->n++] : NULL;
    uint64_t d = c->digest ^ (uint64_t)ev->type;
    d = kvix_hash_seq_next(d, ev->worker ^ ev->eid);
    size_t n = ev->type == KVIX_EV_STORED ? ev->nblocks : ev->nhashes;
    for (size_t i = 0; i < n; i++)
        d = kvix_hash_seq_next(d, ev->type == KVIX_EV_STORED ? ev->blocks[i].seq : ev->hashes[i]);
    c->digest = d;
    if (!x)
        return 0;
    memset(x, 0, sizeof *x);
    x->type = ev->type;
    x->worker = ev->worker;
    x->eid = ev->eid;
    x->parent = ev->parent;
    x->has_parent = ev->has_parent;
    x->n = n < 64 ? n : 64;
    x->ntokens = ev->ntokens;
    for (size_t i = 0; i < x->n; i++) {
        x->h[i] = ev->type == KVIX_EV_STORED ? ev->blocks[i].seq : ev->hashes[i];
        x->local[i] = ev->type == KVIX_EV_STORED ? ev->blocks[i].local : 0;
    }
    return 0;
}

static uint64_t local_of(uint32_t id)
{
    uint32_t t[KVIX_MOONCAKE_BS];
    for (size_t i = 0; i < KVIX_MOONCAKE_BS; i++)
        t[i] = id;
    return kvix_hash_local(t, KVIX_MOONCAKE_BS, KVIX_HASH_SEED);
}

/* Engine hash of the prefix ids[0..n). */
static uint64_t engine_of(const uint32_t *ids, size_t n)
{
    uint64_t h = local_of(ids[0]);
    for (size_t i = 1; i < n; i++)
        h = kvix_hash_seq_next(h, local_of(ids[i]));
    return h;
}

static void req(kvix_mooncake_req *r, uint64_t ts, uint64_t len, const uint32_t *ids, size_t n)
{
    r->timestamp_ms = ts;
    r->input_length = len;
    r->output_length = 1;
    r->nids = n;
    r->ids = (uint32_t *)ids;
}

static kvix_mooncake *sim(uint32_t workers, uint32_t capacity, int route, uint64_t seed)
{
    kvix_mooncake_opts o;
    kvix_mooncake_opts_init(&o);
    o.workers = workers;
    o.capacity = capacity;
    o.route = route;
    o.seed = seed;
    kvix_mooncake *m = NULL;
    CHECK(kvix_mooncake_new(&m, &o, NULL) == KVIX_OK);
    return m;
}

TEST(evicts_lru_leaves_only)
{
    kvix_mooncake *m = sim(1, 3, KVIX_ROUTE_RANDOM, 1);
    recorder c = {calloc(REC_MAX, sizeof(rec)), 0, 0};
    kvix_mooncake_req r;
    static const uint32_t a[] = {0, 1, 2}, b[] = {0, 1, 3}, cc[] = {4}, d[] = {0, 5, 6};
    req(&r, 1000, 1536, a, 3);
    CHECK(kvix_mooncake_step(m, &r, 0, record, &c, NULL) == KVIX_OK);
    CHECK_U64(c.n, 2);
    CHECK(c.r[0].type == KVIX_EV_QUERY);
    CHECK_U64(c.r[0].n, 3);
    CHECK_U64(c.r[0].h[1], local_of(1));
    CHECK(c.r[1].type == KVIX_EV_STORED);
    CHECK(!c.r[1].has_parent);
    CHECK_U64(c.r[1].n, 3);
    CHECK_U64(c.r[1].h[2], engine_of(a, 3));
    CHECK_U64(c.r[1].local[2], local_of(2));
    CHECK_U64(c.r[1].eid, 0);

    req(&r, 2000, 1536, b, 3); /* shares 0,1: evicts the leaf 2, stores 3 */
    c.n = 0;
    kvix_mooncake_step(m, &r, 1, record, &c, NULL);
    CHECK_U64(c.n, 3);
    CHECK(c.r[1].type == KVIX_EV_REMOVED);
    CHECK_U64(c.r[1].n, 1);
    CHECK_U64(c.r[1].h[0], engine_of(a, 3));
    CHECK_U64(c.r[1].eid, 1);
    CHECK(c.r[2].type == KVIX_EV_STORED && c.r[2].has_parent);
    CHECK_U64(c.r[2].parent, engine_of(a, 2));
    CHECK_U64(c.r[2].h[0], engine_of(b, 3));
    CHECK_U64(c.r[2].eid, 2);

    req(&r, 3000, 600, cc, 1); /* one whole block: the only leaf, 3, goes */
    c.n = 0;
    kvix_mooncake_step(m, &r, 2, record, &c, NULL);
    CHECK_U64(c.n, 3);
    CHECK_U64(c.r[1].h[0], engine_of(b, 3));

    /* Cache {0, 0-1, 4}. d touches 0; leaves are 0-1 (older) and 4: 0-1 goes
     * first, then 4 (0 is a leaf now but the newest). */
    req(&r, 4000, 1536, d, 3);
    c.n = 0;
    kvix_mooncake_step(m, &r, 3, record, &c, NULL);
    CHECK_U64(c.n, 3);
    CHECK_U64(c.r[1].n, 2);
    CHECK_U64(c.r[1].h[0], engine_of(a, 2));
    CHECK_U64(c.r[1].h[1], engine_of(cc, 1));
    CHECK_U64(c.r[2].parent, engine_of(d, 1));
    CHECK_U64(c.r[2].n, 2);

    kvix_mooncake_stats st;
    kvix_mooncake_stats_get(m, &st);
    CHECK_U64(st.requests, 4);
    CHECK_U64(st.stored_blocks, 7);
    CHECK_U64(st.removed_blocks, 4);
    CHECK_U64(st.cached_blocks, 3);
    CHECK_U64(st.hit_blocks, 3);
    CHECK_U64(st.partial_blocks, 0);
    kvix_mooncake_free(m);
    free(c.r);
}

TEST(partial_skipped_and_truncated)
{
    kvix_mooncake *m = sim(2, 2, KVIX_ROUTE_RANDOM, 0);
    recorder c = {calloc(REC_MAX, sizeof(rec)), 0, 0};
    kvix_mooncake_req r;
    static const uint32_t a[] = {0, 1, 2, 3, 4}, s[] = {9};
    req(&r, 0, 100, s, 1); /* no whole block: skipped, nothing emitted */
    kvix_mooncake_step(m, &r, 0, record, &c, NULL);
    CHECK_U64(c.n, 0);
    req(&r, 0, 5 * 512 - 1, a, 5); /* 4 whole blocks, capacity 2 */
    kvix_mooncake_step(m, &r, 1, record, &c, NULL);
    CHECK_U64(c.n, 2);
    CHECK_U64(c.r[0].n, 4); /* the query asks for every whole block */
    CHECK_U64(c.r[1].n, 2); /* but only capacity blocks are cached */
    kvix_mooncake_stats st;
    kvix_mooncake_stats_get(m, &st);
    CHECK_U64(st.skipped, 1);
    CHECK_U64(st.partial_blocks, 2);
    CHECK_U64(st.truncated_blocks, 2);
    kvix_mooncake_free(m);
    free(c.r);
}

TEST(best_route_follows_the_prefix)
{
    kvix_mooncake *m = sim(8, 100, KVIX_ROUTE_BEST, 42);
    recorder c = {calloc(REC_MAX, sizeof(rec)), 0, 0};
    kvix_mooncake_req r;
    static const uint32_t a[] = {0, 1, 2}, b[] = {0, 1, 3}, d[] = {7};
    req(&r, 0, 1536, a, 3);
    kvix_mooncake_step(m, &r, 0, record, &c, NULL);
    uint64_t w = c.r[1].worker;
    for (int i = 0; i < 5; i++) {
        req(&r, 0, 1536, b, 3);
        c.n = 0;
        kvix_mooncake_step(m, &r, 1, record, &c, NULL);
        if (i == 0)
            CHECK_U64(c.n, 2);
        else
            CHECK_U64(c.n, 1); /* all cached: only the query */
        if (i == 0)
            CHECK_U64(c.r[1].worker, w);
    }
    /* Without a shared prefix, ties are broken by the generator: over many
     * requests more than one worker is chosen. */
    uint64_t seen = 0;
    for (uint32_t i = 0; i < 64; i++) {
        uint32_t id = 100 + i;
        req(&r, 0, 512, &id, 1);
        c.n = 0;
        kvix_mooncake_step(m, &r, 2, record, &c, NULL);
        seen |= UINT64_C(1) << c.r[1].worker;
    }
    CHECK(seen != (UINT64_C(1) << w));
    (void)d;
    kvix_mooncake_free(m);
    free(c.r);
}

/* Random prefix-tree traces: the final cache is ancestor-closed, within
 * capacity, and equal to the emitted events applied to a replica. */
typedef struct replica {
    uint64_t *h;
    uint32_t *w;
    size_t n, cap;
} replica;

static long replica_find(const replica *rp, uint64_t w, uint64_t h)
{
    for (size_t i = 0; i < rp->n; i++)
        if (rp->h[i] == h && rp->w[i] == w)
            return (long)i;
    return -1;
}

static int apply(void *ctx, const kvix_event *ev)
{
    replica *rp = ctx;
    if (ev->type == KVIX_EV_STORED) {
        if (ev->has_parent)
            CHECK(replica_find(rp, ev->worker, ev->parent) >= 0);
        for (size_t i = 0; i < ev->nblocks; i++) {
            CHECK(replica_find(rp, ev->worker, ev->blocks[i].seq) < 0);
            if (rp->n == rp->cap) {
                rp->cap = rp->cap ? rp->cap * 2 : 256;
                rp->h = realloc(rp->h, rp->cap * sizeof *rp->h);
                rp->w = realloc(rp->w, rp->cap * sizeof *rp->w);
            }
            rp->h[rp->n] = ev->blocks[i].seq;
            rp->w[rp->n++] = (uint32_t)ev->worker;
        }
    } else if (ev->type == KVIX_EV_REMOVED) {
        for (size_t i = 0; i < ev->nhashes; i++) {
            long k = replica_find(rp, ev->worker, ev->hashes[i]);
            CHECK(k >= 0);
            if (k >= 0) {
                rp->h[k] = rp->h[rp->n - 1];
                rp->w[k] = rp->w[--rp->n];
            }
        }
    }
    return 0;
}

typedef struct final_check {
    const replica *rp;
    size_t n;
    uint32_t capacity;
    uint32_t per_worker[16];
} final_check;

static int check_final(void *ctx, uint64_t worker, uint64_t engine, uint64_t local, uint32_t depth)
{
    final_check *f = ctx;
    (void)local;
    (void)depth;
    CHECK(replica_find(f->rp, worker, engine) >= 0);
    f->per_worker[worker]++;
    f->n++;
    return 0;
}

static void random_trace(uint64_t seed, int route, kvix_mooncake_stats *out, uint64_t *digest)
{
    kvix_mooncake *m = sim(4, 12, route, seed);
    replica rp = {0};
    kvix_mooncake_req r;
    uint32_t ids[40];
    uint64_t rng = seed ^ 0x5eed;
    int nreq = (int)(300 * th_scale());
    recorder c = {NULL, REC_MAX, 0}; /* digest only */
    for (int q = 0; q < nreq; q++) {
        /* ids form a tree: id = parent * 3 + branch + 1 keeps one predecessor per id. */
        size_t n = 1 + kvix_splitmix64(&rng) % 20;
        uint32_t id = (uint32_t)(kvix_splitmix64(&rng) % 2);
        for (size_t i = 0; i < n; i++) {
            ids[i] = id;
            id = id * 3 + (uint32_t)(kvix_splitmix64(&rng) % 3) + 1;
        }
        req(&r, (uint64_t)q * 10, n * 512 - kvix_splitmix64(&rng) % 600, ids, n);
        CHECK(kvix_mooncake_step(m, &r, (uint64_t)q, apply, &rp, NULL) == KVIX_OK);
    }
    (void)c;
    final_check f = {&rp, 0, 12, {0}};
    kvix_mooncake_foreach(m, check_final, &f, NULL);
    CHECK_U64(f.n, rp.n);
    for (int w = 0; w < 4; w++)
        CHECK(f.per_worker[w] <= 12);
    kvix_mooncake_stats_get(m, out);
    CHECK_U64(out->cached_blocks, rp.n);
    CHECK_U64(out->stored_blocks - out->removed_blocks, rp.n);
    free(rp.h);
    free(rp.w);
    kvix_mooncake_free(m);

    /* The same run again, digested: determinism. */
    m = sim(4, 12, route, seed);
    recorder d = {calloc(REC_MAX, sizeof(rec)), 0, 0};
    rng = seed ^ 0x5eed;
    for (int q = 0; q < nreq; q++) {
        size_t n = 1 + kvix_splitmix64(&rng) % 20;
        uint32_t id = (uint32_t)(kvix_splitmix64(&rng) % 2);
        for (size_t i = 0; i < n; i++) {
            ids[i] = id;
            id = id * 3 + (uint32_t)(kvix_splitmix64(&rng) % 3) + 1;
        }
        req(&r, (uint64_t)q * 10, n * 512 - kvix_splitmix64(&rng) % 600, ids, n);
        d.n = 0;
        kvix_mooncake_step(m, &r, (uint64_t)q, record, &d, NULL);
    }
    *digest = d.digest;
    free(d.r);
    kvix_mooncake_free(m);
}

TEST(random_traces_replay_to_final_state)
{
    uint64_t seed = th_seed();
    for (int route = 0; route < 2; route++) {
        kvix_mooncake_stats a, b;
        uint64_t da, db;
        random_trace(seed, route, &a, &da);
        random_trace(seed, route, &b, &db);
        CHECK_U64(da, db);
        CHECK_U64(a.removed_blocks, b.removed_blocks);
        CHECK(a.removed_blocks > 0); /* capacity 12 is small enough to evict */
        CHECK(a.hit_blocks > 0);
    }
}

TEST(options_checked)
{
    kvix_mooncake_opts o;
    kvix_mooncake_opts_init(&o);
    CHECK_U64(o.workers, 256);
    CHECK_U64(o.capacity, 16384);
    kvix_mooncake *m;
    o.workers = 0;
    CHECK(kvix_mooncake_new(&m, &o, NULL) == KVIX_EINVAL);
    o.workers = KVIX_MOONCAKE_WORKERS_MAX + 1;
    CHECK(kvix_mooncake_new(&m, &o, NULL) == KVIX_ELIMIT);
    o.workers = 1;
    o.route = 9;
    CHECK(kvix_mooncake_new(&m, &o, NULL) == KVIX_EINVAL);
    o.route = KVIX_ROUTE_RANDOM;
    o.worker_ids = 9;
    CHECK(kvix_mooncake_new(&m, &o, NULL) == KVIX_EINVAL);
    o.worker_ids = KVIX_MOONCAKE_IDS_RANDOM;
    o.tokens = 1;
    o.model = "llama";
    CHECK(kvix_mooncake_new(&m, &o, NULL) == KVIX_OK);
    recorder c = {calloc(REC_MAX, sizeof(rec)), 0, 0};
    kvix_mooncake_req r;
    static const uint32_t a[] = {5, 6};
    req(&r, 1500, 1024, a, 2);
    kvix_mooncake_step(m, &r, 0, record, &c, NULL);
    CHECK_U64(c.r[1].ntokens, 1024);
    kvix_mooncake_free(m);
    free(c.r);
}

static int count_block(void *ctx, uint64_t worker, uint64_t engine, uint64_t local,
                       uint32_t depth)
{
    (void)worker;
    (void)engine;
    (void)local;
    (void)depth;
    ++*(size_t *)ctx;
    return 0;
}

static int no_event(void *ctx, const kvix_event *ev)
{
    (void)ctx;
    (void)ev;
    return 0;
}

TEST(state_written_one_block_a_line_in_foreach_order)
{
    kvix_mooncake *m = sim(3, 8, KVIX_ROUTE_RANDOM, 7);
    kvix_mooncake_req r;
    static const uint32_t a[] = {1, 2, 3, 4}, b[] = {1, 2, 9};
    req(&r, 0, 4 * 512, a, 4);
    CHECK(kvix_mooncake_step(m, &r, 0, no_event, NULL, NULL) == KVIX_OK);
    req(&r, 10, 3 * 512, b, 3);
    CHECK(kvix_mooncake_step(m, &r, 1, no_event, NULL, NULL) == KVIX_OK);
    kvix_mooncake_stats st;
    kvix_mooncake_stats_get(m, &st);
    size_t blocks = 0;
    kvix_mooncake_foreach(m, count_block, &blocks, NULL);
    CHECK(blocks >= 4);
    CHECK_U64(blocks, st.cached_blocks);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    kvix_err err;
    CHECK(kvix_mooncake_state_write(m, f, &err) == KVIX_OK);
    fclose(f);
    size_t lines = 0;
    unsigned last_worker = 0;
    for (char *p = text, *nl; p && (nl = strchr(p, '\n')); p = nl + 1) {
        unsigned w, d;
        char e[17], l[17];
        int used = 0;
        *nl = '\0';
        CHECK(sscanf(p, "%u %16[0-9a-f] %16[0-9a-f] %u%n", &w, e, l, &d, &used) == 4);
        CHECK_U64(strlen(e), 16);
        CHECK_U64(strlen(l), 16);
        CHECK_U64((size_t)used, strlen(p));
        CHECK(w < 3 && w >= last_worker && d < 4);
        last_worker = w;
        lines++;
    }
    CHECK_U64(lines, blocks);
    free(text);

    /* A stream that cannot be written: KVIX_EIO. */
    f = fopen("/dev/null", "r");
    CHECK(f != NULL);
    if (f) {
        CHECK(kvix_mooncake_state_write(m, f, &err) == KVIX_EIO);
        CHECK(strstr(err.msg, "cannot write the cache state") != NULL);
        fclose(f);
    }
    kvix_mooncake_free(m);
}

static kvix_mooncake *sim_ids(uint32_t workers, uint32_t copies, uint64_t seed, int ids)
{
    kvix_mooncake_opts o;
    kvix_mooncake_opts_init(&o);
    o.workers = workers;
    o.copies = copies;
    o.capacity = 6;
    o.seed = seed;
    o.worker_ids = ids;
    kvix_mooncake *m = NULL;
    CHECK(kvix_mooncake_new(&m, &o, NULL) == KVIX_OK);
    return m;
}

/* Random worker ids: distinct, below 2^63, fixed by the seed; the events
 * are the dense run's with each worker renamed (routing is unchanged), and
 * the final state lists the renamed workers in id order. */
TEST(random_worker_ids_rename_the_dense_run)
{
    enum { W = 5, K = 2, NREQ = 120 };
    kvix_mooncake *d = sim_ids(W, K, 3, KVIX_MOONCAKE_IDS_DENSE);
    kvix_mooncake *r = sim_ids(W, K, 3, KVIX_MOONCAKE_IDS_RANDOM);
    kvix_mooncake *again = sim_ids(W, K, 3, KVIX_MOONCAKE_IDS_RANDOM);
    kvix_mooncake *other = sim_ids(W, K, 4, KVIX_MOONCAKE_IDS_RANDOM);
    uint64_t ids[W * K];
    int same_as_other = 1;
    for (uint32_t i = 0; i < W * K; i++) {
        CHECK_U64(kvix_mooncake_worker(d, i), i);
        ids[i] = kvix_mooncake_worker(r, i);
        CHECK(ids[i] <= (uint64_t)KVIX_WORKER_MAX);
        CHECK(ids[i] >= W * K); /* not the dense numbering (odds 2^-59 a worker) */
        CHECK_U64(kvix_mooncake_worker(again, i), ids[i]);
        same_as_other &= kvix_mooncake_worker(other, i) == ids[i];
        for (uint32_t j = 0; j < i; j++)
            CHECK(ids[j] != ids[i]);
    }
    CHECK(!same_as_other);
    recorder cd = {calloc(REC_MAX, sizeof(rec)), 0, 0}, cr = {calloc(REC_MAX, sizeof(rec)), 0, 0};
    kvix_mooncake_req q;
    uint64_t rng = 11;
    for (uint64_t n = 0; n < NREQ; n++) {
        uint32_t hid[4];
        size_t nb = 1 + kvix_splitmix64(&rng) % 4;
        for (size_t i = 0; i < nb; i++)
            hid[i] = (uint32_t)(i ? hid[i - 1] * 3 + kvix_splitmix64(&rng) % 3 + 1
                                  : kvix_splitmix64(&rng) % 2); /* a tree, as random_trace's */
        req(&q, n, nb * 512, hid, nb);
        CHECK(kvix_mooncake_step(d, &q, n, record, &cd, NULL) == KVIX_OK);
        CHECK(kvix_mooncake_step(r, &q, n, record, &cr, NULL) == KVIX_OK);
    }
    CHECK_U64(cd.n, cr.n);
    CHECK(cd.n > NREQ); /* queries plus stored events */
    size_t removed = 0;
    for (size_t i = 0; i < cd.n && i < cr.n; i++) {
        CHECK(cd.r[i].type == cr.r[i].type);
        removed += cd.r[i].type == KVIX_EV_REMOVED;
        if (cd.r[i].type != KVIX_EV_QUERY) {
            CHECK(cd.r[i].worker < W * K);
            CHECK_U64(cr.r[i].worker, ids[cd.r[i].worker]);
        }
        uint64_t w = cr.r[i].worker;
        cr.r[i].worker = cd.r[i].worker;
        CHECK(memcmp(&cd.r[i], &cr.r[i], sizeof cd.r[i]) == 0);
        cr.r[i].worker = w;
    }
    CHECK(removed > 0); /* capacity 6 evicts */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(kvix_mooncake_state_write(r, f, NULL) == KVIX_OK);
    fclose(f);
    size_t lines = 0;
    unsigned long long last = 0;
    for (char *p = text, *nl; p && (nl = strchr(p, '\n')); p = nl + 1, lines++) {
        unsigned long long w;
        CHECK(sscanf(p, "%llu ", &w) == 1);
        CHECK(w >= last);
        int known = 0;
        for (uint32_t i = 0; i < W * K; i++)
            known |= ids[i] == w;
        CHECK(known);
        last = w;
    }
    kvix_mooncake_stats st;
    kvix_mooncake_stats_get(r, &st);
    CHECK_U64(lines, st.cached_blocks);
    CHECK(lines > 0);
    free(text);
    free(cd.r);
    free(cr.r);
    kvix_mooncake_free(d);
    kvix_mooncake_free(r);
    kvix_mooncake_free(again);
    kvix_mooncake_free(other);
}
