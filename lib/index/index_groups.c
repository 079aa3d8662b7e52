/* KV cache groups (hybrid models, kvix/index.h): the kinds a (worker, dp)'s
 * stores taught, whether an event's group is indexed, and, for a (worker,
 * dp) with two full-kind groups or more, which of them hold each block.
 *
 * A (worker, dp) without a record here (w->grp NULL) is one whose only
 * group is group 0, of a full kind (what every engine of a model without
 * hybrid layers sends, vLLM naming it, older engines not): its events cost a
 * test or two, and it is the same state whether its events named the group
 * or not. One with more groups has a record of 80 bytes; the membership map
 * exists only while two full groups or more were learned (a model whose
 * full attention layers fall into several groups), so its cost follows
 * what those workers hold. */
#include <stdlib.h>
#include <string.h>

#include "index_front_int.h"

static inline uint64_t bit(uint32_t g)
{
    return UINT64_C(1) << g;
}

static int popcount(uint64_t v)
{
    return __builtin_popcountll(v);
}

/* w's record, made in the state it stands for without one: nothing said,
 * group 0 taken to be full (what it held was group 0's). */
static wgroups *grp_get(wstate *w)
{
    if (!w->grp && (w->grp = calloc(1, sizeof *w->grp)))
        w->grp->full = bit(0);
    return w->grp;
}

void kvix__ix_grp_members_free(wstate *w)
{
    if (w->grp && w->grp->member) {
        kvix__hmap_release(w->grp->member);
        free(w->grp->member);
        w->grp->member = NULL;
    }
}

void kvix__ix_grp_free(wstate *w)
{
    kvix__ix_grp_members_free(w);
    free(w->grp);
    w->grp = NULL;
}

size_t kvix__ix_grp_memory(const wstate *w)
{
    if (!w->grp)
        return 0;
    return sizeof *w->grp + (w->grp->member ? sizeof *w->grp->member +
                                                  kvix__hmap_memory(w->grp->member)
                                            : 0);
}

/* The groups holding (engine, tier), or NULL (w has a membership map). */
static uint64_t *member_get(wstate *w, uint64_t engine, unsigned tier)
{
    uint64_t key[2] = {engine, tier};
    return kvix__hmap_get(w->grp->member, key);
}

static int member_add(wstate *w, uint64_t engine, unsigned tier, uint64_t groups)
{
    uint64_t key[2] = {engine, tier};
    int inserted;
    uint64_t *m = kvix__hmap_put(w->grp->member, key, &inserted);
    if (!m)
        return KVIX_ENOMEM;
    *m |= groups;
    return KVIX_OK;
}

/* A second full group: from now on w keeps which full groups hold each of
 * its blocks. What it holds so far was stored by the full group it had
 * (or, stored by events without a group, is every full group's). */
static int members_start(wstate *w, uint64_t held_by, kvix_err *err)
{
    kvix_hmap *m = malloc(sizeof *m);
    if (!m)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for KV cache groups");
    kvix__hmap_init(m, 2, sizeof(uint64_t));
    w->grp->member = m;
    size_t it = 0;
    uint64_t engine;
    bent e;
    if (kvix__hmap_reserve(m, kvix_ix_bm_size(&w->blocks)))
        goto nomem;
    while ((e = kvix__ix_bm_next(&w->blocks, &it, &engine)))
        for (unsigned t = 0; t < KVIX_MEDIUM_COUNT; t++)
            if (bent_tiers(e) & (1u << t) && member_add(w, engine, t, held_by))
                goto nomem;
    return KVIX_OK;
nomem:
    kvix__ix_grp_members_free(w);
    return kvix_err_set(err, KVIX_ENOMEM, "out of memory for KV cache groups");
}

int kvix__ix_grp_learn(wstate *w, uint32_t group, int kind, kvix_err *err)
{
    if (!w->grp && group == 0 && kvix_kind_full(kind))
        return KVIX_OK; /* what a state without a record stands for */
    wgroups *g = grp_get(w);
    if (!g)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for KV cache groups");
    int learned = (g->learned & bit(group)) != 0;
    if (kind == KVIX_KIND_NONE) {
        if (learned)
            return KVIX_OK; /* a store that does not say keeps what was said */
        kind = KVIX_KIND_FULL_ATTENTION;
    }
    if (learned && g->kind[group] == kind)
        return KVIX_OK;
    uint64_t old_full = g->full;
    g->kind[group] = (uint8_t)kind;
    g->learned |= bit(group);
    if (kvix_kind_full(kind))
        g->full |= bit(group);
    else
        g->full &= ~bit(group);
    if (g->member && popcount(g->full) < 2) {
        kvix__ix_grp_members_free(w); /* one full group: a removal of it is the removal */
    } else if (g->member && (old_full & ~g->full)) {
        /* A full group says it is of another kind (an engine reconfigured
         * without a restart): its hold on blocks goes, the others' stay. */
        size_t it = 0;
        uint64_t *m;
        while ((m = kvix__hmap_next(g->member, &it, NULL)))
            *m &= g->full;
    } else if (!g->member && popcount(g->full) >= 2) {
        return members_start(w, old_full ? old_full : g->full, err);
    }
    return KVIX_OK;
}

int kvix__ix_grp_indexed(const wstate *w, const kvix_event *ev)
{
    if (!ev->has_group)
        return 1;
    const wgroups *g = w ? w->grp : NULL;
    if (!g)
        return ev->group == 0 && (ev->type != KVIX_EV_STORED || kvix_kind_full(ev->kind));
    if (!(g->learned & bit(ev->group)))
        /* Dynamo's rule: a removal of a group never seen storing is another
         * kind's, unless it is group 0 (what an engine without groups says) */
        return ev->type == KVIX_EV_STORED ? kvix_kind_full(ev->kind) : ev->group == 0;
    return kvix_kind_full(g->kind[ev->group]);
}

/* The full groups an event speaks for: its own, or every one. */
static uint64_t groups_of(const wstate *w, const kvix_event *ev)
{
    return ev->has_group ? bit(ev->group) : w->grp->full;
}

int kvix__ix_grp_stored(wstate *w, const kvix_event *ev, size_t n, kvix_err *err)
{
    if (!w->grp || !w->grp->member)
        return KVIX_OK;
    uint64_t gs = groups_of(w, ev);
    for (size_t i = 0; i < n; i++) {
        uint64_t engine = ev->placeholder ? ev->hashes[i] : ev->blocks[i].seq;
        bent e = kvix__ix_bm_get(&w->blocks, engine, NULL);
        if (e && bent_tiers(e) & (1u << ev->medium) &&
            member_add(w, engine, (unsigned)ev->medium, gs))
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for KV cache groups");
    }
    return KVIX_OK;
}

size_t kvix__ix_grp_removed(wstate *w, const kvix_event *ev, uint64_t *out, kvix_apply_result *r)
{
    uint64_t gs = groups_of(w, ev);
    unsigned tier = (unsigned)ev->medium;
    size_t n = 0;
    for (size_t i = 0; i < ev->nhashes; i++) {
        uint64_t key[2] = {ev->hashes[i], tier};
        uint64_t *m = member_get(w, ev->hashes[i], tier);
        if (m && (*m &= ~gs)) {
            r->kept++; /* another full group still holds it */
            continue;
        }
        if (m)
            kvix__hmap_del(w->grp->member, key);
        out[n++] = ev->hashes[i];
    }
    return n;
}
