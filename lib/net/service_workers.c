/* POST /register, POST /unregister, GET /workers: the engine subscriptions
 * behind the service (kvix/enginesub.h), in the shapes of Dynamo's
 * standalone indexer (kvindex(1), SERVICE). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvix/enginesub.h"
#include "service_int.h"
#include "service_priv.h"

/* Subscriptions are grouped by who made them (kvix_enginesub_replace);
 * kvindex uses 0 (-w) and 1 (--workers-file). */
#define GROUP_REGISTERED KVIX_SERVICE_GROUP

static int no_sub(kvix_service *s, kvix_service_response *r)
{
    if (s->o.sub)
        return 0;
    char msg[512];
    snprintf(msg, sizeof msg, "this service has no engine subscriptions%s%s",
             s->o.no_sub_why ? ": " : "", s->o.no_sub_why ? s->o.no_sub_why : "");
    kvix__service_respond_error(r, 503, msg);
    return 1;
}

/* The request object, or NULL after answering 400. */
static json_t *body_object(const char *body, size_t len, kvix_service_response *r)
{
    kvix_err e;
    json_t *o = kvix_json_u64_loadb(body, len, &e);
    if (!o) {
        kvix__service_respond_err(r, &e);
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        kvix__service_respond_error(r, 400, "the body is not a JSON object");
        return NULL;
    }
    return o;
}

/* A string member into dst[cap]: present, no NUL inside, fits. */
static int get_name(json_t *o, const char *key, int *present, char *dst, size_t cap,
                    kvix_err *e)
{
    const char *v;
    size_t n;
    int rc = kvix__sj_get_str(o, key, present, &v, &n, e);
    if (rc || (present && !*present))
        return rc;
    if (n == 0)
        return kvix_err_set(e, KVIX_EINVAL, "\"%s\" is empty", key);
    if (strlen(v) != n)
        return kvix_err_set(e, KVIX_EINVAL, "\"%s\" holds a NUL character", key);
    if (n >= cap)
        return kvix_err_set(e, KVIX_ELIMIT, "\"%s\" is longer than %zu bytes", key, cap - 1);
    memcpy(dst, v, n + 1);
    return KVIX_OK;
}

static int get_u64_max(json_t *o, const char *key, int *present, uint64_t min, uint64_t max,
                       uint64_t *out, kvix_err *e)
{
    int rc = kvix__sj_get_u64(o, key, present, out, e);
    if (rc || (present && !*present))
        return rc;
    if (*out < min || *out > max)
        return kvix_err_set(e, KVIX_ERANGE, "\"%s\" = %" PRIu64 " is out of range (%" PRIu64
                            "..%" PRIu64 ")", key, *out, min, max);
    return KVIX_OK;
}

/* A registration's request into sp: every field checked. */
static int read_registration(const kvix_enginesub_config *cfg, json_t *o, kvix_enginesub_spec *sp,
                             kvix_err *e)
{
    uint64_t id, bs, dp = 0;
    int has;
    int rc;
    kvix_enginesub_spec_init(sp);
    if ((rc = get_u64_max(o, "instance_id", NULL, 0, KVIX_WORKER_MAX, &id, e)) ||
        (rc = get_name(o, "endpoint", NULL, sp->endpoint, sizeof sp->endpoint, e)) ||
        (rc = get_name(o, "model_name", NULL, sp->model, sizeof sp->model, e)) ||
        (rc = get_u64_max(o, "block_size", NULL, 1, KVIX_BS_MAX, &bs, e)) ||
        (rc = get_name(o, "tenant_id", &has, sp->tenant, sizeof sp->tenant, e)) ||
        (rc = get_u64_max(o, "dp_rank", &has, 0, UINT32_MAX - 1, &dp, e)) ||
        (rc = get_name(o, "replay_endpoint", &has, sp->replay, sizeof sp->replay, e)))
        return rc;
    if (!sp->tenant[0])
        memcpy(sp->tenant, "default", sizeof "default");
    /* /dump's keys are "model:tenant", split at the first ':' by every reader
     * (Dynamo's and kvix's): a model with a ':' would come back from a peer
     * under another model and tenant. */
    if (strchr(sp->model, ':'))
        return kvix_err_set(e, KVIX_EINVAL,
                            "\"model_name\" \"%.64s\" contains ':', which /dump's "
                            "\"model:tenant\" keys cannot carry",
                            sp->model);
    const char *bad = NULL;
    if ((rc = kvix_enginesub_endpoint_check(sp->endpoint, cfg->bind, e)))
        bad = "endpoint";
    else if (sp->replay[0] && (rc = kvix_enginesub_endpoint_check(sp->replay, false, e)))
        bad = "replay_endpoint";
    if (bad) {
        char m[KVIX_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", e->msg);
        return kvix_err_set(e, KVIX_EINVAL, "bad \"%s\": %s", bad, m);
    }
    sp->worker = id;
    sp->dp = (uint32_t)dp;
    sp->block_size = (uint32_t)bs;
    return KVIX_OK;
}

typedef struct bs_check {
    const kvix_enginesub_config *cfg;
    const kvix_enginesub_spec *sp;
    uint32_t other; /* the conflicting block size, 0: none */
} bs_check;

static int check_bs(void *ctx, const kvix_enginesub_status *st)
{
    bs_check *c = ctx;
    const kvix_enginesub_spec *x = st->spec;
    const char *model = x->model[0] ? x->model : c->cfg->model;
    const char *tenant = x->tenant[0] ? x->tenant : c->cfg->tenant;
    uint32_t bs = x->block_size ? x->block_size : c->cfg->block_size;
    if (bs && bs != c->sp->block_size && !strcmp(model, c->sp->model) &&
        !strcmp(tenant, c->sp->tenant)) {
        c->other = bs;
        return 1;
    }
    return 0;
}

void kvix__service_register(kvix_service *s, const char *body, size_t len,
                           kvix_service_response *r)
{
    if (no_sub(s, r))
        return;
    json_t *o = body_object(body, len, r);
    if (!o)
        return;
    kvix_enginesub_spec sp;
    kvix_err e;
    int rc = read_registration(s->o.sub_cfg, o, &sp, &e);
    json_decref(o);
    if (rc) {
        kvix__service_respond_error(r, 400, e.msg);
        return;
    }
    /* The checks and the add as one: two registrations of one partition
     * with different block sizes cannot both pass. */
    pthread_mutex_lock(&s->register_mu);
    uint32_t have = kvix_index_block_size(s->o.idx, sp.model, sp.tenant);
    bs_check c = {s->o.sub_cfg, &sp, have != sp.block_size ? have : 0};
    if (!c.other)
        kvix_enginesub_list(s->o.sub, check_bs, &c);
    if (c.other)
        rc = kvix_err_set(&e, KVIX_EBLOCKSIZE,
                          "block_size %" PRIu32 " differs from the %" PRIu32
                          " of model \"%s\" tenant \"%s\"",
                          sp.block_size, c.other, sp.model, sp.tenant);
    else
        rc = kvix_enginesub_add(s->o.sub, &sp, GROUP_REGISTERED, &e);
    pthread_mutex_unlock(&s->register_mu);
    if (rc == KVIX_ELIMIT) /* already registered: the endpoint, or the worker and rank */
        kvix__service_respond_error(r, 409, e.msg);
    else if (rc == KVIX_EBUSY) /* the subscriber's limit: not now, maybe after an unregister */
        kvix__service_respond_error(r, 503, e.msg);
    else if (rc)
        kvix__service_respond_err(r, &e);
    else
        kvix__service_respond(r, 201, "application/json", "{\"status\":\"ok\"}");
}

void kvix__service_unregister(kvix_service *s, const char *body, size_t len,
                             kvix_service_response *r)
{
    if (no_sub(s, r))
        return;
    json_t *o = body_object(body, len, r);
    if (!o)
        return;
    char model[KVIX_NAME_MAX], tenant[KVIX_NAME_MAX];
    uint64_t id, dp = UINT32_MAX;
    int has_tenant, has_dp;
    kvix_err e;
    int rc = get_u64_max(o, "instance_id", NULL, 0, UINT64_MAX, &id, &e);
    if (!rc)
        rc = get_name(o, "model_name", NULL, model, sizeof model, &e);
    if (!rc)
        rc = get_name(o, "tenant_id", &has_tenant, tenant, sizeof tenant, &e);
    if (!rc)
        rc = get_u64_max(o, "dp_rank", &has_dp, 0, UINT32_MAX - 1, &dp, &e);
    json_decref(o);
    if (rc) {
        kvix__service_respond_error(r, 400, e.msg);
        return;
    }
    size_t n = kvix_enginesub_remove_worker(s->o.sub, id, model,
                                            has_tenant ? tenant : NULL, (uint32_t)dp);
    if (n) {
        kvix__service_respond(r, 200, "application/json", "{\"status\":\"ok\"}");
        return;
    }
    char m[KVIX_ERR_MSG_MAX];
    snprintf(m, sizeof m, "no registration of instance %" PRIu64 " for model \"%.64s\"%s%.64s%s",
             id, model, has_tenant ? " tenant \"" : "", has_tenant ? tenant : "",
             has_tenant ? "\"" : "");
    kvix__service_respond_error(r, 404, m);
}

/* ---- GET /workers ---- */

typedef struct reg {
    uint64_t worker;
    uint32_t dp;
    char endpoint[KVIX_ENGINESUB_ENDPOINT_MAX];
} reg;

typedef struct regs {
    reg *v;
    size_t n, cap;
    int nomem;
} regs;

static int collect(void *ctx, const kvix_enginesub_status *st)
{
    regs *g = ctx;
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 16;
        reg *v = realloc(g->v, cap * sizeof *v);
        if (!v) {
            g->nomem = 1;
            return 1;
        }
        g->v = v;
        g->cap = cap;
    }
    reg *x = &g->v[g->n++];
    x->worker = st->spec->worker;
    x->dp = st->spec->dp;
    memcpy(x->endpoint, st->spec->endpoint, sizeof x->endpoint);
    return 0;
}

static int by_worker_dp(const void *a, const void *b)
{
    const reg *x = a, *y = b;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return x->dp < y->dp ? -1 : x->dp > y->dp;
}

static int put_workers(kvix_buf *b, const reg *v, size_t n, kvix_err *e)
{
    int rc = kvix__sj_raw(b, "[", e);
    for (size_t i = 0; !rc && i < n; i++) {
        if (i == 0 || v[i].worker != v[i - 1].worker) {
            if ((rc = kvix__sj_raw(b, i ? "}},{\"instance_id\":" : "{\"instance_id\":", e)) ||
                (rc = kvix__sj_u64(b, v[i].worker, e)) ||
                (rc = kvix__sj_raw(b, ",\"endpoints\":{\"", e)))
                break;
        } else if ((rc = kvix__sj_raw(b, ",\"", e))) {
            break;
        }
        if ((rc = kvix__sj_u64(b, v[i].dp, e)) || (rc = kvix__sj_raw(b, "\":", e)) ||
            (rc = kvix__sj_str(b, v[i].endpoint, strlen(v[i].endpoint), e)))
            break;
    }
    if (!rc)
        rc = kvix__sj_raw(b, n ? "}}]" : "]", e);
    return rc;
}

void kvix__service_workers(kvix_service *s, kvix_service_response *r)
{
    if (!s->o.sub) { /* no subscriptions: none registered */
        kvix__service_respond(r, 200, "application/json", "[]");
        return;
    }
    regs g = {NULL, 0, 0, 0};
    kvix_enginesub_list(s->o.sub, collect, &g);
    kvix_err e;
    int rc = g.nomem ? kvix_err_set(&e, KVIX_ENOMEM, "out of memory") : KVIX_OK;
    if (!rc) {
        if (g.n > 1)
            qsort(g.v, g.n, sizeof *g.v, by_worker_dp);
        r->body.len = 0;
        rc = put_workers(&r->body, g.v, g.n, &e);
    }
    free(g.v);
    if (rc) {
        kvix__service_respond_err(r, &e);
        return;
    }
    r->status = 200;
    r->content_type = "application/json";
}

/* ---- registrations in a snapshot (extension record 65) ---- */

typedef struct enc {
    kvix_buf *b;
    size_t n;
    int rc;
    kvix_err *e;
} enc;

static int put_registration(void *ctx, const kvix_enginesub_status *st)
{
    enc *x = ctx;
    const kvix_enginesub_spec *sp = st->spec;
    if (st->group != GROUP_REGISTERED)
        return 0;
    kvix_buf *b = x->b;
    kvix_err *e = x->e;
    int rc;
    if ((rc = kvix__sj_raw(b, x->n ? ",{\"instance_id\":" : "{\"instance_id\":", e)) ||
        (rc = kvix__sj_u64(b, sp->worker, e)) || (rc = kvix__sj_raw(b, ",\"endpoint\":", e)) ||
        (rc = kvix__sj_str(b, sp->endpoint, strlen(sp->endpoint), e)) ||
        (rc = kvix__sj_raw(b, ",\"model_name\":", e)) ||
        (rc = kvix__sj_str(b, sp->model, strlen(sp->model), e)) ||
        (rc = kvix__sj_raw(b, ",\"tenant_id\":", e)) ||
        (rc = kvix__sj_str(b, sp->tenant, strlen(sp->tenant), e)) ||
        (rc = kvix__sj_raw(b, ",\"block_size\":", e)) ||
        (rc = kvix__sj_u64(b, sp->block_size, e)) || (rc = kvix__sj_raw(b, ",\"dp_rank\":", e)) ||
        (rc = kvix__sj_u64(b, sp->dp, e)))
        return x->rc = rc;
    if (sp->replay[0] && ((rc = kvix__sj_raw(b, ",\"replay_endpoint\":", e)) ||
                          (rc = kvix__sj_str(b, sp->replay, strlen(sp->replay), e))))
        return x->rc = rc;
    if ((rc = kvix__sj_raw(b, "}", e)))
        return x->rc = rc;
    x->n++;
    return 0;
}

int kvix_service_registrations_encode(struct kvix_enginesub *sub, kvix_buf *out, size_t *n,
                                      kvix_err *err)
{
    enc x = {out, 0, 0, err};
    int rc = kvix__sj_raw(out, "[", err);
    if (!rc)
        kvix_enginesub_list(sub, put_registration, &x);
    if (!rc)
        rc = x.rc;
    if (!rc)
        rc = kvix__sj_raw(out, "]", err);
    if (n)
        *n = x.n;
    return rc;
}

int kvix_service_registrations_decode(const void *data, size_t len,
                                      const struct kvix_enginesub_config *cfg,
                                      struct kvix_enginesub_spec **out, size_t *n, kvix_err *err)
{
    *out = NULL;
    *n = 0;
    /* a registration is well under 2 KiB: a payload this large is no list of them */
    if (len > (size_t)KVIX_SERVICE_REGISTRATIONS_MAX * 2048)
        return kvix_err_set(err, KVIX_ELIMIT, "registrations: %zu bytes (limit %u)", len,
                            KVIX_SERVICE_REGISTRATIONS_MAX * 2048u);
    json_t *a = kvix_json_u64_loadb(data, len, err);
    if (!a)
        return err ? err->code : KVIX_EINVAL;
    int rc = KVIX_OK;
    size_t cnt = json_is_array(a) ? json_array_size(a) : 0;
    kvix_enginesub_spec *v = NULL;
    if (!json_is_array(a))
        rc = kvix_err_set(err, KVIX_EINVAL, "registrations: not a JSON array");
    else if (cnt > KVIX_SERVICE_REGISTRATIONS_MAX)
        rc = kvix_err_set(err, KVIX_ELIMIT, "registrations: %zu of them (limit %u)", cnt,
                          KVIX_SERVICE_REGISTRATIONS_MAX);
    else if (cnt && !(v = calloc(cnt, sizeof *v)))
        rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < cnt; i++) {
        json_t *o = json_array_get(a, i);
        kvix_err e;
        if (!json_is_object(o))
            rc = kvix_err_set(&e, KVIX_EINVAL, "not a JSON object");
        else
            rc = read_registration(cfg, o, &v[i], &e);
        if (rc)
            rc = kvix_err_set(err, rc == KVIX_ENOMEM ? rc : KVIX_EINVAL,
                              "registration %zu: %s", i, e.msg);
    }
    json_decref(a);
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    *n = cnt;
    return KVIX_OK;
}
