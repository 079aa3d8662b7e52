/* lib/core/hashmap.c, the per-worker map of the index: randomized against a
 * plain array, with keys that collide in the low bits, key 0, one- and
 * two-word keys, growth, shrinking and backward-shift deletion. */
#include <stdlib.h>

#include "harness.h"
#include "hashmap_int.h"

typedef struct ref_ent {
    uint64_t k[2];
    uint64_t v;
    int live;
} ref_ent;

static uint64_t s;
static uint64_t rnd(void) { return th_splitmix(&s); }

static void run(unsigned kw, unsigned keyspace, long ops)
{
    kvix_hmap m;
    kvix__hmap_init(&m, kw, sizeof(uint64_t));
    ref_ent *ref = calloc(keyspace, sizeof *ref);
    size_t live = 0;
    for (unsigned i = 0; i < keyspace; i++) {
        /* small integers, multiples of 2^32 and 0: the hash must mix */
        ref[i].k[0] = i % 3 == 0 ? (uint64_t)i << 32 : i;
        ref[i].k[1] = kw == 2 ? (uint64_t)(i % 7) : 0;
    }
    int bad = 0;
    for (long op = 0; op < ops && !bad; op++) {
        unsigned i = (unsigned)(rnd() % keyspace);
        ref_ent *e = &ref[i];
        unsigned r = (unsigned)(rnd() % 10);
        if (r < 5) {
            int ins = -1;
            uint64_t *v = kvix__hmap_put(&m, e->k, &ins);
            bad |= !v || ins != !e->live || (e->live && *v != e->v);
            if (v)
                *v = e->v = rnd();
            live += !e->live;
            e->live = 1;
        } else if (r < 8) {
            bad |= kvix__hmap_del(&m, e->k) != e->live;
            live -= e->live;
            e->live = 0;
        } else {
            uint64_t *v = kvix__hmap_get(&m, e->k);
            bad |= e->live ? !v || *v != e->v : v != NULL;
        }
        bad |= kvix_hmap_size(&m) != live;
        if (op % 50000 == 0 || op == ops - 1) { /* the whole content by iteration */
            size_t it = 0, n = 0;
            const uint64_t *k;
            uint64_t *v;
            while ((v = kvix__hmap_next(&m, &it, &k))) {
                n++;
                uint64_t j = k[0] >> 32 ? k[0] >> 32 : k[0]; /* the key's index */
                bad |= j >= keyspace || !ref[j].live || ref[j].k[0] != k[0] ||
                       (kw == 2 && ref[j].k[1] != k[1]) || ref[j].v != *v;
            }
            bad |= n != live;
        }
    }
    CHECK(!bad);
    /* load stays bounded: memory per entry within a small factor */
    if (kvix_hmap_size(&m) > 64)
        CHECK(kvix__hmap_memory(&m) <= kvix_hmap_size(&m) * (m.esize + 1) * 5);
    /* delete everything: the map gives its memory back */
    for (unsigned i = 0; i < keyspace; i++)
        if (ref[i].live)
            CHECK(kvix__hmap_del(&m, ref[i].k) == 1);
    CHECK_U64(kvix_hmap_size(&m), 0);
    CHECK_U64(kvix__hmap_memory(&m), 0);
    kvix__hmap_release(&m);
    free(ref);
}

TEST(hashmap_one_word_keys)
{
    s = th_seed();
    run(1, 300, (long)(400000 * th_scale()));
    run(1, 20000, (long)(400000 * th_scale()));
}

TEST(hashmap_two_word_keys)
{
    s = th_seed() * 3;
    run(2, 300, (long)(400000 * th_scale()));
    run(2, 5000, (long)(400000 * th_scale()));
}

TEST(hashmap_shrinks_after_churn)
{
    kvix_hmap m;
    kvix__hmap_init(&m, 1, 40);
    for (uint64_t k = 0; k < 100000; k++)
        CHECK(kvix__hmap_put(&m, &k, NULL) != NULL);
    size_t big = kvix__hmap_memory(&m);
    for (uint64_t k = 0; k < 99990; k++)
        kvix__hmap_del(&m, &k);
    CHECK(kvix__hmap_memory(&m) * 100 < big);
    for (uint64_t k = 99990; k < 100000; k++)
        CHECK(kvix__hmap_get(&m, &k) != NULL);
    kvix__hmap_release(&m);
    CHECK_U64(kvix_hmap_size(&m), 0);
}

/* reserve: the announced puts never rehash, and reserving keeps what is there. */
TEST(reserve_then_fill)
{
    kvix_hmap m;
    kvix__hmap_init(&m, 1, sizeof(uint64_t));
    uint64_t k = 12345;
    *(uint64_t *)kvix__hmap_put(&m, &k, NULL) = 99;
    CHECK(kvix__hmap_reserve(&m, 1000) == 0);
    size_t cap = m.cap;
    CHECK(cap * 4 >= 1000 * 5);
    CHECK_U64(*(uint64_t *)kvix__hmap_get(&m, &k), 99);
    for (uint64_t i = 0; i < 999; i++) {
        int ins = 0;
        *(uint64_t *)kvix__hmap_put(&m, &i, &ins) = i * 3;
        CHECK(ins);
    }
    CHECK_U64(m.cap, cap); /* no growth during the announced puts */
    CHECK_U64(kvix_hmap_size(&m), 1000);
    for (uint64_t i = 0; i < 999; i++)
        CHECK_U64(*(uint64_t *)kvix__hmap_get(&m, &i), i * 3);
    CHECK(kvix__hmap_reserve(&m, 10) == 0); /* never shrinks */
    CHECK_U64(m.cap, cap);
    kvix__hmap_release(&m);
}
