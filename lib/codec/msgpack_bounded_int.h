/* libkvix private: msgpack parsing with a budget, shared by the engine wire
 * decoder (lib/codec/wire_decode.c) and the msgpack framing of kvix records
 * (lib/codec/stream_msgpack.c).
 *
 * msgpack_unpack() allocates a container's declared element count before
 * reading one element, so 5 bytes declaring an array32 ask for 96 GiB. This
 * parser is msgpack-c's own unpacking template with callbacks that charge
 * every declared element against the input's length (an element takes at
 * least one byte), so input never makes it allocate more than a fixed
 * multiple of its own size. */
#ifndef KVIX_MSGPACK_BOUNDED_INT_H
#define KVIX_MSGPACK_BOUNDED_INT_H

#include <msgpack.h>
#include <stddef.h>

/* The template's stack: no nesting deeper than this can be parsed at all. */
#define KVIX_MPB_STACK 32

typedef enum kvix_mpb_result {
    KVIX_MPB_OK = 0,
    KVIX_MPB_TRUNCATED, /* the input ends inside the object */
    KVIX_MPB_MALFORMED, /* not msgpack (a reserved byte) */
    KVIX_MPB_BUDGET,    /* a container declares more elements than the input holds */
    KVIX_MPB_DEPTH,     /* nested deeper than asked */
    KVIX_MPB_NOMEM,     /* the zone could not grow */
} kvix_mpb_result;

/* Parse the msgpack object at the start of buf[0..len) into *root. Containers
 * are allocated in z (owned by the caller); strings, bins and exts point into
 * buf, which must outlive *root. depth_max (1..KVIX_MPB_STACK) is the deepest
 * nesting accepted, a top-level container being depth 1. *used gets the
 * object's size on KVIX_MPB_OK (bytes after it are the caller's business),
 * and the offset reached otherwise. */
kvix_mpb_result kvix__mpb_parse(const char *buf, size_t len, msgpack_zone *z, int depth_max,
                               msgpack_object *root, size_t *used);

#endif
