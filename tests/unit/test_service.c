/* The service protocol without sockets: exact u64 JSON, routing and error
 * mapping of kvix_service_handle, /dump read back into an equal index. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "enginefeed.h"
#include "kvix/service.h"
#include "kvix/snapshot.h"
#include "kvix/stream.h"
#include "service_int.h"
#include "service_priv.h"

static int u64_of(const char *text, uint64_t *out)
{
    kvix_err e;
    json_t *j = kvix_json_u64_loadb(text, strlen(text), &e);
    if (!j)
        return e.code;
    json_t *v = json_array_get(j, 0);
    *out = json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
    json_decref(j);
    return 0;
}

TEST(u64_reads_every_value_exactly)
{
    uint64_t v = 0;
    CHECK(u64_of("[0]", &v) == 0 && v == 0);
    CHECK(u64_of("[9223372036854775807]", &v) == 0 && v == UINT64_C(9223372036854775807));
    CHECK(u64_of("[9223372036854775808]", &v) == 0 && v == UINT64_C(9223372036854775808));
    CHECK(u64_of("[18446744073709551615]", &v) == 0 && v == UINT64_MAX);
    CHECK(u64_of(" [ 18446744073709551614 ] ", &v) == 0 && v == UINT64_MAX - 1);
    CHECK_U64(u64_of("[18446744073709551616]", &v), (uint64_t)KVIX_ERANGE);
    CHECK_U64(u64_of("[99999999999999999999999]", &v), (uint64_t)KVIX_ERANGE);
    CHECK_U64(u64_of("[-1]", &v), (uint64_t)KVIX_EINVAL);
    CHECK_U64(u64_of("[1,", &v), (uint64_t)KVIX_EINVAL);
    /* JSON has no leading zeros, above 2^63-1 (rewritten before jansson) too */
    CHECK_U64(u64_of("[0018446744073709551615]", &v), (uint64_t)KVIX_EINVAL);
    CHECK_U64(u64_of("[09223372036854775808]", &v), (uint64_t)KVIX_EINVAL);
    CHECK_U64(u64_of("[01]", &v), (uint64_t)KVIX_EINVAL);
    CHECK_U64(u64_of("[00]", &v), (uint64_t)KVIX_EINVAL);
    CHECK(u64_of("[0.5e1]", &v) == KVIX_OK); /* a real, the reader's to refuse */
    /* strings are left alone, escapes included; reals stay reals */
    kvix_err e;
    const char *t = "{\"a\":\"-1 \\\" 18446744073709551616\",\"b\":1.5e3,\"c\":-0.5}";
    json_t *j = kvix_json_u64_loadb(t, strlen(t), &e);
    CHECK(j == NULL); /* -0.5: a negative number */
    t = "{\"a\":\"-1 \\\" 18446744073709551616\",\"b\":1.5e3}";
    j = kvix_json_u64_loadb(t, strlen(t), &e);
    CHECK(j != NULL);
    if (j) {
        CHECK_STR(json_string_value(json_object_get(j, "a")), "-1 \" 18446744073709551616");
        CHECK(json_is_real(json_object_get(j, "b")));
        json_decref(j);
    }
}

/* a (plain reader) and b (references through refs) hold the same values */
static int same_doc(json_t *a, json_t *b, const kvix_u64_refs *refs)
{
    if (json_is_integer(a))
        return json_is_integer(b) && (uint64_t)json_integer_value(a) ==
                                         kvix_u64_ref(refs, json_integer_value(b));
    if (json_is_array(a)) {
        if (!json_is_array(b) || json_array_size(a) != json_array_size(b))
            return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same_doc(json_array_get(a, i), json_array_get(b, i), refs))
                return 0;
        return 1;
    }
    if (json_is_object(a)) {
        const char *k;
        json_t *v;
        if (!json_is_object(b) || json_object_size(a) != json_object_size(b))
            return 0;
        json_object_foreach(a, k, v) if (!same_doc(v, json_object_get(b, k), refs)) return 0;
        return 1;
    }
    return json_equal(a, b);
}

/* The reader with references accepts what the plain one accepts, with the
 * same values, and refuses the rest with the same error. */
static int same_reading(const char *t, size_t len, kvix_u64_refs *refs)
{
    kvix_err e1, e2;
    json_t *a = kvix_json_u64_loadb(t, len, &e1), *b = kvix__json_u64_loadb_refs(t, len, refs, &e2);
    int ok = a ? b && same_doc(a, b, refs)
               : !b && e1.code == e2.code && strcmp(e1.msg, e2.msg) == 0;
    json_decref(a);
    json_decref(b);
    return ok;
}

TEST(u64_references_read_as_the_plain_reader)
{
    static const char *const texts[] = {
        "[0]", "[1,22,333,4444,55555]", "[18446744073709551615,9223372036854775808]",
        "[9223372036854775807,1]", "[18446744073709551616]", "[-1]", "[1,", "[0123]",
        "[00000000000000000000000123]", "[018446744073709551615]", "[1.5e300,123456]",
        "{\"a\":\"123456 \\\" 18446744073709551616\",\"b\":[123456789,12]}",
        "{\"a\":1234,\"a\":5678}", "[123456,+123456]", "[.123456]", "[e123456]",
        "[123456abc]", "[1234567]x", "", " ", "{\"block_hashes\":[],\"model_name\":\"m\"}",
    };
    kvix_u64_refs refs = {0};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        if (!CHECK(same_reading(texts[i], strlen(texts[i]), &refs)))
            fprintf(stderr, "  text: %s\n", texts[i]);
    /* random arrays of literals of every length (more than 10 and 100 of
     * them: the references grow a digit), some of them broken */
    uint64_t seed = th_seed();
    char t[8192];
    int rounds = (int)(400 * th_scale()) + 1;
    for (int r = 0; r < rounds; r++) {
        size_t n = 0, count = th_splitmix(&seed) % 300;
        t[n++] = '[';
        for (size_t i = 0; i < count && n < sizeof t - 64; i++) {
            uint64_t x = th_splitmix(&seed), shift = th_splitmix(&seed) % 64;
            n += (size_t)snprintf(t + n, 32, "%s%" PRIu64, i ? "," : "", x >> shift);
        }
        t[n++] = ']';
        if (r % 4 == 3) /* a byte changed anywhere */
            t[th_splitmix(&seed) % n] = "-.e0x,]\"9 "[th_splitmix(&seed) % 10];
        if (!CHECK(same_reading(t, n, &refs)))
            fprintf(stderr, "  text: %.*s\n", (int)n, t);
    }
    kvix__u64_refs_release(&refs);
}

static void feed(kvix_index *idx, const char *line)
{
    kvix_event ev;
    kvix_err e;
    kvix_event_init(&ev);
    CHECK(kvix_event_from_json(line, strlen(line), &ev, &e) == 0);
    CHECK(kvix_index_apply(idx, &ev, NULL, &e) == 0);
    kvix_event_release(&ev);
}

static kvix_index *new_index(void)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    kvix_index *idx = NULL;
    kvix_err e;
    CHECK(kvix_index_new(&idx, &o, &e) == 0);
    return idx;
}

TEST(handle_routes_and_maps_errors)
{
    kvix_index *idx = new_index();
    feed(idx, "{\"type\":\"stored\",\"worker\":3,\"dp\":1,\"model\":\"m\",\"bs\":2,\"eid\":5,"
              "\"blocks\":[{\"local\":\"ffffffffffffffff\",\"seq\":\"01\"}]}");
    kvix_service *s = NULL;
    kvix_service_opts so = {.idx = idx, .body_max = 64};
    kvix_err e;
    CHECK(kvix_service_new(&s, &so, &e) == 0);
    kvix_service_response r;
    kvix_service_response_init(&r);
    static const struct {
        const char *method, *path, *body;
        int status;
        const char *answer;
    } cases[] = {
        {"GET", "/health", "", 200, "{\"status\":\"ok\"}"},
        {"POST", "/query_by_hash", "{\"block_hashes\":[18446744073709551615],\"model_name\":\"m\"}",
         200, "{\"scores\":{\"3\":{\"1\":2}},\"frequencies\":[],\"tree_sizes\":{\"3\":{\"1\":1}}}"},
        {"POST", "/query_by_hash", "{\"block_hashes\":[1],\"model_name\":\"x\"}", 404, NULL},
        {"POST", "/query_by_hash", "{\"block_hashes\":[1.0],\"model_name\":\"m\"}", 400, NULL},
        {"POST", "/query", "{\"model\":\"m\",\"bs\":4,\"local\":[\"01\"]}", 409, NULL},
        {"POST", "/query", "{\"model\":\"m\",\"local\":[\"ffffffffffffffff\"]}", 200,
         "{\"blocks\":1,\"scores\":[{\"worker\":3,\"dp\":1,\"blocks\":1,\"tokens\":2,"
         "\"tiers\":{\"gpu\":1}}]}\n"},
        {"POST", "/query", "{\"model_name\":\"m\",\"token_ids\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}",
         413, NULL},
        {"GET", "/query", "", 405, NULL},
        {"DELETE", "/health", "", 405, NULL},
        {"GET", "/nothing", "", 404, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvix_service_handle(s, cases[i].method, cases[i].path, cases[i].body,
                            strlen(cases[i].body), &r);
        CHECK_U64(r.status, cases[i].status);
        if (cases[i].answer)
            CHECK_STR(r.body.data, cases[i].answer);
        else
            CHECK(r.body.data && strncmp(r.body.data, "{\"error\":\"", 10) == 0);
    }
    kvix_service_handle(s, "GET", "/metrics", "", 0, &r);
    CHECK(r.body.data && strstr(r.body.data, "dynamo_kvindexer_errors_total{endpoint=\"/query\","
                                             "status_class=\"4xx\"} 3\n"));
    CHECK(r.body.data && strstr(r.body.data, "\ndynamo_kvindexer_workers 1\n"));
    kvix_service_response_release(&r);
    kvix_service_free(s);
    kvix_index_free(idx);
}

/* One response reused for state after state: each use lets go of the last
 * one's file and place in flight (a reused response kept its place before,
 * so the bound's worth of them later answered 503 for ever). */
TEST(a_reused_response_gives_back_its_state)
{
    kvix_index *idx = new_index();
    feed(idx, "{\"type\":\"stored\",\"worker\":3,\"dp\":1,\"model\":\"m\",\"bs\":2,\"eid\":5,"
              "\"blocks\":[{\"local\":\"ffffffffffffffff\",\"seq\":\"01\"}]}");
    kvix_service *s = NULL;
    kvix_service_opts so = {.idx = idx};
    kvix_err e;
    CHECK(kvix_service_new(&s, &so, &e) == 0);
    kvix_service_response r;
    kvix_service_response_init(&r);
    for (unsigned i = 0; i < 3 * KVIX_SERVICE_STATES_MAX; i++) {
        kvix_service_handle(s, "GET", i % 2 ? "/dump" : "/snapshot", "", 0, &r);
        if (!CHECK_U64(r.status, 200))
            break;
        CHECK(r.fd >= 0);
    }
    kvix_service_handle(s, "GET", "/health", "", 0, &r);
    CHECK(r.fd < 0 && r.done == NULL);
    kvix_service_handle(s, "GET", "/metrics", "", 0, &r);
    CHECK(r.body.data &&
          strstr(r.body.data, "kvix_http_state_responses_in_flight{endpoint=\"/dump\"} 0\n") &&
          strstr(r.body.data, "kvix_http_state_refused_total{endpoint=\"/snapshot\"} 0\n"));
    kvix_service_response_release(&r);
    kvix_service_free(s);
    kvix_index_free(idx);
}

/* /register, /unregister, /workers through the pure handler: the feed's
 * registry changes without a socket being opened (no step runs). */
TEST(register_unregister_workers)
{
    kvix_index *idx = new_index();
    feed(idx, "{\"type\":\"stored\",\"worker\":3,\"model\":\"m\",\"bs\":2,"
              "\"blocks\":[{\"local\":\"01\",\"seq\":\"01\"}]}");
    kvix_enginefeed *f = NULL;
    kvix_enginefeed_opts fo = {.idx = idx};
    kvix_err e;
    CHECK(kvix_enginefeed_new(&f, NULL, &fo, &e) == 0);
    kvix_service *s = NULL;
    kvix_service_opts so = {.idx = idx, .sub = kvix_enginefeed_sub(f),
                           .sub_cfg = kvix_enginefeed_config(f)};
    CHECK(kvix_service_new(&s, &so, &e) == 0);
    kvix_service_response r;
    kvix_service_response_init(&r);
    static const struct {
        const char *method, *path, *body;
        int status;
        const char *answer; /* NULL: not checked (4xx: an error object) */
    } cases[] = {
        {"GET", "/workers", "", 200, "[]"},
        {"POST", "/register", "{\"instance_id\":9223372036854775807,\"endpoint\":"
         "\"tcp://h:1\",\"model_name\":\"m\",\"block_size\":2,\"dp_rank\":4294967294}",
         201, "{\"status\":\"ok\"}"},
        {"POST", "/register", "{\"instance_id\":1,\"endpoint\":\"tcp://h:2\",\"model_name\":"
         "\"m\",\"block_size\":4}", 409, NULL}, /* the index's partition has 2 */
        {"POST", "/register", "{\"instance_id\":1,\"endpoint\":\"tcp://h:2\",\"model_name\":"
         "\"n\",\"block_size\":4,\"replay_endpoint\":\"ipc://r\"}", 201, NULL},
        {"POST", "/register", "{\"instance_id\":2,\"endpoint\":\"tcp://h:3\",\"model_name\":"
         "\"n\",\"block_size\":8}", 409, NULL}, /* the other subscription of n has 4 */
        {"POST", "/register", "{\"instance_id\":1,\"endpoint\":\"tcp://h:3\",\"model_name\":"
         "\"n\",\"block_size\":4,\"dp_rank\":1}", 201, NULL},
        {"POST", "/register", "{\"instance_id\":2,\"endpoint\":\"tcp://h:1\",\"model_name\":"
         "\"n\",\"block_size\":4}", 409, NULL}, /* endpoint taken */
        {"POST", "/register", "{\"instance_id\":2,\"endpoint\":\"udp://h:1\",\"model_name\":"
         "\"n\",\"block_size\":4}", 400, NULL},
        /* this process's own sockets: an internal monitor could be taken over */
        {"POST", "/register", "{\"instance_id\":2,\"endpoint\":\"inproc://kvix-enginesub-mon-1\","
         "\"model_name\":\"n\",\"block_size\":4}", 400, NULL},
        {"POST", "/register", "{\"instance_id\":2,\"endpoint\":\"tcp://H:01\",\"model_name\":"
         "\"n\",\"block_size\":4}", 409, NULL}, /* tcp://h:1 spelt otherwise */
        {"POST", "/register", "{\"instance_id\":2,\"endpoint\":\"tcp://h:9\",\"model_name\":"
         "\"a:b\",\"block_size\":4}", 400, NULL},
        {"POST", "/register", "{\"instance_id\":2,\"endpoint\":\"tcp://h:9\",\"model_name\":"
         "\"\",\"block_size\":4}", 400, NULL},
        {"POST", "/register", "{\"instance_id\":2,\"endpoint\":\"tcp://h:9\",\"model_name\":"
         "\"n\",\"block_size\":65537}", 400, NULL},
        {"GET", "/workers", "", 200,
         "[{\"instance_id\":1,\"endpoints\":{\"0\":\"tcp://h:2\",\"1\":\"tcp://h:3\"}},"
         "{\"instance_id\":9223372036854775807,\"endpoints\":{\"4294967294\":\"tcp://h:1\"}}]"},
        {"POST", "/unregister", "{\"instance_id\":1,\"model_name\":\"n\",\"dp_rank\":1}", 200,
         "{\"status\":\"ok\"}"},
        {"POST", "/unregister", "{\"instance_id\":1,\"model_name\":\"n\",\"dp_rank\":1}", 404,
         NULL},
        {"POST", "/unregister", "{\"instance_id\":1,\"model_name\":\"n\",\"tenant_id\":\"x\"}",
         404, NULL},
        {"POST", "/unregister", "{\"instance_id\":1,\"model_name\":\"n\"}", 200, NULL},
        {"POST", "/unregister", "{\"model_name\":\"n\"}", 400, NULL},
        {"GET", "/workers", "", 200,
         "[{\"instance_id\":9223372036854775807,\"endpoints\":{\"4294967294\":\"tcp://h:1\"}}]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvix_service_handle(s, cases[i].method, cases[i].path, cases[i].body,
                            strlen(cases[i].body), &r);
        CHECK_U64(r.status, cases[i].status);
        if (cases[i].answer)
            CHECK_STR(r.body.data, cases[i].answer);
        else if (cases[i].status >= 400)
            CHECK(r.body.data && strncmp(r.body.data, "{\"error\":\"", 10) == 0);
    }
    kvix_service_response_release(&r);
    kvix_service_free(s);
    kvix_enginefeed_free(f);
    kvix_index_free(idx);
}

/* Registrations a snapshot keeps (extension record 65): only POST
 * /register's, in the order made, every field given; read back as /register
 * reads a body. */
TEST(registrations_encode_decode)
{
    kvix_index *idx = new_index();
    kvix_enginefeed *f = NULL;
    kvix_enginefeed_opts fo = {.idx = idx};
    kvix_err e;
    CHECK(kvix_enginefeed_new(&f, NULL, &fo, &e) == 0);
    kvix_service *s = NULL;
    kvix_service_opts so = {.idx = idx, .sub = kvix_enginefeed_sub(f),
                           .sub_cfg = kvix_enginefeed_config(f)};
    CHECK(kvix_service_new(&s, &so, &e) == 0);
    /* one subscription of -w's group: not a registration */
    kvix_enginesub_spec w;
    kvix_enginesub_spec_init(&w);
    CHECK(kvix_enginesub_spec_parse(&w, "5=tcp://w:1", &e) == KVIX_OK);
    CHECK(kvix_enginesub_add(kvix_enginefeed_sub(f), &w, 0, &e) == KVIX_OK);
    kvix_service_response r;
    kvix_service_response_init(&r);
    const char *bodies[] = {
        "{\"instance_id\":18446744073709551615,\"endpoint\":\"tcp://h:1\",\"model_name\":\"m\","
        "\"block_size\":16}",
        "{\"instance_id\":1,\"endpoint\":\"ipc:///tmp/e\",\"model_name\":\"m\",\"tenant_id\":\"t\","
        "\"block_size\":4,\"dp_rank\":3,\"replay_endpoint\":\"tcp://h:2\"}",
    };
    for (size_t i = 0; i < 2; i++) {
        kvix_service_handle(s, "POST", "/register", bodies[i], strlen(bodies[i]), &r);
        CHECK_U64(r.status, i == 0 ? 400 : 201); /* ids stop at 2^63-1 */
    }
    const char *third = "{\"instance_id\":7,\"endpoint\":\"tcp://h:3\",\"model_name\":\"m\","
                        "\"block_size\":16}";
    kvix_service_handle(s, "POST", "/register", third, strlen(third), &r);
    CHECK_U64(r.status, 201);
    kvix_buf b;
    kvix_buf_init(&b);
    size_t n = 0;
    CHECK(kvix_service_registrations_encode(kvix_enginefeed_sub(f), &b, &n, &e) == KVIX_OK);
    CHECK_U64(n, 2);
    CHECK(kvix_buf_append(&b, "", 1, &e) == KVIX_OK);
    CHECK_STR(b.data,
              "[{\"instance_id\":1,\"endpoint\":\"ipc:///tmp/e\",\"model_name\":\"m\",\"tenant_id\":"
              "\"t\",\"block_size\":4,\"dp_rank\":3,\"replay_endpoint\":\"tcp://h:2\"},"
              "{\"instance_id\":7,\"endpoint\":\"tcp://h:3\",\"model_name\":\"m\",\"tenant_id\":"
              "\"default\",\"block_size\":16,\"dp_rank\":0}]");
    kvix_enginesub_spec *v = NULL;
    CHECK(kvix_service_registrations_decode(b.data, b.len - 1, kvix_enginefeed_config(f), &v, &n,
                                            &e) == KVIX_OK);
    CHECK_U64(n, 2);
    CHECK(v && v[0].worker == 1 && v[0].dp == 3 && v[0].block_size == 4);
    CHECK_STR(v[0].endpoint, "ipc:///tmp/e");
    CHECK_STR(v[0].replay, "tcp://h:2");
    CHECK_STR(v[0].tenant, "t");
    CHECK(v[1].worker == 7 && v[1].dp == 0 && !v[1].replay[0]);
    CHECK_STR(v[1].tenant, "default");
    free(v);
    /* nothing registered: an empty array */
    b.len = 0;
    CHECK(kvix_service_registrations_encode(kvix_enginefeed_sub(f), &b, &n, &e) == KVIX_OK);
    /* errors name the element */
    static const struct {
        const char *text;
        int rc;
        const char *msg;
    } bad[] = {
        {"{}", KVIX_EINVAL, "registrations: not a JSON array"},
        {"[1]", KVIX_EINVAL, "registration 0: not a JSON object"},
        {"[{\"instance_id\":1,\"endpoint\":\"tcp://h:1\",\"model_name\":\"m\",\"block_size\":4},"
         "{\"instance_id\":2,\"endpoint\":\"udp://h:1\",\"model_name\":\"m\",\"block_size\":4}]",
         KVIX_EINVAL, "registration 1: bad \"endpoint\""},
        {"[{\"instance_id\":1,\"endpoint\":\"tcp://h:1\",\"model_name\":\"m:x\",\"block_size\":4}]",
         KVIX_EINVAL, "registration 0: \"model_name\" \"m:x\" contains ':'"},
        {"[{\"instance_id\":1,\"endpoint\":\"tcp://h:1\",\"model_name\":\"m\"}]", KVIX_EINVAL,
         "registration 0: missing \"block_size\""},
        {"[", KVIX_EINVAL, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = NULL;
        CHECK(kvix_service_registrations_decode(bad[i].text, strlen(bad[i].text),
                                                kvix_enginefeed_config(f), &v, &n, &e) == bad[i].rc);
        CHECK(v == NULL && n == 0);
        if (bad[i].msg)
            CHECK(strncmp(e.msg, bad[i].msg, strlen(bad[i].msg)) == 0);
    }
    kvix_buf_release(&b);
    kvix_service_response_release(&r);
    kvix_service_free(s);
    kvix_enginefeed_free(f);
    kvix_index_free(idx);
}

/* A subscriber at its limit answers 503, never 201 for a subscription it
 * would then drop. */
TEST(register_past_the_subscription_limit_is_503)
{
    kvix_index *idx = new_index();
    kvix_enginesub_config cfg;
    kvix_enginesub_config_init(&cfg);
    cfg.subs_max = 1;
    kvix_enginefeed *f = NULL;
    kvix_enginefeed_opts fo = {.idx = idx};
    kvix_err e;
    CHECK(kvix_enginefeed_new(&f, &cfg, &fo, &e) == 0);
    kvix_service *s = NULL;
    kvix_service_opts so = {.idx = idx, .sub = kvix_enginefeed_sub(f),
                           .sub_cfg = kvix_enginefeed_config(f)};
    CHECK(kvix_service_new(&s, &so, &e) == 0);
    kvix_service_response r;
    kvix_service_response_init(&r);
    const char *one = "{\"instance_id\":1,\"endpoint\":\"tcp://h:1\",\"model_name\":\"m\","
                      "\"block_size\":2}";
    const char *two = "{\"instance_id\":2,\"endpoint\":\"tcp://h:2\",\"model_name\":\"m\","
                      "\"block_size\":2}";
    kvix_service_handle(s, "POST", "/register", one, strlen(one), &r);
    CHECK_U64(r.status, 201);
    kvix_service_handle(s, "POST", "/register", two, strlen(two), &r);
    CHECK_U64(r.status, 503);
    CHECK(r.body.data && strstr(r.body.data, "the limit is 1") != NULL);
    kvix_service_response_release(&r);
    kvix_service_free(s);
    kvix_enginefeed_free(f);
    kvix_index_free(idx);
}

/* With a bearer token, the endpoints that change or export the state (and
 * with auth_queries the queries) answer 401 without it; /health and
 * /metrics stay open. An unregistration without it wiped a worker whose
 * blocks came from stdin. */
TEST(bearer_token_guards_the_state)
{
    kvix_index *idx = new_index();
    feed(idx, "{\"type\":\"stored\",\"worker\":3,\"model\":\"m\",\"bs\":2,"
              "\"blocks\":[{\"local\":\"01\",\"seq\":\"01\"}]}");
    kvix_enginefeed *f = NULL;
    kvix_enginefeed_opts fo = {.idx = idx};
    kvix_err e;
    CHECK(kvix_enginefeed_new(&f, NULL, &fo, &e) == 0);
    kvix_service *s = NULL;
    kvix_service_opts so = {.idx = idx, .sub = kvix_enginefeed_sub(f),
                           .sub_cfg = kvix_enginefeed_config(f), .auth_token = "s3cr3t-T0k.en=="};
    CHECK(kvix_service_new(&s, &so, &e) == 0);
    static const struct {
        const char *authz, *method, *path, *body;
        int status;
    } cases[] = {
        {NULL, "GET", "/health", "", 200},
        {NULL, "GET", "/metrics", "", 200},
        {NULL, "POST", "/query", "{\"model\":\"m\",\"local\":[\"01\"]}", 200},
        {NULL, "GET", "/dump", "", 401},
        {NULL, "GET", "/snapshot", "", 401},
        {NULL, "GET", "/workers", "", 401},
        {NULL, "GET", "/peers", "", 401},
        {NULL, "POST", "/register_peer", "{\"url\":\"http://x\"}", 401},
        {NULL, "POST", "/explain", "{\"model\":\"m\",\"local\":[\"01\"]}", 401},
        {NULL, "POST", "/unregister", "{\"instance_id\":3,\"model_name\":\"m\"}", 401},
        {"Bearer s3cr3t", "GET", "/dump", "", 401},
        {"Bearer s3cr3t-T0k.en==x", "GET", "/dump", "", 401},
        {"Basic s3cr3t-T0k.en==", "GET", "/dump", "", 401},
        {"Bearer s3cr3t-T0k.en==", "GET", "/dump", "", 200},
        {"bearer   s3cr3t-T0k.en== ", "GET", "/workers", "", 200},
        {"Bearer s3cr3t-T0k.en==", "GET", "/nowhere", "", 404},
        {NULL, "GET", "/nowhere", "", 404},
    };
    kvix_service_response r;
    kvix_service_response_init(&r);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kvix_service_handle_as(s, cases[i].authz, cases[i].method, cases[i].path, cases[i].body,
                               strlen(cases[i].body), &r);
        if (!CHECK_U64(r.status, cases[i].status))
            fprintf(stderr, "#   %s %s\n", cases[i].method, cases[i].path);
        CHECK_U64(r.auth_challenge, cases[i].status == 401);
    }
    /* the worker fed from outside is still there */
    const char *q = "{\"model\":\"m\",\"local\":[\"01\"]}";
    const char *qh = "{\"block_hashes\":[1],\"model_name\":\"m\"}";
    kvix_service_handle(s, "POST", "/query", q, strlen(q), &r);
    CHECK(r.body.data && strstr(r.body.data, "\"worker\":3") != NULL);
    kvix_service_free(s);
    so.auth_queries = 1;
    CHECK(kvix_service_new(&s, &so, &e) == 0);
    kvix_service_handle(s, "POST", "/query", q, strlen(q), &r);
    CHECK_U64(r.status, 401);
    kvix_service_handle_as(s, "Bearer s3cr3t-T0k.en==", "POST", "/query_by_hash", qh,
                           strlen(qh), &r);
    CHECK_U64(r.status, 200);
    CHECK_U64(kvix_service_authorized(s, "/health", NULL), 1);
    kvix_service_free(s);
    static const char *const bad[] = {"", "a b", "a\"b", "=abc", "ab=c", "t\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        so.auth_token = bad[i];
        s = NULL;
        CHECK(kvix_service_new(&s, &so, &e) == KVIX_EINVAL);
        CHECK(s == NULL);
    }
    kvix_service_response_release(&r);
    kvix_enginefeed_free(f);
    kvix_index_free(idx);
}

static int count_group(void *ctx, const char *model, const char *tenant, uint32_t bs,
                       uint64_t worker, uint32_t dp, int has_eid, uint64_t eid,
                       const kvix_block_info *b, size_t n)
{
    kvix_buf *out = ctx;
    (void)b;
    return kvix_buf_printf(out, NULL, "%s %s %u %llu %u %d %llu %zu\n", model, tenant, bs,
                           (unsigned long long)worker, dp, has_eid,
                           (unsigned long long)eid, n);
}

TEST(dump_reads_back_into_an_equal_index)
{
    kvix_index *a = new_index(), *b = new_index();
    feed(a, "{\"type\":\"stored\",\"worker\":1,\"bs\":2,\"eid\":9,\"blocks\":["
            "{\"local\":\"0a\",\"seq\":\"fffffffffffffff0\"},{\"local\":\"0b\",\"seq\":\"02\"},"
            "{\"local\":\"0c\",\"seq\":\"03\"}]}");
    /* the middle block removed: the last one is an orphan */
    feed(a, "{\"type\":\"removed\",\"worker\":1,\"eid\":10,\"hashes\":[\"02\"]}");
    feed(a, "{\"type\":\"stored\",\"worker\":2,\"bs\":2,\"medium\":\"cpu\",\"blocks\":["
            "{\"local\":\"0a\",\"seq\":\"05\"}]}");
    feed(a, "{\"type\":\"cleared\",\"worker\":4,\"tenant\":\"t\",\"bs\":2,\"eid\":3}");
    kvix_buf d, ga, gb;
    kvix_buf_init(&d);
    kvix_buf_init(&ga);
    kvix_buf_init(&gb);
    kvix_err e;
    CHECK(kvix_service_dump(a, &d, &e) == 0);
    uint64_t applied = 0, rejected = 0;
    CHECK(kvix_service_dump_apply(b, d.data, d.len, &applied, &rejected, &e) == 0);
    CHECK_U64(rejected, 0);
    CHECK_U64(applied, 4); /* the chain, the orphan run, worker 2, worker 4's clear */
    kvix_index_foreach(a, count_group, &ga);
    kvix_index_foreach(b, count_group, &gb);
    CHECK_STR(gb.data, ga.data);
    kvix_buf_release(&d);
    kvix_buf_release(&ga);
    kvix_buf_release(&gb);
    kvix_index_free(a);
    kvix_index_free(b);
}

/* A service over idx (default options). */
static kvix_service *new_service(kvix_index *idx)
{
    kvix_service *s = NULL;
    kvix_service_opts so = {.idx = idx};
    kvix_err e;
    CHECK(kvix_service_new(&s, &so, &e) == 0);
    return s;
}

/* want: "{"scores":{ENTRIES},"frequencies":[],"tree_sizes":{ENTRIES}}", the
 * entries of each half printed by entry(want, part, ctx), part 0 the scores. */
static void want_answer(kvix_buf *want, void (*entry)(kvix_buf *, int, const void *),
                        const void *ctx)
{
    want->len = 0;
    CHECK(kvix_buf_append(want, "{\"scores\":{", 11, NULL) == 0);
    for (int part = 0; part < 2; part++) {
        entry(want, part, ctx);
        CHECK(kvix_buf_printf(want, NULL, "%s",
                              part ? "}}" : "},\"frequencies\":[],\"tree_sizes\":{") == 0);
    }
}

/* POST q to /query_by_hash: 200 and the body want, byte for byte. */
static void expect_answer(kvix_service *s, const char *q, kvix_service_response *r,
                          const kvix_buf *want)
{
    kvix_service_handle(s, "POST", "/query_by_hash", q, strlen(q), r);
    CHECK_U64((uint64_t)r->status, 200);
    int same = r->body.len == want->len && memcmp(r->body.data, want->data, want->len) == 0;
    CHECK(same);
    if (!same)
        fprintf(stderr, "got  %.300s\nwant %.300s\n", r->body.data, want->data);
}

struct merge_want {
    const uint64_t *ids;
    unsigned n, bs;
};

static void merge_entries(kvix_buf *want, int part, const void *ctx)
{
    const struct merge_want *m = ctx;
    for (unsigned i = 0; i < m->n; i++) {
        unsigned k = (i * 3) % 5 + 1;
        CHECK(kvix_buf_printf(want, NULL, "%s\"%llu\":{\"%u\":%u}", i ? "," : "",
                              (unsigned long long)m->ids[i], i % 2 ? 10000u : 7u,
                              part ? k : k * m->bs) == 0);
    }
}

/* Workers matching 1 to 5 blocks: the index answers them by blocks, so the
 * service merges five runs back into worker order (few scores, sorted in
 * place by the index; many, sorted by radix into either half of its buffer);
 * ids and counts on every digit-width boundary the answer writer has a path
 * for. ids ascend. */
static void merge_case(const uint64_t *ids, unsigned n)
{
    enum { BS = 999 };
    kvix_index *idx = new_index();
    kvix_service *s = new_service(idx);
    char line[1024];
    for (unsigned i = 0; i < n; i++) {
        unsigned k = (i * 3) % 5 + 1; /* blocks held: scattered over 1..5 */
        size_t len = (size_t)snprintf(line, sizeof line,
                                      "{\"type\":\"stored\",\"worker\":%llu,\"dp\":%u,"
                                      "\"model\":\"m\",\"bs\":%d,\"blocks\":[",
                                      (unsigned long long)ids[i], i % 2 ? 10000u : 7u, BS);
        for (unsigned b = 0; b < k; b++)
            len += (size_t)snprintf(line + len, sizeof line - len,
                                    "%s{\"local\":\"%016x\",\"seq\":\"%016x\"}", b ? "," : "",
                                    0xa0 + b, (i + 1) * 16 + b);
        snprintf(line + len, sizeof line - len, "]}");
        feed(idx, line);
    }
    kvix_service_response r;
    kvix_service_response_init(&r);
    const char *q = "{\"model_name\":\"m\",\"block_hashes\":[160,161,162,163,164]}";
    kvix_buf want;
    kvix_buf_init(&want);
    struct merge_want m = {ids, n, BS};
    want_answer(&want, merge_entries, &m);
    for (int twice = 0; twice < 2; twice++) /* the answer's buffers reused */
        expect_answer(s, q, &r, &want);
    kvix_buf_release(&want);
    kvix_service_response_release(&r);
    kvix_service_free(s);
    kvix_index_free(idx);
}

TEST(answer_merges_runs_and_prints_every_width)
{
    static const uint64_t ids[] = {0, 9, 10, 99, 100, 999, 1000, 9999, 10000, 99999, 100000,
                                   1234567890123u, UINT64_C(999999999999999999),
                                   UINT64_C(1000000000000000000), INT64_MAX};
    merge_case(ids, sizeof ids / sizeof ids[0]);
    enum { MANY = 700 };
    static uint64_t many[MANY];
    for (unsigned i = 0; i < MANY; i++)
        many[i] = (uint64_t)i * 1000003u + (i % 7);
    merge_case(many, MANY);
}

enum { W = 1000, D = 3 };

/* ascending workers (the 2^63-1 one last), ranks 0,1,2 each */
static void sorted_entries(kvix_buf *want, int part, const void *ctx)
{
    (void)ctx;
    for (unsigned w = 1; w <= W; w++) {
        uint64_t worker = w == W ? UINT64_C(9223372036854775807) : (uint64_t)w * 1000003u;
        CHECK(kvix_buf_printf(want, NULL, "%s\"%llu\":{\"0\":%d,\"1\":%d,\"2\":%d}",
                              w > 1 ? "," : "", (unsigned long long)worker, part ? 1 : 4,
                              part ? 1 : 4, part ? 1 : 4) == 0);
    }
}

/* Dynamo's answer lists workers in ascending order, each worker's ranks
 * together and ascending, whatever order they arrived in (3000 (worker, dp)
 * pairs: every gap of the answer's sort), and prints ids near 2^63 exactly. */
TEST(answer_sorted_by_worker_and_rank)
{
    kvix_index *idx = new_index();
    kvix_service *s = new_service(idx);
    char line[256];
    for (unsigned i = 0; i < W * D; i++) { /* workers in a scattered order, ranks descending */
        unsigned w = (i * 7919u) % W, d = (W * D - 1 - i) % D;
        uint64_t worker = w == 0 ? UINT64_C(9223372036854775807) : (uint64_t)w * 1000003u;
        snprintf(line, sizeof line,
                 "{\"type\":\"stored\",\"worker\":%llu,\"dp\":%u,\"model\":\"m\",\"bs\":4,"
                 "\"blocks\":[{\"local\":\"00000000000000aa\",\"seq\":\"%016x\"}]}",
                 (unsigned long long)worker, d, i + 1);
        feed(idx, line);
    }
    kvix_service_response r;
    kvix_service_response_init(&r);
    const char *q = "{\"model_name\":\"m\",\"block_hashes\":[170]}";
    kvix_buf want;
    kvix_buf_init(&want);
    want_answer(&want, sorted_entries, NULL);
    expect_answer(s, q, &r, &want);
    kvix_buf_release(&want);
    kvix_service_response_release(&r);
    kvix_service_free(s);
    kvix_index_free(idx);
}
