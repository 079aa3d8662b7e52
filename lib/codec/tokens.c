/* Token lines (tokens.h): kvhash's input parser, in the library so that
 * kvhash, the fuzz target and any other reader judge a line alike.
 *
 * The time of kvhash goes into parsing, so the two common shapes
 * (whitespace-separated ints, a flat JSON int array) are scanned by hand;
 * anything else JSON-looking goes to jansson, which also explains what is
 * wrong with a line the fast paths refuse. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "kvix/hash.h"
#include "kvix/tokens.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KVIX_HOST_LITTLE 1
#else
#define KVIX_HOST_LITTLE 0
#endif

/* The line ceiling bounds the token count below the contract's token
 * ceiling, and positions below the lineage hash's limit. */
_Static_assert(KVIX_TOKENS_LINE_MAX / 2 + 1 <= KVIX_TOKENS_MAX, "line ceiling must bound tokens");
_Static_assert(KVIX_TOKENS_LINE_MAX / 2 + 1 <= KVIX_PLH_POS_LIMIT,
               "line ceiling must bound positions");

void kvix_tokens_init(kvix_tokens *t)
{
    memset(t, 0, sizeof *t);
}

void kvix_tokens_release(kvix_tokens *t)
{
    free(t->tok);
    free(t->mm);
    t->tok = NULL;
    t->mm = NULL;
    t->n = t->cap = t->nmm = t->cap_mm = 0;
}

static int tok_reserve(kvix_tokens *t, size_t n, kvix_err *err)
{
    if (n <= t->cap)
        return KVIX_OK;
    size_t c = t->cap ? t->cap : 4096;
    while (c < n)
        c *= 2;
    uint32_t *p = realloc(t->tok, c * sizeof *p);
    if (!p)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory (%zu token ids)", c);
    t->tok = p;
    t->cap = c;
    return KVIX_OK;
}

/* ---- messages ---------------------------------------------------------- */

/* A token as it appeared, quoted for a message: at most 24 bytes, control
 * and non-ASCII bytes escaped so a binary line cannot garble the terminal. */
static void quote_token(char *dst, size_t cap, const char *s, size_t len)
{
    size_t o = 0, i;
    for (i = 0; i < len && i < 24 && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '\\')
            o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
        else
            dst[o++] = (char)c;
    }
    if (i < len && o + 4 < cap)
        o += (size_t)snprintf(dst + o, cap - o, "...");
    dst[o] = '\0';
}

static int is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* ---- whitespace-separated integers (not JSON: our own format) ------------ */

static int bad_token(const char *s, const char *end, const char *why, kvix_err *err)
{
    const char *e = s;
    while (e < end && !is_ws((unsigned char)*e))
        e++;
    char q[128];
    quote_token(q, sizeof q, s, (size_t)(e - s));
    return kvix_err_set(err, KVIX_EINVAL, "token '%s' %s", q, why);
}

/* The digits at p (p[0] is one) as a number; *q gets the first byte after
 * them, *big is set when the value exceeds 2^32-1. Tokens of up to seven
 * digits, nearly all of them, are converted eight bytes at a time (SWAR):
 * the digit test and the conversion are branch-free, so the varying token
 * lengths cost no mispredicted branch per digit. */
static inline uint32_t scan_uint(const char *p, const char *end, const char **q, int *big)
{
    if (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        /* a byte is a digit iff both nibble tests give 3; carries of the
         * addition only reach bytes after the first non-digit */
        uint64_t t = (w & UINT64_C(0xf0f0f0f0f0f0f0f0)) |
                     (((w + UINT64_C(0x0606060606060606)) & UINT64_C(0xf0f0f0f0f0f0f0f0)) >> 4);
        uint64_t m = t ^ UINT64_C(0x3333333333333333);
        if (KVIX_HOST_LITTLE && m) {
            unsigned k = (unsigned)__builtin_ctzll(m) >> 3; /* digits: 1..7 */
            uint64_t x = (w << (8 * (8 - k))) & UINT64_C(0x0f0f0f0f0f0f0f0f);
            x = (x * 2561) >> 8;
            x = ((x & UINT64_C(0x00ff00ff00ff00ff)) * 6553601) >> 16;
            x = ((x & UINT64_C(0x0000ffff0000ffff)) * UINT64_C(42949672960001)) >> 32;
            *q = p + k;
            *big = 0;
            return (uint32_t)x;
        }
    }
    uint64_t v = 0;
    unsigned d;
    int over = 0;
    while (p < end && (d = (unsigned)(unsigned char)*p - '0') <= 9) {
        v = v * 10 + d;
        if (v > UINT32_MAX) { /* sticky, and v stays small enough not to wrap */
            over = 1;
            v = UINT32_MAX + UINT64_C(1);
        }
        p++;
    }
    *q = p;
    *big = over;
    return (uint32_t)v;
}

/* Parse p[0..end) into h->tok. The caller reserved room for (len+1)/2 tokens,
 * the most a line of that length can hold, so the loop needs no bound check. */
static int parse_ws(kvix_tokens *h, const char *p, const char *end, kvix_err *err)
{
    uint32_t *t = h->tok;
    size_t n = 0;
    while (p < end) {
        unsigned char c = (unsigned char)*p;
        if (is_ws(c)) {
            p++;
            continue;
        }
        const char *s = p;
        if ((unsigned)c - '0' > 9)
            return bad_token(s, end, c == '-' && p + 1 < end && (unsigned)(p[1] - '0') <= 9
                                         ? "is negative" : "is not a number", err);
        int big;
        uint32_t v = scan_uint(p, end, &p, &big);
        if (p < end && !is_ws((unsigned char)*p))
            return bad_token(s, end, "is not a number", err);
        if (big)
            return bad_token(s, end, "is out of range (max 4294967295)", err);
        t[n++] = v;
    }
    h->n = n;
    return 0;
}

#ifdef __SSE2__
/* Whitespace-separated ints, 64 bytes at a time: SSE2 classifies every byte
 * as digit or whitespace, so token starts come from a bit mask instead of
 * from the end of the previous token, and the conversions of consecutive
 * tokens (scan_uint) overlap in the pipeline. Returns 1 with h->tok filled
 * when the line is well formed; 0 for anything else, which parse_ws then
 * judges and explains. */
static uint64_t classify64(const char *p, uint64_t *ws)
{
    const __m128i zero = _mm_set1_epi8('0'), nine = _mm_set1_epi8(9);
    const __m128i sp = _mm_set1_epi8(' '), tab = _mm_set1_epi8('\t'), cr = _mm_set1_epi8('\r');
    uint64_t dm = 0, wm = 0;
    for (int i = 0; i < 4; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
        __m128i d = _mm_sub_epi8(v, zero);
        __m128i dig = _mm_cmpeq_epi8(_mm_min_epu8(d, nine), d); /* unsigned d <= 9 */
        __m128i w = _mm_or_si128(_mm_cmpeq_epi8(v, sp),
                                 _mm_or_si128(_mm_cmpeq_epi8(v, tab), _mm_cmpeq_epi8(v, cr)));
        dm |= (uint64_t)(uint16_t)_mm_movemask_epi8(dig) << (16 * i);
        wm |= (uint64_t)(uint16_t)_mm_movemask_epi8(w) << (16 * i);
    }
    *ws = wm;
    return dm;
}

static int parse_ws_fast(kvix_tokens *h, const char *p, const char *end)
{
    uint32_t *t = h->tok;
    size_t n = 0;
    const char *resume = p; /* end of the last token converted */
    uint64_t carry = 0;     /* the previous chunk ended inside a token */
    int big;
    for (; end - p >= 64; p += 64) {
        uint64_t wm, dm = classify64(p, &wm);
        if ((dm | wm) != ~UINT64_C(0))
            return 0;
        uint64_t starts = dm & ~(dm << 1 | carry);
        carry = dm >> 63;
        while (starts) {
            const char *s = p + __builtin_ctzll(starts);
            starts &= starts - 1;
            t[n++] = scan_uint(s, end, &resume, &big);
            if (big)
                return 0;
        }
    }
    /* the tail, after the last token that may have run past the chunks */
    if (resume > p)
        p = resume;
    while (p < end) {
        unsigned char c = (unsigned char)*p;
        if (is_ws(c)) {
            p++;
            continue;
        }
        if ((unsigned)c - '0' > 9)
            return 0;
        t[n++] = scan_uint(p, end, &p, &big);
        if (big || (p < end && !is_ws((unsigned char)*p)))
            return 0;
    }
    h->n = n;
    return 1;
}
#endif

/* ---- JSON ------------------------------------------------------------- */

/* The flat `[1,2,3]` shape, strictly: digits without leading zeros, up to
 * 2^32-1, commas, JSON whitespace. Returns 1 when the whole line is that
 * shape, 0 for anything else, which jansson then judges (and explains). */
static int fast_array(kvix_tokens *h, const char *p, const char *end)
{
    uint32_t *t = h->tok;
    size_t n = 0;
    p++; /* '[' */
    while (p < end && (is_ws((unsigned char)*p) || *p == '\n'))
        p++;
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            if (p >= end || (unsigned)(unsigned char)*p - '0' > 9)
                return 0;
            if (*p == '0' && p + 1 < end && (unsigned)(unsigned char)p[1] - '0' <= 9)
                return 0;
            int big;
            uint32_t v = scan_uint(p, end, &p, &big);
            if (big)
                return 0;
            t[n++] = v;
            while (p < end && is_ws((unsigned char)*p))
                p++;
            if (p < end && *p == ',') {
                p++;
                while (p < end && is_ws((unsigned char)*p))
                    p++;
                continue;
            }
            if (p < end && *p == ']') {
                p++;
                break;
            }
            return 0;
        }
    }
    while (p < end && is_ws((unsigned char)*p))
        p++;
    if (p != end)
        return 0;
    h->n = n;
    return 1;
}

static void json_text(const json_t *v, char *dst, size_t cap)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) {
        snprintf(dst, cap, "?");
        return;
    }
    quote_token(dst, cap, s, strlen(s));
    free(s);
}

static int bad_json_token(const json_t *v, const char *why, kvix_err *err)
{
    char q[128];
    json_text(v, q, sizeof q);
    return kvix_err_set(err, KVIX_EINVAL, "token '%s' %s", q, why);
}

static int push_json_token(kvix_tokens *h, const json_t *v, kvix_err *err)
{
    if (json_is_real(v))
        return bad_json_token(v, "is not an integer", err);
    if (!json_is_integer(v))
        return bad_json_token(v, "is not a number", err);
    json_int_t x = json_integer_value(v);
    if (x < 0)
        return bad_json_token(v, "is negative", err);
    if ((unsigned long long)x > UINT32_MAX)
        return bad_json_token(v, "is out of range (max 4294967295)", err);
    h->tok[h->n++] = (uint32_t)x;
    return 0;
}

/* Token ids from a JSON array. In an object, an array of arrays (a stored
 * event's per-block "tokens") is flattened one level. Room is reserved by
 * the caller. */
static int tokens_from_json(kvix_tokens *h, const json_t *arr, int nested, kvix_err *err)
{
    size_t i, j;
    json_t *v, *w;
    h->n = 0;
    json_array_foreach(arr, i, v) {
        if (nested && json_is_array(v)) {
            json_array_foreach(v, j, w) {
                if (push_json_token(h, w, err) < 0)
                    return KVIX_EINVAL;
            }
        } else if (push_json_token(h, v, err) < 0) {
            return KVIX_EINVAL;
        }
    }
    return 0;
}

/* A string member "lora" or "salt" into dst; *has when present. */
static int object_name(const json_t *obj, const char *key, char dst[KVIX_NAME_MAX], int *has,
                       kvix_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return kvix_err_set(err, KVIX_EINVAL, "\"%s\" is not a string", key);
    size_t len = json_string_length(v);
    if (len >= KVIX_NAME_MAX)
        return kvix_err_set(err, KVIX_EINVAL, "\"%s\" longer than %d bytes", key,
                            KVIX_NAME_MAX - 1);
    if (memchr(json_string_value(v), '\0', len))
        return kvix_err_set(err, KVIX_EINVAL, "\"%s\" contains a NUL byte", key);
    memcpy(dst, json_string_value(v), len + 1);
    *has = 1;
    return 0;
}

int kvix_tokens_mm_hash(const char *s, size_t len, uint64_t *out)
{
    if (len == 64) /* vLLM's identifier: a hex digest, of which the first 16 digits */
        len = 16;
    return kvix_parse_hex64(s, len, out);
}

/* "mm": per block, null or an array of multimodal hashes. */
static int object_mm(const json_t *obj, kvix_tokens *h, kvix_err *err)
{
    const json_t *mm = json_object_get(obj, "mm");
    if (!mm || json_is_null(mm))
        return 0;
    if (!json_is_array(mm))
        return kvix_err_set(err, KVIX_EINVAL, "\"mm\" is not an array");
    h->has_mm = 1;
    for (size_t b = 0; b < json_array_size(mm); b++) {
        const json_t *blk = json_array_get(mm, b);
        if (json_is_null(blk))
            continue;
        if (!json_is_array(blk))
            return kvix_err_set(err, KVIX_EINVAL, "\"mm\"[%zu] is not an array", b);
        if (json_array_size(blk) > KVIX_HASH_MM_MAX)
            return kvix_err_set(err, KVIX_EINVAL,
                                "\"mm\"[%zu] has %zu hashes (limit %u a block)", b,
                                json_array_size(blk), KVIX_HASH_MM_MAX);
        for (size_t i = 0; i < json_array_size(blk); i++) {
            const json_t *v = json_array_get(blk, i);
            uint64_t x = 0;
            int bad = json_is_integer(v) ? json_integer_value(v) < 0
                      : json_is_string(v)
                          ? kvix_tokens_mm_hash(json_string_value(v), json_string_length(v), &x)
                          : 1;
            if (bad)
                return kvix_err_set(err, KVIX_EINVAL,
                                    "\"mm\"[%zu][%zu] is not a hash (an integer, 1 to 16 hex "
                                    "digits, or 64)",
                                    b, i);
            if (json_is_integer(v))
                x = (uint64_t)json_integer_value(v);
            if (h->nmm == h->cap_mm) {
                size_t c = h->cap_mm ? 2 * h->cap_mm : 16;
                kvix_tokens_mm *p = realloc(h->mm, c * sizeof *p);
                if (!p)
                    return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
                h->mm = p;
                h->cap_mm = c;
            }
            h->mm[h->nmm++] = (kvix_tokens_mm){(uint32_t)b, x};
        }
    }
    return 0;
}

static int object_meta(const json_t *obj, kvix_tokens *h, kvix_err *err)
{
    int rc;
    if ((rc = object_name(obj, "lora", h->lora, &h->has_lora, err)) < 0 ||
        (rc = object_name(obj, "salt", h->salt, &h->has_salt, err)) < 0 ||
        (rc = object_mm(obj, h, err)) < 0)
        return rc;
    if (h->has_lora)
        h->seed = kvix_hash_lora_seed(h->lora, strlen(h->lora));
    const json_t *id = json_object_get(obj, "id");
    if (id) {
        char *s = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!s)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        size_t len = strlen(s);
        if (len >= KVIX_ID_MAX) {
            free(s);
            return kvix_err_set(err, KVIX_EINVAL, "\"id\" longer than %d bytes",
                                KVIX_ID_MAX - 1);
        }
        memcpy(h->id, s, len + 1);
        free(s);
    }
    return 0;
}

static int parse_json(kvix_tokens *h, const char *line, size_t len, kvix_err *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return kvix_err_set(err, KVIX_EINVAL, "invalid JSON at column %d: %s", jerr.column,
                            jerr.text);
    int rc;
    const json_t *arr = root;
    if (json_is_object(root)) {
        arr = json_object_get(root, "tokens");
        if (!arr) {
            rc = kvix_err_set(err, KVIX_EINVAL, "missing \"tokens\"");
            goto out;
        }
        if (!json_is_array(arr)) {
            rc = kvix_err_set(err, KVIX_EINVAL, "\"tokens\" is not an array");
            goto out;
        }
        if ((rc = object_meta(root, h, err)) < 0)
            goto out;
    } else if (!json_is_array(root)) {
        rc = kvix_err_set(err, KVIX_EINVAL,
                          "not an array of token ids or an object with \"tokens\"");
        goto out;
    }
    rc = tokens_from_json(h, arr, arr != root, err);
out:
    json_decref(root);
    return rc;
}

int kvix_tokens_parse(kvix_tokens *t, const char *line, size_t len, uint64_t seed,
                      kvix_err *err)
{
    t->seed = seed;
    t->id[0] = '\0';
    t->n = 0;
    t->has_lora = t->has_salt = t->has_mm = 0;
    t->nmm = 0;
    if (len > KVIX_TOKENS_LINE_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "line longer than %u bytes", KVIX_TOKENS_LINE_MAX);
    /* the most a line of len bytes can hold: the parsers need no bound check */
    int rc = tok_reserve(t, len / 2 + 1, err);
    if (rc < 0)
        return rc;
    const char *p = line, *end = line + len;
    while (p < end && is_ws((unsigned char)*p))
        p++;
    if (p == end)
        return KVIX_OK;
    if (*p == '[')
        return fast_array(t, p, end) ? KVIX_OK : parse_json(t, line, len, err);
    if (*p == '{')
        return parse_json(t, line, len, err);
#ifdef __SSE2__
    if (parse_ws_fast(t, p, end))
        return KVIX_OK;
#endif
    return parse_ws(t, p, end, err);
}
