/* kvix: a fleet of engine publishers, as kvreplay --pub runs it: one
 * kvix_enginepub per (worker, dp), their endpoints derived from one base, a
 * workers file (the map, kvix_enginesub_file_write's format) telling
 * subscribers where each publishes, and events grouped into engine batches
 * encoded on the wire (kvix_wire_encode).
 *
 * Endpoints: the k-th publisher bound (k from 0, in the order of
 * kvix_pubset_add) gets, from a base tcp://HOST:PORT, port PORT+k (a port "*"
 * or "0" stays ephemeral for each), and from a base ipc://PATH the path
 * PATH-WORKER-DP. Not thread-safe: one thread drives a set. */
#ifndef KVIX_PUBSET_H
#define KVIX_PUBSET_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/error.h"
#include "kvix/event.h"
#include "kvix/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVIX_PUBSET_BATCH_MAX 1024 /* events in one engine batch */

typedef struct kvix_pubset kvix_pubset;

typedef struct kvix_pubset_config {
    const char *pub;      /* base of the publishers' endpoints (required) */
    const char *replay;   /* base of their replay ROUTERs; NULL: none */
    const char *topic;    /* NULL: an empty topic frame */
    size_t replay_buffer; /* batches kept for replay; 0: vLLM's default */
    kvix_wire_style wire;
    const char *map_file; /* NULL: none */
    double map_every;     /* seconds between two writes of a growing map */
} kvix_pubset_config;

/* Defaults: no replay, no topic, the map-style wire, map_every 0.2 s. */
void kvix_pubset_config_init(kvix_pubset_config *cfg);

/* Check the bases (KVIX_EINVAL: neither tcp://HOST:PORT nor ipc://PATH, or a
 * bad port) and make the ZMQ context (KVIX_ESYS). The strings of cfg are
 * borrowed: they must outlive the set. *out is owned by the caller:
 * kvix_pubset_free. */
int kvix_pubset_new(kvix_pubset **out, const kvix_pubset_config *cfg, kvix_err *err);
/* Close every publisher (waiting at most linger_ms each for queued messages)
 * and the context. Accepts NULL. */
void kvix_pubset_free(kvix_pubset *ps, int linger_ms);

/* Bind the publisher of (worker, dp) unless it has one. Returns 1 when bound
 * now (*endpoint, when non-NULL, gets the endpoint bound, owned by ps), 0 when
 * it had one, or an error: KVIX_ERANGE (tcp ports past 65535), KVIX_ESYS
 * (ZMQ), KVIX_ENOMEM. With a map file, the map follows the binding: written
 * with the first publisher, then at most every map_every s (KVIX_EIO, or
 * KVIX_ELIMIT for an endpoint too long for the file). */
int kvix_pubset_add(kvix_pubset *ps, uint64_t worker, uint32_t dp, const char **endpoint,
                    kvix_err *err);
/* Write the map file whole now, if there is one and it lags the binding. */
int kvix_pubset_map_sync(kvix_pubset *ps, kvix_err *err);

/* Publishers bound; those that have no subscriber yet. */
size_t kvix_pubset_count(const kvix_pubset *ps);
size_t kvix_pubset_unsubscribed(const kvix_pubset *ps);

/* Take subscription notices and answer replay requests, then wait at most
 * timeout_ms (0: not at all) for more of them; a signal ends the wait. */
int kvix_pubset_serve(kvix_pubset *ps, int timeout_ms, kvix_err *err);

/* Whether ev would go in the pending batch: events of one (worker, dp)
 * sharing an eid were one engine batch. When it would not, the caller
 * flushes (and may pace) before kvix_pubset_push. */
int kvix_pubset_continues(const kvix_pubset *ps, const kvix_event *ev);
/* Copy ev into the pending batch; KVIX_EINVAL when it would not go in (the
 * caller flushes first). */
int kvix_pubset_push(kvix_pubset *ps, const kvix_event *ev, kvix_err *err);
/* The pending batch (owned by ps, valid until the next push or flush). */
const kvix_event *kvix_pubset_pending(const kvix_pubset *ps, size_t *n);
/* Encode the pending batch and send it on its publisher; the batch is
 * emptied either way. A batch without ts gets the time of sending, as an
 * engine would stamp it. Errors: KVIX_ENOTFOUND (no publisher for its
 * (worker, dp)), the encoder's (the batch is dropped), KVIX_ESYS. */
int kvix_pubset_flush(kvix_pubset *ps, kvix_err *err);
/* Batches sent so far. */
uint64_t kvix_pubset_batches(const kvix_pubset *ps);

#ifdef __cplusplus
}
#endif
#endif
