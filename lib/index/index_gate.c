/* The index's gate: writers on its shared side, whoever needs a quiet index
 * (a save, a dump, stats) on its exclusive side with the writer pool synced.
 * The lock prefers the exclusive side, so a busy writer never starves a save. */
#include <pthread.h>

#include "index_front_int.h"

void kvix__ix_gate_init(kvix_index *idx)
{
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&idx->gate, &a);
    pthread_rwlockattr_destroy(&a);
}

void kvix_index_write_begin(kvix_index *idx) { pthread_rwlock_rdlock(&idx->gate); }
void kvix_index_write_end(kvix_index *idx) { pthread_rwlock_unlock(&idx->gate); }

void kvix_index_quiet_begin(kvix_index *idx)
{
    pthread_rwlock_wrlock(&idx->gate);
    kvix_index_sync(idx);
}

void kvix_index_quiet_end(kvix_index *idx) { pthread_rwlock_unlock(&idx->gate); }
