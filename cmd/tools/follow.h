/* kvix: a replica following a NATS JetStream stream (kvindex --nats): the
 * stream's records handed out in order from the position the index
 * reflects, and what to do when the stream cannot be followed from there:
 * wait for the server and the stream to be there; when the stream no
 * longer holds the next message (its retention dropped it), take a peer's
 * snapshot of the stream at that point or later (kvix_ingest_replace, so
 * queries go on), or, with reset_on_gap, start empty from the stream's
 * first message (kvix_ingest_reset); else give up.
 *
 * kvix_follow_run takes the records into the ingest (cmd/tools/ingest.h) and
 * lets the caller do its own work between messages. What happened on the
 * way (waiting, a gap, a bootstrap, a reset) is said through opts.on_note:
 * the library prints nothing. One thread. */
#ifndef KVIX_FOLLOW_H
#define KVIX_FOLLOW_H

#include <stdbool.h>
#include <stdint.h>

#include "kvix/error.h"
#include "kvix/event.h"
#include "ingest.h"
#include "kvix/natslog.h"
#include "kvix/peers.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvix_follow kvix_follow;

typedef enum kvix_follow_note_kind {
    KVIX_FOLLOW_WAITING,      /* the server or the stream is not there yet (once per wait) */
    KVIX_FOLLOW_RETRYING,     /* reading failed for a moment (once per spell) */
    KVIX_FOLLOW_NOT_FROM_STREAM, /* the index does not reflect this stream: given up */
    KVIX_FOLLOW_GAP,          /* the stream no longer holds the next message */
    KVIX_FOLLOW_NO_HANDOVER,  /* no peer had a snapshot of the stream from there */
    KVIX_FOLLOW_BOOTSTRAPPED, /* a peer's snapshot replaced the index */
    KVIX_FOLLOW_CANNOT,       /* nothing left to try: given up */
    KVIX_FOLLOW_RESET,        /* reset_on_gap: the index starts empty */
} kvix_follow_note_kind;

typedef struct kvix_follow_note {
    int kind;        /* kvix_follow_note_kind */
    const char *msg; /* lowercase, no full stop; borrowed for the call */
} kvix_follow_note;

typedef struct kvix_follow_opts {
    const kvix_natslog_opts *nats; /* the server, the stream; copied by kvix_natslog_open */
    kvix_peers *peers;             /* borrowed, optional: whom to ask after a gap */
    bool reset_on_gap;
    bool until_caught_up;          /* end (KVIX_EOF) at the stream's last message at start */
    uint64_t seq;                  /* the index reflects the stream up to this message */
    void (*on_note)(void *ctx, const kvix_follow_note *n); /* optional */
    void *ctx;
} kvix_follow_opts;

/* Connect (kvix_natslog_open). g and opts' pointers are borrowed and must
 * outlive the follower. *out owned by the caller: kvix_follow_free.
 * KVIX_EINVAL: bad options. */
int kvix_follow_new(kvix_follow **out, kvix_ingest *g, const kvix_follow_opts *opts,
                    kvix_err *err);
void kvix_follow_free(kvix_follow *f); /* NULL is fine */

/* Follow the stream, taking its records into the ingest as kvix_ingest_run
 * does a reader's (source: their source number), each message whole
 * (kvix_ingest_message_begin/_end); lp->between and lp->stopping are asked
 * between messages only. Returns KVIX_OK when lp->stopping or a strict
 * stop ended it, KVIX_EOF with until_caught_up once the stream's last
 * message at start is in, KVIX_ENOTFOUND when the stream cannot be
 * followed any more (said by a note), KVIX_ESYS when told to stop while
 * still waiting for the server or the stream (err says what for); any
 * other error is the caller's end, and kvix_follow_lost says whether it
 * left the index unusable (a peer's snapshot half taken). */
int kvix_follow_run(kvix_follow *f, size_t source, const kvix_ingest_loop *lp, kvix_err *err);
int kvix_follow_lost(const kvix_follow *f);

/* The last message wholly taken (or taken from a peer): the sequence the
 * index reflects. */
uint64_t kvix_follow_seq(const kvix_follow *f);
/* The lag from stored to handed out (kvix_natslog_lag_get). */
void kvix_follow_lag(kvix_follow *f, kvix_natslog_lag *out);

#ifdef __cplusplus
}
#endif
#endif
