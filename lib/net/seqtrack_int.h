/* libkvix private: the sequence tracker of one engine stream (one worker and dp rank),
 * see kvsub(1): batches come numbered 0, 1, 2, ... per
 * engine run; a gap is asked for again from the engine's replay service while
 * later live batches wait in a bounded hold buffer; what cannot be recovered
 * (no replay service, a replay buffer that no longer holds the gap, a replay
 * that times out, a full hold buffer, an engine restart) is told to the
 * caller as a `cleared` of that stream.
 *
 * Pure logic: no I/O, no clock, no allocation beyond the hold buffer's array.
 * The caller decodes batches, owns the replay socket and the output, and says
 * what happens through the calls below; the tracker answers through the
 * callbacks of kvix_seqtrack_ops, synchronously, from within those calls
 * (a callback must not call the tracker back).
 * Time is the caller's: `now` is any monotonic count (kvsub: milliseconds)
 * and config.replay_timeout is in the same unit.
 *
 * Batches are opaque `void *item`s of the caller. An item passed to a call is
 * borrowed for that call. To keep a live batch for later the tracker calls
 * ops.hold(item), which returns an item the tracker owns (a copy); each held
 * item is later given to ops.deliver (then ops.release) or only to
 * ops.release (stale or thrown away at a restart), exactly once.
 * Not thread-safe: one thread drives a tracker. */
#ifndef KVIX_SEQTRACK_INT_H
#define KVIX_SEQTRACK_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvix/enginesub.h"
#include "kvix/error.h"

#define KVIX_SEQTRACK_EPOCH_MAX 128 /* bytes of a topic's epoch compared */

/* Why a stream was cleared. The first ones are losses (counted in losses),
 * the last two restarts (counted in restarts). */
typedef enum kvix_seqtrack_why {
    KVIX_SEQTRACK_NO_REPLAY = 1,   /* a gap, and ops.replay_start could not ask */
    KVIX_SEQTRACK_REPLAY_LATER,    /* the replay's first batch is later than asked */
    KVIX_SEQTRACK_REPLAY_SHORT,    /* the replay ended before the held batches */
    KVIX_SEQTRACK_REPLAY_MISSING,  /* the replay skipped a seq */
    KVIX_SEQTRACK_UNDECODABLE,     /* a replayed batch the caller could not decode */
    KVIX_SEQTRACK_TIMEOUT,         /* the replay went silent past replay_timeout */
    KVIX_SEQTRACK_OVERFLOW,        /* the hold buffer was full: the replay is given up */
    KVIX_SEQTRACK_RESTART_MISSED,  /* a restart's first batches, not replayable */
    KVIX_SEQTRACK_RESTART,         /* the live seq went backwards: the engine restarted */
    KVIX_SEQTRACK_EPOCH,           /* a new epoch in the topic: the engine restarted */
} kvix_seqtrack_why;

/* What ops.cleared is told. */
typedef struct kvix_seqtrack_clear {
    kvix_seqtrack_why why;
    uint64_t from, to; /* losses: batches from..to lost; to = UINT64_MAX: from on */
    uint64_t seq;      /* restarts: the new run's batch that told it */
    uint64_t prev;     /* KVIX_SEQTRACK_RESTART: the last seq seen of the old run */
} kvix_seqtrack_clear;

typedef struct kvix_seqtrack_ops {
    /* Apply a batch: called in seq order (within an engine run, after the
     * last clear). item: borrowed for the call. */
    void (*deliver)(void *ctx, uint64_t seq, void *item);
    /* Ask the engine for every batch from seq `from` on (kvsub: a DEALER
     * sends ["", from]). 0: asked, the answers go to kvix_seqtrack_replay_*;
     * non-zero: it cannot be asked (no replay endpoint): a loss. */
    int (*replay_start)(void *ctx, uint64_t from);
    /* The replay asked for is over (ended, given up, or a restart): its
     * answers are no longer wanted (kvsub closes the DEALER). */
    void (*replay_stop)(void *ctx);
    /* The stream's state can no longer be vouched for: the caller tells its
     * consumer to forget it (kvsub prints a `cleared` event). c: borrowed. */
    void (*cleared)(void *ctx, const kvix_seqtrack_clear *c);
    /* Keep a live batch during a replay: return an item owned by the tracker
     * until it is passed to release (NULL: out of memory). */
    void *(*hold)(void *ctx, void *item);
    /* Give back a held item (after its deliver, or undelivered). */
    void (*release)(void *ctx, void *item);
    /* Optional (NULL: 0): the bytes a live item would take once held, for
     * config.hold_bytes_max. item: borrowed. */
    size_t (*size)(void *ctx, const void *item);
} kvix_seqtrack_ops;

typedef struct kvix_seqtrack_config {
    size_t hold_max;         /* live batches held during a replay (at least 1) */
    uint64_t replay_timeout; /* a recovery (the replay asked for at a gap or a restart)
                                is given up this long after it was asked, however
                                busy its answers keep it */
    size_t hold_bytes_max;   /* bytes held (ops.size); 0: no limit */
} kvix_seqtrack_config;

/* The tracker's counts are what kvix_enginesub reports of each stream. */
typedef kvix_enginesub_seq_counts kvix_seqtrack_counts;

typedef struct kvix_seqtrack_held {
    uint64_t seq;
    void *item;   /* owned by the tracker (from ops.hold) */
    size_t bytes; /* ops.size of it */
} kvix_seqtrack_held;

/* One stream's tracker. Read counts freely; the other fields are private. */
typedef struct kvix_seqtrack {
    kvix_seqtrack_counts counts;
    kvix_seqtrack_config cfg;
    kvix_seqtrack_ops ops;
    void *ctx;
    bool known;      /* a batch was applied (or a restart seen): next is meaningful */
    bool live_known; /* live_seq is meaningful */
    bool resync;     /* after a loss: take the next batch as it comes */
    bool replaying, got_first;
    bool resumed;      /* kvix__seqtrack_resume: no live batch seen yet */
    uint64_t live_seq; /* the last seq seen on the live stream */
    uint64_t next;     /* seq expected next */
    uint64_t want;     /* first seq the replay asked for */
    uint64_t deadline; /* the replay is given up at this time */
    char epoch[KVIX_SEQTRACK_EPOCH_MAX];
    size_t epoch_len;
    kvix_seqtrack_held *held; /* live batches waiting for the replay, in arrival order */
    size_t nheld, capheld;
    size_t held_bytes;
} kvix_seqtrack;

/* Start tracking a stream. cfg and ops are copied; ctx is passed to every
 * callback (not owned). */
void kvix__seqtrack_init(kvix_seqtrack *t, const kvix_seqtrack_config *cfg,
                        const kvix_seqtrack_ops *ops, void *ctx);
/* Stop: a running replay is stopped (ops.replay_stop) and the held items are
 * given back undelivered (ops.release). t may be initialised again. */
void kvix__seqtrack_release(kvix_seqtrack *t);

/* A live batch with seq, the epoch of its topic (NULL if none; only the
 * first KVIX_SEQTRACK_EPOCH_MAX bytes count) and the decoded item (borrowed).
 * The first batch is taken whatever its seq; in order it is delivered; the
 * same seq again is a duplicate, an older one stale (both dropped); a later
 * one is a gap (replay asked for, or a loss); a lower seq than the last live
 * one, or another epoch, is a restart (cleared; the new run's missed batches
 * replayed from 0). During a replay live batches are held; a full hold
 * buffer gives the replay up (a loss) and feeds the held batches on.
 * KVIX_OK, or KVIX_ENOMEM (ops.hold or the hold array failed: this batch, and
 * the held ones not yet fed, were released undelivered). */
int kvix__seqtrack_live(kvix_seqtrack *t, uint64_t seq, const char *epoch, size_t epoch_len,
                       void *item, uint64_t now);

/* Start a fresh tracker as if batch next - 1 had been applied (a consumer
 * that kept the state up to it, such as a snapshot's last eid): a first live
 * batch past next is a gap (replay asked for, or a loss); one below next
 * means the engine restarted meanwhile (seqs only grow within a run): a
 * restart, cleared. Call before the first kvix__seqtrack_live. */
void kvix__seqtrack_resume(kvix_seqtrack *t, uint64_t next);

/* A replay answer with seq (not the end marker) arrived: true when its payload
 * should be decoded and given to kvix__seqtrack_replayed; false when it is not
 * wanted: no replay running, stale (counted in stale), or outside the range
 * asked for, below its start or past the newest live seq out of order
 * (counted in refused: a claimed seq 2^63 must not be a loss of everything
 * before it). An honest answer that overtakes the live stream comes in order,
 * and is taken; the live copies are then stale. The first answer later than
 * the seq asked for is a loss of the
 * batches in between. The timeout is not restarted: it bounds the whole
 * recovery. */
bool kvix__seqtrack_replay_want(kvix_seqtrack *t, uint64_t seq, uint64_t now);
/* The decoded replayed batch seq (after kvix__seqtrack_replay_want said yes):
 * delivered, after a loss of any seqs the replay skipped. item NULL: it could
 * not be decoded, a loss of that one batch. item: borrowed. */
void kvix__seqtrack_replayed(kvix_seqtrack *t, uint64_t seq, void *item);
/* The replay's end marker: the replay stops, the held batches are fed on
 * (a loss first if the replay did not reach them). Errors as _live. */
int kvix__seqtrack_replay_end(kvix_seqtrack *t, uint64_t now);
/* Give up a replay whose deadline has passed (now >= deadline): a loss of
 * everything from the next seq on; the held batches are fed on. Errors as
 * _live. */
int kvix__seqtrack_tick(kvix_seqtrack *t, uint64_t now);

/* Whether a replay runs; if so *deadline (may be NULL) is when it times out. */
bool kvix__seqtrack_replaying(const kvix_seqtrack *t, uint64_t *deadline);

#endif
