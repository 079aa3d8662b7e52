/* kvix: decoding the engines' KV-event batches (vLLM, SGLang; see
 * kvsub(1), examples in tests/fixtures/vllm) into kvix events.
 *
 * Parsing is budgeted (lib/codec/msgpack_bounded_int.h): a payload can never make
 * the decoder allocate more than a fixed multiple of its own length, and
 * nesting is bounded (WIRE_DEPTH_MAX).
 *
 * Decoding is two passes over the object tree: the first validates the whole
 * batch and sizes the output, the second computes the local hashes and
 * delivers the events, so a malformed batch delivers nothing. */
#include "kvix/wire.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kvix/hash.h"

#include "msgpack_bounded_int.h"
#include "utf8_int.h"

/* Deepest nesting accepted: a batch needs 6 (batch, events, event,
 * extra_keys, per-block list, an entry); more is hostile. */
#define WIRE_DEPTH_MAX 12

/* Parse payload[0..len) whole into *root (objects in z). */
static int parse(const char *payload, size_t len, msgpack_zone *z, msgpack_object *root,
                 kvix_err *err)
{
    size_t off = 0;
    switch (kvix_mpb_parse(payload, len, z, WIRE_DEPTH_MAX, root, &off)) {
    case KVIX_MPB_OK:
        if (off != len)
            return kvix_err_set(err, KVIX_EINVAL, "%zu trailing bytes after the batch",
                                len - off);
        return KVIX_OK;
    case KVIX_MPB_TRUNCATED:
        return kvix_err_set(err, KVIX_EINVAL, "truncated payload (%zu bytes)", len);
    case KVIX_MPB_BUDGET:
        return kvix_err_set(err, KVIX_ELIMIT,
                            "a container declares more elements than the payload holds");
    case KVIX_MPB_NOMEM:
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory decoding a %zu-byte payload",
                            len);
    case KVIX_MPB_DEPTH:
        return kvix_err_set(err, KVIX_ELIMIT, "nesting deeper than %d", WIRE_DEPTH_MAX);
    case KVIX_MPB_MALFORMED:
        break;
    }
    return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MSGPACK, "malformed msgpack at byte %zu", off);
}

/* ---- the engine's fields ------------------------------------------------ */

int kvix_wire_medium(const char *s, size_t len)
{
    static const struct { const char *name; int medium; } map[] = {
        {"GPU", KVIX_MEDIUM_GPU},        {"CPU_PINNED", KVIX_MEDIUM_CPU},
        {"CPU_TIER1", KVIX_MEDIUM_CPU},  {"CPU_TIER2", KVIX_MEDIUM_CPU},
        {"CPU", KVIX_MEDIUM_CPU},        {"DISK", KVIX_MEDIUM_DISK},
        {"EXTERNAL", KVIX_MEDIUM_EXTERNAL},
    };
    if (!s)
        return KVIX_MEDIUM_GPU;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strlen(map[i].name) == len && memcmp(map[i].name, s, len) == 0)
            return map[i].medium;
    return KVIX_MEDIUM_GPU;
}

static bool is_nil(const msgpack_object *o)
{
    return !o || o->type == MSGPACK_OBJECT_NIL;
}

static bool str_is_n(const msgpack_object *o, const char *s, size_t n)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

/* Compare with a string literal, its length known at compile time. */
#define str_is(o, lit) str_is_n((o), (lit), sizeof(lit) - 1)

/* An engine block hash: uint, negative int (SGLang's signed int64, the same
 * bits), or a bin of 1..32 bytes whose last 8 are the u64, big-endian. */
static int get_hash(const msgpack_object *o, uint64_t *out)
{
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        *out = o->via.u64;
        return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        *out = (uint64_t)o->via.i64;
        return 0;
    case MSGPACK_OBJECT_BIN: {
        uint32_t n = o->via.bin.size;
        if (n == 0 || n > 32)
            return -1;
        const unsigned char *p = (const unsigned char *)o->via.bin.ptr;
        uint64_t v = 0;
        for (uint32_t i = n > 8 ? n - 8 : 0; i < n; i++)
            v = v << 8 | p[i];
        *out = v;
        return 0;
    }
    default:
        return -1;
    }
}

/* A token id. With SGLang's EAGLE the radix keys are bigrams
 * (token[i], token[i+1]): the token at position i is the pair's first. */
static int get_token(const msgpack_object *o, uint32_t *out)
{
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        if (o->via.array.size == 0)
            return -1;
        o = &o->via.array.ptr[0];
    }
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > UINT32_MAX)
        return -1;
    *out = (uint32_t)o->via.u64;
    return 0;
}

/* A vLLM extra key that is a multimodal hash: 64 hex digits, of which the
 * first 16 are the u64 the local hash takes. Other keys (a LoRA name, a
 * cache salt, prompt-embedding ids) do not enter the local hash. */
static bool mm_hash(const msgpack_object *o, uint64_t *out)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size != 64)
        return false;
    const char *s = o->via.str.ptr;
    for (int i = 0; i < 64; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return false;
    }
    return kvix_parse_hex64(s, 16, out) == 0;
}

/* Fields of an event, by position in array events (the type is element 0)
 * and by key in map events. */
enum { F_HASHES, F_PARENT, F_TOKENS, F_BS, F_LORA_ID, F_MEDIUM, F_LORA, F_EXTRA, F_COUNT };

#define KEY(s) {s, sizeof(s) - 1}
static const struct { const char *s; size_t n; } stored_keys[F_COUNT] = {
    KEY("block_hashes"), KEY("parent_block_hash"), KEY("token_ids"), KEY("block_size"),
    KEY("lora_id"),      KEY("medium"),            KEY("lora_name"), KEY("extra_keys"),
};
#undef KEY

/* The position of each field in a BlockRemoved array: hashes, medium. */
static const int removed_pos[F_COUNT] = {1, -1, -1, -1, -1, 2, -1, -1};

typedef struct wview {
    int type; /* KVIX_EV_*; KVIX_EV_NONE: skipped */
    const msgpack_object *f[F_COUNT];
    uint32_t bs;
    int medium;
} wview;

static void collect(const msgpack_object *e, int type, wview *v)
{
    memset(v->f, 0, sizeof v->f);
    if (e->type == MSGPACK_OBJECT_ARRAY) {
        for (int i = 0; i < F_COUNT; i++) {
            uint32_t pos = type == KVIX_EV_REMOVED ? (uint32_t)removed_pos[i] : (uint32_t)i + 1;
            if (pos < e->via.array.size)
                v->f[i] = &e->via.array.ptr[pos];
        }
        return;
    }
    for (uint32_t k = 0; k < e->via.map.size; k++) {
        const msgpack_object *key = &e->via.map.ptr[k].key;
        if (key->type != MSGPACK_OBJECT_STR)
            continue;
        for (int i = 0; i < F_COUNT; i++)
            if (str_is_n(key, stored_keys[i].s, stored_keys[i].n)) {
                v->f[i] = &e->via.map.ptr[k].val;
                break;
            }
    }
}

static const msgpack_object *event_type(const msgpack_object *e)
{
    if (e->type == MSGPACK_OBJECT_ARRAY)
        return e->via.array.size ? &e->via.array.ptr[0] : NULL;
    for (uint32_t k = 0; k < e->via.map.size; k++)
        if (str_is(&e->via.map.ptr[k].key, "type"))
            return &e->via.map.ptr[k].val;
    return NULL;
}

/* ---- pass 1: validation --------------------------------------------------- */

typedef struct wsize {
    size_t blocks, hashes, tokens; /* largest of any event: reserved before delivery */
    uint64_t partial, unknown;
} wsize;

static int check_hashes(const msgpack_object *o, size_t i, const char *what, kvix_err *err)
{
    if (!o || o->type != MSGPACK_OBJECT_ARRAY)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "event %zu: %s is not an array", i, what);
    if (o->via.array.size > KVIX_EVENT_BLOCKS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "event %zu: %u block hashes (limit %d)", i,
                            o->via.array.size, KVIX_EVENT_BLOCKS_MAX);
    uint64_t h;
    for (uint32_t k = 0; k < o->via.array.size; k++)
        if (get_hash(&o->via.array.ptr[k], &h))
            return kvix_err_set(err, KVIX_EINVAL, "event %zu: bad block hash %u", i, k);
    return KVIX_OK;
}

static int check_medium(wview *v, size_t i, kvix_err *err)
{
    const msgpack_object *m = v->f[F_MEDIUM];
    v->medium = KVIX_MEDIUM_GPU;
    if (is_nil(m))
        return KVIX_OK;
    if (m->type != MSGPACK_OBJECT_STR)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "event %zu: medium is not a string", i);
    v->medium = kvix_wire_medium(m->via.str.ptr, m->via.str.size);
    return KVIX_OK;
}

static int check_extra(const msgpack_object *x, size_t i, uint32_t nblocks, kvix_err *err)
{
    if (is_nil(x))
        return KVIX_OK;
    if (x->type != MSGPACK_OBJECT_ARRAY)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "event %zu: extra_keys is not an array", i);
    for (uint32_t b = 0; b < x->via.array.size && b < nblocks; b++) {
        const msgpack_object *keys = &x->via.array.ptr[b];
        if (is_nil(keys))
            continue;
        if (keys->type != MSGPACK_OBJECT_ARRAY)
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "event %zu: extra_keys[%u] is not a list",
                                i, b);
        size_t nmm = 0;
        uint64_t h;
        for (uint32_t k = 0; k < keys->via.array.size; k++)
            nmm += mm_hash(&keys->via.array.ptr[k], &h);
        if (nmm > KVIX_HASH_MM_MAX)
            return kvix_err_set(err, KVIX_ELIMIT,
                                "event %zu: %zu multimodal hashes in block %u (limit %u)", i,
                                nmm, b, KVIX_HASH_MM_MAX);
    }
    return KVIX_OK;
}

static int check_stored(wview *v, size_t i, const kvix_wire_source *src, wsize *sz,
                        kvix_err *err)
{
    int rc;
    const msgpack_object *bs = v->f[F_BS];
    if (is_nil(bs)) {
        if (!src->block_size)
            return kvix_err_set(err, KVIX_EINVAL, "event %zu: no block_size", i);
        v->bs = src->block_size;
    } else if (bs->type != MSGPACK_OBJECT_POSITIVE_INTEGER || bs->via.u64 == 0 ||
               bs->via.u64 > KVIX_BS_MAX) {
        return kvix_err_set(err, KVIX_EINVAL, "event %zu: bad block_size", i);
    } else {
        v->bs = (uint32_t)bs->via.u64;
    }
    if ((rc = check_hashes(v->f[F_HASHES], i, "block_hashes", err)))
        return rc;
    uint32_t nblocks = v->f[F_HASHES]->via.array.size;
    if (src->block_size && v->bs < src->block_size) {
        /* A partial block (newer vLLM): not a full block a prompt can hit. */
        sz->partial++;
        v->type = KVIX_EV_NONE;
        return KVIX_OK;
    }
    if (nblocks == 0) { /* nothing stored: nothing to say */
        v->type = KVIX_EV_NONE;
        return KVIX_OK;
    }
    const msgpack_object *p = v->f[F_PARENT];
    uint64_t h;
    if (!is_nil(p) && get_hash(p, &h))
        return kvix_err_set(err, KVIX_EINVAL, "event %zu: bad parent_block_hash", i);
    const msgpack_object *t = v->f[F_TOKENS];
    if (!t || t->type != MSGPACK_OBJECT_ARRAY)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "event %zu: token_ids is not an array", i);
    size_t need = (size_t)nblocks * v->bs;
    if (need > KVIX_TOKENS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "event %zu: %zu tokens (limit %u)", i, need,
                            KVIX_TOKENS_MAX);
    if (t->via.array.size < need)
        return kvix_err_set(err, KVIX_EINVAL,
                            "event %zu: %u tokens for %u blocks of %u", i, t->via.array.size,
                            nblocks, v->bs);
    uint32_t tok;
    for (size_t k = 0; k < need; k++)
        if (get_token(&t->via.array.ptr[k], &tok))
            return kvix_err_set(err, KVIX_EINVAL, "event %zu: bad token id at %zu", i, k);
    const msgpack_object *l = v->f[F_LORA];
    if (!is_nil(l) && l->type != MSGPACK_OBJECT_MAP) { /* a map: SGLang's {cache_salt} */
        if (l->type != MSGPACK_OBJECT_STR)
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "event %zu: lora_name is not a string", i);
        if (l->via.str.size >= KVIX_NAME_MAX)
            return kvix_err_set(err, KVIX_ELIMIT, "event %zu: lora_name of %u bytes (limit %d)",
                                i, l->via.str.size, KVIX_NAME_MAX - 1);
        if (memchr(l->via.str.ptr, '\0', l->via.str.size))
            return kvix_err_set(err, KVIX_EINVAL, "event %zu: lora_name contains a NUL byte",
                                i);
        /* it becomes the event's lora: a name kvix's records could not carry
         * would make kvix write what its own reader refuses */
        if (!kvix_utf8_valid(l->via.str.ptr, l->via.str.size))
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "event %zu: lora_name is not valid UTF-8", i);
    }
    if ((rc = check_medium(v, i, err)) || (rc = check_extra(v->f[F_EXTRA], i, nblocks, err)))
        return rc;
    if (nblocks > sz->blocks)
        sz->blocks = nblocks;
    if (need > sz->tokens)
        sz->tokens = need;
    return KVIX_OK;
}

static int check_event(const msgpack_object *e, size_t i, wview *v,
                       const kvix_wire_source *src, wsize *sz, kvix_err *err)
{
    if (e->type != MSGPACK_OBJECT_ARRAY && e->type != MSGPACK_OBJECT_MAP)
        return kvix_err_set(err, KVIX_EINVAL, "event %zu: not an array or a map", i);
    const msgpack_object *t = event_type(e);
    if (!t || t->type != MSGPACK_OBJECT_STR)
        return kvix_err_set(err, KVIX_EINVAL, "event %zu: no type", i);
    if (str_is(t, "BlockStored"))
        v->type = KVIX_EV_STORED;
    else if (str_is(t, "BlockRemoved"))
        v->type = KVIX_EV_REMOVED;
    else if (str_is(t, "AllBlocksCleared"))
        v->type = KVIX_EV_CLEARED;
    else { /* BlockInactive and whatever comes next */
        v->type = KVIX_EV_NONE;
        sz->unknown++;
        return KVIX_OK;
    }
    collect(e, v->type, v);
    v->medium = KVIX_MEDIUM_GPU;
    if (v->type == KVIX_EV_STORED)
        return check_stored(v, i, src, sz, err);
    if (v->type == KVIX_EV_REMOVED) {
        int rc = check_hashes(v->f[F_HASHES], i, "block_hashes", err);
        if (rc)
            return rc;
        if (v->f[F_HASHES]->via.array.size > sz->hashes)
            sz->hashes = v->f[F_HASHES]->via.array.size;
        return check_medium(v, i, err);
    }
    return KVIX_OK;
}

static int check_name(const char *s, const char *what, kvix_err *err)
{
    if (s && strlen(s) >= KVIX_NAME_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%s name longer than %d bytes", what,
                            KVIX_NAME_MAX - 1);
    if (s && !kvix_utf8_valid(s, strlen(s)))
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "%s name is not valid UTF-8", what);
    return KVIX_OK;
}

/* ---- pass 2: delivery ----------------------------------------------------- */

static void fill_stored(kvix_event *ev, const wview *v, int keep_tokens)
{
    const msgpack_object *hs = v->f[F_HASHES], *t = v->f[F_TOKENS], *l = v->f[F_LORA],
                         *x = v->f[F_EXTRA], *p = v->f[F_PARENT];
    uint32_t n = hs->via.array.size, bs = v->bs;
    ev->bs = bs;
    if (!is_nil(p)) {
        get_hash(p, &ev->parent);
        ev->has_parent = 1;
    }
    if (!is_nil(l) && l->type == MSGPACK_OBJECT_STR) {
        memcpy(ev->lora, l->via.str.ptr, l->via.str.size);
        ev->lora[l->via.str.size] = '\0';
    }
    uint64_t seed = kvix_hash_lora_seed(ev->lora, strlen(ev->lora));
    size_t need = (size_t)n * bs;
    for (size_t k = 0; k < need; k++)
        get_token(&t->via.array.ptr[k], &ev->tokens[k]);
    uint32_t nx = !is_nil(x) ? x->via.array.size : 0;
    for (uint32_t b = 0; b < n; b++) {
        kvix_block *blk = &ev->blocks[b];
        get_hash(&hs->via.array.ptr[b], &blk->seq);
        const uint32_t *bt = ev->tokens + (size_t)b * bs;
        const msgpack_object *keys = b < nx ? &x->via.array.ptr[b] : NULL;
        uint64_t mm[KVIX_HASH_MM_MAX];
        size_t nmm = 0;
        if (!is_nil(keys))
            for (uint32_t k = 0; k < keys->via.array.size; k++)
                nmm += mm_hash(&keys->via.array.ptr[k], &mm[nmm]);
        if (nmm)
            kvix_hash_local_mm(bt, bs, seed, mm, nmm, &blk->local, NULL);
        else
            blk->local = kvix_hash_local(bt, bs, seed);
    }
    ev->nblocks = n;
    ev->has_tokens = keep_tokens ? 1 : 0;
    ev->ntokens = keep_tokens ? need : 0;
}

static int deliver(const wview *views, size_t n, const kvix_wire_source *src, uint32_t dp,
                   uint64_t seq, double ts, bool has_ts, const wsize *sz,
                   kvix_wire_event_fn fn, void *ctx, kvix_err *err)
{
    kvix_event ev;
    kvix_event_init(&ev);
    int rc;
    if ((rc = kvix_event_reserve_blocks(&ev, sz->blocks, err)) ||
        (rc = kvix_event_reserve_hashes(&ev, sz->hashes, err)) ||
        (rc = kvix_event_reserve_tokens(&ev, sz->tokens, err)))
        goto out;
    size_t lm = src->model ? strlen(src->model) : 0, lt = src->tenant ? strlen(src->tenant) : 0;
    for (size_t i = 0; i < n; i++) {
        const wview *v = &views[i];
        if (v->type == KVIX_EV_NONE)
            continue;
        kvix_event_reset(&ev);
        ev.type = v->type;
        ev.worker = src->worker;
        ev.dp = dp;
        ev.medium = v->medium;
        /* The wire's seq is a u64, an eid 0..KVIX_EID_MAX (what every
         * framing and the snapshot can hold): a seq past it gives no eid, so
         * the events are still applied, only not placed by eid. */
        ev.has_eid = seq <= KVIX_EID_MAX;
        ev.eid = ev.has_eid ? seq : 0;
        ev.has_ts = has_ts;
        ev.ts = ts;
        if (src->model) {
            memcpy(ev.model, src->model, lm);
            ev.model[lm] = '\0';
        }
        if (src->tenant) {
            memcpy(ev.tenant, src->tenant, lt);
            ev.tenant[lt] = '\0';
        }
        if (v->type == KVIX_EV_STORED) {
            fill_stored(&ev, v, src->keep_tokens);
        } else if (v->type == KVIX_EV_REMOVED) {
            const msgpack_object *hs = v->f[F_HASHES];
            for (uint32_t k = 0; k < hs->via.array.size; k++)
                get_hash(&hs->via.array.ptr[k], &ev.hashes[k]);
            ev.nhashes = hs->via.array.size;
        }
        if ((rc = fn(ctx, &ev)))
            goto out;
    }
out:
    kvix_event_release(&ev);
    return rc;
}

/* ---- the batch ----------------------------------------------------------- */

static int decode_batch(const msgpack_object *root, uint64_t seq, const kvix_wire_source *src,
                        kvix_wire_event_fn fn, void *ctx, kvix_wire_counts *counts,
                        msgpack_zone *z, kvix_err *err)
{
    if (root->type != MSGPACK_OBJECT_ARRAY || root->via.array.size < 2)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "batch is not an array [ts, events, dp]");
    const msgpack_object *ts = &root->via.array.ptr[0], *evs = &root->via.array.ptr[1];
    double t = 0;
    bool has_ts = true;
    switch (ts->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: t = ts->via.f64; break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: t = (double)ts->via.u64; break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: t = (double)ts->via.i64; break;
    case MSGPACK_OBJECT_NIL: has_ts = false; break;
    default: return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "batch timestamp is not a number");
    }
    if (has_ts && !isfinite(t))
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "batch timestamp is not finite");
    uint32_t dp = src->dp;
    if (root->via.array.size >= 3) {
        const msgpack_object *d = &root->via.array.ptr[2];
        if (d->type == MSGPACK_OBJECT_POSITIVE_INTEGER && d->via.u64 <= UINT32_MAX)
            dp = (uint32_t)d->via.u64;
        else if (d->type != MSGPACK_OBJECT_NIL)
            return kvix_err_set(err, KVIX_EINVAL, "bad data-parallel rank in the batch");
    }
    if (evs->type != MSGPACK_OBJECT_ARRAY)
        return kvix_err_set(err, KVIX_EINVAL, "batch events are not an array");
    size_t n = evs->via.array.size;
    if (n > KVIX_WIRE_EVENTS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%zu events in a batch (limit %d)", n,
                            KVIX_WIRE_EVENTS_MAX);
    wview *views = n ? msgpack_zone_malloc(z, n * sizeof *views) : NULL;
    if (n && !views)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu events", n);
    wsize sz = {0, 0, 0, 0, 0};
    int rc;
    for (size_t i = 0; i < n; i++)
        if ((rc = check_event(&evs->via.array.ptr[i], i, &views[i], src, &sz, err)))
            return rc;
    if (counts) {
        counts->partial_blocks += sz.partial;
        counts->unknown_events += sz.unknown;
        counts->dp = dp;
    }
    if (!fn)
        return KVIX_OK;
    return deliver(views, n, src, dp, seq, t, has_ts, &sz, fn, ctx, err);
}

int kvix_wire_decode(const void *payload, size_t len, uint64_t seq,
                     const kvix_wire_source *src, kvix_wire_event_fn fn, void *ctx,
                     kvix_wire_counts *counts, kvix_err *err)
{
    int rc;
    if (len > KVIX_WIRE_FRAME_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "payload of %zu bytes (limit %u)", len,
                            KVIX_WIRE_FRAME_MAX);
    if (len == 0)
        return kvix_err_set(err, KVIX_EINVAL, "empty payload");
    if ((rc = check_name(src->model, "model", err)) ||
        (rc = check_name(src->tenant, "tenant", err)))
        return rc;
    msgpack_zone z;
    /* Objects take 3-4 times the payload's bytes; one chunk for the common case. */
    if (!msgpack_zone_init(&z, len * 4 + 1024 < (1u << 20) ? len * 4 + 1024 : (1u << 20)))
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory decoding a batch");
    msgpack_object root;
    rc = parse(payload, len, &z, &root, err);
    if (rc == KVIX_OK)
        rc = decode_batch(&root, seq, src, fn, ctx, counts, &z, err);
    msgpack_zone_destroy(&z);
    return rc;
}
