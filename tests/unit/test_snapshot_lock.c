/* One writer per snapshot (kvix_snapshot_lock_take) and symbolic links
 * followed by the writer (kvix_snapshot_resolve): a save through a link
 * replaces the link's target and the link stays. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "kvix/snapshot.h"

static int write_empty(const char *path)
{
    kvix_snapshot_writer *w;
    kvix_err err;
    int rc = kvix_snapshot_writer_open(&w, path, &err);
    if (rc)
        return rc;
    return kvix_snapshot_writer_commit(w, NULL, &err);
}

TEST(lock_is_exclusive_and_dies_with_its_holder)
{
    kvix_snapshot_lock *a = NULL, *b = NULL;
    kvix_err err;
    const char *s = th_path("s.kvix");
    CHECK(kvix_snapshot_lock_take(&a, s, &err) == KVIX_OK);
    CHECK(a != NULL);
    CHECK_STR(kvix_snapshot_lock_path(a), th_path("s.kvix.lock"));
    /* flock is per open file: a second take, even in one process, is refused */
    CHECK(kvix_snapshot_lock_take(&b, s, &err) == KVIX_EBUSY);
    CHECK(b == NULL);
    char want[64];
    snprintf(want, sizeof want, "in use by another process (pid %ld holds ", (long)getpid());
    CHECK(strncmp(err.msg, want, strlen(want)) == 0);
    kvix_snapshot_lock_release(a);
    CHECK(kvix_snapshot_lock_take(&b, s, &err) == KVIX_OK);
    kvix_snapshot_lock_release(b);
    kvix_snapshot_lock_release(NULL);
}

TEST(lock_follows_links_and_refuses_bad_paths)
{
    kvix_snapshot_lock *a = NULL, *b = NULL;
    kvix_err err;
    CHECK(symlink("t.kvix", th_path("l1.kvix")) == 0);
    CHECK(symlink(th_path("l1.kvix"), th_path("l2.kvix")) == 0); /* absolute, to a link */
    CHECK(kvix_snapshot_lock_take(&a, th_path("t.kvix"), &err) == KVIX_OK);
    CHECK(kvix_snapshot_lock_take(&b, th_path("l2.kvix"), &err) == KVIX_EBUSY);
    kvix_snapshot_lock_release(a);
    CHECK(kvix_snapshot_lock_take(&b, "", &err) == KVIX_EINVAL);
    CHECK(kvix_snapshot_lock_take(&b, th_path("no/such/dir.kvix"), &err) == KVIX_ENOTFOUND);
    CHECK(symlink("loop2.kvix", th_path("loop1.kvix")) == 0);
    CHECK(symlink("loop1.kvix", th_path("loop2.kvix")) == 0);
    CHECK(kvix_snapshot_lock_take(&b, th_path("loop1.kvix"), &err) == KVIX_EIO);
    CHECK(strstr(err.msg, "too many levels of symbolic links") != NULL);
    CHECK(b == NULL);
}

TEST(save_through_a_link_replaces_the_target)
{
    struct stat st;
    CHECK(mkdir(th_path("sub"), 0755) == 0);
    CHECK(symlink("sub/target.kvix", th_path("link.kvix")) == 0);
    /* dangling at first: the save creates the target */
    CHECK(write_empty(th_path("link.kvix")) == KVIX_OK);
    CHECK(lstat(th_path("link.kvix"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(lstat(th_path("sub/target.kvix"), &st) == 0 && S_ISREG(st.st_mode));
    ino_t first = st.st_ino;
    CHECK(write_empty(th_path("link.kvix")) == KVIX_OK);
    CHECK(lstat(th_path("link.kvix"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(lstat(th_path("sub/target.kvix"), &st) == 0 && S_ISREG(st.st_mode));
    CHECK(st.st_ino != first); /* replaced by rename, not written in place */
    char *real = NULL;
    kvix_err err;
    CHECK(kvix_snapshot_resolve(th_path("link.kvix"), &real, &err) == KVIX_OK);
    CHECK_STR(real, th_path("sub/target.kvix"));
    free(real);
}

static int file_holds(const char *path, const char *text)
{
    char b[64] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(b, 1, sizeof b - 1, f);
    fclose(f);
    b[n] = '\0';
    return strcmp(b, text) == 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A lock file planted as a link is never written through: the pid went
 * into (and truncated) whatever the link named. */
TEST(lock_file_planted_as_a_link_is_refused_and_its_target_kept)
{
    kvix_snapshot_lock *a = NULL;
    kvix_err err;
    write_file(th_path("precious"), "keep me\n");
    CHECK(symlink(th_path("precious"), th_path("p.kvix.lock")) == 0);
    CHECK(kvix_snapshot_lock_take(&a, th_path("p.kvix"), &err) == KVIX_EIO);
    CHECK(strstr(err.msg, "symbolic link") != NULL);
    CHECK(file_holds(th_path("precious"), "keep me\n"));
    CHECK(link(th_path("precious"), th_path("h.kvix.lock")) == 0);
    CHECK(kvix_snapshot_lock_take(&a, th_path("h.kvix"), &err) == KVIX_EIO);
    CHECK(file_holds(th_path("precious"), "keep me\n"));
    CHECK(mkfifo(th_path("f.kvix.lock"), 0600) == 0);
    CHECK(kvix_snapshot_lock_take(&a, th_path("f.kvix"), &err) == KVIX_EIO);
    CHECK(a == NULL);
}

/* What saves killed mid-way left (TARGET.tmp.XXXXXX) is removed once the
 * lock is held: nothing else of another name is touched. */
TEST(lock_removes_what_interrupted_saves_left)
{
    static const char *const stale[] = {"q.kvix.tmp.AbC123", "q.kvix.tmp.000000"};
    static const char *const kept[] = {"q.kvix.tmp.AbC12", "q.kvix.tmp.AbC1234",
                                       "q.kvix.tmp.AbC-12", "r.kvix.tmp.AbC123", "q.kvix"};
    for (size_t i = 0; i < 2; i++)
        write_file(th_path(stale[i]), "x");
    for (size_t i = 0; i < 5; i++)
        write_file(th_path(kept[i]), "x");
    kvix_snapshot_lock *a = NULL;
    kvix_err err;
    CHECK(kvix_snapshot_lock_take(&a, th_path("q.kvix"), &err) == KVIX_OK);
    CHECK_U64(kvix_snapshot_lock_stale(a), 2);
    for (size_t i = 0; i < 2; i++)
        CHECK(access(th_path(stale[i]), F_OK) != 0);
    for (size_t i = 0; i < 5; i++)
        CHECK(access(th_path(kept[i]), F_OK) == 0);
    kvix_snapshot_lock_release(a);
}
