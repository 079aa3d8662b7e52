/* Engine batches from kvix events: what each generation of vLLM's and
 * SGLang's publishers would have sent (kvsub(1)'s compatibility table),
 * byte for byte the layout of the fixtures in tests/fixtures/vllm (current
 * vLLM maps, vLLM 0.25's 12-element arrays, the oldest vLLM's 6-element
 * ones, SGLang's arrays and maps). */
#include "kvix/wire.h"

#include <msgpack.h>
#include <string.h>

static const char *const style_names[KVIX_WIRE_STYLES] = {
    "vllm-0.26", "vllm-0.25", "vllm-0.9", "sglang-array", "sglang-map",
};

const char *kvix_wire_style_name(kvix_wire_style style)
{
    return (unsigned)style < KVIX_WIRE_STYLES ? style_names[style] : "?";
}

int kvix_wire_style_parse(const char *s, kvix_wire_style *out)
{
    static const struct { const char *name; kvix_wire_style style; } alias[] = {
        {"vllm", KVIX_WIRE_MAP},   {"map", KVIX_WIRE_MAP},
        {"array", KVIX_WIRE_ARRAY}, {"sglang", KVIX_WIRE_SGLANG_ARRAY},
    };
    for (int i = 0; s && i < KVIX_WIRE_STYLES; i++)
        if (!strcmp(s, style_names[i])) {
            *out = (kvix_wire_style)i;
            return KVIX_OK;
        }
    for (size_t i = 0; s && i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(s, alias[i].name)) {
            *out = alias[i].style;
            return KVIX_OK;
        }
    return KVIX_EINVAL;
}

int kvix_wire_style_replay_topic(kvix_wire_style style)
{
    return style == KVIX_WIRE_MAP;
}

/* What a generation can say. */
typedef struct gen {
    int map;        /* events as maps (else arrays) */
    int medium;     /* sends a medium */
    int groups;     /* sends group_idx and the kind */
    int sglang;     /* signed hashes, EAGLE pairs, SGLang's medium names */
    int batch_dp;   /* the batch's third element */
} gen;

static const gen gens[KVIX_WIRE_STYLES] = {
    [KVIX_WIRE_MAP] = {1, 1, 1, 0, 1},
    [KVIX_WIRE_ARRAY] = {0, 1, 1, 0, 1},
    [KVIX_WIRE_VLLM_0_9] = {0, 0, 0, 0, 0},
    [KVIX_WIRE_SGLANG_ARRAY] = {0, 1, 0, 1, 1},
    [KVIX_WIRE_SGLANG_MAP] = {1, 1, 1, 1, 1},
};

/* The engine-side name of each kvix tier (the first of several for cpu). */
static const char *engine_medium(const gen *g, int medium)
{
    switch (medium) {
    case KVIX_MEDIUM_CPU: return g->sglang ? "CPU_TIER1" : g->groups ? "CPU_PINNED" : "CPU";
    case KVIX_MEDIUM_DISK: return g->sglang || g->groups ? "DISK" : "STORAGE";
    case KVIX_MEDIUM_EXTERNAL: return "EXTERNAL";
    }
    return "GPU";
}

/* msgpack-c ignores its writer's result: remember a failed append. */
typedef struct sink {
    kvix_buf *b;
    int failed;
} sink;

static int buf_write(void *data, const char *p, size_t n)
{
    sink *s = data;
    if (!s->failed && kvix_buf_append(s->b, p, n, NULL))
        s->failed = 1;
    return s->failed ? -1 : 0;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_key(msgpack_packer *pk, const gen *g, const char *key)
{
    if (g->map)
        pack_str(pk, key);
}

/* An event's head: a map of nfields with its "type", or an array of
 * nelems opening with the type. */
static void pack_head(msgpack_packer *pk, const gen *g, size_t nfields, size_t nelems,
                      const char *type)
{
    if (g->map) {
        msgpack_pack_map(pk, nfields);
        pack_str(pk, "type");
    } else {
        msgpack_pack_array(pk, nelems);
    }
    pack_str(pk, type);
}

/* An engine hash: SGLang's are signed int64 (the same bits). */
static void pack_hash(msgpack_packer *pk, const gen *g, uint64_t h)
{
    if (g->sglang)
        msgpack_pack_int64(pk, (int64_t)h);
    else
        msgpack_pack_uint64(pk, h);
}

static void pack_hashes(msgpack_packer *pk, const gen *g, const uint64_t *h, size_t n)
{
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        pack_hash(pk, g, h[i]);
}

/* Whether a stored event goes out without tokens: a placeholder, or a group
 * of a kind whose tokens need not line up with its hashes. */
static int hashes_only(const kvix_event *ev)
{
    return ev->placeholder || (!ev->nblocks && ev->nhashes);
}

static int refuse(kvix_err *err, kvix_wire_style style, const char *what)
{
    return kvix_err_set(err, KVIX_EINVAL, "the %s wire cannot carry %s",
                        kvix_wire_style_name(style), what);
}

static int check_event(const kvix_event *ev, kvix_wire_style style, kvix_err *err)
{
    const gen *g = &gens[style];
    if (ev->type != KVIX_EV_STORED && ev->type != KVIX_EV_REMOVED && ev->type != KVIX_EV_CLEARED)
        return kvix_err_set(err, KVIX_EINVAL, "a %s record is not an engine event",
                            kvix_event_type_name(ev->type));
    if (ev->type != KVIX_EV_CLEARED && ev->medium != KVIX_MEDIUM_GPU && !g->medium)
        return refuse(err, style, "a tier other than the gpu");
    if (ev->type != KVIX_EV_CLEARED && ev->has_group && !g->groups &&
        !(ev->group == 0 && kvix_kind_full(ev->kind)))
        return refuse(err, style, "kv cache groups");
    if (ev->type == KVIX_EV_REMOVED && ev->nhashes > KVIX_EVENT_BLOCKS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "too many hashes: %zu", ev->nhashes);
    if (ev->type != KVIX_EV_STORED)
        return KVIX_OK;
    if (ev->lora[0] && !g->medium)
        return refuse(err, style, "a lora name");
    if (ev->eagle && !g->sglang)
        return refuse(err, style, "eagle's token pairs");
    if (ev->placeholder && (g->sglang || !g->groups))
        return refuse(err, style, "a placeholder store");
    if (hashes_only(ev))
        return ev->nhashes > KVIX_EVENT_BLOCKS_MAX
                   ? kvix_err_set(err, KVIX_ELIMIT, "too many hashes: %zu", ev->nhashes)
                   : KVIX_OK;
    if (!ev->has_tokens)
        return kvix_err_set(err, KVIX_EINVAL,
                            "stored event without tokens: engines send token ids");
    if (ev->bs == 0 || ev->ntokens != ev->nblocks * (size_t)ev->bs + ev->eagle)
        return kvix_err_set(err, KVIX_EINVAL, "stored event with %zu tokens for %zu blocks of %u",
                            ev->ntokens, ev->nblocks, ev->bs);
    if (ev->nblocks > KVIX_EVENT_BLOCKS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "too many blocks: %zu", ev->nblocks);
    return KVIX_OK;
}

/* token_ids: the ids, or EAGLE's pairs (t[k], t[k + 1]) for each position. */
static void pack_tokens(msgpack_packer *pk, const kvix_event *ev)
{
    if (hashes_only(ev)) {
        msgpack_pack_array(pk, 0);
        return;
    }
    size_t n = ev->ntokens - ev->eagle;
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++) {
        if (ev->eagle) {
            msgpack_pack_array(pk, 2);
            msgpack_pack_uint32(pk, ev->tokens[i]);
            msgpack_pack_uint32(pk, ev->tokens[i + 1]);
        } else {
            msgpack_pack_uint32(pk, ev->tokens[i]);
        }
    }
}

static const char *kind_of(const kvix_event *ev)
{
    return ev->has_group && ev->kind != KVIX_KIND_NONE ? kvix_kind_name(ev->kind)
                                                       : "full_attention";
}

/* vLLM's BlockStored: 11 fields (maps from 0.26, arrays of 12 in 0.25), 5
 * in the oldest arrays of 6. */
static void pack_stored_vllm(msgpack_packer *pk, const kvix_event *ev, const gen *g)
{
    size_t n = hashes_only(ev) ? ev->nhashes : ev->nblocks;
    int full = g->groups;
    pack_head(pk, g, full ? 11 : 5, full ? 12 : 6, "BlockStored");
    pack_key(pk, g, "block_hashes");
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint64(pk, hashes_only(ev) ? ev->hashes[i] : ev->blocks[i].seq);
    pack_key(pk, g, "parent_block_hash");
    if (ev->has_parent)
        msgpack_pack_uint64(pk, ev->parent);
    else
        msgpack_pack_nil(pk);
    pack_key(pk, g, "token_ids");
    pack_tokens(pk, ev);
    pack_key(pk, g, "block_size");
    msgpack_pack_uint32(pk, ev->bs);
    pack_key(pk, g, "lora_id");
    msgpack_pack_nil(pk);
    if (!full)
        return;
    pack_key(pk, g, "medium");
    pack_str(pk, engine_medium(g, ev->medium));
    pack_key(pk, g, "lora_name");
    if (ev->lora[0])
        pack_str(pk, ev->lora);
    else
        msgpack_pack_nil(pk);
    pack_key(pk, g, "extra_keys");
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_nil(pk);
    pack_key(pk, g, "group_idx");
    msgpack_pack_uint32(pk, ev->has_group ? ev->group : 0);
    pack_key(pk, g, "kv_cache_spec_kind");
    pack_str(pk, kind_of(ev));
    if (!g->map)
        msgpack_pack_nil(pk); /* kv_cache_spec_sliding_window */
}

/* SGLang's BlockStored: [type, hashes, parent, tokens, bs, lora_id, medium]
 * and lora_name when there is one; its maps the same keys, with the group
 * when the event names one. */
static void pack_stored_sglang(msgpack_packer *pk, const kvix_event *ev, const gen *g)
{
    size_t n = hashes_only(ev) ? ev->nhashes : ev->nblocks;
    int lora = ev->lora[0] != 0, group = g->groups && ev->has_group;
    int kind = group && ev->kind != KVIX_KIND_NONE;
    pack_head(pk, g, 7 + lora + group + kind, 7 + lora, "BlockStored");
    pack_key(pk, g, "block_hashes");
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        pack_hash(pk, g, hashes_only(ev) ? ev->hashes[i] : ev->blocks[i].seq);
    pack_key(pk, g, "parent_block_hash");
    if (ev->has_parent)
        pack_hash(pk, g, ev->parent);
    else
        msgpack_pack_nil(pk);
    pack_key(pk, g, "token_ids");
    pack_tokens(pk, ev);
    pack_key(pk, g, "block_size");
    msgpack_pack_uint32(pk, ev->bs);
    pack_key(pk, g, "lora_id");
    msgpack_pack_nil(pk);
    pack_key(pk, g, "medium");
    pack_str(pk, engine_medium(g, ev->medium));
    if (lora) {
        pack_key(pk, g, "lora_name");
        pack_str(pk, ev->lora);
    }
    if (group) {
        pack_key(pk, g, "group_idx");
        msgpack_pack_uint32(pk, ev->group);
    }
    if (kind) {
        pack_key(pk, g, "kv_cache_spec_kind");
        pack_str(pk, kvix_kind_name(ev->kind));
    }
}

static void pack_removed(msgpack_packer *pk, const kvix_event *ev, const gen *g)
{
    int group = g->groups && (!g->sglang || ev->has_group);
    size_t nf = 1 + g->medium + group;
    pack_head(pk, g, 1 + nf, 1 + nf, "BlockRemoved");
    pack_key(pk, g, "block_hashes");
    pack_hashes(pk, g, ev->hashes, ev->nhashes);
    if (g->medium) {
        pack_key(pk, g, "medium");
        pack_str(pk, engine_medium(g, ev->medium));
    }
    if (group) {
        pack_key(pk, g, "group_idx");
        msgpack_pack_uint32(pk, ev->has_group ? ev->group : 0);
    }
}

static void pack_cleared(msgpack_packer *pk, const gen *g)
{
    pack_head(pk, g, 1, 1, "AllBlocksCleared");
}

int kvix_wire_encode(const kvix_event *const *ev, size_t n, double ts, uint32_t dp,
                     kvix_wire_style style, kvix_buf *out, kvix_err *err)
{
    if ((unsigned)style >= KVIX_WIRE_STYLES)
        return kvix_err_set(err, KVIX_EINVAL, "unknown wire style %d", (int)style);
    if (n > KVIX_WIRE_EVENTS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%zu events in one batch (limit %u)", n,
                            KVIX_WIRE_EVENTS_MAX);
    int rc;
    for (size_t i = 0; i < n; i++)
        if ((rc = check_event(ev[i], style, err)))
            return rc;
    const gen *g = &gens[style];
    size_t start = out->len;
    sink s = {out, 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &s, buf_write);
    msgpack_pack_array(&pk, g->batch_dp ? 3 : 2);
    msgpack_pack_double(&pk, ts);
    msgpack_pack_array(&pk, n);
    for (size_t i = 0; i < n; i++) {
        if (ev[i]->type == KVIX_EV_STORED && g->sglang)
            pack_stored_sglang(&pk, ev[i], g);
        else if (ev[i]->type == KVIX_EV_STORED)
            pack_stored_vllm(&pk, ev[i], g);
        else if (ev[i]->type == KVIX_EV_REMOVED)
            pack_removed(&pk, ev[i], g);
        else
            pack_cleared(&pk, g);
    }
    if (g->batch_dp)
        msgpack_pack_uint32(&pk, dp);
    if (s.failed) {
        out->len = start; /* nothing half-written stays in out */
        if (out->data)
            out->data[start] = '\0';
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a batch");
    }
    return KVIX_OK;
}
