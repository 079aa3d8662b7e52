/* The service object: made and freed, what its owner tells it (events,
 * saves, the stream's sequence), each server thread's reusable answer, and
 * the endpoints' names. Below the handlers, which use it: the protocol is
 * routed in lib/net/service_route.c, the server in lib/net/service_http.c. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kvix/peers.h"
#include "kvix/service.h"
#include "service_int.h"
#include "service_priv.h"

/* ---- lifecycle ---- */

int kvix_service_new(kvix_service **out, const kvix_service_opts *opts, kvix_err *err)
{
    *out = NULL;
    if (!opts || !opts->idx)
        return kvix_err_set(err, KVIX_EINVAL, "no index for the service");
    kvix_service *s = calloc(1, sizeof *s);
    if (!s)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    s->o = *opts;
    if (!s->o.body_max)
        s->o.body_max = KVIX_SERVICE_BODY_MAX;
    if (!s->o.tmpdir)
        s->o.tmpdir = "/tmp";
    kvix_service_limits *l = &s->o.limits;
    if (!l->conns_max)
        l->conns_max = KVIX_SERVICE_CONNS_DEFAULT;
    if (!l->conns_per_addr)
        l->conns_per_addr = KVIX_SERVICE_CONNS_PER_ADDR_DEFAULT;
    if (l->conns_per_addr > l->conns_max)
        l->conns_per_addr = l->conns_max;
    if (!l->timeout_s)
        l->timeout_s = KVIX_SERVICE_TIMEOUT_DEFAULT;
    if (!l->memory_max)
        l->memory_max = KVIX_SERVICE_MEMORY_DEFAULT;
    s->rejected_reason = calloc(opts->nreasons + 1, sizeof *s->rejected_reason);
    if (!s->rejected_reason) {
        free(s);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    if (opts->auth_token) {
        int rc = kvix_peers_token_check(opts->auth_token, strlen(opts->auth_token), err);
        if (rc || !(s->o.auth_token = strdup(opts->auth_token))) {
            free(s->rejected_reason);
            free(s);
            return rc ? rc : kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        }
    }
    if (!s->o.peers) {
        int rc = kvix_peers_new(&s->o.peers, err);
        if (rc) {
            free((char *)s->o.auth_token);
            free(s->rejected_reason);
            free(s);
            return rc;
        }
        s->own_peers = 1;
    }
    pthread_key_create(&s->ans_key, kvix__service_answer_free);
    s->inflight_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    s->inflight_cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    s->register_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    kvix__service_states_init(&s->states);
    *out = s;
    return KVIX_OK;
}

void kvix_service_free(kvix_service *s)
{
    if (!s)
        return;
    if (s->http)
        s->stop(s, 0);
    kvix__service_answer_free(pthread_getspecific(s->ans_key));
    pthread_key_delete(s->ans_key);
    kvix__service_states_release(&s->states); /* the server is stopped: no response reads them */
    free(s->rejected_reason);
    free((char *)s->o.auth_token);
    if (s->own_peers)
        kvix_peers_free(s->o.peers);
    free(s);
}

void kvix_service_note_event(kvix_service *s, int type, int reason)
{
    if (reason < 0) {
        if (type >= 0 && type <= KVIX_EV_QUERY)
            __atomic_fetch_add(&s->submitted[type], 1, __ATOMIC_RELAXED);
        return;
    }
    size_t r = (size_t)reason < s->o.nreasons ? (size_t)reason : s->o.nreasons;
    __atomic_fetch_add(&s->rejected_reason[r], 1, __ATOMIC_RELAXED);
    if (type >= 0 && type <= KVIX_EV_QUERY)
        __atomic_fetch_add(&s->rejected_type[type], 1, __ATOMIC_RELAXED);
}

void kvix_service_set_stream_seq(kvix_service *s, uint64_t seq)
{
    __atomic_store_n(&s->stream_seq, seq, __ATOMIC_RELAXED);
}

void kvix_service_note_save(kvix_service *s, double seconds, double when)
{
    pthread_mutex_lock(&s->inflight_mu);
    s->save_seconds = seconds;
    s->save_when = when;
    s->saves++;
    pthread_mutex_unlock(&s->inflight_mu);
}

kvix_service_thread *kvix__service_thread_get(kvix_service *s)
{
    kvix_service_thread *t = pthread_getspecific(s->ans_key);
    if (!t && (t = calloc(1, sizeof *t))) {
        kvix_answer_init(&t->ans);
        pthread_setspecific(s->ans_key, t);
    }
    return t;
}

kvix_answer *kvix__service_answer(kvix_service *s)
{
    kvix_service_thread *t = kvix__service_thread_get(s);
    return t ? &t->ans : NULL;
}

void kvix__service_answer_free(void *p)
{
    kvix_service_thread *t = p;
    if (t) {
        kvix_answer_release(&t->ans);
        kvix__u64_refs_release(&t->refs);
        free(t);
    }
}

/* ---- endpoints ---- */

const char *const kvix__service_endpoints[EP_COUNT] = {
    "/health", "/metrics", "/query", "/query_by_hash", "/dump", "/snapshot",
    "/register", "/unregister", "/workers", "/register_peer", "/deregister_peer", "/peers",
    "/explain", "other",
};
