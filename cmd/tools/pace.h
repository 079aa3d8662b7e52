/* kvix: the replay clock (kvreplay's timing): when each record of a log is
 * due, at the recorded pace (scaled by a speed), at a fixed rate, or at once.
 * The clock is the caller's (monotonic seconds passed in), so the library
 * neither reads the time nor sleeps. No memory is held: a kvix_pace is a
 * plain value, its fields private. */
#ifndef KVIX_PACE_H
#define KVIX_PACE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Longest wait between two records at the recorded pace, seconds: past it
 * the log's clock is taken to be wrong (a ts in milliseconds), not the replay
 * asked to sleep for days. */
#define KVIX_PACE_GAP_MAX 3600

typedef enum kvix_pace_mode {
    KVIX_PACE_RECORDED, /* the records' ts, divided by speed */
    KVIX_PACE_FAST,     /* at once */
    KVIX_PACE_RATE,     /* rate records a second */
} kvix_pace_mode;

typedef struct kvix_pace {
    kvix_pace_mode mode;
    double speed, rate;
    int started, have_ts0;
    double wall0, ts0;
} kvix_pace;

/* mode with its factor: speed for KVIX_PACE_RECORDED, records a second for
 * KVIX_PACE_RATE (ignored for KVIX_PACE_FAST); factor > 0. */
void kvix_pace_init(kvix_pace *p, kvix_pace_mode mode, double factor);

/* Seconds to wait (<= 0: none) before sending a record with ts (has_ts 0: a
 * record without one, sent at once at the recorded pace) when sent records
 * went before it, at time now. The first record starts the clock; at the
 * recorded pace the first with a ts restarts it. A record due more than
 * KVIX_PACE_GAP_MAX s ahead at the recorded pace is due at once and the clock
 * goes on from it: *far (when non-NULL) gets how far it was, else 0. */
double kvix_pace_wait(kvix_pace *p, int has_ts, double ts, uint64_t sent, double now,
                      double *far);

/* Seconds since the clock started (0 before). */
double kvix_pace_elapsed(const kvix_pace *p, double now);

#ifdef __cplusplus
}
#endif
#endif
