/* kvix_seqtrack: every transition by hand, as a trace of what the tracker
 * asks its caller to do, then a randomized engine (drops, duplicates,
 * restarts, replays that start late, skip, fail, go silent; a small hold
 * buffer) against what a correct subscriber must see.
 *
 * Trace tokens: dN deliver seq N; RN ask a replay from N; S stop the replay;
 * C:<why>A-B cleared for the loss of A..B (B = * open-ended), why N no replay,
 * L replay starts later, H replay ended short of the held, M missing from the
 * replay, U undecodable, T timeout, O hold buffer full, Z missed at a
 * restart; XN/P cleared for a restart seen at seq N after P; EN a new epoch
 * at seq N. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "seqtrack_int.h"

typedef struct item {
    uint32_t run;
    uint64_t seq;
} item;

typedef struct rec {
    char log[4096];
    int replay_ok;  /* replay_start succeeds */
    int fail_hold;  /* hold returns NULL */
    long copies;    /* held copies not yet released */
    int bad_item;   /* deliver got an item of another seq */
} rec;

static rec R;
static kvix_seqtrack T;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    size_t n = strlen(R.log);
    if (n && n < sizeof R.log - 1)
        R.log[n++] = ' ';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(R.log + n, sizeof R.log - n, fmt, ap);
    va_end(ap);
}

static void h_deliver(void *ctx, uint64_t seq, void *it)
{
    (void)ctx;
    if (((item *)it)->seq != seq)
        R.bad_item++;
    say("d%llu", (unsigned long long)seq);
}

static int h_replay_start(void *ctx, uint64_t from)
{
    (void)ctx;
    if (!R.replay_ok)
        return -1;
    say("R%llu", (unsigned long long)from);
    return 0;
}

static void h_replay_stop(void *ctx)
{
    (void)ctx;
    say("S");
}

static const char why_letter[] = {
    [KVIX_SEQTRACK_NO_REPLAY] = 'N',      [KVIX_SEQTRACK_REPLAY_LATER] = 'L',
    [KVIX_SEQTRACK_REPLAY_SHORT] = 'H',   [KVIX_SEQTRACK_REPLAY_MISSING] = 'M',
    [KVIX_SEQTRACK_UNDECODABLE] = 'U',    [KVIX_SEQTRACK_TIMEOUT] = 'T',
    [KVIX_SEQTRACK_OVERFLOW] = 'O',       [KVIX_SEQTRACK_RESTART_MISSED] = 'Z',
    [KVIX_SEQTRACK_RESTART] = 'X',        [KVIX_SEQTRACK_EPOCH] = 'E',
};

static void h_cleared(void *ctx, const kvix_seqtrack_clear *c)
{
    (void)ctx;
    if (c->why == KVIX_SEQTRACK_RESTART)
        say("X%llu/%llu", (unsigned long long)c->seq, (unsigned long long)c->prev);
    else if (c->why == KVIX_SEQTRACK_EPOCH)
        say("E%llu", (unsigned long long)c->seq);
    else if (c->to == UINT64_MAX)
        say("C:%c%llu-*", why_letter[c->why], (unsigned long long)c->from);
    else
        say("C:%c%llu-%llu", why_letter[c->why], (unsigned long long)c->from,
            (unsigned long long)c->to);
}

static void *h_hold(void *ctx, void *it)
{
    (void)ctx;
    if (R.fail_hold)
        return NULL;
    item *c = malloc(sizeof *c);
    if (c) {
        *c = *(item *)it;
        R.copies++;
    }
    return c;
}

static void h_release(void *ctx, void *it)
{
    (void)ctx;
    R.copies--;
    free(it);
}

static const kvix_seqtrack_ops hops = {h_deliver, h_replay_start, h_replay_stop,
                                       h_cleared, h_hold,        h_release, NULL};

static void setup(size_t hold_max, uint64_t timeout, int replay_ok)
{
    memset(&R, 0, sizeof R);
    R.replay_ok = replay_ok;
    kvix_seqtrack_config cfg = {hold_max, timeout, 0};
    kvix__seqtrack_init(&T, &cfg, &hops, &R);
}

static int live_at(uint64_t seq, uint64_t now)
{
    item it = {0, seq};
    return kvix__seqtrack_live(&T, seq, NULL, 0, &it, now);
}

static void live(uint64_t seq)
{
    CHECK_U64(live_at(seq, 0), KVIX_OK);
}

static void lives(uint64_t from, uint64_t to)
{
    for (uint64_t s = from; s <= to; s++)
        live(s);
}

static void live_epoch(uint64_t seq, const char *epoch)
{
    item it = {0, seq};
    CHECK_U64(kvix__seqtrack_live(&T, seq, epoch, strlen(epoch), &it, 0), KVIX_OK);
}

/* One replay answer, decoded fine. */
static void rep(uint64_t seq)
{
    if (kvix__seqtrack_replay_want(&T, seq, 0)) {
        item it = {0, seq};
        kvix__seqtrack_replayed(&T, seq, &it);
    }
}

static void end_marker(void)
{
    CHECK_U64(kvix__seqtrack_replay_end(&T, 0), KVIX_OK);
}

static void teardown(void)
{
    kvix__seqtrack_release(&T);
    CHECK_U64(R.copies, 0);
    CHECK_U64(R.bad_item, 0);
}

#define LOG_IS(s) CHECK_STR(R.log, s)

TEST(first_batch_any_seq_then_in_order)
{
    setup(16, 100, 1);
    lives(7, 10);
    LOG_IS("d7 d8 d9 d10");
    CHECK(!kvix__seqtrack_replaying(&T, NULL));
    kvix_seqtrack_counts zero = {0, 0, 0, 0, 0, 0, 0, 0};
    CHECK(!memcmp(&T.counts, &zero, sizeof zero));
    teardown();
}

TEST(duplicate_dropped)
{
    setup(16, 100, 1);
    live(0);
    live(1);
    live(1);
    live(2);
    LOG_IS("d0 d1 d2");
    CHECK_U64(T.counts.duplicates, 1);
    CHECK_U64(T.counts.stale, 0);
    CHECK_U64(T.counts.restarts, 0);
    teardown();
}

TEST(gap_replayed_then_held_in_order)
{
    setup(16, 100, 1);
    live(0);
    live(3);
    live(4);
    live(5);
    LOG_IS("d0 R1");
    CHECK(kvix__seqtrack_replaying(&T, NULL));
    CHECK_U64(R.copies, 3);
    rep(0); /* older than asked: refused */
    rep(1);
    rep(2);
    end_marker();
    LOG_IS("d0 R1 d1 d2 S d3 d4 d5");
    CHECK_U64(T.counts.gaps, 1);
    CHECK_U64(T.counts.replays, 1);
    CHECK_U64(T.counts.replayed, 2);
    CHECK_U64(T.counts.refused, 1);
    CHECK_U64(T.counts.stale, 0);
    CHECK_U64(T.counts.losses, 0);
    CHECK_U64(R.copies, 0);
    live(6);
    LOG_IS("d0 R1 d1 d2 S d3 d4 d5 d6");
    teardown();
}

TEST(replay_overlaps_held_and_live)
{
    setup(16, 100, 1);
    live(0);
    live(3); /* held */
    for (uint64_t s = 1; s <= 5; s++)
        rep(s); /* the replay brings 3 itself; 4 and 5 overtake the live stream in order */
    live(4);    /* stale: the replay brought it */
    end_marker();
    live(5);
    live(6);
    LOG_IS("d0 R1 d1 d2 d3 d4 d5 S d6");
    CHECK_U64(T.counts.stale, 3); /* live 4, held 3, live 5 */
    CHECK_U64(T.counts.refused, 0);
    CHECK_U64(T.counts.replayed, 5);
    CHECK_U64(T.counts.losses, 0);
    teardown();
}

/* The replay refused nothing in order although the live stream was read
 * between its answers: once kvsub refused answers past the newest live seq,
 * and an answer taken after the live stream caught up was a false loss of the
 * refused one (kvsub_live.t, seen under load). */
TEST(replay_and_live_interleaved_lose_nothing)
{
    setup(16, 100, 1);
    lives(0, 6);
    live(9); /* gap: 7..8 asked */
    rep(8);  /* 7 is gone: the buffer starts later */
    rep(9);
    rep(10); /* published, not yet read live */
    live(10);
    live(11);
    rep(11);
    end_marker();
    live(12);
    LOG_IS("d0 d1 d2 d3 d4 d5 d6 R7 C:L7-7 d8 d9 d10 d11 S d12");
    CHECK_U64(T.counts.losses, 1);
    CHECK_U64(T.counts.refused, 0);
    teardown();
}

TEST(gap_without_replay_endpoint_clears)
{
    setup(16, 100, 0);
    live(0);
    live(3);
    live(4);
    LOG_IS("d0 C:N1-2 d3 d4");
    CHECK_U64(T.counts.gaps, 1);
    CHECK_U64(T.counts.replays, 0);
    CHECK_U64(T.counts.losses, 1);
    teardown();
}

TEST(replay_starting_later_clears_and_goes_on)
{
    setup(16, 100, 1);
    live(0);
    live(5);
    rep(3);
    rep(4);
    rep(5);
    end_marker();
    live(6);
    LOG_IS("d0 R1 C:L1-2 d3 d4 d5 S d6");
    CHECK_U64(T.counts.losses, 1);
    CHECK_U64(T.counts.stale, 1); /* the held 5 */
    teardown();
}

TEST(end_marker_short_of_the_held)
{
    setup(16, 100, 1);
    live(0);
    live(5);
    live(6);
    rep(1);
    rep(2);
    end_marker();
    LOG_IS("d0 R1 d1 d2 S C:H3-4 d5 d6");
    CHECK_U64(T.counts.losses, 1);
    /* an empty replay */
    live(9);
    end_marker();
    live(10);
    LOG_IS("d0 R1 d1 d2 S C:H3-4 d5 d6 R7 S C:H7-8 d9 d10");
    CHECK_U64(T.counts.losses, 2);
    end_marker(); /* no replay running: nothing */
    CHECK_U64(T.counts.losses, 2);
    teardown();
}

TEST(replay_timeout)
{
    setup(16, 100, 1);
    CHECK_U64(live_at(0, 10), KVIX_OK);
    CHECK_U64(live_at(3, 10), KVIX_OK);
    uint64_t dl = 0;
    CHECK(kvix__seqtrack_replaying(&T, &dl));
    CHECK_U64(dl, 110);
    CHECK_U64(kvix__seqtrack_tick(&T, 109), KVIX_OK);
    CHECK(kvix__seqtrack_replaying(&T, NULL));
    CHECK(kvix__seqtrack_replay_want(&T, 1, 50)); /* an answer does not extend it */
    item it = {0, 1};
    kvix__seqtrack_replayed(&T, 1, &it);
    CHECK(kvix__seqtrack_replaying(&T, &dl));
    CHECK_U64(dl, 110);
    CHECK_U64(kvix__seqtrack_tick(&T, 109), KVIX_OK);
    LOG_IS("d0 R1 d1");
    CHECK_U64(kvix__seqtrack_tick(&T, 110), KVIX_OK);
    CHECK(!kvix__seqtrack_replaying(&T, NULL));
    LOG_IS("d0 R1 d1 S C:T2-* d3");
    CHECK(!kvix__seqtrack_replay_want(&T, 2, 151)); /* a late answer */
    live(4);
    LOG_IS("d0 R1 d1 S C:T2-* d3 d4");
    CHECK_U64(T.counts.losses, 1);
    teardown();
}

/* A replay service that keeps resending an old batch cannot hold the live
 * batches past the timeout: it bounds the whole recovery. */
TEST(replay_resending_old_batch_times_out)
{
    setup(16, 100, 1);
    CHECK_U64(live_at(0, 0), KVIX_OK);
    CHECK_U64(live_at(3, 0), KVIX_OK);
    CHECK(kvix__seqtrack_replay_want(&T, 1, 10));
    item it = {0, 1};
    kvix__seqtrack_replayed(&T, 1, &it);
    for (uint64_t now = 20; now < 100; now += 10)
        CHECK(!kvix__seqtrack_replay_want(&T, 1, now)); /* stale, again and again */
    CHECK_U64(kvix__seqtrack_tick(&T, 100), KVIX_OK);
    CHECK(!kvix__seqtrack_replaying(&T, NULL));
    LOG_IS("d0 R1 d1 S C:T2-* d3");
    teardown();
}

/* Answers outside [asked, newest live] are refused and counted: a claimed
 * seq 2^63 is not a loss of everything before it. */
TEST(replay_answers_out_of_range_refused)
{
    setup(16, 100, 1);
    lives(0, 2);
    live(5); /* gap: 3..4 asked */
    CHECK(!kvix__seqtrack_replay_want(&T, UINT64_C(1) << 63, 1));
    CHECK(!kvix__seqtrack_replay_want(&T, 6, 1)); /* past the newest live (5) */
    CHECK(!kvix__seqtrack_replay_want(&T, 2, 1)); /* below the start */
    CHECK_U64(T.counts.refused, 3);
    CHECK_U64(T.counts.losses, 0);
    CHECK(kvix__seqtrack_replay_want(&T, 3, 1));
    item a = {0, 3}, b = {0, 4};
    kvix__seqtrack_replayed(&T, 3, &a);
    CHECK(kvix__seqtrack_replay_want(&T, 4, 1));
    kvix__seqtrack_replayed(&T, 4, &b);
    CHECK_U64(kvix__seqtrack_replay_end(&T, 2), KVIX_OK);
    live(6);
    LOG_IS("d0 d1 d2 R3 d3 d4 S d5 d6");
    CHECK_U64(T.counts.losses, 0);
    teardown();
}

static size_t h_size(void *ctx, const void *it)
{
    (void)ctx;
    (void)it;
    return 100;
}

/* Held batches are capped by bytes as well: past the cap, the loss path. */
TEST(hold_capped_by_bytes)
{
    memset(&R, 0, sizeof R);
    R.replay_ok = 1;
    kvix_seqtrack_ops ops = hops;
    ops.size = h_size;
    kvix_seqtrack_config cfg = {1000, 100, 250}; /* two batches of 100 bytes fit */
    kvix__seqtrack_init(&T, &cfg, &ops, &R);
    lives(0, 1);
    live(3);
    live(4);
    CHECK_U64(T.held_bytes, 200);
    live(5); /* a third would pass 250 bytes: the replay is given up */
    LOG_IS("d0 d1 R2 S C:O2-* d3 d4 d5");
    CHECK_U64(T.counts.losses, 1);
    CHECK_U64(T.held_bytes, 0);
    teardown();
}

/* Resumed at a snapshot's last eid + 1: in order goes on, a gap is asked
 * for, a lower seq is a restart. */
TEST(resume)
{
    setup(16, 100, 1);
    kvix__seqtrack_resume(&T, 10);
    live(10);
    LOG_IS("d10");
    teardown();

    setup(16, 100, 1);
    kvix__seqtrack_resume(&T, 10);
    live(12);
    LOG_IS("R10");
    teardown();

    setup(16, 100, 0);
    kvix__seqtrack_resume(&T, 10);
    live(12);
    LOG_IS("C:N10-11 d12");
    teardown();

    setup(16, 100, 0);
    kvix__seqtrack_resume(&T, 10);
    live(3);
    LOG_IS("X3/0 C:Z0-2 d3");
    CHECK_U64(T.counts.restarts, 1);
    teardown();
}

TEST(seq_backwards_is_a_restart)
{
    setup(16, 100, 0);
    lives(0, 5);
    live(2);
    LOG_IS("d0 d1 d2 d3 d4 d5 X2/5 C:Z0-1 d2");
    CHECK_U64(T.counts.restarts, 1);
    CHECK_U64(T.counts.losses, 1);
    live(3);
    LOG_IS("d0 d1 d2 d3 d4 d5 X2/5 C:Z0-1 d2 d3");
    teardown();

    setup(16, 100, 1); /* from 0: nothing missed */
    lives(0, 3);
    live(0);
    live(1);
    LOG_IS("d0 d1 d2 d3 X0/3 d0 d1");
    CHECK_U64(T.counts.losses, 0);
    teardown();

    setup(16, 100, 1); /* the new run's first batches replayed */
    lives(0, 5);
    live(2);
    rep(0);
    rep(1);
    rep(2);
    end_marker();
    LOG_IS("d0 d1 d2 d3 d4 d5 X2/5 R0 d0 d1 d2 S");
    CHECK_U64(T.counts.stale, 1);
    CHECK_U64(T.counts.losses, 0);
    CHECK_U64(T.counts.restarts, 1);
    teardown();
}

TEST(restart_during_a_replay)
{
    setup(16, 100, 1);
    live(0);
    live(5);
    live(6);
    CHECK_U64(R.copies, 2);
    live(0); /* lower than 6: a new run; the held batches of the old one go */
    LOG_IS("d0 R1 S X0/6 d0");
    CHECK_U64(R.copies, 0);
    CHECK(!kvix__seqtrack_replaying(&T, NULL));
    CHECK(!kvix__seqtrack_replay_want(&T, 1, 0)); /* the old replay's answers are not wanted */
    live(1);
    LOG_IS("d0 R1 S X0/6 d0 d1");
    teardown();
}

TEST(epoch_change_is_a_restart)
{
    setup(16, 100, 1);
    live_epoch(0, "aaaa");
    live_epoch(1, "aaaa");
    live_epoch(2, "aaaa");
    live_epoch(10, "bbbb"); /* higher seq, new run */
    LOG_IS("d0 d1 d2 E10 R0");
    for (uint64_t s = 0; s <= 10; s++)
        rep(s);
    end_marker();
    live_epoch(11, "bbbb");
    LOG_IS("d0 d1 d2 E10 R0 d0 d1 d2 d3 d4 d5 d6 d7 d8 d9 d10 S d11");
    CHECK_U64(T.counts.restarts, 1);
    CHECK_U64(T.counts.losses, 0);
    teardown();

    /* a first epoch is no change; epochs equal in their first 128 bytes are one */
    setup(16, 100, 1);
    live(0);
    char a[200], b[200];
    memset(a, 'x', sizeof a - 1);
    a[sizeof a - 1] = '\0';
    memcpy(b, a, sizeof b);
    b[150] = 'y';
    live_epoch(1, a);
    live_epoch(2, b);
    LOG_IS("d0 d1 d2");
    live_epoch(3, "short");
    LOG_IS("d0 d1 d2 E3 R0");
    teardown();
}

TEST(hold_buffer_overflow_gives_the_replay_up)
{
    setup(2, 100, 1);
    live(0);
    live(3);
    live(4);
    live(5); /* the third held: the replay is given up, the held fed on */
    LOG_IS("d0 R1 S C:O1-* d3 d4 d5");
    CHECK(!kvix__seqtrack_replaying(&T, NULL));
    CHECK_U64(T.counts.losses, 1);
    CHECK_U64(R.copies, 0);
    CHECK(!kvix__seqtrack_replay_want(&T, 1, 0));
    teardown();

    setup(2, 100, 1); /* the batch that overflowed leaves a gap: a new replay */
    live(0);
    live(3);
    live(4);
    live(7);
    LOG_IS("d0 R1 S C:O1-* d3 d4 R5");
    CHECK_U64(T.counts.gaps, 2);
    CHECK_U64(T.counts.replays, 2);
    CHECK_U64(R.copies, 1);
    rep(5);
    rep(6);
    end_marker();
    LOG_IS("d0 R1 S C:O1-* d3 d4 R5 d5 d6 S d7");
    teardown();
}

TEST(undecodable_replayed_batch)
{
    setup(16, 100, 1);
    live(0);
    live(3);
    CHECK(kvix__seqtrack_replay_want(&T, 1, 0));
    kvix__seqtrack_replayed(&T, 1, NULL);
    rep(2);
    end_marker();
    LOG_IS("d0 R1 C:U1-1 d2 S d3");
    CHECK_U64(T.counts.losses, 1);
    CHECK_U64(T.counts.replayed, 1);
    teardown();
}

TEST(missing_from_the_replay)
{
    setup(16, 100, 1);
    live(0);
    live(4);
    rep(1);
    rep(3);
    end_marker();
    LOG_IS("d0 R1 d1 C:M2-2 d3 S d4");
    CHECK_U64(T.counts.losses, 1);
    teardown();
}

TEST(gap_among_the_held_asks_again)
{
    setup(16, 100, 1);
    live(0);
    live(3);
    live(6);
    rep(1);
    rep(2);
    end_marker();
    LOG_IS("d0 R1 d1 d2 S d3 R4");
    CHECK_U64(R.copies, 1);
    rep(4);
    rep(5);
    end_marker();
    LOG_IS("d0 R1 d1 d2 S d3 R4 d4 d5 S d6");
    CHECK_U64(T.counts.gaps, 2);
    CHECK_U64(T.counts.replays, 2);
    CHECK_U64(T.counts.losses, 0);
    teardown();
}

TEST(out_of_memory_while_holding)
{
    setup(16, 100, 1);
    live(0);
    R.fail_hold = 1;
    CHECK_U64(live_at(3, 0), KVIX_ENOMEM);
    CHECK_U64(R.copies, 0);
    R.fail_hold = 0;
    live(4);
    CHECK_U64(R.copies, 1);
    teardown(); /* the replay stopped, the held given back */
    LOG_IS("d0 R1 S");
}

TEST(unwanted_calls_are_harmless)
{
    setup(16, 100, 1);
    CHECK(!kvix__seqtrack_replay_want(&T, 5, 0));
    item it = {0, 5};
    kvix__seqtrack_replayed(&T, 5, &it);
    CHECK_U64(kvix__seqtrack_tick(&T, 1000), KVIX_OK);
    end_marker();
    LOG_IS("");
    CHECK_U64(T.counts.stale, 1);
    teardown();
}

/* ---- randomized ----------------------------------------------------------- */

typedef struct sim {
    uint64_t rng;
    int lossy, epochs;
    /* the engine */
    uint32_t run;
    uint64_t s;          /* next seq of the run */
    uint64_t buffer;     /* batches its replay service keeps */
    int64_t last_live;   /* last seq sent live in this run, -1: none */
    int force_live;      /* the next batch is not dropped */
    unsigned restarts;
    /* the replay asked for */
    int pending, silent;
    uint32_t prun;
    uint64_t pnext, pend;
    /* what the subscriber saw */
    int fresh;           /* next delivery starts a new stretch (after a clear) */
    uint32_t drun;
    uint64_t dseq;
    uint64_t delivered, losses, restarts_seen;
    long copies;
    int bad;
} sim;

static uint64_t rnd(sim *m) { return th_splitmix(&m->rng); }

static int pct(sim *m, unsigned p) { return rnd(m) % 100 < p; }

static void s_deliver(void *ctx, uint64_t seq, void *p)
{
    sim *m = ctx;
    const item *it = p;
    m->delivered++;
    if (it->seq != seq)
        m->bad |= 1;
    if (m->fresh) {
        /* without losses a stretch starts at 0: the first batch and every
         * restart (its missed batches replayed from 0) */
        if (!m->lossy && seq != 0)
            m->bad |= 2;
    } else if (it->run != m->drun || seq != m->dseq + 1) {
        m->bad |= 4; /* a hole or a repeat without a clear */
    }
    m->fresh = 0;
    m->drun = it->run;
    m->dseq = seq;
}

static int s_replay_start(void *ctx, uint64_t from)
{
    sim *m = ctx;
    if (m->lossy && pct(m, 5))
        return -1; /* the endpoint cannot be reached */
    uint64_t lo = m->s > m->buffer ? m->s - m->buffer : 0;
    m->pending = 1;
    m->silent = m->lossy && pct(m, 10);
    m->prun = m->run;
    m->pnext = from > lo ? from : lo;
    if (m->lossy && m->pnext > 0 && pct(m, 10))
        m->pnext--; /* an answer older than asked */
    m->pend = m->s;
    return 0;
}

static void s_replay_stop(void *ctx) { ((sim *)ctx)->pending = 0; }

static void s_cleared(void *ctx, const kvix_seqtrack_clear *c)
{
    sim *m = ctx;
    m->fresh = 1;
    if (c->why == KVIX_SEQTRACK_RESTART || c->why == KVIX_SEQTRACK_EPOCH)
        m->restarts_seen++;
    else
        m->losses++;
}

static void *s_hold(void *ctx, void *p)
{
    sim *m = ctx;
    item *c = malloc(sizeof *c);
    if (c) {
        *c = *(item *)p;
        m->copies++;
    }
    return c;
}

static void s_release(void *ctx, void *p)
{
    ((sim *)ctx)->copies--;
    free(p);
}

static const kvix_seqtrack_ops sops = {s_deliver, s_replay_start, s_replay_stop,
                                       s_cleared, s_hold,         s_release, NULL};

static void s_live(sim *m, kvix_seqtrack *t, uint64_t seq, uint64_t now)
{
    char epoch[32];
    snprintf(epoch, sizeof epoch, "run-%u", m->run);
    item it = {m->run, seq};
    if (kvix__seqtrack_live(t, seq, m->epochs ? epoch : NULL, strlen(epoch), &it, now) != KVIX_OK)
        m->bad |= 8;
    m->last_live = (int64_t)seq;
}

static void s_publish(sim *m, kvix_seqtrack *t, uint64_t now, int final)
{
    uint64_t seq = m->s++;
    int first = m->run == 0 && seq == 0;
    if (!final && !first && !m->force_live && pct(m, m->lossy ? 12 : 6))
        return; /* dropped */
    m->force_live = 0;
    s_live(m, t, seq, now);
    if (!final && pct(m, 3))
        s_live(m, t, seq, now); /* the same message twice */
}

/* One answer of the replay asked for, or its end marker. */
static void s_answer(sim *m, kvix_seqtrack *t, uint64_t now, int clean)
{
    if (m->pnext >= m->pend) {
        if (kvix__seqtrack_replay_end(t, now) != KVIX_OK)
            m->bad |= 8;
        return;
    }
    uint64_t seq = m->pnext++;
    if (!clean && pct(m, 3))
        return; /* missing from the replay */
    if (!kvix__seqtrack_replay_want(t, seq, now))
        return;
    item it = {m->prun, seq};
    kvix__seqtrack_replayed(t, seq, !clean && pct(m, 2) ? NULL : &it);
}

static void sim_run(uint64_t seed, int lossy, int epochs, int steps)
{
    sim m;
    memset(&m, 0, sizeof m);
    m.rng = seed;
    m.lossy = lossy;
    m.epochs = epochs;
    m.buffer = lossy ? 8 : 1000000;
    m.last_live = -1;
    m.fresh = 1;
    kvix_seqtrack_config cfg = {lossy ? 6 : 100000, 20, 0};
    kvix_seqtrack t;
    kvix__seqtrack_init(&t, &cfg, &sops, &m);
    uint64_t now = 0;
    for (int i = 0; i < steps; i++) {
        unsigned r = (unsigned)(rnd(&m) % 100);
        if (m.pending && r < 35) {
            if (!m.silent)
                s_answer(&m, &t, now, !lossy);
        } else if (r < 37 && m.last_live >= (epochs ? 0 : 1) && !m.force_live &&
                   (lossy || !m.pending)) {
            /* restart: counters from 0, cache and replay buffer gone. Each
             * run is seen live before the next, so every restart shows: by
             * its epoch, or without epochs by its seq 0 (sent for sure)
             * lower than the last one seen. Without losses the engine does
             * not restart during a replay (a gap asked for after it would
             * truly be lost): the subscriber has all the run up to its
             * last batch seen live. */
            if (!lossy && (m.drun != m.run || (int64_t)m.dseq < m.last_live))
                m.bad |= 16;
            m.run++;
            m.s = 0;
            m.last_live = -1;
            m.force_live = !epochs;
            m.restarts++;
        } else {
            s_publish(&m, &t, now, 0);
        }
        if (lossy)
            now++;
        if (kvix__seqtrack_tick(&t, now) != KVIX_OK)
            m.bad |= 8;
    }
    /* The last batch arrives; answers come whole until no replay runs. */
    s_publish(&m, &t, now, 1);
    for (int guard = 0; kvix__seqtrack_replaying(&t, NULL) && guard < 100000; guard++) {
        if (m.pending && !m.silent)
            s_answer(&m, &t, now, 1);
        else
            now += 21;
        if (kvix__seqtrack_tick(&t, now) != KVIX_OK)
            m.bad |= 8;
    }
    CHECK(!kvix__seqtrack_replaying(&t, NULL));
    CHECK_U64(t.nheld, 0);
    CHECK_U64(m.bad, 0);
    CHECK_U64(m.drun, m.run); /* the last batch delivered */
    CHECK_U64(m.dseq, m.s - 1);
    CHECK_U64(m.restarts_seen, m.restarts);
    CHECK_U64(t.counts.restarts, m.restarts);
    CHECK_U64(t.counts.losses, m.losses);
    if (!lossy)
        CHECK_U64(m.losses, 0);
    kvix__seqtrack_release(&t);
    CHECK_U64(m.copies, 0);
}

TEST(randomized_against_a_model)
{
    uint64_t seed = th_seed();
    int runs = (int)(200 * th_scale());
    for (int i = 0; i < runs; i++) {
        uint64_t s = seed + (uint64_t)i * 7919;
        sim_run(s, 0, 0, 400);
        sim_run(s, 0, 1, 400);
        sim_run(s, 1, 0, 400);
        sim_run(s, 1, 1, 400);
    }
}
