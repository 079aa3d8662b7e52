/* kvix: decoding the engines' KV-event batches (vLLM, SGLang; see
 * kvsub(1), examples in tests/fixtures/vllm) into kvix events.
 *
 * Parsing is budgeted (lib/codec/msgpack_bounded_int.h): a payload can never make
 * the decoder allocate more than a fixed multiple of its own length, and
 * nesting is bounded (WIRE_DEPTH_MAX).
 *
 * Decoding is two passes over the object tree: the first validates the whole
 * batch, sizes the output and tells which events are skipped (counted by
 * rule: kvix_wire_counts), the second computes the local hashes and delivers
 * the events, so a malformed batch delivers nothing. The fields' values are
 * read by lib/wire_fields.c. */
#include "kvix/wire.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kvix/hash.h"

#include "msgpack_bounded_int.h"
#include "utf8_int.h"
#include "wire_int.h"

/* Deepest nesting accepted: a batch needs 7 (batch, events, event,
 * extra_keys, per-block list, a multimodal pair, its identifier); more is
 * hostile. */
#define WIRE_DEPTH_MAX 12

/* Parse payload[0..len) whole into *root (objects in z). */
static int parse(const char *payload, size_t len, msgpack_zone *z, msgpack_object *root,
                 kvix_err *err)
{
    size_t off = 0;
    switch (kvix__mpb_parse(payload, len, z, WIRE_DEPTH_MAX, root, &off)) {
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

/* ---- events' fields ------------------------------------------------------ */

/* Compare with a string literal, its length known at compile time. */
#define str_is(o, lit) kvix_wf_str_is((o), (lit), sizeof(lit) - 1)

/* Fields of an event, by position in array events (the type is element 0,
 * field i element i + 1, up to F_POSITIONAL) and by key in map events. */
enum {
    F_HASHES, F_PARENT, F_TOKENS, F_BS, F_LORA_ID, F_MEDIUM, F_LORA, F_EXTRA, F_GROUP, F_KIND,
    F_WINDOW,
    F_POSITIONAL,              /* the fields past it are map keys only: */
    F_LOCALITY = F_POSITIONAL, /* vLLM 0.27+ */
    F_SALT,                    /* SGLang's map events */
    F_COUNT
};

#define KEY(s) {s, sizeof(s) - 1}
static const struct { const char *s; size_t n; } field_keys[F_COUNT] = {
    KEY("block_hashes"), KEY("parent_block_hash"), KEY("token_ids"), KEY("block_size"),
    KEY("lora_id"),      KEY("medium"),            KEY("lora_name"), KEY("extra_keys"),
    KEY("group_idx"),    KEY("kv_cache_spec_kind"), KEY("kv_cache_spec_sliding_window"),
    KEY("locality"),     KEY("cache_salt"),
};
#undef KEY

/* The position of each field in a BlockRemoved array: hashes, medium, group. */
static const int removed_pos[F_POSITIONAL] = {1, -1, -1, -1, -1, 2, -1, -1, 3, -1, -1};

/* Why an event is not delivered (each counted in kvix_wire_counts). */
enum { SK_NONE, SK_UNKNOWN, SK_PARTIAL, SK_REMOTE, SK_MEDIUM, SK_REFUSED, SK_EMPTY };

typedef struct wview {
    int type; /* KVIX_EV_*; KVIX_EV_NONE: skipped */
    const msgpack_object *f[F_COUNT];
    uint32_t bs, group;
    int medium, kind;
    bool has_group, placeholder, eagle;
    bool hashes_only; /* delivered as the engine's hashes (a placeholder, another kind) */
} wview;

static void collect(const msgpack_object *e, int type, wview *v)
{
    memset(v->f, 0, sizeof v->f);
    if (e->type == MSGPACK_OBJECT_ARRAY) {
        for (int i = 0; i < F_POSITIONAL; i++) {
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
            if (kvix_wf_str_is(key, field_keys[i].s, field_keys[i].n)) {
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
    uint64_t *scratch;             /* room for the most hashes of one event */
    size_t scratch_cap;
    msgpack_zone *z;
    kvix_wire_counts c; /* what the batch skipped or set apart: counted once it decodes */
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
        if (kvix__wf_hash(&o->via.array.ptr[k], &h))
            return kvix_err_set(err, KVIX_EINVAL, "event %zu: bad block hash %u", i, k);
    return KVIX_OK;
}

/* The medium: a string the table knows (SK_NONE), one it does not
 * (SK_MEDIUM), or a batch error. */
static int check_medium(wview *v, size_t i, int *skip, kvix_err *err)
{
    const msgpack_object *m = v->f[F_MEDIUM];
    v->medium = KVIX_MEDIUM_GPU;
    if (kvix_wf_nil(m))
        return KVIX_OK;
    if (m->type != MSGPACK_OBJECT_STR)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "event %zu: medium is not a string", i);
    v->medium = kvix_wire_medium(m->via.str.ptr, m->via.str.size);
    if (v->medium < 0)
        *skip = SK_MEDIUM;
    return KVIX_OK;
}

/* The fields that say whose cache an event describes and in which group:
 * locality (another machine's: SK_REMOTE), group_idx and the kind (a value
 * of the wrong type or out of range: SK_REFUSED). */
static int check_place(wview *v, int *skip)
{
    const msgpack_object *l = v->f[F_LOCALITY], *g = v->f[F_GROUP], *k = v->f[F_KIND];
    v->has_group = false;
    v->group = 0;
    v->kind = KVIX_KIND_NONE;
    if (!kvix_wf_nil(l)) {
        if (l->type != MSGPACK_OBJECT_STR)
            return *skip = SK_REFUSED;
        if (!kvix__wf_word_is(l, "LOCAL"))
            return *skip = SK_REMOTE;
    }
    if (!kvix_wf_nil(g)) {
        if (g->type != MSGPACK_OBJECT_POSITIVE_INTEGER || g->via.u64 >= KVIX_GROUPS_MAX)
            return *skip = SK_REFUSED;
        v->has_group = true;
        v->group = (uint32_t)g->via.u64;
    }
    if (v->type == KVIX_EV_STORED && !kvix_wf_nil(k)) {
        if (k->type != MSGPACK_OBJECT_STR)
            return *skip = SK_REFUSED;
        v->kind = kvix_kind_parse(k->via.str.ptr, k->via.str.size);
        if (!v->has_group) /* a kind belongs to a group: group 0 when the event names none */
            v->has_group = true;
    }
    return SK_NONE;
}

static int check_extra(const msgpack_object *x, size_t i, uint32_t nblocks, const wview *v,
                       kvix_err *err)
{
    if (kvix_wf_nil(x))
        return KVIX_OK;
    if (x->type != MSGPACK_OBJECT_ARRAY)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "event %zu: extra_keys is not an array", i);
    const msgpack_object *l = v->f[F_LORA];
    bool lora = !kvix_wf_nil(l) && l->type == MSGPACK_OBJECT_STR;
    for (uint32_t b = 0; b < x->via.array.size && b < nblocks; b++) {
        const msgpack_object *keys = &x->via.array.ptr[b];
        if (kvix_wf_nil(keys))
            continue;
        if (keys->type != MSGPACK_OBJECT_ARRAY)
            return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "event %zu: extra_keys[%u] is not a list",
                                i, b);
        size_t nmm = kvix__wf_mm_keys(keys, lora ? l->via.str.ptr : NULL, lora ? l->via.str.size : 0,
                                     NULL, 0);
        if (nmm > KVIX_HASH_MM_MAX)
            return kvix_err_set(err, KVIX_ELIMIT,
                                "event %zu: %zu multimodal hashes in block %u (limit %u)", i,
                                nmm, b, KVIX_HASH_MM_MAX);
    }
    return KVIX_OK;
}

static int check_lora(const msgpack_object *l, size_t i, kvix_err *err)
{
    if (kvix_wf_nil(l) || l->type == MSGPACK_OBJECT_MAP) /* a map: SGLang's {cache_salt} */
        return KVIX_OK;
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
    return KVIX_OK;
}

/* Room for n hashes of one event in sz's scratch (in the batch's zone). */
static uint64_t *scratch(wsize *sz, size_t n)
{
    if (n > sz->scratch_cap) {
        uint64_t *s = msgpack_zone_malloc(sz->z, n * sizeof *s);
        if (!s)
            return NULL;
        sz->scratch = s;
        sz->scratch_cap = n;
    }
    return sz->scratch;
}

/* Whether the store's hashes repeat or equal its parent (-1: no memory). */
static int repeats(const wview *v, wsize *sz)
{
    const msgpack_object *hs = v->f[F_HASHES], *p = v->f[F_PARENT];
    size_t n = hs->via.array.size;
    uint64_t *h = scratch(sz, 2 * n), parent = 0;
    if (!h)
        return -1;
    for (size_t k = 0; k < n; k++)
        kvix__wf_hash(&hs->via.array.ptr[k], &h[k]);
    bool has_parent = !kvix_wf_nil(p) && kvix__wf_hash(p, &parent) == 0;
    return kvix__wf_repeats(h, n, has_parent, parent, h + n);
}

static int check_block_size(wview *v, size_t i, const kvix_wire_source *src, kvix_err *err)
{
    const msgpack_object *bs = v->f[F_BS];
    if (kvix_wf_nil(bs)) {
        if (!src->block_size)
            return kvix_err_set(err, KVIX_EINVAL, "event %zu: no block_size", i);
        v->bs = src->block_size;
    } else if (bs->type != MSGPACK_OBJECT_POSITIVE_INTEGER || bs->via.u64 > KVIX_BS_MAX) {
        return kvix_err_set(err, KVIX_EINVAL, "event %zu: bad block_size", i);
    } else {
        v->bs = (uint32_t)bs->via.u64;
    }
    return KVIX_OK;
}

/* token_ids for nblocks blocks of v->bs: plain or EAGLE pairs. */
static int check_tokens(wview *v, size_t i, uint32_t nblocks, wsize *sz, kvix_err *err)
{
    const msgpack_object *t = v->f[F_TOKENS];
    if (!t || t->type != MSGPACK_OBJECT_ARRAY)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "event %zu: token_ids is not an array", i);
    size_t need = (size_t)nblocks * v->bs;
    if (need + 1 > KVIX_TOKENS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "event %zu: %zu tokens (limit %u)", i, need,
                            KVIX_TOKENS_MAX - 1);
    size_t bad;
    if (kvix__wf_tokens_shape(t, need, &v->eagle, &bad)) {
        if (bad == need)
            return kvix_err_set(err, KVIX_EINVAL, "event %zu: %u tokens for %u blocks of %u", i,
                                t->via.array.size, nblocks, v->bs);
        return kvix_err_set(err, KVIX_EINVAL, "event %zu: bad token id at %zu", i, bad);
    }
    if (need + v->eagle > sz->tokens)
        sz->tokens = need + v->eagle;
    return KVIX_OK;
}

static int check_stored(wview *v, size_t i, const kvix_wire_source *src, wsize *sz, int *skip,
                        kvix_err *err)
{
    int rc = KVIX_OK;
    if (check_place(v, skip) || (rc = check_medium(v, i, skip, err)) || *skip)
        return *skip ? KVIX_OK : rc;
    if ((rc = check_block_size(v, i, src, err)) ||
        (rc = check_hashes(v->f[F_HASHES], i, "block_hashes", err)))
        return rc;
    uint32_t nblocks = v->f[F_HASHES]->via.array.size;
    const msgpack_object *t = v->f[F_TOKENS], *p = v->f[F_PARENT];
    bool no_tokens = kvix_wf_nil(t) || (t->type == MSGPACK_OBJECT_ARRAY && t->via.array.size == 0);
    if (v->bs == 0) {
        /* An offloading connector's placeholder: hashes the worker already
         * published, now in another tier too, with no tokens to hash. */
        if (!no_tokens || v->medium == KVIX_MEDIUM_GPU)
            return *skip = SK_REFUSED, KVIX_OK;
        v->placeholder = v->hashes_only = true;
    } else if (src->block_size && v->bs < src->block_size) {
        /* A partial block (newer vLLM): not a full block a prompt can hit. */
        return *skip = SK_PARTIAL, KVIX_OK;
    }
    if (nblocks == 0) /* nothing stored: nothing to say */
        return *skip = SK_EMPTY, KVIX_OK;
    uint64_t h;
    if (!kvix_wf_nil(p) && kvix__wf_hash(p, &h))
        return kvix_err_set(err, KVIX_EINVAL, "event %zu: bad parent_block_hash", i);
    int rep = repeats(v, sz);
    if (rep < 0)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %u hashes", nblocks);
    if (rep)
        return *skip = SK_REFUSED, KVIX_OK;
    const msgpack_object *salt = v->f[F_SALT];
    if (!kvix_wf_nil(salt) && salt->type != MSGPACK_OBJECT_STR)
        return *skip = SK_REFUSED, KVIX_OK;
    if (v->has_group && !kvix_kind_full(v->kind)) {
        /* Sliding-window and Mamba groups may skip blocks: their tokens need
         * not line up with their hashes, and nothing asks for their content. */
        v->hashes_only = true;
        sz->c.other_kinds++;
    }
    if (v->hashes_only) {
        if (nblocks > sz->hashes)
            sz->hashes = nblocks;
        sz->c.placeholders += v->placeholder;
        return KVIX_OK;
    }
    if ((rc = check_tokens(v, i, nblocks, sz, err)) || (rc = check_lora(v->f[F_LORA], i, err)) ||
        (rc = check_extra(v->f[F_EXTRA], i, nblocks, v, err)))
        return rc;
    if (nblocks > sz->blocks)
        sz->blocks = nblocks;
    return KVIX_OK;
}

static int check_removed(wview *v, size_t i, wsize *sz, int *skip, kvix_err *err)
{
    int rc = KVIX_OK;
    if (check_place(v, skip) || (rc = check_medium(v, i, skip, err)) || *skip)
        return *skip ? KVIX_OK : rc;
    if ((rc = check_hashes(v->f[F_HASHES], i, "block_hashes", err)))
        return rc;
    if (v->f[F_HASHES]->via.array.size > sz->hashes)
        sz->hashes = v->f[F_HASHES]->via.array.size;
    return KVIX_OK;
}

static void count_skip(wsize *sz, int skip)
{
    switch (skip) {
    case SK_UNKNOWN: sz->c.unknown_events++; break;
    case SK_PARTIAL: sz->c.partial_blocks++; break;
    case SK_REMOTE: sz->c.remote++; break;
    case SK_MEDIUM: sz->c.unknown_media++; break;
    case SK_REFUSED: sz->c.refused++; break;
    }
}

static int check_event(const msgpack_object *e, size_t i, wview *v,
                       const kvix_wire_source *src, wsize *sz, kvix_err *err)
{
    if (e->type != MSGPACK_OBJECT_ARRAY && e->type != MSGPACK_OBJECT_MAP)
        return kvix_err_set(err, KVIX_EINVAL, "event %zu: not an array or a map", i);
    const msgpack_object *t = event_type(e);
    if (!t || t->type != MSGPACK_OBJECT_STR)
        return kvix_err_set(err, KVIX_EINVAL, "event %zu: no type", i);
    memset(v, 0, sizeof *v);
    int skip = SK_NONE, rc = KVIX_OK;
    if (str_is(t, "BlockStored"))
        v->type = KVIX_EV_STORED;
    else if (str_is(t, "BlockRemoved"))
        v->type = KVIX_EV_REMOVED;
    else if (str_is(t, "AllBlocksCleared"))
        v->type = KVIX_EV_CLEARED;
    else /* BlockInactive and whatever comes next */
        skip = SK_UNKNOWN;
    if (!skip) {
        collect(e, v->type, v);
        v->medium = KVIX_MEDIUM_GPU;
        if (v->type == KVIX_EV_STORED)
            rc = check_stored(v, i, src, sz, &skip, err);
        else if (v->type == KVIX_EV_REMOVED)
            rc = check_removed(v, i, sz, &skip, err);
        else if (!kvix_wf_nil(v->f[F_LOCALITY]) && !kvix__wf_word_is(v->f[F_LOCALITY], "LOCAL"))
            skip = SK_REMOTE; /* another machine's cache was cleared */
    }
    if (skip) {
        v->type = KVIX_EV_NONE;
        count_skip(sz, skip);
    }
    return rc;
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

static void fill_hashes(kvix_event *ev, const msgpack_object *hs)
{
    for (uint32_t k = 0; k < hs->via.array.size; k++)
        kvix__wf_hash(&hs->via.array.ptr[k], &ev->hashes[k]);
    ev->nhashes = hs->via.array.size;
}

static void fill_stored(kvix_event *ev, const wview *v, int keep_tokens)
{
    const msgpack_object *hs = v->f[F_HASHES], *t = v->f[F_TOKENS], *l = v->f[F_LORA],
                         *x = v->f[F_EXTRA], *p = v->f[F_PARENT];
    uint32_t n = hs->via.array.size, bs = v->bs;
    ev->bs = bs;
    if (!kvix_wf_nil(p)) {
        kvix__wf_hash(p, &ev->parent);
        ev->has_parent = 1;
    }
    ev->has_group = v->has_group;
    ev->group = v->group;
    ev->kind = v->kind;
    if (v->hashes_only) {
        ev->placeholder = v->placeholder;
        fill_hashes(ev, hs);
        return;
    }
    size_t nlora = 0;
    if (!kvix_wf_nil(l) && l->type == MSGPACK_OBJECT_STR) {
        nlora = l->via.str.size;
        memcpy(ev->lora, l->via.str.ptr, nlora);
        ev->lora[nlora] = '\0';
    }
    uint64_t seed = kvix_hash_lora_seed(ev->lora, nlora);
    size_t need = (size_t)n * bs;
    kvix__wf_tokens(t, need, v->eagle, ev->tokens);
    ev->eagle = v->eagle;
    size_t span = bs + v->eagle; /* an EAGLE block hashes the next block's first token too */
    uint32_t nx = !kvix_wf_nil(x) ? x->via.array.size : 0;
    for (uint32_t b = 0; b < n; b++) {
        kvix_block *blk = &ev->blocks[b];
        kvix__wf_hash(&hs->via.array.ptr[b], &blk->seq);
        const uint32_t *bt = ev->tokens + (size_t)b * bs;
        uint64_t mm[KVIX_HASH_MM_MAX];
        size_t nmm = b < nx ? kvix__wf_mm_keys(&x->via.array.ptr[b], ev->lora, nlora, mm,
                                              KVIX_HASH_MM_MAX)
                            : 0;
        if (nmm)
            kvix_hash_local_mm(bt, span, seed, mm, nmm, &blk->local, NULL);
        else
            blk->local = kvix_hash_local(bt, span, seed);
    }
    ev->nblocks = n;
    ev->has_tokens = keep_tokens ? 1 : 0;
    ev->ntokens = keep_tokens ? need + v->eagle : 0;
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
            fill_hashes(&ev, v->f[F_HASHES]);
            ev.has_group = v->has_group;
            ev.group = v->group;
        }
        if ((rc = fn(ctx, &ev)))
            goto out;
    }
out:
    kvix_event_release(&ev);
    return rc;
}

/* ---- the batch ----------------------------------------------------------- */

typedef struct wbatch {
    const msgpack_object *ts, *events, *dp; /* NULL: absent */
} wbatch;

/* [ts, events, dp, ...] (dp missing in the oldest vLLM), or the map form of
 * one vLLM development state: {"ts", "events", "data_parallel_rank" (also
 * "dp_rank", SGLang's "attn_dp_rank")}. */
static int batch_fields(const msgpack_object *root, wbatch *b, kvix_err *err)
{
    memset(b, 0, sizeof *b);
    if (root->type == MSGPACK_OBJECT_ARRAY && root->via.array.size >= 2) {
        b->ts = &root->via.array.ptr[0];
        b->events = &root->via.array.ptr[1];
        b->dp = root->via.array.size >= 3 ? &root->via.array.ptr[2] : NULL;
        return KVIX_OK;
    }
    if (root->type != MSGPACK_OBJECT_MAP)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE,
                                   "batch is not an array [ts, events, dp]");
    for (uint32_t k = 0; k < root->via.map.size; k++) {
        const msgpack_object *key = &root->via.map.ptr[k].key, *val = &root->via.map.ptr[k].val;
        if (str_is(key, "ts"))
            b->ts = val;
        else if (str_is(key, "events"))
            b->events = val;
        else if (str_is(key, "data_parallel_rank") || str_is(key, "dp_rank") ||
                 str_is(key, "attn_dp_rank"))
            b->dp = val;
    }
    if (!b->events)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MISSING,
                                   "batch map without \"events\"");
    return KVIX_OK;
}

static int decode_batch(const msgpack_object *root, uint64_t seq, const kvix_wire_source *src,
                        kvix_wire_event_fn fn, void *ctx, kvix_wire_counts *counts,
                        msgpack_zone *z, kvix_err *err)
{
    wbatch b;
    int rc = batch_fields(root, &b, err);
    if (rc)
        return rc;
    const msgpack_object *ts = b.ts, *evs = b.events;
    double t = 0;
    bool has_ts = true;
    switch (ts ? ts->type : MSGPACK_OBJECT_NIL) {
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
    if (b.dp) {
        const msgpack_object *d = b.dp;
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
    wsize sz;
    memset(&sz, 0, sizeof sz);
    sz.z = z;
    for (size_t i = 0; i < n; i++)
        if ((rc = check_event(&evs->via.array.ptr[i], i, &views[i], src, &sz, err)))
            return rc;
    if (counts) {
        counts->partial_blocks += sz.c.partial_blocks;
        counts->unknown_events += sz.c.unknown_events;
        counts->remote += sz.c.remote;
        counts->unknown_media += sz.c.unknown_media;
        counts->refused += sz.c.refused;
        counts->placeholders += sz.c.placeholders;
        counts->other_kinds += sz.c.other_kinds;
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
