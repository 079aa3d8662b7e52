/* The service's JSON: exact u64 reading over jansson, appenders, and /dump's
 * RouterEvent encoding and decoding. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvix/service.h"
#include "hashmap_int.h"
#include "kvix/hash.h"
#include "kvix/snapshot.h"
#include "json_arena_int.h"
#include "json_text_int.h"
#include "dec64_int.h"
#include "service_int.h"

/* ---- exact u64 ---- */

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Copy text to out, rewriting each integer literal above INT64_MAX as the
 * negative number with the same 64 bits. Strings are copied untouched; the
 * rest of the grammar is jansson's to check. A literal under 19 digits is
 * below INT64_MAX whatever its digits: only longer ones are read, and the
 * text between two rewrites is copied in one piece (a bodies' hashes are
 * 19-20 digit literals, about half of them above INT64_MAX). Written in
 * place after one reservation: a rewritten literal (19 or 20 digits) grows
 * by one byte at most, so the text never outgrows len + len / 16 + 16.
 *
 * With refs, every literal above INT64_MAX and every other one longer than
 * its reference (leading zeros aside: jansson refuses those as they are) is
 * replaced by the reference -(i + 1) to refs->v[i], the literal's value:
 * jansson's lexer costs per byte and its strtoll ~250 instructions a 20-digit
 * hash, so it reads "-7" for a fraction of that. A reference is never longer
 * than what it replaces, and refs->v has room for len / 4 + 1 (a replaced
 * literal is 3 digits or more and a non-digit or the end follows it). */
static int u64_rewrite(const char *t, size_t len, kvix_buf *out, kvix_u64_refs *refs,
                       kvix_err *err)
{
    int rc = kvix_buf_reserve(out, len + len / 16 + 16, err);
    if (rc)
        return rc;
    char *o = out->data + out->len;
    size_t i = 0, kept = 0; /* t[kept..i) is still to copy */
    size_t next_len = 2;    /* the length of the next reference, "-1" */
    size_t containers = 0;  /* with refs (a query): '[' and '{' so far */
    uint64_t next_pow = 10; /* the next reference number that is one digit longer */
    while (i < len) {
        char c = t[i];
        if (c == '"') {
            size_t j = i + 1;
            while (j < len && t[j] != '"')
                j += t[j] == '\\' ? 2 : 1;
            i = j < len ? j + 1 : len;
            continue;
        }
        if (!is_digit(c)) {
            if (c == '-' && i + 1 < len && is_digit(t[i + 1]))
                return kvix_err_set(err, KVIX_EINVAL, "negative number at byte %zu", i + 1);
            if (refs && (c == '[' || c == '{') && ++containers > KVIX_QUERY_CONTAINERS_MAX)
                return kvix_err_set(err, KVIX_ELIMIT, "more than %d arrays and objects in a "
                                    "query", KVIX_QUERY_CONTAINERS_MAX);
            i++;
            continue;
        }
        size_t j = i, first19 = len - i > 19 ? i + 19 : len; /* 19 digits: below 2^64 */
        uint64_t v = 0;
        for (unsigned d; j < first19 && (d = (unsigned)(t[j] - '0')) < 10; j++)
            v = v * 10 + d;
        int over = 0;
        while (j < len && is_digit(t[j])) {
            over |= __builtin_mul_overflow(v, 10u, &v);
            over |= __builtin_add_overflow(v, (unsigned)(t[j++] - '0'), &v);
        }
        if (j < len && (t[j] == '.' || t[j] == 'e' || t[j] == 'E')) {
            /* a real: kept whole, the decoder calls it the wrong type */
            while (j < len && (is_digit(t[j]) || strchr(".eE+-", t[j])))
                j++;
        } else if (c == '0' && j - i > 1) {
            /* JSON has none; jansson refuses them, but a value past 2^63-1
             * reaches it rewritten, so they are refused here for all */
            return kvix_err_set(err, KVIX_EINVAL, "number at byte %zu has a leading zero", i + 1);
        } else if (over) {
            return kvix_err_set(err, KVIX_ERANGE, "number at byte %zu is above 2^64-1", i + 1);
        } else if (refs && (v > INT64_MAX || (j - i > next_len && c != '0'))) {
            memcpy(o, t + kept, i - kept);
            o += i - kept;
            refs->v[refs->n++] = v;
            *o++ = '-';
            o += kvix_dec64_put(refs->n, o);
            if (refs->n + 1 == next_pow) {
                next_len++;
                next_pow = next_pow > UINT64_MAX / 10 ? UINT64_MAX : next_pow * 10;
            }
            kept = j;
        } else if (v > INT64_MAX) {
            memcpy(o, t + kept, i - kept);
            o += i - kept;
            *o++ = '-';
            o += kvix_dec64_put(0 - v, o); /* the magnitude of (int64_t)v */
            kept = j;
        }
        i = j;
    }
    memcpy(o, t + kept, len - kept);
    o += len - kept;
    *o = '\0';
    out->len = (size_t)(o - out->data);
    return KVIX_OK;
}

json_t *kvix_json_u64_loadb(const char *text, size_t len, kvix_err *err)
{
    kvix_buf b;
    kvix_buf_init(&b);
    json_t *j = NULL;
    if (u64_rewrite(text, len, &b, NULL, err) == KVIX_OK) {
        json_error_t je;
        j = json_loadb(b.data ? b.data : "", b.len, JSON_REJECT_DUPLICATES, &je);
        if (!j)
            kvix_err_set(err, KVIX_EINVAL, "malformed json at column %d: %s", je.column, je.text);
    }
    kvix_buf_release(&b);
    return j;
}

json_t *kvix__json_u64_loadb_refs(const char *text, size_t len, kvix_u64_refs *refs,
                                 kvix_err *err)
{
    refs->n = 0;
    size_t need = len / 4 + 1;
    if (need > refs->cap) {
        uint64_t *v = need > SIZE_MAX / sizeof *v ? NULL : realloc(refs->v, need * sizeof *v);
        if (!v) {
            kvix_err_set(err, KVIX_ENOMEM, "out of memory for a body of %zu bytes", len);
            return NULL;
        }
        refs->v = v;
        refs->cap = need;
    }
    kvix_buf b;
    kvix_buf_init(&b);
    json_t *j = NULL;
    if (u64_rewrite(text, len, &b, refs, err) == KVIX_OK) {
        j = json_loadb(b.data ? b.data : "", b.len, JSON_REJECT_DUPLICATES, NULL);
        /* the references moved jansson's columns: its message comes from
         * the text as the plain reader gives it (errors are the rare path) */
        if (!j && (j = kvix_json_u64_loadb(text, len, err))) {
            json_decref(j);
            j = NULL;
            kvix_err_set(err, KVIX_EINVAL, "malformed json");
        }
    }
    kvix_buf_release(&b);
    return j;
}

void kvix__u64_refs_release(kvix_u64_refs *refs)
{
    free(refs->v);
    refs->v = NULL;
    refs->n = refs->cap = 0;
}

/* ---- appenders ---- */

int kvix__sj_raw(kvix_buf *b, const char *s, kvix_err *err)
{
    return kvix_buf_append(b, s, strlen(s), err);
}

int kvix__sj_u64(kvix_buf *b, uint64_t v, kvix_err *err)
{
    char tmp[KVIX_DEC64_MAX];
    return kvix_buf_append(b, tmp, kvix_dec64_put(v, tmp), err);
}

int kvix__sj_str(kvix_buf *b, const char *s, size_t len, kvix_err *err)
{
    return kvix__json_str_append(b, s, len, err);
}

/* ---- request fields ---- */

int kvix__sj_get_u64(json_t *obj, const char *key, int *present, uint64_t *out, kvix_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (present)
        *present = v && !json_is_null(v);
    if (!v || json_is_null(v))
        return present ? KVIX_OK : kvix_err_set(err, KVIX_EINVAL, "missing \"%s\"", key);
    if (!json_is_integer(v))
        return kvix_err_set(err, KVIX_EINVAL, "\"%s\" is not an unsigned integer", key);
    *out = (uint64_t)json_integer_value(v);
    return KVIX_OK;
}

int kvix__sj_get_str(json_t *obj, const char *key, int *present, const char **out, size_t *len,
                    kvix_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (present)
        *present = v && !json_is_null(v);
    if (!v || json_is_null(v))
        return present ? KVIX_OK : kvix_err_set(err, KVIX_EINVAL, "missing \"%s\"", key);
    if (!json_is_string(v))
        return kvix_err_set(err, KVIX_EINVAL, "\"%s\" is not a string", key);
    *out = json_string_value(v);
    *len = json_string_length(v);
    return KVIX_OK;
}

/* ---- /dump ---- */

static const char *const tier_names[KVIX_MEDIUM_COUNT] = {"device", "host_pinned", "disk",
                                                         "external"};

typedef struct dumper {
    kvix_buf *out;
    kvix_event scratch;
    const char *model, *tenant; /* partition open in the output, NULL: none yet */
    size_t nev;                 /* events written in the open partition */
    int has_eid;
    uint64_t eid;
    const kvix_block_info *blocks; /* the group's, and engine hash -> index in it */
    kvix_hmap where;
    kvix_err *err;
    int fd;                     /* >= 0: out is written there past DUMP_FLUSH bytes */
} dumper;

#define DUMP_FLUSH (1u << 20)

/* out's bytes to d->fd (when there is one and out holds at least min). */
static int dump_flush(dumper *d, size_t min)
{
    if (d->fd < 0 || d->out->len < min)
        return KVIX_OK;
    for (size_t off = 0; off < d->out->len;) {
        ssize_t k = write(d->fd, d->out->data + off, d->out->len - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return kvix_err_set(d->err, KVIX_EIO, "writing the dump: %s", strerror(errno));
        off += (size_t)k;
    }
    d->out->len = 0;
    return KVIX_OK;
}

/* The group's block info of an engine hash, NULL if not held. */
static const kvix_block_info *held(dumper *d, uint64_t engine)
{
    const size_t *i = kvix__hmap_get(&d->where, &engine);
    return i ? &d->blocks[*i] : NULL;
}

static int put_event_head(dumper *d, const kvix_event *ev)
{
    kvix_buf *b = d->out;
    kvix_err *err = d->err;
    int rc;
    if ((rc = kvix__sj_raw(b, d->nev++ ? ",{\"worker_id\":" : "{\"worker_id\":", err)) ||
        (rc = kvix__sj_u64(b, ev->worker, err)) ||
        (rc = kvix__sj_raw(b, ",\"storage_tier\":\"", err)) ||
        (rc = kvix__sj_raw(b, tier_names[ev->medium], err)) ||
        (rc = kvix__sj_raw(b, "\",\"event\":{\"event_id\":", err)) ||
        (rc = kvix__sj_u64(b, d->has_eid ? d->eid : 0, err)))
        return rc;
    return kvix__sj_raw(b, ",\"data\":", err);
}

static int put_event_tail(dumper *d, const kvix_event *ev)
{
    int rc;
    if ((rc = kvix__sj_raw(d->out, ",\"dp_rank\":", d->err)) ||
        (rc = kvix__sj_u64(d->out, ev->dp, d->err)))
        return rc;
    /* kvix's one extra key (readers ignore unknown keys): event_id 0 of a
     * (worker, dp) that never had an eid must not read back as eid 0. */
    return kvix__sj_raw(d->out, d->has_eid ? "}}" : "},\"kvix_no_eid\":true}", d->err);
}

static int dump_event(void *ctx, const kvix_event *ev)
{
    dumper *d = ctx;
    kvix_buf *b = d->out;
    kvix_err *err = d->err;
    int rc;
    if ((rc = put_event_head(d, ev)) ||
        (rc = kvix__sj_raw(b, "{\"stored\":{\"parent_hash\":", err)))
        return rc;
    rc = ev->has_parent ? kvix__sj_u64(b, ev->parent, err) : kvix__sj_raw(b, "null", err);
    /* A run below a parent the worker no longer holds where the run expects it
     * (removed, or moved) cannot be replayed by parent: it gets its position
     * and kvix's parent canonical hash, and is restored as it is. */
    const kvix_block_info *first = ev->nblocks ? held(d, ev->blocks[0].seq) : NULL, *par = NULL;
    int orphan = first && first->position > 0 &&
                 (!(par = held(d, first->parent)) || par->position + 1 != first->position ||
                  par->canon != first->parent_canon);
    if (rc || (rc = kvix__sj_raw(b, ",\"start_position\":", err)) ||
        (rc = orphan ? kvix__sj_u64(b, first->position, err) : kvix__sj_raw(b, "null", err)) ||
        (rc = kvix__sj_raw(b, ",\"blocks\":[", err)))
        return rc;
    for (size_t i = 0; i < ev->nblocks; i++)
        if ((rc = kvix__sj_raw(b, i ? ",{\"block_hash\":" : "{\"block_hash\":", err)) ||
            (rc = kvix__sj_u64(b, ev->blocks[i].seq, err)) ||
            (rc = kvix__sj_raw(b, ",\"tokens_hash\":", err)) ||
            (rc = kvix__sj_u64(b, ev->blocks[i].local, err)) ||
            (rc = kvix__sj_raw(b, ",\"mm_extra_info\":null}", err)))
            return rc;
    if ((rc = kvix__sj_raw(b, "]", err)))
        return rc;
    if (orphan && ((rc = kvix__sj_raw(b, ",\"kvix_parent_canon\":", err)) ||
                   (rc = kvix__sj_u64(b, first->parent_canon, err))))
        return rc;
    if ((rc = kvix__sj_raw(b, "}}", err)))
        return rc;
    return put_event_tail(d, ev);
}

static int open_partition(dumper *d, const char *model, const char *tenant, uint32_t bs)
{
    kvix_buf *b = d->out;
    int rc;
    if (d->model && strcmp(d->model, model) == 0 && strcmp(d->tenant, tenant) == 0)
        return KVIX_OK;
    if ((rc = kvix__sj_raw(b, d->model ? "]}," : "", d->err)))
        return rc;
    size_t ml = strlen(model), tl = strlen(tenant);
    char *key = malloc(ml + tl + 2);
    if (!key)
        return kvix_err_set(d->err, KVIX_ENOMEM, "out of memory");
    memcpy(key, model, ml);
    key[ml] = ':';
    memcpy(key + ml + 1, tenant, tl + 1);
    rc = kvix__sj_str(b, key, ml + tl + 1, d->err);
    free(key);
    if (rc || (rc = kvix__sj_raw(b, ":{\"block_size\":", d->err)) ||
        (rc = kvix__sj_u64(b, bs, d->err)) || (rc = kvix__sj_raw(b, ",\"events\":[", d->err)))
        return rc;
    d->model = model;
    d->tenant = tenant;
    d->nev = 0;
    return KVIX_OK;
}

static int dump_group(void *ctx, const char *model, const char *tenant, uint32_t bs,
                      uint64_t worker, uint32_t dp, int has_eid, uint64_t last_eid,
                      const kvix_block_info *blocks, size_t n)
{
    dumper *d = ctx;
    int rc = open_partition(d, model, tenant, bs);
    if (rc || (worker == UINT64_MAX && n == 0))
        return rc;
    d->has_eid = has_eid;
    d->eid = last_eid;
    if (n == 0) { /* holds nothing but its eid: a cleared event keeps the watermark */
        if (!has_eid)
            return KVIX_OK;
        kvix_event ev;
        kvix_event_init(&ev);
        ev.worker = worker;
        ev.dp = dp;
        if ((rc = put_event_head(d, &ev)) || (rc = kvix__sj_raw(d->out, "\"cleared\"", d->err)))
            return rc;
        return put_event_tail(d, &ev);
    }
    kvix_snapshot_group g = {model, tenant, bs, worker, dp, has_eid, last_eid, blocks, n};
    size_t orphans = 0;
    d->blocks = blocks;
    kvix__hmap_release(&d->where);
    if (kvix__hmap_reserve(&d->where, n))
        return kvix_err_set(d->err, KVIX_ENOMEM, "out of memory for %zu blocks", n);
    for (size_t i = 0; i < n; i++) {
        int inserted;
        size_t *v = kvix__hmap_put(&d->where, &blocks[i].engine, &inserted);
        if (!v)
            return kvix_err_set(d->err, KVIX_ENOMEM, "out of memory for %zu blocks", n);
        *v = i;
    }
    rc = kvix_snapshot_group_events(&g, &d->scratch, dump_event, d, &orphans, d->err);
    return rc ? rc : dump_flush(d, DUMP_FLUSH);
}

static int dump(kvix_index *idx, kvix_buf *out, int fd, int live, kvix_walk_stats *st,
                kvix_err *err)
{
    dumper d = {.out = out, .err = err, .fd = fd};
    kvix_event_init(&d.scratch);
    kvix__hmap_init(&d.where, 1, sizeof(size_t));
    int rc = kvix__sj_raw(out, "{", err);
    if (!rc)
        rc = live ? kvix_index_foreach_live(idx, dump_group, &d, st)
                  : kvix_index_foreach(idx, dump_group, &d);
    if (!rc)
        rc = kvix__sj_raw(out, d.model ? "]}}" : "}", err);
    if (!rc)
        rc = dump_flush(&d, 0);
    kvix_event_release(&d.scratch);
    kvix__hmap_release(&d.where);
    return rc;
}

int kvix_service_dump(kvix_index *idx, kvix_buf *out, kvix_err *err)
{
    return dump(idx, out, -1, 0, NULL, err);
}

int kvix_service_dump_fd(kvix_index *idx, int fd, int live, kvix_walk_stats *st, kvix_err *err)
{
    kvix_buf b;
    kvix_buf_init(&b);
    int rc = dump(idx, &b, fd, live, st, err);
    kvix_buf_release(&b);
    return rc;
}

/* ---- reading a dump back ---- */

static int tier_parse(const char *s, int *out)
{
    for (int m = 0; m < KVIX_MEDIUM_COUNT; m++)
        if (strcmp(s, tier_names[m]) == 0)
            return (*out = m, KVIX_OK);
    return KVIX_EINVAL;
}

/* A run dumped with its position and parent canonical hash (see dump_event):
 * restored as it is, as a snapshot restores it. */
static int load_run(kvix_index *idx, const kvix_event *ev, uint64_t pos, uint64_t pcanon,
                    kvix_err *err)
{
    if (pos == 0 || pos + ev->nblocks > KVIX_INDEX_DEPTH_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "start_position %" PRIu64 " out of range", pos);
    kvix_block_info *b = calloc(ev->nblocks ? ev->nblocks : 1, sizeof *b);
    if (!b)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    uint64_t parent = ev->parent;
    for (size_t i = 0; i < ev->nblocks; i++) {
        b[i].position = (uint32_t)(pos + i);
        b[i].local = ev->blocks[i].local;
        b[i].engine = ev->blocks[i].seq;
        b[i].parent = parent;
        b[i].tiers = 1u << ev->medium;
        b[i].parent_canon = pcanon;
        b[i].canon = kvix_hash_seq_next(pcanon, b[i].local);
        parent = b[i].engine;
        pcanon = b[i].canon;
    }
    int rc = kvix_index_load(idx, ev->model, ev->tenant, ev->bs, ev->worker, ev->dp, b,
                             ev->nblocks, err);
    free(b);
    if (!rc && ev->has_eid)
        rc = kvix_index_set_eid(idx, ev->model, ev->tenant, ev->bs, ev->worker, ev->dp, ev->eid,
                                err);
    return rc;
}

static int read_blocks(json_t *stored, kvix_event *ev, kvix_err *err)
{
    json_t *blocks = json_object_get(stored, "blocks");
    if (!json_is_array(blocks))
        return kvix_err_set(err, KVIX_EINVAL, "\"blocks\" is not an array");
    size_t n = json_array_size(blocks);
    int rc = kvix_event_reserve_blocks(ev, n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        json_t *b = json_array_get(blocks, i);
        if (!json_is_object(b))
            return kvix_err_set(err, KVIX_EINVAL, "block %zu is not an object", i);
        if (!(rc = kvix__sj_get_u64(b, "block_hash", NULL, &ev->blocks[i].seq, err)))
            rc = kvix__sj_get_u64(b, "tokens_hash", NULL, &ev->blocks[i].local, err);
    }
    ev->nblocks = n;
    if (!rc)
        rc = kvix__sj_get_u64(stored, "parent_hash", (int[]){0}, &ev->parent, err);
    if (!rc)
        ev->has_parent = json_is_integer(json_object_get(stored, "parent_hash"));
    return rc;
}

static int read_hashes(json_t *removed, kvix_event *ev, kvix_err *err)
{
    json_t *h = json_object_get(removed, "block_hashes");
    if (!json_is_array(h))
        return kvix_err_set(err, KVIX_EINVAL, "\"block_hashes\" is not an array");
    size_t n = json_array_size(h);
    int rc = kvix_event_reserve_hashes(ev, n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        json_t *v = json_array_get(h, i);
        if (!json_is_integer(v))
            return kvix_err_set(err, KVIX_EINVAL, "block_hashes[%zu] is not a hash", i);
        ev->hashes[i] = (uint64_t)json_integer_value(v);
    }
    ev->nhashes = n;
    return rc;
}

/* One RouterEvent into ev (model, tenant and bs already set). */
static int read_router_event(json_t *re, kvix_event *ev, kvix_err *err)
{
    const char *tier = "device";
    size_t tl;
    int has, rc;
    json_t *e = json_object_get(re, "event");
    if (!json_is_object(re) || !json_is_object(e))
        return kvix_err_set(err, KVIX_EINVAL, "not a RouterEvent object");
    if ((rc = kvix__sj_get_u64(re, "worker_id", NULL, &ev->worker, err)) ||
        (rc = kvix__sj_get_str(re, "storage_tier", &has, &tier, &tl, err)))
        return rc;
    if (tier_parse(has ? tier : "device", &ev->medium))
        return kvix_err_set(err, KVIX_EINVAL, "unknown storage_tier \"%.40s\"", tier);
    uint64_t dp = 0;
    if ((rc = kvix__sj_get_u64(e, "dp_rank", &has, &dp, err)) ||
        (rc = kvix__sj_get_u64(e, "event_id", &has, &ev->eid, err)))
        return rc;
    if (dp > UINT32_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "dp_rank %" PRIu64 " out of range", dp);
    ev->dp = (uint32_t)dp;
    ev->has_eid = has && !json_is_true(json_object_get(re, "kvix_no_eid"));
    json_t *data = json_object_get(e, "data");
    json_t *x;
    if (json_is_string(data) && strcmp(json_string_value(data), "cleared") == 0) {
        ev->type = KVIX_EV_CLEARED;
        return KVIX_OK;
    }
    if ((x = json_object_get(data, "stored")) && json_is_object(x)) {
        ev->type = KVIX_EV_STORED;
        return read_blocks(x, ev, err);
    }
    if ((x = json_object_get(data, "removed")) && json_is_object(x)) {
        ev->type = KVIX_EV_REMOVED;
        return read_hashes(x, ev, err);
    }
    return kvix_err_set(err, KVIX_EINVAL, "event data is neither stored, removed nor cleared");
}

/* One RouterEvent of partition key (model:tenant, split at colon) applied:
 * counted applied or rejected; KVIX_ENOMEM and KVIX_EBLOCKSIZE end the dump. */
static int apply_router_event(kvix_index *idx, const char *key, const char *colon, uint64_t bs,
                              json_t *re, kvix_event *ev, uint64_t *applied, uint64_t *rejected,
                              kvix_err *err)
{
    int rc;
    kvix_event_reset(ev);
    ev->bs = (uint32_t)bs;
    if ((rc = kvix_event_set_name(ev->model, key, (size_t)(colon - key), err)) ||
        (rc = kvix_event_set_name(ev->tenant, colon + 1, strlen(colon + 1), err)))
        return rc;
    if ((rc = read_router_event(re, ev, err)))
        return rc;
    kvix_err e2;
    json_t *st = json_object_get(json_object_get(json_object_get(re, "event"), "data"), "stored");
    uint64_t pos, pcanon;
    int has_pos, has_pc;
    if (st && ((rc = kvix__sj_get_u64(st, "start_position", &has_pos, &pos, err)) ||
               (rc = kvix__sj_get_u64(st, "kvix_parent_canon", &has_pc, &pcanon, err))))
        return rc;
    if (st && has_pos && has_pc)
        rc = load_run(idx, ev, pos, pcanon, &e2);
    else
        rc = kvix_index_apply(idx, ev, NULL, &e2);
    if (rc == KVIX_ENOMEM || rc == KVIX_EBLOCKSIZE)
        return (*err = e2, rc);
    if (rc)
        ++*rejected;
    else
        ++*applied;
    return KVIX_OK;
}

/* ---- the dump's outer structure, walked without building it ----
 *
 * {"model:tenant":{"block_size":N,"events":[RouterEvent,...]},...}: jansson
 * builds a whole document, 10 to 15 times its size (a 300 MB dump took
 * 4.5 GB), so only each RouterEvent is handed to it, one at a time, and the
 * levels around them are walked here: where each value starts and ends
 * (strings and nesting; what is inside is jansson's to check). */
#define DUMP_DEPTH_MAX 64

typedef struct dscan {
    const char *t;
    size_t i, n;
} dscan;

static void ds_ws(dscan *d)
{
    while (d->i < d->n && strchr(" \t\r\n", d->t[d->i]) && d->t[d->i])
        d->i++;
}

static int ds_bad(const dscan *d, const char *what, kvix_err *err)
{
    return kvix_err_set(err, KVIX_EINVAL, "malformed dump at byte %zu: %s", d->i + 1, what);
}

/* Past the string at d->i (a '"'). */
static int ds_string(dscan *d, kvix_err *err)
{
    for (d->i++; d->i < d->n; d->i++) {
        if (d->t[d->i] == '\\')
            d->i++;
        else if (d->t[d->i] == '"')
            return (d->i++, KVIX_OK);
    }
    return ds_bad(d, "unterminated string", err);
}

/* Past the value at d->i, whatever it is. */
static int ds_value(dscan *d, kvix_err *err)
{
    int depth = 0;
    do {
        ds_ws(d);
        if (d->i >= d->n)
            return ds_bad(d, "unexpected end", err);
        char c = d->t[d->i];
        if (c == '"') {
            if (ds_string(d, err))
                return KVIX_EINVAL;
        } else if (c == '[' || c == '{') {
            if (++depth > DUMP_DEPTH_MAX)
                return ds_bad(d, "nested too deep", err);
            d->i++;
        } else if (c == ']' || c == '}') {
            if (--depth < 0)
                return ds_bad(d, "unbalanced brackets", err);
            d->i++;
        } else if (c == ',' || c == ':') {
            if (!depth)
                return ds_bad(d, "a value expected", err);
            d->i++;
        } else { /* a number, true, false, null */
            size_t from = d->i;
            while (d->i < d->n && !strchr(",:]} \t\r\n\"[{", d->t[d->i]) && d->t[d->i])
                d->i++;
            if (d->i == from)
                return ds_bad(d, "a value expected", err);
        }
    } while (depth > 0);
    return KVIX_OK;
}

/* The next member of the object being walked: its key (decoded by jansson,
 * at most cap - 1 bytes) and its value's span [*v, d->i); 0 at the object's
 * end, 1 for a member, or an error. first: right after the '{'. */
static int ds_member(dscan *d, int first, char *key, size_t cap, size_t *v, kvix_err *err)
{
    ds_ws(d);
    if (d->i < d->n && d->t[d->i] == '}')
        return (d->i++, 0);
    if (!first) {
        if (d->i >= d->n || d->t[d->i] != ',')
            return ds_bad(d, "',' or '}' expected", err);
        d->i++;
        ds_ws(d);
    }
    if (d->i >= d->n || d->t[d->i] != '"')
        return ds_bad(d, "a key expected", err);
    size_t k0 = d->i;
    if (ds_string(d, err))
        return KVIX_EINVAL;
    json_t *ks = json_loadb(d->t + k0, d->i - k0, JSON_DECODE_ANY, NULL);
    const char *kv = json_string_value(ks);
    if (!kv || strlen(kv) >= cap) {
        json_decref(ks);
        return ds_bad(d, "a key that is not a string or is too long", err);
    }
    snprintf(key, cap, "%s", kv);
    json_decref(ks);
    ds_ws(d);
    if (d->i >= d->n || d->t[d->i] != ':')
        return ds_bad(d, "':' expected", err);
    d->i++;
    ds_ws(d);
    *v = d->i;
    return ds_value(d, err) ? KVIX_EINVAL : 1;
}

static int ds_open(dscan *d, char c, const char *what, kvix_err *err)
{
    ds_ws(d);
    if (d->i >= d->n || d->t[d->i] != c)
        return ds_bad(d, what, err);
    d->i++;
    return KVIX_OK;
}

/* One partition's object at [from, to): its block_size first (wherever it
 * is), then its events, each parsed alone and applied. */
static int apply_partition(kvix_index *idx, const char *key, const char *t, size_t from,
                           size_t to, kvix_event *ev, uint64_t *applied, uint64_t *rejected,
                           kvix_err *err)
{
    const char *colon = strchr(key, ':');
    if (!colon)
        return kvix_err_set(err, KVIX_EINVAL, "dump key \"%.60s\" is not model:tenant", key);
    dscan d = {t, from, to};
    if (ds_open(&d, '{', "dump entry is not an object", err))
        return kvix_err_set(err, KVIX_EINVAL, "dump entry \"%.60s\" is not an object", key);
    char mk[32];
    size_t v, bs_at = 0, ev_at = 0, ev_end = 0;
    int rc, first = 1, has_bs = 0, has_ev = 0;
    while ((rc = ds_member(&d, first, mk, sizeof mk, &v, err)) == 1) {
        first = 0;
        if (!strcmp(mk, "block_size"))
            has_bs = 1, bs_at = v;
        else if (!strcmp(mk, "events"))
            has_ev = 1, ev_at = v, ev_end = d.i;
    }
    if (rc)
        return rc;
    uint64_t bs = 0;
    json_t *bj = NULL;
    dscan b = {t, bs_at, to};
    if (has_bs && !ds_value(&b, NULL)) /* the value alone */
        bj = json_loadb(t + bs_at, b.i - bs_at, JSON_DECODE_ANY, NULL);
    if (!has_bs || !json_is_integer(bj) || json_integer_value(bj) < 0) {
        json_decref(bj);
        return kvix_err_set(err, KVIX_EINVAL, "\"block_size\" of \"%.60s\" is missing or not "
                            "a number", key);
    }
    bs = (uint64_t)json_integer_value(bj);
    json_decref(bj);
    if (bs == 0 || bs > KVIX_BS_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "block_size %" PRIu64 " out of range", bs);
    dscan e = {t, ev_at, ev_end};
    if (!has_ev || ds_open(&e, '[', "", NULL))
        return kvix_err_set(err, KVIX_EINVAL, "\"events\" of \"%.60s\" is not an array", key);
    for (int n = 0;; n++) {
        ds_ws(&e);
        if (e.i < e.n && e.t[e.i] == ']')
            return KVIX_OK;
        if (n && (e.i >= e.n || e.t[e.i] != ',' || (e.i++, 0)))
            return ds_bad(&e, "',' or ']' expected", err);
        ds_ws(&e);
        size_t at = e.i;
        if (ds_value(&e, err))
            return KVIX_EINVAL;
        int arena = kvix__json_arena_begin();
        json_t *re = kvix_json_u64_loadb(t + at, e.i - at, err);
        rc = re ? apply_router_event(idx, key, colon, bs, re, ev, applied, rejected, err)
                : KVIX_EINVAL;
        if (!arena)
            json_decref(re);
        else
            kvix__json_arena_end();
        if (rc)
            return rc;
    }
}

int kvix_service_dump_apply(kvix_index *idx, const char *body, size_t len, uint64_t *applied,
                            uint64_t *rejected, kvix_err *err)
{
    *applied = *rejected = 0;
    dscan d = {body, 0, len};
    if (ds_open(&d, '{', "a dump is a JSON object", err))
        return kvix_err_set(err, KVIX_EINVAL, "a dump is a JSON object");
    kvix_event ev;
    kvix_event_init(&ev);
    char key[2 * KVIX_NAME_MAX + 2];
    size_t v;
    int rc, first = 1;
    while ((rc = ds_member(&d, first, key, sizeof key, &v, err)) == 1) {
        first = 0;
        if ((rc = apply_partition(idx, key, body, v, d.i, &ev, applied, rejected, err)))
            break;
    }
    ds_ws(&d);
    if (!rc && d.i != d.n)
        rc = ds_bad(&d, "text after the dump", err);
    kvix_event_release(&ev);
    return rc;
}
