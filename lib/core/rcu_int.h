/* libkvix private: read-copy-update for the lock-free index backends.
 *
 * Flavour: liburcu's default "memb" flavour (urcu.h, -lurcu). Its read-side
 * lock is a thread-local counter update (membarrier(2) moves the fence cost to
 * the rare grace period), so a query pays a few nanoseconds for it.
 *
 * Registration: every thread that enters a read-side section or retires
 * memory through these helpers is registered with liburcu lazily, on its first
 * use, by kvix_rcu_lock/kvix_rcu_writer (a thread-local flag makes the check
 * one load). A pthread key destructor unregisters the thread when it exits, so
 * callers (the index front end, tools, tests, benchmarks) do nothing and may
 * create and join threads freely. Threads must not exit inside a read-side
 * section.
 *
 * The runtime (registration, deferred free) is lib/core/rcu.c.
 *
 * rcu_read_lock/unlock stay calls into liburcu (about four per query, two
 * per event): inlining them takes _LGPL_SOURCE, which liburcu's README
 * allows "only if your code is LGPL or GPL compatible", and kvix declares
 * no licence yet. URCU_INLINE_SMALL_FUNCTIONS, allowed under any licence,
 * inlines only urcu/pointer.h's helpers, not the read-side lock. Once kvix
 * has an LGPL- or GPL-compatible licence, define _LGPL_SOURCE before
 * <urcu.h> here.
 *
 * ThreadSanitizer does not see liburcu's grace periods (the library is not
 * instrumented), so under TSan each read-side unlock releases, and each RCU
 * free callback acquires, one synchronisation address: the happens-before
 * edge that the grace period really provides.
 */
#ifndef KVIX_RCU_INT_H
#define KVIX_RCU_INT_H

#include <urcu.h>

#if defined(__SANITIZE_THREAD__)
#define KVIX_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVIX_TSAN 1
#endif
#endif

#ifdef KVIX_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
extern char kvix__rcu_tsan_sync;
#define KVIX_RCU_TSAN_RELEASE() __tsan_release(&kvix__rcu_tsan_sync)
#define KVIX_RCU_TSAN_ACQUIRE() __tsan_acquire(&kvix__rcu_tsan_sync)
#else
#define KVIX_RCU_TSAN_RELEASE() ((void)0)
#define KVIX_RCU_TSAN_ACQUIRE() ((void)0)
#endif

extern __thread int kvix__rcu_registered;
/* Register the calling thread with liburcu (once per thread). */
void kvix__rcu_register_slow(void);

static inline void kvix_rcu_writer(void)
{
    if (__builtin_expect(!kvix__rcu_registered, 0))
        kvix__rcu_register_slow();
}

static inline void kvix_rcu_lock(void)
{
    kvix_rcu_writer();
    rcu_read_lock();
}

static inline void kvix_rcu_unlock(void)
{
    KVIX_RCU_TSAN_RELEASE();
    rcu_read_unlock();
}

/* free() the block that starts with head after a grace period (head must be
 * the first member of a malloc'd block). Call from a registered thread. */
void kvix__rcu_free(struct rcu_head *head);

/* liburcu's call_rcu threads do not survive fork(): a process that forks
 * without exec calls the first before fork() and the second in the parent
 * after it, the third in the child (liburcu's README, "Interaction with
 * fork()"; not from pthread_atfork, which it advises against). Else the
 * child's deferred work never runs: its frees are lost, and destroying a
 * positional backend that retired nodes (waiting for its batches) never
 * returns. */
void kvix__rcu_before_fork(void);
void kvix__rcu_after_fork_parent(void);
void kvix__rcu_after_fork_child(void);

#endif
