/* The per-thread arena behind jansson's allocator (lib/codec/json_arena_int.h):
 * windows drop their values at once, nest, pass every other pointer to
 * free, and leave other threads' jansson values alone. */
#include <jansson.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "json_arena_int.h"

TEST(window_values_are_dropped_at_its_end)
{
    CHECK(kvix__json_arena_begin() == 1); /* installed: nobody else set allocators */
    json_t *a = json_string("first window");
    kvix__json_arena_end();
    CHECK(kvix__json_arena_begin() == 1);
    json_t *b = json_string("next window");
    /* the arena's kept chunk is reused from its start: the values went with the window */
    CHECK(a == b);
    CHECK_STR(json_string_value(b), "next window");
    json_decref(b); /* optional inside a window, and harmless */
    kvix__json_arena_end();
}

TEST(windows_nest)
{
    CHECK(kvix__json_arena_begin() == 1);
    json_t *outer = json_pack("{s:s,s:[i,i]}", "name", "outer", "v", 1, 2);
    CHECK(kvix__json_arena_begin() == 1);
    json_t *inner = json_string("inner");
    kvix__json_arena_end();
    /* the inner end dropped nothing: new values do not land on the outer ones */
    json_t *more = json_string("more values after the inner window");
    CHECK(more != inner && more != outer);
    CHECK_STR(json_string_value(json_object_get(outer, "name")), "outer");
    CHECK_U64(json_integer_value(json_array_get(json_object_get(outer, "v"), 1)), 2);
    CHECK_STR(json_string_value(inner), "inner");
    kvix__json_arena_end();
}

/* A value made outside a window and freed inside is really freed (under
 * LeakSanitizer a no-op free is a reported leak; here, glibc's count). */
TEST(foreign_pointers_go_to_free)
{
    enum { N = 2000 };
    static json_t *v[N];
    struct mallinfo2 m0 = mallinfo2();
    for (int i = 0; i < N; i++)
        v[i] = json_string("a value made outside any window, freed inside one");
    struct mallinfo2 m1 = mallinfo2();
    CHECK(kvix__json_arena_begin() == 1);
    for (int i = 0; i < N; i++)
        json_decref(v[i]);
    kvix__json_arena_end();
    struct mallinfo2 m2 = mallinfo2();
    CHECK(m1.uordblks >= m0.uordblks);
    CHECK(m2.uordblks <= m0.uordblks + (m1.uordblks - m0.uordblks) / 10);
}

typedef struct other {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stage; /* 1: the other thread made its values; 2: this one ran its windows */
    int intact;
} other;

static void *other_thread(void *p)
{
    other *o = p;
    json_t *vals[64];
    char want[32];
    for (int i = 0; i < 64; i++) {
        snprintf(want, sizeof want, "other thread %d", i);
        vals[i] = json_string(want);
    }
    pthread_mutex_lock(&o->mu);
    o->stage = 1;
    pthread_cond_broadcast(&o->cv);
    while (o->stage != 2)
        pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
    int intact = 1;
    for (int i = 0; i < 64; i++) {
        snprintf(want, sizeof want, "other thread %d", i);
        intact &= strcmp(json_string_value(vals[i]), want) == 0;
        json_decref(vals[i]);
    }
    o->intact = intact;
    return NULL;
}

/* Another thread's values (made with malloc while this thread has windows
 * open) survive this thread's windows and are freed by that thread. */
TEST(other_threads_use_malloc)
{
    other o = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, &o) == 0);
    pthread_mutex_lock(&o.mu);
    while (o.stage != 1)
        pthread_cond_wait(&o.cv, &o.mu);
    pthread_mutex_unlock(&o.mu);
    for (int w = 0; w < 100; w++) {
        CHECK(kvix__json_arena_begin() == 1);
        for (int i = 0; i < 64; i++)
            json_decref(json_string("this thread's window overwrites its arena"));
        kvix__json_arena_end();
    }
    pthread_mutex_lock(&o.mu);
    o.stage = 2;
    pthread_cond_broadcast(&o.cv);
    pthread_mutex_unlock(&o.mu);
    pthread_join(t, NULL);
    CHECK(o.intact);
}
