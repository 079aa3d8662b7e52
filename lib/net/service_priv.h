/* libkvix private: the service object, shared by lib/net/service*.c. Lowest
 * first: service_respond.c, service.c, the handlers (service_query.c,
 * service_state.c, service_metrics.c, service_workers.c, service_peers.c),
 * service_route.c, service_http.c; each calls only those before it. */
#ifndef KVIX_SERVICE_PRIV_H
#define KVIX_SERVICE_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "kvix/index.h"
#include "kvix/service.h"
#include "service_int.h"

enum {
    EP_HEALTH, EP_METRICS, EP_QUERY, EP_QUERY_HASH, EP_DUMP, EP_SNAPSHOT,
    EP_REGISTER, EP_UNREGISTER, EP_WORKERS, EP_REGISTER_PEER, EP_DEREGISTER_PEER, EP_PEERS,
    EP_EXPLAIN, EP_OTHER, EP_COUNT
};
enum { M_GET, M_POST, M_HEAD, M_OTHER, M_COUNT };
enum { SC_2XX, SC_4XX, SC_5XX, SC_COUNT };

/* Histogram bucket upper bounds, seconds (Prometheus "le"); +Inf follows. */
#define KVIX_HIST_BUCKETS 14
extern const double kvix__service_buckets[KVIX_HIST_BUCKETS];
extern const char *const kvix__service_endpoints[EP_COUNT];

typedef struct kvix_hist {
    uint64_t count[KVIX_HIST_BUCKETS + 1]; /* atomic; not cumulative: summed when printed */
    uint64_t sum_ns;                      /* atomic */
} kvix_hist;

/* GET /dump and GET /snapshot (lib/net/service_state.c): per kind, the
 * state being written or the last one written, and the responses of that
 * kind waiting or being sent (at most KVIX_SERVICE_STATES_MAX). */
#define KVIX_STATE_KINDS 2
#define KVIX_STATE_DUMP 0
#define KVIX_STATE_SNAPSHOT 1
#define KVIX_SERVICE_STATES_MAX 16u

typedef struct kvix_state_kind {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct state_file *cur;
    unsigned inflight;
    uint64_t builds, refused; /* states written; requests refused (503) */
    double hold_max;          /* the last state's: the longest a writer was held back */
} kvix_state_kind;

/* The metrics of the two kinds (lib/net/service_metrics.c). */
typedef struct kvix_state_counts {
    uint64_t builds, refused;
    unsigned inflight;
    double hold_max;
} kvix_state_counts;
void kvix__service_state_counts(kvix_service *s, int kind, kvix_state_counts *out);
extern const char *const kvix__service_state_paths[KVIX_STATE_KINDS];

typedef struct kvix_service_states {
    kvix_state_kind k[KVIX_STATE_KINDS];
} kvix_service_states;

void kvix__service_states_init(kvix_service_states *st);
void kvix__service_states_release(kvix_service_states *st);
void kvix__service_get_state(kvix_service *s, int kind, kvix_service_response *r);

struct kvix_service {
    kvix_service_opts o;
    int own_peers;        /* o.peers was made by kvix_service_new */
    uint64_t stream_seq;  /* o.stream: written under the index's writers' side, read quiet */
    pthread_key_t ans_key; /* per server thread: a kvix_answer reused across queries */
    /* metrics (atomic) */
    uint64_t requests[EP_COUNT][M_COUNT];
    uint64_t errors[EP_COUNT][SC_COUNT];
    uint64_t queries_asked, queries_answered; /* POST /query and /query_by_hash */
    kvix_hist req_hist[EP_COUNT];
    kvix_hist query_hist;
    uint64_t submitted[KVIX_EV_QUERY + 1], rejected_type[KVIX_EV_QUERY + 1];
    uint64_t *rejected_reason; /* nreasons + 1 (the last: unnamed) */
    /* under inflight_mu */
    pthread_mutex_t inflight_mu;
    pthread_cond_t inflight_cv;
    unsigned inflight;
    double save_seconds, save_when;
    uint64_t saves;
    pthread_mutex_t register_mu; /* a registration's checks and its add, as one */
    /* the server (lib/net/service_http.c) */
    struct kvix_http *http; /* NULL: not listening */
    /* stops the server (kvix_service_shutdown), set with http: the object
     * is below the server and frees it through this */
    void (*stop)(kvix_service *s, unsigned timeout_ms);
    struct kvix_conns *conns; /* its connections' bounds; NULL: not listening */
    unsigned port;
    kvix_service_states states; /* /dump and /snapshot */
};

/* What a server thread keeps across queries (under s->ans_key), made on its
 * first query; kvix__service_answer_free frees it (the key's destructor). */
typedef struct kvix_service_thread {
    kvix_answer ans; /* first: kvix__service_answer_free takes either */
    kvix_u64_refs refs;
} kvix_service_thread;
kvix_service_thread *kvix__service_thread_get(kvix_service *s);

/* The server's connections and the memory their requests hold
 * (lib/net/service_conns.c). Every call but _new and _free is thread-safe. */
typedef struct kvix_conns kvix_conns;
typedef struct kvix_conn kvix_conn;
typedef struct kvix_conns_stats {
    uint64_t open, memory, refused, evicted, expired, memory_refused;
} kvix_conns_stats;
/* kick[w]: the descriptor written when server thread w has connections to
 * end (kvix__conns_sweep); copied. */
int kvix__conns_new(kvix_conns **out, const kvix_service_limits *lim, unsigned nworkers,
                   const int *kick, kvix_err *err);
void kvix__conns_free(kvix_conns *c);
/* A connection accepted by thread `worker` (libmicrohttpd's start
 * notification, on that thread): its record, or NULL (out of memory). Past
 * the bounds the oldest waiting connection is ended in its place, or, with
 * none to end, this one is (its socket shut down; the record stays until
 * kvix__conns_close). */
kvix_conn *kvix__conns_open(kvix_conns *c, unsigned worker, int fd, const struct sockaddr *addr,
                           double now);
/* libmicrohttpd closed the connection; r is freed. NULL is fine. */
void kvix__conns_close(kvix_conns *c, kvix_conn *r);
/* Its request arrived whole: no deadline while it is answered. */
void kvix__conns_answering(kvix_conns *c, kvix_conn *r);
/* Answered and kept alive: the next request's deadline runs from now. */
void kvix__conns_waiting(kvix_conns *c, kvix_conn *r, double now);
/* On thread `worker`, outside libmicrohttpd: end the connections queued
 * for it, and those whose request is late. Returns the milliseconds until
 * the next deadline, or -1 for none. */
int kvix__conns_sweep(kvix_conns *c, unsigned worker, double now);
/* Take n bytes of the requests' memory; false (counted) past memory_max. */
bool kvix__conns_mem_take(kvix_conns *c, size_t n);
void kvix__conns_mem_give(kvix_conns *c, size_t n);
void kvix__conns_figures(kvix_conns *c, kvix_conns_stats *out);

kvix_answer *kvix__service_answer(kvix_service *s);
void kvix__service_answer_free(void *p);
void kvix__service_metrics(kvix_service *s, kvix_service_response *r);
void kvix__service_observe_request(kvix_service *s, int ep, int method, int status, double secs);
void kvix__service_observe_query(kvix_service *s, double secs);
void kvix__service_respond(kvix_service_response *r, int status, const char *ctype,
                          const char *text);
void kvix__service_respond_error(kvix_service_response *r, int status, const char *msg);
/* Empty r for its next use: its body emptied (its memory kept), its file
 * closed and its done callback called. */
void kvix__service_response_clear(kvix_service_response *r);
/* The status for e->code and {"error":e->msg}. */
void kvix__service_respond_err(kvix_service_response *r, const kvix_err *e);
/* POST /query (by_hash 0), /query_by_hash (1), /explain (explain 1: the
 * answer line explained) (lib/net/service_query.c). */
void kvix__service_post_query(kvix_service *s, const char *body, size_t len, int by_hash,
                             int explain, kvix_service_response *r);
/* GET /dump, GET /snapshot (lib/net/service_state.c). */
void kvix__service_get_dump(kvix_service *s, kvix_service_response *r);
void kvix__service_get_snapshot(kvix_service *s, kvix_service_response *r);
/* POST /register, POST /unregister, GET /workers (lib/net/service_workers.c). */
void kvix__service_register(kvix_service *s, const char *body, size_t len,
                           kvix_service_response *r);
void kvix__service_unregister(kvix_service *s, const char *body, size_t len,
                             kvix_service_response *r);
void kvix__service_workers(kvix_service *s, kvix_service_response *r);
/* POST /register_peer (add) and /deregister_peer, GET /peers (lib/net/service_peers.c). */
void kvix__service_post_peer(kvix_service *s, const char *body, size_t len, int add,
                            kvix_service_response *r);
void kvix__service_peers(kvix_service *s, kvix_service_response *r);

#endif
