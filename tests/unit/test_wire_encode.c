/* kvix_wire_encode: byte-exact against the engine fixtures of
 * tests/fixtures/vllm (what vLLM itself sends), and its ceilings. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvix/hash.h"
#include "kvix/wire.h"

static size_t read_fixture(const char *name, unsigned char *buf, size_t cap)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/vllm/%s", th_fixture_dir(), name);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f)
        return 0;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void check_bytes(const char *fixture, const kvix_buf *b)
{
    unsigned char want[4096];
    size_t n = read_fixture(fixture, want, sizeof want);
    CHECK(n > 0);
    CHECK_U64(b->len, n);
    if (b->len == n && memcmp(b->data, want, n) != 0) {
        CHECK(!"payload bytes differ");
        printf("#   fixture %s\n", fixture);
    }
}

static void stored(kvix_event *ev, size_t nblocks, uint32_t first_token)
{
    kvix_event_init(ev);
    ev->type = KVIX_EV_STORED;
    ev->worker = 1;
    ev->bs = 16;
    kvix_event_reserve_blocks(ev, nblocks, NULL);
    kvix_event_reserve_tokens(ev, nblocks * 16, NULL);
    ev->nblocks = nblocks;
    ev->has_tokens = 1;
    for (size_t i = 0; i < nblocks * 16; i++)
        ev->tokens[ev->ntokens++] = first_token + (uint32_t)i;
}

static void encode_one(const kvix_event *ev, uint32_t dp, kvix_wire_style style, kvix_buf *b)
{
    kvix_err err;
    kvix_buf_init(b);
    const kvix_event *p = ev;
    int rc = kvix_wire_encode(&p, 1, 1700000000.25, dp, style, b, &err);
    CHECK(rc == KVIX_OK);
    if (rc)
        printf("#   %s\n", err.msg);
}

TEST(map_stored_matches_vllm)
{
    kvix_event ev;
    stored(&ev, 2, 1);
    ev.blocks[0].seq = UINT64_C(0x0123456789abcdef);
    ev.blocks[1].seq = UINT64_C(0xf0e1d2c3b4a59687);
    kvix_buf b;
    encode_one(&ev, 0, KVIX_WIRE_MAP, &b);
    check_bytes("map-stored.bin", &b);
    kvix_buf_release(&b);
    encode_one(&ev, 0, KVIX_WIRE_ARRAY, &b);
    check_bytes("array-stored.bin", &b);
    kvix_buf_release(&b);
    kvix_event_release(&ev);
}

TEST(map_stored_parent_lora_medium)
{
    kvix_event ev;
    stored(&ev, 1, 33);
    ev.blocks[0].seq = UINT64_C(0x8000000000000001);
    ev.has_parent = 1;
    ev.parent = UINT64_C(0xf0e1d2c3b4a59687);
    kvix_buf b;
    encode_one(&ev, 0, KVIX_WIRE_MAP, &b);
    check_bytes("map-stored-parent.bin", &b);
    kvix_buf_release(&b);
    kvix_event_release(&ev);

    stored(&ev, 1, 1);
    ev.blocks[0].seq = UINT64_C(0x0123456789abcdef);
    snprintf(ev.lora, sizeof ev.lora, "%s", "adapter-a");
    encode_one(&ev, 0, KVIX_WIRE_MAP, &b);
    check_bytes("map-lora.bin", &b);
    kvix_buf_release(&b);

    ev.lora[0] = '\0';
    ev.medium = KVIX_MEDIUM_CPU;
    encode_one(&ev, 0, KVIX_WIRE_MAP, &b);
    check_bytes("map-cpu-medium.bin", &b);
    kvix_buf_release(&b);
    kvix_event_release(&ev);
}

TEST(map_removed_and_cleared)
{
    kvix_event ev;
    kvix_event_init(&ev);
    ev.type = KVIX_EV_REMOVED;
    kvix_event_reserve_hashes(&ev, 1, NULL);
    ev.hashes[ev.nhashes++] = UINT64_C(0xf0e1d2c3b4a59687);
    kvix_buf b;
    encode_one(&ev, 0, KVIX_WIRE_MAP, &b);
    check_bytes("map-removed.bin", &b);
    kvix_buf_release(&b);

    kvix_event_reset(&ev);
    ev.type = KVIX_EV_CLEARED;
    encode_one(&ev, 0, KVIX_WIRE_MAP, &b);
    check_bytes("map-cleared.bin", &b);
    kvix_buf_release(&b);
    kvix_event_release(&ev);
}

TEST(batch_of_several_appends)
{
    kvix_event a, r;
    stored(&a, 1, 1);
    kvix_event_init(&r);
    r.type = KVIX_EV_REMOVED;
    const kvix_event *evs[2] = {&a, &r};
    kvix_buf b;
    kvix_buf_init(&b);
    kvix_buf_append(&b, "x", 1, NULL);
    CHECK(kvix_wire_encode(evs, 2, 1.5, 3, KVIX_WIRE_MAP, &b, NULL) == KVIX_OK);
    /* appended after what was there: 'x', fixarray(3), float64 1.5, fixarray(2) ... dp 3 */
    CHECK(b.len > 12);
    CHECK(b.data[0] == 'x');
    CHECK((unsigned char)b.data[1] == 0x93);
    CHECK((unsigned char)b.data[2] == 0xcb);
    CHECK((unsigned char)b.data[11] == 0x92);
    CHECK((unsigned char)b.data[b.len - 1] == 0x03);
    kvix_buf_release(&b);
    kvix_event_release(&a);
    kvix_event_release(&r);
}

TEST(rejects_what_engines_cannot_send)
{
    kvix_event ev;
    stored(&ev, 2, 1);
    kvix_buf b;
    kvix_buf_init(&b);
    kvix_err err;
    const kvix_event *p = &ev;
    ev.has_tokens = 0;
    CHECK(kvix_wire_encode(&p, 1, 0, 0, KVIX_WIRE_MAP, &b, &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, "tokens") != NULL);
    ev.has_tokens = 1;
    ev.ntokens = 31; /* not nblocks * bs */
    CHECK(kvix_wire_encode(&p, 1, 0, 0, KVIX_WIRE_MAP, &b, &err) == KVIX_EINVAL);
    ev.ntokens = 32;
    ev.type = KVIX_EV_QUERY;
    CHECK(kvix_wire_encode(&p, 1, 0, 0, KVIX_WIRE_MAP, &b, &err) == KVIX_EINVAL);
    ev.type = KVIX_EV_STORED;
    CHECK(kvix_wire_encode(&p, 1, 0, 0, (kvix_wire_style)7, &b, &err) == KVIX_EINVAL);
    CHECK(kvix_wire_encode(&p, KVIX_WIRE_EVENTS_MAX + 1, 0, 0, KVIX_WIRE_MAP, &b, &err) ==
          KVIX_ELIMIT);
    CHECK_U64(b.len, 0); /* nothing written on failure */
    kvix_buf_release(&b);
    kvix_event_release(&ev);
}

/* Encode random batches in both styles and decode them with kvix_wire_decode
 * (lib/codec/wire_decode.c, written independently): the events come back. */
typedef struct got {
    kvix_event ev[8];
    size_t n;
} got;

static int collect(void *ctx, const kvix_event *ev)
{
    got *g = ctx;
    if (g->n < 8)
        kvix_event_copy(&g->ev[g->n], ev, NULL);
    g->n++;
    return 0;
}

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

TEST(round_trip_through_the_decoder)
{
    uint64_t s = th_seed();
    got g;
    for (int i = 0; i < 8; i++)
        kvix_event_init(&g.ev[i]);
    kvix_event in[4];
    for (int i = 0; i < 4; i++)
        kvix_event_init(&in[i]);
    int rounds = (int)(200 * th_scale());
    for (int round = 0; round < rounds; round++) {
        size_t n = 1 + next(&s) % 4;
        uint32_t bs = 1 + (uint32_t)(next(&s) % 20);
        const kvix_event *p[4];
        for (size_t i = 0; i < n; i++) {
            kvix_event *e = &in[i];
            kvix_event_reset(e);
            e->worker = 9;
            e->dp = 2;
            e->type = KVIX_EV_STORED + (int)(next(&s) % 3);
            e->medium = (int)(next(&s) % KVIX_MEDIUM_COUNT);
            if (e->type == KVIX_EV_STORED) {
                size_t nb = 1 + next(&s) % 5;
                kvix_event_reserve_blocks(e, nb, NULL);
                kvix_event_reserve_tokens(e, nb * bs, NULL);
                e->bs = bs;
                e->has_tokens = 1;
                e->has_parent = next(&s) % 2;
                e->parent = next(&s);
                if (next(&s) % 3 == 0)
                    snprintf(e->lora, sizeof e->lora, "%s", "adapter-a");
                for (size_t b = 0; b < nb; b++)
                    e->blocks[e->nblocks++].seq = next(&s);
                for (size_t t = 0; t < nb * bs; t++)
                    e->tokens[e->ntokens++] = (uint32_t)next(&s);
            } else if (e->type == KVIX_EV_REMOVED) {
                size_t nh = next(&s) % 5;
                kvix_event_reserve_hashes(e, nh, NULL);
                for (size_t h = 0; h < nh; h++)
                    e->hashes[e->nhashes++] = next(&s);
            }
            p[i] = e;
        }
        for (int style = 0; style < 2; style++) {
            kvix_buf b;
            kvix_buf_init(&b);
            CHECK(kvix_wire_encode(p, n, 12.5, 2, (kvix_wire_style)style, &b, NULL) == KVIX_OK);
            kvix_wire_source src = {.worker = 9, .dp = 0, .keep_tokens = 1};
            g.n = 0;
            kvix_err err;
            int rc = kvix_wire_decode(b.data, b.len, 77, &src, collect, &g, NULL, &err);
            CHECK(rc == KVIX_OK);
            if (rc)
                printf("#   decode: %s\n", err.msg);
            CHECK_U64(g.n, n);
            for (size_t i = 0; i < n && i < g.n; i++) {
                const kvix_event *a = &in[i], *d = &g.ev[i];
                CHECK_U64(d->type, a->type);
                CHECK_U64(d->worker, 9);
                CHECK_U64(d->dp, 2); /* the batch's rank overrides the registered one */
                CHECK_U64(d->eid, 77);
                if (a->type != KVIX_EV_CLEARED)
                    CHECK_U64(d->medium, a->medium);
                if (a->type == KVIX_EV_STORED) {
                    CHECK_U64(d->bs, bs);
                    CHECK_U64(d->has_parent, a->has_parent);
                    if (a->has_parent)
                        CHECK_U64(d->parent, a->parent);
                    CHECK_STR(d->lora, a->lora);
                    CHECK_U64(d->nblocks, a->nblocks);
                    uint64_t seed = kvix_hash_lora_seed(a->lora, strlen(a->lora));
                    for (size_t k = 0; k < a->nblocks && k < d->nblocks; k++) {
                        CHECK_U64(d->blocks[k].seq, a->blocks[k].seq);
                        CHECK_U64(d->blocks[k].local, kvix_hash_local(a->tokens + k * bs, bs, seed));
                    }
                    CHECK_U64(d->ntokens, a->ntokens);
                    if (d->ntokens == a->ntokens)
                        CHECK(memcmp(d->tokens, a->tokens, a->ntokens * sizeof *a->tokens) == 0);
                } else if (a->type == KVIX_EV_REMOVED) {
                    CHECK_U64(d->nhashes, a->nhashes);
                    for (size_t k = 0; k < a->nhashes && k < d->nhashes; k++)
                        CHECK_U64(d->hashes[k], a->hashes[k]);
                }
            }
            kvix_buf_release(&b);
        }
    }
    for (int i = 0; i < 8; i++)
        kvix_event_release(&g.ev[i]);
    for (int i = 0; i < 4; i++)
        kvix_event_release(&in[i]);
}

/* Byte-exact with the payloads of the older generations: vLLM 0.9's
 * 6-element events in a batch without rank, SGLang's 7-element events with
 * signed hashes, and EAGLE's token pairs (make_2026.py's sglang-eagle.bin). */
TEST(older_generations_match_their_fixtures)
{
    kvix_event ev;
    kvix_buf b;
    kvix_err err;
    stored(&ev, 2, 1);
    ev.blocks[0].seq = UINT64_C(0x0123456789abcdef);
    ev.blocks[1].seq = UINT64_C(0xf0e1d2c3b4a59687);
    encode_one(&ev, 0, KVIX_WIRE_VLLM_0_9, &b);
    check_bytes("array-stored-oldest.bin", &b);
    kvix_buf_release(&b);
    kvix_event_release(&ev);

    stored(&ev, 1, 1);
    ev.blocks[0].seq = (uint64_t)INT64_C(-1234605616436508552);
    const kvix_event *p = &ev;
    kvix_buf_init(&b);
    CHECK(kvix_wire_encode(&p, 1, 1700000000.5, 1, KVIX_WIRE_SGLANG_ARRAY, &b, &err) == KVIX_OK);
    check_bytes("sglang-array-stored.bin", &b);
    kvix_buf_release(&b);
    kvix_event_release(&ev);

    stored(&ev, 2, 300);
    ev.eagle = 1;
    kvix_event_reserve_tokens(&ev, 33, NULL);
    ev.tokens[ev.ntokens++] = 300 + 32; /* the token after the last block */
    ev.blocks[0].seq = UINT64_MAX - 1;
    ev.blocks[1].seq = UINT64_MAX - 2;
    kvix_buf_init(&b);
    CHECK(kvix_wire_encode(&p, 1, 1767225600.5, 1, KVIX_WIRE_SGLANG_ARRAY, &b, &err) == KVIX_OK);
    check_bytes("sglang-eagle.bin", &b);
    kvix_buf_release(&b);
    /* what a generation cannot say is refused, not dropped */
    kvix_buf_init(&b);
    CHECK(kvix_wire_encode(&p, 1, 0, 0, KVIX_WIRE_MAP, &b, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "the vllm-0.26 wire cannot carry eagle's token pairs");
    ev.eagle = 0;
    ev.ntokens--;
    ev.medium = KVIX_MEDIUM_CPU;
    CHECK(kvix_wire_encode(&p, 1, 0, 0, KVIX_WIRE_VLLM_0_9, &b, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "the vllm-0.9 wire cannot carry a tier other than the gpu");
    ev.medium = KVIX_MEDIUM_GPU;
    ev.has_group = 1;
    ev.group = 1;
    CHECK(kvix_wire_encode(&p, 1, 0, 0, KVIX_WIRE_SGLANG_ARRAY, &b, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "the sglang-array wire cannot carry kv cache groups");
    CHECK_U64(b.len, 0);
    kvix_buf_release(&b);
    kvix_event_release(&ev);
}

/* Every generation, each with what it can say (groups, kinds, placeholders,
 * EAGLE, tiers), decodes back to the events it was given. */
TEST(every_generation_round_trips)
{
    static const char *names[] = {"vllm-0.26", "vllm-0.25", "vllm-0.9", "sglang-array",
                                  "sglang-map"};
    for (int st = 0; st < KVIX_WIRE_STYLES; st++) {
        kvix_wire_style style;
        CHECK(kvix_wire_style_parse(names[st], &style) == KVIX_OK);
        CHECK((int)style == st);
        CHECK_STR(kvix_wire_style_name(style), names[st]);
        int groups = style == KVIX_WIRE_MAP || style == KVIX_WIRE_ARRAY ||
                     style == KVIX_WIRE_SGLANG_MAP;
        int sglang = style == KVIX_WIRE_SGLANG_ARRAY || style == KVIX_WIRE_SGLANG_MAP;
        int tiers = style != KVIX_WIRE_VLLM_0_9;
        kvix_event in[5];
        size_t n = 0;
        for (int i = 0; i < 5; i++)
            kvix_event_init(&in[i]);
        /* a stored event: EAGLE for SGLang, a tier where there are tiers */
        stored(&in[n], 2, 40);
        in[n].blocks[0].seq = UINT64_C(0x8000000000000005);
        in[n].blocks[1].seq = 77;
        in[n].medium = tiers ? KVIX_MEDIUM_DISK : KVIX_MEDIUM_GPU;
        if (sglang) {
            in[n].eagle = 1;
            kvix_event_reserve_tokens(&in[n], 33, NULL);
            in[n].tokens[in[n].ntokens++] = 99;
        }
        if (tiers)
            snprintf(in[n].lora, sizeof in[n].lora, "%s", "adapter-b");
        n++;
        if (groups) { /* a sliding-window group's store (hashes only) and removal */
            kvix_event *e = &in[n++];
            e->type = KVIX_EV_STORED;
            e->bs = 16;
            e->has_group = 1;
            e->group = 1;
            e->kind = KVIX_KIND_SLIDING_WINDOW;
            kvix_event_reserve_hashes(e, 1, NULL);
            e->hashes[e->nhashes++] = 77;
            e = &in[n++];
            e->type = KVIX_EV_REMOVED;
            e->has_group = 1;
            e->group = 1;
            kvix_event_reserve_hashes(e, 1, NULL);
            e->hashes[e->nhashes++] = 77;
        }
        if (groups && !sglang) { /* vLLM's offloading connector */
            kvix_event *e = &in[n++];
            e->type = KVIX_EV_STORED;
            e->placeholder = 1;
            e->medium = KVIX_MEDIUM_CPU;
            kvix_event_reserve_hashes(e, 2, NULL);
            e->hashes[e->nhashes++] = 77;
            e->hashes[e->nhashes++] = UINT64_C(0x8000000000000005);
        }
        kvix_event *e = &in[n++];
        e->type = KVIX_EV_REMOVED;
        e->medium = in[0].medium;
        kvix_event_reserve_hashes(e, 1, NULL);
        e->hashes[e->nhashes++] = UINT64_C(0x8000000000000005);
        const kvix_event *p[5];
        for (size_t i = 0; i < n; i++)
            p[i] = &in[i];
        kvix_buf b;
        kvix_buf_init(&b);
        kvix_err err;
        int rc = kvix_wire_encode(p, n, 3.5, 4, style, &b, &err);
        if (!CHECK(rc == KVIX_OK))
            printf("#   %s: %s\n", names[st], err.msg);
        got g;
        for (int i = 0; i < 8; i++)
            kvix_event_init(&g.ev[i]);
        g.n = 0;
        kvix_wire_source src = {.worker = 1, .dp = 4, .block_size = 16, .keep_tokens = 1};
        kvix_wire_counts c;
        memset(&c, 0, sizeof c);
        rc = kvix_wire_decode(b.data, b.len, 5, &src, collect, &g, &c, &err);
        if (!CHECK(rc == KVIX_OK))
            printf("#   %s: decode: %s\n", names[st], err.msg);
        CHECK_U64(g.n, n);
        for (size_t i = 0; i < n && i < g.n; i++) {
            const kvix_event *a = &in[i], *d = &g.ev[i];
            CHECK_U64(d->type, a->type);
            CHECK_U64(d->dp, 4);
            CHECK_U64(d->medium, a->medium);
            CHECK_U64(d->placeholder, a->placeholder);
            CHECK_U64(d->eagle, a->eagle);
            CHECK_STR(d->lora, a->lora);
            CHECK_U64(d->nhashes, a->nhashes);
            for (size_t k = 0; k < a->nhashes && k < d->nhashes; k++)
                CHECK_U64(d->hashes[k], a->hashes[k]);
            if (a->has_group) {
                CHECK(d->has_group && d->group == a->group);
                if (a->type == KVIX_EV_STORED)
                    CHECK(d->kind == a->kind);
            } else if (groups && a->type != KVIX_EV_CLEARED && !a->placeholder) {
                /* vLLM names a model's only group: 0, full_attention */
                CHECK(!d->has_group || (d->group == 0 && kvix_kind_full(d->kind)));
            }
            CHECK_U64(d->nblocks, a->nblocks);
            for (size_t k = 0; k < a->nblocks && k < d->nblocks; k++)
                CHECK_U64(d->blocks[k].seq, a->blocks[k].seq);
            if (a->nblocks && d->nblocks && d->has_tokens) {
                CHECK_U64(d->ntokens, a->ntokens);
                uint64_t want[2];
                uint64_t seed = kvix_hash_lora_seed(a->lora, strlen(a->lora));
                if (a->eagle)
                    kvix_hash_blocks_eagle(a->tokens, a->ntokens, 16, seed, want, NULL);
                else
                    kvix_hash_blocks(a->tokens, a->ntokens, 16, seed, want, NULL);
                CHECK_U64(d->blocks[0].local, want[0]);
                CHECK_U64(d->blocks[1].local, want[1]);
            }
        }
        for (int i = 0; i < 8; i++)
            kvix_event_release(&g.ev[i]);
        for (int i = 0; i < 5; i++)
            kvix_event_release(&in[i]);
        kvix_buf_release(&b);
    }
    kvix_wire_style s;
    CHECK(kvix_wire_style_parse("vllm", &s) == KVIX_OK && s == KVIX_WIRE_MAP);
    CHECK(kvix_wire_style_parse("array", &s) == KVIX_OK && s == KVIX_WIRE_ARRAY);
    CHECK(kvix_wire_style_parse("sglang", &s) == KVIX_OK && s == KVIX_WIRE_SGLANG_ARRAY);
    CHECK(kvix_wire_style_parse("vllm-1.0", &s) == KVIX_EINVAL);
    CHECK(kvix_wire_style_replay_topic(KVIX_WIRE_MAP));
    CHECK(!kvix_wire_style_replay_topic(KVIX_WIRE_ARRAY));
}
