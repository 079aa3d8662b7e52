/* The engine wire's field values (kvsub(1) lists them): hashes, token ids
 * and EAGLE's pairs, multimodal extra keys, medium names. The batch and
 * event structure is lib/wire_decode.c's. */
#include "kvix/wire.h"

#include <stdlib.h>
#include <xxhash.h>

#include "kvix/event.h"
#include "kvix/hash.h"
#include "wire_int.h"

int kvix__wf_hash(const msgpack_object *o, uint64_t *out)
{
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        *out = o->via.u64;
        return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        *out = (uint64_t)o->via.i64;
        return 0;
    case MSGPACK_OBJECT_BIN: {
        uint32_t n = o->via.bin.size;
        if (n == 0 || n > 32)
            return -1;
        const unsigned char *p = (const unsigned char *)o->via.bin.ptr;
        uint64_t v = 0;
        for (uint32_t i = n > 8 ? n - 8 : 0; i < n; i++)
            v = v << 8 | p[i];
        *out = v;
        return 0;
    }
    default:
        return -1;
    }
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Up to this many hashes, every pair is compared (a store's usual 1..16);
 * past it, a sorted copy. */
#define REPEATS_PAIRWISE 32

bool kvix__wf_repeats(const uint64_t *h, size_t n, bool has_parent, uint64_t parent,
                     uint64_t *scratch)
{
    for (size_t i = 0; has_parent && i < n; i++)
        if (h[i] == parent)
            return true;
    if (n <= REPEATS_PAIRWISE) {
        for (size_t i = 1; i < n; i++)
            for (size_t j = 0; j < i; j++)
                if (h[i] == h[j])
                    return true;
        return false;
    }
    memcpy(scratch, h, n * sizeof *h);
    qsort(scratch, n, sizeof *scratch, u64_cmp);
    for (size_t i = 1; i < n; i++)
        if (scratch[i] == scratch[i - 1])
            return true;
    return false;
}

static bool token_ok(const msgpack_object *o)
{
    return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= UINT32_MAX;
}

static bool pair_ok(const msgpack_object *o)
{
    return o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 2 &&
           token_ok(&o->via.array.ptr[0]) && token_ok(&o->via.array.ptr[1]);
}

int kvix__wf_tokens_shape(const msgpack_object *t, size_t need, bool *eagle, size_t *bad)
{
    const msgpack_object *p = t->via.array.ptr;
    *eagle = t->via.array.size > 0 && p[0].type == MSGPACK_OBJECT_ARRAY;
    if (t->via.array.size < need) {
        *bad = need;
        return -1;
    }
    for (size_t k = 0; k < need; k++)
        if (*eagle ? !pair_ok(&p[k]) : !token_ok(&p[k])) {
            *bad = k;
            return -1;
        }
    return 0;
}

void kvix__wf_tokens(const msgpack_object *t, size_t n, bool eagle, uint32_t *out)
{
    const msgpack_object *p = t->via.array.ptr;
    if (!eagle) {
        for (size_t k = 0; k < n; k++)
            out[k] = (uint32_t)p[k].via.u64;
        return;
    }
    for (size_t k = 0; k < n; k++)
        out[k] = (uint32_t)p[k].via.array.ptr[0].via.u64;
    if (n)
        out[n] = (uint32_t)p[n - 1].via.array.ptr[1].via.u64;
}

static bool hex64(const msgpack_object *o)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size != 64)
        return false;
    const char *s = o->via.str.ptr;
    for (int i = 0; i < 64; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return false;
    }
    return true;
}

/* An identifier's u64: its first 16 hex digits, or XXH3-64 of its bytes. */
static uint64_t mm_ident(const msgpack_object *o)
{
    uint64_t v;
    if (hex64(o) && kvix_parse_hex64(o->via.str.ptr, 16, &v) == 0)
        return v;
    return XXH3_64bits(o->via.str.ptr, o->via.str.size);
}

size_t kvix__wf_mm_keys(const msgpack_object *keys, const char *lora, size_t nlora,
                       uint64_t *mm, size_t max)
{
    if (kvix_wf_nil(keys) || keys->type != MSGPACK_OBJECT_ARRAY)
        return 0;
    size_t n = 0;
    for (uint32_t k = 0; k < keys->via.array.size; k++) {
        const msgpack_object *e = &keys->via.array.ptr[k], *id = NULL;
        if (e->type == MSGPACK_OBJECT_ARRAY && e->via.array.size == 2 &&
            e->via.array.ptr[0].type == MSGPACK_OBJECT_STR &&
            (e->via.array.ptr[1].type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
             e->via.array.ptr[1].type == MSGPACK_OBJECT_NEGATIVE_INTEGER))
            id = &e->via.array.ptr[0];
        else if (hex64(e) && !(nlora == 64 && memcmp(e->via.str.ptr, lora, 64) == 0))
            id = e;
        if (!id)
            continue;
        if (mm && n < max)
            mm[n] = mm_ident(id);
        n++;
    }
    return n;
}

bool kvix__wf_word_is(const msgpack_object *s, const char *upper)
{
    size_t n = strlen(upper);
    if (s->type != MSGPACK_OBJECT_STR || s->via.str.size != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s->via.str.ptr[i];
        if (c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        if (c != upper[i])
            return false;
    }
    return true;
}

int kvix_wire_medium(const char *s, size_t len)
{
    static const struct { const char *name; int medium; } map[] = {
        {"GPU", KVIX_MEDIUM_GPU},         {"DEVICE", KVIX_MEDIUM_GPU},
        {"", KVIX_MEDIUM_GPU},            {"CPU", KVIX_MEDIUM_CPU},
        {"CPU_PINNED", KVIX_MEDIUM_CPU},  {"CPU_TIER1", KVIX_MEDIUM_CPU},
        {"CPU_TIER2", KVIX_MEDIUM_DISK},  {"DISK", KVIX_MEDIUM_DISK},
        {"NVME", KVIX_MEDIUM_DISK},       {"STORAGE", KVIX_MEDIUM_DISK},
        {"FS", KVIX_MEDIUM_DISK},         {"OBJ", KVIX_MEDIUM_DISK},
        {"EXTERNAL", KVIX_MEDIUM_EXTERNAL}, {"NETWORK", KVIX_MEDIUM_EXTERNAL},
        {"REMOTE", KVIX_MEDIUM_EXTERNAL}, {"SHARED", KVIX_MEDIUM_EXTERNAL},
    };
    if (!s)
        return KVIX_MEDIUM_GPU;
    msgpack_object o;
    o.type = MSGPACK_OBJECT_STR;
    o.via.str.ptr = s;
    o.via.str.size = (uint32_t)(len > UINT32_MAX ? UINT32_MAX : len);
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (kvix__wf_word_is(&o, map[i].name))
            return map[i].medium;
    return -1;
}
