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

/* Latency must not wait for Nagle; TCP_NODELAY is one of the few options rsocket
 * also understands. A failure is harmless, so it is ignored. */
void set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}
