/* kvix: the event log on NATS JetStream (kvsub --nats, kvindex --nats).
 *
 * One NATS message per engine batch: its payload is the batch's kvix records
 * in the msgpack framing (kvix/stream.h), its subject PREFIX.<model>.<worker>,
 * its message id "<worker>.<dp>.<eid>.<ts>" (ts: the bits of the batch's
 * engine timestamp, when it has one) so the server drops a batch published
 * twice (a kvsub restarted within the stream's duplicate window) instead of
 * storing it again, while an engine restarted (its eids from 0 again, at
 * other times) is not mistaken for one. A record without eid (kvsub's own
 * `cleared`) is published without id.
 *
 * Publishing is pipelined: up to a window of batches are in flight, their
 * acknowledgements awaited together, which lifts the one-round-trip-per-batch
 * bound. The order kvsub delivered them in is kept (the events need it: a
 * stored after a removed is not the removed after the stored): a batch the
 * server did not acknowledge stops everything new until every batch in
 * flight is settled, then the failed ones are sent again, in order, one at a
 * time, with their ids (one the server had after all is dropped as a
 * duplicate). nats.c's reconnection buffer is off, so nothing sent while the
 * connection is down can reach the server ahead of a batch lost with the old
 * connection. A window of 1 is the synchronous publisher.
 *
 * Consuming hands messages with their stream sequence, strictly in sequence:
 * from the position asked, each message once (a redelivery is dropped here),
 * through server restarts and reconnections (the consumer is made again from
 * the next sequence). A message the stream no longer holds (its retention
 * dropped it before it was handed out) is an error, never a silent skip.
 *
 * Both halves of the framing are here: kvix_natslog_publish_event gathers
 * a subscriber's events into batches (kvsub --nats), kvix_natslog_next_record
 * hands them out again (kvindex --nats).
 *
 * The library uses nats.c (libnats): no NATS protocol code here. */
#ifndef KVIX_NATSLOG_H
#define KVIX_NATSLOG_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/buf.h"
#include "kvix/error.h"
#include "kvix/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVIX_NATSLOG_SUBJECT_MAX 200u /* longest subject prefix */
#define KVIX_NATSLOG_PAYLOAD_MAX (8u << 20) /* largest message handed out, bytes */

typedef struct kvix_natslog_opts {
    const char *url;        /* nats://host:port (a comma-separated list is fine) */
    const char *stream;     /* stream name (kvix_snapshot's rule: no '.', '*', '>', space) */
    const char *subject;    /* publishing: subject prefix; the stream gets PREFIX.> */
    const char *name;       /* connection name shown by the server (may be NULL) */
    int64_t max_age_s;      /* stream created: drop messages older than this (0: never) */
    int64_t max_bytes;      /* stream created: at most this many bytes (0: no limit) */
    int replicas;           /* stream created: copies in a cluster (1..5) */
    int64_t dup_window_s;   /* stream created: duplicate window (0: server default, 2 min) */
    int64_t timeout_ms;     /* one request: stream info, publish acknowledgement */
    unsigned window;        /* publishing: batches in flight at most (1..65536) */
    /* Credentials, each NULL when not used (nats.c reads the files): */
    const char *user, *password; /* user and password */
    const char *token;           /* an authorization token */
    const char *creds;           /* a credentials file: user JWT and NKey seed */
    const char *tls_ca;          /* TLS, the server verified against this CA file (PEM);
                                    a tls:// URL asks for TLS with the system's CAs */
    const char *tls_cert, *tls_key; /* a client certificate chain and its key (PEM) */
} kvix_natslog_opts;

#define KVIX_NATSLOG_WINDOW_MAX 65536u

/* Defaults: subject "kvix", stream "KVIX", replicas 1, timeout 5000 ms,
 * window 256. */
void kvix_natslog_opts_init(kvix_natslog_opts *o);

/* The state of the stream: messages first..last are held (first == last + 1
 * when it is empty). */
typedef struct kvix_natslog_state {
    uint64_t first, last, msgs, bytes;
} kvix_natslog_state;

typedef struct kvix_natslog kvix_natslog;

/* Connect to o->url. A server that is not up yet is not an error: the
 * connection is retried in the background (and after every drop), and the
 * calls below fail with KVIX_EIO until it is up. Strings of o are copied.
 * *out is owned by the caller: kvix_natslog_free. Errors: KVIX_EINVAL (bad
 * options), KVIX_ESYS. */
int kvix_natslog_open(kvix_natslog **out, const kvix_natslog_opts *o, kvix_err *err);
void kvix_natslog_free(kvix_natslog *l); /* NULL is fine */

/* Is the connection up now? */
int kvix_natslog_connected(kvix_natslog *l);

/* The stream's state. KVIX_ENOTFOUND: no such stream; KVIX_EIO: no answer. */
int kvix_natslog_state_get(kvix_natslog *l, kvix_natslog_state *st, kvix_err *err);

/* Create the stream from the options when it does not exist (subjects
 * PREFIX.>, file storage, limits retention); an existing one is left as it
 * is. *created says which (may be NULL). KVIX_EIO: no answer or refused. */
int kvix_natslog_ensure_stream(kvix_natslog *l, int *created, kvix_err *err);

/* ---- publishing -------------------------------------------------------- */

/* What the publisher's window has done so far. */
typedef struct kvix_natslog_pubstats {
    uint64_t acked;      /* batches the server acknowledged (duplicates included) */
    uint64_t duplicates; /* of them, ones it already had (dropped by their id) */
    uint64_t resent;     /* batches sent again after a failure */
    uint64_t reordered;  /* resent batches the server stored after a later batch of the
                            window (a server that refused one batch and took the next
                            on the same connection: a cluster's leader change) */
    uint64_t pending;    /* batches taken and not acknowledged yet */
    uint64_t split;      /* batches over the server's largest message, sent in parts */
    uint64_t lost;       /* records over it alone: published as a clear of their
                            (worker, dp) instead */
    uint64_t lost_worker, lost_eid; /* the batch of the last record lost */
    uint32_t lost_dp;
} kvix_natslog_pubstats;

/* Take one batch into the window and send it: data[0..len) holds its
 * records in fmt (NDJSON lines are converted to msgpack records), all of one
 * (model, worker, dp, eid); the first record gives subject and id. A batch
 * over the server's largest message (its max_payload, 1 MiB by default) is
 * sent as several messages, cut between records, ids ID.p0, ID.p1, ...; a
 * record over it alone cannot be sent, and a clear of its (worker, dp) goes
 * in its place (counted: kvix_natslog_pubstats.lost), so that no replica
 * keeps blocks it can no longer vouch for and nothing waits for ever. Returns
 * KVIX_OK once the batch is held (copied: the caller keeps data), before the
 * server acknowledged it: kvix_natslog_flush says when every batch taken is
 * in the stream. Failed batches of the window are sent again first.
 * KVIX_EIO: the window is full of batches the server has not acknowledged
 * (or failed ones could not be sent again) within opts.timeout_ms; the
 * batch was not taken: call again with it. KVIX_EINVAL: the records do not
 * decode. */
int kvix_natslog_publish(kvix_natslog *l, const char *data, size_t len, kvix_format fmt,
                         kvix_err *err);

/* Events as a subscriber delivers them (kvix/enginesub.h), gathered into
 * the batches above: the events of one (worker, dp, eid) in a row are one
 * engine batch, one message; an event without eid (a subscriber's own
 * clear) is a message of its own. What kvix_natslog_next_record reads back
 * record by record. ev is copied into the batch being gathered; an event of
 * another batch first hands that one to kvix_natslog_publish. KVIX_EIO: it
 * could not be (the window is full, as there): ev was not taken, call again
 * with it. KVIX_ELIMIT, KVIX_EINVAL: ev cannot be written as a record (not
 * taken; the batch gathered is kept). */
int kvix_natslog_publish_event(kvix_natslog *l, const kvix_event *ev, kvix_err *err);
/* Hand the batch being gathered to kvix_natslog_publish now, if there is
 * one: before waiting for more events (a subscriber's step delivers whole
 * batches), so none waits here. KVIX_OK, or KVIX_EIO: call again. */
int kvix_natslog_publish_pending(kvix_natslog *l, kvix_err *err);

/* Wait until the server acknowledged every batch taken (sending failed ones
 * again), at most timeout_ms. KVIX_OK: all are in the stream; KVIX_EIO: some
 * are not yet (err says how many; they are still held: call again). */
int kvix_natslog_flush(kvix_natslog *l, int64_t timeout_ms, kvix_err *err);

void kvix_natslog_pubstats_get(kvix_natslog *l, kvix_natslog_pubstats *st);

/* ---- consuming --------------------------------------------------------- */

/* Hand out messages from sequence from (>= 1) on; call again to move. */
int kvix_natslog_consume(kvix_natslog *l, uint64_t from, kvix_err *err);

/* The next message, waiting at most timeout_ms. Returns 1 with *seq, *data
 * and *len set (data owned by l, valid until the next call or free), 0 when
 * none came in time (also while the server is away: the consumer is made
 * again once it is back), or an error: KVIX_ENOTFOUND when the next
 * sequence is no longer in the stream (err says which messages are gone and
 * where the stream starts now), KVIX_ELIMIT for a payload over
 * KVIX_NATSLOG_PAYLOAD_MAX (*seq says which; that message is skipped: the
 * next call goes on after it). */
int kvix_natslog_next(kvix_natslog *l, int timeout_ms, uint64_t *seq, const char **data,
                      size_t *len, kvix_err *err);

/* The sequence the next message handed out will have. */
uint64_t kvix_natslog_position(const kvix_natslog *l);

/* When the server stored the message last handed out, in nanoseconds since
 * the Unix epoch (the server's clock): the caller's lag is its own
 * CLOCK_REALTIME minus this. */
int64_t kvix_natslog_stored_ns(const kvix_natslog *l);

/* ---- following: records, the applied position, the lag ------------------ */

/* Start following after message applied (0: from the stream's start): the
 * stream's state in *st, then records from applied + 1. KVIX_ERANGE: the
 * stream ends before applied (the state was not made from this stream);
 * KVIX_ENOTFOUND: no such stream; KVIX_EIO: no answer (call again). */
int kvix_natslog_start(kvix_natslog *l, uint64_t applied, kvix_natslog_state *st,
                       kvix_err *err);

/* The next record of the stream, waiting at most timeout_ms: returns 1 with
 * *ev decoded, *seq its message's sequence and *last set on the message's
 * last record; 0 when none came in time. A record that does not decode
 * (KVIX_EINVAL) ends its message (the rest cannot be framed) and a message
 * over KVIX_NATSLOG_PAYLOAD_MAX (KVIX_ELIMIT) is skipped whole: both with
 * *seq and *last set, the next call goes on after it. KVIX_ENOTFOUND: as
 * kvix_natslog_next. ev is the caller's (kvix_event_init). */
int kvix_natslog_next_record(kvix_natslog *l, int timeout_ms, kvix_event *ev, uint64_t *seq,
                             int *last, kvix_err *err);

/* The last message every record of which was handed out: the sequence a
 * state that applied them reflects. */
uint64_t kvix_natslog_applied(const kvix_natslog *l);

/* The lag from the server storing a message to the caller coming back after
 * its last record (its being applied), over the messages followed (a
 * deterministic sample of 65536 past that many); the server's clock against
 * CLOCK_REALTIME here. */
typedef struct kvix_natslog_lag {
    uint64_t messages;
    double p50_ms, p99_ms, max_ms;
} kvix_natslog_lag;

void kvix_natslog_lag_get(kvix_natslog *l, kvix_natslog_lag *out);

#ifdef __cplusplus
}
#endif
#endif
