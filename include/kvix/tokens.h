/* kvix: token lines, the input of kvhash(1): one token sequence per line,
 * as whitespace-separated integers (`1 2 3`), a JSON array (`[1,2,3]`) or a
 * JSON object with "tokens" (an array, or an array of per-block arrays,
 * flattened one level), an optional "lora" (adapter name: the seed of the
 * local hashes), "salt", "mm" (multimodal hashes per block, below) and
 * "id" (echoed). Token ids are 0..2^32-1.
 *
 * The line is untrusted: every byte is checked, a line longer than
 * KVIX_TOKENS_LINE_MAX is refused (KVIX_ELIMIT), and a bad line says which
 * token and why.
 *
 * And the lines kvhash writes: a line's block hashes, as a JSON object or
 * one field plain (kvix_tokens_hashes_write). */
#ifndef KVIX_TOKENS_H
#define KVIX_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/buf.h"
#include "kvix/error.h"
#include "kvix/event.h"
#include "kvix/hash.h"
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

/* ---- a line's block hashes, as kvhash(1) writes them -------------------- */

/* What kvix_tokens_hashes_write writes of a line. */
typedef enum kvix_tokens_form {
    KVIX_TOKENS_OBJECT = 0, /* one JSON object: "id" (when the line has one), "local",
                             * "seq", "psh" and "plh" (when positional), "partial"
                             * (when not 0), in that order */
    KVIX_TOKENS_LOCAL,      /* one field's hashes alone, separated by spaces, without */
    KVIX_TOKENS_SEQ,        /* quotes (kvhash --plain FIELD): an empty line for a line */
    KVIX_TOKENS_PSH,        /* of no whole block */
    KVIX_TOKENS_PLH,
} kvix_tokens_form;

/* A line's block hashes (kvix_hash_blocks, kvix_hash_psh and _plh). Every
 * pointer is borrowed for the call. */
typedef struct kvix_tokens_hashes {
    const char *id;             /* raw JSON of the line's "id" (kvix_tokens.id); "" or
                                 * NULL: none */
    size_t n;                   /* whole blocks */
    const uint64_t *local, *seq; /* n each */
    const kvix_u128 *pos;       /* psh of block i at 2i, plh at 2i + 1 (2n); may be NULL
                                 * unless positional or the psh or plh form */
    int positional;             /* the object has "psh" and "plh" */
    size_t partial;             /* tokens no block took */
} kvix_tokens_hashes;

/* Append h in form, and a newline, to out. Hashes are lowercase hex (16
 * digits, 32 for psh and plh), strings in the object; with decimal != 0
 * they are decimal, integers in the object (contract section 2: a string is
 * always hex), which kvindex reads back exactly. Returns KVIX_OK;
 * KVIX_EINVAL for positional hashes without pos, or an unknown form;
 * KVIX_ENOMEM (out is then as it was). */
int kvix_tokens_hashes_write(const kvix_tokens_hashes *h, kvix_tokens_form form, int decimal,
                             kvix_buf *out, kvix_err *err);

#ifdef __cplusplus
}
#endif
#endif
