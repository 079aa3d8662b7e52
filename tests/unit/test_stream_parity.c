/* One record, one verdict, whatever its framing: what the msgpack reader
 * accepts the NDJSON reader accepts too (after kvix writes it as NDJSON),
 * and what NDJSON refuses msgpack refuses. Also: null is absence for the
 * optional fields, white space before a msgpack stream is no record, and
 * the index refuses what a snapshot could not hold. */
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvix/index.h"
#include "kvix/snapshot.h"
#include "kvix/stream.h"

/* ---- msgpack records built by hand ---- */

typedef struct mp {
    msgpack_sbuffer sb;
    msgpack_packer pk;
} mp;

static void mp_init(mp *m)
{
    msgpack_sbuffer_init(&m->sb);
    msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
}

static void mp_str(mp *m, const char *s, size_t n)
{
    msgpack_pack_str(&m->pk, n);
    msgpack_pack_str_body(&m->pk, s, n);
}

static void mp_key(mp *m, const char *k)
{
    mp_str(m, k, strlen(k));
}

/* {"type":"cleared","worker":W} plus extra pairs the caller packs (nextra). */
static void mp_cleared(mp *m, uint64_t worker, size_t nextra)
{
    msgpack_pack_map(&m->pk, 2 + nextra);
    mp_key(m, "type");
    mp_key(m, "cleared");
    mp_key(m, "worker");
    msgpack_pack_uint64(&m->pk, worker);
}

static int mp_decode(mp *m, kvix_event *ev, kvix_err *err)
{
    size_t used;
    int rc = kvix_event_from_msgpack(m->sb.data, m->sb.size, &used, ev, err);
    msgpack_sbuffer_destroy(&m->sb);
    return rc;
}

static int json(const char *s, kvix_event *ev, kvix_err *err)
{
    return kvix_event_from_json(s, strlen(s), ev, err);
}

/* An accepted event written as NDJSON reads back, to the same NDJSON. */
static void reads_back(const kvix_event *ev)
{
    kvix_buf a, b;
    kvix_event e2;
    kvix_err err;
    kvix_buf_init(&a);
    kvix_buf_init(&b);
    kvix_event_init(&e2);
    CHECK(kvix_event_to_json(ev, &a, &err) == KVIX_OK);
    if (!CHECK(kvix_event_from_json(a.data, a.len - 1, &e2, &err) == KVIX_OK))
        printf("#   %s -> %s\n", a.data, err.msg);
    CHECK(kvix_event_to_json(&e2, &b, &err) == KVIX_OK);
    CHECK_STR(a.data, b.data);
    kvix_buf_release(&a);
    kvix_buf_release(&b);
    kvix_event_release(&e2);
}

TEST(worker_and_eid_past_2_63_refused_in_both_framings)
{
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    const uint64_t max = UINT64_C(9223372036854775807);
    mp m;
    mp_init(&m);
    mp_cleared(&m, max + 1, 0);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_ERANGE);
    CHECK_STR(err.msg, "\"worker\" out of range (0 to 9223372036854775807)");
    CHECK(json("{\"type\":\"cleared\",\"worker\":9223372036854775808}", &ev, &err) != KVIX_OK);

    mp_init(&m);
    mp_cleared(&m, max, 0);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_OK);
    CHECK_U64(ev.worker, max);
    reads_back(&ev);

    mp_init(&m);
    mp_cleared(&m, 1, 1);
    mp_key(&m, "eid");
    msgpack_pack_uint64(&m.pk, UINT64_MAX);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_ERANGE);
    CHECK_STR(err.msg, "\"eid\" out of range (0 to 9223372036854775807)");
    CHECK(json("{\"type\":\"cleared\",\"worker\":1,\"eid\":18446744073709551615}", &ev, &err) !=
          KVIX_OK);
    mp_init(&m);
    mp_cleared(&m, 1, 1);
    mp_key(&m, "eid");
    msgpack_pack_uint64(&m.pk, max);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_OK);
    CHECK(ev.has_eid && ev.eid == max);
    reads_back(&ev);
    kvix_event_release(&ev);
}

TEST(strings_without_json_form_refused)
{
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    mp m;
    /* a query id holding NUL: NDJSON cannot say it (jansson refuses \u0000) */
    mp_init(&m);
    msgpack_pack_map(&m.pk, 2);
    mp_key(&m, "id");
    mp_str(&m, "a\0b", 3);
    mp_key(&m, "local");
    msgpack_pack_array(&m.pk, 0);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "a string contains a NUL byte in \"id\"");
    CHECK(json("{\"id\":\"a\\u0000b\",\"local\":[]}", &ev, &err) == KVIX_EINVAL);
    /* a model that is not UTF-8 */
    mp_init(&m);
    mp_cleared(&m, 1, 1);
    mp_key(&m, "model");
    mp_str(&m, "m\xff", 2);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "a string is not valid utf-8 in \"model\"");
    CHECK(json("{\"type\":\"cleared\",\"worker\":1,\"model\":\"m\xff\"}", &ev, &err) == KVIX_EINVAL);
    /* overlong, surrogate and past U+10FFFF forms, in an unknown field too */
    static const char *const bad[] = {"\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mp_init(&m);
        mp_cleared(&m, 1, 1);
        mp_key(&m, "note");
        mp_str(&m, bad[i], strlen(bad[i]));
        CHECK(mp_decode(&m, &ev, &err) == KVIX_EINVAL);
        char line[96];
        snprintf(line, sizeof line, "{\"type\":\"cleared\",\"worker\":1,\"note\":\"%s\"}", bad[i]);
        CHECK(json(line, &ev, &err) == KVIX_EINVAL);
    }
    /* an empty string (msgpack-c gives it a NULL pointer; found by the fuzzer) */
    mp_init(&m);
    mp_cleared(&m, 1, 2);
    mp_key(&m, "note");
    mp_str(&m, "", 0);
    mp_key(&m, "tenant");
    mp_str(&m, "", 0);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_OK);
    CHECK_STR(ev.tenant, "");
    /* valid UTF-8 names are fine, and read back */
    mp_init(&m);
    mp_cleared(&m, 1, 1);
    mp_key(&m, "model");
    mp_key(&m, "mod\xc3\xa8le \xf0\x9f\xa6\x99");
    CHECK(mp_decode(&m, &ev, &err) == KVIX_OK);
    CHECK_STR(ev.model, "mod\xc3\xa8le \xf0\x9f\xa6\x99");
    reads_back(&ev);
    /* binary data and non-finite numbers have no JSON form */
    mp_init(&m);
    mp_cleared(&m, 1, 1);
    mp_key(&m, "x");
    msgpack_pack_bin(&m.pk, 1);
    msgpack_pack_bin_body(&m.pk, "z", 1);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "binary data has no json form in \"x\"");
    mp_init(&m);
    mp_cleared(&m, 1, 1);
    mp_key(&m, "ts");
    msgpack_pack_double(&m.pk, 1.0 / 0.0);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_EINVAL);
    kvix_event_release(&ev);
}

TEST(duplicate_keys_refused_at_every_level)
{
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    mp m;
    mp_init(&m);
    mp_cleared(&m, 1, 1);
    mp_key(&m, "worker");
    msgpack_pack_uint64(&m.pk, 2);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "duplicate key \"worker\"");
    CHECK(json("{\"type\":\"cleared\",\"worker\":1,\"worker\":2}", &ev, &err) == KVIX_EINVAL);
    /* inside a block */
    mp_init(&m);
    msgpack_pack_map(&m.pk, 4);
    mp_key(&m, "type");
    mp_key(&m, "stored");
    mp_key(&m, "worker");
    msgpack_pack_uint64(&m.pk, 1);
    mp_key(&m, "bs");
    msgpack_pack_uint64(&m.pk, 4);
    mp_key(&m, "blocks");
    msgpack_pack_array(&m.pk, 1);
    msgpack_pack_map(&m.pk, 3);
    mp_key(&m, "local");
    msgpack_pack_uint64(&m.pk, 1);
    mp_key(&m, "seq");
    msgpack_pack_uint64(&m.pk, 2);
    mp_key(&m, "seq");
    msgpack_pack_uint64(&m.pk, 3);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "duplicate key \"seq\" in \"blocks\"");
    CHECK(json("{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":1,\"seq\":2,"
               "\"seq\":3}]}", &ev, &err) == KVIX_EINVAL);
    /* a big map in an id (the sorted path), its duplicate last */
    mp_init(&m);
    msgpack_pack_map(&m.pk, 2);
    mp_key(&m, "local");
    msgpack_pack_array(&m.pk, 0);
    mp_key(&m, "id");
    msgpack_pack_map(&m.pk, 40);
    for (int i = 0; i < 40; i++) {
        char k[8];
        snprintf(k, sizeof k, "k%d", i == 39 ? 7 : i);
        mp_key(&m, k);
        msgpack_pack_nil(&m.pk);
    }
    CHECK(mp_decode(&m, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "duplicate key \"k7\" in \"id\"");
    /* a map key that is not a string: no JSON object has one */
    mp_init(&m);
    mp_cleared(&m, 1, 1);
    msgpack_pack_uint64(&m.pk, 5);
    msgpack_pack_nil(&m.pk);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "a map key is not a string");
    kvix_event_release(&ev);
}

TEST(null_means_absent)
{
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    CHECK(json("{\"type\":\"cleared\",\"worker\":3,\"model\":null,\"tenant\":null,\"dp\":null,"
               "\"medium\":null,\"eid\":null,\"ts\":null,\"lora\":null}", &ev, &err) == KVIX_OK);
    CHECK_STR(ev.model, "default");
    CHECK_STR(ev.tenant, "default");
    CHECK_U64(ev.dp, 0);
    CHECK(!ev.has_eid && !ev.has_ts);
    mp m;
    mp_init(&m);
    mp_cleared(&m, 3, 3);
    mp_key(&m, "model");
    msgpack_pack_nil(&m.pk);
    mp_key(&m, "tenant");
    msgpack_pack_nil(&m.pk);
    mp_key(&m, "dp");
    msgpack_pack_nil(&m.pk);
    CHECK(mp_decode(&m, &ev, &err) == KVIX_OK);
    CHECK_STR(ev.model, "default");
    CHECK_U64(ev.dp, 0);
    /* a required field that is null is missing */
    CHECK(json("{\"type\":\"cleared\",\"worker\":null}", &ev, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "missing \"worker\"");
    kvix_event_release(&ev);
}

/* Records read from fd by a reader of format fmt: accepted and rejected. */
static void read_all(const char *bytes, size_t n, kvix_format fmt, int *ok, int *bad)
{
    int fd[2];
    *ok = *bad = 0;
    if (!CHECK(pipe(fd) == 0))
        return;
    CHECK(write(fd[1], bytes, n) == (ssize_t)n);
    close(fd[1]);
    kvix_reader *r;
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    CHECK(kvix_reader_new(&r, fd[0], "p", fmt, &err) == KVIX_OK);
    int rc;
    while ((rc = kvix_reader_next(r, &ev, &err)) != KVIX_EOF) {
        if (rc == KVIX_OK)
            (*ok)++;
        else
            (*bad)++;
        if (rc == KVIX_EIO)
            break;
    }
    kvix_reader_free(r);
    kvix_event_release(&ev);
    close(fd[0]);
}

TEST(white_space_before_a_msgpack_stream_is_no_record)
{
    mp m;
    mp_init(&m);
    msgpack_sbuffer_write(&m.sb, " \n\t\r\n", 5);
    mp_cleared(&m, 1, 0);
    mp_cleared(&m, 2, 0);
    int ok, bad;
    read_all(m.sb.data, m.sb.size, KVIX_FMT_AUTO, &ok, &bad);
    CHECK_U64(ok, 2);
    CHECK_U64(bad, 0);
    read_all(m.sb.data, m.sb.size, KVIX_FMT_MSGPACK, &ok, &bad);
    CHECK_U64(ok, 2);
    CHECK_U64(bad, 0);
    msgpack_sbuffer_destroy(&m.sb);
}

/* What the index accepts it can save and read back: it refuses the rest. */
TEST(index_refuses_what_a_snapshot_cannot_hold)
{
    kvix_index *idx;
    kvix_err err;
    CHECK(kvix_index_new(&idx, NULL, &err) == KVIX_OK);
    kvix_event ev;
    kvix_event_init(&ev);
    ev.type = KVIX_EV_STORED;
    ev.bs = 4;
    CHECK(kvix_event_reserve_blocks(&ev, 1, &err) == KVIX_OK);
    ev.blocks[0].local = 1;
    ev.blocks[0].seq = 2;
    ev.nblocks = 1;
    ev.worker = UINT64_C(1) << 63;
    ev.has_eid = 1;
    ev.eid = 1;
    CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_ERANGE);
    CHECK_STR(err.msg, "worker 9223372036854775808 out of range (0 to 9223372036854775807)");
    ev.worker = 1;
    ev.eid = UINT64_MAX;
    CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_ERANGE);
    ev.eid = 1;
    memcpy(ev.model, "\xff", 2);
    CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_EINVAL);
    CHECK_STR(err.msg, "model name is not valid utf-8");
    kvix_block_info b = {0};
    b.tiers = 1;
    b.local = b.engine = b.canon = 7;
    CHECK(kvix_index_load(idx, "m", "t", 4, UINT64_MAX - 1, 0, &b, 1, &err) == KVIX_ERANGE);
    CHECK(kvix_index_set_eid(idx, "m", "t", 4, 1, 0, UINT64_MAX, &err) == KVIX_ERANGE);
    kvix_index_stats st;
    kvix_index_stats_get(idx, &st);
    CHECK_U64(st.blocks, 0);
    CHECK_U64(st.workers, 0);
    kvix_event_release(&ev);
    kvix_index_free(idx);
}
