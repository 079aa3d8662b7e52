/* The subscription front end of kvsub and kvindex (cmd/tools/subfront.h):
 * the workers file read whole, --replay filling its lines, read again when
 * it changes (--reload) or when asked (SIGHUP), a bad version refused with
 * the workers kept and said, a model with ':' refused when the index must
 * refuse it; which notes are said. The subscriber opens no socket here (no
 * step): its registry is what is checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "subfront.h"

typedef struct said {
    int n, routine;
    char msg[8192];
} said;

static void on_say(void *ctx, bool routine, const char *msg)
{
    said *s = ctx;
    s->n++;
    s->routine = routine;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
}

/* Write path whole (a temporary renamed into place, as kvreplay --map-file
 * does): a new file each time, so a reader sees it change. */
static void put_file(const char *path, const char *text)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
    CHECK(rename(tmp, path) == 0);
}

static void on_event(void *ctx, const kvix_event *ev)
{
    (void)ctx, (void)ev; /* never called: no step */
}

static kvix_enginesub *new_sub(void)
{
    kvix_enginesub_config cfg;
    kvix_enginesub_config_init(&cfg);
    kvix_enginesub_ops ops = {on_event, NULL};
    kvix_enginesub *s = NULL;
    kvix_err err;
    CHECK(kvix_enginesub_new(&s, &cfg, &ops, NULL, &err) == KVIX_OK);
    return s;
}

typedef struct listing {
    size_t n;
    uint64_t worker[8];
    char replay[8][KVIX_ENGINESUB_ENDPOINT_MAX];
} listing;

static int list_one(void *ctx, const kvix_enginesub_status *st)
{
    listing *l = ctx;
    if (l->n < 8) {
        l->worker[l->n] = st->spec->worker;
        snprintf(l->replay[l->n], sizeof l->replay[0], "%s", st->spec->replay);
    }
    l->n++;
    return 0;
}

static listing list(kvix_enginesub *s)
{
    listing l;
    memset(&l, 0, sizeof l);
    kvix_enginesub_list(s, list_one, &l);
    return l;
}

/* Poll until something is said, at most about 5 s (the file is looked at
 * every reload_ms). */
static int poll_said(kvix_subfront *f, said *s)
{
    int before = s->n;
    for (int i = 0; i < 5000 && s->n == before; i++) {
        kvix_subfront_poll(f);
        if (s->n == before) {
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    return s->n > before;
}

TEST(the_workers_file_read_whole_with_replays_and_again_when_it_changes_or_when_asked)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", th_path("workers"));
    put_file(path, "1=ipc:///tmp/kvix-sf-a\n2=ipc:///tmp/kvix-sf-b replay=ipc:///tmp/kvix-sf-rb\n");
    kvix_subfront f;
    kvix_subfront_init(&f);
    said s;
    memset(&s, 0, sizeof s);
    CHECK(kvix_subfront_option(&f, 'w', "9=ipc:///tmp/kvix-sf-w"));
    CHECK(kvix_subfront_option(&f, CLI_O_SUB_REPLAY, "1=ipc:///tmp/kvix-sf-r1"));
    CHECK(kvix_subfront_option(&f, CLI_O_SUB_REPLAY, "2=ipc:///tmp/kvix-sf-r2"));
    CHECK(kvix_subfront_option(&f, CLI_O_SUB_WORKERS_FILE, path));
    CHECK(kvix_subfront_option(&f, CLI_O_SUB_RELOAD, "0.001"));
    CHECK(!kvix_subfront_option(&f, 't', "x"));
    CHECK_U64(f.reload_ms, 1);
    kvix_subfront_check(&f);
    f.say = on_say;
    f.ctx = &s;
    kvix_enginesub *sub = new_sub();
    kvix_subfront_start(&f, sub);
    listing l = list(sub);
    CHECK_U64(l.n, 3);
    CHECK_U64(l.worker[0], 9);
    CHECK_U64(l.worker[1], 1);
    CHECK_STR(l.replay[1], "ipc:///tmp/kvix-sf-r1"); /* --replay fills a line without one */
    CHECK_STR(l.replay[2], "ipc:///tmp/kvix-sf-rb"); /* the line's own wins */
    CHECK_U64(s.n, 0);
    /* unchanged: nothing read, nothing said */
    kvix_subfront_poll(&f);
    CHECK_U64(s.n, 0);
    /* changed: read again */
    put_file(path, "2=ipc:///tmp/kvix-sf-b\n3=ipc:///tmp/kvix-sf-c\n");
    CHECK(poll_said(&f, &s));
    CHECK(s.routine);
    char want[8192];
    snprintf(want, sizeof want, "reloaded %s: 3 workers, 1 added, 1 removed", path);
    CHECK_STR(s.msg, want);
    /* a bad version changes nothing, and says why */
    put_file(path, "2=ipc:///tmp/kvix-sf-b\nbogus\n");
    CHECK(poll_said(&f, &s));
    CHECK(!s.routine);
    CHECK(strstr(s.msg, ":2: bad worker 'bogus'") != NULL);
    snprintf(want, sizeof want, ": keeping the workers of %s as they were", path);
    CHECK(strlen(s.msg) > strlen(want) && !strcmp(s.msg + strlen(s.msg) - strlen(want), want));
    CHECK_U64(list(sub).n, 3);
    /* SIGHUP only: a change waits for the ask */
    f.reload_ms = 0;
    put_file(path, "3=ipc:///tmp/kvix-sf-c\n");
    int n = s.n;
    kvix_subfront_poll(&f);
    CHECK_U64(s.n, n);
    kvix_subfront_ask(&f);
    kvix_subfront_poll(&f);
    CHECK_U64(s.n, n + 1);
    snprintf(want, sizeof want, "reloaded %s: 2 workers, 0 added, 1 removed", path);
    CHECK_STR(s.msg, want);
    kvix_enginesub_free(sub);
    kvix_subfront_release(&f);
}

TEST(a_workers_file_with_a_colon_model_is_refused_whole)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", th_path("colon"));
    put_file(path, "1=tcp://127.0.0.1:5999\n2=tcp://127.0.0.1:5998 model=a:b\n");
    kvix_subfront f;
    kvix_subfront_init(&f);
    CHECK(kvix_subfront_option(&f, CLI_O_SUB_WORKERS_FILE, path));
    kvix_subfront_check(&f);
    f.model_no_colon = true;
    f.sub = new_sub();
    kvix_err err;
    CHECK(kvix_subfront_load(&f, NULL, NULL, &err) == KVIX_EINVAL);
    CHECK(strstr(err.msg, "model name \"a:b\" contains ':'") != NULL);
    CHECK_U64(list(f.sub).n, 0);
    f.model_no_colon = false; /* without --listen, a name like any other */
    CHECK(kvix_subfront_load(&f, NULL, NULL, &err) == KVIX_OK);
    CHECK_U64(list(f.sub).n, 2);
    kvix_enginesub_free(f.sub);
    kvix_subfront_release(&f);
}

TEST(losses_and_connections_always_said_rejected_input_the_first_20_times)
{
    kvix_enginesub_note n;
    memset(&n, 0, sizeof n);
    int always[] = {KVIX_ENGINESUB_LOSS,       KVIX_ENGINESUB_RESTART,
                    KVIX_ENGINESUB_REMOVED,    KVIX_ENGINESUB_FAILED,
                    KVIX_ENGINESUB_DISCONNECT, KVIX_ENGINESUB_NO_CONNECTION,
                    KVIX_ENGINESUB_CONNECTED,  KVIX_ENGINESUB_UNRESOLVED};
    for (size_t i = 0; i < sizeof always / sizeof *always; i++) {
        n.kind = always[i];
        n.repeat = 1000;
        CHECK(kvix_subfront_note_said(&n));
    }
    n.kind = KVIX_ENGINESUB_BAD_BATCH;
    n.repeat = 20;
    CHECK(kvix_subfront_note_said(&n));
    n.repeat = 21;
    CHECK(!kvix_subfront_note_said(&n));
}
