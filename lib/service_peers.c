/* Peer recovery: GET /dump from the first peer that answers (libcurl). */
#include <curl/curl.h>
#include <pthread.h>
#include <string.h>

#include "kvix/service.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

typedef struct sink {
    kvix_buf b;
    size_t max;
    int over;
} sink;

static size_t on_data(char *p, size_t size, size_t n, void *ctx)
{
    sink *k = ctx;
    size_t len = size * n;
    if (k->b.len + len > k->max) {
        k->over = 1;
        return 0; /* aborts the transfer */
    }
    return kvix_buf_append(&k->b, p, len, NULL) ? 0 : len;
}

/* GET url + "/dump" into k->b; KVIX_OK on a 200. */
static int fetch(const char *url, long timeout_ms, sink *k, kvix_err *err)
{
    size_t ul = strlen(url);
    while (ul && url[ul - 1] == '/')
        ul--;
    char full[2048];
    if (ul + sizeof "/dump" > sizeof full)
        return kvix_err_set(err, KVIX_EINVAL, "peer url too long");
    memcpy(full, url, ul);
    memcpy(full + ul, "/dump", sizeof "/dump");
    CURL *c = curl_easy_init();
    if (!c)
        return kvix_err_set(err, KVIX_ENOMEM, "cannot create a curl handle");
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, full);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, k);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    if (k->over)
        return kvix_err_set(err, KVIX_ELIMIT, "%s: dump larger than %zu bytes", full, k->max);
    if (rc != CURLE_OK)
        return kvix_err_set(err, KVIX_EIO, "%s: %s", full, *ebuf ? ebuf : curl_easy_strerror(rc));
    if (status != 200)
        return kvix_err_set(err, KVIX_EIO, "%s: status %ld", full, status);
    return KVIX_OK;
}

int kvix_service_recover(kvix_index *idx, const char *const *urls, size_t n, long timeout_ms,
                         size_t max_bytes, size_t *winner, uint64_t *applied, uint64_t *rejected,
                         kvix_err *err)
{
    *applied = *rejected = 0;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return kvix_err_set(err, KVIX_ESYS, "cannot start libcurl: %s",
                            curl_easy_strerror(curl_init_rc));
    int rc = kvix_err_set(err, KVIX_ENOTFOUND, "no peer given");
    for (size_t i = 0; i < n; i++) {
        sink k = {.max = max_bytes};
        kvix_buf_init(&k.b);
        rc = fetch(urls[i], timeout_ms, &k, err);
        if (!rc) {
            rc = kvix_service_dump_apply(idx, k.b.data ? k.b.data : "", k.b.len, applied,
                                         rejected, err);
            if (rc && !*applied && !*rejected) /* nothing applied: try the next peer */
                rc = KVIX_EIO;
            else {
                kvix_buf_release(&k.b);
                *winner = i;
                return rc;
            }
        }
        kvix_buf_release(&k.b);
    }
    if (err && n)
        err->code = KVIX_ENOTFOUND;
    return KVIX_ENOTFOUND;
}
