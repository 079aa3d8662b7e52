/* Hashing rate of libkvix (kvix_hash_blocks: local + rolling seq hashes) at
 * block sizes 16 and 512, against one XXH3 pass over the same bytes in the
 * same process as the ceiling. Prints markdown table rows:
 *   | what | block size | Mtokens/s | MB/s of token ids | ratio to XXH3 |
 * Each figure is the median of the runs, timed in CPU time of the thread
 * (a shared machine's other work disturbs it far less than wall time).
 *
 *   bench_hash [MTOKENS] [RUNS]     (default 16 Mtokens, 7 runs) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <xxhash.h>

#include "cli.h"
#include "kvix/hash.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static volatile uint64_t sink; /* keeps the hashing from being optimised away */

static const cli_tool tool = {.name = "bench_hash"}; /* messages only */

int main(int argc, char **argv)
{
    cli_init(&tool);
    if (argc > 3) {
        fprintf(stderr, "usage: bench_hash [MTOKENS >= 0.001] [RUNS 1..101]\n");
        return 2;
    }
    size_t ntok = (size_t)(argc > 1 ? cli_parse_double(argv[1], 0.001, 1024, "MTOKENS") : 16) *
                  1000000;
    int runs = argc > 2 ? (int)cli_parse_uint(argv[2], 1, 101, "RUNS") : 7;
    uint32_t *tok = malloc(ntok * sizeof *tok);
    uint64_t *local = malloc((ntok / 16 + 1) * sizeof *local);
    uint64_t *seq = malloc((ntok / 16 + 1) * sizeof *seq);
    double *t = malloc((size_t)runs * sizeof *t);
    if (!tok || !local || !seq || !t) {
        fprintf(stderr, "bench_hash: out of memory\n");
        return 6;
    }
    uint64_t x = 88172645463325252u;
    for (size_t i = 0; i < ntok; i++) { /* xorshift: a vocabulary of 152064 ids */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (uint32_t)(x % 152064);
    }
    double mb = (double)ntok * 4 / 1e6;

    for (int r = 0; r < runs; r++) {
        double t0 = now();
        sink ^= XXH3_64bits_withSeed(tok, ntok * 4, KVIX_HASH_SEED);
        t[r] = now() - t0;
    }
    double base = median(t, runs);
    printf("| XXH3 over all token bytes, one call (ceiling) | - | %.0f | %.0f | 1.00 |\n",
           (double)ntok / base / 1e6, mb / base);

    static const size_t sizes[] = {16, 512};
    for (int s = 0; s < 2; s++) {
        size_t bs = sizes[s];
        for (int r = 0; r < runs; r++) {
            double t0 = now();
            size_t nb = kvix_hash_blocks(tok, ntok, bs, KVIX_HASH_SEED, local, seq);
            sink ^= seq[nb - 1];
            t[r] = now() - t0;
        }
        double m = median(t, runs);
        printf("| kvix_hash_blocks (local + seq) | %zu | %.0f | %.0f | %.2f |\n", bs,
               (double)ntok / m / 1e6, mb / m, base / m);
    }
    free(tok);
    free(local);
    free(seq);
    free(t);
    return 0;
}
