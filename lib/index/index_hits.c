/* A query's hits as the backends record them (kvix_qhits, lib/index/index_int.h):
 * slots, their runs of equal matches, and per-tier rows when the backend holds
 * blocks off gpu. Below the backends and the query front end, which both use it. */
#include <stdlib.h>
#include <string.h>

#include "index_int.h"

/* Room for cap hits' tier rows (copying the n in use). */
static int tiers_grow(kvix_qhits *h, size_t cap, kvix_err *err)
{
    if (h->tcap >= cap) {
        h->tier = h->tbuf;
        return KVIX_OK;
    }
    void *t = realloc(h->tbuf, cap * sizeof *h->tier);
    if (!t)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory for query hits");
    h->tbuf = t;
    h->tcap = cap;
    h->tier = t;
    return KVIX_OK;
}

int kvix__qhits_reserve(kvix_qhits *h, size_t n, kvix_err *err)
{
    if (h->cap - h->n < n) {
        size_t cap = h->cap ? h->cap : 16;
        while (cap - h->n < n)
            cap *= 2;
        uint32_t *v = realloc(h->slot, cap * sizeof *v);
        if (!v)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for query hits");
        h->slot = v;
        h->cap = cap;
    }
    return h->tier ? tiers_grow(h, h->cap, err) : KVIX_OK;
}

int kvix__qhits_run(kvix_qhits *h, size_t first, size_t n, uint32_t blocks, kvix_err *err)
{
    if (!n)
        return KVIX_OK;
    if (h->nrun == h->rcap) {
        size_t cap = h->rcap ? 2 * h->rcap : 16;
        kvix_qrun *r = realloc(h->run, cap * sizeof *r);
        if (!r)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory for query hits");
        h->run = r;
        h->rcap = cap;
    }
    h->run[h->nrun++] = (kvix_qrun){(uint32_t)first, (uint32_t)n, blocks};
    return KVIX_OK;
}

int kvix__qhits_push(kvix_qhits *h, uint32_t slot, uint32_t blocks, kvix_err *err)
{
    if (h->n == h->cap || (h->tier && h->tcap <= h->n)) {
        int rc = kvix__qhits_reserve(h, 1, err);
        if (rc)
            return rc;
    }
    kvix_qrun *last = h->nrun ? &h->run[h->nrun - 1] : NULL;
    if (last && last->blocks == blocks && last->first + last->n == h->n) {
        last->n++;
    } else {
        int rc = kvix__qhits_run(h, h->n, 1, blocks, err);
        if (rc)
            return rc;
    }
    if (h->tier)
        memcpy(h->tier[h->n], (uint32_t[KVIX_MEDIUM_COUNT]){[KVIX_MEDIUM_GPU] = blocks},
               sizeof h->tier[h->n]);
    h->slot[h->n++] = slot;
    return KVIX_OK;
}

int kvix__qhits_tiers(kvix_qhits *h, kvix_err *err)
{
    if (h->tier)
        return KVIX_OK;
    int rc = tiers_grow(h, h->cap ? h->cap : 16, err);
    if (rc)
        return rc;
    for (size_t r = 0; r < h->nrun; r++)
        for (size_t i = h->run[r].first; i < h->run[r].first + h->run[r].n; i++)
            memcpy(h->tier[i], (uint32_t[KVIX_MEDIUM_COUNT]){[KVIX_MEDIUM_GPU] = h->run[r].blocks},
                   sizeof h->tier[i]);
    return KVIX_OK;
}

void kvix__qhits_rows(const kvix_qhits *h, kvix_qhit *rows)
{
    for (size_t i = 0; i < h->n; i++)
        rows[i] = (kvix_qhit){h->slot[i], 0};
    for (size_t r = 0; r < h->nrun; r++)
        for (size_t i = h->run[r].first; i < h->run[r].first + h->run[r].n; i++)
            rows[i].blocks = h->run[r].blocks;
}

void kvix__qhits_release(kvix_qhits *h)
{
    free(h->slot);
    free(h->run);
    free(h->tbuf);
    memset(h, 0, sizeof *h);
}
