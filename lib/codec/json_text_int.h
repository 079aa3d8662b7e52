/* libkvix private: JSON text the encoders share (kvix records and answers,
 * snapshot statistics and differences). */
#ifndef KVIX_JSON_TEXT_INT_H
#define KVIX_JSON_TEXT_INT_H

#include <stddef.h>

#include "kvix/buf.h"
#include "kvix/error.h"

/* Append s[0..len) as a JSON string literal, quotes included, escaped as
 * jansson escapes (names of printable ASCII are copied as they are).
 * KVIX_EINVAL when s is not valid UTF-8 (out unchanged), KVIX_ENOMEM. */
int kvix__json_str_append(kvix_buf *b, const char *s, size_t len, kvix_err *err);

#endif
