/* Responses: made, released, and filled with a text, an error or the status
 * of a library error code. The lowest of the service's files. */
#include <string.h>
#include <unistd.h>

#include "kvix/service.h"
#include "service_int.h"
#include "service_priv.h"

/* ---- responses ---- */

void kvix_service_response_init(kvix_service_response *r)
{
    memset(r, 0, sizeof *r);
    kvix_buf_init(&r->body);
    r->fd = -1;
}

void kvix__service_response_clear(kvix_service_response *r)
{
    r->body.len = 0;
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    if (r->done) /* a state response's hold on its file and its place in flight */
        r->done(r->done_ctx);
    r->done = NULL;
}

void kvix_service_response_release(kvix_service_response *r)
{
    kvix__service_response_clear(r);
    kvix_buf_release(&r->body);
}

void kvix__service_respond(kvix_service_response *r, int status, const char *ctype, const char *text)
{
    r->status = status;
    r->content_type = ctype;
    r->body.len = 0;
    if (kvix__sj_raw(&r->body, text, NULL)) {
        r->status = 500;
        r->body.len = 0;
    }
}

/* {"error":"msg"} with status. */
void kvix__service_respond_error(kvix_service_response *r, int status, const char *msg)
{
    r->status = status;
    r->content_type = "application/json";
    r->body.len = 0;
    if (kvix__sj_raw(&r->body, "{\"error\":", NULL) ||
        kvix__sj_str(&r->body, msg, strlen(msg), NULL) || kvix__sj_raw(&r->body, "}", NULL)) {
        r->body.len = 0;
        r->status = 500;
    }
}

/* The status for a library error code. */
static int status_for(int code)
{
    switch (code) {
    case KVIX_ENOTFOUND: return 404;
    case KVIX_EBLOCKSIZE: return 409;
    case KVIX_ENOMEM:
    case KVIX_EIO:
    case KVIX_ESYS: return 500;
    default: return 400;
    }
}

void kvix__service_respond_err(kvix_service_response *r, const kvix_err *e)
{
    kvix__service_respond_error(r, status_for(e->code), e->msg);
}
