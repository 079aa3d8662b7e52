/* The positional backend (default): every block is an entry of a sharded
 * hash table keyed by (position, canonical rolling hash), after NVIDIA
 * Dynamo's "Flash Indexer" but sound, with jump search.
 *
 * Why the key holds the canonical hash and not only the local one: a query
 * must check the canonical hash at every probed position anyway (a local hash
 * recurs under other prefixes), and the rolling chain is computed through
 * every position up to the probe, so keying by canon costs the query nothing,
 * makes a "Multi" entry unnecessary (the same local hash at the same position
 * under different prefixes is simply two keys), and lets a writer find a
 * block's parent, which exact hole handling needs (below).
 *
 * Jump search. Let C be the slots known to hold positions 0..i-1. Probe
 * p = i + jump - 1: slots of C holding (p, canon_p) stay; the others (D) have
 * their matched length in [i, p], found by bisection (binsearch) or a scan.
 * This is exact only for slots without holes: a slot holding (p, canon_p)
 * holds the query's exact prefix chain at p (canon is a rolling hash over the
 * prefix) but, after a middle block was removed, maybe not every position
 * below p. So each node links to its parent node and the backend keeps, per
 * slot, the number of "orphans": blocks the slot holds whose parent it does
 * not hold. A slot with no orphan holds every ancestor of every block it holds
 * (induction over parents), so for it "holds (p, canon_p)" implies "holds
 * every (x, canon_x), x <= p" and its match is monotone (bisection is exact).
 * Slots with orphans are "untrusted": while one is a candidate the search
 * steps one position at a time, which is the definition itself.
 * Keeping the counts exact: an orphan can only appear or vanish when the slot
 * itself adds or removes a block (its bits are the only ones involved), by
 * looking at the parent's bit and, only when it may matter, at the children's
 * bits (add: only if the slot already has orphans; remove: only if the node
 * has children). A node stays (as an empty "ghost") while children link to it.
 * Known cost: a slot removing a block with many children (the last block of
 * a shared system prompt) checks each child, O(children); a per-slot count of
 * held children on high-fanout nodes would make that O(1).
 *
 * Memory. A node is 48 bytes (lib/index/backends/index_pos_int.h): its key, the engine and
 * local hashes, 32-bit links (parent, next sibling, newest kid) into the
 * backend's slab instead of pointers, and an 8-byte holder set (four inline
 * slot ids, or the address of a record: a sorted array of slot ids, or a
 * bitset for dense sets, lib/core/hset_int.h). It keeps
 * no number of its own and no previous sibling: whoever reaches a node got
 * its number on the way, and an unlink walks the sibling ring (a wide
 * parent's kids have their predecessors hinted: ppred). A shard
 * table's slot is 4 bytes (the node's number and 4 bits of its hash), and so
 * is a front end's blocks-map entry (the number and a tier mask: the slab's
 * directory is kvix_backend_ops.nodedir). At thousands
 * of workers most blocks have one holder, so the node is paid almost per
 * (worker, block) pair.
 *
 * Concurrency. Readers are lock-free under RCU (rcu_int.h): shard tables and
 * nodes are published with release stores; removed nodes go back to the slab
 * (tables are freed) after a grace period.
 * Writers lock the shard of the node they change (two shards, in index order,
 * when a parent is involved); a shard's table is rebuilt (grown, cleaned or
 * shrunk) under its lock into a fresh table that readers switch to, so no
 * query ever waits, and a rebuild touches 1/NSHARD of the index.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "hset_write_int.h"
#include "index_pos_int.h"

static inline int node_removable(const pnode *n)
{
    return kvix_hs_empty(&n->h) && n->kids == PNIL && !kvix_hs_tset(&n->h);
}

/* ---- sibling rings, and the predecessor hints of wide ones ---- */

#define PRED_MIN 64u
#define WIDE_WALK 16 /* an unlink that walks further makes the parent wide */

static inline uint32_t pred_home(const ppred *t, pidx k)
{
    return (uint32_t)((uint64_t)k * UINT64_C(0x9E3779B97F4A7C15) >> 32) & t->mask;
}

/* k's entry, or the empty one that ends its probe (linear probing; a table
 * always has an empty entry). */
static inline uint32_t pred_find(const ppred *t, pidx k)
{
    uint32_t i = pred_home(t, k);
    while (t->e[i].kid != PNIL && t->e[i].kid != k)
        i = (i + 1) & t->mask;
    return i;
}

static size_t pred_bytes(uint32_t cap)
{
    return sizeof(ppred) + cap * sizeof(((ppred *)0)->e[0]);
}

/* sh's hints in a table of cap entries (no memory: the old one stays). */
static void pred_resize(pos_be *be, pshard *sh, uint32_t cap)
{
    ppred *o = sh->pred, *t = calloc(1, pred_bytes(cap));
    if (!t)
        return;
    t->mask = cap - 1;
    atomic_fetch_add_explicit(&be->mem.bytes, (long)pred_bytes(cap), memory_order_relaxed);
    for (uint32_t i = 0; o && i <= o->mask; i++)
        if (o->e[i].kid != PNIL)
            t->e[pred_find(t, o->e[i].kid)] = o->e[i];
    if (o) {
        t->n = o->n;
        atomic_fetch_sub_explicit(&be->mem.bytes, (long)pred_bytes(o->mask + 1),
                                  memory_order_relaxed);
        free(o);
    }
    sh->pred = t;
}

static void pred_put(pos_be *be, pshard *sh, pidx k, pidx prev)
{
    if (!sh->pred || (sh->pred->n + 1) * 2 > sh->pred->mask + 1)
        pred_resize(be, sh, sh->pred ? (sh->pred->mask + 1) * 2 : PRED_MIN);
    ppred *t = sh->pred;
    if (!t)
        return;
    uint32_t i = pred_find(t, k);
    if (t->e[i].kid == PNIL) {
        if (t->n + 2 > t->mask + 1)
            return; /* full (no memory to grow): k's unlink will walk */
        t->n++;
        t->e[i].kid = k;
    }
    t->e[i].prev = prev;
}

static inline pidx pred_get(const pshard *sh, pidx k)
{
    const ppred *t = sh->pred;
    if (!t)
        return PNIL;
    uint32_t i = pred_find(t, k);
    return t->e[i].kid == k ? t->e[i].prev : PNIL;
}

static void pred_drop(pos_be *be, pshard *sh, pidx k)
{
    ppred *t = sh->pred;
    if (!t)
        return;
    uint32_t i = pred_find(t, k);
    if (t->e[i].kid != k)
        return;
    for (uint32_t j = i;;) { /* backward shift: probes stay unbroken */
        j = (j + 1) & t->mask;
        if (t->e[j].kid == PNIL)
            break;
        uint32_t home = pred_home(t, t->e[j].kid);
        if (((j - home) & t->mask) >= ((j - i) & t->mask)) {
            t->e[i] = t->e[j];
            i = j;
        }
    }
    t->e[i].kid = PNIL;
    if (--t->n == 0) {
        atomic_fetch_sub_explicit(&be->mem.bytes, (long)pred_bytes(t->mask + 1),
                                  memory_order_relaxed);
        free(t);
        sh->pred = NULL;
    } else if (t->mask + 1 > PRED_MIN && t->n * 8 < t->mask + 1) {
        pred_resize(be, sh, (t->mask + 1) / 2);
    }
}

/* k (numbered ki) becomes p's (numbered pi, in shard ps) newest kid. */
static void kid_link(pos_be *be, pshard *ps, pnode *p, pidx pi, pnode *k, pidx ki)
{
    k->parent = pi;
    pidx last = KIDS_NUM(p->kids);
    if (last == PNIL) {
        k->next = ki;
        p->kids = ki;
        return;
    }
    pnode *ln = pn(be, last);
    pidx first = ln->next;
    k->next = first;
    ln->next = ki;
    p->kids = (p->kids & KIDS_WIDE) | ki;
    if (p->kids & KIDS_WIDE) {
        pred_put(be, ps, ki, last);
        pred_put(be, ps, first, ki);
    }
}

/* k (numbered ki) leaves the ring of p (in shard ps): its predecessor is
 * hinted (wide p), or found from the oldest kid on. */
static void kid_unlink(pos_be *be, pshard *ps, pnode *p, const pnode *k, pidx ki)
{
    uint32_t wide = p->kids & KIDS_WIDE;
    pidx last = KIDS_NUM(p->kids), b = wide ? pred_get(ps, ki) : PNIL;
    pnode *bn = b != PNIL ? pn(be, b) : NULL;
    unsigned steps = 0;
    if (!bn || bn->next != ki) {
        b = last;
        bn = pn(be, b);
        while (bn->next != ki) {
            b = bn->next;
            bn = pn(be, b);
            steps++;
        }
    }
    if (wide)
        pred_drop(be, ps, ki);
    if (b == ki) { /* the only kid */
        p->kids = PNIL;
        return;
    }
    pidx c = k->next;
    bn->next = c;
    if (last == ki)
        last = b;
    p->kids = wide | last;
    if (wide) {
        pred_put(be, ps, c, b);
    } else if (steps > WIDE_WALK) {
        p->kids |= KIDS_WIDE;
        for (pidx x = last, y;; x = y) {
            y = pn(be, x)->next;
            pred_put(be, ps, y, x);
            if (y == last)
                break;
        }
    }
}

static void lock2(pos_be *be, unsigned a, unsigned b)
{
    if (a > b) {
        unsigned x = a;
        a = b;
        b = x;
    }
    spin_lock(&be->shard[a].mu);
    if (b != a)
        spin_lock(&be->shard[b].mu);
}

static void unlock2(pos_be *be, unsigned a, unsigned b)
{
    spin_unlock(&be->shard[a].mu);
    if (b != a)
        spin_unlock(&be->shard[b].mu);
}

/* ---- per-slot orphan counts (written only by the slot's own writer) ---- */

static porph *orph_chunk_new(pos_be *be, uint32_t s);

/* Slot s's chunk, made on its first add (NULL: no memory). Inline: every
 * add and del asks, and it exists but once. */
static inline porph *orph_chunk(pos_be *be, uint32_t s)
{
    porph *c = atomic_load_explicit(&be->orph[s / ORPH_CHUNK], memory_order_acquire);
    return c ? c : orph_chunk_new(be, s);
}

static porph *orph_chunk_new(pos_be *be, uint32_t s)
{
    _Atomic(porph *) *cp = &be->orph[s / ORPH_CHUNK];
    porph *c = atomic_load_explicit(cp, memory_order_acquire);
    if (!c) {
        porph *n = calloc(1, sizeof *n);
        if (!n)
            return NULL;
        if (atomic_compare_exchange_strong_explicit(cp, &c, n, memory_order_acq_rel,
                                                    memory_order_acquire)) {
            atomic_fetch_add_explicit(&be->mem.bytes, (long)sizeof *n, memory_order_relaxed);
            c = n;
        } else {
            free(n);
        }
    }
    return c;
}

static void orph_change(pos_be *be, porph *c, uint32_t s, int delta)
{
    uint32_t *o = &c->n[s % ORPH_CHUNK];
    uint32_t before = *o;
    *o = (uint32_t)((int64_t)before + delta);
    uint64_t bit = UINT64_C(1) << (s % 64);
    kvix_aword *w = &c->untrusted[s % ORPH_CHUNK / 64];
    if (before == 0 && *o > 0) {
        atomic_fetch_or_explicit(w, bit, memory_order_relaxed);
        atomic_fetch_add_explicit(&be->nuntrusted, 1, memory_order_relaxed);
    } else if (before > 0 && *o == 0) {
        atomic_fetch_and_explicit(w, ~bit, memory_order_relaxed);
        atomic_fetch_sub_explicit(&be->nuntrusted, 1, memory_order_relaxed);
    }
}

/* Whether slot s holds n, a node of another shard than the one the writer
 * locked (a parent, a kid): that shard's writer may replace n's holder record
 * and free the old one after a grace period, which holds back only read-side
 * sections. Most nodes have no record (their holders are inline in the node,
 * which n's kid or parent pins), so only a record is read in a section. */
static inline int node_has(const pnode *n, uint32_t s)
{
    uint64_t w = kvix_hs_word(&n->h);
    if (!kvix_hw_rec(w))
        return kvix_ids_have(w, s);
    kvix_rcu_lock();
    int has = kvix_hs_has(&n->h, s);
    kvix_rcu_unlock();
    return has;
}

/* ---- backend ops ---- */

static void *pos_create(const kvix_index_opts *opts, kvix_err *err)
{
    pos_be *be = aligned_alloc(64, (sizeof(pos_be) + 63) & ~(size_t)63);
    if (!be) {
        kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        return NULL;
    }
    memset(be, 0, sizeof *be);
    be->jump = opts && opts->jump ? opts->jump : JUMP_DEFAULT;
    if (be->jump > JUMP_MAX)
        be->jump = JUMP_MAX;
    be->binsearch = opts ? opts->binsearch : 1;
    atomic_store(&be->mem.bytes, (long)sizeof *be);
    kvix_rcu_writer();
    return be;
}

static int pos_busy(void *vbe)
{
    pos_be *be = vbe;
    return atomic_load_explicit(&be->pending, memory_order_acquire) > 0;
}

static void pos_destroy(void *vbe)
{
    pos_be *be = vbe;
    if (!be)
        return;
    /* limbo batches point back to the backend: wait for their callbacks
     * (tables and set records retired do not, and free themselves) */
    while (atomic_load_explicit(&be->pending, memory_order_acquire) > 0)
        sched_yield();
    kvix__bmem_release(&be->mem);
    kvix__pos_store_free(be);
    for (size_t i = 0; i < KVIX_SLOTS_MAX / ORPH_CHUNK; i++)
        free(atomic_load(&be->orph[i]));
    free(be);
}

static void note_slot(pos_be *be, uint32_t s)
{
    uint32_t need = s / 64 + 1, cur = atomic_load_explicit(&be->nw, memory_order_relaxed);
    while (cur < need &&
           !atomic_compare_exchange_weak_explicit(&be->nw, &cur, need, memory_order_release,
                                                  memory_order_relaxed))
        ;
}

/* One step of a reclaim: n (numbered ni, key hash h) is removable and the
 * caller holds its shard's lock (si), which this releases. n leaves the
 * table and its parent's ring, and is retired. Returns 1 when that left
 * the parent removable (a childless ghost): its key in *pos, *canon. */
static int reclaim_step(pos_be *be, unsigned si, uint64_t h, pnode *n, pidx ni, uint32_t *pos,
                        uint64_t *canon)
{
    if (n->parent == PNIL) {
        kvix__pos_shard_remove(be, &be->shard[si], h, ni);
        spin_unlock(&be->shard[si].mu);
        kvix__pos_node_retire(be, n, ni);
        return 0;
    }
    pidx pnum = n->parent;
    pnode *p = pn(be, pnum);
    unsigned pi = shard_of(key_hash(p->pos, p->canon));
    if (pi > si) {
        spin_lock(&be->shard[pi].mu);
    } else if (pi < si && !spin_trylock(&be->shard[pi].mu)) {
        uint32_t npos = n->pos;
        uint64_t ncanon = n->canon;
        spin_unlock(&be->shard[si].mu);
        lock2(be, si, pi);
        n = table_find(be, atomic_load_explicit(&be->shard[si].t, memory_order_relaxed), h, npos,
                       ncanon, &ni);
        /* n's parent never changes once set; a re-made n may have a re-made
         * parent at the same number, with the same key: still right */
        if (!n || !node_removable(n) || n->parent != pnum) {
            unlock2(be, si, pi);
            return 0;
        }
    }
    kvix__pos_shard_remove(be, &be->shard[si], h, ni);
    kid_unlink(be, &be->shard[pi], p, n, ni);
    int more = node_removable(p);
    *pos = p->pos;
    *canon = p->canon;
    unlock2(be, si, pi);
    kvix__pos_node_retire(be, n, ni);
    return more;
}

/* Remove n (found by key) and every ghost ancestor it leaves childless. */
static void reclaim(pos_be *be, uint32_t pos, uint64_t canon)
{
    uint64_t h;
    unsigned si;
    pnode *n;
    pidx ni;
    do {
        h = key_hash(pos, canon);
        si = shard_of(h);
        spin_lock(&be->shard[si].mu);
        n = table_find(be, atomic_load_explicit(&be->shard[si].t, memory_order_relaxed), h, pos,
                       canon, &ni);
        if (!n || !node_removable(n)) {
            spin_unlock(&be->shard[si].mu);
            return;
        }
    } while (reclaim_step(be, si, h, n, ni, &pos, &canon));
}

static int node_err(kvix_err *err, int full)
{
    if (full)
        return kvix_err_set(err, KVIX_ELIMIT,
                            "more than %u blocks in one partition (held and their ghost parents)",
                            NODES_MAX);
    return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
}

static int pos_add(void *vbe, kvix_binfo *b, uint32_t slot, unsigned tier, void **node,
                   kvix_err *err)
{
    pos_be *be = vbe;
    uint32_t pos = b->pos;
    uint64_t canon = b->canon, parent_canon = b->parent_canon;
    /* the parent's node as the front end has it (the slot holds it, so it
     * is the table's node of that key): no lookup, and the slot's bit there
     * is known */
    pnode *hint = (pnode *)(uintptr_t)b->parent_node;
    if (hint && (!pos || hint->pos != pos - 1 || hint->canon != parent_canon))
        hint = NULL;
    if (slot >= KVIX_SLOTS_MAX || tier >= KVIX_MEDIUM_COUNT)
        return kvix_err_set(err, KVIX_ERANGE, "slot %u or tier %u out of range", slot, tier);
    kvix_rcu_writer();
    porph *orph = orph_chunk(be, slot);
    if (!orph)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    note_slot(be, slot);
    uint64_t h = key_hash(pos, canon);
    unsigned si = shard_of(h), pi = si;
    pshard *sh = &be->shard[si];
    pidx ni = PNIL;
    spin_lock(&sh->mu);
    pnode *n =
        table_find(be, atomic_load_explicit(&sh->t, memory_order_relaxed), h, pos, canon, &ni);
    if (!n || (pos > 0 && n->parent == PNIL)) {
        /* a new node (or a ghost learning its parent): lock the parent's shard
         * too, in index order, or by trylock to keep the one we hold */
        uint64_t hp = 0;
        if (pos > 0) {
            hp = key_hash(pos - 1, parent_canon);
            pi = shard_of(hp);
        }
        if (pi > si) {
            spin_lock(&be->shard[pi].mu);
        } else if (pi < si && !spin_trylock(&be->shard[pi].mu)) {
            spin_unlock(&sh->mu);
            lock2(be, si, pi);
            n = table_find(be, atomic_load_explicit(&sh->t, memory_order_relaxed), h, pos, canon,
                           &ni);
        }
        int made = 0, full = 0;
        if (!n) {
            n = kvix__pos_node_new(be, pos, canon, b->engine, &ni, &full);
            if (!n || kvix__pos_shard_insert(be, sh, h, ni) < 0) {
                if (n)
                    kvix__pos_node_free(be, ni);
                unlock2(be, si, pi);
                return node_err(err, full);
            }
            made = 1;
        }
        if (pos > 0 && n->parent == PNIL) {
            pshard *ps = &be->shard[pi];
            /* the hint's number: the front end's, else its table slot */
            pidx pnum = !hint             ? PNIL
                        : b->parent_num ? b->parent_num
                                        : table_num(be, atomic_load_explicit(&ps->t,
                                                                             memory_order_relaxed),
                                                    hp, hint);
            pnode *p = pnum != PNIL
                           ? hint
                           : table_find(be, atomic_load_explicit(&ps->t, memory_order_relaxed), hp,
                                        pos - 1, parent_canon, &pnum);
            if (!p) { /* a parent nobody holds: a ghost, so holes stay exact */
                p = kvix__pos_node_new(be, pos - 1, parent_canon, b->parent_engine, &pnum, &full);
                if (!p || kvix__pos_shard_insert(be, ps, hp, pnum) < 0) {
                    if (p)
                        kvix__pos_node_free(be, pnum);
                    unlock2(be, si, pi);
                    if (made)
                        reclaim(be, pos, canon);
                    return node_err(err, full);
                }
            }
            kid_link(be, ps, p, pnum, n, ni);
        }
        if (pi != si)
            spin_unlock(&be->shard[pi].mu);
    }
    /* n's shard lock held; n->parent (if any) is pinned by n. A block of
     * this key under another parent (a chunk-hash collision) is not hint's
     * child: hint says nothing of it. */
    if (hint && (n->parent == PNIL || (b->parent_num ? n->parent != b->parent_num
                                                     : pn(be, n->parent) != hint)))
        hint = NULL;
    int any_new;
    int was_empty = kvix_hs_empty(&n->h);
    int held = kvix_hs_add(&n->h, slot, tier, atomic_load_explicit(&be->nw, memory_order_relaxed),
                           &be->mem, &any_new);
    if (held < 0) {
        spin_unlock(&sh->mu);
        reclaim(be, pos, canon);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    if (any_new) {
        uint32_t o_before = orph->n[slot % ORPH_CHUNK];
        if (pos > 0 && !hint && !node_has(pn(be, n->parent), slot))
            orph_change(be, orph, slot, +1);
        pidx last = KIDS_NUM(n->kids), k = last;
        if (o_before > 0 && last != PNIL)
            do {
                pnode *kn = pn(be, k);
                if (node_has(kn, slot))
                    orph_change(be, orph, slot, -1);
                k = kn->next;
            } while (k != last);
        if (was_empty) {
            atomic_fetch_add_explicit(&be->unique, 1, memory_order_relaxed);
            n->local = b->local; /* nobody held it: no front end reads it */
        }
    }
    b->parent_engine = hint ? hint->engine : pos ? pn(be, n->parent)->engine : 0;
    spin_unlock(&sh->mu);
    *node = n;
    b->num = ni;
    return held; /* 1: held in that tier already */
}

static void pos_del(void *vbe, void *node, uint32_t slot, unsigned tier)
{
    pos_be *be = vbe;
    pnode *n = node; /* held by slot: in the table, and pos, canon stay */
    if (slot >= KVIX_SLOTS_MAX || tier >= KVIX_MEDIUM_COUNT)
        return;
    kvix_rcu_writer();
    uint32_t pos = n->pos;
    uint64_t canon = n->canon;
    uint64_t h = key_hash(pos, canon);
    unsigned si = shard_of(h);
    pshard *sh = &be->shard[si];
    spin_lock(&sh->mu);
    int gone;
    kvix_hs_del(&n->h, slot, tier, &be->mem, &gone);
    if (gone) {
        porph *orph = orph_chunk(be, slot); /* exists: the slot added this block */
        if (orph) {
            if (pos > 0 && (n->parent == PNIL || !node_has(pn(be, n->parent), slot)))
                orph_change(be, orph, slot, -1);
            pidx last = KIDS_NUM(n->kids), k = last;
            if (last != PNIL)
                do {
                    pnode *kn = pn(be, k);
                    if (node_has(kn, slot))
                        orph_change(be, orph, slot, +1);
                    k = kn->next;
                } while (k != last);
        }
        if (kvix_hs_empty(&n->h))
            atomic_fetch_sub_explicit(&be->unique, 1, memory_order_relaxed);
    }
    /* removable: no second lookup by key, the lock is kept (n is in the
     * table until it is removed under this lock: its number by address) */
    pidx ni = node_removable(n)
                  ? table_num(be, atomic_load_explicit(&sh->t, memory_order_relaxed), h, n)
                  : PNIL;
    if (ni == PNIL) {
        spin_unlock(&sh->mu);
        return;
    }
    if (reclaim_step(be, si, h, n, ni, &pos, &canon))
        reclaim(be, pos, canon);
    kvix__pos_limbo_drain(be);
}

static size_t pos_memory(void *vbe)
{
    pos_be *be = vbe;
    long b = atomic_load(&be->mem.bytes);
    return b > 0 ? (size_t)b : 0;
}

static size_t pos_unique(void *vbe)
{
    pos_be *be = vbe;
    long u = atomic_load(&be->unique);
    return u > 0 ? (size_t)u : 0;
}

static void pos_info(void *vbe, const void *node, kvix_binfo *out)
{
    const pnode *n = node;
    out->pos = n->pos;
    out->local = n->local;
    out->canon = n->canon;
    if (n->pos) { /* a held node has its parent */
        const pnode *p = pn(vbe, n->parent);
        out->parent_canon = p->canon;
        out->parent_engine = p->engine;
    } else {
        out->parent_canon = out->parent_engine = 0;
    }
}

static _Atomic(kvix_nodedir *) *pos_nodedir(void *vbe)
{
    return &((pos_be *)vbe)->dir;
}

const kvix_backend_ops kvix__backend_positional_ops = {
    .name = "positional",
    .create = pos_create,
    .destroy = pos_destroy,
    .busy = pos_busy,
    .add = pos_add,
    .prefetch = kvix__pos_prefetch,
    .prefetch_del = kvix__pos_prefetch_del,
    .prefetch_keys = kvix__pos_prefetch_keys,
    .reserve = kvix__pos_reserve,
    .prefetch_key_nodes = kvix__pos_prefetch_key_nodes,
    .del = pos_del,
    .info = pos_info,
    .query = kvix__pos_query,
    .memory = pos_memory,
    .unique_blocks = pos_unique,
    .engine_off = offsetof(pnode, engine),
    .pos_off = offsetof(pnode, pos),
    .canon_off = offsetof(pnode, canon),
    .nodedir = pos_nodedir,
    .node_size = sizeof(pnode),
};
