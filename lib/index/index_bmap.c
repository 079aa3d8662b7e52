/* The (worker, dp) blocks map of the index front end (lib/index/index_front_int.h):
 * engine hash -> bent (node handle | tier mask), 9 bytes a slot, or 5 with a
 * backend that numbers its nodes (kvix_backend_ops.nodedir).
 *
 * A node keeps the engine hash it was made under (kvix_backend_ops.
 * engine_off), and workers that hash alike store a block under that same
 * engine hash, so the main table does not store keys: a slot is the bent
 * and a control byte (empty, or 7 bits of the key's hash), and a key is
 * compared with its node's engine hash. Entries whose engine hash is not
 * their node's go to `other`, a plain keyed map. Linear probing, load
 * between 10% and 80% (as kvix_hmap), live entries and tombstones counted
 * together.
 *
 * Deletion leaves a tombstone (or an empty slot when the next slot is
 * empty: no probe runs through it then), not a backward shift as kvix_hmap:
 * a shift reads the node of every entry it passes for the entry's home
 * (slots keep no key), a cache miss each in a large index, and a worker
 * whose cache is full evicts a block for every block it stores. Adds take
 * the first tombstone of their probe; a table whose entries and tombstones
 * reach the load limit is rebuilt (the rebuild reads the nodes in table
 * order, ahead of need).
 *
 * With a numbered backend a slot keeps the node's number (below 2^28) and
 * the tier mask in 32 bits, and the node's address is computed from the
 * backend's chunk directory when needed: at thousands of workers most
 * blocks have one holder, so the map is paid per (worker, block).
 *
 * A node stays valid while an entry holds it, so reading its engine hash is
 * safe for every entry in the map; callers remove an entry before telling
 * the backend the block is gone. */
#include <stdlib.h>
#include <string.h>

#include "index_front_int.h"

_Static_assert(KVIX_NODE_ALIGN == 16u && KVIX_NODENUM_BITS + 4 == 32,
               "a numbered entry is node number << 4 | tiers in 32 bits");

#define NUM_MASK ((UINT32_C(1) << KVIX_NODEDIR_SHIFT) - 1)

_Static_assert(sizeof(bmap) == 48, "a (worker, dp) pays for its blocks map's header");

#define NO_SLOT ((size_t)-1)
/* ctrl bytes: 0 empty, TOMB deleted, else a tag (0x80 | 7 bits of hash) */
#define TOMB 0x01u
#define LIVE(c) ((c) & 0x80u)
/* a miss's place keeps the key's tag above the slot (below 2^32) */
#define AT_TAG_SHIFT 40
#define AT_SLOT(at) ((at) & UINT32_MAX)
_Static_assert(sizeof(size_t) == 8 && BM_MISS >> AT_TAG_SHIFT > 0xff, "a miss's tag fits its place");
_Static_assert((NO_SLOT & BM_MISS) == BM_MISS, "no table is a miss too");

static inline size_t esize(const bmap *m)
{
    return m->dir ? sizeof(uint32_t) : sizeof(bent);
}

/* The writer's own entries: their nodes and chunks were published to it. */
static inline const kvix_nodedir *dir_of(const bmap *m)
{
    return atomic_load_explicit(m->dir, memory_order_acquire);
}

static inline bent unpack(const bmap *m, const kvix_nodedir *d, uint32_t x)
{
    uint32_t num = x >> 4;
    const char *node = d->c[num >> KVIX_NODEDIR_SHIFT] + (size_t)(num & NUM_MASK) * m->nsize;
    return (bent)(uintptr_t)node | (x & BENT_TIERS);
}

static inline bent ent(const bmap *m, size_t i)
{
    if (!m->dir)
        return ((const bent *)m->v)[i];
    return unpack(m, dir_of(m), ((const uint32_t *)m->v)[i]);
}

/* Entry i becomes v (num: v's node's number, when numbered). */
static inline void ent_put(bmap *m, size_t i, bent v, uint32_t num)
{
    if (!m->dir)
        ((bent *)m->v)[i] = v;
    else
        ((uint32_t *)m->v)[i] = num << 4 | (uint32_t)bent_tiers(v);
}

static inline void ent_move(const bmap *m, size_t j, size_t i)
{
    if (m->dir)
        ((uint32_t *)m->v)[j] = ((const uint32_t *)m->v)[i];
    else
        ((bent *)m->v)[j] = ((const bent *)m->v)[i];
}

static inline uint64_t slot_engine(const bmap *m, size_t i)
{
    return kvix_ix_node_engine(bent_node(ent(m, i)), m->eoff);
}

void kvix__ix_bm_init(bmap *m, const kvix_backend_ops *ops, void *be)
{
    m->ctrl = NULL;
    m->v = NULL;
    m->cap = m->n = m->tomb = 0;
    m->eoff = (uint16_t)ops->engine_off;
    m->dir = ops->nodedir ? ops->nodedir(be) : NULL;
    m->nsize = (uint8_t)ops->node_size;
    m->young = 1;
    m->other = NULL;
}

void kvix__ix_bm_release(bmap *m)
{
    free(m->ctrl);
    free(m->v);
    m->ctrl = NULL;
    m->v = NULL;
    m->cap = m->n = m->tomb = 0;
    m->young = 1;
    if (m->other) {
        kvix__hmap_release(m->other);
        free(m->other);
        m->other = NULL;
    }
}

/* engine's slot, or BM_MISS | where an add goes (the probe's first
 * tombstone, else the empty slot it ended at), or NO_SLOT without a table. */
static size_t find(const bmap *m, uint64_t engine, uint64_t h)
{
    if (!m->cap)
        return NO_SLOT;
    size_t mask = m->cap - 1, i = h & mask;
    uint8_t tag = kvix_hm_tag(h);
    for (;;) {
        uint8_t c = m->ctrl[i];
        if (!c)
            break;
        if (c == tag && slot_engine(m, i) == engine)
            return i;
        i = (i + 1) & mask;
    }
    if (m->tomb) /* a miss in a map with tombstones: the probe's first (no tag is TOMB) */
        for (size_t j = h & mask; j != i; j = (j + 1) & mask)
            if (m->ctrl[j] == TOMB) {
                i = j;
                break;
            }
    return BM_MISS | (size_t)tag << AT_TAG_SHIFT | i; /* the add needs no second hash */
}

/* The first slot hash h's probe may take (empty or a tombstone). */
static inline size_t free_slot(const uint8_t *ctrl, size_t mask, uint64_t h)
{
    size_t i = h & mask;
    while (LIVE(ctrl[i]))
        i = (i + 1) & mask;
    return i;
}

#define PREFETCH_PROBE 8u

void kvix__ix_bm_prefetch_nodes(const bmap *m, uint64_t engine)
{
    if (!m->cap)
        return;
    uint64_t h = kvix_mix64(engine);
    size_t mask = m->cap - 1, i = h & mask;
    uint8_t tag = kvix_hm_tag(h);
    for (unsigned k = 0; m->ctrl[i] != tag; k++, i = (i + 1) & mask)
        if (!m->ctrl[i] || k == PREFETCH_PROBE)
            return;
    __builtin_prefetch(bent_node(ent(m, i))); /* the first tag match: most often engine's */
}

bent kvix__ix_bm_get(const bmap *m, uint64_t engine, size_t *at)
{
    size_t i = find(m, engine, kvix_mix64(engine));
    if (at)
        *at = i;
    if (!(i & BM_MISS))
        return ent(m, i);
    const bent *e =
        m->other && kvix_hmap_size(m->other) ? kvix__hmap_get(m->other, &engine) : NULL;
    return e ? *e : 0;
}

void kvix__ix_bm_set(bmap *m, size_t at, uint64_t engine, bent v)
{
    if (!(at & BM_MISS)) { /* the same node: a numbered entry keeps its number */
        if (m->dir)
            ((uint32_t *)m->v)[at] =
                (((uint32_t *)m->v)[at] & ~(uint32_t)BENT_TIERS) | (uint32_t)bent_tiers(v);
        else
            ((bent *)m->v)[at] = v;
        return;
    }
    bent *e = kvix__hmap_get(m->other, &engine);
    if (e)
        *e = v;
}

#define RESIZE_AHEAD 16u

/* A new table of cap slots for m, all empty: 0, or -1 without memory. */
static inline int table_alloc(const bmap *m, size_t cap, uint8_t **ctrl, void **v)
{
    *ctrl = calloc(cap, 1);
    *v = malloc(cap * esize(m));
    if (*ctrl && *v)
        return 0;
    free(*ctrl);
    free(*v);
    return -1;
}

/* m's table becomes the one filled from it (no tombstone), the old freed. */
static inline void table_install(bmap *m, uint8_t *ctrl, void *v, size_t cap)
{
    free(m->ctrl);
    free(m->v);
    m->ctrl = ctrl;
    m->v = v;
    m->cap = (uint32_t)cap;
    m->tomb = 0;
}

static int resize(bmap *m, size_t cap)
{
    uint8_t *ctrl;
    void *v;
    if (cap > UINT32_MAX || table_alloc(m, cap, &ctrl, &v))
        return -1;
    size_t mask = cap - 1;
    if (m->dir) { /* two loops: no test of the width per entry */
        const kvix_nodedir *d = m->cap ? dir_of(m) : NULL;
        const uint32_t *ov = m->v;
        for (size_t j = 0; j < m->cap; j++) {
            /* every entry's node is read for its engine hash, scattered over
             * the slab: ask for the one RESIZE_AHEAD slots on meanwhile */
            if (j + RESIZE_AHEAD < m->cap && LIVE(m->ctrl[j + RESIZE_AHEAD]))
                __builtin_prefetch(bent_node(unpack(m, d, ov[j + RESIZE_AHEAD])));
            if (!LIVE(m->ctrl[j]))
                continue;
            uint64_t h = kvix_mix64(kvix_ix_node_engine(bent_node(unpack(m, d, ov[j])), m->eoff));
            size_t i = kvix_hm_free_slot(ctrl, mask, h);
            ctrl[i] = kvix_hm_tag(h);
            ((uint32_t *)v)[i] = ov[j];
        }
    } else {
        const bent *ov = m->v;
        for (size_t j = 0; j < m->cap; j++) {
            if (j + RESIZE_AHEAD < m->cap && LIVE(m->ctrl[j + RESIZE_AHEAD]))
                __builtin_prefetch(bent_node(ov[j + RESIZE_AHEAD]));
            if (!LIVE(m->ctrl[j]))
                continue;
            uint64_t h = kvix_mix64(kvix_ix_node_engine(bent_node(ov[j]), m->eoff));
            size_t i = kvix_hm_free_slot(ctrl, mask, h);
            ctrl[i] = kvix_hm_tag(h);
            ((bent *)v)[i] = ov[j];
        }
    }
    table_install(m, ctrl, v, cap);
    return 0;
}

/* A young map (no entry deleted since it was made or emptied: a worker
 * filling its cache) grows fourfold below QUAD_BELOW slots: every growth
 * reads the node of each entry for its engine hash (slots keep no key), and
 * while a fleet warms up that was a tenth of a 256-worker replay (1,635
 * entries moved for a worker's 1,030 blocks; 539 fourfold). Its first
 * deletion (a full cache evicting) first halves it down to at most twice its
 * entries, the size twofold growth would have left (halve: no node is read),
 * so a larger table lasts only while the cache fills. */
#define QUAD_BELOW 1024u

/* The table at half its slots, without reading a node (m young: no
 * tombstone). An entry goes to the first free slot from its slot's place in
 * the half: every slot its probe passed held an entry, each of which lands
 * at or after that slot's place, so every place from its home's to its own
 * is taken and the probe still finds it (tags do not depend on the size).
 * 0, or -1 without memory (nothing changed). */
static int halve(bmap *m)
{
    size_t cap = m->cap / 2, esz = esize(m);
    uint8_t *ctrl;
    void *v;
    if (table_alloc(m, cap, &ctrl, &v))
        return -1;
    for (size_t j = 0; j < m->cap; j++) {
        if (!LIVE(m->ctrl[j]))
            continue;
        size_t i = kvix_hm_free_slot(ctrl, cap - 1, j); /* from j's place in the half */
        ctrl[i] = m->ctrl[j];
        memcpy((char *)v + i * esz, (const char *)m->v + j * esz, esz);
    }
    table_install(m, ctrl, v, cap);
    return 0;
}

/* Room for n entries: a larger table, or this one without its tombstones
 * when they would take the room. */
int kvix__ix_bm_reserve(bmap *m, size_t n)
{
    size_t cap = kvix_hm_cap_for(m->cap, n, esize(m));
    if (!cap)
        return -1;
    if (cap == m->cap && (n + m->tomb) * 5 <= (size_t)cap * 4)
        return 0;
    if (m->young && m->cap && m->cap < QUAD_BELOW && cap < 4 * (size_t)m->cap)
        cap = 4 * (size_t)m->cap;
    return resize(m, cap);
}

/* Whether an add into an empty slot passes the load limit. */
static inline int full(const bmap *m)
{
    return ((size_t)m->n + m->tomb + 1) * 5 > (size_t)m->cap * 4;
}

/* Entry i (empty or a tombstone) becomes engine's (hash h) -> v. */
static inline void put(bmap *m, size_t i, uint64_t h, bent v, uint32_t num)
{
    if (m->ctrl[i] == TOMB)
        m->tomb--;
    m->ctrl[i] = kvix_hm_tag(h);
    ent_put(m, i, v, num);
    m->n++;
}

int kvix__ix_bm_add(bmap *m, uint64_t engine, bent v, uint32_t num)
{
    if (kvix_ix_node_engine(bent_node(v), m->eoff) != engine) {
        int inserted;
        if (!m->other && (m->other = malloc(sizeof *m->other)))
            kvix__hmap_init(m->other, 1, sizeof(bent));
        bent *e = m->other ? kvix__hmap_put(m->other, &engine, &inserted) : NULL;
        if (!e)
            return -1;
        *e = v;
        return 0;
    }
    if (full(m) && kvix__ix_bm_reserve(m, m->n + 1))
        return -1; /* (the test is kvix__ix_bm_reserve's: most adds need no call) */
    uint64_t h = kvix_mix64(engine);
    put(m, free_slot(m->ctrl, m->cap - 1, h), h, v, num);
    return 0;
}

int kvix__ix_bm_add_at(bmap *m, size_t at, uint64_t engine, bent v, uint32_t num)
{
    if (at == NO_SLOT || !(at & BM_MISS) || full(m) ||
        kvix_ix_node_engine(bent_node(v), m->eoff) != engine)
        return kvix__ix_bm_add(m, engine, v, num); /* (full: even into a tombstone) */
    size_t i = AT_SLOT(at); /* where free_slot would put it */
    if (m->ctrl[i] == TOMB)
        m->tomb--;
    m->ctrl[i] = (uint8_t)(at >> AT_TAG_SHIFT);
    ent_put(m, i, v, num);
    m->n++;
    return 0;
}

void kvix__ix_bm_del(bmap *m, uint64_t engine)
{
    kvix__ix_bm_del_at(m, find(m, engine, kvix_mix64(engine)), engine);
}

void kvix__ix_bm_del_at(bmap *m, size_t at, uint64_t engine)
{
    size_t i = at;
    if (i & BM_MISS) {
        if (m->other && kvix_hmap_size(m->other))
            kvix__hmap_del(m->other, &engine);
        return;
    }
    if (m->young) { /* its first deletion: packed first (see QUAD_BELOW) */
        uint32_t cap = m->cap;
        m->young = 0;
        while (m->tomb == 0 && m->cap / 2 >= KVIX_HM_MIN_CAP && (size_t)m->n * 2 <= m->cap / 2 &&
               !halve(m))
            ;
        if (m->cap != cap)
            i = find(m, engine, kvix_mix64(engine)); /* present: the entry moved */
    }
    size_t mask = m->cap - 1;
    if (m->ctrl[(i + 1) & mask]) {
        m->ctrl[i] = TOMB; /* a probe may run through i: it must go on */
        m->tomb++;
    } else { /* no probe runs through i, nor through the tombstones before it */
        m->ctrl[i] = 0;
        while (m->ctrl[i = (i - 1) & mask] == TOMB) {
            m->ctrl[i] = 0;
            m->tomb--;
        }
    }
    m->n--;
    if (m->n == 0) {
        free(m->ctrl);
        free(m->v);
        m->ctrl = NULL;
        m->v = NULL;
        m->cap = m->tomb = 0;
        m->young = 1;
    } else if (kvix_hm_shrinks(m->n, m->cap)) {
        (void)resize(m, m->cap / 2); /* on failure keep the larger table */
    }
}

bent kvix__ix_bm_next(const bmap *m, size_t *it, uint64_t *engine)
{
    for (size_t i = *it; i < m->cap; i++) {
        if (LIVE(m->ctrl[i])) {
            *it = i + 1;
            bent v = ent(m, i);
            if (engine)
                *engine = kvix_ix_node_engine(bent_node(v), m->eoff);
            return v;
        }
    }
    if (!m->other)
        return 0;
    size_t sub = *it > m->cap ? *it - m->cap : 0;
    const uint64_t *key;
    bent *e = kvix__hmap_next(m->other, &sub, &key);
    *it = m->cap + sub;
    if (e && engine)
        *engine = key[0];
    return e ? *e : 0;
}

bent kvix__ix_bm_next_key(const bmap *m, size_t *it, uint64_t *engine, int *keyed)
{
    for (size_t i = *it; i < m->cap; i++) {
        if (LIVE(m->ctrl[i])) {
            *it = i + 1;
            *keyed = 0;
            return ent(m, i);
        }
    }
    *keyed = 1;
    return kvix__ix_bm_next(m, it, engine);
}

size_t kvix__ix_bm_memory(const bmap *m)
{
    return m->cap * (1 + esize(m)) +
           (m->other ? sizeof *m->other + kvix__hmap_memory(m->other) : 0);
}
