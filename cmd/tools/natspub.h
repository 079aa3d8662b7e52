/* kvix tools: a subscriber's events published to the event log on NATS
 * (kvsub --nats), with the waits a tool needs: the stream made before the
 * first batch, the server waited for while it is away or while the window
 * is full of batches it has not acknowledged, every batch acknowledged at
 * the end. The framing is the library's (kvix_natslog_publish_event); the
 * other side, a replica following the stream (kvindex --nats), is follow.h.
 *
 * What it waits for is said through opts.on_note, once for each new reason,
 * and so are a batch over the server's largest message published as a
 * clear, and a stream created. A stop (opts.stopping) while it waits is an
 * error. One thread. */
#ifndef KVIX_NATSPUB_H
#define KVIX_NATSPUB_H

#include "kvix/error.h"
#include "kvix/event.h"
#include "kvix/natslog.h"

typedef struct kvix_natspub kvix_natspub;

typedef struct kvix_natspub_opts {
    const kvix_natslog_opts *nats; /* copied */
    int (*stopping)(void *ctx);    /* nonzero: a wait gives up. Optional */
    void (*on_note)(void *ctx, const char *msg); /* lowercase, no tool name. Optional */
    void *ctx;
} kvix_natspub_opts;

/* Connect and make the stream from the options when it is missing, the
 * server waited for. KVIX_EINVAL: bad options; KVIX_EIO: stopped while
 * waiting (err says for what); KVIX_ESYS, KVIX_ENOMEM. *out owned by the
 * caller: kvix_natspub_free. */
int kvix_natspub_open(kvix_natspub **out, const kvix_natspub_opts *o, kvix_err *err);
/* NULL is fine. */
void kvix_natspub_free(kvix_natspub *p);

/* Publish ev (NULL: hand over the batch gathered, before the caller waits
 * for more events). KVIX_EIO: stopped while the server kept the batch
 * waiting (err: "stopped with a batch not published: ..."); another error:
 * ev cannot be published. */
int kvix_natspub_put(kvix_natspub *p, const kvix_event *ev, kvix_err *err);
/* The batch gathered handed over, then every batch acknowledged within the
 * options' timeout; KVIX_EIO otherwise (err says which). */
int kvix_natspub_finish(kvix_natspub *p, kvix_err *err);

void kvix_natspub_stats(kvix_natspub *p, kvix_natslog_pubstats *st);

#endif
