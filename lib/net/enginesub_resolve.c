/* Host names of tcp endpoints resolved off the poll thread and off ZMQ's.
 *
 * Given tcp://gpu1:5557, libzmq resolves gpu1 itself, in its I/O thread, at
 * every connection attempt: a name whose DNS answers slowly froze every
 * subscription of the process (one I/O thread serves them all) on every
 * reconnect. So a subscription to a name connects to the address this
 * thread found for it, and asks again when its connection drops (the engine
 * may have moved). Answers come back through a descriptor the poll thread
 * watches; a request the poll thread no longer cares about (a subscription
 * removed meanwhile) is told apart by its id.
 *
 * The thread may be inside getaddrinfo for as long as DNS takes: freeing the
 * resolver never waits for it. The resolver is shared by its owner and its
 * thread and freed by the last of them to let go. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "enginesub_int.h"

typedef struct req {
    struct req *next;
    esub_resolved r; /* ep and replay: the names asked; the answer's in place */
} req;

struct esub_resolver {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    req *todo, *todo_tail, *done;
    int refs;  /* the owner and the thread */
    bool stop;
    int fd;    /* eventfd: answers wait in done */
};

bool kvix__esub_host_is_name(const char *ep)
{
    if (strncmp(ep, "tcp://", 6) != 0 || ep[6] == '[' || ep[6] == '*')
        return false;
    const char *colon = strrchr(ep + 6, ':');
    if (!colon)
        return false;
    char host[KVIX_ENGINESUB_ENDPOINT_MAX];
    size_t n = (size_t)(colon - (ep + 6));
    memcpy(host, ep + 6, n);
    host[n] = '\0';
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) != 1;
}

/* ep (tcp://NAME:PORT) with NAME replaced by its first address, in place;
 * false with why set when it does not resolve. */
static bool resolve_ep(char *ep, char *why, size_t cap)
{
    if (!kvix__esub_host_is_name(ep))
        return true;
    char host[KVIX_ENGINESUB_ENDPOINT_MAX], port[16];
    const char *colon = strrchr(ep + 6, ':');
    size_t n = (size_t)(colon - (ep + 6));
    memcpy(host, ep + 6, n);
    host[n] = '\0';
    snprintf(port, sizeof port, "%s", colon + 1);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(why, cap, "%s", rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        if (res)
            freeaddrinfo(res);
        return false;
    }
    char a[INET6_ADDRSTRLEN] = "";
    if (res->ai_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)res->ai_addr)->sin6_addr, a, sizeof a);
    else
        inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, a, sizeof a);
    int six = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    snprintf(ep, KVIX_ENGINESUB_ENDPOINT_MAX, "tcp://%s%s%s:%s", six ? "[" : "", a,
             six ? "]" : "", port);
    return true;
}

static void unref(esub_resolver *r)
{
    pthread_mutex_lock(&r->mu);
    int last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last)
        return;
    for (req *q = r->todo, *n; q; q = n) {
        n = q->next;
        free(q);
    }
    for (req *q = r->done, *n; q; q = n) {
        n = q->next;
        free(q);
    }
    close(r->fd);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static void *run(void *arg)
{
    esub_resolver *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && !r->todo)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop)
            break;
        req *q = r->todo;
        r->todo = q->next;
        if (!r->todo)
            r->todo_tail = NULL;
        pthread_mutex_unlock(&r->mu);
        q->r.ok = resolve_ep(q->r.ep, q->r.why, sizeof q->r.why);
        if (q->r.ok && q->r.replay[0] && !resolve_ep(q->r.replay, q->r.why, sizeof q->r.why))
            q->r.replay[0] = '\0'; /* the replay's name alone failed: left to ZMQ */
        pthread_mutex_lock(&r->mu);
        q->next = r->done;
        r->done = q;
        if (!r->stop)
            (void)!write(r->fd, &(uint64_t){1}, sizeof(uint64_t));
    }
    pthread_mutex_unlock(&r->mu);
    unref(r);
    return NULL;
}

int kvix__esub_resolver_new(esub_resolver **out, kvix_err *err)
{
    *out = NULL;
    esub_resolver *r = calloc(1, sizeof *r);
    if (!r)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    r->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->fd < 0) {
        int e = errno;
        free(r);
        return kvix_err_set(err, KVIX_ESYS, "cannot make an eventfd: %s", strerror(e));
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 2;
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&th, &a, run, r);
    pthread_attr_destroy(&a);
    if (e) {
        close(r->fd);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        free(r);
        return kvix_err_set(err, KVIX_ESYS, "cannot start the resolver thread: %s", strerror(e));
    }
    *out = r;
    return KVIX_OK;
}

void kvix__esub_resolver_free(esub_resolver *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    unref(r);
}

int kvix__esub_resolver_fd(const esub_resolver *r)
{
    return r->fd;
}

int kvix__esub_resolver_ask(esub_resolver *r, uint64_t id, const char *ep, const char *replay)
{
    req *q = calloc(1, sizeof *q);
    if (!q)
        return KVIX_ENOMEM;
    q->r.id = id;
    snprintf(q->r.ep, sizeof q->r.ep, "%s", ep);
    snprintf(q->r.replay, sizeof q->r.replay, "%s", replay ? replay : "");
    pthread_mutex_lock(&r->mu);
    if (r->todo_tail)
        r->todo_tail->next = q;
    else
        r->todo = q;
    r->todo_tail = q;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return KVIX_OK;
}

int kvix__esub_resolver_take(esub_resolver *r, esub_resolved *out)
{
    uint64_t v;
    (void)!read(r->fd, &v, sizeof v);
    pthread_mutex_lock(&r->mu);
    req *q = r->done;
    if (q)
        r->done = q->next;
    pthread_mutex_unlock(&r->mu);
    if (!q)
        return 0;
    *out = q->r;
    free(q);
    return 1;
}
