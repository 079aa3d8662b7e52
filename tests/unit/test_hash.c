/* Contract section 1 test vectors, exactly as listed. */
#include <stdio.h>

#include "harness.h"
#include "kvix/hash.h"

static uint32_t seq_tokens[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

TEST(local_and_seq_vectors)
{
    uint64_t local[3], seq[3];
    CHECK_U64(kvix_hash_blocks(seq_tokens, 12, 4, KVIX_HASH_SEED, local, seq), 3);
    CHECK_U64(local[0], UINT64_C(14643705804678351452));
    CHECK_U64(local[1], UINT64_C(16777012769546811212));
    CHECK_U64(local[2], UINT64_C(483935686894639516));
    CHECK_U64(seq[0], UINT64_C(14643705804678351452));
    CHECK_U64(seq[1], UINT64_C(4945711292740353085));
    CHECK_U64(seq[2], UINT64_C(12583592247330656132));
}

TEST(single_block_lora_multimodal)
{
    uint32_t t[4] = {0, 1, 2, 3};
    CHECK_U64(kvix_hash_local(t, 4, KVIX_HASH_SEED), UINT64_C(9143094415614847814));
    CHECK_U64(kvix_hash_local(t, 4, kvix_hash_lora_seed("adapter-a", 9)),
              UINT64_C(6665157333201000639));
    CHECK_U64(kvix_hash_lora_seed("", 0), KVIX_HASH_SEED);
    CHECK_U64(kvix_hash_lora_seed(NULL, 0), KVIX_HASH_SEED);
    uint64_t mm = 42, out = 0;
    CHECK(kvix_hash_local_mm(t, 4, KVIX_HASH_SEED, &mm, 1, &out, NULL) == KVIX_OK);
    CHECK_U64(out, UINT64_C(18280081842874931122));
}

TEST(multimodal_order_does_not_matter)
{
    uint32_t t[4] = {0, 1, 2, 3};
    uint64_t a[3] = {7, 3, 99}, b[3] = {99, 7, 3}, ha = 0, hb = 1;
    kvix_hash_local_mm(t, 4, KVIX_HASH_SEED, a, 3, &ha, NULL);
    kvix_hash_local_mm(t, 4, KVIX_HASH_SEED, b, 3, &hb, NULL);
    CHECK_U64(ha, hb);
    CHECK_U64(a[0], 7); /* input untouched */
    kvix_err err;
    uint64_t many[KVIX_HASH_MM_MAX + 1] = {0};
    CHECK(kvix_hash_local_mm(t, 4, KVIX_HASH_SEED, many, KVIX_HASH_MM_MAX + 1, &ha, &err) ==
          KVIX_ELIMIT);
}

TEST(block_size_two_and_partial)
{
    uint32_t t[7] = {0, 1, 2, 3, 4, 5, 6};
    uint64_t local[3];
    CHECK_U64(kvix_hash_blocks(t, 7, 2, KVIX_HASH_SEED, local, NULL), 3);
    CHECK_U64(local[0], UINT64_C(10918435022357402928));
    CHECK_U64(local[1], UINT64_C(10731123482949079648));
    CHECK_U64(local[2], UINT64_C(12189426826560619506));
    CHECK_U64(kvix_hash_blocks(t, 1, 2, KVIX_HASH_SEED, local, NULL), 0);
}

static void check128(kvix_u128 v, const char *hex)
{
    char buf[33];
    kvix_hex128(v, buf);
    CHECK_STR(buf, hex);
}

TEST(psh_vectors)
{
    kvix_u128 v;
    const uint64_t seq = UINT64_C(0x1234567890abcdef), local = UINT64_C(0xfedcba9876543210);
    CHECK(kvix_hash_psh(seq, 100, local, &v, NULL) == 0);
    check128(v, "191cba98765432101234567890abcdef");
    kvix_hash_psh(seq, 1000, local, &v, NULL);
    check128(v, "40fa3a98765432101234567890abcdef");
    kvix_hash_psh(seq, 100000, local, &v, NULL);
    check128(v, "8061a818765432101234567890abcdef");
    kvix_hash_psh(seq, 20000000, local, &v, NULL);
    check128(v, "c0989680765432101234567890abcdef");
    kvix_err err;
    CHECK(kvix_hash_psh(seq, KVIX_PSH_POS_LIMIT, local, &v, &err) == KVIX_ERANGE);
    CHECK(kvix_hash_psh(seq, KVIX_PSH_POS_LIMIT - 1, local, &v, &err) == KVIX_OK);
}

TEST(plh_vectors)
{
    kvix_u128 v;
    const uint64_t a = UINT64_C(0x1234567890abcdef), b = UINT64_C(0xfedcba9876543210);
    CHECK(kvix_hash_plh(a, b, 100, &v, NULL) == 0);
    check128(v, "1936e5d4c3b2a1908234567890abcdef");
    kvix_hash_plh(a, b, 255, &v, NULL);
    check128(v, "3ff6e5d4c3b2a1908034567890abcdef");
    kvix_hash_plh(UINT64_C(0xabcdef0123456789), a, 256, &v, NULL);
    check128(v, "40401a2b3c4855e6f7cdef0123456789");
    kvix_hash_plh(a, 0, 0, &v, NULL);
    check128(v, "00000000000000000234567890abcdef");
    kvix_err err;
    CHECK(kvix_hash_plh(a, b, KVIX_PLH_POS_LIMIT, &v, &err) == KVIX_ERANGE);
    CHECK(kvix_hash_plh(a, b, KVIX_PLH_POS_LIMIT - 1, &v, &err) == KVIX_OK);
}

TEST(positional_from_tokens)
{
    uint32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t local[2], seq[2];
    kvix_hash_blocks(t, 8, 4, KVIX_HASH_SEED, local, seq);
    kvix_u128 v;
    kvix_hash_psh(seq[0], 0, local[0], &v, NULL);
    check128(v, "0038e4d7fb2dca5ccb38e4d7fb2dca5c");
    kvix_hash_plh(seq[0], 0, 0, &v, NULL);
    check128(v, "00000000000000000338e4d7fb2dca5c");
    kvix_hash_psh(seq[1], 1, local[1], &v, NULL);
    check128(v, "0053ec39b907b74c44a2b2379d6d3c3d");
    kvix_hash_plh(seq[1], seq[0], 1, &v, NULL);
    check128(v, "0059c726bfd96e52e4a2b2379d6d3c3d");
}

TEST(hex_round_trip)
{
    char buf[17];
    kvix_hex64(UINT64_C(0x00a1b2c3d4e5f607), buf);
    CHECK_STR(buf, "00a1b2c3d4e5f607");
    uint64_t v = 0;
    CHECK(kvix_parse_hex64("00A1b2c3d4e5f607", 16, &v) == 0);
    CHECK_U64(v, UINT64_C(0x00a1b2c3d4e5f607));
    CHECK(kvix_parse_hex64("", 0, &v) == KVIX_EINVAL);
    CHECK(kvix_parse_hex64("12345678901234567", 17, &v) == KVIX_EINVAL);
    CHECK(kvix_parse_hex64("12g4", 4, &v) == KVIX_EINVAL);
}

/* digits only, no NUL: the byte after them is left as it was */
static void check_dec(size_t n, const char *buf, const char *want)
{
    CHECK(n == strlen(want));
    CHECK(memcmp(buf, want, n) == 0);
    CHECK(buf[n] == '#');
}

TEST(decimal_forms)
{
    char buf[48];
    memset(buf, '#', sizeof buf);
    check_dec(kvix_dec64(0, buf), buf, "0");
    check_dec(kvix_dec64(10, buf), buf, "10");
    check_dec(kvix_dec64(UINT64_MAX, buf), buf, "18446744073709551615");
    memset(buf, '#', sizeof buf);
    check_dec(kvix_dec128((kvix_u128){0, 0}, buf), buf, "0");
    check_dec(kvix_dec128((kvix_u128){1, 0}, buf), buf, "18446744073709551616");
    check_dec(kvix_dec128((kvix_u128){UINT64_MAX, UINT64_MAX}, buf), buf,
              "340282366920938463463374607431768211455");
}

/* The library's one u64 writer (every encoder inlines it): each length and
 * its edges, then random values of every magnitude, against printf. */
static int dec64_matches(uint64_t v)
{
    char buf[32], want[32];
    memset(buf, '#', sizeof buf);
    snprintf(want, sizeof want, "%" PRIu64, v);
    size_t k = kvix_dec64(v, buf);
    return CHECK(k == strlen(want)) && CHECK(memcmp(buf, want, k) == 0) && CHECK(buf[k] == '#');
}

TEST(decimal_u64_against_printf)
{
    dec64_matches(0);
    dec64_matches(UINT64_MAX);
    dec64_matches(UINT64_MAX - 1);
    for (uint64_t p = 10;; p *= 10) {
        dec64_matches(p - 1);
        dec64_matches(p);
        dec64_matches(p + 1);
        if (p > UINT64_MAX / 10)
            break;
    }
    uint64_t s = th_seed();
    for (int i = 0; i < 20000; i++) {
        uint64_t x = th_splitmix(&s);
        if (!dec64_matches(x >> (x % 64)))
            break;
    }
}
