/* The engine-subscription front end of kvsub and kvindex (see
 * cmd/tools/subfront.h). */
#include "subfront.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "kvix/wire.h"

#define NOTE_WARN_MAX 20 /* notes of one kind of rejected input said before they are only counted */

void kvix_subfront_init(kvix_subfront *f)
{
    memset(f, 0, sizeof *f);
    kvix_enginesub_config_init(&f->cfg);
    f->reload_ms = 250;
}

void kvix_subfront_release(kvix_subfront *f)
{
    free(f->wargs);
    free(f->specs);
    free(f->replays);
    f->wargs = NULL;
    f->specs = f->replays = NULL;
    f->nw = f->nspecs = f->nreplays = 0;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    return q;
}

/* -w and --replay: checked in full, so a bad one is a usage error. */
static void add_spec(kvix_enginesub_spec **v, size_t *n, const char *arg, bool bind,
                     const char *what)
{
    kvix_enginesub_spec sp;
    kvix_err err;
    kvix_enginesub_spec_init(&sp);
    if (kvix_enginesub_spec_parse(&sp, arg, &err) ||
        kvix_enginesub_endpoint_check(sp.endpoint, bind, &err))
        cli_usage_error("%s%s", what, err.msg);
    *v = xrealloc(*v, (*n + 1) * sizeof **v);
    (*v)[(*n)++] = sp;
}

static void name_option(kvix_subfront *f, int id, const char *arg)
{
    if (!*arg || strlen(arg) >= KVIX_NAME_MAX)
        cli_usage_error("bad %s name '%s'", id == CLI_O_SUB_MODEL ? "model" : "tenant", arg);
    *(id == CLI_O_SUB_MODEL ? &f->cfg.model : &f->cfg.tenant) = arg;
}

/* The options of how engines are reached and read. */
static int engine_option(kvix_enginesub_config *cfg, int id, const char *arg)
{
    switch (id) {
    case CLI_O_SUB_TOPIC: cfg->topic = arg; return 1;
    case CLI_O_SUB_BIND: cfg->bind = true; return 1;
    case CLI_O_SUB_TOKENS: cfg->keep_tokens = true; return 1;
    case CLI_O_SUB_REPLAY_BUFFER:
        cfg->hold_max = (size_t)cli_parse_uint(arg, 1, 10000000, "replay buffer");
        return 1;
    case CLI_O_SUB_REPLAY_BUFFER_BYTES:
        cfg->hold_bytes_max =
            (size_t)cli_parse_uint(arg, 1024, UINT64_C(1) << 40, "replay buffer bytes");
        return 1;
    case CLI_O_SUB_MAX_MESSAGE:
        cfg->msg_max = (size_t)cli_parse_uint(arg, 1024, KVIX_WIRE_FRAME_MAX, "max message");
        return 1;
    default: return 0;
    }
}

int kvix_subfront_option(kvix_subfront *f, int id, const char *arg)
{
    switch (id) {
    case 'w':
        f->wargs = xrealloc(f->wargs, (f->nw + 1) * sizeof *f->wargs);
        f->wargs[f->nw++] = arg; /* checked once --bind is known */
        return 1;
    case CLI_O_SUB_REPLAY: add_spec(&f->replays, &f->nreplays, arg, false, "--replay: "); return 1;
    case CLI_O_SUB_WORKERS_FILE: f->workers_file = arg; return 1;
    case CLI_O_SUB_RELOAD:
    {
        double sec = cli_parse_double(arg, 0, 86400, "--reload");
        f->reload_ms = sec > 0 && sec < 0.001 ? 1 : (uint64_t)(sec * 1000);
        f->reload_given = true;
        return 1;
    }
    case CLI_O_SUB_MODEL:
    case CLI_O_SUB_TENANT: name_option(f, id, arg); break;
    case CLI_O_SUB_BLOCK_SIZE:
        f->cfg.block_size = (uint32_t)cli_parse_uint(arg, 1, KVIX_BS_MAX, "block size");
        break;
    case CLI_O_SUB_REPLAY_TIMEOUT:
        f->cfg.replay_timeout_ms = cli_parse_uint(arg, 1, 3600000, "replay timeout");
        break;
    case CLI_O_SUB_MAX_SUBSCRIPTIONS:
        f->subs_given =
            (size_t)cli_parse_uint(arg, 1, kvix_enginesub_subs_limit(), "subscription count");
        return 1;
    default: return engine_option(&f->cfg, id, arg);
    }
    f->given |= CLI_SUB_GIVEN_DEFAULTS;
    return 1;
}

/* --replay ID[:DP]=EP names the replay endpoint of a worker and rank,
 * wherever it is subscribed (-w or the workers file, whose replay= wins). */
static void apply_replays(const kvix_subfront *f, kvix_enginesub_spec *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < f->nreplays && !v[i].replay[0]; k++)
            if (f->replays[k].worker == v[i].worker && f->replays[k].dp == v[i].dp)
                snprintf(v[i].replay, sizeof v[i].replay, "%s", f->replays[k].endpoint);
}

void kvix_subfront_check(kvix_subfront *f)
{
    if (f->reload_given && !f->workers_file)
        cli_usage_error("--reload needs --workers-file");
    for (size_t i = 0; i < f->nw; i++)
        add_spec(&f->specs, &f->nspecs, f->wargs[i], f->cfg.bind, "");
    apply_replays(f, f->specs, f->nspecs);
}

static const char *busy_hint(int rc)
{
    return rc == KVIX_EBUSY ? " (--max-subscriptions)" : "";
}

/* A workers-file model the HTTP API could not name (its /dump keys are
 * model:tenant). */
static int colon_model(const kvix_subfront *f, const kvix_enginesub_spec *v, size_t n,
                       kvix_err *err)
{
    for (size_t i = 0; f->model_no_colon && i < n; i++)
        if (strchr(v[i].model, ':'))
            return kvix_err_set(err, KVIX_EINVAL,
                                "%s: model name \"%.64s\" contains ':', which the HTTP API's "
                                "/dump keys (model:tenant) cannot carry",
                                f->workers_file, v[i].model);
    return KVIX_OK;
}

int kvix_subfront_load(kvix_subfront *f, size_t *added, size_t *removed, kvix_err *err)
{
    kvix_enginesub_spec *v;
    size_t n;
    /* stat before reading: a change made while we read is seen next time */
    if (stat(f->workers_file, &f->seen) != 0)
        memset(&f->seen, 0, sizeof f->seen);
    int rc = kvix_enginesub_file_read(f->workers_file, f->cfg.bind, &v, &n, err);
    if (rc)
        return rc;
    apply_replays(f, v, n);
    if (!(rc = colon_model(f, v, n, err)) &&
        (rc = kvix_enginesub_replace(f->sub, 1, v, n, added, removed, err))) {
        char why[KVIX_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        kvix_err_set(err, rc, "%s: %s%s", f->workers_file, why, busy_hint(rc));
    }
    free(v);
    return rc;
}

void kvix_subfront_start(kvix_subfront *f, kvix_enginesub *sub)
{
    f->sub = sub;
    kvix_err err;
    int rc;
    for (size_t i = 0; i < f->nspecs; i++)
        if ((rc = kvix_enginesub_add(sub, &f->specs[i], 0, &err)) == KVIX_ENOMEM)
            cli_die(KVIX_EXIT_SYS, "out of memory");
        else if (rc)
            cli_usage_error("%s%s", err.msg, busy_hint(rc));
    if (f->workers_file && (rc = kvix_subfront_load(f, NULL, NULL, &err)))
        cli_die(rc == KVIX_ENOMEM                                          ? KVIX_EXIT_SYS
                : rc == KVIX_EINVAL || rc == KVIX_ELIMIT || rc == KVIX_EBUSY ? KVIX_EXIT_USAGE
                                                                           : KVIX_EXIT_IO,
                "%s", err.msg);
}

void kvix_subfront_ask(kvix_subfront *f)
{
    __atomic_store_n(&f->asked, 1, __ATOMIC_RELEASE);
    if (f->sub)
        kvix_enginesub_wake(f->sub);
}

/* The workers file was replaced or rewritten since it was last read (a file
 * gone for now is not a change: the workers are kept). */
static bool file_changed(const kvix_subfront *f)
{
    struct stat st;
    if (stat(f->workers_file, &st) != 0)
        return false;
    return st.st_ino != f->seen.st_ino || st.st_dev != f->seen.st_dev ||
           st.st_size != f->seen.st_size || st.st_mtim.tv_sec != f->seen.st_mtim.tv_sec ||
           st.st_mtim.tv_nsec != f->seen.st_mtim.tv_nsec;
}

static void say(const kvix_subfront *f, bool routine, const char *msg)
{
    if (f->say)
        f->say(f->ctx, routine, msg);
    else
        cli_warn("%s", msg);
}

static int count_one(void *ctx, const kvix_enginesub_status *st)
{
    (void)st;
    ++*(size_t *)ctx;
    return 0;
}

static void reload(kvix_subfront *f)
{
    size_t added, removed, total = 0;
    kvix_err err;
    char msg[KVIX_ERR_MSG_MAX + 4200];
    if (kvix_subfront_load(f, &added, &removed, &err)) {
        snprintf(msg, sizeof msg, "%s: keeping the workers of %.4096s as they were", err.msg,
                 f->workers_file);
        say(f, false, msg);
        return;
    }
    kvix_enginesub_list(f->sub, count_one, &total);
    snprintf(msg, sizeof msg, "reloaded %.4096s: %zu workers, %zu added, %zu removed",
             f->workers_file, total, added, removed);
    say(f, true, msg);
}

void kvix_subfront_poll(kvix_subfront *f)
{
    if (!f->workers_file || !f->sub)
        return;
    if (!__atomic_exchange_n(&f->asked, 0, __ATOMIC_ACQ_REL)) {
        uint64_t now = cli_mono_ms();
        if (!f->reload_ms || now - f->checked_ms < f->reload_ms)
            return;
        f->checked_ms = now;
        if (!file_changed(f))
            return;
    }
    reload(f);
}

bool kvix_subfront_note_said(const kvix_enginesub_note *n)
{
    switch (n->kind) {
    case KVIX_ENGINESUB_LOSS:
    case KVIX_ENGINESUB_RESTART:
    case KVIX_ENGINESUB_REMOVED:
    case KVIX_ENGINESUB_FAILED:
    case KVIX_ENGINESUB_DISCONNECT:
    case KVIX_ENGINESUB_NO_CONNECTION:
    case KVIX_ENGINESUB_CONNECTED:
    case KVIX_ENGINESUB_UNRESOLVED: return true;
    default: return n->repeat <= NOTE_WARN_MAX;
    }
}
