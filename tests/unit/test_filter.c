/* kvix_filter: worker, eid and time filters over a log's records in order,
 * relative bounds anchored at the first ts, records without ts judged by the
 * ts before them, and the worker filters' hits. */
#include "harness.h"
#include "filter.h"

static kvix_event rec(int type, uint64_t worker, uint32_t dp, int has_eid, uint64_t eid,
                      int has_ts, double ts)
{
    kvix_event ev;
    kvix_event_init(&ev);
    ev.type = type;
    ev.worker = worker;
    ev.dp = dp;
    ev.has_eid = has_eid & 1;
    ev.eid = eid;
    ev.has_ts = has_ts & 1;
    ev.ts = ts;
    return ev;
}

TEST(no_setting_keeps_everything)
{
    kvix_filter f;
    kvix_filter_init(&f);
    CHECK(!kvix_filter_active(&f));
    kvix_event a = rec(KVIX_EV_STORED, 9, 3, 1, 1, 1, 5.0);
    kvix_event q = rec(KVIX_EV_QUERY, 0, 0, 0, 0, 0, 0);
    CHECK(kvix_filter_keep(&f, &a));
    CHECK(kvix_filter_keep(&f, &q));
    CHECK(kvix_filter_worker_match(&f, 12345, 7));
}

TEST(workers_with_and_without_a_dp_count_their_hits)
{
    kvix_filter f;
    kvix_filter_init(&f);
    kvix_err err;
    CHECK(kvix_filter_worker_add(&f, 1, 0, 1, &err) == KVIX_OK); /* every dp of 1 */
    CHECK(kvix_filter_worker_add(&f, 2, 1, 0, &err) == KVIX_OK); /* dp 1 of 2 only */
    CHECK(kvix_filter_worker_add(&f, 3, 0, 0, &err) == KVIX_OK); /* never seen */
    CHECK(kvix_filter_active(&f));
    kvix_event e[] = {
        rec(KVIX_EV_STORED, 1, 0, 0, 0, 0, 0), rec(KVIX_EV_REMOVED, 1, 4, 0, 0, 0, 0),
        rec(KVIX_EV_STORED, 2, 0, 0, 0, 0, 0), rec(KVIX_EV_STORED, 2, 1, 0, 0, 0, 0),
        rec(KVIX_EV_STORED, 5, 1, 0, 0, 0, 0), rec(KVIX_EV_QUERY, 1, 0, 0, 0, 0, 0),
    };
    int want[] = {1, 1, 0, 1, 0, 1};
    for (size_t i = 0; i < sizeof e / sizeof *e; i++)
        CHECK_U64(kvix_filter_keep(&f, &e[i]), want[i]);
    CHECK_U64(f.workers[0].hits, 2); /* the query is not counted */
    CHECK_U64(f.workers[1].hits, 1);
    CHECK_U64(f.workers[2].hits, 0);
    for (size_t i = 3; i < KVIX_FILTER_WORKERS_MAX; i++)
        CHECK(kvix_filter_worker_add(&f, i, 0, 1, &err) == KVIX_OK);
    CHECK(kvix_filter_worker_add(&f, 999, 0, 1, &err) == KVIX_ELIMIT);
    CHECK_U64(f.nworkers, KVIX_FILTER_WORKERS_MAX);
}

TEST(eid_window_and_no_queries)
{
    kvix_filter f;
    kvix_filter_init(&f);
    f.has_since_eid = f.has_until_eid = 1;
    f.since_eid = 5;
    f.until_eid = 9;
    f.no_queries = 1;
    kvix_event a = rec(KVIX_EV_STORED, 1, 0, 1, 4, 0, 0);
    kvix_event b = rec(KVIX_EV_STORED, 1, 0, 1, 5, 0, 0);
    kvix_event c = rec(KVIX_EV_STORED, 1, 0, 1, 9, 0, 0);
    kvix_event d = rec(KVIX_EV_STORED, 1, 0, 1, 10, 0, 0);
    kvix_event noeid = rec(KVIX_EV_CLEARED, 1, 0, 0, 0, 0, 0);
    kvix_event q = rec(KVIX_EV_QUERY, 0, 0, 0, 0, 0, 0);
    CHECK(!kvix_filter_keep(&f, &a));
    CHECK(kvix_filter_keep(&f, &b));
    CHECK(kvix_filter_keep(&f, &c));
    CHECK(!kvix_filter_keep(&f, &d));
    CHECK(kvix_filter_keep(&f, &noeid)); /* no eid: not judged by the eid window */
    CHECK(!kvix_filter_keep(&f, &q));
}

TEST(relative_time_window_anchored_at_the_first_ts_and_queries_by_the_ts_before)
{
    kvix_filter f;
    kvix_filter_init(&f);
    f.since = (kvix_filter_time){1, 1, 10.0}; /* +10 */
    f.until = (kvix_filter_time){1, 1, 20.0}; /* +20 */
    kvix_event q = rec(KVIX_EV_QUERY, 0, 0, 0, 0, 0, 0);
    CHECK(kvix_filter_keep(&f, &q)); /* no ts seen yet: kept */
    kvix_event a = rec(KVIX_EV_STORED, 1, 0, 0, 0, 1, 1000.0);
    CHECK(!kvix_filter_keep(&f, &a)); /* anchors: window 1010..1020 */
    CHECK(!kvix_filter_keep(&f, &q)); /* judged by 1000 */
    kvix_event b = rec(KVIX_EV_STORED, 1, 0, 0, 0, 1, 1015.0);
    CHECK(kvix_filter_keep(&f, &b));
    CHECK(kvix_filter_keep(&f, &q)); /* judged by 1015 */
    kvix_event c = rec(KVIX_EV_REMOVED, 1, 0, 0, 0, 1, 1020.5);
    CHECK(!kvix_filter_keep(&f, &c));
    CHECK(!kvix_filter_keep(&f, &q));
    /* Absolute bounds ignore the anchor. */
    kvix_filter_init(&f);
    f.until = (kvix_filter_time){1, 0, 50.0};
    kvix_event e = rec(KVIX_EV_STORED, 1, 0, 0, 0, 1, 40.0);
    kvix_event g = rec(KVIX_EV_STORED, 1, 0, 0, 0, 1, 60.0);
    CHECK(kvix_filter_keep(&f, &e));
    CHECK(!kvix_filter_keep(&f, &g));
}
