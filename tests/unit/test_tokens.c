/* kvix_tokens_parse (tokens.h): kvhash's line parser as a library call. The
 * three shapes give the same tokens, the fast paths and jansson agree, bad
 * lines say which token and why, and the ceiling holds. */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "kvix/hash.h"
#include "kvix/tokens.h"

static int parse(kvix_tokens *t, const char *s, kvix_err *err)
{
    return kvix_tokens_parse(t, s, strlen(s), KVIX_HASH_SEED, err);
}

TEST(tokens_three_shapes_agree)
{
    static const char *const lines[] = {
        "1 2 3 4294967295", " 1\t2  3 4294967295\r", "[1,2,3,4294967295]",
        "[ 1 , 2,3,4294967295 ]", "{\"tokens\":[1,2,3,4294967295]}",
        "{\"tokens\":[[1,2],[3,4294967295]]}",
    };
    kvix_tokens t;
    kvix_err err;
    kvix_tokens_init(&t);
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
        CHECK(parse(&t, lines[i], &err) == KVIX_OK);
        CHECK_U64(t.n, 4);
        CHECK_U64(t.tok[0], 1);
        CHECK_U64(t.tok[2], 3);
        CHECK_U64(t.tok[3], UINT32_MAX);
        CHECK_U64(t.seed, KVIX_HASH_SEED);
        CHECK_STR(t.id, "");
    }
    kvix_tokens_release(&t);
}

TEST(tokens_long_lines_cross_the_simd_chunks)
{
    /* 3000 tokens of varying width: the 64-byte scanner and the scalar one */
    size_t cap = 3000 * 12, o = 0;
    char *s = malloc(cap);
    uint32_t v = 1;
    for (int i = 0; i < 3000; i++) {
        o += (size_t)snprintf(s + o, cap - o, i ? " %u" : "%u", v);
        v = v * 2654435761u % 4000000000u;
    }
    kvix_tokens t;
    kvix_err err;
    kvix_tokens_init(&t);
    CHECK(kvix_tokens_parse(&t, s, o, 7, &err) == KVIX_OK);
    CHECK_U64(t.n, 3000);
    v = 1;
    int same = 1;
    for (int i = 0; i < 3000; i++) {
        same &= t.tok[i] == v;
        v = v * 2654435761u % 4000000000u;
    }
    CHECK(same);
    CHECK_U64(t.seed, 7);
    kvix_tokens_release(&t);
    free(s);
}

TEST(tokens_object_meta)
{
    kvix_tokens t;
    kvix_err err;
    kvix_tokens_init(&t);
    CHECK(parse(&t, "{\"id\":{\"a\":[1]},\"lora\":\"adapter-a\",\"tokens\":[]}", &err) == KVIX_OK);
    CHECK_U64(t.n, 0);
    CHECK_STR(t.id, "{\"a\":[1]}");
    CHECK_U64(t.seed, kvix_hash_lora_seed("adapter-a", 9));
    /* the next line starts afresh */
    CHECK(parse(&t, "5", &err) == KVIX_OK);
    CHECK_STR(t.id, "");
    CHECK_U64(t.seed, KVIX_HASH_SEED);
    CHECK(parse(&t, "   ", &err) == KVIX_OK);
    CHECK_U64(t.n, 0);
    /* a bad token after the id: the id is kept for the reply */
    CHECK(parse(&t, "{\"id\":7,\"tokens\":[1,-2]}", &err) == KVIX_EINVAL);
    CHECK_STR(t.id, "7");
    CHECK_STR(err.msg, "token '-2' is negative");
    kvix_tokens_release(&t);
}

TEST(tokens_bad_lines_say_why)
{
    static const struct {
        const char *line, *msg;
    } cases[] = {
        {"1 -2", "token '-2' is negative"},
        {"1 2x", "token '2x' is not a number"},
        {"4294967296", "token '4294967296' is out of range (max 4294967295)"},
        {"[1,2.5]", "token '2.5' is not an integer"},
        {"[1,\"a\"]", "token '\"a\"' is not a number"},
        {"{\"tok\":[1]}", "missing \"tokens\""},
        {"{\"tokens\":5}", "\"tokens\" is not an array"},
        {"{\"tokens\":[],\"lora\":5}", "\"lora\" is not a string"},
        {"\"x\"", "token '\"x\"' is not a number"},
        {"1 \x01\x7f", "token '\\x01\\x7f' is not a number"},
    };
    kvix_tokens t;
    kvix_err err;
    kvix_tokens_init(&t);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(parse(&t, cases[i].line, &err) == KVIX_EINVAL);
        CHECK_STR(err.msg, cases[i].msg);
    }
    /* jansson's own words vary with its version: only the prefix is kvix's */
    CHECK(parse(&t, "[1,", &err) == KVIX_EINVAL);
    CHECK(strncmp(err.msg, "invalid JSON at column 3: ", 26) == 0);
    kvix_tokens_release(&t);
}

TEST(tokens_line_ceiling)
{
    kvix_tokens t;
    kvix_err err;
    kvix_tokens_init(&t);
    /* the ceiling is checked before any byte is read: no 16 MiB buffer needed */
    static const char one[] = "1";
    CHECK(kvix_tokens_parse(&t, one, (size_t)KVIX_TOKENS_LINE_MAX + 1, KVIX_HASH_SEED, &err) ==
          KVIX_ELIMIT);
    CHECK_U64(t.n, 0);
    kvix_tokens_release(&t);
}
