/* The positional backend under concurrent writers (disjoint slots sharing
 * blocks) and lock-free queries; then exact against the model. */
#include "backend_check.h"

TEST(positional_mt_default_jump)
{
    bc_scenario_mt(&kvix_backend_positional_ops, 0, 1);
}

TEST(positional_mt_small_jump_scan)
{
    bc_scenario_mt(&kvix_backend_positional_ops, 3, 0);
}
