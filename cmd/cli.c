#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef KVIX_VERSION
#define KVIX_VERSION "0.1.0"
#endif

#define CLI_OPTS_MAX 64

static const cli_tool *cur;

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

static void print_help(void)
{
    printf("usage: %s %s\n%s\n\noptions:\n", cur->name, cur->usage, cur->summary);
    FOR_EACH_OPT(o) {
        if (o->id == 0x1000)
            continue;
        char left[64];
        snprintf(left, sizeof left, "%c%c%s--%s%s%s", o->shrt ? '-' : ' ', o->shrt ? o->shrt : ' ',
                 o->shrt ? ", " : "  ", o->lng, o->arg ? " " : "", o->arg ? o->arg : "");
        printf("  %-28s %s\n", left, o->help);
    }
    printf("\nexit status: 0 ok, 1 input rejected, 2 usage, 3 i/o error, 4 corrupt snapshot,\n"
           "5 stopped by --strict, 6 system error, 7 stream position gone; see %s(1)\n",
           cur->name);
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
    int c = getopt_long(argc, argv, shorts, longs, NULL);
    if (c == -1)
        return -1;
    if (c == '?') {
        if (optopt)
            cli_usage_error("%s -%c", strchr(shorts, optopt) ? "missing argument to" : "unknown option",
                            optopt);
        cli_usage_error("unknown option or missing argument: %s", argv[optind - 1]);
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
    return c;
}

int cli_finish(int code)
{
    if (fflush(stdout) != 0 || ferror(stdout) || fclose(stdout) != 0) {
        /* EPIPE is a reader that went away on purpose (head): not our error. */
        if (errno == EPIPE)
            return code;
        fprintf(stderr, "%s: error writing standard output: %s\n", cli_name(), strerror(errno));
        return KVIX_EXIT_IO;
    }
    return code;
}

uint64_t cli_parse_uint(const char *s, uint64_t min, uint64_t max, const char *what)
{
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

double cli_parse_double(const char *s, double min, double max, const char *what)
{
    char *end;
    errno = 0;
    double v = s && *s ? strtod(s, &end) : NAN;
    if (!s || !*s || errno || *end || !(v >= min && v <= max))
        cli_usage_error("bad %s: '%s' (expected a number from %g to %g)", what, s ? s : "", min,
                        max);
    return v;
}
