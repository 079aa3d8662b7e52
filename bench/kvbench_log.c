/* kvbench: the log decoded into memory, and its replay orders (schedules). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvix/stream.h"

#include "kvbench.h"

void log_load(logdata *lg, const char *path)
{
    int fd = 0;
    if (strcmp(path, "-") != 0) {
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            die("cannot open %s: %s", path, strerror(errno));
    }
    snprintf(lg->name, sizeof lg->name, "%s", strcmp(path, "-") ? path : "<stdin>");
    kvix_reader *r;
    kvix_err err = {0};
    if (kvix_reader_new(&r, fd, lg->name, KVIX_FMT_AUTO, &err))
        die("%s: %s", lg->name, err.msg);
    kvix_event tmp;
    kvix_event_init(&tmp);
    lg->ts_ok = 1;
    for (;;) {
        int rc = kvix_reader_next(r, &tmp, &err);
        if (rc == KVIX_EOF)
            break;
        if (rc == KVIX_EIO)
            die("%s: %s", lg->name, err.msg);
        if (rc) {
            if (lg->rejected++ < 5)
                warnx_("bad record at %s:%" PRIu64 ": %s", lg->name, kvix_reader_pos(r), err.msg);
            continue;
        }
        if (tmp.type == KVIX_EV_NONE)
            continue;
        if (lg->n == lg->cap) {
            lg->cap = lg->cap ? lg->cap * 2 : 4096;
            lg->ev = xrealloc(lg->ev, lg->cap * sizeof *lg->ev);
        }
        kvix_event *e = &lg->ev[lg->n];
        kvix_event_init(e);
        if (kvix_event_copy(e, &tmp, &err))
            die("%s: %s", lg->name, err.msg);
        if (e->type == KVIX_EV_QUERY)
            lg->nqueries++;
        else
            lg->nwrites++;
        lg->n++;
        if ((lg->n & 0xffff) == 0)
            progress("loading %s: %zu records", lg->name, lg->n);
    }
    snprintf(lg->format, sizeof lg->format, "%s", kvix_format_name(kvix_reader_format(r)));
    kvix_reader_free(r);
    kvix_event_release(&tmp);
    if (fd > 0)
        close(fd);
    if (lg->rejected)
        warnx_("%zu records of %s rejected by the decoder", lg->rejected, lg->name);
    lg->ops = xcalloc(lg->n, sizeof *lg->ops);
    lg->ts = xcalloc(lg->n, sizeof *lg->ts);
    int have = 0;
    double next = 0;
    for (size_t i = lg->n; i-- > 0;) {
        if (lg->ev[i].has_ts) {
            next = lg->ev[i].ts;
            have = 1;
        } else {
            lg->no_ts++;
        }
        lg->ts[i] = next;
    }
    lg->ts_ok = have;
    size_t last = lg->n;
    for (size_t i = 0; i < lg->n; i++)
        if (lg->ev[i].has_ts)
            last = i;
    for (size_t i = last + 1; last < lg->n && i < lg->n; i++)
        lg->ts[i] = lg->ev[last].ts;
}

static int is_query(const kvix_event *e) { return e->type == KVIX_EV_QUERY; }

static void sched_push_seg(sched *sc, size_t *cap, uint32_t start, uint32_t end, int kind,
                           double ts)
{
    if (start == end)
        return;
    if (sc->nseg == *cap) {
        *cap = *cap ? *cap * 2 : 1024;
        sc->segs = xrealloc(sc->segs, *cap * sizeof *sc->segs);
    }
    sc->segs[sc->nseg++] = (seg){start, end, kind, ts};
}

void sched_build(sched *sc, const logdata *lg, int rule)
{
    memset(sc, 0, sizeof *sc);
    sc->rule = rule;
    sc->n = lg->n;
    sc->ord = xcalloc(lg->n ? lg->n : 1, sizeof *sc->ord);
    size_t cap = 0;
    if (rule == RULE_EXACT) {
        for (size_t i = 0; i < lg->n; i++)
            sc->ord[i] = (uint32_t)i;
        size_t s = 0;
        while (s < lg->n) {
            int q = is_query(&lg->ev[s]);
            size_t e = s;
            while (e < lg->n && is_query(&lg->ev[e]) == q)
                e++;
            sched_push_seg(sc, &cap, (uint32_t)s, (uint32_t)e, q ? SEG_Q : SEG_W, lg->ts[s]);
            s = e;
        }
    } else {
        /* Group consecutive records of equal time: writes first, then
         * queries. */
        size_t k = 0, s = 0;
        while (s < lg->n) {
            double ts = lg->ts[s];
            size_t e = s + 1;
            while (e < lg->n && lg->ts[e] == ts)
                e++;
            uint32_t w0 = (uint32_t)k;
            for (size_t i = s; i < e; i++)
                if (!is_query(&lg->ev[i]))
                    sc->ord[k++] = (uint32_t)i;
            uint32_t q0 = (uint32_t)k;
            for (size_t i = s; i < e; i++)
                if (is_query(&lg->ev[i]))
                    sc->ord[k++] = (uint32_t)i;
            sched_push_seg(sc, &cap, w0, q0, SEG_W, ts);
            sched_push_seg(sc, &cap, q0, (uint32_t)k, SEG_Q, ts);
            s = e;
        }
    }
    if (sc->nseg) {
        sc->ts0 = sc->segs[0].ts;
        sc->span = sc->segs[sc->nseg - 1].ts - sc->ts0;
    }
}

static unsigned lane_of(const kvix_event *e, unsigned T)
{
    if (T <= 1)
        return 0;
    return (unsigned)(mix64(e->worker * 0x9e3779b97f4a7c15u ^ ((uint64_t)e->dp << 48)) % T);
}

void sched_lanes(sched *sc, const logdata *lg, unsigned T)
{
    free(sc->lane_ev);
    free(sc->lane_off);
    sc->T = T;
    sc->lane_ev = xcalloc(sc->n, sizeof *sc->lane_ev);
    sc->lane_off = xcalloc(sc->nseg * (T + 1) + 1, sizeof *sc->lane_off);
    uint32_t k = 0;
    for (size_t s = 0; s < sc->nseg; s++) {
        const seg *g = &sc->segs[s];
        uint32_t *off = &sc->lane_off[s * (T + 1)];
        for (unsigned l = 0; l < T; l++) {
            off[l] = k;
            if (g->kind != SEG_W)
                continue;
            for (uint32_t i = g->start; i < g->end; i++)
                if (lane_of(&lg->ev[sc->ord[i]], T) == l)
                    sc->lane_ev[k++] = sc->ord[i];
        }
        off[T] = k;
    }
}

void sched_free(sched *sc)
{
    free(sc->ord);
    free(sc->segs);
    free(sc->lane_ev);
    free(sc->lane_off);
}
