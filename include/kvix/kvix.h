/* kvix: the whole embedding API of libkvix in one include (kvix(3)).
 *
 *     #include <kvix/kvix.h>
 *     cc router.c $(pkg-config --cflags --libs kvix)
 *
 * THE HASH SEED. Every local block hash is seeded: KVIX_HASH_SEED (1337) is
 * the seed of engines' and NVIDIA Dynamo's router's hashes without LoRA, and
 * kvix_hash_lora_seed(name, len) gives the seed of a LoRA adapter. Hash a
 * prompt with another seed (0, say, or without the adapter's name) and every
 * query silently misses: nothing fails, nothing matches.
 *
 * What is here, one header per module (each function's comment says who owns
 * what; _init/_release/_free mean one thing everywhere, and free accepts NULL):
 *   kvix/error.h     statuses and kvix_err: the library never prints or exits
 *   kvix/buf.h       growable byte buffers the encoders write into
 *   kvix/hash.h      block hashing (local, rolling sequence, positional)
 *   kvix/event.h     events and queries in memory
 *   kvix/answer.h    a query's answer: scores per (worker, dp)
 *   kvix/stream.h    records as NDJSON or msgpack, answers, a record reader
 *   kvix/tokens.h    kvhash's token lines
 *   kvix/wire.h      the engines' ZMQ payloads (vLLM, SGLang), both ways
 *   kvix/index.h     the index: apply events, answer queries, concurrently
 *   kvix/snapshot*.h snapshot files: save, load, verify, stats, diff
 * The network layer (engine subscriptions, NATS, peers, the HTTP service) is
 * libkvix-net, with headers of its own (pkg-config kvix-net). */
#ifndef KVIX_KVIX_H
#define KVIX_KVIX_H

#include "kvix/error.h"
#include "kvix/buf.h"
#include "kvix/hash.h"
#include "kvix/event.h"
#include "kvix/answer.h"
#include "kvix/stream.h"
#include "kvix/tokens.h"
#include "kvix/wire.h"
#include "kvix/index.h"
#include "kvix/snapshot.h"
#include "kvix/snapshot_diff.h"
#include "kvix/snapshot_stats.h"

#endif
