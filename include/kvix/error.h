/* kvix: error reporting shared by every libkvix module.
 *
 * The library never prints or exits: a failing call returns a negative
 * kvix_status and, when the caller passed a kvix_err, fills it with a
 * lowercase message without a trailing full stop, ready for a tool to
 * prefix with its name and the input position. */
#ifndef KVIX_ERROR_H
#define KVIX_ERROR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvix_status {
    KVIX_OK = 0,
    KVIX_EINVAL = -1,     /* malformed input: bad JSON, wrong type, missing field */
    KVIX_ERANGE = -2,     /* a value out of its range (token > 2^32-1, position too deep) */
    KVIX_ELIMIT = -3,     /* a ceiling was hit: line length, array count, depth, frame size */
    KVIX_ENOMEM = -4,     /* allocation failed */
    KVIX_EIO = -5,        /* read, write, fsync or rename failed (errno in the message) */
    KVIX_ECORRUPT = -6,   /* a snapshot or frame fails magic, version or checksum */
    KVIX_EBLOCKSIZE = -7, /* event or query block size differs from the partition's */
    KVIX_EPARENT = -8,    /* stored event extends a parent the worker does not hold */
    KVIX_ENOTFOUND = -9,  /* no such partition, worker or file */
    KVIX_ESYS = -10,      /* a system facility failed (threads, sockets) */
    KVIX_EOF = -11,       /* clean end of input (not an error for readers' callers) */
    KVIX_EBUSY = -12,     /* held by another process (a snapshot's lock) */
} kvix_status;

#define KVIX_ERR_MSG_MAX 256

typedef struct kvix_err {
    int code;                    /* a kvix_status */
    char msg[KVIX_ERR_MSG_MAX];  /* lowercase, no full stop, no tool name */
} kvix_err;

/* Fill err (if non-NULL) with code and a printf-style message; returns code,
 * so callers can write `return kvix_err_set(err, KVIX_EINVAL, "...")`. */
int kvix_err_set(kvix_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A short fixed name for a status ("invalid input", "limit exceeded", ...).
 * Returns a static string; never NULL. */
const char *kvix_status_name(int code);

#ifdef __cplusplus
}
#endif
#endif
