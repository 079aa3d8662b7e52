/* kvix unit-test harness: a table of named test functions, filled at start-up.
 * Each TEST is one counted test; CHECK records a failure and goes on, so one
 * run reports every broken assertion. */
#ifndef KVIX_TEST_HARNESS_H
#define KVIX_TEST_HARNESS_H

#include <inttypes.h>
#include <stdint.h>
#include <string.h>

typedef void (*th_fn)(void);
void th_register(const char *name, th_fn fn);
int th_check(int ok, const char *expr, const char *file, int line);
int th_check_u64(uint64_t a, uint64_t b, const char *ea, const char *eb, const char *file,
                 int line);
int th_check_str(const char *a, const char *b, const char *ea, const char *eb,
                 const char *file, int line);
/* A seed for randomized tests: KVIX_TEST_SEED if set, else fixed. Printed on failure. */
uint64_t th_seed(void);
/* Scale for randomized test sizes (KVIX_TEST_SCALE, default 1.0). */
double th_scale(void);
/* splitmix64: the next number of the generator whose state is *s (the
 * tests' one reproducible generator) */
uint64_t th_splitmix(uint64_t *s);
/* The test binary's scratch folder ($TMPDIR or /tmp, kvix-unit.XXXXXX),
 * made on first use and removed with its contents after the last test when
 * every test passed (kept, and named, when one failed). The string is static. */
const char *th_dir(void);
/* th_dir()/name, in one of four rotating buffers of the calling thread. */
const char *th_path(const char *name);
/* The repository's tests/fixtures directory (found by walking up from the test
 * binary to the directory holding include/kvix), or "tests/fixtures" relative
 * to the working directory when that fails. The string is static. */
const char *th_fixture_dir(void);

#define TEST(name)                                                                      \
    static void name(void);                                                             \
    __attribute__((constructor)) static void th_reg_##name(void) { th_register(#name, name); } \
    static void name(void)

#define CHECK(c) th_check(!!(c), #c, __FILE__, __LINE__)
#define CHECK_U64(a, b) th_check_u64((uint64_t)(a), (uint64_t)(b), #a, #b, __FILE__, __LINE__)
#define CHECK_STR(a, b) th_check_str((a), (b), #a, #b, __FILE__, __LINE__)

#endif
