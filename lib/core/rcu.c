/* The RCU runtime of the lock-free index backends (positional, radix):
 * lazy per-thread registration with liburcu and deferred free. The contract
 * is in lib/core/rcu_int.h. */
#include <pthread.h>
#include <stdlib.h>

#include "rcu_int.h"

__thread int kvix__rcu_registered;
#ifdef KVIX_TSAN
char kvix__rcu_tsan_sync;
#endif
static pthread_key_t rcu_key;
static pthread_once_t rcu_once = PTHREAD_ONCE_INIT;

static void rcu_thread_exit(void *arg)
{
    (void)arg;
    rcu_unregister_thread();
    kvix__rcu_registered = 0;
}

static void rcu_key_init(void)
{
    (void)pthread_key_create(&rcu_key, rcu_thread_exit);
}

void kvix__rcu_register_slow(void)
{
    pthread_once(&rcu_once, rcu_key_init);
    rcu_register_thread();
    (void)pthread_setspecific(rcu_key, (void *)1);
    kvix__rcu_registered = 1;
}

static void rcu_free_cb(struct rcu_head *head)
{
    KVIX_RCU_TSAN_ACQUIRE();
    free(head);
}

void kvix__rcu_free(struct rcu_head *head)
{
    kvix_rcu_writer();
    KVIX_RCU_TSAN_RELEASE(); /* the writer's last stores to the block come before the free */
    call_rcu(head, rcu_free_cb);
}

void kvix__rcu_before_fork(void)
{
    call_rcu_before_fork();
}

void kvix__rcu_after_fork_parent(void)
{
    call_rcu_after_fork_parent();
}

void kvix__rcu_after_fork_child(void)
{
    call_rcu_after_fork_child();
}
