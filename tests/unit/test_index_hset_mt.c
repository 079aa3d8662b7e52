/* lib/core/hset_int.h under a writer and lock-free readers: one set pushed
 * through every form and back, its deletes sometimes without memory (an
 * array's entries then marked gone in place), while readers list and split
 * it inside read-side sections: each holder listed once, every split a
 * partition of its candidates, nothing outside the writer's slots. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *hs_malloc(size_t n);
#define KVIX_HS_MALLOC(n) hs_malloc(n)

#include "harness.h"
#include "hset_write_int.h"

static _Atomic int failing; /* the writer's allocations fail */
static void *hs_malloc(size_t n)
{
    return atomic_load(&failing) ? NULL : malloc(n);
}

#define NSLOT 1500
#define MUL 37 /* slot of entry x: x * MUL, spread over 55,500 slots */

static kvix_hset h;
static kvix_bmem mem;
static _Atomic int done;
static _Atomic long bad, reads;

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    return z ^ (z >> 27);
}

static void *writer(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg;
    kvix_rcu_writer();
    int rounds = (int)(40 * th_scale()) + 2;
    static uint8_t held[NSLOT];
    for (int round = 0; round < rounds; round++) {
        uint32_t n = 5 + (uint32_t)(mix(&rng) % (round % 3 ? 300 : NSLOT - 5));
        for (uint32_t x = 0; x < n; x++) {
            unsigned t = round % 4 == 3 && mix(&rng) % 6 == 0 ? KVIX_MEDIUM_CPU : KVIX_MEDIUM_GPU;
            int f;
            if (kvix_hs_add(&h, x * MUL, t, 0xffff / 64 + 1, &mem, &f) < 0)
                atomic_fetch_add(&bad, 1);
            held[x] |= (uint8_t)(1u << t);
        }
        /* down again, half the rounds without memory for copies */
        atomic_store(&failing, round % 2);
        for (uint32_t x = 0; x < NSLOT; x++)
            for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
                if (held[x] >> t & 1) {
                    int f;
                    kvix_hs_del(&h, x * MUL, t, &mem, &f);
                }
        atomic_store(&failing, 0);
        memset(held, 0, sizeof held);
        if (!kvix_hs_empty(&h))
            atomic_fetch_add(&bad, 1);
    }
    atomic_store(&done, 1);
    return NULL;
}

static void *reader(void *arg)
{
    (void)arg;
    uint32_t *out = malloc(KVIX_HSET_IDS * sizeof *out), *cand = malloc(NSLOT * sizeof *cand);
    uint32_t *tmp = malloc(NSLOT * sizeof *tmp);
    uint8_t *seen = calloc(KVIX_HSET_IDS, 1);
    uint64_t *marks = NULL, rng = 7;
    long n = 0;
    while (!atomic_load(&done) || n < 10) {
        kvix_rcu_lock();
        kvix_hview v = kvix_hs_view(&h);
        uint32_t m = kvix_hv_room(v) <= KVIX_HSET_IDS ? kvix_hv_list(v, out) : 0;
        int ok = 1;
        for (uint32_t i = 0; i < m; i++) {
            if (out[i] % MUL || out[i] / MUL >= NSLOT || seen[out[i]])
                ok = 0;
            seen[out[i]] = 1;
        }
        for (uint32_t i = 0; i < m; i++)
            seen[out[i]] = 0;
        uint32_t nc = 0;
        for (uint32_t x = 0; x < NSLOT; x++)
            if (mix(&rng) % 4 == 0)
                cand[nc++] = x * MUL;
        uint32_t k = kvix_hv_split(v, cand, nc, &marks, n % 2 ? tmp : NULL);
        /* a partition: the same candidates, once each (with scratch: both
         * parts ascending, as the candidates were) */
        for (uint32_t i = 0; i < nc; i++) {
            if (n % 2 && i > 0 && i != k && cand[i - 1] >= cand[i])
                ok = 0;
            if (seen[cand[i]])
                ok = 0;
            seen[cand[i]] = 1;
        }
        for (uint32_t i = 0; i < nc; i++)
            seen[cand[i]] = 0;
        kvix_rcu_unlock();
        if (!ok || k > nc)
            atomic_fetch_add(&bad, 1);
        n++;
    }
    atomic_fetch_add(&reads, n);
    free(out);
    free(cand);
    free(tmp);
    free(seen);
    return NULL;
}

TEST(hset_readers_while_forms_change)
{
    kvix_rcu_writer();
    kvix_hs_init(&h);
    pthread_t w, r[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&r[i], NULL, reader, NULL) == 0);
    CHECK(pthread_create(&w, NULL, writer, (void *)(uintptr_t)(th_seed() | 1)) == 0);
    pthread_join(w, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(r[i], NULL);
    CHECK_U64(atomic_load(&bad), 0);
    CHECK(atomic_load(&reads) > 0);
    kvix_hs_retire(&h, &mem);
    kvix__bmem_release(&mem); /* the readers have ended */
    CHECK_U64(atomic_load(&mem.bytes), 0);
    CHECK_U64(atomic_load(&mem.tiered), 0);
}
