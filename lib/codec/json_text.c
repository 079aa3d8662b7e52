/* JSON text the encoders share (json_text_int.h). */
#include "json_text_int.h"

#include <jansson.h>
#include <string.h>

int kvix__json_str_append(kvix_buf *b, const char *s, size_t len, kvix_err *err)
{
    int plain = 1;
    for (size_t i = 0; i < len && plain; i++) {
        unsigned char c = (unsigned char)s[i];
        plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
    }
    int rc;
    if (plain) {
        if ((rc = kvix_buf_reserve(b, len + 2, err)))
            return rc;
        b->data[b->len++] = '"';
        memcpy(b->data + b->len, s, len);
        b->len += len;
        b->data[b->len++] = '"';
        b->data[b->len] = '\0';
        return KVIX_OK;
    }
    json_t *j = json_stringn(s, len);
    if (!j)
        return kvix_err_set_reason(err, KVIX_EINVAL, KVIX_REASON_TYPE, "name is not valid utf-8");
    size_t need = json_dumpb(j, NULL, 0, JSON_ENCODE_ANY);
    if ((rc = kvix_buf_reserve(b, need, err)) == KVIX_OK) {
        json_dumpb(j, b->data + b->len, need, JSON_ENCODE_ANY);
        b->len += need;
        b->data[b->len] = '\0';
    }
    json_decref(j);
    return rc;
}
