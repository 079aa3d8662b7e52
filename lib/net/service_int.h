/* libkvix private: helpers shared by the service's files (lib/service*.c). */
#ifndef KVIX_SERVICE_INT_H
#define KVIX_SERVICE_INT_H

#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "kvix/buf.h"
#include "kvix/error.h"

/* Appenders to a kvix_buf; each returns KVIX_OK or KVIX_ENOMEM. */
int kvix__sj_raw(kvix_buf *b, const char *s, kvix_err *err);
int kvix__sj_u64(kvix_buf *b, uint64_t v, kvix_err *err);
/* A JSON string literal (quotes included), as every kvix encoder writes one
 * (kvix__json_str_append). */
int kvix__sj_str(kvix_buf *b, const char *s, size_t len, kvix_err *err);

/* The literals a body's references stand for (kvix__json_u64_loadb_refs);
 * reusable across bodies, released with kvix__u64_refs_release. */
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
json_t *kvix__json_u64_loadb_refs(const char *text, size_t len, kvix_u64_refs *refs,
                                 kvix_err *err);
void kvix__u64_refs_release(kvix_u64_refs *refs);
static inline uint64_t kvix_u64_ref(const kvix_u64_refs *refs, json_int_t v)
{
    return v >= 0 ? (uint64_t)v : refs->v[(uint64_t)-(v + 1)];
}

/* Members of a request object, by type; `what` names the field in messages
 * ("\"model_name\" is not a string"). Absent: *present = 0 (when present is
 * NULL an absent field is an error "missing ..."). */
int kvix__sj_get_u64(json_t *obj, const char *key, int *present, uint64_t *out, kvix_err *err);
int kvix__sj_get_str(json_t *obj, const char *key, int *present, const char **out,
                    size_t *len, kvix_err *err);

#endif
