/* libkvix private: a per-thread arena for the values jansson builds while one
 * record or one request body is decoded (lib/codec/json_arena.c).
 *
 * jansson mallocs every value (a node per number) and frees them all when
 * the document is dropped. Inside a window on a thread, its allocations come
 * from that thread's arena and a free of arena memory is a no-op; the window's
 * end drops them all at once. Every other pointer still goes to free, and
 * other threads (or this one outside a window) get plain malloc and free, so
 * other users of jansson in the process see no difference. The hooks are
 * installed (jansson's allocator is process-wide) only if nobody installed
 * allocators before. */
#ifndef KVIX_JSON_ARENA_INT_H
#define KVIX_JSON_ARENA_INT_H

#include <stddef.h>

/* Open a window on this thread; windows nest. Returns 1 when jansson's
 * allocations now come from the arena (then no value made inside may be used
 * after the matching kvix__json_arena_end, and json_decref of the document is
 * optional: the end frees it), 0 when the hooks are not installed. */
int kvix__json_arena_begin(void);
/* Where a window's memory comes from: take(ctx, n) before n more bytes
 * (false: refused, the allocation fails and jansson's parse with it), and
 * give(ctx, total) of everything taken when the window ends. */
typedef struct kvix_json_budget {
    int (*take)(void *ctx, size_t n);
    void (*give)(void *ctx, size_t n);
    void *ctx;
} kvix_json_budget;
/* kvix__json_arena_begin, and when this is the outermost window, its chunks
 * are taken from *b (copied; NULL: no budget). */
int kvix__json_arena_begin_budget(const kvix_json_budget *b);
/* Whether the budget of the open window refused memory (its parse failed
 * for that, not for what the document says). */
int kvix__json_arena_refused(void);
/* Close the innermost window; the outermost drops everything made inside
 * (one chunk is kept for the next window, freed when the thread exits). */
void kvix__json_arena_end(void);

#endif
