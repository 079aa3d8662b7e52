/* Events for the unit tests that drive a fleet through kvix_index_apply
 * against a model of their own (test_index_fleet, test_index_slots): one
 * model, "default", on the GPU. */
#ifndef KVIX_TEST_INDEX_EVENTS_H
#define KVIX_TEST_INDEX_EVENTS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "kvix/event.h"
#include "kvix/hash.h"
#include "kvix/index.h"

static inline void ie_set_name(char *dst, const char *s)
{
    kvix_event_set_name(dst, s, strlen(s), NULL);
}

/* ev made anew: an event of type for (worker, dp). */
static inline void ie_event(kvix_event *ev, int type, uint64_t worker, uint32_t dp)
{
    kvix_event_reset(ev);
    ev->type = type;
    ie_set_name(ev->model, "default");
    ev->worker = worker;
    ev->dp = dp;
    ev->medium = KVIX_MEDIUM_GPU;
}

/* Apply ev; a rejection is counted in *bad, the first five printed with
 * what and n (the caller's step). */
static inline void ie_apply(kvix_index *idx, kvix_event *ev, long *bad, const char *what, long n)
{
    kvix_err err;
    if (kvix_index_apply(idx, ev, NULL, &err) && (*bad)++ < 5)
        printf("#   %s %ld: rejected: %s\n", what, n, err.msg);
}

/* A prompt's chain of depth blocks: random local hashes from the generator
 * *rng, each canonical hash following its parent's. */
static inline void ie_chain(uint64_t *local, uint64_t *canon, unsigned depth, uint64_t *rng)
{
    for (unsigned i = 0; i < depth; i++) {
        local[i] = th_splitmix(rng);
        canon[i] = i ? kvix_hash_seq_next(canon[i - 1], local[i]) : local[i];
    }
}

#endif
