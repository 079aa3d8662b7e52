/* kvreplay --mooncake: a Mooncake trace played as engines would, through
 * the record path of kvreplay_play.c. See kvreplay.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kvreplay.h"

/* A trace request that cannot be played: said with its line and counted; true
 * when --strict stops the run there. */
static bool reject_request(replay *r, const char *trace, uint64_t line, const kvix_err *err)
{
    cli_warn("bad request at %s:%" PRIu64 ": %s", trace, line, err->msg);
    r->rejected++;
    return r->strict;
}

int run_mooncake(replay *r, mooncake_args *a)
{
    kvix_err err;
    kvix_mooncake *m;
    if (kvix_mooncake_new(&m, &a->o, &err))
        cli_usage_error("%s", err.msg);
    if (r->pub) {
        for (uint32_t w = 0; w < a->o.workers * a->o.copies; w++) {
            if (kvix_filter_worker_match(&r->filter, w, 0))
                add_pub(r, w, 0);
        }
        start_pubs(r);
    }
    kvix_logio *lio;
    char *trace[] = {(char *)a->trace};
    r->in_total = inputs_size(trace, 1);
    r->in_started = now_s();
    int code = open_input(r, a->trace, &lio);
    if (code) {
        kvix_mooncake_free(m);
        return code;
    }
    kvix_mooncake_trace *t;
    if (kvix_mooncake_trace_new(&t, kvix_logio_fd(lio), &err))
        cli_die(KVIX_EXIT_SYS, "%s", err.msg);
    kvix_mooncake_req req;
    kvix_mooncake_req_init(&req);
    uint64_t n = 0;
    /* --limit counts trace requests here, not records. */
    uint64_t limit = r->limit;
    r->limit = 0;
    while (!limit || n < limit) {
        int rc = kvix_mooncake_trace_next(t, &req, &err);
        if (rc == KVIX_EOF)
            break;
        if (rc == KVIX_EIO || rc == KVIX_ENOMEM) {
            cli_warn("%s: %s", a->trace, err.msg);
            code = cli_exit_for(rc);
            break;
        }
        if (rc) {
            if (reject_request(r, a->trace, kvix_mooncake_trace_line(t), &err)) {
                code = KVIX_EXIT_STRICT;
                break;
            }
            continue;
        }
        rc = kvix_mooncake_step(m, &req, kvix_mooncake_trace_line(t) - 1, emit, r, &err);
        n++;
        if (rc == KVIX_ERANGE) { /* nothing of it played */
            if (reject_request(r, a->trace, kvix_mooncake_trace_line(t), &err)) {
                code = KVIX_EXIT_STRICT;
                break;
            }
            continue;
        }
        if (rc < 0)
            cli_die(cli_exit_for(rc), "%s", err.msg);
        if (rc > 0 || r->fatal)
            break;
    }
    if (r->ps)
        flush_batch(r);
    kvix_mooncake_req_release(&req);
    kvix_mooncake_trace_free(t);
    int c2 = close_input(r, lio);
    if (!code)
        code = c2;
    if (a->final_state) {
        FILE *f = fopen(a->final_state, "w");
        if (!f)
            cli_die(KVIX_EXIT_IO, "cannot write %s: %s", a->final_state, strerror(errno));
        int rc = kvix_mooncake_state_write(m, f, &err);
        if (rc == KVIX_ENOMEM)
            cli_die(cli_exit_for(rc), "%s", err.msg);
        if (rc || fflush(f) != 0 || ferror(f) | fclose(f))
            cli_die(KVIX_EXIT_IO, "cannot write %s: %s", a->final_state, strerror(errno));
    }
    if (!r->quiet) {
        kvix_mooncake_stats s;
        kvix_mooncake_stats_get(m, &s);
        cli_warn("mooncake: %" PRIu64 " requests (%" PRIu64 " skipped), %" PRIu64
                 " blocks asked, %" PRIu64 " hit (%.1f%%), %" PRIu64 " stored in %" PRIu64
                 " events, %" PRIu64 " removed in %" PRIu64 " events, %" PRIu64
                 " cached at the end (%" PRIu64 " partial, %" PRIu64 " past capacity)",
                 s.requests, s.skipped, s.query_blocks, s.hit_blocks,
                 s.query_blocks ? 100.0 * (double)s.hit_blocks / (double)s.query_blocks : 0.0,
                 s.stored_blocks, s.stored_events, s.removed_blocks, s.removed_events,
                 s.cached_blocks, s.partial_blocks, s.truncated_blocks);
    }
    kvix_mooncake_free(m);
    return code;
}
