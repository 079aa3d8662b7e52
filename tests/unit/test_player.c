/* kvix_player: logs and traces played through the record path (filters,
 * the limit, strict, rejected records said with their place, a record due
 * too far ahead sent at once), written as NDJSON, and the publishers bound
 * by a scan of the log (those the filters keep only). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "player.h"

typedef struct heard {
    int n[KVIX_PLAYER_BAD_REQUEST + 1];
    char last[512];
} heard;

static void on_note(void *ctx, const kvix_player_note *n)
{
    heard *h = ctx;
    h->n[n->kind]++;
    snprintf(h->last, sizeof h->last, "%s", n->msg);
}

typedef struct run {
    char dir[64], log[128];
    FILE *out;
    char *text;
    size_t len;
    heard h;
    kvix_player_opts o;
} run;

static void setup(run *r, const char *log_text)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "/tmp/kvix-player.XXXXXX");
    CHECK(mkdtemp(r->dir) != NULL);
    snprintf(r->log, sizeof r->log, "%s/log", r->dir);
    FILE *f = fopen(r->log, "w");
    CHECK(f != NULL);
    fputs(log_text, f);
    fclose(f);
    r->out = open_memstream(&r->text, &r->len);
    r->o.fmt = KVIX_FMT_NDJSON;
    r->o.out = r->out;
    r->o.timing = KVIX_PACE_FAST;
    r->o.factor = 1;
    kvix_filter_init(&r->o.filter);
    r->o.on_note = on_note;
    r->o.ctx = &r->h;
}

static int play(run *r, kvix_player *p, int scan)
{
    kvix_err err;
    int fd = open(r->log, O_RDONLY);
    CHECK(fd >= 0);
    return kvix_player_play_log(p, fd, "log", scan, &err);
}

static void teardown(run *r)
{
    fclose(r->out);
    free(r->text);
    unlink(r->log);
    rmdir(r->dir);
}

#define EV(w, local, seq)                                                                       \
    "{\"type\":\"stored\",\"worker\":" #w ",\"bs\":4,\"blocks\":[{\"local\":\"" local          \
    "\",\"seq\":\"" seq "\"}]}\n"

static size_t lines(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += s[i] == '\n';
    return n;
}

TEST(a_log_is_filtered_written_and_its_bad_records_said)
{
    run r;
    setup(&r, EV(1, "1", "a1") "{\"type\":\n" EV(2, "2", "b2") EV(1, "3", "a3")
              "{\"type\":\"query\",\"local\":[\"1\"],\"bs\":4}\n");
    kvix_filter_worker_add(&r.o.filter, 1, 0, 1, NULL);
    kvix_player *p;
    kvix_err err;
    CHECK(kvix_player_new(&p, &r.o, &err) == KVIX_OK);
    CHECK(play(&r, p, 0) == KVIX_OK);
    fflush(r.out);
    kvix_player_counts c;
    kvix_player_counts_get(p, &c);
    CHECK_U64(c.in, 4);
    CHECK_U64(c.rejected, 1);
    CHECK_U64(c.filtered, 1); /* worker 2 */
    CHECK_U64(c.written, 3);
    CHECK_U64(c.by_type[KVIX_EV_STORED], 2);
    CHECK_U64(c.by_type[KVIX_EV_QUERY], 1);
    CHECK_U64(r.h.n[KVIX_PLAYER_REJECTED], 1);
    CHECK(strncmp(r.h.last, "bad record at log:2: ", 21) == 0);
    CHECK_U64(lines(r.text, r.len), 3);
    CHECK(strstr(r.text, "\"worker\":2") == NULL);
    CHECK_U64(kvix_player_filter(p)->workers[0].hits, 2);
    CHECK_U64(kvix_player_ended(p), KVIX_PLAYER_PLAYING);
    kvix_player_free(p);
    teardown(&r);
}

TEST(the_limit_and_strict_stop_the_player)
{
    run r;
    setup(&r, EV(1, "1", "a1") EV(1, "2", "a2") "not json\n" EV(1, "3", "a3"));
    r.o.limit = 2;
    kvix_player *p;
    kvix_err err;
    CHECK(kvix_player_new(&p, &r.o, &err) == KVIX_OK);
    CHECK(play(&r, p, 0) == KVIX_OK);
    CHECK_U64(kvix_player_ended(p), KVIX_PLAYER_LIMIT);
    kvix_player_counts c;
    kvix_player_counts_get(p, &c);
    CHECK_U64(c.written, 2);
    CHECK_U64(c.rejected, 0); /* stopped before the bad line */
    kvix_player_free(p);

    r.o.limit = 0;
    r.o.strict = 1;
    CHECK(kvix_player_new(&p, &r.o, &err) == KVIX_OK);
    CHECK(play(&r, p, 0) == KVIX_OK);
    CHECK_U64(kvix_player_ended(p), KVIX_PLAYER_STRICT);
    kvix_player_counts_get(p, &c);
    CHECK_U64(c.written, 2);
    CHECK_U64(c.rejected, 1);
    CHECK_U64(c.in, 2); /* the record after the bad one is not read */
    kvix_player_free(p);
    teardown(&r);
}

TEST(a_record_due_too_far_ahead_goes_at_once_and_is_said)
{
    run r;
    setup(&r, "{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"ts\":1,\"blocks\":[{\"local\":\"1\","
              "\"seq\":\"a1\"}]}\n"
              "{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"ts\":1e12,\"blocks\":[{\"local\":"
              "\"2\",\"seq\":\"a2\"}]}\n");
    r.o.timing = KVIX_PACE_RECORDED;
    kvix_player *p;
    kvix_err err;
    CHECK(kvix_player_new(&p, &r.o, &err) == KVIX_OK);
    CHECK(play(&r, p, 0) == KVIX_OK);
    kvix_player_counts c;
    kvix_player_counts_get(p, &c);
    CHECK_U64(c.written, 2);
    CHECK_U64(r.h.n[KVIX_PLAYER_FAR], 1);
    CHECK(strncmp(r.h.last, "record at log:2 is due in ", 26) == 0);
    kvix_player_free(p);
    teardown(&r);
}

/* engines publish token ids: a stored event for the wire carries them */
#define PEV(w, dp, local, seq)                                                                  \
    "{\"type\":\"stored\",\"worker\":" #w ",\"dp\":" #dp ",\"bs\":4,\"tokens\":[[1,2,3,4]],"     \
    "\"blocks\":[{\"local\":\"" local "\",\"seq\":\"" seq "\"}]}\n"

TEST(a_scan_binds_a_publisher_per_kept_worker_and_dp)
{
    run r;
    setup(&r, PEV(1, 0, "1", "a1") PEV(2, 0, "2", "b2") PEV(1, 1, "3", "c3") PEV(3, 0, "4", "d4")
                  PEV(1, 0, "5", "a5"));
    kvix_filter_worker_add(&r.o.filter, 1, 0, 1, NULL); /* every dp of worker 1 */
    kvix_filter_worker_add(&r.o.filter, 3, 0, 1, NULL);
    char base[128];
    snprintf(base, sizeof base, "ipc://%s/pub", r.dir);
    kvix_pubset_config pc;
    kvix_pubset_config_init(&pc);
    pc.pub = base;
    r.o.pub = &pc;
    r.o.pub_wait = 0;
    kvix_player *p;
    kvix_err err;
    CHECK(kvix_player_new(&p, &r.o, &err) == KVIX_OK);
    CHECK(play(&r, p, 1) == KVIX_OK);
    kvix_player_counts c;
    kvix_player_counts_get(p, &c);
    CHECK_U64(c.publishers, 3); /* 1:0, 1:1, 3:0; not 2 */
    CHECK_U64(c.in, 0);         /* a scan plays nothing */
    CHECK_U64(r.h.n[KVIX_PLAYER_BOUND], 3);
    CHECK(strstr(r.h.last, "worker 3 dp 0 publishes on ipc://") != NULL);
    CHECK(kvix_player_start(p, &err) == KVIX_OK);
    CHECK(play(&r, p, 0) == KVIX_OK);
    kvix_player_finish(p);
    kvix_player_counts_get(p, &c);
    CHECK_U64(c.written, 4);
    CHECK_U64(c.filtered, 1);
    CHECK_U64(c.rejected, 0);
    CHECK_U64(c.batches, 4); /* a batch per change of (worker, dp) */
    CHECK_U64(r.len, 0);   /* nothing on the output */
    kvix_player_free(p);
    for (int w = 0; w < 4; w++)
        for (int d = 0; d < 2; d++) {
            char path[160];
            snprintf(path, sizeof path, "%s/pub-%d-%d", r.dir, w, d);
            unlink(path);
        }
    teardown(&r);
}

TEST(a_trace_plays_its_requests_up_to_the_limit)
{
    run r;
    setup(&r, "{\"timestamp\":0,\"input_length\":1024,\"output_length\":1,\"hash_ids\":[0,1]}\n"
              "{\"timestamp\":1,\"input_length\":1024}\n"
              "{\"timestamp\":2,\"input_length\":1536,\"output_length\":1,\"hash_ids\":[0,1,2]}\n"
              "{\"timestamp\":3,\"input_length\":512,\"output_length\":1,\"hash_ids\":[7]}\n");
    kvix_mooncake_opts mo;
    kvix_mooncake_opts_init(&mo);
    mo.workers = 2;
    kvix_mooncake *m;
    kvix_err err;
    CHECK(kvix_mooncake_new(&m, &mo, &err) == KVIX_OK);
    r.o.limit = 2; /* requests, not records */
    kvix_player *p;
    CHECK(kvix_player_new(&p, &r.o, &err) == KVIX_OK);
    int fd = open(r.log, O_RDONLY);
    CHECK(kvix_player_play_mooncake(p, m, fd, "trace", &err) == KVIX_OK);
    kvix_player_counts c;
    kvix_player_counts_get(p, &c);
    CHECK_U64(r.h.n[KVIX_PLAYER_BAD_REQUEST], 1);
    CHECK(strncmp(r.h.last, "bad request at trace:2: ", 24) == 0);
    CHECK_U64(c.rejected, 1);
    kvix_mooncake_stats st;
    kvix_mooncake_stats_get(m, &st);
    CHECK_U64(st.requests, 2);
    CHECK(c.written > 2); /* each request: a query and its stores */
    CHECK_U64(c.written, c.in);
    kvix_player_free(p);
    kvix_mooncake_free(m);
    teardown(&r);
}
