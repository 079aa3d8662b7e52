/* GET /metrics: the Prometheus text exposition (format 0.0.4) of Dynamo's
 * indexer metrics and kvix's own. Counters are relaxed atomics bumped on the
 * request path; the index gauges are read with the index quiet. */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kvix/enginesub.h"
#include "kvix/index.h"
#include "service_int.h"
#include "service_priv.h"

const double kvix__service_buckets[KVIX_HIST_BUCKETS] = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
    0.01,    0.025,  0.05,    0.1,    0.25,  1,      5,
};

static const char *const method_names[M_COUNT] = {"GET", "POST", "HEAD", "other"};
static const char *const class_names[SC_COUNT] = {"2xx", "4xx", "5xx"};

static void hist_add(kvix_hist *h, double secs)
{
    int b = 0;
    while (b < KVIX_HIST_BUCKETS && secs > kvix__service_buckets[b])
        b++;
    __atomic_fetch_add(&h->count[b], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->sum_ns, (uint64_t)(secs * 1e9), __ATOMIC_RELAXED);
}

void kvix__service_observe_request(kvix_service *s, int ep, int method, int status, double secs)
{
    __atomic_fetch_add(&s->requests[ep][method], 1, __ATOMIC_RELAXED);
    if ((ep == EP_QUERY || ep == EP_QUERY_HASH) && method == M_POST) {
        __atomic_fetch_add(&s->queries_asked, 1, __ATOMIC_RELAXED);
        if (status == 200)
            __atomic_fetch_add(&s->queries_answered, 1, __ATOMIC_RELAXED);
    }
    if (status >= 400)
        __atomic_fetch_add(&s->errors[ep][status >= 500 ? SC_5XX : SC_4XX], 1, __ATOMIC_RELAXED);
    hist_add(&s->req_hist[ep], secs);
}

void kvix_service_queries(const kvix_service *s, uint64_t *asked, uint64_t *answered)
{
    *asked = __atomic_load_n(&s->queries_asked, __ATOMIC_RELAXED);
    *answered = __atomic_load_n(&s->queries_answered, __ATOMIC_RELAXED);
}

void kvix__service_observe_query(kvix_service *s, double secs)
{
    hist_add(&s->query_hist, secs);
}

static uint64_t ld(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

typedef struct out {
    kvix_buf *b;
    int rc;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...)
{
    if (o->rc)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->rc = kvix_buf_append(o->b, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1,
                            NULL);
}

static void head(out *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(out *o, const char *name, const char *label, const kvix_hist *h)
{
    uint64_t cum = 0;
    const char *sep = *label ? "," : "";
    for (int b = 0; b <= KVIX_HIST_BUCKETS; b++) {
        cum += ld(&h->count[b]);
        if (b < KVIX_HIST_BUCKETS)
            put(o, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, label, sep,
                kvix__service_buckets[b], cum);
        else
            put(o, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, label, sep, cum);
    }
    const char *l = *label ? "{" : "", *r = *label ? "}" : "";
    put(o, "%s_sum%s%s%s %.9f\n", name, l, label, r, (double)ld(&h->sum_ns) / 1e9);
    put(o, "%s_count%s%s%s %" PRIu64 "\n", name, l, label, r, cum);
}

static void dynamo_metrics(kvix_service *s, out *o, const kvix_index_stats *st)
{
    char label[96];
    head(o, "dynamo_kvindexer_request_duration_seconds", "histogram",
         "HTTP request duration by endpoint");
    for (int e = 0; e < EP_COUNT; e++) {
        snprintf(label, sizeof label, "endpoint=\"%s\"", kvix__service_endpoints[e]);
        hist(o, "dynamo_kvindexer_request_duration_seconds", label, &s->req_hist[e]);
    }
    head(o, "dynamo_kvindexer_requests_total", "counter", "HTTP requests by endpoint and method");
    for (int e = 0; e < EP_COUNT; e++)
        for (int m = 0; m < M_COUNT; m++)
            put(o, "dynamo_kvindexer_requests_total{endpoint=\"%s\",method=\"%s\"} %" PRIu64 "\n",
                kvix__service_endpoints[e], method_names[m], ld(&s->requests[e][m]));
    head(o, "dynamo_kvindexer_errors_total", "counter",
         "HTTP error responses by endpoint and status class");
    for (int e = 0; e < EP_COUNT; e++)
        for (int c = SC_4XX; c < SC_COUNT; c++)
            put(o,
                "dynamo_kvindexer_errors_total{endpoint=\"%s\",status_class=\"%s\"} %" PRIu64 "\n",
                kvix__service_endpoints[e], class_names[c], ld(&s->errors[e][c]));
    head(o, "dynamo_kvindexer_models", "gauge", "(model, tenant) partitions in the index");
    put(o, "dynamo_kvindexer_models %zu\n", st->partitions);
    head(o, "dynamo_kvindexer_workers", "gauge",
         "distinct workers (instance ids) holding state in the index");
    put(o, "dynamo_kvindexer_workers %zu\n", st->instances);
}

static void kvix_metrics(kvix_service *s, out *o, const kvix_index_stats *st)
{
    head(o, "kvix_events_applied_total", "counter", "events applied, by type");
    for (int t = KVIX_EV_STORED; t <= KVIX_EV_CLEARED; t++)
        put(o, "kvix_events_applied_total{type=\"%s\"} %" PRIu64 "\n", kvix_event_type_name(t),
            ld(&s->submitted[t]) - ld(&s->rejected_type[t]));
    head(o, "kvix_events_rejected_total", "counter", "input records rejected, by reason");
    for (size_t r = 0; r <= s->o.nreasons; r++)
        put(o, "kvix_events_rejected_total{reason=\"%s\"} %" PRIu64 "\n",
            r < s->o.nreasons ? s->o.reject_reasons[r] : "other", ld(&s->rejected_reason[r]));
    kvix_apply_result tot;
    kvix_index_totals(s->o.idx, &tot);
    head(o, "kvix_group_skipped_total", "counter",
         "blocks and hashes of KV cache groups of a kind kept out of answers, not applied");
    put(o, "kvix_group_skipped_total %" PRIu64 "\n", tot.skipped);
    head(o, "kvix_group_kept_total", "counter",
         "removed hashes another full KV cache group of the worker still holds");
    put(o, "kvix_group_kept_total %" PRIu64 "\n", tot.kept);
    head(o, "kvix_index_blocks", "gauge", "stored (worker, block) pairs");
    put(o, "kvix_index_blocks %zu\n", st->blocks);
    head(o, "kvix_index_unique_blocks", "gauge", "distinct (partition, position, hash) blocks");
    put(o, "kvix_index_unique_blocks %zu\n", st->unique_blocks);
    head(o, "kvix_index_workers", "gauge", "(partition, worker, dp) with state");
    put(o, "kvix_index_workers %zu\n", st->workers);
    head(o, "kvix_index_partitions", "gauge", "(model, tenant) partitions");
    put(o, "kvix_index_partitions %zu\n", st->partitions);
    head(o, "kvix_index_bytes", "gauge", "memory held by the index");
    put(o, "kvix_index_bytes %zu\n", st->bytes);
    head(o, "kvix_query_duration_seconds", "histogram", "index time of HTTP queries");
    hist(o, "kvix_query_duration_seconds", "", &s->query_hist);
    pthread_mutex_lock(&s->inflight_mu);
    double secs = s->save_seconds, when = s->save_when;
    uint64_t saves = s->saves;
    unsigned inflight = s->inflight;
    pthread_mutex_unlock(&s->inflight_mu);
    head(o, "kvix_http_requests_in_flight", "gauge",
         "requests received and not yet answered (this one included)");
    put(o, "kvix_http_requests_in_flight %u\n", inflight);
    if (s->conns) {
        kvix_conns_stats c;
        kvix__conns_figures(s->conns, &c);
        head(o, "kvix_http_connections", "gauge", "HTTP connections held");
        put(o, "kvix_http_connections %" PRIu64 "\n", c.open);
        head(o, "kvix_http_connections_refused_total", "counter",
             "connections closed at once: past --http-max-connections or "
             "--http-max-per-address with none to make room");
        put(o, "kvix_http_connections_refused_total %" PRIu64 "\n", c.refused);
        head(o, "kvix_http_connections_evicted_total", "counter",
             "connections closed to make room for a new one (the oldest waiting for a request)");
        put(o, "kvix_http_connections_evicted_total %" PRIu64 "\n", c.evicted);
        head(o, "kvix_http_connections_expired_total", "counter",
             "connections closed because their request did not arrive within --http-timeout");
        put(o, "kvix_http_connections_expired_total %" PRIu64 "\n", c.expired);
        head(o, "kvix_http_request_memory_bytes", "gauge",
             "memory held by request bodies and query parses");
        put(o, "kvix_http_request_memory_bytes %" PRIu64 "\n", c.memory);
        head(o, "kvix_http_request_memory_refused_total", "counter",
             "requests answered 503: --http-memory was all held");
        put(o, "kvix_http_request_memory_refused_total %" PRIu64 "\n", c.memory_refused);
    }
    kvix_state_counts sc[KVIX_STATE_KINDS];
    for (int k = 0; k < KVIX_STATE_KINDS; k++)
        kvix__service_state_counts(s, k, &sc[k]);
    head(o, "kvix_http_states_written_total", "counter",
         "whole-index states written for GET /dump and /snapshot (one serves every request "
         "that came while it was written)");
    for (int k = 0; k < KVIX_STATE_KINDS; k++)
        put(o, "kvix_http_states_written_total{endpoint=\"%s\"} %" PRIu64 "\n",
            kvix__service_state_paths[k], sc[k].builds);
    head(o, "kvix_http_state_responses_in_flight", "gauge",
         "GET /dump and /snapshot responses waiting or being sent");
    for (int k = 0; k < KVIX_STATE_KINDS; k++)
        put(o, "kvix_http_state_responses_in_flight{endpoint=\"%s\"} %u\n",
            kvix__service_state_paths[k], sc[k].inflight);
    head(o, "kvix_http_state_refused_total", "counter",
         "GET /dump and /snapshot refused (503): too many in flight");
    for (int k = 0; k < KVIX_STATE_KINDS; k++)
        put(o, "kvix_http_state_refused_total{endpoint=\"%s\"} %" PRIu64 "\n",
            kvix__service_state_paths[k], sc[k].refused);
    head(o, "kvix_http_state_writer_hold_seconds", "gauge",
         "the last state written: the longest one writer was held back while it was read");
    for (int k = 0; k < KVIX_STATE_KINDS; k++)
        put(o, "kvix_http_state_writer_hold_seconds{endpoint=\"%s\"} %.6f\n",
            kvix__service_state_paths[k], sc[k].hold_max);
    head(o, "kvix_snapshot_saves_total", "counter", "snapshot saves");
    put(o, "kvix_snapshot_saves_total %" PRIu64 "\n", saves);
    if (saves) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
        head(o, "kvix_snapshot_save_duration_seconds", "gauge", "duration of the last save");
        put(o, "kvix_snapshot_save_duration_seconds %.6f\n", secs);
        head(o, "kvix_snapshot_age_seconds", "gauge", "seconds since the last save");
        put(o, "kvix_snapshot_age_seconds %.3f\n", now > when ? now - when : 0.0);
    }
}

/* The engine subscriptions (-w, --workers-file, POST /register). */
static void sub_metrics(kvix_service *s, out *o)
{
    kvix_enginesub_counts c;
    kvix_enginesub_counts_get(s->o.sub, &c);
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } m[] = {
        {"kvix_subscriptions", "gauge", "engine subscriptions (registered workers and ranks)",
         offsetof(kvix_enginesub_counts, subscriptions)},
        {"kvix_subscription_batches_total", "counter", "engine batches delivered",
         offsetof(kvix_enginesub_counts, batches)},
        {"kvix_subscription_gaps_total", "counter", "sequence gaps on the live streams",
         offsetof(kvix_enginesub_counts, seq.gaps)},
        {"kvix_subscription_replays_total", "counter", "replays asked of replay endpoints",
         offsetof(kvix_enginesub_counts, seq.replays)},
        {"kvix_subscription_replayed_total", "counter", "batches recovered by a replay",
         offsetof(kvix_enginesub_counts, seq.replayed)},
        {"kvix_subscription_losses_total", "counter",
         "batches lost for good: the subscription's ranks were cleared",
         offsetof(kvix_enginesub_counts, seq.losses)},
        {"kvix_subscription_restarts_total", "counter",
         "engine restarts seen: the subscription's ranks were cleared",
         offsetof(kvix_enginesub_counts, seq.restarts)},
        {"kvix_subscription_cleared_total", "counter",
         "clears of the subscriber's own (losses, restarts, unregistrations)",
         offsetof(kvix_enginesub_counts, cleared)},
        {"kvix_subscription_decode_errors_total", "counter", "batches that did not decode",
         offsetof(kvix_enginesub_counts, decode_errors)},
        {"kvix_subscription_bad_frames_total", "counter", "messages of the wrong shape",
         offsetof(kvix_enginesub_counts, bad_frames)},
        {"kvix_subscription_disconnects_total", "counter",
         "connections given up (a message over the size limit)",
         offsetof(kvix_enginesub_counts, disconnects)},
        /* what the decoder skipped or set apart, by rule (kvsub(1)) */
        {"kvix_subscription_partial_blocks_total", "counter",
         "stored events below the block size, skipped", offsetof(kvix_enginesub_counts, partial_blocks)},
        {"kvix_subscription_unknown_events_total", "counter", "events of unknown types, skipped",
         offsetof(kvix_enginesub_counts, unknown_events)},
        {"kvix_subscription_remote_total", "counter",
         "events of another locality (another machine's cache), skipped",
         offsetof(kvix_enginesub_counts, remote)},
        {"kvix_subscription_unknown_media_total", "counter",
         "events of a medium no tier is known for, skipped",
         offsetof(kvix_enginesub_counts, unknown_media)},
        {"kvix_subscription_refused_events_total", "counter",
         "malformed stores and events (repeated hashes, a bad group), skipped",
         offsetof(kvix_enginesub_counts, refused_events)},
        {"kvix_subscription_placeholders_total", "counter",
         "placeholder stores: a tier added to blocks already published",
         offsetof(kvix_enginesub_counts, placeholders)},
        {"kvix_subscription_other_kinds_total", "counter",
         "stores of KV cache groups of a kind that is not a full one",
         offsetof(kvix_enginesub_counts, other_kinds)},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&c + m[i].off, sizeof v);
        head(o, m[i].name, m[i].type, m[i].help);
        put(o, "%s %" PRIu64 "\n", m[i].name, v);
    }
}

void kvix__service_metrics(kvix_service *s, kvix_service_response *r)
{
    kvix_index_stats st;
    kvix_index_quiet_begin(s->o.idx);
    kvix_index_stats_get(s->o.idx, &st);
    kvix_index_quiet_end(s->o.idx);
    out o = {&r->body, 0};
    r->body.len = 0;
    dynamo_metrics(s, &o, &st);
    kvix_metrics(s, &o, &st);
    if (s->o.sub)
        sub_metrics(s, &o);
    r->status = o.rc ? 500 : 200;
    r->content_type = "text/plain; version=0.0.4";
    if (o.rc)
        r->body.len = 0;
}
