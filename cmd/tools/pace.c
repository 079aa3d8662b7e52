/* The replay clock: see cmd/tools/pace.h. */
#include "pace.h"

#include <string.h>

void kvix_pace_init(kvix_pace *p, kvix_pace_mode mode, double factor)
{
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->speed = mode == KVIX_PACE_RECORDED ? factor : 1;
    p->rate = mode == KVIX_PACE_RATE ? factor : 0;
}

double kvix_pace_wait(kvix_pace *p, int has_ts, double ts, uint64_t sent, double now,
                      double *far)
{
    if (far)
        *far = 0;
    if (!p->started) {
        p->wall0 = now;
        p->started = 1;
    }
    double target;
    switch (p->mode) {
    case KVIX_PACE_FAST:
        return 0;
    case KVIX_PACE_RATE:
        target = (double)sent / p->rate; /* as slow as asked: no ceiling */
        return target - (now - p->wall0);
    case KVIX_PACE_RECORDED:
        break;
    }
    if (!has_ts)
        return 0;
    if (!p->have_ts0) {
        p->have_ts0 = 1;
        p->ts0 = ts;
        p->wall0 = now;
        return 0;
    }
    target = (ts - p->ts0) / p->speed;
    double wait = target - (now - p->wall0);
    if (wait > KVIX_PACE_GAP_MAX) {
        if (far)
            *far = wait;
        p->ts0 += wait * p->speed;
        return 0;
    }
    return wait;
}

double kvix_pace_elapsed(const kvix_pace *p, double now)
{
    return p->started ? now - p->wall0 : 0;
}
