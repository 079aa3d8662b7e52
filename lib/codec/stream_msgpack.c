/* msgpack framing of kvix records: one map per record with the NDJSON keys;
 * hashes are msgpack uint64 (not hex strings), a query's id is the msgpack
 * form of its JSON value.
 *
 * Decoding avoids msgpack_unpack() and the streaming unpacker, which
 * allocate a container's declared element count before reading one element
 * (5 bytes declaring an array32 ask for 96 GiB):
 *  - a framing pass that allocates nothing finds where a record ends, as its
 *    bytes arrive (resumable, so a record is scanned once however it is cut);
 *  - only then the whole record is parsed into objects by the budgeted
 *    parser shared with the wire decoder (lib/codec/msgpack_bounded_int.h), so a
 *    record never makes the decoder allocate more than a fixed multiple of
 *    its own size. The framing pass bounds nesting by the template's stack
 *    (32); a record is limited to KVIX_JSON_DEPTH_MAX like NDJSON. */
#include "kvix/stream.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <msgpack.h>
#include <msgpack/unpack_define.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "msgpack_bounded_int.h"
#include "stream_int.h"
#include "utf8_int.h"

/* ---- framing: the template with callbacks that keep nothing ---- */

typedef struct mps_user {
    char unused;
} mps_user;

#define msgpack_unpack_struct(name) struct kvmps##name
#define msgpack_unpack_func(ret, name) static inline ret kvmps##name
#define msgpack_unpack_callback(name) kvmps_cb##name
#define msgpack_unpack_object unsigned char
#define msgpack_unpack_user mps_user

static inline unsigned char kvmps_cb_root(mps_user *u)
{
    (void)u;
    return 0;
}

#define MPS_NUM(name, T)                                                       \
    static inline int kvmps_cb##name(mps_user *u, T d, unsigned char *o)        \
    {                                                                          \
        (void)u;                                                               \
        (void)d;                                                               \
        *o = 0;                                                                \
        return 0;                                                              \
    }
MPS_NUM(_uint8, uint8_t)
MPS_NUM(_uint16, uint16_t)
MPS_NUM(_uint32, uint32_t)
MPS_NUM(_uint64, uint64_t)
MPS_NUM(_int8, int8_t)
MPS_NUM(_int16, int16_t)
MPS_NUM(_int32, int32_t)
MPS_NUM(_int64, int64_t)
MPS_NUM(_float, float)
MPS_NUM(_double, double)
MPS_NUM(_array, unsigned int)
MPS_NUM(_map, unsigned int)

#define MPS_SIMPLE(name)                                                       \
    static inline int kvmps_cb##name(mps_user *u, unsigned char *o)             \
    {                                                                          \
        (void)u;                                                               \
        *o = 0;                                                                \
        return 0;                                                              \
    }
MPS_SIMPLE(_nil)
MPS_SIMPLE(_true)
MPS_SIMPLE(_false)

#define MPS_VAR(name)                                                          \
    static inline int kvmps_cb##name(mps_user *u, const char *b, const char *p,  \
                                      unsigned int l, unsigned char *o)         \
    {                                                                          \
        (void)u;                                                               \
        (void)b;                                                               \
        (void)p;                                                               \
        (void)l;                                                               \
        *o = 0;                                                                \
        return 0;                                                              \
    }
MPS_VAR(_str)
MPS_VAR(_bin)
MPS_VAR(_ext)

static inline int kvmps_cb_array_item(mps_user *u, unsigned char *c, unsigned char o)
{
    (void)u;
    (void)c;
    (void)o;
    return 0;
}

static inline int kvmps_cb_map_item(mps_user *u, unsigned char *c, unsigned char k,
                                    unsigned char v)
{
    (void)u;
    (void)c;
    (void)k;
    (void)v;
    return 0;
}

#include "msgpack_template_int.h"

struct kvix_mp_framer {
    struct kvmps_context scan;
    msgpack_zone *zone; /* objects of the record being decoded; cleared per record */
};

int kvix__mp_framer_new(kvix_mp_framer **out)
{
    kvix_mp_framer *f = calloc(1, sizeof *f);
    if (!f || !(f->zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE))) {
        free(f);
        return KVIX_ENOMEM;
    }
    kvmps_init(&f->scan);
    *out = f;
    return KVIX_OK;
}

void kvix__mp_framer_free(kvix_mp_framer *f)
{
    if (!f)
        return;
    msgpack_zone_free(f->zone);
    free(f);
}

int kvix__mp_framer_scan(kvix_mp_framer *f, const char *rec, size_t len, size_t *off)
{
    if (*off >= len)
        return 0;
    int ret = kvmps_execute(&f->scan, rec, len, off);
    if (ret > 0 || ret < 0)
        kvmps_init(&f->scan);
    if (ret > 0)
        return 1;
    if (ret == 0)
        return 0;
    return ret == MSGPACK_UNPACK_NOMEM_ERROR ? -2 : -1; /* the stack: nesting */
}

/* ---- decoding: msgpack objects seen as sv ---- */

static const sv_ops mp_ops;

static void msv(const msgpack_object *o, sv *out)
{
    out->ops = &mp_ops;
    out->p = o;
    out->n = 0;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: out->kind = SV_NIL; break;
    case MSGPACK_OBJECT_BOOLEAN:
        out->kind = SV_BOOL;
        out->u = o->via.boolean;
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        out->kind = SV_UINT;
        out->u = o->via.u64;
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        out->kind = SV_NEG;
        out->i = o->via.i64;
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        out->kind = SV_REAL;
        out->d = o->via.f64;
        break;
    case MSGPACK_OBJECT_STR:
        out->kind = SV_STR;
        out->s = o->via.str.ptr;
        out->len = o->via.str.size;
        break;
    case MSGPACK_OBJECT_ARRAY:
        out->kind = SV_ARRAY;
        out->n = o->via.array.size;
        break;
    case MSGPACK_OBJECT_MAP:
        out->kind = SV_MAP;
        out->n = o->via.map.size;
        break;
    default: out->kind = SV_OTHER; break;
    }
}

static void mp_item(const sv *arr, size_t i, sv *out)
{
    msv(&((const msgpack_object *)arr->p)->via.array.ptr[i], out);
}

static const void *mp_next(const sv *map, const void *it, const char **key, size_t *klen,
                           sv *val)
{
    const msgpack_object *o = map->p;
    if (o->via.map.size == 0) /* ptr is NULL then: no arithmetic on it */
        return NULL;
    const msgpack_object_kv *kv = it ? (const msgpack_object_kv *)it + 1 : o->via.map.ptr;
    if (kv == o->via.map.ptr + o->via.map.size)
        return NULL;
    if (kv->key.type == MSGPACK_OBJECT_STR) {
        *key = kv->key.via.str.ptr;
        *klen = kv->key.via.str.size;
    } else {
        *key = "";
        *klen = SIZE_MAX;
    }
    msv(&kv->val, val);
    return kv;
}

/* The JSON value of a msgpack id (NULL if it has none: bin, ext, a huge
 * integer, invalid utf-8, too deep). */
static json_t *to_json(const msgpack_object *o, int depth)
{
    if (depth > KVIX_JSON_DEPTH_MAX)
        return NULL;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return json_null();
    case MSGPACK_OBJECT_BOOLEAN: return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return o->via.u64 <= INT64_MAX ? json_integer((json_int_t)o->via.u64) : NULL;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return json_integer(o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return isfinite(o->via.f64) ? json_real(o->via.f64) : NULL;
    case MSGPACK_OBJECT_STR: return json_stringn(o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_ARRAY: {
        json_t *a = json_array();
        for (uint32_t i = 0; a && i < o->via.array.size; i++) {
            json_t *e = to_json(&o->via.array.ptr[i], depth + 1);
            if (!e || json_array_append_new(a, e)) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    case MSGPACK_OBJECT_MAP: {
        json_t *m = json_object();
        for (uint32_t i = 0; m && i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            json_t *e = kv->key.type == MSGPACK_OBJECT_STR ? to_json(&kv->val, depth + 1) : NULL;
            if (!e || json_object_setn_new(m, kv->key.via.str.ptr, kv->key.via.str.size, e)) {
                json_decref(m);
                return NULL;
            }
        }
        return m;
    }
    default: return NULL;
    }
}

static int mp_json_text(const sv *v, char *out, size_t cap, kvix_err *err)
{
    json_t *j = to_json(v->p, 2);
    if (!j)
        return kvix_err_set(err, KVIX_EINVAL, "\"id\" has no json form");
    size_t n = json_dumpb(j, out, cap - 1, JSON_ENCODE_ANY | JSON_COMPACT);
    json_decref(j);
    if (n == 0)
        return kvix_err_set(err, KVIX_EINVAL, "\"id\" has no json form");
    if (n >= cap)
        return kvix_err_set(err, KVIX_ELIMIT, "\"id\" longer than %zu bytes", cap - 1);
    out[n] = '\0';
    return KVIX_OK;
}

static const sv_ops mp_ops = {mp_item, mp_next, mp_json_text};

/* ---- one data model for both framings ---- */

/* A msgpack record must be something an NDJSON line could say, so that a
 * record is valid or not whatever its framing and whatever kvix accepts it
 * can write as NDJSON and read back: string keys, no key twice in one map,
 * strings of valid UTF-8 without NUL (jansson's rules), finite numbers, no
 * bin or ext. Unsigned integers past 2^63-1 stay allowed: they are how
 * msgpack carries the hashes NDJSON writes as hex strings (the fields that
 * are not hashes have their own ranges in stream_decode.c). */

static int key_cmp(const void *a, const void *b)
{
    const msgpack_object_str *x = &(*(const msgpack_object_kv *const *)a)->key.via.str;
    const msgpack_object_str *y = &(*(const msgpack_object_kv *const *)b)->key.via.str;
    uint32_t n = x->size < y->size ? x->size : y->size;
    int c = n ? memcmp(x->ptr, y->ptr, n) : 0;
    return c ? c : (x->size > y->size) - (x->size < y->size);
}

/* A short printable excerpt of a key for a message. */
static void key_excerpt(const msgpack_object_str *k, char out[36])
{
    size_t n = 0;
    for (uint32_t i = 0; i < k->size && n < 32; i++)
        out[n++] = k->ptr[i] >= 0x20 && k->ptr[i] < 0x7f && k->ptr[i] != '"' ? k->ptr[i] : '?';
    out[n] = '\0';
}

static int dup_key(const msgpack_object_str *k, const char *in, kvix_err *err)
{
    char ex[36];
    key_excerpt(k, ex);
    return kvix_err_set(err, KVIX_EINVAL, "duplicate key \"%s\"%s", ex, in);
}

/* No key twice in a map whose keys are all strings. */
static int unique_keys(const msgpack_object_map *m, const char *in, kvix_err *err)
{
    if (m->size <= 16) {
        for (uint32_t i = 1; i < m->size; i++)
            for (uint32_t j = 0; j < i; j++) {
                const msgpack_object_str *a = &m->ptr[i].key.via.str, *b = &m->ptr[j].key.via.str;
                if (a->size == b->size && (!a->size || !memcmp(a->ptr, b->ptr, a->size)))
                    return dup_key(a, in, err);
            }
        return KVIX_OK;
    }
    const msgpack_object_kv **v = malloc(m->size * sizeof *v);
    if (!v)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory checking a map of %" PRIu32 " keys",
                            m->size);
    for (uint32_t i = 0; i < m->size; i++)
        v[i] = &m->ptr[i];
    qsort(v, m->size, sizeof *v, key_cmp);
    int rc = KVIX_OK;
    for (uint32_t i = 1; i < m->size && !rc; i++)
        if (!key_cmp(&v[i - 1], &v[i]))
            rc = dup_key(&v[i]->key.via.str, in, err);
    free(v);
    return rc;
}

/* in: " in \"field\"" naming the record's field o belongs to, or "". */
static int json_form(const msgpack_object *o, const char *in, kvix_err *err)
{
    switch (o->type) {
    case MSGPACK_OBJECT_STR:
        if (o->via.str.size && memchr(o->via.str.ptr, '\0', o->via.str.size))
            return kvix_err_set(err, KVIX_EINVAL, "a string contains a NUL byte%s", in);
        if (!kvix_utf8_valid(o->via.str.ptr, o->via.str.size))
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "a string is not valid utf-8%s", in);
        return KVIX_OK;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return isfinite(o->via.f64) ? KVIX_OK
                                    : kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "a number is not finite%s", in);
    case MSGPACK_OBJECT_BIN:
    case MSGPACK_OBJECT_EXT:
        return kvix_err_set(err, KVIX_EINVAL, "binary data has no json form%s", in);
    case MSGPACK_OBJECT_ARRAY:
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            int rc = json_form(&o->via.array.ptr[i], in, err);
            if (rc)
                return rc;
        }
        return KVIX_OK;
    case MSGPACK_OBJECT_MAP: {
        const msgpack_object_map *m = &o->via.map;
        int top = !*in;
        for (uint32_t i = 0; i < m->size; i++) {
            const msgpack_object *k = &m->ptr[i].key;
            if (k->type != MSGPACK_OBJECT_STR)
                return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "a map key is not a string%s", in);
            int rc = json_form(k, in, err);
            if (rc)
                return rc;
            char field[48];
            if (top) { /* below the record's own map, messages name its field */
                char ex[36];
                key_excerpt(&k->via.str, ex);
                snprintf(field, sizeof field, " in \"%s\"", ex);
            }
            if ((rc = json_form(&m->ptr[i].val, top ? field : in, err)))
                return rc;
        }
        return unique_keys(m, in, err);
    }
    default:
        return KVIX_OK; /* nil, booleans, integers */
    }
}

static int decode_object(const msgpack_object *o, kvix_event *ev, kvix_err *err)
{
    int rc = json_form(o, "", err);
    if (rc) {
        kvix_event_reset(ev);
        return rc;
    }
    sv r;
    msv(o, &r);
    return kvix__stream_decode(&r, ev, err);
}

int kvix__mp_decode_record(kvix_mp_framer *f, const char *rec, size_t len, kvix_event *ev,
                          kvix_err *err)
{
    msgpack_zone_clear(f->zone);
    msgpack_object o;
    size_t off = 0;
    kvix_mpb_result r = kvix__mpb_parse(rec, len, f->zone, KVIX_JSON_DEPTH_MAX, &o, &off);
    if (r == KVIX_MPB_OK && off == len)
        return decode_object(&o, ev, err);
    kvix_event_reset(ev);
    if (r == KVIX_MPB_DEPTH)
        return kvix_err_set(err, KVIX_ELIMIT, "nested deeper than %d levels", KVIX_JSON_DEPTH_MAX);
    if (r == KVIX_MPB_NOMEM)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory decoding a %zu-byte record", len);
    /* the framing pass said this is one whole record: anything else is a bug */
    return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MSGPACK, "malformed msgpack record");
}

int kvix_event_from_msgpack(const char *buf, size_t len, size_t *used, kvix_event *ev,
                            kvix_err *err)
{
    *used = 0;
    kvix_event_reset(ev);
    kvix_mp_framer *f;
    if (kvix__mp_framer_new(&f))
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a msgpack decoder");
    size_t off = 0;
    int rc;
    switch (kvix__mp_framer_scan(f, buf, len, &off)) {
    case 1:
        *used = off;
        if (off > KVIX_LINE_MAX)
            rc = kvix_err_set(err, KVIX_ELIMIT, "msgpack record longer than %u bytes",
                              KVIX_LINE_MAX);
        else
            rc = kvix__mp_decode_record(f, buf, off, ev, err);
        break;
    case 0:
        rc = kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MSGPACK, "truncated msgpack record");
        break;
    case -2:
        rc = kvix_err_set(err, KVIX_ELIMIT, "msgpack record nested deeper than %d levels",
                          MSGPACK_EMBED_STACK_SIZE);
        break;
    default:
        rc = kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MSGPACK, "malformed msgpack");
        break;
    }
    kvix__mp_framer_free(f);
    return rc;
}

/* ---- encoding ---- */

typedef struct mp_sink {
    kvix_buf *out;
    kvix_err *err;
    int rc;
} mp_sink;

static int sink_write(void *data, const char *buf, size_t len)
{
    mp_sink *s = data;
    if (s->rc)
        return -1;
    s->rc = kvix_buf_append(s->out, buf, len, s->err);
    return s->rc ? -1 : 0;
}

static void pk_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pk_kv_str(msgpack_packer *pk, const char *k, const char *v)
{
    pk_str(pk, k);
    pk_str(pk, v);
}

static void pk_kv_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
    pk_str(pk, k);
    msgpack_pack_uint64(pk, v);
}

static int pack_json(msgpack_packer *pk, json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *v;
        msgpack_pack_map(pk, json_object_size(j));
        json_object_foreach(j, k, v) {
            pk_str(pk, k);
            if (pack_json(pk, v))
                return -1;
        }
        return 0;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *v;
        msgpack_pack_array(pk, json_array_size(j));
        json_array_foreach(j, i, v)
            if (pack_json(pk, v))
                return -1;
        return 0;
    }
    case JSON_STRING:
        msgpack_pack_str(pk, json_string_length(j));
        return msgpack_pack_str_body(pk, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return msgpack_pack_int64(pk, json_integer_value(j));
    case JSON_REAL: return msgpack_pack_double(pk, json_real_value(j));
    case JSON_TRUE: return msgpack_pack_true(pk);
    case JSON_FALSE: return msgpack_pack_false(pk);
    default: return msgpack_pack_nil(pk);
    }
}

static int pack_id(msgpack_packer *pk, const char *id, kvix_err *err)
{
    json_error_t jerr;
    json_t *j = json_loads(id, JSON_DECODE_ANY, &jerr);
    if (!j)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "query id is not json: %s", jerr.text);
    pk_str(pk, "id");
    pack_json(pk, j);
    json_decref(j);
    return KVIX_OK;
}

static void pack_hashes(msgpack_packer *pk, const char *key, const uint64_t *h, size_t n)
{
    pk_str(pk, key);
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint64(pk, h[i]);
}

static void pack_tokens(msgpack_packer *pk, const uint32_t *t, size_t n)
{
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint32(pk, t[i]);
}

static int pack_query(msgpack_packer *pk, const kvix_event *ev, kvix_err *err)
{
    size_t n = 4 + !!ev->lora[0] + ev->has_id + !!ev->bs + ev->has_top + ev->explain +
               !!ev->nxworkers;
    msgpack_pack_map(pk, n);
    pk_kv_str(pk, "type", "query");
    pk_kv_str(pk, "model", ev->model);
    pk_kv_str(pk, "tenant", ev->tenant);
    if (ev->lora[0])
        pk_kv_str(pk, "lora", ev->lora);
    if (ev->has_id) {
        int rc = pack_id(pk, ev->id, err);
        if (rc)
            return rc;
    }
    if (ev->bs)
        pk_kv_u64(pk, "bs", ev->bs);
    if (ev->has_top)
        pk_kv_u64(pk, "top", ev->top);
    if (ev->explain) {
        pk_str(pk, "explain");
        msgpack_pack_true(pk);
    }
    if (ev->nxworkers) {
        pk_str(pk, "workers");
        msgpack_pack_array(pk, ev->nxworkers);
        for (uint32_t i = 0; i < ev->nxworkers; i++)
            msgpack_pack_uint64(pk, ev->xworkers[i]);
    }
    if (ev->has_tokens) {
        pk_str(pk, "tokens");
        pack_tokens(pk, ev->tokens, ev->ntokens);
    } else {
        pack_hashes(pk, "local", ev->hashes, ev->nhashes);
    }
    return KVIX_OK;
}

/* The keys pack_stored writes (after the common ones). */
static size_t stored_keys(const kvix_event *ev, size_t span)
{
    size_t n = 2 + (ev->bs || !ev->placeholder) + ev->placeholder + ev->eagle +
               2 * (ev->has_parent && ev->has_parent_at);
    if (!ev->nblocks && ev->nhashes)
        return n;
    return n + !!ev->lora[0] + !!span;
}

static void pack_stored(msgpack_packer *pk, const kvix_event *ev, size_t span)
{
    if (ev->bs || !ev->placeholder)
        pk_kv_u64(pk, "bs", ev->bs);
    pk_str(pk, "parent");
    if (ev->has_parent)
        msgpack_pack_uint64(pk, ev->parent);
    else
        msgpack_pack_nil(pk);
    if (ev->has_parent && ev->has_parent_at) {
        pk_kv_u64(pk, "parent_position", ev->parent_position);
        pk_kv_u64(pk, "parent_canon", ev->parent_canon);
    }
    if (ev->placeholder) {
        pk_str(pk, "placeholder");
        msgpack_pack_true(pk);
    }
    if (ev->eagle) {
        pk_str(pk, "eagle");
        msgpack_pack_true(pk);
    }
    if (!ev->nblocks && ev->nhashes) { /* a placeholder, a group of another kind */
        pack_hashes(pk, "hashes", ev->hashes, ev->nhashes);
        return;
    }
    pk_str(pk, "blocks");
    msgpack_pack_array(pk, ev->nblocks);
    for (size_t i = 0; i < ev->nblocks; i++) {
        msgpack_pack_map(pk, 2);
        pk_kv_u64(pk, "local", ev->blocks[i].local);
        pk_kv_u64(pk, "seq", ev->blocks[i].seq);
    }
    if (ev->lora[0])
        pk_kv_str(pk, "lora", ev->lora);
    if (span) {
        pk_str(pk, "tokens");
        msgpack_pack_array(pk, ev->nblocks);
        for (size_t i = 0; i < ev->nblocks; i++)
            pack_tokens(pk, ev->tokens + i * ev->bs, span);
    }
}

int kvix_event_to_msgpack(const kvix_event *ev, kvix_buf *out, kvix_err *err)
{
    size_t start = out->len;
    mp_sink sink = {out, err, KVIX_OK};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sink, sink_write);
    int rc = KVIX_OK;
    if (ev->type == KVIX_EV_QUERY) {
        rc = pack_query(&pk, ev, err);
    } else if (ev->type == KVIX_EV_STORED || ev->type == KVIX_EV_REMOVED ||
               ev->type == KVIX_EV_CLEARED) {
        size_t span = ev->type == KVIX_EV_STORED ? kvix__stream_token_span(ev) : 0;
        int group = ev->has_group && ev->type != KVIX_EV_CLEARED;
        int kind = group && ev->type == KVIX_EV_STORED && ev->kind != KVIX_KIND_NONE;
        size_t n = 6 + ev->has_eid + ev->has_ts + group + kind;
        if (ev->type == KVIX_EV_STORED)
            n += stored_keys(ev, span);
        else
            n += (ev->type == KVIX_EV_REMOVED) + !!ev->bs; /* bs: as kvix_event_to_json */
        msgpack_pack_map(&pk, n);
        pk_kv_str(&pk, "type", kvix_event_type_name(ev->type));
        pk_kv_u64(&pk, "worker", ev->worker);
        pk_kv_u64(&pk, "dp", ev->dp);
        pk_kv_str(&pk, "model", ev->model);
        pk_kv_str(&pk, "tenant", ev->tenant);
        pk_kv_str(&pk, "medium", kvix_medium_name(ev->medium));
        if (ev->has_eid)
            pk_kv_u64(&pk, "eid", ev->eid);
        if (group)
            pk_kv_u64(&pk, "group", ev->group);
        if (kind)
            pk_kv_str(&pk, "kind", kvix_kind_name(ev->kind));
        if (ev->has_ts) {
            pk_str(&pk, "ts");
            msgpack_pack_double(&pk, ev->ts);
        }
        if (ev->type != KVIX_EV_STORED && ev->bs)
            pk_kv_u64(&pk, "bs", ev->bs);
        if (ev->type == KVIX_EV_STORED)
            pack_stored(&pk, ev, span);
        else if (ev->type == KVIX_EV_REMOVED)
            pack_hashes(&pk, "hashes", ev->hashes, ev->nhashes);
    } else {
        rc = kvix_err_set(err, KVIX_EINVAL, "event of unknown type %d", ev->type);
    }
    if (!rc)
        rc = sink.rc;
    if (rc && out->len > start) {
        out->len = start;
        out->data[start] = '\0';
    }
    return rc;
}
