/* kvix tools: what every command shares. One exit-code table, messages in
 * one format, and option tables that are the single source of --help, the
 * man pages' OPTIONS sections and the shell completions (completions/gen.sh
 * reads `TOOL --list-options`). */
#ifndef KVIX_CLI_H
#define KVIX_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "kvix/error.h"

/* The exit-code table of every kvix tool (man pages: EXIT STATUS). */
enum {
    KVIX_EXIT_OK = 0,       /* success */
    KVIX_EXIT_REJECTED = 1, /* finished, but some input records were rejected;
                               kvdump --diff: the snapshots differ */
    KVIX_EXIT_USAGE = 2,    /* bad command line; kvdump --diff: any trouble (as diff(1)) */
    KVIX_EXIT_IO = 3,       /* a file could not be opened, read or written (stdout too) */
    KVIX_EXIT_CORRUPT = 4,  /* a snapshot is corrupt, truncated or of another version */
    KVIX_EXIT_STRICT = 5,   /* --strict: stopped at the first rejected record (state saved) */
    KVIX_EXIT_SYS = 6,      /* out of memory, or a system facility failed (threads, ZMQ) */
    KVIX_EXIT_GONE = 7,     /* kvindex --nats: the stream no longer holds the next message
                               to apply (its retention dropped it), or ends before the
                               snapshot's position */
};

/* One option. arg == NULL for a flag. complete says what the argument is for
 * completions: "file", "dir", NULL (free text), or words separated by '|'. */
typedef struct cli_opt {
    int id;             /* returned by cli_next, for the short form too */
    char shrt;          /* 0 for long only */
    const char *lng;
    const char *arg;    /* metavariable ("N", "FILE") or NULL */
    const char *complete;
    const char *help;   /* one line, lowercase */
} cli_opt;

typedef struct cli_tool {
    const char *name;
    const char *usage;    /* after the name: "-b N [options] [FILE...]" */
    const char *summary;  /* one line */
    const cli_opt *opts;  /* ends with an entry whose lng is NULL */
    const char *operands; /* what positional arguments complete to: "file" or NULL */
    const char *exits;    /* the exit codes this tool can return, as digits ("01236");
                             NULL: all of them. --help lists only these */
} cli_tool;

/* Remember the tool for messages; make stdout line-buffered on a pipe. */
void cli_init(const cli_tool *tool);
const char *cli_name(void);

/* Next option from argv (getopt_long built from the table). Handles --help,
 * --version and --list-options itself (prints, exits 0) and exits with
 * KVIX_EXIT_USAGE on an unknown option or a missing argument. Returns the
 * option's id with *arg set, or -1 when options end (optind is the first
 * operand). */
int cli_next(int argc, char **argv, const char **arg);

/* Whether this tool draws a progress line: only one tool of a pipeline
 * should (two lines on one terminal overwrite each other), the one whose
 * standard error is a terminal, whose standard output is not, and whose
 * standard input is not a pipe (the head of `kvreplay log | kvindex >out`). */
int cli_draws_progress(void);
/* " 42%, eta 1:05" for done of total units after elapsed seconds, or "" when
 * total is unknown (0); written into out. */
void cli_progress_eta(uint64_t done, uint64_t total, double elapsed, char out[48]);

/* The option cli_next last returned, as the user wrote it ("--plain", an
 * abbreviation of it, or "-p"), for messages about its value. */
const char *cli_opt_given(void);

/* "TOOL: message" on stderr. */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Warn and exit with code. */
_Noreturn void cli_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Usage error: message, a hint to --help, exit KVIX_EXIT_USAGE. */
_Noreturn void cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Map a library status to the exit-code table. */
int cli_exit_for(int kvix_status);

/* Flush and close stdout, reporting a write error (a full disk is an error).
 * Returns code unchanged when all is well, KVIX_EXIT_IO otherwise. */
int cli_finish(int code);

/* The NATS options of every tool that speaks to a NATS server (kvsub
 * --nats, kvindex --nats): their ids, the credentials' table entries, and
 * cli_nats_option to take them into a kvix_natslog_opts. Each tool's table
 * lists the others it offers, in its own words. */
enum {
    CLI_O_NATS_USER = 0x400,
    CLI_O_NATS_PASSWORD_FILE,
    CLI_O_NATS_TOKEN_FILE,
    CLI_O_NATS_CREDS,
    CLI_O_NATS_TLS_CA,
    CLI_O_NATS_TLS_CERT,
    CLI_O_NATS_TLS_KEY,
    CLI_O_NATS_URL,            /* --nats URL */
    CLI_O_NATS_STREAM,         /* --stream NAME */
    CLI_O_NATS_SUBJECT,        /* publishing: --subject PREFIX */
    CLI_O_NATS_WINDOW,         /* publishing: --nats-window N */
    CLI_O_NATS_STREAM_MAX_AGE, /* the stream created: --stream-max-age SECONDS, ... */
    CLI_O_NATS_STREAM_MAX_BYTES,
    CLI_O_NATS_STREAM_REPLICAS,
    CLI_O_NATS_STREAM_DUP_WINDOW,
};
#define CLI_NATS_AUTH_OPTIONS                                                                    \
    {CLI_O_NATS_USER, 0, "nats-user", "NAME", NULL, "--nats: the user to connect as"},           \
    {CLI_O_NATS_PASSWORD_FILE, 0, "nats-password-file", "FILE", "file",                          \
     "--nats: the user's password, the first line of FILE"},                                     \
    {CLI_O_NATS_TOKEN_FILE, 0, "nats-token-file", "FILE", "file",                                \
     "--nats: an authorization token, the first line of FILE"},                                  \
    {CLI_O_NATS_CREDS, 0, "nats-creds", "FILE", "file",                                          \
     "--nats: a credentials file (user JWT and NKey seed)"},                                     \
    {CLI_O_NATS_TLS_CA, 0, "nats-tls-ca", "FILE", "file",                                        \
     "--nats: TLS, the server verified against the CA certificates of FILE (PEM)"},              \
    {CLI_O_NATS_TLS_CERT, 0, "nats-tls-cert", "FILE", "file",                                    \
     "--nats: a client certificate (PEM) for servers that verify clients"},                      \
    {CLI_O_NATS_TLS_KEY, 0, "nats-tls-key", "FILE", "file", "--nats: the client certificate's key (PEM)"}

struct kvix_natslog_opts;
/* Take option c (one of CLI_O_NATS_*) into o: 1, or 0 when c is another
 * option. Secrets are read from their files (cli_read_secret, kept for the
 * process's life); a bad number is a usage error. */
int cli_nats_option(int c, const char *arg, struct kvix_natslog_opts *o);
/* The credentials options given go with --nats (url); usage error if not,
 * or when a certificate comes without its key. */
void cli_nats_check(const struct kvix_natslog_opts *o);

/* The secret in file path (a token, a password): its first line without
 * the line end or surrounding blanks, at most 4096 bytes. Exits 3 when it
 * cannot be read, 2 when it is empty or too long (option names it). Warns
 * when others than its owner may read it. The caller frees it. */
char *cli_read_secret(const char *path, const char *option);

/* Raise the soft limit of open files towards want (never past the hard
 * limit, never lowering it); the soft limit then in force. */
uint64_t cli_files_raise(uint64_t want);

/* The subscriptions a tool holds at once: n (0: KVIX_ENGINESUB_SUBS_DEFAULT,
 * or fewer when the open-file limit cannot take that many), each with
 * KVIX_ENGINESUB_FDS_PER_SUB descriptors, plus `others` the tool holds
 * besides. Raises the soft open-file limit as far as that needs (never past
 * the hard one); an n given that does not fit is a usage error naming
 * option and the limits. */
size_t cli_size_subscriptions(size_t n, uint64_t others, const char *option);

/* Milliseconds of CLOCK_MONOTONIC: for intervals. */
uint64_t cli_mono_ms(void);

/* Parse a decimal unsigned integer in [min, max] for option what; exits with
 * a usage error otherwise. */
uint64_t cli_parse_uint(const char *s, uint64_t min, uint64_t max, const char *what);
double cli_parse_double(const char *s, double min, double max, const char *what);

#endif
