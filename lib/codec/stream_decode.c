/* The rules of a kvix record (contract sections 3 and 4), shared by the
 * NDJSON and msgpack decoders through the value view of stream_int.h. */
#include "stream_int.h"
#include "utf8_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


enum {
    K_TYPE, K_WORKER, K_DP, K_MODEL, K_TENANT, K_MEDIUM, K_EID, K_TS, K_BS, K_PARENT,
    K_BLOCKS, K_LORA, K_TOKENS, K_HASHES, K_LOCAL, K_ID, K_TOKEN_IDS, K_PROMPT_TOKEN_IDS,
    K_PARENT_POSITION, K_PARENT_CANON, K_TOP, K_EXPLAIN, K_WORKERS, K_GROUP, K_KIND,
    K_PLACEHOLDER, K_EAGLE, K_COUNT
};

static const char *const key_names[K_COUNT] = {
    "type", "worker", "dp", "model", "tenant", "medium", "eid", "ts", "bs", "parent",
    "blocks", "lora", "tokens", "hashes", "local", "id", "token_ids", "prompt_token_ids",
    "parent_position", "parent_canon", "top", "explain", "workers", "group", "kind",
    "placeholder", "eagle",
};

static int key_index(const char *k, size_t len)
{
    for (int i = 0; i < K_COUNT; i++)
        if (strlen(key_names[i]) == len && memcmp(key_names[i], k, len) == 0)
            return i;
    return -1;
}

/* A short printable excerpt of bad text for a message. */
static void excerpt(const char *s, size_t len, char out[40])
{
    size_t n = 0;
    for (size_t i = 0; i < len && n < 32; i++)
        out[n++] = (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"') ? s[i] : '?';
    if (len > 32) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

static const char *kind_word(int kind)
{
    switch (kind) {
    case SV_NIL: return "null";
    case SV_BOOL: return "a boolean";
    case SV_UINT: case SV_NEG: return "an integer";
    case SV_REAL: return "a number";
    case SV_STR: return "a string";
    case SV_ARRAY: return "an array";
    case SV_MAP: return "an object";
    }
    return "binary";
}

/* An unsigned integer field in [min, max]; what names it in messages. */
static int get_uint(const sv *v, const char *what, uint64_t min, uint64_t max, uint64_t *out,
                    kvix_err *err)
{
    if (v->kind == SV_NEG)
        return kvix_err_set(err, KVIX_ERANGE, "%s is negative", what);
    if (v->kind == SV_UINT && (v->u < min || v->u > max))
        return kvix_err_set(err, KVIX_ERANGE, "%s out of range (%" PRIu64 " to %" PRIu64 ")",
                            what, min, max);
    if (v->kind != SV_UINT)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "%s is not an integer", what);
    *out = v->u;
    return KVIX_OK;
}

static int get_name(const sv *v, const char *what, char dst[KVIX_NAME_MAX], kvix_err *err)
{
    if (v->kind != SV_STR)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "%s is not a string", what);
    if (v->len >= KVIX_NAME_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%s longer than %d bytes", what,
                            KVIX_NAME_MAX - 1);
    if (memchr(v->s, '\0', v->len))
        return kvix_err_set(err, KVIX_EINVAL, "%s contains a NUL byte", what);
    if (!kvix_utf8_valid(v->s, v->len))
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "%s is not valid utf-8", what);
    memcpy(dst, v->s, v->len);
    dst[v->len] = '\0';
    return KVIX_OK;
}

/* Hex digit values plus one, 0 for anything else. A table, not branches:
 * hash digits are random, so a compare chain mispredicts on half of them. */
static const uint8_t hexval1[256] = {
    ['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5, ['5'] = 6, ['6'] = 7, ['7'] = 8,
    ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15,
    ['f'] = 16, ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

/* 1..16 hex digits, either case (as kvix_parse_hex64). */
static inline int parse_hex(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 16)
        return KVIX_EINVAL;
    uint64_t v = 0;
    int bad = 0;
    for (size_t i = 0; i < len; i++) {
        int d = hexval1[(unsigned char)s[i]] - 1;
        bad |= d;
        v = v << 4 | (uint64_t)(d & 15);
    }
    if (bad < 0)
        return KVIX_EINVAL;
    *out = v;
    return KVIX_OK;
}

/* A u64 hash: 1..16 hex digits in a string, or an integer. */
static int get_hash(const sv *v, const char *what, uint64_t *out, kvix_err *err)
{
    if (v->kind == SV_UINT) {
        *out = v->u;
        return KVIX_OK;
    }
    if (v->kind == SV_STR) {
        if (parse_hex(v->s, v->len, out) == KVIX_OK)
            return KVIX_OK;
        char ex[40];
        excerpt(v->s, v->len, ex);
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_HASH, "bad hash \"%s\" in %s", ex, what);
    }
    return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "%s is not a hash (%s)", what, kind_word(v->kind));
}

static int get_array(const sv *v, const char *what, kvix_err *err)
{
    if (v->kind != SV_ARRAY)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "%s is not an array", what);
    return KVIX_OK;
}

/* An optional boolean field: absent or null is false. */
static int get_flag(const sv *v, const char *what, int *out, kvix_err *err)
{
    *out = 0;
    if (!v || v->kind == SV_NIL)
        return KVIX_OK;
    if (v->kind != SV_BOOL)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "%s is not a boolean", what);
    *out = v->u != 0;
    return KVIX_OK;
}

static int get_token(const sv *v, const char *what, size_t i, uint32_t *out, kvix_err *err)
{
    if (v->kind == SV_UINT && v->u <= UINT32_MAX) {
        *out = (uint32_t)v->u;
        return KVIX_OK;
    }
    if (v->kind == SV_UINT || v->kind == SV_NEG)
        return kvix_err_set(err, KVIX_ERANGE, "%s[%zu] out of range (0 to 4294967295)", what, i);
    return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "%s[%zu] is not a token id", what, i);
}

/* An array of hashes into ev->hashes. */
static int get_hashes(const sv *v, const char *what, kvix_event *ev, kvix_err *err)
{
    int rc;
    if ((rc = get_array(v, what, err)) || (rc = kvix_event_reserve_hashes(ev, v->n, err)))
        return rc;
    char where[48];
    for (size_t i = 0; i < v->n; i++) {
        sv it;
        v->ops->item(v, i, &it);
        if (it.kind == SV_UINT) {
            ev->hashes[i] = it.u;
            continue;
        }
        if (it.kind == SV_STR && parse_hex(it.s, it.len, &ev->hashes[i]) == KVIX_OK)
            continue;
        snprintf(where, sizeof where, "%s[%zu]", what, i);
        if ((rc = get_hash(&it, where, &ev->hashes[i], err)))
            return rc;
    }
    ev->nhashes = v->n;
    return KVIX_OK;
}

/* A flat array of token ids into ev->tokens (a query); what names it. */
static int get_tokens_flat(const sv *v, const char *what, kvix_event *ev, kvix_err *err)
{
    int rc;
    if ((rc = get_array(v, what, err)) || (rc = kvix_event_reserve_tokens(ev, v->n, err)))
        return rc;
    for (size_t i = 0; i < v->n; i++) {
        sv it;
        v->ops->item(v, i, &it);
        if ((rc = get_token(&it, what, i, &ev->tokens[i], err)))
            return rc;
    }
    ev->ntokens = v->n;
    ev->has_tokens = 1;
    return KVIX_OK;
}

static int get_blocks(const sv *v, kvix_event *ev, kvix_err *err)
{
    int rc;
    if ((rc = get_array(v, "\"blocks\"", err)) || (rc = kvix_event_reserve_blocks(ev, v->n, err)))
        return rc;
    char where[64];
    for (size_t i = 0; i < v->n; i++) {
        sv b;
        v->ops->item(v, i, &b);
        if (b.kind != SV_MAP)
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "\"blocks\"[%zu] is not an object", i);
        int seen = 0;
        const char *k;
        size_t kl;
        sv val;
        for (const void *it = NULL; (it = b.ops->next(&b, it, &k, &kl, &val));) {
            int which = kl == 5 && memcmp(k, "local", 5) == 0 ? 1
                      : kl == 3 && memcmp(k, "seq", 3) == 0   ? 2
                                                              : 0;
            if (!which)
                continue;
            uint64_t *dst = which == 1 ? &ev->blocks[i].local : &ev->blocks[i].seq;
            if (val.kind == SV_UINT) {
                *dst = val.u;
            } else if (val.kind != SV_STR || parse_hex(val.s, val.len, dst) != KVIX_OK) {
                snprintf(where, sizeof where, "\"blocks\"[%zu].%s", i, which == 1 ? "local" : "seq");
                if ((rc = get_hash(&val, where, dst, err)))
                    return rc;
            }
            seen |= which;
        }
        if (!(seen & 1))
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MISSING, "missing \"local\" in \"blocks\"[%zu]", i);
        if (!(seen & 2))
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MISSING, "missing \"seq\" in \"blocks\"[%zu]", i);
    }
    ev->nblocks = v->n;
    return KVIX_OK;
}

/* A stored event's forensic tokens: one array of bs ids per block, or with
 * eagle the bs + 1 each block was hashed over (the next block's first
 * token too: windows that overlap by one, kept once). */
static int get_block_tokens(const sv *v, kvix_event *ev, kvix_err *err)
{
    int rc;
    if ((rc = get_array(v, "\"tokens\"", err)))
        return rc;
    if (v->n != ev->nblocks)
        return kvix_err_set(err, KVIX_EINVAL, "\"tokens\" has %zu arrays for %zu blocks", v->n,
                            ev->nblocks);
    uint64_t total = (uint64_t)ev->nblocks * ev->bs + (ev->eagle && ev->nblocks);
    if (total > KVIX_TOKENS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "too many tokens: %" PRIu64 " (limit %u)", total,
                            KVIX_TOKENS_MAX);
    if ((rc = kvix_event_reserve_tokens(ev, (size_t)total, err)))
        return rc;
    size_t span = ev->bs + ev->eagle;
    char where[48];
    for (size_t i = 0; i < v->n; i++) {
        sv a;
        v->ops->item(v, i, &a);
        snprintf(where, sizeof where, "\"tokens\"[%zu]", i);
        if ((rc = get_array(&a, where, err)))
            return rc;
        if (a.n != span)
            return kvix_err_set(err, KVIX_EINVAL, "%s has %zu tokens, expected %s%" PRIu32,
                                where, a.n, ev->eagle ? "bs + 1 = " : "bs ", (uint32_t)span);
        for (size_t j = 0; j < a.n; j++) {
            sv t;
            uint32_t id = 0;
            a.ops->item(&a, j, &t);
            if ((rc = get_token(&t, where, j, &id, err)))
                return rc;
            size_t at = i * ev->bs + j; /* an EAGLE window's last is the next one's first */
            if (j == 0 && i > 0 && ev->eagle) {
                if (ev->tokens[at] != id)
                    return kvix_err_set(err, KVIX_EINVAL,
                                        "%s does not start with the last token of the one before",
                                        where);
                continue;
            }
            ev->tokens[at] = id;
        }
    }
    ev->ntokens = (size_t)total;
    ev->has_tokens = 1;
    return KVIX_OK;
}

static int decode_type(const sv *v, kvix_event *ev, kvix_err *err)
{
    if (!v) {
        ev->type = KVIX_EV_QUERY;
        return KVIX_OK;
    }
    if (v->kind != SV_STR)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "\"type\" is not a string");
    static const int types[] = {KVIX_EV_STORED, KVIX_EV_REMOVED, KVIX_EV_CLEARED, KVIX_EV_QUERY};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const char *n = kvix_event_type_name(types[i]);
        if (strlen(n) == v->len && memcmp(n, v->s, v->len) == 0) {
            ev->type = types[i];
            return KVIX_OK;
        }
    }
    char ex[40];
    excerpt(v->s, v->len, ex);
    return kvix_err_set(err, KVIX_EINVAL, "unknown \"type\" \"%s\"", ex);
}

/* Fields every record may carry. */
static int decode_common(sv *f[K_COUNT], kvix_event *ev, kvix_err *err)
{
    int rc;
    uint64_t u;
    /* null in an optional field means absent (kvix-events(5)) */
    if (f[K_MODEL] && f[K_MODEL]->kind != SV_NIL &&
        (rc = get_name(f[K_MODEL], "\"model\"", ev->model, err)))
        return rc;
    if (f[K_TENANT] && f[K_TENANT]->kind != SV_NIL &&
        (rc = get_name(f[K_TENANT], "\"tenant\"", ev->tenant, err)))
        return rc;
    if (f[K_LORA] && f[K_LORA]->kind != SV_NIL &&
        (rc = get_name(f[K_LORA], "\"lora\"", ev->lora, err)))
        return rc;
    if (f[K_MEDIUM] && f[K_MEDIUM]->kind != SV_NIL) {
        const sv *m = f[K_MEDIUM];
        if (m->kind != SV_STR)
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "\"medium\" is not a string");
        if (kvix_medium_parse(m->s, m->len, &ev->medium) != KVIX_OK) {
            char ex[40];
            excerpt(m->s, m->len, ex);
            return kvix_err_set(err, KVIX_EINVAL, "unknown \"medium\" \"%s\"", ex);
        }
    }
    if (f[K_EID] && f[K_EID]->kind != SV_NIL) {
        if ((rc = get_uint(f[K_EID], "\"eid\"", 0, KVIX_EID_MAX, &ev->eid, err)))
            return rc;
        ev->has_eid = 1;
    }
    if (f[K_TS] && f[K_TS]->kind != SV_NIL) {
        const sv *t = f[K_TS];
        if (t->kind == SV_REAL && isfinite(t->d))
            ev->ts = t->d;
        else if (t->kind == SV_UINT)
            ev->ts = (double)t->u;
        else if (t->kind == SV_NEG)
            ev->ts = (double)t->i;
        else
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "\"ts\" is not a number");
        ev->has_ts = 1;
    }
    if (f[K_BS] && f[K_BS]->kind != SV_NIL) {
        if ((rc = get_uint(f[K_BS], "\"bs\"", 1, KVIX_BS_MAX, &u, err)))
            return rc;
        ev->bs = (uint32_t)u;
    }
    return KVIX_OK;
}

/* kvix's extension: where the parent sat ("parent_position" and
 * "parent_canon", both or neither, only below a "parent"). */
static int decode_parent_at(sv *f[K_COUNT], kvix_event *ev, kvix_err *err)
{
    int has_pos = f[K_PARENT_POSITION] && f[K_PARENT_POSITION]->kind != SV_NIL;
    int has_canon = f[K_PARENT_CANON] && f[K_PARENT_CANON]->kind != SV_NIL;
    if (!has_pos && !has_canon)
        return KVIX_OK;
    if (!has_pos || !has_canon)
        return kvix_err_set(err, KVIX_EINVAL, "\"%s\" without \"%s\"",
                            has_pos ? "parent_position" : "parent_canon",
                            has_pos ? "parent_canon" : "parent_position");
    if (!ev->has_parent)
        return kvix_err_set(err, KVIX_EINVAL, "\"parent_position\" without \"parent\"");
    uint64_t u;
    int rc = get_uint(f[K_PARENT_POSITION], "\"parent_position\"", 0, UINT32_MAX - 1, &u, err);
    if (!rc)
        rc = get_hash(f[K_PARENT_CANON], "\"parent_canon\"", &ev->parent_canon, err);
    if (rc)
        return rc;
    ev->parent_position = (uint32_t)u;
    ev->has_parent_at = 1;
    return KVIX_OK;
}

/* "group" and "kind" (kvix's KV cache groups, kvix-events(5)): a kind
 * without a group is group 0's. */
static int decode_group(sv *f[K_COUNT], kvix_event *ev, kvix_err *err)
{
    int rc;
    uint64_t u;
    if (f[K_GROUP] && f[K_GROUP]->kind != SV_NIL) {
        if ((rc = get_uint(f[K_GROUP], "\"group\"", 0, KVIX_GROUPS_MAX - 1, &u, err)))
            return rc;
        ev->has_group = 1;
        ev->group = (uint32_t)u;
    }
    if (ev->type == KVIX_EV_STORED && f[K_KIND] && f[K_KIND]->kind != SV_NIL) {
        const sv *k = f[K_KIND];
        if (k->kind != SV_STR)
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "\"kind\" is not a string");
        ev->kind = kvix_kind_parse(k->s, k->len);
        ev->has_group = 1;
    }
    return KVIX_OK;
}

/* A stored event: blocks, or (a placeholder, a group of a kind that is not
 * a full one) the engine's hashes only. */
static int decode_stored(sv *f[K_COUNT], kvix_event *ev, kvix_err *err)
{
    int rc, flag;
    if ((rc = get_flag(f[K_PLACEHOLDER], "\"placeholder\"", &flag, err)))
        return rc;
    ev->placeholder = (unsigned)flag;
    if ((rc = get_flag(f[K_EAGLE], "\"eagle\"", &flag, err)))
        return rc;
    ev->eagle = (unsigned)flag;
    if (!ev->placeholder && (!f[K_BS] || f[K_BS]->kind == SV_NIL))
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MISSING, "missing \"bs\"");
    if (f[K_PARENT] && f[K_PARENT]->kind != SV_NIL) {
        if ((rc = get_hash(f[K_PARENT], "\"parent\"", &ev->parent, err)))
            return rc;
        ev->has_parent = 1;
    }
    if ((rc = decode_parent_at(f, ev, err)))
        return rc;
    int has_blocks = f[K_BLOCKS] && f[K_BLOCKS]->kind != SV_NIL;
    int has_hashes = f[K_HASHES] && f[K_HASHES]->kind != SV_NIL;
    if (ev->placeholder || (!has_blocks && has_hashes && ev->has_group && !kvix_kind_full(ev->kind))) {
        if (!has_hashes)
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MISSING,
                                       "missing \"hashes\" in a placeholder");
        if (has_blocks)
            return kvix_err_set(err, KVIX_EINVAL, "a placeholder with \"blocks\"");
        return get_hashes(f[K_HASHES], "\"hashes\"", ev, err);
    }
    if (!has_blocks)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MISSING, "missing \"blocks\"");
    if ((rc = get_blocks(f[K_BLOCKS], ev, err)))
        return rc;
    if (f[K_TOKENS] && f[K_TOKENS]->kind != SV_NIL)
        return get_block_tokens(f[K_TOKENS], ev, err);
    return KVIX_OK;
}

static int decode_event(sv *f[K_COUNT], kvix_event *ev, kvix_err *err)
{
    int rc;
    uint64_t u;
    if (!f[K_WORKER] || f[K_WORKER]->kind == SV_NIL)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MISSING, "missing \"worker\"");
    if ((rc = get_uint(f[K_WORKER], "\"worker\"", 0, KVIX_WORKER_MAX, &ev->worker, err)))
        return rc;
    if (f[K_DP] && f[K_DP]->kind != SV_NIL) {
        if ((rc = get_uint(f[K_DP], "\"dp\"", 0, UINT32_MAX, &u, err)))
            return rc;
        ev->dp = (uint32_t)u;
    }
    if (ev->type != KVIX_EV_CLEARED && (rc = decode_group(f, ev, err)))
        return rc;
    switch (ev->type) {
    case KVIX_EV_STORED:
        return decode_stored(f, ev, err);
    case KVIX_EV_REMOVED:
        if (!f[K_HASHES])
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MISSING, "missing \"hashes\"");
        return get_hashes(f[K_HASHES], "\"hashes\"", ev, err);
    }
    return KVIX_OK; /* cleared */
}

/* kvix's extensions of a query: "top" (how many of the best scores),
 * "explain" (a boolean) and the "workers" it should explain besides the
 * best (worker ids, at most KVIX_QUERY_WORKERS_MAX). */
static int decode_query_ext(sv *f[K_COUNT], kvix_event *ev, kvix_err *err)
{
    int rc;
    uint64_t u;
    if (f[K_TOP] && f[K_TOP]->kind != SV_NIL) {
        if ((rc = get_uint(f[K_TOP], "\"top\"", 0, UINT32_MAX, &u, err)))
            return rc;
        ev->top = (uint32_t)u;
        ev->has_top = 1;
    }
    if (f[K_EXPLAIN] && f[K_EXPLAIN]->kind != SV_NIL) {
        if (f[K_EXPLAIN]->kind != SV_BOOL)
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE,
                                       "\"explain\" is not a boolean");
        ev->explain = f[K_EXPLAIN]->u != 0;
    }
    const sv *w = f[K_WORKERS];
    if (!w || w->kind == SV_NIL)
        return KVIX_OK;
    if ((rc = get_array(w, "\"workers\"", err)))
        return rc;
    if (w->n > KVIX_QUERY_WORKERS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "\"workers\" names %zu workers (limit %d)", w->n,
                            KVIX_QUERY_WORKERS_MAX);
    for (size_t i = 0; i < w->n; i++) {
        sv it;
        char where[32];
        w->ops->item(w, i, &it);
        snprintf(where, sizeof where, "\"workers\"[%zu]", i);
        if ((rc = get_uint(&it, where, 0, KVIX_WORKER_MAX, &ev->xworkers[i], err)))
            return rc;
    }
    ev->nxworkers = (uint32_t)w->n;
    return KVIX_OK;
}

/* A query's tokens may come as "tokens", or as what routers and
 * OpenAI-style servers call them: "token_ids", "prompt_token_ids". */
static const int token_keys[] = {K_TOKENS, K_TOKEN_IDS, K_PROMPT_TOKEN_IDS, K_LOCAL};

static int decode_query(sv *f[K_COUNT], kvix_event *ev, kvix_err *err)
{
    int which = -1;
    for (size_t i = 0; i < sizeof token_keys / sizeof token_keys[0]; i++) {
        int k = token_keys[i];
        if (!f[k] || f[k]->kind == SV_NIL)
            continue;
        if (which >= 0)
            return kvix_err_set(err, KVIX_EINVAL, "query has both \"%s\" and \"%s\"",
                                key_names[which], key_names[k]);
        which = k;
    }
    if (which < 0)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MISSING, "query has neither \"tokens\" nor \"local\"");
    char what[24];
    snprintf(what, sizeof what, "\"%s\"", key_names[which]);
    int rc = which != K_LOCAL ? get_tokens_flat(f[which], what, ev, err)
                              : get_hashes(f[K_LOCAL], what, ev, err);
    return rc ? rc : decode_query_ext(f, ev, err);
}

/* The id first, so that a query rejected for anything else is still
 * answered with its id. */
static int decode_id(sv *f[K_COUNT], kvix_event *ev, kvix_err *err)
{
    if (!f[K_ID])
        return KVIX_OK;
    int rc = f[K_ID]->ops->json_text(f[K_ID], ev->id, sizeof ev->id, err);
    if (!rc)
        ev->has_id = 1;
    return rc;
}

int kvix__stream_decode(const sv *root, kvix_event *ev, kvix_err *err)
{
    kvix_event_reset(ev);
    if (root->kind == SV_ARRAY) {
        ev->type = KVIX_EV_QUERY;
        return get_tokens_flat(root, "\"tokens\"", ev, err);
    }
    if (root->kind != SV_MAP)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "record is %s, not an object",
                            kind_word(root->kind));
    sv vals[K_COUNT];
    sv *f[K_COUNT] = {0};
    const char *k;
    size_t kl;
    sv val;
    for (const void *it = NULL; (it = root->ops->next(root, it, &k, &kl, &val));) {
        if (kl == SIZE_MAX)
            continue; /* a non-string key: not ours, ignored like unknown keys */
        int ki = key_index(k, kl);
        if (ki < 0)
            continue;
        vals[ki] = val;
        f[ki] = &vals[ki];
    }
    int rc = decode_type(f[K_TYPE], ev, err);
    if (!rc && ev->type == KVIX_EV_QUERY)
        rc = decode_id(f, ev, err);
    if (!rc)
        rc = decode_common(f, ev, err);
    if (!rc)
        rc = ev->type == KVIX_EV_QUERY ? decode_query(f, ev, err) : decode_event(f, ev, err);
    return rc;
}

void kvix__stream_fmt_double(double d, char out[32])
{
    /* The shortest of %.15g..%.17g that reads back exactly: timestamps stay
     * readable (1700000000.25) and still round-trip. */
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, 32, "%.*g", prec, d);
        if (strtod(out, NULL) == d)
            break;
    }
}
