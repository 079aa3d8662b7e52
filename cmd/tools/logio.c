#include "logio.h"

#include <errno.h>
#include <lzma.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define CHUNK (64u << 10)

/* Decompressed bytes are held back until the compressed data is known to be
 * sound, so nothing of a damaged log comes out (a decoder finds most damage
 * only at a block's or a file's check, after it has produced garbage). Up to
 * this many bytes are held; past it a regular file is checked whole first
 * (decoded once to nothing, then again for real) and a pipe is passed on as
 * it comes (kvreplay(1) says so). */
#define HOLD_MAX (64u << 20)

struct kvix_logio {
    int src;           /* the input, owned */
    int out;           /* what the consumer reads: src itself, or sp[0] */
    int sp1;           /* the thread's end of the socket pair, or -1 */
    kvix_compression comp;
    int has_thread;
    pthread_t th;
    unsigned char head[8]; /* bytes read for detection, replayed first */
    size_t nhead, headoff;
    int rc;            /* the thread's result */
    unsigned char *hold; /* decompressed bytes not yet passed on */
    size_t nhold, caphold;
    int holding;       /* hold what comes (else pass it on) */
    int checking;      /* a pass that only checks the data: drop what comes */
    int seekable;      /* src is a regular file: a second pass can read it again */
    kvix_err e;
    char name[256];
};

enum { IO_OK = 0, IO_ERR = -1, IO_STOP = -2 };

static void fail(kvix_logio *l, int rc, const char *fmt, const char *detail)
{
    if (l->rc)
        return;
    l->rc = kvix_err_set(&l->e, rc, fmt, l->name, detail);
}

/* Damage in the compressed data: where it was found (the decoder notices it
 * at the latest at the check that covers it) and that none of it came out. */
static void fail_corrupt(kvix_logio *l, uint64_t at, const char *what)
{
    if (l->rc)
        return;
    l->rc = kvix_err_set(&l->e, KVIX_ECORRUPT,
                         "%s: %s, found at compressed byte %llu%s", l->name, what,
                         (unsigned long long)at,
                         l->holding || l->checking ? " (nothing of the damaged data was passed on)"
                                                   : "");
}

/* Read up to cap bytes of the raw input: the detection bytes first. Returns
 * the count, 0 at the end, IO_ERR, or IO_STOP when the consumer has gone. */
static ssize_t src_read(kvix_logio *l, unsigned char *buf, size_t cap)
{
    if (l->headoff < l->nhead) {
        size_t n = l->nhead - l->headoff;
        if (n > cap)
            n = cap;
        memcpy(buf, l->head + l->headoff, n);
        l->headoff += n;
        return (ssize_t)n;
    }
    for (;;) {
        /* Wait for input or for the consumer to hang up, so a stopped consumer
         * never leaves this thread blocked on a quiet pipe. */
        struct pollfd p[2] = {{.fd = l->src, .events = POLLIN}, {.fd = l->sp1, .events = 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            fail(l, KVIX_EIO, "%s: poll: %s", strerror(errno));
            return IO_ERR;
        }
        if (p[1].revents & (POLLHUP | POLLERR | POLLNVAL))
            return IO_STOP;
        if (!p[0].revents)
            continue;
        ssize_t n = read(l->src, buf, cap);
        if (n >= 0)
            return n;
        if (errno == EINTR || errno == EAGAIN)
            continue;
        fail(l, KVIX_EIO, "%s: read error: %s", strerror(errno));
        return IO_ERR;
    }
}

static int send_all(kvix_logio *l, const unsigned char *p, size_t n)
{
    while (n) {
        ssize_t w = send(l->sp1, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EPIPE || errno == ECONNRESET)
                return IO_STOP;
            fail(l, KVIX_EIO, "%s: %s", strerror(errno));
            return IO_ERR;
        }
        p += w;
        n -= (size_t)w;
    }
    return IO_OK;
}

/* Decompressed bytes: held, dropped (a checking pass) or passed on. */
static int sink(kvix_logio *l, const unsigned char *p, size_t n)
{
    if (l->checking || n == 0)
        return IO_OK;
    if (!l->holding)
        return send_all(l, p, n);
    if (l->nhold + n > HOLD_MAX) {
        if (l->seekable) { /* check the whole file first, then decode it again */
            l->checking = 1;
            l->nhold = 0;
            return IO_OK;
        }
        l->holding = 0; /* a pipe cannot be read twice: what was held goes on */
        int rc = send_all(l, l->hold, l->nhold);
        l->nhold = 0;
        return rc ? rc : send_all(l, p, n);
    }
    if (l->nhold + n > l->caphold) {
        size_t c = l->caphold ? l->caphold : CHUNK;
        while (c < l->nhold + n)
            c *= 2;
        unsigned char *h = realloc(l->hold, c);
        if (!h) {
            fail(l, KVIX_ENOMEM, "%s: %s", "out of memory holding decompressed data");
            return IO_ERR;
        }
        l->hold = h;
        l->caphold = c;
    }
    memcpy(l->hold + l->nhold, p, n);
    l->nhold += n;
    return IO_OK;
}

static void copy_plain(kvix_logio *l, unsigned char *in)
{
    ssize_t n;
    while ((n = src_read(l, in, CHUNK)) > 0)
        if (sink(l, in, (size_t)n))
            return;
}

static void run_gzip(kvix_logio *l, unsigned char *in, unsigned char *out)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 32) != Z_OK) {
        fail(l, KVIX_ENOMEM, "%s: %s", "cannot start the gzip decoder");
        return;
    }
    int ended = 0; /* the current member is complete */
    for (;;) {
        if (z.avail_in == 0) {
            ssize_t n = src_read(l, in, CHUNK);
            if (n < 0)
                break;
            if (n == 0) {
                if (!ended)
                    fail_corrupt(l, z.total_in, "truncated gzip data");
                break;
            }
            z.next_in = in;
            z.avail_in = (uInt)n;
        }
        if (ended) { /* another member follows (gzip files concatenate) */
            inflateReset(&z);
            ended = 0;
        }
        z.next_out = out;
        z.avail_out = CHUNK;
        int zr = inflate(&z, Z_NO_FLUSH);
        if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
            char why[160];
            snprintf(why, sizeof why, "corrupt gzip data (%s)", z.msg ? z.msg : "inflate failed");
            fail_corrupt(l, z.total_in, why);
            break;
        }
        if (sink(l, out, CHUNK - z.avail_out))
            break;
        if (zr == Z_STREAM_END)
            ended = 1;
    }
    inflateEnd(&z);
}

static void run_xz(kvix_logio *l, unsigned char *in, unsigned char *out)
{
    lzma_stream s = LZMA_STREAM_INIT;
    if (lzma_stream_decoder(&s, KVIX_LOGIO_MEMLIMIT, LZMA_CONCATENATED) != LZMA_OK) {
        fail(l, KVIX_ENOMEM, "%s: %s", "cannot start the xz decoder");
        return;
    }
    lzma_action action = LZMA_RUN;
    for (;;) {
        if (s.avail_in == 0 && action == LZMA_RUN) {
            ssize_t n = src_read(l, in, CHUNK);
            if (n < 0)
                break;
            if (n == 0)
                action = LZMA_FINISH;
            s.next_in = in;
            s.avail_in = (size_t)n;
        }
        s.next_out = out;
        s.avail_out = CHUNK;
        lzma_ret r = lzma_code(&s, action);
        if (sink(l, out, CHUNK - s.avail_out))
            break;
        if (r == LZMA_STREAM_END)
            break;
        if (r != LZMA_OK) {
            const char *why = r == LZMA_MEMLIMIT_ERROR ? "xz dictionary over the memory limit"
                              : r == LZMA_BUF_ERROR    ? "truncated xz data"
                                                       : "corrupt xz data";
            if (r == LZMA_MEMLIMIT_ERROR)
                fail(l, KVIX_ELIMIT, "%s: %s", why);
            else
                fail_corrupt(l, s.total_in, why);
            break;
        }
    }
    lzma_end(&s);
}

static void run_zstd(kvix_logio *l, unsigned char *in, unsigned char *out)
{
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    if (!dc) {
        fail(l, KVIX_ENOMEM, "%s: %s", "cannot start the zstd decoder");
        return;
    }
    /* 2^30: the same ceiling as xz (zstd's default refuses windows > 2^27). */
    ZSTD_DCtx_setParameter(dc, ZSTD_d_windowLogMax, 30);
    ZSTD_inBuffer ib = {in, 0, 0};
    size_t last = 0; /* 0 when a frame has just ended */
    uint64_t consumed = 0; /* input bytes before the current buffer */
    for (;;) {
        if (ib.pos == ib.size) {
            ssize_t n = src_read(l, in, CHUNK);
            if (n < 0)
                break;
            if (n == 0) {
                if (last != 0)
                    fail_corrupt(l, consumed, "truncated zstd data");
                break;
            }
            consumed += ib.size;
            ib.size = (size_t)n;
            ib.pos = 0;
        }
        ZSTD_outBuffer ob = {out, CHUNK, 0};
        last = ZSTD_decompressStream(dc, &ob, &ib);
        if (ZSTD_isError(last)) {
            char why[160];
            snprintf(why, sizeof why, "corrupt zstd data (%s)", ZSTD_getErrorName(last));
            fail_corrupt(l, consumed + ib.pos, why);
            break;
        }
        if (sink(l, out, ob.pos))
            break;
    }
    ZSTD_freeDCtx(dc);
}

static void decode(kvix_logio *l, unsigned char *in, unsigned char *out)
{
    if (l->comp == KVIX_COMP_GZIP)
        run_gzip(l, in, out);
    else if (l->comp == KVIX_COMP_XZ)
        run_xz(l, in, out);
    else if (l->comp == KVIX_COMP_ZSTD)
        run_zstd(l, in, out);
    else
        copy_plain(l, in);
}

static void *thread_main(void *arg)
{
    kvix_logio *l = arg;
    /* Signals are for the consumer's thread: its blocked read must be the
     * one interrupted, not this thread's. */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    unsigned char *in = malloc(CHUNK), *out = malloc(CHUNK);
    l->holding = l->comp != KVIX_COMP_NONE;
    if (!in || !out) {
        fail(l, KVIX_ENOMEM, "%s: %s", "out of memory");
    } else {
        decode(l, in, out);
        if (!l->rc && l->checking) { /* sound: now decode it again for real */
            l->checking = l->holding = 0;
            l->headoff = 0;
            if (lseek(l->src, (off_t)l->nhead, SEEK_SET) != (off_t)l->nhead)
                fail(l, KVIX_EIO, "%s: cannot read it again: %s", strerror(errno));
            else
                decode(l, in, out);
        }
        /* what is held was checked whole; after a failure none of it goes */
        if (!l->rc && l->nhold)
            send_all(l, l->hold, l->nhold);
    }
    free(l->hold);
    l->hold = NULL;
    free(in);
    free(out);
    close(l->sp1); /* the consumer sees the end of input */
    l->sp1 = -1;
    return NULL;
}

static kvix_compression detect(const unsigned char *h, size_t n)
{
    static const unsigned char xz[6] = {0xfd, '7', 'z', 'X', 'Z', 0};
    static const unsigned char zst[4] = {0x28, 0xb5, 0x2f, 0xfd};
    if (n >= 2 && h[0] == 0x1f && h[1] == 0x8b)
        return KVIX_COMP_GZIP;
    if (n >= 6 && memcmp(h, xz, 6) == 0)
        return KVIX_COMP_XZ;
    if (n >= 4 && memcmp(h, zst, 4) == 0)
        return KVIX_COMP_ZSTD;
    return KVIX_COMP_NONE;
}

int kvix_logio_open(kvix_logio **out, int fd, const char *name, kvix_err *err)
{
    *out = NULL;
    kvix_logio *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    l->src = fd;
    l->out = fd;
    l->sp1 = -1;
    snprintf(l->name, sizeof l->name, "%s", name ? name : "<input>");
    while (l->nhead < 6) {
        ssize_t n = read(fd, l->head + l->nhead, 6 - l->nhead);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            kvix_err_set(err, KVIX_EIO, "%s: read error: %s", l->name, strerror(e));
            kvix_logio_close(l, NULL);
            return KVIX_EIO;
        }
        l->nhead += (size_t)n;
    }
    l->comp = detect(l->head, l->nhead);
    struct stat st;
    l->seekable = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (l->comp == KVIX_COMP_NONE && l->seekable && lseek(fd, 0, SEEK_SET) == 0) {
        *out = l;
        return KVIX_OK;
    }
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
        int e = errno;
        kvix_logio_close(l, NULL);
        return kvix_err_set(err, KVIX_ESYS, "socketpair: %s", strerror(e));
    }
    l->out = sp[0];
    l->sp1 = sp[1];
    /* The consumer only reads: shutting its write side makes the thread's
     * reads of sp1 impossible to confuse with data. */
    shutdown(sp[0], SHUT_WR);
    int e = pthread_create(&l->th, NULL, thread_main, l);
    if (e) {
        kvix_logio_close(l, NULL);
        return kvix_err_set(err, KVIX_ESYS, "cannot start a decompression thread: %s",
                            strerror(e));
    }
    l->has_thread = 1;
    *out = l;
    return KVIX_OK;
}

int kvix_logio_fd(const kvix_logio *l)
{
    return l->out;
}

kvix_compression kvix_logio_compression(const kvix_logio *l)
{
    return l->comp;
}

const char *kvix_compression_name(kvix_compression c)
{
    switch (c) {
    case KVIX_COMP_NONE: return "none";
    case KVIX_COMP_GZIP: return "gzip";
    case KVIX_COMP_XZ: return "xz";
    case KVIX_COMP_ZSTD: return "zstd";
    }
    return "?";
}

int kvix_logio_close(kvix_logio *l, kvix_err *err)
{
    if (!l)
        return KVIX_OK;
    if (l->out != l->src && l->out >= 0)
        close(l->out); /* a thread still writing now gets EPIPE and stops */
    if (l->has_thread)
        pthread_join(l->th, NULL);
    else if (l->sp1 >= 0)
        close(l->sp1);
    if (l->src >= 0)
        close(l->src);
    int rc = l->rc;
    if (rc)
        kvix_err_set(err, rc, "%s", l->e.msg);
    free(l);
    return rc;
}
