/* Peers: the set of their URLs, and recovery from the first that answers
 * (GET /snapshot, else GET /dump; libcurl). */
#define _GNU_SOURCE /* mkostemp */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kvix/peers.h"
#include "kvix/service.h"
#include "kvix/snapshot.h"

/* ---- the set ---- */

struct kvix_peers {
    pthread_mutex_t mu;
    char *url[KVIX_PEERS_MAX];
    size_t n;
    char *token;
    char *tmpdir;
    long timeout_ms;
    uint64_t recovery_ms;
};

int kvix_peers_set_transfer(kvix_peers *p, const char *tmpdir, long timeout_ms,
                            uint64_t recovery_ms, kvix_err *err)
{
    char *t = tmpdir ? strdup(tmpdir) : NULL;
    if (tmpdir && !t)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    free(p->tmpdir);
    p->tmpdir = t;
    p->timeout_ms = timeout_ms;
    p->recovery_ms = recovery_ms;
    return KVIX_OK;
}

void kvix_peers_opts(const kvix_peers *p, kvix_peers_recover_opts *o)
{
    memset(o, 0, sizeof *o);
    o->token = p->token;
    o->tmpdir = p->tmpdir;
    o->timeout_ms = p->timeout_ms;
    if (p->recovery_ms) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        o->deadline_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 +
                         p->recovery_ms;
    }
}

int kvix_peers_token_check(const char *t, size_t len, kvix_err *err)
{
    if (len == 0)
        return kvix_err_set(err, KVIX_EINVAL, "empty token");
    if (len > KVIX_SERVICE_TOKEN_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "token of %zu bytes (limit %d)", len,
                            KVIX_SERVICE_TOKEN_MAX);
    size_t i = 0;
    for (; i < len && t[i] != '='; i++) {
        char c = t[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("-._~+/", c)))
            return kvix_err_set(err, KVIX_EINVAL, "token byte %zu is not a letter, digit or "
                                "one of -._~+/ (RFC 6750)", i + 1);
    }
    if (i == 0)
        return kvix_err_set(err, KVIX_EINVAL, "token of padding only");
    for (; i < len; i++)
        if (t[i] != '=')
            return kvix_err_set(err, KVIX_EINVAL, "token byte %zu follows its '=' padding", i + 1);
    return KVIX_OK;
}

int kvix_peers_set_token(kvix_peers *p, const char *token, kvix_err *err)
{
    int rc = token ? kvix_peers_token_check(token, strlen(token), err) : KVIX_OK;
    char *t = !rc && token ? strdup(token) : NULL;
    if (!rc && token && !t)
        rc = kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    if (rc)
        return rc;
    free(p->token);
    p->token = t;
    return KVIX_OK;
}

const char *kvix_peers_token(const kvix_peers *p)
{
    return p->token;
}

int kvix_peers_new(kvix_peers **out, kvix_err *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    pthread_mutex_init(&(*out)->mu, NULL);
    return KVIX_OK;
}

void kvix_peers_free(kvix_peers *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->url[i]);
    free(p->token);
    free(p->tmpdir);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static size_t trimmed(const char *url, size_t len)
{
    while (len && url[len - 1] == '/')
        len--;
    return len;
}

int kvix_peers_check(const char *url, size_t len, kvix_err *err)
{
    size_t scheme = len >= 7 && memcmp(url, "http://", 7) == 0    ? 7
                    : len >= 8 && memcmp(url, "https://", 8) == 0 ? 8
                                                                  : 0;
    if (!scheme)
        return kvix_err_set(err, KVIX_EINVAL, "peer url \"%.*s\" is not an http:// or https:// URL",
                            (int)(len < 64 ? len : 64), url);
    size_t given = len;
    len = trimmed(url, len);
    if (len >= KVIX_PEER_URL_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "peer url longer than %u bytes",
                            KVIX_PEER_URL_MAX - 1);
    if (len <= scheme || url[scheme] == '/' || url[scheme] == ':')
        return kvix_err_set(err, KVIX_EINVAL,
                            "peer url \"%.*s\" has no host (expected %.*sHOST[:PORT])",
                            (int)given, url, (int)scheme, url);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)url[i] <= ' ' || url[i] == 0x7f)
            return kvix_err_set(err, KVIX_EINVAL,
                                "peer url has a space or a control byte at offset %zu", i);
    return KVIX_OK;
}

static size_t find(const kvix_peers *p, const char *url, size_t len)
{
    for (size_t i = 0; i < p->n; i++)
        if (strlen(p->url[i]) == len && memcmp(p->url[i], url, len) == 0)
            return i;
    return p->n;
}

int kvix_peers_add(kvix_peers *p, const char *url, size_t len, int *added, kvix_err *err)
{
    int dummy;
    if (!added)
        added = &dummy;
    *added = 0;
    int rc = kvix_peers_check(url, len, err);
    if (rc)
        return rc;
    len = trimmed(url, len);
    pthread_mutex_lock(&p->mu);
    if (find(p, url, len) < p->n) {
        pthread_mutex_unlock(&p->mu);
        return KVIX_OK;
    }
    if (p->n == KVIX_PEERS_MAX) {
        pthread_mutex_unlock(&p->mu);
        return kvix_err_set(err, KVIX_ELIMIT, "too many peers (limit %d)", KVIX_PEERS_MAX);
    }
    char *c = malloc(len + 1);
    if (!c) {
        pthread_mutex_unlock(&p->mu);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    memcpy(c, url, len);
    c[len] = '\0';
    p->url[p->n++] = c;
    *added = 1;
    pthread_mutex_unlock(&p->mu);
    return KVIX_OK;
}

int kvix_peers_remove(kvix_peers *p, const char *url, size_t len)
{
    len = trimmed(url, len);
    pthread_mutex_lock(&p->mu);
    size_t i = find(p, url, len);
    int found = i < p->n;
    if (found) {
        free(p->url[i]);
        memmove(&p->url[i], &p->url[i + 1], (p->n - i - 1) * sizeof p->url[0]);
        p->n--;
    }
    pthread_mutex_unlock(&p->mu);
    return found;
}

void kvix_peers_list_free(char **urls, size_t n)
{
    for (size_t i = 0; urls && i < n; i++)
        free(urls[i]);
    free(urls);
}

int kvix_peers_list(kvix_peers *p, char ***urls, size_t *n, kvix_err *err)
{
    *urls = NULL;
    *n = 0;
    pthread_mutex_lock(&p->mu);
    char **v = calloc(p->n ? p->n : 1, sizeof *v);
    size_t i = 0;
    for (; v && i < p->n; i++)
        if (!(v[i] = strdup(p->url[i])))
            break;
    int ok = v && i == p->n;
    pthread_mutex_unlock(&p->mu);
    if (!ok) {
        kvix_peers_list_free(v, i);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    *urls = v;
    *n = i;
    return KVIX_OK;
}

/* ---- fetching ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* A peer's answer goes to an unlinked temporary file as it arrives (libcurl's
 * write callback), never to the heap: a 3,000 MB body took RSS to 6.2 GB.
 * The file is then mapped (a snapshot verified and applied from it, a dump
 * walked event by event): its pages are the page cache's, given back under
 * pressure. */
typedef struct sink {
    int fd;          /* the temporary file, or -1 */
    uint64_t n, max; /* bytes written; the ceiling */
    int over, werr;
} sink;

static size_t on_data(char *p, size_t size, size_t n, void *ctx)
{
    sink *k = ctx;
    size_t len = size * n;
    if (k->n + len > k->max) {
        k->over = 1;
        return 0; /* aborts the transfer */
    }
    for (size_t off = 0; off < len;) {
        ssize_t w = write(k->fd, p + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            k->werr = errno;
            return 0;
        }
        off += (size_t)w;
    }
    k->n += len;
    return len;
}

static int sink_open(sink *k, const char *tmpdir, uint64_t max, kvix_err *err)
{
    char path[4096];
    k->fd = -1;
    k->max = max;
    if ((size_t)snprintf(path, sizeof path, "%s/kvix-peer-XXXXXX", tmpdir) >= sizeof path)
        return kvix_err_set(err, KVIX_EINVAL, "temporary folder name too long");
    k->fd = mkostemp(path, O_CLOEXEC);
    if (k->fd < 0)
        return kvix_err_set(err, KVIX_EIO, "cannot create a file in %s: %s", tmpdir,
                            strerror(errno));
    unlink(path); /* nothing left behind, whatever happens */
    return KVIX_OK;
}

static void sink_close(sink *k)
{
    if (k->fd >= 0)
        close(k->fd);
    k->fd = -1;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Milliseconds left to o->deadline_ms (1 at least once it has passed, for
 * libcurl's "no limit" 0), or 0 without a deadline. */
static long left_ms(const kvix_peers_recover_opts *o)
{
    if (!o->deadline_ms)
        return 0;
    uint64_t now = mono_ms();
    return now >= o->deadline_ms ? 1 : (long)(o->deadline_ms - now);
}

/* GET url + path into k's file; KVIX_OK on a 200. *answered: the peer gave
 * an HTTP status at all (a peer that does not answer is not asked again). */
static int fetch(const char *url, const char *path, const kvix_peers_recover_opts *o, sink *k,
                 int *answered, kvix_err *err)
{
    *answered = 0;
    char full[KVIX_PEER_URL_MAX + 32];
    size_t ul = trimmed(url, strlen(url));
    if (ul >= KVIX_PEER_URL_MAX)
        return kvix_err_set(err, KVIX_ELIMIT, "peer url longer than %u bytes",
                            KVIX_PEER_URL_MAX - 1);
    snprintf(full, sizeof full, "%.*s%s", (int)ul, url, path);
    if (o->deadline_ms && mono_ms() >= o->deadline_ms)
        return kvix_err_set(err, KVIX_EIO, "%s: not asked: the recovery's time is over", full);
    k->n = 0;
    k->over = k->werr = 0;
    if (ftruncate(k->fd, 0) != 0 || lseek(k->fd, 0, SEEK_SET) != 0)
        return kvix_err_set(err, KVIX_EIO, "temporary file: %s", strerror(errno));
    CURL *c = curl_easy_init();
    if (!c)
        return kvix_err_set(err, KVIX_ENOMEM, "cannot create a curl handle");
    char ebuf[CURL_ERROR_SIZE] = "";
    long silence_s = (o->timeout_ms + 999) / 1000, left = left_ms(o);
    curl_easy_setopt(c, CURLOPT_URL, full);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    /* a peer silent (under a byte a second) this long is given up, however
     * big its answer; the whole recovery has its own deadline */
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     left && left < o->timeout_ms ? left : o->timeout_ms);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, silence_s);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, left);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, k);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    struct curl_slist *hdr = NULL;
    char *auth = NULL;
    if (o->token) {
        size_t al = strlen(o->token) + 32;
        if (!(auth = malloc(al)) ||
            (snprintf(auth, al, "Authorization: Bearer %s", o->token),
             !(hdr = curl_slist_append(NULL, auth)))) {
            free(auth);
            curl_easy_cleanup(c);
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        }
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    }
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(hdr);
    free(auth);
    *answered = status != 0;
    if (k->over)
        return kvix_err_set(err, KVIX_ELIMIT, "%s: answer larger than %" PRIu64 " bytes", full,
                            k->max);
    if (k->werr)
        return kvix_err_set(err, KVIX_EIO, "%s: temporary file: %s", full, strerror(k->werr));
    if (rc != CURLE_OK)
        return kvix_err_set(err, KVIX_EIO, "%s: %s", full, *ebuf ? ebuf : curl_easy_strerror(rc));
    if (status != 200)
        return kvix_err_set(err, KVIX_EIO, "%s: status %ld", full, status);
    return KVIX_OK;
}

/* ---- recovery ---- */

static void opts_fill(kvix_peers_recover_opts *o, const kvix_peers_recover_opts *given)
{
    memset(o, 0, sizeof *o);
    if (given)
        *o = *given;
    if (!o->timeout_ms)
        o->timeout_ms = 5000;
    if (!o->max_bytes)
        o->max_bytes = (size_t)1 << 34;
    if (!o->tmpdir)
        o->tmpdir = "/tmp";
}

static int curl_ready(kvix_err *err)
{
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return kvix_err_set(err, KVIX_ESYS, "cannot start libcurl: %s",
                            curl_easy_strerror(curl_init_rc));
    return KVIX_OK;
}

/* The peer's GET /snapshot, verified whole: KVIX_OK with *out, or KVIX_EIO
 * (err says why) to try something else; *answered as fetch says. */
static int one_snapshot(const char *url, const kvix_peers_recover_opts *o, sink *k,
                        kvix_snapshot **out, int *answered, kvix_err *err)
{
    if (fetch(url, "/snapshot", o, k, answered, err))
        return KVIX_EIO;
    if (lseek(k->fd, 0, SEEK_SET) != 0)
        return kvix_err_set(err, KVIX_EIO, "temporary file: %s", strerror(errno));
    kvix_snapshot *s;
    if (kvix_snapshot_open_fd(&s, k->fd, url, err)) { /* mapped from the file */
        char m[sizeof err->msg];
        snprintf(m, sizeof m, "%s", err ? err->msg : "");
        return kvix_err_set(err, KVIX_EIO, "%.*s/snapshot: %s", (int)trimmed(url, strlen(url)),
                            url, m);
    }
    kvix_snapshot_info info;
    kvix_snapshot_get_info(s, &info);
    int rc = KVIX_OK;
    if (o->stream && (!info.has_stream || strcmp(info.stream, o->stream) != 0))
        rc = kvix_err_set(err, KVIX_EIO, "%.*s/snapshot reflects %s%s, not stream %s",
                          (int)trimmed(url, strlen(url)), url,
                          info.has_stream ? "stream " : "no stream",
                          info.has_stream ? info.stream : "", o->stream);
    else if (o->stream && info.stream_seq < o->min_seq)
        rc = kvix_err_set(err, KVIX_EIO,
                          "%.*s/snapshot reflects stream %s up to %" PRIu64
                          ", which no longer holds what follows",
                          (int)trimmed(url, strlen(url)), url, o->stream, info.stream_seq);
    if (rc) {
        kvix_snapshot_close(s);
        return rc;
    }
    *out = s;
    return KVIX_OK;
}

/* The peers from urls[from] on, in order, until one answers: its GET
 * /snapshot (verified whole) in *snap, or, with_dump, its GET /dump's body
 * in k's file (*snap NULL); *winner says which. A peer that answered
 * nothing to /snapshot (silent, away) is not asked for /dump. KVIX_ENOTFOUND
 * when none did (err: the last peer's failure). The one loop of
 * fetch_snapshot and recover, which tries the next peer after a dump it
 * cannot use. */
static int first_peer(const char *const *urls, size_t n, size_t from,
                      const kvix_peers_recover_opts *o, int with_dump, sink *k,
                      kvix_snapshot **snap, size_t *winner, kvix_err *err)
{
    if (!from)
        kvix_err_set(err, KVIX_ENOTFOUND, "no peer given");
    for (size_t i = from; i < n; i++) {
        int answered;
        *winner = i;
        *snap = NULL;
        if (one_snapshot(urls[i], o, k, snap, &answered, err) == KVIX_OK ||
            (with_dump && answered && fetch(urls[i], "/dump", o, k, &answered, err) == KVIX_OK))
            return KVIX_OK;
    }
    if (err && n)
        err->code = KVIX_ENOTFOUND;
    return KVIX_ENOTFOUND;
}

int kvix_peers_fetch_snapshot(const char *const *urls, size_t n,
                              const kvix_peers_recover_opts *opts, kvix_snapshot **out,
                              size_t *winner, kvix_err *err)
{
    kvix_peers_recover_opts o;
    opts_fill(&o, opts);
    *out = NULL;
    int rc = curl_ready(err);
    if (rc)
        return rc;
    sink k;
    if ((rc = sink_open(&k, o.tmpdir, o.max_bytes, err)))
        return rc;
    rc = first_peer(urls, n, 0, &o, 0, &k, out, winner, err);
    sink_close(&k); /* a snapshot maps what it needs: the file lives on with it */
    return rc;
}

int kvix_peers_recover(kvix_index *idx, const char *const *urls, size_t n,
                       const kvix_peers_recover_opts *opts, kvix_peers_result *res,
                       kvix_err *err)
{
    kvix_peers_recover_opts o;
    opts_fill(&o, opts);
    memset(res, 0, sizeof *res);
    int rc = curl_ready(err);
    if (rc)
        return rc;
    sink k;
    if ((rc = sink_open(&k, o.tmpdir, o.max_bytes, err)))
        return rc;
    kvix_snapshot *s;
    size_t from = 0;
    /* with a stream, only a snapshot carries the position: no dump */
    while ((rc = first_peer(urls, n, from, &o, !o.stream, &k, &s, &res->winner, err)) ==
           KVIX_OK) {
        if (s) {
            kvix_snapshot_get_info(s, &res->info);
            rc = kvix_snapshot_apply(s, idx, err);
            kvix_snapshot_close(s);
            res->from_snapshot = 1;
            break;
        }
        void *m = k.n ? mmap(NULL, (size_t)k.n, PROT_READ, MAP_PRIVATE, k.fd, 0) : NULL;
        if (m == MAP_FAILED) {
            rc = kvix_err_set(err, KVIX_EIO, "cannot map %s/dump's answer: %s",
                              urls[res->winner], strerror(errno));
            break;
        }
        if (m)
            madvise(m, (size_t)k.n, MADV_SEQUENTIAL);
        rc = kvix_service_dump_apply(idx, m ? m : "", (size_t)k.n, &res->applied,
                                     &res->rejected, err);
        if (m)
            munmap(m, (size_t)k.n);
        if (!rc || res->applied || res->rejected)
            break; /* taken, or failed half way: the index is no longer as it was */
        from = res->winner + 1;
    }
    sink_close(&k);
    return rc;
}
