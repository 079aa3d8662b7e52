/* kvix_enginesub's threading contract: one poll thread steps while other
 * threads add, remove, replace, list and read counters (as kvindex's HTTP
 * handlers will), and wake it. Run under ThreadSanitizer too. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "kvix/enginesub.h"

/* libzmq is not instrumented: its threads (the I/O thread, the reaper)
 * synchronize through lock-free pipes ThreadSanitizer cannot see, so a report
 * with a libzmq frame says nothing about kvix; nor does one in libstdc++,
 * which only libzmq (C++) brings into this C program: its I/O thread's
 * string streams were reported with no libzmq frame left on the stack. Races
 * between kvix's own threads (the registry, the counters, the callbacks) are
 * still reported. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
    return "race:libzmq.so\nrace:libstdc++.so\n";
}

static atomic_int stop;
static atomic_ulong clears;

static void on_event(void *ctx, const kvix_event *ev)
{
    (void)ctx;
    if (ev->type == KVIX_EV_CLEARED)
        atomic_fetch_add(&clears, 1);
}

static void *poller(void *arg)
{
    kvix_enginesub *s = arg;
    while (!atomic_load(&stop))
        if (kvix_enginesub_step(s, -1, NULL) != KVIX_OK)
            break;
    kvix_enginesub_step(s, 0, NULL); /* the last changes */
    return NULL;
}

static int count(void *ctx, const kvix_enginesub_status *st)
{
    (void)st;
    ++*(int *)ctx;
    return 0;
}

static void *editor(void *arg)
{
    kvix_enginesub *s = ((void **)arg)[0];
    int id = *(int *)((void **)arg)[1];
    for (int i = 0; i < 200; i++) {
        kvix_enginesub_spec sp;
        kvix_enginesub_spec_init(&sp);
        sp.worker = (uint64_t)(id * 1000 + i);
        /* every third by a host name: its resolver thread answers meanwhile */
        if (i % 3 == 0)
            snprintf(sp.endpoint, sizeof sp.endpoint, "tcp://localhost:%d", 20000 + id * 1000 + i);
        else
            snprintf(sp.endpoint, sizeof sp.endpoint, "ipc:///tmp/kvix-mt-%d-%d", id, i);
        CHECK(kvix_enginesub_add(s, &sp, 0, NULL) == KVIX_OK);
        if (i % 2)
            CHECK(kvix_enginesub_remove(s, sp.endpoint, NULL) == KVIX_OK);
        int n = 0;
        kvix_enginesub_list(s, count, &n);
        kvix_enginesub_counts c;
        kvix_enginesub_counts_get(s, &c);
        CHECK(c.subscriptions <= 400);
    }
    return NULL;
}

TEST(add_remove_list_from_threads_while_polling)
{
    kvix_enginesub_config cfg;
    kvix_enginesub_config_init(&cfg);
    kvix_enginesub_ops ops = {on_event, NULL};
    kvix_enginesub *s;
    CHECK(kvix_enginesub_new(&s, &cfg, &ops, NULL, NULL) == KVIX_OK);
    pthread_t p, e[2];
    int ids[2] = {1, 2};
    void *args[2][2] = {{s, &ids[0]}, {s, &ids[1]}};
    CHECK(pthread_create(&p, NULL, poller, s) == 0);
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&e[i], NULL, editor, args[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(e[i], NULL);
    /* group 1 replaced from this thread while the poller runs */
    kvix_enginesub_spec v[2];
    for (int i = 0; i < 2; i++) {
        kvix_enginesub_spec_init(&v[i]);
        v[i].worker = 5000 + (uint64_t)i;
        snprintf(v[i].endpoint, sizeof v[i].endpoint, "ipc:///tmp/kvix-mt-file-%d", i);
    }
    size_t added, removed;
    CHECK(kvix_enginesub_replace(s, 1, v, 2, &added, &removed, NULL) == KVIX_OK);
    CHECK_U64(added, 2);
    CHECK_U64(kvix_enginesub_remove_worker(s, 5000, NULL, NULL, UINT32_MAX), 1);
    atomic_store(&stop, 1);
    kvix_enginesub_wake(s);
    pthread_join(p, NULL);
    kvix_enginesub_counts c;
    kvix_enginesub_counts_get(s, &c);
    CHECK_U64(c.subscriptions, 201); /* 2 x 100 kept, and worker 5001 */
    int n = 0;
    kvix_enginesub_list(s, count, &n);
    CHECK_U64(n, 201);
    /* Removed before or after being opened: each opened one was cleared once. */
    CHECK(atomic_load(&clears) <= 201);
    kvix_enginesub_free(s);
}
