/* The text kvdump writes, made by the library: a snapshot as events
 * (kvix_snapshot_events), its statistics as a table or JSON lines
 * (kvix_snapshot_stats_write), and differences as JSON lines
 * (kvix_snapshot_delta_write, kvix_snapshot_diff_summary_write). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvix/hash.h"
#include "kvix/snapshot_diff.h"
#include "kvix/snapshot_stats.h"
#include "kvix/stream.h"

/* ---- events ---------------------------------------------------------------- */

/* A chain of n blocks from position 0, engine hashes base + i, tiers t. */
static void chain(kvix_block_info *b, size_t n, uint64_t base, unsigned t)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t pc = i ? b[i - 1].canon : 0, local = base * 100 + i;
        b[i] = (kvix_block_info){(uint32_t)i, local,   base + i, i ? base + i - 1 : 0, t,
                                 i ? kvix_hash_seq_next(pc, local) : local, pc};
    }
}

/* llama: worker 1 (3 blocks, the first also on cpu; eid 11), worker 3 (2
 * blocks, no eid), worker 4 (only eid 14); mistral: a partition without
 * workers. */
static int write_events_file(const char *path)
{
    kvix_snapshot_writer *w;
    kvix_err err;
    kvix_block_info b1[3], b3[2];
    chain(b1, 3, 1000, 1);
    b1[0].tiers = 3;
    chain(b3, 2, 3000, 1);
    int rc = kvix_snapshot_writer_open(&w, path, &err);
    if (!rc)
        rc = kvix_snapshot_writer_add(w, "llama", "default", 16, 1, 0, 1, 11, b1, 3, &err);
    if (!rc)
        rc = kvix_snapshot_writer_add(w, "llama", "default", 16, 3, 0, 0, 0, b3, 2, &err);
    if (!rc)
        rc = kvix_snapshot_writer_add(w, "llama", "default", 16, 4, 0, 1, 14, NULL, 0, &err);
    if (!rc)
        rc = kvix_snapshot_writer_add(w, "mistral", "default", 8, UINT64_MAX, 0, 0, 0, NULL, 0,
                                      &err);
    if (rc) {
        printf("#   %s\n", err.msg);
        kvix_snapshot_writer_abort(w);
        return rc;
    }
    return kvix_snapshot_writer_commit(w, NULL, &err);
}

typedef struct lines {
    kvix_buf text; /* the events as NDJSON */
    int n, stop_at;
} lines;

static int to_lines(void *ctx, const kvix_event *ev)
{
    lines *l = ctx;
    kvix_err err;
    if (++l->n == l->stop_at)
        return 5;
    return kvix_event_to_json(ev, &l->text, &err);
}

static kvix_snapshot *open_events_file(void)
{
    const char *path = th_path("events.kvix");
    kvix_snapshot *s = NULL;
    kvix_err err;
    if (CHECK(write_events_file(path) == 0) && !CHECK(kvix_snapshot_open(&s, path, &err) == 0))
        printf("#   %s\n", err.msg);
    return s;
}

TEST(events_carry_each_records_eid_on_its_last)
{
    kvix_snapshot *s = open_events_file();
    if (!s)
        return;
    lines l = {.stop_at = -1};
    kvix_buf_init(&l.text);
    kvix_err err;
    uint64_t matched = 0;
    kvix_snapshot_group g;
    CHECK(kvix_snapshot_next(s, &g, &err) == KVIX_OK); /* read from the first record anyway */
    CHECK(kvix_snapshot_events(s, NULL, to_lines, &l, &matched, &err) == KVIX_OK);
    CHECK_U64(matched, 4);
    CHECK_STR(l.text.data,
              "{\"type\":\"stored\",\"worker\":1,\"dp\":0,\"model\":\"llama\",\"tenant\":"
              "\"default\",\"medium\":\"gpu\",\"bs\":16,\"parent\":null,\"blocks\":[{\"local\":"
              "\"00000000000186a0\",\"seq\":\"00000000000003e8\"},{\"local\":\"00000000000186a1\","
              "\"seq\":\"00000000000003e9\"},{\"local\":\"00000000000186a2\",\"seq\":"
              "\"00000000000003ea\"}]}\n"
              "{\"type\":\"stored\",\"worker\":1,\"dp\":0,\"model\":\"llama\",\"tenant\":"
              "\"default\",\"medium\":\"cpu\",\"eid\":11,\"bs\":16,\"parent\":null,\"blocks\":"
              "[{\"local\":\"00000000000186a0\",\"seq\":\"00000000000003e8\"}]}\n"
              "{\"type\":\"stored\",\"worker\":3,\"dp\":0,\"model\":\"llama\",\"tenant\":"
              "\"default\",\"medium\":\"gpu\",\"bs\":16,\"parent\":null,\"blocks\":[{\"local\":"
              "\"00000000000493e0\",\"seq\":\"0000000000000bb8\"},{\"local\":\"00000000000493e1\","
              "\"seq\":\"0000000000000bb9\"}]}\n"
              "{\"type\":\"cleared\",\"worker\":4,\"dp\":0,\"model\":\"llama\",\"tenant\":"
              "\"default\",\"medium\":\"gpu\",\"eid\":14,\"bs\":16}\n");
    /* a filter: only what it lets through, and the count of it */
    l.text.len = 0;
    l.text.data[0] = '\0';
    kvix_snapshot_filter f = {.model = "mistral"};
    CHECK(kvix_snapshot_events(s, &f, to_lines, &l, &matched, &err) == KVIX_OK);
    CHECK_U64(matched, 1);
    CHECK_U64(l.text.len, 0);
    f = (kvix_snapshot_filter){.has_worker = 1, .worker = 4};
    CHECK(kvix_snapshot_events(s, &f, to_lines, &l, &matched, &err) == KVIX_OK);
    CHECK_U64(matched, 1);
    CHECK_STR(l.text.data, "{\"type\":\"cleared\",\"worker\":4,\"dp\":0,\"model\":\"llama\","
                           "\"tenant\":\"default\",\"medium\":\"gpu\",\"eid\":14,\"bs\":16}\n");
    /* the visitor's non-zero value stops the walk and is returned */
    l = (lines){.stop_at = 2, .text = l.text};
    CHECK(kvix_snapshot_events(s, NULL, to_lines, &l, NULL, &err) == 5);
    CHECK_U64(l.n, 2);
    kvix_buf_release(&l.text);
    kvix_snapshot_close(s);
}

/* Replayed, the events rebuild the file's state, eids included. */
TEST(events_rebuild_the_snapshot)
{
    kvix_snapshot *s = open_events_file();
    if (!s)
        return;
    lines l = {.stop_at = -1};
    kvix_buf_init(&l.text);
    kvix_err err;
    CHECK(kvix_snapshot_events(s, NULL, to_lines, &l, NULL, &err) == KVIX_OK);
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    kvix_index *idx;
    if (!CHECK(kvix_index_new(&idx, &o, &err) == 0))
        return;
    kvix_event ev;
    kvix_event_init(&ev);
    for (char *p = l.text.data, *nl; p && (nl = strchr(p, '\n')); p = nl + 1) {
        CHECK(kvix_event_from_json(p, (size_t)(nl - p), &ev, &err) == KVIX_OK);
        CHECK(kvix_index_apply(idx, &ev, NULL, &err) == KVIX_OK);
    }
    const char *again = th_path("again.kvix");
    CHECK(kvix_snapshot_save(idx, again, NULL, &err) == KVIX_OK);
    kvix_snapshot *t = NULL;
    if (CHECK(kvix_snapshot_open(&t, again, &err) == KVIX_OK)) {
        kvix_snapshot_diff_totals tot;
        CHECK(kvix_snapshot_diff(s, t, NULL, NULL, &tot, &err) == KVIX_OK);
        /* the partition without workers has no event to make it */
        CHECK_U64(tot.differing, 1);
        CHECK_U64(tot.only_a + tot.only_b, 0);
    }
    kvix_snapshot_close(t);
    kvix_event_release(&ev);
    kvix_index_free(idx);
    kvix_buf_release(&l.text);
    kvix_snapshot_close(s);
}

/* ---- statistics -------------------------------------------------------------- */

static void stats_fixture(kvix_snapshot_stats *st, kvix_snapshot_row rows[4],
                          kvix_snapshot_info *info)
{
    static char llama[] = "llama", acme[] = "acme", qx[] = "q\"x", e[] = "\xc3\xa9";
    memset(rows, 0, 4 * sizeof *rows);
    rows[0] = (kvix_snapshot_row){.is_part = 1, .model = llama, .tenant = acme, .bs = 16,
                                  .has_depth = 1, .depth = 3, .workers = 2, .blocks = 5,
                                  .unique = 4, .orphans = 1, .tiers = {4, 1, 0, 0}, .memory = 2048};
    rows[1] = (kvix_snapshot_row){.model = llama, .tenant = acme, .bs = 16, .worker = 7, .dp = 1,
                                  .has_eid = 1, .eid = 42, .has_depth = 1, .depth = 3,
                                  .blocks = 5, .orphans = 1, .tiers = {4, 1, 0, 0},
                                  .memory = 1000};
    rows[2] = (kvix_snapshot_row){.is_part = 1, .model = qx, .tenant = e, .bs = 4, .workers = 1};
    rows[3] = (kvix_snapshot_row){.model = qx, .tenant = e, .bs = 4, .worker = 3};
    *st = (kvix_snapshot_stats){.rows = rows, .n = 4, .cap = 4, .matched = 4,
                                .memory = (3u << 20) + 512};
    *info = (kvix_snapshot_info){.version = 3, .partitions = 2, .groups = 2, .blocks = 5,
                                 .bytes = 1536, .checksum = 0x0123456789abcdef,
                                 .has_stream = 1, .stream_seq = 9, .stream = "KV"};
}

TEST(stats_as_json_lines)
{
    kvix_snapshot_stats st;
    kvix_snapshot_row rows[4];
    kvix_snapshot_info info;
    stats_fixture(&st, rows, &info);
    kvix_buf out;
    kvix_buf_init(&out);
    kvix_err err;
    CHECK(kvix_snapshot_stats_write(&st, &info, KVIX_SNAPSHOT_STATS_JSON, &out, &err) == KVIX_OK);
    CHECK_STR(out.data,
              "{\"scope\":\"partition\",\"model\":\"llama\",\"tenant\":\"acme\",\"bs\":16,"
              "\"workers\":2,\"blocks\":5,\"unique_blocks\":4,\"orphans\":1,\"depth\":3,"
              "\"tiers\":{\"gpu\":4,\"cpu\":1,\"disk\":0,\"external\":0},\"memory\":2048}\n"
              "{\"scope\":\"worker\",\"model\":\"llama\",\"tenant\":\"acme\",\"bs\":16,"
              "\"worker\":7,\"dp\":1,\"blocks\":5,\"orphans\":1,\"depth\":3,"
              "\"tiers\":{\"gpu\":4,\"cpu\":1,\"disk\":0,\"external\":0},\"eid\":42,"
              "\"memory\":1000}\n"
              "{\"scope\":\"partition\",\"model\":\"q\\\"x\",\"tenant\":\"\xc3\xa9\",\"bs\":4,"
              "\"workers\":1,\"blocks\":0,\"unique_blocks\":0,\"orphans\":0,\"depth\":null,"
              "\"tiers\":{\"gpu\":0,\"cpu\":0,\"disk\":0,\"external\":0},\"memory\":0}\n"
              "{\"scope\":\"worker\",\"model\":\"q\\\"x\",\"tenant\":\"\xc3\xa9\",\"bs\":4,"
              "\"worker\":3,\"dp\":0,\"blocks\":0,\"orphans\":0,\"depth\":null,"
              "\"tiers\":{\"gpu\":0,\"cpu\":0,\"disk\":0,\"external\":0},\"eid\":null,"
              "\"memory\":0}\n"
              "{\"scope\":\"file\",\"version\":3,\"partitions\":2,\"workers\":2,\"blocks\":5,"
              "\"bytes\":1536,\"checksum\":\"0123456789abcdef\",\"memory\":3146240,"
              "\"stream\":\"KV\",\"stream_seq\":9}\n");
    /* without a stream position; appended after what out held */
    info.has_stream = 0;
    st.n = 0;
    CHECK(kvix_snapshot_stats_write(&st, &info, KVIX_SNAPSHOT_STATS_JSON, &out, &err) == KVIX_OK);
    const char *last = "{\"scope\":\"file\",\"version\":3,\"partitions\":2,\"workers\":2,"
                       "\"blocks\":5,\"bytes\":1536,\"checksum\":\"0123456789abcdef\","
                       "\"memory\":3146240,\"stream\":null,\"stream_seq\":null}\n";
    CHECK(out.len > strlen(last) && strcmp(out.data + out.len - strlen(last), last) == 0);
    kvix_buf_release(&out);
}

TEST(stats_as_a_table)
{
    kvix_snapshot_stats st;
    kvix_snapshot_row rows[4];
    kvix_snapshot_info info;
    stats_fixture(&st, rows, &info);
    kvix_buf out;
    kvix_buf_init(&out);
    kvix_err err;
    CHECK(kvix_snapshot_stats_write(&st, &info, KVIX_SNAPSHOT_STATS_TABLE, &out, &err) == KVIX_OK);
    /* names left-aligned, numbers right-aligned, widths in bytes */
    CHECK_STR(out.data,
              "model  tenant  bs  worker  dp  blocks  unique  depth  gpu  cpu  disk  external  "
              "eid  orphans  memory\n"
              "llama  acme    16      *2   -       5       4      3    4    1     0         0    "
              "-        1  2.0 KiB\n"
              "llama  acme    16       7   1       5       -      3    4    1     0         0   "
              "42        1  1000 B\n"
              "q\"x    \xc3\xa9       4      *1   -       0       0      -    0    0     0    "
              "     0    -        0  0 B\n"
              "q\"x    \xc3\xa9       4       3   0       0       -      -    0    0     0    "
              "     0    -        0  0 B\n"
              "\n2 partitions, 2 workers, 5 blocks; file 1.5 KiB, format version 3, checksum "
              "0123456789abcdef; index 3.0 MiB\n"
              "stream KV: every message up to sequence 9 applied\n");
    kvix_buf_release(&out);
}

TEST(stats_refused_leave_the_buffer_as_it_was)
{
    kvix_snapshot_stats st;
    kvix_snapshot_row rows[4];
    kvix_snapshot_info info;
    stats_fixture(&st, rows, &info);
    static char bad[] = "\xff";
    rows[3].tenant = bad;
    kvix_buf out;
    kvix_buf_init(&out);
    kvix_err err;
    kvix_buf_append(&out, "kept", 4, &err);
    CHECK(kvix_snapshot_stats_write(&st, &info, KVIX_SNAPSHOT_STATS_JSON, &out, &err) ==
          KVIX_EINVAL);
    CHECK_STR(out.data, "kept");
    CHECK(kvix_snapshot_stats_write(&st, &info, (kvix_snapshot_stats_form)7, &out, &err) ==
          KVIX_EINVAL);
    CHECK_STR(out.data, "kept");
    kvix_buf_release(&out);
}

/* ---- differences ------------------------------------------------------------- */

TEST(delta_lines_and_summary)
{
    kvix_block_info only[2] = {{0, 0xa1, 0x1, 0, 1u | 4u, 0xa1, 0},
                               {1, 0xa2, 0x2, 0x1, 2u, 0, 0xa1}};
    kvix_snapshot_group a = {"llama", "default", 16, 7, 1, 1, 5, only, 2};
    kvix_snapshot_group b = {"llama", "default", 16, 7, 1, 0, 0, NULL, 0};
    kvix_snapshot_group part = {"m\\", "t", 8, UINT64_MAX, 0, 0, 0, NULL, 0};
    kvix_snapshot_delta d1 = {&a, &b, only, NULL, 2, 0};
    kvix_snapshot_delta d2 = {NULL, &part, NULL, NULL, 0, 0};
    kvix_buf out;
    kvix_buf_init(&out);
    kvix_err err;
    CHECK(kvix_snapshot_delta_write(&d1, &out, NULL, NULL, &err) == KVIX_OK);
    CHECK(kvix_snapshot_delta_write(&d2, &out, NULL, NULL, &err) == KVIX_OK);
    kvix_snapshot_diff_totals t = {2, 2, 0};
    CHECK(kvix_snapshot_diff_summary_write(&t, 10, 7, &out, &err) == KVIX_OK);
    t = (kvix_snapshot_diff_totals){0, 0, 0};
    CHECK(kvix_snapshot_diff_summary_write(&t, 3, 3, &out, &err) == KVIX_OK);
    CHECK_STR(out.data,
              "{\"model\":\"llama\",\"tenant\":\"default\",\"worker\":7,\"dp\":1,\"bs_a\":16,"
              "\"eid_a\":5,\"bs_b\":16,\"eid_b\":null,\"only_a\":[{\"position\":0,\"local\":"
              "\"00000000000000a1\",\"seq\":\"0000000000000001\",\"parent\":null,\"tiers\":"
              "[\"gpu\",\"disk\"]},{\"position\":1,\"local\":\"00000000000000a2\",\"seq\":"
              "\"0000000000000002\",\"parent\":\"0000000000000001\",\"tiers\":[\"cpu\"]}],"
              "\"only_b\":[]}\n"
              "{\"model\":\"m\\\\\",\"tenant\":\"t\",\"worker\":null,\"dp\":null,\"bs_a\":null,"
              "\"eid_a\":null,\"bs_b\":8,\"eid_b\":null,\"only_a\":[],\"only_b\":[]}\n"
              "{\"summary\":true,\"equal\":false,\"differing\":2,\"only_a\":2,\"only_b\":0,"
              "\"blocks_a\":10,\"blocks_b\":7}\n"
              "{\"summary\":true,\"equal\":true,\"differing\":0,\"only_a\":0,\"only_b\":0,"
              "\"blocks_a\":3,\"blocks_b\":3}\n");
    kvix_buf_release(&out);
}

typedef struct sink {
    kvix_buf got;
    int calls, stop;
} sink;

static int drain_to(void *ctx, kvix_buf *b)
{
    sink *k = ctx;
    kvix_err err;
    k->calls++;
    if (!CHECK(b->len >= KVIX_BUF_DRAIN_AT) || k->stop)
        return k->stop ? 7 : 0;
    kvix_buf_append(&k->got, b->data, b->len, &err);
    b->len = 0;
    return 0;
}

/* A delta of many blocks goes out in pieces that make the same line. */
TEST(delta_drains_long_lines)
{
    size_t n = 5000;
    kvix_block_info *blk = calloc(n, sizeof *blk);
    for (size_t i = 0; i < n; i++)
        blk[i] = (kvix_block_info){(uint32_t)i, i * 3, i + 1, i, 1u << (i % 4), 0, 0};
    kvix_snapshot_group a = {"m", "t", 16, 1, 0, 1, 9, blk, n};
    kvix_snapshot_delta d = {&a, NULL, blk, NULL, n, 0};
    kvix_buf whole;
    kvix_buf_init(&whole);
    kvix_err err;
    CHECK(kvix_snapshot_delta_write(&d, &whole, NULL, NULL, &err) == KVIX_OK);
    CHECK(whole.len > 4 * KVIX_BUF_DRAIN_AT);
    sink k = {.stop = 0};
    kvix_buf_init(&k.got);
    kvix_buf out;
    kvix_buf_init(&out);
    CHECK(kvix_snapshot_delta_write(&d, &out, drain_to, &k, &err) == KVIX_OK);
    CHECK(k.calls >= 4);
    CHECK(out.len < KVIX_BUF_DRAIN_AT + 256);
    kvix_buf_append(&k.got, out.data, out.len, &err);
    CHECK(k.got.len == whole.len && memcmp(k.got.data, whole.data, whole.len) == 0);
    /* a drain that fails stops the writer with its value */
    k = (sink){.stop = 1, .got = k.got};
    out.len = 0;
    CHECK(kvix_snapshot_delta_write(&d, &out, drain_to, &k, &err) == 7);
    CHECK_U64(k.calls, 1);
    kvix_buf_release(&k.got);
    kvix_buf_release(&out);
    kvix_buf_release(&whole);
    free(blk);
}
