/* kvix tools: the engine-subscription front end of kvsub and kvindex (-w,
 * --workers-file): the options both take, the subscriptions they name (the
 * -w ones, and the workers file's, read at the start and again on SIGHUP and
 * when the file changes: --reload), and which of the subscriber's notes are
 * said. What is protocol is the library's: the subscriber
 * (kvix/enginesub.h), where each subscription resumes
 * (kvix_enginesub_resume_*), the NATS framing (kvix_natslog_publish_event).
 *
 * Threads. kvix_subfront_start and kvix_subfront_poll run on the thread
 * that steps the subscriber (kvsub's main loop; kvindex's feed thread once
 * it runs, enginefeed.h), kvix_subfront_ask on any. */
#ifndef KVIX_SUBFRONT_H
#define KVIX_SUBFRONT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kvix/enginesub.h"

/* The ids of the options kvix_subfront_option takes (-w is 'w'): each
 * tool's table lists those it offers; CLI_SUB_FILE_OPTIONS are entries both
 * tools word alike. */
enum {
    CLI_O_SUB_WORKERS_FILE = 0x500,
    CLI_O_SUB_RELOAD,
    CLI_O_SUB_MODEL,
    CLI_O_SUB_TENANT,
    CLI_O_SUB_BLOCK_SIZE,
    CLI_O_SUB_REPLAY,
    CLI_O_SUB_REPLAY_TIMEOUT,
    CLI_O_SUB_MAX_SUBSCRIPTIONS,
    CLI_O_SUB_TOPIC,
    CLI_O_SUB_BIND,
    CLI_O_SUB_TOKENS,
    CLI_O_SUB_REPLAY_BUFFER,
    CLI_O_SUB_REPLAY_BUFFER_BYTES,
    CLI_O_SUB_MAX_MESSAGE,
};
#define CLI_SUB_FILE_OPTIONS                                                                     \
    {CLI_O_SUB_WORKERS_FILE, 0, "workers-file", "FILE", "file",                                  \
     "subscribe to the ID[:DP]=ENDPOINT [replay=ENDPOINT] lines of FILE; re-read on SIGHUP "     \
     "and when it changes"},                                                                     \
    {CLI_O_SUB_RELOAD, 0, "reload", "SECONDS", NULL,                                             \
     "re-read the workers file when it changes, checked every SECONDS (default 0.25; 0: on "     \
     "SIGHUP only)"}

/* kvix_subfront.given: the options that set the subscriptions' defaults */
#define CLI_SUB_GIVEN_DEFAULTS 1u /* --model, --tenant, --block-size, --replay-timeout */

typedef struct kvix_subfront {
    /* From the options (kvix_subfront_option). cfg: the subscriptions'
     * defaults; the tool sets the fields only it takes (bind, topic...). */
    kvix_enginesub_config cfg;
    const char *workers_file;
    uint64_t reload_ms;          /* --reload: 250 unless given; 0: on SIGHUP only */
    size_t subs_given;           /* --max-subscriptions, or 0 */
    unsigned given;              /* CLI_SUB_GIVEN_* */
    bool reload_given;
    const char **wargs;          /* -w as given, checked by kvix_subfront_check */
    size_t nw;
    kvix_enginesub_spec *specs, *replays; /* -w and --replay, checked */
    size_t nspecs, nreplays;
    /* Set by the tool before kvix_subfront_start. */
    bool model_no_colon;         /* a workers-file model with ':' is refused (kvindex --listen) */
    /* A message to say (NULL: cli_warn); routine: a reload that went well.
     * On the thread of kvix_subfront_start or _poll. */
    void (*say)(void *ctx, bool routine, const char *msg);
    void *ctx;
    /* the front end's own */
    kvix_enginesub *sub;
    struct stat seen;            /* the workers file as last read */
    uint64_t checked_ms;
    int asked;                   /* atomic: kvix_subfront_ask */
} kvix_subfront;

/* Defaults (the config's, --reload 0.25 s). */
void kvix_subfront_init(kvix_subfront *f);
/* Frees what the options gathered. */
void kvix_subfront_release(kvix_subfront *f);

/* Take option id ('w' or a CLI_O_SUB_*) into f: 1, or 0 when it is another
 * option. A bad value is a usage error. */
int kvix_subfront_option(kvix_subfront *f, int id, const char *arg);
/* Once the options are read (cfg.bind set): every -w and --replay checked
 * in full, --reload only with --workers-file. Usage errors. */
void kvix_subfront_check(kvix_subfront *f);

/* Subscribe sub (borrowed, outlives f's use of it) to the -w workers (group
 * 0) and the workers file's (group 1), --replay's endpoints filling the
 * lines that have none. Anything refused exits: 2 for what a worker or the
 * file says (a bad line, a duplicate, past --max-subscriptions), 3 for a
 * file that cannot be read. */
void kvix_subfront_start(kvix_subfront *f, kvix_enginesub *sub);
/* Read the workers file again at the next kvix_subfront_poll (SIGHUP). Any
 * thread; async-signal-safe. */
void kvix_subfront_ask(kvix_subfront *f);
/* Between two steps of the subscriber: the workers file read again when
 * asked, or when it changed since it was last read (looked at every
 * reload_ms). A file refused keeps the workers as they were; either way it
 * is said. */
void kvix_subfront_poll(kvix_subfront *f);
/* Read the workers file and make its lines sub's group 1, whole or not at
 * all (kvix_enginesub_replace). err says why not, naming the file; added and
 * removed may be NULL. */
int kvix_subfront_load(kvix_subfront *f, size_t *added, size_t *removed, kvix_err *err);

/* Whether a note of the subscriber is said: losses, restarts, removals and
 * connections always, rejected input the first few times of each kind (the
 * rest only counted). */
bool kvix_subfront_note_said(const kvix_enginesub_note *n);

#endif
