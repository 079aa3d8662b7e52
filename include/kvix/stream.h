/* kvix: event streams. NDJSON records (contract sections 3 and 4) and a
 * binary framing of the same records (a stream of msgpack maps with the same
 * keys), read and written by every tool. Readers detect the format from the
 * first byte: '{', '[' or whitespace is NDJSON, a msgpack map header is the
 * binary framing. */
#ifndef KVIX_STREAM_H
#define KVIX_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/buf.h"
#include "kvix/error.h"
#include "kvix/event.h"
#include "kvix/answer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVIX_LINE_MAX (16u << 20)   /* longest NDJSON line / msgpack record, bytes */
#define KVIX_JSON_DEPTH_MAX 8       /* deepest JSON nesting accepted in a record */

typedef enum kvix_format {
    KVIX_FMT_AUTO = 0,
    KVIX_FMT_NDJSON,
    KVIX_FMT_MSGPACK,
} kvix_format;

/* Decode one NDJSON record (without its newline) into ev. Events and queries
 * both decode (ev->type tells: a line whose type is "query" or that has no
 * type is a query; a bare JSON array of integers is a token query on the
 * default partition). Errors: KVIX_EINVAL / KVIX_ERANGE / KVIX_ELIMIT with a
 * message such as `missing "worker"`. */
int kvix_event_from_json(const char *line, size_t len, kvix_event *ev, kvix_err *err);

/* Append ev as one NDJSON line (with '\n') / one msgpack record to out. */
int kvix_event_to_json(const kvix_event *ev, kvix_buf *out, kvix_err *err);
int kvix_event_to_msgpack(const kvix_event *ev, kvix_buf *out, kvix_err *err);

/* Decode one msgpack record from buf[0..len); *used gets its size. */
int kvix_event_from_msgpack(const char *buf, size_t len, size_t *used, kvix_event *ev,
                            kvix_err *err);

/* Append the answer line to a query (contract section 4) with '\n'; q is the
 * query (its id is echoed back when it has one). */
int kvix_answer_to_json(const kvix_answer *ans, const kvix_event *q, kvix_buf *out,
                        kvix_err *err);

/* "tokens", "lora", "salt", "multimodal", "block_size", "eagle": the name of
 * cause bit 1 << i (kvix/index.h); "?" past them. Static strings. */
const char *kvix_cause_name(unsigned i);
/* "match", "removed", "nobody", "differs", "cleared", "absent",
 * "unknown_worker" (kvix_why); "?" otherwise. */
const char *kvix_why_name(int why);

/* The same line with kvix's "explain" object (kvix_index_explain's x) before
 * its end (kvix-events(5)). */
int kvix_answer_explain_to_json(const kvix_answer *ans, const kvix_event *q,
                                const kvix_explain *x, kvix_buf *out, kvix_err *err);

/* Append the line that answers a rejected query or line (contract section
 * 4: every query line gets one answer line): {"id":ID,"error":"msg"} with
 * '\n', the id being id_json (compact JSON text, as kvix_event.id) when
 * not NULL or empty. msg is escaped as a JSON string (bytes past ASCII
 * become '?': a message may quote any bytes of a bad line). */
int kvix_error_to_json(const char *id_json, const char *msg, kvix_buf *out, kvix_err *err);

typedef struct kvix_reader kvix_reader;

/* Read records from fd (not closed by the reader; the caller owns it). name
 * is used in positions ("<stdin>", a path) and is copied. *out is owned by
 * the caller: kvix_reader_free. */
int kvix_reader_new(kvix_reader **out, int fd, const char *name, kvix_format fmt,
                    kvix_err *err);
void kvix_reader_free(kvix_reader *r);

/* Next record into ev. KVIX_OK: ev holds it. KVIX_EOF: end of input.
 * KVIX_EIO: reading failed (stop). Any other error: that record is rejected
 * (err says why) and the next call continues with the following record.
 * Blank NDJSON lines are skipped (but counted in line numbers); a line
 * longer than KVIX_LINE_MAX is rejected (KVIX_ELIMIT) and skipped to its
 * newline. msgpack cannot resynchronise: after a malformed, over-size or
 * truncated record (rejected with a message saying the rest cannot be
 * framed) the next call returns KVIX_EOF. */
int kvix_reader_next(kvix_reader *r, kvix_event *ev, kvix_err *err);

/* By default a read(2) interrupted by a signal is retried. With report != 0
 * kvix_reader_next returns KVIX_ESYS ("interrupted") instead, so a caller
 * whose signal handlers set flags (without SA_RESTART) can act on them;
 * calling kvix_reader_next again continues exactly where it stopped. */
void kvix_reader_set_eintr(kvix_reader *r, int report);

/* The self-pipe form of the same (no race with a signal that lands just
 * before read(2)): with fd >= 0 the reader polls fd together with its input
 * whenever it needs bytes, and returns KVIX_ESYS ("interrupted") as soon as
 * fd is readable, without reading it (the caller drains it). -1 turns it off. */
void kvix_reader_set_wakeup_fd(kvix_reader *r, int fd);

/* With on != 0 a blank NDJSON line is returned as an empty query (no
 * tokens) instead of being skipped, so that a reader of queries answers
 * every line it is given (kvindex -q as a coprocess never waits), as kvhash
 * answers an empty line. Set it before the first kvix_reader_next: a blank
 * line then also decides the format (NDJSON). */
void kvix_reader_set_blank_queries(kvix_reader *r, int on);

/* Stop reading from the descriptor (a tool told to stop by a signal): the
 * next calls return the complete records already read, then KVIX_EOF, so
 * nothing taken from a pipe is dropped. An incomplete record left over stays
 * unread; kvix_reader_pending says how many bytes were buffered and not yet
 * returned (after the drain: that record's bytes). */
void kvix_reader_stop(kvix_reader *r);
size_t kvix_reader_pending(const kvix_reader *r);

/* Position of the record last returned: its line number (NDJSON) or its
 * 1-based record number (msgpack). */
uint64_t kvix_reader_pos(const kvix_reader *r);
const char *kvix_reader_name(const kvix_reader *r);
kvix_format kvix_reader_format(const kvix_reader *r);
/* Bytes consumed so far (for progress). */
uint64_t kvix_reader_offset(const kvix_reader *r);

/* "ndjson", "msgpack"; parse returns KVIX_EINVAL if unknown ("auto" is ok). */
const char *kvix_format_name(kvix_format f);
int kvix_format_parse(const char *s, kvix_format *out);

#ifdef __cplusplus
}
#endif
#endif
