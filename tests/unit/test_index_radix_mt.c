/* The radix backend under concurrent writers (disjoint slots sharing blocks)
 * and lock-free queries; then exact against the model. */
#include "backend_check.h"

TEST(radix_mt)
{
    bc_scenario_mt(&kvix_backend_radix_ops, 0, 1);
}
