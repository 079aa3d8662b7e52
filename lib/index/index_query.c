/* Queries: the partition, the query's canonical chain (hashed lazily, no
 * deeper than any stored block), the backend's hits, and the answer (scores
 * mapped from slots and sorted). */
#include <stdlib.h>
#include <string.h>

#include "index_front_int.h"

static int scratch_reserve(kvix_answer *ans, size_t n, kvix_err *err)
{
    if (n <= ans->scratch_cap)
        return KVIX_OK;
    size_t cap = ans->scratch_cap ? ans->scratch_cap : 64;
    while (cap < n)
        cap *= 2;
    uint64_t *v = realloc(ans->scratch, cap * sizeof *v);
    if (!v)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for a query of %zu blocks", n);
    ans->scratch = v;
    ans->scratch_cap = cap;
    return KVIX_OK;
}

/* The answer order: blocks descending, then worker, then dp ascending. */
static inline int score_before(const kvix_score *x, const kvix_score *y)
{
    if (x->blocks != y->blocks)
        return x->blocks > y->blocks;
    if (x->worker != y->worker)
        return x->worker < y->worker;
    return x->dp < y->dp;
}

/* Answers often score every worker (every conversation shares the system
 * prompt's first block), and glibc's qsort calls its comparator through a
 * pointer n log n times: that was 68% of a Mooncake replay's instructions.
 * Long answers get a stable LSD radix sort on the key (dp, worker, ~blocks)
 * that skips every key byte equal across the answer (the OR and AND of each
 * field, gathered while the scores are built): worker ids below 2^16, dp 0
 * and short matches need 2 or 3 passes. The passes go back and forth
 * between the two halves of the buffer: the answer is left in whichever
 * half the last pass wrote, never copied back. */
#define RADIX_MIN 32

typedef struct keybits {
    uint64_t or_[3], and_[3]; /* dp, worker, ~blocks */
} keybits;

static inline uint64_t key_field(const kvix_score *x, unsigned field)
{
    return field == 0   ? (uint64_t)x->dp
           : field == 1 ? x->worker
                        : (uint64_t)(uint32_t)~x->blocks;
}

static void insertion_sort_scores(kvix_score *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        kvix_score x = v[i];
        size_t j = i;
        while (j > 0 && score_before(&x, &v[j - 1])) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

/* A counting sort's byte counts become each byte's first place. */
static inline void counts_to_starts(uint32_t c[256])
{
    uint32_t sum = 0;
    for (unsigned b = 0; b < 256; b++) {
        uint32_t x = c[b];
        c[b] = sum;
        sum += x;
    }
}

/* One stable pass on key byte (field f, shift sh) from src to dst; f is a
 * constant in each caller below, so the key's choice leaves the loops. */
static inline __attribute__((always_inline)) void
radix_pass_f(const kvix_score *src, kvix_score *dst, size_t n, const unsigned f, unsigned sh)
{
    uint32_t c[256] = {0};
    for (size_t i = 0; i < n; i++)
        c[(key_field(&src[i], f) >> sh) & 0xff]++;
    counts_to_starts(c);
    for (size_t i = 0; i < n; i++)
        dst[c[(key_field(&src[i], f) >> sh) & 0xff]++] = src[i];
}

static void radix_pass(const kvix_score *src, kvix_score *dst, size_t n, unsigned f, unsigned sh)
{
    switch (f) {
    case 0:
        radix_pass_f(src, dst, n, 0, sh);
        break;
    case 1:
        radix_pass_f(src, dst, n, 1, sh);
        break;
    default:
        radix_pass_f(src, dst, n, 2, sh);
        break;
    }
}

/* Sort v[0..n) (tmp: room for n more); returns v or tmp, whichever holds the
 * sorted scores. */
static kvix_score *sort_scores(kvix_score *v, kvix_score *tmp, size_t n, const keybits *kb)
{
    if (n < RADIX_MIN) {
        insertion_sort_scores(v, n);
        return v;
    }
    static const unsigned bytes[3] = {4, 8, 4};
    kvix_score *src = v, *dst = tmp;
    for (unsigned f = 0; f < 3; f++)
        for (unsigned b = 0; b < bytes[f]; b++)
            if (((kb->or_[f] ^ kb->and_[f]) >> (8 * b)) & 0xff) {
                radix_pass(src, dst, n, f, 8 * b);
                kvix_score *t = src;
                src = dst;
                dst = t;
            }
    return src;
}

/* Backends report their hits in runs of equal match length (the positional
 * one: one run per drop position; most of an answer drops at one). When the
 * hits come in few runs, each of a different length, the answer is the runs
 * in descending length, each ordered by (worker, dp), and nothing sorts by
 * length. A long run is filed by its slots' ranks (the partition's dense
 * numbering in (worker, dp) order, lib/index/index_part.c): one bit per rank in a
 * bitmap, read in order, writes each score once, straight into its place,
 * however sparse the worker ids. Slots registered since the last ranking
 * (few) are sorted apart and merged in. When the ranks moved meanwhile, or
 * too many slots are unranked, the run is read into entries (the hit and
 * its slot's record) and sorted by worker id: one counting pass when only
 * the ids' low byte differs, else the LSD sort above; a short run by
 * insertion. More runs than RUNS_MAX, or one length in two runs: the whole
 * answer goes through the LSD sort. */
#define RUNS_MAX 32
#define EXTRAS_MAX 64 /* unranked slots a run sorts apart */

typedef struct hrun {
    size_t first, n; /* the run's hits: slot[first .. first + n) */
    uint32_t blocks;
} hrun;

typedef struct qent {
    const srec *r;
    size_t hit;
} qent;

/* A query's view of its partition's ranking (loaded once) and the scratch
 * its runs are filed in. */
typedef struct rankview {
    const part *p;
    uint32_t seq, n; /* ranks below n; seq: rank_seq when loaded (even) */
    uint64_t *bits;  /* a bit per rank, all clear between runs */
    const srec **at; /* the record filed under each rank */
    uint32_t *ah;    /* its hit (for tier rows) */
    uint32_t unranked; /* hits of unranked slots merged */
} rankview;

static inline void score_set(kvix_score *s, const srec *r, const uint32_t *tier, uint32_t blocks)
{
    s->worker = __atomic_load_n(&r->worker, __ATOMIC_RELAXED);
    s->dp = __atomic_load_n(&r->dp, __ATOMIC_RELAXED);
    s->blocks = blocks;
    s->held = __atomic_load_n(&r->held, __ATOMIC_RELAXED);
    memcpy(s->tier_blocks, tier, sizeof s->tier_blocks);
}

/* Hit i's per-tier counts: its row, or gpu (all its blocks on gpu) when the
 * backend counted none; tiered is a constant where it is inlined. */
static inline const uint32_t *hit_tier(const kvix_qhits *hs, size_t i, const uint32_t *gpu,
                                       const int tiered)
{
    return tiered ? hs->tier[i] : gpu;
}

static inline int rec_after(const kvix_score *s, uint64_t worker, uint32_t dp)
{
    return s->worker != worker ? s->worker > worker : s->dp > dp;
}

/* Write run r's scores (mapped through sm; hits of gone slots skipped) into
 * v in (worker, dp) order; e: scratch for as many entries as the run has
 * hits, tmp: for as many scores (they may overlap: e is read before tmp is
 * written). Returns how many. */
static inline __attribute__((always_inline)) size_t
emit_run_t(const hrun *r, const kvix_qhits *hs, slotmap sm, kvix_score *v, qent *e,
           kvix_score *tmp, const int tiered)
{
    uint32_t gpu[KVIX_MEDIUM_COUNT] = {0};
    gpu[KVIX_MEDIUM_GPU] = r->blocks;
    size_t n = 0;
    if (r->n < RADIX_MIN) {
        for (size_t i = r->first; i < r->first + r->n; i++) {
            const srec *x = slotmap_rec(sm, hs->slot[i]);
            if (x)
                score_set(&v[n++], x, hit_tier(hs, i, gpu, tiered), r->blocks);
        }
        insertion_sort_scores(v, n);
        return n;
    }
    uint32_t c[256] = {0};
    uint64_t or_dp = 0, and_dp = ~UINT64_C(0), or_w = 0, and_w = ~UINT64_C(0);
    for (size_t i = r->first; i < r->first + r->n; i++) {
        const srec *x = slotmap_rec(sm, hs->slot[i]);
        if (!x)
            continue;
        uint64_t wk = x->worker, dp = x->dp;
        e[n++] = (qent){x, i};
        c[wk & 0xff]++;
        or_dp |= dp;
        and_dp &= dp;
        or_w |= wk;
        and_w &= wk;
    }
    if (or_dp == and_dp && ((or_w ^ and_w) >> 8) == 0) {
        counts_to_starts(c);
        for (size_t i = 0; i < n; i++)
            score_set(&v[c[e[i].r->worker & 0xff]++], e[i].r, hit_tier(hs, e[i].hit, gpu, tiered),
                      r->blocks);
        return n;
    }
    for (size_t i = 0; i < n; i++)
        score_set(&v[i], e[i].r, hit_tier(hs, e[i].hit, gpu, tiered), r->blocks);
    uint64_t nb = (uint32_t)~r->blocks;
    keybits kb = {{or_dp, or_w, nb}, {and_dp, and_w, nb}};
    kvix_score *s = sort_scores(v, tmp, n, &kb);
    if (s != v)
        memcpy(v, s, n * sizeof *v);
    return n;
}

/* v[0..n) in (worker, dp) order gains the unranked ex[0..ne) (sorted here
 * by insertion: few), from the last: each finds its place by bisection and
 * the scores after it move up at once. */
static inline __attribute__((always_inline)) void
merge_unranked(kvix_score *v, size_t n, qent *ex, size_t ne, const kvix_qhits *hs,
               const uint32_t *gpu, uint32_t blocks, const int tiered)
{
    for (size_t i = 1; i < ne; i++) {
        qent x = ex[i];
        uint64_t xw = x.r->worker;
        uint32_t xd = x.r->dp;
        size_t j = i;
        for (; j > 0; j--) {
            uint64_t yw = ex[j - 1].r->worker;
            if (yw < xw || (yw == xw && ex[j - 1].r->dp <= xd))
                break;
            ex[j] = ex[j - 1];
        }
        ex[j] = x;
    }
    size_t i = n, o = n + ne;
    while (ne > 0) {
        const qent *x = &ex[--ne];
        uint64_t xw = x->r->worker;
        uint32_t xd = x->r->dp;
        size_t lo = 0, hi = i; /* the first of v[0..i) after x */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (rec_after(&v[mid], xw, xd))
                hi = mid;
            else
                lo = mid + 1;
        }
        o -= i - lo;
        memmove(&v[o], &v[lo], (i - lo) * sizeof *v);
        i = lo;
        score_set(&v[--o], x->r, hit_tier(hs, x->hit, gpu, tiered), blocks);
    }
}

/* Run r's scores written once each, in (worker, dp) order, filed by their
 * slots' ranks (see above): no comparison, no count, no prefix sum. What
 * the filing cannot trust is checked once at the end: the ranks moved (the
 * rank_seq window), or two hits under one rank (fewer scores than filed).
 * Returns how many, or SIZE_MAX when the run must be sorted instead
 * (nothing useful written; the bitmap is left clear either way). */
static inline __attribute__((always_inline)) size_t
emit_run_rank(const hrun *r, const kvix_qhits *hs, slotmap sm, kvix_score *v, qent *ex,
              rankview *rv, const int tiered)
{
    uint64_t *const bits = rv->bits;
    const srec **const at = rv->at;
    const uint32_t nr = rv->n;
    uint32_t or_ = 0, and_ = UINT32_MAX;
    size_t nf = 0, ne = 0;
    const uint32_t *sp = hs->slot + r->first, *const se = sp + r->n;
    for (; sp < se; sp++) {
        const srec *x = slotmap_any(sm, *sp);
        /* acquire (plain loads on x86): a rank a ranking wrote after rv->seq
         * makes the rank_seq below differ (see rank_slots) */
        uint32_t k = __atomic_load_n(&x->rank, __ATOMIC_ACQUIRE);
        if (k >= nr) {
            if (__atomic_load_n(&x->w, __ATOMIC_ACQUIRE))
                ex[ne++] = (qent){x, (size_t)(sp - hs->slot)};
            continue;
        }
        bits[k >> 6] |= UINT64_C(1) << (k & 63);
        at[k] = x;
        if (tiered)
            rv->ah[k] = (uint32_t)(sp - hs->slot);
        or_ |= k;
        and_ &= k;
        nf++;
    }
    int moved = __atomic_load_n(&rv->p->rank_seq, __ATOMIC_RELAXED) != rv->seq;
    uint32_t gpu[KVIX_MEDIUM_COUNT] = {0};
    gpu[KVIX_MEDIUM_GPU] = r->blocks;
    size_t n = 0;
    /* the AND and OR of the filed ranks bound their words (the OR may pass
     * the last rank: its bits, not its value, are the ranks') */
    const uint32_t hi = (or_ < nr ? or_ : nr - 1) >> 6;
    for (uint32_t wd = and_ >> 6; nf && wd <= hi; wd++) {
        uint64_t b = bits[wd];
        if (!b)
            continue;
        bits[wd] = 0;
        for (; b; b &= b - 1) {
            uint32_t k = 64 * wd + (uint32_t)__builtin_ctzll(b);
            score_set(&v[n++], at[k], tiered ? hs->tier[rv->ah[k]] : gpu, r->blocks);
        }
    }
    rv->unranked += (uint32_t)ne;
    if (moved || n != nf || ne > EXTRAS_MAX)
        return SIZE_MAX;
    if (ne)
        merge_unranked(v, n, ex, ne, hs, gpu, r->blocks, tiered);
    return n + ne;
}

static size_t emit_run(const hrun *r, const kvix_qhits *hs, slotmap sm, kvix_score *v, qent *e,
                       kvix_score *tmp, rankview *rv)
{
    if (r->n >= RADIX_MIN && rv->bits) {
        size_t n = hs->tier ? emit_run_rank(r, hs, sm, v, e, rv, 1)
                            : emit_run_rank(r, hs, sm, v, e, rv, 0);
        if (n != SIZE_MAX)
            return n;
    }
    return hs->tier ? emit_run_t(r, hs, sm, v, e, tmp, 1) : emit_run_t(r, hs, sm, v, e, tmp, 0);
}

/* The partition's ranking as the query's runs will read it, with the
 * answer's scratch grown to its ranks (bits NULL: ranks are being
 * rewritten, or no memory; the runs are then sorted). */
static rankview rank_view(const part *p, kvix_answer *ans)
{
    rankview rv = {p, 0, 0, NULL, NULL, NULL, 0};
    rv.seq = __atomic_load_n(&p->rank_seq, __ATOMIC_ACQUIRE);
    rv.n = __atomic_load_n(&p->nranked, __ATOMIC_RELAXED);
    if (rv.seq & 1)
        return rv;
    size_t words = (rv.n + 63) / 64;
    if (!words) /* nothing ranked yet: and no scratch (NULL + 0 is undefined) */
        return rv;
    if (words * 64 > ans->rank_cap) {
        size_t cap = 64 * words;
        /* bits, then the filed records, then their hits; calloc: bits start clear */
        void *b = calloc(1, cap / 8 + cap * (sizeof(srec *) + sizeof(uint32_t)));
        if (!b)
            return rv;
        free(ans->rank_buf);
        ans->rank_buf = b;
        ans->rank_cap = cap;
    }
    rv.bits = ans->rank_buf;
    rv.at = (const srec **)(void *)(rv.bits + ans->rank_cap / 64);
    rv.ah = (uint32_t *)(void *)(rv.at + ans->rank_cap);
    return rv;
}

/* The hits' runs with a block, longest first, into runs (RUNS_MAX); 0 when
 * they do not allow the answer by runs (see above). */
static unsigned order_runs(const kvix_qhits *hs, hrun *runs)
{
    unsigned nr = 0;
    for (size_t k = 0; k < hs->nrun; k++) {
        const kvix_qrun *q = &hs->run[k];
        if (!q->blocks)
            continue;
        if (nr == RUNS_MAX)
            return 0;
        hrun x = {q->first, q->n, q->blocks};
        unsigned j = nr++;
        while (j > 0 && runs[j - 1].blocks < x.blocks) {
            runs[j] = runs[j - 1];
            j--;
        }
        runs[j] = x;
    }
    for (unsigned i = 1; i < nr; i++)
        if (runs[i].blocks == runs[i - 1].blocks)
            return 0;
    return nr ? nr : 1; /* no hit with a block: one empty run */
}

/* A top answer's order (kvix/index.h): blocks desc, then the tiers from the
 * fastest, then worker, then dp asc. A total order: a (worker, dp) scores
 * once, so ties fall the same way whatever order the hits came in. */
static inline int rank_before(const kvix_score *x, const kvix_score *y)
{
    if (x->blocks != y->blocks)
        return x->blocks > y->blocks;
    for (int m = 0; m < KVIX_MEDIUM_COUNT; m++)
        if (x->tier_blocks[m] != y->tier_blocks[m])
            return x->tier_blocks[m] > y->tier_blocks[m];
    if (x->worker != y->worker)
        return x->worker < y->worker;
    return x->dp < y->dp;
}

static int rank_cmp(const void *a, const void *b)
{
    return rank_before(a, b) ? -1 : rank_before(b, a) ? 1 : 0;
}

static void rank_sort(kvix_score *v, size_t n)
{
    if (n < RADIX_MIN) {
        for (size_t i = 1; i < n; i++) {
            kvix_score x = v[i];
            size_t j = i;
            for (; j > 0 && rank_before(&x, &v[j - 1]); j--)
                v[j] = v[j - 1];
            v[j] = x;
        }
    } else {
        qsort(v, n, sizeof *v, rank_cmp);
    }
}

/* The heap of a top answer's k best so far: h[0] the one every other ranks
 * before (the first to go when a better one comes). */
static void heap_down(kvix_score *h, size_t n, size_t i)
{
    kvix_score x = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && rank_before(&h[c], &h[c + 1]))
            c++; /* the worse child */
        if (!rank_before(&x, &h[c]))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static void heap_up(kvix_score *h, size_t i)
{
    kvix_score x = h[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!rank_before(&h[p], &x))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static int run_longer(const void *a, const void *b)
{
    uint32_t x = ((const kvix_qrun *)a)->blocks, y = ((const kvix_qrun *)b)->blocks;
    return x > y ? -1 : x < y;
}

/* Up to this k the kept scores stay sorted as they come (an insertion
 * moves a few); past it they are a heap, sorted at the end. */
#define TOP_SORTED 32

/* c joins the best k kept in v[0..*nh): sorted, or a heap (h[0] the worst). */
static inline void top_keep(kvix_score *v, size_t *nh, size_t k, const kvix_score *c)
{
    if (k <= TOP_SORTED) {
        size_t j = *nh < k ? (*nh)++ : k - 1;
        for (; j > 0 && rank_before(c, &v[j - 1]); j--)
            v[j] = v[j - 1];
        v[j] = *c;
    } else if (*nh < k) {
        v[*nh] = *c;
        heap_up(v, (*nh)++);
    } else {
        v[0] = *c;
        heap_down(v, k, 0);
    }
}

/* The best k of the hits into v, in rank order, runs taken longest first (a
 * copy of them sorted in runs, room for hs->nrun): once k are kept and a
 * run is shorter than the worst kept, neither it nor any later run can
 * place a score, and their hits are only counted as omitted, never mapped.
 * A hit that cannot place is told from its record alone (all on gpu: its
 * run's length, worker and dp) without making a score of it. Returns how
 * many are kept; *omitted the rest (a slot released while the query ran is
 * counted with them when its run is not read). */
static size_t top_scores(const kvix_qhits *hs, slotmap sm, size_t k, kvix_score *v,
                         kvix_qrun *runs, size_t *omitted)
{
    size_t nr = 0, nh = 0, left = 0;
    for (size_t i = 0; i < hs->nrun; i++)
        if (hs->run[i].blocks)
            runs[nr++] = hs->run[i];
    if (nr < RADIX_MIN) {
        for (size_t i = 1; i < nr; i++) {
            kvix_qrun x = runs[i];
            size_t j = i;
            for (; j > 0 && runs[j - 1].blocks < x.blocks; j--)
                runs[j] = runs[j - 1];
            runs[j] = x;
        }
    } else {
        qsort(runs, nr, sizeof *runs, run_longer);
    }
    const size_t worst = k <= TOP_SORTED ? k - 1 : 0; /* once full */
    for (size_t ri = 0; ri < nr; ri++) {
        const kvix_qrun *r = &runs[ri];
        if (nh == k && r->blocks < v[worst].blocks) {
            for (; ri < nr; ri++)
                left += runs[ri].n;
            break;
        }
        uint32_t gpu[KVIX_MEDIUM_COUNT] = {0};
        gpu[KVIX_MEDIUM_GPU] = r->blocks;
        size_t i = r->first;
        const size_t end = i + r->n;
        for (; i < end && nh < k; i++) {
            const srec *x = slotmap_rec(sm, hs->slot[i]);
            kvix_score c;
            if (x) {
                score_set(&c, x, hs->tier ? hs->tier[i] : gpu, r->blocks);
                top_keep(v, &nh, k, &c);
            }
        }
        if (hs->tier) {
            for (; i < end; i++) {
                const srec *x = slotmap_rec(sm, hs->slot[i]);
                kvix_score c;
                if (!x)
                    continue;
                left++;
                score_set(&c, x, hs->tier[i], r->blocks);
                if (rank_before(&c, &v[worst]))
                    top_keep(v, &nh, k, &c);
            }
            continue;
        }
        /* All on gpu, and the worst kept as long as this run (the runs
         * before were no shorter, and once k were kept a shorter run would
         * have ended the loop): a hit places when its (worker, dp) comes
         * before the worst's, told from its record without a score. */
        uint64_t ww = v[worst].worker;
        uint32_t wd = v[worst].dp;
        for (; i < end; i++) {
            const srec *x = slotmap_rec(sm, hs->slot[i]);
            if (!x)
                continue;
            left++;
            uint64_t wk = __atomic_load_n(&x->worker, __ATOMIC_RELAXED);
            if (wk > ww || (wk == ww && __atomic_load_n(&x->dp, __ATOMIC_RELAXED) >= wd))
                continue;
            kvix_score c;
            score_set(&c, x, gpu, r->blocks);
            if (k <= TOP_SORTED) { /* among the kept as long, by (worker, dp) */
                size_t j = k - 1;
                for (; j > 0 && v[j - 1].blocks == c.blocks &&
                       (v[j - 1].worker > c.worker ||
                        (v[j - 1].worker == c.worker && v[j - 1].dp > c.dp));
                     j--)
                    v[j] = v[j - 1];
                v[j] = c;
            } else {
                top_keep(v, &nh, k, &c);
            }
            ww = v[worst].worker;
            wd = v[worst].dp;
        }
    }
    if (k > TOP_SORTED)
        rank_sort(v, nh);
    *omitted = left;
    return nh;
}

/* The blocks of an n-block query that can match at all. */
static size_t query_depth(const part *p, size_t n)
{
    uint32_t d = __atomic_load_n(&p->depth, __ATOMIC_ACQUIRE);
    return n < d ? n : d;
}

/* The full answer of the hits into v (its upper half up as scratch). */
static void query_part_full(part *p, const kvix_qhits *hs, slotmap sm, kvix_score *v,
                            kvix_score *up, kvix_answer *ans)
{
    hrun runs[RUNS_MAX];
    unsigned nr = order_runs(hs, runs);
    size_t ns = 0;
    if (nr) {
        rankview rv = rank_view(p, ans);
        for (unsigned i = 0; i < nr; i++)
            ns += emit_run(&runs[i], hs, sm, v + ns, (qent *)(void *)up, up, &rv);
        if (rv.unranked)
            kvix_ix_unranked_seen(p, rv.unranked);
        ans->nscores = ns;
        return;
    }
    keybits kb = {{0, 0, 0}, {~UINT64_C(0), ~UINT64_C(0), ~UINT64_C(0)}};
    for (size_t k = 0; k < hs->nrun; k++) {
        const kvix_qrun *r = &hs->run[k];
        uint32_t gpu[KVIX_MEDIUM_COUNT] = {0};
        gpu[KVIX_MEDIUM_GPU] = r->blocks;
        uint64_t nb = (uint32_t)~r->blocks;
        for (size_t i = r->first; r->blocks && i < (size_t)r->first + r->n; i++) {
            const srec *x = slotmap_rec(sm, hs->slot[i]);
            if (!x)
                continue;
            kvix_score *s = &v[ns++];
            score_set(s, x, hs->tier ? hs->tier[i] : gpu, r->blocks);
            uint64_t dp = s->dp, wk = s->worker;
            kb.or_[0] |= dp;
            kb.and_[0] &= dp;
            kb.or_[1] |= wk;
            kb.and_[1] &= wk;
            kb.or_[2] |= nb;
            kb.and_[2] &= nb;
        }
    }
    ans->nscores = ns;
    ans->scores = ns > 1 ? sort_scores(v, v + ns, ns, &kb) : v;
}

/* n: already cut to query_depth; canon: scratch of n entries; top: ans->top
 * (0: the full answer). */
static int query_part_rcu(part *p, const uint64_t *local, uint64_t *canon, size_t n,
                          kvix_answer *ans, kvix_err *err)
{
    void *be = __atomic_load_n(&p->be, __ATOMIC_ACQUIRE); /* NULL: no (worker, dp) */
    if (!n || !be)
        return KVIX_OK;
    kvix_qchain q = {local, canon, n, 0};
    kvix_qhits hits = {ans->hits,     0, ans->hits_cap, ans->hit_runs,  0,
                       ans->hit_runs_cap, NULL, ans->hit_tiers, ans->hit_tiers_cap};
    int rc = p->ops->query(be, &q, &hits, err);
    ans->hits = hits.slot;
    ans->hits_cap = hits.cap;
    ans->hit_runs = hits.run;
    ans->hit_runs_cap = hits.rcap;
    ans->hit_tiers = hits.tbuf;
    ans->hit_tiers_cap = hits.tcap;
    if (rc || !hits.n)
        return rc;
    /* Twice the scores: the answer in the lower half, entries or the sort's
     * other half in the upper. */
    _Static_assert(sizeof(qent) <= sizeof(kvix_score), "entries fit the upper half");
    if (2 * hits.n > ans->cap) {
        kvix_score *s = realloc(ans->scores_buf, 2 * hits.n * sizeof *s);
        if (!s)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for %zu scores", hits.n);
        ans->scores_buf = s;
        ans->cap = 2 * hits.n;
    }
    kvix_score *v = ans->scores_buf, *up = v + hits.n;
    ans->scores = v;
    slotmap sm = slots_of(p);
    if (ans->top && ans->top < hits.n) {
        _Static_assert(sizeof(kvix_qrun) <= sizeof(kvix_score), "runs fit the upper half");
        ans->nscores = top_scores(&hits, sm, ans->top, v, (kvix_qrun *)(void *)up, &ans->omitted);
        return KVIX_OK;
    }
    query_part_full(p, &hits, sm, v, up, ans);
    if (ans->top && hits.tier)
        rank_sort(ans->scores, ans->nscores); /* all of them, in rank order */
    return KVIX_OK;
}

/* One read-side section from the backend's walk to the slots' mapping, so a
 * slot seen in a holder set cannot map to a later (worker, dp): a released
 * slot is reused only after a grace period (lib/index/index_front_int.h). */
static int query_part(part *p, const uint64_t *local, uint64_t *canon, size_t n,
                      kvix_answer *ans, kvix_err *err)
{
    kvix_rcu_lock();
    int rc = query_part_rcu(p, local, canon, n, ans, err);
    kvix_rcu_unlock();
    return rc;
}

static void answer_reset(kvix_answer *ans, uint32_t top)
{
    ans->top = top;
    ans->omitted = 0;
    ans->query_blocks = 0;
    ans->bs = 0;
    ans->nscores = 0;
    ans->unknown = KVIX_UNKNOWN_NONE;
}

/* Which name of a missing partition the index has never seen. A walk over
 * the partitions (at most KVIX_INDEX_PARTITIONS_MAX), only on the rare
 * unknown-partition answer; safe beside writers like kvix__ix_parts_list. */
static int unknown_reason(const kvix_index *idx, const char *model)
{
    int why = KVIX_UNKNOWN_MODEL;
    kvix_rcu_lock(); /* the table may be replaced meanwhile */
    ctab *t = __atomic_load_n(&idx->parts.t, __ATOMIC_ACQUIRE);
    for (size_t i = 0; t && i < t->cap && why == KVIX_UNKNOWN_MODEL; i++) {
        part *p = __atomic_load_n(&t->v[i], __ATOMIC_ACQUIRE);
        if (p && strcmp(p->model, model) == 0)
            why = KVIX_UNKNOWN_TENANT;
    }
    kvix_rcu_unlock();
    return why;
}

/* A query by local hashes in partition p (NULL: unknown, found by the
 * caller under model). */
static int query_hashes(kvix_index *idx, part *p, const char *model, const uint64_t *local,
                        size_t n, uint32_t top, kvix_answer *ans, kvix_err *err)
{
    answer_reset(ans, top);
    if (n > KVIX_INDEX_DEPTH_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "query of %zu blocks (limit %u)", n,
                            KVIX_INDEX_DEPTH_MAX);
    ans->query_blocks = (uint32_t)n;
    if (!p) {
        ans->unknown = unknown_reason(idx, model);
        return KVIX_OK;
    }
    ans->bs = p->bs;
    n = query_depth(p, n);
    int rc = scratch_reserve(ans, n, err);
    return rc ? rc : query_part(p, local, ans->scratch, n, ans, err);
}

int kvix_index_query(kvix_index *idx, const char *model, const char *tenant,
                     const uint64_t *local, size_t n, kvix_answer *ans, kvix_err *err)
{
    model = model ? model : "default";
    part *p = kvix__ix_part_find(idx, model, tenant ? tenant : "default");
    return query_hashes(idx, p, model, local, n, idx->opts.top, ans, err);
}

static int query_tokens_bs(kvix_index *idx, const char *model, const char *tenant,
                           const char *lora, uint32_t bs, const uint32_t *tokens, size_t ntokens,
                           uint32_t top, kvix_answer *ans, kvix_err *err)
{
    answer_reset(ans, top);
    if (ntokens > KVIX_TOKENS_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "query of %zu tokens (limit %u)", ntokens,
                            KVIX_TOKENS_MAX);
    part *p = kvix__ix_part_find(idx, model ? model : "default", tenant ? tenant : "default");
    if (p && bs && bs != p->bs)
        return kvix__ix_bs_mismatch(p, bs, err);
    if (p)
        bs = p->bs;
    else
        ans->unknown = unknown_reason(idx, model ? model : "default");
    if (!bs)
        return KVIX_OK; /* unknown partition, no block size: nothing to hash */
    /* A partition of EAGLE's blocks hashes each over the next block's first
     * token too (kvix_hash_blocks_eagle): a block needs one token more. */
    int eagle = p && __atomic_load_n(&p->hashing, __ATOMIC_RELAXED) == PART_HASH_EAGLE;
    size_t n = eagle ? kvix_hash_eagle_count(ntokens, bs) : ntokens / bs;
    ans->query_blocks = (uint32_t)n;
    if (!p || !n)
        return KVIX_OK;
    ans->bs = p->bs;
    n = query_depth(p, n); /* hash no more blocks than can match */
    if (!n) /* a partition that never held a block (made by an eid alone) */
        return KVIX_OK;
    int rc = scratch_reserve(ans, 2 * n, err);
    if (rc)
        return rc;
    uint64_t seed = kvix_hash_lora_seed(lora, lora ? strlen(lora) : 0);
    if (eagle)
        kvix_hash_blocks_eagle(tokens, n * bs + 1, bs, seed, ans->scratch, NULL);
    else
        kvix_hash_blocks(tokens, n * bs, bs, seed, ans->scratch, NULL);
    return query_part(p, ans->scratch, ans->scratch + n, n, ans, err);
}

int kvix_index_query_tokens(kvix_index *idx, const char *model, const char *tenant,
                            const char *lora, const uint32_t *tokens, size_t ntokens,
                            kvix_answer *ans, kvix_err *err)
{
    return query_tokens_bs(idx, model, tenant, lora, 0, tokens, ntokens, idx->opts.top, ans,
                           err);
}

int kvix_index_query_event(kvix_index *idx, const kvix_event *q, kvix_answer *ans,
                           kvix_err *err)
{
    uint32_t top = q->has_top ? q->top : idx->opts.top;
    if (q->type != KVIX_EV_QUERY && q->type != KVIX_EV_NONE) {
        answer_reset(ans, top);
        return kvix_err_set(err, KVIX_EINVAL, "not a query (%s)", kvix_event_type_name(q->type));
    }
    if (!kvix_name_ok(q->model) || !kvix_name_ok(q->tenant) || !kvix_name_ok(q->lora)) {
        answer_reset(ans, top);
        return kvix_err_set(err, KVIX_EINVAL, "model, tenant or lora name not terminated");
    }
    if (q->has_tokens)
        return query_tokens_bs(idx, q->model, q->tenant, q->lora, q->bs, q->tokens, q->ntokens,
                               top, ans, err);
    part *p = kvix__ix_part_find(idx, q->model, q->tenant);
    if (p && q->bs && q->bs != p->bs) {
        answer_reset(ans, top);
        return kvix__ix_bs_mismatch(p, q->bs, err);
    }
    return query_hashes(idx, p, q->model, q->hashes, q->nhashes, top, ans, err); /* p found once */
}

uint32_t kvix_index_block_size(const kvix_index *idx, const char *model, const char *tenant)
{
    const part *p = kvix__ix_part_find(idx, model ? model : "default", tenant ? tenant : "default");
    return p ? p->bs : 0;
}

int kvix_index_eagle(const kvix_index *idx, const char *model, const char *tenant)
{
    const part *p = kvix__ix_part_find(idx, model ? model : "default", tenant ? tenant : "default");
    return p && __atomic_load_n(&p->hashing, __ATOMIC_RELAXED) == PART_HASH_EAGLE;
}
