/* kvreplay's parts share this: the state of one run (replay), the signal
 * flag, and what each part offers the others. kvreplay.c parses the options,
 * runs main and reports; kvreplay_play.c drives the publishers, paces and
 * writes the records, and reads the logs; kvreplay_mooncake.c plays a
 * Mooncake trace through the same record path. */
#ifndef KVREPLAY_H
#define KVREPLAY_H

#include <signal.h>
#include <stdint.h>
#include <time.h>

#include "kvix/buf.h"
#include "kvix/filter.h"
#include "kvix/logio.h"
#include "kvix/mooncake.h"
#include "kvix/pace.h"
#include "kvix/pubset.h"
#include "kvix/stream.h"
#include "kvix/wire.h"

typedef struct replay {
    /* options */
    kvix_format fmt;
    kvix_pace_mode timing;
    double speed, rate;
    kvix_filter filter;
    const char *wf_given[KVIX_FILTER_WORKERS_MAX]; /* --worker as given, for the warning */
    int strict, quiet;
    uint64_t limit;
    const char *pub, *replay_ep, *map_file, *topic;
    size_t replay_buffer;
    kvix_wire_style wire;
    double pub_wait, pub_hold;

    /* clock */
    kvix_pace pace;
    const char *at_name; /* the record being replayed, for messages */
    uint64_t at_line;

    /* output */
    kvix_buf out;

    /* publishers (--pub) */
    kvix_pubset *ps;

    /* progress and counters */
    int progress;
    struct timespec last_progress;
    /* input read so far, for the percentage and eta: the logs' sizes (0 when
     * one is not a regular file), the bytes of the logs done, and a dup of
     * the open log's descriptor whose offset is how far it is read (the
     * compressed bytes for a compressed log) */
    uint64_t in_total, in_before;
    int pos_fd;
    const char *in_name;
    double in_started;
    uint64_t in, written, filtered, rejected, by_type[5], batches, pub_skipped;
    size_t npubs; /* publishers bound, for the report */
    uint64_t kept; /* records past the filters */
    int stop;     /* limit reached */
    int fatal;    /* an exit code when something failed for good */
} replay;

typedef struct mooncake_args {
    const char *trace;
    kvix_mooncake_opts o;
    const char *final_state;
} mooncake_args;

/* SIGINT / SIGTERM: stop reading, flush what is pending, report, exit. */
extern volatile sig_atomic_t interrupted;

/* kvreplay.c */
double now_s(void);

/* kvreplay_play.c: the publishers (--pub) */
void open_pubs(replay *r);
void add_pub(replay *r, uint64_t worker, uint32_t dp);
void start_pubs(replay *r);
void stop_pubs(replay *r);
void flush_batch(replay *r);
/* the record path: the progress line; one record in (ctx: the replay),
 * non-zero to stop */
void progress(replay *r, int final);
int emit(void *ctx, const kvix_event *ev);
/* the logs: read_log returns an exit code (0 ok) */
typedef int (*record_fn)(replay *r, const kvix_event *ev);
uint64_t inputs_size(char *const *paths, int n);
int open_input(replay *r, const char *path, kvix_logio **lio);
int close_input(replay *r, kvix_logio *lio);
int read_log(replay *r, const char *path, record_fn fn, int quiet_rejects);
int emit_record(replay *r, const kvix_event *ev);
int collect_pub(replay *r, const kvix_event *ev);

/* kvreplay_mooncake.c: returns an exit code */
int run_mooncake(replay *r, mooncake_args *a);

#endif
