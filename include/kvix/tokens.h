/* kvix: token lines, the input of kvhash(1): one token sequence per line,
 * as whitespace-separated integers (`1 2 3`), a JSON array (`[1,2,3]`) or a
 * JSON object with "tokens" (an array, or an array of per-block arrays,
 * flattened one level), an optional "lora" (adapter name: the seed of the
 * local hashes), "salt", "mm" (multimodal hashes per block, below) and
 * "id" (echoed). Token ids are 0..2^32-1.
 *
 * The line is untrusted: every byte is checked, a line longer than
 * KVIX_TOKENS_LINE_MAX is refused (KVIX_ELIMIT), and a bad line says which
 * token and why. */
#ifndef KVIX_TOKENS_H
#define KVIX_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/error.h"
#include "kvix/event.h"
#include "kvix/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest line, bytes. Every token takes at least two bytes ("1 ", "1,"), so
 * a line holds at most KVIX_TOKENS_LINE_MAX / 2 + 1 tokens. */
#define KVIX_TOKENS_LINE_MAX KVIX_LINE_MAX

/* A multimodal object hash of one block of a line (kvix_hash_local_mm). */
typedef struct kvix_tokens_mm {
    uint32_t block;
    uint64_t hash;
} kvix_tokens_mm;

/* One parsed line. Reused from line to line: its buffers only grow, up to
 * the ceiling above. */
typedef struct kvix_tokens {
    uint32_t *tok;          /* n token ids; owned by the struct */
    size_t n, cap;
    uint64_t seed;          /* seed of the local hashes: the line's "lora", else the default */
    char id[KVIX_ID_MAX];   /* raw JSON of an object's "id", "" when absent */
    /* An object's "lora" (an adapter name, "" for none) and "salt" (a cache
     * salt, kvix_hash_salt_seed), when it names them. */
    int has_lora, has_salt;
    char lora[KVIX_NAME_MAX], salt[KVIX_NAME_MAX];
    /* An object's "mm": one entry per block from block 0, null or an array
     * of multimodal object hashes (an integer, 1 to 16 hex digits, or a
     * vLLM identifier of 64 hex digits, which gives its first 16), at most
     * KVIX_HASH_MM_MAX a block; has_mm when the line has it (even empty). */
    int has_mm;
    kvix_tokens_mm *mm;     /* nmm (block, hash) pairs by block; owned */
    size_t nmm, cap_mm;
} kvix_tokens;

void kvix_tokens_init(kvix_tokens *t);
/* Frees the token buffer; t can be parsed into again after kvix_tokens_init. */
void kvix_tokens_release(kvix_tokens *t);

/* Parse line[0..len) (no newline; it need not be NUL-terminated) into t.
 * seed is the local-hash seed for a line that names no "lora". An empty or
 * blank line is 0 tokens. Returns KVIX_OK; KVIX_EINVAL with the reason in
 * err (t->id set when the line got that far, so a reply can carry it);
 * KVIX_ELIMIT for a line past the ceiling; KVIX_ENOMEM. line is not kept. */
int kvix_tokens_parse(kvix_tokens *t, const char *line, size_t len, uint64_t seed,
                      kvix_err *err);

/* A multimodal hash as a string: 1 to 16 hex digits, or a vLLM identifier
 * of 64 hex digits (contract section 1: its first 16). 0 or KVIX_EINVAL. */
int kvix_tokens_mm_hash(const char *s, size_t len, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
