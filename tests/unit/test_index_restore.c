/* Whatever the index accepts it can save and reload to an equal index, on
 * every backend, when engines store a held hash again: with other content
 * (an eviction race: the child stored under the old content stays, an
 * orphan) or at another position. Equal means: the reloaded index saves to
 * the same bytes and answers the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvix/index.h"
#include "kvix/snapshot.h"
#include "kvix/stream.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)l + 1);
    if (b && fread(b, 1, (size_t)l, f) != (size_t)l) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)l;
    return b;
}

static void answer(kvix_index *idx, const char *q, kvix_buf *out)
{
    kvix_event ev;
    kvix_answer ans;
    kvix_err err;
    kvix_event_init(&ev);
    kvix_answer_init(&ans);
    CHECK(kvix_event_from_json(q, strlen(q), &ev, &err) == KVIX_OK);
    CHECK(kvix_index_query_event(idx, &ev, &ans, &err) == KVIX_OK);
    CHECK(kvix_answer_to_json(&ans, &ev, out, &err) == KVIX_OK);
    kvix_answer_release(&ans);
    kvix_event_release(&ev);
}

/* Apply lines, save, reload, save again: both files equal, answers equal. */
static void round_trip(kvix_backend be, const char *const *lines, size_t n, const char *const *qs,
                       size_t nq)
{
    char a[64], b[64];
    snprintf(a, sizeof a, "/tmp/kvix-restore-%d-a.kvix", (int)getpid());
    snprintf(b, sizeof b, "/tmp/kvix-restore-%d-b.kvix", (int)getpid());
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = be;
    kvix_index *x, *y;
    kvix_err err;
    CHECK(kvix_index_new(&x, &o, &err) == KVIX_OK);
    CHECK(kvix_index_new(&y, &o, &err) == KVIX_OK);
    kvix_event ev;
    kvix_event_init(&ev);
    for (size_t i = 0; i < n; i++) {
        CHECK(kvix_event_from_json(lines[i], strlen(lines[i]), &ev, &err) == KVIX_OK);
        CHECK(kvix_index_apply(x, &ev, NULL, &err) == KVIX_OK);
    }
    if (!CHECK(kvix_snapshot_save(x, a, NULL, &err) == KVIX_OK))
        printf("#   backend %d: save: %s\n", (int)be, err.msg);
    if (!CHECK(kvix_snapshot_load(y, a, NULL, &err) == KVIX_OK))
        printf("#   backend %d: load: %s\n", (int)be, err.msg);
    CHECK(kvix_snapshot_save(y, b, NULL, &err) == KVIX_OK);
    size_t la = 0, lb = 0;
    char *da = slurp(a, &la), *db = slurp(b, &lb);
    CHECK(da && db && la == lb && memcmp(da, db, la) == 0);
    for (size_t i = 0; i < nq; i++) {
        kvix_buf ax, ay;
        kvix_buf_init(&ax);
        kvix_buf_init(&ay);
        answer(x, qs[i], &ax);
        answer(y, qs[i], &ay);
        CHECK(ax.data && ay.data && strcmp(ax.data, ay.data) == 0);
        kvix_buf_release(&ax);
        kvix_buf_release(&ay);
    }
    free(da);
    free(db);
    unlink(a);
    unlink(b);
    kvix_event_release(&ev);
    kvix_index_free(x);
    kvix_index_free(y);
}

static const kvix_backend backends[] = {KVIX_BACKEND_POSITIONAL, KVIX_BACKEND_RADIX,
                                        KVIX_BACKEND_REFERENCE};

TEST(restore_with_other_content_stays_saveable)
{
    /* issue 10 point 2: seq 5 stored again with other content */
    static const char *const lines[] = {
        "{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":\"1\",\"seq\":\"5\"},"
        "{\"local\":\"1\",\"seq\":\"4\"}]}",
        "{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":\"3\",\"seq\":\"5\"}]}",
    };
    static const char *const qs[] = {"{\"local\":[\"1\",\"1\"]}", "{\"local\":[\"3\"]}"};
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        round_trip(backends[i], lines, 2, qs, 2);
}

TEST(restore_at_another_position_stays_saveable)
{
    static const char *const lines[] = {
        "{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":\"1\",\"seq\":\"a\"},"
        "{\"local\":\"2\",\"seq\":\"b\"},{\"local\":\"3\",\"seq\":\"c\"}]}",
        /* b again, now at position 0, then c again under the moved b */
        "{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":\"2\",\"seq\":\"b\"}]}",
        "{\"type\":\"stored\",\"worker\":1,\"bs\":4,\"parent\":\"b\",\"blocks\":[{\"local\":\"9\","
        "\"seq\":\"c\"}]}",
        "{\"type\":\"stored\",\"worker\":2,\"bs\":4,\"blocks\":[{\"local\":\"1\",\"seq\":\"a\"},"
        "{\"local\":\"2\",\"seq\":\"b\"}]}",
    };
    static const char *const qs[] = {"{\"local\":[\"1\",\"2\",\"3\"]}", "{\"local\":[\"2\",\"9\"]}"};
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        round_trip(backends[i], lines, 4, qs, 2);
}
