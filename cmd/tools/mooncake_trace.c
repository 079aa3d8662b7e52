/* Mooncake trace lines: parsing one, and reading them from a file
 * descriptor under a line-length ceiling. The simulator that plays them is
 * cmd/tools/mooncake.c. */
#include "mooncake.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void kvix_mooncake_req_init(kvix_mooncake_req *r)
{
    memset(r, 0, sizeof *r);
}

void kvix_mooncake_req_release(kvix_mooncake_req *r)
{
    free(r->ids);
    kvix_mooncake_req_init(r);
}

static int get_count(json_t *o, const char *key, uint64_t *out, kvix_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return kvix_err_set(err, KVIX_EINVAL, "missing \"%s\"", key);
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0)
            return kvix_err_set(err, KVIX_ERANGE, "negative \"%s\"", key);
        *out = (uint64_t)i;
        return KVIX_OK;
    }
    if (json_is_real(v)) { /* a timestamp written as 1.0e3 is still a count */
        double d = json_real_value(v);
        if (!(d >= 0 && d < 1.8e19))
            return kvix_err_set(err, KVIX_ERANGE, "\"%s\" out of range", key);
        *out = (uint64_t)d;
        return KVIX_OK;
    }
    return kvix_err_set(err, KVIX_EINVAL, "\"%s\" is not a number", key);
}

int kvix_mooncake_parse(const char *line, size_t len, kvix_mooncake_req *r, kvix_err *err)
{
    if (len > KVIX_MOONCAKE_LINE_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "line of %zu bytes (limit %u)", len,
                            KVIX_MOONCAKE_LINE_MAX);
    json_error_t je;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return kvix_err_set(err, KVIX_EINVAL, "bad json: %s", je.text);
    int rc = KVIX_OK;
    if (!json_is_object(o)) {
        rc = kvix_err_set(err, KVIX_EINVAL, "not a json object");
        goto out;
    }
    if ((rc = get_count(o, "timestamp", &r->timestamp_ms, err)) ||
        (rc = get_count(o, "input_length", &r->input_length, err)))
        goto out;
    r->output_length = 0;
    if (json_object_get(o, "output_length") &&
        (rc = get_count(o, "output_length", &r->output_length, err)))
        goto out;
    json_t *ids = json_object_get(o, "hash_ids");
    if (!ids || !json_is_array(ids)) {
        rc = kvix_err_set(err, KVIX_EINVAL, ids ? "\"hash_ids\" is not an array"
                                                : "missing \"hash_ids\"");
        goto out;
    }
    size_t n = json_array_size(ids);
    if (n > KVIX_MOONCAKE_IDS_MAX) {
        rc = kvix_err_set(err, KVIX_ELIMIT, "%zu hash ids (limit %u)", n, KVIX_MOONCAKE_IDS_MAX);
        goto out;
    }
    if (n > r->cap) {
        uint32_t *p = realloc(r->ids, n * sizeof *p);
        if (!p) {
            rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu hash ids", n);
            goto out;
        }
        r->ids = p;
        r->cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v)) {
            rc = kvix_err_set(err, KVIX_EINVAL, "hash id %zu is not an integer", i);
            goto out;
        }
        json_int_t x = json_integer_value(v);
        if (x < 0 || x > (json_int_t)UINT32_MAX) {
            rc = kvix_err_set(err, KVIX_ERANGE, "hash id %zu out of range: %" JSON_INTEGER_FORMAT,
                              i, x);
            goto out;
        }
        r->ids[i] = (uint32_t)x;
    }
    r->nids = n;
out:
    json_decref(o);
    if (rc)
        r->nids = 0;
    return rc;
}

struct kvix_mooncake_trace {
    int fd;
    char *buf;
    size_t len, off, cap; /* buf[off..len) is unread */
    int eof, skipping;
    uint64_t line;        /* lines consumed */
    uint64_t req_line;    /* line of the request last returned */
};

int kvix_mooncake_trace_new(kvix_mooncake_trace **out, int fd, kvix_err *err)
{
    kvix_mooncake_trace *t = calloc(1, sizeof *t);
    if (!t || !(t->buf = malloc(64u << 10))) {
        free(t);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    t->fd = fd;
    t->cap = 64u << 10;
    *out = t;
    return KVIX_OK;
}

void kvix_mooncake_trace_free(kvix_mooncake_trace *t)
{
    if (!t)
        return;
    free(t->buf);
    free(t);
}

uint64_t kvix_mooncake_trace_line(const kvix_mooncake_trace *t)
{
    return t->req_line;
}

/* Make room to read more: compact, then grow up to the line ceiling. */
static int fill(kvix_mooncake_trace *t, kvix_err *err)
{
    if (t->off) {
        memmove(t->buf, t->buf + t->off, t->len - t->off);
        t->len -= t->off;
        t->off = 0;
    }
    if (t->len == t->cap) {
        if (t->cap > KVIX_MOONCAKE_LINE_MAX) {
            /* Over the ceiling: drop what we have and skip to the next newline. */
            t->len = 0;
            t->skipping = 1;
        } else {
            char *p = realloc(t->buf, t->cap * 2);
            if (!p)
                return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a trace line");
            t->buf = p;
            t->cap *= 2;
        }
    }
    for (;;) {
        ssize_t n = read(t->fd, t->buf + t->len, t->cap - t->len);
        if (n > 0) {
            t->len += (size_t)n;
            return KVIX_OK;
        }
        if (n == 0) {
            t->eof = 1;
            return KVIX_OK;
        }
        if (errno != EINTR)
            return kvix_err_set(err, KVIX_EIO, "read error: %s", strerror(errno));
    }
}

int kvix_mooncake_trace_next(kvix_mooncake_trace *t, kvix_mooncake_req *r, kvix_err *err)
{
    for (;;) {
        char *start = t->buf + t->off;
        char *nl = memchr(start, '\n', t->len - t->off);
        if (!nl && !t->eof) {
            int rc = fill(t, err);
            if (rc)
                return rc;
            continue;
        }
        size_t n = nl ? (size_t)(nl - start) : t->len - t->off;
        if (!nl && n == 0 && !t->skipping)
            return KVIX_EOF;
        t->off += n + (nl ? 1 : 0);
        t->line++;
        t->req_line = t->line;
        if (t->skipping) {
            t->skipping = 0;
            return kvix_err_set(err, KVIX_ELIMIT, "line longer than %u bytes",
                                KVIX_MOONCAKE_LINE_MAX);
        }
        if (n && start[n - 1] == '\r')
            n--;
        size_t i = 0;
        while (i < n && (start[i] == ' ' || start[i] == '\t'))
            i++;
        if (i == n) {
            if (!nl && t->eof)
                return KVIX_EOF;
            continue;
        }
        return kvix_mooncake_parse(start, n, r, err);
    }
}
