/* lib/index/index_bmap.c, the front end's keyless blocks map: randomized against
 * a plain array, with handles and with node numbers, keys whose homes
 * crowd into a few slots (long probes through tombstones), a full cache
 * that evicts as it stores (tombstones reused and cleaned, the table never
 * growing), a young map packed at its first deletion, iteration, and the
 * map given back when emptied. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "index_front_int.h"

typedef struct fnode {
    uint64_t engine;
    uint64_t pad;
} fnode; /* 16 bytes: node handles keep tiers in their low bits */

#define NKEYS 4000u
#define CHUNK (1u << KVIX_NODEDIR_SHIFT)

static fnode *nodes;     /* node k is key k's; number k + 2 (0 and 1 are no node) */
static uint64_t keys[NKEYS];
static _Atomic(kvix_nodedir *) dirp;

static uint64_t s;
static uint64_t rnd(void) { return th_splitmix(&s); }

/* Keys whose homes in a table of 1024 slots fall in [lo, lo + spread)
 * (and in a larger table's 1024-slot pieces alike): every probe runs
 * through the others' slots, and past the table's end when lo is near it. */
static void make_keys_at(unsigned lo, unsigned spread)
{
    for (unsigned k = 0; k < NKEYS; k++) {
        uint64_t e;
        do
            e = rnd();
        while ((((kvix_mix64(e) & 1023) - lo) & 1023) >= spread);
        keys[k] = e;
        nodes[k + 2].engine = e;
    }
}

static void make_keys(unsigned spread)
{
    make_keys_at(0, spread);
}

static bent handle(unsigned k, unsigned tiers)
{
    return (bent)(uintptr_t)&nodes[k + 2] | tiers;
}

static kvix_nodedir *nodedir_of(void *be)
{
    (void)be;
    return NULL;
}

static _Atomic(kvix_nodedir *) *numbered_dir(void *be)
{
    (void)be;
    return &dirp;
}

/* ops: the backend ops the map reads (engine_off, node_size, nodedir). */
static void run(const kvix_backend_ops *ops, unsigned spread, unsigned live_max, long steps)
{
    make_keys(spread);
    bmap m;
    kvix__ix_bm_init(&m, ops, NULL);
    unsigned char held[NKEYS] = {0}; /* tier mask, 0: absent */
    unsigned live = 0;
    int bad = 0;
    uint32_t cap_full = 0;
    for (long st = 0; st < steps && !bad; st++) {
        unsigned k = (unsigned)(rnd() % NKEYS);
        size_t at;
        bent e = kvix__ix_bm_get(&m, keys[k], &at);
        bad |= held[k] ? e != handle(k, held[k]) : e != 0;
        if (!held[k] && live < live_max) {
            unsigned t = 1u << (rnd() % 3);
            bad |= kvix__ix_bm_add_at(&m, at, keys[k], handle(k, t), k + 2) != 0;
            held[k] = (unsigned char)t;
            live++;
        } else if (held[k]) {
            if (rnd() % 4 == 0 && held[k] != 7) { /* another tier: the same entry */
                held[k] |= (unsigned char)(1u << (rnd() % 3));
                kvix__ix_bm_set(&m, at, keys[k], handle(k, held[k]));
            } else {
                kvix__ix_bm_del_at(&m, at, keys[k]);
                held[k] = 0;
                live--;
            }
        } else { /* full: evict one, then store this one (a full cache) */
            unsigned v = (unsigned)(rnd() % NKEYS);
            while (!held[v])
                v = (v + 1) % NKEYS;
            kvix__ix_bm_del(&m, keys[v]);
            held[v] = 0;
            e = kvix__ix_bm_get(&m, keys[k], &at);
            bad |= e != 0;
            bad |= kvix__ix_bm_add_at(&m, at, keys[k], handle(k, 1), k + 2) != 0;
            held[k] = 1;
            if (!cap_full)
                cap_full = m.cap;
            bad |= m.cap != cap_full; /* churn at a constant size never grows the table */
        }
        bad |= kvix_ix_bm_size(&m) != live;
        bad |= m.cap && ((size_t)m.n + m.tomb) * 5 > (size_t)m.cap * 4; /* a probe always ends */
        if (st % 20000 == 0 || st == steps - 1) { /* the whole content by iteration */
            size_t it = 0, n = 0;
            uint64_t eng;
            while ((e = kvix__ix_bm_next(&m, &it, &eng))) {
                n++;
                unsigned j = (unsigned)((fnode *)bent_node(e) - nodes) - 2;
                bad |= j >= NKEYS || keys[j] != eng || e != handle(j, held[j]);
            }
            bad |= n != live;
        }
    }
    CHECK(!bad);
    CHECK(cap_full == 0 || m.cap == cap_full);
    /* the tombstones a churn leaves are reused or cleaned: memory follows the entries */
    if (live > 64)
        CHECK(kvix__ix_bm_memory(&m) <= (size_t)live * (1 + (ops->nodedir ? 4u : 8u)) * 5);
    for (unsigned k = 0; k < NKEYS; k++)
        if (held[k])
            kvix__ix_bm_del(&m, keys[k]);
    CHECK_U64(kvix_ix_bm_size(&m), 0);
    CHECK_U64(kvix__ix_bm_memory(&m), 0); /* emptied: given back */
    CHECK_U64(m.tomb, 0);
    kvix__ix_bm_release(&m);
}

static kvix_backend_ops handles_ops, numbered_ops;

static void setup(void)
{
    nodes = aligned_alloc(KVIX_NODE_ALIGN, CHUNK * sizeof *nodes);
    memset(nodes, 0, CHUNK * sizeof *nodes);
    kvix_nodedir *d = malloc(sizeof *d + sizeof(char *));
    d->prev = NULL;
    d->cap = 1;
    d->c[0] = (char *)nodes;
    atomic_store(&dirp, d);
    handles_ops.engine_off = numbered_ops.engine_off = offsetof(fnode, engine);
    handles_ops.node_size = numbered_ops.node_size = sizeof(fnode);
    handles_ops.nodedir = NULL;
    numbered_ops.nodedir = numbered_dir;
    (void)nodedir_of;
}

static void teardown(void)
{
    free(atomic_load(&dirp));
    free(nodes);
}

TEST(bmap_random_handles)
{
    s = th_seed();
    setup();
    long steps = (long)(300000 * th_scale());
    run(&handles_ops, 1024, NKEYS, steps);
    run(&handles_ops, 8, 600, steps); /* crowded homes: long probes through tombstones */
    teardown();
}

TEST(bmap_random_numbers)
{
    s = th_seed() * 5;
    setup();
    long steps = (long)(300000 * th_scale());
    run(&numbered_ops, 1024, NKEYS, steps);
    run(&numbered_ops, 8, 600, steps);
    teardown();
}

/* A worker whose cache is full evicts its oldest block for each it stores:
 * its first deletion packs the table it grew while young to at most twice
 * its entries, then the map stays at one size, its deletions leave
 * tombstones that later adds reuse or a clean rebuild removes, and every
 * block is found. */
TEST(bmap_full_cache_churn)
{
    s = th_seed() * 7;
    setup();
    make_keys(256);
    bmap m;
    kvix__ix_bm_init(&m, &numbered_ops, NULL);
    enum { CAP = 512 };
    unsigned ring[CAP], head = 0, next = 0;
    for (; next < CAP; next++) {
        CHECK(kvix__ix_bm_add(&m, keys[next], handle(next, 1), next + 2) == 0);
        ring[next] = next;
    }
    uint32_t cap = m.cap;
    int bad = 0, saw_tomb = 0, reused = 0;
    for (long st = 0; st < (long)(200000 * th_scale()) && !bad; st++) {
        unsigned old = ring[head];
        kvix__ix_bm_del(&m, keys[old]);
        unsigned k = next++ % NKEYS;
        size_t at;
        bad |= kvix__ix_bm_get(&m, keys[k], &at) != 0;
        uint32_t tomb = m.tomb;
        bad |= kvix__ix_bm_add_at(&m, at, keys[k], handle(k, 1), k + 2) != 0;
        reused |= tomb > 0 && m.tomb == tomb - 1; /* stored where a deletion left a tombstone */
        ring[head] = k;
        head = (head + 1) % CAP;
        saw_tomb |= m.tomb > 0;
        if (st == 0) {
            CHECK(m.cap < cap && m.cap <= 2 * CAP); /* the first deletion packed it */
            cap = m.cap;
        }
        bad |= m.cap != cap || kvix_ix_bm_size(&m) != CAP;
        if (st % 1000 == 0)
            for (unsigned i = 0; i < CAP; i++)
                bad |= kvix__ix_bm_get(&m, keys[ring[i]], NULL) != handle(ring[i], 1);
    }
    CHECK(!bad);
    CHECK(m.cap <= 2 * CAP); /* packed */
    CHECK(saw_tomb); /* deletions inside clusters leave tombstones, not shifts */
    CHECK(reused);   /* which adds take again before the table needs cleaning */
    kvix__ix_bm_release(&m);
    teardown();
}

/* A young map (only adds so far) grows fourfold; its first deletion halves
 * it, without reading a node, to at most twice its entries: every entry is
 * still found, with crowded homes too (long clusters, some across the
 * table's end), and the map goes on as any other. */
static void young_pack(const kvix_backend_ops *ops, unsigned n)
{
    bmap m;
    kvix__ix_bm_init(&m, ops, NULL);
    for (unsigned k = 0; k < n; k++)
        CHECK(kvix__ix_bm_add(&m, keys[k], handle(k, 1), k + 2) == 0);
    uint32_t grown = m.cap;
    unsigned d = (unsigned)(rnd() % n), live = n - 1;
    kvix__ix_bm_del(&m, keys[d]);
    CHECK(m.cap <= grown && (m.cap == grown || (size_t)live * 2 <= m.cap));
    CHECK(m.cap / 2 < KVIX_HM_MIN_CAP || (size_t)live * 2 > m.cap / 2 || m.cap == grown);
    int bad = kvix__ix_bm_get(&m, keys[d], NULL) != 0;
    for (unsigned k = 0; k < n; k++)
        bad |= k != d && kvix__ix_bm_get(&m, keys[k], NULL) != handle(k, 1);
    /* then adds and deletions as ever */
    for (unsigned k = n; k < n + 50 && k < NKEYS; k++, live++)
        bad |= kvix__ix_bm_add(&m, keys[k], handle(k, 2), k + 2) != 0;
    for (unsigned k = 0; k < n + 50 && k < NKEYS; k++)
        if (k != d && rnd() % 3 == 0) {
            kvix__ix_bm_del(&m, keys[k]);
            live--;
            bad |= kvix__ix_bm_get(&m, keys[k], NULL) != 0;
        }
    bad |= kvix_ix_bm_size(&m) != live;
    CHECK(!bad);
    kvix__ix_bm_release(&m);
}

TEST(bmap_young_pack)
{
    s = th_seed() * 11;
    setup();
    static const unsigned at[][2] = {{0, 1024}, {0, 8}, {1012, 24}};
    static const unsigned sizes[] = {3, 20, 90, 300, 700, 1500, 3000};
    for (unsigned o = 0; o < 2; o++)
        for (unsigned a = 0; a < sizeof at / sizeof at[0]; a++) {
            make_keys_at(at[a][0], at[a][1]);
            for (unsigned z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
                young_pack(o ? &numbered_ops : &handles_ops, sizes[z]);
        }
    teardown();
}
