/* Test-only allocation failure (tests/cli/failalloc.t): linked into a copy of
 * a tool with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc, so every
 * allocation kvix's own code makes (the tool and libkvix; not libc's or the
 * dependencies' internal ones) passes through here. Never part of the
 * library or of an installed tool.
 *
 *   KVIX_FAILALLOC_N=N       the N-th allocation (from 1) fails, once
 *   KVIX_FAILALLOC_REPORT=1  print "failalloc: COUNT allocations" on stderr at exit
 *   KVIX_FAILALLOC_TRACE=1   print the failing call's stack on stderr (backtrace) */
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);

static unsigned long long seen, fail_at;
static int configured;

static void report(void)
{
    char line[64];
    int len = snprintf(line, sizeof line, "failalloc: %llu allocations\n", seen);
    if (len > 0)
        (void)!write(2, line, (size_t)len);
}

static int failing(void)
{
    if (!configured) {
        configured = 1;
        const char *n = getenv("KVIX_FAILALLOC_N");
        fail_at = n ? strtoull(n, NULL, 10) : 0;
        const char *r = getenv("KVIX_FAILALLOC_REPORT");
        if (r && *r == '1')
            atexit(report);
    }
    if (++seen != fail_at)
        return 0;
    const char *t = getenv("KVIX_FAILALLOC_TRACE");
    if (t && *t == '1') {
        void *frames[32];
        backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    }
    return 1;
}

void *__wrap_malloc(size_t n)
{
    return failing() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n)
{
    return failing() ? NULL : __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n)
{
    return failing() ? NULL : __real_realloc(p, n);
}
