/* Per-thread scratch of the holder sets' readers (lib/hset_int.h). */
#include <pthread.h>
#include <stdlib.h>

#include "hset_int.h"

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
    uint64_t *m = calloc(KVIX_SLOTS_MAX / 64, sizeof *m);
    if (m && pthread_setspecific(marks_key, m) != 0) {
        free(m);
        m = NULL;
    }
    return marks = m;
}

uint64_t *kvix_hs_marks(void)
{
    return marks ? marks : marks_make();
}
