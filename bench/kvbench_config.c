/* kvbench: the unpaced runs and the load sweep of one configuration, each
 * replay in a child process of its own. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvbench.h"
#include "rcu_int.h"

/* Run fn(ctx, out) in a child process and copy its out (size bytes) back
 * over a pipe, so each replay has a fresh heap and its own peak RSS; with
 * --no-fork, here. Returns 0, or -1 with msg set when the child failed. */
static int in_child(const bench_opts *bo, void (*fn)(void *ctx, void *out), void *ctx, void *out,
                    size_t size, char *msg, size_t msgsz)
{
    if (!bo->fork) {
        fn(ctx, out);
        return 0;
    }
    int p[2];
    if (pipe(p))
        die("pipe: %s", strerror(errno));
    fflush(NULL);
    kvix__rcu_before_fork(); /* the sequential replay may have started liburcu's threads */
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        kvix__rcu_after_fork_child();
        close(p[0]);
        fn(ctx, out);
        const char *b = out;
        size_t left = size;
        while (left) {
            ssize_t w = write(p[1], b, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                _exit(3);
            b += w;
            left -= (size_t)w;
        }
        _exit(0);
    }
    kvix__rcu_after_fork_parent();
    close(p[1]);
    char *b = out;
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(p[0], b + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(p[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (got == size && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    snprintf(msg, msgsz, "replay process %s %d",
             WIFSIGNALED(status) ? "killed by signal" : "exited with",
             WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    return -1;
}

/* Keep freed memory in the heap: the next replay reuses the pages of the
 * last one instead of faulting fresh ones in, as a long-running index
 * whose blocks churn does. */
static void warm_heap(void)
{
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TOP_PAD, 64 << 20);
}

typedef struct once_ctx {
    const logdata *lg;
    const sched *sc;
    const cfg_result *cr;
    const bench_opts *bo;
    int want_stats;
} once_ctx;

typedef struct once_out {
    run_out ro, cold;
    int have_cold;
    int rc;
    long rss_base_kb, rss_peak_kb;
} once_out;

static void once_fn(void *vctx, void *vout)
{
    const once_ctx *c = vctx;
    once_out *o = vout;
    memset(o, 0, sizeof *o);
    o->rss_base_kb = rss_now_kb();
    if (c->bo->warm) {
        warm_heap();
        int perf_fd = g_perf_fd; /* --perf-ctl profiles the timed (warm) replay */
        g_perf_fd = -1;
        o->rc = replay_run(c->lg, c->sc, &c->cr->bc, c->cr->T, c->cr->R, c->cr->submit, 0,
                           c->bo->timing, c->bo->spin, 0, &o->cold);
        g_perf_fd = perf_fd;
        if (o->rc) {
            o->ro = o->cold;
            return;
        }
        o->have_cold = 1;
    }
    o->rc = replay_run(c->lg, c->sc, &c->cr->bc, c->cr->T, c->cr->R, c->cr->submit, 0,
                       c->bo->timing, c->bo->spin, c->want_stats, &o->ro);
    o->rss_peak_kb = rss_peak_kb();
}

/* One unpaced run of configuration cr (run number i). */
void config_run(const logdata *lg, const sched *sc, const checksum *ref,
                const bench_opts *bo, cfg_result *cr, int i)
{
    static once_out o;
    once_ctx ctx = {lg, sc, cr, bo, i == 0};
    progress("%s %s %ux%u%s: run %d/%d", cr->bc.label, rule_names[cr->rule], cr->T, cr->R,
             cr->submit ? " submit" : "", i + 1, bo->runs);
    if (in_child(bo, once_fn, &ctx, &o, sizeof o, cr->err, sizeof cr->err))
        return;
    if (o.rc) {
        snprintf(cr->err, sizeof cr->err, "%s", o.ro.err);
        return;
    }
    const run_out *ro = &o.ro;
    if (cr->nruns == 0) {
        cr->st = ro->st;
        cr->ck = ro->ck;
        cr->ck_ok = 1;
        cr->rss_base_kb = o.rss_base_kb;
        cr->rss_peak_kb = o.rss_peak_kb;
    }
    if (ref && !checksum_eq(&ro->ck, ref)) {
        cr->ck_ok = 0;
        cr->nbad++;
        cr->ck = ro->ck;
    }
    if (ro->err[0] && !cr->err[0])
        snprintf(cr->err, sizeof cr->err, "%s", ro->err);
    if (o.have_cold) {
        if (ref && !checksum_eq(&o.cold.ck, ref)) {
            cr->ck_ok = 0;
            cr->nbad++;
            cr->ck = o.cold.ck;
        }
        cr->cold_wall[cr->ncold++] = o.cold.wall;
    }
    int k = cr->nruns++;
    cr->wall[k] = ro->wall;
    cr->cpu[k] = ro->cpu;
    cr->p50[k] = hist_quantile(&ro->h, 0.50);
    cr->p99[k] = hist_quantile(&ro->h, 0.99);
    cr->p999[k] = hist_quantile(&ro->h, 0.999);
    cr->max[k] = (double)ro->h.max;
}

void config_finish(const logdata *lg, cfg_result *cr)
{
    if (!cr->nruns)
        return;
    cr->m_wall = median(cr->wall, cr->nruns);
    cr->m_cpu = median(cr->cpu, cr->nruns);
    double ops = (double)lg->ops_total;
    cr->ops_s = ops / cr->m_wall;
    if (cr->ncold)
        cr->cold_ops_s = ops / median(cr->cold_wall, cr->ncold);
    cr->ops_cpu_s = cr->m_cpu > 0 ? ops / cr->m_cpu : 0;
    cr->ev_s = (double)lg->nwrites / cr->m_wall;
    cr->q_s = (double)lg->nqueries / cr->m_wall;
    cr->lat50 = median(cr->p50, cr->nruns);
    cr->lat99 = median(cr->p99, cr->nruns);
    cr->lat999 = median(cr->p999, cr->nruns);
    cr->latmax = median(cr->max, cr->nruns);
}

typedef struct sweep_ctx {
    const logdata *lg;
    const sched *sc;
    const checksum *ref;
    const cfg_result *cr;
    const bench_opts *bo;
} sweep_ctx;

typedef struct sweep_out {
    int n, nbad, saturated;
    double saturation;
    sweep_pt pts[MAX_SWEEP];
} sweep_out;

static int cmp_pt(const void *a, const void *b)
{
    const sweep_pt *x = a, *y = b;
    return x->offered < y->offered ? -1 : x->offered > y->offered;
}

/* Offered load rises from sweep_from x the ceiling by sweep_step a step
 * until two points fall below threshold x offered; when already the first
 * point falls below, it falls instead until one is achieved. The budget of
 * paced time ends the search early. */
static void sweep_fn(void *vctx, void *vout)
{
    const sweep_ctx *c = vctx;
    sweep_out *o = vout;
    memset(o, 0, sizeof *o);
    const cfg_result *cr = c->cr;
    const bench_opts *bo = c->bo;
    double ops = (double)c->lg->ops_total, span = c->sc->span;
    double f = bo->sweep_from, spent = 0;
    int below = 0, down = 0;
    run_out *ro = xcalloc(1, sizeof *ro);
    if (bo->warm) {
        warm_heap();
        if (replay_run(c->lg, c->sc, &cr->bc, cr->T, cr->R, cr->submit, 0, bo->timing, bo->spin,
                       0, ro) == 0 &&
            c->ref && !checksum_eq(&ro->ck, c->ref))
            o->nbad++;
    }
    while (o->n < MAX_SWEEP) {
        double offered = f * cr->ops_s;
        double speedup = offered * span / ops;
        if (spent + span / speedup > bo->sweep_budget && o->n > 0)
            break;
        progress("%s %s %ux%u: sweep at %.3g M block-ops/s", cr->bc.label, rule_names[cr->rule],
                 cr->T, cr->R, offered / 1e6);
        if (replay_run(c->lg, c->sc, &cr->bc, cr->T, cr->R, cr->submit, speedup, bo->timing,
                       bo->spin, 0, ro))
            break;
        if (c->ref && !checksum_eq(&ro->ck, c->ref))
            o->nbad++;
        spent += ro->wall;
        sweep_pt *p = &o->pts[o->n++];
        p->speedup = speedup;
        p->offered = ops * speedup / span;
        p->achieved = ops / ro->wall;
        p->p99 = hist_quantile(&ro->h, 0.99);
        int pass = p->achieved >= bo->threshold * p->offered;
        if (o->n == 1 && !pass)
            down = 1;
        if (down) {
            if (pass) {
                o->saturation = p->offered;
                o->saturated = 1;
                break;
            }
            f /= bo->sweep_step;
            continue;
        }
        if (pass) {
            if (!below)
                o->saturation = p->offered;
        } else {
            o->saturated = 1;
            if (++below >= 2)
                break;
        }
        f *= bo->sweep_step;
    }
    qsort(o->pts, (size_t)o->n, sizeof *o->pts, cmp_pt);
    free(ro);
}

void config_sweep(const logdata *lg, const sched *sc, const checksum *ref,
                  const bench_opts *bo, cfg_result *cr)
{
    if (!cr->nruns || !lg->ts_ok || sc->span <= 0)
        return;
    static sweep_out o;
    sweep_ctx ctx = {lg, sc, ref, cr, bo};
    char msg[KVIX_ERR_MSG_MAX];
    if (in_child(bo, sweep_fn, &ctx, &o, sizeof o, msg, sizeof msg)) {
        snprintf(cr->err, sizeof cr->err, "sweep: %.200s", msg);
        cr->ck_ok = 0;
        return;
    }
    cr->nsweep = o.n;
    memcpy(cr->sweep, o.pts, sizeof o.pts);
    cr->saturation = o.saturation;
    cr->saturated = o.saturated;
    if (o.nbad) {
        cr->ck_ok = 0;
        cr->nbad += o.nbad;
    }
}
