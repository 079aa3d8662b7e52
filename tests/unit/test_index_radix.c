/* The radix backend through kvix_backend_ops: holes, local hashes recurring
 * under other prefixes, random workloads against an exact model, memory
 * reclamation. */
#include "backend_check.h"

static const kvix_backend_ops *ops = &kvix__backend_radix_ops;

TEST(radix_holes)
{
    bc_scenario_holes(ops, 0, 1);
}

TEST(radix_collision)
{
    bc_scenario_collision(ops, 0, 1);
}

TEST(radix_random)
{
    int steps = (int)(6000 * th_scale());
    for (int i = 0; i < 3; i++)
        bc_scenario_random(ops, 0, 1, th_seed() + 100 + (uint64_t)i, steps);
}

/* Holders spread over 1024 and over 65,536 slots: sets are arrays and
 * bitsets. */
TEST(radix_random_spread_slots)
{
    int steps = (int)(6000 * th_scale());
    bc_scenario_random_spread(ops, 0, 1, th_seed() + 200, steps, 0x9e37 | 1, 0x3ff);
    bc_scenario_random_spread(ops, 0, 1, th_seed() + 201, steps, 0x9e37 | 1, 0xffff);
}

TEST(radix_reclaim)
{
    bc_scenario_reclaim(ops);
}
