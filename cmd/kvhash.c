/* kvhash: token ids in, block hashes out (contract section 1).
 *
 * One output line per good input line, in order; bad lines are reported on
 * stderr with their position and skipped. The time goes into parsing, so the
 * two common shapes (whitespace-separated ints, a flat JSON int array) are
 * scanned by hand; anything else JSON-looking goes to jansson. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "cli.h"
#include "kvix/event.h"
#include "kvix/hash.h"
#include "kvix/stream.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KVIX_HOST_LITTLE 1
#else
#define KVIX_HOST_LITTLE 0
#endif

/* Every token takes at least two bytes of a line ("1 ", "1,"), so the line
 * ceiling bounds the token count below the contract's token ceiling, and
 * positions stay below the lineage hash's limit. */
_Static_assert(KVIX_LINE_MAX / 2 + 1 <= KVIX_TOKENS_MAX, "line ceiling must bound tokens");
_Static_assert(KVIX_LINE_MAX / 2 + 1 <= KVIX_PLH_POS_LIMIT, "line ceiling must bound positions");

enum { O_STRICT = 0x100 };
enum { F_LOCAL, F_SEQ, F_PSH, F_PLH, F_ALL };

static const cli_opt options[] = {
    {'b', 'b', "block-size", "N", NULL, "tokens per block, 1 to 65536 (required)"},
    {'l', 'l', "lora", "NAME", NULL, "LoRA adapter for lines that name none"},
    {'P', 'P', "positional", NULL, NULL, "add positional sequence and lineage hashes (psh, plh)"},
    {'d', 'd', "decimal", NULL, NULL, "print hashes in decimal instead of hex"},
    {'p', 'p', "plain", "FIELD", "local|seq|psh|plh",
     "print only FIELD (local, seq, psh or plh), one line per input line"},
    {O_STRICT, 0, "strict", NULL, NULL, "stop at the first bad line (exit 5)"},
    {0, 0, NULL, NULL, NULL, NULL},
};

static const cli_tool tool = {
    .name = "kvhash",
    .usage = "-b N [options] [FILE...]",
    .summary = "hash token sequences (one per line) into kv-cache block hashes",
    .opts = options,
    .operands = "file",
    .exits = "012356",
};

typedef struct hasher {
    size_t bs;
    uint64_t seed;        /* from --lora: for lines that name no adapter */
    int positional, decimal, plain, strict; /* plain: F_* or F_ALL for NDJSON */
    uint32_t *tok;
    size_t ntok, cap_tok;
    uint64_t *local, *seq;
    kvix_u128 *pos;       /* only with psh or plh wanted */
    size_t cap_blk;
    char *out;            /* pending output: written before a read that could
                             block, and past 1 MiB */
    size_t olen, ocap;
    uint64_t rejected;
} hasher;

/* What one line turned out to be, beyond its tokens. */
typedef struct line_meta {
    uint64_t seed;
    char id[KVIX_ID_MAX];  /* raw JSON of an object's "id", "" when absent */
} line_meta;

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    return q;
}

static void out_reserve(hasher *h, size_t n)
{
    if (h->olen + n <= h->ocap)
        return;
    size_t c = h->ocap ? h->ocap : 1 << 20;
    while (c < h->olen + n)
        c *= 2;
    h->out = xrealloc(h->out, c);
    h->ocap = c;
}

static void out_flush(hasher *h)
{
    if (!h->olen)
        return;
    if (fwrite(h->out, 1, h->olen, stdout) != h->olen || fflush(stdout) != 0) {
        /* a reader that went away on purpose (head, with SIGPIPE ignored): not
         * an error, as in cli_finish, but nobody reads the rest */
        if (errno == EPIPE)
            _exit(h->rejected ? KVIX_EXIT_REJECTED : KVIX_EXIT_OK);
        cli_die(KVIX_EXIT_IO, "error writing standard output: %s", strerror(errno));
    }
    h->olen = 0;
}

static void tok_reserve(hasher *h, size_t n)
{
    if (n <= h->cap_tok)
        return;
    size_t c = h->cap_tok ? h->cap_tok : 4096;
    while (c < n)
        c *= 2;
    h->tok = xrealloc(h->tok, c * sizeof *h->tok);
    h->cap_tok = c;
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

static int bad_token(const char *s, const char *end, const char *why, char *msg, size_t cap)
{
    const char *e = s;
    while (e < end && !is_ws((unsigned char)*e))
        e++;
    char q[128];
    quote_token(q, sizeof q, s, (size_t)(e - s));
    snprintf(msg, cap, "token '%s' %s", q, why);
    return -1;
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
static int parse_ws(hasher *h, const char *p, const char *end, char *msg, size_t cap)
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
                                         ? "is negative" : "is not a number", msg, cap);
        int big;
        uint32_t v = scan_uint(p, end, &p, &big);
        if (p < end && !is_ws((unsigned char)*p))
            return bad_token(s, end, "is not a number", msg, cap);
        if (big)
            return bad_token(s, end, "is out of range (max 4294967295)", msg, cap);
        t[n++] = v;
    }
    h->ntok = n;
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

static int parse_ws_fast(hasher *h, const char *p, const char *end)
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
    h->ntok = n;
    return 1;
}
#endif

/* ---- JSON ------------------------------------------------------------- */

/* The flat `[1,2,3]` shape, strictly: digits without leading zeros, up to
 * 2^32-1, commas, JSON whitespace. Returns 1 when the whole line is that
 * shape, 0 for anything else, which jansson then judges (and explains). */
static int fast_array(hasher *h, const char *p, const char *end)
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
    h->ntok = n;
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

static int bad_json_token(const json_t *v, const char *why, char *msg, size_t cap)
{
    char q[128];
    json_text(v, q, sizeof q);
    snprintf(msg, cap, "token '%s' %s", q, why);
    return -1;
}

static int push_json_token(hasher *h, const json_t *v, char *msg, size_t cap)
{
    if (json_is_real(v))
        return bad_json_token(v, "is not an integer", msg, cap);
    if (!json_is_integer(v))
        return bad_json_token(v, "is not a number", msg, cap);
    json_int_t x = json_integer_value(v);
    if (x < 0)
        return bad_json_token(v, "is negative", msg, cap);
    if ((unsigned long long)x > UINT32_MAX)
        return bad_json_token(v, "is out of range (max 4294967295)", msg, cap);
    h->tok[h->ntok++] = (uint32_t)x;
    return 0;
}

/* Token ids from a JSON array. In an object, an array of arrays (a stored
 * event's per-block "tokens") is flattened one level. Room is reserved by
 * the caller. */
static int tokens_from_json(hasher *h, const json_t *arr, int nested, char *msg, size_t cap)
{
    size_t i, j;
    json_t *v, *w;
    h->ntok = 0;
    json_array_foreach(arr, i, v) {
        if (nested && json_is_array(v)) {
            json_array_foreach(v, j, w) {
                if (push_json_token(h, w, msg, cap) < 0)
                    return -1;
            }
        } else if (push_json_token(h, v, msg, cap) < 0) {
            return -1;
        }
    }
    return 0;
}

static int object_meta(const json_t *obj, line_meta *meta, char *msg, size_t cap)
{
    const json_t *lora = json_object_get(obj, "lora");
    if (lora && !json_is_null(lora)) {
        if (!json_is_string(lora))
            return snprintf(msg, cap, "\"lora\" is not a string"), -1;
        size_t len = json_string_length(lora);
        if (len >= KVIX_NAME_MAX)
            return snprintf(msg, cap, "\"lora\" longer than %d bytes", KVIX_NAME_MAX - 1), -1;
        meta->seed = kvix_hash_lora_seed(json_string_value(lora), len);
    }
    const json_t *id = json_object_get(obj, "id");
    if (id) {
        char *s = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!s)
            cli_die(KVIX_EXIT_SYS, "out of memory");
        size_t len = strlen(s);
        if (len >= KVIX_ID_MAX) {
            free(s);
            return snprintf(msg, cap, "\"id\" longer than %d bytes", KVIX_ID_MAX - 1), -1;
        }
        memcpy(meta->id, s, len + 1);
        free(s);
    }
    return 0;
}

static int parse_json(hasher *h, const char *line, size_t len, line_meta *meta, char *msg,
                      size_t cap)
{
    json_error_t jerr;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        snprintf(msg, cap, "invalid JSON at column %d: %s", jerr.column, jerr.text);
        return -1;
    }
    int rc = -1;
    const json_t *arr = root;
    if (json_is_object(root)) {
        arr = json_object_get(root, "tokens");
        if (!arr) {
            snprintf(msg, cap, "missing \"tokens\"");
            goto out;
        }
        if (!json_is_array(arr)) {
            snprintf(msg, cap, "\"tokens\" is not an array");
            goto out;
        }
        if (object_meta(root, meta, msg, cap) < 0)
            goto out;
    } else if (!json_is_array(root)) {
        snprintf(msg, cap, "not an array of token ids or an object with \"tokens\"");
        goto out;
    }
    rc = tokens_from_json(h, arr, arr != root, msg, cap);
out:
    json_decref(root);
    return rc;
}

/* ---- output ------------------------------------------------------------ */

static char *put_dec64(char *o, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *o++ = tmp[--n];
    return o;
}

static char *put_dec128(char *o, kvix_u128 x)
{
    unsigned __int128 v = (unsigned __int128)x.hi << 64 | x.lo;
    char tmp[40];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + (unsigned)(v % 10));
        v /= 10;
    } while (v);
    while (n)
        *o++ = tmp[--n];
    return o;
}

/* kvix_hex64 writes a NUL after the 16 digits: the buffer keeps one spare byte. */
static char *put_u64(const hasher *h, char *o, uint64_t v)
{
    if (h->decimal)
        return put_dec64(o, v);
    kvix_hex64(v, o);
    return o + 16;
}

static char *put_u128(const hasher *h, char *o, kvix_u128 v)
{
    if (h->decimal)
        return put_dec128(o, v);
    kvix_hex128(v, o);
    return o + 32;
}

static char *put_str(char *o, const char *s)
{
    size_t n = strlen(s);
    memcpy(o, s, n);
    return o + n;
}

/* In JSON a hex hash is a string and a decimal one an integer (contract
 * section 2: a string is always hex), which kvindex reads back exactly. */
static char *put_array(const hasher *h, char *o, int field, size_t n, const kvix_u128 *pos)
{
    int json = h->plain == F_ALL;
    int quote = json && !h->decimal;
    for (size_t i = 0; i < n; i++) {
        if (i)
            *o++ = json ? ',' : ' ';
        if (quote)
            *o++ = '"';
        if (field == F_LOCAL)
            o = put_u64(h, o, h->local[i]);
        else if (field == F_SEQ)
            o = put_u64(h, o, h->seq[i]);
        else
            o = put_u128(h, o, pos[2 * i + (field == F_PLH)]);
        if (quote)
            *o++ = '"';
    }
    return o;
}

/* Hash h->tok with seed and append the line's output. Returns -1 (msg set)
 * when a position cannot be encoded. */
static int emit(hasher *h, const line_meta *meta, char *msg, size_t cap)
{
    size_t nb = h->ntok / h->bs;
    if (nb > h->cap_blk) {
        size_t c = h->cap_blk ? h->cap_blk : 1024;
        while (c < nb)
            c *= 2;
        h->local = xrealloc(h->local, c * sizeof *h->local);
        h->seq = xrealloc(h->seq, c * sizeof *h->seq);
        if (h->positional || h->plain == F_PSH || h->plain == F_PLH)
            h->pos = xrealloc(h->pos, 2 * c * sizeof *h->pos);
        h->cap_blk = c;
    }
    kvix_hash_blocks(h->tok, h->ntok, h->bs, meta->seed, h->local, h->seq);

    int want_pos = h->plain == F_ALL ? h->positional : h->plain == F_PSH || h->plain == F_PLH;
    kvix_u128 *pos = h->pos; /* psh and plh of block i at 2i and 2i+1 */
    if (want_pos) {
        kvix_err err;
        for (size_t i = 0; i < nb; i++) {
            if (kvix_hash_psh(h->seq[i], i, h->local[i], &pos[2 * i], &err) < 0 ||
                kvix_hash_plh(h->seq[i], i ? h->seq[i - 1] : 0, i, &pos[2 * i + 1], &err) < 0) {
                snprintf(msg, cap, "%s", err.msg);
                return -1;
            }
        }
    }

    /* per block at most: 2 u64 as quoted decimal (2 * 23), 2 u128 (2 * 42) */
    out_reserve(h, nb * 136 + strlen(meta->id) + 128);
    char *o = h->out + h->olen;
    if (h->plain != F_ALL) {
        o = put_array(h, o, h->plain, nb, pos);
    } else {
        *o++ = '{';
        if (meta->id[0]) {
            o = put_str(o, "\"id\":");
            o = put_str(o, meta->id);
            *o++ = ',';
        }
        o = put_str(o, "\"local\":[");
        o = put_array(h, o, F_LOCAL, nb, pos);
        o = put_str(o, "],\"seq\":[");
        o = put_array(h, o, F_SEQ, nb, pos);
        if (h->positional) {
            o = put_str(o, "],\"psh\":[");
            o = put_array(h, o, F_PSH, nb, pos);
            o = put_str(o, "],\"plh\":[");
            o = put_array(h, o, F_PLH, nb, pos);
        }
        *o++ = ']';
        size_t partial = h->ntok % h->bs;
        if (partial) {
            o = put_str(o, ",\"partial\":");
            o = put_dec64(o, partial);
        }
        *o++ = '}';
    }
    *o++ = '\n';
    h->olen = (size_t)(o - h->out);
    return 0;
}

/* One line without its newline. Returns 0, or -1 with msg set (and the
 * line's id in meta, when it got that far). */
static int do_line(hasher *h, const char *line, size_t len, line_meta *meta, char *msg,
                   size_t cap)
{
    meta->seed = h->seed;
    meta->id[0] = '\0';
    tok_reserve(h, len / 2 + 1);
    const char *p = line, *end = line + len;
    while (p < end && is_ws((unsigned char)*p))
        p++;
    int rc;
    if (p == end) {
        h->ntok = 0;
        rc = 0;
    } else if (*p == '[') {
        rc = fast_array(h, p, end) ? 0 : parse_json(h, line, len, meta, msg, cap);
    } else if (*p == '{') {
        rc = parse_json(h, line, len, meta, msg, cap);
    } else {
#ifdef __SSE2__
        rc = parse_ws_fast(h, p, end) ? 0 : parse_ws(h, p, end, msg, cap);
#else
        rc = parse_ws(h, p, end, msg, cap);
#endif
    }
    return rc < 0 ? rc : emit(h, meta, msg, cap);
}

/* A rejected line still gets its own output line, so a reader that pairs
 * input and output lines (a coprocess) never waits: {"id":..,"error":".."}. */
static void emit_error(hasher *h, const line_meta *meta, const char *msg)
{
    kvix_buf b;
    kvix_err err;
    kvix_buf_init(&b);
    if (kvix_error_to_json(meta->id, msg, &b, &err))
        cli_die(KVIX_EXIT_SYS, "%s", err.msg);
    out_reserve(h, b.len);
    memcpy(h->out + h->olen, b.data, b.len);
    h->olen += b.len;
    kvix_buf_release(&b);
}

/* ---- input ------------------------------------------------------------- */

typedef struct input {
    int fd;
    const char *name;
    char *buf;
    size_t cap, start, scan, end;
    uint64_t line;
    int eof, skipping; /* skipping: inside a line past the ceiling */
} input;

enum { LINE_OK, LINE_TOO_LONG, LINE_EOF, LINE_ERROR };

/* Whether a read would return at once. Pending output is written before a
 * read that could block, so a reader downstream sees each result as soon as
 * its input line was complete, while a busy input is answered in large writes. */
static int input_ready(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

/* Next line into *p, *len (valid until the next call). */
static int next_line(hasher *h, input *in, const char **p, size_t *len)
{
    for (;;) {
        char *nl = memchr(in->buf + in->scan, '\n', in->end - in->scan);
        if (nl) {
            size_t at = (size_t)(nl - in->buf);
            *p = in->buf + in->start;
            *len = at - in->start;
            in->start = in->scan = at + 1;
            in->line++;
            if (in->skipping) {
                in->skipping = 0;
                return LINE_TOO_LONG;
            }
            return *len > KVIX_LINE_MAX ? LINE_TOO_LONG : LINE_OK;
        }
        in->scan = in->end;
        if (in->eof) {
            if (in->start == in->end && !in->skipping)
                return LINE_EOF;
            *p = in->buf + in->start;
            *len = in->end - in->start;
            in->start = in->scan = in->end;
            in->line++;
            if (in->skipping) {
                in->skipping = 0;
                return LINE_TOO_LONG;
            }
            return *len > KVIX_LINE_MAX ? LINE_TOO_LONG : LINE_OK;
        }
        if (in->end - in->start > KVIX_LINE_MAX) { /* drop it, keep looking for its end */
            in->skipping = 1;
            in->start = in->scan = in->end = 0;
        }
        if (in->start > 0) {
            memmove(in->buf, in->buf + in->start, in->end - in->start);
            in->end -= in->start;
            in->scan = in->end;
            in->start = 0;
        }
        if (in->cap - in->end < 65536) {
            in->cap *= 2;
            in->buf = xrealloc(in->buf, in->cap);
        }
        if (h->olen >= (1u << 20) || !input_ready(in->fd))
            out_flush(h);
        ssize_t n;
        do
            n = read(in->fd, in->buf + in->end, in->cap - in->end);
        while (n < 0 && errno == EINTR);
        if (n < 0)
            return LINE_ERROR;
        if (n == 0)
            in->eof = 1;
        in->end += (size_t)n;
    }
}

enum { RUN_OK, RUN_IO, RUN_STRICT };

static int hash_file(hasher *h, input *in)
{
    const char *line;
    size_t len;
    char msg[512];
    line_meta meta;
    for (;;) {
        int r = next_line(h, in, &line, &len);
        if (r == LINE_EOF)
            return RUN_OK;
        if (r == LINE_ERROR) {
            cli_warn("error reading %s: %s", in->name, strerror(errno));
            return RUN_IO;
        }
        meta.id[0] = '\0';
        if (r == LINE_TOO_LONG)
            snprintf(msg, sizeof msg, "line longer than %u bytes", KVIX_LINE_MAX);
        if (r == LINE_TOO_LONG || do_line(h, line, len, &meta, msg, sizeof msg) < 0) {
            h->rejected++;
            emit_error(h, &meta, msg);
            out_flush(h); /* keep stdout and stderr in order for a reader of both */
            cli_warn("bad line at %s:%" PRIu64 ": %s", in->name, in->line, msg);
            if (h->strict)
                return RUN_STRICT;
        }
    }
}

int main(int argc, char **argv)
{
    cli_init(&tool);
    hasher h = {.plain = F_ALL, .seed = KVIX_HASH_SEED};
    const char *arg;
    int c;
    while ((c = cli_next(argc, argv, &arg)) != -1) {
        switch (c) {
        case 'b':
            h.bs = (size_t)cli_parse_uint(arg, 1, KVIX_BS_MAX, "block size");
            break;
        case 'l':
            if (strlen(arg) >= KVIX_NAME_MAX)
                cli_usage_error("LoRA name longer than %d bytes", KVIX_NAME_MAX - 1);
            h.seed = kvix_hash_lora_seed(arg, strlen(arg));
            break;
        case 'P':
            h.positional = 1;
            break;
        case 'd':
            h.decimal = 1;
            break;
        case 'p': {
            static const char *const names[] = {"local", "seq", "psh", "plh"};
            int f = -1;
            for (int i = 0; i < 4; i++)
                if (strcmp(arg, names[i]) == 0)
                    f = i;
            if (f < 0)
                cli_usage_error("bad field for %s: '%s' (expected local, seq, psh or plh)",
                                cli_opt_given(), arg);
            h.plain = f;
            break;
        }
        case O_STRICT:
            h.strict = 1;
            break;
        }
    }
    if (!h.bs)
        cli_usage_error("missing -b BLOCK_SIZE");

    int io = 0, stopped = 0;
    char **files = argv + optind;
    int nfiles = argc - optind;
    static char dash_name[] = "-";
    static char *dash[] = {dash_name};
    if (nfiles == 0) {
        files = dash;
        nfiles = 1;
    }
    input in = {.cap = 256 * 1024};
    in.buf = xrealloc(NULL, in.cap);
    for (int i = 0; i < nfiles && !stopped; i++) {
        int is_stdin = strcmp(files[i], "-") == 0;
        int fd = is_stdin ? STDIN_FILENO : open(files[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            out_flush(&h);
            cli_warn("cannot open %s: %s", files[i], strerror(errno));
            io = 1;
            continue;
        }
        in.fd = fd;
        in.name = is_stdin ? "<stdin>" : files[i];
        in.start = in.scan = in.end = 0;
        in.line = 0;
        in.eof = in.skipping = 0;
        int r = hash_file(&h, &in);
        io |= r == RUN_IO;
        stopped = r == RUN_STRICT;
        if (!is_stdin)
            close(fd);
    }
    out_flush(&h);
    free(in.buf);
    free(h.tok);
    free(h.local);
    free(h.seq);
    free(h.pos);
    free(h.out);
    int code = stopped ? KVIX_EXIT_STRICT : io ? KVIX_EXIT_IO
                                          : h.rejected ? KVIX_EXIT_REJECTED : KVIX_EXIT_OK;
    return cli_finish(code);
}
