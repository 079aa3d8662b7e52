/* What names a subscription: ID[:DP]=ENDPOINT, ZMQ endpoints checked in
 * full, and the workers file (its reader and its writer), see
 * kvix/enginesub.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvix/enginesub.h"

void kvix_enginesub_spec_init(kvix_enginesub_spec *sp)
{
    memset(sp, 0, sizeof *sp);
}

static bool host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '-' || c == '_';
}

static int check_tcp(const char *ep, const char *rest, bool bind, kvix_err *err)
{
    const char *colon = strrchr(rest, ':');
    if (!colon)
        return kvix_err_set(err, KVIX_EINVAL, "bad endpoint '%s': no port", ep);
    size_t hlen = (size_t)(colon - rest);
    if (hlen == 0)
        return kvix_err_set(err, KVIX_EINVAL, "bad endpoint '%s': no host", ep);
    if (rest[0] == '[') {
        if (rest[hlen - 1] != ']' || hlen < 3)
            return kvix_err_set(err, KVIX_EINVAL, "bad endpoint '%s': bad ipv6 address", ep);
        for (size_t i = 1; i + 1 < hlen; i++) {
            char c = rest[i];
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
                  c == ':' || c == '.'))
                return kvix_err_set(err, KVIX_EINVAL, "bad endpoint '%s': bad ipv6 address", ep);
        }
    } else if (hlen == 1 && rest[0] == '*') {
        if (!bind)
            return kvix_err_set(err, KVIX_EINVAL,
                                "bad endpoint '%s': host * is for --bind only", ep);
    } else {
        for (size_t i = 0; i < hlen; i++)
            if (!host_char(rest[i]))
                return kvix_err_set(err, KVIX_EINVAL, "bad endpoint '%s': bad host name", ep);
    }
    const char *port = colon + 1;
    if (bind && (!strcmp(port, "*") || !strcmp(port, "0")))
        return KVIX_OK;
    unsigned long v = 0;
    size_t i = 0;
    for (; port[i] >= '0' && port[i] <= '9' && i < 6; i++)
        v = v * 10 + (unsigned long)(port[i] - '0');
    if (i == 0 || port[i] != '\0' || v == 0 || v > 65535)
        return kvix_err_set(err, KVIX_EINVAL, "bad endpoint '%s': port '%s' not in 1..65535",
                            ep, port);
    return KVIX_OK;
}

int kvix_enginesub_endpoint_check(const char *ep, bool bind, kvix_err *err)
{
    size_t len = strlen(ep);
    if (len >= KVIX_ENGINESUB_ENDPOINT_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "endpoint of %zu bytes (limit %d)", len,
                            KVIX_ENGINESUB_ENDPOINT_MAX - 1);
    if (!strncmp(ep, "tcp://", 6))
        return check_tcp(ep, ep + 6, bind, err);
    if (!strncmp(ep, "ipc://", 6)) {
        size_t plen = len - 6;
        struct sockaddr_un un;
        if (plen == 0)
            return kvix_err_set(err, KVIX_EINVAL, "bad endpoint '%s': no path", ep);
        if (!bind && !strcmp(ep + 6, "*"))
            return kvix_err_set(err, KVIX_EINVAL,
                                "bad endpoint '%s': ipc://* is for --bind only", ep);
        if (plen >= sizeof un.sun_path)
            return kvix_err_set(err, KVIX_ELIMIT,
                                "bad endpoint '%s': ipc path of %zu bytes (limit %zu)", ep,
                                plen, sizeof un.sun_path - 1);
        return KVIX_OK;
    }
    /* inproc:// reaches only sockets of this process: no engine is there,
     * only the subscriber's own monitors, which a registration could take over */
    return kvix_err_set(err, KVIX_EINVAL,
                        "bad endpoint '%s': expected tcp://HOST:PORT or ipc://PATH", ep);
}

/* The ipc path p (NUL-terminated, at out's end of room) with empty and "."
 * components dropped and ".." taking back the component before it. */
static void canon_path(char *p)
{
    if (p[0] == '@') /* Linux's abstract namespace: a name, not a path */
        return;
    bool abs = p[0] == '/';
    char *w = p + abs, *r = p + abs;
    size_t depth = 0; /* components written that a ".." may take back */
    while (*r) {
        char *e = strchr(r, '/');
        size_t n = e ? (size_t)(e - r) : strlen(r);
        char *next = r + n + (e != NULL); /* before the write below can reach it */
        if (n == 0 || (n == 1 && r[0] == '.')) {
            /* dropped */
        } else if (n == 2 && r[0] == '.' && r[1] == '.' && (depth || abs)) {
            if (depth) {
                w--; /* the '/' after the last component */
                while (w > p + abs && w[-1] != '/')
                    w--;
                depth--;
            }
        } else {
            memmove(w, r, n);
            w += n;
            *w++ = '/';
            if (!(n == 2 && r[0] == '.' && r[1] == '.'))
                depth++;
        }
        r = next;
        if (!e)
            break;
    }
    if (w > p + abs)
        w--; /* the last '/' */
    if (w == p) /* "." or "a/.." */
        *w++ = '.';
    *w = '\0';
}

int kvix_enginesub_endpoint_canon(const char *ep, bool bind, char *out, kvix_err *err)
{
    int rc = kvix_enginesub_endpoint_check(ep, bind, err);
    if (rc)
        return rc;
    char t[KVIX_ENGINESUB_ENDPOINT_MAX];
    snprintf(t, sizeof t, "%s", ep); /* checked: it fits */
    if (!strncmp(t, "ipc://", 6)) {
        canon_path(t + 6);
        memcpy(out, t, strlen(t) + 1);
        return KVIX_OK;
    }
    char *host = t + 6, *colon = strrchr(host, ':');
    *colon = '\0';
    const char *port = colon + 1;
    while (port[0] == '0' && port[1]) /* "05557", not "0" (--bind's ephemeral) */
        port++;
    char h[INET6_ADDRSTRLEN + 2];
    unsigned char a[sizeof(struct in6_addr)];
    size_t hl = strlen(host);
    if (host[0] == '[') {
        host[hl - 1] = '\0';
        if (inet_pton(AF_INET6, host + 1, a) == 1 && inet_ntop(AF_INET6, a, h + 1, sizeof h - 2)) {
            h[0] = '[';
            size_t l = strlen(h); /* inet_ntop left room for the bracket */
            h[l] = ']';
            h[l + 1] = '\0';
        } else {
            snprintf(h, sizeof h, "%s]", host);
        }
    } else if (inet_pton(AF_INET, host, a) == 1 && inet_ntop(AF_INET, a, h, sizeof h)) {
        /* as written */
    } else {
        h[0] = '\0';
    }
    /* a name: case does not tell hosts apart */
    char *name = h[0] ? h : host;
    for (char *c = name; *c; c++)
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c - 'A' + 'a');
    int n = snprintf(out, KVIX_ENGINESUB_ENDPOINT_MAX, "tcp://%s:%s", name, port);
    if (n < 0 || n >= KVIX_ENGINESUB_ENDPOINT_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "endpoint of %d bytes (limit %d)", n,
                            KVIX_ENGINESUB_ENDPOINT_MAX - 1);
    return KVIX_OK;
}

int kvix_enginesub_spec_parse(kvix_enginesub_spec *sp, const char *s, kvix_err *err)
{
    const char *p = s;
    uint64_t w = 0;
    uint64_t d = 0;
    if (*p < '0' || *p > '9')
        goto bad;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (w > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return kvix_err_set(err, KVIX_EINVAL, "bad worker '%s': id past 2^64-1", s);
        w = w * 10 + (uint64_t)(*p - '0');
    }
    if (w > KVIX_WORKER_MAX) /* the index's range, as events say it */
        return kvix_err_set(err, KVIX_EINVAL, "bad worker '%s': id past 2^63-1", s);
    if (*p == ':') {
        p++;
        if (*p < '0' || *p > '9')
            goto bad;
        for (; *p >= '0' && *p <= '9'; p++) {
            d = d * 10 + (uint64_t)(*p - '0');
            if (d > UINT32_MAX)
                return kvix_err_set(err, KVIX_EINVAL, "bad worker '%s': dp past 2^32-1", s);
        }
    }
    if (*p != '=' || !p[1])
        goto bad;
    sp->worker = w;
    sp->dp = (uint32_t)d;
    if (strlen(p + 1) >= sizeof sp->endpoint)
        return kvix_err_set(err, KVIX_ELIMIT, "endpoint of %zu bytes (limit %zu)",
                            strlen(p + 1), sizeof sp->endpoint - 1);
    snprintf(sp->endpoint, sizeof sp->endpoint, "%s", p + 1);
    return KVIX_OK;
bad:
    return kvix_err_set(err, KVIX_EINVAL, "bad worker '%s' (expected ID[:DP]=ENDPOINT)", s);
}

/* A name of the workers file: one token, so no blanks and no '#'. */
static int set_name(char dst[KVIX_NAME_MAX], const char *what, const char *v, kvix_err *err)
{
    size_t n = strlen(v);
    if (n == 0 || n >= KVIX_NAME_MAX)
        return kvix_err_set(err, KVIX_EINVAL, "bad %s '%s'", what, v);
    memcpy(dst, v, n + 1);
    return KVIX_OK;
}

static int parse_line(char *line, bool bind, kvix_enginesub_spec *sp, bool *blank,
                      kvix_err *err)
{
    char *save = NULL, *tok = strtok_r(line, " \t\r\n", &save);
    *blank = !tok || *tok == '#';
    if (*blank)
        return KVIX_OK;
    kvix_enginesub_spec_init(sp);
    int rc = kvix_enginesub_spec_parse(sp, tok, err);
    if (rc)
        return rc;
    if ((rc = kvix_enginesub_endpoint_canon(sp->endpoint, bind, sp->endpoint, err)))
        return rc;
    while ((tok = strtok_r(NULL, " \t\r\n", &save)) && *tok != '#') {
        char *eq = strchr(tok, '=');
        if (eq && eq - tok == 6 && !strncmp(tok, "replay", 6) && eq[1]) {
            if ((rc = kvix_enginesub_endpoint_canon(eq + 1, false, sp->replay, err)))
                return rc;
        } else if (eq && eq - tok == 5 && !strncmp(tok, "model", 5)) {
            if ((rc = set_name(sp->model, "model", eq + 1, err)))
                return rc;
        } else if (eq && eq - tok == 6 && !strncmp(tok, "tenant", 6)) {
            if ((rc = set_name(sp->tenant, "tenant", eq + 1, err)))
                return rc;
        } else if (eq && eq - tok == 2 && !strncmp(tok, "bs", 2)) {
            char *end;
            errno = 0;
            unsigned long v = strtoul(eq + 1, &end, 10);
            if (errno || *end || eq[1] < '1' || eq[1] > '9' || v > KVIX_BS_MAX)
                return kvix_err_set(err, KVIX_EINVAL, "bad block size '%s' (1..%d)", eq + 1,
                                    KVIX_BS_MAX);
            sp->block_size = (uint32_t)v;
        } else {
            return kvix_err_set(err, KVIX_EINVAL,
                                "unknown setting '%s' (expected replay=, model=, tenant=, bs=)",
                                tok);
        }
    }
    return KVIX_OK;
}

static int dup_check(const kvix_enginesub_spec *v, size_t n, const kvix_enginesub_spec *sp,
                     kvix_err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(v[i].endpoint, sp->endpoint))
            return kvix_err_set(err, KVIX_EINVAL, "endpoint %s listed twice", sp->endpoint);
        if (v[i].worker == sp->worker && v[i].dp == sp->dp)
            return kvix_err_set(err, KVIX_EINVAL, "worker %" PRIu64 " dp %" PRIu32
                                " listed twice", sp->worker, sp->dp);
    }
    return KVIX_OK;
}

int kvix_enginesub_file_read(const char *path, bool bind, kvix_enginesub_spec **out,
                             size_t *nout, kvix_err *err)
{
    *out = NULL;
    *nout = 0;
    /* Not blocking in open: a FIFO with no writer would hold the caller (a
     * reload on SIGHUP) for ever, and read as empty it would drop every
     * worker. Only a regular file is a workers file. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return kvix_err_set(err, errno == ENOENT ? KVIX_ENOTFOUND : KVIX_EIO,
                            "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kvix_err_set(err, KVIX_EIO, "cannot read %s: not a regular file", path);
    }
    FILE *fp = fdopen(fd, "r");
    if (!fp) {
        int e = errno;
        close(fd);
        return kvix_err_set(err, KVIX_ENOMEM, "cannot read %s: %s", path, strerror(e));
    }
    kvix_enginesub_spec *v = NULL;
    size_t n = 0, cap = 0, lineno = 0;
    char line[KVIX_ENGINESUB_FILE_LINE_MAX];
    int rc = KVIX_OK;
    kvix_err e = {0, "", KVIX_REASON_OTHER};
    while (fgets(line, sizeof line, fp)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(fp)) {
            rc = kvix_err_set(&e, KVIX_ELIMIT, "line too long (limit %d bytes)",
                              KVIX_ENGINESUB_FILE_LINE_MAX - 2);
            break;
        }
        kvix_enginesub_spec sp;
        bool blank;
        if ((rc = parse_line(line, bind, &sp, &blank, &e)))
            break;
        if (blank)
            continue;
        if ((rc = dup_check(v, n, &sp, &e)))
            break;
        if (n == KVIX_ENGINESUB_FILE_LINES_MAX) {
            rc = kvix_err_set(&e, KVIX_ELIMIT, "more than %d workers",
                              KVIX_ENGINESUB_FILE_LINES_MAX);
            break;
        }
        if (n == cap) {
            size_t c2 = cap ? cap * 2 : 16;
            kvix_enginesub_spec *nv = realloc(v, c2 * sizeof *nv);
            if (!nv) {
                rc = kvix_err_set(&e, KVIX_ENOMEM, "out of memory");
                break;
            }
            v = nv;
            cap = c2;
        }
        v[n++] = sp;
    }
    if (rc) {
        kvix_err_set(err, rc, "%s:%zu: %s", path, lineno, e.msg);
    } else if (ferror(fp)) {
        rc = kvix_err_set(err, KVIX_EIO, "error reading %s: %s", path, strerror(errno));
    }
    fclose(fp);
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    *nout = n;
    return KVIX_OK;
}

int kvix_enginesub_file_write(const char *path, const kvix_enginesub_spec *v, size_t n,
                              kvix_err *err)
{
    for (size_t i = 0; i < n; i++) /* written only what the reader takes back */
        if (v[i].worker > KVIX_WORKER_MAX)
            return kvix_err_set(err, KVIX_ERANGE, "worker %" PRIu64 " past 2^63-1",
                                v[i].worker);
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int rc = kvix_err_set(err, KVIX_EIO, "cannot write %s: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%" PRIu64 ":%" PRIu32 "=%s", v[i].worker, v[i].dp, v[i].endpoint);
        if (v[i].replay[0])
            fprintf(f, " replay=%s", v[i].replay);
        if (v[i].model[0])
            fprintf(f, " model=%s", v[i].model);
        if (v[i].tenant[0])
            fprintf(f, " tenant=%s", v[i].tenant);
        if (v[i].block_size)
            fprintf(f, " bs=%" PRIu32, v[i].block_size);
        fputc('\n', f);
    }
    /* Renamed into place whole, so a waiting reader never sees half. */
    int bad = fflush(f) != 0 || ferror(f);
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int rc = kvix_err_set(err, KVIX_EIO, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    return KVIX_OK;
}
