/* kvix: the in-memory form of one kvix record (contract sections 3 and 4):
 * a stored / removed / cleared event, or a query.
 *
 * An event owns its arrays. Decoders reuse them (kvix_event_reset keeps the
 * capacity), so a reader loop allocates only while records keep growing. */
#ifndef KVIX_EVENT_H
#define KVIX_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Ceilings on one record: input is untrusted. */
#define KVIX_NAME_MAX 256          /* model, tenant, lora: bytes incl. NUL */
#define KVIX_ID_MAX 256            /* a query id, as raw JSON text incl. NUL */
#define KVIX_EVENT_BLOCKS_MAX 65536 /* blocks in a stored event, hashes in a removed one */
#define KVIX_TOKENS_MAX (1u << 24) /* tokens in one record */
#define KVIX_BS_MAX 65536          /* largest block size */
#define KVIX_QUERY_WORKERS_MAX 16  /* workers a query names for "explain" */
/* Largest worker id and eid: what a JSON integer can hold in every framing
 * (jansson's integers are signed 64-bit), so whatever is accepted can be
 * written as NDJSON and read back. */
#define KVIX_WORKER_MAX INT64_MAX
#define KVIX_EID_MAX INT64_MAX

typedef enum kvix_event_type {
    KVIX_EV_NONE = 0,
    KVIX_EV_STORED,
    KVIX_EV_REMOVED,
    KVIX_EV_CLEARED,
    KVIX_EV_QUERY,
} kvix_event_type;

typedef enum kvix_medium {
    KVIX_MEDIUM_GPU = 0,
    KVIX_MEDIUM_CPU,
    KVIX_MEDIUM_DISK,
    KVIX_MEDIUM_EXTERNAL,
    KVIX_MEDIUM_COUNT
} kvix_medium;

/* The kind of a KV cache group (hybrid models store each span once per
 * group, kvix-events(5)): what the engine's kv_cache_spec_kind names. Only
 * the full kinds hold a prefix a prompt can hit; the index keeps the others
 * out of its answers (kvix/index.h). */
typedef enum kvix_kind {
    KVIX_KIND_NONE = 0,               /* not said (an event without the field) */
    KVIX_KIND_FULL_ATTENTION,
    KVIX_KIND_MLA_ATTENTION,
    KVIX_KIND_SINK_FULL_ATTENTION,
    KVIX_KIND_SLIDING_WINDOW,
    KVIX_KIND_SLIDING_WINDOW_MLA,
    KVIX_KIND_MAMBA,
    KVIX_KIND_CHUNKED_LOCAL_ATTENTION,
    KVIX_KIND_ENCODER_ONLY_ATTENTION,
    KVIX_KIND_CROSS_ATTENTION,
    KVIX_KIND_UNKNOWN,                /* "unknown", or a name kvix does not know */
    KVIX_KIND_COUNT
} kvix_kind;

/* KV cache groups of one engine: group indices 0 .. KVIX_GROUPS_MAX - 1. */
#define KVIX_GROUPS_MAX 64

typedef struct kvix_block {
    uint64_t local; /* content hash (contract section 1) */
    uint64_t seq;   /* the engine's own hash for the block: opaque */
} kvix_block;

typedef struct kvix_event {
    int type;               /* kvix_event_type */
    uint64_t worker;
    uint32_t dp;
    int medium;             /* kvix_medium */
    unsigned has_eid : 1, has_ts : 1, has_parent : 1, has_tokens : 1, has_id : 1,
        has_parent_at : 1, has_top : 1, explain : 1, has_group : 1, placeholder : 1,
        eagle : 1;
    uint64_t eid;
    double ts;
    uint32_t bs;            /* stored: block size; query: 0 = the partition's */
    uint64_t parent;        /* stored: engine hash of the parent when has_parent */
    /* stored, kvix's extension (kvix-events(5)): where the parent sat when
     * has_parent_at (with has_parent): its position and canonical hash. The
     * blocks go below that placement whether or not the worker still holds
     * the parent there: how a dump restores orphans. */
    uint32_t parent_position;
    uint64_t parent_canon;
    /* stored / removed of a hybrid model, when has_group: the KV cache group
     * (below KVIX_GROUPS_MAX) and, stored only, its kind (kvix_kind;
     * KVIX_KIND_NONE when the engine did not say). */
    uint32_t group;
    int kind;
    /* stored, placeholder: the engine names blocks it already published
     * (hashes, nhashes) as now held in medium too, without their tokens
     * (an offloading connector's store): no bs, no blocks. */
    /* stored, eagle: the local hashes are EAGLE's (kvix_hash_eagle: windows
     * of bs + 1 tokens stepping by bs); the tokens, when kept, are the
     * nblocks * bs + 1 the windows span. */
    char model[KVIX_NAME_MAX];  /* default "default" */
    char tenant[KVIX_NAME_MAX]; /* default "default" */
    char lora[KVIX_NAME_MAX];   /* "" = no LoRA */
    char id[KVIX_ID_MAX];       /* query id as raw JSON text, when has_id */
    /* query, kvix's extensions (kvix-events(5)): when has_top, keep the best
     * top scores (0: all of them); explain: say where each best worker's
     * match stops and why, and for the workers named in xworkers too. */
    uint32_t top;
    uint32_t nxworkers;
    uint64_t xworkers[KVIX_QUERY_WORKERS_MAX];

    kvix_block *blocks;     /* stored: nblocks blocks */
    size_t nblocks, cap_blocks;
    uint64_t *hashes;       /* removed, placeholder: engine hashes; query: local hashes */
    size_t nhashes, cap_hashes;
    uint32_t *tokens;       /* stored (forensic, nblocks*bs, eagle nblocks*bs+1) or query
                             * tokens, when has_tokens */
    size_t ntokens, cap_tokens;
} kvix_event;

/* Zero ev and set the defaults. Owns nothing yet. */
void kvix_event_init(kvix_event *ev);
/* Free the arrays ev owns; ev may be reused after kvix_event_init. */
void kvix_event_release(kvix_event *ev);
/* Set the defaults again, keeping the arrays' capacity for reuse. */
void kvix_event_reset(kvix_event *ev);

/* Grow ev's arrays so that n elements fit (n is checked against the ceilings
 * above: KVIX_ELIMIT past them, KVIX_ENOMEM if allocation fails). Contents
 * up to the old count are kept; the count fields are not changed. */
int kvix_event_reserve_blocks(kvix_event *ev, size_t n, kvix_err *err);
int kvix_event_reserve_hashes(kvix_event *ev, size_t n, kvix_err *err);
int kvix_event_reserve_tokens(kvix_event *ev, size_t n, kvix_err *err);

/* Deep copy src into dst (dst initialised; its arrays are reused). */
int kvix_event_copy(kvix_event *dst, const kvix_event *src, kvix_err *err);

/* Copy a name into one of the fixed fields; KVIX_ELIMIT when too long. */
int kvix_event_set_name(char dst[KVIX_NAME_MAX], const char *s, size_t len, kvix_err *err);

/* "gpu", "cpu", "disk", "external"; "?" for an unknown value. Static string. */
const char *kvix_medium_name(int medium);
/* Parse a contract medium name; KVIX_EINVAL when unknown. */
int kvix_medium_parse(const char *s, size_t len, int *out);
/* "full_attention", "sliding_window", ... (kv_cache_spec_kind's names); ""
 * for KVIX_KIND_NONE. Static string. */
const char *kvix_kind_name(int kind);
/* A kind by its name (exactly as the engines spell it); a name kvix does not
 * know is KVIX_KIND_UNKNOWN (engines add kinds). */
int kvix_kind_parse(const char *s, size_t len);
/* 1 for the kinds whose blocks hold a prefix a prompt can hit: the full
 * attention ones, and KVIX_KIND_NONE (an event that names no kind). */
int kvix_kind_full(int kind);
/* "stored", "removed", "cleared", "query"; "?" otherwise. Static string. */
const char *kvix_event_type_name(int type);

#ifdef __cplusplus
}
#endif
#endif
