/* Following the event log (kvix/natslog.h): the records of the stream's
 * messages one at a time, where the last applied message is, and the lag
 * from the server storing a message to its being applied.
 *
 * A message counts as applied once its last record was handed out and the
 * caller came back for more: the caller's state after record r of message s
 * is "every message before s, and s's records up to r", so only at a
 * message's end does a sequence describe it (kvindex saves there only). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "natslog_int.h"

#define LAG_MAX (1u << 16) /* lag samples kept: every k-th past that, over the whole run */

int kvix_natslog_start(kvix_natslog *l, uint64_t applied, kvix_natslog_state *st,
                       kvix_err *err)
{
    int rc = kvix_natslog_state_get(l, st, err);
    if (rc)
        return rc;
    if (applied > st->last)
        return kvix_err_set(err, KVIX_ERANGE,
                            "stream %s ends at %" PRIu64 " but the state has applied up to %" PRIu64
                            ": not the stream it was made from",
                            l->stream, st->last, applied);
    l->f.open = 0;
    l->f.ended = 0;
    l->f.applied = applied;
    return kvix_natslog_consume(l, applied + 1, err);
}

uint64_t kvix_natslog_applied(const kvix_natslog *l)
{
    return l->f.applied;
}

static void lag_take(kvix_natslog *l, int64_t stored_ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double us = ((double)ts.tv_sec * 1e9 + (double)ts.tv_nsec - (double)stored_ns) / 1e3;
    if (!l->f.lag && !(l->f.lag = malloc(LAG_MAX * sizeof *l->f.lag)))
        return; /* no lag figures: not worth failing the stream for */
    size_t i = l->f.lag_seen++;
    if (l->f.nlag < LAG_MAX)
        l->f.lag[l->f.nlag++] = us;
    else /* a deterministic spread over the whole run */
        l->f.lag[(i * 2654435761u) % LAG_MAX] = us;
}

static void end_message(kvix_natslog *l)
{
    l->f.open = 0;
    l->f.ended = 1;
    l->f.applied = l->f.seq;
}

int kvix_natslog_next_record(kvix_natslog *l, int timeout_ms, kvix_event *ev, uint64_t *seq,
                             int *last, kvix_err *err)
{
    *last = 1;
    if (l->f.ended) { /* the caller came back: the message before is applied */
        lag_take(l, kvix_natslog_stored_ns(l));
        l->f.ended = 0;
    }
    if (!l->f.open) {
        const char *data;
        size_t len;
        int rc = kvix_natslog_next(l, timeout_ms, seq, &data, &len, err);
        if (rc == KVIX_ELIMIT) { /* skipped whole */
            l->f.applied = *seq;
            return rc;
        }
        if (rc != 1)
            return rc;
        l->f.data = data;
        l->f.len = len;
        l->f.off = 0;
        l->f.seq = *seq;
        l->f.open = 1;
        if (len == 0) {
            end_message(l);
            return kvix_err_set(err, KVIX_EINVAL, "empty message");
        }
    }
    *seq = l->f.seq;
    size_t used = 0;
    int rc = kvix_event_from_msgpack(l->f.data + l->f.off, l->f.len - l->f.off, &used, ev, err);
    if (!rc && used == 0)
        rc = kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_MSGPACK, "empty msgpack record");
    if (rc) { /* the rest of the message cannot be framed */
        end_message(l);
        return rc;
    }
    l->f.off += used;
    *last = l->f.off >= l->f.len;
    if (*last)
        end_message(l);
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void kvix_natslog_lag_get(kvix_natslog *l, kvix_natslog_lag *out)
{
    if (l->f.ended) { /* the last message handed out: applied by now */
        lag_take(l, kvix_natslog_stored_ns(l));
        l->f.ended = 0;
    }
    memset(out, 0, sizeof *out);
    out->messages = l->f.lag_seen;
    if (!l->f.nlag)
        return;
    qsort(l->f.lag, l->f.nlag, sizeof *l->f.lag, cmp_double);
    out->p50_ms = l->f.lag[l->f.nlag / 2] / 1e3;
    out->p99_ms = l->f.lag[(size_t)((double)l->f.nlag * 0.99)] / 1e3;
    out->max_ms = l->f.lag[l->f.nlag - 1] / 1e3;
}
