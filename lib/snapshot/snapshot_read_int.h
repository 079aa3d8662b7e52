/* libkvix private: an opened snapshot, shared by the files that open and
 * verify it (snapshot_open.c) and walk its records (snapshot_read.c). */
#ifndef KVIX_SNAPSHOT_READ_INT_H
#define KVIX_SNAPSHOT_READ_INT_H

#include "snapshot_int.h"

struct kvix_snapshot {
    uint32_t version;
    int verified; /* every record checked once: a second read checks less */
    const unsigned char *data;
    size_t len;
    void *map;            /* mmap'ed file, or NULL */
    unsigned char *owned; /* read or copied bytes, or NULL */
    char *name;
    size_t body_end;      /* offset of the END record */
    size_t first;         /* offset of the first record after the header (and STREAM) */
    size_t pos;
    kvix_snapshot_info info;
    int in_part, part_groups;
    char model[KVIX_NAME_MAX], tenant[KVIX_NAME_MAX];
    uint32_t bs;
    int have_group;
    uint64_t worker;
    uint32_t dp;
    kvix_block_info *blocks; /* the last group's, sorted by (position, engine) */
    kvix_block_info *pre;    /* version 3: the last group's, in the file's order */
    size_t *up;              /* parent index of each block of the last group (NONE: none) */
    size_t cap;
    kvix_snap_scratch sc;
    size_t *ext;             /* offsets of the extension records */
    size_t next;
    size_t part_no;          /* partition records met since the first record */
    uint64_t *est;           /* per partition: about how many distinct blocks (verify) */
    size_t nest;
    int borrowed;            /* a cursor: data and est are its snapshot's */
    /* next: records for which want() is 0 are jumped over undecoded */
    int (*want)(void *ctx, uint64_t worker, uint32_t dp);
    void *want_ctx;
};

/* "NAME: corrupt snapshot at byte OFF: ..." as KVIX_ECORRUPT. */
__attribute__((format(printf, 4, 5))) int kvix__snap_corrupt(kvix_snapshot *s, size_t off,
                                                           kvix_err *err, const char *fmt, ...);
#define CORRUPT(s, off, ...) kvix__snap_corrupt((s), (off), __VA_ARGS__)

/* A snapshot object named name (copied), nothing opened: NULL on ENOMEM. */
kvix_snapshot *kvix__snap_new(const char *name, kvix_err *err);

#endif
