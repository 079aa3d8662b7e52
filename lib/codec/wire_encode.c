/* Engine batches from kvix events: what vLLM's publisher would have sent
 * (see kvsub(1)), byte for byte the layout of the fixtures in
 * tests/fixtures/vllm (current vLLM maps, legacy 12-element arrays). */
#include "kvix/wire.h"

#include <msgpack.h>
#include <string.h>

/* The engine-side name of each kvix tier (the first of several for cpu). */
static const char *engine_medium(int medium)
{
    switch (medium) {
    case KVIX_MEDIUM_CPU: return "CPU_PINNED";
    case KVIX_MEDIUM_DISK: return "DISK";
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

static void pack_key(msgpack_packer *pk, int map, const char *key)
{
    if (map)
        pack_str(pk, key);
}

/* An event's head: a map of nfields with its "type", or an array of
 * nelems (the array style has no keys, and a trailing element at times)
 * opening with the type. */
static void pack_head(msgpack_packer *pk, int map, size_t nfields, size_t nelems,
                      const char *type)
{
    if (map) {
        msgpack_pack_map(pk, nfields);
        pack_str(pk, "type");
    } else {
        msgpack_pack_array(pk, nelems);
    }
    pack_str(pk, type);
}

static void pack_hashes(msgpack_packer *pk, const uint64_t *h, size_t n)
{
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint64(pk, h[i]);
}

static int check_event(const kvix_event *ev, kvix_err *err)
{
    switch (ev->type) {
    case KVIX_EV_STORED:
        if (!ev->has_tokens)
            return kvix_err_set(err, KVIX_EINVAL,
                                "stored event without tokens: engines send token ids");
        if (ev->bs == 0 || ev->ntokens != ev->nblocks * (size_t)ev->bs)
            return kvix_err_set(err, KVIX_EINVAL,
                                "stored event with %zu tokens for %zu blocks of %u", ev->ntokens,
                                ev->nblocks, ev->bs);
        if (ev->nblocks > KVIX_EVENT_BLOCKS_MAX)
            return kvix_err_set(err, KVIX_ELIMIT, "too many blocks: %zu", ev->nblocks);
        return KVIX_OK;
    case KVIX_EV_REMOVED:
        if (ev->nhashes > KVIX_EVENT_BLOCKS_MAX)
            return kvix_err_set(err, KVIX_ELIMIT, "too many hashes: %zu", ev->nhashes);
        return KVIX_OK;
    case KVIX_EV_CLEARED:
        return KVIX_OK;
    }
    return kvix_err_set(err, KVIX_EINVAL, "a %s record is not an engine event",
                        kvix_event_type_name(ev->type));
}

static void pack_stored(msgpack_packer *pk, const kvix_event *ev, int map)
{
    pack_head(pk, map, 11, 12, "BlockStored");
    pack_key(pk, map, "block_hashes");
    msgpack_pack_array(pk, ev->nblocks);
    for (size_t i = 0; i < ev->nblocks; i++)
        msgpack_pack_uint64(pk, ev->blocks[i].seq);
    pack_key(pk, map, "parent_block_hash");
    if (ev->has_parent)
        msgpack_pack_uint64(pk, ev->parent);
    else
        msgpack_pack_nil(pk);
    pack_key(pk, map, "token_ids");
    msgpack_pack_array(pk, ev->ntokens);
    for (size_t i = 0; i < ev->ntokens; i++)
        msgpack_pack_uint32(pk, ev->tokens[i]);
    pack_key(pk, map, "block_size");
    msgpack_pack_uint32(pk, ev->bs);
    pack_key(pk, map, "lora_id");
    msgpack_pack_nil(pk);
    pack_key(pk, map, "medium");
    pack_str(pk, engine_medium(ev->medium));
    pack_key(pk, map, "lora_name");
    if (ev->lora[0])
        pack_str(pk, ev->lora);
    else
        msgpack_pack_nil(pk);
    pack_key(pk, map, "extra_keys");
    msgpack_pack_array(pk, ev->nblocks);
    for (size_t i = 0; i < ev->nblocks; i++)
        msgpack_pack_nil(pk);
    pack_key(pk, map, "group_idx");
    msgpack_pack_uint32(pk, 0);
    pack_key(pk, map, "kv_cache_spec_kind");
    pack_str(pk, "full_attention");
    if (!map)
        msgpack_pack_nil(pk); /* kv_cache_spec_sliding_window */
}

static void pack_removed(msgpack_packer *pk, const kvix_event *ev, int map)
{
    pack_head(pk, map, 4, 4, "BlockRemoved");
    pack_key(pk, map, "block_hashes");
    pack_hashes(pk, ev->hashes, ev->nhashes);
    pack_key(pk, map, "medium");
    pack_str(pk, engine_medium(ev->medium));
    pack_key(pk, map, "group_idx");
    msgpack_pack_uint32(pk, 0);
}

static void pack_cleared(msgpack_packer *pk, int map)
{
    pack_head(pk, map, 1, 1, "AllBlocksCleared");
}

int kvix_wire_encode(const kvix_event *const *ev, size_t n, double ts, uint32_t dp,
                     kvix_wire_style style, kvix_buf *out, kvix_err *err)
{
    if (style != KVIX_WIRE_MAP && style != KVIX_WIRE_ARRAY)
        return kvix_err_set(err, KVIX_EINVAL, "unknown wire style %d", (int)style);
    if (n > KVIX_WIRE_EVENTS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "%zu events in one batch (limit %u)", n,
                            KVIX_WIRE_EVENTS_MAX);
    int rc;
    for (size_t i = 0; i < n; i++)
        if ((rc = check_event(ev[i], err)))
            return rc;
    size_t start = out->len;
    sink s = {out, 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &s, buf_write);
    int map = style == KVIX_WIRE_MAP;
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, ts);
    msgpack_pack_array(&pk, n);
    for (size_t i = 0; i < n; i++) {
        if (ev[i]->type == KVIX_EV_STORED)
            pack_stored(&pk, ev[i], map);
        else if (ev[i]->type == KVIX_EV_REMOVED)
            pack_removed(&pk, ev[i], map);
        else
            pack_cleared(&pk, map);
    }
    msgpack_pack_uint32(&pk, dp);
    if (s.failed) {
        out->len = start; /* nothing half-written stays in out */
        if (out->data)
            out->data[start] = '\0';
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a batch");
    }
    return KVIX_OK;
}
