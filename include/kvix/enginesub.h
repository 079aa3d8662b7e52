/* kvix: subscribe to engines' KV-event publishers (the subscriber half of
 * the wire described in kvsub(1), examples in tests/fixtures/vllm; kvix/enginepub.h is the
 * publisher half).
 *
 * A kvix_enginesub owns the ZMQ subscriptions of a set of workers. Each
 * subscription is one SUB socket on one endpoint (ID[:DP]=ENDPOINT, with an
 * optional replay=ENDPOINT of the engine's replay ROUTER). It checks the
 * frames [topic, seq 8B big-endian, payload], decodes the batches
 * (kvix/wire.h) and delivers their events in sequence order through
 * ops.event. Sequence numbers belong to the publisher socket, so they are
 * tracked per subscription: a batch's data-parallel rank
 * only labels its events, and one port may carry several ranks. A gap is
 * asked for again from the replay endpoint (a DEALER sends ["", start_seq])
 * while later batches wait, bounded in count and bytes; a recovery is bounded
 * in time as a whole. What cannot be recovered, an engine restart, or a
 * connection ZMQ gave up (a message over msg_max) is a loss: every
 * (worker, dp) seen on that subscription is cleared (ops.event gets a
 * KVIX_EV_CLEARED without eid for each), and ops.note says why.
 *
 * Threads. One thread, the poll thread, drives the object: it calls
 * kvix_enginesub_step in a loop (and kvix_enginesub_apply, kvix_enginesub_free);
 * every callback runs on it, from within those calls, with no lock held.
 * Any thread may call, at any time, even from a callback:
 *   kvix_enginesub_add, _remove, _remove_worker, _replace   (subscriptions)
 *   kvix_enginesub_counts, _list                           (read the state)
 *   kvix_enginesub_wake                                    (interrupt a step)
 * The first four only change the registry and wake the poll thread, which
 * opens and closes the sockets at its next step (ZMQ sockets are not
 * thread-safe); they return once the request is checked and recorded, so a
 * caller (an HTTP handler) can answer at once: the request is syntactically
 * valid and not a duplicate. Failures only a socket can tell (a --bind
 * address in use) come later, through ops.note and kvix_enginesub_apply's
 * return, and that subscription is dropped. Counters and the list are the
 * poll thread's figures as of the end of its last step or apply.
 *
 * Typical use (kvsub, cmd/kvsub.c, is the complete example):
 *
 *     kvix_enginesub_config cfg;
 *     kvix_enginesub_config_init(&cfg);      then set what differs
 *     kvix_enginesub_ops ops = {on_event, on_note};
 *     kvix_enginesub *s;
 *     kvix_enginesub_new(&s, &cfg, &ops, ctx, &err);
 *     kvix_enginesub_spec sp;
 *     kvix_enginesub_spec_parse(&sp, "1:0=tcp://gpu1:5557", &err);
 *     kvix_enginesub_add(s, &sp, 0, &err);
 *     kvix_enginesub_apply(s, &err);         optional: open now, fail early
 *     while (!stop) kvix_enginesub_step(s, 200, &err);
 *     kvix_enginesub_free(s);
 *
 * Inside a service (kvindex --listen): run the loop above on a thread of its
 * own; HTTP handlers call kvix_enginesub_add / _remove_worker directly; the
 * thread that wants the loop to end sets its flag and calls
 * kvix_enginesub_wake. */
#ifndef KVIX_ENGINESUB_H
#define KVIX_ENGINESUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvix/error.h"
#include "kvix/event.h"

struct kvix_index;    /* kvix/index.h */
struct kvix_snapshot; /* kvix/snapshot.h */

#ifdef __cplusplus
extern "C" {
#endif

#define KVIX_ENGINESUB_ENDPOINT_MAX 256 /* bytes of an endpoint, NUL included */
#define KVIX_ENGINESUB_MSG_DEFAULT (64u << 20) /* largest message (ZMQ_MAXMSGSIZE) */
#define KVIX_ENGINESUB_HOLD_DEFAULT 10000 /* batches held per subscription in a replay */
#define KVIX_ENGINESUB_HOLD_BYTES_DEFAULT (256u << 20) /* their bytes */
#define KVIX_ENGINESUB_TIMEOUT_DEFAULT 5000 /* ms a whole recovery may take */
#define KVIX_ENGINESUB_RANKS_DEFAULT 1024 /* distinct dp ranks per subscription */
#define KVIX_ENGINESUB_NOCONN_DEFAULT 5000 /* ms without a connection before it is said */
#define KVIX_ENGINESUB_SUBS_DEFAULT 1024 /* subscriptions held at once */
/* What one subscription may hold open: ZMQ sockets (SUB, its monitor's
 * two PAIRs, a replay DEALER) and file descriptors (their four mailboxes,
 * two connections): the ZMQ context and the process's open-file limit are
 * sized from these. */
#define KVIX_ENGINESUB_SOCKETS_PER_SUB 4
#define KVIX_ENGINESUB_FDS_PER_SUB 6
#define KVIX_ENGINESUB_FILE_LINE_MAX 4096 /* bytes of a workers-file line */
#define KVIX_ENGINESUB_FILE_LINES_MAX 1000000

/* One subscription: what a -w, a workers-file line or a registration says. */
typedef struct kvix_enginesub_spec {
    uint64_t worker;
    uint32_t dp;                                 /* registered rank (a batch's own wins) */
    char endpoint[KVIX_ENGINESUB_ENDPOINT_MAX];  /* the publisher */
    char replay[KVIX_ENGINESUB_ENDPOINT_MAX];    /* "" = no replay service */
    char model[KVIX_NAME_MAX];                   /* "" = the config's */
    char tenant[KVIX_NAME_MAX];                  /* "" = the config's */
    uint32_t block_size;                         /* 0 = the config's */
} kvix_enginesub_spec;

/* Zero sp (no replay, the config's model, tenant and block size). */
void kvix_enginesub_spec_init(kvix_enginesub_spec *sp);

/* Parse "ID[:DP]=ENDPOINT" into sp (other fields untouched) and check the
 * endpoint (kvix_enginesub_endpoint_check, connect form). KVIX_EINVAL with a
 * message naming what is wrong. */
int kvix_enginesub_spec_parse(kvix_enginesub_spec *sp, const char *text, kvix_err *err);

/* Whether an engine can be reached at endpoint, checked fully without a
 * socket: tcp://HOST:PORT (HOST a name, an IPv4 address or [IPv6]; PORT
 * 1..65535; when bind: also * or 0 for an ephemeral port, and HOST * or an
 * interface) or ipc://PATH (PATH shorter than a unix socket path, 107
 * bytes). Not inproc://, which reaches only this process's own sockets.
 * KVIX_EINVAL or KVIX_ELIMIT with the reason. */
int kvix_enginesub_endpoint_check(const char *endpoint, bool bind, kvix_err *err);
/* kvix_enginesub_endpoint_check, then endpoint's canonical form into out
 * (KVIX_ENGINESUB_ENDPOINT_MAX bytes; out may be endpoint): one engine has
 * one form, which the registry compares. tcp: the host in lower case, an
 * address as inet_ntop writes it, the port without leading zeros; ipc: the
 * path without empty or "." components, ".." taking back the one before
 * (lexically: ipc:///tmp/e/./x is ipc:///tmp/e/x). */
int kvix_enginesub_endpoint_canon(const char *endpoint, bool bind, char *out, kvix_err *err);

/* ---- the workers file --------------------------------------------------
 * One subscription a line: ID[:DP]=ENDPOINT [replay=ENDPOINT] [model=NAME]
 * [tenant=NAME] [bs=N]; blank lines and # comments are skipped. The format
 * lives here whole: kvsub and kvindex read it, kvreplay --map-file writes it. */

/* Read and check the whole file (every endpoint, duplicates): either *out
 * gets every line (owned by the caller: free()) or nothing and an error
 * "PATH:LINE: what" (KVIX_ENOTFOUND, KVIX_EIO, KVIX_EINVAL, KVIX_ELIMIT). */
int kvix_enginesub_file_read(const char *path, bool bind, kvix_enginesub_spec **out,
                             size_t *n, kvix_err *err);
/* Write specs[0..n) to path atomically (a temporary file renamed into place,
 * so a reader never sees half). KVIX_EIO. */
int kvix_enginesub_file_write(const char *path, const kvix_enginesub_spec *specs, size_t n,
                              kvix_err *err);

/* ---- the subscriber ---------------------------------------------------- */

typedef struct kvix_enginesub_config {
    const char *model, *tenant;  /* defaults of specs without; NULL = "default"; copied */
    const char *topic;           /* subscribe to topics with this prefix; NULL = all; copied */
    uint32_t block_size;         /* default configured block size; 0 = each event's */
    bool keep_tokens;            /* stored events keep their token ids */
    bool bind;                   /* bind the endpoints (engines connect) */
    uint64_t replay_timeout_ms;  /* a whole recovery (default 5000) */
    size_t hold_max;             /* batches held per subscription (default 10000) */
    size_t hold_bytes_max;       /* their bytes (default 256 MiB) */
    size_t msg_max;              /* largest message taken (default 64 MiB): a larger one
                                    makes ZMQ drop the connection, which is a loss */
    unsigned ranks_max;          /* dp ranks followed per subscription (default 1024);
                                    batches of more ranks are dropped and counted */
    uint64_t noconn_warn_ms;     /* a connecting subscription with no connection this long
                                    (since it opened, or lost the last) is noted once,
                                    and its connection after that (default 5000; 0:
                                    never). Not with bind */
    size_t subs_max;             /* subscriptions held at once (default 1024): the ZMQ
                                    context's socket limit is sized to it (at most
                                    kvix_enginesub_subs_limit()), and an add or a replace
                                    past it is refused with KVIX_EBUSY. The process's
                                    open-file limit is the caller's to size:
                                    KVIX_ENGINESUB_FDS_PER_SUB per subscription */
} kvix_enginesub_config;

/* The most subscriptions one subscriber can hold: ZMQ's own socket limit
 * (ZMQ_SOCKET_LIMIT, 65535 on Linux) over KVIX_ENGINESUB_SOCKETS_PER_SUB,
 * less the context's slack. */
size_t kvix_enginesub_subs_limit(void);

/* The defaults above. */
void kvix_enginesub_config_init(kvix_enginesub_config *cfg);

/* What ops.note reports. Losses and restarts come with the clears they
 * cause; the other kinds are rejected input, counted. */
typedef enum kvix_enginesub_note_kind {
    KVIX_ENGINESUB_LOSS = 1,   /* batches lost: cleared */
    KVIX_ENGINESUB_RESTART,    /* the engine restarted: cleared */
    KVIX_ENGINESUB_REMOVED,    /* a subscription removed: cleared */
    KVIX_ENGINESUB_BAD_FRAMES, /* a message of the wrong shape, dropped */
    KVIX_ENGINESUB_BAD_BATCH,  /* a payload that does not decode */
    KVIX_ENGINESUB_REFUSED,    /* a replay answer outside the range asked */
    KVIX_ENGINESUB_DROPPED,    /* a batch of a rank past ranks_max */
    KVIX_ENGINESUB_FAILED,     /* a socket could not be opened: the subscription dropped */
    KVIX_ENGINESUB_DISCONNECT, /* ZMQ gave a connection up (message over msg_max) */
    KVIX_ENGINESUB_NO_CONNECTION, /* no connection for noconn_warn_ms: ZMQ keeps trying */
    KVIX_ENGINESUB_CONNECTED,  /* connected, after a NO_CONNECTION note */
    KVIX_ENGINESUB_UNRESOLVED, /* an endpoint's host name does not resolve (asked again
                                  every second, off the poll thread: a slow DNS holds no
                                  other subscription back) */
} kvix_enginesub_note_kind;

typedef struct kvix_enginesub_note {
    int kind;                    /* kvix_enginesub_note_kind */
    uint64_t worker;
    uint32_t dp;                 /* the registered rank */
    const char *endpoint;
    unsigned repeat;             /* notes of this kind so far (1 for the first) */
    const char *msg;             /* lowercase, no tool name, e.g. "worker 1 dp 0: batches
                                    5..6 lost (no replay endpoint): cleared" */
} kvix_enginesub_note;

typedef struct kvix_enginesub_ops {
    /* Every event, in sequence order per subscription: the engines' (eid =
     * batch seq) and the subscriber's own clears (no eid). ev borrowed. */
    void (*event)(void *ctx, const kvix_event *ev);
    /* Optional. n and its strings borrowed. */
    void (*note)(void *ctx, const kvix_enginesub_note *n);
} kvix_enginesub_ops;

/* What the sequence tracking of one stream (or of them all) has seen. */
typedef struct kvix_enginesub_seq_counts {
    uint64_t gaps;       /* seqs skipped on the live stream */
    uint64_t replays;    /* replays asked for */
    uint64_t replayed;   /* batches delivered from a replay */
    uint64_t losses;     /* clears for a loss */
    uint64_t restarts;   /* clears for a restart */
    uint64_t duplicates; /* a live batch with the seq of the one before it */
    uint64_t stale;      /* batches older than the next expected (already applied) */
    uint64_t refused;    /* replay answers outside the range asked: below its start,
                            or past the newest live seq (a lying replay service) */
} kvix_enginesub_seq_counts;

typedef struct kvix_enginesub_counts {
    uint64_t subscriptions;
    uint64_t batches;          /* delivered */
    uint64_t events[4];        /* delivered, by kvix_event_type (engines' own) */
    uint64_t cleared;          /* clears of the subscriber's own (losses, restarts, removals) */
    kvix_enginesub_seq_counts seq;  /* gaps, replays, replayed, losses, restarts, duplicates,
                                  stale, refused: every subscription's, removed ones too */
    uint64_t decode_errors, bad_frames, partial_blocks, unknown_events;
    /* events the decoder skipped or set apart, by rule (kvix_wire_counts) */
    uint64_t remote, unknown_media, refused_events, placeholders, other_kinds;
    uint64_t dropped;          /* batches of ranks past ranks_max */
    uint64_t disconnects;      /* connections ZMQ gave up (over msg_max) */
    uint64_t messages;         /* every message received, live or replayed, good or not */
} kvix_enginesub_counts;

typedef struct kvix_enginesub kvix_enginesub;

/* cfg and ops copied; ctx passed to the callbacks (not owned). Makes its own
 * ZMQ context. *out owned by the caller: kvix_enginesub_free. */
int kvix_enginesub_new(kvix_enginesub **out, const kvix_enginesub_config *cfg,
                       const kvix_enginesub_ops *ops, void *ctx, kvix_err *err);
/* Close everything (no clears are delivered). NULL is fine. Poll thread. */
void kvix_enginesub_free(kvix_enginesub *s);

/* Add a subscription (sp copied). group: the caller's tag (kvsub: 0 command
 * line, 1 workers file) for kvix_enginesub_replace. KVIX_EINVAL: a bad
 * endpoint; KVIX_ELIMIT: its endpoint already subscribed, or (worker, dp)
 * already registered (a worker and rank has one publisher); KVIX_EBUSY:
 * cfg.subs_max subscriptions held already. Any thread. */
int kvix_enginesub_add(kvix_enginesub *s, const kvix_enginesub_spec *sp, int group,
                       kvix_err *err);
/* Remove the subscription of endpoint: its ranks are cleared. KVIX_ENOTFOUND.
 * Any thread. */
int kvix_enginesub_remove(kvix_enginesub *s, const char *endpoint, kvix_err *err);
/* Remove every subscription of worker (model/tenant NULL: any; dp
 * UINT32_MAX: any registered rank). Returns how many (0: none matched).
 * Any thread. */
size_t kvix_enginesub_remove_worker(kvix_enginesub *s, uint64_t worker, const char *model,
                                    const char *tenant, uint32_t dp);
/* Make group's subscriptions specs[0..n), all or nothing: every spec is
 * checked against the others and the other groups first (and the total
 * against cfg.subs_max: KVIX_EBUSY); then those no
 * longer listed are removed, new ones added, kept ones get the line's replay
 * endpoint. *added and *removed (may be NULL) tell how many. Any thread. */
int kvix_enginesub_replace(kvix_enginesub *s, int group, const kvix_enginesub_spec *specs,
                           size_t n, size_t *added, size_t *removed, kvix_err *err);

/* Start the subscriptions of (model, tenant, worker, *) added from now on
 * as if batch eid had been applied (a snapshot's last eid,
 * kvix_snapshot_group): the next batch expected is eid + 1 (a gap before it
 * is replayed or a loss, a lower seq is an engine restart), and every dp
 * given is a rank to clear on a loss. A subscription takes the positions of
 * its own model and tenant (its spec's, else the config's): a worker number
 * that serves another model elsewhere is another engine. model or tenant
 * NULL: any. Per engine with several ranks, the highest eid counts when it
 * has one subscription, its own rank's otherwise. Before any add; poll
 * thread. KVIX_ENOMEM, KVIX_EINVAL (a name too long). */
int kvix_enginesub_resume(kvix_enginesub *s, const char *model, const char *tenant,
                          uint64_t worker, uint32_t dp, uint64_t eid, kvix_err *err);
/* kvix_enginesub_resume for every (model, tenant, worker, dp) with an eid in
 * idx (quiet: kvix/index.h), or in the open snapshot snap (read from its
 * first record on; the caller closes it). *mine (may be NULL): how many of
 * them are of the config's model and tenant. KVIX_ENOMEM; the snapshot's
 * read errors. */
int kvix_enginesub_resume_index(kvix_enginesub *s, struct kvix_index *idx, size_t *mine,
                                kvix_err *err);
int kvix_enginesub_resume_snapshot(kvix_enginesub *s, struct kvix_snapshot *snap, size_t *mine,
                                   kvix_err *err);

/* Open the subscriptions added since the last step now. Returns the first
 * failure (KVIX_ESYS: "cannot bind tcp://...: address in use"), after which
 * that subscription is dropped and the others opened. Poll thread. */
int kvix_enginesub_apply(kvix_enginesub *s, kvix_err *err);

/* One round: apply pending adds and removals, wait up to timeout_ms (0: do
 * not wait; -1: until something happens or kvix_enginesub_wake) for
 * messages, take what arrived (a bounded amount per socket), give replays up
 * at their deadline, and publish the counters. KVIX_OK, or KVIX_ESYS (ZMQ
 * failed: poll) / KVIX_ENOMEM, after which the object can still be freed.
 * A signal (EINTR) returns KVIX_OK early. Poll thread. */
int kvix_enginesub_step(kvix_enginesub *s, int timeout_ms, kvix_err *err);

/* Make a step that waits return now (or the next one return at once). Any
 * thread, async-signal-safe (a write to a pipe). */
void kvix_enginesub_wake(kvix_enginesub *s);

/* The counters as of the end of the last step. Any thread. */
void kvix_enginesub_counts_get(kvix_enginesub *s, kvix_enginesub_counts *out);

/* One subscription's state, for a listing. */
typedef struct kvix_enginesub_status {
    const kvix_enginesub_spec *spec; /* borrowed for the call */
    int group;
    bool open;                       /* its socket is open */
    bool connected;                  /* connect mode: ZMQ reports a connection */
    bool replaying;
    unsigned ranks;                  /* dp ranks seen (the registered one included) */
    uint64_t batches;
    bool has_seq;
    uint64_t last_seq;               /* the last batch applied, when has_seq */
    uint64_t idle_ms;                /* since its last message; UINT64_MAX: none yet */
    kvix_enginesub_seq_counts seq;
} kvix_enginesub_status;

/* How many times a subscription entered or left the registry so far: a
 * caller that keeps the subscriptions somewhere (a snapshot keeps POST
 * /register's) learns they changed. Any thread. */
uint64_t kvix_enginesub_changes(kvix_enginesub *s);

/* Call fn for every subscription (in the order added) under the registry's
 * lock: fn must not call the subscriber back. Returns fn's first non-zero,
 * or 0. Any thread. */
int kvix_enginesub_list(kvix_enginesub *s, int (*fn)(void *ctx, const kvix_enginesub_status *st),
                        void *ctx);

#ifdef __cplusplus
}
#endif
#endif
