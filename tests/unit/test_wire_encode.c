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
