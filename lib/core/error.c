#include "kvix/error.h"

#include <stdarg.h>
#include <stdio.h>

static const char *const reason_names[KVIX_REASON_COUNT] = {
    "malformed json", "malformed msgpack", "missing field", "wrong type", "bad hash",
    "bad value", "out of range", "over a limit", "block size mismatch", "unknown parent",
    "event in query-only mode", "invalid",
};

static const char *const reason_keys[KVIX_REASON_COUNT] = {
    "malformed_json", "malformed_msgpack", "missing_field", "wrong_type", "bad_hash",
    "bad_value", "out_of_range", "over_limit", "block_size_mismatch", "unknown_parent",
    "query_only", "invalid",
};

int kvix_reason_of_status(int code)
{
    switch (code) {
    case KVIX_EBLOCKSIZE: return KVIX_REASON_BLOCKSIZE;
    case KVIX_EPARENT: return KVIX_REASON_PARENT;
    case KVIX_ELIMIT: return KVIX_REASON_LIMIT;
    case KVIX_ERANGE: return KVIX_REASON_RANGE;
    case KVIX_EINVAL: return KVIX_REASON_VALUE;
    }
    return KVIX_REASON_OTHER;
}

const char *kvix_reason_name(int reason)
{
    return reason >= 0 && reason < KVIX_REASON_COUNT ? reason_names[reason]
                                                      : reason_names[KVIX_REASON_OTHER];
}

const char *kvix_reason_key(int reason)
{
    return reason >= 0 && reason < KVIX_REASON_COUNT ? reason_keys[reason]
                                                      : reason_keys[KVIX_REASON_OTHER];
}

static void set(kvix_err *err, int code, int reason, const char *fmt, va_list ap)
{
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    err->code = code;
    err->reason = reason;
}

int kvix_err_set(kvix_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        set(err, code, kvix_reason_of_status(code), fmt, ap);
        va_end(ap);
    }
    return code;
}

int kvix_err_set_reason(kvix_err *err, int code, int reason, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        set(err, code, reason, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *kvix_status_name(int code)
{
    switch (code) {
    case KVIX_OK: return "ok";
    case KVIX_EINVAL: return "invalid input";
    case KVIX_ERANGE: return "value out of range";
    case KVIX_ELIMIT: return "limit exceeded";
    case KVIX_ENOMEM: return "out of memory";
    case KVIX_EIO: return "input/output error";
    case KVIX_ECORRUPT: return "corrupt data";
    case KVIX_EBLOCKSIZE: return "block size mismatch";
    case KVIX_EPARENT: return "unknown parent";
    case KVIX_ENOTFOUND: return "not found";
    case KVIX_ESYS: return "system error";
    case KVIX_EOF: return "end of input";
    case KVIX_EBUSY: return "in use";
    }
    return "unknown error";
}
