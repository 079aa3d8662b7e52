/* The service protocol's entry: kvix_service_handle routes a request to its
 * endpoint's handler, checks its token, method and body size, and times it
 * for /metrics.
 * Above every handler; only the server (lib/net/service_http.c) is above it. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "kvix/service.h"
#include "service_priv.h"

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- routing ---- */

static int route(const char *path)
{
    for (int i = 0; i < EP_OTHER; i++)
        if (strcmp(path, kvix__service_endpoints[i]) == 0)
            return i;
    return EP_OTHER;
}

static const char *const ep_method[EP_COUNT] = {"GET",  "GET",  "POST", "POST", "GET",
                                                "GET",  "POST", "POST", "GET",  "POST",
                                                "POST", "GET",  "POST", ""};

/* ---- access ---- */

/* Equal, in a time that does not depend on where they differ. */
static int same_secret(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned char d = alen != blen;
    for (size_t i = 0; i < alen; i++)
        d |= (unsigned char)(a[i] ^ (i < blen ? b[i] : 0));
    return d == 0;
}

/* What guards an endpoint: 0 open, 1 a query, 2 the state. */
static int ep_guard(int ep)
{
    switch (ep) {
    case EP_HEALTH: case EP_METRICS: case EP_OTHER: return 0;
    case EP_QUERY: case EP_QUERY_HASH: return 1;
    default: return 2;
    }
}

int kvix_service_authorized(const kvix_service *s, const char *path, const char *authz)
{
    int g = ep_guard(route(path));
    if (!s->o.auth_token || g == 0 || (g == 1 && !s->o.auth_queries))
        return 1;
    if (!authz || strncasecmp(authz, "Bearer ", 7) != 0)
        return 0;
    const char *t = authz + 7;
    while (*t == ' ')
        t++;
    size_t n = strlen(t);
    while (n && t[n - 1] == ' ')
        n--;
    return same_secret(s->o.auth_token, strlen(s->o.auth_token), t, n);
}

void kvix_service_handle(kvix_service *s, const char *method, const char *path,
                         const char *body, size_t len, kvix_service_response *r)
{
    kvix_service_handle_as(s, NULL, method, path, body, len, r);
}

void kvix_service_handle_as(kvix_service *s, const char *authz, const char *method,
                            const char *path, const char *body, size_t len,
                            kvix_service_response *r)
{
    double t0 = mono_now();
    int ep = route(path);
    int m = strcmp(method, "GET") == 0    ? M_GET
            : strcmp(method, "POST") == 0 ? M_POST
            : strcmp(method, "HEAD") == 0 ? M_HEAD
                                          : M_OTHER;
    /* HEAD is answered where GET is, as GET would be (the HTTP library
     * sends the headers only): a monitor's HEAD /health, a proxy's check */
    const char *as = m == M_HEAD ? "GET" : method;
    kvix__service_response_clear(r); /* a reused response lets go of what it held */
    r->auth_challenge = 0;
    if (ep == EP_OTHER) {
        kvix__service_respond_error(r, 404, "no such endpoint");
    } else if (!kvix_service_authorized(s, path, authz)) {
        kvix__service_respond_error(r, 401, "this endpoint needs the service's bearer token "
                                   "(Authorization: Bearer TOKEN)");
        r->auth_challenge = 1;
    } else if (strcmp(as, ep_method[ep]) != 0) {
        char msg[64];
        snprintf(msg, sizeof msg, "method not allowed (use %s)",
                 strcmp(ep_method[ep], "GET") == 0 ? "GET or HEAD" : ep_method[ep]);
        kvix__service_respond_error(r, 405, msg);
    } else if (len > s->o.body_max) {
        char msg[96];
        snprintf(msg, sizeof msg, "request body over the limit of %zu bytes", s->o.body_max);
        kvix__service_respond_error(r, 413, msg);
    } else {
        switch (ep) {
        case EP_HEALTH: kvix__service_respond(r, 200, "application/json", "{\"status\":\"ok\"}"); break;
        case EP_METRICS: kvix__service_metrics(s, r); break;
        case EP_QUERY: kvix__service_post_query(s, body ? body : "", len, 0, 0, r); break;
        case EP_QUERY_HASH: kvix__service_post_query(s, body ? body : "", len, 1, 0, r); break;
        case EP_EXPLAIN: kvix__service_post_query(s, body ? body : "", len, 0, 1, r); break;
        case EP_DUMP: kvix__service_get_dump(s, r); break;
        case EP_SNAPSHOT: kvix__service_get_snapshot(s, r); break;
        case EP_REGISTER: kvix__service_register(s, body ? body : "", len, r); break;
        case EP_UNREGISTER: kvix__service_unregister(s, body ? body : "", len, r); break;
        case EP_WORKERS: kvix__service_workers(s, r); break;
        case EP_REGISTER_PEER: kvix__service_post_peer(s, body ? body : "", len, 1, r); break;
        case EP_DEREGISTER_PEER: kvix__service_post_peer(s, body ? body : "", len, 0, r); break;
        case EP_PEERS: kvix__service_peers(s, r); break;
        }
    }
    kvix__service_observe_request(s, ep, m, r->status, mono_now() - t0);
}
