/* The positional backend under concurrent writers (disjoint slots sharing
 * blocks) and lock-free queries; then exact against the model. */
#include "backend_check.h"

TEST(positional_mt_default_jump)
{
    bc_scenario_mt(&kvix__backend_positional_ops, 0, 1);
}

TEST(positional_mt_small_jump_scan)
{
    bc_scenario_mt(&kvix__backend_positional_ops, 3, 0);
}

/* Holders spread over 1024 slots: sets are arrays and bitsets, not only
 * bitsets of a few words. */
TEST(positional_mt_spread_slots)
{
    bc_scenario_mt_spread(&kvix__backend_positional_ops, 0, 1, 0x9e37 | 1, 0x3ff);
}

/* One chain's holder sets pushed through every form and back while
 * readers query it. */
TEST(positional_mt_sets_churn)
{
    bc_scenario_churn(&kvix__backend_positional_ops);
}
