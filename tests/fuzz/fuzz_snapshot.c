/* libFuzzer target for the snapshot reader (kvix_snapshot_open_mem,
 * kvix-snapshot(5); tests/fuzz/run.sh).
 *
 * The input's last 8 bytes are replaced by the XXH3-64 of the rest, as a
 * writer would put there: without it nearly every mutation would stop at
 * the checksum and the record parser behind it would never be reached.
 *
 * Whatever the bytes: no crash, no leak, no sanitizer report; and a file the
 * reader accepts is one kvix can use whole: its totals match its records,
 * every record turns into stored events (kvdump --events), and it applies
 * to an empty index without error (a verified snapshot never half-loads). */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvix/snapshot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int count_event(void *ctx, const kvix_event *ev)
{
    size_t *n = ctx;
    if (ev->type != KVIX_EV_STORED || ev->nblocks == 0)
        abort();
    *n += ev->nblocks;
    return 0;
}

static void use(kvix_snapshot *s)
{
    kvix_snapshot_info info;
    kvix_snapshot_group g;
    kvix_err err;
    kvix_event scratch;
    uint64_t groups = 0, blocks = 0;
    int rc;
    kvix_snapshot_get_info(s, &info);
    kvix_event_init(&scratch);
    while ((rc = kvix_snapshot_next(s, &g, &err)) == KVIX_OK) {
        if (!(g.worker == UINT64_MAX && g.n == 0 && !g.has_eid)) {
            groups++;
            blocks += g.n;
        }
        size_t emitted = 0, orphans = 0;
        if (kvix_snapshot_group_events(&g, &scratch, count_event, &emitted, &orphans, &err) !=
            KVIX_OK)
            abort();
        if (emitted < g.n) /* every block comes out, once per tier it is held in */
            abort();
    }
    if (rc != KVIX_EOF || groups != info.groups || blocks != info.blocks)
        abort();
    kvix_event_release(&scratch);

    kvix_index *idx;
    kvix_index_opts opts;
    kvix_index_opts_init(&opts);
    if (kvix_index_new(&idx, &opts, &err) != KVIX_OK)
        abort();
    if (kvix_snapshot_apply(s, idx, &err) != KVIX_OK)
        abort(); /* verified, then refused by the index */
    kvix_index_stats st;
    kvix_index_stats_get(idx, &st);
    if (st.blocks != info.blocks)
        abort();
    kvix_index_free(idx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    if (size >= 16) {
        uint64_t sum = XXH3_64bits(copy, size - 8);
        for (int i = 0; i < 8; i++)
            copy[size - 8 + i] = (uint8_t)(sum >> (8 * i));
    }
    kvix_snapshot *s;
    kvix_err err;
    if (kvix_snapshot_open_mem(&s, copy, size, &err) == KVIX_OK) {
        use(s);
        kvix_snapshot_close(s);
    }
    free(copy);
    return 0;
}
