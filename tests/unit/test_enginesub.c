/* kvix_enginesub against kvix_enginepub in one process, over loopback TCP on
 * ephemeral ports: batches of several dp ranks on one publisher (one seq
 * counter), a gap only the replay fills, a resume from a snapshot's eid, a
 * message over msg_max (ZMQ drops the connection: a loss, then it goes on),
 * the registry (add, duplicates, remove, replace), and the workers file.
 * Every wait is bounded; no assertion depends on timing. */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zmq.h>

#include "harness.h"
#include "kvix/enginepub.h"
#include "kvix/enginesub.h"
#include "kvix/index.h"
#include "kvix/stream.h"
#include "kvix/wire.h"

typedef struct got {
    uint64_t seq[4096]; /* eid of each engine event (one per batch here) */
    uint32_t dp[4096];
    size_t n;
    uint32_t cleared[64]; /* dp of each clear of the subscriber's own */
    size_t ncleared;
    int kinds[16];
} got;

static void on_event(void *ctx, const kvix_event *ev)
{
    got *g = ctx;
    if (ev->type == KVIX_EV_CLEARED && !ev->has_eid) {
        if (g->ncleared < 64)
            g->cleared[g->ncleared++] = ev->dp;
        return;
    }
    if (g->n < 4096) {
        g->seq[g->n] = ev->eid;
        g->dp[g->n++] = ev->dp;
    }
}

static void on_note(void *ctx, const kvix_enginesub_note *n)
{
    got *g = ctx;
    g->kinds[n->kind & 15]++;
}

/* One removed event of rank dp, padded to about pad bytes. */
static void batch(kvix_buf *out, uint32_t dp, size_t pad)
{
    kvix_event ev;
    kvix_event_init(&ev);
    ev.type = KVIX_EV_REMOVED;
    ev.dp = dp;
    size_t n = pad / 9 + 1;
    CHECK(kvix_event_reserve_hashes(&ev, n, NULL) == KVIX_OK);
    for (size_t i = 0; i < n; i++)
        ev.hashes[i] = UINT64_C(0x8000000000000000) + i;
    ev.nhashes = n;
    const kvix_event *evs[1] = {&ev};
    out->len = 0;
    CHECK(kvix_wire_encode(evs, 1, 1.0, dp, KVIX_WIRE_MAP, out, NULL) == KVIX_OK);
    kvix_event_release(&ev);
}

static kvix_enginesub *new_sub(got *g, size_t msg_max)
{
    kvix_enginesub_config cfg;
    kvix_enginesub_config_init(&cfg);
    cfg.replay_timeout_ms = 10000;
    if (msg_max)
        cfg.msg_max = msg_max;
    kvix_enginesub_ops ops = {on_event, on_note};
    kvix_enginesub *s = NULL;
    kvix_err err;
    CHECK(kvix_enginesub_new(&s, &cfg, &ops, g, &err) == KVIX_OK);
    return s;
}

static void spec_of(kvix_enginesub_spec *sp, uint64_t w, uint32_t dp, const kvix_enginepub *p)
{
    kvix_enginesub_spec_init(sp);
    sp->worker = w;
    sp->dp = dp;
    snprintf(sp->endpoint, sizeof sp->endpoint, "%s", kvix_enginepub_endpoint(p));
    if (kvix_enginepub_replay_endpoint(p))
        snprintf(sp->replay, sizeof sp->replay, "%s", kvix_enginepub_replay_endpoint(p));
}

/* Step both halves until cond or about 10 s. */
static int pump(kvix_enginesub *s, kvix_enginepub *p, int (*cond)(got *, kvix_enginepub *),
                got *g)
{
    for (int i = 0; i < 1000; i++) {
        if (p)
            CHECK(kvix_enginepub_service(p, NULL) == KVIX_OK);
        CHECK(kvix_enginesub_step(s, 10, NULL) == KVIX_OK);
        if (cond(g, p))
            return 1;
    }
    return 0;
}

static int joined(got *g, kvix_enginepub *p)
{
    (void)g;
    return kvix_enginepub_subscribers(p) > 0;
}

static size_t want_n;
static int have_n(got *g, kvix_enginepub *p)
{
    (void)p;
    return g->n >= want_n;
}

static void *zctx; /* the publishers', one per test */

static kvix_enginepub *new_pub(int replay)
{
    kvix_enginepub *p = NULL;
    zctx = zmq_ctx_new();
    CHECK(kvix_enginepub_new(&p, zctx, "tcp://127.0.0.1:*", replay ? "tcp://127.0.0.1:*" : NULL,
                             NULL, 0, NULL) == KVIX_OK);
    return p;
}

/* One publisher, ranks 0, 1, 2 in turn, one seq counter; the subscriber
 * resumes after eid 1 (a snapshot's), so seqs 2..9, sent before it joined,
 * are a gap only the replay fills. Nothing cleared, every batch in order. */
TEST(ranks_share_the_publishers_seq_and_replay_fills_the_gap)
{
    got g;
    memset(&g, 0, sizeof g);
    kvix_enginepub *p = new_pub(1);
    kvix_buf b;
    kvix_buf_init(&b);
    for (uint32_t i = 0; i < 10; i++) { /* nobody listens yet: only the replay buffer */
        batch(&b, i % 3, 0);
        CHECK(kvix_enginepub_send(p, b.data, b.len, NULL, NULL) == KVIX_OK);
    }
    kvix_enginesub *s = new_sub(&g, 0);
    CHECK(kvix_enginesub_resume(s, NULL, NULL, 1, 0, 1, NULL) == KVIX_OK);
    kvix_enginesub_spec sp;
    spec_of(&sp, 1, 0, p);
    CHECK(kvix_enginesub_add(s, &sp, 0, NULL) == KVIX_OK);
    CHECK(kvix_enginesub_apply(s, NULL) == KVIX_OK);
    CHECK(pump(s, p, joined, &g));
    for (uint32_t i = 10; i < 16; i++) {
        batch(&b, i % 3, 0);
        CHECK(kvix_enginepub_send(p, b.data, b.len, NULL, NULL) == KVIX_OK);
    }
    want_n = 14;
    CHECK(pump(s, p, have_n, &g));
    CHECK_U64(g.n, 14);
    for (size_t i = 0; i < g.n; i++) {
        CHECK_U64(g.seq[i], i + 2);
        CHECK_U64(g.dp[i], (i + 2) % 3);
    }
    CHECK_U64(g.ncleared, 0);
    kvix_enginesub_counts c;
    kvix_enginesub_counts_get(s, &c);
    CHECK_U64(c.seq.replays, 1);
    CHECK(c.seq.replayed >= 8); /* 2..9, and the live ones it may overtake */
    CHECK_U64(c.seq.losses, 0);
    CHECK_U64(c.seq.restarts, 0);
    CHECK_U64(c.batches, 14);
    kvix_enginesub_free(s);
    kvix_enginepub_free(p, 0);
    zmq_ctx_term(zctx);
    kvix_buf_release(&b);
}

/* Resumed after eid 1 of ranks 0..2, the first live batch is seq 0: the
 * engine restarted meanwhile, so every rank seen on the subscription (the
 * snapshot's) is cleared. */
TEST(a_restart_clears_every_rank_of_the_subscription)
{
    got g;
    memset(&g, 0, sizeof g);
    kvix_enginepub *p = new_pub(0);
    kvix_buf b;
    kvix_buf_init(&b);
    kvix_enginesub *s = new_sub(&g, 0);
    for (uint32_t dp = 0; dp < 3; dp++)
        CHECK(kvix_enginesub_resume(s, NULL, NULL, 1, dp, 1, NULL) == KVIX_OK);
    kvix_enginesub_spec sp;
    spec_of(&sp, 1, 0, p);
    CHECK(kvix_enginesub_add(s, &sp, 0, NULL) == KVIX_OK);
    CHECK(pump(s, p, joined, &g));
    for (uint32_t i = 0; i < 6; i++) { /* a new engine run: seqs from 0 */
        batch(&b, i % 3, 0);
        CHECK(kvix_enginepub_send(p, b.data, b.len, NULL, NULL) == KVIX_OK);
    }
    want_n = 1;
    CHECK(pump(s, p, have_n, &g));
    CHECK(g.ncleared == 3);
    CHECK_U64(g.cleared[0], 0);
    CHECK_U64(g.cleared[1], 1);
    CHECK_U64(g.cleared[2], 2);
    kvix_enginesub_free(s);
    kvix_enginepub_free(p, 0);
    zmq_ctx_term(zctx);
    kvix_buf_release(&b);
}

static int has_disconnect(got *g, kvix_enginepub *p)
{
    (void)p;
    return g->kinds[KVIX_ENGINESUB_DISCONNECT] > 0;
}

static uint64_t after_seq;
static int got_after(got *g, kvix_enginepub *p)
{
    (void)p;
    return g->n && g->seq[g->n - 1] > after_seq;
}

/* A message over msg_max: ZMQ drops the connection for good; the subscriber
 * sees it on its monitor, reports a loss, clears, connects again and goes on. */
TEST(message_over_the_limit_is_a_loss_then_it_goes_on)
{
    got g;
    memset(&g, 0, sizeof g);
    kvix_enginepub *p = new_pub(0);
    kvix_buf b;
    kvix_buf_init(&b);
    kvix_enginesub *s = new_sub(&g, 2048);
    kvix_enginesub_spec sp;
    spec_of(&sp, 1, 0, p);
    CHECK(kvix_enginesub_add(s, &sp, 0, NULL) == KVIX_OK);
    CHECK(pump(s, p, joined, &g));
    batch(&b, 0, 0);
    CHECK(kvix_enginepub_send(p, b.data, b.len, NULL, NULL) == KVIX_OK);
    want_n = 1;
    CHECK(pump(s, p, have_n, &g));
    batch(&b, 0, 8000); /* over 2048 bytes */
    CHECK(kvix_enginepub_send(p, b.data, b.len, &after_seq, NULL) == KVIX_OK);
    CHECK(pump(s, p, has_disconnect, &g));
    CHECK_U64(g.ncleared, 1);
    /* Connected again: batches keep coming (sent until one arrives). */
    int ok = 0;
    for (int i = 0; i < 200 && !ok; i++) {
        batch(&b, 0, 0);
        CHECK(kvix_enginepub_send(p, b.data, b.len, NULL, NULL) == KVIX_OK);
        for (int k = 0; k < 5 && !ok; k++) {
            CHECK(kvix_enginepub_service(p, NULL) == KVIX_OK);
            CHECK(kvix_enginesub_step(s, 10, NULL) == KVIX_OK);
            ok = got_after(&g, p);
        }
    }
    CHECK(ok);
    kvix_enginesub_counts c;
    kvix_enginesub_counts_get(s, &c);
    CHECK_U64(c.disconnects, 1);
    CHECK_U64(c.seq.losses, 1);
    kvix_enginesub_free(s);
    kvix_enginepub_free(p, 0);
    zmq_ctx_term(zctx);
    kvix_buf_release(&b);
}

static int count_subs(void *ctx, const kvix_enginesub_status *st)
{
    (void)st;
    ++*(int *)ctx;
    return 0;
}

static int count_open(void *ctx, const kvix_enginesub_status *st)
{
    *(int *)ctx += st->open;
    return 0;
}

TEST(registry_add_duplicates_remove_replace)
{
    got g;
    memset(&g, 0, sizeof g);
    kvix_enginesub *s = new_sub(&g, 0);
    kvix_enginesub_spec sp, v[3];
    kvix_err err;
    kvix_enginesub_spec_init(&sp);
    /* worker ids in the index's range only (events past 2^63-1 are refused) */
    CHECK(kvix_enginesub_spec_parse(&sp, "9223372036854775808=ipc:///tmp/x", &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, "past 2^63-1") != NULL);
    CHECK(kvix_enginesub_spec_parse(&sp, "9223372036854775807=ipc:///tmp/kvix-es-m", &err) ==
          KVIX_OK);
    sp.worker = (uint64_t)1 << 63;
    CHECK(kvix_enginesub_add(s, &sp, 0, &err) == KVIX_ERANGE);
    CHECK(kvix_enginesub_spec_parse(&sp, "1:2=tcp://127.0.0.1:99999", &err) == KVIX_OK);
    CHECK(kvix_enginesub_add(s, &sp, 0, &err) == KVIX_EINVAL); /* port out of range */
    CHECK(strstr(err.msg, "not in 1..65535") != NULL);
    CHECK(kvix_enginesub_spec_parse(&sp, "1:2=ipc:///tmp/kvix-es-a", &err) == KVIX_OK);
    CHECK(kvix_enginesub_add(s, &sp, 0, &err) == KVIX_OK);
    CHECK(kvix_enginesub_add(s, &sp, 0, &err) == KVIX_ELIMIT); /* endpoint twice */
    snprintf(sp.endpoint, sizeof sp.endpoint, "%s", "ipc:///tmp/kvix-es-b");
    CHECK(kvix_enginesub_add(s, &sp, 0, &err) == KVIX_ELIMIT); /* worker 1 dp 2 twice */
    CHECK(strstr(err.msg, "already registered") != NULL);
    CHECK(kvix_enginesub_apply(s, &err) == KVIX_OK);
    /* what apply opened is in the counters and the list at once, before any
     * step (kvsub answers a SIGUSR1 from its start) */
    kvix_enginesub_counts c0;
    kvix_enginesub_counts_get(s, &c0);
    CHECK_U64(c0.subscriptions, 1);
    int nopen = 0;
    kvix_enginesub_list(s, count_open, &nopen);
    CHECK_U64(nopen, 1);
    /* group 1: two subscriptions, then one of them replaced */
    for (int i = 0; i < 3; i++) {
        kvix_enginesub_spec_init(&v[i]);
        v[i].worker = 10 + (uint64_t)i;
        snprintf(v[i].endpoint, sizeof v[i].endpoint, "ipc:///tmp/kvix-es-%d", 10 + i);
    }
    size_t added = 0, removed = 0;
    CHECK(kvix_enginesub_replace(s, 1, v, 2, &added, &removed, &err) == KVIX_OK);
    CHECK_U64(added, 2);
    CHECK_U64(removed, 0);
    CHECK(kvix_enginesub_step(s, 0, &err) == KVIX_OK);
    /* a conflict with group 0 changes nothing */
    v[2].worker = 1;
    v[2].dp = 2;
    CHECK(kvix_enginesub_replace(s, 1, v + 1, 2, &added, &removed, &err) == KVIX_ELIMIT);
    int n = 0;
    kvix_enginesub_list(s, count_subs, &n);
    CHECK_U64(n, 3);
    v[2].worker = 12;
    v[2].dp = 0;
    CHECK(kvix_enginesub_replace(s, 1, v + 1, 2, &added, &removed, &err) == KVIX_OK);
    CHECK_U64(added, 1);
    CHECK_U64(removed, 1);
    CHECK(kvix_enginesub_step(s, 0, &err) == KVIX_OK);
    CHECK_U64(g.ncleared, 1); /* worker 10's rank */
    n = 0;
    kvix_enginesub_list(s, count_subs, &n);
    CHECK_U64(n, 3);
    CHECK_U64(kvix_enginesub_remove_worker(s, 12, NULL, NULL, UINT32_MAX), 1);
    CHECK(kvix_enginesub_remove(s, "ipc:///tmp/kvix-es-nope", &err) == KVIX_ENOTFOUND);
    CHECK(kvix_enginesub_remove(s, "ipc:///tmp/kvix-es-a", &err) == KVIX_OK);
    CHECK(kvix_enginesub_step(s, 0, &err) == KVIX_OK);
    CHECK_U64(g.ncleared, 3);
    kvix_enginesub_counts c;
    kvix_enginesub_counts_get(s, &c);
    CHECK_U64(c.subscriptions, 1);
    kvix_enginesub_free(s);
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* A subscription added and removed again gives back every descriptor it
 * took: its monitor was left to libzmq before, three eventfds a round, and
 * after ~340 rounds of /register + /unregister no socket could be opened. */
TEST(subscriptions_removed_give_their_descriptors_back)
{
    got g;
    memset(&g, 0, sizeof g);
    kvix_enginesub *s = new_sub(&g, 0);
    kvix_err err;
    kvix_enginesub_spec sp;
    kvix_enginesub_spec_init(&sp);
    sp.worker = 1;
    /* one round first: the context's own threads and descriptors */
    snprintf(sp.endpoint, sizeof sp.endpoint, "tcp://127.0.0.1:%d", 9);
    CHECK(kvix_enginesub_add(s, &sp, 0, &err) == KVIX_OK);
    CHECK(kvix_enginesub_step(s, 0, &err) == KVIX_OK);
    CHECK(kvix_enginesub_remove(s, sp.endpoint, &err) == KVIX_OK);
    CHECK(kvix_enginesub_step(s, 0, &err) == KVIX_OK);
    int before = open_fds();
    for (int i = 0; i < 200; i++) {
        snprintf(sp.endpoint, sizeof sp.endpoint, "tcp://127.0.0.1:%d", 10 + i % 7);
        CHECK(kvix_enginesub_add(s, &sp, 0, &err) == KVIX_OK);
        CHECK(kvix_enginesub_step(s, 0, &err) == KVIX_OK);
        CHECK(kvix_enginesub_remove(s, sp.endpoint, &err) == KVIX_OK);
        CHECK(kvix_enginesub_step(s, 0, &err) == KVIX_OK);
    }
    /* libzmq's reaper closes what a socket held after zmq_close returns */
    int after = open_fds();
    for (int i = 0; i < 500 && after - before >= 8; i++) {
        CHECK(kvix_enginesub_step(s, 10, &err) == KVIX_OK);
        after = open_fds();
    }
    if (after - before >= 8)
        fprintf(stderr, "#   %d descriptors before, %d after\n", before, after);
    CHECK(before > 0 && after - before < 8);
    kvix_enginesub_free(s);
}

/* libzmq's default context holds 1023 sockets, three a subscription: the
 * 342nd subscription failed to open ("Too many open files") and was dropped.
 * The context is sized to cfg.subs_max, and past it an add is refused. */
TEST(subscriptions_past_341_open_and_the_limit_is_refused)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_cur < 4096 && (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= 4096)) {
        rl.rlim_cur = 4096;
        CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    }
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur >= 4096);
    got g;
    memset(&g, 0, sizeof g);
    kvix_enginesub *s = new_sub(&g, 0);
    kvix_err err;
    kvix_enginesub_spec sp;
    kvix_enginesub_spec_init(&sp);
    for (int i = 0; i < 400; i++) {
        sp.worker = (uint64_t)i;
        snprintf(sp.endpoint, sizeof sp.endpoint, "tcp://127.0.0.1:%d", 1 + i);
        CHECK(kvix_enginesub_add(s, &sp, 0, &err) == KVIX_OK);
    }
    int rc = kvix_enginesub_apply(s, &err);
    if (rc)
        fprintf(stderr, "#   %s\n", err.msg);
    CHECK(rc == KVIX_OK);
    int nopen = 0;
    kvix_enginesub_list(s, count_open, &nopen);
    CHECK_U64(nopen, 400);
    CHECK_U64(g.kinds[KVIX_ENGINESUB_FAILED], 0);
    kvix_enginesub_free(s);

    kvix_enginesub_config cfg;
    kvix_enginesub_config_init(&cfg);
    cfg.subs_max = 2;
    kvix_enginesub_ops ops = {on_event, on_note};
    CHECK(kvix_enginesub_new(&s, &cfg, &ops, &g, &err) == KVIX_OK);
    for (int i = 0; i < 3; i++) {
        sp.worker = (uint64_t)i;
        snprintf(sp.endpoint, sizeof sp.endpoint, "tcp://127.0.0.1:%d", 1 + i);
        CHECK(kvix_enginesub_add(s, &sp, 0, &err) == (i < 2 ? KVIX_OK : KVIX_EBUSY));
    }
    CHECK(strstr(err.msg, "the limit is 2") != NULL);
    kvix_enginesub_spec v[2];
    for (int i = 0; i < 2; i++) {
        kvix_enginesub_spec_init(&v[i]);
        v[i].worker = 10 + (uint64_t)i;
        snprintf(v[i].endpoint, sizeof v[i].endpoint, "tcp://127.0.0.1:%d", 10 + i);
    }
    CHECK(kvix_enginesub_replace(s, 1, v, 1, NULL, NULL, &err) == KVIX_EBUSY);
    CHECK(kvix_enginesub_remove_worker(s, 1, NULL, NULL, UINT32_MAX) == 1);
    CHECK(kvix_enginesub_replace(s, 1, v, 1, NULL, NULL, &err) == KVIX_OK);
    CHECK(kvix_enginesub_replace(s, 1, v, 2, NULL, NULL, &err) == KVIX_EBUSY);
    CHECK(kvix_enginesub_replace(s, 1, v + 1, 1, NULL, NULL, &err) == KVIX_OK); /* in place */
    kvix_enginesub_free(s);
    cfg.subs_max = kvix_enginesub_subs_limit() + 1;
    CHECK(kvix_enginesub_new(&s, &cfg, &ops, &g, &err) == KVIX_ERANGE);
}

TEST(endpoints_checked_in_full)
{
    static const char *const bad[] = {
        "tcp://127.0.0.1:99999", "tcp://127.0.0.1:0",   "tcp://127.0.0.1",  "tcp://:5557",
        "tcp://*:5557",          "tcp://h st:1",        "tcp://[::1:5557",  "nosuch://x",
        "ipc://",                "tcp://127.0.0.1:55a", "tcp://127.0.0.1:-1",
        /* this process's own sockets (the monitors' among them), no engine's */
        "inproc://a",            "inproc://kvix-enginesub-mon-1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kvix_err err;
        int rc = kvix_enginesub_endpoint_check(bad[i], false, &err);
        if (rc == KVIX_OK)
            fprintf(stderr, "#   accepted %s\n", bad[i]);
        CHECK(rc != KVIX_OK);
    }
    char longipc[200] = "ipc:///";
    memset(longipc + 7, 'a', 150);
    CHECK(kvix_enginesub_endpoint_check(longipc, false, NULL) == KVIX_ELIMIT);
    static const char *const good[] = {"tcp://127.0.0.1:5557", "tcp://gpu-1.example:1",
                                       "tcp://[::1]:65535", "ipc:///tmp/x"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        CHECK(kvix_enginesub_endpoint_check(good[i], false, NULL) == KVIX_OK);
    CHECK(kvix_enginesub_endpoint_check("tcp://*:0", true, NULL) == KVIX_OK);
    CHECK(kvix_enginesub_endpoint_check("tcp://*:*", true, NULL) == KVIX_OK);
}

/* One engine, one form: the registry compares endpoints canonical, so the
 * same publisher cannot be subscribed twice under two spellings. */
TEST(endpoints_compared_in_canonical_form)
{
    static const char *const pairs[][2] = {
        {"ipc:///tmp/e/./x", "ipc:///tmp/e/x"},
        {"ipc:///tmp//e/x/", "ipc:///tmp/e/x"},
        {"ipc:///tmp/e/../e/x", "ipc:///tmp/e/x"},
        {"ipc:///../x", "ipc:///x"},
        {"ipc://./x", "ipc://x"},
        {"ipc://a/../x", "ipc://x"},
        {"ipc://../x", "ipc://../x"},
        {"ipc://a/../../x", "ipc://../x"},
        {"ipc://@abstract/./x", "ipc://@abstract/./x"},
        {"tcp://GPU1.Example:05557", "tcp://gpu1.example:5557"},
        {"tcp://[0:0::1]:5557", "tcp://[::1]:5557"},
        {"tcp://[FE80::1]:1", "tcp://[fe80::1]:1"},
        {"tcp://127.0.0.1:5557", "tcp://127.0.0.1:5557"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        char out[KVIX_ENGINESUB_ENDPOINT_MAX];
        CHECK(kvix_enginesub_endpoint_canon(pairs[i][0], false, out, NULL) == KVIX_OK);
        CHECK_STR(out, pairs[i][1]);
    }
    got g;
    memset(&g, 0, sizeof g);
    kvix_enginesub *s = new_sub(&g, 0);
    kvix_enginesub_spec sp;
    kvix_err err;
    kvix_enginesub_spec_init(&sp);
    sp.worker = 1;
    snprintf(sp.endpoint, sizeof sp.endpoint, "%s", "ipc:///tmp/kvix-es-c/x");
    CHECK(kvix_enginesub_add(s, &sp, 0, &err) == KVIX_OK);
    sp.worker = 2;
    snprintf(sp.endpoint, sizeof sp.endpoint, "%s", "ipc:///tmp/kvix-es-c/./x");
    CHECK(kvix_enginesub_add(s, &sp, 0, &err) == KVIX_ELIMIT);
    CHECK(strstr(err.msg, "already subscribed") != NULL);
    kvix_enginesub_spec v[2];
    kvix_enginesub_spec_init(&v[0]);
    kvix_enginesub_spec_init(&v[1]);
    v[0].worker = 3;
    v[1].worker = 4;
    snprintf(v[0].endpoint, sizeof v[0].endpoint, "%s", "tcp://Host-A:5557");
    snprintf(v[1].endpoint, sizeof v[1].endpoint, "%s", "tcp://host-a:05557");
    CHECK(kvix_enginesub_replace(s, 1, v, 2, NULL, NULL, &err) == KVIX_EINVAL);
    CHECK(kvix_enginesub_remove(s, "ipc:///tmp//kvix-es-c/x", &err) == KVIX_OK);
    kvix_enginesub_counts c;
    CHECK(kvix_enginesub_step(s, 0, &err) == KVIX_OK);
    kvix_enginesub_counts_get(s, &c);
    CHECK_U64(c.subscriptions, 0);
    kvix_enginesub_free(s);
}

TEST(workers_file_written_then_read_back)
{
    char path[] = "/tmp/kvix-workers.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    kvix_enginesub_spec v[2];
    kvix_enginesub_spec_init(&v[0]);
    kvix_enginesub_spec_init(&v[1]);
    v[0].worker = UINT64_MAX; /* past the index's range: not written */
    CHECK(kvix_enginesub_file_write(path, v, 1, NULL) == KVIX_ERANGE);
    v[0].worker = KVIX_WORKER_MAX;
    v[0].dp = 3;
    snprintf(v[0].endpoint, sizeof v[0].endpoint, "%s", "tcp://127.0.0.1:5557");
    snprintf(v[0].replay, sizeof v[0].replay, "%s", "tcp://127.0.0.1:5600");
    v[1].worker = 2;
    snprintf(v[1].endpoint, sizeof v[1].endpoint, "%s", "ipc:///tmp/e2");
    snprintf(v[1].model, sizeof v[1].model, "%s", "llama");
    snprintf(v[1].tenant, sizeof v[1].tenant, "%s", "acme");
    v[1].block_size = 16;
    CHECK(kvix_enginesub_file_write(path, v, 2, NULL) == KVIX_OK);
    kvix_enginesub_spec *r = NULL;
    size_t n = 0;
    kvix_err err;
    CHECK(kvix_enginesub_file_read(path, false, &r, &n, &err) == KVIX_OK);
    CHECK_U64(n, 2);
    if (n == 2)
        CHECK(!memcmp(r, v, sizeof v));
    free(r);
    FILE *f = fopen(path, "w");
    fprintf(f, "# comment\n\n1=tcp://127.0.0.1:1\n2=tcp://127.0.0.1:99999\n");
    fclose(f);
    CHECK(kvix_enginesub_file_read(path, false, &r, &n, &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, ":4: bad endpoint 'tcp://127.0.0.1:99999'") != NULL);
    f = fopen(path, "w");
    fprintf(f, "1=tcp://127.0.0.1:1\n1=tcp://127.0.0.1:2\n");
    fclose(f);
    CHECK(kvix_enginesub_file_read(path, false, &r, &n, &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, ":2: worker 1 dp 0 listed twice") != NULL);
    unlink(path);
}

/* The positions of an index (kvix_enginesub_resume_index) are taken by the
 * subscriptions of their own model and tenant: worker 1 of model "other"
 * (eid 7) and of tenant "t" (eid 8) are other engines, so the subscription
 * of worker 1 in the defaults resumes after its own eid 1, and 2..9, sent
 * before it joined, are replayed (kvsub --resume and kvindex -w alike). */
TEST(a_subscription_resumes_from_the_positions_of_its_model_and_tenant)
{
    static const char *const evs[] = {
        "{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"eid\":1,\"blocks\":[{\"local\":\"a\",\"seq\":\"a\"}]}",
        "{\"type\":\"stored\",\"worker\":1,\"model\":\"other\",\"bs\":4,\"eid\":7,\"blocks\":[{\"local\":\"b\",\"seq\":\"b\"}]}",
        "{\"type\":\"stored\",\"worker\":1,\"tenant\":\"t\",\"bs\":4,\"eid\":8,\"blocks\":[{\"local\":\"c\",\"seq\":\"c\"}]}",
    };
    kvix_index_opts io;
    kvix_index_opts_init(&io);
    kvix_index *idx = NULL;
    kvix_err err;
    CHECK(kvix_index_new(&idx, &io, &err) == KVIX_OK);
    kvix_event ev;
    kvix_event_init(&ev);
    for (size_t i = 0; i < sizeof evs / sizeof *evs; i++) {
        CHECK(kvix_event_from_json(evs[i], strlen(evs[i]), &ev, &err) == KVIX_OK);
        CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
    }
    kvix_event_release(&ev);
    got g;
    memset(&g, 0, sizeof g);
    kvix_enginepub *p = new_pub(1);
    kvix_buf b;
    kvix_buf_init(&b);
    for (uint32_t i = 0; i < 10; i++) { /* nobody listens yet: only the replay buffer */
        batch(&b, 0, 0);
        CHECK(kvix_enginepub_send(p, b.data, b.len, NULL, NULL) == KVIX_OK);
    }
    kvix_enginesub *s = new_sub(&g, 0);
    size_t mine = 0;
    CHECK(kvix_enginesub_resume_index(s, idx, &mine, &err) == KVIX_OK);
    CHECK_U64(mine, 1);
    kvix_enginesub_spec sp;
    spec_of(&sp, 1, 0, p);
    CHECK(kvix_enginesub_add(s, &sp, 0, NULL) == KVIX_OK);
    CHECK(kvix_enginesub_apply(s, NULL) == KVIX_OK);
    CHECK(pump(s, p, joined, &g));
    for (uint32_t i = 10; i < 12; i++) {
        batch(&b, 0, 0);
        CHECK(kvix_enginepub_send(p, b.data, b.len, NULL, NULL) == KVIX_OK);
    }
    want_n = 10;
    CHECK(pump(s, p, have_n, &g));
    CHECK_U64(g.n, 10);
    for (size_t i = 0; i < g.n; i++)
        CHECK_U64(g.seq[i], i + 2);
    CHECK_U64(g.ncleared, 0);
    kvix_enginesub_free(s);
    kvix_enginepub_free(p, 0);
    zmq_ctx_term(zctx);
    kvix_buf_release(&b);
    kvix_index_free(idx);
}
