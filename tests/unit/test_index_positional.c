/* The positional backend through kvix_backend_ops: holes, local hashes
 * recurring under other prefixes, random workloads against an exact model for
 * every jump size 1..64 with and without bisection, memory reclamation. */
#include "backend_check.h"

static const kvix_backend_ops *ops = &kvix_backend_positional_ops;

TEST(positional_holes_every_jump)
{
    for (unsigned jump = 1; jump <= 64; jump++)
        for (int bs = 0; bs < 2; bs++)
            bc_scenario_holes(ops, jump, bs);
}

TEST(positional_collision_every_jump)
{
    for (unsigned jump = 1; jump <= 64; jump++)
        for (int bs = 0; bs < 2; bs++)
            bc_scenario_collision(ops, jump, bs);
}

TEST(positional_random_jumps)
{
    static const unsigned jumps[] = {0, 1, 2, 3, 4, 7, 8, 16, 31, 64, 1000};
    int steps = (int)(3000 * th_scale());
    for (size_t j = 0; j < sizeof jumps / sizeof *jumps; j++)
        for (int bs = 0; bs < 2; bs++)
            bc_scenario_random(ops, jumps[j], bs, th_seed() + j, steps);
}

TEST(positional_reclaim)
{
    bc_scenario_reclaim(ops);
}
