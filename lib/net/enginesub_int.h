/* Shared by lib/enginesub*.c, the engine subscriber (see kvix/enginesub.h):
 * the handle, a subscription, and the helpers each part calls in another.
 *   enginesub.c        the handle's lifecycle, the registry (any thread), counts
 *   enginesub_track.c  a subscription's ranks and clears, the sequence tracker's
 *                      callbacks: batches delivered, replays asked, losses
 *   enginesub_poll.c   sockets opened and closed by the poll thread, messages
 *                      read (live, replies, monitor events), the step */
#ifndef KVIX_ENGINESUB_INT_H
#define KVIX_ENGINESUB_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "kvix/enginesub.h"
#include "seqtrack_int.h"


#define SEQ_FRAME 8
#define DRAIN_MAX 256      /* messages taken from one socket per step */
#define RECONNECT_MS 100
#define RECONNECT_MAX_MS 2000
#define RCVHWM 100000      /* the engines' own high-water mark */
#define GIVEUP_GRACE_MS 250 /* a disconnect with no reconnect attempt this long after:
                               ZMQ gave the connection up (protocol error) */
#define NOTE_MAX 512
#define RESOLVE_EVERY_MS 1000 /* a name asked again at most this often */

typedef struct sub sub;

/* A batch on its way through the tracker: borrowed frames, or a held copy. */
typedef struct item {
    uint64_t seq;
    const void *data;
    size_t len;
    bool owned;
} item;

/* kvix_enginesub_resume's positions: a worker's, of the subscriptions of
 * one (model, tenant) (names: an index in kvix_enginesub.resnames) */
typedef struct resume_ent {
    uint64_t worker, eid;
    uint32_t dp;
    uint32_t names;
} resume_ent;

/* A (model, tenant) of resume positions; "" for either: any */
typedef struct resume_names {
    char model[KVIX_NAME_MAX], tenant[KVIX_NAME_MAX];
} resume_names;

struct sub {
    kvix_enginesub *s;
    kvix_enginesub_spec spec;
    int group;
    /* A tcp endpoint named by a host (connect mode) is connected to the
     * address enginesub_resolve.c found, never to the name (poll thread). */
    bool named;
    char conn_ep[KVIX_ENGINESUB_ENDPOINT_MAX];   /* connected to now; "" none */
    char addr_ep[KVIX_ENGINESUB_ENDPOINT_MAX];   /* the last answer; "" none yet */
    char replay_ep[KVIX_ENGINESUB_ENDPOINT_MAX]; /* replay_for resolved; "" none */
    char replay_for[KVIX_ENGINESUB_ENDPOINT_MAX];
    char asked_replay[KVIX_ENGINESUB_ENDPOINT_MAX]; /* spec.replay when last asked */
    uint64_t res_id;   /* the resolution pending; 0: none */
    uint64_t res_at;   /* ask (again) from this time on (ms); 0: not due */
    uint64_t res_last; /* when last asked (ms) */
    bool unresolved_said;
    bool removed;   /* under mu: left the registry */
    bool opened;    /* poll thread: sockets open, in live */
    void *sock, *mon, *dealer;
    bool connected, giveup_pending;
    uint64_t disc_at;
    uint64_t noconn_since; /* connecting, with no connection since then */
    bool noconn_noted;     /* KVIX_ENGINESUB_NO_CONNECTION said since */
    kvix_seqtrack st;
    uint32_t *ranks; /* sorted */
    unsigned nranks, capranks;
    uint64_t batches, losses_extra, last_seq, last_msg_at;
    bool has_seq, has_msg;
    /* published at the end of a step (under mu) */
    kvix_seqtrack_counts pub_seq;
    uint64_t pub_batches, pub_last_seq, pub_last_msg_at;
    bool pub_has_msg;
    unsigned pub_ranks;
    bool pub_open, pub_connected, pub_replaying, pub_has_seq;
};

typedef struct vec {
    sub **v;
    size_t n, cap;
} vec;

struct kvix_enginesub {
    kvix_enginesub_config cfg;
    char model[KVIX_NAME_MAX], tenant[KVIX_NAME_MAX], *topic;
    kvix_enginesub_ops ops;
    void *ctx;
    void *zctx;
    int wake_rd, wake_wr;
    pthread_mutex_t mu;
    vec reg, pending, gone; /* under mu */
    vec live;               /* poll thread */
    zmq_pollitem_t *items;
    sub **owners;
    char *kinds;
    size_t capitems;
    resume_ent *res;
    size_t nres;
    resume_names *resnames;
    size_t nresnames;
    uint64_t mon_id;
    struct esub_resolver *resolver; /* host names of tcp endpoints (enginesub_resolve.c) */
    uint64_t res_seq;          /* resolution ids handed out */
    kvix_enginesub_counts c;   /* poll thread; seq: of the subs freed */
    kvix_enginesub_counts pub; /* under mu */
    unsigned repeat[16];
    uint64_t changes; /* subscriptions entered and left; atomic (written under mu) */
    kvix_event ev;             /* the clears' scratch */
    /* the batch being delivered */
    sub *cur;
    int cur_drop;
};

static inline uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void vec_del(vec *v, size_t i)
{
    memmove(v->v + i, v->v + i + 1, (v->n - i - 1) * sizeof *v->v);
    v->n--;
}

static inline const char *model_of(const sub *b)
{
    return b->spec.model[0] ? b->spec.model : b->s->model;
}

static inline const char *tenant_of(const sub *b)
{
    return b->spec.tenant[0] ? b->spec.tenant : b->s->tenant;
}

/* enginesub.c */
int kvix__esub_vec_push(vec *v, sub *x);
/* Tells the caller's note callback (if any) about b; counts repeats per kind. */
void kvix__esub_note(kvix_enginesub *s, int kind, const sub *b, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Poll thread: closes b's SUB socket and its monitor. */
void kvix__esub_sockets_close(sub *b);
/* Poll thread: closes b's sockets and its tracker (b stays allocated). */
void kvix__esub_sub_close(sub *b);
void kvix__esub_counts_add(kvix_seqtrack_counts *a, const kvix_seqtrack_counts *b);
/* Poll thread: adds b's counts to s's, closes it if open, frees it. */
void kvix__esub_sub_free(kvix_enginesub *s, sub *b);
/* Under mu: takes reg.v[i] out of the registry; the poll thread frees it. */
void kvix__esub_leave(kvix_enginesub *s, size_t i);

/* enginesub_resolve.c */
typedef struct esub_resolver esub_resolver;
typedef struct esub_resolved {
    uint64_t id;
    bool ok;
    char ep[KVIX_ENGINESUB_ENDPOINT_MAX];     /* the endpoint with its host's address */
    char replay[KVIX_ENGINESUB_ENDPOINT_MAX]; /* the replay's, "" when not asked or unknown */
    char why[128];                            /* !ok: getaddrinfo's reason */
} esub_resolved;
/* Whether ep is tcp://NAME:PORT with NAME not an address. */
bool kvix__esub_host_is_name(const char *ep);
int kvix__esub_resolver_new(esub_resolver **out, kvix_err *err);
/* Never waits for a lookup under way. NULL is fine. */
void kvix__esub_resolver_free(esub_resolver *r);
/* Readable while answers wait for kvix__esub_resolver_take. */
int kvix__esub_resolver_fd(const esub_resolver *r);
/* Resolve ep (and replay, may be "" or NULL) for request id. KVIX_ENOMEM. */
int kvix__esub_resolver_ask(esub_resolver *r, uint64_t id, const char *ep, const char *replay);
/* An answer: 1, or 0 when none waits (call until 0). */
int kvix__esub_resolver_take(esub_resolver *r, esub_resolved *out);

/* enginesub_track.c */
/* false: past ranks_max (or out of memory): the rank is not followed. */
bool kvix__esub_rank_add(sub *b, uint32_t dp);
/* Every (worker, dp) seen on b can no longer be vouched for: a clear each. */
void kvix__esub_clear_all(sub *b);
extern const kvix_seqtrack_ops kvix__esub_track_ops;

#endif
