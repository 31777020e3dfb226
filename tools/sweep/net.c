/* Socket helpers: plain blocking I/O only (see sweep.h for why). */
#include "sweep.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int write_full(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

int read_full(int fd, void *p, size_t n)
{
    char *b = p;
    while (n > 0) {
        ssize_t k = read(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            return 0;
        b += k;
        n -= (size_t)k;
    }
    return 1;
}

/* Latency must not wait for Nagle; TCP_NODELAY is one of the few options rsocket
 * also understands. A failure is harmless, so it is ignored. */
void set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}
