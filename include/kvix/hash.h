/* kvix: block hashing, byte-compatible with NVIDIA Dynamo's KV router
 * (contract section 1), and hashes in text (contract section 2).
 *
 * Every function here is pure and thread-safe; none allocates. */
#ifndef KVIX_HASH_H
#define KVIX_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The seed of every local hash without LoRA, the engines' and Dynamo's: a
 * prompt hashed with another seed silently misses every block (kvix(3)). */
#define KVIX_HASH_SEED 1337u
/* Ceiling on multimodal object hashes per block: engine input is untrusted. */
#define KVIX_HASH_MM_MAX 256u
/* Deepest position a PositionalSequenceHash / PositionalLineageHash can encode. */
#define KVIX_PSH_POS_LIMIT (1u << 31)
#define KVIX_PLH_POS_LIMIT (1u << 24)

typedef struct kvix_u128 {
    uint64_t hi, lo;
} kvix_u128;

/* Seed of the local hash for a LoRA adapter name: 1337, or 1337 + XXH3(name, 0)
 * for a non-empty name. name may be NULL (no LoRA). */
uint64_t kvix_hash_lora_seed(const char *name, size_t len);

/* Seed of the local hash as NVIDIA Dynamo's newest router computes it for
 * a request with a cache salt (its cache namespace): kvix_hash_lora_seed's,
 * plus XXH3(salt, seed 1) for a non-empty salt (wrapping u64 addition).
 * The engines mix a cache salt into their own hashes only, and kvix's local
 * hashes carry none: this is for comparing with a router that salts its
 * local hashes (kvhash --salt). lora and salt may be NULL. */
uint64_t kvix_hash_salt_seed(const char *lora, size_t llen, const char *salt, size_t slen);

/* Local (content) hash of one block of bs tokens. */
uint64_t kvix_hash_local(const uint32_t *tokens, size_t bs, uint64_t seed);

/* Local hash of a block carrying multimodal object hashes mm[0..nmm): they are
 * hashed sorted after the tokens. mm is not modified. Fails with KVIX_ELIMIT when
 * nmm > KVIX_HASH_MM_MAX. */
int kvix_hash_local_mm(const uint32_t *tokens, size_t bs, uint64_t seed,
                       const uint64_t *mm, size_t nmm, uint64_t *out, kvix_err *err);

/* Rolling sequence hash: seq[i] = XXH3(le64(prev) || le64(local), 1337). */
uint64_t kvix_hash_seq_next(uint64_t prev, uint64_t local);

/* Hash every whole block of tokens[0..ntokens) with block size bs. Writes
 * ntokens/bs hashes into local_out and seq_out (either may be NULL; the caller
 * provides room for ntokens/bs each). Returns the number of whole blocks; the
 * trailing ntokens % bs tokens are not hashed. bs must be > 0. */
size_t kvix_hash_blocks(const uint32_t *tokens, size_t ntokens, size_t bs, uint64_t seed,
                        uint64_t *local_out, uint64_t *seq_out);

/* EAGLE's blocks (SGLang's speculative decoding publishes token pairs; NVIDIA
 * Dynamo's newest router hashes them so, and its frontend hashes requests to
 * such engines alike): block i is the local hash of the bs + 1 tokens
 * tokens[i*bs .. i*bs + bs] (the block and the first token of the next),
 * with the seed rules of kvix_hash_local; the rolling hash as
 * kvix_hash_blocks. A block needs the token after it, so ntokens tokens make
 * kvix_hash_eagle_count(ntokens, bs) = (ntokens - 1) / bs blocks (0 for no
 * token): that many are written (either output may be NULL) and returned.
 * bs must be > 0. */
size_t kvix_hash_blocks_eagle(const uint32_t *tokens, size_t ntokens, size_t bs, uint64_t seed,
                              uint64_t *local_out, uint64_t *seq_out);
size_t kvix_hash_eagle_count(size_t ntokens, size_t bs);

/* PositionalSequenceHash of a block at position pos. KVIX_ERANGE when
 * pos >= KVIX_PSH_POS_LIMIT. */
int kvix_hash_psh(uint64_t seq, uint64_t pos, uint64_t local, kvix_u128 *out, kvix_err *err);

/* PositionalLineageHash of a block at pos whose seq hash is cur and whose
 * parent's seq hash is parent (0 at the root). KVIX_ERANGE when
 * pos >= KVIX_PLH_POS_LIMIT. */
int kvix_hash_plh(uint64_t cur, uint64_t parent, uint64_t pos, kvix_u128 *out, kvix_err *err);

/* Text forms. out gets exactly 16 (u64) or 32 (u128) lowercase hex digits and a NUL. */
void kvix_hex64(uint64_t v, char out[17]);
void kvix_hex128(kvix_u128 v, char out[33]);
/* Decimal forms, for output built in place: out gets the digits only (at
 * most 20 for a u64, 39 for a u128), no NUL; returns how many. */
size_t kvix_dec64(uint64_t v, char *out);
size_t kvix_dec128(kvix_u128 v, char *out);

/* Parse exactly 1..16 hex digits (either case) from s[0..len). Returns 0 or
 * KVIX_EINVAL. */
int kvix_parse_hex64(const char *s, size_t len, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
