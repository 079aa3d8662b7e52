/* libkvix private: the engine wire's field values (lib/wire_fields.c), for
 * the batch decoder (lib/wire_decode.c). Each reader takes a msgpack object
 * of a parsed payload and either gives its value or says why it is not one;
 * none allocates. */
#ifndef KVIX_WIRE_INT_H
#define KVIX_WIRE_INT_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline bool kvix_wf_nil(const msgpack_object *o)
{
    return !o || o->type == MSGPACK_OBJECT_NIL;
}

static inline bool kvix_wf_str_is(const msgpack_object *o, const char *s, size_t n)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

/* An engine block hash: uint, negative int (SGLang's signed int64, the same
 * bits), or a bin of 1..32 bytes whose last 8 are the u64, big-endian. 0 or
 * -1. */
int kvix__wf_hash(const msgpack_object *o, uint64_t *out);

/* Whether hashes h[0..n) repeat one another or equal parent (when
 * has_parent): a malformed store. scratch has room for n values. */
bool kvix__wf_repeats(const uint64_t *h, size_t n, bool has_parent, uint64_t parent,
                     uint64_t *scratch);

/* token_ids: plain ids, or EAGLE's pairs [t, t_next] (a pair array per
 * position). kvix__wf_tokens_shape tells which (by the first element: *eagle),
 * and checks that there are at least need positions of that shape; 0 or -1
 * with *bad the first bad position (or need when too few). */
int kvix__wf_tokens_shape(const msgpack_object *t, size_t need, bool *eagle, size_t *bad);
/* The ids of positions 0..n) into out (plain: each id; EAGLE: each pair's
 * first, then the last pair's second: n + 1 ids). Checked by
 * kvix__wf_tokens_shape first. */
void kvix__wf_tokens(const msgpack_object *t, size_t n, bool eagle, uint32_t *out);

/* The multimodal hashes of one block's extra_keys entry (a list, or nil),
 * as NVIDIA Dynamo reads them: a pair [identifier, offset] is a multimodal
 * object (vLLM 0.19+); a bare string only when it is 64 hex digits and not
 * the LoRA name lora[0..nlora) (older vLLM); an identifier of 64 hex digits
 * counts by its first 16 as a u64, any other by XXH3-64 of its bytes. Other
 * entries (a cache salt, prompt-embedding bytes) are not hashed. Writes at
 * most max into mm (NULL: only count) and returns how many there are. */
size_t kvix__wf_mm_keys(const msgpack_object *keys, const char *lora, size_t nlora,
                       uint64_t *mm, size_t max);

/* The text of a string object s, ignoring ASCII case, against a word in
 * upper case. */
bool kvix__wf_word_is(const msgpack_object *s, const char *upper);

#endif
