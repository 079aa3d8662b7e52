/* kvix: peers, the other replicas of a live index (kvindex --peers, POST
 * /register_peer): the set of their URLs, and recovery from the first of
 * them that answers (libcurl).
 *
 * Recovery prefers a peer's GET /snapshot (a kvix snapshot file: exact, and
 * it carries the stream sequence its state reflects when the peer consumes
 * NATS) and falls back to GET /dump (Dynamo's RouterEvents, which any
 * standalone indexer answers). */
#ifndef KVIX_PEERS_H
#define KVIX_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/error.h"
#include "kvix/index.h"
#include "kvix/snapshot.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVIX_PEERS_MAX 64        /* URLs in a set */
#define KVIX_PEER_URL_MAX 1024   /* bytes of one URL, NUL included */

/* ---- the set: thread-safe (the HTTP threads register, the tool recovers) ---- */
typedef struct kvix_peers kvix_peers;

/* *out is owned by the caller: kvix_peers_free. */
int kvix_peers_new(kvix_peers **out, kvix_err *err);
void kvix_peers_free(kvix_peers *p); /* NULL is fine */
/* Check url (len bytes, need not be NUL-terminated): an http:// or https://
 * URL with a host, no space or control byte, shorter than
 * KVIX_PEER_URL_MAX. Trailing slashes are not part of it. KVIX_EINVAL with
 * what is wrong. */
int kvix_peers_check(const char *url, size_t len, kvix_err *err);
/* Add url after kvix_peers_check; one already there is kept once (*added =
 * 0). KVIX_ELIMIT past KVIX_PEERS_MAX. added may be NULL. */
int kvix_peers_add(kvix_peers *p, const char *url, size_t len, int *added, kvix_err *err);
/* Remove url (trailing slashes ignored); 1 if it was there, else 0. */
int kvix_peers_remove(kvix_peers *p, const char *url, size_t len);
/* Whether text[0..len) is a bearer token a service accepts and peers are
 * sent (kvix_service_opts.auth_token): 1..KVIX_SERVICE_TOKEN_MAX bytes of
 * RFC 6750's token68. KVIX_EINVAL (empty, a byte outside token68),
 * KVIX_ELIMIT (too long). */
int kvix_peers_token_check(const char *text, size_t len, kvix_err *err);
/* The bearer token to send the peers (their --auth-token-file: replicas of
 * one service share it), copied; NULL: none. Errors of kvix_peers_token_check. */
int kvix_peers_set_token(kvix_peers *p, const char *token, kvix_err *err);
/* The token, borrowed while the set lives (set it before sharing the set). */
const char *kvix_peers_token(const kvix_peers *p);
/* A copy of the URLs in registration order: *urls is owned by the caller
 * (kvix_peers_list_free(*urls, *n)). */
int kvix_peers_list(kvix_peers *p, char ***urls, size_t *n, kvix_err *err);
void kvix_peers_list_free(char **urls, size_t n);

/* ---- recovery ---- */
struct kvix_peers_recover_opts;
/* How recoveries from the set's peers transfer (tmpdir copied; NULL:
 * "/tmp"): kvix_peers_recover_opts' timeout_ms, and the whole recovery
 * bounded to recovery_ms from its start (0: no bound). KVIX_ENOMEM. Set
 * them before sharing the set. */
int kvix_peers_set_transfer(kvix_peers *p, const char *tmpdir, long timeout_ms,
                            uint64_t recovery_ms, kvix_err *err);
/* *o zeroed, then the set's token, tmpdir and timeout, and a deadline of
 * recovery_ms from now: a recovery starting now. */
void kvix_peers_opts(const kvix_peers *p, struct kvix_peers_recover_opts *o);

typedef struct kvix_peers_recover_opts {
    long timeout_ms;    /* a peer silent this long (no connection, or under a byte a
                           second) is given up, however long its answer takes
                           otherwise; 0: 5000 */
    uint64_t deadline_ms; /* CLOCK_MONOTONIC milliseconds past which no peer is asked and a
                           transfer under way is cut: the whole recovery's bound
                           (0: none) */
    size_t max_bytes;   /* ceiling of one answer; 0: 16 GiB */
    const char *tmpdir; /* answers are written to an unlinked file here as they
                           arrive (the heap never holds them); NULL: "/tmp" */
    /* Non-NULL: only a GET /snapshot that reflects this NATS stream is taken
     * (an exact hand-off: the caller consumes from info.stream_seq + 1);
     * /dump, which says no position, is not asked. */
    const char *stream;
    /* With stream: a snapshot at a sequence below this is not taken (the
     * stream no longer holds the messages after it). */
    uint64_t min_seq;
    /* Non-NULL: sent as "Authorization: Bearer TOKEN" (kvix_peers_token). */
    const char *token;
} kvix_peers_recover_opts;

typedef struct kvix_peers_result {
    size_t winner;               /* index in urls of the peer that answered */
    int from_snapshot;           /* 1: its GET /snapshot; 0: its GET /dump */
    uint64_t applied, rejected;  /* /dump: events applied and refused */
    kvix_snapshot_info info;     /* /snapshot: the file's (has_stream, stream_seq) */
} kvix_peers_result;

/* Ask each peer in order for GET /snapshot, then GET /dump, and apply the
 * first answer to idx, which must be empty. Returns KVIX_ENOTFOUND when no
 * peer answered (err says why the last one failed; idx is untouched). A
 * /dump that fails to decode counts as no answer only if nothing of it was
 * applied; otherwise (idx then holds part of it) its error is returned, and
 * so is a failure to apply a verified snapshot. */
int kvix_peers_recover(kvix_index *idx, const char *const *urls, size_t n,
                       const kvix_peers_recover_opts *opts, kvix_peers_result *res,
                       kvix_err *err);

/* Ask each peer in order for GET /snapshot only; the first file that
 * verifies whole (and fits opts->stream and opts->min_seq) wins. *out is
 * owned by the caller (kvix_snapshot_close); *winner gets its index in urls.
 * KVIX_ENOTFOUND when none did (err says why the last one failed). Apply it
 * with kvix_snapshot_apply, or kvix_snapshot_replace on a live index. */
int kvix_peers_fetch_snapshot(const char *const *urls, size_t n,
                              const kvix_peers_recover_opts *opts, kvix_snapshot **out,
                              size_t *winner, kvix_err *err);

#ifdef __cplusplus
}
#endif
#endif
