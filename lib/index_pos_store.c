/* The positional backend's storage: the sharded tables that map (position,
 * canonical hash) to nodes, and the nodes themselves (made, retired after a
 * grace period in batches, reused). See lib/index_positional.c. */
#include <stdlib.h>
#include <string.h>

#include "index_pos_int.h"

ptable *kvix_pos_table_new(uint64_t cap, kvix_bmem *mem)
{
    size_t sz = sizeof(ptable) + cap * sizeof(pslot);
    ptable *t = calloc(1, sz);
    if (t) {
        t->mask = cap - 1;
        atomic_fetch_add_explicit(&mem->bytes, (long)sz, memory_order_relaxed);
    }
    return t;
}

static void table_retire(ptable *t, kvix_bmem *mem)
{
    atomic_fetch_sub_explicit(&mem->bytes, (long)(sizeof(ptable) + (t->mask + 1) * sizeof(pslot)),
                              memory_order_relaxed);
    kvix_rcu_free(&t->rcu);
}

static void table_put(ptable *t, uint64_t h, pnode *n)
{
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint64_t o = atomic_load_explicit(&t->s[i], memory_order_relaxed);
        if (!o || o == TOMB) {
            atomic_store_explicit(&t->s[i], slot_word(h, n), memory_order_release);
            return;
        }
    }
}

/* Rebuild a shard's table for `want` live entries at load <= 1/2. */
static int shard_rebuild(pshard *sh, size_t want, kvix_bmem *mem)
{
    uint64_t cap = TABLE_MIN;
    while (cap < want * 2)
        cap *= 2;
    ptable *old = atomic_load_explicit(&sh->t, memory_order_relaxed);
    ptable *t = kvix_pos_table_new(cap, mem);
    if (!t)
        return KVIX_ENOMEM;
    for (uint64_t i = 0; i <= old->mask; i++) {
        uint64_t w = atomic_load_explicit(&old->s[i], memory_order_relaxed);
        if (w && w != TOMB) { /* the slot keeps 16 bits of the hash: rehash */
            pnode *n = slot_node(w);
            table_put(t, key_hash(n->pos, n->canon), n);
        }
    }
    atomic_store_explicit(&sh->t, t, memory_order_release);
    sh->tomb = 0;
    table_retire(old, mem);
    return KVIX_OK;
}

int kvix_pos_shard_insert(pshard *sh, uint64_t h, pnode *n, kvix_bmem *mem)
{
    ptable *t = atomic_load_explicit(&sh->t, memory_order_relaxed);
    if ((sh->used + sh->tomb + 1) * 4 > (t->mask + 1) * 3) {
        if (shard_rebuild(sh, sh->used + 1, mem) < 0)
            return KVIX_ENOMEM;
        t = atomic_load_explicit(&sh->t, memory_order_relaxed);
    }
    /* a tombstone slot is reused only when it is the first free one */
    uint64_t i = h & t->mask;
    for (;; i = (i + 1) & t->mask) {
        uint64_t o = atomic_load_explicit(&t->s[i], memory_order_relaxed);
        if (!o || o == TOMB)
            break;
    }
    if (atomic_load_explicit(&t->s[i], memory_order_relaxed) == TOMB)
        sh->tomb--;
    atomic_store_explicit(&t->s[i], slot_word(h, n), memory_order_release);
    sh->used++;
    return KVIX_OK;
}

void kvix_pos_shard_remove(pshard *sh, uint64_t h, pnode *n, kvix_bmem *mem)
{
    ptable *t = atomic_load_explicit(&sh->t, memory_order_relaxed);
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint64_t o = atomic_load_explicit(&t->s[i], memory_order_relaxed);
        if (!o)
            return;
        if (o == slot_word(h, n)) {
            atomic_store_explicit(&t->s[i], TOMB, memory_order_release);
            sh->used--;
            sh->tomb++;
            break;
        }
    }
    if (t->mask + 1 > TABLE_MIN && sh->used * 8 < t->mask + 1)
        (void)shard_rebuild(sh, sh->used, mem); /* shrinking is optional: ENOMEM keeps it */
}

pnode *kvix_pos_node_new(pos_be *be, uint32_t pos, uint64_t canon, uint64_t engine)
{
    pnode *n = NULL;
    if (atomic_load_explicit(&be->pool, memory_order_relaxed)) {
        spin_lock(&be->poolmu); /* the peek may be stale: the lock decides */
        if ((n = atomic_load_explicit(&be->pool, memory_order_relaxed))) {
            atomic_store_explicit(&be->pool, n->next, memory_order_relaxed);
            be->npool--;
        }
        spin_unlock(&be->poolmu);
    }
    if (!n) {
        if (!(n = malloc(sizeof *n)))
            return NULL;
        if ((uintptr_t)n >> PTR_BITS) { /* no room for a table slot's tag */
            free(n);
            return NULL;
        }
        atomic_fetch_add_explicit(&be->mem.bytes, (long)sizeof *n, memory_order_relaxed);
    }
    memset(n, 0, offsetof(pnode, pos));
    n->pos = pos;
    n->canon = canon;
    n->engine = engine;
    kvix_hs_init(&n->h);
    return n;
}

void kvix_pos_node_free(pos_be *be, pnode *n)
{
    atomic_fetch_sub_explicit(&be->mem.bytes, (long)sizeof *n, memory_order_relaxed);
    free(n);
}

/* n is out of the table: readers may still see it until a grace period. */
void kvix_pos_node_retire(pos_be *be, pnode *n)
{
    kvix_hs_retire(&n->h, &be->mem);
    pnode *head = atomic_load_explicit(&be->limbo, memory_order_relaxed);
    do
        n->next = head;
    while (!atomic_compare_exchange_weak_explicit(&be->limbo, &head, n, memory_order_release,
                                                  memory_order_relaxed));
    atomic_fetch_add_explicit(&be->nlimbo, 1, memory_order_relaxed);
}

/* After the grace period of a limbo batch (call_rcu thread): its nodes go to
 * the pool (kept at most 1/8 of the live nodes) or back to malloc. The batch's
 * first node carries the backend in its (retired, unused) parent field. */
static void limbo_cb(struct rcu_head *head)
{
    KVIX_RCU_TSAN_ACQUIRE();
    pnode *n = (pnode *)(void *)((char *)head - offsetof(pnode, rcu));
    pos_be *be = (pos_be *)(void *)n->parent;
    size_t cap = (size_t)atomic_load_explicit(&be->unique, memory_order_relaxed) / 8;
    if (cap < POOL_MIN)
        cap = POOL_MIN;
    spin_lock(&be->poolmu);
    while (n) {
        pnode *next = n->next;
        if (be->npool < cap) {
            n->next = atomic_load_explicit(&be->pool, memory_order_relaxed);
            atomic_store_explicit(&be->pool, n, memory_order_relaxed);
            be->npool++;
        } else {
            kvix_pos_node_free(be, n);
        }
        n = next;
    }
    /* the index shrank: let the pool go with it */
    while (atomic_load_explicit(&be->pool, memory_order_relaxed) && be->npool > cap) {
        pnode *k = atomic_load_explicit(&be->pool, memory_order_relaxed);
        atomic_store_explicit(&be->pool, k->next, memory_order_relaxed);
        be->npool--;
        kvix_pos_node_free(be, k);
    }
    spin_unlock(&be->poolmu);
    atomic_fetch_sub_explicit(&be->pending, 1, memory_order_release);
}

/* After a batch of retirements (or when the index is empty), hand the limbo
 * to one call_rcu: one grace period per batch, and writers never wait. */
void kvix_pos_limbo_drain(pos_be *be)
{
    long nl = atomic_load_explicit(&be->nlimbo, memory_order_relaxed);
    if (nl < LIMBO_BATCH && !(nl > 0 && atomic_load_explicit(&be->unique, memory_order_relaxed) == 0))
        return;
    pnode *n = atomic_exchange_explicit(&be->limbo, NULL, memory_order_acquire);
    if (!n)
        return;
    long taken = 0;
    for (pnode *k = n; k; k = k->next)
        taken++;
    atomic_fetch_sub_explicit(&be->nlimbo, taken, memory_order_relaxed);
    n->parent = (pnode *)(void *)be;
    atomic_fetch_add_explicit(&be->pending, 1, memory_order_relaxed);
    kvix_rcu_writer();
    KVIX_RCU_TSAN_RELEASE();
    call_rcu(&n->rcu, limbo_cb);
}


void kvix_pos_store_free(pos_be *be)
{
    for (unsigned i = 0; i < NSHARD; i++) {
        ptable *t = atomic_load(&be->shard[i].t);
        for (uint64_t j = 0; j <= t->mask; j++) {
            uint64_t w = atomic_load(&t->s[j]);
            pnode *n = slot_node(w);
            if (w && w != TOMB) {
                kvix_hs_free(&n->h);
                free(n);
            }
        }
        free(t);
    }
    for (pnode *n = atomic_load(&be->limbo), *next; n; n = next) {
        next = n->next;
        free(n);
    }
    for (pnode *n = atomic_load(&be->pool), *next; n; n = next) {
        next = n->next;
        free(n);
    }
}
