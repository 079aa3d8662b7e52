/* The service behind libmicrohttpd: a pool of server threads, each request's
 * body gathered (up to the ceiling) and handed to kvix_service_handle. */
#define _GNU_SOURCE /* gettid */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
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
    size_t seen; /* bytes received, kept or not */
} conn;

static void conn_done(kvix_service *s)
{
    pthread_mutex_lock(&s->inflight_mu);
    s->inflight--;
    pthread_cond_broadcast(&s->inflight_cv);
    pthread_mutex_unlock(&s->inflight_mu);
}

/* Once per server thread. A failure leaves the thread as it was: lowering
 * one's own priority is always allowed, and the service works either way. */
static void lower_priority(int by)
{
    static __thread int done;
    if (done)
        return;
    done = 1;
    id_t tid = (id_t)gettid();
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, tid);
    if (errno == 0)
        (void)setpriority(PRIO_PROCESS, tid, cur + by > 19 ? 19 : cur + by);
}

static enum MHD_Result send_response(struct MHD_Connection *c, kvix_service_response *r)
{
    struct MHD_Response *resp;
    if (r->fd >= 0) {
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
        if (s->o.server_nice > 0)
            lower_priority(s->o.server_nice);
        k = calloc(1, sizeof *k);
        if (!k)
            return MHD_NO;
        kvix_buf_init(&k->body);
        *ctx = k;
        pthread_mutex_lock(&s->inflight_mu);
        s->inflight++;
        pthread_mutex_unlock(&s->inflight_mu);
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        k->seen += n;
        /* past the ceiling the bytes are read and dropped: the answer is 413 */
        if (k->seen <= s->o.body_max && kvix_buf_append(&k->body, upload_data, n, NULL))
            k->seen = s->o.body_max + 1;
        *upload_size = 0;
        return MHD_YES;
    }
    kvix_service_response r;
    kvix_service_response_init(&r);
    kvix_service_handle(s, method, url, k->body.data, k->seen, &r);
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
    (void)why;
    if (!k)
        return;
    kvix_buf_release(&k->body);
    free(k);
    *ctx = NULL;
    conn_done(s);
}

int kvix_service_listen(kvix_service *s, const char *addr, unsigned port, unsigned threads,
                        kvix_err *err)
{
    if (s->daemon)
        return kvix_err_set(err, KVIX_EINVAL, "the service is already listening");
    if (port > 65535)
        return kvix_err_set(err, KVIX_ERANGE, "port %u out of range", port);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC;
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
    errno = 0;
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE, threads ? threads : 2u,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)60, MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)POOL_BYTES, MHD_OPTION_END);
    if (!s->daemon)
        return kvix_err_set(err, KVIX_ESYS, "cannot listen on %s port %u%s%s", addr, port,
                            errno ? ": " : "", errno ? strerror(errno) : "");
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : port;
    return KVIX_OK;
}

unsigned kvix_service_port(const kvix_service *s)
{
    return s->port;
}

void kvix_service_shutdown(kvix_service *s, unsigned timeout_ms)
{
    if (!s->daemon)
        return;
    MHD_socket lfd = MHD_quiesce_daemon(s->daemon);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->inflight_mu);
    while (s->inflight && pthread_cond_timedwait(&s->inflight_cv, &s->inflight_mu, &until) == 0)
        ;
    pthread_mutex_unlock(&s->inflight_mu);
    MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}
