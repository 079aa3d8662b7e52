/* libFuzzer target for token lines (kvix_tokens_parse, kvhash's input;
 * tests/fuzz/run.sh).
 *
 * Whatever the line: no crash, no leak, no sanitizer report, never more
 * tokens than the line can hold; and a line that parses gives the same
 * tokens when written back in each of the three shapes (whitespace ints
 * through the SIMD and scalar scanners, a flat JSON array through the hand
 * scanner, an object through jansson), so the fast paths and jansson agree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvix/hash.h"
#include "kvix/tokens.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kvix_tokens t, u;
static char *text;
static size_t text_cap;

static void same_again(const char *open, const char *sep, const char *close, int pad)
{
    size_t need = t.n * 12 + 64 + (size_t)pad;
    if (need > text_cap) {
        free(text);
        text_cap = need;
        text = malloc(text_cap);
        if (!text)
            abort();
    }
    size_t o = (size_t)snprintf(text, text_cap, "%*s%s", pad, "", open);
    for (size_t i = 0; i < t.n; i++)
        o += (size_t)snprintf(text + o, text_cap - o, "%s%u", i ? sep : "", t.tok[i]);
    o += (size_t)snprintf(text + o, text_cap - o, "%s", close);
    kvix_err err;
    if (kvix_tokens_parse(&u, text, o, KVIX_HASH_SEED, &err) != KVIX_OK || u.n != t.n ||
        (t.n && memcmp(u.tok, t.tok, t.n * sizeof *t.tok) != 0))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvix_err err;
    int rc = kvix_tokens_parse(&t, (const char *)data, size, KVIX_HASH_SEED, &err);
    if (t.n > size / 2 + 1)
        abort();
    if (rc != KVIX_OK)
        return 0;
    if (memchr(t.id, '\0', sizeof t.id) == NULL)
        abort();
    /* pads move the tokens across the 64-byte chunks of the SIMD scanner */
    same_again("", " ", "", (int)(size % 64));
    same_again("", "\t", "\r", 0);
    same_again("[", ",", "]", 0);
    same_again("{\"tokens\":[", ",", "]}", 0);
    return 0;
}
