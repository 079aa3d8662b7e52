/* kvdump: inspect, verify and diff snapshot files (kvix-snapshot(5)), and
 * print a snapshot as kvix events.
 *
 * A file is verified whole (magic, version, checksum, internal consistency)
 * before the first byte of output, so a corrupt snapshot never yields a
 * partial dump. The events, statistics and differences, and the text they
 * are written as, come from the library (kvix/snapshot.h, kvix/stream.h,
 * kvix/snapshot_stats.h, kvix/snapshot_diff.h); this file parses options,
 * moves bytes and picks messages and exit codes. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "kvix/buf.h"
#include "kvix/event.h"
#include "kvix/snapshot.h"
#include "kvix/snapshot_diff.h"
#include "kvix/snapshot_stats.h"
#include "kvix/stream.h"

enum { O_JSON = 'j', O_STATS = 's', O_CHECK = 'c', O_DIFF = 'd', O_QUIET = 'q', O_MODEL = 'm',
       O_TENANT = 't', O_WORKER = 'w', O_BACKEND = 256 };

static const cli_opt options[] = {
    {O_STATS, 's', "stats", NULL, NULL,
     "print per-partition and per-worker statistics (a table; ndjson with --json)"},
    {O_JSON, 'j', "json", NULL, NULL, "with --stats: one json object per line"},
    {O_CHECK, 'c', "check", NULL, NULL, "verify each snapshot: exit 0 if all are sound, 4 if not"},
    {O_DIFF, 'd', "diff", NULL, NULL,
     "compare snapshots A and B: exit 0 equal, 1 different, 2 on any error"},
    {O_QUIET, 'q', "quiet", NULL, NULL, "with --check or --diff: print nothing, only the exit status"},
    {O_MODEL, 'm', "model", "NAME", NULL, "only this model's partitions (dump and --stats)"},
    {O_TENANT, 't', "tenant", "NAME", NULL, "only this tenant's partitions (dump and --stats)"},
    {O_WORKER, 'w', "worker", "ID", NULL, "only this worker (dump and --stats)"},
    {O_BACKEND, 0, "backend", "NAME", "positional|radix|reference",
     "with --stats: the index backend whose memory is reported (default positional)"},
    {0, 0, NULL, NULL, NULL, NULL},
};

static const cli_tool tool = {
    .name = "kvdump",
    .usage = "[--stats [--json] | --check | --diff] [options] SNAPSHOT...",
    .summary = "print a kvix snapshot as events, show its statistics, verify it, or diff two",
    .opts = options,
    .operands = "file",
    .exits = "012346",
};

/* A filter that matched nothing is said: an empty dump would otherwise look
 * like an empty snapshot. */
static void warn_empty_filter(const kvix_snapshot_filter *f, uint64_t hits, const char *path)
{
    if ((!f->model && !f->tenant && !f->has_worker) || hits)
        return;
    char w[32] = "";
    if (f->has_worker)
        snprintf(w, sizeof w, " --worker %" PRIu64, f->worker);
    cli_warn("%s%s%s%s%s: matched nothing in %s", f->model ? "--model " : "",
             f->model ? f->model : "", f->tenant ? (f->model ? " --tenant " : "--tenant ") : "",
             f->tenant ? f->tenant : "", f->has_worker ? (f->model || f->tenant ? w : w + 1) : "",
             path);
}

/* ---- output ------------------------------------------------------------- */

static kvix_buf out;
/* --diff exits 2 on any trouble, as diff(1) does. */
static int diffing;

static int fail_code(int code)
{
    return diffing ? KVIX_EXIT_USAGE : code;
}

/* Set when the reader of stdout went away (head): not an error. A dump
 * stops there; --diff goes on without output, its status still counts. */
static int out_gone;

static void out_flush(void)
{
    if (out.len && !out_gone && fwrite(out.data, 1, out.len, stdout) != out.len) {
        if (errno != EPIPE)
            cli_die(fail_code(KVIX_EXIT_IO), "error writing standard output: %s",
                    strerror(errno));
        out_gone = 1;
        if (!diffing)
            exit(cli_finish(KVIX_EXIT_OK));
    }
    out.len = 0;
}

static void out_check(int rc, const kvix_err *err)
{
    if (rc)
        cli_die(fail_code(cli_exit_for(rc)), "%s", err->msg);
    if (out.len >= (1u << 16))
        out_flush();
}

/* The library's long writers hand over what they wrote so far. */
static int drain(void *ctx, kvix_buf *b)
{
    (void)ctx;
    (void)b; /* b is out */
    out_flush();
    return 0;
}

/* ---- opening -------------------------------------------------------------- */

/* Open a snapshot operand ("-" is stdin). On failure print the reason and
 * return the library status. */
static int open_snap(const char *path, kvix_snapshot **s, int quiet)
{
    kvix_err err = {0, "", KVIX_REASON_OTHER};
    int rc = strcmp(path, "-") == 0 ? kvix_snapshot_open_fd(s, STDIN_FILENO, "<stdin>", &err)
                                    : kvix_snapshot_open(s, path, &err);
    if (rc && !quiet)
        cli_warn("%s", err.msg);
    return rc;
}

static kvix_snapshot *open_or_die(const char *path)
{
    kvix_snapshot *s;
    int rc = open_snap(path, &s, 0);
    if (rc)
        exit(cli_finish(cli_exit_for(rc)));
    return s;
}

/* ---- dump ----------------------------------------------------------------- */

static int dump_event(void *ctx, const kvix_event *ev)
{
    (void)ctx;
    kvix_err err;
    out_check(kvix_event_to_json(ev, &out, &err), &err);
    return 0;
}

static int do_dump(const char *path, const kvix_snapshot_filter *f)
{
    kvix_snapshot *s = open_or_die(path);
    kvix_err err;
    uint64_t hits = 0;
    int rc = kvix_snapshot_events(s, f, dump_event, NULL, &hits, &err);
    if (rc)
        cli_die(cli_exit_for(rc), "%s", err.msg);
    out_flush();
    warn_empty_filter(f, hits, path);
    kvix_snapshot_close(s);
    return KVIX_EXIT_OK;
}

/* ---- check ---------------------------------------------------------------- */

static int do_check(int n, char **paths, int quiet)
{
    int code = KVIX_EXIT_OK;
    for (int i = 0; i < n; i++) {
        kvix_snapshot *s;
        int rc = open_snap(paths[i], &s, quiet);
        if (rc) {
            int c = cli_exit_for(rc);
            if (c > code)
                code = c;
            continue;
        }
        kvix_snapshot_info info;
        kvix_snapshot_get_info(s, &info);
        kvix_err err;
        if (!quiet)
            out_check(kvix_buf_printf(&out, &err,
                                      "%s: ok: version %" PRIu32 ", %" PRIu64 " partitions, %" PRIu64
                                      " workers, %" PRIu64 " blocks, %" PRIu64
                                      " bytes, checksum %016" PRIx64 "\n",
                                      strcmp(paths[i], "-") ? paths[i] : "<stdin>", info.version,
                                      info.partitions, info.groups, info.blocks, info.bytes,
                                      info.checksum),
                      &err);
        kvix_snapshot_close(s);
    }
    out_flush();
    return code;
}

/* ---- stats ---------------------------------------------------------------- */

static int do_stats(const char *path, const kvix_snapshot_filter *f, const kvix_index_opts *io,
                    int json)
{
    kvix_snapshot *s = open_or_die(path);
    kvix_snapshot_info info;
    kvix_snapshot_get_info(s, &info);
    kvix_snapshot_stats t;
    kvix_err err;
    int rc = kvix_snapshot_stats_get(s, f, io, &t, &err);
    if (rc)
        cli_die(cli_exit_for(rc), "%s", err.msg);
    warn_empty_filter(f, t.matched, path);
    out_check(kvix_snapshot_stats_write(
                  &t, &info, json ? KVIX_SNAPSHOT_STATS_JSON : KVIX_SNAPSHOT_STATS_TABLE, &out, &err),
              &err);
    out_flush();
    kvix_snapshot_stats_release(&t);
    kvix_snapshot_close(s);
    return KVIX_EXIT_OK;
}

/* ---- diff ----------------------------------------------------------------- */

/* One differing record as a JSON line. */
static int print_delta(void *ctx, const kvix_snapshot_delta *d)
{
    (void)ctx;
    kvix_err err;
    out_check(kvix_snapshot_delta_write(d, &out, drain, NULL, &err), &err);
    out_flush();
    return 0;
}

static int do_diff(const char *pa, const char *pb, int quiet)
{
    if (strcmp(pa, "-") == 0 && strcmp(pb, "-") == 0)
        cli_usage_error("--diff: only one of A and B can be '-'");
    kvix_snapshot *a = NULL, *b = NULL;
    if (open_snap(pa, &a, 0) || open_snap(pb, &b, 0))
        exit(cli_finish(KVIX_EXIT_USAGE));
    kvix_snapshot_info ia, ib;
    kvix_snapshot_get_info(a, &ia);
    kvix_snapshot_get_info(b, &ib);
    kvix_snapshot_diff_totals t;
    kvix_err err;
    int rc = kvix_snapshot_diff(a, b, quiet ? NULL : print_delta, NULL, &t, &err);
    if (rc)
        cli_die(KVIX_EXIT_USAGE, "%s", err.msg);
    if (!quiet)
        out_check(kvix_snapshot_diff_summary_write(&t, ia.blocks, ib.blocks, &out, &err), &err);
    out_flush();
    kvix_snapshot_close(a);
    kvix_snapshot_close(b);
    return t.differing ? KVIX_EXIT_REJECTED : KVIX_EXIT_OK;
}

/* ---- main ----------------------------------------------------------------- */

int main(int argc, char **argv)
{
    cli_init(&tool);
    kvix_buf_init(&out);
    int stats = 0, json = 0, check = 0, diff = 0, quiet = 0;
    kvix_snapshot_filter f = {NULL, NULL, 0, 0};
    kvix_index_opts io;
    kvix_index_opts_init(&io);
    int backend = 0;
    const char *arg;
    int c;
    while ((c = cli_next(argc, argv, &arg)) != -1) {
        switch (c) {
        case O_STATS: stats = 1; break;
        case O_JSON: json = 1; break;
        case O_CHECK: check = 1; break;
        case O_DIFF: diff = 1; break;
        case O_QUIET: quiet = 1; break;
        case O_MODEL: f.model = arg; break;
        case O_TENANT: f.tenant = arg; break;
        case O_WORKER:
            f.has_worker = 1;
            f.worker = cli_parse_uint(arg, 0, UINT64_MAX, "worker");
            break;
        case O_BACKEND:
            backend = 1;
            if (kvix_backend_parse(arg, &io.backend))
                cli_usage_error("bad backend for %s: '%s' (expected positional, radix or reference)",
                                                cli_opt_given(), arg);
            break;
        }
    }
    int nops = argc - optind;
    char **ops = argv + optind;
    if (stats + check + diff > 1)
        cli_usage_error("--stats, --check and --diff are exclusive");
    if (json && !stats)
        cli_usage_error("--json goes with --stats");
    if (backend && !stats)
        cli_usage_error("--backend goes with --stats");
    if (quiet && !check && !diff)
        cli_usage_error("--quiet goes with --check or --diff");
    if ((check || diff) && (f.model || f.tenant || f.has_worker))
        cli_usage_error("--model, --tenant and --worker filter a dump or --stats");
    int code;
    if (diff) {
        diffing = 1;
        if (nops != 2)
            cli_usage_error("--diff takes two snapshots, A and B");
        code = do_diff(ops[0], ops[1], quiet);
    } else if (check) {
        if (nops < 1)
            cli_usage_error("--check takes one or more snapshots");
        int dash = 0;
        for (int i = 0; i < nops; i++)
            dash += strcmp(ops[i], "-") == 0;
        if (dash > 1)
            cli_usage_error("standard input ('-') can be read only once");
        code = do_check(nops, ops, quiet);
    } else {
        if (nops != 1)
            cli_usage_error("expected one snapshot (or '-' for standard input)");
        code = stats ? do_stats(ops[0], &f, &io, json) : do_dump(ops[0], &f);
    }
    kvix_buf_release(&out);
    return cli_finish(code);
}
