/* libkvix private: the UTF-8 rule every kvix text obeys (names, ids), the
 * one jansson applies to JSON: shortest forms only, no surrogates, nothing
 * past U+10FFFF. A name that passes can always be written as JSON and read
 * back, whatever framing or file it came from. */
#ifndef KVIX_UTF8_INT_H
#define KVIX_UTF8_INT_H

#include <stddef.h>

/* 1 if s[0..len) is valid UTF-8 (NUL bytes are the caller's rule). */
static inline int kvix_utf8_valid(const char *s, size_t len)
{
    if (len == 0)
        return 1; /* s may be NULL then (an empty msgpack string): no arithmetic on it */
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        unsigned c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        size_t n;
        unsigned min, v;
        if (c >= 0xc2 && c <= 0xdf) {
            n = 1, min = 0x80, v = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2, min = 0x800, v = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3, min = 0x10000, v = c & 0x07;
        } else {
            return 0; /* a continuation byte, an overlong lead, or past U+10FFFF */
        }
        if ((size_t)(end - p) <= n)
            return 0;
        for (size_t i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return 0;
            v = v << 6 | (p[i] & 0x3f);
        }
        if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
            return 0;
        p += n + 1;
    }
    return 1;
}

#endif
