/* A per-thread arena for jansson's values (lib/codec/json_arena_int.h). With a
 * million small blocks interleaved with the index's own allocations, glibc
 * spent more time in malloc/free (and consolidating the fragments) than
 * jansson spent parsing the event stream; a /query_by_hash made ~40 such
 * pairs a request. */
#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "json_arena_int.h"

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t size, used;
    max_align_t data[];
} arena_chunk;

#define ARENA_CHUNK (64u << 10)

static __thread arena_chunk *arena;  /* chunks of the open window, newest first */
static __thread unsigned arena_depth; /* windows open on this thread */
static __thread arena_chunk *arena_kept; /* the chunk the thread-exit destructor frees */
static int arena_installed;
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static pthread_key_t arena_key; /* frees a thread's kept chunk when it exits (server threads) */

static void arena_thread_exit(void *p)
{
    free(p);
}

static void *arena_malloc(size_t n)
{
    if (!arena_depth)
        return malloc(n);
    n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    arena_chunk *c = arena;
    if (!c || c->size - c->used < n) {
        size_t sz = n > ARENA_CHUNK / 4 ? n : ARENA_CHUNK;
        c = malloc(sizeof *c + sz);
        if (!c)
            return NULL;
        c->size = sz;
        c->used = 0;
        if (sz == n && arena) { /* a big one: keep filling the current chunk after it */
            c->next = arena->next;
            arena->next = c;
        } else {
            c->next = arena;
            arena = c;
        }
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

/* Arena memory is dropped at the window's end; anything else is freed. */
static void arena_free(void *p)
{
    for (const arena_chunk *c = arena; c; c = c->next)
        if ((uintptr_t)p - (uintptr_t)c->data < c->size)
            return;
    free(p);
}

static void arena_install(void)
{
    json_malloc_t m;
    json_free_t f;
    json_get_alloc_funcs(&m, &f);
    if (m == malloc && f == free && pthread_key_create(&arena_key, arena_thread_exit) == 0) {
        json_set_alloc_funcs(arena_malloc, arena_free);
        arena_installed = 1;
    }
}

int kvix_json_arena_begin(void)
{
    pthread_once(&arena_once, arena_install);
    if (!arena_installed)
        return 0;
    arena_depth++;
    return 1;
}

/* Drop the window's values, keeping one chunk for the next window. */
void kvix_json_arena_end(void)
{
    if (!arena_installed || !arena_depth || --arena_depth)
        return;
    while (arena && (arena->next || arena->size != ARENA_CHUNK)) {
        arena_chunk *c = arena;
        arena = c->next;
        free(c);
    }
    if (arena)
        arena->used = 0;
    if (arena != arena_kept) {
        arena_kept = arena;
        pthread_setspecific(arena_key, arena);
    }
}
