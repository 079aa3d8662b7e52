#include "kvix/hash.h"

#include <string.h>
/* XXH3 inlined rather than called through libxxhash: the rolling hash is one
 * 16-byte XXH3 per block on every query's hot path, and the call through the
 * shared library's PLT costs more than the hash itself. XXH_INLINE_ALL also
 * gives XXH3_state_t for the stack. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "dec64_int.h"

uint64_t kvix_hash_lora_seed(const char *name, size_t len)
{
    if (!name || len == 0)
        return KVIX_HASH_SEED;
    return (uint64_t)KVIX_HASH_SEED + XXH3_64bits_withSeed(name, len, 0);
}

uint64_t kvix_hash_salt_seed(const char *lora, size_t llen, const char *salt, size_t slen)
{
    uint64_t seed = kvix_hash_lora_seed(lora, llen);
    if (salt && slen)
        seed += XXH3_64bits_withSeed(salt, slen, 1);
    return seed;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KVIX_HOST_LE 1
#else
#define KVIX_HOST_LE 0
#endif

static inline void put_le64(unsigned char *p, uint64_t v)
{
#if KVIX_HOST_LE
    memcpy(p, &v, sizeof v); /* gcc does not merge the byte loop below into one store */
#else
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
#endif
}

/* Tokens are hashed as le32; on a little-endian host that is their memory
 * image, so the common case hashes in place without a copy. */
static void update_tokens(XXH3_state_t *st, const uint32_t *tokens, size_t bs)
{
#if KVIX_HOST_LE
    XXH3_64bits_update(st, tokens, bs * sizeof *tokens);
#else
    unsigned char buf[256];
    size_t n = 0;
    for (size_t i = 0; i < bs; i++) {
        for (int b = 0; b < 4; b++)
            buf[n++] = (unsigned char)(tokens[i] >> (8 * b));
        if (n == sizeof buf) {
            XXH3_64bits_update(st, buf, n);
            n = 0;
        }
    }
    XXH3_64bits_update(st, buf, n);
#endif
}

uint64_t kvix_hash_local(const uint32_t *tokens, size_t bs, uint64_t seed)
{
#if KVIX_HOST_LE
    return XXH3_64bits_withSeed(tokens, bs * sizeof *tokens, seed);
#else
    XXH3_state_t st;
    memset(&st, 0, sizeof st);
    XXH3_64bits_reset_withSeed(&st, seed);
    update_tokens(&st, tokens, bs);
    return XXH3_64bits_digest(&st);
#endif
}

int kvix_hash_local_mm(const uint32_t *tokens, size_t bs, uint64_t seed,
                       const uint64_t *mm, size_t nmm, uint64_t *out, kvix_err *err)
{
    if (nmm > KVIX_HASH_MM_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%zu multimodal hashes in one block (limit %u)",
                            nmm, KVIX_HASH_MM_MAX);
    uint64_t sorted[KVIX_HASH_MM_MAX];
    for (size_t i = 0; i < nmm; i++) { /* insertion sort: nmm is small */
        size_t j = i;
        while (j > 0 && sorted[j - 1] > mm[i]) {
            sorted[j] = sorted[j - 1];
            j--;
        }
        sorted[j] = mm[i];
    }
    XXH3_state_t st;
    /* Zeroed because gcc cannot see that reset initialises what digest reads. */
    memset(&st, 0, sizeof st);
    XXH3_64bits_reset_withSeed(&st, seed);
    update_tokens(&st, tokens, bs);
    for (size_t i = 0; i < nmm; i++) {
        unsigned char le[8];
        put_le64(le, sorted[i]);
        XXH3_64bits_update(&st, le, sizeof le);
    }
    *out = XXH3_64bits_digest(&st);
    return KVIX_OK;
}

uint64_t kvix_hash_seq_next(uint64_t prev, uint64_t local)
{
    unsigned char buf[16];
    put_le64(buf, prev);
    put_le64(buf + 8, local);
    return XXH3_64bits_withSeed(buf, sizeof buf, KVIX_HASH_SEED);
}

size_t kvix_hash_blocks(const uint32_t *tokens, size_t ntokens, size_t bs, uint64_t seed,
                        uint64_t *local_out, uint64_t *seq_out)
{
    size_t n = ntokens / bs;
    uint64_t seq = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t local = kvix_hash_local(tokens + i * bs, bs, seed);
        seq = i == 0 ? local : kvix_hash_seq_next(seq, local);
        if (local_out)
            local_out[i] = local;
        if (seq_out)
            seq_out[i] = seq;
    }
    return n;
}

size_t kvix_hash_eagle_count(size_t ntokens, size_t bs)
{
    return ntokens ? (ntokens - 1) / bs : 0;
}

size_t kvix_hash_blocks_eagle(const uint32_t *tokens, size_t ntokens, size_t bs, uint64_t seed,
                              uint64_t *local_out, uint64_t *seq_out)
{
    size_t n = kvix_hash_eagle_count(ntokens, bs);
    uint64_t seq = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t local = kvix_hash_local(tokens + i * bs, bs + 1, seed);
        seq = i == 0 ? local : kvix_hash_seq_next(seq, local);
        if (local_out)
            local_out[i] = local;
        if (seq_out)
            seq_out[i] = seq;
    }
    return n;
}

static inline uint64_t low_bits(uint64_t v, unsigned n)
{
    return n >= 64 ? v : v & ((UINT64_C(1) << n) - 1);
}

int kvix_hash_psh(uint64_t seq, uint64_t pos, uint64_t local, kvix_u128 *out, kvix_err *err)
{
    static const struct { uint64_t limit; unsigned p, r; } modes[] = {
        {UINT64_C(1) << 8, 8, 54},
        {UINT64_C(1) << 16, 16, 46},
        {UINT64_C(1) << 24, 24, 38},
        {UINT64_C(1) << 31, 31, 31},
    };
    for (unsigned m = 0; m < 4; m++) {
        if (pos < modes[m].limit) {
            out->hi = (uint64_t)m << 62 | low_bits(pos, modes[m].p) << modes[m].r |
                      low_bits(local, modes[m].r);
            out->lo = seq;
            return KVIX_OK;
        }
    }
    return kvix_err_set(err, KVIX_ERANGE, "position %llu too deep for a positional sequence hash",
                        (unsigned long long)pos);
}

/* Lineage modes: (P, M = N); the position limit of mode m is 2^P. */
static const unsigned plh_p[3] = {8, 16, 24}, plh_m[3] = {59, 55, 51};

static int plh_mode(uint64_t pos)
{
    for (int m = 0; m < 3; m++)
        if (pos < (UINT64_C(1) << plh_p[m]))
            return m;
    return -1;
}

int kvix_hash_plh(uint64_t cur, uint64_t parent, uint64_t pos, kvix_u128 *out, kvix_err *err)
{
    int m = plh_mode(pos);
    if (m < 0)
        return kvix_err_set(err, KVIX_ERANGE,
                            "position %llu too deep for a positional lineage hash",
                            (unsigned long long)pos);
    unsigned n = plh_m[m];
    /* The block's own bits shrink to what its child's mode can hold as a
     * parent, so a child can verify its parent across a mode boundary. */
    int next = plh_mode(pos + 1);
    unsigned ncur = next >= 0 && plh_m[next] < n ? plh_m[next] : n;
    unsigned __int128 v = (unsigned __int128)m << 126 |
                          (unsigned __int128)low_bits(pos, plh_p[m]) << (2 * n) |
                          (unsigned __int128)low_bits(parent, n) << n |
                          low_bits(cur, ncur);
    out->hi = (uint64_t)(v >> 64);
    out->lo = (uint64_t)v;
    return KVIX_OK;
}

/* Two hex digits per table entry: one lookup per byte, not per nibble. */
static const char hexpairs[513] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
    "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
    "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
    "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
    "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
    "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

void kvix_hex64(uint64_t v, char out[17])
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        memcpy(out + 2 * i, hexpairs + 2 * (v & 0xff), 2);
    out[16] = '\0';
}

void kvix_hex128(kvix_u128 v, char out[33])
{
    kvix_hex64(v.hi, out);
    kvix_hex64(v.lo, out + 16);
}

/* Digits are made from the low end into a scratch array, then copied in
 * order: the length is only known at the end. */
size_t kvix_dec128(kvix_u128 v, char *out)
{
    unsigned __int128 x = (unsigned __int128)v.hi << 64 | v.lo;
    char tmp[39];
    size_t n = 0;
    do {
        tmp[sizeof tmp - ++n] = (char)('0' + (unsigned)(x % 10));
        x /= 10;
    } while (x);
    memcpy(out, tmp + sizeof tmp - n, n);
    return n;
}

size_t kvix_dec64(uint64_t v, char *out)
{
    return kvix_dec64_put(v, out);
}

int kvix_parse_hex64(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 16)
        return KVIX_EINVAL;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned c = (unsigned char)s[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if ((c | 32) >= 'a' && (c | 32) <= 'f')
            d = (c | 32) - 'a' + 10;
        else
            return KVIX_EINVAL;
        v = v << 4 | d;
    }
    *out = v;
    return KVIX_OK;
}
