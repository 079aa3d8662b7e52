/* kvix: act as one engine's KV-event publisher (what kvreplay --pub runs per
 * (worker, dp)): the 3-frame messages [topic, seq 8B big-endian, payload] of
 * kvsub(1) (examples in tests/fixtures/vllm) on a bound socket, seq counting batches from 0,
 * and optionally vLLM's replay service: a bound ROUTER keeping the last
 * buffer_steps batches and answering ["", start_seq] requests with every
 * buffered batch from start_seq on as [identity, "", topic, seq8, payload]
 * (current vLLM), then the end marker [identity, "", topic, ff*8, ""].
 *
 * The publisher socket is an XPUB so it can tell when subscribers have
 * joined (ZMQ's slow joiner: a PUB drops what it sends before a subscriber
 * has connected). Not thread-safe: one thread drives a publisher. */
#ifndef KVIX_ENGINEPUB_H
#define KVIX_ENGINEPUB_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVIX_ENGINEPUB_HWM 100000          /* vLLM's send high-water mark */
#define KVIX_ENGINEPUB_BUFFER_DEFAULT 10000 /* vLLM's replay buffer_steps */
#define KVIX_ENGINEPUB_BUFFER_MAX 1000000
#define KVIX_ENGINEPUB_ENDPOINT_MAX 512

typedef struct kvix_enginepub kvix_enginepub;

/* Bind a publisher on endpoint (and a replay ROUTER on replay_endpoint when
 * non-NULL) in the ZMQ context zctx (not owned). A tcp port "*" or "0" binds
 * an ephemeral port: kvix_enginepub_endpoint tells which. topic may be NULL
 * (empty frame). buffer_steps: batches kept for replay (0 = default).
 * *out is owned by the caller: kvix_enginepub_free. KVIX_ESYS when ZMQ
 * fails (the message names the endpoint and ZMQ's reason). */
int kvix_enginepub_new(kvix_enginepub **out, void *zctx, const char *endpoint,
                       const char *replay_endpoint, const char *topic, size_t buffer_steps,
                       kvix_err *err);
/* How the replay service answers: [identity, "", topic, seq8, payload] as
 * vLLM 0.26+ (with_topic, the default), or [identity, "", seq8, payload] as
 * older vLLM and SGLang (kvix_wire_style_replay_topic). */
void kvix_enginepub_set_replay_topic(kvix_enginepub *p, int with_topic);

/* Close the sockets, waiting at most linger_ms for queued messages. */
void kvix_enginepub_free(kvix_enginepub *p, int linger_ms);

/* The endpoints actually bound (ephemeral ports resolved, "*" kept as ZMQ
 * reports it: 0.0.0.0). Owned by p. replay: NULL when there is none. */
const char *kvix_enginepub_endpoint(const kvix_enginepub *p);
const char *kvix_enginepub_replay_endpoint(const kvix_enginepub *p);

/* Send one batch payload with the next seq (returned in *seq when non-NULL)
 * and keep it for replay. As with vLLM, a subscriber whose queue is full
 * (KVIX_ENGINEPUB_HWM) silently loses the batch and later sees a seq gap. */
int kvix_enginepub_send(kvix_enginepub *p, const void *payload, size_t len, uint64_t *seq,
                        kvix_err *err);

/* Without blocking: take subscription notices and answer pending replay
 * requests. Call it between sends and while waiting. */
int kvix_enginepub_service(kvix_enginepub *p, kvix_err *err);

/* Subscribers currently joined (subscribe notices minus unsubscribes). */
unsigned kvix_enginepub_subscribers(const kvix_enginepub *p);
/* Replay requests answered so far. */
uint64_t kvix_enginepub_replays(const kvix_enginepub *p);

/* Sockets to poll for kvix_enginepub_service (ZMQ sockets; n gets 1 or 2). */
void kvix_enginepub_sockets(const kvix_enginepub *p, void *socks[2], int *n);

#ifdef __cplusplus
}
#endif
#endif
