/* libFuzzer target for the engines' wire decoder (kvix_wire_decode: vLLM
 * and SGLang batches, msgpack; tests/fuzz/run.sh).
 *
 * Whatever the payload: no crash, no leak, no sanitizer report; a payload is
 * refused whole or delivered whole (checked before any event); and every
 * event the decoder delivers is one kvix can write as NDJSON and read back
 * to the same line (the engine's input must never yield a record kvix's own
 * reader refuses). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvix/stream.h"
#include "kvix/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct seen {
    size_t events;
    kvix_buf a, b;
    kvix_event back;
} seen;

static int on_event(void *ctx, const kvix_event *ev)
{
    seen *s = ctx;
    kvix_err err;
    s->events++;
    s->a.len = s->b.len = 0;
    if (kvix_event_to_json(ev, &s->a, &err) != KVIX_OK)
        abort(); /* the decoder delivered something kvix cannot write */
    if (kvix_event_from_json(s->a.data, s->a.len - 1, &s->back, &err) != KVIX_OK)
        abort(); /* ... or cannot read back */
    if (kvix_event_to_json(&s->back, &s->b, &err) != KVIX_OK || strcmp(s->a.data, s->b.data))
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    seen s;
    memset(&s, 0, sizeof s);
    kvix_buf_init(&s.a);
    kvix_buf_init(&s.b);
    kvix_event_init(&s.back);
    /* the registered block size decides which stored events are partial */
    static const uint32_t sizes[] = {0, 16};
    for (int i = 0; i < 2; i++) {
        kvix_wire_source src = {.worker = 7, .block_size = sizes[i], .keep_tokens = i == 0};
        kvix_wire_counts counts = {0};
        kvix_err err;
        s.events = 0;
        int rc = kvix_wire_decode(data, size, 42, &src, on_event, &s, &counts, &err);
        if (rc != KVIX_OK && s.events != 0)
            abort(); /* a refused payload delivered events */
    }
    kvix_buf_release(&s.a);
    kvix_buf_release(&s.b);
    kvix_event_release(&s.back);
    return 0;
}
