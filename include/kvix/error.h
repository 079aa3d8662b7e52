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
    KVIX_EBUSY = -12,     /* held by another process (a snapshot's lock), or every place
                             taken (a subscriber at its limit of subscriptions) */
} kvix_status;

#define KVIX_ERR_MSG_MAX 256

/* Why a record (an event or a query) was refused: a finer cut than the
 * status, for counters and metrics. The order is the order tools list
 * them in. */
typedef enum kvix_reason {
    KVIX_REASON_JSON,      /* not parseable as JSON */
    KVIX_REASON_MSGPACK,   /* not parseable as msgpack (or not framed) */
    KVIX_REASON_MISSING,   /* a required field is absent */
    KVIX_REASON_TYPE,      /* a field (or the record) has the wrong type */
    KVIX_REASON_HASH,      /* a hash string that is not one */
    KVIX_REASON_VALUE,     /* any other invalid value */
    KVIX_REASON_RANGE,     /* a value out of its range */
    KVIX_REASON_LIMIT,     /* a ceiling was hit */
    KVIX_REASON_BLOCKSIZE, /* block size differs from the partition's */
    KVIX_REASON_PARENT,    /* a stored event's parent is not held */
    KVIX_REASON_QUERYONLY, /* an event given to a reader of queries only */
    KVIX_REASON_OTHER,     /* none of the above */
    KVIX_REASON_COUNT
} kvix_reason;

typedef struct kvix_err {
    int code;                    /* a kvix_status */
    char msg[KVIX_ERR_MSG_MAX];  /* lowercase, no full stop, no tool name */
    int reason;                  /* a kvix_reason; kvix_err_set derives it from code */
} kvix_err;

/* Fill err (if non-NULL) with code and a printf-style message; returns code,
 * so callers can write `return kvix_err_set(err, KVIX_EINVAL, "...")`. */
int kvix_err_set(kvix_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* As kvix_err_set, with a reason other than the one code implies. */
int kvix_err_set_reason(kvix_err *err, int code, int reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The reason a status implies when no finer one is known: EBLOCKSIZE,
 * EPARENT, ELIMIT, ERANGE their own, EINVAL "bad value", others "other". */
int kvix_reason_of_status(int code);

/* Names of a reason: for people ("malformed json") and for metrics labels
 * ("malformed_json"). Static strings; "invalid" / "invalid" out of range. */
const char *kvix_reason_name(int reason);
const char *kvix_reason_key(int reason);

/* A short fixed name for a status ("invalid input", "limit exceeded", ...).
 * Returns a static string; never NULL. */
const char *kvix_status_name(int code);

#ifdef __cplusplus
}
#endif
#endif
