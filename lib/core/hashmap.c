#include "hashmap_int.h"

#include <stdlib.h>
#include <string.h>


void kvix__hmap_init(kvix_hmap *m, unsigned key_words, size_t value_size)
{
    m->ctrl = NULL;
    m->ent = NULL;
    m->cap = m->n = 0;
    m->kw = key_words == 2 ? 2 : 1;
    m->esize = 8 * m->kw + ((value_size + 7) & ~(size_t)7);
}

void kvix__hmap_release(kvix_hmap *m)
{
    free(m->ctrl);
    free(m->ent);
    m->ctrl = NULL;
    m->ent = NULL;
    m->cap = m->n = 0;
}

static inline uint64_t key_hash(const kvix_hmap *m, const uint64_t *k)
{
    uint64_t h = kvix_mix64(k[0]);
    if (m->kw == 2)
        h = kvix_mix64(h ^ (k[1] + UINT64_C(0x9e3779b97f4a7c15)));
    return h;
}

static inline unsigned char *entry(const kvix_hmap *m, size_t i) { return m->ent + i * m->esize; }

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v); /* a fixed size: compiled to one load */
    return v;
}

static inline int key_eq(const kvix_hmap *m, const unsigned char *e, const uint64_t *k)
{
    return load64(e) == k[0] && (m->kw == 1 || load64(e + 8) == k[1]);
}

static inline void key_load(const kvix_hmap *m, const unsigned char *e, uint64_t k[2])
{
    k[0] = load64(e);
    k[1] = m->kw == 2 ? load64(e + 8) : 0;
}

/* Slot of key, or (size_t)-1. */
static size_t find(const kvix_hmap *m, const uint64_t *key, uint64_t h)
{
    if (!m->cap)
        return (size_t)-1;
    size_t mask = m->cap - 1, i = h & mask;
    uint8_t tag = kvix_hm_tag(h);
    for (;;) {
        uint8_t c = m->ctrl[i];
        if (!c)
            return (size_t)-1;
        if (c == tag && key_eq(m, entry(m, i), key))
            return i;
        i = (i + 1) & mask;
    }
}

static int resize(kvix_hmap *m, size_t cap)
{
    uint8_t *ctrl = calloc(cap, 1);
    unsigned char *ent = malloc(cap * m->esize);
    if (!ctrl || !ent) {
        free(ctrl);
        free(ent);
        return -1;
    }
    size_t mask = cap - 1;
    for (size_t j = 0; j < m->cap; j++) {
        if (!m->ctrl[j])
            continue;
        uint64_t k[2];
        key_load(m, entry(m, j), k);
        uint64_t h = key_hash(m, k);
        size_t i = kvix_hm_free_slot(ctrl, mask, h);
        ctrl[i] = kvix_hm_tag(h);
        memcpy(ent + i * m->esize, entry(m, j), m->esize);
    }
    free(m->ctrl);
    free(m->ent);
    m->ctrl = ctrl;
    m->ent = ent;
    m->cap = cap;
    return 0;
}

int kvix__hmap_reserve(kvix_hmap *m, size_t n)
{
    size_t cap = kvix_hm_cap_for(m->cap, n, m->esize);
    if (!cap)
        return -1;
    return cap == m->cap ? 0 : resize(m, cap);
}

void *kvix__hmap_get(const kvix_hmap *m, const uint64_t *key)
{
    size_t i = find(m, key, key_hash(m, key));
    return i == (size_t)-1 ? NULL : entry(m, i) + 8 * m->kw;
}

void *kvix__hmap_put(kvix_hmap *m, const uint64_t *key, int *inserted)
{
    uint64_t h = key_hash(m, key);
    size_t i = find(m, key, h);
    if (i != (size_t)-1) {
        if (inserted)
            *inserted = 0;
        return entry(m, i) + 8 * m->kw;
    }
    if (kvix__hmap_reserve(m, m->n + 1))
        return NULL;
    i = kvix_hm_free_slot(m->ctrl, m->cap - 1, h);
    m->ctrl[i] = kvix_hm_tag(h);
    unsigned char *e = entry(m, i);
    memset(e, 0, m->esize);
    memcpy(e, key, 8 * m->kw);
    m->n++;
    if (inserted)
        *inserted = 1;
    return e + 8 * m->kw;
}

int kvix__hmap_del(kvix_hmap *m, const uint64_t *key)
{
    size_t i = find(m, key, key_hash(m, key));
    if (i == (size_t)-1)
        return 0;
    size_t mask = m->cap - 1, j = i;
    /* Backward shift: pull later entries of the cluster into the hole when
     * the hole lies between their home slot and where they sit. */
    for (;;) {
        j = (j + 1) & mask;
        if (!m->ctrl[j])
            break;
        uint64_t k[2];
        key_load(m, entry(m, j), k);
        size_t home = key_hash(m, k) & mask;
        if (kvix_hm_fills_hole(i, j, home, mask)) {
            m->ctrl[i] = m->ctrl[j];
            memcpy(entry(m, i), entry(m, j), m->esize);
            i = j;
        }
    }
    m->ctrl[i] = 0;
    m->n--;
    if (m->n == 0) {
        kvix__hmap_release(m);
    } else if (kvix_hm_shrinks(m->n, m->cap)) {
        (void)resize(m, m->cap / 2); /* on failure keep the larger table */
    }
    return 1;
}

void *kvix__hmap_next(const kvix_hmap *m, size_t *it, const uint64_t **key)
{
    for (size_t i = *it; i < m->cap; i++) {
        if (m->ctrl[i]) {
            *it = i + 1;
            if (key)
                *key = (const uint64_t *)(const void *)entry(m, i);
            return entry(m, i) + 8 * m->kw;
        }
    }
    *it = m->cap;
    return NULL;
}

size_t kvix__hmap_memory(const kvix_hmap *m)
{
    return m->cap * (1 + m->esize);
}
