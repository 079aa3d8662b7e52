/* The HTTP server's connection records (lib/net/service_conns.c) without a
 * server: admissions against a model of the per-address counts, evictions
 * of the oldest waiting connection, deadlines, the memory budget. The
 * records' descriptors are -1: ending one shuts nothing down. */
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "harness.h"
#include "service_priv.h"

static struct sockaddr_in addr_of(unsigned a)
{
    struct sockaddr_in s;
    memset(&s, 0, sizeof s);
    s.sin_family = AF_INET;
    s.sin_addr.s_addr = htonl(0x0a000000u + a);
    return s;
}

static kvix_conns *new_conns(unsigned max, unsigned per_addr, unsigned timeout, int *kick)
{
    kvix_service_limits l = {max, per_addr, timeout, 1000};
    kick[0] = eventfd(0, EFD_NONBLOCK);
    kick[1] = eventfd(0, EFD_NONBLOCK);
    kvix_conns *c = NULL;
    CHECK(kvix__conns_new(&c, &l, 2, kick, NULL) == KVIX_OK);
    return c;
}

static void free_conns(kvix_conns *c, int *kick)
{
    kvix__conns_free(c);
    close(kick[0]);
    close(kick[1]);
}

/* Random opens and closes over 200 addresses (the address table's entries
 * collide, move back on deletion): each open is admitted exactly when the
 * model says its address has room. No time passes, so nothing is evicted. */
TEST(admissions_follow_the_per_address_counts)
{
    int kick[2];
    kvix_conns *c = new_conns(100000, 3, 10, kick);
    enum { N = 4000, ADDRS = 200 };
    static kvix_conn *open_[N];
    static unsigned addr[N], admitted[N];
    unsigned count[ADDRS] = {0};
    size_t n = 0;
    uint64_t seed = th_seed(), refused = 0;
    for (int step = 0; step < 40000; step++) {
        if (n < N && (n == 0 || th_splitmix(&seed) % 3 != 0)) {
            unsigned a = (unsigned)(th_splitmix(&seed) % ADDRS);
            struct sockaddr_in s = addr_of(a);
            kvix_conn *r = kvix__conns_open(c, (unsigned)(step & 1), -1, (struct sockaddr *)&s, 0);
            CHECK(r != NULL);
            kvix_conns_stats st;
            kvix__conns_figures(c, &st);
            int in = count[a] < 3;
            refused += !in;
            if (!CHECK_U64(st.refused, refused))
                break;
            count[a] += in;
            open_[n] = r;
            addr[n] = a;
            admitted[n++] = (unsigned)in;
        } else {
            size_t i = th_splitmix(&seed) % n;
            kvix__conns_close(c, open_[i]);
            count[addr[i]] -= admitted[i];
            open_[i] = open_[--n];
            addr[i] = addr[n];
            admitted[i] = admitted[n];
        }
    }
    kvix_conns_stats st;
    kvix__conns_figures(c, &st);
    uint64_t in = 0;
    for (unsigned a = 0; a < ADDRS; a++)
        in += count[a];
    CHECK_U64(st.open, in);
    while (n)
        kvix__conns_close(c, open_[--n]);
    kvix__conns_figures(c, &st);
    CHECK_U64(st.open, 0);
    free_conns(c, kick);
}

/* Past a bound, the oldest waiting connection old enough gives its place;
 * one answering is never taken, nor one younger than half a second. */
TEST(the_oldest_waiting_connection_makes_room)
{
    int kick[2];
    kvix_conns *c = new_conns(3, 2, 10, kick);
    struct sockaddr_in a = addr_of(1), b = addr_of(2);
    kvix_conn *a1 = kvix__conns_open(c, 0, -1, (struct sockaddr *)&a, 0.0);
    kvix_conn *a2 = kvix__conns_open(c, 0, -1, (struct sockaddr *)&a, 0.1);
    kvix__conns_answering(c, a1);
    kvix_conns_stats st;
    /* a third of address a: a2 is too young, a1 answering: refused */
    kvix_conn *a3 = kvix__conns_open(c, 0, -1, (struct sockaddr *)&a, 0.3);
    kvix__conns_figures(c, &st);
    CHECK_U64(st.refused, 1);
    CHECK_U64(st.open, 2);
    kvix__conns_close(c, a3);
    /* later: a2 (waiting 0.9 s) makes room, queued for nobody else (thread 0) */
    kvix_conn *a4 = kvix__conns_open(c, 0, -1, (struct sockaddr *)&a, 1.0);
    kvix__conns_figures(c, &st);
    CHECK_U64(st.evicted, 1);
    CHECK_U64(st.open, 2);
    /* the total bound: the oldest waiting of any address makes room, through
     * its owner's queue when another thread owns it */
    kvix__conns_close(c, a2);
    kvix_conn *b1 = kvix__conns_open(c, 1, -1, (struct sockaddr *)&b, 1.1); /* a1 a4 b1 */
    kvix_conn *b2 = kvix__conns_open(c, 0, -1, (struct sockaddr *)&b, 2.0); /* a4 gives way */
    kvix__conns_figures(c, &st);
    CHECK_U64(st.evicted, 2);
    CHECK_U64(st.open, 3);
    kvix__conns_close(c, a4);
    uint64_t v = 0;
    CHECK(read(kick[1], &v, sizeof v) < 0); /* thread 1 has nothing to do yet */
    kvix_conn *a5 = kvix__conns_open(c, 0, -1, (struct sockaddr *)&a, 3.0); /* b1 gives way */
    kvix__conns_figures(c, &st);
    CHECK_U64(st.evicted, 3);
    CHECK_U64(st.open, 3);
    CHECK(read(kick[1], &v, sizeof v) == (ssize_t)sizeof v); /* thread 1 was woken */
    kvix__conns_sweep(c, 1, 3.0);
    kvix__conns_close(c, b1);
    /* deadlines: a request must arrive within 10 s of its phase's start */
    kvix__conns_waiting(c, a1, 4.0); /* answered: waiting again */
    CHECK(kvix__conns_sweep(c, 0, 12.5) > 0); /* b2 (2.0) late; a5 (3.0) not yet */
    kvix__conns_figures(c, &st);
    CHECK_U64(st.expired, 1);
    CHECK(kvix__conns_sweep(c, 0, 20.0) == -1);
    kvix__conns_figures(c, &st);
    CHECK_U64(st.expired, 3);
    CHECK_U64(st.open, 0);
    kvix__conns_close(c, a1);
    kvix__conns_close(c, b2);
    kvix__conns_close(c, a5);
    /* the memory budget: 1000 bytes here */
    CHECK(kvix__conns_mem_take(c, 600));
    CHECK(!kvix__conns_mem_take(c, 401));
    CHECK(kvix__conns_mem_take(c, 400));
    kvix__conns_mem_give(c, 1000);
    CHECK(kvix__conns_mem_take(c, 1000));
    kvix__conns_figures(c, &st);
    CHECK_U64(st.memory, 1000);
    CHECK_U64(st.memory_refused, 1);
    free_conns(c, kick);
}
