/* libkvix private: helpers shared by the service's files (lib/service*.c). */
#ifndef KVIX_SERVICE_INT_H
#define KVIX_SERVICE_INT_H

#include <jansson.h>
#include <stdint.h>

#include "kvix/buf.h"
#include "kvix/error.h"

/* Appenders to a kvix_buf; each returns KVIX_OK or KVIX_ENOMEM. */
int kvix_sj_raw(kvix_buf *b, const char *s, kvix_err *err);
int kvix_sj_u64(kvix_buf *b, uint64_t v, kvix_err *err);
/* v in decimal at out (at most KVIX_SJ_U64_MAX bytes, no NUL); its length. */
#define KVIX_SJ_U64_MAX 20
size_t kvix_sj_u64_put(char *out, uint64_t v);
/* A JSON string literal (quotes included), escaped by jansson. */
int kvix_sj_str(kvix_buf *b, const char *s, size_t len, kvix_err *err);

/* Members of a request object, by type; `what` names the field in messages
 * ("\"model_name\" is not a string"). Absent: *present = 0 (when present is
 * NULL an absent field is an error "missing ..."). */
int kvix_sj_get_u64(json_t *obj, const char *key, int *present, uint64_t *out, kvix_err *err);
int kvix_sj_get_str(json_t *obj, const char *key, int *present, const char **out,
                    size_t *len, kvix_err *err);

#endif
