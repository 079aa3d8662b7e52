/* The Mooncake simulator: a trace's requests played against a fleet of
 * prefix caches, as the events their engines would publish (the rules are in
 * cmd/tools/mooncake.h). Reading the trace is cmd/tools/mooncake_trace.c. */
#include "mooncake.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvix/hash.h"

uint64_t kvix_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* n distinct ids below 2^63 drawn from the seed (a generator of their own:
 * routing draws as with dense ids); a draw with a repeat (odds about
 * n^2 / 2^64) is drawn again whole, from where the generator stands. */
static int draw_ids(uint64_t *ids, uint32_t n, uint64_t seed, kvix_err *err)
{
    uint64_t *sorted = malloc(n * sizeof *sorted);
    if (!sorted)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    uint64_t g = seed ^ UINT64_C(0x1d5c0ffee0dd1d5);
    for (int dup = 1; dup;) {
        for (uint32_t i = 0; i < n; i++)
            ids[i] = sorted[i] = kvix_splitmix64(&g) & (uint64_t)KVIX_WORKER_MAX;
        qsort(sorted, n, sizeof *sorted, u64_cmp);
        dup = 0;
        for (uint32_t i = 1; i < n; i++)
            dup |= sorted[i] == sorted[i - 1];
    }
    free(sorted);
    return KVIX_OK;
}

typedef struct node {
    uint64_t engine, local, stamp;
    uint32_t worker, depth, nchildren;
    int32_t parent;   /* node index, -1 at the root; next free node when free */
    int32_t heap_pos; /* index in the worker's leaf heap, -1 when not a leaf */
} node;

typedef struct worker {
    int32_t *heap;    /* leaves, min-heap by stamp */
    size_t nheap, cap;
    uint32_t size;    /* blocks cached */
    uint64_t eid;
} worker;

struct kvix_mooncake {
    kvix_mooncake_opts o;
    uint32_t nw; /* workers x copies */
    char model[KVIX_NAME_MAX];
    uint64_t *rng; /* per copy: copy k draws from seed + k */
    uint64_t *ids; /* worker ids, with KVIX_MOONCAKE_IDS_RANDOM (else NULL: ids are i) */
    uint64_t clock;
    worker *w;
    node *nodes;
    size_t nnodes, cap_nodes;
    int32_t free_node;
    int32_t *slots;   /* open addressing on (worker, engine); -1 empty */
    size_t nslots, used;
    uint64_t *local, *engine; /* the current request's blocks */
    int32_t *path;            /* its cached nodes */
    uint32_t *tied;
    size_t cap_req;
    kvix_event ev;
    kvix_mooncake_stats st;
};

uint64_t kvix_mooncake_worker(const kvix_mooncake *m, uint32_t i)
{
    return m->ids ? m->ids[i] : i;
}

void kvix_mooncake_opts_init(kvix_mooncake_opts *o)
{
    memset(o, 0, sizeof *o);
    o->workers = 256;
    o->capacity = 16384;
    o->route = KVIX_ROUTE_RANDOM;
    o->queries = 1;
    o->copies = 1;
}

int kvix_mooncake_new(kvix_mooncake **out, const kvix_mooncake_opts *o, kvix_err *err)
{
    *out = NULL;
    if (o->workers == 0 || o->capacity == 0)
        return kvix_err_set(err, KVIX_EINVAL, "need at least one worker and one block");
    if (o->workers > KVIX_MOONCAKE_WORKERS_MAX || o->capacity > KVIX_MOONCAKE_CAPACITY_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "at most %u workers of %u blocks",
                            KVIX_MOONCAKE_WORKERS_MAX, KVIX_MOONCAKE_CAPACITY_MAX);
    if (o->route != KVIX_ROUTE_RANDOM && o->route != KVIX_ROUTE_BEST)
        return kvix_err_set(err, KVIX_EINVAL, "unknown route");
    if (o->worker_ids != KVIX_MOONCAKE_IDS_DENSE && o->worker_ids != KVIX_MOONCAKE_IDS_RANDOM)
        return kvix_err_set(err, KVIX_EINVAL, "unknown kind of worker ids");
    uint32_t copies = o->copies ? o->copies : 1;
    if (copies > KVIX_MOONCAKE_COPIES_MAX ||
        (uint64_t)o->workers * copies > KVIX_MOONCAKE_WORKERS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT,
                            "%u copies of %u workers: at most %u copies and %u workers in all",
                            copies, o->workers, KVIX_MOONCAKE_COPIES_MAX,
                            KVIX_MOONCAKE_WORKERS_MAX);
    kvix_mooncake *m = calloc(1, sizeof *m);
    if (!m || !(m->w = calloc((size_t)o->workers * copies, sizeof *m->w)) ||
        !(m->tied = malloc(o->workers * sizeof *m->tied)) ||
        !(m->rng = malloc(copies * sizeof *m->rng)) ||
        !(m->slots = malloc(1024 * sizeof *m->slots))) {
        if (m) {
            free(m->w);
            free(m->tied);
            free(m->rng);
        }
        free(m);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    m->o = *o;
    m->o.copies = copies;
    m->nw = o->workers * copies;
    int rc = kvix_event_set_name(m->model, o->model ? o->model : "default",
                                 strlen(o->model ? o->model : "default"), err);
    if (rc) {
        kvix_mooncake_free(m);
        return rc;
    }
    m->o.model = m->model;
    if (o->worker_ids == KVIX_MOONCAKE_IDS_RANDOM) {
        m->ids = malloc(m->nw * sizeof *m->ids);
        rc = m->ids ? draw_ids(m->ids, m->nw, o->seed, err)
                    : kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        if (rc) {
            kvix_mooncake_free(m);
            return rc;
        }
    }
    for (uint32_t k = 0; k < copies; k++)
        m->rng[k] = o->seed + k;
    m->nslots = 1024;
    memset(m->slots, 0xff, 1024 * sizeof *m->slots);
    m->free_node = -1;
    kvix_event_init(&m->ev);
    *out = m;
    return KVIX_OK;
}

void kvix_mooncake_free(kvix_mooncake *m)
{
    if (!m)
        return;
    if (m->w)
        for (uint32_t i = 0; i < m->nw; i++)
            free(m->w[i].heap);
    free(m->w);
    free(m->nodes);
    free(m->slots);
    free(m->local);
    free(m->engine);
    free(m->path);
    free(m->tied);
    free(m->rng);
    free(m->ids);
    kvix_event_release(&m->ev);
    free(m);
}

void kvix_mooncake_stats_get(const kvix_mooncake *m, kvix_mooncake_stats *out)
{
    *out = m->st;
}

/* -- the (worker, engine hash) -> node table: linear probing, backward-shift
 *    deletion (no tombstones: blocks come and go all the time). */

static size_t slot_of(const kvix_mooncake *m, uint32_t w, uint64_t engine)
{
    uint64_t h = engine ^ ((uint64_t)w * UINT64_C(0x9E3779B97F4A7C15));
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    return (size_t)h & (m->nslots - 1);
}

static int32_t lookup(const kvix_mooncake *m, uint32_t w, uint64_t engine)
{
    for (size_t i = slot_of(m, w, engine);; i = (i + 1) & (m->nslots - 1)) {
        int32_t n = m->slots[i];
        if (n < 0)
            return -1;
        if (m->nodes[n].engine == engine && m->nodes[n].worker == w)
            return n;
    }
}

static void slot_put(kvix_mooncake *m, int32_t n)
{
    size_t i = slot_of(m, m->nodes[n].worker, m->nodes[n].engine);
    while (m->slots[i] >= 0)
        i = (i + 1) & (m->nslots - 1);
    m->slots[i] = n;
    m->used++;
}

static int grow_slots(kvix_mooncake *m, kvix_err *err)
{
    if ((m->used + 1) * 2 <= m->nslots)
        return KVIX_OK;
    size_t ns = m->nslots * 2;
    int32_t *s = malloc(ns * sizeof *s);
    if (!s)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu cached blocks", m->used);
    int32_t *old = m->slots;
    size_t on = m->nslots;
    m->slots = s;
    m->nslots = ns;
    m->used = 0;
    memset(s, 0xff, ns * sizeof *s);
    for (size_t i = 0; i < on; i++)
        if (old[i] >= 0)
            slot_put(m, old[i]);
    free(old);
    return KVIX_OK;
}

static void slot_del(kvix_mooncake *m, int32_t n)
{
    size_t mask = m->nslots - 1;
    size_t i = slot_of(m, m->nodes[n].worker, m->nodes[n].engine);
    while (m->slots[i] != n)
        i = (i + 1) & mask;
    /* Shift later members of the cluster back over the hole when their home
     * slot does not lie cyclically in (hole, their position]. */
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        int32_t x = m->slots[j];
        if (x < 0)
            break;
        size_t home = slot_of(m, m->nodes[x].worker, m->nodes[x].engine);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->slots[i] = x;
            i = j;
        }
    }
    m->slots[i] = -1;
    m->used--;
}

/* -- per-worker leaf heap, by stamp */

static int before(const kvix_mooncake *m, int32_t a, int32_t b)
{
    return m->nodes[a].stamp < m->nodes[b].stamp;
}

static void heap_set(kvix_mooncake *m, worker *w, size_t i, int32_t n)
{
    w->heap[i] = n;
    m->nodes[n].heap_pos = (int32_t)i;
}

static void sift_up(kvix_mooncake *m, worker *w, size_t i)
{
    int32_t n = w->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(m, n, w->heap[p]))
            break;
        heap_set(m, w, i, w->heap[p]);
        i = p;
    }
    heap_set(m, w, i, n);
}

static void sift_down(kvix_mooncake *m, worker *w, size_t i)
{
    int32_t n = w->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->nheap)
            break;
        if (c + 1 < w->nheap && before(m, w->heap[c + 1], w->heap[c]))
            c++;
        if (!before(m, w->heap[c], n))
            break;
        heap_set(m, w, i, w->heap[c]);
        i = c;
    }
    heap_set(m, w, i, n);
}

static int heap_push(kvix_mooncake *m, worker *w, int32_t n, kvix_err *err)
{
    if (w->nheap == w->cap) {
        size_t c = w->cap ? w->cap * 2 : 64;
        int32_t *h = realloc(w->heap, c * sizeof *h);
        if (!h)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a worker's cache");
        w->heap = h;
        w->cap = c;
    }
    w->heap[w->nheap++] = n;
    sift_up(m, w, w->nheap - 1);
    return KVIX_OK;
}

static void heap_remove(kvix_mooncake *m, worker *w, int32_t n)
{
    size_t i = (size_t)m->nodes[n].heap_pos;
    m->nodes[n].heap_pos = -1;
    int32_t last = w->heap[--w->nheap];
    if (i == w->nheap)
        return;
    heap_set(m, w, i, last);
    sift_up(m, w, i);
    sift_down(m, w, (size_t)m->nodes[last].heap_pos);
}

/* -- nodes */

static int node_new(kvix_mooncake *m, int32_t *out, kvix_err *err)
{
    if (m->free_node >= 0) {
        *out = m->free_node;
        m->free_node = m->nodes[*out].parent;
        return KVIX_OK;
    }
    if (m->nnodes == m->cap_nodes) {
        size_t c = m->cap_nodes ? m->cap_nodes * 2 : 1024;
        if (c > (size_t)INT32_MAX)
            return kvix_err_set(err, KVIX_ELIMIT, "more than %d cached blocks", INT32_MAX);
        node *p = realloc(m->nodes, c * sizeof *p);
        if (!p)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu cached blocks", c);
        m->nodes = p;
        m->cap_nodes = c;
    }
    *out = (int32_t)m->nnodes++;
    return KVIX_OK;
}

/* Evict the worker's least recently used leaf; its engine hash goes to ev. */
static void evict_one(kvix_mooncake *m, uint32_t wi)
{
    worker *w = &m->w[wi];
    int32_t n = w->heap[0];
    heap_remove(m, w, n);
    node *x = &m->nodes[n];
    m->ev.hashes[m->ev.nhashes++] = x->engine;
    slot_del(m, n);
    if (x->parent >= 0) {
        node *p = &m->nodes[x->parent];
        /* The parent was not a leaf while x existed; now it may be. Its
         * stamp keeps its place in recency order. heap_push cannot fail
         * here: the heap just lost an element. */
        if (--p->nchildren == 0)
            heap_push(m, w, x->parent, NULL);
    }
    x->parent = m->free_node;
    m->free_node = n;
    w->size--;
    m->st.cached_blocks--;
}

static int reserve_req(kvix_mooncake *m, size_t n, kvix_err *err)
{
    if (n <= m->cap_req)
        return KVIX_OK;
    size_t c = m->cap_req ? m->cap_req : 64;
    while (c < n)
        c *= 2;
    uint64_t *a = realloc(m->local, c * sizeof *a);
    if (a)
        m->local = a;
    uint64_t *b = a ? realloc(m->engine, c * sizeof *b) : NULL;
    if (b)
        m->engine = b;
    int32_t *p = b ? realloc(m->path, c * sizeof *p) : NULL;
    if (!p)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a %zu-block request", n);
    m->path = p;
    m->cap_req = c;
    return KVIX_OK;
}

static uint32_t cached_prefix(const kvix_mooncake *m, uint32_t w, size_t n)
{
    uint32_t k = 0;
    while (k < n && lookup(m, w, m->engine[k]) >= 0)
        k++;
    return k;
}

/* A worker of copy c: c * workers .. (c + 1) * workers - 1. */
static uint32_t route(kvix_mooncake *m, size_t n, uint32_t copy)
{
    uint32_t base = copy * m->o.workers;
    uint64_t draw = kvix_splitmix64(&m->rng[copy]);
    if (m->o.route == KVIX_ROUTE_RANDOM)
        return base + (uint32_t)(draw % m->o.workers);
    uint32_t best = 0, ntied = 0;
    for (uint32_t w = base; w < base + m->o.workers; w++) {
        uint32_t k = cached_prefix(m, w, n);
        if (k > best || ntied == 0) {
            best = k;
            ntied = 0;
        }
        if (k == best)
            m->tied[ntied++] = w;
    }
    return m->tied[draw % ntied];
}

static void event_base(kvix_mooncake *m, int type, uint32_t w, double ts)
{
    kvix_event_reset(&m->ev);
    m->ev.type = type;
    memcpy(m->ev.model, m->model, sizeof m->model);
    m->ev.has_ts = 1;
    m->ev.ts = ts;
    if (type != KVIX_EV_QUERY) {
        m->ev.worker = kvix_mooncake_worker(m, w);
        m->ev.has_eid = 1;
        m->ev.eid = m->w[w].eid++;
    }
}

/* Copy k of K splits the token space in K equal ranges: hash id x plays as
 * x + k * (2^32 / K), the token of its blocks (so copy 0 keeps the trace's
 * tokens and hashes). */
static inline uint64_t copy_stride(const kvix_mooncake *m)
{
    return (UINT64_C(1) << 32) / m->o.copies;
}

static inline uint32_t copy_id(const kvix_mooncake *m, uint32_t x, uint32_t k)
{
    return (uint32_t)(x + k * copy_stride(m));
}

static int step_copy(kvix_mooncake *m, const kvix_mooncake_req *r, uint64_t id, uint32_t k,
                     kvix_mooncake_emit_fn fn, void *ctx, kvix_err *err)
{
    size_t full = r->input_length / KVIX_MOONCAKE_BS;
    if (full > r->nids)
        full = r->nids; /* a line with fewer ids than its length says: trust the ids */
    m->st.partial_blocks += r->nids - full;
    if (full == 0) {
        m->st.skipped++;
        return KVIX_OK;
    }
    int rc = reserve_req(m, full, err);
    if (rc)
        return rc;
    uint64_t prev = 0;
    for (size_t i = 0; i < full; i++) {
        uint32_t t[KVIX_MOONCAKE_BS];
        for (size_t j = 0; j < KVIX_MOONCAKE_BS; j++)
            t[j] = copy_id(m, r->ids[i], k);
        m->local[i] = kvix_hash_local(t, KVIX_MOONCAKE_BS, KVIX_HASH_SEED);
        m->engine[i] = i ? kvix_hash_seq_next(prev, m->local[i]) : m->local[i];
        prev = m->engine[i];
    }
    double ts = (double)r->timestamp_ms / 1000.0;
    m->st.requests++;
    m->st.query_blocks += full;
    uint32_t wi = route(m, full, k);
    worker *w = &m->w[wi];

    if (m->o.queries) {
        event_base(m, KVIX_EV_QUERY, 0, ts);
        m->ev.has_id = 1;
        snprintf(m->ev.id, sizeof m->ev.id, "%" PRIu64, id * m->o.copies + k);
        if ((rc = kvix_event_reserve_hashes(&m->ev, full, err)))
            return rc;
        memcpy(m->ev.hashes, m->local, full * sizeof *m->local);
        m->ev.nhashes = full;
        if ((rc = fn(ctx, &m->ev)))
            return rc;
    }

    /* Touch the cached prefix: it becomes the most recently used. */
    uint32_t hit = 0;
    for (; hit < full; hit++) {
        int32_t n = lookup(m, wi, m->engine[hit]);
        if (n < 0)
            break;
        m->path[hit] = n;
        m->nodes[n].stamp = ++m->clock;
        if (m->nodes[n].heap_pos >= 0)
            sift_down(m, w, (size_t)m->nodes[n].heap_pos);
    }
    m->st.hit_blocks += hit;
    size_t limit = full < m->o.capacity ? full : m->o.capacity;
    m->st.truncated_blocks += full - limit;
    size_t nstore = limit > hit ? limit - hit : 0;
    if (nstore == 0)
        return KVIX_OK;

    if (w->size + nstore > m->o.capacity) {
        event_base(m, KVIX_EV_REMOVED, wi, ts);
        size_t need = w->size + nstore - m->o.capacity;
        if ((rc = kvix_event_reserve_hashes(&m->ev, need, err)))
            return rc;
        /* The touched prefix holds the newest stamps and at most capacity -
         * nstore blocks, so every eviction finds an older leaf off the path. */
        while (need--)
            evict_one(m, wi);
        m->st.removed_events++;
        m->st.removed_blocks += m->ev.nhashes;
        if ((rc = fn(ctx, &m->ev)))
            return rc;
    }

    event_base(m, KVIX_EV_STORED, wi, ts);
    m->ev.bs = KVIX_MOONCAKE_BS;
    if (hit) {
        m->ev.has_parent = 1;
        m->ev.parent = m->engine[hit - 1];
    }
    if ((rc = kvix_event_reserve_blocks(&m->ev, nstore, err)))
        return rc;
    if (m->o.tokens) {
        if ((rc = kvix_event_reserve_tokens(&m->ev, nstore * KVIX_MOONCAKE_BS, err)))
            return rc;
        m->ev.has_tokens = 1;
    }
    int32_t parent = hit ? m->path[hit - 1] : -1;
    for (size_t i = hit; i < limit; i++) {
        int32_t n = -1;
        if ((rc = grow_slots(m, err)) || (rc = node_new(m, &n, err)))
            return rc;
        node *x = &m->nodes[n];
        x->engine = m->engine[i];
        x->local = m->local[i];
        x->worker = wi;
        x->depth = (uint32_t)i;
        x->nchildren = 0;
        x->parent = parent;
        x->heap_pos = -1;
        x->stamp = ++m->clock;
        slot_put(m, n);
        if (parent >= 0 && m->nodes[parent].nchildren++ == 0 && m->nodes[parent].heap_pos >= 0)
            heap_remove(m, w, parent);
        if ((rc = heap_push(m, w, n, err)))
            return rc;
        w->size++;
        m->st.cached_blocks++;
        parent = n;
        kvix_block *b = &m->ev.blocks[m->ev.nblocks++];
        b->local = m->local[i];
        b->seq = m->engine[i];
        if (m->o.tokens) {
            for (size_t j = 0; j < KVIX_MOONCAKE_BS; j++)
                m->ev.tokens[m->ev.ntokens++] = copy_id(m, r->ids[i], k);
        }
    }
    m->st.stored_events++;
    m->st.stored_blocks += nstore;
    return fn(ctx, &m->ev);
}

int kvix_mooncake_step(kvix_mooncake *m, const kvix_mooncake_req *r, uint64_t id,
                       kvix_mooncake_emit_fn fn, void *ctx, kvix_err *err)
{
    uint32_t copies = m->o.copies;
    if (copies > 1) {
        for (size_t i = 0; i < r->nids; i++)
            if (r->ids[i] >= copy_stride(m))
                return kvix_err_set(err, KVIX_ERANGE,
                                    "hash id %" PRIu32 " too large for %" PRIu32 " copies",
                                    r->ids[i], copies);
        if (id > (UINT64_MAX - (copies - 1)) / copies)
            return kvix_err_set(err, KVIX_ERANGE, "request %" PRIu64 " too late for %" PRIu32
                                " copies", id, copies);
    }
    for (uint32_t k = 0; k < copies; k++) {
        int rc = step_copy(m, r, id, k, fn, ctx, err);
        if (rc)
            return rc;
    }
    return KVIX_OK;
}

typedef struct visit {
    uint64_t worker, engine, local;
    uint32_t depth;
} visit;

static int visit_cmp(const void *a, const void *b)
{
    const visit *x = a, *y = b;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return x->engine < y->engine ? -1 : x->engine > y->engine;
}

int kvix_mooncake_foreach(kvix_mooncake *m, kvix_mooncake_block_fn fn, void *ctx, kvix_err *err)
{
    size_t n = 0;
    visit *v = malloc((m->st.cached_blocks ? m->st.cached_blocks : 1) * sizeof *v);
    if (!v)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    for (size_t i = 0; i < m->nslots; i++) {
        int32_t x = m->slots[i];
        if (x < 0)
            continue;
        const node *d = &m->nodes[x];
        v[n++] = (visit){kvix_mooncake_worker(m, d->worker), d->engine, d->local, d->depth};
    }
    qsort(v, n, sizeof *v, visit_cmp);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = fn(ctx, v[i].worker, v[i].engine, v[i].local, v[i].depth);
    free(v);
    return rc;
}

static int write_block(void *ctx, uint64_t w, uint64_t engine, uint64_t local, uint32_t depth)
{
    char e[17], l[17];
    kvix_hex64(engine, e);
    kvix_hex64(local, l);
    return fprintf(ctx, "%" PRIu64 " %s %s %" PRIu32 "\n", w, e, l, depth) < 0;
}

int kvix_mooncake_state_write(kvix_mooncake *m, FILE *f, kvix_err *err)
{
    int rc = kvix_mooncake_foreach(m, write_block, f, err);
    if (rc < 0)
        return rc;
    if (rc || ferror(f))
        return kvix_err_set(err, KVIX_EIO, "cannot write the cache state: %s", strerror(errno));
    return KVIX_OK;
}
