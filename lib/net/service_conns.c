/* The connections of the HTTP server (lib/net/service_http.c) and what they
 * may hold: how many at once, from one client address, for how long a
 * request may take to arrive, and the memory every request together holds.
 *
 * libmicrohttpd's own bounds do not hold a server up against a slow client:
 * its idle timeout starts again with every byte (a request sent a byte a
 * second never ends), its connection limit refuses the newcomer (2,100 half
 * requests held and /health was never answered again), and it has no bound
 * on what bodies hold together. So each connection has a record here, kept
 * from libmicrohttpd's connection notifications:
 *
 *   waiting    connected, or answered and kept alive: the next request must
 *              arrive whole within the timeout of the phase's start;
 *   answering  its request is being answered (libmicrohttpd's own timeout
 *              drops a reader that stops reading).
 *
 * Waiting records are listed oldest phase first. A connection past a bound
 * (all connections, or those of its address) takes the place of the oldest
 * waiting one (of its address) that has waited at least EVICT_AGE (half a second): a held
 * half request is what a slow client costs, and a new client's request is
 * worth more than one that has not arrived in half a second. With none to evict,
 * the newcomer is refused. A connection is ended by shutting its socket
 * down in the thread whose daemon owns it (libmicrohttpd then reads the end
 * and closes it as it would a client's): a record of another thread is
 * queued to that thread and its wake descriptor written. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "service_priv.h"

#define EVICT_AGE 0.5 /* seconds a waiting connection is safe from eviction */
#define DOOMED_MAX 64 /* connections ended but not yet closed, past the bound */

struct kvix_conn {
    kvix_conn *prev, *next; /* the waiting list, while waiting */
    kvix_conn *qnext;       /* the owner's queue of connections to end */
    double since;           /* the phase's start */
    int fd;
    unsigned worker;
    unsigned char key[17];  /* address family, then the address */
    bool waiting, doomed, queued;
};

typedef struct addr_ent {
    unsigned char key[17];
    unsigned count; /* 0: a free slot */
} addr_ent;

struct kvix_conns {
    pthread_mutex_t mu;
    kvix_service_limits lim;
    unsigned nworkers;
    int *kick;          /* per worker: written when its queue gets an entry */
    kvix_conn **queue;  /* per worker: connections it must end */
    kvix_conn *head, *tail;
    unsigned n;         /* records alive */
    unsigned doomed;    /* of them, ended and not yet closed */
    addr_ent *addrs;    /* open addressing, linear probing; counts of live records */
    size_t acap;
    size_t mem;         /* bytes held by requests */
    /* figures for /metrics */
    uint64_t refused, evicted, expired, mem_refused;
};

static size_t key_hash(const unsigned char *k)
{
    uint64_t h = 1469598103934665603u;
    for (int i = 0; i < 17; i++)
        h = (h ^ k[i]) * 1099511628211u;
    return (size_t)(h ^ h >> 29);
}

static addr_ent *addr_find(kvix_conns *c, const unsigned char *k)
{
    size_t m = c->acap - 1, i = key_hash(k) & m;
    while (c->addrs[i].count && memcmp(c->addrs[i].key, k, 17) != 0)
        i = (i + 1) & m;
    return &c->addrs[i];
}

/* One record fewer for the address (the slot freed and the run after it
 * moved back when it reaches 0, so lookups need no tombstones). */
static void addr_drop(kvix_conns *c, const unsigned char *k)
{
    addr_ent *e = addr_find(c, k);
    if (!e->count || --e->count)
        return;
    size_t m = c->acap - 1, hole = (size_t)(e - c->addrs);
    for (size_t j = (hole + 1) & m; c->addrs[j].count; j = (j + 1) & m) {
        size_t home = key_hash(c->addrs[j].key) & m;
        /* j's entry may fill the hole when its home is not within (hole, j] */
        if ((j > hole && (home <= hole || home > j)) || (j < hole && home <= hole && home > j)) {
            c->addrs[hole] = c->addrs[j];
            c->addrs[j].count = 0;
            hole = j;
        }
    }
}

static void key_of(const struct sockaddr *a, unsigned char key[17])
{
    memset(key, 0, 17);
    if (!a)
        return;
    key[0] = (unsigned char)a->sa_family;
    if (a->sa_family == AF_INET)
        memcpy(key + 1, &((const struct sockaddr_in *)a)->sin_addr, 4);
    else if (a->sa_family == AF_INET6)
        memcpy(key + 1, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
}

int kvix__conns_new(kvix_conns **out, const kvix_service_limits *lim, unsigned nworkers,
                   const int *kick, kvix_err *err)
{
    kvix_conns *c = calloc(1, sizeof *c);
    if (!c)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    c->lim = *lim;
    c->nworkers = nworkers;
    size_t cap = 16;
    while (cap < 2 * ((size_t)lim->conns_max + DOOMED_MAX))
        cap *= 2;
    c->acap = cap;
    c->addrs = calloc(cap, sizeof *c->addrs);
    c->kick = malloc(nworkers * sizeof *c->kick);
    c->queue = calloc(nworkers, sizeof *c->queue);
    if (!c->addrs || !c->kick || !c->queue) {
        kvix__conns_free(c);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    memcpy(c->kick, kick, nworkers * sizeof *c->kick);
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return KVIX_OK;
}

void kvix__conns_free(kvix_conns *c)
{
    if (!c)
        return;
    if (c->addrs)
        pthread_mutex_destroy(&c->mu);
    free(c->addrs);
    free(c->kick);
    free(c->queue);
    free(c);
}

static void unlist(kvix_conns *c, kvix_conn *r)
{
    if (!r->waiting)
        return;
    *(r->prev ? &r->prev->next : &c->head) = r->next;
    *(r->next ? &r->next->prev : &c->tail) = r->prev;
    r->prev = r->next = NULL;
    r->waiting = false;
}

static void list_tail(kvix_conns *c, kvix_conn *r, double now)
{
    unlist(c, r);
    r->since = now;
    r->prev = c->tail;
    *(c->tail ? &c->tail->next : &c->head) = r;
    c->tail = r;
    r->waiting = true;
}

/* End r: now when `me` owns it (the caller runs that daemon's thread),
 * else through its owner's queue. Under mu. */
static void doom(kvix_conns *c, kvix_conn *r, unsigned me)
{
    if (r->doomed)
        return;
    unlist(c, r);
    r->doomed = true;
    c->doomed++;
    addr_drop(c, r->key);
    if (r->worker == me) {
        (void)shutdown(r->fd, SHUT_RDWR);
        return;
    }
    r->queued = true;
    r->qnext = c->queue[r->worker];
    c->queue[r->worker] = r;
    (void)!write(c->kick[r->worker], &(uint64_t){1}, sizeof(uint64_t));
}

/* The oldest waiting record old enough to be evicted, of address key when
 * key is not NULL. Under mu. */
static kvix_conn *victim(kvix_conns *c, const unsigned char *key, double now)
{
    for (kvix_conn *r = c->head; r && now - r->since >= EVICT_AGE; r = r->next)
        if (!key || memcmp(r->key, key, 17) == 0)
            return r;
    return NULL;
}

kvix_conn *kvix__conns_open(kvix_conns *c, unsigned worker, int fd, const struct sockaddr *addr,
                           double now)
{
    kvix_conn *r = calloc(1, sizeof *r);
    if (!r) {
        (void)shutdown(fd, SHUT_RDWR);
        return NULL;
    }
    r->fd = fd;
    r->worker = worker;
    key_of(addr, r->key);
    pthread_mutex_lock(&c->mu);
    c->n++;
    addr_ent *e = addr_find(c, r->key);
    bool over_addr = e->count >= c->lim.conns_per_addr;
    bool over_all = c->n - c->doomed > c->lim.conns_max;
    kvix_conn *v = over_addr ? victim(c, r->key, now) : over_all ? victim(c, NULL, now) : NULL;
    bool admit = !(over_addr || over_all) || (v && c->doomed < DOOMED_MAX);
    if (admit && v) {
        doom(c, v, worker);
        c->evicted++;
        e = addr_find(c, r->key); /* the drop may have moved entries */
    }
    if (admit) {
        if (!e->count)
            memcpy(e->key, r->key, 17);
        e->count++;
        list_tail(c, r, now);
    } else {
        /* refused: counted among the doomed until libmicrohttpd closes it */
        r->doomed = true;
        c->doomed++;
        c->refused++;
        (void)shutdown(fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

void kvix__conns_close(kvix_conns *c, kvix_conn *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&c->mu);
    unlist(c, r);
    if (r->queued) { /* its owner closes it first: it is still in that queue */
        for (kvix_conn **p = &c->queue[r->worker]; *p; p = &(*p)->qnext)
            if (*p == r) {
                *p = r->qnext;
                break;
            }
    }
    if (r->doomed)
        c->doomed--;
    else
        addr_drop(c, r->key);
    c->n--;
    pthread_mutex_unlock(&c->mu);
    free(r);
}

void kvix__conns_answering(kvix_conns *c, kvix_conn *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&c->mu);
    unlist(c, r);
    pthread_mutex_unlock(&c->mu);
}

void kvix__conns_waiting(kvix_conns *c, kvix_conn *r, double now)
{
    if (!r)
        return;
    pthread_mutex_lock(&c->mu);
    if (!r->doomed)
        list_tail(c, r, now);
    pthread_mutex_unlock(&c->mu);
}

int kvix__conns_sweep(kvix_conns *c, unsigned worker, double now)
{
    double timeout = (double)c->lim.timeout_s;
    pthread_mutex_lock(&c->mu);
    for (kvix_conn *r = c->queue[worker]; r; r = r->qnext) {
        r->queued = false;
        (void)shutdown(r->fd, SHUT_RDWR);
    }
    c->queue[worker] = NULL;
    while (c->head && now - c->head->since >= timeout) {
        c->expired++;
        doom(c, c->head, worker);
    }
    int ms = -1;
    if (c->head) {
        double left = c->head->since + timeout - now;
        ms = left <= 0 ? 0 : (int)(left * 1000) + 1;
    }
    pthread_mutex_unlock(&c->mu);
    return ms;
}

bool kvix__conns_mem_take(kvix_conns *c, size_t n)
{
    pthread_mutex_lock(&c->mu);
    bool ok = n <= c->lim.memory_max - c->mem;
    if (ok)
        c->mem += n;
    else
        c->mem_refused++;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

void kvix__conns_mem_give(kvix_conns *c, size_t n)
{
    pthread_mutex_lock(&c->mu);
    c->mem -= n <= c->mem ? n : c->mem;
    pthread_mutex_unlock(&c->mu);
}

void kvix__conns_figures(kvix_conns *c, kvix_conns_stats *out)
{
    pthread_mutex_lock(&c->mu);
    out->open = c->n - c->doomed;
    out->memory = c->mem;
    out->refused = c->refused;
    out->evicted = c->evicted;
    out->expired = c->expired;
    out->memory_refused = c->mem_refused;
    pthread_mutex_unlock(&c->mu);
}
