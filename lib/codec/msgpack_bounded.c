/* Budgeted msgpack parsing: see msgpack_bounded_int.h. */
#include "msgpack_bounded_int.h"

#include <stdbool.h>
#include <string.h>

#define MSGPACK_EMBED_STACK_SIZE KVIX_MPB_STACK
#include <msgpack/unpack_define.h>

enum { WHY_NONE = 0, WHY_BUDGET, WHY_NOMEM };

typedef struct mpb_user {
    msgpack_zone *z;
    size_t budget; /* elements the rest of the input can still hold */
    int why;
} mpb_user;

#define msgpack_unpack_struct(name) struct mpb_tpl##name
#define msgpack_unpack_func(ret, name) static inline ret mpb_tpl##name
#define msgpack_unpack_callback(name) mpb_cb##name
#define msgpack_unpack_object msgpack_object
#define msgpack_unpack_user mpb_user

static inline msgpack_object mpb_cb_root(mpb_user *u)
{
    (void)u;
    msgpack_object o;
    memset(&o, 0, sizeof o);
    return o;
}

#define MPB_CB_UINT(name, T)                                                  \
    static inline int mpb_cb##name(mpb_user *u, T d, msgpack_object *o)      \
    {                                                                             \
        (void)u;                                                                  \
        o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;                                \
        o->via.u64 = d;                                                           \
        return 0;                                                                 \
    }
#define MPB_CB_INT(name, T)                                                   \
    static inline int mpb_cb##name(mpb_user *u, T d, msgpack_object *o)      \
    {                                                                             \
        (void)u;                                                                  \
        if (d >= 0) {                                                             \
            o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;                            \
            o->via.u64 = (uint64_t)d;                                             \
        } else {                                                                  \
            o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;                            \
            o->via.i64 = d;                                                       \
        }                                                                         \
        return 0;                                                                 \
    }
MPB_CB_UINT(_uint8, uint8_t)
MPB_CB_UINT(_uint16, uint16_t)
MPB_CB_UINT(_uint32, uint32_t)
MPB_CB_UINT(_uint64, uint64_t)
MPB_CB_INT(_int8, int8_t)
MPB_CB_INT(_int16, int16_t)
MPB_CB_INT(_int32, int32_t)
MPB_CB_INT(_int64, int64_t)

static inline int mpb_cb_float(mpb_user *u, float d, msgpack_object *o)
{
    (void)u;
    o->type = MSGPACK_OBJECT_FLOAT32;
    o->via.f64 = d;
    return 0;
}

static inline int mpb_cb_double(mpb_user *u, double d, msgpack_object *o)
{
    (void)u;
    o->type = MSGPACK_OBJECT_FLOAT64;
    o->via.f64 = d;
    return 0;
}

static inline int mpb_cb_nil(mpb_user *u, msgpack_object *o)
{
    (void)u;
    o->type = MSGPACK_OBJECT_NIL;
    return 0;
}

static inline int mpb_cb_true(mpb_user *u, msgpack_object *o)
{
    (void)u;
    o->type = MSGPACK_OBJECT_BOOLEAN;
    o->via.boolean = true;
    return 0;
}

static inline int mpb_cb_false(mpb_user *u, msgpack_object *o)
{
    (void)u;
    o->type = MSGPACK_OBJECT_BOOLEAN;
    o->via.boolean = false;
    return 0;
}

/* Charge n declared elements; fail once they cannot fit in the input. */
static inline int charge(mpb_user *u, size_t n)
{
    if (n > u->budget) {
        u->why = WHY_BUDGET;
        return -1;
    }
    u->budget -= n;
    return 0;
}

static inline int mpb_cb_array(mpb_user *u, unsigned int n, msgpack_object *o)
{
    if (charge(u, n))
        return -1;
    o->type = MSGPACK_OBJECT_ARRAY;
    o->via.array.size = 0;
    o->via.array.ptr = NULL;
    if (n == 0)
        return 0;
    o->via.array.ptr = msgpack_zone_malloc(u->z, (size_t)n * sizeof(msgpack_object));
    if (!o->via.array.ptr) {
        u->why = WHY_NOMEM;
        return -1;
    }
    return 0;
}

static inline int mpb_cb_array_item(mpb_user *u, msgpack_object *c, msgpack_object o)
{
    (void)u;
    c->via.array.ptr[c->via.array.size++] = o;
    return 0;
}

static inline int mpb_cb_map(mpb_user *u, unsigned int n, msgpack_object *o)
{
    if (charge(u, n) || charge(u, n))
        return -1;
    o->type = MSGPACK_OBJECT_MAP;
    o->via.map.size = 0;
    o->via.map.ptr = NULL;
    if (n == 0)
        return 0;
    o->via.map.ptr = msgpack_zone_malloc(u->z, (size_t)n * sizeof(msgpack_object_kv));
    if (!o->via.map.ptr) {
        u->why = WHY_NOMEM;
        return -1;
    }
    return 0;
}

static inline int mpb_cb_map_item(mpb_user *u, msgpack_object *c, msgpack_object k,
                                   msgpack_object v)
{
    (void)u;
    c->via.map.ptr[c->via.map.size].key = k;
    c->via.map.ptr[c->via.map.size].val = v;
    c->via.map.size++;
    return 0;
}

/* Strings and bins point into the input, which outlives the objects. */
static inline int mpb_cb_str(mpb_user *u, const char *b, const char *p, unsigned int l,
                              msgpack_object *o)
{
    (void)u;
    (void)b;
    o->type = MSGPACK_OBJECT_STR;
    o->via.str.ptr = p;
    o->via.str.size = l;
    return 0;
}

static inline int mpb_cb_bin(mpb_user *u, const char *b, const char *p, unsigned int l,
                              msgpack_object *o)
{
    (void)u;
    (void)b;
    o->type = MSGPACK_OBJECT_BIN;
    o->via.bin.ptr = p;
    o->via.bin.size = l;
    return 0;
}

static inline int mpb_cb_ext(mpb_user *u, const char *b, const char *p, unsigned int l,
                              msgpack_object *o)
{
    (void)u;
    (void)b;
    o->type = MSGPACK_OBJECT_EXT;
    o->via.ext.type = l ? (int8_t)p[0] : 0;
    o->via.ext.ptr = l ? p + 1 : p;
    o->via.ext.size = l ? l - 1 : 0;
    return 0;
}

#include "msgpack_template_int.h"

static bool depth_ok(const msgpack_object *o, int depth, int max)
{
    if (o->type != MSGPACK_OBJECT_ARRAY && o->type != MSGPACK_OBJECT_MAP)
        return true;
    if (depth > max)
        return false;
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        for (uint32_t i = 0; i < o->via.array.size; i++)
            if (!depth_ok(&o->via.array.ptr[i], depth + 1, max))
                return false;
    } else {
        for (uint32_t i = 0; i < o->via.map.size; i++)
            if (!depth_ok(&o->via.map.ptr[i].val, depth + 1, max))
                return false;
    }
    return true;
}

kvix_mpb_result kvix__mpb_parse(const char *buf, size_t len, msgpack_zone *z, int depth_max,
                               msgpack_object *root, size_t *used)
{
    struct mpb_tpl_context ctx;
    mpb_tpl_init(&ctx);
    ctx.user.z = z;
    ctx.user.budget = len;
    ctx.user.why = WHY_NONE;
    size_t off = 0;
    int ret = mpb_tpl_execute(&ctx, buf, len, &off);
    *used = off;
    if (ret > 0) {
        *root = mpb_tpl_data(&ctx);
        return depth_ok(root, 1, depth_max) ? KVIX_MPB_OK : KVIX_MPB_DEPTH;
    }
    if (ret == 0)
        return KVIX_MPB_TRUNCATED;
    if (ctx.user.why == WHY_BUDGET)
        return KVIX_MPB_BUDGET;
    if (ctx.user.why == WHY_NOMEM)
        return KVIX_MPB_NOMEM;
    /* The template reports its own stack running out as NOMEM: that is nesting. */
    return ret == MSGPACK_UNPACK_NOMEM_ERROR ? KVIX_MPB_DEPTH : KVIX_MPB_MALFORMED;
}
