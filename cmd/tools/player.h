/* kvix: the replay player (kvreplay): records in, in the order given,
 * filtered (cmd/tools/filter.h), paced (cmd/tools/pace.h) and either written to a
 * stream as NDJSON or msgpack records, or published as engines would on the
 * ZMQ wire (cmd/tools/pubset.h: a publisher per (worker, dp), bound before the
 * first batch, a bounded wait for subscribers, replay requests served while
 * waiting); --limit, --strict, and the counters of the report.
 *
 * Records come from logs (kvix_player_play_log: plain or compressed, read
 * through cmd/tools/logio.h), from a Mooncake trace (kvix_player_play_mooncake),
 * or one by one (kvix_player_emit). The library prints nothing: what a
 * person should hear of is said through opts.on_note; the caller's own
 * stop (a signal) is asked through opts.stopping. One thread. */
#ifndef KVIX_PLAYER_H
#define KVIX_PLAYER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kvix/error.h"
#include "kvix/event.h"
#include "filter.h"
#include "mooncake.h"
#include "pace.h"
#include "pubset.h"
#include "kvix/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvix_player kvix_player;

typedef enum kvix_player_note_kind {
    KVIX_PLAYER_FAR,          /* a record due past the pace's ceiling: sent at once */
    KVIX_PLAYER_UNWRITABLE,   /* a record could not be encoded (counted as rejected) */
    KVIX_PLAYER_UNPUBLISHED,  /* a batch could not be published (its events rejected) */
    KVIX_PLAYER_BOUND,        /* a publisher bound: "worker W dp D publishes on EP" */
    KVIX_PLAYER_UNSUBSCRIBED, /* publishers still without a subscriber after the wait */
    KVIX_PLAYER_HOLDING,      /* every batch sent, replay requests served a while */
    KVIX_PLAYER_REJECTED,     /* a record of a log that does not decode */
    KVIX_PLAYER_BAD_REQUEST,  /* a trace request that cannot be played */
} kvix_player_note_kind;

typedef struct kvix_player_note {
    int kind;        /* kvix_player_note_kind */
    const char *msg; /* lowercase, no full stop; borrowed for the call */
} kvix_player_note;

/* Why the player stopped taking records. */
typedef enum kvix_player_end {
    KVIX_PLAYER_PLAYING = 0,
    KVIX_PLAYER_LIMIT,       /* opts.limit records written */
    KVIX_PLAYER_CLOSED,      /* the output's reader went away (EPIPE) */
    KVIX_PLAYER_STRICT,      /* opts.strict and a record was rejected */
    KVIX_PLAYER_WRITE_ERROR, /* writing the output failed (kvix_player_error) */
    KVIX_PLAYER_FAILED,      /* a publisher could not be bound, a socket failed, out of
                              * memory (kvix_player_error) */
} kvix_player_end;

typedef struct kvix_player_opts {
    kvix_format fmt;        /* KVIX_FMT_NDJSON or KVIX_FMT_MSGPACK records to out */
    FILE *out;              /* borrowed: where records go when not published */
    kvix_pace_mode timing;
    double factor;          /* speed (KVIX_PACE_RECORDED) or records a second (KVIX_PACE_RATE) */
    kvix_filter filter;     /* copied: kvix_player_filter has its hits */
    uint64_t limit;         /* stop after this many written; 0: never */
    bool strict;            /* stop at the first rejected record */
    /* Non-NULL: publish as engines (copied); records are then read twice
     * (kvix_player_play_log's scan binds the publishers). */
    const kvix_pubset_config *pub;
    double pub_wait;        /* seconds to wait for every publisher's subscriber */
    double pub_hold;        /* seconds to serve replay requests after the last batch */
    int (*stopping)(void *ctx);                            /* optional: stop at once */
    void (*on_note)(void *ctx, const kvix_player_note *n); /* optional */
    void (*on_record)(void *ctx);                          /* optional: after each record in */
    void *ctx;
} kvix_player_opts;

typedef struct kvix_player_counts {
    uint64_t in;            /* records read */
    uint64_t kept;          /* past the filters */
    uint64_t filtered;      /* dropped by the filters */
    uint64_t written;       /* written or published */
    uint64_t by_type[KVIX_EV_QUERY + 1]; /* written, by type */
    uint64_t rejected;      /* records that could not be read, written or published */
    uint64_t pub_skipped;   /* queries not published */
    uint64_t batches;       /* batches published */
    size_t publishers;      /* publishers bound */
} kvix_player_counts;

/* opts copied (its pointers borrowed). With opts.pub the publishers' set is
 * made (endpoints checked: KVIX_EINVAL / KVIX_ERANGE for a bad base).
 * *out owned by the caller: kvix_player_free. */
int kvix_player_new(kvix_player **out, const kvix_player_opts *opts, kvix_err *err);
/* Stops the publishers (bounded) if still there. NULL is fine. */
void kvix_player_free(kvix_player *p);

/* Bind the publisher of (worker, dp) now (said with KVIX_PLAYER_BOUND the
 * first time); one of a worker the filters drop is not bound. */
int kvix_player_bind(kvix_player *p, uint64_t worker, uint32_t dp, kvix_err *err);
/* Every publisher bound: the map file made whole, then the bounded wait for
 * subscribers (replay requests served meanwhile). */
int kvix_player_start(kvix_player *p, kvix_err *err);
/* After the last record: the pending batch published, replay requests
 * served opts.pub_hold seconds, the publishers freed (bounded). */
void kvix_player_finish(kvix_player *p);

/* One record in: filtered, paced, written or published. Returns nonzero
 * when the player stopped (kvix_player_end says why). ctx: the player, so
 * that it fits kvix_mooncake_step. */
int kvix_player_emit(void *ctx, const kvix_event *ev);

/* A log read from fd (the player's from now on: closed, even on failure;
 * plain or compressed) to its end, its records emitted; name is for notes and errors. scan: only bind the
 * publishers of the log's events (first pass of a publishing replay),
 * rejections not said. Returns KVIX_OK (also when the player stopped),
 * else an error with err's message ready to print (a read or
 * decompression failure). */
int kvix_player_play_log(kvix_player *p, int fd, const char *name, bool scan, kvix_err *err);

/* A Mooncake trace read from fd (closed, as above), played by m: each request's
 * events emitted; opts.limit counts requests here. Returns as
 * kvix_player_play_log. */
int kvix_player_play_mooncake(kvix_player *p, kvix_mooncake *m, int fd, const char *name,
                              kvix_err *err);

kvix_player_end kvix_player_ended(const kvix_player *p);
/* With KVIX_PLAYER_WRITE_ERROR and KVIX_PLAYER_FAILED: what failed. */
const kvix_err *kvix_player_error(const kvix_player *p);
void kvix_player_counts_get(const kvix_player *p, kvix_player_counts *c);
/* The filters, with their hits. Borrowed. */
const kvix_filter *kvix_player_filter(const kvix_player *p);
/* Seconds since the first record was due (kvix_pace_elapsed). */
double kvix_player_elapsed(const kvix_player *p);

#ifdef __cplusplus
}
#endif
#endif
