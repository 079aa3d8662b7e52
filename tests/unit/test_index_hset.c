/* lib/core/hset_int.h, a block's holder set: randomized against a plain array of
 * flags, with holders spread over thousands of slots so the set goes
 * through every form (inline ids, sorted array, bitset) and back, grows its
 * span down and up, and is emptied and refilled; tiers in every form; slot 0
 * and 0xffff; allocations that fail (an add changes nothing, a delete still
 * happens); and the readers' split, with and without marks. */
#include <stdio.h>
#include <stdlib.h>

static void *hs_malloc(size_t n);
#define KVIX_HS_MALLOC(n) hs_malloc(n)

#include "harness.h"
#include "hset_write_int.h"

/* allocations before one fails: < 0 never */
static long fail_in = -1;
static void *hs_malloc(size_t n)
{
    if (fail_in == 0)
        return NULL;
    if (fail_in > 0)
        fail_in--;
    return malloc(n);
}

#define NS 5000

static uint64_t s;
static uint64_t rnd(void) { return th_splitmix(&s); }

static uint8_t model[NS][KVIX_MEDIUM_COUNT];
static uint32_t out[KVIX_HSET_IDS], cand[2 * NS], tmp[2 * NS];
/* slot of model entry x: x * mul + off, below 2^16 (mul odd and small
 * enough: distinct slots) */
static uint32_t off, mul = 1;

static uint32_t slot_of(uint32_t x) { return (x * mul + off) & 0xffff; }

static unsigned mask_of(uint32_t x)
{
    unsigned m = 0;
    for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
        m |= (unsigned)model[x][t] << t;
    return m;
}

static int held_any(uint32_t x) { return mask_of(x) != 0; }

static kvix_bmem mem;
static kvix_hset h;

/* The backend's words (a new bitset's width): hint, or those covering the
 * model's slots. */
static uint32_t hint;
static int grow_hint; /* hint grows with the slots added, as a backend's does */
static uint32_t nw_hint(void)
{
    if (hint)
        return hint;
    uint32_t hi = 0;
    for (uint32_t x = 0; x < NS; x++)
        hi = slot_of(x) > hi ? slot_of(x) : hi;
    return hint = hi / 64 + 1;
}


enum { F_INLINE, F_ARR, F_BITS };
static int form(void)
{
    const kvix_wset *r = kvix_hs_rec(&h);
    return !r ? F_INLINE : r->kind == KVIX_WS_ARR ? F_ARR : F_BITS;
}

/* The model entry of slot s, or NS. */
static uint32_t entry_of(uint32_t sl)
{
    static uint32_t inv[KVIX_HSET_IDS];
    static uint32_t inv_mul, inv_off;
    static int made;
    if (!made || inv_mul != mul || inv_off != off) {
        for (uint32_t i = 0; i < KVIX_HSET_IDS; i++)
            inv[i] = NS;
        for (uint32_t x = 0; x < NS; x++)
            inv[slot_of(x)] = x;
        inv_mul = mul;
        inv_off = off;
        made = 1;
    }
    return inv[sl];
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* A split of the model's slots and some non-holders, shuffled (or, sorted,
 * ascending with scratch: then both parts must stay ascending): holders
 * first, each once, none lost. */
static int split_ok(kvix_hview v, uint64_t **marks, uint32_t want, int sorted)
{
    uint32_t n = 0;
    for (uint32_t x = 0; x < NS && n < 2 * NS; x++)
        if (held_any(x) || rnd() % (sorted ? 1 + rnd() % 64 : 8) == 0)
            cand[n++] = slot_of(x);
    for (uint32_t i = n; i > 1 && !sorted; i--) {
        uint32_t j = (uint32_t)(rnd() % i), t = cand[i - 1];
        cand[i - 1] = cand[j];
        cand[j] = t;
    }
    if (sorted)
        qsort(cand, n, sizeof cand[0], cmp_u32);
    /* also a short list (searched for, not marked) */
    uint32_t nn = rnd() % 2 ? n : (n < 3 ? n : 3);
    uint32_t k = kvix_hv_split(v, cand, nn, marks, sorted ? tmp : NULL);
    int ok = 1;
    uint32_t holders = 0;
    for (uint32_t i = 0; i < nn; i++) {
        uint32_t x = entry_of(cand[i]);
        if (x >= NS || held_any(x) != (i < k))
            ok = 0;
        if (sorted && i > 0 && i != k && cand[i - 1] >= cand[i])
            ok = 0;
        holders += x < NS && held_any(x);
    }
    if (nn == n && holders != want)
        ok = 0;
    if (marks && *marks) /* scratch: what it holds before a split does not matter */
        for (uint32_t i = 0; i < 8; i++)
            (*marks)[rnd() % (KVIX_HSET_IDS / 64)] = rnd();
    return ok;
}

/* Every slot: has() and the tier masks as the model says; list() each
 * holder once; split(); the counters. */
static int check(void)
{
    int ok = 1;
    uint32_t n = 0;
    kvix_tset *ts = kvix_hs_tset(&h);
    for (uint32_t x = 0; x < NS; x++) {
        n += (uint32_t)held_any(x);
        if (kvix_hs_has(&h, slot_of(x)) != held_any(x))
            ok = 0;
        if (held_any(x) && (ts ? kvix_tset_mask(ts, slot_of(x)) : KVIX_TM_GPU) != mask_of(x))
            ok = 0;
        if (kvix_hs_mask(&h, slot_of(x)) != mask_of(x))
            ok = 0;
    }
    kvix_hview v = kvix_hs_view(&h);
    if (kvix_hv_room(v) > sizeof out / sizeof out[0])
        return 0;
    uint32_t m = kvix_hv_list(v, out);
    static uint8_t seen[NS];
    memset(seen, 0, sizeof seen);
    for (uint32_t i = 0; i < m; i++) {
        uint32_t x = entry_of(out[i]);
        if (x >= NS || !held_any(x) || seen[x])
            ok = 0;
        else
            seen[x] = 1;
    }
    const kvix_wset *r = kvix_hs_rec(&h);
    ok &= m == n && kvix_hs_count(&h) == n && kvix_hs_empty(&h) == (n == 0);
    ok &= atomic_load(&mem.bytes) == (long)(r ? kvix_wset_size(r) : 0);
    ok &= atomic_load(&mem.tiered) == (ts != NULL);
    uint64_t *marks = rnd() % 2 ? kvix__hs_marks() : NULL;
    ok &= split_ok(v, &marks, n, 0) && split_ok(v, NULL, n, 0) && split_ok(v, &marks, n, 1);
    return ok;
}

static void start(void)
{
    s = th_seed();
    kvix_rcu_writer();
    atomic_init(&mem.bytes, 0);
    atomic_init(&mem.tiered, 0);
    kvix_hs_init(&h);
    memset(model, 0, sizeof model);
    off = 0;
    mul = 1;
    hint = 0;
    grow_hint = 0;
    fail_in = -1;
}

static void finish(void)
{
    kvix_hs_retire(&h, &mem);
    kvix__bmem_release(&mem); /* no reader */
    CHECK_U64(atomic_load(&mem.bytes), 0);
    CHECK_U64(atomic_load(&mem.tiered), 0);
}

static int add(uint32_t x, unsigned t)
{
    int flag, was = model[x][t], any = held_any(x);
    if (grow_hint && slot_of(x) / 64 + 1 > hint)
        hint = slot_of(x) / 64 + 1;
    int rc = kvix_hs_add(&h, slot_of(x), t, nw_hint(), &mem, &flag);
    if (rc == KVIX_ENOMEM)
        return flag == 0;
    model[x][t] = 1;
    return rc == (was ? 1 : KVIX_OK) && flag == !any;
}

static int del(uint32_t x, unsigned t)
{
    int flag, was = model[x][t];
    model[x][t] = 0;
    kvix_hs_del(&h, slot_of(x), t, &mem, &flag);
    return flag == (was && !held_any(x));
}

/* steps random adds and deletes of entries in [lo, lo + span) on h. */
static void run(uint32_t lo, uint32_t span, int tiers, long steps)
{
    int bad = 0;
    for (long i = 0; i < steps && !bad; i++) {
        uint32_t x = lo + (uint32_t)(rnd() % span);
        unsigned t = tiers && rnd() % 4 == 0 ? (unsigned)(rnd() % KVIX_MEDIUM_COUNT)
                                             : KVIX_MEDIUM_GPU;
        bad |= !(rnd() % 3 ? add(x, t) : del(x, t));
        if (i % 97 == 0)
            bad |= !check();
    }
    CHECK(!bad);
    CHECK(check());
}

TEST(hset_spread_holders)
{
    start();
    run(0, NS, 0, 20000 * th_scale());
    finish();
}

TEST(hset_span_grows_down_and_up)
{
    start();
    run(2400, 200, 0, 2000);
    run(2000, 1000, 0, 3000);
    run(0, NS, 0, 5000);
    finish();
}

TEST(hset_tiers)
{
    start();
    run(1000, 3000, 1, 20000 * th_scale());
    finish();
}

/* Holders spread over every slot (mul 13: 5000 entries over 65,000 slots):
 * arrays up to thousands of holders, tiers too. */
TEST(hset_spread_over_all_slots)
{
    start();
    mul = 13;
    run(0, 300, 1, 5000);
    run(0, NS, 0, 20000 * th_scale());
    run(0, NS, 1, 10000 * th_scale());
    finish();
}

/* The fleet grows while sets hold: a bitset made narrow is widened (or
 * becomes an array, when that is now the smaller) as higher slots join. */
TEST(hset_fleet_grows)
{
    for (int tiers = 0; tiers < 2; tiers++) {
        start();
        mul = 3;
        grow_hint = 1;
        hint = 1;
        for (uint32_t span = 40; span <= NS; span += span / 2)
            run(0, span, tiers, 600);
        finish();
    }
}

/* The last slot (0xffff) is the inline ids' free mark, so it is never kept
 * inline: a set it joins takes a record, alone or with others, on every
 * tier. */
TEST(hset_last_slot)
{
    start();
    off = KVIX_HSET_IDS - NS;
    run(NS - 3, 3, 1, 2000);
    run(NS - 6, 6, 0, 2000);
    run(NS - 40, 40, 1, 5000);
    finish();
    start();
    off = KVIX_HSET_IDS - NS;
    CHECK(add(NS - 1, KVIX_MEDIUM_GPU));
    CHECK(form() == F_ARR && check());
    CHECK(add(NS - 2, KVIX_MEDIUM_GPU) && form() == F_ARR && check());
    CHECK(del(NS - 1, KVIX_MEDIUM_GPU) && form() == F_INLINE && check());
    finish();
}

/* A set word whose top lane is 0 is a record's address, so slot 0 never
 * takes the top lane: a fourth holder that is slot 0 makes the set be
 * rebuilt inline in slot order; every order of four adds and their deletes
 * keeps has() and list() exact. */
TEST(hset_slot0_fourth)
{
    start();
    static const uint32_t four[][4] = {{1, 2, 3, 0}, {0, 1, 2, 3}, {2, 0, 3, 1}, {3, 2, 1, 0}};
    for (size_t o = 0; o < sizeof four / sizeof four[0]; o++) {
        for (unsigned i = 0; i < 4; i++) {
            CHECK(add(four[o][i], KVIX_MEDIUM_GPU));
            CHECK(form() == F_INLINE && check());
        }
        for (unsigned i = 0; i < 4; i++) {
            CHECK(del(four[o][(i + o) % 4], KVIX_MEDIUM_GPU));
            CHECK(check());
        }
        CHECK(kvix_hs_empty(&h));
    }
    /* slot 0 and slot 0xffff in an array, then in a bitset */
    mul = 0x3333; /* entry 5 is slot 0xffff (5 * 0x3333), entry 0 slot 0 */
    for (uint32_t x = 0; x < 6; x++)
        CHECK(add(x, KVIX_MEDIUM_GPU));
    CHECK(form() == F_ARR && check());
    CHECK(add(1, KVIX_MEDIUM_DISK) && check());
    for (uint32_t x = 6; x < 4500; x++) /* past 4096 holders over 65,536 slots */
        add(x, KVIX_MEDIUM_GPU);
    CHECK(form() == F_ARR && check()); /* tiered: 3 bytes a holder against 5 bitsets */
    CHECK(del(1, KVIX_MEDIUM_DISK) && form() == F_BITS && check());
    finish();
}

/* The forms a set of n holders takes over 8192 slots (nw 128), adding then
 * removing one holder at a time, twice: inline up to four, an array until
 * the array would be as large as the bitset, the bitset until the array
 * would be half its size or less, then the array again, inline at four,
 * and empty. */
TEST(hset_forms_up_and_down)
{
    start();
    mul = 7;
    off = 1; /* entries 0..1169 over slots 1..8184 */
    const uint32_t nw = hint = 128, N = 1170;
    for (int round = 0; round < 2; round++) {
        int bad = 0;
        for (uint32_t n = 1; n <= N; n++) {
            bad |= !add(n - 1, KVIX_MEDIUM_GPU);
            int want = n <= KVIX_HS_INLINE ? F_INLINE
                       : kvix_arr_size(n, 0) >= kvix_bits_size(nw, 0) ? F_BITS
                                                                      : F_ARR;
            if (form() != want) {
                printf("#   up: %u holders, form %d, want %d\n", n, form(), want);
                bad = 1;
            }
            if (n % 61 == 0 || n < 8)
                bad |= !check();
        }
        CHECK(!bad);
        CHECK(form() == F_BITS);
        for (uint32_t n = N; n-- > 0;) {
            bad |= !del(n, KVIX_MEDIUM_GPU);
            int want = n == 0 || n <= KVIX_HS_INLINE / 2 ? F_INLINE
                       : 2 * kvix_arr_size(n, 0) > kvix_bits_size(nw, 0) ? F_BITS
                       : n <= KVIX_HS_INLINE                               ? F_INLINE
                                                                           : F_ARR;
            if (form() != want) {
                printf("#   down: %u holders, form %d, want %d\n", n, form(), want);
                bad = 1;
            }
            if (n % 61 == 0 || n < 8)
                bad |= !check();
        }
        CHECK(!bad);
        CHECK(kvix_hs_empty(&h) && atomic_load(&mem.bytes) == 0);
    }
    finish();
}

/* At 256 slots a bitset is 4 words: an overflowing inline set takes it
 * (it changes in place), and goes back inline at two holders. */
TEST(hset_small_fleet_bits)
{
    start();
    mul = 51;
    off = 3;
    /* entries 0..4 over 256 slots: nw_hint() is for the whole model, so
     * pass 4 words by hand */
    int flag;
    for (uint32_t x = 0; x < 5; x++) {
        CHECK(kvix_hs_add(&h, x * 51 + 3, KVIX_MEDIUM_GPU, 4, &mem, &flag) == KVIX_OK);
        model[x][KVIX_MEDIUM_GPU] = 1;
    }
    CHECK(form() == F_BITS && check());
    kvix_hs_del(&h, 4 * 51 + 3, KVIX_MEDIUM_GPU, &mem, &flag);
    model[4][KVIX_MEDIUM_GPU] = 0;
    CHECK(form() == F_BITS && check());
    kvix_hs_del(&h, 3 * 51 + 3, KVIX_MEDIUM_GPU, &mem, &flag);
    model[3][KVIX_MEDIUM_GPU] = 0;
    CHECK(form() == F_BITS && check());
    kvix_hs_del(&h, 2 * 51 + 3, KVIX_MEDIUM_GPU, &mem, &flag);
    model[2][KVIX_MEDIUM_GPU] = 0;
    CHECK(form() == F_INLINE && check());
    finish();
}

/* Tiers in each form: a holder off gpu makes the set a tiered record (a
 * mask byte per holder in an array, a bitset per tier in a bitset), counted
 * in mem.tiered; when the last one off gpu goes, the set sheds them. */
TEST(hset_tier_forms)
{
    start();
    mul = 7;
    hint = 128;
    for (uint32_t x = 0; x < 3; x++)
        CHECK(add(x, KVIX_MEDIUM_GPU));
    CHECK(form() == F_INLINE && check());
    CHECK(add(1, KVIX_MEDIUM_CPU) && form() == F_ARR && check());
    CHECK(add(7, KVIX_MEDIUM_DISK) && form() == F_ARR && check()); /* a holder off gpu only */
    CHECK(del(1, KVIX_MEDIUM_CPU) && check());
    CHECK(del(7, KVIX_MEDIUM_DISK) && form() == F_INLINE && check());
    for (uint32_t x = 0; x < 20; x++)
        CHECK(add(x, KVIX_MEDIUM_GPU));
    CHECK(form() == F_ARR && !kvix_hs_tset(&h));
    CHECK(add(5, KVIX_MEDIUM_EXTERNAL) && kvix_hs_tset(&h) && check());
    CHECK(del(5, KVIX_MEDIUM_GPU) && check()); /* 5 stays, off gpu only */
    CHECK(del(5, KVIX_MEDIUM_EXTERNAL) && !kvix_hs_tset(&h) && check());
    for (uint32_t x = 20; x < 1200; x++)
        add(x, KVIX_MEDIUM_GPU);
    CHECK(form() == F_BITS && !kvix_hs_tset(&h) && check());
    CHECK(add(600, KVIX_MEDIUM_CPU) && form() == F_BITS && kvix_hs_tset(&h) && check());
    CHECK(add(1300, KVIX_MEDIUM_CPU) && check());
    CHECK(del(600, KVIX_MEDIUM_CPU) && del(1300, KVIX_MEDIUM_CPU));
    CHECK(form() == F_BITS && !kvix_hs_tset(&h) && check());
    for (uint32_t x = 0; x < 1200; x++)
        del(x, KVIX_MEDIUM_GPU);
    CHECK(kvix_hs_empty(&h) && check());
    finish();
}

/* No memory: an add that needs a record fails and changes nothing; a
 * delete always happens (an array marks its entry gone in place, a bitset
 * or tier masks stay where they are), and the set stays exact, then is
 * rebuilt whole once memory is back. */
TEST(hset_no_memory)
{
    for (int tiered = 0; tiered < 2; tiered++) {
        start();
        mul = 7;
        if (tiered)
            CHECK(add(100, KVIX_MEDIUM_CPU));
        for (uint32_t x = 0; x < 4; x++)
            CHECK(add(x, KVIX_MEDIUM_GPU));
        for (uint32_t x = 4; x < 40; x++) {
            fail_in = 0;
            CHECK(add(x, KVIX_MEDIUM_GPU) && check()); /* nothing changed */
            fail_in = -1;
            CHECK(add(x, KVIX_MEDIUM_GPU));
        }
        CHECK(form() == F_ARR && check());
        fail_in = 0;
        /* first, last, middle, and runs of gone entries next to each other */
        static const uint32_t order[] = {0, 39, 20, 21, 19, 1, 2, 38, 37, 10};
        for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
            CHECK(del(order[i], KVIX_MEDIUM_GPU));
            CHECK(check());
        }
        CHECK(form() == F_ARR);
        CHECK(add(21, KVIX_MEDIUM_GPU) && check()); /* fails: no change */
        fail_in = -1;
        CHECK(add(21, KVIX_MEDIUM_GPU) && add(0, KVIX_MEDIUM_GPU) && check());
        const kvix_wset *r = kvix_hs_rec(&h);
        CHECK(r && r->n == kvix_live(r));
        fail_in = 0;
        for (uint32_t x = 0; x < 40; x++)
            del(x, KVIX_MEDIUM_GPU);
        CHECK(check() && form() == (tiered ? F_ARR : F_INLINE));
        fail_in = -1;
        if (tiered) {
            fail_in = 0;
            CHECK(del(100, KVIX_MEDIUM_CPU) && check()); /* inline: no memory needed */
            fail_in = -1;
        }
        CHECK(kvix_hs_empty(&h));
        finish();
    }
    /* a bitset that cannot become an array stays a bitset, exact */
    start();
    mul = 7;
    hint = 128;
    for (uint32_t x = 0; x < 1200; x++)
        add(x, KVIX_MEDIUM_GPU);
    CHECK(form() == F_BITS);
    fail_in = 0;
    for (uint32_t x = 0; x < 1195; x++)
        del(x, KVIX_MEDIUM_GPU);
    CHECK(form() == F_BITS && check());
    for (uint32_t x = 1195; x < 1200; x++)
        del(x, KVIX_MEDIUM_GPU);
    CHECK(kvix_hs_empty(&h) && check());
    fail_in = -1;
    finish();
}

/* A set filled to a bitset, drained to nothing and filled again, many
 * times, with holders in random order. */
TEST(hset_shrink_and_grow_again)
{
    start();
    mul = 11;
    int bad = 0;
    for (int round = 0; round < 6 && !bad; round++) {
        uint32_t n = 1 + (uint32_t)(rnd() % 1500);
        for (uint32_t i = 0; i < 3 * n; i++)
            bad |= !add((uint32_t)(rnd() % n), KVIX_MEDIUM_GPU);
        bad |= !check();
        for (uint32_t x = 0; x < NS; x++)
            if (rnd() % 4 == 0)
                bad |= !del(x, KVIX_MEDIUM_GPU);
        bad |= !check();
        for (uint32_t x = 0; x < NS; x++)
            bad |= !del(x, KVIX_MEDIUM_GPU);
        bad |= !check() || !kvix_hs_empty(&h);
    }
    CHECK(!bad);
    finish();
}
