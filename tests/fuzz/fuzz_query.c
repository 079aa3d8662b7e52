/* libFuzzer target for the query path (tests/fuzz/run.sh): a record stream
 * (NDJSON or msgpack, as kvindex reads it) applied to the three backends
 * side by side, every query answered by each.
 *
 * Whatever the records: no crash, no leak, no sanitizer report; and the
 * backends agree on everything, as the contract makes them: the verdict on
 * each event and what it did (stored, duplicate, removed, unknown), each
 * answer whole (block size, unknown partition, every score), and at the end
 * the index's walk (what a snapshot would save). The reference backend is
 * the simplest obviously-correct model, so a disagreement is a bug in one
 * of the fast ones. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvix/index.h"
#include "kvix/stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NB 3
static const kvix_backend backends[NB] = {KVIX_BACKEND_REFERENCE, KVIX_BACKEND_POSITIONAL,
                                          KVIX_BACKEND_RADIX};

static void same_answers(const kvix_answer *a, const kvix_answer *b)
{
    if (a->query_blocks != b->query_blocks || a->bs != b->bs || a->unknown != b->unknown ||
        a->nscores != b->nscores)
        abort();
    for (size_t i = 0; i < a->nscores; i++) {
        const kvix_score *x = &a->scores[i], *y = &b->scores[i];
        if (x->worker != y->worker || x->dp != y->dp || x->blocks != y->blocks ||
            x->held != y->held || memcmp(x->tier_blocks, y->tier_blocks, sizeof x->tier_blocks))
            abort();
    }
}

/* A digest of the walk: every visited field, blocks in visiting order. */
static int digest_visit(void *ctx, const char *model, const char *tenant, uint32_t bs,
                        uint64_t worker, uint32_t dp, int has_eid, uint64_t last_eid,
                        const kvix_block_info *blocks, size_t n)
{
    XXH3_state_t *st = ctx;
    uint64_t head[5] = {bs, worker, dp, (uint64_t)has_eid, has_eid ? last_eid : 0};
    XXH3_64bits_update(st, model, strlen(model) + 1);
    XXH3_64bits_update(st, tenant, strlen(tenant) + 1);
    XXH3_64bits_update(st, head, sizeof head);
    for (size_t i = 0; i < n; i++) {
        const kvix_block_info *b = &blocks[i];
        uint64_t f[7] = {b->position, b->local, b->engine, b->position ? b->parent : 0,
                         b->tiers, b->canon, b->parent_canon};
        XXH3_64bits_update(st, f, sizeof f);
    }
    return 0;
}

static uint64_t walk_digest(kvix_index *idx)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        abort();
    XXH3_64bits_reset(st);
    kvix_index_foreach(idx, digest_visit, st);
    uint64_t d = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return d;
}

/* Explanations agree but for the index's clock ("at", "ago"). */
static void same_removal(const kvix_removal *a, const kvix_removal *b)
{
    if (a->kind != b->kind || a->has_eid != b->has_eid || a->has_ts != b->has_ts ||
        a->eid != b->eid || memcmp(&a->ts, &b->ts, sizeof a->ts) || a->blocks != b->blocks)
        abort();
}

static void same_explained(const kvix_explain *a, const kvix_explain *b)
{
    if (a->unknown != b->unknown || a->nclosest != b->nclosest || a->bs != b->bs ||
        a->query_bs != b->query_bs || a->depth != b->depth || a->nw != b->nw)
        abort();
    for (uint32_t i = 0; i < a->nclosest; i++)
        if (strcmp(a->closest[i], b->closest[i]))
            abort();
    for (uint32_t i = 0; i < a->nw; i++) {
        const kvix_explained *x = &a->w[i], *y = &b->w[i];
        if (x->worker != y->worker || x->dp != y->dp || x->named != y->named ||
            x->why != y->why || x->blocks != y->blocks || x->want != y->want ||
            x->causes != y->causes || x->likely != y->likely || strcmp(x->lora, y->lora) ||
            x->held_at != y->held_at || x->held_after != y->held_after ||
            x->nheld != y->nheld || x->has_clear != y->has_clear)
            abort();
        same_removal(&x->removal, &y->removal);
        if (x->has_clear)
            same_removal(&x->clear, &y->clear);
    }
}

static void explain(kvix_index **idx, kvix_answer *ans, const kvix_event *ev)
{
    static kvix_explain x[NB];
    kvix_err err;
    for (int b = 0; b < NB; b++) {
        kvix_explain_init(&x[b]);
        int rc = kvix_index_explain(idx[b], ev, &ans[b], &x[b], &err);
        if (b && rc != KVIX_OK) /* the first said the same */
            abort();
        if (rc != KVIX_OK)
            break;
        if (b) {
            same_answers(&ans[0], &ans[b]);
            same_explained(&x[0], &x[b]);
        }
        kvix_buf out;
        kvix_buf_init(&out);
        if (kvix_answer_explain_to_json(&ans[b], ev, &x[b], &out, &err) != KVIX_OK)
            abort();
        kvix_buf_release(&out);
    }
    for (int b = 0; b < NB; b++)
        kvix_explain_release(&x[b]);
}

static void one(kvix_index **idx, kvix_answer *ans, const kvix_event *ev)
{
    kvix_err err;
    if (ev->type == KVIX_EV_QUERY && ev->explain) {
        explain(idx, ans, ev);
        return;
    }
    if (ev->type == KVIX_EV_QUERY) {
        int rc0 = kvix_index_query_event(idx[0], ev, &ans[0], &err);
        for (int b = 1; b < NB; b++) {
            int rc = kvix_index_query_event(idx[b], ev, &ans[b], &err);
            if (rc != rc0)
                abort();
            if (rc == KVIX_OK)
                same_answers(&ans[0], &ans[b]);
        }
        return;
    }
    kvix_apply_result r0 = {0}, r;
    int rc0 = kvix_index_apply(idx[0], ev, &r0, &err);
    for (int b = 1; b < NB; b++) {
        memset(&r, 0, sizeof r);
        int rc = kvix_index_apply(idx[b], ev, &r, &err);
        if (rc != rc0 || memcmp(&r, &r0, sizeof r) != 0)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvix_index *idx[NB];
    kvix_answer ans[NB];
    kvix_err err;
    for (int b = 0; b < NB; b++) {
        kvix_index_opts opts;
        kvix_index_opts_init(&opts);
        opts.backend = backends[b];
        if (kvix_index_new(&idx[b], &opts, &err) != KVIX_OK)
            abort();
        kvix_answer_init(&ans[b]);
    }
    int fd = memfd_create("fuzz", 0);
    if (fd >= 0) {
        if (write(fd, data, size) == (ssize_t)size && lseek(fd, 0, SEEK_SET) == 0) {
            kvix_reader *r;
            if (kvix_reader_new(&r, fd, "fuzz", KVIX_FMT_AUTO, &err) == KVIX_OK) {
                kvix_event ev;
                kvix_event_init(&ev);
                int rc;
                while ((rc = kvix_reader_next(r, &ev, &err)) != KVIX_EOF && rc != KVIX_EIO)
                    if (rc == KVIX_OK)
                        one(idx, ans, &ev);
                kvix_event_release(&ev);
                kvix_reader_free(r);
            }
        }
        close(fd);
    }
    uint64_t d0 = walk_digest(idx[0]);
    for (int b = 1; b < NB; b++)
        if (walk_digest(idx[b]) != d0)
            abort();
    for (int b = 0; b < NB; b++) {
        kvix_answer_release(&ans[b]);
        kvix_index_free(idx[b]);
    }
    return 0;
}
