/* kvix: a growable byte buffer for encoders. */
#ifndef KVIX_BUF_H
#define KVIX_BUF_H

#include <stddef.h>

#include "kvix/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvix_buf {
    char *data; /* owned; NUL-terminated after every append (not counted in len) */
    size_t len, cap;
} kvix_buf;

void kvix_buf_init(kvix_buf *b);
/* Free the storage; b is empty and reusable afterwards. */
void kvix_buf_release(kvix_buf *b);
/* Make room for n more bytes (plus the NUL). KVIX_ENOMEM on failure. */
int kvix_buf_reserve(kvix_buf *b, size_t n, kvix_err *err);
int kvix_buf_append(kvix_buf *b, const void *p, size_t n, kvix_err *err);
int kvix_buf_printf(kvix_buf *b, kvix_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Where a writer of long output (a snapshot diff's blocks) sends what it has
 * written so far: called when b holds KVIX_BUF_DRAIN_AT bytes or more, it
 * takes them (writes them out) and empties b (b->len = 0), or returns
 * non-zero, which stops the writer and is what the writer returns (its err
 * untouched). The writer's output then reaches the caller in pieces, the
 * last of them left in b. */
typedef int (*kvix_buf_drain_fn)(void *ctx, kvix_buf *b);
#define KVIX_BUF_DRAIN_AT (64u << 10)

#ifdef __cplusplus
}
#endif
#endif
