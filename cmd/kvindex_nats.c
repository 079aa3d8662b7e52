/* kvindex --nats: a JetStream stream instead of stdin, from the snapshot's
 * position on; a replica the stream left behind takes a peer's snapshot. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "kvindex.h"
#include "kvix/snapshot.h"

void lag_summary(kvi *k)
{
    if (!k->nopt.url)
        return;
    if (!k->lag.messages) {
        cli_warn("stream %s: applied up to sequence %" PRIu64, k->nopt.stream, k->seq);
        return;
    }
    cli_warn("stream %s: applied up to sequence %" PRIu64 "; lag from stored to applied: "
             "p50 %.3f ms, p99 %.3f ms, max %.3f ms over %" PRIu64 " messages",
             k->nopt.stream, k->seq, k->lag.p50_ms, k->lag.p99_ms, k->lag.max_ms,
             k->lag.messages);
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The index dropped, to start again from the stream's first message. */
static void reset_index(kvi *k)
{
    kvix_err err;
    sync_writers(k);
    kvix_index_free(k->idx);
    if (kvix_index_new(&k->idx, &k->io, &err))
        cli_die(cli_exit_for(err.code), "%s", err.msg);
    kvix_index_totals(k->idx, &k->base);
    k->dirty = 1;
}

/* Follow the stream from k->seq + 1, waiting for the server and the stream
 * to be there; 0 when the index is not from this stream. */
static int follow(kvi *k, kvix_natslog *l, kvix_natslog_state *st)
{
    kvix_err err;
    int warned = 0, rc;
    while ((rc = kvix_natslog_start(l, k->seq, st, &err)) == KVIX_EIO || rc == KVIX_ENOTFOUND) {
        if (sig_stop)
            cli_die(KVIX_EXIT_SYS, "%s", err.msg);
        if (!warned++)
            cli_warn("%s: waiting%s", err.msg, rc == KVIX_ENOTFOUND ? " for it" : " for the server");
        pause_ms(100);
        drain_wake();
    }
    if (rc)
        cli_warn("%s: %s", k->snap ? k->snap : "the index", err.msg);
    return rc == KVIX_OK;
}

/* One record of the stream, like one of stdin; a message's sequence is the
 * index's once its last record is in (saves wait for that). */
static void take_record(kvi *k, int rc, uint64_t seq, int last, const kvix_event *ev,
                        const kvix_err *err)
{
    const char *label = k->names[0];
    k->mid_message = !last;
    if (last)
        k->seq = seq;
    /* GET /snapshot pairs a state only with the sequence of the last
     * message wholly in it: the writers' side is held across a message */
    if (k->svc && !k->svc_held) {
        kvix_service_write_begin(k->svc);
        k->svc_held = 1;
    }
    if (rc == 1) {
        k->records++;
        if (ev->type == KVIX_EV_QUERY)
            answer(k, label, seq, ev);
        else
            apply(k, label, seq, 0, ev);
    } else {
        k->records += rc != KVIX_ELIMIT;
        reject(k, rc == KVIX_ELIMIT ? "message" : "event", label, seq, -1, err);
    }
    if (last && k->svc_held) {
        kvix_service_set_stream_seq(k->svc, seq);
        k->svc_held = 0;
        kvix_service_write_end(k->svc);
    }
    k->dirty = 1;
}

/* The stream no longer holds message `first - 1` (or the replica is new):
 * take the first peer's snapshot that reflects this stream at first - 1 or
 * later, in place of the index (queries go on meanwhile), and its position.
 * 1 if one did. */
static int bootstrap(kvi *k, uint64_t first)
{
    char **urls;
    size_t n, who = 0;
    kvix_err err;
    if (kvix_peers_list(k->peers, &urls, &n, &err))
        cli_die(KVIX_EXIT_SYS, "%s", err.msg);
    if (!n) {
        kvix_peers_list_free(urls, n);
        return 0;
    }
    kvix_peers_recover_opts o = {.stream = k->nopt.stream, .min_seq = first ? first - 1 : 0};
    kvix_snapshot *s;
    int rc = kvix_peers_fetch_snapshot((const char *const *)urls, n, &o, &s, &who, &err);
    if (rc) {
        cli_warn("no peer could hand over stream %s at %" PRIu64 " or later (%s)",
                 k->nopt.stream, o.min_seq, err.msg);
        kvix_peers_list_free(urls, n);
        return 0;
    }
    kvix_snapshot_info info;
    kvix_snapshot_get_info(s, &info);
    if (k->svc)
        kvix_service_quiet_begin(k->svc);
    lock_writes(k);
    if (k->threads)
        kvix_index_sync(k->idx);
    rc = kvix_snapshot_replace(s, k->idx, &err);
    unlock_writes(k);
    kvix_snapshot_close(s);
    k->seq = info.stream_seq;
    if (k->svc) {
        kvix_service_set_stream_seq(k->svc, k->seq);
        kvix_service_quiet_end(k->svc);
    }
    if (rc)
        cli_die(rc == KVIX_ENOMEM ? KVIX_EXIT_SYS : KVIX_EXIT_CORRUPT, "cannot take %s/snapshot: %s",
                urls[who], err.msg);
    if (!k->quiet)
        cli_warn("bootstrapped from %s/snapshot: stream %s at %" PRIu64 ", %" PRIu64 " blocks",
                 urls[who], k->nopt.stream, k->seq, info.blocks);
    kvix_peers_list_free(urls, n);
    kvix_index_totals(k->idx, &k->base);
    k->dirty = 1;
    return 1;
}

void run_nats(kvi *k, kvix_event *ev)
{
    kvix_natslog *l;
    kvix_err err;
    if (kvix_natslog_open(&l, &k->nopt, &err))
        cli_die(err.code == KVIX_EINVAL ? KVIX_EXIT_USAGE : KVIX_EXIT_SYS, "%s", err.msg);
    kvix_natslog_state st;
    if (!follow(k, l, &st)) {
        k->gone = 1;
        kvix_natslog_free(l);
        return;
    }
    uint64_t target = st.last;
    int warned = 0;
    /* a stop or a save waits for the end of the message under way */
    while (!k->strict_hit && !(sig_stop && !k->mid_message)) {
        if (!k->mid_message) {
            handle_flags(k, NULL);
            if (k->until_caught_up && k->seq >= target)
                break;
        }
        uint64_t seq = 0;
        int last = 1;
        int rc = kvix_natslog_next_record(l, 200, ev, &seq, &last, &err);
        if (rc == 1 || (rc < 0 && rc != KVIX_ENOTFOUND && rc != KVIX_ENOMEM)) {
            take_record(k, rc, seq, last, ev, &err);
            warned = 0;
            continue;
        }
        if (rc == KVIX_ENOMEM)
            die_sys(k, &err);
        if (rc == 0)
            continue;
        if (rc == KVIX_ENOTFOUND && kvix_natslog_connected(l) &&
            kvix_natslog_state_get(l, &st, NULL) == KVIX_OK) {
            cli_warn("%s", err.msg);
            if (bootstrap(k, st.first)) {
                if (!follow(k, l, &st)) {
                    k->gone = 1;
                    break;
                }
                continue;
            }
            if (!k->reset_on_gap) {
                cli_warn("this replica cannot follow stream %s any more (give --peers, or run "
                         "with --reset-on-gap to start empty)",
                         k->nopt.stream);
                k->gone = 1;
                break;
            }
            cli_warn("--reset-on-gap: WARNING: the index is dropped and starts empty "
                     "from message %" PRIu64,
                     st.first);
            reset_index(k);
            k->seq = st.first - 1;
            if (!follow(k, l, &st)) {
                k->gone = 1;
                break;
            }
            continue;
        }
        if (!warned++)
            cli_warn("%s: retrying", err.msg);
        pause_ms(100);
    }
    kvix_natslog_lag_get(l, &k->lag);
    kvix_natslog_free(l);
}
