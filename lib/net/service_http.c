/* The service behind libmicrohttpd: server threads of our own, one daemon
 * each, all accepting on one listening socket, each request's body gathered
 * (up to the ceiling) and handed to kvix_service_handle.
 *
 * Why not libmicrohttpd's own thread pool: its internal loop (0.9.75, Debian
 * 12) drains epoll 128 events at a time and, when a call returned exactly
 * 128, waits again with the connections' timeout (60 s) before serving the
 * 128 it has: with 128 (or 256, ...) connections ready on one thread and no
 * other traffic, the server stalls (wrk -c128 on one thread: ~100 requests
 * a second instead of ~40 000). Run from outside, libmicrohttpd never
 * blocks (MHD_run drains with a zero timeout) and the wait is ours: poll on
 * its epoll descriptor, at most until its next connection timeout. */
#define _GNU_SOURCE /* gettid */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kvix/service.h"
#include "service_priv.h"

/* libmicrohttpd's per-connection pool (request line, headers, each chunk of a
 * body, the response headers). It zeroes the pool on every request of a
 * keep-alive connection: at its default 32 KiB that was ~49 k of the ~275 k
 * instructions of a /query_by_hash (callgrind). 8 KiB still holds headers
 * of a few KiB; a body arrives in pieces of what is left, gathered below. */
#define POOL_BYTES 8192

typedef struct conn {
    kvix_buf body;
    size_t seen;     /* bytes received, kept or not */
    size_t held;     /* the body's capacity, taken from the requests' memory */
    int refuse;      /* 0, or the status already chosen (413, 503): the body is dropped */
    int answered;    /* a response is queued */
    kvix_conn *rec;  /* the connection's record (lib/net/service_conns.c) */
} conn;

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Keep n more bytes of the body: its capacity grows by doubling, never past
 * the ceiling, and each growth is taken from the memory all requests share
 * first. Past either, the request is refused and what it held given back. */
static void body_add(kvix_service *s, conn *k, const char *data, size_t n)
{
    if (k->refuse)
        return;
    size_t need = k->body.len + n + 1;
    if (k->seen > s->o.body_max) {
        k->refuse = 413;
    } else if (need > k->body.cap) {
        size_t cap = k->body.cap ? k->body.cap : 4096;
        while (cap < need)
            cap *= 2;
        if (cap > s->o.body_max + 1)
            cap = s->o.body_max + 1;
        char *p = NULL;
        if (!kvix__conns_mem_take(s->conns, cap - k->held)) {
            k->refuse = 503;
        } else if (!(p = realloc(k->body.data, cap))) {
            kvix__conns_mem_give(s->conns, cap - k->held);
            k->refuse = 503;
        } else {
            k->body.data = p;
            k->body.cap = k->held = cap;
        }
    }
    if (k->refuse) {
        kvix_buf_release(&k->body);
        kvix__conns_mem_give(s->conns, k->held);
        k->held = 0;
        return;
    }
    memcpy(k->body.data + k->body.len, data, n);
    k->body.len += n;
    k->body.data[k->body.len] = '\0';
}

/* A request refused before its answer is computed: 413 or 503. */
static void refusal(kvix_service *s, int status, kvix_service_response *r)
{
    char msg[128];
    if (status == 413)
        snprintf(msg, sizeof msg, "request body over the limit of %zu bytes", s->o.body_max);
    else
        snprintf(msg, sizeof msg, "the server holds all the request memory it may (%zu bytes): "
                 "try again", s->o.limits.memory_max);
    kvix__service_respond_error(r, status, msg);
}

static void conn_done(kvix_service *s)
{
    pthread_mutex_lock(&s->inflight_mu);
    s->inflight--;
    pthread_cond_broadcast(&s->inflight_cv);
    pthread_mutex_unlock(&s->inflight_mu);
}

/* At a server thread's start. A failure leaves the thread as it was:
 * lowering one's own priority is always allowed, and the service works
 * either way. */
static void lower_priority(int by)
{
    id_t tid = (id_t)gettid();
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, tid);
    if (errno == 0)
        (void)setpriority(PRIO_PROCESS, tid, cur + by > 19 ? 19 : cur + by);
}

/* A file response that says when it is done (kvix_service_response.done):
 * read with pread, so that responses sharing one file never share an
 * offset. */
typedef struct fd_body {
    int fd;
    void (*done)(void *ctx);
    void *ctx;
} fd_body;

static ssize_t fd_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    fd_body *b = cls;
    for (;;) {
        ssize_t k = pread(b->fd, buf, max, (off_t)pos);
        if (k > 0)
            return k;
        if (k < 0 && errno == EINTR)
            continue;
        return MHD_CONTENT_READER_END_WITH_ERROR; /* the file is shorter than it was */
    }
}

static void fd_free(void *cls)
{
    fd_body *b = cls;
    close(b->fd);
    b->done(b->ctx);
    free(b);
}

static enum MHD_Result send_response(struct MHD_Connection *c, kvix_service_response *r)
{
    struct MHD_Response *resp;
    fd_body *fb;
    if (r->fd >= 0 && r->done && (fb = malloc(sizeof *fb))) {
        *fb = (fd_body){r->fd, r->done, r->done_ctx};
        resp = MHD_create_response_from_callback(r->fd_size, 64 * 1024, fd_read, fb, fd_free);
        if (resp)
            r->fd = -1, r->done = NULL; /* the response closes it and says so */
        else
            free(fb);
    } else if (r->fd >= 0) {
        resp = MHD_create_response_from_fd64(r->fd_size, r->fd);
        if (resp)
            r->fd = -1; /* the response closes it */
    } else if (r->body.data) {
        /* the body is handed over, not copied: an answer is ~8 KB for 256 workers */
        resp = MHD_create_response_from_buffer_with_free_callback(r->body.len, r->body.data,
                                                                  free);
        if (resp)
            kvix_buf_init(&r->body);
    } else {
        static char empty[1];
        resp = MHD_create_response_from_buffer(0, empty, MHD_RESPMEM_PERSISTENT);
    }
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type);
    if (r->auth_challenge)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"kvix\"");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **ctx)
{
    kvix_service *s = cls;
    (void)version;
    conn *k = *ctx;
    if (!k) { /* first call: headers only */
        k = calloc(1, sizeof *k);
        if (!k)
            return MHD_NO;
        kvix_buf_init(&k->body);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        k->rec = ci ? ci->socket_context : NULL;
        *ctx = k;
        pthread_mutex_lock(&s->inflight_mu);
        s->inflight++;
        pthread_mutex_unlock(&s->inflight_mu);
        /* without the token, or with a body announced over the ceiling, a
         * request is refused before its body is read */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        char *end;
        errno = 0;
        unsigned long long n = cl ? strtoull(cl, &end, 10) : 0;
        if (!kvix_service_authorized(
                s, url, MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                    MHD_HTTP_HEADER_AUTHORIZATION)))
            k->refuse = 401;
        else if (cl && !errno && !*end && n > s->o.body_max)
            k->refuse = 413;
        else
            return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        k->seen += n;
        body_add(s, k, upload_data, n);
        *upload_size = 0;
        if (!k->refuse || k->answered)
            return MHD_YES;
        /* refused: answered at once, and libmicrohttpd closes the
         * connection rather than read the rest */
    }
    if (k->answered)
        return MHD_YES;
    k->answered = 1;
    kvix__conns_answering(s->conns, k->rec);
    kvix_service_response r;
    kvix_service_response_init(&r);
    if (k->refuse == 401) /* answered by the handler, counted in the metrics */
        kvix_service_handle_as(s, NULL, method, url, NULL, 0, &r);
    else if (k->refuse)
        refusal(s, k->refuse, &r);
    else
        kvix_service_handle_as(
            s, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
            method, url, k->body.data, k->body.len, &r);
    enum MHD_Result ok = send_response(c, &r);
    kvix_service_response_release(&r);
    return ok;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **ctx,
                         enum MHD_RequestTerminationCode why)
{
    kvix_service *s = cls;
    conn *k = *ctx;
    (void)c;
    if (!k)
        return;
    if (why == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        kvix__conns_waiting(s->conns, k->rec, mono_now());
    kvix_buf_release(&k->body);
    kvix__conns_mem_give(s->conns, k->held);
    free(k);
    *ctx = NULL;
    conn_done(s);
}

/* One server thread and its daemon. */
typedef struct http_worker {
    kvix_service *s;
    struct MHD_Daemon *d;
    pthread_t th;
    int started;
    unsigned id;
    int kick; /* eventfd: connections of ours to end (kvix__conns_sweep) */
} http_worker;

/* A connection opened or closed on w's daemon (on w's thread). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    http_worker *w = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        kvix__conns_close(w->s->conns, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ad =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    *socket_context = fd ? kvix__conns_open(w->s->conns, w->id, fd->connect_fd,
                                           ad ? ad->client_addr : NULL, mono_now())
                         : NULL;
}

/* The server: s->http. state: HTTP_RUN, then HTTP_QUIESCE (every worker
 * stops accepting), then HTTP_EXIT; each change is signalled on wake. */
enum { HTTP_RUN, HTTP_QUIESCE, HTTP_EXIT };
struct kvix_http {
    int wake;           /* eventfd: readable once the state left HTTP_RUN */
    int state;          /* atomic */
    MHD_socket listen;  /* shared by every daemon; closed once none accepts */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned quiesced; /* under mu: workers that stopped accepting */
    unsigned n;
    http_worker w[];
};

/* The wait before the next MHD_run: libmicrohttpd's next connection timeout
 * (0 when it holds data already read), capped so that a quiesced worker sees
 * HTTP_EXIT soon without the wake descriptor. */
static int wait_ms(struct MHD_Daemon *d, int cap)
{
    MHD_UNSIGNED_LONG_LONG to;
    if (MHD_get_timeout(d, &to) != MHD_YES)
        return cap;
    return cap >= 0 && to > (MHD_UNSIGNED_LONG_LONG)cap ? cap : (int)to;
}

static void *serve(void *arg)
{
    http_worker *w = arg;
    struct kvix_http *h = w->s->http;
    if (w->s->o.server_nice > 0)
        lower_priority(w->s->o.server_nice);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(w->d, MHD_DAEMON_INFO_EPOLL_FD);
    struct pollfd p[3] = {
        {di ? di->epoll_fd : -1, POLLIN, 0}, {w->kick, POLLIN, 0}, {h->wake, POLLIN, 0}};
    int cap = -1; /* no cap while the wake descriptor is watched */
    for (;;) {
        int state = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
        if (state == HTTP_EXIT)
            break;
        if (state == HTTP_QUIESCE && p[2].fd >= 0) {
            /* our daemon's accepting ends in the thread that runs it; the
             * shared socket is closed once every daemon has stopped */
            (void)MHD_quiesce_daemon(w->d);
            p[2].fd = -1;
            cap = 20;
            pthread_mutex_lock(&h->mu);
            h->quiesced++;
            pthread_cond_broadcast(&h->cv);
            pthread_mutex_unlock(&h->mu);
        }
        int next = kvix__conns_sweep(w->s->conns, w->id, mono_now());
        int ms = wait_ms(w->d, cap);
        if (next >= 0 && (ms < 0 || next < ms))
            ms = next;
        if (poll(p, 3, ms) < 0 && errno != EINTR)
            break;
        if (p[1].revents & POLLIN) {
            uint64_t v;
            (void)!read(w->kick, &v, sizeof v);
        }
        MHD_run(w->d);
    }
    return NULL;
}

/* The daemon of one worker: on listen_fd when it is valid, else on ss. */
static struct MHD_Daemon *start_daemon(http_worker *w, unsigned flags, uint16_t port,
                                       const struct sockaddr_storage *ss, MHD_socket listen_fd)
{
    kvix_service *s = w->s;
    /* libmicrohttpd's own limit only backs ours up (connections ended but
     * not yet closed count in it): any daemon may take every connection */
    struct MHD_OptionItem common[] = {
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, s},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, w},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)s->o.limits.conns_max + 128, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)s->o.limits.timeout_s, NULL},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, POOL_BYTES, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    if (listen_fd != MHD_INVALID_SOCKET)
        return MHD_start_daemon(flags, port, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET,
                                listen_fd, MHD_OPTION_ARRAY, common, MHD_OPTION_END);
    /* libmicrohttpd's default: SO_REUSEADDR (a restart binds past the old
     * connections in TIME_WAIT), never SO_REUSEPORT, with which a second
     * kvindex on the same port would start without a word and the kernel
     * would spread a router's requests over two different indexes */
    return MHD_start_daemon(flags, port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                            (const struct sockaddr *)ss, MHD_OPTION_ARRAY, common,
                            MHD_OPTION_END);
}

/* Stop and free what kvix_service_listen started (the workers' state is
 * HTTP_EXIT or they never ran). */
static void http_free(kvix_service *s)
{
    struct kvix_http *h = s->http;
    for (unsigned i = 0; i < h->n; i++)
        if (h->w[i].started)
            pthread_join(h->w[i].th, NULL);
    for (unsigned i = 0; i < h->n; i++)
        if (h->w[i].d) {
            /* a daemon not quiesced would close the shared socket itself */
            (void)MHD_quiesce_daemon(h->w[i].d);
            MHD_stop_daemon(h->w[i].d);
        }
    if (h->listen != MHD_INVALID_SOCKET)
        close(h->listen);
    for (unsigned i = 0; i < h->n; i++)
        if (h->w[i].kick >= 0)
            close(h->w[i].kick);
    kvix__conns_free(s->conns);
    s->conns = NULL;
    close(h->wake);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
    s->http = NULL;
}

int kvix_service_listen(kvix_service *s, const char *addr, unsigned port, unsigned threads,
                        kvix_err *err)
{
    if (s->http)
        return kvix_err_set(err, KVIX_EINVAL, "the service is already listening");
    if (port > 65535)
        return kvix_err_set(err, KVIX_ERANGE, "port %u out of range", port);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_EPOLL;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (!addr)
        addr = "127.0.0.1";
    if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else {
        return kvix_err_set(err, KVIX_EINVAL, "bad listen address \"%.64s\" (an IP literal)",
                            addr);
    }
    unsigned n = threads ? threads : 2u;
    if (n > 256)
        return kvix_err_set(err, KVIX_ERANGE, "%u server threads (at most 256)", n);
    struct kvix_http *h = calloc(1, sizeof *h + n * sizeof h->w[0]);
    if (!h)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    h->listen = MHD_INVALID_SOCKET;
    h->n = n;
    h->mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    h->cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    h->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (h->wake < 0) {
        int e = errno;
        free(h);
        return kvix_err_set(err, KVIX_ESYS, "cannot make an eventfd: %s", strerror(e));
    }
    s->http = h;
    s->stop = kvix_service_shutdown;
    int rc = KVIX_OK;
    int kicks[256];
    for (unsigned i = 0; i < n; i++) {
        h->w[i].s = s;
        h->w[i].id = i;
        h->w[i].kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        kicks[i] = h->w[i].kick;
        if (h->w[i].kick < 0 && !rc)
            rc = kvix_err_set(err, KVIX_ESYS, "cannot make an eventfd: %s", strerror(errno));
    }
    if (!rc)
        rc = kvix__conns_new(&s->conns, &s->o.limits, n, kicks, err);
    for (unsigned i = 0; i < n && !rc; i++) {
        errno = 0;
        h->w[i].d = start_daemon(&h->w[i], flags, (uint16_t)port, &ss, h->listen);
        if (!h->w[i].d) {
            int e = errno;
            rc = kvix_err_set(err, KVIX_ESYS, "cannot listen on %s port %u%s%s%s", addr, port,
                              e ? ": " : "", e ? strerror(e) : "",
                              e == EADDRINUSE ? " (another process, perhaps another kvindex, "
                                                "listens there)" : "");
        } else if (i == 0) {
            const union MHD_DaemonInfo *di =
                MHD_get_daemon_info(h->w[0].d, MHD_DAEMON_INFO_LISTEN_FD);
            const union MHD_DaemonInfo *pi =
                MHD_get_daemon_info(h->w[0].d, MHD_DAEMON_INFO_BIND_PORT);
            h->listen = di ? di->listen_fd : MHD_INVALID_SOCKET;
            s->port = pi ? pi->port : port;
            if (h->listen == MHD_INVALID_SOCKET)
                rc = kvix_err_set(err, KVIX_ESYS, "cannot listen on %s port %u", addr, port);
        }
    }
    for (unsigned i = 0; i < n && !rc; i++) {
        int e = pthread_create(&h->w[i].th, NULL, serve, &h->w[i]);
        if (e)
            rc = kvix_err_set(err, KVIX_ESYS, "cannot start a server thread: %s", strerror(e));
        else
            h->w[i].started = 1;
    }
    if (rc) {
        __atomic_store_n(&h->state, HTTP_EXIT, __ATOMIC_RELEASE);
        (void)!write(h->wake, &(uint64_t){1}, sizeof(uint64_t));
        http_free(s);
    }
    return rc;
}

unsigned kvix_service_port(const kvix_service *s)
{
    return s->port;
}

void kvix_service_shutdown(kvix_service *s, unsigned timeout_ms)
{
    struct kvix_http *h = s->http;
    if (!h)
        return;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    /* every worker stops accepting, then the socket closes: new connections
     * are refused while the requests in flight finish */
    __atomic_store_n(&h->state, HTTP_QUIESCE, __ATOMIC_RELEASE);
    (void)!write(h->wake, &(uint64_t){1}, sizeof(uint64_t));
    pthread_mutex_lock(&h->mu);
    while (h->quiesced < h->n && pthread_cond_timedwait(&h->cv, &h->mu, &until) == 0)
        ;
    int all = h->quiesced == h->n;
    pthread_mutex_unlock(&h->mu);
    if (all) {
        close(h->listen);
        h->listen = MHD_INVALID_SOCKET;
    }
    pthread_mutex_lock(&s->inflight_mu);
    while (s->inflight && pthread_cond_timedwait(&s->inflight_cv, &s->inflight_mu, &until) == 0)
        ;
    pthread_mutex_unlock(&s->inflight_mu);
    __atomic_store_n(&h->state, HTTP_EXIT, __ATOMIC_RELEASE);
    http_free(s);
}
