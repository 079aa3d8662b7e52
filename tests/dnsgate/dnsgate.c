/* A getaddrinfo that waits at a gate (tests only, LD_PRELOAD): names ending
 * in ".kvix-gate" block while the file $KVIX_DNS_GATE exists, then do not
 * resolve; every other name goes to the system's getaddrinfo. A DNS server
 * that answers slowly, under the test's control: whoever calls getaddrinfo
 * for such a name (libzmq's I/O thread, or kvix's resolver) is held until
 * the test removes the file. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
    static const char tail[] = ".kvix-gate";
    size_t n = node ? strlen(node) : 0;
    if (n >= sizeof tail && strcmp(node + n - (sizeof tail - 1), tail) == 0) {
        const char *gate = getenv("KVIX_DNS_GATE");
        struct timespec ts = {0, 10000000L};
        while (gate && access(gate, F_OK) == 0)
            nanosleep(&ts, NULL);
        return EAI_NONAME;
    }
    gai_fn real = (gai_fn)dlsym(RTLD_NEXT, "getaddrinfo");
    return real ? real(node, service, hints, res) : EAI_SYSTEM;
}
