/* kvix: the live index service: the HTTP API of Dynamo's standalone KV
 * indexer (docs in kvindex(1), SERVICE) over a kvix_index, plus kvix's own
 * shapes (POST /query with a kvix query object, GET /snapshot).
 *
 * The protocol (routing, request and response shapes, error mapping, the
 * metrics text, the /dump encoding and decoding) is kvix_service_handle, a
 * pure function of (method, path, body) that tests call without sockets;
 * kvix_service_listen puts it behind libmicrohttpd.
 *
 * Numbers: hashes and ids are exact u64 both ways. jansson keeps integers as
 * signed 64-bit, so request bodies are read through kvix_json_u64_loadb,
 * which hands literals 2^63..2^64-1 to jansson as their two's complement
 * (read back with a cast) and refuses negative literals and anything past
 * 2^64-1; responses are written by kvix, digit by digit.
 *
 * Concurrency: queries (/query, /query_by_hash) run on the server's threads
 * at the same time as the writers, as index.h allows. Whatever must read a
 * quiet index (/dump, /snapshot, the gauges of /metrics) takes the index's
 * gate exclusively (kvix_index_quiet_begin), so every other writer of the
 * index (the tool's ingest loop, its engine feed) holds the gate's shared side
 * around each apply or submit (kvix_index_write_begin).
 *
 * Peers: POST /register_peer and /deregister_peer change a kvix_peers set
 * (kvix/peers.h) that the tool also uses for recovery; GET /peers lists it. */
#ifndef KVIX_SERVICE_H
#define KVIX_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/buf.h"
#include "kvix/error.h"
#include "kvix/index.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVIX_SERVICE_BODY_MAX (8u << 20) /* default request body ceiling (Dynamo's) */

typedef struct kvix_service kvix_service;

/* What the HTTP server lets clients hold (kvix_service_listen). A
 * connection past conns_max, or past conns_per_addr from one address, takes
 * the place of the oldest one of them that has waited over half a second for its
 * request (or, kept alive, for its next one); with none, it is closed at
 * once. A request must arrive whole within timeout_s of its connection or
 * of the answer before it (whatever trickles in meanwhile), and an answer
 * must make progress within it. Request bodies and the parse of a query
 * hold at most memory_max bytes together: a request past it is answered 503.
 * 0 in a field: its default. */
#define KVIX_SERVICE_CONNS_DEFAULT 2048
#define KVIX_SERVICE_CONNS_PER_ADDR_DEFAULT 512
#define KVIX_SERVICE_TIMEOUT_DEFAULT 10
#define KVIX_SERVICE_MEMORY_DEFAULT ((size_t)128 << 20)
typedef struct kvix_service_limits {
    unsigned conns_max;
    unsigned conns_per_addr;
    unsigned timeout_s;
    size_t memory_max;
} kvix_service_limits;

typedef struct kvix_service_opts {
    kvix_index *idx;          /* borrowed; must outlive the service */
    size_t body_max;          /* 0: KVIX_SERVICE_BODY_MAX */
    const char *tmpdir;       /* GET /snapshot writes (then unlinks) its file here; NULL: "/tmp" */
    /* Names of the tool's rejection reasons, for kvix_events_rejected_total{reason};
     * borrowed (static strings). */
    const char *const *reject_reasons;
    size_t nreasons;
    /* Borrowed, optional: the engine subscriber behind POST /register,
     * POST /unregister and GET /workers (without: those answer 503), and
     * its counters in /metrics; sub_cfg, the defaults of its specs (model,
     * tenant, block size), is required with it. Whoever drives the
     * subscriber (a tool's feed) applies what it delivers. */
    struct kvix_enginesub *sub;
    const struct kvix_enginesub_config *sub_cfg;
    /* Without sub: why there is none, said in the 503 of those endpoints
     * (borrowed; NULL: no reason given). */
    const char *no_sub_why;
    /* The peer set behind /register_peer, /deregister_peer and /peers;
     * borrowed, must outlive the service. NULL: the service keeps its own. */
    struct kvix_peers *peers;
    /* Non-NULL: the NATS stream the index consumes; GET /snapshot then
     * records it with the sequence set by kvix_service_set_stream_seq. */
    const char *stream;
    /* 0..19: each server thread lowers its own scheduling priority by this
     * much (nice; Linux sets it per thread) before its first request, so that
     * the writers keep their share of the CPU under a query load. 0: as the
     * process. */
    int server_nice;
    /* The server's bounds (see kvix_service_limits). */
    kvix_service_limits limits;
    /* Non-NULL: a bearer token (copied; kvix_peers_token_check says which
     * are tokens) that requests must carry as "Authorization:
     * Bearer TOKEN" to reach the endpoints that change or export the state
     * (/register, /unregister, /workers, /register_peer, /deregister_peer,
     * /peers, /dump, /snapshot, /explain), and with auth_queries /query and
     * /query_by_hash too; others are answered 401. /health and /metrics
     * stay open. */
    const char *auth_token;
    int auth_queries;
} kvix_service_opts;

#define KVIX_SERVICE_TOKEN_MAX 4096


/* *out is owned by the caller: kvix_service_free. opts is copied. */
int kvix_service_new(kvix_service **out, const kvix_service_opts *opts, kvix_err *err);
/* Stops the server if it runs. NULL is fine. */
void kvix_service_free(kvix_service *s);

/* ---- what the service reports of its owner ---- */
/* Counters for /metrics (thread-safe). type: kvix_event_type; reason: an index
 * into opts.reject_reasons, or -1 for an applied event. */
void kvix_service_note_event(kvix_service *s, int type, int reason);
/* The index reflects every message of opts.stream up to seq. Call it while
 * holding the index's writers' side (kvix_index_write_begin) around the apply
 * of that message, so GET /snapshot never pairs a state with another seq. */
void kvix_service_set_stream_seq(kvix_service *s, uint64_t seq);
/* Queries asked over HTTP (POST /query and /query_by_hash) and answered
 * (200) so far. Thread-safe. */
void kvix_service_queries(const kvix_service *s, uint64_t *asked, uint64_t *answered);
/* A snapshot save took `seconds`; it finished at wall-clock time `when`. */
void kvix_service_note_save(kvix_service *s, double seconds, double when);

/* ---- registrations kept in a snapshot ---- */

/* The enginesub group of the subscriptions POST /register makes (kvindex's
 * -w subscriptions are group 0, its --workers-file's group 1). */
#define KVIX_SERVICE_GROUP 2
/* Registrations one snapshot record carries at most. */
#define KVIX_SERVICE_REGISTRATIONS_MAX 65536

struct kvix_enginesub_spec;

/* The subscriptions of group KVIX_SERVICE_GROUP of sub, in the order they
 * were made, as the payload of snapshot extension record 65 (kvix-snapshot(5),
 * EXTENSIONS): a JSON array of POST /register bodies with every field given.
 * Appended to out; *n (may be NULL) gets how many. Any thread. */
int kvix_service_registrations_encode(struct kvix_enginesub *sub, kvix_buf *out, size_t *n,
                                      kvix_err *err);
/* Such a payload read back, each element checked as POST /register checks a
 * body (cfg: the subscriber's configuration, whose bind mode the endpoints
 * must suit). *out (n of them) is owned by the caller (free). KVIX_EINVAL
 * naming the element and what is wrong, KVIX_ELIMIT past
 * KVIX_SERVICE_REGISTRATIONS_MAX, KVIX_ENOMEM. */
int kvix_service_registrations_decode(const void *data, size_t len,
                                      const struct kvix_enginesub_config *cfg,
                                      struct kvix_enginesub_spec **out, size_t *n, kvix_err *err);

/* ---- the protocol ---- */
typedef struct kvix_service_response {
    int status;               /* HTTP status */
    const char *content_type; /* static string */
    kvix_buf body;            /* owned; initialised by kvix_service_response_init */
    int fd;                   /* >= 0: send this file's fd_size bytes instead of body; the
                               * caller owns (and closes) it */
    uint64_t fd_size;
    int auth_challenge;       /* a 401: the answer says WWW-Authenticate: Bearer */
    /* Called once, with done_ctx, when fd is no longer needed: its bytes
     * sent, the client gone, or the response never sent
     * (kvix_service_response_release, or the response handed to
     * kvix_service_handle again). It refers to the service: release such a
     * response before kvix_service_free. NULL: nothing to call. */
    void (*done)(void *ctx);
    void *done_ctx;
} kvix_service_response;

void kvix_service_response_init(kvix_service_response *r);
/* Frees the body, closes fd when open and calls done when set. */
void kvix_service_response_release(kvix_service_response *r);

/* Answer one request. path has no query string. Never fails: errors are
 * responses (4xx/5xx with {"error":"..."}); the index is unchanged by a
 * request that fails. Safe from any number of threads. r must be
 * initialised; its previous contents are replaced. */
void kvix_service_handle(kvix_service *s, const char *method, const char *path,
                         const char *body, size_t len, kvix_service_response *r);
/* kvix_service_handle with the request's Authorization header (NULL: none;
 * kvix_service_handle is this with NULL). */
void kvix_service_handle_as(kvix_service *s, const char *authorization, const char *method,
                            const char *path, const char *body, size_t len,
                            kvix_service_response *r);
/* Whether a request for path with this Authorization header (NULL: none)
 * may be answered: 1, or 0 (answer 401). Thread-safe; the server asks it
 * before reading a body. */
int kvix_service_authorized(const kvix_service *s, const char *path, const char *authorization);

/* ---- the HTTP server (libmicrohttpd) ---- */
/* Listen on addr (IPv4 or IPv6 literal; NULL: 127.0.0.1) and port (0: any
 * free port, see kvix_service_port) with `threads` server threads (0: 2). */
int kvix_service_listen(kvix_service *s, const char *addr, unsigned port, unsigned threads,
                        kvix_err *err);
unsigned kvix_service_port(const kvix_service *s);
/* Stop accepting connections, let the requests in flight finish (at most
 * timeout_ms), then stop the server. */
void kvix_service_shutdown(kvix_service *s, unsigned timeout_ms);

/* ---- /dump: RouterEvents (also read by peer recovery) ---- */
/* Append the whole index as /dump's JSON object. The index must be quiet. */
int kvix_service_dump(kvix_index *idx, kvix_buf *out, kvix_err *err);
/* The same written to fd (in pieces of about 1 MiB, so the dump is never
 * whole in memory); live: read with kvix_index_foreach_live while writers
 * go on (st, may be NULL, gets what that cost them), else the index must be
 * quiet. */
int kvix_service_dump_fd(kvix_index *idx, int fd, int live, kvix_walk_stats *st, kvix_err *err);
/* Apply a /dump body to idx (partitions created with the dump's block
 * sizes). Counts applied and rejected events (a block whose parent the
 * worker no longer holds cannot be replayed). Same concurrency as
 * kvix_index_apply for every worker in the dump. */
int kvix_service_dump_apply(kvix_index *idx, const char *body, size_t len, uint64_t *applied,
                            uint64_t *rejected, kvix_err *err);

/* ---- exact u64 JSON ---- */
/* Parse JSON text whose integer literals are u64: see the top of this file.
 * Returns a new reference (the caller json_decref's it) or NULL with err
 * set. Read integers back with (uint64_t)json_integer_value. */
struct json_t;
struct json_t *kvix_json_u64_loadb(const char *text, size_t len, kvix_err *err);

#ifdef __cplusplus
}
#endif
#endif
