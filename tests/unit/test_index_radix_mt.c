/* The radix backend under concurrent writers (disjoint slots sharing blocks)
 * and lock-free queries; then exact against the model. */
#include "backend_check.h"

TEST(radix_mt)
{
    bc_scenario_mt(&kvix__backend_radix_ops, 0, 1);
}

/* Holders spread over 1024 slots: sets are arrays and bitsets, not only
 * bitsets of a few words. */
TEST(radix_mt_spread_slots)
{
    bc_scenario_mt_spread(&kvix__backend_radix_ops, 0, 1, 0x9e37 | 1, 0x3ff);
}

/* One chain's holder sets pushed through every form and back while
 * readers query it. */
TEST(radix_mt_sets_churn)
{
    bc_scenario_churn(&kvix__backend_radix_ops);
}
