/* The writer pool: one thread and one bounded queue per writer; events are
 * routed by worker, so each worker's events stay in order on one thread (the
 * backends' contract: one writer per slot at a time). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "event_int.h"
#include "index_front_int.h"

static void reject(kvix_index *idx, uint64_t tag, const kvix_err *err)
{
    if (idx->opts.on_reject)
        idx->opts.on_reject(idx->opts.reject_ctx, tag, err);
}

static void *writer_main(void *arg)
{
    wqueue *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->head == q->tail && !q->stop)
            pthread_cond_wait(&q->nonempty, &q->mu);
        if (q->head == q->tail)
            break;
        size_t i = q->head % q->cap;
        pthread_mutex_unlock(&q->mu);
        /* The slot at head is the writer's until head moves on. */
        kvix_err err = {0, "", KVIX_REASON_OTHER};
        kvix_event *ev = &q->ring[i];
        if (kvix_index_apply(q->idx, ev, NULL, &err))
            reject(q->idx, q->tags[i], &err);
        if (ev->cap_blocks > SLOT_KEEP || ev->cap_hashes > SLOT_KEEP) {
            kvix_event_release(ev); /* one huge event does not pin its arrays */
            kvix_event_init(ev);
        }
        pthread_mutex_lock(&q->mu);
        q->head++;
        pthread_cond_broadcast(&q->progress);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

void kvix__ix_pool_stop(kvix_index *idx)
{
    for (unsigned i = 0; i < idx->nq; i++) {
        wqueue *q = &idx->q[i];
        pthread_mutex_lock(&q->mu);
        q->stop = 1;
        pthread_cond_signal(&q->nonempty);
        pthread_mutex_unlock(&q->mu);
        pthread_join(q->th, NULL);
    }
    for (unsigned i = 0; i < idx->nq; i++) {
        wqueue *q = &idx->q[i];
        for (size_t j = 0; j < q->cap; j++)
            kvix_event_release(&q->ring[j]);
        free(q->ring);
        free(q->tags);
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->nonempty);
        pthread_cond_destroy(&q->progress);
    }
    free(idx->q);
    idx->q = NULL;
    idx->nq = 0;
}

int kvix__ix_pool_start(kvix_index *idx, unsigned threads, kvix_err *err)
{
    idx->q = calloc(threads, sizeof *idx->q);
    if (!idx->q)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for writer threads");
    for (unsigned i = 0; i < threads; i++) {
        wqueue *q = &idx->q[i];
        q->idx = idx;
        q->cap = QUEUE_CAP;
        q->ring = calloc(q->cap, sizeof *q->ring);
        q->tags = calloc(q->cap, sizeof *q->tags);
        pthread_mutex_init(&q->mu, NULL);
        pthread_cond_init(&q->nonempty, NULL);
        pthread_cond_init(&q->progress, NULL);
        for (size_t j = 0; q->ring && j < q->cap; j++)
            kvix_event_init(&q->ring[j]);
        if (!q->ring || !q->tags || pthread_create(&q->th, NULL, writer_main, q)) {
            free(q->ring);
            free(q->tags);
            pthread_mutex_destroy(&q->mu);
            pthread_cond_destroy(&q->nonempty);
            pthread_cond_destroy(&q->progress);
            kvix__ix_pool_stop(idx); /* the i threads already running */
            return kvix_err_set(err, KVIX_ESYS, "cannot start writer thread %u", i);
        }
        idx->nq = i + 1;
    }
    return KVIX_OK;
}

int kvix_index_submit(kvix_index *idx, const kvix_event *ev, uint64_t tag, kvix_err *err)
{
    kvix_err e = {0, "", KVIX_REASON_OTHER};
    int rc;
    if (!idx->nq) {
        rc = kvix_index_apply(idx, ev, NULL, &e);
        goto done;
    }
    if (ev->type != KVIX_EV_STORED && ev->type != KVIX_EV_REMOVED &&
        ev->type != KVIX_EV_CLEARED) {
        rc = kvix_err_set(&e, KVIX_EINVAL, "not an event (%s)", kvix_event_type_name(ev->type));
        goto done;
    }
    wqueue *q = &idx->q[kvix_mix64(ev->worker) % idx->nq];
    pthread_mutex_lock(&q->mu);
    while (q->tail - q->head == q->cap) /* full: the submitter waits, nothing is dropped */
        pthread_cond_wait(&q->progress, &q->mu);
    size_t i = q->tail % q->cap;
    pthread_mutex_unlock(&q->mu);
    /* The slot at tail is the submitter's until tail moves on. */
    rc = kvix__ev_copy_untokened(&q->ring[i], ev, &e);
    if (rc)
        goto done;
    q->tags[i] = tag;
    pthread_mutex_lock(&q->mu);
    q->tail++;
    pthread_cond_signal(&q->nonempty);
    pthread_mutex_unlock(&q->mu);
    return KVIX_OK;
done:
    if (rc) {
        reject(idx, tag, &e);
        if (err)
            *err = e;
    }
    return rc;
}

void kvix_index_sync(kvix_index *idx)
{
    for (unsigned i = 0; i < idx->nq; i++) {
        wqueue *q = &idx->q[i];
        pthread_mutex_lock(&q->mu);
        while (q->head != q->tail)
            pthread_cond_wait(&q->progress, &q->mu);
        pthread_mutex_unlock(&q->mu);
    }
}
