/* kvix_logio, the compressed-input layer under kvreplay and the Mooncake
 * trace reader: xz, gzip and zstd told by magic from files and pipes,
 * concatenated members, damage reported at close, and a consumer that stops
 * early never leaves the decompressing thread blocked. */
#include <lzma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "harness.h"
#include "logio.h"
#include "mooncake.h"

static unsigned char *sample(size_t n)
{
    unsigned char *p = malloc(n);
    uint64_t s = 99;
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)('a' + kvix_splitmix64(&s) % 4 + (i % 77 == 0 ? 0 : 0));
    for (size_t i = 63; i < n; i += 64)
        p[i] = '\n';
    return p;
}

static size_t xz_encode(const unsigned char *in, size_t n, unsigned char *out, size_t cap)
{
    size_t pos = 0;
    CHECK(lzma_easy_buffer_encode(1, LZMA_CHECK_CRC64, NULL, in, n, out, &pos, cap) == LZMA_OK);
    return pos;
}

static size_t gz_encode(const unsigned char *in, size_t n, unsigned char *out, size_t cap)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    CHECK(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    z.next_in = (unsigned char *)in;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
    size_t len = cap - z.avail_out;
    deflateEnd(&z);
    return len;
}

static size_t zst_encode(const unsigned char *in, size_t n, unsigned char *out, size_t cap)
{
    size_t len = ZSTD_compress(out, cap, in, n, 3);
    CHECK(!ZSTD_isError(len));
    return len;
}

/* Feed bytes into a pipe from a child process; returns the read end. */
static int pipe_of(const unsigned char *p, size_t n, pid_t *pid)
{
    int fd[2];
    CHECK(pipe(fd) == 0);
    *pid = fork();
    if (*pid == 0) {
        close(fd[0]);
        while (n) {
            ssize_t w = write(fd[1], p, n);
            if (w <= 0)
                _exit(1);
            p += w;
            n -= (size_t)w;
        }
        _exit(0);
    }
    close(fd[1]);
    return fd[0];
}

static int file_of(const unsigned char *p, size_t n)
{
    char path[] = "/tmp/kvix-logio.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    CHECK(write(fd, p, n) == (ssize_t)n);
    lseek(fd, 0, SEEK_SET);
    return fd;
}

/* Read everything from a logio; returns the bytes (malloc'd), *n their count. */
static unsigned char *drain(kvix_logio *l, size_t *n)
{
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (len == cap)
            buf = realloc(buf, cap *= 2);
        ssize_t r = read(kvix_logio_fd(l), buf + len, cap - len);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    *n = len;
    return buf;
}

static void roundtrip(const char *what, const unsigned char *data, size_t n,
                      const unsigned char *enc, size_t elen, kvix_compression want, int use_pipe)
{
    pid_t pid = 0;
    int fd = use_pipe ? pipe_of(enc, elen, &pid) : file_of(enc, elen);
    kvix_logio *l;
    kvix_err err;
    CHECK(kvix_logio_open(&l, fd, what, &err) == KVIX_OK);
    CHECK(kvix_logio_compression(l) == want);
    size_t got;
    unsigned char *out = drain(l, &got);
    CHECK_U64(got, n);
    if (got == n && memcmp(out, data, n) != 0)
        CHECK(!"decompressed bytes differ");
    CHECK(kvix_logio_close(l, &err) == KVIX_OK);
    free(out);
    if (pid)
        waitpid(pid, NULL, 0);
}

TEST(formats_from_files_and_pipes)
{
    size_t n = 300000, cap = 2 * n + 1024;
    unsigned char *data = sample(n), *enc = malloc(cap);
    for (int use_pipe = 0; use_pipe < 2; use_pipe++) {
        roundtrip("plain", data, n, data, n, KVIX_COMP_NONE, use_pipe);
        roundtrip("xz", data, n, enc, xz_encode(data, n, enc, cap), KVIX_COMP_XZ, use_pipe);
        roundtrip("gzip", data, n, enc, gz_encode(data, n, enc, cap), KVIX_COMP_GZIP, use_pipe);
        roundtrip("zstd", data, n, enc, zst_encode(data, n, enc, cap), KVIX_COMP_ZSTD, use_pipe);
    }
    roundtrip("empty", data, 0, data, 0, KVIX_COMP_NONE, 1);
    roundtrip("tiny", data, 3, data, 3, KVIX_COMP_NONE, 1);
    CHECK_STR(kvix_compression_name(KVIX_COMP_ZSTD), "zstd");
    free(data);
    free(enc);
}

TEST(concatenated_members)
{
    size_t n = 5000, cap = 3 * n + 1024;
    unsigned char *data = sample(2 * n), *enc = malloc(cap);
    size_t a = gz_encode(data, n, enc, cap);
    size_t b = gz_encode(data + n, n, enc + a, cap - a);
    roundtrip("gzip x2", data, 2 * n, enc, a + b, KVIX_COMP_GZIP, 1);
    a = xz_encode(data, n, enc, cap);
    b = xz_encode(data + n, n, enc + a, cap - a);
    roundtrip("xz x2", data, 2 * n, enc, a + b, KVIX_COMP_XZ, 0);
    a = zst_encode(data, n, enc, cap);
    b = zst_encode(data + n, n, enc + a, cap - a);
    roundtrip("zstd x2", data, 2 * n, enc, a + b, KVIX_COMP_ZSTD, 1);
    free(data);
    free(enc);
}

static void damaged(size_t (*encode)(const unsigned char *, size_t, unsigned char *, size_t),
                    const char *name, const char *want_msg, int corrupt)
{
    size_t n = 200000, cap = 2 * n + 1024;
    unsigned char *data = sample(n), *enc = malloc(cap);
    size_t len = encode(data, n, enc, cap);
    if (corrupt)
        memset(enc + len / 2, 0x55, 64);
    else
        len = len * 2 / 3;
    pid_t pid;
    int fd = pipe_of(enc, len, &pid);
    kvix_logio *l;
    kvix_err err;
    CHECK(kvix_logio_open(&l, fd, name, &err) == KVIX_OK);
    size_t got;
    free(drain(l, &got));
    CHECK_U64(got, 0); /* nothing of an unchecked block comes out */
    int rc = kvix_logio_close(l, &err);
    CHECK(rc == KVIX_ECORRUPT);
    if (rc)
        CHECK(strstr(err.msg, want_msg) != NULL);
    if (rc)
        CHECK(strncmp(err.msg, name, strlen(name)) == 0);
    waitpid(pid, NULL, 0);
    free(data);
    free(enc);
}

TEST(damage_is_reported_at_close)
{
    damaged(xz_encode, "t.xz", "truncated xz data", 0);
    damaged(gz_encode, "t.gz", "truncated gzip data", 0);
    damaged(zst_encode, "t.zst", "truncated zstd data", 0);
    damaged(xz_encode, "c.xz", "corrupt xz data", 1);
    damaged(gz_encode, "c.gz", "corrupt gzip data", 1);
    damaged(zst_encode, "c.zst", "corrupt zstd data", 1);
}

/* Past the 64 MiB held back, a regular file is checked whole before a byte
 * comes out, then decoded again: damage found only by the frame's checksum
 * at the very end still lets nothing through, and a sound file comes whole. */
TEST(big_file_is_checked_before_use)
{
    size_t n = 80u << 20, cap = 1u << 20;
    unsigned char *zeros = calloc(1, n), *enc = malloc(cap);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    size_t len = ZSTD_compress2(cc, enc, cap, zeros, n);
    CHECK(!ZSTD_isError(len));
    ZSTD_freeCCtx(cc);
    for (int bad = 0; bad < 2; bad++) {
        if (bad)
            enc[len - 1] ^= 0x55; /* the content checksum */
        kvix_logio *l;
        kvix_err err;
        CHECK(kvix_logio_open(&l, file_of(enc, len), "big.zst", &err) == KVIX_OK);
        size_t got;
        unsigned char *b = drain(l, &got);
        int rc = kvix_logio_close(l, &err);
        if (bad) {
            CHECK_U64(got, 0);
            CHECK(rc == KVIX_ECORRUPT && strstr(err.msg, "nothing of the damaged data"));
        } else {
            CHECK_U64(got, n);
            CHECK(rc == KVIX_OK);
            CHECK(b && memcmp(b, zeros, n) == 0);
        }
        free(b);
    }
    free(zeros);
    free(enc);
}

/* A pipe cannot be read twice: past the 64 MiB held back, a stream is
 * passed on as it is decoded, whole and in order (a compressed log is a
 * stream; only the records' own ceilings apply to what comes out). Damage
 * found after that is still an error at close, which then does not claim
 * that nothing of the stream came out. */
TEST(big_stream_on_a_pipe_is_read_whole)
{
    size_t n = 80u << 20, cap = 1u << 20;
    unsigned char *data = malloc(n), *enc = malloc(cap);
    for (size_t i = 0; i < n; i++) /* not all zeros: order matters */
        data[i] = (unsigned char)(i / 4096);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    size_t len = ZSTD_compress2(cc, enc, cap, data, n);
    ZSTD_freeCCtx(cc);
    if (!CHECK(!ZSTD_isError(len) && len < 60000)) /* fits a pipe's buffer */
        return;
    for (int bad = 0; bad < 2; bad++) {
        if (bad)
            enc[len - 1] ^= 0x55; /* the content checksum, checked at the very end */
        int p[2];
        CHECK(pipe(p) == 0);
        CHECK(write(p[1], enc, len) == (ssize_t)len);
        close(p[1]);
        kvix_logio *l;
        kvix_err err;
        CHECK(kvix_logio_open(&l, p[0], "big pipe", &err) == KVIX_OK);
        size_t got;
        unsigned char *b = drain(l, &got);
        int rc = kvix_logio_close(l, &err);
        /* sound: every byte; damaged: what was decoded before the damage
         * was found (past the 64 MiB held, a prefix), never the output of
         * the failing step */
        CHECK(b && got <= n && memcmp(b, data, got) == 0);
        if (bad) {
            CHECK(got > (64u << 20) && got < n);
            CHECK(rc == KVIX_ECORRUPT && strstr(err.msg, "big pipe: corrupt zstd data") &&
                  !strstr(err.msg, "nothing of the damaged data"));
        } else {
            CHECK_U64(got, n);
            CHECK(rc == KVIX_OK);
        }
        free(b);
    }
    free(data);
    free(enc);
}

TEST(early_stop_never_blocks)
{
    /* 64 MiB of zeros compress to little: the thread has far more to write
     * than the socket holds when the consumer stops after one read. */
    size_t n = 64u << 20, cap = 1u << 20;
    unsigned char *zeros = calloc(1, n), *enc = malloc(cap);
    size_t len = zst_encode(zeros, n, enc, cap);
    int fd = file_of(enc, len);
    kvix_logio *l;
    CHECK(kvix_logio_open(&l, fd, "zeros.zst", NULL) == KVIX_OK);
    unsigned char buf[1024];
    CHECK(read(kvix_logio_fd(l), buf, sizeof buf) > 0);
    CHECK(kvix_logio_close(l, NULL) == KVIX_OK); /* an early stop is not an error */

    /* A pipe whose writer stays open and silent: the thread waits in poll,
     * and closing must still end it. */
    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(write(p[1], "{\"a\":1}\n", 8) == 8);
    CHECK(kvix_logio_open(&l, p[0], "quiet pipe", NULL) == KVIX_OK);
    size_t got = 0; /* the detection bytes may come in a read of their own */
    while (got < 8) {
        ssize_t r = read(kvix_logio_fd(l), buf + got, 8 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    CHECK_U64(got, 8);
    CHECK(kvix_logio_close(l, NULL) == KVIX_OK);
    close(p[1]);
    free(zeros);
    free(enc);
}

TEST(mooncake_trace_through_xz)
{
    const char *lines = "{\"timestamp\":0,\"input_length\":1024,\"output_length\":1,\"hash_ids\":[4,5]}\n"
                        "{\"timestamp\":9,\"input_length\":512,\"output_length\":1,\"hash_ids\":[4]}\n";
    unsigned char enc[1024];
    size_t len = xz_encode((const unsigned char *)lines, strlen(lines), enc, sizeof enc);
    pid_t pid;
    kvix_logio *l;
    CHECK(kvix_logio_open(&l, pipe_of(enc, len, &pid), "trace.xz", NULL) == KVIX_OK);
    kvix_mooncake_trace *t;
    CHECK(kvix_mooncake_trace_new(&t, kvix_logio_fd(l), NULL) == KVIX_OK);
    kvix_mooncake_req r;
    kvix_mooncake_req_init(&r);
    CHECK(kvix_mooncake_trace_next(t, &r, NULL) == KVIX_OK);
    CHECK_U64(r.nids, 2);
    CHECK(kvix_mooncake_trace_next(t, &r, NULL) == KVIX_OK);
    CHECK_U64(r.timestamp_ms, 9);
    CHECK(kvix_mooncake_trace_next(t, &r, NULL) == KVIX_EOF);
    kvix_mooncake_req_release(&r);
    kvix_mooncake_trace_free(t);
    CHECK(kvix_logio_close(l, NULL) == KVIX_OK);
    waitpid(pid, NULL, 0);
}
