#define _GNU_SOURCE
#include "harness.h"

#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define TH_MAX 512

static struct { const char *name; th_fn fn; } tests[TH_MAX];
static int ntests, cur_failed;

void th_register(const char *name, th_fn fn)
{
    if (ntests == TH_MAX) {
        fprintf(stderr, "harness: more than %d tests in one binary\n", TH_MAX);
        abort();
    }
    tests[ntests].name = name;
    tests[ntests].fn = fn;
    ntests++;
}

int th_check(int ok, const char *expr, const char *file, int line)
{
    if (!ok) {
        if (cur_failed++ < 10)
            printf("#   %s:%d: CHECK(%s) failed\n", file, line, expr);
    }
    return ok;
}

int th_check_u64(uint64_t a, uint64_t b, const char *ea, const char *eb, const char *file,
                 int line)
{
    if (a != b && cur_failed++ < 10)
        printf("#   %s:%d: %s == %s: %" PRIu64 " != %" PRIu64 "\n", file, line, ea, eb, a, b);
    return a == b;
}

int th_check_str(const char *a, const char *b, const char *ea, const char *eb,
                 const char *file, int line)
{
    int ok = a && b && strcmp(a, b) == 0;
    if (!ok && cur_failed++ < 10)
        printf("#   %s:%d: %s == %s: \"%s\" != \"%s\"\n", file, line, ea, eb, a ? a : "(null)",
               b ? b : "(null)");
    return ok;
}

uint64_t th_seed(void)
{
    const char *s = getenv("KVIX_TEST_SEED");
    return s ? strtoull(s, NULL, 0) : UINT64_C(0x6b766978);
}

uint64_t th_splitmix(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

double th_scale(void)
{
    const char *s = getenv("KVIX_TEST_SCALE");
    double v = s ? strtod(s, NULL) : 1.0;
    return v > 0 ? v : 1.0;
}

const char *th_fixture_dir(void)
{
    static char dir[PATH_MAX + 32];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return "tests/fixtures";
    exe[n] = '\0';
    for (char *slash; (slash = strrchr(exe, '/')) && slash != exe;) {
        *slash = '\0';
        char probe[PATH_MAX + 32];
        snprintf(probe, sizeof probe, "%s/include/kvix/error.h", exe);
        if (access(probe, R_OK) == 0) {
            snprintf(dir, sizeof dir, "%s/tests/fixtures", exe);
            return dir;
        }
    }
    return "tests/fixtures";
}

static char scratch[PATH_MAX];

const char *th_dir(void)
{
    if (!scratch[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(scratch, sizeof scratch, "%s/kvix-unit.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(scratch)) {
            perror("harness: mkdtemp");
            abort();
        }
    }
    return scratch;
}

const char *th_path(const char *name)
{
    static __thread char p[4][PATH_MAX];
    static __thread int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", th_dir(), name);
    return p[k];
}

static int drop_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0;
    for (int i = 0; i < ntests; i++) {
        if (argc > 1 && !strstr(tests[i].name, argv[1]))
            continue;
        cur_failed = 0;
        tests[i].fn();
        if (cur_failed) {
            printf("not ok - %s (%d failed checks; seed %" PRIu64 ")\n", tests[i].name,
                   cur_failed, th_seed());
            failed++;
        } else {
            printf("ok - %s\n", tests[i].name);
            passed++;
        }
        fflush(stdout);
    }
    if (scratch[0] && !failed)
        nftw(scratch, drop_one, 16, FTW_DEPTH | FTW_PHYS);
    else if (scratch[0])
        printf("# scratch kept: %s\n", scratch);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
