/* POST /query and /query_by_hash: Dynamo's bodies and answer, and kvix's own
 * query objects (lib/net/service.c keeps each server thread's answer). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvix/service.h"
#include "kvix/stream.h"
#include "json_arena_int.h"
#include "dec64_int.h"
#include "service_int.h"
#include "service_priv.h"

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- queries ---- */

static int score_less(const kvix_score *x, const kvix_score *y)
{
    return x->worker != y->worker ? x->worker < y->worker : x->dp < y->dp;
}

/* The end of the run in (worker, dp) order that starts at ord[i]. */
static size_t run_end(const kvix_score *v, const uint32_t *ord, size_t i, size_t n)
{
    for (i++; i < n && !score_less(&v[ord[i]], &v[ord[i - 1]]); i++)
        ;
    return i;
}

/* The order of the n scores at v by (worker, dp), as indices into v, in ord
 * (room for 2n: the order and a scratch half); returns the half that holds it.
 * The index answers by blocks (desc), then by worker and dp (kvix/index.h):
 * runs of one block count, each in order already, and few of them. Adjacent
 * runs are merged pairwise, moving 4-byte indices, not the 40-byte scores
 * (the scores themselves stay as the index left them). */
static const uint32_t *score_order(const kvix_score *v, size_t n, uint32_t *ord)
{
    uint32_t *src = ord, *dst = ord + n;
    for (size_t i = 0; i < n; i++)
        src[i] = (uint32_t)i;
    if (n < 2 || run_end(v, src, 0, n) == n)
        return src;
    for (;;) {
        size_t merged = 0; /* runs this pass wrote */
        for (size_t i = 0; i < n; merged++) {
            size_t m = run_end(v, src, i, n), e = m < n ? run_end(v, src, m, n) : n;
            size_t a = i, b = m, o = i;
            while (a < m && b < e)
                dst[o++] = score_less(&v[src[b]], &v[src[a]]) ? src[b++] : src[a++];
            while (a < m)
                dst[o++] = src[a++];
            while (b < e)
                dst[o++] = src[b++];
            i = e;
        }
        uint32_t *t = src;
        src = dst;
        dst = t;
        if (merged == 1)
            return src;
    }
}

/* The most one score takes in a map: },"W":{"D":V, and of it the key
 * text before V: },"W":{"D": */
#define NESTED_PER (3 + KVIX_DEC64_MAX + 4 + 10 + 2 + KVIX_DEC64_MAX + 1)
#define NESTED_KEY 40
_Static_assert(3 + KVIX_DEC64_MAX + 4 + 10 + 2 <= NESTED_KEY && NESTED_KEY <= NESTED_PER,
               "a key fits the fixed copy, and the copy one score's room");

/* Both maps {"<worker>":{"<dp>":value,...},...} of Dynamo's answer in one
 * pass over scores sorted by worker: scores at s, tree_sizes at t (room for
 * the worst case at each, plus NESTED_KEY). The two maps have the same keys:
 * each key is written once, at s, and copied to t with a fixed-size copy
 * (the second rendering of the keys was a third of the answer's cost). The
 * ends of both maps are returned in *s_end and *t_end. */
static void put_maps(char *s, char *t, const kvix_score *v, const uint32_t *ord, size_t n,
                     uint64_t bs, char **s_end, char **t_end)
{
    *s++ = '{';
    *t++ = '{';
    for (size_t i = 0; i < n; i++) {
        const kvix_score *c = &v[ord[i]];
        char *k = s;
        if (i == 0 || c->worker != v[ord[i - 1]].worker) {
            if (i) {
                memcpy(s, "},", 2);
                s += 2;
            }
            *s++ = '"';
            s += kvix_dec64_put(c->worker, s);
            memcpy(s, "\":{", 3);
            s += 3;
        } else {
            *s++ = ',';
        }
        *s++ = '"';
        s += kvix_dec64_put(c->dp, s);
        memcpy(s, "\":", 2);
        s += 2;
        memcpy(t, k, NESTED_KEY); /* the key and some bytes past it, overwritten next */
        t += s - k;
        s += kvix_dec64_put((uint64_t)c->blocks * bs, s);
        t += kvix_dec64_put(c->held, t);
    }
    if (n) {
        *s++ = '}';
        *t++ = '}';
    }
    *s++ = '}';
    *t++ = '}';
    *s_end = s;
    *t_end = t;
}

/* Dynamo's answer shape, over the scores in (worker, dp) order. */
static int put_dynamo_answer(const kvix_answer *ans, kvix_buf *b, kvix_err *err)
{
    static const char head[] = "{\"scores\":", mid[] = ",\"frequencies\":[],\"tree_sizes\":";
    size_t n = ans->nscores;
    if (n > UINT32_MAX || n > (SIZE_MAX / 4 - 256) / NESTED_PER)
        return kvix_err_set(err, KVIX_ELIMIT, "too many scores");
    size_t room = n * NESTED_PER + 4 + NESTED_KEY; /* one map's worst case */
    int rc = kvix_buf_reserve(b, sizeof head + 2 * room + sizeof mid + 2 + 32, err);
    if (rc)
        return rc;
    uint32_t local[2 * 512], *ord = n <= 512 ? local : malloc(2 * n * sizeof *ord);
    if (!ord)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu scores", n);
    /* scores in place; tree_sizes after scores' worst case, then moved down */
    char *p = b->data + b->len, *s_end, *t_end;
    memcpy(p, head, sizeof head - 1);
    p += sizeof head - 1;
    char *t = p + room + sizeof mid;
    put_maps(p, t, ans->scores, score_order(ans->scores, n, ord), n, ans->bs, &s_end, &t_end);
    if (ord != local)
        free(ord);
    memcpy(s_end, mid, sizeof mid - 1);
    s_end += sizeof mid - 1;
    memmove(s_end, t, (size_t)(t_end - t));
    s_end += t_end - t;
    if (ans->top) { /* asked for ("top"): say how many were left out */
        static const char om[] = ",\"omitted\":";
        memcpy(s_end, om, sizeof om - 1);
        s_end += sizeof om - 1;
        s_end += kvix_dec64_put(ans->omitted, s_end);
    }
    *s_end++ = '}';
    *s_end = '\0';
    b->len = (size_t)(s_end - b->data);
    return KVIX_OK;
}

/* model_name, tenant_id?, lora_name? of a Dynamo query into q. */
static int read_partition(json_t *o, kvix_event *q, int with_lora, kvix_err *err)
{
    const char *s;
    size_t n;
    int has, rc;
    if ((rc = kvix__sj_get_str(o, "model_name", NULL, &s, &n, err)) ||
        (rc = kvix_event_set_name(q->model, s, n, err)) ||
        (rc = kvix__sj_get_str(o, "tenant_id", &has, &s, &n, err)) ||
        (has && (rc = kvix_event_set_name(q->tenant, s, n, err))))
        return rc;
    if (with_lora && ((rc = kvix__sj_get_str(o, "lora_name", &has, &s, &n, err)) ||
                      (has && (rc = kvix_event_set_name(q->lora, s, n, err)))))
        return rc;
    return KVIX_OK;
}

static int read_u64_array(json_t *o, const char *key, const kvix_u64_refs *refs, kvix_event *q,
                          int tokens, kvix_err *err)
{
    json_t *a = json_object_get(o, key);
    if (!a)
        return kvix_err_set(err, KVIX_EINVAL, "missing \"%s\"", key);
    if (!json_is_array(a))
        return kvix_err_set(err, KVIX_EINVAL, "\"%s\" is not an array", key);
    size_t n = json_array_size(a);
    int rc = tokens ? kvix_event_reserve_tokens(q, n, err) : kvix_event_reserve_hashes(q, n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v))
            return kvix_err_set(err, KVIX_EINVAL, "%s[%zu] is not an unsigned integer", key, i);
        uint64_t u = kvix_u64_ref(refs, json_integer_value(v));
        if (tokens && u > UINT32_MAX)
            return kvix_err_set(err, KVIX_ERANGE, "%s[%zu] = %" PRIu64 " is above 2^32-1", key,
                                i, u);
        if (tokens)
            q->tokens[i] = (uint32_t)u;
        else
            q->hashes[i] = u;
    }
    if (tokens) {
        q->ntokens = n;
        q->has_tokens = 1;
    } else {
        q->nhashes = n;
    }
    return rc;
}

/* kvix's "top" in a Dynamo query: its best K workers. Without it, the
 * full list, whatever the index's default (Dynamo's routers read every
 * worker's score). */
static int read_top(json_t *o, const kvix_u64_refs *refs, kvix_event *q, kvix_err *err)
{
    json_t *t = json_object_get(o, "top");
    q->has_top = 1;
    q->top = 0;
    if (!t || json_is_null(t))
        return KVIX_OK;
    if (!json_is_integer(t))
        return kvix_err_set(err, KVIX_EINVAL, "\"top\" is not an unsigned integer");
    uint64_t u = kvix_u64_ref(refs, json_integer_value(t));
    if (u > UINT32_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "\"top\" out of range (0 to %u)", UINT32_MAX);
    q->top = (uint32_t)u;
    return KVIX_OK;
}

/* The kvix answer line of q with its explanation (kvix_index_explain), the
 * index quiet meanwhile, as for /dump: writers wait the few milliseconds it
 * takes to read the workers' own blocks and records. */
static int explain_answer(kvix_service *s, const kvix_event *q, kvix_answer *ans, kvix_buf *out,
                          kvix_err *e)
{
    kvix_explain *x = malloc(sizeof *x);
    if (!x)
        return kvix_err_set(e, KVIX_ENOMEM, "out of memory");
    kvix_explain_init(x);
    kvix_index_quiet_begin(s->o.idx);
    int rc = kvix_index_explain(s->o.idx, q, ans, x, e);
    kvix_index_quiet_end(s->o.idx);
    if (!rc) {
        out->len = 0;
        rc = kvix_answer_explain_to_json(ans, q, x, out, e);
    }
    kvix_explain_release(x);
    free(x);
    return rc;
}

/* kvix's "workers" in a Dynamo-shaped /explain body: worker ids to explain. */
static int read_workers(json_t *o, const kvix_u64_refs *refs, kvix_event *q, kvix_err *err)
{
    json_t *a = json_object_get(o, "workers");
    if (!a || json_is_null(a))
        return KVIX_OK;
    if (!json_is_array(a))
        return kvix_err_set(err, KVIX_EINVAL, "\"workers\" is not an array");
    if (json_array_size(a) > KVIX_QUERY_WORKERS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "\"workers\" names %zu workers (limit %d)",
                            json_array_size(a), KVIX_QUERY_WORKERS_MAX);
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *v = json_array_get(a, i);
        uint64_t u = json_is_integer(v) ? kvix_u64_ref(refs, json_integer_value(v)) : UINT64_MAX;
        if (u > KVIX_WORKER_MAX)
            return kvix_err_set(err, KVIX_EINVAL, "workers[%zu] is not a worker id", i);
        q->xworkers[q->nxworkers++] = u;
    }
    return KVIX_OK;
}

/* POST /query and /query_by_hash in Dynamo's shape; POST /explain with such a
 * body (explain: by hash when it has "block_hashes") answers the kvix line
 * with its explanation, an unknown partition included. */
static void dynamo_query(kvix_service *s, json_t *o, const kvix_u64_refs *refs, int by_hash,
                         int explain, kvix_service_response *r)
{
    kvix_err e;
    kvix_event q;
    kvix_event_init(&q);
    q.type = KVIX_EV_QUERY;
    kvix_answer *ans = kvix__service_answer(s);
    int rc = ans ? read_partition(o, &q, !by_hash, &e)
                 : kvix_err_set(&e, KVIX_ENOMEM, "out of memory");
    if (!rc)
        rc = read_u64_array(o, by_hash ? "block_hashes" : "token_ids", refs, &q, !by_hash, &e);
    if (!rc)
        rc = read_top(o, refs, &q, &e);
    if (!rc && explain)
        rc = read_workers(o, refs, &q, &e);
    if (!rc && explain) {
        q.explain = 1;
        rc = explain_answer(s, &q, ans, &r->body, &e);
        if (rc)
            kvix__service_respond_err(r, &e);
        else {
            r->status = 200;
            r->content_type = "application/x-ndjson";
        }
        kvix_event_release(&q);
        return;
    }
    if (!rc && !kvix_index_block_size(s->o.idx, q.model, q.tenant))
        rc = kvix_err_set(&e, KVIX_ENOTFOUND, "unknown model \"%s\" (tenant \"%s\")", q.model,
                          q.tenant);
    double t0 = mono_now();
    if (!rc)
        rc = kvix_index_query_event(s->o.idx, &q, ans, &e);
    if (!rc) {
        kvix__service_observe_query(s, mono_now() - t0);
        r->body.len = 0;
        rc = put_dynamo_answer(ans, &r->body, &e);
    }
    if (rc) {
        kvix__service_respond_err(r, &e);
    } else {
        r->status = 200;
        r->content_type = "application/json";
    }
    kvix_event_release(&q);
}

/* POST /query with a kvix query object: the kvix answer line, explained
 * when it says "explain" (or comes to /explain). */
static void kvix_query(kvix_service *s, const char *body, size_t len, int explain,
                       kvix_service_response *r)
{
    kvix_err e;
    kvix_event q;
    kvix_event_init(&q);
    kvix_answer *ans = kvix__service_answer(s);
    int rc = ans ? kvix_event_from_json(body, len, &q, &e)
                 : kvix_err_set(&e, KVIX_ENOMEM, "out of memory");
    if (!rc && q.type != KVIX_EV_QUERY)
        rc = kvix_err_set(&e, KVIX_EINVAL, "a %s event is not a query (events come from the "
                          "input or the engines)", kvix_event_type_name(q.type));
    double t0 = mono_now();
    if (!rc && (q.explain || explain)) {
        q.explain = 1;
        rc = explain_answer(s, &q, ans, &r->body, &e);
    } else if (!rc) {
        rc = kvix_index_query_event(s->o.idx, &q, ans, &e);
        if (!rc) {
            kvix__service_observe_query(s, mono_now() - t0);
            r->body.len = 0;
            rc = kvix_answer_to_json(ans, &q, &r->body, &e);
        }
    }
    if (rc) {
        kvix__service_respond_err(r, &e);
    } else {
        r->status = 200;
        r->content_type = "application/x-ndjson";
    }
    kvix_event_release(&q);
}

static void post_query_json(kvix_service *s, const char *body, size_t len, int by_hash,
                            int explain, int arena, kvix_service_response *r)
{
    kvix_err e;
    kvix_service_thread *ts = kvix__service_thread_get(s);
    if (!ts) {
        kvix__service_respond_error(r, 500, "out of memory");
        return;
    }
    json_t *o = kvix__json_u64_loadb_refs(body, len, &ts->refs, &e);
    if (!o && e.code == KVIX_ELIMIT) { /* no parse at all: not as a kvix query either */
        kvix__service_respond_error(r, 413, e.msg);
        return;
    }
    if (!o && !by_hash) {
        /* A kvix query may hold what the u64 reader refuses (a negative
         * token, to be told apart); a Dynamo query gets the reader's error. */
        json_t *plain = json_loadb(body, len, 0, NULL);
        int dynamo = json_object_get(plain, "model_name") != NULL;
        if (!arena)
            json_decref(plain);
        if (!dynamo) {
            kvix_query(s, body, len, explain, r);
            return;
        }
    }
    if (!o) {
        kvix__service_respond_err(r, &e);
        return;
    }
    if (!json_is_object(o))
        kvix__service_respond_error(r, 400, "the body is not a JSON object");
    else if (by_hash || json_object_get(o, "model_name"))
        dynamo_query(s, o, &ts->refs,
                     by_hash || (explain && json_object_get(o, "block_hashes")), explain, r);
    else
        kvix_query(s, body, len, explain, r);
    if (!arena)
        json_decref(o);
}

static int budget_take(void *ctx, size_t n)
{
    return kvix__conns_mem_take(ctx, n);
}

static void budget_give(void *ctx, size_t n)
{
    kvix__conns_mem_give(ctx, n);
}

/* POST /query, /query_by_hash, /explain. The body's jansson values live in
 * this thread's arena (lib/codec/json_arena_int.h), dropped at once after the answer:
 * jansson's malloc and free per value were ~7 % of a /query_by_hash. */
void kvix__service_post_query(kvix_service *s, const char *body, size_t len, int by_hash,
                             int explain, kvix_service_response *r)
{
    /* behind the server, the parse takes its memory from what every
     * request shares (kvix_service_limits.memory_max) */
    kvix_json_budget b = {budget_take, budget_give, s->conns};
    int arena = kvix__json_arena_begin_budget(s->conns ? &b : NULL);
    post_query_json(s, body, len, by_hash, explain, arena, r);
    if (arena && kvix__json_arena_refused()) {
        char msg[128];
        snprintf(msg, sizeof msg, "the server holds all the request memory it may (%zu bytes): "
                 "try again", s->o.limits.memory_max);
        kvix__service_respond_error(r, 503, msg);
    }
    if (arena)
        kvix__json_arena_end();
}
