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

/* Open a window on this thread; windows nest. Returns 1 when jansson's
 * allocations now come from the arena (then no value made inside may be used
 * after the matching kvix_json_arena_end, and json_decref of the document is
 * optional: the end frees it), 0 when the hooks are not installed. */
int kvix_json_arena_begin(void);
/* Close the innermost window; the outermost drops everything made inside
 * (one chunk is kept for the next window, freed when the thread exits). */
void kvix_json_arena_end(void);

#endif
