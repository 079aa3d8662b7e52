/* The service's peer endpoints: POST /register_peer, /deregister_peer and
 * GET /peers over the kvix_peers set the tool recovers from. */
#include <jansson.h>
#include <string.h>

#include "kvix/peers.h"
#include "kvix/service.h"
#include "service_int.h"
#include "service_priv.h"

/* {"url":"http://..."}: added (add) or removed. */
void kvix__service_post_peer(kvix_service *s, const char *body, size_t len, int add,
                            kvix_service_response *r)
{
    kvix_err e;
    const char *url = NULL;
    size_t n = 0;
    json_t *o = kvix_json_u64_loadb(body, len, &e);
    int rc = o ? KVIX_OK : e.code;
    if (o && !json_is_object(o))
        rc = kvix_err_set(&e, KVIX_EINVAL, "the body is not a JSON object");
    if (!rc)
        rc = kvix__sj_get_str(o, "url", NULL, &url, &n, &e);
    if (!rc && add)
        rc = kvix_peers_add(s->o.peers, url, n, NULL, &e);
    else if (!rc && (rc = kvix_peers_check(url, n, &e)) == KVIX_OK)
        kvix_peers_remove(s->o.peers, url, n); /* an unknown peer: nothing to do */
    json_decref(o);
    if (rc == KVIX_ENOMEM)
        kvix__service_respond_error(r, 500, e.msg);
    else if (rc)
        kvix__service_respond_error(r, 400, e.msg);
    else
        kvix__service_respond(r, 200, "application/json", "{\"status\":\"ok\"}");
}

/* ["http://peer:8091",...] */
void kvix__service_peers(kvix_service *s, kvix_service_response *r)
{
    kvix_err e;
    char **v = NULL;
    size_t n = 0;
    int rc = kvix_peers_list(s->o.peers, &v, &n, &e);
    r->body.len = 0;
    if (!rc)
        rc = kvix__sj_raw(&r->body, "[", &e);
    for (size_t i = 0; !rc && i < n; i++)
        if (!(rc = i ? kvix__sj_raw(&r->body, ",", &e) : KVIX_OK))
            rc = kvix__sj_str(&r->body, v[i], strlen(v[i]), &e);
    if (!rc)
        rc = kvix__sj_raw(&r->body, "]", &e);
    kvix_peers_list_free(v, n);
    if (rc) {
        kvix__service_respond_err(r, &e);
        return;
    }
    r->status = 200;
    r->content_type = "application/json";
}
