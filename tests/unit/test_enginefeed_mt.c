/* kvix_enginefeed's hold-back, as peer recovery uses it (kvindex --peers):
 * a feed started held takes nothing while the recovered state goes into the
 * index; released, its held batches are applied after that state, through
 * the sequence checks, in order. Each batch stores one block below the one
 * before, the first below the peer's block: a batch applied before the
 * peer's state, or out of order, would be refused (unknown parent). A real
 * publisher (kvix_enginepub) on loopback TCP; every wait is bounded and no
 * assertion depends on timing. Run under ThreadSanitizer too. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "harness.h"
#include "enginefeed.h"
#include "kvix/enginepub.h"
#include "kvix/hash.h"
#include "kvix/index.h"
#include "kvix/stream.h"
#include "kvix/wire.h"

/* libzmq is not instrumented (see test_enginesub_mt.c): a report with a
 * libzmq frame says nothing about kvix. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
    return "race:libzmq.so\n";
}

enum { BS = 4, K = 8 };

static void tokens_of(uint32_t k, uint32_t t[BS])
{
    for (uint32_t i = 0; i < BS; i++)
        t[i] = 1000 * k + i;
}

static uint64_t engine_hash(uint32_t k) { return UINT64_C(0xe000000000000000) + k; }

static uint64_t local_of(uint32_t k)
{
    uint32_t t[BS];
    tokens_of(k, t);
    return kvix_hash_local(t, BS, kvix_hash_lora_seed("", 0));
}

/* The engine's batch k: block k stored below block k - 1. */
static void batch(kvix_buf *out, uint32_t k)
{
    kvix_event ev;
    kvix_event_init(&ev);
    ev.type = KVIX_EV_STORED;
    ev.bs = BS;
    CHECK(kvix_event_reserve_blocks(&ev, 1, NULL) == KVIX_OK);
    CHECK(kvix_event_reserve_tokens(&ev, BS, NULL) == KVIX_OK);
    ev.nblocks = 1;
    ev.blocks[0].seq = engine_hash(k);
    ev.has_parent = 1;
    ev.parent = engine_hash(k - 1);
    ev.has_tokens = 1;
    tokens_of(k, ev.tokens);
    ev.ntokens = BS;
    const kvix_event *evs[1] = {&ev};
    out->len = 0;
    CHECK(kvix_wire_encode(evs, 1, 1.0, 0, KVIX_WIRE_MAP, out, NULL) == KVIX_OK);
    kvix_event_release(&ev);
}

static void pump(kvix_enginepub *p, int rounds)
{
    for (int i = 0; i < rounds; i++) {
        CHECK(kvix_enginepub_service(p, NULL) == KVIX_OK);
        usleep(10000);
    }
}

TEST(held_batches_apply_after_the_peer_state_in_order)
{
    kvix_index_opts io;
    kvix_index_opts_init(&io);
    kvix_index *idx = NULL;
    kvix_err err;
    CHECK(kvix_index_new(&idx, &io, &err) == KVIX_OK);
    void *zctx = zmq_ctx_new();
    kvix_enginepub *p = NULL;
    CHECK(kvix_enginepub_new(&p, zctx, "tcp://127.0.0.1:*", NULL, NULL, 0, &err) == KVIX_OK);

    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    kvix_enginefeed_opts fo = {.idx = idx, .write_mu = &mu};
    kvix_enginefeed *f = NULL;
    CHECK(kvix_enginefeed_new(&f, NULL, &fo, &err) == KVIX_OK);
    kvix_enginesub_spec sp;
    kvix_enginesub_spec_init(&sp);
    sp.worker = 1;
    snprintf(sp.endpoint, sizeof sp.endpoint, "%s", kvix_enginepub_endpoint(p));
    CHECK(kvix_enginesub_add(kvix_enginefeed_sub(f), &sp, 0, &err) == KVIX_OK);
    CHECK(kvix_enginefeed_start(f, true, &err) == KVIX_OK);

    /* connected while held: the engine sees its subscriber, then publishes */
    for (int i = 0; i < 1000 && kvix_enginepub_subscribers(p) == 0; i++)
        pump(p, 1);
    CHECK(kvix_enginepub_subscribers(p) > 0);
    kvix_buf b;
    kvix_buf_init(&b);
    for (uint32_t k = 1; k <= K; k++) {
        batch(&b, k);
        CHECK(kvix_enginepub_send(p, b.data, b.len, NULL, &err) == KVIX_OK);
    }
    pump(p, 30); /* the batches reach the feed's socket */
    kvix_enginefeed_counts c;
    kvix_enginefeed_counts_get(f, &c);
    CHECK_U64(c.sub.batches, 0); /* held: nothing taken */
    CHECK_U64(c.applied, 0);

    /* the peer's state, as recovery writes it: block 0, under write_mu */
    char line[256];
    snprintf(line, sizeof line,
             "{\"type\":\"stored\",\"worker\":1,\"dp\":0,\"model\":\"default\",\"bs\":%d,"
             "\"blocks\":[{\"local\":\"%016" PRIx64 "\",\"seq\":\"%016" PRIx64 "\"}]}",
             BS, local_of(0), engine_hash(0));
    kvix_event ev;
    kvix_event_init(&ev);
    CHECK(kvix_event_from_json(line, strlen(line), &ev, &err) == KVIX_OK);
    pthread_mutex_lock(&mu);
    CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
    pthread_mutex_unlock(&mu);
    kvix_event_release(&ev);

    kvix_enginefeed_release(f);
    for (int i = 0; i < 1000; i++) {
        kvix_enginefeed_counts_get(f, &c);
        if (c.applied + c.rejected >= K)
            break;
        pump(p, 1);
    }
    CHECK(kvix_enginefeed_stop(f, &err) == KVIX_OK);
    kvix_enginefeed_counts_get(f, &c);
    CHECK_U64(c.sub.batches, K);
    CHECK_U64(c.sub.seq.gaps, 0);
    CHECK_U64(c.applied, K);
    CHECK_U64(c.rejected, 0); /* none before the peer's block, none out of order */

    /* the whole chain, block 0 (the peer's) then 1..K (the engine's) */
    uint64_t local[K + 1];
    for (uint32_t k = 0; k <= K; k++)
        local[k] = local_of(k);
    kvix_answer ans;
    kvix_answer_init(&ans);
    CHECK(kvix_index_query(idx, "default", "default", local, K + 1, &ans, &err) == KVIX_OK);
    CHECK_U64(ans.nscores, 1);
    if (ans.nscores == 1) {
        CHECK_U64(ans.scores[0].worker, 1);
        CHECK_U64(ans.scores[0].blocks, K + 1);
        CHECK_U64(ans.scores[0].held, K + 1);
    }
    kvix_answer_release(&ans);
    kvix_buf_release(&b);
    kvix_enginefeed_free(f);
    kvix_enginepub_free(p, 0);
    zmq_ctx_term(zctx);
    kvix_index_free(idx);
}
