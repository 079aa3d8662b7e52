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

/* ---- explain: why a prompt's prefix stops where it does ---------------- */
/* (filled by kvix_index_explain, kvix/index.h; written by the codecs) */

/* What the index knows at a worker's first block that did not match. */
typedef enum kvix_why {
    KVIX_WHY_MATCH = 0,      /* the worker holds the whole query */
    KVIX_WHY_REMOVED,        /* it held that block and dropped it (removal) */
    KVIX_WHY_NOBODY,         /* no worker has stored a block that deep */
    KVIX_WHY_DIFFERS,        /* it holds other blocks there (after the matched prefix,
                              * or at block 0): none with the query's hash */
    KVIX_WHY_CLEARED,        /* it holds none there; all its blocks were dropped by a
                              * clear within the record (kvix_explained.removal) */
    KVIX_WHY_ABSENT,         /* it holds no block after the matched prefix */
    KVIX_WHY_UNKNOWN_WORKER, /* a named worker the partition does not know */
} kvix_why;

/* The usual causes of a hash that differs (bits of kvix_explained.causes and
 * .likely): what could make the router's block differ from the engine's. */
enum {
    KVIX_CAUSE_TOKENS = 1 << 0,     /* other token ids: the prompt, a tokenizer or template */
    KVIX_CAUSE_LORA = 1 << 1,       /* a LoRA adapter on one side only, or another */
    KVIX_CAUSE_SALT = 1 << 2,       /* a cache salt on one side only, or another */
    KVIX_CAUSE_MULTIMODAL = 1 << 3, /* multimodal keys in the block */
    KVIX_CAUSE_BLOCK_SIZE = 1 << 4, /* the router hashed with another block size */
    KVIX_CAUSE_EAGLE = 1 << 5,      /* EAGLE windows on one side only */
};
#define KVIX_CAUSES 6 /* their names: kvix_cause_name (kvix/stream.h) */

#define KVIX_EXPLAIN_HELD_MAX 8   /* blocks listed per worker */
#define KVIX_EXPLAIN_BEST 4       /* best workers explained when the answer has more */
#define KVIX_EXPLAIN_MAX (KVIX_EXPLAIN_BEST + 4 * KVIX_QUERY_WORKERS_MAX) /* named: 4 dp each */
#define KVIX_EXPLAIN_CLOSEST 3    /* known names listed for an unknown one */

/* A block a worker holds where the query stops. */
typedef struct kvix_held {
    uint64_t local, engine; /* its local hash; the worker's engine hash for it */
    unsigned tiers;         /* bit (1 << kvix_medium) per tier */
    int after_prefix;       /* its parent is the query's last matched block (block 0: 1) */
} kvix_held;

/* An event that dropped blocks, from the record (kvix_index_opts.removals). */
typedef struct kvix_removal {
    int kind;          /* KVIX_EV_REMOVED or KVIX_EV_CLEARED; 0: the event fell out
                        * of the record (the block's entry is still there) */
    int has_eid, has_ts;
    uint64_t eid;      /* the event's */
    double ts;         /* the event's */
    double at;         /* the index's clock when it applied it (seconds since the epoch) */
    double ago;        /* seconds from `at` to the explain */
    uint32_t blocks;   /* blocks it dropped from the worker */
} kvix_removal;

typedef struct kvix_explained {
    uint64_t worker;
    uint32_t dp;
    int named;            /* named in the query (else: among the best) */
    int why;              /* kvix_why */
    uint32_t blocks;      /* matched: the first block that did not match */
    uint64_t want;        /* the query's local hash there (when blocks < the query's) */
    unsigned causes;      /* DIFFERS: bits of what could make the hashes differ */
    unsigned likely;      /* of those, confirmed: the query's block 0 rehashed another
                           * way is what the worker holds (KVIX_CAUSE_LORA: with the
                           * adapter in lora, "" for none); KVIX_CAUSE_EAGLE: a router's
                           * hashes against a partition of EAGLE's windows */
    char lora[KVIX_NAME_MAX];
    uint32_t held_at;     /* blocks the worker holds at that position */
    uint32_t held_after;  /* of those, after the matched prefix */
    uint32_t nheld;
    kvix_held held[KVIX_EXPLAIN_HELD_MAX]; /* after the prefix first */
    kvix_removal removal; /* REMOVED, CLEARED */
    int has_clear;        /* another why, and a clear within the record: the latest */
    kvix_removal clear;
} kvix_explained;

/* The explanation of one query. Reuse it; free it with kvix_explain_release. */
typedef struct kvix_explain {
    int unknown;           /* kvix_unknown: the partition is unknown */
    uint32_t nclosest;     /* with unknown: the known names closest to the query's
                            * (models, or the model's tenants), by edit distance */
    char closest[KVIX_EXPLAIN_CLOSEST][KVIX_NAME_MAX];
    uint32_t bs;           /* the partition's block size */
    uint32_t query_bs;     /* the query's "bs" when it differs from bs (then no answer) */
    uint32_t depth;        /* 1 + the deepest position stored in the partition */
    int eagle;             /* the partition's blocks are EAGLE's windows (kvix_index_eagle) */
    uint32_t nw;
    kvix_explained w[KVIX_EXPLAIN_MAX];
    /* private scratch */
    uint64_t *scratch;
    size_t scratch_cap;
    kvix_answer full;
} kvix_explain;

void kvix_explain_init(kvix_explain *x);
void kvix_explain_release(kvix_explain *x);

#ifdef __cplusplus
}
#endif
#endif
