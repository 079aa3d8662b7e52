/* kvix: which records of a log a replay keeps (kvreplay's --worker,
 * --since/--until, --since-eid/--until-eid and --no-queries): the settings
 * are plain fields the caller fills, the judgement is kvix_filter_keep. A
 * kvix_filter holds no memory. */
#ifndef KVIX_FILTER_H
#define KVIX_FILTER_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/error.h"
#include "kvix/event.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVIX_FILTER_WORKERS_MAX 256

typedef struct kvix_filter_worker {
    uint64_t worker;
    uint32_t dp;
    int any_dp;
    uint64_t hits; /* events (not queries) kept that it matched */
} kvix_filter_worker;

/* A time bound: absolute (seconds since the epoch, as the records' ts), or
 * relative: seconds after the first ts of the log. */
typedef struct kvix_filter_time {
    int set, relative;
    double v;
} kvix_filter_time;

typedef struct kvix_filter {
    /* settings: no worker keeps every worker */
    kvix_filter_worker workers[KVIX_FILTER_WORKERS_MAX];
    size_t nworkers;
    int no_queries;
    kvix_filter_time since, until;
    int has_since_eid, has_until_eid;
    uint64_t since_eid, until_eid;
    /* what the records seen so far set */
    int have_first_ts, have_last_ts;
    double first_ts, last_ts;
} kvix_filter;

void kvix_filter_init(kvix_filter *f);

/* Keep (worker, dp), or every dp of worker with any_dp. KVIX_ELIMIT past
 * KVIX_FILTER_WORKERS_MAX. */
int kvix_filter_worker_add(kvix_filter *f, uint64_t worker, uint32_t dp, int any_dp,
                           kvix_err *err);

/* Whether the worker filters keep (worker, dp). */
int kvix_filter_worker_match(const kvix_filter *f, uint64_t worker, uint32_t dp);

/* Whether ev is kept, every record of the log passed in order (the first ts
 * anchors relative bounds). A record without ts (a query, usually) is judged
 * by the ts of the record before it, so a time window keeps the queries asked
 * within it. Counts the worker filters' hits. */
int kvix_filter_keep(kvix_filter *f, const kvix_event *ev);

/* Whether any setting can drop a record. */
int kvix_filter_active(const kvix_filter *f);

#ifdef __cplusplus
}
#endif
#endif
