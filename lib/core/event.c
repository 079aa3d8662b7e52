#include "kvix/event.h"
#include "event_int.h"

#include <stdlib.h>
#include <string.h>

void kvix_event_init(kvix_event *ev)
{
    memset(ev, 0, sizeof *ev);
    kvix_event_reset(ev);
}

void kvix_event_release(kvix_event *ev)
{
    free(ev->blocks);
    free(ev->hashes);
    free(ev->tokens);
    ev->blocks = NULL;
    ev->hashes = NULL;
    ev->tokens = NULL;
    ev->cap_blocks = ev->cap_hashes = ev->cap_tokens = 0;
    ev->nblocks = ev->nhashes = ev->ntokens = 0;
}

void kvix_event_reset(kvix_event *ev)
{
    ev->type = KVIX_EV_NONE;
    ev->worker = 0;
    ev->dp = 0;
    ev->medium = KVIX_MEDIUM_GPU;
    ev->has_eid = ev->has_ts = ev->has_parent = ev->has_tokens = ev->has_id = 0;
    ev->has_parent_at = ev->has_top = ev->explain = 0;
    ev->has_group = ev->placeholder = ev->eagle = 0;
    ev->top = 0;
    ev->nxworkers = 0;
    ev->group = 0;
    ev->kind = KVIX_KIND_NONE;
    ev->parent_position = 0;
    ev->parent_canon = 0;
    ev->eid = 0;
    ev->ts = 0;
    ev->bs = 0;
    ev->parent = 0;
    memcpy(ev->model, "default", 8);
    memcpy(ev->tenant, "default", 8);
    ev->lora[0] = '\0';
    ev->id[0] = '\0';
    ev->nblocks = ev->nhashes = ev->ntokens = 0;
}

static int grow(void **p, size_t *cap, size_t n, size_t elem, size_t limit, const char *what,
                kvix_err *err)
{
    if (n > limit)
        return kvix_err_set(err, KVIX_ELIMIT, "too many %s: %zu (limit %zu)", what, n, limit);
    if (n <= *cap)
        return KVIX_OK;
    size_t c = *cap ? *cap : 16;
    while (c < n)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu %s", n, what);
    *p = q;
    *cap = c;
    return KVIX_OK;
}

int kvix_event_reserve_blocks(kvix_event *ev, size_t n, kvix_err *err)
{
    return grow((void **)&ev->blocks, &ev->cap_blocks, n, sizeof *ev->blocks,
                KVIX_EVENT_BLOCKS_MAX, "blocks", err);
}

int kvix_event_reserve_hashes(kvix_event *ev, size_t n, kvix_err *err)
{
    return grow((void **)&ev->hashes, &ev->cap_hashes, n, sizeof *ev->hashes,
                KVIX_EVENT_BLOCKS_MAX, "hashes", err);
}

int kvix_event_reserve_tokens(kvix_event *ev, size_t n, kvix_err *err)
{
    return grow((void **)&ev->tokens, &ev->cap_tokens, n, sizeof *ev->tokens, KVIX_TOKENS_MAX,
                "tokens", err);
}

/* dst's own buffers (grown to src's counts) under a copy of src's fields. */
static int copy(kvix_event *dst, const kvix_event *src, int tokens, kvix_err *err)
{
    size_t nt = tokens ? src->ntokens : 0;
    int rc;
    if ((rc = kvix_event_reserve_blocks(dst, src->nblocks, err)) ||
        (rc = kvix_event_reserve_hashes(dst, src->nhashes, err)) ||
        (rc = kvix_event_reserve_tokens(dst, nt, err)))
        return rc;
    kvix_block *b = dst->blocks;
    uint64_t *h = dst->hashes;
    uint32_t *t = dst->tokens;
    size_t cb = dst->cap_blocks, ch = dst->cap_hashes, ct = dst->cap_tokens;
    *dst = *src;
    dst->blocks = b;
    dst->hashes = h;
    dst->tokens = t;
    dst->cap_blocks = cb;
    dst->cap_hashes = ch;
    dst->cap_tokens = ct;
    dst->ntokens = nt;
    dst->has_tokens = tokens && src->has_tokens;
    if (src->nblocks)
        memcpy(b, src->blocks, src->nblocks * sizeof *b);
    if (src->nhashes)
        memcpy(h, src->hashes, src->nhashes * sizeof *h);
    if (nt)
        memcpy(t, src->tokens, nt * sizeof *t);
    return KVIX_OK;
}

int kvix_event_copy(kvix_event *dst, const kvix_event *src, kvix_err *err)
{
    return copy(dst, src, 1, err);
}

int kvix__ev_copy_untokened(kvix_event *dst, const kvix_event *src, kvix_err *err)
{
    return copy(dst, src, 0, err);
}

int kvix_event_set_name(char dst[KVIX_NAME_MAX], const char *s, size_t len, kvix_err *err)
{
    if (len >= KVIX_NAME_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "name of %zu bytes (limit %d)", len,
                            KVIX_NAME_MAX - 1);
    if (memchr(s, '\0', len))
        return kvix_err_set(err, KVIX_EINVAL, "name contains a NUL byte");
    memcpy(dst, s, len);
    dst[len] = '\0';
    return KVIX_OK;
}

static const char *const medium_names[KVIX_MEDIUM_COUNT] = {"gpu", "cpu", "disk", "external"};

const char *kvix_medium_name(int medium)
{
    return medium >= 0 && medium < KVIX_MEDIUM_COUNT ? medium_names[medium] : "?";
}

int kvix_medium_parse(const char *s, size_t len, int *out)
{
    for (int m = 0; m < KVIX_MEDIUM_COUNT; m++) {
        if (strlen(medium_names[m]) == len && memcmp(s, medium_names[m], len) == 0) {
            *out = m;
            return KVIX_OK;
        }
    }
    return KVIX_EINVAL;
}

static const char *const kind_names[KVIX_KIND_COUNT] = {
    "",
    "full_attention",
    "mla_attention",
    "sink_full_attention",
    "sliding_window",
    "sliding_window_mla",
    "mamba",
    "chunked_local_attention",
    "encoder_only_attention",
    "cross_attention",
    "unknown",
};

const char *kvix_kind_name(int kind)
{
    return kind >= 0 && kind < KVIX_KIND_COUNT ? kind_names[kind] : "unknown";
}

int kvix_kind_parse(const char *s, size_t len)
{
    for (int k = 1; k < KVIX_KIND_COUNT; k++)
        if (strlen(kind_names[k]) == len && memcmp(s, kind_names[k], len) == 0)
            return k;
    return KVIX_KIND_UNKNOWN;
}

int kvix_kind_full(int kind)
{
    return kind == KVIX_KIND_NONE || kind == KVIX_KIND_FULL_ATTENTION ||
           kind == KVIX_KIND_MLA_ATTENTION || kind == KVIX_KIND_SINK_FULL_ATTENTION;
}

const char *kvix_event_type_name(int type)
{
    switch (type) {
    case KVIX_EV_STORED: return "stored";
    case KVIX_EV_REMOVED: return "removed";
    case KVIX_EV_CLEARED: return "cleared";
    case KVIX_EV_QUERY: return "query";
    }
    return "?";
}
