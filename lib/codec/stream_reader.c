/* Reading a stream of kvix records from a file descriptor: NDJSON split into
 * lines (with a ceiling on line length), or msgpack records framed by a
 * resumable, allocation-free pass of msgpack-c's template (with a ceiling on
 * record size; see lib/codec/stream_msgpack.c).
 *
 * NDJSON resynchronises at every newline, so a bad or over-long line costs
 * only itself. msgpack has no resync point: after a malformed or over-size
 * record the rest of the stream cannot be framed, so that record is
 * rejected and the reader then reports end of input. */
#include "kvix/stream.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stream_int.h"

#define READ_CHUNK (256u << 10)

struct kvix_reader {
    int fd;
    char *name;
    kvix_format fmt;   /* AUTO until the first bytes decide */
    int report_eintr;
    int blank_queries; /* a blank line is an empty query */
    int wake_fd;       /* -1, or a self-pipe polled with the input */
    int eof;           /* read(2) returned 0 */
    int dead;          /* msgpack framing lost: only KVIX_EOF from now on */
    int skipping;      /* NDJSON: discarding an over-long line */
    int stopped;       /* kvix_reader_stop: no more read(2), drain the buffer */
    uint64_t pos;      /* position of the record last returned */
    uint64_t line;     /* NDJSON lines consumed */
    uint64_t total;    /* bytes read from fd */
    char *buf;         /* NDJSON: [start, end) unconsumed, newline search resumes at scan */
    size_t cap, start, end, scan;
    kvix_mp_framer *mp; /* msgpack: framing state of the record at start */
    size_t mp_off;      /* how far that record has been scanned */
};

int kvix_reader_new(kvix_reader **out, int fd, const char *name, kvix_format fmt,
                    kvix_err *err)
{
    *out = NULL;
    kvix_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->name = strdup(name ? name : "<input>"))) {
        free(r);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a reader");
    }
    r->fd = fd;
    r->fmt = fmt;
    r->wake_fd = -1;
    *out = r;
    return KVIX_OK;
}

void kvix_reader_free(kvix_reader *r)
{
    if (!r)
        return;
    kvix__mp_framer_free(r->mp);
    free(r->buf);
    free(r->name);
    free(r);
}

void kvix_reader_set_eintr(kvix_reader *r, int report)
{
    r->report_eintr = report;
}

void kvix_reader_set_blank_queries(kvix_reader *r, int on)
{
    r->blank_queries = on;
}

void kvix_reader_set_wakeup_fd(kvix_reader *r, int fd)
{
    r->wake_fd = fd;
}

void kvix_reader_stop(kvix_reader *r)
{
    r->stopped = 1;
}

size_t kvix_reader_pending(const kvix_reader *r)
{
    return r->end - r->start;
}

uint64_t kvix_reader_pos(const kvix_reader *r) { return r->pos; }
const char *kvix_reader_name(const kvix_reader *r) { return r->name; }
kvix_format kvix_reader_format(const kvix_reader *r) { return r->fmt; }

uint64_t kvix_reader_offset(const kvix_reader *r)
{
    return r->total - (r->end - r->start);
}

/* read(2) into dst; *got = 0 at end of input. */
static int read_some(kvix_reader *r, char *dst, size_t room, size_t *got, kvix_err *err)
{
    for (;;) {
        if (r->wake_fd >= 0) {
            struct pollfd p[2] = {{.fd = r->fd, .events = POLLIN}, {.fd = r->wake_fd, .events = POLLIN}};
            if (poll(p, 2, -1) < 0) {
                if (errno == EINTR)
                    continue; /* the handler has written to the wake-up pipe */
                return kvix_err_set(err, KVIX_EIO, "error polling %s: %s", r->name, strerror(errno));
            }
            if (p[1].revents)
                return kvix_err_set(err, KVIX_ESYS, "interrupted");
        }
        ssize_t n = read(r->fd, dst, room);
        if (n >= 0) {
            *got = (size_t)n;
            r->total += (size_t)n;
            if (n == 0)
                r->eof = 1;
            return KVIX_OK;
        }
        if (errno == EINTR) {
            if (r->report_eintr)
                return kvix_err_set(err, KVIX_ESYS, "interrupted");
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            /* A non-blocking descriptor inherited from the caller: wait. */
            struct pollfd p = {.fd = r->fd, .events = POLLIN};
            if (poll(&p, 1, -1) < 0 && errno == EINTR && r->report_eintr)
                return kvix_err_set(err, KVIX_ESYS, "interrupted");
            continue;
        }
        return kvix_err_set(err, KVIX_EIO, "error reading %s: %s", r->name, strerror(errno));
    }
}

/* ---- NDJSON ---- */

static int ensure_room(kvix_reader *r, kvix_err *err)
{
    if (r->start > 0) { /* slide the partial line to the front */
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->scan -= r->start;
        r->start = 0;
    }
    if (r->cap - r->end >= READ_CHUNK / 4 && r->cap)
        return KVIX_OK;
    size_t c = r->cap ? r->cap * 2 : READ_CHUNK;
    char *p = realloc(r->buf, c);
    if (!p)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a %zu-byte line buffer", c);
    r->buf = p;
    r->cap = c;
    return KVIX_OK;
}

/* Read what arrives next into the buffer's free end, making room first. */
static int fill_more(kvix_reader *r, kvix_err *err)
{
    int rc = ensure_room(r, err);
    size_t got = 0;
    if (!rc)
        rc = read_some(r, r->buf + r->end, r->cap - r->end, &got, err);
    if (!rc)
        r->end += got;
    return rc;
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

/* One complete line [ls, le) was cut: decode it, or say why not. *done = 0
 * for a blank line (nothing to return). */
static int take_line(kvix_reader *r, size_t ls, size_t le, int *done, kvix_event *ev,
                     kvix_err *err)
{
    r->line++;
    *done = 1;
    if (r->skipping || le - ls > KVIX_LINE_MAX) {
        r->skipping = 0;
        r->pos = r->line;
        kvix_event_reset(ev);
        return kvix_err_set(err, KVIX_ELIMIT, "line longer than %u bytes", KVIX_LINE_MAX);
    }
    if (le > ls && r->buf[le - 1] == '\r')
        le--;
    const char *s = r->buf + ls;
    if (le == ls || ((*s == ' ' || *s == '\t') && is_blank(s, le - ls))) {
        if (r->blank_queries) {
            r->pos = r->line;
            kvix_event_reset(ev);
            ev->type = KVIX_EV_QUERY;
            ev->has_tokens = 1;
            return KVIX_OK;
        }
        *done = 0;
        return KVIX_OK;
    }
    r->pos = r->line;
    return kvix_event_from_json(s, le - ls, ev, err);
}

static int next_ndjson(kvix_reader *r, kvix_event *ev, kvix_err *err)
{
    for (;;) {
        char *nl = r->end > r->scan ? memchr(r->buf + r->scan, '\n', r->end - r->scan) : NULL;
        if (nl) {
            size_t ls = r->start, le = (size_t)(nl - r->buf);
            r->start = r->scan = le + 1;
            int done, rc = take_line(r, ls, le, &done, ev, err);
            if (done)
                return rc;
            continue;
        }
        r->scan = r->end;
        if (r->stopped && !r->eof)
            return KVIX_EOF; /* a partial line stays pending: not a record yet */
        if (r->eof) {
            if (r->start < r->end || r->skipping) { /* a last line without its newline */
                size_t ls = r->start, le = r->end;
                r->start = r->scan = r->end;
                int done, rc = take_line(r, ls, le, &done, ev, err);
                if (done)
                    return rc;
            }
            return KVIX_EOF;
        }
        if (r->end - r->start > KVIX_LINE_MAX) {
            r->skipping = 1; /* keep reading to the newline, holding nothing */
            r->start = r->scan = r->end = 0;
        }
        int rc = fill_more(r, err);
        if (rc)
            return rc;
    }
}

/* ---- msgpack ---- */

static int is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int start_msgpack(kvix_reader *r, kvix_err *err)
{
    if (kvix__mp_framer_new(&r->mp))
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a msgpack reader");
    r->mp_off = 0;
    return KVIX_OK;
}

static int mp_fail(kvix_reader *r, int code, kvix_event *ev, kvix_err *err, const char *msg)
{
    r->dead = 1;
    r->pos++;
    r->start = r->end; /* nothing after this can be framed */
    kvix_event_reset(ev);
    return kvix_err_set_reason(err, code,
                               code == KVIX_EINVAL ? KVIX_REASON_MSGPACK
                                                   : kvix_reason_of_status(code),
                               "%s%s", msg,
                               r->eof ? "" : " (the rest of the input cannot be framed)");
}

static int next_msgpack(kvix_reader *r, kvix_event *ev, kvix_err *err)
{
    for (;;) {
        if (r->dead)
            return KVIX_EOF;
        /* White space before the first record (it told the framings apart)
         * is not msgpack's: 0x20 and 0x0a would decode as integer records. */
        while (r->pos == 0 && r->mp_off == 0 && r->start < r->end &&
               is_space((unsigned char)r->buf[r->start]))
            r->start++;
        size_t have = r->end - r->start;
        if (have) {
            const char *rec = r->buf + r->start;
            int s = kvix__mp_framer_scan(r->mp, rec, have, &r->mp_off);
            if (s == 1) {
                size_t len = r->mp_off;
                r->mp_off = 0;
                r->start += len;
                r->pos++;
                if (len > KVIX_LINE_MAX) {
                    kvix_event_reset(ev);
                    return kvix_err_set(err, KVIX_ELIMIT, "msgpack record longer than %u bytes",
                                        KVIX_LINE_MAX);
                }
                return kvix__mp_decode_record(r->mp, rec, len, ev, err);
            }
            if (s == -1)
                return mp_fail(r, KVIX_EINVAL, ev, err, "malformed msgpack record");
            if (s == -2)
                return mp_fail(r, KVIX_ELIMIT, ev, err, "msgpack record nested deeper than 32 levels");
            if (have > KVIX_LINE_MAX) { /* all of it belongs to the unfinished record */
                char m[96];
                snprintf(m, sizeof m, "msgpack record longer than %u bytes", KVIX_LINE_MAX);
                return mp_fail(r, KVIX_ELIMIT, ev, err, m);
            }
        }
        if (r->stopped && !r->eof)
            return KVIX_EOF; /* a partial record stays pending */
        if (r->eof) {
            if (have)
                return mp_fail(r, KVIX_EINVAL, ev, err, "truncated msgpack record at end of input");
            return KVIX_EOF;
        }
        int rc = fill_more(r, err);
        if (rc)
            return rc;
    }
}

/* ---- format detection ---- */

static int is_msgpack_map(unsigned char c)
{
    return (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf;
}

/* A snapshot given where events are read (kvindex <index.kvix) would be
 * rejected line by line, hundreds of times: it is said once, and the
 * input is not read further. */
#define SNAP_MAGIC "KVIXSNAP"

static int detect(kvix_reader *r, kvix_err *err)
{
    for (;;) {
        for (size_t i = r->start; i < r->end; i++) {
            unsigned char c = (unsigned char)r->buf[i];
            if (c == '\n' && r->blank_queries) {
                r->fmt = KVIX_FMT_NDJSON; /* a blank line, answered at once */
                return KVIX_OK;
            }
            if (is_space(c))
                continue;
            if (c == 'K' && i == r->start && r->end - i < 8 && !r->eof && !r->stopped)
                break; /* maybe a snapshot's magic: read on */
            if (c == 'K' && i == r->start && r->end - i >= 8 && memcmp(r->buf + i, SNAP_MAGIC, 8) == 0) {
                r->fmt = KVIX_FMT_NDJSON;
                r->dead = 1;
                r->pos = 1;
                r->start = r->end;
                return kvix_err_set(err, KVIX_EINVAL,
                                    "this is a kvix snapshot, not a stream of events (load it "
                                    "with kvindex -s, read it with kvdump)");
            }
            r->fmt = is_msgpack_map(c) ? KVIX_FMT_MSGPACK : KVIX_FMT_NDJSON;
            return r->fmt == KVIX_FMT_MSGPACK ? start_msgpack(r, err) : KVIX_OK;
        }
        if (r->eof || r->stopped || r->end - r->start > KVIX_LINE_MAX) {
            r->fmt = KVIX_FMT_NDJSON; /* nothing but blanks: NDJSON reads them as such */
            return KVIX_OK;
        }
        int rc = fill_more(r, err);
        if (rc)
            return rc;
    }
}

int kvix_reader_next(kvix_reader *r, kvix_event *ev, kvix_err *err)
{
    int rc;
    if (r->dead)
        return KVIX_EOF;
    if (r->fmt == KVIX_FMT_AUTO && (rc = detect(r, err))) {
        kvix_event_reset(ev);
        return rc;
    }
    if (r->fmt == KVIX_FMT_MSGPACK && !r->mp && (rc = start_msgpack(r, err)))
        return rc;
    return r->fmt == KVIX_FMT_MSGPACK ? next_msgpack(r, ev, err) : next_ndjson(r, ev, err);
}

const char *kvix_format_name(kvix_format f)
{
    switch (f) {
    case KVIX_FMT_AUTO: return "auto";
    case KVIX_FMT_NDJSON: return "ndjson";
    case KVIX_FMT_MSGPACK: return "msgpack";
    }
    return "?";
}

int kvix_format_parse(const char *s, kvix_format *out)
{
    static const kvix_format all[] = {KVIX_FMT_AUTO, KVIX_FMT_NDJSON, KVIX_FMT_MSGPACK};
    for (size_t i = 0; i < 3; i++) {
        if (strcmp(s, kvix_format_name(all[i])) == 0) {
            *out = all[i];
            return KVIX_OK;
        }
    }
    return KVIX_EINVAL; /* no undocumented aliases ("json" is not a format name) */
}
