/* A token line's block hashes as kvhash(1) writes them (kvix/tokens.h). */
#include "kvix/tokens.h"

#include <string.h>

#include "dec64_int.h"

/* The output hot path of kvhash (8 M blocks a CPU second at block size 16):
 * one reservation per line, then literals and digits written in place. */
#define PUT_LIT(p, lit) (memcpy((p), (lit), sizeof(lit) - 1), (p) += sizeof(lit) - 1)

/* Most bytes one block takes in any form: in the object, two u64 as
 * decimal or quoted hex (2 x 23 with the comma) and two u128 (2 x 42). The
 * hex writers add a NUL after their digits, inside this bound. */
#define BLOCK_MAX 136

static char *put_u64(char *p, uint64_t v, int decimal)
{
    if (decimal)
        return p + kvix_dec64_put(v, p);
    kvix_hex64(v, p);
    return p + 16;
}

static char *put_u128(char *p, kvix_u128 v, int decimal)
{
    if (decimal)
        return p + kvix_dec128(v, p);
    kvix_hex128(v, p);
    return p + 32;
}

/* One field's n hashes: JSON array items (without the brackets), or plain. */
static char *put_field(char *p, const kvix_tokens_hashes *h, kvix_tokens_form field, int json,
                       int decimal)
{
    int quote = json && !decimal;
    for (size_t i = 0; i < h->n; i++) {
        if (i)
            *p++ = json ? ',' : ' ';
        if (quote)
            *p++ = '"';
        if (field == KVIX_TOKENS_LOCAL)
            p = put_u64(p, h->local[i], decimal);
        else if (field == KVIX_TOKENS_SEQ)
            p = put_u64(p, h->seq[i], decimal);
        else
            p = put_u128(p, h->pos[2 * i + (field == KVIX_TOKENS_PLH)], decimal);
        if (quote)
            *p++ = '"';
    }
    return p;
}

int kvix_tokens_hashes_write(const kvix_tokens_hashes *h, kvix_tokens_form form, int decimal,
                             kvix_buf *out, kvix_err *err)
{
    if ((unsigned)form > KVIX_TOKENS_PLH)
        return kvix_err_set(err, KVIX_EINVAL, "unknown form %d", (int)form);
    int pos = form == KVIX_TOKENS_OBJECT ? h->positional : form != KVIX_TOKENS_LOCAL &&
                                                               form != KVIX_TOKENS_SEQ;
    if (pos && !h->pos && h->n)
        return kvix_err_set(err, KVIX_EINVAL, "no positional hashes to write");
    size_t idlen = h->id ? strlen(h->id) : 0;
    if (h->n > (SIZE_MAX - idlen - 128) / BLOCK_MAX)
        return kvix_err_set(err, KVIX_ENOMEM, "too many blocks to write: %zu", h->n);
    int rc = kvix_buf_reserve(out, h->n * BLOCK_MAX + idlen + 128, err);
    if (rc)
        return rc;
    char *p = out->data + out->len;
    if (form != KVIX_TOKENS_OBJECT) {
        p = put_field(p, h, form, 0, decimal);
    } else {
        *p++ = '{';
        if (idlen) {
            PUT_LIT(p, "\"id\":");
            memcpy(p, h->id, idlen);
            p += idlen;
            *p++ = ',';
        }
        PUT_LIT(p, "\"local\":[");
        p = put_field(p, h, KVIX_TOKENS_LOCAL, 1, decimal);
        PUT_LIT(p, "],\"seq\":[");
        p = put_field(p, h, KVIX_TOKENS_SEQ, 1, decimal);
        if (h->positional) {
            PUT_LIT(p, "],\"psh\":[");
            p = put_field(p, h, KVIX_TOKENS_PSH, 1, decimal);
            PUT_LIT(p, "],\"plh\":[");
            p = put_field(p, h, KVIX_TOKENS_PLH, 1, decimal);
        }
        *p++ = ']';
        if (h->partial) {
            PUT_LIT(p, ",\"partial\":");
            p += kvix_dec64_put(h->partial, p);
        }
        *p++ = '}';
    }
    *p++ = '\n';
    out->len = (size_t)(p - out->data);
    out->data[out->len] = '\0';
    return KVIX_OK;
}
