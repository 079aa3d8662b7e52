/* kvix_enginepub: one engine's publisher as kvsub sees it, over ipc:// in a
 * scratch directory: subscribers counted, 3-frame messages with seq 0, 1, ...,
 * the replay ROUTER answering from a seq with a bounded buffer, and requests
 * that are not [identity, "", seq8] ignored. Every receive is bounded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "harness.h"
#include "kvix/enginepub.h"
#include "kvix/wire.h"

static void scratch(char *ep, size_t cap, const char *name)
{
    snprintf(ep, cap, "ipc://%s", th_path(name));
}

static uint64_t be64(const void *p)
{
    const unsigned char *b = p;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

/* Service the publisher until cond(p) or about 10 s. */
static int serve_until(kvix_enginepub *p, int (*cond)(kvix_enginepub *))
{
    for (int i = 0; i < 1000; i++) {
        CHECK(kvix_enginepub_service(p, NULL) == KVIX_OK);
        if (cond(p))
            return 1;
        usleep(10000);
    }
    return 0;
}

static int has_sub(kvix_enginepub *p)
{
    return kvix_enginepub_subscribers(p) > 0;
}

static int recv_frames(void *s, zmq_msg_t *fr, int max)
{
    zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 10000) <= 0)
        return 0;
    int n = 0, more = 1;
    while (more && n < max) {
        zmq_msg_init(&fr[n]);
        if (zmq_msg_recv(&fr[n], s, 0) < 0)
            break;
        more = zmq_msg_more(&fr[n]);
        n++;
    }
    return n;
}

static void close_frames(zmq_msg_t *fr, int n)
{
    for (int i = 0; i < n; i++)
        zmq_msg_close(&fr[i]);
}

TEST(publishes_engine_frames_and_counts_subscribers)
{
    void *ctx = zmq_ctx_new();
    char ep[128];
    scratch(ep, sizeof ep, "pub");
    kvix_enginepub *p;
    kvix_err err;
    CHECK(kvix_enginepub_new(&p, ctx, ep, NULL, "kv", 0, &err) == KVIX_OK);
    CHECK_STR(kvix_enginepub_endpoint(p), ep);
    CHECK(kvix_enginepub_replay_endpoint(p) == NULL);
    CHECK_U64(kvix_enginepub_subscribers(p), 0);
    void *sub = zmq_socket(ctx, ZMQ_SUB);
    int zero = 0;
    zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
    CHECK(zmq_connect(sub, ep) == 0);
    CHECK(serve_until(p, has_sub));
    CHECK_U64(kvix_enginepub_subscribers(p), 1);
    for (int i = 0; i < 3; i++) {
        uint64_t seq = 99;
        CHECK(kvix_enginepub_send(p, "abc", 3, &seq, NULL) == KVIX_OK);
        CHECK_U64(seq, (uint64_t)i);
    }
    for (int i = 0; i < 3; i++) {
        zmq_msg_t fr[4];
        int n = recv_frames(sub, fr, 4);
        CHECK_U64(n, 3);
        if (n == 3) {
            CHECK_U64(zmq_msg_size(&fr[0]), 2);
            CHECK(memcmp(zmq_msg_data(&fr[0]), "kv", 2) == 0);
            CHECK_U64(zmq_msg_size(&fr[1]), 8);
            CHECK_U64(be64(zmq_msg_data(&fr[1])), (uint64_t)i);
            CHECK_U64(zmq_msg_size(&fr[2]), 3);
        }
        close_frames(fr, n);
    }
    zmq_close(sub);
    kvix_enginepub_free(p, 0);
    zmq_ctx_term(ctx);
}

static int one_replay(kvix_enginepub *p)
{
    return kvix_enginepub_replays(p) >= 1;
}

static int two_replays(kvix_enginepub *p)
{
    return kvix_enginepub_replays(p) >= 2;
}

/* Ask for batches from start; returns how many came before the end marker
 * and the first seq in *first. */
static int ask(kvix_enginepub *p, void *dealer, uint64_t start, uint64_t *first,
               int (*done)(kvix_enginepub *))
{
    unsigned char s8[8];
    for (int i = 7; i >= 0; i--, start >>= 8)
        s8[i] = (unsigned char)start;
    zmq_send(dealer, "", 0, ZMQ_SNDMORE);
    zmq_send(dealer, s8, 8, 0);
    CHECK(serve_until(p, done));
    int got = 0;
    for (;;) {
        zmq_msg_t fr[5];
        int n = recv_frames(dealer, fr, 5);
        CHECK_U64(n, 4); /* "", topic, seq, payload */
        if (n != 4) {
            close_frames(fr, n);
            return -1;
        }
        uint64_t seq = be64(zmq_msg_data(&fr[2]));
        size_t len = zmq_msg_size(&fr[3]);
        close_frames(fr, n);
        if (seq == KVIX_WIRE_SEQ_END) {
            CHECK_U64(len, 0);
            return got;
        }
        if (got++ == 0)
            *first = seq;
    }
}

TEST(replay_from_a_seq_with_a_bounded_buffer)
{
    void *ctx = zmq_ctx_new();
    char ep[128], rep[128];
    scratch(ep, sizeof ep, "pub2");
    scratch(rep, sizeof rep, "replay2");
    kvix_enginepub *p;
    CHECK(kvix_enginepub_new(&p, ctx, ep, rep, NULL, 5, NULL) == KVIX_OK);
    CHECK_STR(kvix_enginepub_replay_endpoint(p), rep);
    for (int i = 0; i < 8; i++) /* no subscriber: dropped live, kept for replay */
        CHECK(kvix_enginepub_send(p, "x", 1, NULL, NULL) == KVIX_OK);

    void *d = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    CHECK(zmq_connect(d, rep) == 0);
    /* A malformed request (no empty delimiter, 3-byte seq) is ignored. */
    zmq_send(d, "abc", 3, 0);
    uint64_t first = 0;
    CHECK_U64(ask(p, d, 0, &first, one_replay), 5); /* seqs 3..7: the last five */
    CHECK_U64(first, 3);
    CHECK_U64(ask(p, d, 6, &first, two_replays), 2);
    CHECK_U64(first, 6);
    zmq_close(d);
    kvix_enginepub_free(p, 0);
    zmq_ctx_term(ctx);
}

TEST(bad_endpoints_and_limits)
{
    void *ctx = zmq_ctx_new();
    kvix_enginepub *p;
    kvix_err err;
    CHECK(kvix_enginepub_new(&p, ctx, "nonsense://x", NULL, NULL, 0, &err) == KVIX_ESYS);
    CHECK(strstr(err.msg, "nonsense://x") != NULL);
    char ep[128];
    scratch(ep, sizeof ep, "pub3");
    CHECK(kvix_enginepub_new(&p, ctx, ep, NULL, NULL, KVIX_ENGINEPUB_BUFFER_MAX + 1, &err) ==
          KVIX_ELIMIT);
    char topic[300];
    memset(topic, 't', sizeof topic - 1);
    topic[sizeof topic - 1] = '\0';
    CHECK(kvix_enginepub_new(&p, ctx, ep, NULL, topic, 0, &err) == KVIX_ELIMIT);
    /* an ephemeral tcp port is resolved */
    CHECK(kvix_enginepub_new(&p, ctx, "tcp://127.0.0.1:*", NULL, NULL, 0, &err) == KVIX_OK);
    CHECK(strncmp(kvix_enginepub_endpoint(p), "tcp://127.0.0.1:", 16) == 0);
    CHECK(strcmp(kvix_enginepub_endpoint(p), "tcp://127.0.0.1:*") != 0);
    kvix_enginepub_free(p, 0);
    kvix_enginepub_free(NULL, 0);
    zmq_ctx_term(ctx);
}
