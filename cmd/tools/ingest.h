/* kvix: the writers' side of a live index (kvindex's engine): records taken
 * one by one from any source (stdin, files, a stream), applied or answered;
 * refused ones counted by reason (kvix_reason) and reported to the caller,
 * and with opts.strict the first one stops everything; the engine
 * subscriptions (cmd/tools/enginefeed.h) fed into the same index; the
 * save-every-N-events policy; saves, and a recovery from peers, that keep
 * the index's other users quiet meanwhile.
 *
 * A kvix_ingest owns its index (made from opts.index), its feed and its
 * HTTP service (kvix/service.h, kvix_ingest_serve): every apply is then
 * inside the service's writers' side and counted for /metrics (by
 * kvix_reason_key), saves and recoveries are quiet sections of it.
 *
 * Threads. The take/save/recover calls are for one thread (the caller's
 * main loop). Refusals may come from the index's writer threads and from
 * the feed's thread: opts.on_reject is called on those threads, one at a
 * time (under the ingest's lock, which the caller must not need inside it).
 * Every writer of the index takes the ingest's write lock when a feed is
 * there, so a worker fed from stdin and from an engine is never written by
 * two threads at once. */
#ifndef KVIX_INGEST_H
#define KVIX_INGEST_H

#include <stdbool.h>
#include <stdint.h>

#include "kvix/buf.h"
#include "enginefeed.h"
#include "kvix/error.h"
#include "kvix/event.h"
#include "kvix/index.h"
#include "kvix/service.h"
#include "kvix/peers.h"
#include "kvix/snapshot.h"
#include "kvix/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvix_service;
typedef struct kvix_ingest kvix_ingest;

/* Sources are numbered: 0 .. nsources - 1, named by opts.sources. Records of
 * one source up to this many (positions wrap past 2^44 in reports). */
#define KVIX_INGEST_SOURCES_MAX 0xffff
/* Distinct unknown (model, tenant) names a query may be the first to ask
 * for; past this many, none is first any more. */
#define KVIX_INGEST_UNKNOWN_MAX 1024

/* A refused record, as reported to opts.on_reject. All borrowed for the
 * call. */
typedef struct kvix_ingest_reject {
    const char *what;    /* "event", "query" or "message" */
    const char *source;  /* opts.sources[source] */
    uint64_t pos;        /* line, record or sequence number in the source */
    int type;            /* the record's kvix_event_type, -1 when it was not told */
    const kvix_err *err; /* why: code, message, reason */
} kvix_ingest_reject;

typedef struct kvix_ingest_opts {
    kvix_index_opts index;        /* copied; its on_reject/reject_ctx are the ingest's */
    bool query_only;              /* every event is refused (KVIX_REASON_QUERYONLY) */
    bool explain;                 /* every query is explained (kvix_index_explain), not
                                   * only those that say "explain" */
    bool strict;                  /* the first refusal stops: kvix_ingest_stopped */
    uint64_t save_every_events;   /* kvix_ingest_save_due after this many applied; 0: never */
    const char *const *sources;   /* borrowed, outlives the ingest: source names */
    size_t nsources;
    size_t feed_source;           /* the sources[] name of the subscriptions' refusals */
    /* A record refused, on any thread, one at a time. Optional. */
    void (*on_reject)(void *ctx, const kvix_ingest_reject *r);
    /* The caller's main loop has something to do: a strict stop, or a save
     * due from the subscriptions' thread. Any thread; must not block.
     * Optional. */
    void (*on_wake)(void *ctx);
    /* The subscriber's notes (kvix_enginefeed_opts.on_note). Optional. */
    void (*on_note)(void *ctx, const kvix_enginesub_note *n);
    /* Between two steps of the subscriptions' thread, on it
     * (kvix_enginefeed_opts.on_step). Optional. */
    void (*on_feed_step)(void *ctx);
    void *ctx;
} kvix_ingest_opts;

/* Counters since kvix_ingest_new. */
typedef struct kvix_ingest_counts {
    uint64_t submitted[KVIX_EV_QUERY + 1]; /* events taken from the sources, by type */
    uint64_t refused[KVIX_EV_QUERY + 1];   /* of those, refused (not the subscriptions') */
    uint64_t rejected;                     /* every refusal, of every source */
    uint64_t reasons[KVIX_REASON_COUNT];   /* rejected, by kvix_reason */
    uint64_t queries, answered;
    uint64_t records;                      /* taken from the sources, good or not */
    kvix_apply_result blocks;              /* index totals since kvix_ingest_rebase */
} kvix_ingest_counts;

/* opts copied (sources borrowed). *out owned by the caller:
 * kvix_ingest_free. */
int kvix_ingest_new(kvix_ingest **out, const kvix_ingest_opts *opts, kvix_err *err);
/* Ends a message held for the service, shuts the service down (requests in
 * flight get 1 s) and frees it, stops and frees the feed, frees the index.
 * NULL is fine. */
void kvix_ingest_free(kvix_ingest *g);

/* The index. Borrowed: the ingest's until kvix_ingest_free or _reset. */
kvix_index *kvix_ingest_index(kvix_ingest *g);
/* The feed (kvix_ingest_feed_new), or NULL. Borrowed. */
kvix_enginefeed *kvix_ingest_feed(kvix_ingest *g);

/* The HTTP API on the ingest's index (and its feed, when made before). */
typedef struct kvix_ingest_serve_opts {
    const char *addr;     /* an IPv4 or IPv6 address */
    unsigned port;        /* 0: any free port (kvix_service_port) */
    unsigned threads;     /* server threads (0: 2) */
    int nice;             /* the server threads' nice value (kvix_service_opts.server_nice) */
    const char *tmpdir;   /* GET /snapshot's scratch directory; NULL: "/tmp" */
    kvix_peers *peers;    /* borrowed, outlives the ingest: /register_peer's set */
    const char *stream;   /* the NATS stream the index follows, NULL: none */
    uint64_t seq;         /* the stream position the index reflects now */
    const char *no_sub_why; /* without subscriptions: why (kvix_service_opts) */
    kvix_service_limits limits; /* the server's bounds (0s: the defaults) */
    const char *auth_token;  /* kvix_service_opts.auth_token, auth_queries */
    int auth_queries;
} kvix_ingest_serve_opts;

/* Make the service and start listening (kvix_service_new, _listen);
 * KVIX_EINVAL / KVIX_ERANGE for a bad address or port. Once. */
int kvix_ingest_serve(kvix_ingest *g, const kvix_ingest_serve_opts *o, kvix_err *err);
/* The service, or NULL. Borrowed. */
struct kvix_service *kvix_ingest_service(kvix_ingest *g);

/* Take the index's current totals as the start of counts.blocks (after a
 * snapshot or a peer's state was loaded). */
void kvix_ingest_rebase(kvix_ingest *g);
/* Drop the index for a new empty one (the old pointer is freed; not with a
 * service or a feed, which hold it). */
int kvix_ingest_reset(kvix_ingest *g, kvix_err *err);
/* Replace the index's content with snapshot s in place
 * (kvix_snapshot_replace: queries go on), every writer held and the
 * service quiet; the service is given seq as its stream position. s stays
 * the caller's. On failure the index holds part of s: unusable. */
int kvix_ingest_replace(kvix_ingest *g, kvix_snapshot *s, uint64_t seq, kvix_err *err);

/* One record a source gave, at pos. An event is applied (or submitted to
 * the writer threads), a query answered into out (out->len is reset; the
 * caller writes it out); a refused record is counted and reported, and a
 * query (or, with query_only, any record) refused gets its error answer in
 * out instead. refused: the source's decoder refused the record (ev holds
 * what it made of it, for a query's id); NULL otherwise. *unknown (may be
 * NULL) is set to the answer's kvix_unknown when this query is the first to
 * ask for that unknown model or tenant, else 0. Returns KVIX_OK, refused or
 * not, or KVIX_ENOMEM / KVIX_ESYS, which the caller cannot go on from. */
int kvix_ingest_take(kvix_ingest *g, size_t source, uint64_t pos, const kvix_event *ev,
                     const kvix_err *refused, kvix_answer *ans, kvix_buf *out, int *unknown,
                     kvix_err *err);
/* A record, or a whole unit of a source (message: a stream's message over
 * a ceiling), refused before it was decoded: counted and reported (as an
 * "event" or a "message"), with no answer. */
void kvix_ingest_refuse(kvix_ingest *g, int message, size_t source, uint64_t pos,
                        const kvix_err *why);

/* What the caller does while kvix_ingest_run (or kvix_follow_run) reads a
 * source. Every member is optional. */
typedef struct kvix_ingest_loop {
    int wake_fd;                /* the reader's wake-up descriptor: drained when it woke it */
    /* Nonzero: read nothing more (the records already taken from the source
     * are applied). Asked before each record. */
    int (*stopping)(void *ctx);
    /* Before each record (a stream: between messages): the caller's
     * signals, saves, progress. */
    void (*between)(void *ctx);
    /* An answer line to write out: a query's, or a refused record's error. */
    void (*on_answer)(void *ctx, const char *data, size_t len);
    /* A query was the first to ask for an unknown model or tenant (why: a
     * kvix_unknown). */
    void (*on_unknown)(void *ctx, size_t source, uint64_t pos, const kvix_event *q, int why);
    void *ctx;
} kvix_ingest_loop;

/* Read source (number source) to its end, taking every record
 * (kvix_ingest_take, with buffers of the ingest's own) into the ingest. Returns
 * KVIX_EOF at the end of the input, or once told to stop (stopping) and
 * what was taken is in (kvix_reader_pending says what was left); KVIX_OK
 * when a strict ingest stopped; KVIX_EIO when reading failed; KVIX_ENOMEM
 * or KVIX_ESYS when the caller cannot go on. */
int kvix_ingest_run(kvix_ingest *g, kvix_reader *r, size_t source, const kvix_ingest_loop *lp,
                    kvix_err *err);

/* A stream's message (several records) is applied whole before a save or a
 * GET /snapshot may see it: begin before its first record, end after its
 * last, with the message's sequence (given to the service). */
void kvix_ingest_message_begin(kvix_ingest *g);
void kvix_ingest_message_end(kvix_ingest *g, uint64_t seq);

/* 1 once a refusal stopped a strict ingest. Any thread. */
int kvix_ingest_stopped(kvix_ingest *g);
/* Records refused so far (any source). Any thread. */
uint64_t kvix_ingest_rejected(kvix_ingest *g);
/* Records taken so far (kvix_ingest_take, kvix_ingest_refuse of a record).
 * The caller's thread. */
uint64_t kvix_ingest_records(const kvix_ingest *g);
/* Writers synced, index totals taken: the counters. Main thread. */
void kvix_ingest_counts_get(kvix_ingest *g, kvix_ingest_counts *c);

/* Wait until every event submitted to the writer threads is applied. */
void kvix_ingest_sync(kvix_ingest *g);

/* opts.save_every_events applied since the last save, from every source
 * (the subscriptions' included). */
int kvix_ingest_save_due(kvix_ingest *g);
/* The index changed since the last save (or since the start). */
int kvix_ingest_changed(kvix_ingest *g);
/* Save the index to path (kvix_snapshot_save_at), the service told of the
 * save; the save counters start again. Without a stream, everything
 * submitted so far goes in and the writers go on meanwhile (a live save:
 * each (worker, dp) as it stood when the save read it, its writer held back
 * only for that). With stream and seq recorded, every writer is held and
 * the index quiet throughout: one state for one sequence. Returns 1
 * without saving in the middle of a message held for a service, else as
 * kvix_snapshot_save_at; info may be NULL. */
int kvix_ingest_save(kvix_ingest *g, const char *path, const char *stream, uint64_t seq,
                     kvix_snapshot_info *info, kvix_err *err);

/* The subscriptions (-w, --workers-file, POST /register): a feed on the
 * ingest's index with cfg's defaults, its refusals reported as from
 * opts.feed_source, each (worker, dp) the index holds an eid for resumed
 * after it (kvix_enginefeed_resume). Before _feed_start. */
int kvix_ingest_feed_new(kvix_ingest *g, const kvix_enginesub_config *cfg, kvix_err *err);
/* The subscriptions themselves (-w, a workers file) are the tool's to add:
 * cmd/tools/subfront.h, on kvix_enginefeed_sub(kvix_ingest_feed(g)). */
/* Start the feed's thread (with the attached service), held back or not
 * (kvix_enginefeed_start); _release lets a held feed go. */
int kvix_ingest_feed_start(kvix_ingest *g, bool hold, kvix_err *err);
void kvix_ingest_feed_release(kvix_ingest *g);
/* Stop the feed's thread; its failure, if it failed. */
int kvix_ingest_feed_stop(kvix_ingest *g, kvix_err *err);
/* 1 once the feed's thread stopped on an error (out of memory, a system
 * call): no engine's events are applied any more; kvix_ingest_feed_stop
 * says why. opts.on_wake is called when it happens. Any thread. */
int kvix_ingest_feed_failed(kvix_ingest *g);

/* What kvix_ingest_recover did. */
typedef struct kvix_ingest_recovery {
    char peer[KVIX_PEER_URL_MAX + 1]; /* the peer that answered (or failed) */
    int from_snapshot;                /* its GET /snapshot (else its GET /dump) */
    uint64_t applied, rejected;       /* /dump: events applied and refused */
    kvix_snapshot_info info;          /* /snapshot: has_stream, stream_seq, blocks */
    size_t asked;                     /* peers asked */
} kvix_ingest_recovery;

/* Take the state of the first of peers that answers (kvix_peers_recover;
 * with stream, only a snapshot of that stream). The service's writers'
 * side is held meanwhile; peers registered meanwhile (POST /register_peer)
 * are asked after the others, until none is left unasked. KVIX_ENOTFOUND
 * when none answered (err says why the last failed, or that none was
 * given); another error when the one that answered could not be applied
 * (rec->peer names it). */
int kvix_ingest_recover(kvix_ingest *g, kvix_peers *peers, const char *stream,
                        kvix_ingest_recovery *rec, kvix_err *err);

#ifdef __cplusplus
}
#endif
#endif
