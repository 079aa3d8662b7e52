/* One writer per snapshot, and the file a snapshot path names.
 *
 * The snapshot itself cannot carry the lock: every save renames a new file
 * over it, so a lock on the old inode would lock nothing. The lock is an
 * flock(2) on PATH.lock beside the file the path names (symlinks followed,
 * so two names of one file share one lock). The lock file is never removed:
 * removing it would let a third process lock a fresh file while a second
 * still holds the old one. flock locks die with the process, so a crash
 * never leaves a stale lock behind; the pid written into the file is only
 * for the message of whoever finds it held. The lock file is opened without
 * following a symbolic link and used only when it is a regular file with no
 * other name: writing the pid into a planted link's target (or a hard link
 * to another file) would overwrite that file.
 *
 * Holding the lock, no other saver of the path runs: the temporary files a
 * save killed mid-way left beside the target (TARGET.tmp.XXXXXX, see
 * snapshot_write.c) are nobody's, and are removed. */
#define _GNU_SOURCE
#include "kvix/snapshot.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINKS_MAX 40 /* as the kernel's ELOOP limit */

int kvix_snapshot_resolve(const char *path, char **out, kvix_err *err)
{
    *out = NULL;
    if (!path || !*path)
        return kvix_err_set(err, KVIX_EINVAL, "empty snapshot path");
    char *cur = strdup(path);
    if (!cur)
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    for (int hops = 0;; hops++) {
        struct stat st;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode))
            break; /* a file, or nothing yet: this is the name to write */
        if (hops == LINKS_MAX) {
            kvix_err_set(err, KVIX_EIO, "%s: too many levels of symbolic links", path);
            free(cur);
            return KVIX_EIO;
        }
        char target[PATH_MAX];
        ssize_t n = readlink(cur, target, sizeof target - 1);
        if (n < 0) {
            int e = errno;
            kvix_err_set(err, KVIX_EIO, "%s: readlink: %s", cur, strerror(e));
            free(cur);
            return KVIX_EIO;
        }
        target[n] = '\0';
        const char *slash = strrchr(cur, '/');
        char *next;
        if (target[0] == '/' || !slash)
            next = strdup(target);
        else if (asprintf(&next, "%.*s/%s", (int)(slash - cur), cur, target) < 0)
            next = NULL;
        free(cur);
        if (!next)
            return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
        cur = next;
    }
    *out = cur;
    return KVIX_OK;
}

struct kvix_snapshot_lock {
    int fd;
    char *path;   /* the lock file */
    size_t stale; /* temporary files of interrupted saves removed */
};

/* name is base + ".tmp." + 6 characters of mkstemp's alphabet. */
static int is_save_temp(const char *name, const char *base, size_t blen)
{
    if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".tmp.", 5) != 0)
        return 0;
    const char *x = name + blen + 5;
    for (int i = 0; i < 6; i++)
        if (!((x[i] >= 'a' && x[i] <= 'z') || (x[i] >= 'A' && x[i] <= 'Z') ||
              (x[i] >= '0' && x[i] <= '9')))
            return 0;
    return x[6] == '\0';
}

/* Remove what interrupted saves of real left in its folder; how many. */
static size_t remove_save_temps(const char *real)
{
    const char *slash = strrchr(real, '/');
    char *dir = slash ? strndup(real, (size_t)(slash - real) + (slash == real)) : strdup(".");
    const char *base = slash ? slash + 1 : real;
    size_t blen = strlen(base), n = 0;
    DIR *d = dir ? opendir(dir) : NULL;
    if (d) {
        int dfd = dirfd(d);
        for (struct dirent *e; (e = readdir(d));)
            if (is_save_temp(e->d_name, base, blen) && unlinkat(dfd, e->d_name, 0) == 0)
                n++;
        closedir(d);
    }
    free(dir);
    return n;
}

/* The pid recorded by the current holder, or 0. */
static long holder_pid(int fd)
{
    char b[32];
    ssize_t n = pread(fd, b, sizeof b - 1, 0);
    if (n <= 0)
        return 0;
    b[n] = '\0';
    return strtol(b, NULL, 10);
}

int kvix_snapshot_lock_take(kvix_snapshot_lock **out, const char *path, kvix_err *err)
{
    *out = NULL;
    char *real;
    int rc = kvix_snapshot_resolve(path, &real, err);
    if (rc)
        return rc;
    kvix_snapshot_lock *l = calloc(1, sizeof *l);
    if (!l || asprintf(&l->path, "%s.lock", real) < 0) {
        free(l);
        free(real);
        return kvix_err_set(err, KVIX_ENOMEM, "out of memory");
    }
    l->fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (l->fd < 0) {
        int e = errno;
        if (e == ELOOP)
            rc = kvix_err_set(err, KVIX_EIO, "the lock file %s is a symbolic link: not used",
                              l->path);
        else
            rc = kvix_err_set(err, e == ENOENT ? KVIX_ENOTFOUND : KVIX_EIO,
                              "cannot create the lock file %s: %s", l->path, strerror(e));
        goto fail;
    }
    struct stat st;
    if (fstat(l->fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        rc = kvix_err_set(err, KVIX_EIO, "the lock file %s is not a regular file of its own "
                          "(a link or a device): not used", l->path);
        goto fail;
    }
    while (flock(l->fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EINTR)
            continue;
        if (e == EWOULDBLOCK) {
            long pid = holder_pid(l->fd);
            if (pid > 0)
                rc = kvix_err_set(err, KVIX_EBUSY, "in use by another process (pid %ld holds %s)",
                                  pid, l->path);
            else
                rc = kvix_err_set(err, KVIX_EBUSY, "in use by another process (it holds %s)",
                                  l->path);
        } else {
            rc = kvix_err_set(err, KVIX_EIO, "%s: flock: %s", l->path, strerror(e));
        }
        goto fail;
    }
    char b[32];
    int n = snprintf(b, sizeof b, "%ld\n", (long)getpid());
    /* Only informative: a failure to record the pid does not weaken the lock. */
    if (ftruncate(l->fd, 0) == 0 && pwrite(l->fd, b, (size_t)n, 0) != n)
        (void)0;
    l->stale = remove_save_temps(real);
    free(real);
    *out = l;
    return KVIX_OK;
fail:
    free(real);
    kvix_snapshot_lock_release(l);
    return rc;
}

size_t kvix_snapshot_lock_stale(const kvix_snapshot_lock *l)
{
    return l ? l->stale : 0;
}

const char *kvix_snapshot_lock_path(const kvix_snapshot_lock *l)
{
    return l ? l->path : NULL;
}

void kvix_snapshot_lock_release(kvix_snapshot_lock *l)
{
    if (!l)
        return;
    if (l->fd >= 0)
        close(l->fd); /* drops the flock */
    free(l->path);
    free(l);
}
