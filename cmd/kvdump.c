/* kvdump: inspect, verify and diff snapshot files (kvix-snapshot(5)), and
 * print a snapshot as kvix events.
 *
 * A file is verified whole (magic, version, checksum, internal consistency)
 * before the first byte of output, so a corrupt snapshot never yields a
 * partial dump. Statistics and differences come from the library
 * (kvix/snapshot_stats.h, kvix/snapshot_diff.h); this file parses options,
 * moves bytes, prints and picks exit codes. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "kvix/buf.h"
#include "kvix/event.h"
#include "kvix/hash.h"
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

static void outf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void outf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    kvix_err err;
    if (n < 0 || kvix_buf_reserve(&out, (size_t)n, &err))
        cli_die(fail_code(KVIX_EXIT_SYS), "out of memory");
    va_start(ap, fmt);
    vsnprintf(out.data + out.len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    out.len += (size_t)n;
}

/* A name as a JSON string (jansson does the escaping). */
static void out_jstr(const char *s)
{
    json_t *j = json_string(s);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    outf("%s", t ? t : "\"?\"");
    free(t);
    json_decref(j);
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

/* Events are written one behind, so the last event of a (worker, dp) can
 * carry its eid: replaying the dump restores it. */
typedef struct dumper {
    kvix_event pending;
    int have_pending;
} dumper;

static void dump_pending(dumper *d)
{
    kvix_err err;
    if (d->have_pending)
        out_check(kvix_event_to_json(&d->pending, &out, &err), &err);
    d->have_pending = 0;
}

static int dump_event(void *ctx, const kvix_event *ev)
{
    dumper *d = ctx;
    kvix_err err;
    dump_pending(d);
    out_check(kvix_event_copy(&d->pending, ev, &err), &err);
    d->have_pending = 1;
    return 0;
}

static int do_dump(const char *path, const kvix_snapshot_filter *f)
{
    kvix_snapshot *s = open_or_die(path);
    dumper d = {.have_pending = 0};
    kvix_event_init(&d.pending);
    kvix_event scratch;
    kvix_event_init(&scratch);
    kvix_snapshot_group g;
    kvix_err err;
    int rc;
    uint64_t hits = 0;
    while ((rc = kvix_snapshot_next(s, &g, &err)) == KVIX_OK) {
        if (!kvix_snapshot_filter_match(f, &g))
            continue;
        hits++;
        if (kvix_snapshot_group_is_partition(&g))
            continue;
        out_check(kvix_snapshot_group_events(&g, &scratch, dump_event, &d, NULL, &err), &err);
        if (g.has_eid && !d.have_pending) {
            /* Nothing stored, but an eid to restore: a clear is a no-op on
             * an empty worker and carries it. */
            kvix_event_reset(&d.pending);
            d.pending.type = KVIX_EV_CLEARED;
            d.pending.worker = g.worker;
            d.pending.dp = g.dp;
            d.pending.bs = g.bs; /* the first of its partition makes it */
            out_check(kvix_event_set_name(d.pending.model, g.model, strlen(g.model), &err), &err);
            out_check(kvix_event_set_name(d.pending.tenant, g.tenant, strlen(g.tenant), &err),
                      &err);
            d.have_pending = 1;
        }
        if (g.has_eid) {
            d.pending.has_eid = 1;
            d.pending.eid = g.eid;
        }
        dump_pending(&d);
    }
    if (rc != KVIX_EOF)
        cli_die(cli_exit_for(rc), "%s", err.msg);
    out_flush();
    warn_empty_filter(f, hits, path);
    kvix_event_release(&d.pending);
    kvix_event_release(&scratch);
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
        if (!quiet)
            outf("%s: ok: version %" PRIu32 ", %" PRIu64 " partitions, %" PRIu64
                 " workers, %" PRIu64 " blocks, %" PRIu64 " bytes, checksum %016" PRIx64 "\n",
                 strcmp(paths[i], "-") ? paths[i] : "<stdin>", info.version, info.partitions,
                 info.groups, info.blocks, info.bytes, info.checksum);
        kvix_snapshot_close(s);
    }
    out_flush();
    return code;
}

/* ---- stats ---------------------------------------------------------------- */

static void stats_json(const kvix_snapshot_stats *t, const kvix_snapshot_info *info)
{
    for (size_t i = 0; i < t->n; i++) {
        const kvix_snapshot_row *r = &t->rows[i];
        outf("{\"scope\":\"%s\",\"model\":", r->is_part ? "partition" : "worker");
        out_jstr(r->model);
        outf(",\"tenant\":");
        out_jstr(r->tenant);
        outf(",\"bs\":%" PRIu32, r->bs);
        if (r->is_part)
            outf(",\"workers\":%" PRIu64, r->workers);
        else
            outf(",\"worker\":%" PRIu64 ",\"dp\":%" PRIu32, r->worker, r->dp);
        outf(",\"blocks\":%" PRIu64, r->blocks);
        if (r->is_part)
            outf(",\"unique_blocks\":%" PRIu64, r->unique);
        outf(",\"orphans\":%" PRIu64, r->orphans);
        if (r->has_depth)
            outf(",\"depth\":%" PRIu64, r->depth);
        else
            outf(",\"depth\":null");
        outf(",\"tiers\":{");
        for (unsigned m = 0; m < KVIX_MEDIUM_COUNT; m++)
            outf("%s\"%s\":%" PRIu64, m ? "," : "", kvix_medium_name((int)m), r->tiers[m]);
        outf("}");
        if (!r->is_part) {
            if (r->has_eid)
                outf(",\"eid\":%" PRIu64, r->eid);
            else
                outf(",\"eid\":null");
        }
        outf(",\"memory\":%" PRIu64 "}\n", r->memory);
    }
    outf("{\"scope\":\"file\",\"version\":%" PRIu32 ",\"partitions\":%" PRIu64
         ",\"workers\":%" PRIu64 ",\"blocks\":%" PRIu64 ",\"bytes\":%" PRIu64
         ",\"checksum\":\"%016" PRIx64 "\",\"memory\":%" PRIu64,
         info->version, info->partitions, info->groups, info->blocks, info->bytes,
         info->checksum, t->memory);
    if (info->has_stream)
        outf(",\"stream\":\"%s\",\"stream_seq\":%" PRIu64 "}\n", info->stream,
             info->stream_seq);
    else
        outf(",\"stream\":null,\"stream_seq\":null}\n");
}

#define NCOLS 14

static void human_bytes(uint64_t b, char *dst, size_t cap)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    unsigned u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(dst, cap, "%" PRIu64 " B", b);
    else
        snprintf(dst, cap, "%.1f %s", v, unit[u]);
}

static void stats_table(const kvix_snapshot_stats *t, const kvix_snapshot_info *info)
{
    static const char *head[NCOLS] = {"model", "tenant", "bs", "worker", "dp", "blocks",
                                      "unique", "depth", "gpu", "cpu", "disk", "external",
                                      "eid", "orphans"};
    /* The last column, memory, is not padded. */
    size_t nrows = t->n + 1;
    char(*cell)[NCOLS + 1][KVIX_NAME_MAX] = calloc(nrows, sizeof *cell);
    if (!cell)
        cli_die(fail_code(KVIX_EXIT_SYS), "out of memory");
    for (int c = 0; c < NCOLS; c++)
        snprintf(cell[0][c], KVIX_NAME_MAX, "%s", head[c]);
    snprintf(cell[0][NCOLS], KVIX_NAME_MAX, "memory");
    for (size_t i = 0; i < t->n; i++) {
        const kvix_snapshot_row *r = &t->rows[i];
        char(*c)[KVIX_NAME_MAX] = cell[i + 1];
        snprintf(c[0], KVIX_NAME_MAX, "%s", r->model);
        snprintf(c[1], KVIX_NAME_MAX, "%s", r->tenant);
        snprintf(c[2], KVIX_NAME_MAX, "%" PRIu32, r->bs);
        if (r->is_part) {
            snprintf(c[3], KVIX_NAME_MAX, "*%" PRIu64, r->workers);
            snprintf(c[4], KVIX_NAME_MAX, "-");
            snprintf(c[6], KVIX_NAME_MAX, "%" PRIu64, r->unique);
            snprintf(c[12], KVIX_NAME_MAX, "-");
        } else {
            snprintf(c[3], KVIX_NAME_MAX, "%" PRIu64, r->worker);
            snprintf(c[4], KVIX_NAME_MAX, "%" PRIu32, r->dp);
            snprintf(c[6], KVIX_NAME_MAX, "-");
            if (r->has_eid)
                snprintf(c[12], KVIX_NAME_MAX, "%" PRIu64, r->eid);
            else
                snprintf(c[12], KVIX_NAME_MAX, "-");
        }
        snprintf(c[5], KVIX_NAME_MAX, "%" PRIu64, r->blocks);
        if (r->has_depth)
            snprintf(c[7], KVIX_NAME_MAX, "%" PRIu64, r->depth);
        else
            snprintf(c[7], KVIX_NAME_MAX, "-");
        for (unsigned m = 0; m < KVIX_MEDIUM_COUNT; m++)
            snprintf(c[8 + m], KVIX_NAME_MAX, "%" PRIu64, r->tiers[m]);
        snprintf(c[13], KVIX_NAME_MAX, "%" PRIu64, r->orphans);
        human_bytes(r->memory, c[NCOLS], KVIX_NAME_MAX);
    }
    size_t w[NCOLS] = {0};
    for (size_t i = 0; i < nrows; i++)
        for (int c = 0; c < NCOLS; c++) {
            size_t l = strlen(cell[i][c]);
            if (l > w[c])
                w[c] = l;
        }
    for (size_t i = 0; i < nrows; i++) {
        for (int c = 0; c < NCOLS; c++) {
            /* Names left-aligned, numbers right-aligned. */
            if (c < 2)
                outf("%-*s  ", (int)w[c], cell[i][c]);
            else
                outf("%*s  ", (int)w[c], cell[i][c]);
        }
        outf("%s\n", cell[i][NCOLS]);
    }
    char size[32], mem[32];
    human_bytes(info->bytes, size, sizeof size);
    human_bytes(t->memory, mem, sizeof mem);
    outf("\n%" PRIu64 " partitions, %" PRIu64 " workers, %" PRIu64
         " blocks; file %s, format version %" PRIu32 ", checksum %016" PRIx64 "; index %s\n",
         info->partitions, info->groups, info->blocks, size, info->version, info->checksum, mem);
    if (info->has_stream)
        outf("stream %s: every message up to sequence %" PRIu64 " applied\n", info->stream,
             info->stream_seq);
    free(cell);
}

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
    if (json)
        stats_json(&t, &info);
    else
        stats_table(&t, &info);
    out_flush();
    kvix_snapshot_stats_release(&t);
    kvix_snapshot_close(s);
    return KVIX_EXIT_OK;
}

/* ---- diff ----------------------------------------------------------------- */

static void out_block(const kvix_block_info *b, int first)
{
    char l[17], e[17], p[17];
    kvix_hex64(b->local, l);
    kvix_hex64(b->engine, e);
    kvix_hex64(b->parent, p);
    outf("%s{\"position\":%" PRIu32 ",\"local\":\"%s\",\"seq\":\"%s\",\"parent\":", first ? "" : ",",
         b->position, l, e);
    if (b->position)
        outf("\"%s\"", p);
    else
        outf("null");
    outf(",\"tiers\":[");
    int k = 0;
    for (unsigned m = 0; m < KVIX_MEDIUM_COUNT; m++)
        if (b->tiers >> m & 1)
            outf("%s\"%s\"", k++ ? "," : "", kvix_medium_name((int)m));
    outf("]}");
}

static void out_blocks(const kvix_block_info *b, size_t n)
{
    outf("[");
    for (size_t i = 0; i < n; i++) {
        out_block(&b[i], i == 0);
        if (out.len >= (1u << 16))
            out_flush();
    }
    outf("]");
}

/* One differing record as a JSON line. */
static int print_delta(void *ctx, const kvix_snapshot_delta *d)
{
    (void)ctx;
    const kvix_snapshot_group *k = d->a ? d->a : d->b;
    outf("{\"model\":");
    out_jstr(k->model);
    outf(",\"tenant\":");
    out_jstr(k->tenant);
    if (kvix_snapshot_group_is_partition(k))
        outf(",\"worker\":null,\"dp\":null");
    else
        outf(",\"worker\":%" PRIu64 ",\"dp\":%" PRIu32, k->worker, k->dp);
    const kvix_snapshot_group *sides[2] = {d->a, d->b};
    for (int s = 0; s < 2; s++) {
        const kvix_snapshot_group *x = sides[s];
        if (x)
            outf(",\"bs_%c\":%" PRIu32, "ab"[s], x->bs);
        else
            outf(",\"bs_%c\":null", "ab"[s]);
        if (x && x->has_eid)
            outf(",\"eid_%c\":%" PRIu64, "ab"[s], x->eid);
        else
            outf(",\"eid_%c\":null", "ab"[s]);
    }
    outf(",\"only_a\":");
    out_blocks(d->only_a, d->n_only_a);
    outf(",\"only_b\":");
    out_blocks(d->only_b, d->n_only_b);
    outf("}\n");
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
        outf("{\"summary\":true,\"equal\":%s,\"differing\":%" PRIu64 ",\"only_a\":%" PRIu64
             ",\"only_b\":%" PRIu64 ",\"blocks_a\":%" PRIu64 ",\"blocks_b\":%" PRIu64 "}\n",
             t.differing ? "false" : "true", t.differing, t.only_a, t.only_b, ia.blocks,
             ib.blocks);
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
