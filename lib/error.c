#include "kvix/error.h"

#include <stdarg.h>
#include <stdio.h>

int kvix_err_set(kvix_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
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
