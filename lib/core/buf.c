#include "kvix/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kvix_buf_init(kvix_buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void kvix_buf_release(kvix_buf *b)
{
    free(b->data);
    kvix_buf_init(b);
}

int kvix_buf_reserve(kvix_buf *b, size_t n, kvix_err *err)
{
    if (b->len + n + 1 <= b->cap)
        return KVIX_OK;
    size_t c = b->cap ? b->cap : 256;
    while (c < b->len + n + 1)
        c *= 2;
    char *p = realloc(b->data, c);
    if (!p)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a %zu-byte buffer", c);
    b->data = p;
    b->cap = c;
    return KVIX_OK;
}

int kvix_buf_append(kvix_buf *b, const void *p, size_t n, kvix_err *err)
{
    int rc = kvix_buf_reserve(b, n, err);
    if (rc)
        return rc;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return KVIX_OK;
}

int kvix_buf_printf(kvix_buf *b, kvix_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return kvix_err_set(err, KVIX_EINVAL, "bad format");
    int rc = kvix_buf_reserve(b, (size_t)n, err);
    if (rc)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return KVIX_OK;
}
