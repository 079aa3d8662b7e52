/* kvix: the engines' wire (vLLM and SGLang KV events over ZMQ/msgpack, see
 * kvsub(1) and tests/fixtures/vllm): decoding batches into kvix events (kvsub) and
 * encoding kvix events as engine batches (kvreplay --pub, test publishers). */
#ifndef KVIX_WIRE_H
#define KVIX_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/buf.h"
#include "kvix/error.h"
#include "kvix/event.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVIX_WIRE_FRAME_MAX (64u << 20) /* largest payload accepted */
#define KVIX_WIRE_EVENTS_MAX 65536      /* events in one batch */
#define KVIX_WIRE_SEQ_END UINT64_MAX    /* replay end marker */

/* Who the batch comes from: the registration of the endpoint. */
typedef struct kvix_wire_source {
    uint64_t worker;
    uint32_t dp;          /* registered rank; a batch's own rank overrides it */
    const char *model;    /* NULL = "default" */
    const char *tenant;   /* NULL = "default" */
    uint32_t block_size;  /* configured size; 0 = take each event's */
    int keep_tokens;      /* keep token ids in stored events (--tokens) */
} kvix_wire_source;

/* Counters of what decoding skipped or set apart (kvsub(1) lists the rules).
 * A skipped event is not delivered; the rest of its batch is. */
typedef struct kvix_wire_counts {
    uint64_t partial_blocks;  /* stored events below the block size: skipped */
    uint64_t unknown_events;  /* event types skipped (BlockInactive, ...) */
    uint64_t remote;          /* events of another locality (not "LOCAL"): skipped */
    uint64_t unknown_media;   /* events of a medium no tier is known for: skipped */
    uint64_t refused;         /* stores whose hashes repeat or equal their parent, a block
                                 size of 0 with tokens, a group index or a field of the
                                 wrong type: skipped */
    uint64_t placeholders;    /* placeholder stores (no tokens, a tier added to hashes
                                 already published): delivered as such */
    uint64_t other_kinds;     /* stores of a KV cache group whose kind is not a full one:
                                 delivered (with their hashes only) for the index to
                                 learn the kind and keep them out of its answers */
    uint32_t dp;              /* out: the rank of the last batch decoded (its own, else
                                 the registered one), even when it held no event */
} kvix_wire_counts;

/* Receives each decoded event; ev is valid only during the call. Return
 * non-zero to stop decoding (returned as is). */
typedef int (*kvix_wire_event_fn)(void *ctx, const kvix_event *ev);

/* Decode one batch payload (the third frame) with sequence number seq (the
 * events' eid; a seq past KVIX_EID_MAX gives events without an eid). Every
 * form of kvsub(1)'s compatibility table is read: the batch as an array or a
 * map, events as tagged arrays of any length or maps. Events are delivered
 * in batch order, skipped ones counted (kvix_wire_counts). A malformed
 * payload delivers nothing and returns KVIX_EINVAL / KVIX_ELIMIT: batches
 * are checked whole before any event is delivered. counts may be NULL.
 *
 * What a stored event becomes: blocks with their local hashes computed from
 * token_ids (EAGLE's token pairs with kvix_hash_blocks_eagle, ev->eagle set);
 * a placeholder store (no tokens, block size 0, a tier other than gpu) a
 * placeholder event of hashes; a store of a KV cache group of a kind that is
 * not a full one an event of hashes with its group and kind (such groups
 * may skip blocks, so their tokens need not line up with their hashes). */
int kvix_wire_decode(const void *payload, size_t len, uint64_t seq,
                     const kvix_wire_source *src, kvix_wire_event_fn fn, void *ctx,
                     kvix_wire_counts *counts, kvix_err *err);

/* The engine generations the encoder speaks (kvreplay --wire, kvsub(1)'s
 * compatibility table): what each puts in a batch and how its replay
 * service answers. What a generation cannot say (a tier before vLLM 0.10,
 * KV cache groups before vLLM 0.25 or in SGLang's arrays, EAGLE's pairs
 * from vLLM, a placeholder from SGLang) is refused with KVIX_EINVAL. */
typedef enum kvix_wire_style {
    KVIX_WIRE_MAP = 0,      /* "vllm-0.26": events as maps, replay replies with the topic */
    KVIX_WIRE_ARRAY,        /* "vllm-0.25": 12-element array events with groups */
    KVIX_WIRE_VLLM_0_9,     /* "vllm-0.9": 6-element array events, batches [ts, events] */
    KVIX_WIRE_SGLANG_ARRAY, /* "sglang-array": 7- or 8-element array events, signed hashes */
    KVIX_WIRE_SGLANG_MAP,   /* "sglang-map": SGLang's map events (late 2026) */
    KVIX_WIRE_STYLES
} kvix_wire_style;

/* Encode events ev[0..n) (all of one (worker, dp)) as one batch payload
 * appended to out, as that generation's engine would send it ([ts, events,
 * dp], [ts, events] for vLLM 0.9). Stored events need their tokens
 * (has_tokens) since engines send token ids, not local hashes (a
 * placeholder, or a group of a kind that is not a full one, sends none). An
 * event without group fields goes out as vLLM 0.25+ sends a model without
 * hybrid layers: group 0, full_attention. */
int kvix_wire_encode(const kvix_event *const *ev, size_t n, double ts, uint32_t dp,
                     kvix_wire_style style, kvix_buf *out, kvix_err *err);

/* The generation's name ("vllm-0.26", ...), or "?". Static string. */
const char *kvix_wire_style_name(kvix_wire_style style);
/* A generation by name: the names above, and "vllm" (the newest vLLM),
 * "sglang" (SGLang's arrays), "map" and "array" (vllm-0.26 and vllm-0.25);
 * KVIX_EINVAL for another. */
int kvix_wire_style_parse(const char *s, kvix_wire_style *out);
/* 1 when that generation's replay service answers [topic, seq, payload]
 * (vLLM 0.26+), 0 when [seq, payload] (older vLLM, SGLang). */
int kvix_wire_style_replay_topic(kvix_wire_style style);

/* The medium names engines use, mapped to kvix tiers as NVIDIA Dynamo maps
 * them, ignoring case: "GPU", "DEVICE", "" -> gpu; "CPU", "CPU_PINNED",
 * "CPU_TIER1" -> cpu; "CPU_TIER2", "DISK", "NVME", "STORAGE", "FS", "OBJ" ->
 * disk; "EXTERNAL", "NETWORK", "REMOTE", "SHARED" -> external. s NULL (nil
 * on the wire) is gpu; any other name is -1: not guessed. */
int kvix_wire_medium(const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif
