/* kvix_follow against a real nats-server (JetStream, its store in the test's
 * scratch folder, loopback, a port the server picks itself): the stream's
 * records applied in order up to its last message and the position kept; a
 * follower resumed from that position takes only what came after; a stream
 * whose retention dropped the next message is a gap, given up without
 * peers, or with reset_on_gap an index started empty from the stream's
 * first message; a follower told to stop while it waits for a server says
 * so. Every wait is bounded; nothing depends on timing. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "follow.h"
#include "kvix/index.h"
#include "ingest.h"
#include "kvix/natslog.h"

extern char **environ;

typedef struct server {
    pid_t pid;
    char url[64];
} server;

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The port in the server's log once it says it is ready, else 0. */
static unsigned ready_port(const char *log)
{
    FILE *f = fopen(log, "r");
    if (!f)
        return 0;
    char line[512];
    unsigned port = 0;
    int ready = 0;
    const char *at = "Listening for client connections on 127.0.0.1:";
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, at);
        if (p)
            port = (unsigned)strtoul(p + strlen(at), NULL, 10);
        ready |= strstr(line, "Server is ready") != NULL;
    }
    fclose(f);
    return ready ? port : 0;
}

/* nats-server -js with its store and log under name in the scratch folder.
 * 0 and s->url set, or -1 (a failed check says why). */
static int server_start(server *s, const char *name)
{
    char store[512], log[520];
    snprintf(store, sizeof store, "%s", th_path(name));
    snprintf(log, sizeof log, "%s.log", store);
    /* (writable copies: posix_spawn's argv is char *const[]) */
    char a0[] = "nats-server", a1[] = "-js", a2[] = "-sd", a4[] = "-a", a5[] = "127.0.0.1",
         a6[] = "-p", a7[] = "-1";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    char *argv[] = {a0, a1, a2, store, a4, a5, a6, a7, NULL};
    int rc = posix_spawnp(&s->pid, "nats-server", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (!CHECK(rc == 0)) { /* nats-server installed ('make deps', .ci/deps) */
        s->pid = 0;
        return -1;
    }
    for (int i = 0; i < 1200; i++) { /* up to 60 s: a loaded machine */
        unsigned port = ready_port(log);
        if (port) {
            snprintf(s->url, sizeof s->url, "nats://127.0.0.1:%u", port);
            return 0;
        }
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            s->pid = 0;
            break;
        }
        nap_ms(50);
    }
    CHECK(!"nats-server did not start");
    return -1;
}

static void server_stop(server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
    }
    s->pid = 0;
}

/* One stored batch per eid in first..last (worker 1, dp 0, model m, bs 4)
 * on stream name; the stream made with at most max_bytes (0: no limit). */
static int publish(const char *url, const char *name, int64_t max_bytes, int first, int last)
{
    kvix_natslog_opts o;
    kvix_natslog_opts_init(&o);
    o.url = url;
    o.stream = name;
    o.subject = "t";
    o.max_bytes = max_bytes;
    o.timeout_ms = 20000;
    kvix_natslog *l = NULL;
    kvix_err err;
    if (!CHECK(kvix_natslog_open(&l, &o, &err) == KVIX_OK))
        return -1;
    int rc = KVIX_EIO;
    for (int i = 0; i < 600 && rc == KVIX_EIO; i++) { /* connected in the background */
        rc = kvix_natslog_ensure_stream(l, NULL, &err);
        if (rc == KVIX_EIO)
            nap_ms(50);
    }
    CHECK(rc == KVIX_OK);
    for (int e = first; rc == KVIX_OK && e <= last; e++) {
        char rec[256];
        int n = snprintf(rec, sizeof rec,
                         "{\"type\":\"stored\",\"worker\":1,\"dp\":0,\"model\":\"m\",\"bs\":4,"
                         "\"eid\":%d,\"blocks\":[{\"local\":\"%016x\",\"seq\":\"%016x\"}]}\n",
                         e, e, e);
        rc = kvix_natslog_publish(l, rec, (size_t)n, KVIX_FMT_NDJSON, &err);
        CHECK(rc == KVIX_OK);
    }
    if (rc == KVIX_OK)
        CHECK((rc = kvix_natslog_flush(l, 20000, &err)) == KVIX_OK);
    kvix_natslog_free(l);
    return rc == KVIX_OK ? 0 : -1;
}

typedef struct seen {
    int notes[KVIX_FOLLOW_RESET + 1];
    int stop_after_wait; /* stopping() says yes once a WAITING note came */
} seen;

static void on_note(void *ctx, const kvix_follow_note *n)
{
    seen *s = ctx;
    if (n->kind >= 0 && n->kind <= KVIX_FOLLOW_RESET)
        s->notes[n->kind]++;
}

static int stopping(void *ctx)
{
    seen *s = ctx;
    return s->stop_after_wait && s->notes[KVIX_FOLLOW_WAITING];
}

static const char *const sources[] = {"<stream>"};

static kvix_ingest *new_ingest(void)
{
    kvix_ingest_opts o;
    memset(&o, 0, sizeof o);
    kvix_index_opts_init(&o.index);
    o.sources = sources;
    o.nsources = 1;
    kvix_ingest *g = NULL;
    kvix_err err;
    CHECK(kvix_ingest_new(&g, &o, &err) == KVIX_OK);
    return g;
}

/* Follow name on url from seq with the options given: the run's status,
 * *seq the position reached. */
static int follow(kvix_ingest *g, const char *url, const char *name, uint64_t *seq,
                  bool reset_on_gap, seen *s)
{
    kvix_natslog_opts no;
    kvix_natslog_opts_init(&no);
    no.url = url;
    no.stream = name;
    no.timeout_ms = 20000;
    kvix_follow_opts fo = {
        .nats = &no,
        .reset_on_gap = reset_on_gap,
        .until_caught_up = true,
        .seq = *seq,
        .on_note = on_note,
        .ctx = s,
    };
    kvix_follow *f = NULL;
    kvix_err err;
    if (!CHECK(kvix_follow_new(&f, g, &fo, &err) == KVIX_OK))
        return -1;
    kvix_ingest_loop lp = {-1, stopping, NULL, NULL, NULL, s};
    int rc = kvix_follow_run(f, 0, &lp, &err);
    *seq = kvix_follow_seq(f);
    CHECK(!kvix_follow_lost(f));
    kvix_follow_free(f);
    return rc;
}

static uint64_t blocks(kvix_ingest *g)
{
    kvix_index_stats st;
    kvix_index_stats_get(kvix_ingest_index(g), &st);
    return st.blocks;
}

TEST(follow_until_caught_up_then_resume)
{
    server sv;
    if (server_start(&sv, "js1"))
        return;
    if (publish(sv.url, "F", 0, 1, 5) == 0) {
        kvix_ingest *g = new_ingest();
        seen s;
        memset(&s, 0, sizeof s);
        uint64_t seq = 0;
        CHECK(follow(g, sv.url, "F", &seq, false, &s) == KVIX_EOF);
        CHECK_U64(seq, 5);
        CHECK_U64(blocks(g), 5);
        CHECK(s.notes[KVIX_FOLLOW_GAP] == 0);
        /* resumed from 5: only what came after, nothing applied twice */
        CHECK(publish(sv.url, "F", 0, 6, 7) == 0);
        CHECK(follow(g, sv.url, "F", &seq, false, &s) == KVIX_EOF);
        CHECK_U64(seq, 7);
        CHECK_U64(blocks(g), 7);
        kvix_ingest_counts c;
        kvix_ingest_counts_get(g, &c);
        CHECK_U64(c.submitted[KVIX_EV_STORED], 7);
        CHECK_U64(c.rejected, 0);
        kvix_ingest_free(g);
    }
    server_stop(&sv);
}

TEST(follow_gap_given_up_or_reset)
{
    server sv;
    if (server_start(&sv, "js2"))
        return;
    /* a stream of a few hundred bytes keeps only the last messages */
    if (publish(sv.url, "G", 400, 1, 8) == 0) {
        kvix_ingest *g = new_ingest();
        seen s;
        memset(&s, 0, sizeof s);
        uint64_t seq = 0;
        CHECK(follow(g, sv.url, "G", &seq, false, &s) == KVIX_ENOTFOUND);
        CHECK(s.notes[KVIX_FOLLOW_GAP] == 1);
        CHECK(s.notes[KVIX_FOLLOW_CANNOT] == 1);
        CHECK(s.notes[KVIX_FOLLOW_RESET] == 0);
        CHECK_U64(seq, 0);
        CHECK_U64(blocks(g), 0);
        memset(&s, 0, sizeof s);
        CHECK(follow(g, sv.url, "G", &seq, true, &s) == KVIX_EOF);
        CHECK(s.notes[KVIX_FOLLOW_GAP] == 1);
        CHECK(s.notes[KVIX_FOLLOW_RESET] == 1);
        CHECK_U64(seq, 8);
        /* the stream's messages from its first on: fewer than published */
        CHECK(blocks(g) > 0 && blocks(g) < 8);
        kvix_ingest_free(g);
    }
    server_stop(&sv);
}

TEST(follow_stopped_while_waiting_for_the_server)
{
    /* a follower deaf to its stop while it waits (nats.c's connect tried in
     * place for as long as the server is away) would hang here: killed */
    alarm(60);
    /* a server started and killed: its port answers nobody now */
    server sv;
    if (server_start(&sv, "js3"))
        return;
    char url[64];
    snprintf(url, sizeof url, "%s", sv.url);
    server_stop(&sv);
    kvix_ingest *g = new_ingest();
    seen s;
    memset(&s, 0, sizeof s);
    s.stop_after_wait = 1;
    uint64_t seq = 0;
    CHECK(follow(g, url, "W", &seq, false, &s) == KVIX_ESYS);
    CHECK(s.notes[KVIX_FOLLOW_WAITING] == 1);
    CHECK_U64(seq, 0);
    kvix_ingest_free(g);
    alarm(0);
}

/* Records (NDJSON) published as kvsub --nats does, event by event: one
 * message per engine batch (the events of one worker, dp and eid in a row),
 * a clear without eid a message of its own. */
static const char *const framed[] = {
    "{\"type\":\"stored\",\"worker\":1,\"model\":\"m\",\"bs\":4,\"eid\":1,\"blocks\":[{\"local\":\"a\",\"seq\":\"a\"}]}",
    "{\"type\":\"stored\",\"worker\":1,\"model\":\"m\",\"bs\":4,\"eid\":1,\"blocks\":[{\"local\":\"b\",\"seq\":\"b\"}]}",
    "{\"type\":\"removed\",\"worker\":1,\"model\":\"m\",\"eid\":2,\"hashes\":[\"a\"]}",
    "{\"type\":\"cleared\",\"worker\":1,\"model\":\"m\"}",
    "{\"type\":\"cleared\",\"worker\":1,\"model\":\"m\"}",
    "{\"type\":\"stored\",\"worker\":2,\"model\":\"m\",\"bs\":4,\"eid\":1,\"blocks\":[{\"local\":\"c\",\"seq\":\"c\"}]}",
    "{\"type\":\"stored\",\"worker\":1,\"model\":\"m\",\"bs\":4,\"eid\":3,\"blocks\":[{\"local\":\"d\",\"seq\":\"d\"}]}",
};
#define NFRAMED (sizeof framed / sizeof *framed)
/* the message each record lands in */
static const uint64_t framed_seq[NFRAMED] = {1, 1, 2, 3, 4, 5, 6};

static kvix_natslog *open_log(const char *url, const char *name)
{
    kvix_natslog_opts o;
    kvix_natslog_opts_init(&o);
    o.url = url;
    o.stream = name;
    o.subject = "t";
    o.timeout_ms = 20000;
    kvix_natslog *l = NULL;
    kvix_err err;
    if (!CHECK(kvix_natslog_open(&l, &o, &err) == KVIX_OK))
        return NULL;
    int rc = KVIX_EIO;
    for (int i = 0; i < 600 && rc == KVIX_EIO; i++) { /* connected in the background */
        rc = kvix_natslog_ensure_stream(l, NULL, &err);
        if (rc == KVIX_EIO)
            nap_ms(50);
    }
    CHECK(rc == KVIX_OK);
    return l;
}

/* framed[0..n) published event by event; 0, or -1. */
static int publish_events(kvix_natslog *l, size_t n)
{
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_err err;
    int rc = KVIX_OK;
    for (size_t i = 0; rc == KVIX_OK && i < n; i++) {
        CHECK((rc = kvix_event_from_json(framed[i], strlen(framed[i]), &ev, &err)) == KVIX_OK);
        if (rc == KVIX_OK)
            CHECK((rc = kvix_natslog_publish_event(l, &ev, &err)) == KVIX_OK);
    }
    kvix_event_release(&ev);
    if (rc == KVIX_OK)
        CHECK((rc = kvix_natslog_publish_pending(l, &err)) == KVIX_OK);
    if (rc == KVIX_OK)
        CHECK((rc = kvix_natslog_flush(l, 20000, &err)) == KVIX_OK);
    return rc == KVIX_OK ? 0 : -1;
}

TEST(events_published_as_kvsub_does_read_back_message_by_message)
{
    server sv;
    if (server_start(&sv, "js4"))
        return;
    kvix_natslog *l = open_log(sv.url, "E");
    if (l && publish_events(l, NFRAMED) == 0) {
        kvix_natslog_pubstats ps;
        kvix_natslog_pubstats_get(l, &ps);
        CHECK_U64(ps.acked, 6);
        CHECK_U64(ps.duplicates, 0);
        kvix_natslog_state st;
        kvix_err err;
        CHECK(kvix_natslog_start(l, 0, &st, &err) == KVIX_OK);
        CHECK_U64(st.last, 6);
        kvix_event ev, want;
        kvix_event_init(&ev);
        kvix_event_init(&want);
        for (size_t i = 0; i < NFRAMED; i++) {
            uint64_t seq = 0;
            int last = 0;
            if (!CHECK(kvix_natslog_next_record(l, 20000, &ev, &seq, &last, &err) == 1))
                break;
            CHECK(kvix_event_from_json(framed[i], strlen(framed[i]), &want, &err) == KVIX_OK);
            CHECK_U64(seq, framed_seq[i]);
            CHECK(last == (i + 1 == NFRAMED || framed_seq[i + 1] != seq));
            CHECK(ev.type == want.type && ev.worker == want.worker && ev.has_eid == want.has_eid &&
                  ev.eid == want.eid);
        }
        kvix_event_release(&ev);
        kvix_event_release(&want);
    }
    kvix_natslog_free(l);
    /* another publisher (a kvsub restarted) sends the first batch again:
     * the same message id, dropped by the server */
    l = open_log(sv.url, "E");
    if (l && publish_events(l, 2) == 0) {
        kvix_natslog_pubstats ps;
        kvix_natslog_pubstats_get(l, &ps);
        CHECK_U64(ps.acked, 1);
        CHECK_U64(ps.duplicates, 1);
    }
    kvix_natslog_free(l);
    server_stop(&sv);
}
