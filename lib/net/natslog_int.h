/* Shared by lib/natslog*.c: the handle and the publisher's window. */
#ifndef KVIX_NATSLOG_INT_H
#define KVIX_NATSLOG_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include <nats/nats.h>

#include "kvix/event.h"
#include "kvix/natslog.h"

/* One batch of the publisher's window, from its sending to its
 * acknowledgement. */
typedef struct natslog_batch {
    natsMsg *msg; /* while in flight: the message nats.c holds (its identity only) */
    int state;    /* NB_FLIGHT, NB_DONE, NB_FAILED */
    int has_id;
    uint64_t seq; /* NB_DONE: where the stream holds it */
    char id[96];
    char subj[KVIX_NATSLOG_SUBJECT_MAX + KVIX_NAME_MAX + 32];
    kvix_buf pay;
} natslog_batch;

enum { NB_FLIGHT, NB_DONE, NB_FAILED };

/* The window: a ring of the batches not yet acknowledged, in the order they
 * were handed to kvix_natslog_publish. mu guards it: nats.c's thread marks
 * acknowledgements (natslog_pub.c's on_ack), ours does the rest. */
typedef struct natslog_pub {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    natslog_batch *ring;
    size_t cap, head, count; /* ring[head .. head + count) (mod cap) */
    size_t inflight;         /* NB_FLIGHT among them */
    int failed;              /* some NB_FAILED: resend before anything new */
    char why[KVIX_ERR_MSG_MAX];
    char next_subj[sizeof(((natslog_batch *)0)->subj)]; /* of the batch waiting to go */
    kvix_natslog_pubstats st;
} natslog_pub;

struct kvix_natslog {
    natsConnection *nc;
    jsCtx *js;
    char *url, *stream, *subject, *name;
    kvix_natslog_opts o;
    atomic_int reconnected; /* set by nats.c's thread, read by ours */
    /* consumer */
    natsSubscription *sub;
    natsMsg *msg;       /* the message last handed out */
    uint64_t next;      /* sequence of the next message to hand out */
    int64_t stored_ns;  /* when the server stored the message last handed out */
    int consuming;
    uint64_t gap_from;  /* a gap seen once: made again; seen twice: gone */
    /* follower (natslog_follow.c): the message handed out record by record */
    struct {
        const char *data; /* l->msg's */
        size_t len, off;
        uint64_t seq, applied;
        int open, ended;
        double *lag; /* microseconds, at most LAG_MAX kept */
        size_t nlag, lag_seen;
    } f;
    /* publisher */
    kvix_buf pay;
    size_t *recs;        /* where each record of pay starts */
    size_t nrecs, caprecs;
    kvix_buf part;       /* a part of pay (or its stand-in clear) on its way */
    kvix_event ev;
    natslog_pub pub;
    /* kvix_natslog_publish_event: the batch being gathered, as msgpack
     * records; open: more events of (worker, dp, eid) may join it; done:
     * complete, handed over at the next call */
    struct {
        kvix_buf recs;
        uint64_t worker, eid;
        uint32_t dp;
        int open, done;
    } g;
};

/* err from a nats.c failure: its last error text, else the status's. Inline:
 * the handle's files and the publisher's all report through it. */
static inline int natslog_fail(kvix_err *err, int code, const char *what, natsStatus s,
                               jsErrCode je)
{
    const char *last = nats_GetLastError(NULL);
    /* nats.c says where in its source first: "(conn.c:1905): Authorization Violation" */
    if (last && last[0] == '(' && strstr(last, "): "))
        last = strstr(last, "): ") + 3;
    if (je)
        return kvix_err_set(err, code, "nats: %s: %s (jetstream error %d)", what,
                            last && *last ? last : natsStatus_GetText(s), (int)je);
    return kvix_err_set(err, code, "nats: %s: %s", what,
                        last && *last ? last : natsStatus_GetText(s));
}

/* natslog_pub.c: the window made and freed with the handle; the context
 * options that route acknowledgements to it. */
int kvix__natslog_pub_init(kvix_natslog *l, kvix_err *err);
void kvix__natslog_pub_release(kvix_natslog *l);
void kvix__natslog_pub_jsopts(kvix_natslog *l, jsOptions *jo);

#endif
