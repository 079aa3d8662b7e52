/* kvhash: token ids in, block hashes out (contract section 1).
 *
 * One output line per good input line, in order; bad lines are reported on
 * stderr with their position and skipped. Lines are parsed by the library
 * (kvix_tokens_parse, tokens.h) and written by it (kvix_tokens_hashes_write);
 * this file hashes and moves bytes. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "kvix/event.h"
#include "kvix/hash.h"
#include "kvix/stream.h"
#include "kvix/tokens.h"

enum { O_STRICT = 0x100, O_SALT, O_MM, O_EAGLE };

static const cli_opt options[] = {
    {'b', 'b', "block-size", "N", NULL, "tokens per block, 1 to 65536 (required)"},
    {'l', 'l', "lora", "NAME", NULL, "LoRA adapter for lines that name none"},
    {O_SALT, 0, "salt", "SALT", NULL,
     "hash with a cache salt mixed into the seed, as Dynamo's newest router does with its "
     "cache namespace, for lines that name none"},
    {O_MM, 0, "mm", "BLOCK=HASH[,HASH...]", NULL,
     "block BLOCK carries these multimodal object hashes (hex, or vLLM's 64-digit "
     "identifiers), for lines that name none (repeatable)"},
    {O_EAGLE, 0, "eagle", NULL, NULL,
     "hash as for an engine running EAGLE: each block over its tokens and the next one "
     "(block size + 1 windows, as Dynamo's newest router)"},
    {'P', 'P', "positional", NULL, NULL, "add positional sequence and lineage hashes (psh, plh)"},
    {'d', 'd', "decimal", NULL, NULL, "print hashes in decimal instead of hex"},
    {'p', 'p', "plain", "FIELD", "local|seq|psh|plh",
     "print only FIELD (local, seq, psh or plh), one line per input line"},
    {O_STRICT, 0, "strict", NULL, NULL, "stop at the first bad line (exit 5)"},
    {0, 0, NULL, NULL, NULL, NULL},
};

static const cli_tool tool = {
    .name = "kvhash",
    .usage = "-b N [options] [FILE...]",
    .summary = "hash token sequences (one per line) into kv-cache block hashes",
    .opts = options,
    .operands = "file",
    .exits = "012356",
};

typedef struct hasher {
    size_t bs;
    uint64_t seed;        /* from --lora: for lines that name no adapter */
    const char *lora, *salt; /* --lora, --salt: for lines that name none */
    kvix_tokens_mm *mm;   /* --mm, by block: for lines that name none */
    size_t nmm;
    int positional, decimal, strict;
    kvix_tokens_form form; /* --plain FIELD, else the object */
    int eagle;            /* EAGLE's windows: kvix_hash_blocks_eagle */
    kvix_tokens line;     /* the line being hashed: its tokens, seed and id */
    uint64_t *local, *seq;
    kvix_u128 *pos;       /* only with psh or plh wanted */
    size_t cap_blk;
    kvix_buf out;         /* pending output: written before a read that could
                             block, and past 1 MiB */
    uint64_t rejected;
} hasher;

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        cli_die(KVIX_EXIT_SYS, "out of memory");
    return q;
}

static void out_flush(hasher *h)
{
    if (!h->out.len)
        return;
    if (fwrite(h->out.data, 1, h->out.len, stdout) != h->out.len || fflush(stdout) != 0) {
        /* a reader that went away on purpose (head, with SIGPIPE ignored): not
         * an error, as in cli_finish, but nobody reads the rest */
        if (errno == EPIPE)
            _exit(h->rejected ? KVIX_EXIT_REJECTED : KVIX_EXIT_OK);
        cli_die(KVIX_EXIT_IO, "error writing standard output: %s", strerror(errno));
    }
    h->out.len = 0;
}

/* ---- hashing ----------------------------------------------------------- */

/* The blocks of the line's nb that carry multimodal hashes (mm[0..n), by
 * block) hashed with them, and the rolling hashes from the first such on. */
static int mm_blocks(hasher *h, const kvix_tokens_mm *mm, size_t n, size_t nb, uint64_t seed,
                     kvix_err *err)
{
    size_t first = nb;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        uint64_t v[KVIX_HASH_MM_MAX];
        size_t k = 0;
        for (; j < n && mm[j].block == mm[i].block; j++)
            if (k < KVIX_HASH_MM_MAX)
                v[k++] = mm[j].hash;
        size_t b = mm[i].block;
        if (b < nb) {
            /* with EAGLE a block's window takes the next block's first token */
            int rc = kvix_hash_local_mm(h->line.tok + b * h->bs, h->bs + (size_t)h->eagle, seed, v,
                                        k, &h->local[b], err);
            if (rc < 0)
                return rc;
            first = b < first ? b : first;
        }
        i = j;
    }
    for (size_t b = first; b < nb; b++)
        h->seq[b] = b ? kvix_hash_seq_next(h->seq[b - 1], h->local[b]) : h->local[0];
    return 0;
}

/* Hash the parsed line (h->line) and append its output. Fails (err set)
 * when a position cannot be encoded. */
static int emit(hasher *h, kvix_err *err)
{
    const kvix_tokens *meta = &h->line;
    size_t nb = h->eagle ? kvix_hash_eagle_count(meta->n, h->bs) : meta->n / h->bs;
    if (nb > h->cap_blk) {
        size_t c = h->cap_blk ? h->cap_blk : 1024;
        while (c < nb)
            c *= 2;
        h->local = xrealloc(h->local, c * sizeof *h->local);
        h->seq = xrealloc(h->seq, c * sizeof *h->seq);
        if (h->positional || h->form == KVIX_TOKENS_PSH || h->form == KVIX_TOKENS_PLH)
            h->pos = xrealloc(h->pos, 2 * c * sizeof *h->pos);
        h->cap_blk = c;
    }
    const char *lora = meta->has_lora ? meta->lora : h->lora;
    const char *salt = meta->has_salt ? meta->salt : h->salt;
    uint64_t seed = salt && salt[0]
                        ? kvix_hash_salt_seed(lora, lora ? strlen(lora) : 0, salt, strlen(salt))
                        : meta->seed;
    if (h->eagle)
        kvix_hash_blocks_eagle(meta->tok, meta->n, h->bs, seed, h->local, h->seq);
    else
        kvix_hash_blocks(meta->tok, meta->n, h->bs, seed, h->local, h->seq);
    int mrc = mm_blocks(h, meta->has_mm ? meta->mm : h->mm, meta->has_mm ? meta->nmm : h->nmm,
                        nb, seed, err);
    if (mrc < 0)
        return mrc;

    int want_pos = h->form == KVIX_TOKENS_OBJECT
                       ? h->positional
                       : h->form == KVIX_TOKENS_PSH || h->form == KVIX_TOKENS_PLH;
    kvix_u128 *pos = h->pos; /* psh and plh of block i at 2i and 2i+1 */
    if (want_pos) {
        for (size_t i = 0; i < nb; i++) {
            int rc;
            if ((rc = kvix_hash_psh(h->seq[i], i, h->local[i], &pos[2 * i], err)) < 0 ||
                (rc = kvix_hash_plh(h->seq[i], i ? h->seq[i - 1] : 0, i, &pos[2 * i + 1],
                                    err)) < 0)
                return rc;
        }
    }
    /* the tokens no block took (with EAGLE a block also reads the next one's first) */
    kvix_tokens_hashes out = {
        .id = meta->id, .n = nb, .local = h->local, .seq = h->seq, .pos = pos,
        .positional = h->positional, .partial = meta->n - (nb ? nb * h->bs + (size_t)h->eagle : 0)};
    int rc = kvix_tokens_hashes_write(&out, h->form, h->decimal, &h->out, err);
    if (rc == KVIX_ENOMEM)
        cli_die(KVIX_EXIT_SYS, "%s", err->msg);
    return rc;
}

/* One line without its newline. Fails with err set (and the line's id in
 * h->line.id, when it got that far); out of memory ends the run. */
static int do_line(hasher *h, const char *line, size_t len, kvix_err *err)
{
    int rc = kvix_tokens_parse(&h->line, line, len, h->seed, err);
    if (rc == KVIX_ENOMEM)
        cli_die(KVIX_EXIT_SYS, "%s", err->msg);
    return rc < 0 ? rc : emit(h, err);
}

/* A rejected line still gets its own output line, so a reader that pairs
 * input and output lines (a coprocess) never waits: {"id":..,"error":".."}. */
static void emit_error(hasher *h, const char *id, const char *msg)
{
    kvix_err err;
    if (kvix_error_to_json(id, msg, &h->out, &err))
        cli_die(KVIX_EXIT_SYS, "%s", err.msg);
}

/* ---- input ------------------------------------------------------------- */

typedef struct input {
    int fd;
    const char *name;
    char *buf;
    size_t cap, start, scan, end;
    uint64_t line;
    int eof, skipping; /* skipping: inside a line past the ceiling */
} input;

enum { LINE_OK, LINE_TOO_LONG, LINE_EOF, LINE_ERROR };

/* Whether a read would return at once. Pending output is written before a
 * read that could block, so a reader downstream sees each result as soon as
 * its input line was complete, while a busy input is answered in large writes. */
static int input_ready(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

/* Next line into *p, *len (valid until the next call). */
static int next_line(hasher *h, input *in, const char **p, size_t *len)
{
    for (;;) {
        char *nl = memchr(in->buf + in->scan, '\n', in->end - in->scan);
        if (nl) {
            size_t at = (size_t)(nl - in->buf);
            *p = in->buf + in->start;
            *len = at - in->start;
            in->start = in->scan = at + 1;
            in->line++;
            if (in->skipping) {
                in->skipping = 0;
                return LINE_TOO_LONG;
            }
            return *len > KVIX_TOKENS_LINE_MAX ? LINE_TOO_LONG : LINE_OK;
        }
        in->scan = in->end;
        if (in->eof) {
            if (in->start == in->end && !in->skipping)
                return LINE_EOF;
            *p = in->buf + in->start;
            *len = in->end - in->start;
            in->start = in->scan = in->end;
            in->line++;
            if (in->skipping) {
                in->skipping = 0;
                return LINE_TOO_LONG;
            }
            return *len > KVIX_TOKENS_LINE_MAX ? LINE_TOO_LONG : LINE_OK;
        }
        if (in->end - in->start > KVIX_TOKENS_LINE_MAX) { /* drop it, keep looking for its end */
            in->skipping = 1;
            in->start = in->scan = in->end = 0;
        }
        if (in->start > 0) {
            memmove(in->buf, in->buf + in->start, in->end - in->start);
            in->end -= in->start;
            in->scan = in->end;
            in->start = 0;
        }
        if (in->cap - in->end < 65536) {
            in->cap *= 2;
            in->buf = xrealloc(in->buf, in->cap);
        }
        if (h->out.len >= (1u << 20) || !input_ready(in->fd))
            out_flush(h);
        ssize_t n;
        do
            n = read(in->fd, in->buf + in->end, in->cap - in->end);
        while (n < 0 && errno == EINTR);
        if (n < 0)
            return LINE_ERROR;
        if (n == 0)
            in->eof = 1;
        in->end += (size_t)n;
    }
}

enum { RUN_OK, RUN_IO, RUN_STRICT };

static int hash_file(hasher *h, input *in)
{
    const char *line;
    size_t len;
    kvix_err err;
    for (;;) {
        int r = next_line(h, in, &line, &len);
        if (r == LINE_EOF)
            return RUN_OK;
        if (r == LINE_ERROR) {
            cli_warn("error reading %s: %s", in->name, strerror(errno));
            return RUN_IO;
        }
        int bad;
        if (r == LINE_TOO_LONG) { /* only its end was kept: the library never sees it */
            h->line.id[0] = '\0';
            bad = kvix_err_set(&err, KVIX_ELIMIT, "line longer than %u bytes",
                               KVIX_TOKENS_LINE_MAX);
        } else {
            bad = do_line(h, line, len, &err);
        }
        if (bad < 0) {
            h->rejected++;
            emit_error(h, h->line.id, err.msg);
            out_flush(h); /* keep stdout and stderr in order for a reader of both */
            cli_warn("bad line at %s:%" PRIu64 ": %s", in->name, in->line, err.msg);
            if (h->strict)
                return RUN_STRICT;
        }
    }
}

/* --mm BLOCK=HASH[,HASH...]: kept by block (stable: a block's hashes in
 * the order given; their order does not matter to the hash). */
static void parse_mm(hasher *h, const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        cli_usage_error("bad %s '%s' (expected BLOCK=HASH[,HASH...])", cli_opt_given(), arg);
    char num[24];
    size_t nl = (size_t)(eq - arg);
    if (nl >= sizeof num)
        cli_usage_error("bad block number in %s '%s'", cli_opt_given(), arg);
    memcpy(num, arg, nl);
    num[nl] = '\0';
    uint32_t block = (uint32_t)cli_parse_uint(num, 0, KVIX_TOKENS_MAX, "block number");
    size_t given = 0;
    for (size_t i = 0; i < h->nmm; i++)
        given += h->mm[i].block == block;
    for (const char *p = eq + 1;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        uint64_t x;
        if (kvix_tokens_mm_hash(p, len, &x))
            cli_usage_error("bad multimodal hash '%.*s' in %s (expected 1 to 16 hex digits, or "
                            "64)",
                            (int)(len > 70 ? 70 : len), p, cli_opt_given());
        if (++given > KVIX_HASH_MM_MAX)
            cli_usage_error("more than %u multimodal hashes for block %" PRIu32,
                            KVIX_HASH_MM_MAX, block);
        h->mm = xrealloc(h->mm, (h->nmm + 1) * sizeof *h->mm);
        size_t j = h->nmm++;
        for (; j > 0 && h->mm[j - 1].block > block; j--)
            h->mm[j] = h->mm[j - 1];
        h->mm[j] = (kvix_tokens_mm){block, x};
        if (!e)
            break;
        p = e + 1;
    }
}

int main(int argc, char **argv)
{
    cli_init(&tool);
    hasher h = {.form = KVIX_TOKENS_OBJECT, .seed = KVIX_HASH_SEED};
    kvix_tokens_init(&h.line);
    kvix_buf_init(&h.out);
    const char *arg;
    int c;
    while ((c = cli_next(argc, argv, &arg)) != -1) {
        switch (c) {
        case 'b':
            h.bs = (size_t)cli_parse_uint(arg, 1, KVIX_BS_MAX, "block size");
            break;
        case 'l':
            if (strlen(arg) >= KVIX_NAME_MAX)
                cli_usage_error("LoRA name longer than %d bytes", KVIX_NAME_MAX - 1);
            h.seed = kvix_hash_lora_seed(arg, strlen(arg));
            h.lora = arg;
            break;
        case O_SALT:
            if (strlen(arg) >= KVIX_NAME_MAX)
                cli_usage_error("salt longer than %d bytes", KVIX_NAME_MAX - 1);
            h.salt = arg;
            break;
        case O_MM:
            parse_mm(&h, arg);
            break;
        case O_EAGLE:
            h.eagle = 1;
            break;
        case 'P':
            h.positional = 1;
            break;
        case 'd':
            h.decimal = 1;
            break;
        case 'p': {
            static const char *const names[] = {"local", "seq", "psh", "plh"};
            static const kvix_tokens_form forms[] = {KVIX_TOKENS_LOCAL, KVIX_TOKENS_SEQ,
                                                     KVIX_TOKENS_PSH, KVIX_TOKENS_PLH};
            int f = -1;
            for (int i = 0; i < 4; i++)
                if (strcmp(arg, names[i]) == 0)
                    f = i;
            if (f < 0)
                cli_usage_error("bad field for %s: '%s' (expected local, seq, psh or plh)",
                                cli_opt_given(), arg);
            h.form = forms[f];
            break;
        }
        case O_STRICT:
            h.strict = 1;
            break;
        }
    }
    if (!h.bs)
        cli_usage_error("missing -b BLOCK_SIZE");

    int io = 0, stopped = 0;
    char **files = argv + optind;
    int nfiles = argc - optind;
    static char dash_name[] = "-";
    static char *dash[] = {dash_name};
    if (nfiles == 0) {
        files = dash;
        nfiles = 1;
    }
    input in = {.cap = 256 * 1024};
    in.buf = xrealloc(NULL, in.cap);
    for (int i = 0; i < nfiles && !stopped; i++) {
        int is_stdin = strcmp(files[i], "-") == 0;
        int fd = is_stdin ? STDIN_FILENO : open(files[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            out_flush(&h);
            cli_warn("cannot open %s: %s", files[i], strerror(errno));
            io = 1;
            continue;
        }
        in.fd = fd;
        in.name = is_stdin ? "<stdin>" : files[i];
        in.start = in.scan = in.end = 0;
        in.line = 0;
        in.eof = in.skipping = 0;
        int r = hash_file(&h, &in);
        io |= r == RUN_IO;
        stopped = r == RUN_STRICT;
        if (!is_stdin)
            close(fd);
    }
    out_flush(&h);
    free(in.buf);
    kvix_tokens_release(&h.line);
    free(h.local);
    free(h.seq);
    free(h.pos);
    kvix_buf_release(&h.out);
    free(h.mm);
    int code = stopped ? KVIX_EXIT_STRICT : io ? KVIX_EXIT_IO
                                          : h.rejected ? KVIX_EXIT_REJECTED : KVIX_EXIT_OK;
    return cli_finish(code);
}
