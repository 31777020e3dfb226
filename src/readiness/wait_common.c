/* wait_common.c - time for the readiness waits. */
#include "readiness/wait_common.h"

struct timespec *vs_timespec(long ns, struct timespec *ts)
{
    if (ns < 0)
        return NULL;
    ts->tv_sec = ns / 1000000000L;
    ts->tv_nsec = ns % 1000000000L;
    return ts;
}
