/* A per-thread arena for jansson's values (lib/codec/json_arena_int.h). With a
 * million small blocks interleaved with the index's own allocations, glibc
 * spent more time in malloc/free (and consolidating the fragments) than
 * jansson spent parsing the event stream; a /query_by_hash made ~40 such
 * pairs a request. */
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "json_arena_int.h"

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t size, used;
    bool mapped; /* mmap'ed: given back to the system when dropped */
    max_align_t data[];
} arena_chunk;

#define ARENA_CHUNK (64u << 10)
#define ARENA_CHUNK_MAX (4u << 20) /* chunks double up to this */
/* Chunks this large are mapped, not malloc'ed: freed, a malloc'ed chunk of
 * a big document stayed in the heap (an 8 MiB body of [[],[],...] left
 * 342 MB behind it). */
#define ARENA_MAP_MIN (256u << 10)

static __thread arena_chunk *arena;  /* chunks of the open window, newest first */
static __thread unsigned arena_depth; /* windows open on this thread */
static __thread arena_chunk *arena_kept; /* the chunk the thread-exit destructor frees */
static __thread size_t arena_grow;    /* the next chunk's size */
static __thread kvix_json_budget arena_budget; /* the outermost window's; take NULL: none */
static __thread size_t arena_taken;   /* from arena_budget */
static __thread bool arena_refused;   /* arena_budget refused a chunk */
static int arena_installed;
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static pthread_key_t arena_key; /* frees a thread's kept chunk when it exits (server threads) */

static void arena_thread_exit(void *p)
{
    free(p);
}

static arena_chunk *chunk_new(size_t sz)
{
    size_t bytes = sizeof(arena_chunk) + sz;
    if (arena_budget.take) {
        if (arena_refused || !arena_budget.take(arena_budget.ctx, bytes)) {
            arena_refused = true;
            return NULL;
        }
        arena_taken += bytes;
    }
    arena_chunk *c;
    if (bytes >= ARENA_MAP_MIN) {
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        c = m == MAP_FAILED ? NULL : m;
    } else {
        c = malloc(bytes);
    }
    if (!c)
        return NULL;
    c->mapped = bytes >= ARENA_MAP_MIN;
    c->size = sz;
    c->used = 0;
    return c;
}

static void chunk_free(arena_chunk *c)
{
    if (c->mapped)
        munmap(c, sizeof *c + c->size);
    else
        free(c);
}

static void *arena_malloc(size_t n)
{
    if (!arena_depth)
        return malloc(n);
    n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    arena_chunk *c = arena;
    if (!c || c->size - c->used < n) {
        if (arena_grow < ARENA_CHUNK)
            arena_grow = ARENA_CHUNK;
        size_t sz = n > arena_grow / 4 ? n : arena_grow;
        if (sz == arena_grow && arena_grow < ARENA_CHUNK_MAX)
            arena_grow *= 2; /* a big document takes few chunks */
        c = chunk_new(sz);
        if (!c)
            return NULL;
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

int kvix__json_arena_begin(void)
{
    pthread_once(&arena_once, arena_install);
    if (!arena_installed)
        return 0;
    arena_depth++;
    return 1;
}

int kvix__json_arena_begin_budget(const kvix_json_budget *b)
{
    if (!kvix__json_arena_begin())
        return 0;
    if (arena_depth == 1 && b) {
        arena_budget = *b;
        arena_taken = 0;
        arena_refused = false;
    }
    return 1;
}

int kvix__json_arena_refused(void)
{
    return arena_refused;
}

/* Drop the window's values, keeping one chunk for the next window. */
void kvix__json_arena_end(void)
{
    if (!arena_installed || !arena_depth || --arena_depth)
        return;
    while (arena && (arena->next || arena->size != ARENA_CHUNK || arena->mapped)) {
        arena_chunk *c = arena;
        arena = c->next;
        chunk_free(c);
    }
    if (arena)
        arena->used = 0;
    arena_grow = ARENA_CHUNK;
    if (arena_budget.take) {
        /* the chunk kept is the thread's, no longer the request's */
        arena_budget.give(arena_budget.ctx, arena_taken);
        arena_budget = (kvix_json_budget){0};
        arena_taken = 0;
    }
    arena_refused = false;
    if (arena != arena_kept) {
        arena_kept = arena;
        pthread_setspecific(arena_key, arena);
    }
}
