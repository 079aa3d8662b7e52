/* kvix_pace: when each record of a replay is due, on a clock the test moves
 * by hand (no sleeping, no reading the time). */
#include "harness.h"
#include "pace.h"

/* a is evaluated once: kvix_pace_wait moves the clock. */
static int near(double a, double b)
{
    return a - b < 1e-6 && b - a < 1e-6;
}
#define NEAR(a, b) th_check(near((a), (b)), #a " == " #b, __FILE__, __LINE__)

TEST(recorded_pace_follows_the_records_ts_scaled_by_speed)
{
    kvix_pace p;
    kvix_pace_init(&p, KVIX_PACE_RECORDED, 2.0);
    double far = -1;
    NEAR(kvix_pace_wait(&p, 0, 0, 0, 100.0, &far), 0); /* no ts: at once */
    NEAR(far, 0);
    NEAR(kvix_pace_wait(&p, 1, 5000.0, 1, 101.0, NULL), 0); /* the first ts starts the clock */
    NEAR(kvix_pace_elapsed(&p, 101.5), 0.5);
    NEAR(kvix_pace_wait(&p, 1, 5010.0, 2, 102.0, NULL), 4.0); /* 10 s of log at x2, 1 s gone */
    NEAR(kvix_pace_wait(&p, 1, 5004.0, 3, 106.0, NULL), -3.0); /* late: at once */
    NEAR(kvix_pace_wait(&p, 0, 0, 4, 106.0, NULL), 0);
}

TEST(a_record_past_the_gap_ceiling_goes_at_once_and_moves_the_clock)
{
    kvix_pace p;
    kvix_pace_init(&p, KVIX_PACE_RECORDED, 1.0);
    double far = 0;
    kvix_pace_wait(&p, 1, 10.0, 0, 0.0, &far);
    /* A ts in milliseconds taken for seconds: due in about 1e12 s. */
    NEAR(kvix_pace_wait(&p, 1, 1e12, 1, 1.0, &far), 0);
    CHECK(far > KVIX_PACE_GAP_MAX);
    NEAR(far, 1e12 - 10.0 - 1.0);
    /* The clock goes on from it: one more second of log is one second. */
    NEAR(kvix_pace_wait(&p, 1, 1e12 + 1, 2, 1.0, &far), 1.0);
    NEAR(far, 0);
    /* Exactly at the ceiling is still waited for. */
    kvix_pace_init(&p, KVIX_PACE_RECORDED, 1.0);
    kvix_pace_wait(&p, 1, 0.0, 0, 0.0, NULL);
    NEAR(kvix_pace_wait(&p, 1, KVIX_PACE_GAP_MAX, 1, 0.0, &far), KVIX_PACE_GAP_MAX);
    NEAR(far, 0);
}

TEST(rate_and_fast)
{
    kvix_pace p;
    kvix_pace_init(&p, KVIX_PACE_RATE, 4.0);
    NEAR(kvix_pace_elapsed(&p, 50.0), 0); /* not started */
    NEAR(kvix_pace_wait(&p, 1, 123.0, 0, 50.0, NULL), 0);
    NEAR(kvix_pace_wait(&p, 0, 0, 1, 50.0, NULL), 0.25); /* ts ignored: 4 a second */
    NEAR(kvix_pace_wait(&p, 1, 1e15, 40, 51.0, NULL), 9.0); /* no ceiling: as slow as asked */
    kvix_pace_init(&p, KVIX_PACE_FAST, 0);
    NEAR(kvix_pace_wait(&p, 1, 1.0, 0, 7.0, NULL), 0);
    NEAR(kvix_pace_wait(&p, 1, 1e9, 1, 7.0, NULL), 0);
    NEAR(kvix_pace_elapsed(&p, 9.0), 2.0);
}
