/* kvix: Mooncake request traces (FAST'25) turned into realistic event logs.
 *
 * A trace line is {"timestamp": ms, "input_length": n, "output_length": n,
 * "hash_ids": [...]}: one id per 512-token prefix block, the last one partial
 * when input_length % 512 != 0. The simulator plays the trace against N
 * workers, each a prefix cache of C blocks, and emits what their engines
 * would have published, plus the router's query for each request:
 *
 *  - Only whole blocks exist: a trailing partial block is not cached, not
 *    queried and not stored (engines do not publish partial blocks).
 *    A request with no whole block is skipped (counted).
 *  - Block i of a request is 512 copies of the token hash_ids[i]; its local
 *    hash is kvix_hash_local of those tokens (seed 1337), its engine hash the
 *    rolling sequence hash (kvix_hash_seq_next), so dumps are meaningful.
 *    The cache is keyed by the engine hash, which names the whole prefix.
 *  - Routing: random (one splitmix64 draw per request: worker = draw % N) or
 *    best (the workers with the longest cached prefix; one draw picks among
 *    them: tied[draw % ntied], ties listed by worker id ascending).
 *  - On its worker a request touches its cached prefix, then stores the
 *    missing blocks (at most C blocks per request: the rest of a longer
 *    prompt is not cached). Room is made by evicting least recently used
 *    LEAF blocks (no cached child): a block is never evicted while a cached
 *    block extends it. Recency is a global counter stamped on each touched
 *    block in prefix order; the smallest stamp among leaves goes first.
 *  - Per request, in this order: a query record (contract section 4: model,
 *    "local" hashes, "id" = the request's 0-based line number in the trace),
 *    then a removed event with the evicted engine hashes (if any), then one
 *    stored event (bs 512, parent = engine hash of the last cached block, or
 *    null) for the missing blocks (if any). ts = timestamp / 1000 (seconds
 *    from the trace start); eid counts each worker's events from 0; dp 0;
 *    workers are numbered 0..N-1, or with worker_ids random each worker i
 *    is named by a distinct 63-bit id drawn from the seed (as Dynamo's
 *    lease ids name workers): the same events under other names, routing
 *    and ties still by i (kvix_mooncake_worker).
 *  - Copies (Dynamo's duplicate_hash_space): with K copies the trace is
 *    played K times side by side, as K disjoint fleets of N workers with
 *    disjoint hash ids. Copy k of a request plays hash id x as the token
 *    x + k * floor(2^32 / K) (so x must be below 2^32 / K), on workers
 *    k * N .. (k + 1) * N - 1, routed by a generator of its own seeded with
 *    seed + k; its query's id is id * K + k. The K copies of each request
 *    are emitted back to back, copy 0 first. Stats count each copy as a
 *    request. Copy 0 is the trace itself played alone, but for query ids.
 *
 * Deterministic: the same trace, options and seed give the same events. */
#ifndef KVIX_MOONCAKE_H
#define KVIX_MOONCAKE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvix/error.h"
#include "kvix/event.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVIX_MOONCAKE_BS 512u              /* tokens per hash id */
#define KVIX_MOONCAKE_LINE_MAX (4u << 20)  /* longest trace line, bytes */
#define KVIX_MOONCAKE_IDS_MAX 32768u       /* hash ids in one request (x512 tokens fits an event) */
#define KVIX_MOONCAKE_WORKERS_MAX 65536u /* workers x copies */
#define KVIX_MOONCAKE_COPIES_MAX 4096u
#define KVIX_MOONCAKE_CAPACITY_MAX (1u << 26)

/* One trace request. Owns ids. */
typedef struct kvix_mooncake_req {
    uint64_t timestamp_ms;
    uint64_t input_length, output_length;
    uint32_t *ids;
    size_t nids, cap;
} kvix_mooncake_req;

void kvix_mooncake_req_init(kvix_mooncake_req *r);
void kvix_mooncake_req_release(kvix_mooncake_req *r);

/* Decode one trace line (without newline). KVIX_EINVAL for bad JSON or a
 * missing / mistyped key, KVIX_ERANGE for an id >= 2^32 or negative values,
 * KVIX_ELIMIT past KVIX_MOONCAKE_IDS_MAX ids. */
int kvix_mooncake_parse(const char *line, size_t len, kvix_mooncake_req *r, kvix_err *err);

/* Reads trace lines from fd (not closed; the caller owns it: pass the
 * kvix_logio fd for compressed traces). Empty lines are skipped. */
typedef struct kvix_mooncake_trace kvix_mooncake_trace;
int kvix_mooncake_trace_new(kvix_mooncake_trace **out, int fd, kvix_err *err);
void kvix_mooncake_trace_free(kvix_mooncake_trace *t);
/* KVIX_OK: r holds the next request. KVIX_EOF at the end. KVIX_EIO: stop.
 * Other errors: that line is rejected, the next call goes on. */
int kvix_mooncake_trace_next(kvix_mooncake_trace *t, kvix_mooncake_req *r, kvix_err *err);
/* Line number of the request last returned (1-based). */
uint64_t kvix_mooncake_trace_line(const kvix_mooncake_trace *t);

typedef enum kvix_mooncake_route {
    KVIX_ROUTE_RANDOM = 0,
    KVIX_ROUTE_BEST,
} kvix_mooncake_route;

typedef enum kvix_mooncake_ids {
    KVIX_MOONCAKE_IDS_DENSE = 0, /* workers 0..N-1 */
    KVIX_MOONCAKE_IDS_RANDOM,    /* distinct random ids below 2^63, from the seed */
} kvix_mooncake_ids;

typedef struct kvix_mooncake_opts {
    uint32_t workers;     /* default 256 */
    uint32_t capacity;    /* blocks per worker, default 16384 */
    int route;            /* kvix_mooncake_route, default random */
    uint64_t seed;        /* default 0 */
    const char *model;    /* NULL = "default"; copied */
    int tokens;           /* stored events carry their token ids (for --pub) */
    int queries;          /* emit a query per request (default 1) */
    uint32_t copies;      /* copies of the trace side by side (default 1) */
    int worker_ids;       /* kvix_mooncake_ids, default dense */
} kvix_mooncake_opts;

void kvix_mooncake_opts_init(kvix_mooncake_opts *o);

typedef struct kvix_mooncake kvix_mooncake;

/* *out owned by the caller: kvix_mooncake_free. KVIX_EINVAL on zero workers
 * or capacity, KVIX_ELIMIT past the ceilings above. */
int kvix_mooncake_new(kvix_mooncake **out, const kvix_mooncake_opts *o, kvix_err *err);
void kvix_mooncake_free(kvix_mooncake *m);

/* The worker id in the events of worker i (0 <= i < workers x copies): i,
 * or its random id. */
uint64_t kvix_mooncake_worker(const kvix_mooncake *m, uint32_t i);

/* Receives each record; ev is valid only during the call. Non-zero stops
 * (returned as is by kvix_mooncake_step). */
typedef int (*kvix_mooncake_emit_fn)(void *ctx, const kvix_event *ev);

/* Play one request with index id (the query's id), once per copy.
 * KVIX_ERANGE (nothing played) when a hash id or id times the copies does
 * not fit. */
int kvix_mooncake_step(kvix_mooncake *m, const kvix_mooncake_req *r, uint64_t id,
                       kvix_mooncake_emit_fn fn, void *ctx, kvix_err *err);

typedef struct kvix_mooncake_stats {
    uint64_t requests;       /* played (not skipped) */
    uint64_t skipped;        /* no whole block */
    uint64_t partial_blocks; /* trailing partial blocks ignored */
    uint64_t query_blocks;   /* whole blocks asked for */
    uint64_t hit_blocks;     /* of those, already cached on the chosen worker */
    uint64_t stored_events, stored_blocks;
    uint64_t removed_events, removed_blocks;
    uint64_t truncated_blocks; /* blocks past the capacity of one request: not cached */
    uint64_t cached_blocks;  /* blocks held by all workers now */
} kvix_mooncake_stats;

void kvix_mooncake_stats_get(const kvix_mooncake *m, kvix_mooncake_stats *out);

/* Visit each worker's cached blocks: worker id (as in the events)
 * ascending, blocks sorted by engine hash. depth is the block's position
 * (0 = root). Non-zero stops. */
typedef int (*kvix_mooncake_block_fn)(void *ctx, uint64_t worker, uint64_t engine,
                                      uint64_t local, uint32_t depth);
int kvix_mooncake_foreach(kvix_mooncake *m, kvix_mooncake_block_fn fn, void *ctx, kvix_err *err);

/* Write the cache state to f (borrowed: neither flushed nor closed), one
 * block a line in kvix_mooncake_foreach's order: "WORKER ENGINE LOCAL DEPTH",
 * hashes as 16 hex digits (kvreplay --final-state, which kvdump of the index
 * built from the events equals). KVIX_EIO when a write fails, KVIX_ENOMEM. */
int kvix_mooncake_state_write(kvix_mooncake *m, FILE *f, kvix_err *err);

/* The generator behind routing (splitmix64), exposed for tests. */
uint64_t kvix_splitmix64(uint64_t *state);

#ifdef __cplusplus
}
#endif
#endif
