/* NDJSON framing of kvix records: decoding through jansson, encoding in a
 * fixed key order with names escaped by jansson. */
#include "kvix/stream.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvix/hash.h"
#include "dec64_int.h"
#include "json_arena_int.h"
#include "json_text_int.h"
#include "stream_int.h"

/* ---- decoding: jansson values seen as sv ---- */

static const sv_ops json_ops;

static void jsv(json_t *j, sv *out)
{
    out->ops = &json_ops;
    out->p = j;
    out->n = 0;
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        out->kind = SV_MAP;
        out->n = json_object_size(j);
        break;
    case JSON_ARRAY:
        out->kind = SV_ARRAY;
        out->n = json_array_size(j);
        break;
    case JSON_STRING:
        out->kind = SV_STR;
        out->s = json_string_value(j);
        out->len = json_string_length(j);
        if (out->len > 1 && out->s[0] == '\0') { /* a u64 past 2^63-1 (see big_ints) */
            out->kind = SV_UINT;
            out->u = strtoull(out->s + 1, NULL, 10);
        }
        break;
    case JSON_INTEGER: {
        json_int_t v = json_integer_value(j);
        if (v < 0) {
            out->kind = SV_NEG;
            out->i = v;
        } else {
            out->kind = SV_UINT;
            out->u = (uint64_t)v;
        }
        break;
    }
    case JSON_REAL:
        out->kind = SV_REAL;
        out->d = json_real_value(j);
        break;
    case JSON_TRUE:
    case JSON_FALSE:
        out->kind = SV_BOOL;
        out->u = json_is_true(j);
        break;
    default:
        out->kind = SV_NIL;
        break;
    }
}

static void json_item(const sv *arr, size_t i, sv *out)
{
    jsv(json_array_get((json_t *)arr->p, i), out);
}

static const void *json_next(const sv *map, const void *it, const char **key, size_t *klen,
                             sv *val)
{
    json_t *obj = (json_t *)map->p;
    void *i = it ? json_object_iter_next(obj, (void *)it) : json_object_iter(obj);
    if (!i)
        return NULL;
    *key = json_object_iter_key(i);
    *klen = json_object_iter_key_len(i);
    jsv(json_object_iter_value(i), val);
    return i;
}

/* The marker big_ints gives a large integer, as jansson writes it back. */
#define BIG_MARK "\"\\u0000"

static int dump_id(json_t *j, char *out, size_t cap, kvix_err *err)
{
    size_t n = json_dumpb(j, out, cap - 1, JSON_ENCODE_ANY | JSON_COMPACT);
    if (n == 0)
        return kvix_err_set(err, KVIX_EINVAL, "\"id\" cannot be encoded");
    if (n >= cap)
        return kvix_err_set(err, KVIX_ELIMIT, "\"id\" longer than %zu bytes", cap - 1);
    out[n] = '\0';
    /* an integer past 2^63-1 in the id is echoed as the integer it was */
    for (char *m; (m = strstr(out, BIG_MARK));) {
        char *q = strchr(m + 1, '"');
        size_t d = (size_t)(q - (m + 7));
        memmove(m, m + 7, d);
        memmove(m + d, q + 1, strlen(q + 1) + 1);
    }
    return KVIX_OK;
}

static int json_text(const sv *v, char *out, size_t cap, kvix_err *err)
{
    return dump_id((json_t *)v->p, out, cap, err);
}

static const sv_ops json_ops = {json_item, json_next, json_text};

/* jansson bounds its own recursion; this is kvix's tighter ceiling. */
static int depth_ok(json_t *j, int depth)
{
    if (depth > KVIX_JSON_DEPTH_MAX)
        return 0;
    if (json_is_array(j)) {
        size_t i;
        json_t *e;
        json_array_foreach(j, i, e)
            if ((json_is_array(e) || json_is_object(e)) && !depth_ok(e, depth + 1))
                return 0;
    } else if (json_is_object(j)) {
        const char *k;
        json_t *e;
        json_object_foreach(j, k, e)
            if ((json_is_array(e) || json_is_object(e)) && !depth_ok(e, depth + 1))
                return 0;
    }
    return 1;
}

static int decode_line(const char *line, size_t len, kvix_event *ev, kvix_err *err,
                       int arena);

/* A line of whitespace-separated token ids, as kvhash(1) reads them: a
 * token query on the default partition (a record is an object or an array,
 * so a line that starts with a number is never one). Messages as kvhash's. */
static int token_line(const char *p, const char *end, kvix_event *ev, kvix_err *err)
{
    ev->type = KVIX_EV_QUERY;
    int rc = kvix_event_reserve_tokens(ev, (size_t)(end - p) / 2 + 1, err);
    if (rc)
        return rc;
    size_t n = 0;
    while (p < end) {
        if (*p == ' ' || *p == '\t' || *p == '\r') {
            p++;
            continue;
        }
        const char *s = p;
        while (p < end && *p != ' ' && *p != '\t' && *p != '\r')
            p++;
        char q[40];
        size_t ql = (size_t)(p - s) < 24 ? (size_t)(p - s) : 24;
        for (size_t i = 0; i < ql; i++)
            q[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
        memcpy(q + ql, (size_t)(p - s) > 24 ? "..." : "", (size_t)(p - s) > 24 ? 4 : 1);
        uint64_t v = 0;
        const char *d = s;
        while (d < p && *d >= '0' && *d <= '9' && v <= UINT32_MAX)
            v = v * 10 + (uint64_t)(*d++ - '0');
        if (*s == '-' && p - s > 1 && s[1] >= '0' && s[1] <= '9')
            return kvix_err_set(err, KVIX_ERANGE, "token '%s' is negative", q);
        if (d == s || (d < p && (*d < '0' || *d > '9')))
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "token '%s' is not a number", q);
        /* past 2^32 it is no token: a block hash (kvhash --plain --decimal)
         * written where tokens go */
        if (v > UINT32_MAX)
            return kvix_err_set(err, KVIX_ERANGE,
                                "token '%s' is out of range (max 4294967295); block hashes go "
                                "in a query object: {\"local\":[%s,...]}",
                                q, q);
        ev->tokens[n++] = (uint32_t)v;
    }
    ev->ntokens = n;
    ev->has_tokens = 1;
    return KVIX_OK;
}

/* The length of a run of 1..16 hex digits at p, ended by a blank or the
 * line's end, with a letter in it (digits alone are a token line); 0
 * otherwise. No record starts so: it is a hash written bare, as kvhash
 * --plain prints them. */
static size_t hex_word(const char *p, const char *end)
{
    size_t n = 0;
    int letter = 0;
    for (; p + n < end && n <= 16; n++) {
        char c = p[n];
        if (c == ' ' || c == '\t' || c == '\r')
            break;
        int lo = (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (!lo && !(c >= '0' && c <= '9'))
            return 0;
        letter |= lo;
    }
    return n >= 1 && n <= 16 && letter ? n : 0;
}

static int hex_line(const char *p, const char *end, kvix_err *err)
{
    size_t n = hex_word(p, end);
    (void)end;
    return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_JSON,
                               "'%.*s' is not a record: block hashes go in a query object, "
                               "{\"local\":[\"%.*s\",...]}",
                               (int)n, p, (int)n, p);
}

int kvix_event_from_json(const char *line, size_t len, kvix_event *ev, kvix_err *err)
{
    kvix_event_reset(ev);
    if (len > KVIX_LINE_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "line longer than %u bytes", KVIX_LINE_MAX);
    const char *p = line, *end = line + len;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    if (p < end && ((*p >= '0' && *p <= '9') || *p == '-'))
        return token_line(p, end, ev, err);
    if (hex_word(p, end))
        return hex_line(p, end, err);
    /* the record's jansson values in this thread's arena, dropped at once */
    int arena = kvix__json_arena_begin();
    int rc = decode_line(line, len, ev, err, arena);
    if (arena)
        kvix__json_arena_end();
    return rc;
}

/* jansson's integers are signed 64-bit, and contract section 2 wants a
 * JSON integer hash read exactly over the whole u64 range. When jansson
 * refuses a line for an integer overflow, the line is parsed again with
 * each integer literal in (2^63-1, 2^64-1] turned into a string of a NUL
 * and its digits, which jsv reads back as the exact u64 (jansson accepts
 * the NUL only with JSON_ALLOW_NUL, given to this second parse alone; a
 * line that already holds an escaped NUL is left to fail as it did).
 * Returns the new text (caller frees) or NULL. */
static char *big_ints(const char *line, size_t len, size_t *outlen)
{
    char *out = malloc(len * 2 + 16); /* each literal of >= 19 digits grows by 8 */
    if (!out)
        return NULL;
    size_t o = 0, changed = 0;
    int in_str = 0;
    for (size_t i = 0; i < len;) {
        char c = line[i];
        if (in_str) {
            if (c == '\\' && i + 1 < len) {
                if (line[i + 1] == 'u' && i + 6 <= len && memcmp(line + i + 2, "0000", 4) == 0)
                    goto fail;
                out[o++] = line[i++];
            } else if (c == '"') {
                in_str = 0;
            }
            out[o++] = line[i++];
            continue;
        }
        if (c == '"') {
            in_str = 1;
            out[o++] = line[i++];
            continue;
        }
        int after_sign = o > 0 && out[o - 1] == '-';
        if (c >= '1' && c <= '9' && !after_sign) {
            size_t j = i;
            while (j < len && line[j] >= '0' && line[j] <= '9')
                j++;
            int frac = j < len && (line[j] == '.' || line[j] == 'e' || line[j] == 'E');
            size_t nd = j - i;
            int big = !frac && (nd == 20 ? memcmp(line + i, "18446744073709551615", 20) <= 0
                                         : nd == 19 && memcmp(line + i, "9223372036854775807", 19) > 0);
            if (big) {
                memcpy(out + o, "\"\\u0000", 7);
                memcpy(out + o + 7, line + i, nd);
                o += 7 + nd;
                out[o++] = '"';
                changed++;
            } else {
                memcpy(out + o, line + i, nd);
                o += nd;
            }
            i = j;
            continue;
        }
        out[o++] = line[i++];
    }
    if (!changed)
        goto fail;
    *outlen = o;
    return out;
fail:
    free(out);
    return NULL;
}

static int decode_line(const char *line, size_t len, kvix_event *ev, kvix_err *err,
                       int arena)
{
    json_error_t jerr;
    /* A duplicated key would make the record mean whichever copy a reader
     * happens to keep: reject it. */
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root && json_error_code(&jerr) == json_error_numeric_overflow) {
        size_t blen;
        char *big = big_ints(line, len, &blen);
        if (big) {
            root = json_loadb(big, blen, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
            free(big);
        }
    }
    if (!root)
        return kvix_err_set_reason(err, json_error_code(&jerr) == json_error_out_of_memory
                                            ? KVIX_ENOMEM : KVIX_EINVAL,
                                   KVIX_REASON_JSON, "malformed json at column %d: %s",
                                   jerr.column, jerr.text);
    int rc;
    if (!depth_ok(root, 1)) {
        rc = kvix_err_set(err, KVIX_ELIMIT, "nested deeper than %d levels", KVIX_JSON_DEPTH_MAX);
    } else {
        sv r;
        jsv(root, &r);
        rc = kvix__stream_decode(&r, ev, err);
    }
    if (!arena) /* with the arena, its window's end frees the whole tree at once */
        json_decref(root);
    return rc;
}

/* ---- encoding ---- */

static inline char *put_u64(char *p, uint64_t v)
{
    return p + kvix_dec64_put(v, p);
}

static int app(kvix_buf *b, const char *s, kvix_err *err)
{
    return kvix_buf_append(b, s, strlen(s), err);
}

static int app_u64(kvix_buf *b, const char *prefix, uint64_t v, kvix_err *err)
{
    size_t pl = strlen(prefix);
    int rc = kvix_buf_reserve(b, pl + 20, err);
    if (rc)
        return rc;
    char *p = b->data + b->len;
    memcpy(p, prefix, pl);
    p = put_u64(p + pl, v);
    b->len = (size_t)(p - b->data);
    b->data[b->len] = '\0';
    return KVIX_OK;
}

static int app_hex(kvix_buf *b, const char *prefix, uint64_t v, kvix_err *err)
{
    size_t pl = strlen(prefix);
    int rc = kvix_buf_reserve(b, pl + 18, err);
    if (rc)
        return rc;
    char *p = b->data + b->len;
    memcpy(p, prefix, pl);
    p[pl] = '"';
    kvix_hex64(v, p + pl + 1);
    p[pl + 17] = '"';
    b->len += pl + 18;
    b->data[b->len] = '\0';
    return KVIX_OK;
}

/* A JSON string after prefix. */
static int app_str(kvix_buf *b, const char *prefix, const char *s, kvix_err *err)
{
    int rc = app(b, prefix, err);
    return rc ? rc : kvix__json_str_append(b, s, strlen(s), err);
}

static int app_hash_array(kvix_buf *b, const char *prefix, const uint64_t *h, size_t n,
                          kvix_err *err)
{
    int rc = app(b, prefix, err);
    for (size_t i = 0; i < n && !rc; i++)
        rc = app_hex(b, i ? "," : "", h[i], err);
    return rc ? rc : app(b, "]", err);
}

static int app_tokens(kvix_buf *b, const uint32_t *t, size_t n, kvix_err *err)
{
    int rc = kvix_buf_reserve(b, n * 11 + 2, err);
    if (rc)
        return rc;
    char *p = b->data + b->len;
    *p++ = '[';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        p = put_u64(p, t[i]);
    }
    *p++ = ']';
    b->len = (size_t)(p - b->data);
    b->data[b->len] = '\0';
    return KVIX_OK;
}

/* A stored event's tokens as the record keeps them (kvix-events(5)): an
 * array per block, of bs ids, or of bs + 1 for EAGLE's windows. 0 when the
 * event has none in that shape. */
size_t kvix__stream_token_span(const kvix_event *ev)
{
    if (!ev->has_tokens || !ev->bs || !ev->nblocks)
        return 0;
    size_t want = ev->nblocks * ev->bs + ev->eagle;
    return ev->ntokens == want ? ev->bs + ev->eagle : 0;
}

static int to_json_stored(const kvix_event *ev, kvix_buf *out, kvix_err *err)
{
    int rc = ev->bs || !ev->placeholder ? app_u64(out, ",\"bs\":", ev->bs, err) : KVIX_OK;
    if (!rc)
        rc = ev->has_parent ? app_hex(out, ",\"parent\":", ev->parent, err)
                            : app(out, ",\"parent\":null", err);
    if (!rc && ev->has_parent && ev->has_parent_at) {
        rc = app_u64(out, ",\"parent_position\":", ev->parent_position, err);
        if (!rc)
            rc = app_hex(out, ",\"parent_canon\":", ev->parent_canon, err);
    }
    if (!rc && ev->placeholder)
        rc = app(out, ",\"placeholder\":true", err);
    if (!rc && ev->eagle)
        rc = app(out, ",\"eagle\":true", err);
    if (!rc && !ev->nblocks && ev->nhashes) /* a placeholder, a group of another kind */
        return app_hash_array(out, ",\"hashes\":[", ev->hashes, ev->nhashes, err);
    if (!rc)
        rc = app(out, ",\"blocks\":[", err);
    for (size_t i = 0; i < ev->nblocks && !rc; i++) {
        rc = app_hex(out, i ? ",{\"local\":" : "{\"local\":", ev->blocks[i].local, err);
        if (!rc)
            rc = app_hex(out, ",\"seq\":", ev->blocks[i].seq, err);
        if (!rc)
            rc = app(out, "}", err);
    }
    if (!rc)
        rc = app(out, "]", err);
    if (!rc && ev->lora[0])
        rc = app_str(out, ",\"lora\":", ev->lora, err);
    size_t span = kvix__stream_token_span(ev);
    if (!rc && span) {
        rc = app(out, ",\"tokens\":[", err);
        for (size_t i = 0; i < ev->nblocks && !rc; i++) {
            if (i)
                rc = app(out, ",", err);
            if (!rc)
                rc = app_tokens(out, ev->tokens + i * ev->bs, span, err);
        }
        if (!rc)
            rc = app(out, "]", err);
    }
    return rc;
}

static int to_json_query(const kvix_event *ev, kvix_buf *out, kvix_err *err)
{
    int rc = app_str(out, "{\"type\":\"query\",\"model\":", ev->model, err);
    if (!rc)
        rc = app_str(out, ",\"tenant\":", ev->tenant, err);
    if (!rc && ev->lora[0])
        rc = app_str(out, ",\"lora\":", ev->lora, err);
    if (!rc && ev->has_id) {
        rc = app(out, ",\"id\":", err);
        if (!rc)
            rc = app(out, ev->id, err);
    }
    if (!rc && ev->bs)
        rc = app_u64(out, ",\"bs\":", ev->bs, err);
    if (!rc && ev->has_top)
        rc = app_u64(out, ",\"top\":", ev->top, err);
    if (!rc && ev->explain)
        rc = app(out, ",\"explain\":true", err);
    for (uint32_t i = 0; i < ev->nxworkers && !rc; i++)
        rc = app_u64(out, i ? "," : ",\"workers\":[", ev->xworkers[i], err);
    if (!rc && ev->nxworkers)
        rc = app(out, "]", err);
    if (!rc && ev->has_tokens) {
        rc = app(out, ",\"tokens\":", err);
        if (!rc)
            rc = app_tokens(out, ev->tokens, ev->ntokens, err);
    } else if (!rc) {
        rc = app_hash_array(out, ",\"local\":[", ev->hashes, ev->nhashes, err);
    }
    return rc ? rc : app(out, "}\n", err);
}

int kvix_event_to_json(const kvix_event *ev, kvix_buf *out, kvix_err *err)
{
    size_t start = out->len;
    int rc;
    if (ev->type == KVIX_EV_QUERY) {
        rc = to_json_query(ev, out, err);
        goto done;
    }
    if (ev->type != KVIX_EV_STORED && ev->type != KVIX_EV_REMOVED && ev->type != KVIX_EV_CLEARED) {
        rc = kvix_err_set(err, KVIX_EINVAL, "event of unknown type %d", ev->type);
        goto done;
    }
    rc = app(out, "{\"type\":\"", err);
    if (!rc)
        rc = app(out, kvix_event_type_name(ev->type), err);
    if (!rc)
        rc = app_u64(out, "\",\"worker\":", ev->worker, err);
    if (!rc)
        rc = app_u64(out, ",\"dp\":", ev->dp, err);
    if (!rc)
        rc = app_str(out, ",\"model\":", ev->model, err);
    if (!rc)
        rc = app_str(out, ",\"tenant\":", ev->tenant, err);
    if (!rc)
        rc = app_str(out, ",\"medium\":", kvix_medium_name(ev->medium), err);
    if (!rc && ev->has_eid)
        rc = app_u64(out, ",\"eid\":", ev->eid, err);
    if (!rc && ev->has_group && ev->type != KVIX_EV_CLEARED) {
        rc = app_u64(out, ",\"group\":", ev->group, err);
        if (!rc && ev->kind != KVIX_KIND_NONE && ev->type == KVIX_EV_STORED)
            rc = app_str(out, ",\"kind\":", kvix_kind_name(ev->kind), err);
    }
    if (!rc && ev->has_ts) {
        char d[32];
        kvix__stream_fmt_double(ev->ts, d);
        rc = app(out, ",\"ts\":", err);
        if (!rc)
            rc = app(out, d, err);
    }
    /* a removed or cleared event may carry the partition's block size: with
     * its eid, the first of a partition makes it (kvdump's eid-only pairs) */
    if (!rc && ev->type != KVIX_EV_STORED && ev->bs)
        rc = app_u64(out, ",\"bs\":", ev->bs, err);
    if (!rc && ev->type == KVIX_EV_STORED)
        rc = to_json_stored(ev, out, err);
    else if (!rc && ev->type == KVIX_EV_REMOVED)
        rc = app_hash_array(out, ",\"hashes\":[", ev->hashes, ev->nhashes, err);
    if (!rc)
        rc = app(out, "}\n", err);
done:
    if (rc && out->len > start) {
        out->len = start; /* never leave half a record behind */
        out->data[start] = '\0';
    }
    return rc;
}

/* Answers are the output hot path (a query can match hundreds of workers):
 * one reservation, then literals and digits written in place. */
#define PUT_LIT(p, lit) (memcpy((p), (lit), sizeof(lit) - 1), (p) += sizeof(lit) - 1)

int kvix_answer_to_json(const kvix_answer *ans, const kvix_event *q, kvix_buf *out,
                        kvix_err *err)
{
    uint64_t bs = ans->bs ? ans->bs : (q ? q->bs : 0);
    size_t idlen = q && q->has_id ? strlen(q->id) : 0;
    /* per score: keys ~60 bytes, five numbers of <= 20 digits, four tiers of ~32 */
    size_t need = 128 + idlen + ans->nscores * (64 + 5 * 20 + KVIX_MEDIUM_COUNT * 32);
    int rc = kvix_buf_reserve(out, need, err);
    if (rc)
        return rc;
    char *p = out->data + out->len;
    *p++ = '{';
    if (idlen) {
        PUT_LIT(p, "\"id\":");
        memcpy(p, q->id, idlen);
        p += idlen;
        *p++ = ',';
    }
    PUT_LIT(p, "\"blocks\":");
    p = put_u64(p, ans->query_blocks);
    PUT_LIT(p, ",\"scores\":[");
    for (size_t i = 0; i < ans->nscores; i++) {
        const kvix_score *sc = &ans->scores[i];
        if (i)
            *p++ = ',';
        PUT_LIT(p, "{\"worker\":");
        p = put_u64(p, sc->worker);
        PUT_LIT(p, ",\"dp\":");
        p = put_u64(p, sc->dp);
        PUT_LIT(p, ",\"blocks\":");
        p = put_u64(p, sc->blocks);
        PUT_LIT(p, ",\"tokens\":");
        p = put_u64(p, (uint64_t)sc->blocks * bs);
        PUT_LIT(p, ",\"tiers\":{");
        int first = 1;
        for (int m = 0; m < KVIX_MEDIUM_COUNT; m++) {
            if (!sc->tier_blocks[m])
                continue;
            if (!first)
                *p++ = ',';
            first = 0;
            const char *name = kvix_medium_name(m);
            size_t nl = strlen(name);
            *p++ = '"';
            memcpy(p, name, nl);
            p += nl;
            *p++ = '"';
            *p++ = ':';
            p = put_u64(p, sc->tier_blocks[m]);
        }
        PUT_LIT(p, "}}");
    }
    *p++ = ']';
    if (ans->top) {
        PUT_LIT(p, ",\"omitted\":");
        p = put_u64(p, ans->omitted);
    }
    if (ans->unknown == KVIX_UNKNOWN_MODEL)
        PUT_LIT(p, ",\"unknown\":\"model\"");
    else if (ans->unknown == KVIX_UNKNOWN_TENANT)
        PUT_LIT(p, ",\"unknown\":\"tenant\"");
    PUT_LIT(p, "}\n");
    out->len = (size_t)(p - out->data);
    out->data[out->len] = '\0';
    return KVIX_OK;
}

int kvix_error_to_json(const char *id_json, const char *msg, kvix_buf *out, kvix_err *err)
{
    size_t start = out->len;
    int rc = app(out, "{", err);
    if (!rc && id_json && id_json[0]) {
        rc = app(out, "\"id\":", err);
        if (!rc)
            rc = app(out, id_json, err);
        if (!rc)
            rc = app(out, ",", err);
    }
    /* a message may quote bytes of a bad line: make it valid UTF-8 first */
    char clean[1024];
    size_t n = 0;
    for (const unsigned char *s = (const unsigned char *)msg; *s && n + 4 < sizeof clean; s++)
        clean[n++] = *s < 0x80 ? (char)*s : '?';
    clean[n] = '\0';
    if (!rc)
        rc = app_str(out, "\"error\":", clean, err);
    if (!rc)
        rc = app(out, "}\n", err);
    if (rc && out->len > start) {
        out->len = start;
        out->data[start] = '\0';
    }
    return rc;
}

/* ---- explain -------------------------------------------------------------- */

static const char *const cause_names[KVIX_CAUSES] = {"tokens",     "lora",       "salt",
                                                     "multimodal", "block_size", "eagle"};

const char *kvix_cause_name(unsigned i)
{
    return i < KVIX_CAUSES ? cause_names[i] : "?";
}

static const char *const why_names[] = {"match",   "removed", "nobody",        "differs",
                                        "cleared", "absent",  "unknown_worker"};

const char *kvix_why_name(int why)
{
    return why >= 0 && why <= KVIX_WHY_UNKNOWN_WORKER ? why_names[why] : "?";
}


static int app_names(kvix_buf *b, const char *prefix, unsigned bits, kvix_err *err)
{
    int rc = app(b, prefix, err);
    unsigned k = 0;
    for (unsigned i = 0; !rc && i < KVIX_CAUSES; i++)
        if (bits & (1u << i))
            rc = app_str(b, k++ ? "," : "", kvix_cause_name(i), err);
    return rc ? rc : app(b, "]", err);
}

static int app_double(kvix_buf *b, const char *prefix, double d, kvix_err *err)
{
    char t[32];
    kvix__stream_fmt_double(d, t);
    int rc = app(b, prefix, err);
    return rc ? rc : app(b, t, err);
}

static int app_removal(kvix_buf *b, const char *key, const kvix_removal *r, kvix_err *err)
{
    int rc = app(b, key, err);
    if (!rc && !r->kind)
        return app(b, "{}", err); /* the event fell out of the record */
    if (!rc)
        rc = app_u64(b, "{\"blocks\":", r->blocks, err);
    if (!rc && r->has_eid)
        rc = app_u64(b, ",\"eid\":", r->eid, err);
    if (!rc && r->has_ts)
        rc = app_double(b, ",\"ts\":", r->ts, err);
    if (!rc) {
        /* the index's clock to the millisecond: what it is for, and short */
        char t[96];
        snprintf(t, sizeof t, ",\"at\":%.3f,\"ago\":%.3f", r->at, r->ago < 0 ? 0 : r->ago);
        rc = app(b, t, err);
    }
    return rc ? rc : app(b, "}", err);
}

static int app_explained(kvix_buf *b, const kvix_explained *e, kvix_err *err)
{
    int rc = app_u64(b, "{\"worker\":", e->worker, err);
    if (!rc)
        rc = app_u64(b, ",\"dp\":", e->dp, err);
    if (!rc && e->named)
        rc = app(b, ",\"named\":true", err);
    if (!rc)
        rc = app_str(b, ",\"why\":", kvix_why_name(e->why), err);
    if (rc || e->why == KVIX_WHY_UNKNOWN_WORKER)
        return rc ? rc : app(b, "}", err);
    rc = app_u64(b, ",\"blocks\":", e->blocks, err);
    if (!rc && e->why != KVIX_WHY_MATCH)
        rc = app_hex(b, ",\"want\":", e->want, err);
    if (!rc && e->why == KVIX_WHY_REMOVED)
        rc = app_removal(b, ",\"removed\":", &e->removal, err);
    if (!rc && e->why == KVIX_WHY_CLEARED)
        rc = app_removal(b, ",\"cleared\":", &e->removal, err);
    if (!rc && (e->why == KVIX_WHY_DIFFERS || e->why == KVIX_WHY_ABSENT) && e->held_at) {
        rc = app_u64(b, ",\"held\":{\"at\":", e->held_at, err);
        if (!rc)
            rc = app_u64(b, ",\"after_prefix\":", e->held_after, err);
        if (!rc)
            rc = app(b, ",\"blocks\":[", err);
        for (uint32_t i = 0; !rc && i < e->nheld; i++) {
            const kvix_held *h = &e->held[i];
            rc = app_hex(b, i ? ",{\"local\":" : "{\"local\":", h->local, err);
            if (!rc)
                rc = app_hex(b, ",\"engine\":", h->engine, err);
            if (!rc)
                rc = app(b, ",\"tiers\":[", err);
            for (int m = 0, k = 0; !rc && m < KVIX_MEDIUM_COUNT; m++)
                if (h->tiers & (1u << m))
                    rc = app_str(b, k++ ? "," : "", kvix_medium_name(m), err);
            if (!rc)
                rc = app(b, h->after_prefix ? "],\"after_prefix\":true}" : "]}", err);
        }
        if (!rc)
            rc = app(b, "]}", err);
    }
    if (!rc && e->causes)
        rc = app_names(b, ",\"causes\":[", e->causes, err);
    if (!rc && e->likely)
        rc = app_names(b, ",\"likely\":[", e->likely, err);
    if (!rc && (e->likely & KVIX_CAUSE_LORA))
        rc = app_str(b, ",\"engine_lora\":", e->lora, err);
    if (!rc && e->has_clear)
        rc = app_removal(b, ",\"last_clear\":", &e->clear, err);
    return rc ? rc : app(b, "}", err);
}

int kvix_answer_explain_to_json(const kvix_answer *ans, const kvix_event *q,
                                const kvix_explain *x, kvix_buf *out, kvix_err *err)
{
    size_t start = out->len;
    int rc = kvix_answer_to_json(ans, q, out, err);
    if (rc)
        return rc;
    out->len -= 2; /* the answer's "}\n" */
    if (x->unknown) {
        rc = app_str(out, ",\"explain\":{\"why\":",
                     x->unknown == KVIX_UNKNOWN_MODEL ? "unknown_model" : "unknown_tenant", err);
        if (!rc)
            rc = app(out, ",\"closest\":[", err);
        for (uint32_t i = 0; !rc && i < x->nclosest; i++)
            rc = app_str(out, i ? "," : "", x->closest[i], err);
        if (!rc)
            rc = app(out, "]", err);
    } else {
        rc = app(out, ",\"explain\":{", err);
        if (!rc && x->query_bs)
            rc = app(out, "\"why\":\"block_size\",", err);
        if (!rc)
            rc = app_u64(out, "\"bs\":", x->bs, err);
        if (!rc && x->query_bs)
            rc = app_u64(out, ",\"query_bs\":", x->query_bs, err);
        if (!rc)
            rc = app_u64(out, ",\"depth\":", x->depth, err);
        if (!rc && x->eagle)
            rc = app(out, ",\"eagle\":true", err);
        if (!rc)
            rc = app(out, ",\"workers\":[", err);
        for (uint32_t i = 0; !rc && i < x->nw; i++) {
            if (i)
                rc = app(out, ",", err);
            if (!rc)
                rc = app_explained(out, &x->w[i], err);
        }
        if (!rc)
            rc = app(out, "]", err);
    }
    if (!rc)
        rc = app(out, "}}\n", err);
    if (rc && out->len > start) {
        out->len = start;
        out->data[start] = '\0';
    }
    return rc;
}
