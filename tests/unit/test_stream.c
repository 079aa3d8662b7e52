/* Event streams: the NDJSON and msgpack codecs (contract sections 2-4), answer
 * lines, every error message, the ceilings, and the reader. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kvix/stream.h"

static const char *contract_lines[] = {
    "{\"type\":\"stored\",\"worker\":1,\"dp\":0,\"model\":\"llama\",\"bs\":16,\"eid\":0,\"parent\":null,"
    "\"blocks\":[{\"local\":\"cb38e4d7fb2dca5c\",\"seq\":\"0123456789abcdef\"}]}",
    "{\"type\":\"removed\",\"worker\":1,\"dp\":0,\"model\":\"llama\",\"eid\":1,\"hashes\":[\"0123456789abcdef\"]}",
    "{\"type\":\"cleared\",\"worker\":1,\"dp\":0,\"model\":\"llama\",\"eid\":2}",
};

static int from_json(const char *s, kvix_event *ev, kvix_err *err)
{
    return kvix_event_from_json(s, strlen(s), ev, err);
}

TEST(contract_examples_decode)
{
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    CHECK(from_json(contract_lines[0], &ev, &err) == KVIX_OK);
    CHECK(ev.type == KVIX_EV_STORED);
    CHECK_U64(ev.worker, 1);
    CHECK_U64(ev.dp, 0);
    CHECK_STR(ev.model, "llama");
    CHECK_STR(ev.tenant, "default");
    CHECK(ev.medium == KVIX_MEDIUM_GPU);
    CHECK_U64(ev.bs, 16);
    CHECK(ev.has_eid && ev.eid == 0);
    CHECK(!ev.has_parent && !ev.has_ts && !ev.has_tokens);
    CHECK_U64(ev.nblocks, 1);
    CHECK_U64(ev.blocks[0].local, UINT64_C(0xcb38e4d7fb2dca5c));
    CHECK_U64(ev.blocks[0].seq, UINT64_C(0x0123456789abcdef));

    CHECK(from_json(contract_lines[1], &ev, &err) == KVIX_OK);
    CHECK(ev.type == KVIX_EV_REMOVED);
    CHECK_U64(ev.nhashes, 1);
    CHECK_U64(ev.hashes[0], UINT64_C(0x0123456789abcdef));
    CHECK_U64(ev.eid, 1);

    CHECK(from_json(contract_lines[2], &ev, &err) == KVIX_OK);
    CHECK(ev.type == KVIX_EV_CLEARED);
    CHECK_U64(ev.eid, 2);
    CHECK_U64(ev.nblocks + ev.nhashes, 0);
    kvix_event_release(&ev);
}

TEST(optional_fields_and_defaults)
{
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    CHECK(from_json("{\"type\":\"stored\",\"worker\":7,\"dp\":3,\"tenant\":\"t\",\"medium\":\"cpu\","
                    "\"ts\":1700000000.5,\"bs\":2,\"parent\":\"ff\",\"lora\":\"ad\",\"x\":{\"y\":1},"
                    "\"blocks\":[{\"local\":12,\"seq\":\"00000000000000AB\",\"extra\":true}],"
                    "\"tokens\":[[5,6]]}",
                    &ev, &err) == KVIX_OK);
    CHECK_U64(ev.worker, 7);
    CHECK_U64(ev.dp, 3);
    CHECK_STR(ev.model, "default");
    CHECK_STR(ev.tenant, "t");
    CHECK(ev.medium == KVIX_MEDIUM_CPU);
    CHECK(ev.has_ts && ev.ts == 1700000000.5);
    CHECK(ev.has_parent && ev.parent == 0xff);
    CHECK_STR(ev.lora, "ad");
    CHECK_U64(ev.blocks[0].local, 12);
    CHECK_U64(ev.blocks[0].seq, 0xab);
    CHECK(ev.has_tokens);
    CHECK_U64(ev.ntokens, 2);
    CHECK_U64(ev.tokens[1], 6);
    /* null means absent for the optional fields */
    CHECK(from_json("{\"type\":\"cleared\",\"worker\":1,\"medium\":null,\"eid\":null,\"ts\":null,"
                    "\"lora\":null}",
                    &ev, &err) == KVIX_OK);
    CHECK(!ev.has_eid && !ev.has_ts && ev.medium == KVIX_MEDIUM_GPU && ev.lora[0] == 0);
    /* the decoder resets what a previous record left */
    CHECK_U64(ev.nblocks, 0);
    CHECK(!ev.has_tokens);
    kvix_event_release(&ev);
}

TEST(queries_decode)
{
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    CHECK(from_json("[1,2,3,4294967295]", &ev, &err) == KVIX_OK);
    CHECK(ev.type == KVIX_EV_QUERY && ev.has_tokens && !ev.has_id);
    CHECK_U64(ev.ntokens, 4);
    CHECK_U64(ev.tokens[3], UINT32_MAX);
    CHECK_STR(ev.model, "default");

    CHECK(from_json("{\"model\":\"m\",\"tenant\":\"t\",\"lora\":\"l\",\"id\":7,\"bs\":4,"
                    "\"tokens\":[9,8]}",
                    &ev, &err) == KVIX_OK);
    CHECK(ev.type == KVIX_EV_QUERY);
    CHECK_STR(ev.id, "7");
    CHECK_U64(ev.bs, 4);
    CHECK_STR(ev.lora, "l");

    CHECK(from_json("{\"type\":\"query\",\"id\":{\"a\": [1, \"x\"]},\"local\":[\"01\",2]}", &ev,
                    &err) == KVIX_OK);
    CHECK(ev.type == KVIX_EV_QUERY && !ev.has_tokens && ev.has_id);
    CHECK_STR(ev.id, "{\"a\":[1,\"x\"]}");
    CHECK_U64(ev.nhashes, 2);
    CHECK_U64(ev.hashes[0], 1);
    CHECK_U64(ev.hashes[1], 2);
    CHECK(from_json("{\"id\":\"q-1\",\"tokens\":[]}", &ev, &err) == KVIX_OK);
    CHECK_STR(ev.id, "\"q-1\"");
    CHECK_U64(ev.ntokens, 0);
    kvix_event_release(&ev);
}

struct bad {
    const char *line;
    int code;
    const char *msg;
};

static const struct bad bad_lines[] = {
    {"{\"type\":\"cleared\",\"dp\":0}", KVIX_EINVAL, "missing \"worker\""},
    {"{\"type\":\"cleared\",\"worker\":\"1\"}", KVIX_EINVAL, "\"worker\" is not an integer"},
    {"{\"type\":\"cleared\",\"worker\":1.5}", KVIX_EINVAL, "\"worker\" is not an integer"},
    {"{\"type\":\"cleared\",\"worker\":-1}", KVIX_ERANGE, "\"worker\" is negative"},
    {"{\"type\":\"cleared\",\"worker\":1,\"dp\":4294967296}", KVIX_ERANGE,
     "\"dp\" out of range (0 to 4294967295)"},
    {"{\"type\":5,\"worker\":1}", KVIX_EINVAL, "\"type\" is not a string"},
    {"{\"type\":\"evicted\",\"worker\":1}", KVIX_EINVAL, "unknown \"type\" \"evicted\""},
    {"{\"type\":\"cleared\",\"worker\":1,\"model\":3}", KVIX_EINVAL, "\"model\" is not a string"},
    {"{\"type\":\"cleared\",\"worker\":1,\"tenant\":[]}", KVIX_EINVAL, "\"tenant\" is not a string"},
    {"{\"type\":\"cleared\",\"worker\":1,\"medium\":\"tape\"}", KVIX_EINVAL,
     "unknown \"medium\" \"tape\""},
    {"{\"type\":\"cleared\",\"worker\":1,\"medium\":1}", KVIX_EINVAL, "\"medium\" is not a string"},
    {"{\"type\":\"cleared\",\"worker\":1,\"eid\":-3}", KVIX_ERANGE, "\"eid\" is negative"},
    {"{\"type\":\"cleared\",\"worker\":1,\"ts\":\"now\"}", KVIX_EINVAL, "\"ts\" is not a number"},
    {"{\"type\":\"stored\",\"worker\":1,\"blocks\":[]}", KVIX_EINVAL, "missing \"bs\""},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":0,\"blocks\":[]}", KVIX_ERANGE,
     "\"bs\" out of range (1 to 65536)"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":65537,\"blocks\":[]}", KVIX_ERANGE,
     "\"bs\" out of range (1 to 65536)"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":4}", KVIX_EINVAL, "missing \"blocks\""},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":{}}", KVIX_EINVAL,
     "\"blocks\" is not an array"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":[1]}", KVIX_EINVAL,
     "\"blocks\"[0] is not an object"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":1,\"seq\":1},{\"seq\":1}]}",
     KVIX_EINVAL, "missing \"local\" in \"blocks\"[1]"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":1}]}", KVIX_EINVAL,
     "missing \"seq\" in \"blocks\"[0]"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":1,\"seq\":1},{\"local\":1,"
     "\"seq\":1},{\"local\":1,\"seq\":1},{\"local\":\"zz\",\"seq\":1}]}",
     KVIX_EINVAL, "bad hash \"zz\" in \"blocks\"[3].local"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":1,\"seq\":\"12345678901234567\"}]}",
     KVIX_EINVAL, "bad hash \"12345678901234567\" in \"blocks\"[0].seq"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":1,\"seq\":true}]}",
     KVIX_EINVAL, "\"blocks\"[0].seq is not a hash (a boolean)"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"parent\":\"xyz\",\"blocks\":[]}", KVIX_EINVAL,
     "bad hash \"xyz\" in \"parent\""},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"parent\":-1,\"blocks\":[]}", KVIX_EINVAL,
     "\"parent\" is not a hash (an integer)"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":2,\"blocks\":[{\"local\":1,\"seq\":1}],\"tokens\":[]}",
     KVIX_EINVAL, "\"tokens\" has 0 arrays for 1 blocks"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":2,\"blocks\":[{\"local\":1,\"seq\":1}],\"tokens\":[[1]]}",
     KVIX_EINVAL, "\"tokens\"[0] has 1 tokens, expected bs 2"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":2,\"blocks\":[{\"local\":1,\"seq\":1}],\"tokens\":[[1,-2]]}",
     KVIX_ERANGE, "\"tokens\"[0][1] out of range (0 to 4294967295)"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":2,\"blocks\":[{\"local\":1,\"seq\":1}],\"tokens\":[3]}",
     KVIX_EINVAL, "\"tokens\"[0] is not an array"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":2,\"eagle\":true,\"blocks\":[{\"local\":1,\"seq\":1}],"
     "\"tokens\":[[1,2]]}", KVIX_EINVAL, "\"tokens\"[0] has 2 tokens, expected bs + 1 = 3"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":2,\"eagle\":true,\"blocks\":[{\"local\":1,\"seq\":1},"
     "{\"local\":1,\"seq\":2}],\"tokens\":[[1,2,3],[4,5,6]]}", KVIX_EINVAL,
     "\"tokens\"[1] does not start with the last token of the one before"},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":2,\"eagle\":1,\"blocks\":[]}", KVIX_EINVAL,
     "\"eagle\" is not a boolean"},
    {"{\"type\":\"stored\",\"worker\":1,\"group\":64,\"bs\":2,\"blocks\":[]}", KVIX_ERANGE,
     "\"group\" out of range (0 to 63)"},
    {"{\"type\":\"removed\",\"worker\":1,\"group\":\"1\",\"hashes\":[]}", KVIX_EINVAL,
     "\"group\" is not an integer"},
    {"{\"type\":\"stored\",\"worker\":1,\"kind\":7,\"bs\":2,\"blocks\":[]}", KVIX_EINVAL,
     "\"kind\" is not a string"},
    {"{\"type\":\"stored\",\"worker\":1,\"placeholder\":true,\"blocks\":[]}", KVIX_EINVAL,
     "missing \"hashes\" in a placeholder"},
    {"{\"type\":\"stored\",\"worker\":1,\"placeholder\":true,\"hashes\":[],\"blocks\":[]}",
     KVIX_EINVAL, "a placeholder with \"blocks\""},
    {"{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"hashes\":[1]}", KVIX_EINVAL, "missing \"blocks\""},
    {"{\"type\":\"removed\",\"worker\":1}", KVIX_EINVAL, "missing \"hashes\""},
    {"{\"type\":\"removed\",\"worker\":1,\"hashes\":[\"01\",\"0g\"]}", KVIX_EINVAL,
     "bad hash \"0g\" in \"hashes\"[1]"},
    {"{\"type\":\"removed\",\"worker\":1,\"hashes\":[\"\"]}", KVIX_EINVAL,
     "bad hash \"\" in \"hashes\"[0]"},
    {"{\"model\":\"m\"}", KVIX_EINVAL, "query has neither \"tokens\" nor \"local\""},
    {"{\"tokens\":[1],\"local\":[1]}", KVIX_EINVAL, "query has both \"tokens\" and \"local\""},
    {"{\"tokens\":[1,\"2\"]}", KVIX_EINVAL, "\"tokens\"[1] is not a token id"},
    {"[1,4294967296]", KVIX_ERANGE, "\"tokens\"[1] out of range (0 to 4294967295)"},
    {"[1,[2]]", KVIX_EINVAL, "\"tokens\"[1] is not a token id"},
    {"{\"local\":[\"abc\",{}]}", KVIX_EINVAL, "\"local\"[1] is not a hash (an object)"},
    {"{\"type\":\"query\",\"bs\":\"16\",\"tokens\":[]}", KVIX_EINVAL, "\"bs\" is not an integer"},
    {"{\"tokens\":[],\"top\":-1}", KVIX_ERANGE, "\"top\" is negative"},
    {"{\"tokens\":[],\"top\":4294967296}", KVIX_ERANGE,
     "\"top\" out of range (0 to 4294967295)"},
    {"{\"tokens\":[],\"top\":\"4\"}", KVIX_EINVAL, "\"top\" is not an integer"},
    {"{\"tokens\":[],\"explain\":1}", KVIX_EINVAL, "\"explain\" is not a boolean"},
    {"{\"tokens\":[],\"workers\":3}", KVIX_EINVAL, "\"workers\" is not an array"},
    {"{\"tokens\":[],\"workers\":[1,-3]}", KVIX_ERANGE, "\"workers\"[1] is negative"},
    {"{\"tokens\":[],\"workers\":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}", KVIX_ELIMIT,
     "\"workers\" names 17 workers (limit 16)"},
    {"not json", KVIX_EINVAL, "malformed json at column 3: '[' or '{' expected near 'not'"},
    {"{\"type\":\"cleared\",\"worker\":1", KVIX_EINVAL,
     "malformed json at column 28: '}' expected near end of file"},
    {"{\"worker\":1,\"worker\":2}", KVIX_EINVAL,
     "malformed json at column 20: duplicate object key near '\"worker\"'"},
    {"{\"a\":[[[[[[[[1]]]]]]]]}", KVIX_ELIMIT, "nested deeper than 8 levels"},
    {"", KVIX_EINVAL, "malformed json at column 0: '[' or '{' expected near end of file"},
};

TEST(every_error_message)
{
    kvix_event ev;
    kvix_event_init(&ev);
    for (size_t i = 0; i < sizeof bad_lines / sizeof bad_lines[0]; i++) {
        kvix_err err = {0, "", KVIX_REASON_OTHER};
        int rc = from_json(bad_lines[i].line, &ev, &err);
        if (!CHECK(rc == bad_lines[i].code))
            fprintf(stderr, "#   line %zu: %s -> %d %s\n", i, bad_lines[i].line, rc, err.msg);
        CHECK_STR(err.msg, bad_lines[i].msg);
        CHECK(err.code == rc);
    }
    /* seven levels of nesting under the root are fine */
    kvix_err err;
    CHECK(from_json("{\"a\":[[[[[[[1]]]]]]],\"tokens\":[]}", &ev, &err) == KVIX_OK);
    kvix_event_release(&ev);
}

TEST(name_and_id_ceilings)
{
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    char line[1024];
    char name[KVIX_NAME_MAX + 1];
    memset(name, 'm', KVIX_NAME_MAX);
    name[KVIX_NAME_MAX - 1] = '\0'; /* 255 bytes: fits */
    snprintf(line, sizeof line, "{\"model\":\"%s\",\"tokens\":[]}", name);
    CHECK(from_json(line, &ev, &err) == KVIX_OK);
    CHECK_U64(strlen(ev.model), KVIX_NAME_MAX - 1);
    name[KVIX_NAME_MAX - 1] = 'm';
    name[KVIX_NAME_MAX] = '\0'; /* 256 bytes: too long */
    snprintf(line, sizeof line, "{\"lora\":\"%s\",\"tokens\":[]}", name);
    CHECK(from_json(line, &ev, &err) == KVIX_ELIMIT);
    CHECK_STR(err.msg, "\"lora\" longer than 255 bytes");
    CHECK(from_json("{\"model\":\"a\\u0000b\",\"tokens\":[]}", &ev, &err) == KVIX_EINVAL);

    snprintf(line, sizeof line, "{\"id\":\"%s\",\"tokens\":[]}", name);
    CHECK(from_json(line, &ev, &err) == KVIX_ELIMIT);
    CHECK_STR(err.msg, "\"id\" longer than 255 bytes");
    kvix_event_release(&ev);
}

TEST(blocks_ceiling)
{
    size_t n = KVIX_EVENT_BLOCKS_MAX + 1;
    kvix_buf b;
    kvix_buf_init(&b);
    kvix_buf_printf(&b, NULL, "{\"type\":\"stored\",\"worker\":1,\"bs\":1,\"blocks\":[");
    for (size_t i = 0; i < n; i++)
        kvix_buf_printf(&b, NULL, "%s{\"local\":1,\"seq\":%zu}", i ? "," : "", i);
    kvix_buf_printf(&b, NULL, "]}");
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    CHECK(kvix_event_from_json(b.data, b.len, &ev, &err) == KVIX_ELIMIT);
    CHECK_STR(err.msg, "too many blocks: 65537 (limit 65536)");
    kvix_buf_release(&b);
    kvix_event_release(&ev);
}

TEST(json_round_trip_is_canonical)
{
    static const char *canon[] = {
        "{\"type\":\"stored\",\"worker\":1,\"dp\":0,\"model\":\"llama\",\"tenant\":\"default\","
        "\"medium\":\"gpu\",\"eid\":0,\"bs\":16,\"parent\":null,\"blocks\":[{\"local\":"
        "\"cb38e4d7fb2dca5c\",\"seq\":\"0123456789abcdef\"}]}\n",
        "{\"type\":\"stored\",\"worker\":9223372036854775807,\"dp\":4294967295,\"model\":"
        "\"m\\\"\\\\\\n\\u0001\",\"tenant\":\"t\xc3\xa9\",\"medium\":\"external\",\"eid\":9,"
        "\"ts\":1700000000.125,\"bs\":2,\"parent\":\"ffffffffffffffff\",\"blocks\":[{\"local\":"
        "\"0000000000000001\",\"seq\":\"0000000000000002\"},{\"local\":\"0000000000000003\","
        "\"seq\":\"0000000000000004\"}],\"lora\":\"ad\",\"tokens\":[[1,2],[4294967295,0]]}\n",
        "{\"type\":\"removed\",\"worker\":3,\"dp\":1,\"model\":\"default\",\"tenant\":\"default\","
        "\"medium\":\"disk\",\"hashes\":[\"0123456789abcdef\",\"0000000000000000\"]}\n",
        "{\"type\":\"cleared\",\"worker\":1,\"dp\":0,\"model\":\"llama\",\"tenant\":\"default\","
        "\"medium\":\"cpu\",\"eid\":2,\"ts\":0.1}\n",
        /* KV cache groups, a group of another kind (hashes only), a
         * placeholder, EAGLE's windows of bs + 1 tokens */
        "{\"type\":\"stored\",\"worker\":1,\"dp\":0,\"model\":\"default\",\"tenant\":\"default\","
        "\"medium\":\"gpu\",\"eid\":4,\"group\":0,\"kind\":\"full_attention\",\"bs\":16,"
        "\"parent\":null,\"blocks\":[{\"local\":\"cb38e4d7fb2dca5c\",\"seq\":\"0123456789abcdef\"}]}\n",
        "{\"type\":\"stored\",\"worker\":1,\"dp\":0,\"model\":\"default\",\"tenant\":\"default\","
        "\"medium\":\"gpu\",\"eid\":4,\"group\":63,\"kind\":\"sliding_window\",\"bs\":16,"
        "\"parent\":\"0000000000000001\",\"hashes\":[\"0123456789abcdef\"]}\n",
        "{\"type\":\"stored\",\"worker\":1,\"dp\":0,\"model\":\"default\",\"tenant\":\"default\","
        "\"medium\":\"cpu\",\"parent\":null,\"placeholder\":true,\"hashes\":[\"0123456789abcdef\","
        "\"0000000000000002\"]}\n",
        "{\"type\":\"removed\",\"worker\":1,\"dp\":0,\"model\":\"default\",\"tenant\":\"default\","
        "\"medium\":\"gpu\",\"group\":2,\"hashes\":[\"0123456789abcdef\"]}\n",
        "{\"type\":\"stored\",\"worker\":1,\"dp\":0,\"model\":\"default\",\"tenant\":\"default\","
        "\"medium\":\"gpu\",\"bs\":2,\"parent\":null,\"eagle\":true,\"blocks\":[{\"local\":"
        "\"0000000000000001\",\"seq\":\"0000000000000002\"},{\"local\":\"0000000000000003\","
        "\"seq\":\"0000000000000004\"}],\"tokens\":[[1,2,3],[3,4,5]]}\n",
        "{\"type\":\"query\",\"model\":\"m\",\"tenant\":\"t\",\"lora\":\"l\",\"id\":{\"k\":[1,2]},"
        "\"bs\":16,\"tokens\":[1,2,3]}\n",
        "{\"type\":\"query\",\"model\":\"default\",\"tenant\":\"default\",\"local\":"
        "[\"00000000000000aa\"]}\n",
        "{\"type\":\"query\",\"model\":\"m\",\"tenant\":\"default\",\"top\":4,"
        "\"explain\":true,\"workers\":[9223372036854775807,0],\"tokens\":[1]}\n",
        "{\"type\":\"query\",\"model\":\"m\",\"tenant\":\"default\",\"top\":0,\"local\":[]}\n",
    };
    kvix_event ev, ev2;
    kvix_err err;
    kvix_buf b, m;
    kvix_event_init(&ev);
    kvix_event_init(&ev2);
    kvix_buf_init(&b);
    kvix_buf_init(&m);
    for (size_t i = 0; i < sizeof canon / sizeof canon[0]; i++) {
        size_t len = strlen(canon[i]) - 1;
        CHECK(kvix_event_from_json(canon[i], len, &ev, &err) == KVIX_OK);
        b.len = 0;
        CHECK(kvix_event_to_json(&ev, &b, &err) == KVIX_OK);
        CHECK_STR(b.data, canon[i]);
        /* through msgpack and back: the same record */
        m.len = 0;
        CHECK(kvix_event_to_msgpack(&ev, &m, &err) == KVIX_OK);
        size_t used = 0;
        CHECK(kvix_event_from_msgpack(m.data, m.len, &used, &ev2, &err) == KVIX_OK);
        CHECK_U64(used, m.len);
        b.len = 0;
        CHECK(kvix_event_to_json(&ev2, &b, &err) == KVIX_OK);
        CHECK_STR(b.data, canon[i]);
    }
    kvix_event_release(&ev);
    kvix_event_release(&ev2);
    kvix_buf_release(&b);
    kvix_buf_release(&m);
}

TEST(msgpack_hashes_are_uint64)
{
    kvix_event ev;
    kvix_err err;
    kvix_buf m;
    kvix_event_init(&ev);
    kvix_buf_init(&m);
    ev.type = KVIX_EV_REMOVED;
    ev.worker = 1;
    kvix_event_reserve_hashes(&ev, 1, &err);
    ev.hashes[0] = UINT64_MAX;
    ev.nhashes = 1;
    CHECK(kvix_event_to_msgpack(&ev, &m, &err) == KVIX_OK);
    /* the hash is the last value: 0xcf then 8 bytes of 0xff */
    CHECK(m.len > 9 && (unsigned char)m.data[m.len - 9] == 0xcf);
    CHECK((unsigned char)m.data[m.len - 1] == 0xff);
    /* truncated and malformed single records */
    size_t used;
    CHECK(kvix_event_from_msgpack(m.data, m.len - 1, &used, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "truncated msgpack record");
    CHECK(kvix_event_from_msgpack("\xc1", 1, &used, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "malformed msgpack");
    CHECK(kvix_event_from_msgpack("\x05", 1, &used, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "record is an integer, not an object");
    /* an empty map (found by the fuzzer: no pointer arithmetic on NULL) */
    CHECK(kvix_event_from_msgpack("\x80", 1, &used, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "query has neither \"tokens\" nor \"local\"");
    CHECK(kvix_event_from_msgpack("\xde\x00\x00", 3, &used, &ev, &err) == KVIX_EINVAL);
    CHECK(kvix_event_from_msgpack("\x81\xa6" "blocks\x90", 9, &used, &ev, &err) == KVIX_EINVAL);
    /* a non-string key has no json form: the record is refused, as NDJSON would */
    const char rec[] = "\x83\x01\x02\xa4type\xa7removed\xa6worker\x01";
    CHECK(kvix_event_from_msgpack(rec, sizeof rec - 1, &used, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "a map key is not a string");
    kvix_event_release(&ev);
    kvix_buf_release(&m);
}

TEST(encode_rejects_what_json_cannot_say)
{
    kvix_event ev;
    kvix_err err;
    kvix_buf b;
    kvix_event_init(&ev);
    kvix_buf_init(&b);
    ev.type = KVIX_EV_CLEARED;
    memcpy(ev.model, "\xff\xfe", 3);
    kvix_buf_append(&b, "x", 1, NULL);
    CHECK(kvix_event_to_json(&ev, &b, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "name is not valid utf-8");
    CHECK_U64(b.len, 1); /* nothing half-written */
    ev.type = 99;
    CHECK(kvix_event_to_json(&ev, &b, &err) == KVIX_EINVAL);
    CHECK(kvix_event_to_msgpack(&ev, &b, &err) == KVIX_EINVAL);
    CHECK_U64(b.len, 1);
    kvix_event_release(&ev);
    kvix_buf_release(&b);
}

TEST(answer_lines)
{
    kvix_answer ans;
    memset(&ans, 0, sizeof ans);
    kvix_score s[2] = {{1, 0, 2, {2, 0, 0, 0}, 2}, {2, 0, 1, {0, 1, 0, 1}, 1}};
    ans.scores = s;
    ans.nscores = 2;
    ans.query_blocks = 3;
    ans.bs = 16;
    kvix_event q;
    kvix_err err;
    kvix_event_init(&q);
    CHECK(from_json("{\"id\":7,\"tokens\":[]}", &q, &err) == KVIX_OK);
    kvix_buf b;
    kvix_buf_init(&b);
    CHECK(kvix_answer_to_json(&ans, &q, &b, &err) == KVIX_OK);
    CHECK_STR(b.data, "{\"id\":7,\"blocks\":3,\"scores\":[{\"worker\":1,\"dp\":0,\"blocks\":2,"
                      "\"tokens\":32,\"tiers\":{\"gpu\":2}},{\"worker\":2,\"dp\":0,\"blocks\":1,"
                      "\"tokens\":16,\"tiers\":{\"cpu\":1,\"external\":1}}]}\n");
    /* no id, no scores */
    b.len = 0;
    ans.nscores = 0;
    ans.query_blocks = 0;
    CHECK(from_json("[1]", &q, &err) == KVIX_OK);
    CHECK(kvix_answer_to_json(&ans, &q, &b, &err) == KVIX_OK);
    CHECK_STR(b.data, "{\"blocks\":0,\"scores\":[]}\n");
    /* a top answer says how many it left out */
    b.len = 0;
    ans.nscores = 1;
    ans.query_blocks = 3;
    ans.top = 1;
    ans.omitted = 1;
    CHECK(kvix_answer_to_json(&ans, &q, &b, &err) == KVIX_OK);
    CHECK_STR(b.data, "{\"blocks\":3,\"scores\":[{\"worker\":1,\"dp\":0,\"blocks\":2,"
                      "\"tokens\":32,\"tiers\":{\"gpu\":2}}],\"omitted\":1}\n");
    kvix_buf_release(&b);
    kvix_event_release(&q);
}

TEST(format_names)
{
    kvix_format f;
    CHECK_STR(kvix_format_name(KVIX_FMT_NDJSON), "ndjson");
    CHECK_STR(kvix_format_name(KVIX_FMT_MSGPACK), "msgpack");
    CHECK_STR(kvix_format_name(KVIX_FMT_AUTO), "auto");
    CHECK(kvix_format_parse("msgpack", &f) == KVIX_OK && f == KVIX_FMT_MSGPACK);
    CHECK(kvix_format_parse("ndjson", &f) == KVIX_OK && f == KVIX_FMT_NDJSON);
    CHECK(kvix_format_parse("auto", &f) == KVIX_OK && f == KVIX_FMT_AUTO);
    CHECK(kvix_format_parse("xml", &f) == KVIX_EINVAL);
    CHECK(kvix_format_parse("json", &f) == KVIX_EINVAL); /* no undocumented alias */
}

/* ---- the reader ---- */

static int tmp_with(const void *data, size_t len)
{
    FILE *f = tmpfile();
    if (!f)
        return -1;
    int fd = dup(fileno(f));
    fclose(f);
    if (write(fd, data, len) != (ssize_t)len)
        return -1;
    lseek(fd, 0, SEEK_SET);
    return fd;
}

TEST(reader_ndjson_positions)
{
    const char in[] = "\n"
                      "{\"type\":\"cleared\",\"worker\":1}\r\n"
                      "   \n"
                      "{\"type\":\"cleared\"}\n"
                      "[1,2]\n"
                      "{\"type\":\"cleared\",\"worker\":2}"; /* no final newline */
    int fd = tmp_with(in, sizeof in - 1);
    kvix_reader *r;
    kvix_err err;
    kvix_event ev;
    kvix_event_init(&ev);
    CHECK(kvix_reader_new(&r, fd, "<stdin>", KVIX_FMT_AUTO, &err) == KVIX_OK);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    CHECK_U64(kvix_reader_pos(r), 2);
    CHECK(kvix_reader_format(r) == KVIX_FMT_NDJSON);
    CHECK_U64(ev.worker, 1);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EINVAL);
    CHECK_U64(kvix_reader_pos(r), 4);
    CHECK_STR(err.msg, "missing \"worker\"");
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    CHECK_U64(kvix_reader_pos(r), 5);
    CHECK(ev.type == KVIX_EV_QUERY);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    CHECK_U64(kvix_reader_pos(r), 6);
    CHECK_U64(ev.worker, 2);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    CHECK_U64(kvix_reader_offset(r), sizeof in - 1);
    CHECK_STR(kvix_reader_name(r), "<stdin>");
    kvix_reader_free(r);
    close(fd);
    kvix_event_release(&ev);
}

/* kvindex -q: every line answered, a blank one as an empty query, and a
 * blank line first decides the format at once (a coprocess's first line
 * must not wait for a second). */
TEST(reader_blank_queries)
{
    int p[2];
    CHECK(pipe(p) == 0);
    kvix_reader *r;
    kvix_err err;
    kvix_event ev;
    kvix_event_init(&ev);
    CHECK(kvix_reader_new(&r, p[0], "<stdin>", KVIX_FMT_AUTO, &err) == KVIX_OK);
    kvix_reader_set_blank_queries(r, 1);
    /* only the blank line is written: it is returned with the pipe still open */
    CHECK(write(p[1], "\n", 1) == 1);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    CHECK(ev.type == KVIX_EV_QUERY && ev.has_tokens && ev.ntokens == 0 && ev.nhashes == 0);
    CHECK_U64(kvix_reader_pos(r), 1);
    CHECK(kvix_reader_format(r) == KVIX_FMT_NDJSON);
    const char more[] = "[7]\n \t\r\n";
    CHECK(write(p[1], more, sizeof more - 1) == (ssize_t)(sizeof more - 1));
    close(p[1]);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    CHECK(ev.type == KVIX_EV_QUERY && ev.ntokens == 1 && ev.tokens[0] == 7);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    CHECK(ev.type == KVIX_EV_QUERY && ev.ntokens == 0);
    CHECK_U64(kvix_reader_pos(r), 3);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    kvix_reader_free(r);
    close(p[0]);
    kvix_event_release(&ev);
}

TEST(reader_long_line_is_skipped)
{
    size_t big = KVIX_LINE_MAX + 10;
    char *in = malloc(big + 200);
    size_t n = 0;
    n += (size_t)snprintf(in + n, big + 200 - n, "{\"type\":\"cleared\",\"worker\":1}\n");
    n += (size_t)snprintf(in + n, big + 200 - n, "{\"pad\":\"");
    memset(in + n, 'x', big);
    n += big;
    n += (size_t)snprintf(in + n, big + 200 - n, "\"}\n{\"type\":\"cleared\",\"worker\":3}\n");
    int fd = tmp_with(in, n);
    free(in);
    kvix_reader *r;
    kvix_err err;
    kvix_event ev;
    kvix_event_init(&ev);
    CHECK(kvix_reader_new(&r, fd, "f", KVIX_FMT_NDJSON, &err) == KVIX_OK);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_ELIMIT);
    CHECK_U64(kvix_reader_pos(r), 2);
    CHECK_STR(err.msg, "line longer than 16777216 bytes");
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    CHECK_U64(kvix_reader_pos(r), 3);
    CHECK_U64(ev.worker, 3);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    kvix_reader_free(r);
    close(fd);
    kvix_event_release(&ev);
}

TEST(reader_msgpack_stream)
{
    kvix_buf m;
    kvix_buf_init(&m);
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    /* 3000 records, big enough to cross read boundaries */
    for (int i = 0; i < 3000; i++) {
        kvix_event_reset(&ev);
        ev.type = KVIX_EV_STORED;
        ev.worker = (uint64_t)i;
        ev.bs = 16;
        kvix_event_reserve_blocks(&ev, 40, NULL);
        for (int j = 0; j < 40; j++)
            ev.blocks[j] = (kvix_block){(uint64_t)j * 0x9e3779b97f4a7c15u, (uint64_t)i};
        ev.nblocks = 40;
        CHECK(kvix_event_to_msgpack(&ev, &m, &err) == KVIX_OK);
    }
    kvix_buf_append(&m, "\xc1\x80", 2, NULL); /* 0xc1 is never valid msgpack */
    int fd = tmp_with(m.data, m.len);
    kvix_reader *r;
    CHECK(kvix_reader_new(&r, fd, "m", KVIX_FMT_AUTO, &err) == KVIX_OK);
    int ok = 0, rc;
    uint64_t sum = 0;
    while ((rc = kvix_reader_next(r, &ev, &err)) == KVIX_OK) {
        ok++;
        sum += ev.worker + ev.blocks[39].local;
    }
    CHECK(kvix_reader_format(r) == KVIX_FMT_MSGPACK);
    CHECK_U64(ok, 3000);
    CHECK_U64(sum, 2999u * 3000 / 2 + 3000 * (39 * 0x9e3779b97f4a7c15u));
    CHECK(rc == KVIX_EINVAL);
    CHECK_U64(kvix_reader_pos(r), 3001);
    CHECK_STR(err.msg, "malformed msgpack record (the rest of the input cannot be framed)");
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    kvix_reader_free(r);
    close(fd);

    /* a truncated last record */
    fd = tmp_with(m.data, 20);
    CHECK(kvix_reader_new(&r, fd, "m", KVIX_FMT_MSGPACK, &err) == KVIX_OK);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "truncated msgpack record at end of input");
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    kvix_reader_free(r);
    close(fd);
    kvix_buf_release(&m);
    kvix_event_release(&ev);
}

TEST(reader_empty_and_blank)
{
    kvix_reader *r;
    kvix_err err;
    kvix_event ev;
    kvix_event_init(&ev);
    int fd = tmp_with("", 0);
    CHECK(kvix_reader_new(&r, fd, "e", KVIX_FMT_AUTO, &err) == KVIX_OK);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    kvix_reader_free(r);
    close(fd);
    fd = tmp_with(" \n\n\t\n", 5);
    CHECK(kvix_reader_new(&r, fd, "e", KVIX_FMT_AUTO, &err) == KVIX_OK);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    kvix_reader_free(r);
    close(fd);
    /* a closed descriptor is a read error, not end of input */
    CHECK(kvix_reader_new(&r, 1000, "gone", KVIX_FMT_NDJSON, &err) == KVIX_OK);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EIO);
    CHECK(strstr(err.msg, "error reading gone") != NULL);
    kvix_reader_free(r);
    kvix_event_release(&ev);
}

static void on_alarm(int sig)
{
    (void)sig;
}

TEST(reader_reports_eintr_when_asked)
{
    int p[2];
    CHECK(pipe(p) == 0);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm; /* no SA_RESTART: read(2) fails with EINTR */
    sigaction(SIGALRM, &sa, &old);
    kvix_reader *r;
    kvix_err err;
    kvix_event ev;
    kvix_event_init(&ev);
    CHECK(kvix_reader_new(&r, p[0], "<pipe>", KVIX_FMT_AUTO, &err) == KVIX_OK);
    kvix_reader_set_eintr(r, 1);
    struct itimerval it = {{0, 0}, {0, 20000}};
    setitimer(ITIMER_REAL, &it, NULL);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_ESYS);
    CHECK_STR(err.msg, "interrupted");
    /* the reader carries on where it stopped */
    const char line[] = "{\"type\":\"cleared\",\"worker\":4}\n";
    CHECK(write(p[1], line, sizeof line - 1) == (ssize_t)(sizeof line - 1));
    close(p[1]);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    CHECK_U64(ev.worker, 4);
    CHECK_U64(kvix_reader_pos(r), 1);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    sigaction(SIGALRM, &old, NULL);
    kvix_reader_free(r);
    close(p[0]);
    kvix_event_release(&ev);
}

/* Declared counts are not trusted: a few bytes claiming 2^32 elements must be
 * rejected without allocating for them (ASan would abort on a 96 GiB malloc). */
TEST(msgpack_declared_counts_do_not_allocate)
{
    static const struct {
        const char *bytes;
        size_t len;
    } bombs[] = {
        {"\x81\xa6hashes\xdd\xff\xff\xff\xff", 12},
        {"\xdf\xff\xff\xff\xff", 5},
        {"\x81\xa6hashes\xdb\xff\xff\xff\xf0xx", 14},
    };
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    for (size_t i = 0; i < sizeof bombs / sizeof bombs[0]; i++) {
        size_t used = 7;
        CHECK(kvix_event_from_msgpack(bombs[i].bytes, bombs[i].len, &used, &ev, &err) ==
              KVIX_EINVAL);
        CHECK_STR(err.msg, "truncated msgpack record");
        CHECK_U64(used, 0);
        int fd = tmp_with(bombs[i].bytes, bombs[i].len);
        kvix_reader *r;
        CHECK(kvix_reader_new(&r, fd, "b", KVIX_FMT_AUTO, &err) == KVIX_OK);
        CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EINVAL);
        CHECK_STR(err.msg, "truncated msgpack record at end of input");
        CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
        kvix_reader_free(r);
        close(fd);
    }
    kvix_event_release(&ev);
}

TEST(msgpack_nesting)
{
    /* 9 levels: too deep for a record, but framed, so the stream goes on */
    char rec[64];
    size_t n = 0;
    rec[n++] = (char)0x81;
    rec[n++] = (char)0xa1;
    rec[n++] = 'x';
    for (int i = 0; i < 8; i++)
        rec[n++] = (char)0x91;
    rec[n++] = 0x01;
    const char next[] = "\x82\xa4type\xa7" "cleared\xa6worker\x05";
    char in[128];
    memcpy(in, rec, n);
    memcpy(in + n, next, sizeof next - 1);
    int fd = tmp_with(in, n + sizeof next - 1);
    kvix_reader *r;
    kvix_err err;
    kvix_event ev;
    kvix_event_init(&ev);
    CHECK(kvix_reader_new(&r, fd, "n", KVIX_FMT_AUTO, &err) == KVIX_OK);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_ELIMIT);
    CHECK_STR(err.msg, "nested deeper than 8 levels");
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    CHECK_U64(ev.worker, 5);
    CHECK_U64(kvix_reader_pos(r), 2);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    kvix_reader_free(r);
    close(fd);

    /* 40 levels: past the decoder's stack, the stream cannot be framed */
    char deep[64];
    deep[0] = (char)0x81;
    deep[1] = (char)0xa1;
    deep[2] = 'x';
    memset(deep + 3, 0x91, 40);
    deep[43] = 0x01;
    memcpy(in, deep, 44);
    memcpy(in + 44, next, sizeof next - 1);
    fd = tmp_with(in, 44 + sizeof next - 1);
    CHECK(kvix_reader_new(&r, fd, "d", KVIX_FMT_MSGPACK, &err) == KVIX_OK);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_ELIMIT);
    CHECK_STR(err.msg, "msgpack record nested deeper than 32 levels (the rest of the input cannot be framed)");
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    kvix_reader_free(r);
    close(fd);
    kvix_event_release(&ev);
}

/* Records cut at every possible byte by a slow writer are framed the same. */
TEST(msgpack_records_cut_anywhere)
{
    kvix_buf m;
    kvix_buf_init(&m);
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    for (int i = 0; i < 20; i++) {
        kvix_event_reset(&ev);
        ev.type = i % 3 ? KVIX_EV_REMOVED : KVIX_EV_CLEARED;
        ev.worker = (uint64_t)i;
        kvix_event_reserve_hashes(&ev, 3, NULL);
        ev.hashes[0] = ev.hashes[1] = ev.hashes[2] = UINT64_MAX - (uint64_t)i;
        ev.nhashes = ev.type == KVIX_EV_REMOVED ? 3 : 0;
        kvix_event_to_msgpack(&ev, &m, &err);
    }
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pid = fork();
    if (pid == 0) { /* one byte per write */
        close(p[0]);
        for (size_t i = 0; i < m.len; i++)
            if (write(p[1], m.data + i, 1) != 1)
                _exit(1);
        _exit(0);
    }
    close(p[1]);
    kvix_reader *r;
    CHECK(kvix_reader_new(&r, p[0], "pipe", KVIX_FMT_AUTO, &err) == KVIX_OK);
    int n = 0, rc;
    uint64_t sum = 0;
    while ((rc = kvix_reader_next(r, &ev, &err)) == KVIX_OK) {
        sum += ev.worker + (ev.nhashes ? ev.hashes[2] & 0xff : 0);
        n++;
    }
    CHECK(rc == KVIX_EOF);
    CHECK_U64(n, 20);
    uint64_t want = 0;
    for (int i = 0; i < 20; i++)
        want += (uint64_t)i + (i % 3 ? (uint64_t)(0xff - i) : 0);
    CHECK_U64(sum, want);
    kvix_reader_free(r);
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    kvix_buf_release(&m);
    kvix_event_release(&ev);
}

/* A tool told to stop applies what it already took from the pipe, and reads
 * nothing more. */
TEST(reader_stop_drains_the_buffer)
{
    int p[2];
    CHECK(pipe(p) == 0);
    const char in[] = "{\"type\":\"cleared\",\"worker\":1}\n{\"type\":\"cleared\",\"worker\":2}\n"
                      "{\"type\":\"cleared\",\"wor";
    CHECK(write(p[1], in, sizeof in - 1) == (ssize_t)(sizeof in - 1));
    kvix_reader *r;
    kvix_err err;
    kvix_event ev;
    kvix_event_init(&ev);
    CHECK(kvix_reader_new(&r, p[0], "<pipe>", KVIX_FMT_AUTO, &err) == KVIX_OK);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    CHECK_U64(ev.worker, 1);
    kvix_reader_stop(r);
    /* written after the stop: must stay in the pipe */
    const char more[] = "ker\":3}\n{\"type\":\"cleared\",\"worker\":4}\n";
    CHECK(write(p[1], more, sizeof more - 1) == (ssize_t)(sizeof more - 1));
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    CHECK_U64(ev.worker, 2);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    CHECK_U64(kvix_reader_pending(r), strlen("{\"type\":\"cleared\",\"wor"));
    char rest[128];
    CHECK(read(p[0], rest, sizeof rest) == (ssize_t)(sizeof more - 1));
    kvix_reader_free(r);
    close(p[0]);
    close(p[1]);

    /* msgpack too */
    kvix_buf m;
    kvix_buf_init(&m);
    kvix_event_reset(&ev);
    ev.type = KVIX_EV_CLEARED;
    ev.worker = 7;
    kvix_event_to_msgpack(&ev, &m, &err);
    kvix_event_to_msgpack(&ev, &m, &err);
    CHECK(pipe(p) == 0);
    CHECK(write(p[1], m.data, m.len - 3) == (ssize_t)(m.len - 3));
    CHECK(kvix_reader_new(&r, p[0], "<pipe>", KVIX_FMT_AUTO, &err) == KVIX_OK);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_OK);
    kvix_reader_stop(r);
    CHECK(kvix_reader_next(r, &ev, &err) == KVIX_EOF);
    CHECK_U64(kvix_reader_pending(r), m.len / 2 - 3);
    kvix_reader_free(r);
    close(p[0]);
    close(p[1]);
    kvix_buf_release(&m);
    kvix_event_release(&ev);
}

/* Contract section 2: a JSON integer hash over the whole u64 range, exactly
 * (jansson's integers stop at 2^63-1). */
TEST(decimal_hashes_over_the_whole_u64_range)
{
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    CHECK(from_json("{\"type\":\"stored\",\"worker\":1,\"bs\":2,\"parent\":18446744073709551615,"
                    "\"blocks\":[{\"local\":9223372036854775807,\"seq\":9223372036854775808},"
                    "{\"local\":18446744073709551614,\"seq\":10000000000000000000}]}",
                    &ev, &err) == KVIX_OK);
    CHECK(ev.has_parent);
    CHECK_U64(ev.parent, UINT64_MAX);
    CHECK_U64(ev.blocks[0].local, INT64_MAX);
    CHECK_U64(ev.blocks[0].seq, (uint64_t)INT64_MAX + 1);
    CHECK_U64(ev.blocks[1].local, UINT64_MAX - 1);
    CHECK_U64(ev.blocks[1].seq, UINT64_C(10000000000000000000));
    CHECK(from_json("{\"type\":\"removed\",\"worker\":1,\"hashes\":[18446744073709551615, 1]}", &ev,
                    &err) == KVIX_OK);
    CHECK_U64(ev.hashes[0], UINT64_MAX);
    CHECK_U64(ev.hashes[1], 1);
    /* a large integer in an id is echoed as the integer it was */
    CHECK(from_json("{\"id\":{\"n\":[18446744073709551615,\"x\"]},\"local\":[12345678901234567890]}",
                    &ev, &err) == KVIX_OK);
    CHECK_STR(ev.id, "{\"n\":[18446744073709551615,\"x\"]}");
    CHECK_U64(ev.hashes[0], UINT64_C(12345678901234567890));
    /* a digit string inside a string is text, not a number */
    CHECK(from_json("{\"model\":\"18446744073709551615\",\"local\":[18446744073709551615]}", &ev,
                    &err) == KVIX_OK);
    CHECK_STR(ev.model, "18446744073709551615");
    /* past 2^64-1, or below -2^63, or big and fractional: malformed as before */
    CHECK(from_json("{\"local\":[18446744073709551616]}", &ev, &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, "too big integer") != NULL);
    CHECK(from_json("{\"local\":[-9223372036854775809]}", &ev, &err) == KVIX_EINVAL);
    CHECK(from_json("{\"local\":[18446744073709551615.5]}", &ev, &err) == KVIX_EINVAL);
    CHECK(from_json("{\"local\":[-1]}", &ev, &err) == KVIX_EINVAL);
    /* an escaped NUL in a string is still refused, large integer or not */
    CHECK(from_json("{\"model\":\"a\\u0000b\",\"local\":[18446744073709551615]}", &ev, &err) ==
          KVIX_EINVAL);
    CHECK(strncmp(err.msg, "malformed json", 14) == 0);
    kvix_event_release(&ev);
}

TEST(token_aliases_and_token_lines)
{
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    CHECK(from_json("{\"id\":1,\"token_ids\":[5,6]}", &ev, &err) == KVIX_OK);
    CHECK(ev.type == KVIX_EV_QUERY && ev.has_tokens);
    CHECK_U64(ev.ntokens, 2);
    CHECK_U64(ev.tokens[1], 6);
    CHECK(from_json("{\"model\":\"m\",\"prompt_token_ids\":[7]}", &ev, &err) == KVIX_OK);
    CHECK_U64(ev.tokens[0], 7);
    CHECK(from_json("{\"tokens\":[1],\"prompt_token_ids\":[7]}", &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "query has both \"tokens\" and \"prompt_token_ids\"");
    CHECK(from_json("{\"token_ids\":[1],\"local\":[\"1\"]}", &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "query has both \"token_ids\" and \"local\"");
    CHECK(from_json("{\"token_ids\":[1,-1]}", &ev, &err) == KVIX_ERANGE);
    CHECK_STR(err.msg, "\"token_ids\"[1] out of range (0 to 4294967295)");
    /* kvhash's whitespace lines */
    CHECK(from_json(" 1\t2  4294967295\r", &ev, &err) == KVIX_OK);
    CHECK(ev.type == KVIX_EV_QUERY && ev.has_tokens && !ev.has_id);
    CHECK_U64(ev.ntokens, 3);
    CHECK_U64(ev.tokens[2], UINT32_MAX);
    CHECK_STR(ev.model, "default");
    CHECK(from_json("7", &ev, &err) == KVIX_OK);
    CHECK_U64(ev.ntokens, 1);
    CHECK(from_json("1 -2", &ev, &err) == KVIX_ERANGE);
    CHECK_STR(err.msg, "token '-2' is negative");
    /* a number past 2^32 is a hash written where tokens go: said how to write it */
    CHECK(from_json("1 4294967296", &ev, &err) == KVIX_ERANGE);
    CHECK_STR(err.msg, "token '4294967296' is out of range (max 4294967295); block hashes go "
                       "in a query object: {\"local\":[4294967296,...]}");
    /* kvhash --plain's hex hashes as a line */
    CHECK(from_json("cb38e4d7fb2dca5c e8d3ec39b907b74c", &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "'cb38e4d7fb2dca5c' is not a record: block hashes go in a query object, "
                       "{\"local\":[\"cb38e4d7fb2dca5c\",...]}");
    CHECK(err.reason == KVIX_REASON_JSON);
    CHECK(from_json(" E8D3EC39B907B74C", &ev, &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, "{\"local\":[\"E8D3EC39B907B74C\",...]}") != NULL);
    /* 17 hex digits, or a word that is not hex: malformed JSON as before */
    CHECK(from_json("cb38e4d7fb2dca5c0", &ev, &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, "malformed json") == err.msg);
    CHECK(from_json("false", &ev, &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, "malformed json") == err.msg);
    CHECK(from_json("1 2x", &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "token '2x' is not a number");
    CHECK(from_json("-", &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "token '-' is not a number");
    kvix_event_release(&ev);
}

/* Contract section 4: a rejected query still gets its line. */
TEST(error_lines)
{
    kvix_buf b;
    kvix_err err;
    kvix_buf_init(&b);
    CHECK(kvix_error_to_json("2", "token -2 is out of range", &b, &err) == KVIX_OK);
    CHECK_STR(b.data, "{\"id\":2,\"error\":\"token -2 is out of range\"}\n");
    b.len = 0;
    CHECK(kvix_error_to_json(NULL, "missing \"worker\" \\ \x01 \xff", &b, &err) == KVIX_OK);
    CHECK_STR(b.data, "{\"error\":\"missing \\\"worker\\\" \\\\ \\u0001 ?\"}\n");
    b.len = 0;
    CHECK(kvix_error_to_json("", "x", &b, &err) == KVIX_OK);
    CHECK_STR(b.data, "{\"error\":\"x\"}\n");
    /* the decoder keeps a query's id even when the rest is rejected */
    kvix_event ev;
    kvix_event_init(&ev);
    CHECK(from_json("{\"id\":[\"q\",9],\"model\":7,\"tokens\":[1]}", &ev, &err) == KVIX_EINVAL);
    CHECK(ev.type == KVIX_EV_QUERY && ev.has_id);
    CHECK_STR(ev.id, "[\"q\",9]");
    kvix_event_release(&ev);
    kvix_buf_release(&b);
}

TEST(answer_says_unknown)
{
    kvix_answer ans;
    memset(&ans, 0, sizeof ans);
    kvix_err err;
    kvix_buf b;
    kvix_buf_init(&b);
    ans.unknown = KVIX_UNKNOWN_MODEL;
    CHECK(kvix_answer_to_json(&ans, NULL, &b, &err) == KVIX_OK);
    CHECK_STR(b.data, "{\"blocks\":0,\"scores\":[],\"unknown\":\"model\"}\n");
    b.len = 0;
    ans.unknown = KVIX_UNKNOWN_TENANT;
    CHECK(kvix_answer_to_json(&ans, NULL, &b, &err) == KVIX_OK);
    CHECK_STR(b.data, "{\"blocks\":0,\"scores\":[],\"unknown\":\"tenant\"}\n");
    kvix_buf_release(&b);
}

/* A kind kvix does not know is "unknown" (engines add kinds, and none but
 * the full ones is indexed); a kind without a group is group 0's. */
TEST(group_kinds_unknown_and_default_group)
{
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    CHECK(from_json("{\"type\":\"stored\",\"worker\":1,\"kind\":\"hyper_attention\",\"bs\":2,"
                    "\"hashes\":[1]}",
                    &ev, &err) == KVIX_OK);
    CHECK(ev.has_group);
    CHECK_U64(ev.group, 0);
    CHECK(ev.kind == KVIX_KIND_UNKNOWN);
    CHECK_U64(ev.nhashes, 1);
    CHECK_U64(ev.nblocks, 0);
    CHECK(!kvix_kind_full(ev.kind));
    CHECK(from_json("{\"type\":\"stored\",\"worker\":1,\"group\":3,\"kind\":\"mla_attention\","
                    "\"bs\":2,\"blocks\":[{\"local\":1,\"seq\":2}]}",
                    &ev, &err) == KVIX_OK);
    CHECK(ev.kind == KVIX_KIND_MLA_ATTENTION && kvix_kind_full(ev.kind));
    CHECK_U64(ev.group, 3);
    /* a full kind needs its blocks: hashes alone say nothing to index */
    CHECK(from_json("{\"type\":\"stored\",\"worker\":1,\"group\":0,\"kind\":\"full_attention\","
                    "\"bs\":2,\"hashes\":[1]}",
                    &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "missing \"blocks\"");
    for (int k = KVIX_KIND_FULL_ATTENTION; k < KVIX_KIND_COUNT; k++) {
        const char *n = kvix_kind_name(k);
        CHECK(kvix_kind_parse(n, strlen(n)) == k);
    }
    CHECK_STR(kvix_kind_name(KVIX_KIND_NONE), "");
    CHECK(kvix_kind_full(KVIX_KIND_NONE));
    CHECK(kvix_kind_full(KVIX_KIND_SINK_FULL_ATTENTION));
    CHECK(!kvix_kind_full(KVIX_KIND_SLIDING_WINDOW_MLA));
    kvix_event_release(&ev);
}
