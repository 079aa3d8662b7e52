/* kvbench: messages, allocation, clocks, the latency histogram. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "kvbench.h"

/* ------------------------------------------------------------------ utils */

int g_tty;
double g_load[2]; /* 1-minute load average at the start and at the end */
int g_perf_fd = -1; /* perf record --control fd: profile only the replays */
uint32_t g_top;      /* --top */
uint32_t g_removals = KVIX_INDEX_REMOVALS; /* --removals */

void perf_ctl(const char *cmd)
{
    if (g_perf_fd >= 0 && write(g_perf_fd, cmd, strlen(cmd)) < 0)
        g_perf_fd = -1;
}

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", PROG);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

void warnx_(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (g_tty)
        fputs("\r\033[K", stderr);
    fprintf(stderr, "%s: ", PROG);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void progress(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (g_tty) {
        fputs("\r\033[K" PROG ": ", stderr);
        vfprintf(stderr, fmt, ap);
    }
    va_end(ap);
}

void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p)
        die("out of memory");
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        die("out of memory");
    return p;
}

double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double now_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double median(const double *v, int n)
{
    if (n <= 0)
        return 0;
    double t[MAX_RUNS];
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

long rss_now_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

double loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

long rss_peak_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* ------------------------------------------------------ latency histogram */

static uint64_t hist_low(unsigned i)
{
    if (i < H_LIN)
        return i;
    unsigned e = (i - H_LIN) / H_SUB + 7, s = (i - H_LIN) % H_SUB;
    return ((uint64_t)1 << e) + ((uint64_t)s << (e - 6));
}

void hist_merge(hist *dst, const hist *src)
{
    for (unsigned i = 0; i < H_BUCKETS; i++)
        dst->b[i] += src->b[i];
    dst->n += src->n;
    if (src->max > dst->max)
        dst->max = src->max;
}

/* The value below which a fraction q of samples fall: the midpoint of its
 * bucket (exact below 128 ns). */
double hist_quantile(const hist *h, double q)
{
    if (!h->n)
        return 0;
    uint64_t rank = (uint64_t)ceil(q * (double)h->n);
    if (rank < 1)
        rank = 1;
    uint64_t c = 0;
    for (unsigned i = 0; i < H_BUCKETS; i++) {
        c += h->b[i];
        if (c >= rank) {
            if (i < H_LIN)
                return (double)i;
            double lo = (double)hist_low(i), hi = (double)hist_low(i + 1);
            double mid = (lo + hi) / 2;
            return mid > (double)h->max ? (double)h->max : mid;
        }
    }
    return (double)h->max;
}
