#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvix/enginesub.h"
#include "kvix/natslog.h"

#ifndef KVIX_VERSION
#define KVIX_VERSION "0.1.0"
#endif

#define CLI_OPTS_MAX 64

static const cli_tool *cur;
static char given[64]; /* the option being handled, as written */

void cli_init(const cli_tool *tool)
{
    cur = tool;
    struct stat st;
    /* Pipes and files get line buffering so a reader downstream (kvindex after
     * kvsub) sees each record as soon as it is complete. */
    if (fstat(STDOUT_FILENO, &st) == 0 && !S_ISCHR(st.st_mode))
        setvbuf(stdout, NULL, _IOLBF, 1 << 16);
}

const char *cli_name(void)
{
    return cur ? cur->name : "kvix";
}

const char *cli_opt_given(void)
{
    return given;
}

int cli_draws_progress(void)
{
    /* not a tool fed by another through a pipe: the head of `kvreplay log |
     * kvindex >answers` draws, kvindex does not */
    struct stat st;
    int fed = fstat(STDIN_FILENO, &st) == 0 && S_ISFIFO(st.st_mode);
    return isatty(STDERR_FILENO) && !isatty(STDOUT_FILENO) && !fed;
}

void cli_progress_eta(uint64_t done, uint64_t total, double elapsed, char out[48])
{
    out[0] = '\0';
    if (!total)
        return;
    if (done > total)
        done = total;
    double frac = (double)done / (double)total;
    int n = snprintf(out, 48, " %.0f%%", 100 * frac);
    if (frac > 0 && frac < 1 && elapsed > 0) {
        double left = elapsed / frac - elapsed;
        unsigned s = left < 359999 ? (unsigned)(left + 0.5) : 359999;
        if (s >= 3600)
            snprintf(out + n, (size_t)(48 - n), ", eta %u:%02u:%02u", s / 3600, s / 60 % 60, s % 60);
        else
            snprintf(out + n, (size_t)(48 - n), ", eta %u:%02u", s / 60, s % 60);
    }
}

static void vwarn(const char *fmt, va_list ap)
{
    fprintf(stderr, "%s: ", cli_name());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void cli_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
}

void cli_die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
    exit(code);
}

void cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
    fprintf(stderr, "try '%s --help' for more information\n", cli_name());
    exit(KVIX_EXIT_USAGE);
}

int cli_exit_for(int st)
{
    switch (st) {
    case KVIX_OK: case KVIX_EOF: return KVIX_EXIT_OK;
    case KVIX_EIO: case KVIX_ENOTFOUND: case KVIX_EBUSY: return KVIX_EXIT_IO;
    case KVIX_ECORRUPT: return KVIX_EXIT_CORRUPT;
    case KVIX_ENOMEM: case KVIX_ESYS: return KVIX_EXIT_SYS;
    }
    return KVIX_EXIT_REJECTED;
}

static const cli_opt builtin[] = {
    {'h', 'h', "help", NULL, NULL, "print this help and exit"},
    {'V', 'V', "version", NULL, NULL, "print the version and exit"},
    {0x1000, 0, "list-options", NULL, NULL, "print the option table (for docs and completions)"},
    {0, 0, NULL, NULL, NULL, NULL},
};

#define FOR_EACH_OPT(o)                                                                 \
    for (const cli_opt *tables_[2] = {cur->opts, builtin}, **t_ = tables_; t_ < tables_ + 2; t_++) \
        for (const cli_opt *o = *t_; o->lng; o++)

/* The words of --help for each exit code (README.md has the full table). */
static const char *const exit_words[] = {
    "ok", "input rejected", "usage", "i/o error", "corrupt snapshot or compressed input",
    "stopped by --strict", "system error", "stream position gone",
};

/* Allowed values of an option whose completion is a list of words, as
 * " (auto, ndjson or msgpack)". */
static void allowed_values(const cli_opt *o, char *out, size_t cap)
{
    out[0] = '\0';
    if (!o->arg || !o->complete || !strchr(o->complete, '|'))
        return;
    size_t n = (size_t)snprintf(out, cap, " (");
    const char *w = o->complete;
    while (*w && n < cap) {
        const char *bar = strchr(w, '|');
        size_t len = bar ? (size_t)(bar - w) : strlen(w);
        const char *sep = !bar ? "" : strchr(bar + 1, '|') ? ", " : " or ";
        n += (size_t)snprintf(out + n, cap - n, "%.*s%s", (int)len, w, sep);
        w = bar ? bar + 1 : w + len;
    }
    if (n < cap)
        snprintf(out + n, cap - n, ")");
}

/* Whether an option's help already names every allowed value. */
static int names_all(const cli_opt *o)
{
    if (!o->arg || !o->complete || !strchr(o->complete, '|'))
        return 1;
    for (const char *w = o->complete; *w;) {
        size_t len = strcspn(w, "|");
        char word[64];
        snprintf(word, sizeof word, "%.*s", (int)len, w);
        if (!strstr(o->help, word))
            return 0;
        w += len + (w[len] == '|');
    }
    return 1;
}

static void print_help(void)
{
    printf("usage: %s %s\n%s\n\noptions:\n", cur->name, cur->usage, cur->summary);
    FOR_EACH_OPT(o) {
        if (o->id == 0x1000)
            continue;
        char left[64], vals[160];
        snprintf(left, sizeof left, "%c%c%s--%s%s%s", o->shrt ? '-' : ' ', o->shrt ? o->shrt : ' ',
                 o->shrt ? ", " : "  ", o->lng, o->arg ? " " : "", o->arg ? o->arg : "");
        allowed_values(o, vals, sizeof vals);
        printf("  %-28s %s%s\n", left, o->help, names_all(o) ? "" : vals);
    }
    const char *codes = cur->exits ? cur->exits : "01234567";
    int col = printf("\nexit status:") - 1;
    for (const char *c = codes; *c; c++) {
        char item[64];
        int n = snprintf(item, sizeof item, "%s%c %s", c == codes ? "" : ", ", *c,
                         exit_words[*c - '0']);
        if (col + n > 78) {
            fputs(",\n", stdout);
            col = printf("%s", item + 2);
        } else {
            col += printf("%s%s", c == codes ? " " : "", item);
        }
    }
    printf("; see %s(1)\n", cur->name);
}

/* Tab-separated: short, long, argument, completion, help; "-" when empty. */
static void print_list(void)
{
    FOR_EACH_OPT(o) {
        if (o->id == 0x1000)
            continue;
        printf("%s%c\t--%s\t%s\t%s\t%s\n", o->shrt ? "-" : "", o->shrt ? o->shrt : '-', o->lng,
               o->arg ? o->arg : "-", o->arg ? (o->complete ? o->complete : "text") : "-",
               o->help);
    }
    printf("operands\t%s\n", cur->operands ? cur->operands : "-");
}

int cli_next(int argc, char **argv, const char **arg)
{
    static struct option longs[CLI_OPTS_MAX + 1];
    static char shorts[3 * CLI_OPTS_MAX + 2];
    if (!longs[0].name) {
        size_t n = 0, s = 0;
        shorts[s++] = '+'; /* stop at the first operand, as POSIX tools do */
        FOR_EACH_OPT(o) {
            if (n == CLI_OPTS_MAX)
                abort(); /* a programming error in a table, not input */
            longs[n++] = (struct option){o->lng, o->arg ? required_argument : no_argument, NULL,
                                         o->id};
            if (o->shrt) {
                shorts[s++] = o->shrt;
                if (o->arg)
                    shorts[s++] = ':';
            }
        }
        shorts[s] = '\0';
        opterr = 0;
    }
    int before = optind;
    int c = getopt_long(argc, argv, shorts, longs, NULL);
    if (c == -1) {
        given[0] = '\0';
        return -1;
    }
    /* the option as the user wrote it, for messages: "--plain" (or an
     * abbreviation of it) when that was written, "-p" when that was */
    const char *w = before < argc ? argv[before] : "";
    if (strncmp(w, "--", 2) == 0)
        snprintf(given, sizeof given, "%.*s", (int)strcspn(w, "="), w);
    else
        snprintf(given, sizeof given, "-%c", c == '?' ? optopt : c);
    if (c == '?') {
        if (strncmp(w, "--", 2) == 0 && optopt)
            cli_usage_error("missing argument to %s", given);
        if (strncmp(w, "--", 2) == 0)
            cli_usage_error("unknown option %s", given);
        cli_usage_error("%s %s", strchr(shorts, optopt) ? "missing argument to" : "unknown option",
                        given);
    }
    if (c == 'h' || c == 'V' || c == 0x1000) {
        if (c == 'h')
            print_help();
        else if (c == 'V')
            printf("%s (kvix) %s\n", cur->name, KVIX_VERSION);
        else
            print_list();
        exit(cli_finish(KVIX_EXIT_OK));
    }
    *arg = optarg;
    if (given[1] != '-') /* a short option: its entry's id, which may be another */
        FOR_EACH_OPT(o)
            if (o->shrt && o->shrt == c)
                return o->id;
    return c;
}

/* Standard output is a pipe or socket whose reader has gone away. */
static int stdout_gone(void)
{
    struct pollfd p = {STDOUT_FILENO, POLLOUT, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP));
}

int cli_finish(int code)
{
    int e = 0;
    if (fflush(stdout) != 0) {
        e = errno;
    } else if (ferror(stdout)) {
        /* An earlier write failed and errno has moved on since: write what
         * stdio still holds again to learn why (EPIPE from a reader that
         * went away, ENOSPC...). */
        clearerr(stdout);
        e = fflush(stdout) != 0 ? errno : stdout_gone() ? EPIPE : EIO;
    }
    if (fclose(stdout) != 0 && !e)
        e = errno;
    /* EPIPE is a reader that went away on purpose (head): not our error. */
    if (!e || e == EPIPE)
        return code;
    fprintf(stderr, "%s: error writing standard output: %s\n", cli_name(), strerror(e));
    return KVIX_EXIT_IO;
}

/* Name a bad value after the option as the user wrote it: "bad -x" for an
 * option named "--speed" by the caller, "bad thread count (-t)" otherwise. */
static const char *value_name(const char *what, char out[128])
{
    if (!given[0])
        return what;
    if (what[0] == '-' && !strchr(what, ' '))
        snprintf(out, 128, "%s", given);
    else if (strcmp(what, given) != 0)
        snprintf(out, 128, "%s (%s)", what, given);
    else
        return what;
    return out;
}

uint64_t cli_parse_uint(const char *s, uint64_t min, uint64_t max, const char *what)
{
    char name[128];
    what = value_name(what, name);
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+')
        cli_usage_error("bad %s: '%s'", what, s ? s : "");
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max)
        cli_usage_error("bad %s: '%s' (expected an integer from %" PRIu64 " to %" PRIu64 ")",
                        what, s, min, max);
    return v;
}

uint64_t cli_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

double cli_parse_double(const char *s, double min, double max, const char *what)
{
    char name[128];
    what = value_name(what, name);
    char *end;
    errno = 0;
    double v = s && *s ? strtod(s, &end) : NAN;
    if (!s || !*s || errno || *end || !(v >= min && v <= max))
        cli_usage_error("bad %s: '%s' (expected a number from %g to %g)", what, s ? s : "", min,
                        max);
    return v;
}

uint64_t cli_files_raise(uint64_t want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return UINT64_MAX; /* nothing known: what runs out says so */
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rlim_t to = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? (rlim_t)want : rl.rlim_max;
        struct rlimit nl = {to, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &nl) == 0)
            rl.rlim_cur = to;
    }
    return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}

size_t cli_size_subscriptions(size_t n, uint64_t others, const char *option)
{
    size_t want = n ? n : KVIX_ENGINESUB_SUBS_DEFAULT;
    uint64_t need = (uint64_t)want * KVIX_ENGINESUB_FDS_PER_SUB + others;
    uint64_t have = cli_files_raise(need);
    if (have >= need)
        return want;
    if (n)
        cli_usage_error("%s %zu needs %" PRIu64 " open files; the limit is %" PRIu64
                        " (ulimit -Hn)", option, n, need, have);
    uint64_t fit = have > others ? (have - others) / KVIX_ENGINESUB_FDS_PER_SUB : 0;
    return fit ? (size_t)fit : 1;
}

char *cli_read_secret(const char *path, const char *option)
{
    FILE *f = fopen(path, "r");
    if (!f)
        cli_die(KVIX_EXIT_IO, "%s: cannot open %s: %s", option, path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
        cli_warn("%s: %s may be read by others than its owner (chmod 600)", option, path);
    char line[4096 + 3];
    if (!fgets(line, sizeof line, f)) {
        int e = ferror(f) ? errno : 0;
        fclose(f);
        if (e)
            cli_die(KVIX_EXIT_IO, "%s: cannot read %s: %s", option, path, strerror(e));
        cli_usage_error("%s: %s is empty", option, path);
    }
    fclose(f);
    size_t n = strlen(line);
    if (n > 4096 + 1 || (n == 4096 + 1 && line[n - 1] != '\n'))
        cli_usage_error("%s: the first line of %s is longer than 4096 bytes", option, path);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' ||
                 line[n - 1] == '\t'))
        line[--n] = '\0';
    char *p = line;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p)
        cli_usage_error("%s: %s is empty", option, path);
    char *out = strdup(p);
    if (!out)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    return out;
}

int cli_nats_option(int c, const char *arg, kvix_natslog_opts *o)
{
    switch (c) {
    case CLI_O_NATS_USER: o->user = arg; return 1;
    case CLI_O_NATS_PASSWORD_FILE: o->password = cli_read_secret(arg, "--nats-password-file"); return 1;
    case CLI_O_NATS_TOKEN_FILE: o->token = cli_read_secret(arg, "--nats-token-file"); return 1;
    case CLI_O_NATS_CREDS: o->creds = arg; return 1;
    case CLI_O_NATS_TLS_CA: o->tls_ca = arg; return 1;
    case CLI_O_NATS_TLS_CERT: o->tls_cert = arg; return 1;
    case CLI_O_NATS_TLS_KEY: o->tls_key = arg; return 1;
    case CLI_O_NATS_URL: o->url = arg; return 1;
    case CLI_O_NATS_STREAM: o->stream = arg; return 1;
    case CLI_O_NATS_SUBJECT: o->subject = arg; return 1;
    case CLI_O_NATS_WINDOW:
        o->window = (unsigned)cli_parse_uint(arg, 1, KVIX_NATSLOG_WINDOW_MAX, "window");
        return 1;
    case CLI_O_NATS_STREAM_MAX_AGE:
        o->max_age_s = (int64_t)cli_parse_uint(arg, 0, UINT64_C(1) << 32, "max age");
        return 1;
    case CLI_O_NATS_STREAM_MAX_BYTES:
        o->max_bytes = (int64_t)cli_parse_uint(arg, 0, INT64_MAX, "max bytes");
        return 1;
    case CLI_O_NATS_STREAM_REPLICAS:
        o->replicas = (int)cli_parse_uint(arg, 1, 5, "replicas");
        return 1;
    case CLI_O_NATS_STREAM_DUP_WINDOW:
        o->dup_window_s = (int64_t)cli_parse_uint(arg, 1, UINT64_C(1) << 32, "dup window");
        return 1;
    default: return 0;
    }
}

void cli_nats_check(const kvix_natslog_opts *o)
{
    int any = o->user || o->password || o->token || o->creds || o->tls_ca || o->tls_cert ||
              o->tls_key;
    if (any && !o->url)
        cli_usage_error("--nats-* credentials go with --nats URL");
    if (!o->tls_cert != !o->tls_key)
        cli_usage_error("--nats-tls-cert and --nats-tls-key go together");
    if (!o->user != !o->password)
        cli_usage_error("--nats-user and --nats-password-file go together");
    /* nats.c reads them at each connection attempt: a missing one would be
     * an attempt that fails for ever */
    const char *files[] = {o->creds, o->tls_ca, o->tls_cert, o->tls_key};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        if (files[i] && access(files[i], R_OK) != 0)
            cli_die(KVIX_EXIT_IO, "cannot read %s: %s", files[i], strerror(errno));
}
