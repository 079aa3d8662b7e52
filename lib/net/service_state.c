/* GET /dump and GET /snapshot: the whole index, read live (one (worker, dp)
 * at a time, its writer held back only while it is copied:
 * kvix_index_foreach_live) into an unlinked temporary file, from which every
 * client that asked while it was being written is served (one state, one
 * walk, one file, however many ask). A response reads the file, so a
 * client holds no memory; the responses of each kind waiting or being sent
 * are bounded (KVIX_SERVICE_STATES_MAX, past it 503), and a client that
 * stops reading is dropped by the server's connection timeout, which gives
 * its share of the file back (a fresh state also serves the requests that
 * come just after it: see STATE_FRESH_MIN). With a stream position (o.stream) the
 * snapshot pairs one state with one sequence: the index is held quiet while
 * it is written, as before. */
#define _GNU_SOURCE /* mkostemp */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvix/service.h"
#include "kvix/snapshot.h"
#include "service_int.h"
#include "service_priv.h"

/* One written state: its file (unlinked), shared by its responses. */
typedef struct state_file {
    int fd;
    uint64_t size;
    int refs;     /* under its kind's mu: the kind's cur, and each request using it */
    int building; /* being written: requests that come meanwhile wait for it */
    double began, done; /* monotonic seconds */
    int rc;
    kvix_err err;
} state_file;

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A request that finds no state being written takes the last one while it
 * is fresh: written less than STATE_FRESH_MIN seconds ago, or than its own
 * writing took: requests queued behind a server thread that was busy
 * writing it came meanwhile too, and clients looping on /dump cannot keep
 * the index read more than half the time. */
#define STATE_FRESH_MIN 1.0

void kvix__service_states_init(kvix_service_states *st)
{
    for (int i = 0; i < KVIX_STATE_KINDS; i++) {
        pthread_mutex_init(&st->k[i].mu, NULL);
        pthread_cond_init(&st->k[i].cv, NULL);
        st->k[i].cur = NULL;
        st->k[i].inflight = 0;
    }
}

/* Under k->mu. */
static void file_unref(state_file *f)
{
    if (--f->refs == 0) {
        if (f->fd >= 0)
            close(f->fd);
        free(f);
    }
}

void kvix__service_states_release(kvix_service_states *st)
{
    for (int i = 0; i < KVIX_STATE_KINDS; i++) {
        kvix_state_kind *k = &st->k[i];
        if (k->cur)
            file_unref(k->cur);
        k->cur = NULL;
        pthread_mutex_destroy(&k->mu);
        pthread_cond_destroy(&k->cv);
    }
}

/* A temporary file in the service's folder, unlinked at once: its bytes
 * live as long as a descriptor does (a crash leaves nothing behind). */
static int temp_file(kvix_service *s, char *path, size_t cap, kvix_err *err)
{
    if ((size_t)snprintf(path, cap, "%s/kvix-http-state-XXXXXX", s->o.tmpdir) >= cap)
        return kvix_err_set(err, KVIX_EIO, "temporary folder name too long");
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0)
        return kvix_err_set(err, KVIX_EIO, "cannot create a file in %s: %s", s->o.tmpdir,
                            strerror(errno));
    return fd;
}

static int write_dump(kvix_service *s, state_file *f, kvix_walk_stats *st)
{
    char path[4096];
    int fd = temp_file(s, path, sizeof path, &f->err);
    if (fd < 0)
        return f->err.code;
    unlink(path);
    f->fd = fd;
    return kvix_service_dump_fd(s->o.idx, fd, 1, st, &f->err);
}

static int write_snapshot(kvix_service *s, state_file *f, kvix_walk_stats *st)
{
    char path[4096];
    int fd = temp_file(s, path, sizeof path, &f->err);
    if (fd < 0)
        return f->err.code;
    close(fd); /* the snapshot writer replaces it, crash-safely as ever */
    int rc;
    kvix_snapshot_info info;
    if (s->o.stream) {
        kvix_index_quiet_begin(s->o.idx);
        rc = kvix_snapshot_save_at(s->o.idx, path, s->o.stream,
                                   __atomic_load_n(&s->stream_seq, __ATOMIC_RELAXED), &info,
                                   &f->err);
        kvix_index_quiet_end(s->o.idx);
    } else {
        rc = kvix_snapshot_save(s->o.idx, path, &info, &f->err);
    }
    if (!rc)
        *st = info.walk;
    f->fd = rc ? -1 : open(path, O_RDONLY | O_CLOEXEC);
    if (!rc && f->fd < 0)
        rc = kvix_err_set(&f->err, KVIX_EIO, "cannot open %s: %s", path, strerror(errno));
    unlink(path); /* the descriptor keeps the bytes until the last response is sent */
    return rc;
}

/* A response of kind k is sent or dropped. */
static void state_done(void *ctx)
{
    kvix_state_kind *k = ctx;
    pthread_mutex_lock(&k->mu);
    k->inflight--;
    pthread_mutex_unlock(&k->mu);
}

const char *const kvix__service_state_paths[KVIX_STATE_KINDS] = {"/dump", "/snapshot"};
#define kind_path kvix__service_state_paths
static const char *const kind_type[KVIX_STATE_KINDS] = {"application/json",
                                                        "application/octet-stream"};

void kvix__service_get_state(kvix_service *s, int kind, kvix_service_response *r)
{
    kvix_state_kind *k = &s->states.k[kind];
    pthread_mutex_lock(&k->mu);
    if (k->inflight >= KVIX_SERVICE_STATES_MAX) {
        k->refused++;
        pthread_mutex_unlock(&k->mu);
        char m[128];
        snprintf(m, sizeof m, "%u %s responses in flight: try again when one is done",
                 KVIX_SERVICE_STATES_MAX, kind_path[kind]);
        kvix__service_respond_error(r, 503, m);
        return;
    }
    k->inflight++;
    state_file *f = k->cur;
    double now = mono();
    int build = !f || (!f->building && (f->rc || (now - f->done >= STATE_FRESH_MIN &&
                                                  now - f->done >= f->done - f->began)));
    if (build) { /* none being written: a new state (the last one is older than this request) */
        f = calloc(1, sizeof *f);
        if (!f) {
            k->inflight--;
            pthread_mutex_unlock(&k->mu);
            kvix__service_respond_error(r, 500, "out of memory");
            return;
        }
        f->fd = -1;
        f->building = 1;
        f->began = now;
        f->refs = 2; /* k->cur and this request */
        if (k->cur)
            file_unref(k->cur);
        k->cur = f;
    } else {
        f->refs++;
    }
    pthread_mutex_unlock(&k->mu);
    if (build) {
        kvix_walk_stats ws = {0, 0, 0, 0};
        f->rc = kind == KVIX_STATE_DUMP ? write_dump(s, f, &ws) : write_snapshot(s, f, &ws);
        struct stat st;
        if (!f->rc && fstat(f->fd, &st) != 0)
            f->rc = kvix_err_set(&f->err, KVIX_EIO, "cannot stat the state: %s", strerror(errno));
        f->size = f->rc ? 0 : (uint64_t)st.st_size;
        pthread_mutex_lock(&k->mu);
        k->builds++;
        k->hold_max = ws.hold_max;
        f->done = mono();
        f->building = 0;
        pthread_cond_broadcast(&k->cv);
    } else {
        pthread_mutex_lock(&k->mu);
        while (f->building)
            pthread_cond_wait(&k->cv, &k->mu);
    }
    /* a response of its own: a descriptor the server closes when it is done */
    int fd = f->rc ? -1 : dup(f->fd);
    int rc = f->rc;
    kvix_err err = f->err;
    uint64_t size = f->size;
    file_unref(f);
    if (!rc && fd < 0)
        rc = kvix_err_set(&err, KVIX_ESYS, "cannot duplicate a descriptor: %s", strerror(errno));
    if (rc)
        k->inflight--;
    pthread_mutex_unlock(&k->mu);
    if (rc) {
        kvix__service_respond_err(r, &err);
        return;
    }
    r->status = 200;
    r->content_type = kind_type[kind];
    r->body.len = 0;
    r->fd = fd;
    r->fd_size = size;
    r->done = state_done;
    r->done_ctx = k;
}

void kvix__service_state_counts(kvix_service *s, int kind, kvix_state_counts *out)
{
    kvix_state_kind *k = &s->states.k[kind];
    pthread_mutex_lock(&k->mu);
    *out = (kvix_state_counts){k->builds, k->refused, k->inflight, k->hold_max};
    pthread_mutex_unlock(&k->mu);
}

void kvix__service_get_dump(kvix_service *s, kvix_service_response *r)
{
    kvix__service_get_state(s, KVIX_STATE_DUMP, r);
}

void kvix__service_get_snapshot(kvix_service *s, kvix_service_response *r)
{
    kvix__service_get_state(s, KVIX_STATE_SNAPSHOT, r);
}
