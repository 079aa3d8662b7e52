/* kvindex's parts share this: the state of one run (kvi), the signal
 * flags, and what each part offers the others. kvindex.c parses the options
 * and runs main; kvindex_input.c applies stdin and files, answers queries,
 * saves and reports; kvindex_nats.c consumes a NATS stream; kvindex_serve.c
 * wires the HTTP service, the peers and the engine subscriptions. */
#ifndef KVINDEX_H
#define KVINDEX_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvix/enginefeed.h"
#include "kvix/index.h"
#include "kvix/natslog.h"
#include "kvix/peers.h"
#include "kvix/service.h"
#include "kvix/stream.h"


/* Tags given to kvix_index_submit: event type, input file, position. */
#define TAG_POS_BITS 44
#define TAG_FILE_BITS 16
static inline uint64_t make_tag(int type, size_t file, uint64_t pos)
{
    return (uint64_t)type << (TAG_POS_BITS + TAG_FILE_BITS) |
           (uint64_t)(file & 0xffff) << TAG_POS_BITS | (pos & ((UINT64_C(1) << TAG_POS_BITS) - 1));
}

typedef struct kvi {
    kvix_index *idx;
    const char *snap;
    int query_only, strict, quiet, verbose, progress;
    unsigned threads;
    int http_nice; /* --http-nice */
    uint64_t save_every_events;
    double save_every_secs;
    const char **names;     /* input names, by file index (for rejections from threads) */
    /* counters of the main thread */
    uint64_t submitted[KVIX_EV_QUERY + 1];
    uint64_t queries, answered, records;
    uint64_t since_save; /* atomic: events applied from stdin or a stream since the last save */
    double last_save, started;
    int dirty, io_error;
    int save_failed; /* the last save failed: its exit code, else 0 */
    /* rejections: also written by writer threads */
    pthread_mutex_t mu;
    uint64_t rejected, reasons[KVIX_REASON_COUNT] /* by kvix_reason */, rejected_type[KVIX_EV_QUERY + 1];
    int strict_hit;
    int progress_shown;
    uint64_t input_size;  /* what is left of a regular file when its reading began, else 0 */
    double input_started;
    kvix_apply_result base; /* totals after loading the snapshot */
    /* --nats: every message up to seq is applied */
    kvix_natslog_opts nopt;
    int reset_on_gap, until_caught_up, gone, has_seq;
    uint64_t seq;
    int mid_message; /* --nats: some records of message seq + 1 applied (no save now) */
    kvix_natslog_lag lag;
    kvix_index_opts io;
    kvix_buf out;
    kvix_answer ans;
    char **unknown;         /* "model\ttenant" already warned about */
    size_t nunknown;
    kvix_service *svc; /* --listen: the HTTP API */
    /* -w, --workers-file, --listen: engine subscriptions applied on their own
     * thread; write_mu is taken by every writer of the index then */
    kvix_enginefeed *feed;
    pthread_mutex_t write_mu;
    const char *workers_file;
    size_t feed_file;    /* the names[] slot of the subscriptions' rejections */
    uint64_t fed_at_save; /* feed_events() at the last save */
    uint64_t fed_applied_at_save; /* atomic: the feed's applied count at the last save */
    int save_woken; /* atomic: the feed woke the main loop for a save not made yet */
    kvix_peers *peers;    /* --peers and POST /register_peer */
    int svc_held;         /* --nats: the service's writers' side held for a whole message */
} kvi;

/* Set by the signal handlers; wake[0] becomes readable on every signal. */
extern volatile sig_atomic_t sig_stop, sig_save, sig_summary, sig_tick;
extern int wake[2];

/* kvindex_input.c */
void install_signals(int with_timer);
void drain_wake(void);
double now(void);
void clear_progress(kvi *k);
void reject_from(kvi *k, const char *what, const char *name, uint64_t pos, int type,
                 int from_input, const kvix_err *e);
void reject(kvi *k, const char *what, const char *name, uint64_t pos, int type,
            const kvix_err *e);
void on_reject(void *ctx, uint64_t tag, const kvix_err *e);
void lock_writes(kvi *k);
void unlock_writes(kvi *k);
void sync_writers(kvi *k);
void summary(kvi *k);
int save_due(kvi *k, uint64_t fed_applied);
int save(kvi *k, const char *why);
void die_sys(kvi *k, const kvix_err *err) __attribute__((noreturn));
void handle_flags(kvi *k, kvix_reader *r);
void answer(kvi *k, const char *name, uint64_t pos, const kvix_event *q);
void apply(kvi *k, const char *name, uint64_t pos, size_t file, const kvix_event *ev);
void run_input(kvi *k, int fd, size_t file, kvix_format fmt, kvix_event *ev);
int load(kvi *k);

/* kvindex_nats.c */
void lag_summary(kvi *k);
void run_nats(kvi *k, kvix_event *ev);

/* kvindex_serve.c */
int recover(kvi *k);
int recover_held(kvi *k);
void load_workers(kvi *k, int initial);
void make_feed(kvi *k, const kvix_enginesub_config *cfg, const char **wargs, size_t nw);
void start_feed(kvi *k, bool hold);
void serve(kvi *k);
void start_service(kvi *k, const char *listen, unsigned http_threads);

#endif
