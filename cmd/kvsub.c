/* kvsub: subscribe to inference engines' KV-event streams (vLLM, SGLang over
 * ZMQ, see kvsub(1) and tests/fixtures/vllm) and print kvix events on stdout.
 *
 * One SUB socket per endpoint. Each (worker, dp) has a sequence tracker:
 * batches are applied in seq order; a gap asks the worker's replay endpoint
 * (a DEALER to the engine's ROUTER) for the missing batches while later live
 * batches wait in a bounded buffer. What cannot be recovered (no replay
 * endpoint, a replay buffer that no longer holds the gap, a timeout, an
 * engine restart) becomes a `cleared` event for that worker and dp, so the
 * index downstream never keeps blocks it cannot vouch for. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "cli.h"
#include "kvix/buf.h"
#include "kvix/event.h"
#include "kvix/seqtrack.h"
#include "kvix/stream.h"
#include "kvix/wire.h"

enum {
    O_REPLAY = 0x100,
    O_TOPIC,
    O_BIND,
    O_WORKERS_FILE,
    O_TOKENS,
    O_REPLAY_TIMEOUT,
    O_REPLAY_BUFFER,
};

static const cli_opt options[] = {
    {'w', 'w', "worker", "ID[:DP]=ENDPOINT", NULL,
     "subscribe to a worker's event endpoint (repeatable)"},
    {O_REPLAY, 0, "replay", "ID[:DP]=ENDPOINT", NULL,
     "replay endpoint of a worker and rank, asked for missed batches (repeatable)"},
    {'m', 'm', "model", "NAME", NULL, "model name of the events (default \"default\")"},
    {'t', 't', "tenant", "NAME", NULL, "tenant of the events (default \"default\")"},
    {'b', 'b', "block-size", "N", NULL,
     "configured block size; smaller (partial) blocks are skipped (default: each event's)"},
    {O_TOPIC, 0, "topic", "PREFIX", NULL, "subscribe to topics starting with PREFIX (default all)"},
    {O_BIND, 0, "bind", NULL, NULL, "bind the endpoints instead of connecting (engines connect)"},
    {'f', 'f', "format", "FMT", "ndjson|msgpack", "output format (default ndjson)"},
    {O_WORKERS_FILE, 0, "workers-file", "FILE", "file",
     "read ID[:DP]=ENDPOINT [replay=ENDPOINT] lines from FILE; re-read on SIGHUP"},
    {O_TOKENS, 0, "tokens", NULL, NULL, "keep each stored block's token ids in the events"},
    {O_REPLAY_TIMEOUT, 0, "replay-timeout", "MS", NULL,
     "give up a replay after MS milliseconds (default 5000)"},
    {O_REPLAY_BUFFER, 0, "replay-buffer", "N", NULL,
     "live batches held per worker while a replay runs (default 10000)"},
    {0, 0, NULL, NULL, NULL, NULL},
};

static const cli_tool tool = {
    .name = "kvsub",
    .usage = "-w ID[:DP]=ENDPOINT [-w ...] [options]",
    .summary = "subscribe to engines' kv-cache event streams and print kvix events",
    .opts = options,
    .operands = NULL,
};

#define SEQ_FRAME 8
#define DRAIN_MAX 256     /* messages taken from one socket before looking at the others */
#define WARN_MAX 20       /* warnings of one kind before they are only counted */
#define RECONNECT_MS 100
#define RECONNECT_MAX_MS 2000
#define RCVHWM 100000     /* the engines' own high-water mark */
#define TRACKERS_MAX 4096 /* (worker, dp) pairs: a payload's rank is untrusted input */

/* ---- state ---------------------------------------------------------------- */

typedef struct endpoint {
    uint64_t worker;
    uint32_t dp;
    char *url;
    char *replay;       /* from a workers-file line, may be NULL */
    void *sub;
    bool from_file, keep;
} endpoint;

typedef struct replay_ep {
    uint64_t worker;
    uint32_t dp;
    char *url;
} replay_ep;

/* One decoded batch, as output bytes. */
typedef struct batch {
    uint64_t seq;
    uint32_t dp;
    char *data;
    size_t len;
    uint64_t nev[4]; /* events by kvix_event_type */
} batch;

/* One (worker, dp) stream: its sequence tracker (kvix/seqtrack.h) and the
 * replay DEALER the tracker asked for, if any. */
typedef struct tracker {
    uint64_t worker;
    uint32_t dp;
    endpoint *ep;       /* where its batches come from (for the source registration) */
    void *dealer;
    kvix_seqtrack st;
} tracker;

typedef struct counters {
    uint64_t batches, events[4], synth_cleared, decode_errors, bad_frames, partial_blocks,
        unknown_events, dropped;
    kvix_seqtrack_counts gone; /* of the trackers freed */
} counters;

static struct {
    const char *model, *tenant, *topic, *workers_file;
    uint32_t block_size;
    int keep_tokens, bind;
    kvix_format fmt;
    long replay_timeout_ms;
    size_t replay_buffer;
    void *zctx;
    endpoint **eps;
    size_t neps;
    replay_ep *reps;
    size_t nreps;
    tracker **trk;
    size_t ntrk;
    kvix_buf scratch, out1;
    counters c;
    bool out_broken;
    unsigned warned_frames, warned_decode;
} S;

static volatile sig_atomic_t sig_stop, sig_hup, sig_usr1;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        sig_hup = 1;
    else if (sig == SIGUSR1)
        sig_usr1 = 1;
    else
        sig_stop = 1;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    return q;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    return d;
}

/* The trackers fail only when holding a batch cannot allocate. */
static void seq_ok(int rc)
{
    if (rc != KVIX_OK)
        cli_die(KVIX_EXIT_SYS, "out of memory");
}

/* The trackers' clock: CLOCK_MONOTONIC in milliseconds. */
static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- output --------------------------------------------------------------- */

static void out_write(const void *p, size_t n)
{
    if (S.out_broken || n == 0)
        return;
    if (fwrite(p, 1, n, stdout) != n) {
        if (errno == EPIPE) {
            S.out_broken = true; /* the reader left: a clean stop */
            sig_stop = 1;
            return;
        }
        cli_die(KVIX_EXIT_IO, "error writing standard output: %s", strerror(errno));
    }
}

static void out_flush(void)
{
    if (S.out_broken)
        return;
    if (fflush(stdout) != 0) {
        if (errno == EPIPE) {
            S.out_broken = true;
            sig_stop = 1;
            return;
        }
        cli_die(KVIX_EXIT_IO, "error writing standard output: %s", strerror(errno));
    }
}

static int emit_event(kvix_buf *b, const kvix_event *ev, kvix_err *err)
{
    return S.fmt == KVIX_FMT_MSGPACK ? kvix_event_to_msgpack(ev, b, err)
                                     : kvix_event_to_json(ev, b, err);
}

/* A `cleared` of our own: the worker's state can no longer be vouched for. */
static void emit_cleared(const tracker *t)
{
    kvix_event ev;
    kvix_event_init(&ev);
    ev.type = KVIX_EV_CLEARED;
    ev.worker = t->worker;
    ev.dp = t->dp;
    if (S.model)
        kvix_event_set_name(ev.model, S.model, strlen(S.model), NULL);
    if (S.tenant)
        kvix_event_set_name(ev.tenant, S.tenant, strlen(S.tenant), NULL);
    S.out1.len = 0;
    kvix_err err;
    if (emit_event(&S.out1, &ev, &err) == KVIX_OK)
        out_write(S.out1.data, S.out1.len);
    kvix_event_release(&ev);
    S.c.synth_cleared++;
}

/* ---- decoding ------------------------------------------------------------- */

typedef struct dctx {
    kvix_buf *out;
    uint64_t nev[4];
} dctx;

static int on_event(void *ctx, const kvix_event *ev)
{
    dctx *d = ctx;
    kvix_err err;
    int rc = emit_event(d->out, ev, &err);
    if (rc == KVIX_OK && ev->type >= 0 && ev->type < 4)
        d->nev[ev->type]++;
    return rc;
}

static kvix_wire_source source_of(const endpoint *ep)
{
    kvix_wire_source src = {ep->worker, ep->dp, S.model, S.tenant, S.block_size, S.keep_tokens};
    return src;
}

/* Decode payload into *b (its bytes in S.scratch). false: rejected, counted. */
static bool decode(const endpoint *ep, uint64_t seq, const void *p, size_t n, batch *b,
                   const char *from)
{
    kvix_wire_source src = source_of(ep);
    kvix_wire_counts cnt = {0, 0, ep->dp};
    dctx d = {&S.scratch, {0, 0, 0, 0}};
    kvix_err err = {0, ""};
    S.scratch.len = 0;
    int rc = kvix_wire_decode(p, n, seq, &src, on_event, &d, &cnt, &err);
    if (rc != KVIX_OK) {
        S.c.decode_errors++;
        if (S.warned_decode++ < WARN_MAX)
            cli_warn("bad batch %" PRIu64 " from worker %" PRIu64 " (%s %s): %s", seq, ep->worker,
                     from, ep->url, err.msg);
        return false;
    }
    S.c.partial_blocks += cnt.partial_blocks;
    S.c.unknown_events += cnt.unknown_events;
    b->seq = seq;
    b->dp = cnt.dp;
    b->data = S.scratch.data;
    b->len = S.scratch.len;
    memcpy(b->nev, d.nev, sizeof b->nev);
    return true;
}

/* ---- the trackers' callbacks ---------------------------------------------- */

static const char *replay_url(uint64_t worker, uint32_t dp)
{
    for (size_t i = 0; i < S.nreps; i++)
        if (S.reps[i].worker == worker && S.reps[i].dp == dp)
            return S.reps[i].url;
    for (size_t i = 0; i < S.neps; i++)
        if (S.eps[i]->replay && S.eps[i]->worker == worker && S.eps[i]->dp == dp)
            return S.eps[i]->replay;
    return NULL;
}

static void put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static uint64_t get_be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void cb_deliver(void *ctx, uint64_t seq, void *item)
{
    const batch *b = item;
    (void)ctx;
    (void)seq;
    out_write(b->data, b->len);
    S.c.batches++;
    for (int i = 0; i < 4; i++)
        S.c.events[i] += b->nev[i];
}

/* Ask for every batch from `from` on. -1: it could not even be asked. */
static int cb_replay_start(void *ctx, uint64_t from)
{
    tracker *t = ctx;
    const char *url = replay_url(t->worker, t->dp);
    if (!url)
        return -1;
    void *d = zmq_socket(S.zctx, ZMQ_DEALER);
    int zero = 0;
    if (!d)
        return -1;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(d, url) != 0) {
        cli_warn("worker %" PRIu64 " dp %" PRIu32 ": cannot connect to replay endpoint %s: %s",
                 t->worker, t->dp, url, zmq_strerror(errno));
        zmq_close(d);
        return -1;
    }
    unsigned char seq[SEQ_FRAME];
    put_be64(seq, from);
    if (zmq_send(d, "", 0, ZMQ_SNDMORE) < 0 || zmq_send(d, seq, sizeof seq, 0) < 0) {
        zmq_close(d);
        return -1;
    }
    t->dealer = d;
    return 0;
}

static void cb_replay_stop(void *ctx)
{
    tracker *t = ctx;
    if (t->dealer)
        zmq_close(t->dealer);
    t->dealer = NULL;
}

static const char *const loss_why[] = {
    [KVIX_SEQTRACK_NO_REPLAY] = "no replay endpoint",
    [KVIX_SEQTRACK_REPLAY_LATER] = "the replay buffer starts later",
    [KVIX_SEQTRACK_REPLAY_SHORT] = "not in the replay buffer",
    [KVIX_SEQTRACK_REPLAY_MISSING] = "missing from the replay",
    [KVIX_SEQTRACK_UNDECODABLE] = "undecodable batch",
    [KVIX_SEQTRACK_TIMEOUT] = "replay timed out",
    [KVIX_SEQTRACK_OVERFLOW] = "replay buffer of kvsub full",
    [KVIX_SEQTRACK_RESTART_MISSED] = "missed at the restart, no replay endpoint",
};

static void cb_cleared(void *ctx, const kvix_seqtrack_clear *c)
{
    const tracker *t = ctx;
    if (c->why == KVIX_SEQTRACK_EPOCH)
        cli_warn("worker %" PRIu64 " dp %" PRIu32 ": new epoch in the topic at seq %" PRIu64
                 ": engine restarted, cleared",
                 t->worker, t->dp, c->seq);
    else if (c->why == KVIX_SEQTRACK_RESTART)
        cli_warn("worker %" PRIu64 " dp %" PRIu32 ": seq %" PRIu64 " after %" PRIu64
                 ": engine restarted, cleared",
                 t->worker, t->dp, c->seq, c->prev);
    else if (c->to == UINT64_MAX)
        cli_warn("worker %" PRIu64 " dp %" PRIu32 ": batches from %" PRIu64 " lost (%s): cleared",
                 t->worker, t->dp, c->from, loss_why[c->why]);
    else
        cli_warn("worker %" PRIu64 " dp %" PRIu32 ": batches %" PRIu64 "..%" PRIu64
                 " lost (%s): cleared",
                 t->worker, t->dp, c->from, c->to, loss_why[c->why]);
    emit_cleared(t);
}

/* A copy of a live batch held during a replay (its bytes are in S.scratch). */
static void *cb_hold(void *ctx, void *item)
{
    const batch *b = item;
    (void)ctx;
    batch *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    *c = *b;
    c->data = malloc(b->len ? b->len : 1);
    if (!c->data) {
        free(c);
        return NULL;
    }
    memcpy(c->data, b->data, b->len);
    return c;
}

static void cb_release(void *ctx, void *item)
{
    batch *b = item;
    (void)ctx;
    free(b->data);
    free(b);
}

static const kvix_seqtrack_ops tracker_ops = {
    cb_deliver, cb_replay_start, cb_replay_stop, cb_cleared, cb_hold, cb_release,
};

/* ---- trackers ------------------------------------------------------------- */

static tracker *tracker_get(endpoint *ep, uint32_t dp)
{
    for (size_t i = 0; i < S.ntrk; i++)
        if (S.trk[i]->worker == ep->worker && S.trk[i]->dp == dp)
            return S.trk[i];
    if (S.ntrk == TRACKERS_MAX)
        return NULL;
    tracker *t = calloc(1, sizeof *t);
    if (!t)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    t->worker = ep->worker;
    t->dp = dp;
    t->ep = ep;
    kvix_seqtrack_config cfg = {S.replay_buffer, (uint64_t)S.replay_timeout_ms};
    kvix_seqtrack_init(&t->st, &cfg, &tracker_ops, t);
    S.trk = xrealloc(S.trk, (S.ntrk + 1) * sizeof *S.trk);
    S.trk[S.ntrk++] = t;
    return t;
}

static void counts_add(kvix_seqtrack_counts *a, const kvix_seqtrack_counts *b)
{
    a->gaps += b->gaps;
    a->replays += b->replays;
    a->replayed += b->replayed;
    a->losses += b->losses;
    a->restarts += b->restarts;
    a->duplicates += b->duplicates;
    a->stale += b->stale;
}

static void tracker_free(tracker *t)
{
    counts_add(&S.c.gone, &t->st.counts);
    kvix_seqtrack_release(&t->st); /* closes the replay DEALER */
    free(t);
}

/* A message from t's replay DEALER: ["", topic, seq, payload] or
 * ["", seq, payload]; the end marker's seq is all ones. */
static void on_replay(tracker *t, zmq_msg_t *f, int nf)
{
    if ((nf != 3 && nf != 4) || zmq_msg_size(&f[0]) != 0 ||
        zmq_msg_size(&f[nf - 2]) != SEQ_FRAME) {
        S.c.bad_frames++;
        if (S.warned_frames++ < WARN_MAX)
            cli_warn("worker %" PRIu64 ": bad replay message of %d frames dropped", t->worker, nf);
        return;
    }
    uint64_t r = get_be64(zmq_msg_data(&f[nf - 2]));
    if (r == KVIX_WIRE_SEQ_END) {
        seq_ok(kvix_seqtrack_replay_end(&t->st, now_ms()));
        return;
    }
    if (!kvix_seqtrack_replay_want(&t->st, r, now_ms()))
        return;
    batch b;
    if (!decode(t->ep, r, zmq_msg_data(&f[nf - 1]), zmq_msg_size(&f[nf - 1]), &b, "replay")) {
        kvix_seqtrack_replayed(&t->st, r, NULL);
        return;
    }
    if (b.dp != t->dp) {
        S.c.dropped++;
        return;
    }
    kvix_seqtrack_replayed(&t->st, r, &b);
}

/* ---- sockets -------------------------------------------------------------- */

/* Receive one whole message; frames past the first 4 are counted, not kept. */
static int recv_msg(void *sock, zmq_msg_t *f, int *nf)
{
    int n = 0, more;
    do {
        zmq_msg_t m;
        zmq_msg_init(&m);
        while (zmq_msg_recv(&m, sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            if (errno == EINTR && n > 0)
                continue;
            zmq_msg_close(&m);
            for (int i = 0; i < n && i < 4; i++)
                zmq_msg_close(&f[i]);
            return -1;
        }
        more = zmq_msg_more(&m);
        if (n < 4)
            f[n] = m;
        else
            zmq_msg_close(&m);
        n++;
    } while (more);
    *nf = n;
    return 0;
}

static void close_frames(zmq_msg_t *f, int nf)
{
    for (int i = 0; i < nf && i < 4; i++)
        zmq_msg_close(&f[i]);
}

static void on_sub(endpoint *ep, zmq_msg_t *f, int nf)
{
    if (nf != 3 || zmq_msg_size(&f[1]) != SEQ_FRAME) {
        S.c.bad_frames++;
        if (S.warned_frames++ < WARN_MAX)
            cli_warn("message of %d frames from %s dropped (expected topic, seq, payload)", nf,
                     ep->url);
        return;
    }
    uint64_t seq = get_be64(zmq_msg_data(&f[1]));
    batch b;
    if (!decode(ep, seq, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]), &b, "from"))
        return; /* its seq now shows as a gap, which replay or a loss settles */
    static const char mark[] = "sgl-kv-epoch=";
    const char *topic = zmq_msg_data(&f[0]), *epoch = NULL;
    size_t tlen = zmq_msg_size(&f[0]), elen = 0;
    const char *m = tlen ? memmem(topic, tlen, mark, sizeof mark - 1) : NULL;
    if (m) {
        epoch = m + sizeof mark - 1;
        elen = (size_t)(topic + tlen - epoch);
    }
    tracker *t = tracker_get(ep, b.dp);
    if (!t) {
        S.c.dropped++;
        if (S.warned_decode++ < WARN_MAX)
            cli_warn("batch %" PRIu64 " from %s dropped: more than %d workers and ranks", seq,
                     ep->url, TRACKERS_MAX);
        return;
    }
    seq_ok(kvix_seqtrack_live(&t->st, seq, epoch, elen, &b, now_ms()));
}

static void endpoint_open(endpoint *ep)
{
    int zero = 0, ivl = RECONNECT_MS, ivlmax = RECONNECT_MAX_MS, hwm = RCVHWM;
    int64_t maxmsg = KVIX_WIRE_FRAME_MAX;
    void *s = zmq_socket(S.zctx, ZMQ_SUB);
    if (!s)
        cli_die(KVIX_EXIT_SYS, "cannot create a socket: %s", zmq_strerror(errno));
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &ivlmax, sizeof ivlmax);
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(s, ZMQ_SUBSCRIBE, S.topic, strlen(S.topic));
    int rc = S.bind ? zmq_bind(s, ep->url) : zmq_connect(s, ep->url);
    if (rc != 0) {
        int e = errno;
        zmq_close(s);
        if (e == EINVAL || e == EPROTONOSUPPORT || e == ENOCOMPATPROTO)
            cli_usage_error("bad endpoint '%s': %s", ep->url, zmq_strerror(e));
        cli_die(KVIX_EXIT_SYS, "cannot %s %s: %s", S.bind ? "bind" : "connect to", ep->url,
                zmq_strerror(e));
    }
    ep->sub = s;
}

/* ID[:DP]=ENDPOINT; false when malformed. */
static bool parse_spec(const char *s, uint64_t *worker, uint32_t *dp, const char **url)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')
        return false;
    unsigned long long w = strtoull(s, &end, 10);
    if (errno)
        return false;
    unsigned long d = 0;
    if (*end == ':') {
        const char *q = end + 1;
        if (*q < '0' || *q > '9')
            return false;
        d = strtoul(q, &end, 10);
        if (errno || d > UINT32_MAX)
            return false;
    }
    if (*end != '=' || !end[1])
        return false;
    *worker = w;
    *dp = (uint32_t)d;
    *url = end + 1;
    return true;
}

static endpoint *endpoint_find(const char *url)
{
    for (size_t i = 0; i < S.neps; i++)
        if (!strcmp(S.eps[i]->url, url))
            return S.eps[i];
    return NULL;
}

static endpoint *endpoint_add(uint64_t worker, uint32_t dp, const char *url, const char *replay,
                              bool from_file)
{
    endpoint *ep = calloc(1, sizeof *ep);
    if (!ep)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    ep->worker = worker;
    ep->dp = dp;
    ep->url = xstrdup(url);
    ep->replay = replay ? xstrdup(replay) : NULL;
    ep->from_file = from_file;
    S.eps = xrealloc(S.eps, (S.neps + 1) * sizeof *S.eps);
    S.eps[S.neps++] = ep;
    return ep;
}

static void endpoint_remove(size_t i)
{
    endpoint *ep = S.eps[i];
    for (size_t k = 0; k < S.ntrk;) {
        if (S.trk[k]->ep == ep) {
            emit_cleared(S.trk[k]);
            tracker_free(S.trk[k]);
            S.trk[k] = S.trk[--S.ntrk];
        } else {
            k++;
        }
    }
    if (ep->sub)
        zmq_close(ep->sub);
    free(ep->url);
    free(ep->replay);
    free(ep);
    S.eps[i] = S.eps[--S.neps];
}

/* ---- the workers file ----------------------------------------------------- */

typedef struct wline {
    uint64_t worker;
    uint32_t dp;
    char *url, *replay;
} wline;

/* Parse the whole file first: a bad file changes nothing. */
static bool read_workers(const char *path, wline **out, size_t *nout)
{
    FILE *fp = fopen(path, "r");
    if (!fp) {
        cli_warn("cannot open %s: %s", path, strerror(errno));
        return false;
    }
    wline *v = NULL;
    size_t n = 0, lineno = 0;
    char line[4096];
    bool ok = true;
    while (fgets(line, sizeof line, fp)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            cli_warn("%s:%zu: line too long", path, lineno);
            ok = false;
            break;
        }
        char *save = NULL, *tok = strtok_r(line, " \t\r\n", &save);
        if (!tok || *tok == '#')
            continue;
        wline w = {0, 0, NULL, NULL};
        const char *url;
        if (!parse_spec(tok, &w.worker, &w.dp, &url)) {
            cli_warn("%s:%zu: expected ID[:DP]=ENDPOINT, got '%s'", path, lineno, tok);
            ok = false;
            break;
        }
        w.url = xstrdup(url);
        while ((tok = strtok_r(NULL, " \t\r\n", &save)) && *tok != '#') {
            if (!strncmp(tok, "replay=", 7) && tok[7]) {
                free(w.replay);
                w.replay = xstrdup(tok + 7);
            } else {
                cli_warn("%s:%zu: unknown setting '%s'", path, lineno, tok);
                ok = false;
            }
        }
        v = xrealloc(v, (n + 1) * sizeof *v);
        v[n++] = w;
        if (!ok)
            break;
    }
    if (ferror(fp)) {
        cli_warn("error reading %s: %s", path, strerror(errno));
        ok = false;
    }
    fclose(fp);
    if (!ok) {
        for (size_t i = 0; i < n; i++) {
            free(v[i].url);
            free(v[i].replay);
        }
        free(v);
        return false;
    }
    *out = v;
    *nout = n;
    return true;
}

static void load_workers(bool initial)
{
    wline *v;
    size_t n;
    if (!read_workers(S.workers_file, &v, &n)) {
        if (initial)
            exit(cli_finish(KVIX_EXIT_IO));
        cli_warn("keeping the workers of %s as they were", S.workers_file);
        return;
    }
    for (size_t i = 0; i < S.neps; i++)
        S.eps[i]->keep = !S.eps[i]->from_file;
    size_t added = 0, removed = 0;
    for (size_t i = 0; i < n; i++) {
        endpoint *ep = endpoint_find(v[i].url);
        if (ep && ep->from_file && ep->worker == v[i].worker && ep->dp == v[i].dp) {
            ep->keep = true;
            free(ep->replay);
            ep->replay = v[i].replay;
            v[i].replay = NULL;
        } else if (ep) {
            cli_warn("%s: endpoint %s already subscribed: line ignored", S.workers_file,
                     v[i].url);
        } else {
            ep = endpoint_add(v[i].worker, v[i].dp, v[i].url, v[i].replay, true);
            ep->keep = true;
            endpoint_open(ep);
            added++;
        }
        free(v[i].url);
        free(v[i].replay);
    }
    free(v);
    for (size_t i = 0; i < S.neps;) {
        if (!S.eps[i]->keep) {
            cli_warn("worker %" PRIu64 " (%s) removed: cleared", S.eps[i]->worker, S.eps[i]->url);
            endpoint_remove(i);
            removed++;
        } else {
            i++;
        }
    }
    if (!initial)
        cli_warn("reloaded %s: %zu workers, %zu added, %zu removed", S.workers_file, S.neps,
                 added, removed);
}

/* ---- main loop ------------------------------------------------------------ */

static void print_stats(void)
{
    const counters *c = &S.c;
    kvix_seqtrack_counts q = c->gone;
    for (size_t i = 0; i < S.ntrk; i++)
        counts_add(&q, &S.trk[i]->st.counts);
    fprintf(stderr,
            "kvsub: batches=%" PRIu64 " stored=%" PRIu64 " removed=%" PRIu64 " cleared=%" PRIu64
            " cleared_by_kvsub=%" PRIu64 " gaps=%" PRIu64 " replays=%" PRIu64
            " replayed=%" PRIu64 " losses=%" PRIu64 " restarts=%" PRIu64 " stale=%" PRIu64
            " decode_errors=%" PRIu64 " bad_frames=%" PRIu64 " partial_blocks=%" PRIu64
            " unknown_events=%" PRIu64 " dropped=%" PRIu64 "\n",
            c->batches, c->events[KVIX_EV_STORED], c->events[KVIX_EV_REMOVED],
            c->events[KVIX_EV_CLEARED], c->synth_cleared, q.gaps, q.replays, q.replayed,
            q.losses, q.restarts, q.stale + q.duplicates, c->decode_errors, c->bad_frames,
            c->partial_blocks, c->unknown_events, c->dropped);
}

static void check_deadlines(void)
{
    uint64_t now = now_ms();
    for (size_t i = 0; i < S.ntrk; i++)
        seq_ok(kvix_seqtrack_tick(&S.trk[i]->st, now));
}

static void run(void)
{
    zmq_pollitem_t *items = NULL;
    tracker **owners = NULL;
    size_t cap = 0;
    while (!sig_stop) {
        if (sig_hup) {
            sig_hup = 0;
            if (S.workers_file)
                load_workers(false);
        }
        if (sig_usr1) {
            sig_usr1 = 0;
            print_stats();
        }
        size_t n = S.neps + S.ntrk;
        if (n > cap) {
            cap = n * 2;
            items = xrealloc(items, cap * sizeof *items);
            owners = xrealloc(owners, cap * sizeof *owners);
        }
        size_t k = 0;
        long timeout = 200;
        uint64_t now = now_ms();
        for (size_t i = 0; i < S.neps; i++) {
            items[k] = (zmq_pollitem_t){S.eps[i]->sub, 0, ZMQ_POLLIN, 0};
            owners[k++] = NULL;
        }
        for (size_t i = 0; i < S.ntrk; i++) {
            uint64_t deadline;
            if (!kvix_seqtrack_replaying(&S.trk[i]->st, &deadline))
                continue;
            long ms = deadline > now ? (long)(deadline - now) : 0;
            if (ms < timeout)
                timeout = ms;
            items[k] = (zmq_pollitem_t){S.trk[i]->dealer, 0, ZMQ_POLLIN, 0};
            owners[k++] = S.trk[i];
        }
        out_flush(); /* everything so far is visible before waiting */
        int rc = zmq_poll(items, (int)k, timeout);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            cli_die(KVIX_EXIT_SYS, "zmq_poll: %s", zmq_strerror(errno));
        }
        /* Replay answers first: they come before the live batches held. The
         * handlers may add or end trackers and endpoints, so each item is
         * checked against the current state before use. */
        for (size_t i = S.neps; i < k && !sig_stop; i++) {
            if (!(items[i].revents & ZMQ_POLLIN))
                continue;
            tracker *t = owners[i];
            for (int m = 0; m < DRAIN_MAX && kvix_seqtrack_replaying(&t->st, NULL) &&
                            t->dealer == items[i].socket; m++) {
                zmq_msg_t f[4];
                int nf;
                if (recv_msg(t->dealer, f, &nf) < 0)
                    break;
                on_replay(t, f, nf);
                close_frames(f, nf);
            }
        }
        for (size_t i = 0; i < S.neps && i < k && !sig_stop; i++) {
            if (!(items[i].revents & ZMQ_POLLIN) || S.eps[i]->sub != items[i].socket)
                continue;
            for (int m = 0; m < DRAIN_MAX && !sig_stop; m++) {
                zmq_msg_t f[4];
                int nf;
                if (recv_msg(S.eps[i]->sub, f, &nf) < 0)
                    break;
                on_sub(S.eps[i], f, nf);
                close_frames(f, nf);
            }
        }
        check_deadlines();
    }
    free(items);
    free(owners);
}

int main(int argc, char **argv)
{
    cli_init(&tool);
    S.topic = "";
    S.fmt = KVIX_FMT_NDJSON;
    S.replay_timeout_ms = 5000;
    S.replay_buffer = 10000;
    S.zctx = zmq_ctx_new();
    if (!S.zctx)
        cli_die(KVIX_EXIT_SYS, "cannot create a ZMQ context: %s", zmq_strerror(errno));
    const char *arg;
    int c;
    while ((c = cli_next(argc, argv, &arg)) != -1) {
        uint64_t w;
        uint32_t dp;
        const char *url;
        switch (c) {
        case 'w':
            if (!parse_spec(arg, &w, &dp, &url))
                cli_usage_error("bad worker '%s' (expected ID[:DP]=ENDPOINT)", arg);
            if (endpoint_find(url))
                cli_usage_error("endpoint %s given twice", url);
            endpoint_add(w, dp, url, NULL, false);
            break;
        case O_REPLAY:
            if (!parse_spec(arg, &w, &dp, &url))
                cli_usage_error("bad replay endpoint '%s' (expected ID[:DP]=ENDPOINT)", arg);
            S.reps = xrealloc(S.reps, (S.nreps + 1) * sizeof *S.reps);
            S.reps[S.nreps++] = (replay_ep){w, dp, xstrdup(url)};
            break;
        case 'm':
        case 't':
            if (!*arg || strlen(arg) >= KVIX_NAME_MAX)
                cli_usage_error("bad %s name '%s'", c == 'm' ? "model" : "tenant", arg);
            *(c == 'm' ? &S.model : &S.tenant) = arg;
            break;
        case 'b':
            S.block_size = (uint32_t)cli_parse_uint(arg, 1, KVIX_BS_MAX, "block size");
            break;
        case O_TOPIC: S.topic = arg; break;
        case O_BIND: S.bind = 1; break;
        case 'f':
            if (kvix_format_parse(arg, &S.fmt) != KVIX_OK || S.fmt == KVIX_FMT_AUTO)
                cli_usage_error("bad format '%s' (expected ndjson or msgpack)", arg);
            break;
        case O_WORKERS_FILE: S.workers_file = arg; break;
        case O_TOKENS: S.keep_tokens = 1; break;
        case O_REPLAY_TIMEOUT:
            S.replay_timeout_ms = (long)cli_parse_uint(arg, 1, 3600000, "replay timeout");
            break;
        case O_REPLAY_BUFFER:
            S.replay_buffer = (size_t)cli_parse_uint(arg, 1, 10000000, "replay buffer");
            break;
        }
    }
    if (optind < argc)
        cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (!S.neps && !S.workers_file)
        cli_usage_error("no worker: give -w ID[:DP]=ENDPOINT or --workers-file FILE");

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: zmq_poll returns at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Batches are written whole and flushed whenever kvsub waits, so a
     * reader sees each batch at once without a write per line. */
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);

    kvix_buf_init(&S.scratch);
    kvix_buf_init(&S.out1);
    for (size_t i = 0; i < S.neps; i++)
        endpoint_open(S.eps[i]);
    if (S.workers_file)
        load_workers(true);

    run();

    out_flush();
    print_stats();
    while (S.ntrk)
        tracker_free(S.trk[--S.ntrk]);
    while (S.neps)
        endpoint_remove(S.neps - 1);
    free(S.trk);
    free(S.eps);
    for (size_t i = 0; i < S.nreps; i++)
        free(S.reps[i].url);
    free(S.reps);
    kvix_buf_release(&S.scratch);
    kvix_buf_release(&S.out1);
    zmq_ctx_term(S.zctx);
    int code = S.c.decode_errors || S.c.bad_frames ? KVIX_EXIT_REJECTED : KVIX_EXIT_OK;
    if (S.out_broken) { /* the reader left: nothing more to report about stdout */
        fclose(stdout);
        return code;
    }
    return cli_finish(code);
}
