/* libkvix private: the one u64-to-decimal writer. kvix_dec64 (kvix/hash.h)
 * is it for embedders; the library's encoders (kvix records and answers,
 * kvhash's lines, snapshot stats and diffs, the HTTP service) inline it. */
#ifndef KVIX_DEC64_INT_H
#define KVIX_DEC64_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* v in decimal at out (at most KVIX_DEC64_MAX bytes, no NUL); its length.
 * Inline, two digits a step, written in place: a Dynamo answer prints six
 * numbers per (worker, dp) scored (1536 for 256 workers), and a call with
 * a variable-length copy per number was a quarter of a /query_by_hash. */
#define KVIX_DEC64_MAX 20
static inline size_t kvix_dec64_put(uint64_t v, char *out)
{
    static const char pairs[] = "00010203040506070809101112131415161718192021222324"
                                "25262728293031323334353637383940414243444546474849"
                                "50515253545556575859606162636465666768697071727374"
                                "75767778798081828384858687888990919293949596979899";
    static const uint64_t pow10[19] = {
        10u, 100u, 1000u, 10000u, 100000u, 1000000u, 10000000u, 100000000u, 1000000000u,
        10000000000u, 100000000000u, 1000000000000u, 10000000000000u, 100000000000000u,
        1000000000000000u, 10000000000000000u, 100000000000000000u, 1000000000000000000u,
        10000000000000000000u};
    if (v < 100) { /* worker ids, ranks and block counts are mostly small */
        if (v < 10) {
            *out = (char)('0' + v);
            return 1;
        }
        memcpy(out, pairs + 2 * v, 2);
        return 2;
    }
    if (v < 10000) { /* 32-bit arithmetic: a cheaper multiply for the division */
        unsigned w = (unsigned)v, hi = w / 100, lo = w - hi * 100;
        if (w < 1000) {
            *out = (char)('0' + hi);
            memcpy(out + 1, pairs + 2 * lo, 2);
            return 3;
        }
        memcpy(out, pairs + 2 * hi, 2);
        memcpy(out + 2, pairs + 2 * lo, 2);
        return 4;
    }
    size_t n = 5;
    while (n < KVIX_DEC64_MAX && v >= pow10[n - 1])
        n++;
    char *p = out + n;
    while (v >= 100) {
        size_t d = (size_t)(v % 100) * 2;
        v /= 100;
        *--p = pairs[d + 1];
        *--p = pairs[d];
    }
    if (v >= 10) {
        *--p = pairs[v * 2 + 1];
        *--p = pairs[v * 2];
    } else {
        *--p = (char)('0' + v);
    }
    return n;
}

#endif
