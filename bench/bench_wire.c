/* bench_wire: the engine wire's costs.
 *
 *   bench_wire decode [-n BATCHES] [-e EVENTS] [-k BLOCKS] [-b BS] [-s map|array]
 *       kvix_wire_decode alone, then decode + NDJSON encoding (what kvsub does
 *       per batch), in this process: CPU ns per batch and per block.
 *   bench_wire pub ENDPOINT [same options]
 *       a publisher as fast as the subscriber takes it (XPUB, no drop: it
 *       blocks at the high-water mark instead), for bench/parts/50-kvsub.sh.
 *
 * Batches are vLLM map-style (or 12-element array) BlockStored events of
 * BLOCKS blocks each, with random tokens, built with the library's encoder;
 * a pool of 256 distinct payloads is cycled. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "cli.h"
#include "kvix/buf.h"
#include "kvix/event.h"
#include "kvix/stream.h"
#include "kvix/wire.h"

#define POOL 256

static size_t nbatches = 20000, nevents = 4, nblocks = 4, bs = 16;
static kvix_wire_style style = KVIX_WIRE_MAP;
static kvix_buf pool[POOL];

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

/* The decode loop is timed in CPU time: the machine is shared, and a wall
 * clock would count the time other processes held the core. */
static double cpu_now(void)
{
    return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

static void build_pool(void)
{
    uint64_t rng = 0x9e3779b97f4a7c15u;
    kvix_event *ev = calloc(nevents, sizeof *ev);
    const kvix_event **evp = calloc(nevents, sizeof *evp);
    kvix_err err;
    for (size_t p = 0; p < POOL; p++) {
        for (size_t e = 0; e < nevents; e++) {
            kvix_event *x = &ev[e];
            if (p == 0)
                kvix_event_init(x);
            kvix_event_reset(x);
            x->type = KVIX_EV_STORED;
            x->worker = 1;
            x->bs = (uint32_t)bs;
            if (kvix_event_reserve_blocks(x, nblocks, &err) ||
                kvix_event_reserve_tokens(x, nblocks * bs, &err)) {
                fprintf(stderr, "bench_wire: %s\n", err.msg);
                exit(1);
            }
            for (size_t i = 0; i < nblocks; i++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                x->blocks[i].seq = rng;
                x->blocks[i].local = 0;
            }
            for (size_t i = 0; i < nblocks * bs; i++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                x->tokens[i] = (uint32_t)(rng % 152000);
            }
            x->nblocks = nblocks;
            x->ntokens = nblocks * bs;
            x->has_tokens = 1;
            evp[e] = x;
        }
        kvix_buf_init(&pool[p]);
        if (kvix_wire_encode(evp, nevents, 1700000000.0 + (double)p, 0, style, &pool[p], &err)) {
            fprintf(stderr, "bench_wire: encode: %s\n", err.msg);
            exit(1);
        }
    }
    for (size_t e = 0; e < nevents; e++)
        kvix_event_release(&ev[e]);
    free(ev);
    free(evp);
}

typedef struct sink {
    kvix_buf *out;
    uint64_t blocks;
} sink;

static int count_fn(void *ctx, const kvix_event *ev)
{
    ((sink *)ctx)->blocks += ev->nblocks;
    return 0;
}

static int json_fn(void *ctx, const kvix_event *ev)
{
    sink *s = ctx;
    s->blocks += ev->nblocks;
    return kvix_event_to_json(ev, s->out, NULL);
}

static int run_decode(void)
{
    kvix_wire_source src = {1, 0, "llama", NULL, (uint32_t)bs, 0};
    kvix_buf out;
    kvix_buf_init(&out);
    size_t bytes = 0;
    for (size_t p = 0; p < POOL; p++)
        bytes += pool[p].len;
    for (int mode = 0; mode < 2; mode++) {
        sink s = {&out, 0};
        double t0 = cpu_now();
        for (size_t i = 0; i < nbatches; i++) {
            const kvix_buf *b = &pool[i % POOL];
            out.len = 0;
            kvix_err err;
            if (kvix_wire_decode(b->data, b->len, i, &src, mode ? json_fn : count_fn, &s, NULL,
                                 &err)) {
                fprintf(stderr, "bench_wire: decode: %s\n", err.msg);
                return 1;
            }
        }
        double dt = cpu_now() - t0;
        printf("%s batches=%zu blocks=%llu ns_per_batch=%.0f ns_per_block=%.1f mb_per_s=%.1f\n",
               mode ? "decode+json" : "decode", nbatches, (unsigned long long)s.blocks,
               dt * 1e9 / (double)nbatches, dt * 1e9 / (double)s.blocks,
               (double)bytes / POOL * (double)nbatches / dt / 1e6);
    }
    kvix_buf_release(&out);
    return 0;
}

static int run_pub(const char *endpoint)
{
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_XPUB);
    int one = 1, hwm = 100000, linger = 5000, tmo = 20000;
    zmq_setsockopt(s, ZMQ_XPUB_NODROP, &one, sizeof one);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    if (zmq_bind(s, endpoint) != 0) {
        fprintf(stderr, "bench_wire: bind %s: %s\n", endpoint, zmq_strerror(errno));
        return 1;
    }
    char sub[256];
    if (zmq_recv(s, sub, sizeof sub, 0) < 0) { /* a subscriber joined */
        fprintf(stderr, "bench_wire: no subscriber\n");
        return 1;
    }
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    printf("start=%ld.%06ld\n", (long)wall.tv_sec, wall.tv_nsec / 1000);
    fflush(stdout);
    double t0 = now();
    for (size_t i = 0; i < nbatches; i++) {
        unsigned char seq[8];
        for (int k = 0; k < 8; k++)
            seq[k] = (unsigned char)((uint64_t)i >> (56 - 8 * k));
        const kvix_buf *b = &pool[i % POOL];
        while (zmq_send(s, "", 0, ZMQ_SNDMORE) < 0 || zmq_send(s, seq, 8, ZMQ_SNDMORE) < 0 ||
               zmq_send(s, b->data, b->len, 0) < 0) {
            if (errno != EINTR && errno != EAGAIN) {
                fprintf(stderr, "bench_wire: send: %s\n", zmq_strerror(errno));
                return 1;
            }
        }
    }
    printf("sent batches=%zu blocks=%zu seconds=%.3f\n", nbatches, nbatches * nevents * nblocks,
           now() - t0);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return 0;
}

static const cli_tool tool = {.name = "bench_wire"}; /* messages only */

int main(int argc, char **argv)
{
    cli_init(&tool);
    if (argc < 2) {
        fprintf(stderr, "usage: bench_wire decode|pub [ENDPOINT] [-n N] [-e E] [-k K] [-b BS] "
                        "[-s map|array]\n");
        return 2;
    }
    const char *mode = argv[1], *endpoint = NULL;
    int i = 2;
    if (!strcmp(mode, "pub") && argc > 2)
        endpoint = argv[i++];
    for (; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "-n"))
            nbatches = cli_parse_uint(v, 1, UINT32_MAX, "-n");
        else if (!strcmp(o, "-e"))
            nevents = cli_parse_uint(v, 1, 65536, "-e");
        else if (!strcmp(o, "-k"))
            nblocks = cli_parse_uint(v, 1, 65536, "-k");
        else if (!strcmp(o, "-b"))
            bs = cli_parse_uint(v, 1, 65536, "-b");
        else if (!strcmp(o, "-s"))
            style = !strcmp(v, "array") ? KVIX_WIRE_ARRAY : KVIX_WIRE_MAP;
    }
    if (!nbatches || !nevents || !nblocks || !bs) {
        fprintf(stderr, "bench_wire: sizes must be positive\n");
        return 2;
    }
    build_pool();
    int rc = !strcmp(mode, "decode") ? run_decode()
             : endpoint             ? run_pub(endpoint)
                                    : 2;
    for (size_t p = 0; p < POOL; p++)
        kvix_buf_release(&pool[p]);
    return rc;
}
