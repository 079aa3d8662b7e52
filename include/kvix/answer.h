/* kvix: a query's answer (contract section 4): the (worker, dp) that hold a
 * prefix of the query's blocks, and how much of it. The index fills it
 * (kvix/index.h); the codecs write it (kvix/stream.h). */
#ifndef KVIX_ANSWER_H
#define KVIX_ANSWER_H

#include <stddef.h>
#include <stdint.h>

#include "kvix/event.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvix_score {
    uint64_t worker;
    uint32_t dp;
    uint32_t blocks;                        /* matched contiguous prefix, any tier */
    uint32_t tier_blocks[KVIX_MEDIUM_COUNT]; /* of those, how many the worker holds per tier */
    uint32_t held; /* blocks the (worker, dp) holds in the partition (read while writers
                    * run: a recent value) */
} kvix_score;

/* Why a query's partition is unknown to the index (contract section 4: the
 * answer says so rather than look like a cache miss). */
typedef enum kvix_unknown {
    KVIX_UNKNOWN_NONE = 0, /* the partition exists */
    KVIX_UNKNOWN_MODEL,    /* no partition has the query's model */
    KVIX_UNKNOWN_TENANT,   /* the model is known, not with this tenant */
} kvix_unknown;

/* A query answer (contract section 4). Owns scores; reuse it across queries
 * and free its array with kvix_answer_release.
 *
 * A top answer (the query's "top", else kvix_index_opts.top) keeps the best
 * top scores, in rank order: blocks desc, then the tiers from the fastest
 * (more of the match on gpu first, then cpu, disk, external), then worker,
 * then dp asc, so ties fall the same way every time; omitted counts the
 * scored (worker, dp) it left out. They are chosen without sorting the
 * rest. A full answer (top 0) keeps the contract's order. */
typedef struct kvix_answer {
    uint32_t query_blocks; /* whole blocks in the query */
    uint32_t bs;           /* the partition's block size (0 if the partition is unknown) */
    int unknown;           /* kvix_unknown: the partition is unknown, and why */
    uint32_t top;          /* the top this answer was cut to, 0: a full answer */
    size_t omitted;        /* with top: scored (worker, dp) left out */
    kvix_score *scores;    /* full: blocks desc, then worker, then dp asc; top: rank order */
    size_t nscores, cap;
    /* Private scratch reused across queries (hashes, backend hits, their
     * runs and per-tier counts; the scores' buffer of 2 x cap, of which
     * scores points at one half; the hits filed by rank). */
    kvix_score *scores_buf;
    uint64_t *scratch;
    size_t scratch_cap;
    void *hits;
    size_t hits_cap;
    void *hit_runs;
    size_t hit_runs_cap;
    void *hit_tiers;
    size_t hit_tiers_cap;
    void *rank_buf;
    size_t rank_cap;
} kvix_answer;

/* Zero ans: it owns nothing yet. */
void kvix_answer_init(kvix_answer *ans);
/* Free the arrays ans owns (scores and scratch); ans is empty again, reusable. */
void kvix_answer_release(kvix_answer *ans);

#ifdef __cplusplus
}
#endif
#endif
