/* bench_ingest: the cost of decoding a kvix record stream alone (kvix_reader,
 * no index), as the floor under kvindex's ingest rate.
 *
 *   bench_ingest [-f auto|ndjson|msgpack] [FILE]    (stdin without FILE)
 *
 * Prints one line: records events blocks hashes bytes wall_seconds cpu_seconds. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kvix/stream.h"

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
    kvix_format fmt = KVIX_FMT_AUTO;
    int i = 1;
    if (i + 1 < argc && strcmp(argv[i], "-f") == 0) {
        if (kvix_format_parse(argv[i + 1], &fmt)) {
            fprintf(stderr, "bench_ingest: bad format %s\n", argv[i + 1]);
            return 2;
        }
        i += 2;
    }
    int fd = 0;
    const char *name = "<stdin>";
    if (i < argc) {
        name = argv[i];
        fd = open(name, O_RDONLY);
        if (fd < 0) {
            perror(name);
            return 3;
        }
    }
    kvix_reader *r;
    kvix_err err;
    if (kvix_reader_new(&r, fd, name, fmt, &err)) {
        fprintf(stderr, "bench_ingest: %s\n", err.msg);
        return 6;
    }
    kvix_event ev;
    kvix_event_init(&ev);
    uint64_t records = 0, events = 0, blocks = 0, hashes = 0, bad = 0;
    double w0 = wall(), c0 = cpu();
    int rc;
    while ((rc = kvix_reader_next(r, &ev, &err)) != KVIX_EOF) {
        if (rc == KVIX_EIO) {
            fprintf(stderr, "bench_ingest: %s\n", err.msg);
            return 3;
        }
        records++;
        if (rc) {
            bad++;
            continue;
        }
        if (ev.type != KVIX_EV_QUERY)
            events++;
        blocks += ev.nblocks;
        hashes += ev.nhashes;
    }
    double w1 = wall(), c1 = cpu();
    printf("%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %.6f %.6f\n", records,
           events, blocks, hashes, kvix_reader_offset(r), w1 - w0, c1 - c0);
    if (bad)
        fprintf(stderr, "bench_ingest: %" PRIu64 " records rejected\n", bad);
    kvix_reader_free(r);
    kvix_event_release(&ev);
    return 0;
}
