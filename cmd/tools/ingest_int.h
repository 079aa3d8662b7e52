/* kvix_ingest's parts share this: cmd/tools/ingest.c (records, refusals, saves,
 * the reading loop) and cmd/tools/ingest_serve.c (subscriptions, the HTTP
 * service, recovery from peers). */
#ifndef KVIX_INGEST_INT_H
#define KVIX_INGEST_INT_H

#include <pthread.h>

#include "ingest.h"

/* Tags given to kvix_index_submit: event type, source, position; the index
 * hands them back with the refusals of its writer threads. */
#define TAG_POS_BITS 44
#define TAG_SRC_BITS 16

struct kvix_ingest {
    kvix_ingest_opts o;
    kvix_index *idx;
    struct kvix_service *svc;
    kvix_enginefeed *feed;
    pthread_mutex_t write_mu; /* every writer of the index, once a feed is there */
    pthread_mutex_t mu;       /* the refusal counters, and on_reject's calls */
    kvix_ingest_counts c;     /* submitted, queries, answered: main thread; the rest: mu */
    kvix_apply_result base;
    int stopped;             /* atomic: a strict stop (set under mu) */
    int feed_failed;         /* atomic: the feed's thread stopped on an error */
    int dirty;               /* main thread: changed since the last save */
    uint64_t since_save;     /* atomic: events applied from the sources since the last save */
    uint64_t fed_at_save;    /* the feed's applied + refused at the last save */
    uint64_t subs_at_save;   /* the subscriptions' changes at the last save (registrations
                                are saved with the index) */
    uint64_t fed_applied_at_save; /* atomic: the feed's applied count at the last save */
    int save_woken;          /* atomic: the feed woke the caller for a save not made yet */
    int svc_held;            /* the service's writers' side held over a message */
    char **unknown;          /* "model\ttenant" already first asked for */
    size_t nunknown;
    kvix_event ev;           /* kvix_ingest_run's buffers */
    kvix_answer ans;
    kvix_explain *xp; /* made on the first query explained */
    kvix_buf out;
};

/* A refused record counted and reported (see ingest.c). */
void ingest_refuse(kvix_ingest *g, const char *what, size_t src, uint64_t pos, int type,
                   int from_source, const kvix_err *e);
/* The submit tag of a record of src at pos. */
uint64_t ingest_tag(int type, size_t src, uint64_t pos);
/* --save-every-events reached, with the feed's applied count. Any thread. */
int ingest_due(kvix_ingest *g, uint64_t fed_applied);

#endif
