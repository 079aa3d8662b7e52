/* libkvix private: one record decoder for both framings of kvix records.
 *
 * NDJSON (jansson) and msgpack (msgpack-c) values are both seen through a
 * small "value" view, so the rules of contract sections 3 and 4 (required
 * fields, defaults, types, ceilings, error messages) live in one place
 * (lib/codec/stream_decode.c) and the two framings cannot drift apart. */
#ifndef KVIX_STREAM_INT_H
#define KVIX_STREAM_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/buf.h"
#include "kvix/error.h"
#include "kvix/event.h"

typedef enum sv_kind {
    SV_NIL = 0,
    SV_BOOL,
    SV_UINT,  /* u */
    SV_NEG,   /* i (< 0) */
    SV_REAL,  /* d */
    SV_STR,   /* s, len (not NUL-terminated) */
    SV_ARRAY, /* n items */
    SV_MAP,   /* n pairs */
    SV_OTHER, /* bin, ext: never valid in a record */
} sv_kind;

struct sv_ops;

/* A borrowed view of one decoded value; p is the framing's own node. */
typedef struct sv {
    int kind;
    uint64_t u;
    int64_t i;
    double d;
    const char *s;
    size_t len;
    size_t n;
    const void *p;
    const struct sv_ops *ops;
} sv;

typedef struct sv_ops {
    /* Item i (< n) of an array. */
    void (*item)(const sv *arr, size_t i, sv *out);
    /* Walk a map's pairs: pass it = NULL for the first, then the returned
     * cursor; NULL when done. *klen = SIZE_MAX for a key that is not a string. */
    const void *(*next)(const sv *map, const void *it, const char **key, size_t *klen, sv *val);
    /* The value as compact JSON text (a query's id), NUL-terminated in out. */
    int (*json_text)(const sv *v, char *out, size_t cap, kvix_err *err);
} sv_ops;

/* Decode one record (a map, or an array of token ids = bare token query)
 * into ev, which is reset first. */
int kvix__stream_decode(const sv *root, kvix_event *ev, kvix_err *err);

/* msgpack records in a byte stream (lib/codec/stream_msgpack.c). */
typedef struct kvix_mp_framer kvix_mp_framer;
int kvix__mp_framer_new(kvix_mp_framer **out); /* KVIX_ENOMEM */
void kvix__mp_framer_free(kvix_mp_framer *f);  /* NULL is fine */
/* Find where the record starting at rec ends, allocating nothing. rec[0..len)
 * are the bytes available; *off is where the previous call stopped (0 for a
 * new record) and is advanced. The bytes before *off may move between calls
 * (rec is passed again) but must not change. 1: the record is rec[0..*off).
 * 0: more bytes needed. -1: malformed. -2: nested deeper than 32. After 1
 * or an error the next call starts a new record (pass *off = 0). */
int kvix__mp_framer_scan(kvix_mp_framer *f, const char *rec, size_t len, size_t *off);
/* Decode the whole record rec[0..len) found by the framer into ev. */
int kvix__mp_decode_record(kvix_mp_framer *f, const char *rec, size_t len, kvix_event *ev,
                          kvix_err *err);

/* Shared by the encoders: how many tokens each block's array of a stored
 * event's "tokens" holds (bs, or bs + 1 with eagle), 0 when the event has
 * none to write (lib/stream_json.c). */
size_t kvix__stream_token_span(const kvix_event *ev);

/* Shared by the encoders: text of a double that reads back to the same value. */
void kvix__stream_fmt_double(double d, char out[32]);

#endif
