/* kvix_ingest: records taken from sources into a live index, refusals
 * counted by reason and reported with their source and position (from the
 * writer threads too), strict stops, query answers and their error lines,
 * the save policy, saves that load back, replacing from a snapshot, and the
 * recovery from peers when none answers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "ingest.h"
#include "kvix/snapshot.h"
#include "kvix/stream.h"

static const char *const sources[] = {"in.ndjson", "<engines>"};

typedef struct seen {
    int n, wakes;
    char what[16], source[32], msg[KVIX_ERR_MSG_MAX];
    uint64_t pos;
    int type, reason;
} seen;

static void on_reject(void *ctx, const kvix_ingest_reject *r)
{
    seen *s = ctx;
    s->n++;
    snprintf(s->what, sizeof s->what, "%s", r->what);
    snprintf(s->source, sizeof s->source, "%s", r->source);
    snprintf(s->msg, sizeof s->msg, "%s", r->err->msg);
    s->pos = r->pos;
    s->type = r->type;
    s->reason = r->err->reason;
}

static void on_wake(void *ctx)
{
    ((seen *)ctx)->wakes++;
}

static kvix_ingest *make(seen *s, unsigned threads, int strict, int query_only, uint64_t every)
{
    kvix_ingest_opts o;
    memset(&o, 0, sizeof o);
    kvix_index_opts_init(&o.index);
    o.index.threads = threads;
    o.strict = strict;
    o.query_only = query_only;
    o.save_every_events = every;
    o.sources = sources;
    o.nsources = 2;
    o.feed_source = 1;
    o.on_reject = on_reject;
    o.on_wake = on_wake;
    o.ctx = s;
    memset(s, 0, sizeof *s);
    kvix_ingest *g = NULL;
    kvix_err err;
    CHECK(kvix_ingest_new(&g, &o, &err) == KVIX_OK);
    return g;
}

typedef struct io {
    kvix_event ev;
    kvix_answer ans;
    kvix_buf out;
    int unknown;
} io;

/* Take one NDJSON line at pos as a reader would hand it over. */
static int line(kvix_ingest *g, io *x, uint64_t pos, const char *text)
{
    kvix_err rerr, err;
    int rc = kvix_event_from_json(text, strlen(text), &x->ev, &rerr);
    return kvix_ingest_take(g, 0, pos, &x->ev, rc ? &rerr : NULL, &x->ans, &x->out, &x->unknown,
                            &err);
}

static void io_init(io *x)
{
    kvix_event_init(&x->ev);
    kvix_answer_init(&x->ans);
    kvix_buf_init(&x->out);
}

static void io_release(io *x)
{
    kvix_event_release(&x->ev);
    kvix_answer_release(&x->ans);
    kvix_buf_release(&x->out);
}

#define STORED(w, local, seq)                                                                   \
    "{\"type\":\"stored\",\"worker\":" #w ",\"bs\":4,\"blocks\":[{\"local\":\"" local          \
    "\",\"seq\":\"" seq "\"}]}"
#define QUERY "{\"type\":\"query\",\"id\":7,\"local\":[\"1\"],\"bs\":4}"

static int out_is(const io *x, const char *want)
{
    return x->out.len == strlen(want) && memcmp(x->out.data, want, x->out.len) == 0;
}

TEST(records_are_applied_answered_and_refused_with_their_place)
{
    seen s;
    kvix_ingest *g = make(&s, 0, 0, 0, 0);
    io x;
    io_init(&x);
    CHECK(line(g, &x, 1, STORED(1, "1", "a1")) == KVIX_OK);
    CHECK_U64(x.out.len, 0);
    CHECK(line(g, &x, 2, "{\"type\":\"stored\",\"worker\":1,\"bs\":4") == KVIX_OK);
    CHECK_U64(s.n, 1);
    CHECK_STR(s.source, "in.ndjson");
    CHECK_U64(s.pos, 2);
    CHECK_STR(s.what, "event");
    CHECK_U64(s.reason, KVIX_REASON_JSON);
    /* a line whose kind could not be told is answered with its error (it may be a query) */
    CHECK(out_is(&x, "{\"error\":\"malformed json at column 34: '}' expected near end of file\"}\n"));
    CHECK(line(g, &x, 2, "{\"type\":\"stored\",\"bs\":4,\"blocks\":[]}") == KVIX_OK);
    CHECK(out_is(&x, "")); /* ...an event is not */
    CHECK(line(g, &x, 3, "{\"type\":\"query\",\"id\":9,\"bs\":4}") == KVIX_OK);
    CHECK_U64(s.reason, KVIX_REASON_MISSING);
    CHECK(x.out.len > 0 && strstr(x.out.data, "\"error\"") && strstr(x.out.data, "9"));
    CHECK(line(g, &x, 4, STORED(1, "2", "a2") ) == KVIX_OK);
    /* a parent the worker does not hold: refused by the index */
    CHECK(line(g, &x, 5, "{\"type\":\"stored\",\"worker\":2,\"bs\":4,\"parent\":\"ff\","
                         "\"blocks\":[{\"local\":\"3\",\"seq\":\"b3\"}]}") == KVIX_OK);
    CHECK_U64(s.pos, 5);
    CHECK_U64(s.type, KVIX_EV_STORED);
    CHECK_U64(s.reason, KVIX_REASON_PARENT);
    CHECK(line(g, &x, 6, QUERY) == KVIX_OK);
    CHECK(x.out.len > 0 && strstr(x.out.data, "\"id\":7") && !strstr(x.out.data, "error"));
    CHECK_U64(x.unknown, 0);
    kvix_ingest_counts c;
    kvix_ingest_counts_get(g, &c);
    CHECK_U64(c.submitted[KVIX_EV_STORED], 3);
    CHECK_U64(c.refused[KVIX_EV_STORED], 1);
    CHECK_U64(c.rejected, 4);
    CHECK_U64(c.reasons[KVIX_REASON_JSON], 1);
    CHECK_U64(c.reasons[KVIX_REASON_MISSING], 2);
    CHECK_U64(c.reasons[KVIX_REASON_PARENT], 1);
    CHECK_U64(c.queries, 1);
    CHECK_U64(c.answered, 1);
    CHECK_U64(c.blocks.stored, 2);
    CHECK_U64(kvix_ingest_rejected(g), 4);
    CHECK(!kvix_ingest_stopped(g));
    io_release(&x);
    kvix_ingest_free(g);
}

TEST(an_unknown_model_is_first_once)
{
    seen s;
    kvix_ingest *g = make(&s, 0, 0, 0, 0);
    io x;
    io_init(&x);
    CHECK(line(g, &x, 1, STORED(1, "1", "a1")) == KVIX_OK);
    const char *q = "{\"type\":\"query\",\"model\":\"other\",\"local\":[\"1\"],\"bs\":4}";
    CHECK(line(g, &x, 2, q) == KVIX_OK);
    CHECK_U64(x.unknown, KVIX_UNKNOWN_MODEL);
    CHECK(strstr(x.out.data, "\"unknown\":\"model\"") != NULL);
    CHECK(line(g, &x, 3, q) == KVIX_OK);
    CHECK_U64(x.unknown, 0); /* asked before */
    CHECK(strstr(x.out.data, "\"unknown\":\"model\"") != NULL);
    io_release(&x);
    kvix_ingest_free(g);
}

TEST(strict_stops_at_the_first_refusal_and_wakes_the_caller)
{
    seen s;
    kvix_ingest *g = make(&s, 0, 1, 0, 0);
    io x;
    io_init(&x);
    CHECK(line(g, &x, 1, STORED(1, "1", "a1")) == KVIX_OK);
    CHECK(!kvix_ingest_stopped(g));
    CHECK_U64(s.wakes, 0);
    CHECK(line(g, &x, 2, "{\"type\":\"removed\",\"worker\":1,\"hashes\":[\"xyz\"]}") == KVIX_OK);
    CHECK(kvix_ingest_stopped(g));
    CHECK_U64(s.wakes, 1);
    CHECK_U64(s.reason, KVIX_REASON_HASH);
    io_release(&x);
    kvix_ingest_free(g);
}

TEST(query_only_refuses_events_with_an_answer_line)
{
    seen s;
    kvix_ingest *g = make(&s, 0, 0, 1, 0);
    io x;
    io_init(&x);
    CHECK(line(g, &x, 4, STORED(1, "1", "a1")) == KVIX_OK);
    CHECK_U64(s.reason, KVIX_REASON_QUERYONLY);
    CHECK(out_is(&x, "{\"error\":\"event in query-only mode (-q)\"}\n"));
    kvix_ingest_counts c;
    kvix_ingest_counts_get(g, &c);
    CHECK_U64(c.blocks.stored, 0);
    io_release(&x);
    kvix_ingest_free(g);
}

TEST(writer_threads_report_refusals_with_their_source_and_position)
{
    seen s;
    kvix_ingest *g = make(&s, 2, 0, 0, 0);
    io x;
    io_init(&x);
    CHECK(line(g, &x, 1, STORED(1, "1", "a1")) == KVIX_OK);
    CHECK(line(g, &x, 123456, "{\"type\":\"stored\",\"worker\":1,\"bs\":8,"
                              "\"blocks\":[{\"local\":\"2\",\"seq\":\"a2\"}]}") == KVIX_OK);
    kvix_ingest_sync(g);
    CHECK_U64(s.n, 1);
    CHECK_STR(s.source, "in.ndjson");
    CHECK_U64(s.pos, 123456);
    CHECK_U64(s.type, KVIX_EV_STORED);
    CHECK_U64(s.reason, KVIX_REASON_BLOCKSIZE);
    kvix_ingest_counts c;
    kvix_ingest_counts_get(g, &c);
    CHECK_U64(c.refused[KVIX_EV_STORED], 1);
    CHECK_U64(c.blocks.stored, 1);
    io_release(&x);
    kvix_ingest_free(g);
}

TEST(saves_follow_the_event_count_and_load_back)
{
    char dir[] = "/tmp/kvix-ingest.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/s.kvix", dir);
    seen s;
    kvix_ingest *g = make(&s, 0, 0, 0, 2);
    io x;
    io_init(&x);
    CHECK(!kvix_ingest_changed(g));
    CHECK(line(g, &x, 1, STORED(1, "1", "a1")) == KVIX_OK);
    CHECK(kvix_ingest_changed(g));
    CHECK(!kvix_ingest_save_due(g));
    CHECK(line(g, &x, 2, "{\"type\":\"stored\",\"worker\":1,\"bs\":4") == KVIX_OK);
    CHECK(!kvix_ingest_save_due(g)); /* a refusal is no event applied */
    CHECK(line(g, &x, 3, STORED(1, "2", "a2")) == KVIX_OK);
    CHECK(kvix_ingest_save_due(g));
    kvix_snapshot_info info;
    kvix_err err;
    CHECK(kvix_ingest_save(g, path, NULL, 0, &info, &err) == KVIX_OK);
    CHECK_U64(info.blocks, 2);
    CHECK(!kvix_ingest_save_due(g));
    CHECK(!kvix_ingest_changed(g));

    /* a stream's message is saved whole or not at all when a service holds it: without one
     * a save goes through */
    kvix_ingest_message_begin(g);
    CHECK(line(g, &x, 4, STORED(2, "1", "b1")) == KVIX_OK);
    kvix_ingest_message_end(g, 9);
    CHECK(kvix_ingest_changed(g));

    /* the file loads back, and replaces another ingest's index */
    seen s2;
    kvix_ingest *h = make(&s2, 0, 0, 0, 0);
    kvix_snapshot *snap;
    CHECK(kvix_snapshot_open(&snap, path, &err) == KVIX_OK);
    CHECK(kvix_ingest_replace(h, snap, 5, &err) == KVIX_OK);
    kvix_snapshot_close(snap);
    kvix_ingest_counts c;
    kvix_ingest_counts_get(h, &c);
    CHECK_U64(c.blocks.stored, 0); /* rebased: the snapshot's blocks are its start */
    kvix_index_stats st;
    kvix_index_stats_get(kvix_ingest_index(h), &st);
    CHECK_U64(st.blocks, 2);
    CHECK(kvix_ingest_changed(h));
    CHECK(kvix_ingest_reset(h, &err) == KVIX_OK);
    kvix_index_stats_get(kvix_ingest_index(h), &st);
    CHECK_U64(st.blocks, 0);
    kvix_ingest_free(h);
    io_release(&x);
    kvix_ingest_free(g);
    unlink(path);
    rmdir(dir);
}

TEST(recovery_says_when_no_peer_answers)
{
    seen s;
    kvix_ingest *g = make(&s, 0, 0, 0, 0);
    kvix_peers *p;
    kvix_err err;
    CHECK(kvix_peers_new(&p, &err) == KVIX_OK);
    kvix_ingest_recovery rec;
    CHECK(kvix_ingest_recover(g, p, NULL, &rec, &err) == KVIX_ENOTFOUND);
    CHECK_STR(err.msg, "no peer given");
    CHECK_U64(rec.asked, 0);
    /* nobody listens on port 1 */
    const char *url = "http://127.0.0.1:1";
    CHECK(kvix_peers_add(p, url, strlen(url), NULL, &err) == KVIX_OK);
    CHECK(kvix_ingest_recover(g, p, NULL, &rec, &err) == KVIX_ENOTFOUND);
    CHECK_U64(rec.asked, 1);
    CHECK(strcmp(err.msg, "no peer given") != 0);
    kvix_peers_free(p);
    kvix_ingest_free(g);
}
