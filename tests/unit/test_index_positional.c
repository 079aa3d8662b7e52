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

/* A backend's fixed cost follows its slots and blocks, not KVIX_SLOTS_MAX:
 * a partition of one worker holding one block (16,384 of them are allowed)
 * costs its struct, one chunk of per-slot counts, one slab chunk and one
 * shard table (26 KB when per-slot arrays were sized for every slot and
 * every shard had a table from the start). */
TEST(positional_small_backend)
{
    void *be = bc_create(ops, 0, 1);
    if (!be)
        return;
    size_t empty = ops->memory(be);
    kvix_err err;
    CHECK(kvix_backend_add_key(ops, be, 0, 42, 42, 0, 0, 0, &err) == KVIX_OK);
    size_t one = ops->memory(be);
    CHECK(empty <= 8192);
    CHECK(one <= empty + 4096);
    if (empty > 8192 || one > empty + 4096)
        printf("#   memory %zu empty, %zu with one block\n", empty, one);
    kvix_backend_del_key(ops, be, 0, 42, 42, 0, 0, 0);
    ops->destroy(be);
}
