/* The sequence tracker of one engine stream: see seqtrack_int.h.
 *
 * Items fed from the hold buffer are the tracker's own (owned = true): held
 * again they move without a copy, otherwise they are released once used. */
#include "seqtrack_int.h"

#include <stdlib.h>
#include <string.h>

static int sequence(kvix_seqtrack *t, uint64_t seq, void *item, bool owned, size_t bytes,
                    uint64_t now);

void kvix__seqtrack_init(kvix_seqtrack *t, const kvix_seqtrack_config *cfg,
                        const kvix_seqtrack_ops *ops, void *ctx)
{
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    if (t->cfg.hold_max == 0)
        t->cfg.hold_max = 1;
    t->ops = *ops;
    t->ctx = ctx;
}

static void release_held(kvix_seqtrack *t, kvix_seqtrack_held *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        t->ops.release(t->ctx, h[i].item);
}

void kvix__seqtrack_resume(kvix_seqtrack *t, uint64_t next)
{
    t->known = true;
    t->next = next;
    t->resumed = true;
}

static void replay_stop(kvix_seqtrack *t)
{
    t->replaying = false;
    t->ops.replay_stop(t->ctx);
}

void kvix__seqtrack_release(kvix_seqtrack *t)
{
    if (t->replaying)
        replay_stop(t);
    release_held(t, t->held, t->nheld);
    free(t->held);
    t->held = NULL;
    t->nheld = t->capheld = 0;
    t->held_bytes = 0;
}

static void emit(kvix_seqtrack *t, kvix_seqtrack_why why, uint64_t from, uint64_t to,
                 uint64_t seq)
{
    kvix_seqtrack_clear c = {why, from, to, seq, t->live_seq};
    t->ops.cleared(t->ctx, &c);
}

static void loss(kvix_seqtrack *t, kvix_seqtrack_why why, uint64_t from, uint64_t to)
{
    t->counts.losses++;
    emit(t, why, from, to, 0);
}

static void deliver(kvix_seqtrack *t, uint64_t seq, void *item, bool owned)
{
    t->ops.deliver(t->ctx, seq, item);
    t->next = seq + 1;
    t->known = true;
    if (owned)
        t->ops.release(t->ctx, item);
}

static void drop(kvix_seqtrack *t, void *item, bool owned)
{
    if (owned)
        t->ops.release(t->ctx, item);
}

/* Ask for every batch from `from` on. false: it could not be asked. */
static bool replay_start(kvix_seqtrack *t, uint64_t from, uint64_t now)
{
    if (t->ops.replay_start(t->ctx, from) != 0)
        return false;
    t->replaying = true;
    t->got_first = false;
    t->want = from;
    t->deadline = now + t->cfg.replay_timeout;
    t->counts.replays++;
    return true;
}

/* Feed the held batches again, as live ones: a new gap among them may start
 * a new replay, which holds the rest again. */
static int drain(kvix_seqtrack *t, uint64_t now)
{
    kvix_seqtrack_held *h = t->held;
    size_t n = t->nheld;
    t->held = NULL;
    t->nheld = t->capheld = 0;
    t->held_bytes = 0;
    int rc = KVIX_OK;
    for (size_t i = 0; i < n; i++) {
        rc = sequence(t, h[i].seq, h[i].item, true, h[i].bytes, now);
        if (rc != KVIX_OK) {
            release_held(t, h + i + 1, n - i - 1);
            break;
        }
    }
    free(h);
    return rc;
}

/* The replay could not finish (timeout, overflow): what it did not bring is
 * lost; the next batch is taken as it comes. */
static int replay_abort(kvix_seqtrack *t, kvix_seqtrack_why why, uint64_t now)
{
    replay_stop(t);
    loss(t, why, t->next, UINT64_MAX);
    t->resync = true;
    return drain(t, now);
}

static int push(kvix_seqtrack *t, uint64_t seq, void *item, bool owned, size_t bytes,
                uint64_t now)
{
    bool over_bytes = t->cfg.hold_bytes_max && t->nheld &&
                      (bytes > t->cfg.hold_bytes_max ||
                       t->held_bytes > t->cfg.hold_bytes_max - bytes);
    if (t->nheld >= t->cfg.hold_max || over_bytes) {
        int rc = replay_abort(t, KVIX_SEQTRACK_OVERFLOW, now);
        if (rc != KVIX_OK) {
            drop(t, item, owned);
            return rc;
        }
        return sequence(t, seq, item, owned, bytes, now);
    }
    if (t->nheld == t->capheld) {
        size_t cap = t->capheld ? t->capheld * 2 : 16;
        if (cap > t->cfg.hold_max)
            cap = t->cfg.hold_max;
        kvix_seqtrack_held *h = realloc(t->held, cap * sizeof *h);
        if (!h) {
            drop(t, item, owned);
            return KVIX_ENOMEM;
        }
        t->held = h;
        t->capheld = cap;
    }
    void *own = owned ? item : t->ops.hold(t->ctx, item);
    if (!own)
        return KVIX_ENOMEM;
    t->held[t->nheld++] = (kvix_seqtrack_held){seq, own, bytes};
    t->held_bytes += bytes;
    return KVIX_OK;
}

/* Put a batch in order: deliver it, hold it while a replay runs, or see a gap. */
static int sequence(kvix_seqtrack *t, uint64_t seq, void *item, bool owned, size_t bytes,
                    uint64_t now)
{
    if (t->replaying) {
        if (seq < t->next) {
            t->counts.stale++; /* the replay brought it already */
            drop(t, item, owned);
            return KVIX_OK;
        }
        return push(t, seq, item, owned, bytes, now);
    }
    if (!t->known || t->resync) {
        t->resync = false;
        deliver(t, seq, item, owned);
    } else if (seq == t->next) {
        deliver(t, seq, item, owned);
    } else if (seq < t->next) {
        t->counts.stale++;
        drop(t, item, owned);
    } else {
        t->counts.gaps++;
        if (replay_start(t, t->next, now))
            return push(t, seq, item, owned, bytes, now);
        loss(t, KVIX_SEQTRACK_NO_REPLAY, t->next, seq - 1);
        deliver(t, seq, item, owned);
    }
    return KVIX_OK;
}

/* The engine's old cache is gone: clear, then count the new run from 0,
 * asking for the batches of it that went unseen. */
static int restart(kvix_seqtrack *t, uint64_t seq, void *item, size_t bytes,
                   kvix_seqtrack_why why, uint64_t now)
{
    t->counts.restarts++;
    if (t->replaying) {
        replay_stop(t);
        release_held(t, t->held, t->nheld);
        t->nheld = 0;
        t->held_bytes = 0;
    }
    emit(t, why, 0, 0, seq);
    t->known = true;
    t->next = 0;
    t->resync = false;
    if (seq == 0) {
        deliver(t, seq, item, false);
    } else if (replay_start(t, 0, now)) {
        return push(t, seq, item, false, bytes, now);
    } else {
        loss(t, KVIX_SEQTRACK_RESTART_MISSED, 0, seq - 1);
        deliver(t, seq, item, false);
    }
    return KVIX_OK;
}

/* Within one engine run seqs only grow, so a lower one means the engine
 * restarted; so does a new epoch in the topic, whatever the seq. */
int kvix__seqtrack_live(kvix_seqtrack *t, uint64_t seq, const char *epoch, size_t epoch_len,
                       void *item, uint64_t now)
{
    size_t bytes = t->ops.size ? t->ops.size(t->ctx, item) : 0;
    if (t->resumed) {
        t->resumed = false;
        if (seq < t->next) { /* below what was applied: a new engine run */
            t->live_known = true;
            int rc = restart(t, seq, item, bytes, KVIX_SEQTRACK_RESTART, now);
            t->live_seq = seq;
            return rc;
        }
    }
    if (epoch) {
        if (epoch_len > KVIX_SEQTRACK_EPOCH_MAX)
            epoch_len = KVIX_SEQTRACK_EPOCH_MAX;
        bool changed = t->epoch_len &&
                       (epoch_len != t->epoch_len || memcmp(epoch, t->epoch, epoch_len));
        memcpy(t->epoch, epoch, epoch_len);
        t->epoch_len = epoch_len;
        if (changed) {
            t->live_known = true;
            int rc = restart(t, seq, item, bytes, KVIX_SEQTRACK_EPOCH, now);
            t->live_seq = seq;
            return rc;
        }
    }
    if (t->live_known && seq == t->live_seq) {
        t->counts.duplicates++; /* the same batch again */
        return KVIX_OK;
    }
    if (t->live_known && seq < t->live_seq) {
        int rc = restart(t, seq, item, bytes, KVIX_SEQTRACK_RESTART, now);
        t->live_seq = seq;
        return rc;
    }
    t->live_known = true;
    t->live_seq = seq;
    return sequence(t, seq, item, false, bytes, now);
}

bool kvix__seqtrack_replay_want(kvix_seqtrack *t, uint64_t seq, uint64_t now)
{
    (void)now;
    if (!t->replaying)
        return false;
    /* Past the newest live seq only in order: the engine may have published
     * batches kvsub has not read yet, but a jump past them is no real answer. */
    if (seq < t->want || (t->live_known && seq > t->live_seq && seq != t->next)) {
        t->counts.refused++;
        return false;
    }
    if (!t->got_first) {
        t->got_first = true;
        if (seq > t->next) {
            loss(t, KVIX_SEQTRACK_REPLAY_LATER, t->next, seq - 1);
            t->next = seq;
        }
    }
    if (seq < t->next) {
        t->counts.stale++;
        return false;
    }
    return true;
}

void kvix__seqtrack_replayed(kvix_seqtrack *t, uint64_t seq, void *item)
{
    if (!t->replaying || seq < t->next) {
        t->counts.stale++;
        return;
    }
    if (!item) {
        /* Skipping it must not look like a gap again. */
        loss(t, KVIX_SEQTRACK_UNDECODABLE, seq, seq);
        t->next = seq + 1;
        return;
    }
    if (seq > t->next)
        loss(t, KVIX_SEQTRACK_REPLAY_MISSING, t->next, seq - 1);
    t->counts.replayed++;
    deliver(t, seq, item, false);
}

int kvix__seqtrack_replay_end(kvix_seqtrack *t, uint64_t now)
{
    if (!t->replaying)
        return KVIX_OK;
    replay_stop(t);
    if (t->nheld && t->held[0].seq > t->next) {
        /* The replay did not reach the held batches: the rest is gone. */
        loss(t, KVIX_SEQTRACK_REPLAY_SHORT, t->next, t->held[0].seq - 1);
        t->resync = true;
    }
    return drain(t, now);
}

int kvix__seqtrack_tick(kvix_seqtrack *t, uint64_t now)
{
    if (t->replaying && now >= t->deadline)
        return replay_abort(t, KVIX_SEQTRACK_TIMEOUT, now);
    return KVIX_OK;
}

bool kvix__seqtrack_replaying(const kvix_seqtrack *t, uint64_t *deadline)
{
    if (t->replaying && deadline)
        *deadline = t->deadline;
    return t->replaying;
}
