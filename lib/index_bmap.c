/* The (worker, dp) blocks map of the index front end (lib/index_front_int.h):
 * engine hash -> bent (node handle | tier mask), 9 bytes a slot.
 *
 * A node keeps the engine hash it was made under (kvix_backend_ops.
 * engine_off), and workers that hash alike store a block under that same
 * engine hash, so the main table does not store keys: a slot is the bent
 * and a control byte (empty, or 7 bits of the key's hash), and a key is
 * compared with its node's engine hash. Entries whose engine hash is not
 * their node's go to `other`, a plain keyed map. Linear probing, backward-
 * shift deletion, load between 10% and 80% (as kvix_hmap).
 *
 * A node stays valid while an entry holds it, so reading its engine hash is
 * safe for every entry in the map; callers remove an entry before telling
 * the backend the block is gone. */
#include <stdlib.h>
#include <string.h>

#include "index_front_int.h"

static inline uint64_t slot_engine(const bmap *m, size_t i)
{
    return kvix_ix_node_engine(bent_node(m->v[i]), m->eoff);
}

void kvix_ix_bm_init(bmap *m, size_t eoff)
{
    m->ctrl = NULL;
    m->v = NULL;
    m->cap = m->n = 0;
    m->eoff = eoff;
    m->other = NULL;
}

void kvix_ix_bm_release(bmap *m)
{
    free(m->ctrl);
    free(m->v);
    m->ctrl = NULL;
    m->v = NULL;
    m->cap = m->n = 0;
    if (m->other) {
        kvix_hmap_release(m->other);
        free(m->other);
        m->other = NULL;
    }
}

static size_t find(const bmap *m, uint64_t engine, uint64_t h)
{
    if (!m->cap)
        return (size_t)-1;
    size_t mask = m->cap - 1, i = h & mask;
    uint8_t tag = kvix_hm_tag(h);
    for (;;) {
        uint8_t c = m->ctrl[i];
        if (!c)
            return (size_t)-1;
        if (c == tag && slot_engine(m, i) == engine)
            return i;
        i = (i + 1) & mask;
    }
}

bent *kvix_ix_bm_get(const bmap *m, uint64_t engine)
{
    size_t i = find(m, engine, kvix_mix64(engine));
    if (i != (size_t)-1)
        return &m->v[i];
    return m->other && kvix_hmap_size(m->other) ? kvix_hmap_get(m->other, &engine) : NULL;
}

static int resize(bmap *m, size_t cap)
{
    uint8_t *ctrl = calloc(cap, 1);
    bent *v = malloc(cap * sizeof *v);
    if (!ctrl || !v) {
        free(ctrl);
        free(v);
        return -1;
    }
    size_t mask = cap - 1;
    for (size_t j = 0; j < m->cap; j++) {
        if (!m->ctrl[j])
            continue;
        uint64_t h = kvix_mix64(slot_engine(m, j));
        size_t i = kvix_hm_free_slot(ctrl, mask, h);
        ctrl[i] = kvix_hm_tag(h);
        v[i] = m->v[j];
    }
    free(m->ctrl);
    free(m->v);
    m->ctrl = ctrl;
    m->v = v;
    m->cap = cap;
    return 0;
}

int kvix_ix_bm_reserve(bmap *m, size_t n)
{
    size_t cap = kvix_hm_cap_for(m->cap, n, sizeof(bent));
    if (!cap)
        return -1;
    return cap == m->cap ? 0 : resize(m, cap);
}

bent *kvix_ix_bm_add(bmap *m, uint64_t engine, bent v)
{
    if (kvix_ix_node_engine(bent_node(v), m->eoff) != engine) {
        int inserted;
        if (!m->other && (m->other = malloc(sizeof *m->other)))
            kvix_hmap_init(m->other, 1, sizeof(bent));
        bent *e = m->other ? kvix_hmap_put(m->other, &engine, &inserted) : NULL;
        if (e)
            *e = v;
        return e;
    }
    if (kvix_ix_bm_reserve(m, m->n + 1))
        return NULL;
    uint64_t h = kvix_mix64(engine);
    size_t i = kvix_hm_free_slot(m->ctrl, m->cap - 1, h);
    m->ctrl[i] = kvix_hm_tag(h);
    m->v[i] = v;
    m->n++;
    return &m->v[i];
}

void kvix_ix_bm_del(bmap *m, uint64_t engine)
{
    size_t i = find(m, engine, kvix_mix64(engine));
    if (i == (size_t)-1) {
        if (m->other && kvix_hmap_size(m->other))
            kvix_hmap_del(m->other, &engine);
        return;
    }
    size_t mask = m->cap - 1, j = i;
    for (;;) { /* backward shift, as kvix_hmap_del */
        j = (j + 1) & mask;
        if (!m->ctrl[j])
            break;
        size_t home = kvix_mix64(slot_engine(m, j)) & mask;
        if (kvix_hm_fills_hole(i, j, home, mask)) {
            m->ctrl[i] = m->ctrl[j];
            m->v[i] = m->v[j];
            i = j;
        }
    }
    m->ctrl[i] = 0;
    m->n--;
    if (m->n == 0) {
        free(m->ctrl);
        free(m->v);
        m->ctrl = NULL;
        m->v = NULL;
        m->cap = 0;
    } else if (kvix_hm_shrinks(m->n, m->cap)) {
        (void)resize(m, m->cap / 2); /* on failure keep the larger table */
    }
}

bent *kvix_ix_bm_next(const bmap *m, size_t *it, uint64_t *engine)
{
    for (size_t i = *it; i < m->cap; i++) {
        if (m->ctrl[i]) {
            *it = i + 1;
            if (engine)
                *engine = slot_engine(m, i);
            return &m->v[i];
        }
    }
    if (!m->other)
        return NULL;
    size_t sub = *it > m->cap ? *it - m->cap : 0;
    const uint64_t *key;
    bent *e = kvix_hmap_next(m->other, &sub, &key);
    *it = m->cap + sub;
    if (e && engine)
        *engine = key[0];
    return e;
}

size_t kvix_ix_bm_memory(const bmap *m)
{
    return m->cap * (1 + sizeof(bent)) +
           (m->other ? sizeof *m->other + kvix_hmap_memory(m->other) : 0);
}
