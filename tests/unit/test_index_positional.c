/* The positional backend through kvix_backend_ops: holes, local hashes
 * recurring under other prefixes, random workloads against an exact model for
 * every jump size 1..64 with and without bisection, memory reclamation. */
#include "backend_check.h"

static const kvix_backend_ops *ops = &kvix__backend_positional_ops;

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

/* Holders spread over 1024 and over 65,536 slots: sets are arrays and
 * bitsets (over a few hundred slots they are bitsets). */
TEST(positional_random_spread_slots)
{
    int steps = (int)(3000 * th_scale());
    static const unsigned jumps[] = {0, 1, 3, 32};
    for (size_t j = 0; j < sizeof jumps / sizeof *jumps; j++) {
        bc_scenario_random_spread(ops, jumps[j], 1, th_seed() + 50 + j, steps, 0x9e37 | 1, 0x3ff);
        bc_scenario_random_spread(ops, jumps[j], j % 2, th_seed() + 60 + j, steps, 0x9e37 | 1,
                                  0xffff);
    }
}

TEST(positional_reclaim)
{
    bc_scenario_reclaim(ops);
}

/* A slab past its first chunks carves them from huge-page regions
 * (lib/index/backends/index_pos_store.c): 3,600 chains of 50 blocks (180,000 nodes) reach
 * the second region; every chain is found whole, the slab goes back to
 * nothing when the last node does, and is carved again the same way. */
TEST(positional_slab_regions)
{
    void *be = bc_create(ops, 0, 1);
    if (!be)
        return;
    enum { CHAINS = 3600, LEN = 50 };
    size_t base = ops->memory(be);
    kvix_err err;
    uint64_t local[LEN], canon[LEN];
    for (int round = 0; round < 2; round++) {
        int bad = 0;
        for (int c = 0; c < CHAINS; c++)
            for (uint32_t i = 0; i < LEN; i++) {
                uint64_t l = (uint64_t)c * 1000 + i + 1 + (uint64_t)round * 10000000;
                uint64_t pc = i ? canon[i - 1] : 0;
                local[i] = l;
                canon[i] = i ? kvix_hash_seq_next(pc, l) : l;
                bad += kvix_backend_add_key(ops, be, i, l, canon[i], pc, (uint32_t)(c % 300), 0,
                                            &err) != KVIX_OK;
            }
        CHECK(bad == 0);
        CHECK_U64(ops->unique_blocks(be), (uint64_t)CHAINS * LEN);
        CHECK(ops->memory(be) > base + (size_t)CHAINS * LEN * 32);
        for (int c = 0; c < CHAINS; c += 97) { /* chains from every region */
            for (uint32_t i = 0; i < LEN; i++)
                local[i] = (uint64_t)c * 1000 + i + 1 + (uint64_t)round * 10000000;
            uint64_t scratch[LEN];
            kvix_qchain q = {local, scratch, LEN, 0};
            kvix_qhits hits = {0};
            CHECK(ops->query(be, &q, &hits, &err) == KVIX_OK);
            bc_hit *rows = bc_rows(&hits);
            CHECK_U64(hits.n, 1);
            if (hits.n == 1) {
                CHECK_U64(rows[0].slot, (uint64_t)(c % 300));
                CHECK_U64(rows[0].blocks, LEN);
            }
            free(rows);
            kvix__qhits_release(&hits);
        }
        for (int c = 0; c < CHAINS; c++)
            for (uint32_t i = 0; i < LEN; i++) {
                uint64_t l = (uint64_t)c * 1000 + i + 1 + (uint64_t)round * 10000000;
                uint64_t pc = i ? canon[i - 1] : 0;
                canon[i] = i ? kvix_hash_seq_next(pc, l) : l;
                kvix_backend_del_key(ops, be, i, l, canon[i], pc, (uint32_t)(c % 300), 0);
            }
        CHECK_U64(ops->unique_blocks(be), 0);
        size_t after = bc_settled_memory(ops, be, base + 16383);
        CHECK(after < base + 16384);
        if (after >= base + 16384)
            printf("#   memory %zu after, %zu empty\n", after, base);
    }
    ops->destroy(be);
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

/* Siblings are a singly linked ring, so removing a kid looks for its
 * predecessor; a parent whose unlinks walk far keeps hints in its shard.
 * One block with 800 kids (each with a kid of its own) held and dropped by
 * 24 slots in random order: answers as the model says all along, and the
 * hints' memory goes with the last kid. */
TEST(positional_wide_fanout)
{
    enum { KIDS = 800, NODES = 1 + 2 * KIDS, SLOTS = 24, QMAX = 8 };
    void *be = bc_create(ops, 0, 1);
    if (!be)
        return;
    uint64_t rng = th_seed();
    bc_model m = {calloc(NODES, sizeof(bc_node)), NODES, SLOTS, calloc((size_t)NODES * SLOTS, 1),
                  calloc(NODES, sizeof(int)), 1, 1, 0};
    for (int k = 0; k < NODES; k++) {
        bc_node *n = &m.nodes[k];
        n->parent = k == 0 ? -1 : k <= KIDS ? 0 : k - KIDS;
        n->local = 5000 + (uint64_t)k;
        if (n->parent < 0) {
            n->canon = n->local;
        } else {
            const bc_node *p = &m.nodes[n->parent];
            n->pos = p->pos + 1;
            n->pcanon = p->canon;
            n->canon = kvix_hash_seq_next(p->canon, n->local);
        }
        m.rep[k] = k;
    }
    size_t base = ops->memory(be);
    uint64_t local[QMAX];
    int bad = 0;
    long steps = 40000 * th_scale();
    for (long step = 0; step < steps && !bad; step++) {
        int s = (int)(bc_rand(&rng) % SLOTS), k = 1 + (int)(bc_rand(&rng) % (NODES - 1));
        unsigned r = (unsigned)(bc_rand(&rng) % 100);
        if (r < 45) {
            for (int j = k; j > 0; j = m.nodes[j].parent) /* k and its kid-of-root */
                bad |= bc_add(ops, be, &m, s, j, 0) != KVIX_OK;
            bad |= bc_add(ops, be, &m, s, 0, 0) != KVIX_OK;
        } else if (r < 95) {
            bc_del(ops, be, &m, s, k, 0);
            if (r < 60) /* now and then the whole branch (hole or not) */
                bc_del(ops, be, &m, s, k > KIDS ? k - KIDS : k + KIDS, 0);
        } else {
            size_t n = bc_path(&m, k, local, QMAX, 1, &rng);
            if (n && !bc_check_locals(ops, be, &m, local, n, "wide fanout"))
                bad = 1;
        }
    }
    CHECK(!bad);
    for (int k = 1; k < NODES && !bad; k += 5) {
        size_t n = bc_path(&m, k, local, QMAX, 0, &rng);
        if (n && !bc_check_locals(ops, be, &m, local, n, "wide fanout: final"))
            bad = 1;
    }
    for (int k = NODES - 1; k >= 0; k--) /* in an order unlike the links' */
        for (int s = 0; s < SLOTS; s++)
            bc_del(ops, be, &m, s, (int)(((uint64_t)k * 7919) % NODES), 0);
    CHECK_U64(ops->unique_blocks(be), 0);
    size_t after = bc_settled_memory(ops, be, base + 16384);
    CHECK(after <= base + 16384);
    ops->destroy(be);
    bc_model_free(&m);
}
