/* kvix_reason: every refused record carries why, set where it was refused
 * (decoders, the index), not guessed from its message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvix/index.h"
#include "kvix/stream.h"

static int json_reason(const char *line, int *code)
{
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_err err;
    memset(&err, 0, sizeof err);
    err.reason = -1;
    *code = kvix_event_from_json(line, strlen(line), &ev, &err);
    kvix_event_release(&ev);
    return err.reason;
}

TEST(json_records_say_why_they_are_refused)
{
    static const struct {
        const char *line;
        int reason;
    } cases[] = {
        {"{\"type\":\"stored\",", KVIX_REASON_JSON},
        {"{\"type\":\"stored\",\"bs\":4,\"blocks\":[]}", KVIX_REASON_MISSING},
        {"{\"type\":\"query\",\"model\":\"m\"}", KVIX_REASON_MISSING},
        {"{\"type\":\"stored\",\"worker\":\"1\",\"bs\":4,\"blocks\":[]}", KVIX_REASON_TYPE},
        {"{\"type\":5,\"worker\":1}", KVIX_REASON_TYPE},
        {"{\"type\":\"removed\",\"worker\":1,\"hashes\":[\"xyz\"]}", KVIX_REASON_HASH},
        {"{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":\"1\"}]}",
         KVIX_REASON_MISSING},
        {"{\"type\":\"stored\",\"worker\":-1,\"bs\":4,\"blocks\":[]}", KVIX_REASON_RANGE},
        {"{\"type\":\"flushed\",\"worker\":1}", KVIX_REASON_VALUE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int code;
        int r = json_reason(cases[i].line, &code);
        CHECK(code < 0);
        if (r != cases[i].reason)
            fprintf(stderr, "# %s: reason %d (%s)\n", cases[i].line, r, kvix_reason_name(r));
        CHECK_U64(r, cases[i].reason);
    }
}

TEST(msgpack_records_say_why_they_are_refused)
{
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_err err;
    size_t used;
    const char bad[] = {(char)0xc1}; /* never used in msgpack */
    CHECK(kvix_event_from_msgpack(bad, sizeof bad, &used, &ev, &err) == KVIX_EINVAL);
    CHECK_U64(err.reason, KVIX_REASON_MSGPACK);
    const char trunc[] = {(char)0x82, (char)0xa4, 't'}; /* a map cut short */
    CHECK(kvix_event_from_msgpack(trunc, sizeof trunc, &used, &ev, &err) == KVIX_EINVAL);
    CHECK_U64(err.reason, KVIX_REASON_MSGPACK);
    const char notmap[] = {(char)0xa1, 'x'}; /* "x": a record that is no object */
    CHECK(kvix_event_from_msgpack(notmap, sizeof notmap, &used, &ev, &err) == KVIX_EINVAL);
    CHECK_U64(err.reason, KVIX_REASON_TYPE);
    kvix_event_release(&ev);
}

static int apply_reason(kvix_index *idx, const char *line)
{
    kvix_event ev;
    kvix_event_init(&ev);
    kvix_err err;
    int rc = kvix_event_from_json(line, strlen(line), &ev, &err);
    CHECK(rc == KVIX_OK);
    rc = kvix_index_apply(idx, &ev, NULL, &err);
    kvix_event_release(&ev);
    return rc ? err.reason : -1;
}

TEST(the_index_says_why_it_refuses_an_event)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    kvix_index *idx;
    kvix_err err;
    CHECK(kvix_index_new(&idx, &o, &err) == KVIX_OK);
    CHECK_U64(apply_reason(idx, "{\"type\":\"stored\",\"worker\":1,\"bs\":4,"
                                "\"blocks\":[{\"local\":\"1\",\"seq\":\"a1\"}]}"),
              (uint64_t)-1);
    CHECK_U64(apply_reason(idx, "{\"type\":\"stored\",\"worker\":1,\"bs\":8,"
                                "\"blocks\":[{\"local\":\"2\",\"seq\":\"a2\"}]}"),
              KVIX_REASON_BLOCKSIZE);
    CHECK_U64(apply_reason(idx, "{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"parent\":\"ff\","
                                "\"blocks\":[{\"local\":\"3\",\"seq\":\"a3\"}]}"),
              KVIX_REASON_PARENT);
    kvix_index_free(idx);
}

TEST(reasons_have_names_and_keys_and_statuses_imply_one)
{
    CHECK_STR(kvix_reason_name(KVIX_REASON_JSON), "malformed json");
    CHECK_STR(kvix_reason_key(KVIX_REASON_BLOCKSIZE), "block_size_mismatch");
    CHECK_STR(kvix_reason_name(KVIX_REASON_COUNT), "invalid");
    CHECK_STR(kvix_reason_key(-3), "invalid");
    for (int r = 0; r < KVIX_REASON_COUNT; r++) {
        CHECK(strchr(kvix_reason_key(r), ' ') == NULL);
        for (int s = r + 1; s < KVIX_REASON_COUNT; s++)
            CHECK(strcmp(kvix_reason_name(r), kvix_reason_name(s)) != 0);
    }
    kvix_err e;
    kvix_err_set(&e, KVIX_EPARENT, "x");
    CHECK_U64(e.reason, KVIX_REASON_PARENT);
    kvix_err_set(&e, KVIX_EINVAL, "x");
    CHECK_U64(e.reason, KVIX_REASON_VALUE);
    kvix_err_set(&e, KVIX_EIO, "x");
    CHECK_U64(e.reason, KVIX_REASON_OTHER);
    kvix_err_set_reason(&e, KVIX_EINVAL, KVIX_REASON_QUERYONLY, "event in %s", "-q");
    CHECK_U64(e.reason, KVIX_REASON_QUERYONLY);
    CHECK_STR(e.msg, "event in -q");
    CHECK_U64(e.code, KVIX_EINVAL);
}
