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

/* kvhash's output line (kvix_tokens_hashes_write): a line parsed, hashed and
 * written as the README's example, appended after what out held. */
TEST(tokens_hashes_write_readme_line)
{
    kvix_tokens t;
    kvix_err err;
    kvix_buf out;
    kvix_tokens_init(&t);
    kvix_buf_init(&out);
    CHECK(parse(&t, "{\"id\":[7,\"x\"],\"tokens\":[1,2,3,4,5,6,7,8,9]}", &err) == KVIX_OK);
    uint64_t local[2], seq[2];
    size_t nb = kvix_hash_blocks(t.tok, t.n, 4, t.seed, local, seq);
    CHECK_U64(nb, 2);
    kvix_buf_append(&out, "x\n", 2, &err);
    kvix_tokens_hashes h = {.id = t.id, .n = nb, .local = local, .seq = seq, .partial = 1};
    CHECK(kvix_tokens_hashes_write(&h, KVIX_TOKENS_OBJECT, 0, &out, &err) == KVIX_OK);
    CHECK_STR(out.data, "x\n{\"id\":[7,\"x\"],\"local\":[\"cb38e4d7fb2dca5c\",\"e8d3ec39b907b74c\"],"
                        "\"seq\":[\"cb38e4d7fb2dca5c\",\"44a2b2379d6d3c3d\"],\"partial\":1}\n");
    CHECK_U64(out.len, strlen(out.data));
    kvix_buf_release(&out);
    kvix_tokens_release(&t);
}

TEST(tokens_hashes_write_forms)
{
    uint64_t local[2] = {1, UINT64_MAX}, seq[2] = {0x10, 0xabcdef};
    kvix_u128 pos[4] = {{1, 2}, {3, 4}, {0, 0}, {UINT64_MAX, UINT64_MAX}};
    kvix_tokens_hashes h = {.n = 2, .local = local, .seq = seq, .pos = pos, .positional = 1};
    static const struct {
        kvix_tokens_form form;
        int decimal;
        const char *want;
    } cases[] = {
        {KVIX_TOKENS_OBJECT, 0,
         "{\"local\":[\"0000000000000001\",\"ffffffffffffffff\"],"
         "\"seq\":[\"0000000000000010\",\"0000000000abcdef\"],"
         "\"psh\":[\"00000000000000010000000000000002\",\"00000000000000000000000000000000\"],"
         "\"plh\":[\"00000000000000030000000000000004\",\"ffffffffffffffffffffffffffffffff\"]}\n"},
        {KVIX_TOKENS_OBJECT, 1,
         "{\"local\":[1,18446744073709551615],\"seq\":[16,11259375],"
         "\"psh\":[18446744073709551618,0],\"plh\":[55340232221128654852,"
         "340282366920938463463374607431768211455]}\n"},
        {KVIX_TOKENS_LOCAL, 0, "0000000000000001 ffffffffffffffff\n"},
        {KVIX_TOKENS_SEQ, 1, "16 11259375\n"},
        {KVIX_TOKENS_PSH, 1, "18446744073709551618 0\n"},
        {KVIX_TOKENS_PLH, 0, "00000000000000030000000000000004 ffffffffffffffffffffffffffffffff\n"},
    };
    kvix_err err;
    kvix_buf out;
    kvix_buf_init(&out);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        out.len = 0;
        CHECK(kvix_tokens_hashes_write(&h, cases[i].form, cases[i].decimal, &out, &err) == KVIX_OK);
        CHECK_STR(out.data, cases[i].want);
    }
    /* no block: empty arrays (psh and plh too), an empty plain line */
    kvix_tokens_hashes none = {.id = "3", .positional = 1, .partial = 3};
    out.len = 0;
    CHECK(kvix_tokens_hashes_write(&none, KVIX_TOKENS_OBJECT, 1, &out, &err) == KVIX_OK);
    CHECK_STR(out.data, "{\"id\":3,\"local\":[],\"seq\":[],\"psh\":[],\"plh\":[],\"partial\":3}\n");
    out.len = 0;
    CHECK(kvix_tokens_hashes_write(&none, KVIX_TOKENS_PLH, 0, &out, &err) == KVIX_OK);
    CHECK_STR(out.data, "\n");
    /* positional hashes asked for and not given; a form that does not exist */
    h.pos = NULL;
    out.len = 0;
    out.data[0] = '\0';
    CHECK(kvix_tokens_hashes_write(&h, KVIX_TOKENS_PSH, 0, &out, &err) == KVIX_EINVAL);
    CHECK(kvix_tokens_hashes_write(&h, KVIX_TOKENS_OBJECT, 0, &out, &err) == KVIX_EINVAL);
    CHECK(kvix_tokens_hashes_write(&h, (kvix_tokens_form)9, 0, &out, &err) == KVIX_EINVAL);
    CHECK_U64(out.len, 0);
    h.positional = 0;
    CHECK(kvix_tokens_hashes_write(&h, KVIX_TOKENS_SEQ, 0, &out, &err) == KVIX_OK);
    CHECK_STR(out.data, "0000000000000010 0000000000abcdef\n");
    kvix_buf_release(&out);
}
