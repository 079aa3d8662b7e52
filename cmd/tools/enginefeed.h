/* kvix: engine subscriptions feeding an index in-process (kvindex -w,
 * --workers-file, POST /register): the glue between kvix/enginesub.h and
 * kvix/index.h.
 *
 * A kvix_enginefeed owns a kvix_enginesub and the poll thread that drives
 * it; every event the subscriber delivers is applied to the index on that
 * thread, so a feed ingests exactly what `kvsub ... | kvindex` would: the
 * engines' batches in sequence order per subscription, gaps asked for again
 * from the replay endpoint, and the subscriber's own clears of every (worker,
 * dp) of a subscription that lost batches, whose engine restarted, or that
 * was removed (kvix_enginesub_remove_worker: POST /unregister; a removed
 * subscription's (worker, dp) are forgotten, their last eid too:
 * kvix_index_forget_worker).
 *
 * Writers. The index allows concurrent writers only for different workers,
 * and one submitting thread: the feed takes opts.write_mu (when given)
 * around each apply, and every other writer of the index (the tool's stdin
 * loop) must take it too, so the same worker fed from both is never written
 * by two threads. With opts.svc, each apply is also inside
 * the index's gate (kvix_index_write_begin/_end) and counted for /metrics.
 *
 * Hold-back (peer recovery): kvix_enginefeed_start with hold opens the
 * sockets and starts the thread, which takes nothing until
 * kvix_enginefeed_release: the engines' messages wait in the sockets
 * (their high-water mark is the engines' own, 100000 messages), then drain
 * through the sequence checks. */
#ifndef KVIX_ENGINEFEED_H
#define KVIX_ENGINEFEED_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvix/enginesub.h"
#include "kvix/error.h"
#include "kvix/index.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvix_service;
typedef struct kvix_enginefeed kvix_enginefeed;

typedef struct kvix_enginefeed_opts {
    kvix_index *idx;             /* borrowed; outlives the feed */
    struct kvix_service *svc;    /* borrowed, optional: write lock and event counters */
    pthread_mutex_t *write_mu;   /* borrowed, optional: shared with the index's other writers */
    bool submit;                 /* the index has a writer pool: kvix_index_submit, with the
                                  * tag below (its rejections reach the index's on_reject) */
    uint64_t (*tag)(void *ctx, const kvix_event *ev); /* submit's tag; NULL: 0 */
    /* An event the index refused on the feed's thread (not with submit). */
    void (*on_reject)(void *ctx, const kvix_event *ev, const kvix_err *err);
    /* The subscriber's notes (losses, restarts, removals, bad input), on the
     * feed's thread. Optional. */
    void (*on_note)(void *ctx, const kvix_enginesub_note *n);
    /* Before each step, on the feed's thread: the tool's housekeeping of
     * the subscriptions (a workers file read again). Optional. */
    void (*on_step)(void *ctx);
    /* After each event applied (or submitted), on the feed's thread, with
     * the feed's count so far (kvix_enginefeed_counts.applied): a tool's
     * save every N events from every source. Optional. */
    void (*on_applied)(void *ctx, uint64_t applied);
    /* The thread stopped on an error it cannot go on from (KVIX_ENOMEM,
     * KVIX_ESYS; kvix_enginefeed_stop returns it): once, on the feed's
     * thread, as its last act. Without it nobody would know until the stop
     * that no engine's events are applied any more. Optional. */
    void (*on_failed)(void *ctx, const kvix_err *err);
    void *ctx;
} kvix_enginefeed_opts;

/* cfg and opts copied. *out owned by the caller: kvix_enginefeed_free. */
int kvix_enginefeed_new(kvix_enginefeed **out, const kvix_enginesub_config *cfg,
                        const kvix_enginefeed_opts *opts, kvix_err *err);

/* Set opts.svc after the fact (a service made with this feed in its own
 * opts). Before start. */
void kvix_enginefeed_attach(kvix_enginefeed *f, struct kvix_service *svc);

/* The subscriber, for kvix_enginesub_add / _remove_worker / _replace /
 * _list / _counts_get (any thread) and, before start, _resume. Borrowed. */
kvix_enginesub *kvix_enginefeed_sub(kvix_enginefeed *f);
/* The subscriber's configuration (the defaults of specs). Borrowed. */
const kvix_enginesub_config *kvix_enginefeed_config(const kvix_enginefeed *f);

/* Start each (model, tenant, worker, dp) the index holds an eid for (a
 * snapshot loaded) after that eid, as kvsub --resume does
 * (kvix_enginesub_resume_index): a batch missed meanwhile is replayed, or is
 * a loss that clears the worker. The index must be quiet; before start.
 * KVIX_ENOMEM. */
int kvix_enginefeed_resume(kvix_enginefeed *f, kvix_err *err);

/* Open the subscriptions added so far (the first failure is returned, that
 * subscription dropped; see kvix_enginesub_apply) and start the feed's
 * thread; with hold, it takes nothing until kvix_enginefeed_release. A
 * socket failure does not stop the start: the caller decides. KVIX_ESYS
 * when the thread cannot start (nothing runs then). */
int kvix_enginefeed_start(kvix_enginefeed *f, bool hold, kvix_err *err);
/* Let a held feed take its messages. Any thread; idempotent. */
void kvix_enginefeed_release(kvix_enginefeed *f);
/* Apply nothing more: every event the subscriptions deliver from now on is
 * dropped, uncounted, and the thread stops stepping (a tool's --strict: it
 * stops at the first refused event and saves what it had, as it stops
 * reading its input). Any thread, the callbacks included; idempotent. */
void kvix_enginefeed_halt(kvix_enginefeed *f);
/* Stop the thread (after the step in progress) and join it. Idempotent.
 * Returns the error that stopped it early (KVIX_ESYS, KVIX_ENOMEM: err
 * says why), or KVIX_OK. */
int kvix_enginefeed_stop(kvix_enginefeed *f, kvix_err *err);
/* Stops if needed, closes the subscriptions. NULL is fine. */
void kvix_enginefeed_free(kvix_enginefeed *f);

typedef struct kvix_enginefeed_counts {
    uint64_t applied;  /* events the feed applied (or submitted) */
    uint64_t rejected; /* events the index refused on the feed's thread */
    kvix_enginesub_counts sub;
} kvix_enginefeed_counts;

/* Any thread. */
void kvix_enginefeed_counts_get(kvix_enginefeed *f, kvix_enginefeed_counts *out);

#ifdef __cplusplus
}
#endif
#endif
