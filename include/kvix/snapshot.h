/* kvix: the snapshot file (kvix-snapshot(5)): the whole index state, per
 * partition and per (worker, dp), in a documented little-endian binary
 * format closed by an XXH3-64 checksum of everything before it. Version 3
 * is written (each (worker, dp)'s blocks as the forest of their parent
 * links: about 9 bytes a block); versions 1 and 2 are still read.
 *
 * Extension records keep other state beside the index in the same file
 * (KV-cache group state, HTTP registrations): typed, length-prefixed, and
 * skippable when marked optional (kvix-snapshot(5), EXTENSIONS).
 *
 * Writing is crash-safe: a unique temporary file in the target's folder,
 * written through a large buffer, fsync'ed, renamed over the target, and the
 * folder fsync'ed. A crash at any moment leaves the old file or the new one.
 *
 * Reading is untrusted: kvix_snapshot_open checks magic, version, checksum
 * and every count, length and order against the file before anything is
 * returned, so a corrupt or truncated file is refused whole (KVIX_ECORRUPT)
 * and never half-applied. A tool that fails to load a snapshot must not save
 * over it; kvix_snapshot_load leaves the file untouched in every case.
 *
 * The same records are visited from a file (kvix_snapshot_next /
 * kvix_snapshot_foreach) as from a live index (kvix_index_foreach), in the
 * same order and with the same visitor type, so dumps, stats and diffs work
 * on either. */
#ifndef KVIX_SNAPSHOT_H
#define KVIX_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/error.h"
#include "kvix/event.h"
#include "kvix/index.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVIX_SNAPSHOT_MAGIC "KVIXSNAP" /* 8 bytes, no NUL in the file */
#define KVIX_SNAPSHOT_VERSION 3u        /* the version written */
#define KVIX_SNAPSHOT_VERSION_V1 1u     /* read only: 40 bytes a block */
#define KVIX_SNAPSHOT_VERSION_V2 2u     /* read only: version 1 plus a stream position */
#define KVIX_SNAPSHOT_STREAM_MAX 256u   /* longest stream name + 1 */

/* Extension record types (kvix-snapshot(5), EXTENSIONS): 64 and up. A
 * reader refuses a file holding a type it does not know unless the record
 * is marked optional. */
#define KVIX_SNAPSHOT_EXT_MIN 64u
#define KVIX_SNAPSHOT_EXT_KVGROUPS 64u      /* KV-cache group state (the engine wire) */
#define KVIX_SNAPSHOT_EXT_REGISTRATIONS 65u /* the service's HTTP registrations */
#define KVIX_SNAPSHOT_EXT_KNOWN_MAX 65u     /* the highest type this kvix knows */
#define KVIX_SNAPSHOT_EXT_OPTIONAL 1u       /* flag: readers that do not know it skip it */
#define KVIX_SNAPSHOT_EXT_BYTES_MAX (UINT64_C(1) << 40) /* one extension record's payload */

/* One extension record of a file, or one to write. */
typedef struct kvix_snapshot_ext {
    uint32_t type;    /* KVIX_SNAPSHOT_EXT_MIN and up */
    unsigned flags;   /* KVIX_SNAPSHOT_EXT_OPTIONAL or 0 */
    const void *data; /* payload: the owner's encoding (kvix-snapshot(5) says whose) */
    size_t len;
} kvix_snapshot_ext;

/* Totals of one snapshot file. */
typedef struct kvix_snapshot_info {
    uint32_t version;
    uint64_t partitions;
    uint64_t groups;    /* (partition, worker, dp) records */
    uint64_t blocks;    /* stored (worker, block) entries */
    uint64_t bytes;     /* file size */
    uint64_t checksum;  /* the XXH3-64 stored at the end of the file */
    /* The stream position the state reflects (a STREAM record): every
     * message of stream up to and including stream_seq is applied, none
     * after it. Set by the reader only. */
    int has_stream;
    uint64_t stream_seq;
    char stream[KVIX_SNAPSHOT_STREAM_MAX];
    uint64_t extensions; /* extension records (version 3) */
    kvix_walk_stats walk; /* a save: what reading the index cost its writers */
} kvix_snapshot_info;

/* ---- writing ---------------------------------------------------------- */

typedef struct kvix_snapshot_writer kvix_snapshot_writer;

/* Start writing a snapshot that will replace path on commit: creates a
 * unique temporary file beside it. A symbolic link is followed (its target
 * is replaced, the link stays: kvix_snapshot_resolve). *out is owned by the caller and must be
 * ended by kvix_snapshot_writer_commit or kvix_snapshot_writer_abort. */
int kvix_snapshot_writer_open(kvix_snapshot_writer **out, const char *path, kvix_err *err);

/* Record that the state written reflects stream (a JetStream stream name,
 * 1..255 bytes) up to and including message seq. Only right after
 * kvix_snapshot_writer_open, before any record (a STREAM record). */
int kvix_snapshot_writer_set_stream(kvix_snapshot_writer *w, const char *stream, uint64_t seq,
                                    kvix_err *err);

/* Append an extension record (e->type at least KVIX_SNAPSHOT_EXT_MIN,
 * e->flags KVIX_SNAPSHOT_EXT_OPTIONAL or 0, at most
 * KVIX_SNAPSHOT_EXT_BYTES_MAX bytes), after the stream position and before
 * the first (partition, worker, dp) record; e->data is only read during the
 * call. Records keep the order they are added in. */
int kvix_snapshot_writer_ext(kvix_snapshot_writer *w, const kvix_snapshot_ext *e, kvix_err *err);

/* Append one (partition, worker, dp) record, exactly as kvix_index_foreach
 * visits them: strictly ascending (model, tenant, worker, dp), blocks
 * ascending by (position, engine hash), parent_canon set (canon of a held
 * parent must match it; a parent not held is allowed: an orphan). worker == UINT64_MAX with n == 0 and no eid records a partition
 * without workers. Out-of-order or inconsistent input fails with KVIX_EINVAL
 * (the writer is then unusable: abort it). Same shape as kvix_foreach_fn. */
int kvix_snapshot_writer_add(kvix_snapshot_writer *w, const char *model, const char *tenant,
                             uint32_t bs, uint64_t worker, uint32_t dp, int has_eid,
                             uint64_t last_eid, const kvix_block_info *blocks, size_t n,
                             kvix_err *err);

/* Write the trailer and checksum, fsync, rename over the target and fsync
 * the folder. Frees w whatever the outcome; on failure the temporary file is
 * removed and the target is untouched. info (may be NULL) gets the totals. */
int kvix_snapshot_writer_commit(kvix_snapshot_writer *w, kvix_snapshot_info *info,
                                kvix_err *err);
/* Drop the temporary file and free w. NULL is fine. */
void kvix_snapshot_writer_abort(kvix_snapshot_writer *w);

/* Save the whole index to path (writer_open + kvix_index_foreach_live +
 * commit). Writers may go on meanwhile: each (worker, dp) is saved as it
 * stood when the save read it, after the event its eid names, and its
 * writer is held back only while its blocks are copied (info->walk says
 * for how long). A save that must hold everything submitted so far syncs
 * the writer pool first (kvix_index_sync). info may be NULL. */
int kvix_snapshot_save(kvix_index *idx, const char *path, kvix_snapshot_info *info,
                       kvix_err *err);
/* The same, recording the stream position (stream, seq) the index reflects
 * (kvix_snapshot_writer_set_stream); stream NULL is kvix_snapshot_save. */
int kvix_snapshot_save_at(kvix_index *idx, const char *path, const char *stream, uint64_t seq,
                          kvix_snapshot_info *info, kvix_err *err);

/* What a save writes beside the index. */
typedef struct kvix_snapshot_save_opts {
    const char *stream;          /* NULL, or the stream position (kvix_snapshot_save_at) */
    uint64_t seq;
    const kvix_snapshot_ext *ext; /* extension records, written in this order */
    size_t next;
} kvix_snapshot_save_opts;

/* kvix_snapshot_save with o's stream position and extension records (o
 * NULL: none). */
int kvix_snapshot_save_with(kvix_index *idx, const char *path, const kvix_snapshot_save_opts *o,
                            kvix_snapshot_info *info, kvix_err *err);

/* ---- one writer per snapshot ------------------------------------------ */

/* The name a save of path writes: path with its symbolic links followed
 * (the last component's, hop by hop; a dangling link names its target), so
 * a save replaces the link's target and the link stays. *out is owned by the
 * caller (free). KVIX_EINVAL for an empty path. */
int kvix_snapshot_resolve(const char *path, char **out, kvix_err *err);

typedef struct kvix_snapshot_lock kvix_snapshot_lock;

/* Take the exclusive lock of the snapshot path names, for as long as the
 * caller keeps it: an flock(2) on TARGET.lock beside the file path resolves
 * to (kvix_snapshot_resolve), created if missing and never removed; the
 * holder's pid is written into it. Never waits: another holder gives
 * KVIX_EBUSY (its pid in the message); a lock file that cannot be created
 * gives KVIX_ENOTFOUND (no such folder) or KVIX_EIO, and so does one that is
 * a symbolic link or not a regular file of one name (never written through).
 * Once held, the temporary files interrupted saves left beside the target
 * are removed (kvix_snapshot_lock_stale). The lock dies with the
 * process, so a crash leaves none behind. *out is owned by the caller:
 * kvix_snapshot_lock_release. Saves and loads do not take it themselves. */
int kvix_snapshot_lock_take(kvix_snapshot_lock **out, const char *path, kvix_err *err);
/* The lock file's name (owned by l). */
const char *kvix_snapshot_lock_path(const kvix_snapshot_lock *l);
/* How many temporary files of interrupted saves (TARGET.tmp.XXXXXX beside
 * the target) the take removed: with the lock held, no save of the path is
 * running, so they are nobody's. */
size_t kvix_snapshot_lock_stale(const kvix_snapshot_lock *l);
/* Drop the lock and free l. NULL is fine. */
void kvix_snapshot_lock_release(kvix_snapshot_lock *l);

/* ---- reading ---------------------------------------------------------- */

typedef struct kvix_snapshot kvix_snapshot;

/* One (partition, worker, dp) record of a file. Pointers are owned by the
 * snapshot and valid until the next kvix_snapshot_next / _close. */
typedef struct kvix_snapshot_group {
    const char *model, *tenant;
    uint32_t bs;
    uint64_t worker;      /* UINT64_MAX with n == 0: a partition without workers */
    uint32_t dp;
    int has_eid;
    uint64_t eid;         /* last applied source eid, when has_eid */
    const kvix_block_info *blocks; /* sorted by (position, engine) */
    size_t n;
} kvix_snapshot_group;

/* Which records of a file to look at; NULL fields and has_worker 0 match
 * every record. The strings are borrowed. */
typedef struct kvix_snapshot_filter {
    const char *model, *tenant;
    int has_worker;
    uint64_t worker;
} kvix_snapshot_filter;

/* Whether record g passes f (NULL f: every record). A partition without
 * workers (worker UINT64_MAX, no blocks, no eid) passes when its model and
 * tenant do and no worker is asked for. */
int kvix_snapshot_filter_match(const kvix_snapshot_filter *f, const kvix_snapshot_group *g);

/* A partition without workers: the record a snapshot keeps for it. */
int kvix_snapshot_group_is_partition(const kvix_snapshot_group *g);

/* Open and verify a snapshot: the whole file is checked (magic, version,
 * checksum, counts against the size, order, names, tiers, each held
 * parent's canonical hash) before this returns. Blocks come back with canon
 * and parent_canon filled. Errors: KVIX_ENOTFOUND (no such file),
 * KVIX_EIO, KVIX_ECORRUPT (with what is wrong and where), KVIX_ENOMEM.
 * *out is owned by the caller: kvix_snapshot_close. */
int kvix_snapshot_open(kvix_snapshot **out, const char *path, kvix_err *err);
/* The same from an open descriptor read to its end (a pipe is fine; fd is
 * not closed). name is used in messages and copied. */
int kvix_snapshot_open_fd(kvix_snapshot **out, int fd, const char *name, kvix_err *err);
/* The same from memory; data is copied. */
int kvix_snapshot_open_mem(kvix_snapshot **out, const void *data, size_t len, kvix_err *err);
void kvix_snapshot_close(kvix_snapshot *s); /* NULL is fine */

void kvix_snapshot_get_info(const kvix_snapshot *s, kvix_snapshot_info *out);

/* The i-th extension record of the file (0 first, in file order): KVIX_OK
 * with *out filled (its data points into the snapshot, valid until
 * kvix_snapshot_close), or KVIX_EOF past the last. Optional records of
 * types this kvix does not know are listed too. */
int kvix_snapshot_ext_get(const kvix_snapshot *s, size_t i, kvix_snapshot_ext *out);

/* Next record, in file order (model, tenant, worker, dp ascending):
 * KVIX_OK with *g filled, or KVIX_EOF after the last. */
int kvix_snapshot_next(kvix_snapshot *s, kvix_snapshot_group *g, kvix_err *err);
/* Start again from the first record. */
void kvix_snapshot_rewind(kvix_snapshot *s);
/* Visit every record like kvix_index_foreach (from the first record,
 * whatever next has consumed). Returns the visitor's non-zero value, or 0. */
int kvix_snapshot_foreach(kvix_snapshot *s, kvix_foreach_fn fn, void *ctx);

/* ---- rebuilding ------------------------------------------------------- */

/* Receives one event; ev is valid only during the call. Non-zero stops. */
typedef int (*kvix_snapshot_event_fn)(void *ctx, const kvix_event *ev);

/* Turn one record's blocks into the stored events that rebuild them, in a
 * stable order: each maximal chain (a block, then its first child by engine
 * hash, and so on) becomes one stored event of one medium with its parent
 * (split every KVIX_EVENT_BLOCKS_MAX blocks); blocks held in several tiers
 * get further stored events for their other tiers. Parents always come
 * before children. No event carries an eid (the caller decides:
 * kvix_snapshot_events puts the record's eid on its last event). scratch is
 * an initialised event whose
 * arrays are reused. Returns the visitor's non-zero value, or an error. */
int kvix_snapshot_group_events(const kvix_snapshot_group *g, kvix_event *scratch,
                               kvix_snapshot_event_fn fn, void *ctx, size_t *orphans,
                               kvix_err *err);

/* The whole file as the events that rebuild it (kvdump's dump, which
 * kvindex reads back to the same state): from the first record, whatever
 * next has consumed, every record f lets through (NULL: all) as
 * kvix_snapshot_group_events gives it, the record's eid on its last event;
 * a record that holds no block but an eid gives a cleared event carrying it
 * (and the partition's block size); a partition without workers gives
 * nothing. *matched (may be NULL) gets the records f let through. fn's ev is
 * valid only during the call. Returns 0, fn's non-zero value, or an error
 * (KVIX_ENOMEM, KVIX_ECORRUPT, reading errors of s). */
int kvix_snapshot_events(kvix_snapshot *s, const kvix_snapshot_filter *f,
                         kvix_snapshot_event_fn fn, void *ctx, uint64_t *matched,
                         kvix_err *err);

/* Apply every record of an opened snapshot to idx, which must be empty
 * (KVIX_EINVAL otherwise): blocks restored per (worker, dp) with
 * kvix_index_load (orphans included), then the eids, on the calling thread.
 * Nothing else may touch idx meanwhile. On failure idx holds part of the snapshot: free it. */
int kvix_snapshot_apply(kvix_snapshot *s, kvix_index *idx, kvix_err *err);
/* The same on a chosen number of threads (0: one per core; at most 8 and one
 * per record), each worker on one of them. Measure first: workers sharing
 * blocks contend in the backend, and on the positional backend at 10M
 * entries two threads were slower than one. */
int kvix_snapshot_apply_threads(kvix_snapshot *s, kvix_index *idx, unsigned threads,
                                kvix_err *err);

/* Make idx hold exactly the snapshot's blocks while queries go on: every
 * (worker, dp) of idx is cleared (its eid forgotten), then every record
 * loaded as kvix_snapshot_apply does. Partitions stay (an emptied one keeps
 * its block size: a record of it with another is KVIX_EBLOCKSIZE). Same
 * concurrency as kvix_index_apply for every worker: no other writer
 * meanwhile; queries see the index emptied, then filling. On failure idx
 * holds part of the snapshot. */
int kvix_snapshot_replace(kvix_snapshot *s, kvix_index *idx, kvix_err *err);

/* Open, verify and apply path into the empty index idx. The file is verified
 * whole before idx is touched, and is never modified. info may be NULL. */
int kvix_snapshot_load(kvix_index *idx, const char *path, kvix_snapshot_info *info,
                       kvix_err *err);

#ifdef __cplusplus
}
#endif
#endif
