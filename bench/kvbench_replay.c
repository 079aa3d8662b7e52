/* kvbench: one replay of a schedule against an index (writer and reader
 * lanes, answers folded into a checksum, each query timed), the sequential
 * reference replay, and --query-cost's sampling replay. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kvbench.h"
#include "kvbench_qcost.h"

int checksum_eq(const checksum *a, const checksum *b)
{
    return a->pairs == b->pairs && a->sum == b->sum && a->hash == b->hash &&
           a->rejects == b->rejects && a->qerrs == b->qerrs;
}

/* A few instructions per score, since it runs inside the timed replay: the
 * answer (sorted, so its order is part of it) folded into one word, then
 * mixed with the query's index and added (the sum does not depend on which
 * reader answered what). dp and blocks are adjacent in kvix_score and read
 * as one word, so a score costs two loads, a multiply and three adds. The
 * scores are folded in four lanes (score i into lane i % 4): one chain of
 * multiplies through a 250-score answer was 8 % of a 256-worker replay's
 * time, the harness's, not the index's. */
_Static_assert(offsetof(kvix_score, blocks) == offsetof(kvix_score, dp) + 4,
               "dp and blocks are one word");

static inline uint64_t fold_score(uint64_t acc, const kvix_score *s, uint64_t *sum)
{
    uint64_t dpb; /* dp | blocks << 32 */
    memcpy(&dpb, &s->dp, sizeof dpb);
    *sum += dpb >> 32;
    return (acc ^ s->worker) * 0x100000001b3u + dpb;
}

static inline void checksum_answer(checksum *c, uint32_t q, const kvix_answer *ans)
{
    const kvix_score *v = ans->scores;
    size_t n = ans->nscores, i = 0;
    uint64_t a0 = n, a1 = 1, a2 = 2, a3 = 3, s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (; i + 4 <= n; i += 4) {
        a0 = fold_score(a0, &v[i], &s0);
        a1 = fold_score(a1, &v[i + 1], &s1);
        a2 = fold_score(a2, &v[i + 2], &s2);
        a3 = fold_score(a3, &v[i + 3], &s3);
    }
    for (; i < n; i++)
        a0 = fold_score(a0, &v[i], &s0);
    uint64_t acc = ((a0 * 0x100000001b3u ^ a1) * 0x100000001b3u ^ a2) * 0x100000001b3u ^ a3;
    c->pairs += n;
    c->sum += s0 + s1 + s2 + s3;
    c->hash += mix64(acc ^ (uint64_t)q * 0x9e3779b97f4a7c15u);
}

/* ------------------------------------------------------------- replay */

static qcost *g_qcost; /* set only around --query-cost's own replay */

typedef struct __attribute__((aligned(64))) reader_lane {
    hist h;
    checksum ck;
    uint64_t nq, last_ns;
    kvix_answer ans;
    kvix_err err;
} reader_lane;

typedef struct __attribute__((aligned(64))) writer_lane {
    uint64_t applied, rejects;
    kvix_err err;
} writer_lane;

typedef struct replay {
    kvix_index *idx;
    const logdata *lg;
    const sched *sc;
    unsigned T, R;
    int submit;
    int timing;     /* time each query */
    int spin;       /* spin iterations before sleeping */
    double speedup; /* 0: as fast as possible */
    qcost *qc;      /* --query-cost's samples (its own replay only), else NULL */
    _Alignas(64) _Atomic uint32_t seq; /* 1 + the segment in progress; UINT32_MAX = stop */
    _Atomic uint32_t sleepers;
    _Alignas(64) _Atomic uint32_t done;
    _Atomic uint32_t main_waiting;
    _Alignas(64) _Atomic uint32_t qnext;
    _Atomic uint64_t submit_rejects;
    writer_lane wl[MAX_LANES];
    reader_lane rl[MAX_LANES];
    char first_err[KVIX_ERR_MSG_MAX];
    _Atomic int have_err;
} replay;

typedef struct helper {
    replay *rp;
    int writer; /* else reader */
    unsigned id;
    pthread_t th;
} helper;

static long futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void note_err(replay *rp, const kvix_err *err)
{
    int expect = 0;
    if (atomic_compare_exchange_strong(&rp->have_err, &expect, 1))
        snprintf(rp->first_err, sizeof rp->first_err, "%s", err->msg);
}

static void do_writes(replay *rp, size_t s, unsigned l)
{
    const sched *sc = rp->sc;
    const uint32_t *off = &sc->lane_off[s * (sc->T + 1)];
    writer_lane *w = &rp->wl[l];
    for (uint32_t i = off[l]; i < off[l + 1]; i++) {
        const kvix_event *e = &rp->lg->ev[sc->lane_ev[i]];
        if (kvix_index_apply(rp->idx, e, NULL, &w->err)) {
            w->rejects++;
        }
        w->applied++;
    }
}

static void do_queries(replay *rp, const seg *g, unsigned r)
{
    reader_lane *rl = &rp->rl[r];
    const sched *sc = rp->sc;
    for (;;) {
        uint32_t i = atomic_fetch_add_explicit(&rp->qnext, 1, memory_order_relaxed);
        if (i >= g->end)
            break;
        uint32_t q = sc->ord[i];
        const kvix_event *e = &rp->lg->ev[q];
        int rc;
        if (rp->timing) {
            uint64_t t0 = ns_mono();
            rc = kvix_index_query_event(rp->idx, e, &rl->ans, &rl->err);
            uint64_t t1 = ns_mono();
            hist_add(&rl->h, t1 - t0);
            rl->last_ns = t1 - t0;
        } else {
            rc = kvix_index_query_event(rp->idx, e, &rl->ans, &rl->err);
        }
        rl->nq++;
        if (rc) {
            rl->ck.qerrs++;
            note_err(rp, &rl->err);
            continue;
        }
        checksum_answer(&rl->ck, q, &rl->ans);
        if (rp->qc && rp->timing)
            qcost_note(rp->qc, q, &rl->ans, rl->last_ns);
    }
}

/* Which helpers take part in segment s: writer lanes 1.. with work, readers
 * 1.. while there are more queries than readers before them. */
static int helper_takes_part(const replay *rp, size_t s, int writer, unsigned id)
{
    const seg *g = &rp->sc->segs[s];
    if (writer) {
        if (g->kind != SEG_W || rp->submit)
            return 0;
        const uint32_t *off = &rp->sc->lane_off[s * (rp->sc->T + 1)];
        return off[id + 1] > off[id];
    }
    return g->kind == SEG_Q && id < g->end - g->start;
}

static void helper_done(replay *rp)
{
    atomic_fetch_add(&rp->done, 1);
    if (atomic_load(&rp->main_waiting))
        futex(&rp->done, FUTEX_WAKE_PRIVATE, 1);
}

static void *helper_main(void *arg)
{
    helper *h = arg;
    replay *rp = h->rp;
    uint32_t last = 0;
    for (;;) {
        uint32_t v;
        int spins = rp->spin;
        while ((v = atomic_load_explicit(&rp->seq, memory_order_acquire)) == last) {
            if (spins-- > 0) {
                cpu_relax();
                continue;
            }
            atomic_fetch_add(&rp->sleepers, 1);
            futex(&rp->seq, FUTEX_WAIT_PRIVATE, last);
            atomic_fetch_sub(&rp->sleepers, 1);
        }
        last = v;
        if (v == UINT32_MAX)
            break;
        size_t s = v - 1;
        if (!helper_takes_part(rp, s, h->writer, h->id))
            continue;
        if (h->writer)
            do_writes(rp, s, h->id);
        else
            do_queries(rp, &rp->sc->segs[s], h->id);
        helper_done(rp);
    }
    return NULL;
}

static void wait_done(replay *rp, uint32_t need)
{
    int spins = rp->spin;
    uint32_t d;
    while ((d = atomic_load(&rp->done)) < need) {
        if (spins-- > 0) {
            cpu_relax();
            continue;
        }
        atomic_store(&rp->main_waiting, 1);
        d = atomic_load(&rp->done);
        if (d < need)
            futex(&rp->done, FUTEX_WAIT_PRIVATE, d);
        atomic_store(&rp->main_waiting, 0);
    }
}

static void pace_until(double t)
{
    for (;;) {
        double left = t - now_mono();
        if (left <= 0)
            return;
        if (left > 100e-6) {
            struct timespec ts;
            double sl = left - 50e-6;
            ts.tv_sec = (time_t)sl;
            ts.tv_nsec = (long)((sl - (double)ts.tv_sec) * 1e9);
            nanosleep(&ts, NULL);
        } else {
            cpu_relax();
        }
    }
}

static void on_reject(void *ctx, uint64_t tag, const kvix_err *err)
{
    (void)tag;
    replay *rp = ctx;
    atomic_fetch_add(&rp->submit_rejects, 1);
    (void)err;
}

/* One replay of sched from an empty index. */
int replay_run(const logdata *lg, const sched *sc, const bconf *bc, unsigned T,
               unsigned R, int submit, double speedup, int timing, int spin,
               int want_stats, run_out *out)
{
    replay *rp = xcalloc(1, sizeof *rp);
    memset(out, 0, sizeof *out);
    rp->lg = lg;
    rp->sc = sc;
    rp->T = T;
    rp->R = R;
    rp->submit = submit;
    rp->timing = timing;
    rp->spin = spin;
    rp->speedup = speedup;
    rp->qc = g_qcost;
    for (unsigned r = 0; r < R; r++)
        kvix_answer_init(&rp->rl[r].ans);
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = bc->backend;
    o.jump = bc->jump;
    o.binsearch = bc->binsearch;
    o.threads = submit ? T : 0;
    o.top = g_top;
    o.removals = g_removals;
    o.on_reject = on_reject;
    o.reject_ctx = rp;
    kvix_err err = {0};
    if (kvix_index_new(&rp->idx, &o, &err)) {
        snprintf(out->err, sizeof out->err, "kvix_index_new: %.200s", err.msg);
        free(rp);
        return -1;
    }
    helper hs[2 * MAX_LANES];
    unsigned nh = 0;
    for (unsigned l = 1; l < (submit ? 1 : T); l++)
        hs[nh++] = (helper){rp, 1, l, 0};
    for (unsigned r = 1; r < R; r++)
        hs[nh++] = (helper){rp, 0, r, 0};
    for (unsigned i = 0; i < nh; i++)
        if (pthread_create(&hs[i].th, NULL, helper_main, &hs[i]))
            die("cannot create a thread");

    perf_ctl("enable\n");
    double c0 = now_cpu(), t0 = now_mono();
    for (size_t s = 0; s < sc->nseg; s++) {
        const seg *g = &sc->segs[s];
        if (speedup > 0)
            pace_until(t0 + (g->ts - sc->ts0) / speedup);
        uint32_t need = 0;
        if (g->kind == SEG_W && !submit) {
            const uint32_t *off = &sc->lane_off[s * (T + 1)];
            for (unsigned l = 1; l < T; l++)
                need += off[l + 1] > off[l];
        } else if (g->kind == SEG_Q) {
            uint32_t nq = g->end - g->start;
            need = (nq < R ? nq : R);
            need = need ? need - 1 : 0;
            atomic_store_explicit(&rp->qnext, g->start, memory_order_relaxed);
        }
        if (need) {
            atomic_store_explicit(&rp->done, 0, memory_order_relaxed);
            atomic_store(&rp->seq, (uint32_t)(s + 1));
            if (atomic_load(&rp->sleepers))
                futex(&rp->seq, FUTEX_WAKE_PRIVATE, INT_MAX);
        }
        if (g->kind == SEG_W) {
            if (submit) {
                for (uint32_t i = g->start; i < g->end; i++) {
                    const kvix_event *e = &lg->ev[sc->ord[i]];
                    if (kvix_index_submit(rp->idx, e, sc->ord[i], &rp->wl[0].err))
                        if (!o.threads)
                            rp->wl[0].rejects++;
                    rp->wl[0].applied++;
                }
                kvix_index_sync(rp->idx);
            } else {
                do_writes(rp, s, 0);
            }
        } else {
            do_queries(rp, g, 0);
        }
        if (need)
            wait_done(rp, need);
    }
    double t1 = now_mono(), c1 = now_cpu();
    perf_ctl("disable\n");

    atomic_store(&rp->seq, UINT32_MAX);
    futex(&rp->seq, FUTEX_WAKE_PRIVATE, INT_MAX);
    for (unsigned i = 0; i < nh; i++)
        pthread_join(hs[i].th, NULL);

    out->wall = t1 - t0;
    out->cpu = c1 - c0;
    for (unsigned r = 0; r < R; r++) {
        reader_lane *rl = &rp->rl[r];
        out->ck.pairs += rl->ck.pairs;
        out->ck.sum += rl->ck.sum;
        out->ck.hash += rl->ck.hash;
        out->ck.qerrs += rl->ck.qerrs;
        out->nq += rl->nq;
        hist_merge(&out->h, &rl->h);
        kvix_answer_release(&rl->ans);
    }
    for (unsigned l = 0; l < T; l++) {
        out->ck.rejects += rp->wl[l].rejects;
        out->nw += rp->wl[l].applied;
    }
    if (submit && o.threads)
        out->ck.rejects += atomic_load(&rp->submit_rejects);
    if (atomic_load(&rp->have_err))
        snprintf(out->err, sizeof out->err, "%s", rp->first_err);
    if (want_stats) {
        kvix_index_stats_get(rp->idx, &out->st);
        out->stats_ok = 1;
    }
    kvix_index_free(rp->idx);
    free(rp);
    return 0;
}

/* The sequential replay on the reference backend: the checksum every
 * configuration must reproduce, and the block-ops of each record (query
 * blocks as the index counts them, blocks a cleared event dropped). */
void sequential(logdata *lg, const sched *sc, checksum *ck, int count_ops)
{
    kvix_index_opts o;
    kvix_index_opts_init(&o);
    o.backend = KVIX_BACKEND_REFERENCE;
    o.top = g_top;
    o.removals = g_removals;
    kvix_index *idx;
    kvix_err err = {0};
    if (kvix_index_new(&idx, &o, &err))
        die("kvix_index_new: %s", err.msg);
    kvix_answer ans;
    kvix_answer_init(&ans);
    memset(ck, 0, sizeof *ck);
    uint64_t nerr = 0;
    for (size_t i = 0; i < sc->n; i++) {
        uint32_t k = sc->ord[i];
        const kvix_event *e = &lg->ev[k];
        if (e->type == KVIX_EV_QUERY) {
            if (kvix_index_query_event(idx, e, &ans, &err)) {
                ck->qerrs++;
                if (nerr++ < 3)
                    warnx_("query %u of the log failed: %s", k, err.msg);
                continue;
            }
            checksum_answer(ck, k, &ans);
            if (count_ops)
                lg->ops[k] = ans.query_blocks;
        } else {
            kvix_apply_result res = {0};
            if (kvix_index_apply(idx, e, &res, &err)) {
                ck->rejects++;
                if (nerr++ < 3)
                    warnx_("record %u of the log rejected by the index: %s", k, err.msg);
            }
            if (count_ops)
                lg->ops[k] = e->type == KVIX_EV_STORED    ? (uint32_t)e->nblocks
                             : e->type == KVIX_EV_REMOVED ? (uint32_t)e->nhashes
                                                          : res.removed;
        }
        if ((i & 0x3fff) == 0)
            progress("sequential %s replay on the reference backend: %zu/%zu",
                     rule_names[sc->rule], i, sc->n);
    }
    kvix_answer_release(&ans);
    kvix_index_free(idx);
    if (count_ops) {
        for (size_t k = 0; k < lg->n; k++) {
            const kvix_event *e = &lg->ev[k];
            switch (e->type) {
            case KVIX_EV_QUERY: lg->ops_query += lg->ops[k]; break;
            case KVIX_EV_STORED: lg->ops_stored += lg->ops[k]; break;
            case KVIX_EV_REMOVED: lg->ops_removed += lg->ops[k]; break;
            default: lg->ops_cleared += lg->ops[k]; break;
            }
        }
        lg->ops_total = lg->ops_query + lg->ops_stored; /* removals count 0, as Dynamo's */
    }
}

/* Without a reference replay: query blocks from the record (local hashes,
 * or whole blocks of tokens at the query's bs), cleared events as 0. */
void count_ops_unverified(logdata *lg)
{
    for (size_t k = 0; k < lg->n; k++) {
        const kvix_event *e = &lg->ev[k];
        switch (e->type) {
        case KVIX_EV_QUERY:
            lg->ops[k] = (uint32_t)(e->has_tokens ? (e->bs ? e->ntokens / e->bs : 0) : e->nhashes);
            lg->ops_query += lg->ops[k];
            break;
        case KVIX_EV_STORED: lg->ops_stored += lg->ops[k] = (uint32_t)e->nblocks; break;
        case KVIX_EV_REMOVED: lg->ops_removed += lg->ops[k] = (uint32_t)e->nhashes; break;
        default: break;
        }
    }
    lg->ops_total = lg->ops_query + lg->ops_stored;
}

/* One more replay of each configuration of the first group, in this
 * process, sampling every query (kvbench_qcost.h). Returns 1 when a replay
 * failed or its answers differ from the sequential replay. */
int query_cost(const char *path, const logdata *lg, sched *sc, const cfg_result *cr, int n,
               const checksum *refs, const bench_opts *bo)
{
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot write %s: %s", path, strerror(errno));
    static run_out ro;
    int bad = 0;
    sched_lanes(&sc[cr[0].rule], lg, cr[0].T);
    for (int b = 0; b < n; b++) {
        const cfg_result *c = &cr[b];
        qcost qc = {xcalloc(lg->n, sizeof *qc.v), xcalloc(lg->n, 1), lg->n};
        progress("%s: query cost", c->bc.label);
        g_qcost = &qc;
        int rc = replay_run(lg, &sc[c->rule], &c->bc, c->T, c->R, c->submit, 0, 1, bo->spin, 0,
                            &ro);
        g_qcost = NULL;
        if (rc || ro.err[0] || (refs && !checksum_eq(&ro.ck, &refs[c->rule]))) {
            warnx_("ERROR: %s: the query-cost replay %s", c->bc.label,
                   rc || ro.err[0] ? ro.err : "answered differently from the sequential replay");
            bad = 1;
        } else {
            qcost_write(f, &qc, c->bc.label, b == 0);
        }
        free(qc.v);
        free(qc.seen);
    }
    if (fclose(f))
        die("cannot write %s", path);
    return bad;
}
