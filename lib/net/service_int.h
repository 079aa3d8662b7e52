/* libkvix private: helpers shared by the service's files (lib/service*.c). */
#ifndef KVIX_SERVICE_INT_H
#define KVIX_SERVICE_INT_H

#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "kvix/buf.h"
#include "kvix/error.h"

/* Appenders to a kvix_buf; each returns KVIX_OK or KVIX_ENOMEM. */
int kvix_sj_raw(kvix_buf *b, const char *s, kvix_err *err);
int kvix_sj_u64(kvix_buf *b, uint64_t v, kvix_err *err);
/* v in decimal at out (at most KVIX_SJ_U64_MAX bytes, no NUL); its length.
 * Inline, two digits a step, written in place: a Dynamo answer prints six
 * numbers per (worker, dp) scored (1536 for 256 workers), and a call with
 * a variable-length copy per number was a quarter of a /query_by_hash. */
#define KVIX_SJ_U64_MAX 20
static inline size_t kvix_sj_u64_put(char *out, uint64_t v)
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
    while (n < KVIX_SJ_U64_MAX && v >= pow10[n - 1])
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
/* A JSON string literal (quotes included), escaped by jansson. */
int kvix_sj_str(kvix_buf *b, const char *s, size_t len, kvix_err *err);

/* The literals a body's references stand for (kvix_json_u64_loadb_refs);
 * reusable across bodies, released with kvix_u64_refs_release. */
typedef struct kvix_u64_refs {
    uint64_t *v;
    size_t n, cap;
} kvix_u64_refs;
/* kvix_json_u64_loadb, but long integer literals reach jansson as references
 * -(i + 1) to refs->v[i] (see u64_rewrite): read every integer of the
 * document back with kvix_u64_ref. Same documents accepted, same errors,
 * but for one ceiling: a query holds at most KVIX_QUERY_CONTAINERS_MAX arrays
 * and objects (KVIX_ELIMIT, before jansson builds any: 8 MiB of [[],[],...]
 * made ~600 MB of them). */
#define KVIX_QUERY_CONTAINERS_MAX 4096
json_t *kvix_json_u64_loadb_refs(const char *text, size_t len, kvix_u64_refs *refs,
                                 kvix_err *err);
void kvix_u64_refs_release(kvix_u64_refs *refs);
static inline uint64_t kvix_u64_ref(const kvix_u64_refs *refs, json_int_t v)
{
    return v >= 0 ? (uint64_t)v : refs->v[(uint64_t)-(v + 1)];
}

/* Members of a request object, by type; `what` names the field in messages
 * ("\"model_name\" is not a string"). Absent: *present = 0 (when present is
 * NULL an absent field is an error "missing ..."). */
int kvix_sj_get_u64(json_t *obj, const char *key, int *present, uint64_t *out, kvix_err *err);
int kvix_sj_get_str(json_t *obj, const char *key, int *present, const char **out,
                    size_t *len, kvix_err *err);

#endif
