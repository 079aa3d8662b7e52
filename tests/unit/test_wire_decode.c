/* kvix_wire_decode: every fixture of tests/fixtures/vllm decodes to
 * exactly the events cases.json lists; the other engine shapes of
 * vllm-wire.md (built here with msgpack-c's packer); hostile payloads
 * (random bytes, every truncation, huge declared sizes, deep nesting) fail
 * cleanly and deliver nothing. */
#include <errno.h>
#include <stddef.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvix/hash.h"
#include "kvix/wire.h"

/* ---- collecting decoded events ------------------------------------------ */

#define MAXEV 16

typedef struct sink {
    kvix_event ev[MAXEV];
    size_t n;
    int stop_at; /* return 99 on this event (1-based); 0 never */
} sink;

static int collect_fn(void *ctx, const kvix_event *ev)
{
    sink *s = ctx;
    if (s->n < MAXEV) {
        kvix_event_init(&s->ev[s->n]);
        kvix_event_copy(&s->ev[s->n], ev, NULL);
    }
    s->n++;
    return s->stop_at && (int)s->n == s->stop_at ? 99 : 0;
}

static void sink_release(sink *s)
{
    for (size_t i = 0; i < s->n && i < MAXEV; i++)
        kvix_event_release(&s->ev[i]);
    s->n = 0;
}

static kvix_wire_source reg(void)
{
    kvix_wire_source src = {1, 0, NULL, NULL, 16, 0};
    return src;
}

static int decode(const void *p, size_t len, const kvix_wire_source *src, sink *s,
                  kvix_wire_counts *c, kvix_err *err)
{
    memset(s, 0, sizeof *s);
    return kvix_wire_decode(p, len, 0, src, collect_fn, s, c, err);
}

/* ---- the engine fixtures ------------------------------------------------- */

static char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    char *b = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            b = realloc(b, cap);
        }
        size_t r = fread(b + n, 1, cap - n, fp);
        if (r == 0)
            break;
        n += r;
    }
    fclose(fp);
    *len = n;
    return b;
}

static void hex(uint64_t v, char out[17])
{
    kvix_hex64(v, out);
}

/* Check every field the expected object lists against ev. */
static void compare_event(const char *file, json_t *x, const kvix_event *ev)
{
    const char *key;
    json_t *val;
    char h[17];
    json_object_foreach(x, key, val) {
        int ok = 1;
        if (!strcmp(key, "type"))
            ok = !strcmp(json_string_value(val), kvix_event_type_name(ev->type));
        else if (!strcmp(key, "worker"))
            ok = (uint64_t)json_integer_value(val) == ev->worker;
        else if (!strcmp(key, "dp"))
            ok = (uint64_t)json_integer_value(val) == ev->dp;
        else if (!strcmp(key, "model"))
            ok = !strcmp(json_string_value(val), ev->model);
        else if (!strcmp(key, "tenant"))
            ok = !strcmp(json_string_value(val), ev->tenant);
        else if (!strcmp(key, "medium"))
            ok = !strcmp(json_string_value(val), kvix_medium_name(ev->medium));
        else if (!strcmp(key, "eid"))
            ok = ev->has_eid && (uint64_t)json_integer_value(val) == ev->eid;
        else if (!strcmp(key, "bs"))
            ok = (uint64_t)json_integer_value(val) == ev->bs;
        else if (!strcmp(key, "lora"))
            ok = !strcmp(json_string_value(val), ev->lora);
        else if (!strcmp(key, "parent")) {
            if (json_is_null(val))
                ok = !ev->has_parent;
            else {
                hex(ev->parent, h);
                ok = ev->has_parent && !strcmp(h, json_string_value(val));
            }
        } else if (!strcmp(key, "blocks")) {
            ok = json_array_size(val) == ev->nblocks;
            for (size_t i = 0; ok && i < ev->nblocks; i++) {
                json_t *b = json_array_get(val, i);
                hex(ev->blocks[i].local, h);
                ok = !strcmp(h, json_string_value(json_object_get(b, "local")));
                hex(ev->blocks[i].seq, h);
                ok = ok && !strcmp(h, json_string_value(json_object_get(b, "seq")));
            }
        } else if (!strcmp(key, "group")) {
            ok = ev->has_group && (uint64_t)json_integer_value(val) == ev->group;
        } else if (!strcmp(key, "kind")) {
            ok = !strcmp(json_string_value(val), kvix_kind_name(ev->kind));
        } else if (!strcmp(key, "placeholder")) {
            ok = (int)ev->placeholder == json_is_true(val);
        } else if (!strcmp(key, "eagle")) {
            ok = (int)ev->eagle == json_is_true(val);
        } else if (!strcmp(key, "hashes")) {
            ok = json_array_size(val) == ev->nhashes;
            for (size_t i = 0; ok && i < ev->nhashes; i++) {
                hex(ev->hashes[i], h);
                ok = !strcmp(h, json_string_value(json_array_get(val, i)));
            }
        } else {
            ok = 0;
            printf("# %s: field %s not checked by this test\n", file, key);
        }
        if (!ok)
            printf("# %s: field %s differs\n", file, key);
        CHECK(ok);
    }
}

/* The counters a case lists (cases-2026.json's "counts"), against cnt. */
static void compare_counts(const char *file, json_t *want, const kvix_wire_counts *cnt)
{
    static const struct { const char *key; size_t off; } f[] = {
        {"partial_blocks", offsetof(kvix_wire_counts, partial_blocks)},
        {"unknown_events", offsetof(kvix_wire_counts, unknown_events)},
        {"remote", offsetof(kvix_wire_counts, remote)},
        {"unknown_media", offsetof(kvix_wire_counts, unknown_media)},
        {"refused", offsetof(kvix_wire_counts, refused)},
        {"placeholders", offsetof(kvix_wire_counts, placeholders)},
        {"other_kinds", offsetof(kvix_wire_counts, other_kinds)},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        uint64_t v;
        memcpy(&v, (const char *)cnt + f[i].off, sizeof v);
        json_t *w = json_object_get(want, f[i].key); /* absent: 0 */
        if (!CHECK_U64(v, w ? (uint64_t)json_integer_value(w) : 0))
            printf("# %s: counter %s\n", file, f[i].key);
    }
}

/* Every case of one cases file (cases.json: the ground truth's fixtures;
 * cases-2026.json: make_2026.py's); returns how many. */
static size_t fixture_cases(const char *cases_file)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/vllm/%s", th_fixture_dir(), cases_file);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!CHECK(root != NULL)) {
        printf("# cannot read %s: %s\n", path, jerr.text);
        return 0;
    }
    json_t *r = json_object_get(root, "registration");
    kvix_wire_source src = reg();
    src.worker = (uint64_t)json_integer_value(json_object_get(r, "worker"));
    src.dp = (uint32_t)json_integer_value(json_object_get(r, "dp"));
    src.model = json_string_value(json_object_get(r, "model"));
    src.tenant = json_string_value(json_object_get(r, "tenant"));
    src.block_size = (uint32_t)json_integer_value(json_object_get(r, "block_size"));
    json_t *cases = json_object_get(root, "cases"), *c;
    size_t i, ncases = 0;
    json_array_foreach(cases, i, c) {
        const char *file = json_string_value(json_object_get(c, "file"));
        json_t *expect = json_object_get(c, "expect");
        snprintf(path, sizeof path, "%s/vllm/%s", th_fixture_dir(), file);
        size_t len;
        char *buf = slurp(path, &len);
        if (!CHECK(buf != NULL)) {
            printf("# cannot read %s\n", path);
            continue;
        }
        sink s;
        kvix_err err = {0, "", KVIX_REASON_OTHER};
        kvix_wire_counts cnt;
        memset(&cnt, 0, sizeof cnt);
        int rc = decode(buf, len, &src, &s, &cnt, &err);
        if (!strncmp(file, "bad-", 4)) {
            CHECK(rc == KVIX_EINVAL);
            CHECK(err.msg[0] != '\0');
        } else {
            if (!CHECK(rc == KVIX_OK))
                printf("# %s: %s\n", file, err.msg);
        }
        if (!CHECK_U64(s.n, json_array_size(expect)))
            printf("# %s: %zu events\n", file, s.n);
        for (size_t k = 0; k < s.n && k < json_array_size(expect); k++)
            compare_event(file, json_array_get(expect, k), &s.ev[k]);
        if (!strcmp(file, "map-multi-event.bin"))
            CHECK_U64(cnt.unknown_events, 1);
        else if (rc == KVIX_OK)
            compare_counts(file, json_object_get(c, "counts"), &cnt);
        sink_release(&s);
        free(buf);
        ncases++;
    }
    json_decref(root);
    return ncases;
}

TEST(fixtures_decode_to_cases_json)
{
    CHECK(fixture_cases("cases.json") >= 14);
    CHECK(fixture_cases("cases-2026.json") >= 11);
}

TEST(every_truncation_and_mutation_of_the_fixtures)
{
    static const char *files[] = {"map-stored.bin", "map-multi-event.bin", "array-stored.bin",
                                  "map-bytes-hashes.bin", "map-multimodal.bin",
                                  "sglang-array-stored.bin"};
    kvix_wire_source src = reg();
    uint64_t rng = th_seed() | 1;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/vllm/%s", th_fixture_dir(), files[f]);
        size_t len;
        char *buf = slurp(path, &len);
        if (!CHECK(buf != NULL))
            continue;
        sink s;
        kvix_err err;
        int bad = 0;
        for (size_t cut = 0; cut < len; cut++) {
            int rc = decode(buf, cut, &src, &s, NULL, &err);
            bad += rc == KVIX_OK || s.n != 0;
            sink_release(&s);
        }
        CHECK_U64(bad, 0);
        /* Random byte flips: any outcome but a crash; an error delivers nothing. */
        size_t rounds = (size_t)(2000 * th_scale()) + 1;
        char *m = malloc(len);
        for (size_t r = 0; r < rounds; r++) {
            memcpy(m, buf, len);
            for (int k = 0; k < 3; k++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                m[rng % len] = (char)(rng >> 32);
            }
            int rc = decode(m, len, &src, &s, NULL, &err);
            if (rc != KVIX_OK)
                CHECK_U64(s.n, 0);
            sink_release(&s);
        }
        free(m);
        free(buf);
    }
}

TEST(random_bytes_never_crash)
{
    kvix_wire_source src = reg();
    uint64_t rng = th_seed() ^ 0x9e3779b97f4a7c15u;
    size_t rounds = (size_t)(20000 * th_scale()) + 1;
    unsigned char b[256];
    size_t ok = 0;
    for (size_t r = 0; r < rounds; r++) {
        size_t len = 1 + r % sizeof b;
        for (size_t i = 0; i < len; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            b[i] = (unsigned char)rng;
        }
        /* Bias towards the batch shape so the deeper code is reached too. */
        if (r % 2)
            b[0] = 0x93;
        sink s;
        kvix_err err;
        int rc = decode(b, len, &src, &s, NULL, &err);
        if (rc != KVIX_OK)
            CHECK_U64(s.n, 0);
        ok += rc == KVIX_OK;
        sink_release(&s);
    }
    CHECK(ok < rounds);
}

TEST(huge_declared_sizes_and_deep_nesting)
{
    kvix_wire_source src = reg();
    sink s;
    kvix_err err;
    static const unsigned char arr32[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    static const unsigned char map32[] = {0xdf, 0xff, 0xff, 0xff, 0xff};
    static const unsigned char in_batch[] = {0x93, 0xcb, 0x41, 0xd9, 0x54, 0xfc, 0x40, 0x10,
                                             0, 0, 0xdd, 0x7f, 0xff, 0xff, 0xff, 0x00};
    static const unsigned char bin32[] = {0x93, 0x00, 0xc6, 0xff, 0xff, 0xff, 0xff, 0x00};
    static const unsigned char str32[] = {0x91, 0xdb, 0xff, 0xff, 0xff, 0xf0, 'a'};
    CHECK(decode(arr32, sizeof arr32, &src, &s, NULL, &err) == KVIX_ELIMIT);
    CHECK(decode(map32, sizeof map32, &src, &s, NULL, &err) == KVIX_ELIMIT);
    CHECK(decode(in_batch, sizeof in_batch, &src, &s, NULL, &err) == KVIX_ELIMIT);
    CHECK(decode(bin32, sizeof bin32, &src, &s, NULL, &err) == KVIX_EINVAL);
    CHECK(decode(str32, sizeof str32, &src, &s, NULL, &err) == KVIX_EINVAL);
    /* Many small containers that together claim more than the payload holds. */
    unsigned char many[64];
    many[0] = 0xdc, many[1] = 0, many[2] = 60;
    for (int i = 3; i < 64; i++)
        many[i] = 0x9f;
    CHECK(decode(many, sizeof many, &src, &s, NULL, &err) == KVIX_ELIMIT);
    unsigned char deep[4096];
    memset(deep, 0x91, sizeof deep);
    deep[sizeof deep - 1] = 0xc0;
    int rc = decode(deep, sizeof deep, &src, &s, NULL, &err);
    CHECK(rc == KVIX_ELIMIT);
    CHECK(strstr(err.msg, "nesting") != NULL);
    CHECK_U64(s.n, 0);
    CHECK(decode("", 0, &src, &s, NULL, &err) == KVIX_EINVAL);
    CHECK(kvix_wire_decode("x", KVIX_WIRE_FRAME_MAX + (size_t)1, 0, &src, collect_fn, &s,
                           NULL, &err) == KVIX_ELIMIT);
}

/* ---- engine shapes built with msgpack-c's packer ------------------------- */

typedef struct pk {
    msgpack_sbuffer sb;
    msgpack_packer p;
} pk;

static void pk_init(pk *k)
{
    msgpack_sbuffer_init(&k->sb);
    msgpack_packer_init(&k->p, &k->sb, msgpack_sbuffer_write);
}

static void pstr(pk *k, const char *s)
{
    msgpack_pack_str(&k->p, strlen(s));
    msgpack_pack_str_body(&k->p, s, strlen(s));
}

static void ptokens(pk *k, uint32_t first, size_t n, int eagle)
{
    msgpack_pack_array(&k->p, n);
    for (size_t i = 0; i < n; i++) {
        if (eagle) {
            msgpack_pack_array(&k->p, 2);
            msgpack_pack_uint32(&k->p, first + (uint32_t)i);
            msgpack_pack_uint32(&k->p, first + (uint32_t)i + 1);
        } else {
            msgpack_pack_uint32(&k->p, first + (uint32_t)i);
        }
    }
}

/* Batch header [ts, [n events...], dp?]: nelem 2 (no dp), 3, or 5 (extras). */
static void pbatch(pk *k, size_t nelem, size_t nev)
{
    msgpack_pack_array(&k->p, nelem);
    msgpack_pack_double(&k->p, 1700000000.5);
    msgpack_pack_array(&k->p, nev);
}

static void pbatch_tail(pk *k, size_t nelem, int dp)
{
    if (nelem >= 3) {
        if (dp < 0)
            msgpack_pack_nil(&k->p);
        else
            msgpack_pack_int(&k->p, dp);
    }
    for (size_t i = 3; i < nelem; i++)
        pstr(k, "future");
}

/* An array-style BlockStored of nelem elements (6..12 or more), one block
 * of bs tokens 1..bs with hash h. */
static void pstored_array(pk *k, size_t nelem, uint32_t bs, int64_t h, int eagle,
                          const char *lora, int salt_map)
{
    msgpack_pack_array(&k->p, nelem);
    pstr(k, "BlockStored");
    msgpack_pack_array(&k->p, 1);
    msgpack_pack_int64(&k->p, h);
    msgpack_pack_nil(&k->p);
    ptokens(k, 1, bs, eagle);
    msgpack_pack_uint32(&k->p, bs);
    for (size_t i = 5; i < nelem; i++) {
        switch (i) {
        case 5: msgpack_pack_nil(&k->p); break;
        case 6: pstr(k, "CPU_TIER2"); break;
        case 7:
            if (salt_map) {
                msgpack_pack_map(&k->p, 1);
                pstr(k, "cache_salt");
                pstr(k, "s1");
            } else if (lora) {
                pstr(k, lora);
            } else {
                msgpack_pack_nil(&k->p);
            }
            break;
        case 8:
            msgpack_pack_array(&k->p, 1);
            msgpack_pack_nil(&k->p);
            break;
        case 9: msgpack_pack_int(&k->p, 0); break;
        case 10: pstr(k, "full_attention"); break;
        default: msgpack_pack_nil(&k->p); break;
        }
    }
}

TEST(array_events_of_every_length)
{
    static const size_t lens[] = {6, 7, 8, 9, 10, 12, 14};
    uint32_t t[16];
    for (uint32_t i = 0; i < 16; i++)
        t[i] = i + 1;
    uint64_t plain = kvix_hash_local(t, 16, KVIX_HASH_SEED);
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        pk k;
        pk_init(&k);
        pbatch(&k, 3, 1);
        pstored_array(&k, lens[i], 16, -2, 0, NULL, 0);
        pbatch_tail(&k, 3, 3);
        kvix_wire_source src = reg();
        sink s;
        kvix_err err;
        int rc = decode(k.sb.data, k.sb.size, &src, &s, NULL, &err);
        if (!CHECK(rc == KVIX_OK))
            printf("# %zu elements: %s\n", lens[i], err.msg);
        if (CHECK_U64(s.n, 1)) {
            CHECK_U64(s.ev[0].dp, 3);
            CHECK_U64(s.ev[0].blocks[0].seq, UINT64_MAX - 1);
            CHECK_U64(s.ev[0].blocks[0].local, plain);
            CHECK(s.ev[0].medium == (lens[i] >= 7 ? KVIX_MEDIUM_DISK : KVIX_MEDIUM_GPU));
            CHECK(s.ev[0].has_ts);
        }
        sink_release(&s);
        msgpack_sbuffer_destroy(&k.sb);
    }
}

/* The wire's seq is a u64; an eid is 0..KVIX_EID_MAX: a batch past it gives
 * events without an eid (which the index applies), not an eid it refuses. */
TEST(seq_past_the_eid_range_gives_no_eid)
{
    static const uint64_t seqs[] = {0, KVIX_EID_MAX, (uint64_t)KVIX_EID_MAX + 1, UINT64_MAX - 1};
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        pk k;
        pk_init(&k);
        pbatch(&k, 3, 1);
        pstored_array(&k, 12, 16, -2, 0, NULL, 0);
        pbatch_tail(&k, 3, 3);
        kvix_wire_source src = reg();
        sink s;
        memset(&s, 0, sizeof s);
        kvix_err err;
        CHECK(kvix_wire_decode(k.sb.data, k.sb.size, seqs[i], &src, collect_fn, &s, NULL, &err) ==
              KVIX_OK);
        if (CHECK_U64(s.n, 1)) {
            CHECK(s.ev[0].has_eid == (seqs[i] <= KVIX_EID_MAX));
            CHECK_U64(s.ev[0].eid, seqs[i] <= KVIX_EID_MAX ? seqs[i] : 0);
        }
        sink_release(&s);
        msgpack_sbuffer_destroy(&k.sb);
    }
}

TEST(eagle_pairs_salt_map_and_lora)
{
    uint32_t t[17];
    for (uint32_t i = 0; i < 17; i++)
        t[i] = i + 1;
    kvix_wire_source src = reg();
    sink s;
    kvix_err err;
    pk k;
    /* EAGLE bigrams (t[i], t[i+1]): hashed as Dynamo's newest router does,
     * over the block and the next token (bs + 1 = 17: 1..17). */
    pk_init(&k);
    pbatch(&k, 3, 1);
    pstored_array(&k, 7, 16, 5, 1, NULL, 0);
    pbatch_tail(&k, 3, 0);
    src.keep_tokens = 1;
    CHECK(decode(k.sb.data, k.sb.size, &src, &s, NULL, &err) == KVIX_OK);
    if (CHECK_U64(s.n, 1)) {
        uint64_t want;
        CHECK_U64(kvix_hash_blocks_eagle(t, 17, 16, KVIX_HASH_SEED, &want, NULL), 1);
        CHECK_U64(s.ev[0].blocks[0].local, want);
        CHECK_U64(want, kvix_hash_local(t, 17, KVIX_HASH_SEED));
        CHECK(s.ev[0].eagle);
        CHECK_U64(s.ev[0].ntokens, 17);
        CHECK_U64(s.ev[0].tokens[16], 17);
    }
    src.keep_tokens = 0;
    sink_release(&s);
    msgpack_sbuffer_destroy(&k.sb);
    /* SGLang's {cache_salt} map where vLLM has lora_name: no LoRA. */
    pk_init(&k);
    pbatch(&k, 3, 1);
    pstored_array(&k, 8, 16, 5, 0, NULL, 1);
    pbatch_tail(&k, 3, 0);
    CHECK(decode(k.sb.data, k.sb.size, &src, &s, NULL, &err) == KVIX_OK);
    if (CHECK_U64(s.n, 1)) {
        CHECK_STR(s.ev[0].lora, "");
        CHECK_U64(s.ev[0].blocks[0].local, kvix_hash_local(t, 16, KVIX_HASH_SEED));
    }
    sink_release(&s);
    msgpack_sbuffer_destroy(&k.sb);
    /* A LoRA name seeds the local hash; tokens kept with keep_tokens. */
    pk_init(&k);
    pbatch(&k, 3, 1);
    pstored_array(&k, 8, 16, 5, 0, "adapter-a", 0);
    pbatch_tail(&k, 3, 0);
    src.keep_tokens = 1;
    CHECK(decode(k.sb.data, k.sb.size, &src, &s, NULL, &err) == KVIX_OK);
    if (CHECK_U64(s.n, 1)) {
        CHECK_STR(s.ev[0].lora, "adapter-a");
        CHECK_U64(s.ev[0].blocks[0].local,
                  kvix_hash_local(t, 16, kvix_hash_lora_seed("adapter-a", 9)));
        CHECK(s.ev[0].has_tokens);
        CHECK_U64(s.ev[0].ntokens, 16);
        CHECK_U64(s.ev[0].tokens[15], 16);
    }
    sink_release(&s);
    msgpack_sbuffer_destroy(&k.sb);
}

/* Found by the fuzzer: a lora_name that is not UTF-8 became the event's
 * lora, which kvix then could not write as NDJSON. Refused whole, like the
 * same name in an NDJSON record; and a registration name likewise. */
TEST(lora_and_names_must_be_utf8)
{
    kvix_wire_source src = reg();
    sink s;
    kvix_err err;
    pk k;
    pk_init(&k);
    pbatch(&k, 3, 1);
    pstored_array(&k, 8, 16, 5, 0, "ad\xcdpter-a", 0);
    pbatch_tail(&k, 3, 0);
    CHECK(decode(k.sb.data, k.sb.size, &src, &s, NULL, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "event 0: lora_name is not valid UTF-8");
    CHECK_U64(s.n, 0);
    sink_release(&s);
    src.model = "m\xff";
    CHECK(decode(k.sb.data, k.sb.size, &src, &s, NULL, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "model name is not valid UTF-8");
    sink_release(&s);
    msgpack_sbuffer_destroy(&k.sb);
}

TEST(batch_shapes_dp_and_extras)
{
    kvix_wire_source src = reg();
    src.dp = 7;
    sink s;
    kvix_err err;
    kvix_wire_counts c;
    memset(&c, 0, sizeof c);
    int shapes[][2] = {{2, 0}, {3, -1}, {3, 4}, {5, 2}}; /* {elements, dp (-1 nil)} */
    int want[] = {7, 7, 4, 2};
    for (int i = 0; i < 4; i++) {
        pk k;
        pk_init(&k);
        pbatch(&k, (size_t)shapes[i][0], 1);
        msgpack_pack_map(&k.p, 1);
        pstr(&k, "type");
        pstr(&k, "AllBlocksCleared");
        pbatch_tail(&k, (size_t)shapes[i][0], shapes[i][1]);
        CHECK(decode(k.sb.data, k.sb.size, &src, &s, &c, &err) == KVIX_OK);
        if (CHECK_U64(s.n, 1)) {
            CHECK(s.ev[0].type == KVIX_EV_CLEARED);
            CHECK_U64(s.ev[0].dp, want[i]);
        }
        CHECK_U64(c.dp, want[i]);
        sink_release(&s);
        msgpack_sbuffer_destroy(&k.sb);
    }
    /* An empty batch still tells its rank. */
    pk k;
    pk_init(&k);
    pbatch(&k, 3, 0);
    pbatch_tail(&k, 3, 9);
    CHECK(decode(k.sb.data, k.sb.size, &src, &s, &c, &err) == KVIX_OK);
    CHECK_U64(s.n, 0);
    CHECK_U64(c.dp, 9);
    msgpack_sbuffer_destroy(&k.sb);
    /* Trailing bytes after the batch are an error. */
    pk_init(&k);
    pbatch(&k, 3, 0);
    pbatch_tail(&k, 3, 0);
    msgpack_pack_nil(&k.p);
    CHECK(decode(k.sb.data, k.sb.size, &src, &s, &c, &err) == KVIX_EINVAL);
    msgpack_sbuffer_destroy(&k.sb);
}

/* A map BlockStored with every key in a shuffled order plus unknown keys. */
static void pstored_map(pk *k, size_t nblocks, uint32_t bs, size_t ntokens, const char *medium,
                        int bin_hash_len)
{
    msgpack_pack_map(&k->p, 8);
    pstr(k, "future_key");
    msgpack_pack_array(&k->p, 2);
    msgpack_pack_nil(&k->p);
    msgpack_pack_true(&k->p);
    pstr(k, "token_ids");
    ptokens(k, 100, ntokens, 0);
    pstr(k, "medium");
    pstr(k, medium);
    pstr(k, "block_hashes");
    msgpack_pack_array(&k->p, nblocks);
    for (size_t i = 0; i < nblocks; i++) {
        if (bin_hash_len) {
            unsigned char b[32] = {0};
            b[bin_hash_len - 1] = (unsigned char)(i + 1);
            msgpack_pack_bin(&k->p, (size_t)bin_hash_len);
            msgpack_pack_bin_body(&k->p, b, (size_t)bin_hash_len);
        } else {
            msgpack_pack_uint64(&k->p, 1000 + i);
        }
    }
    pstr(k, "block_size");
    msgpack_pack_uint32(&k->p, bs);
    pstr(k, "type");
    pstr(k, "BlockStored");
    pstr(k, "parent_block_hash");
    msgpack_pack_int64(&k->p, -1);
    pstr(k, "extra_keys");
    msgpack_pack_array(&k->p, nblocks);
    for (size_t i = 0; i < nblocks; i++) {
        msgpack_pack_array(&k->p, 3);
        pstr(k, "adapter-a"); /* not a hash: ignored */
        msgpack_pack_int(&k->p, 7);
        pstr(k, i == 0 ? "00000000000000070000000000000000000000000000000000000000000000ff"
                       : "not-hex-but-64-chars-long.......................................");
    }
}

TEST(map_keys_any_order_bin_hashes_and_mm)
{
    kvix_wire_source src = reg();
    sink s;
    kvix_err err;
    int binlens[] = {0, 8, 16, 32, 3};
    for (int i = 0; i < 5; i++) {
        pk k;
        pk_init(&k);
        pbatch(&k, 3, 1);
        pstored_map(&k, 2, 16, 40, "DISK", binlens[i]); /* 40 tokens: 8 past the blocks */
        pbatch_tail(&k, 3, 0);
        int rc = decode(k.sb.data, k.sb.size, &src, &s, NULL, &err);
        if (!CHECK(rc == KVIX_OK))
            printf("# bin %d: %s\n", binlens[i], err.msg);
        if (CHECK_U64(s.n, 1)) {
            const kvix_event *ev = &s.ev[0];
            CHECK(ev->medium == KVIX_MEDIUM_DISK);
            CHECK(ev->has_parent);
            CHECK_U64(ev->parent, UINT64_MAX);
            CHECK_U64(ev->nblocks, 2);
            CHECK_U64(ev->blocks[1].seq, binlens[i] ? 2 : 1001);
            uint32_t t[32];
            for (uint32_t j = 0; j < 32; j++)
                t[j] = 100 + j;
            uint64_t mm = 7, want0;
            kvix_hash_local_mm(t, 16, KVIX_HASH_SEED, &mm, 1, &want0, NULL);
            CHECK_U64(ev->blocks[0].local, want0);
            CHECK_U64(ev->blocks[1].local, kvix_hash_local(t + 16, 16, KVIX_HASH_SEED));
        }
        sink_release(&s);
        msgpack_sbuffer_destroy(&k.sb);
    }
}

TEST(partial_blocks_unknown_types_and_bad_events)
{
    kvix_wire_source src = reg();
    sink s;
    kvix_err err;
    kvix_wire_counts c;
    memset(&c, 0, sizeof c);
    pk k;
    /* A partial block (block_size 5 < 16) is skipped and counted. */
    pk_init(&k);
    pbatch(&k, 3, 3);
    pstored_map(&k, 1, 5, 5, "GPU", 0);
    msgpack_pack_array(&k.p, 2);
    pstr(&k, "BlockInactive");
    msgpack_pack_nil(&k.p);
    msgpack_pack_array(&k.p, 3); /* array-style removal */
    pstr(&k, "BlockRemoved");
    msgpack_pack_array(&k.p, 2);
    msgpack_pack_uint64(&k.p, 1);
    msgpack_pack_int64(&k.p, -1);
    pstr(&k, "EXTERNAL");
    pbatch_tail(&k, 3, 0);
    CHECK(decode(k.sb.data, k.sb.size, &src, &s, &c, &err) == KVIX_OK);
    CHECK_U64(c.partial_blocks, 1);
    CHECK_U64(c.unknown_events, 1);
    if (CHECK_U64(s.n, 1)) {
        CHECK(s.ev[0].type == KVIX_EV_REMOVED);
        CHECK(s.ev[0].medium == KVIX_MEDIUM_EXTERNAL);
        CHECK_U64(s.ev[0].nhashes, 2);
        CHECK_U64(s.ev[0].hashes[1], UINT64_MAX);
    }
    sink_release(&s);
    msgpack_sbuffer_destroy(&k.sb);
    /* Too few tokens for the blocks: the whole batch fails, even the good
     * event before it is not delivered. */
    pk_init(&k);
    pbatch(&k, 3, 2);
    pstored_map(&k, 1, 16, 16, "GPU", 0);
    pstored_map(&k, 2, 16, 31, "GPU", 0);
    pbatch_tail(&k, 3, 0);
    CHECK(decode(k.sb.data, k.sb.size, &src, &s, &c, &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, "event 1") != NULL);
    CHECK_U64(s.n, 0);
    msgpack_sbuffer_destroy(&k.sb);
    /* A callback's non-zero return stops decoding and is returned. */
    pk_init(&k);
    pbatch(&k, 3, 2);
    pstored_map(&k, 1, 16, 16, "GPU", 0);
    pstored_map(&k, 1, 16, 16, "GPU", 0);
    pbatch_tail(&k, 3, 0);
    memset(&s, 0, sizeof s);
    s.stop_at = 1;
    CHECK(kvix_wire_decode(k.sb.data, k.sb.size, 5, &src, collect_fn, &s, NULL, &err) == 99);
    CHECK_U64(s.n, 1);
    CHECK_U64(s.ev[0].eid, 5);
    sink_release(&s);
    /* NULL callback: validation only. */
    CHECK(kvix_wire_decode(k.sb.data, k.sb.size, 5, &src, NULL, NULL, NULL, &err) == KVIX_OK);
    msgpack_sbuffer_destroy(&k.sb);
    /* Wrong types in places. */
#define B(lit) {lit, sizeof(lit) - 1}
    static const struct { const char *p; size_t n; } bad[] = {
        B("\x92\xa1" "x" "\x90"),                                  /* ts is a string */
        B("\x93\xcb\x41\xd9\x54\xfc\x40\x10\x00\x00\x90\xa1" "x"), /* dp a string */
        B("\x92\x00\x91\x01"),                                    /* event is an int */
        B("\x92\x00\x91\x91\x01"),                                /* event type an int */
        B("\x92\x00\x91\x92\xac" "BlockRemoved" "\x01"),         /* hashes an int */
        B("\x92\x00\x91\x92\xac" "BlockRemoved" "\x91\xa1" "x"), /* hash a string */
        B("\x92\x00\x91\x93\xac" "BlockRemoved" "\x90\x01"),     /* medium an int */
        B("\x92\x00\x91\x90"),                                    /* event an empty array */
        B("\x92\x00\x91\x80"),                                    /* event an empty map */
        B("\x92\xca\x7f\xc0\x00\x00\x90"),                        /* ts NaN */
        B("\x92\x00\x91\x92\xac" "BlockRemoved" "\x91\xc4\x00"), /* empty bin hash */
        B("\x91\x00"),                                            /* batch of one element */
    };
#undef B
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = decode(bad[i].p, bad[i].n, &src, &s, &c, &err);
        if (!CHECK(rc == KVIX_EINVAL))
            printf("# bad[%zu]: rc %d\n", i, rc);
        CHECK_U64(s.n, 0);
    }
}

TEST(medium_names)
{
    CHECK(kvix_wire_medium("GPU", 3) == KVIX_MEDIUM_GPU);
    CHECK(kvix_wire_medium("CPU_PINNED", 10) == KVIX_MEDIUM_CPU);
    CHECK(kvix_wire_medium("CPU_TIER1", 9) == KVIX_MEDIUM_CPU);
    CHECK(kvix_wire_medium("CPU_TIER2", 9) == KVIX_MEDIUM_DISK);
    CHECK(kvix_wire_medium("DISK", 4) == KVIX_MEDIUM_DISK);
    CHECK(kvix_wire_medium("EXTERNAL", 8) == KVIX_MEDIUM_EXTERNAL);
    CHECK(kvix_wire_medium("TAPE", 4) == -1);
    CHECK(kvix_wire_medium("GPUX", 3) == KVIX_MEDIUM_GPU);
    CHECK(kvix_wire_medium("GPUX", 4) == -1);
    CHECK(kvix_wire_medium(NULL, 0) == KVIX_MEDIUM_GPU);
}
