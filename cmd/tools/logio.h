/* kvix: reading logs that may be compressed. A log (an event log, a Mooncake
 * trace) may be plain or compressed with xz, zstd or gzip; the format is
 * detected from its first bytes (magic numbers), never from the file name, so
 * `xz -dc`-able data on stdin works as well as a file.
 *
 * kvix_logio hands out a plain file descriptor of decompressed bytes that any
 * fd-based reader (kvix_reader, the Mooncake trace reader) consumes unchanged.
 * For a compressed or non-seekable input a thread decompresses into a socket
 * pair (send with MSG_NOSIGNAL, so a consumer stopping early is not a SIGPIPE).
 * A regular uncompressed file is passed through as is, without a thread. */
#ifndef KVIX_LOGIO_H
#define KVIX_LOGIO_H

#include <stdint.h>

#include "kvix/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvix_compression {
    KVIX_COMP_NONE = 0,
    KVIX_COMP_GZIP,
    KVIX_COMP_XZ,
    KVIX_COMP_ZSTD,
} kvix_compression;

/* Ceiling on the decompressor's memory (xz dictionaries): 1 GiB. */
#define KVIX_LOGIO_MEMLIMIT (UINT64_C(1) << 30)

typedef struct kvix_logio kvix_logio;

/* Start reading fd (owned by the logio from now on, closed by
 * kvix_logio_close, even on failure). name is used in messages and copied.
 * *out is owned by the caller: kvix_logio_close. Reads the first bytes to
 * detect the compression, so it may block on a pipe. */
int kvix_logio_open(kvix_logio **out, int fd, const char *name, kvix_err *err);

/* The descriptor of decompressed bytes; owned by the logio (do not close). */
int kvix_logio_fd(const kvix_logio *l);
kvix_compression kvix_logio_compression(const kvix_logio *l);
/* "none", "gzip", "xz", "zstd". Static string. */
const char *kvix_compression_name(kvix_compression c);

/* Stop (the consumer may stop before the end), wait for the decompressing
 * thread, close every descriptor and free l. Returns the decompression error
 * if the data was corrupt or truncated (the consumer saw that as an early end
 * of input): KVIX_ECORRUPT or KVIX_EIO with a message naming the input. An
 * early stop by the consumer is not an error. NULL is fine. */
int kvix_logio_close(kvix_logio *l, kvix_err *err);

#ifdef __cplusplus
}
#endif
#endif
