/* libFuzzer target for the record codecs and the reader (tests/fuzz/run.sh).
 *
 * Whatever the bytes: no crash, no leak, no sanitizer report; and every
 * record that decodes re-encodes to a fixed point: JSON -> event -> JSON is
 * stable after one round, and the msgpack form of an event decodes to the
 * same JSON. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvix/stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_fixed_point(const kvix_event *ev)
{
    kvix_buf a, b, m;
    kvix_event e2;
    kvix_err err;
    kvix_buf_init(&a);
    kvix_buf_init(&b);
    kvix_buf_init(&m);
    kvix_event_init(&e2);
    if (kvix_event_to_json(ev, &a, &err) == KVIX_OK) {
        if (kvix_event_from_json(a.data, a.len - 1, &e2, &err) != KVIX_OK)
            abort(); /* kvix wrote something it cannot read */
        if (kvix_event_to_json(&e2, &b, &err) != KVIX_OK || strcmp(a.data, b.data) != 0)
            abort();
        size_t used;
        if (kvix_event_to_msgpack(&e2, &m, &err) != KVIX_OK ||
            kvix_event_from_msgpack(m.data, m.len, &used, &e2, &err) != KVIX_OK || used != m.len)
            abort();
        b.len = 0;
        if (kvix_event_to_json(&e2, &b, &err) != KVIX_OK || strcmp(a.data, b.data) != 0)
            abort();
    }
    kvix_buf_release(&a);
    kvix_buf_release(&b);
    kvix_buf_release(&m);
    kvix_event_release(&e2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvix_event ev;
    kvix_err err;
    kvix_event_init(&ev);
    if (kvix_event_from_json((const char *)data, size, &ev, &err) == KVIX_OK)
        check_fixed_point(&ev);
    size_t used;
    if (kvix_event_from_msgpack((const char *)data, size, &used, &ev, &err) == KVIX_OK)
        check_fixed_point(&ev);

    int fd = memfd_create("fuzz", 0);
    if (fd >= 0) {
        if (write(fd, data, size) == (ssize_t)size && lseek(fd, 0, SEEK_SET) == 0) {
            kvix_reader *r;
            if (kvix_reader_new(&r, fd, "fuzz", KVIX_FMT_AUTO, &err) == KVIX_OK) {
                int rc;
                while ((rc = kvix_reader_next(r, &ev, &err)) != KVIX_EOF && rc != KVIX_EIO)
                    if (rc == KVIX_OK)
                        check_fixed_point(&ev);
                kvix_reader_free(r);
            }
        }
        close(fd);
    }
    kvix_event_release(&ev);
    return 0;
}
