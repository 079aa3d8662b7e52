/* lib/hset_int.h, a block's holder set: randomized against a plain array of
 * flags, with holders spread over thousands of slots so the promoted bitset
 * grows its span down and up, and a set emptied and refilled; tiers too. */
#include <stdlib.h>

#include "harness.h"
#include "hset_int.h"

#define NS 5000

static uint64_t s;
static uint64_t rnd(void)
{
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

static uint8_t model[NS][KVIX_MEDIUM_COUNT];
static uint32_t out[KVIX_SLOTS_MAX];
/* slot of model entry x: x + off (off moves the model up to the last slots) */
static uint32_t off;

static int held_any(uint32_t x)
{
    for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
        if (model[x][t])
            return 1;
    return 0;
}

/* Every slot: has() as the model says; list() each holder once. */
static int check(const kvix_hset *h, uint32_t count)
{
    int ok = 1;
    uint32_t n = 0;
    for (uint32_t x = 0; x < NS; x++) {
        n += (uint32_t)held_any(x);
        if (kvix_hs_has(h, x + off) != held_any(x))
            ok = 0;
    }
    kvix_hview v = kvix_hs_view(h);
    if (kvix_hv_room(v) > sizeof out / sizeof out[0])
        return 0;
    uint32_t m = kvix_hv_list(v, out);
    static uint8_t seen[NS];
    memset(seen, 0, sizeof seen);
    for (uint32_t i = 0; i < m; i++) {
        out[i] -= off;
        if (out[i] >= NS || !held_any(out[i]) || seen[out[i]])
            ok = 0;
        else
            seen[out[i]] = 1;
    }
    return ok && m == n && count == n;
}

static kvix_bmem mem;
static kvix_hset h;

static void start(void)
{
    s = th_seed() | 1;
    kvix_rcu_writer();
    atomic_init(&mem.bytes, 0);
    atomic_init(&mem.tiered, 0);
    kvix_hs_init(&h);
    memset(model, 0, sizeof model);
    off = 0;
}

/* steps random adds and deletes of slots in [lo, lo + span) on h. */
static void run(uint32_t lo, uint32_t span, int tiers, long steps)
{
    int bad = 0;
    for (long i = 0; i < steps && !bad; i++) {
        uint32_t x = lo + (uint32_t)(rnd() % span);
        unsigned t = tiers && rnd() % 4 == 0 ? (unsigned)(rnd() % KVIX_MEDIUM_COUNT)
                                             : KVIX_MEDIUM_GPU;
        int flag;
        if (rnd() % 3) {
            int was = model[x][t], any = held_any(x);
            int rc = kvix_hs_add(&h, x + off, t, (off + NS + 63) / 64, &mem, &flag);
            bad |= rc != (was ? 1 : KVIX_OK) || flag != !any;
            model[x][t] = 1;
        } else {
            int was = model[x][t];
            model[x][t] = 0;
            kvix_hs_del(&h, x + off, t, &mem, &flag);
            bad |= flag != (was && !held_any(x));
        }
        if (i % 97 == 0)
            bad |= !check(&h, kvix_hs_count(&h));
    }
    CHECK(!bad);
    CHECK(check(&h, kvix_hs_count(&h)));
}

TEST(hset_spread_holders)
{
    start();
    run(0, NS, 0, 20000 * th_scale());
    kvix_hs_free(&h);
}

TEST(hset_span_grows_down_and_up)
{
    start();
    run(2400, 200, 0, 2000);
    run(2000, 1000, 0, 3000);
    run(0, NS, 0, 5000);
    kvix_hs_free(&h);
}

TEST(hset_tiers)
{
    start();
    run(1000, 3000, 1, 20000 * th_scale());
    kvix_hs_free(&h);
}

/* The last slot (0xffff) is the inline ids' free mark, so it is never kept
 * inline: a set it joins goes big, alone or with others, on every tier. */
TEST(hset_last_slot)
{
    start();
    off = KVIX_SLOTS_MAX - NS;
    run(NS - 3, 3, 1, 2000);
    run(NS - 6, 6, 0, 2000);
    run(NS - 40, 40, 1, 5000);
    kvix_hs_free(&h);
}

/* A set word whose top lane is 0 is a record's address, so slot 0 never
 * takes the top lane: with three others inline it goes big, and every order
 * of four adds and their deletes keeps has() and list() exact. */
TEST(hset_slot0_fourth)
{
    start();
    static const uint32_t four[][4] = {{1, 2, 3, 0}, {0, 1, 2, 3}, {2, 0, 3, 1}, {3, 2, 1, 0}};
    for (size_t o = 0; o < sizeof four / sizeof four[0]; o++) {
        int flag;
        for (unsigned i = 0; i < 4; i++) {
            CHECK(kvix_hs_add(&h, four[o][i], KVIX_MEDIUM_GPU, 1, &mem, &flag) == KVIX_OK);
            model[four[o][i]][KVIX_MEDIUM_GPU] = 1;
            CHECK(check(&h, kvix_hs_count(&h)));
        }
        for (unsigned i = 0; i < 4; i++) {
            kvix_hs_del(&h, four[o][(i + o) % 4], KVIX_MEDIUM_GPU, &mem, &flag);
            model[four[o][(i + o) % 4]][KVIX_MEDIUM_GPU] = 0;
            CHECK(flag == 1 && check(&h, kvix_hs_count(&h)));
        }
        CHECK(kvix_hs_empty(&h));
    }
    kvix_hs_free(&h);
}
