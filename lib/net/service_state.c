/* GET /dump and GET /snapshot: the whole index, read quiet. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvix/service.h"
#include "kvix/snapshot.h"
#include "service_int.h"
#include "service_priv.h"

/* ---- state: /dump, /snapshot ---- */

void kvix_service_get_dump(kvix_service *s, kvix_service_response *r)
{
    kvix_err e;
    r->body.len = 0;
    kvix_index_quiet_begin(s->o.idx);
    int rc = kvix_service_dump(s->o.idx, &r->body, &e);
    kvix_index_quiet_end(s->o.idx);
    if (rc)
        kvix_service_respond_err(r, &e);
    else {
        r->status = 200;
        r->content_type = "application/json";
    }
}

void kvix_service_get_snapshot(kvix_service *s, kvix_service_response *r)
{
    kvix_err e;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/kvix-http-snapshot-XXXXXX", s->o.tmpdir) >=
        sizeof path) {
        kvix_service_respond_error(r, 500, "temporary folder name too long");
        return;
    }
    int fd = mkstemp(path);
    if (fd < 0) {
        char m[512];
        snprintf(m, sizeof m, "cannot create a file in %s: %s", s->o.tmpdir, strerror(errno));
        kvix_service_respond_error(r, 500, m);
        return;
    }
    close(fd);
    kvix_index_quiet_begin(s->o.idx);
    int rc = s->o.stream ? kvix_snapshot_save_at(s->o.idx, path, s->o.stream,
                                                 __atomic_load_n(&s->stream_seq, __ATOMIC_RELAXED),
                                                 NULL, &e)
                         : kvix_snapshot_save(s->o.idx, path, NULL, &e);
    kvix_index_quiet_end(s->o.idx);
    fd = rc ? -1 : open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (!rc && (fd < 0 || fstat(fd, &st) != 0))
        rc = kvix_err_set(&e, KVIX_EIO, "cannot open %s: %s", path, strerror(errno));
    unlink(path); /* the open descriptor keeps the bytes until the response is sent */
    if (rc) {
        if (fd >= 0)
            close(fd);
        kvix_service_respond_err(r, &e);
        return;
    }
    r->status = 200;
    r->content_type = "application/octet-stream";
    r->body.len = 0;
    r->fd = fd;
    r->fd_size = (uint64_t)st.st_size;
}
