/* The index's lifecycle: options, a new index with its backend and writer
 * pool, and its end. Above the rest of the front end: it starts what the
 * other files define. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "index_front_int.h"

static const kvix_backend_ops *backend_ops(kvix_backend b)
{
    switch (b) {
    case KVIX_BACKEND_REFERENCE: return &kvix__backend_reference_ops;
    case KVIX_BACKEND_POSITIONAL: return &kvix__backend_positional_ops;
    case KVIX_BACKEND_RADIX: return &kvix__backend_radix_ops;
    }
    return NULL;
}

void kvix_index_opts_init(kvix_index_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->backend = KVIX_BACKEND_POSITIONAL;
    opts->binsearch = 1;
    opts->removals = KVIX_INDEX_REMOVALS;
}

#define THREADS_MAX 256u

int kvix_index_new(kvix_index **out, const kvix_index_opts *opts, kvix_err *err)
{
    kvix_index_opts def;
    if (!opts) {
        kvix_index_opts_init(&def);
        opts = &def;
    }
    const kvix_backend_ops *ops = backend_ops(opts->backend);
    if (!ops)
        return kvix_err_set(err, KVIX_EINVAL, "backend %s not built",
                            kvix_backend_name(opts->backend));
    if (opts->threads > THREADS_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "%u writer threads (limit %u)", opts->threads,
                            THREADS_MAX);
    if (opts->removals > KVIX_INDEX_REMOVALS_MAX)
        return kvix_err_set(err, KVIX_ERANGE, "a record of %u removals (limit %u)",
                            opts->removals, KVIX_INDEX_REMOVALS_MAX);
    kvix_index *idx = calloc(1, sizeof *idx);
    if (!idx)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for an index");
    idx->opts = *opts;
    idx->ops = ops;
    pthread_mutex_init(&idx->lock, NULL);
    kvix__ix_gate_init(idx);
    int rc;
    if (opts->threads && (rc = kvix__ix_pool_start(idx, opts->threads, err))) {
        pthread_rwlock_destroy(&idx->gate);
        pthread_mutex_destroy(&idx->lock);
        free(idx);
        return rc;
    }
    *out = idx;
    return KVIX_OK;
}

void kvix_index_free(kvix_index *idx)
{
    if (!idx)
        return;
    kvix__ix_pool_stop(idx);
    kvix__ix_parts_quiesce(idx);
    kvix__ix_cmap_release(&idx->parts, kvix__ix_part_free);
    pthread_rwlock_destroy(&idx->gate);
    pthread_mutex_destroy(&idx->lock);
    free(idx);
}

static const char *const backend_names[] = {"positional", "radix", "reference"};

const char *kvix_backend_name(kvix_backend b)
{
    return (unsigned)b < sizeof backend_names / sizeof *backend_names ? backend_names[b] : "?";
}

int kvix_backend_parse(const char *s, kvix_backend *out)
{
    for (unsigned i = 0; i < sizeof backend_names / sizeof *backend_names; i++) {
        if (s && strcmp(s, backend_names[i]) == 0) {
            *out = (kvix_backend)i;
            return KVIX_OK;
        }
    }
    return KVIX_EINVAL;
}
