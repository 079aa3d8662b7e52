/* Engine subscriptions applied to an index on a thread of their own (see
 * cmd/tools/enginefeed.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "enginefeed.h"
#include "kvix/service.h"

#define STEP_MS 200 /* a step's longest wait; a stop or an add wakes it at once */

struct kvix_enginefeed {
    kvix_enginefeed_opts o;
    kvix_enginesub_config cfg;
    char model[KVIX_NAME_MAX], tenant[KVIX_NAME_MAX];
    kvix_enginesub *sub;
    pthread_t thread;
    bool running;
    pthread_mutex_t mu; /* guards held, stopping, failed, ferr */
    pthread_cond_t cv;
    bool held, stopping;
    int failed;
    kvix_err ferr;
    uint64_t applied, rejected; /* atomic */
    bool halted;                /* atomic: kvix_enginefeed_halt */
    /* feed's thread: the clears that follow a KVIX_ENGINESUB_REMOVED note
     * are an unregistration: those (worker, dp) are forgotten, eid too */
    bool removing;
    uint64_t removing_worker;
};

/* Forget an unregistered (worker, dp) in its partition. */
static int forget(kvix_enginefeed *f, const kvix_event *ev, kvix_err *err)
{
    if (f->o.submit) /* what was submitted for the worker goes first */
        kvix_index_sync(f->o.idx);
    return kvix_index_forget_worker(f->o.idx, ev->model, ev->tenant, ev->worker, ev->dp, NULL,
                                    err);
}

static void on_event(void *ctx, const kvix_event *ev)
{
    kvix_enginefeed *f = ctx;
    kvix_err err;
    if (__atomic_load_n(&f->halted, __ATOMIC_ACQUIRE))
        return;
    if (f->o.svc) {
        kvix_service_note_event(f->o.svc, ev->type, -1);
        kvix_index_write_begin(f->o.idx);
    }
    if (f->o.write_mu)
        pthread_mutex_lock(f->o.write_mu);
    bool gone = f->removing && ev->type == KVIX_EV_CLEARED && !ev->has_eid &&
                ev->worker == f->removing_worker;
    if (!gone)
        f->removing = false;
    int rc = gone ? forget(f, ev, &err)
             : f->o.submit
                 ? kvix_index_submit(f->o.idx, ev, f->o.tag ? f->o.tag(f->o.ctx, ev) : 0, &err)
                 : kvix_index_apply(f->o.idx, ev, NULL, &err);
    if (f->o.write_mu)
        pthread_mutex_unlock(f->o.write_mu);
    if (f->o.svc)
        kvix_index_write_end(f->o.idx);
    if (rc && !f->o.submit) { /* with submit, the index's on_reject has it */
        __atomic_fetch_add(&f->rejected, 1, __ATOMIC_RELAXED);
        if (f->o.on_reject)
            f->o.on_reject(f->o.ctx, ev, &err);
        return;
    }
    uint64_t n = __atomic_add_fetch(&f->applied, 1, __ATOMIC_RELAXED);
    if (f->o.on_applied)
        f->o.on_applied(f->o.ctx, n);
}

static void on_note(void *ctx, const kvix_enginesub_note *n)
{
    kvix_enginefeed *f = ctx;
    f->removing = n->kind == KVIX_ENGINESUB_REMOVED;
    f->removing_worker = n->worker;
    if (f->o.on_note)
        f->o.on_note(f->o.ctx, n);
}

int kvix_enginefeed_new(kvix_enginefeed **out, const kvix_enginesub_config *cfg,
                        const kvix_enginefeed_opts *opts, kvix_err *err)
{
    *out = NULL;
    if (!opts || !opts->idx)
        return kvix_err_set(err, KVIX_EINVAL, "no index for the feed");
    kvix_enginefeed *f = calloc(1, sizeof *f);
    if (!f)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    f->o = *opts;
    if (cfg)
        f->cfg = *cfg;
    else
        kvix_enginesub_config_init(&f->cfg);
    /* the config's strings are the caller's: keep copies for _config */
    snprintf(f->model, sizeof f->model, "%s", f->cfg.model ? f->cfg.model : "default");
    snprintf(f->tenant, sizeof f->tenant, "%s", f->cfg.tenant ? f->cfg.tenant : "default");
    f->cfg.model = f->model;
    f->cfg.tenant = f->tenant;
    f->cfg.topic = NULL; /* copied by the subscriber; not kept here */
    kvix_enginesub_ops ops = {on_event, on_note};
    int rc = kvix_enginesub_new(&f->sub, cfg ? cfg : &f->cfg, &ops, f, err);
    if (rc) {
        free(f);
        return rc;
    }
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    *out = f;
    return KVIX_OK;
}

kvix_enginesub *kvix_enginefeed_sub(kvix_enginefeed *f) { return f->sub; }

void kvix_enginefeed_attach(kvix_enginefeed *f, struct kvix_service *svc) { f->o.svc = svc; }

const kvix_enginesub_config *kvix_enginefeed_config(const kvix_enginefeed *f)
{
    return &f->cfg;
}

static void *run(void *p)
{
    kvix_enginefeed *f = p;
    pthread_mutex_lock(&f->mu);
    while (f->held && !f->stopping)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    for (;;) {
        pthread_mutex_lock(&f->mu);
        bool stop = f->stopping || __atomic_load_n(&f->halted, __ATOMIC_ACQUIRE);
        pthread_mutex_unlock(&f->mu);
        if (stop)
            break;
        if (f->o.on_step)
            f->o.on_step(f->o.ctx);
        kvix_err err;
        int rc = kvix_enginesub_step(f->sub, STEP_MS, &err);
        if (rc) {
            pthread_mutex_lock(&f->mu);
            f->failed = rc;
            f->ferr = err;
            pthread_mutex_unlock(&f->mu);
            if (f->o.on_failed)
                f->o.on_failed(f->o.ctx, &err);
            break;
        }
    }
    return NULL;
}

void kvix_enginefeed_halt(kvix_enginefeed *f)
{
    __atomic_store_n(&f->halted, true, __ATOMIC_RELEASE);
}

int kvix_enginefeed_start(kvix_enginefeed *f, bool hold, kvix_err *err)
{
    if (f->running)
        return KVIX_OK;
    kvix_err first = {0, "", KVIX_REASON_OTHER};
    int opened = kvix_enginesub_apply(f->sub, &first);
    f->held = hold;
    int e = pthread_create(&f->thread, NULL, run, f);
    if (e)
        return kvix_err_set(err, KVIX_ESYS, "cannot start the subscriptions' thread: %s",
                            strerror(e));
    f->running = true;
    if (opened && err)
        *err = first;
    return opened;
}

void kvix_enginefeed_release(kvix_enginefeed *f)
{
    pthread_mutex_lock(&f->mu);
    f->held = false;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

int kvix_enginefeed_stop(kvix_enginefeed *f, kvix_err *err)
{
    if (f->running) {
        pthread_mutex_lock(&f->mu);
        f->stopping = true;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        kvix_enginesub_wake(f->sub);
        pthread_join(f->thread, NULL);
        f->running = false;
    }
    if (f->failed && err)
        *err = f->ferr;
    return f->failed;
}

void kvix_enginefeed_free(kvix_enginefeed *f)
{
    if (!f)
        return;
    kvix_enginefeed_stop(f, NULL);
    kvix_enginesub_free(f->sub);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

void kvix_enginefeed_counts_get(kvix_enginefeed *f, kvix_enginefeed_counts *out)
{
    out->applied = __atomic_load_n(&f->applied, __ATOMIC_RELAXED);
    out->rejected = __atomic_load_n(&f->rejected, __ATOMIC_RELAXED);
    kvix_enginesub_counts_get(f->sub, &out->sub);
}

int kvix_enginefeed_resume(kvix_enginefeed *f, kvix_err *err)
{
    return kvix_enginesub_resume_index(f->sub, f->o.idx, NULL, err);
}
