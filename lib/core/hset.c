/* The holder sets' runtime (lib/core/hset_int.h): retired records freed in
 * batches after a grace period, and the readers' per-thread marks. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "hset_int.h"

/* ---- retired records ----
 * Arrays are copied on every change of their holders, so at thousands of
 * workers a writer retires a record for most stores and removals; one
 * call_rcu each would queue as many callbacks (and wake the callback thread
 * as often). A backend keeps them in a batch instead, handed to call_rcu
 * when full. */

#define RB_MAX 64

struct kvix_rbatch {
    struct rcu_head rcu; /* first: the batch is freed from it */
    unsigned n;
    void *p[RB_MAX];
};

static void rb_free(struct rcu_head *h)
{
    KVIX_RCU_TSAN_ACQUIRE();
    kvix_rbatch *b = (kvix_rbatch *)(void *)h;
    for (unsigned i = 0; i < b->n; i++)
        free(b->p[i]);
    free(b);
}

static void rb_lock(kvix_bmem *m)
{
    for (unsigned n = 0; atomic_exchange_explicit(&m->lock, 1, memory_order_acquire); n++)
        if (n > 100)
            sched_yield();
}

static void rb_unlock(kvix_bmem *m)
{
    atomic_store_explicit(&m->lock, 0, memory_order_release);
}

void kvix__bmem_defer(kvix_bmem *m, void *p)
{
    rb_lock(m);
    kvix_rbatch *b = m->batch;
    if (!b && (b = malloc(sizeof *b)))
        b->n = 0;
    if (!b) { /* no memory for a batch: this one goes alone */
        rb_unlock(m);
        kvix__rcu_free(p); /* a set record starts with its rcu_head */
        return;
    }
    b->p[b->n++] = p;
    int full = b->n == RB_MAX;
    m->batch = full ? NULL : b;
    rb_unlock(m);
    if (full) {
        kvix_rcu_writer();
        KVIX_RCU_TSAN_RELEASE(); /* the writers' last stores to the records come first */
        call_rcu(&b->rcu, rb_free);
    }
}

void kvix__bmem_release(kvix_bmem *m)
{
    kvix_rbatch *b = m->batch;
    if (!b)
        return;
    for (unsigned i = 0; i < b->n; i++)
        free(b->p[i]);
    free(b);
    m->batch = NULL;
}

/* ---- marks ---- */

static pthread_key_t marks_key;
static pthread_once_t marks_once = PTHREAD_ONCE_INIT;
static int marks_keyed;
static __thread uint64_t *marks;

static void marks_free(void *p)
{
    free(p);
    marks = NULL;
}

static void marks_key_init(void)
{
    marks_keyed = pthread_key_create(&marks_key, marks_free) == 0;
}

static uint64_t *marks_make(void)
{
    pthread_once(&marks_once, marks_key_init);
    if (!marks_keyed)
        return NULL;
    uint64_t *m = calloc(KVIX_HSET_IDS / 64, sizeof *m);
    if (m && pthread_setspecific(marks_key, m) != 0) {
        free(m);
        m = NULL;
    }
    return marks = m;
}

uint64_t *kvix__hs_marks(void)
{
    return marks ? marks : marks_make();
}
