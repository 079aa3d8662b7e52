/* A subscriber's events published to NATS, with a tool's waits (see
 * cmd/tools/natspub.h). */
#include "natspub.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RETRY_MS 100 /* a pause between two tries while the server is away */

struct kvix_natspub {
    kvix_natspub_opts o;
    kvix_natslog_opts nopt;
    kvix_natslog *l;
};

static void note(const kvix_natspub *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(const kvix_natspub *p, const char *fmt, ...)
{
    if (!p->o.on_note)
        return;
    char msg[KVIX_ERR_MSG_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->o.on_note(p->o.ctx, msg);
}

static int stopping(const kvix_natspub *p)
{
    return p->o.stopping && p->o.stopping(p->o.ctx);
}

static void pause_retry(void)
{
    struct timespec ts = {0, RETRY_MS * 1000000L};
    nanosleep(&ts, NULL);
}

int kvix_natspub_open(kvix_natspub **out, const kvix_natspub_opts *o, kvix_err *err)
{
    *out = NULL;
    kvix_natspub *p = calloc(1, sizeof *p);
    if (!p)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    p->o = *o;
    p->nopt = *o->nats;
    int rc = kvix_natslog_open(&p->l, &p->nopt, err);
    int warned = 0, created = 0;
    while (!rc && (rc = kvix_natslog_ensure_stream(p->l, &created, err)) == KVIX_EIO &&
           !stopping(p)) {
        if (!warned++)
            note(p, "%s: waiting for the server", err->msg);
        pause_retry();
        rc = KVIX_OK;
    }
    if (rc) {
        kvix_natspub_free(p);
        return rc;
    }
    if (created)
        note(p, "nats: created stream %s on %s.>", p->nopt.stream, p->nopt.subject);
    *out = p;
    return KVIX_OK;
}

void kvix_natspub_free(kvix_natspub *p)
{
    if (!p)
        return;
    kvix_natslog_free(p->l);
    free(p);
}

static int put_once(kvix_natspub *p, const kvix_event *ev, kvix_err *err)
{
    return ev ? kvix_natslog_publish_event(p->l, ev, err)
              : kvix_natslog_publish_pending(p->l, err);
}

/* A record over the server's largest message went as a clear: say whose. */
static void note_lost(kvix_natspub *p, const kvix_natslog_pubstats *before)
{
    kvix_natslog_pubstats now;
    kvix_natslog_pubstats_get(p->l, &now);
    uint64_t n = now.lost - before->lost;
    if (n)
        note(p,
             "nats: worker %" PRIu64 " dp %" PRIu32 ": %" PRIu64 " event%s of batch %" PRIu64
             " over the server's largest message: published as a clear",
             now.lost_worker, now.lost_dp, n, n == 1 ? "" : "s", now.lost_eid);
}

/* A window full of batches the server has not acknowledged (the server
 * away) is waited for. Each new reason is said once: first the window full,
 * then a batch sent again unanswered (named by its subject). */
int kvix_natspub_put(kvix_natspub *p, const kvix_event *ev, kvix_err *err)
{
    char warned[KVIX_ERR_MSG_MAX] = "";
    kvix_natslog_pubstats before;
    kvix_natslog_pubstats_get(p->l, &before);
    int rc;
    while ((rc = put_once(p, ev, err)) == KVIX_EIO) {
        if (stopping(p)) {
            char why[KVIX_ERR_MSG_MAX];
            snprintf(why, sizeof why, "%s", err->msg);
            return kvix_err_set(err, KVIX_EIO, "stopped with a batch not published: %s", why);
        }
        if (strcmp(warned, err->msg) != 0) {
            note(p, "%s: waiting for the server", err->msg);
            snprintf(warned, sizeof warned, "%s", err->msg);
        }
        pause_retry();
    }
    if (rc)
        return rc;
    if (warned[0])
        note(p, "nats: publishing again");
    note_lost(p, &before);
    return KVIX_OK;
}

int kvix_natspub_finish(kvix_natspub *p, kvix_err *err)
{
    int rc = kvix_natspub_put(p, NULL, err);
    if (rc || (rc = kvix_natslog_flush(p->l, p->nopt.timeout_ms, err)) == KVIX_OK)
        return rc;
    char why[KVIX_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", err->msg);
    return kvix_err_set(err, rc, "stopped with batches the server did not acknowledge: %s", why);
}

void kvix_natspub_stats(kvix_natspub *p, kvix_natslog_pubstats *st)
{
    kvix_natslog_pubstats_get(p->l, st);
}
