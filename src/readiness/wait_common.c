/* wait_common.c - time and busy-polling for the readiness waits. */
#include "core/clock.h"
#include "readiness/wait_common.h"

#include <sched.h>

#include "memory/cpu.h"

struct timespec *vs_timespec(long ns, struct timespec *ts)
{
    if (ns < 0)
        return NULL;
    ts->tv_sec = ns / 1000000000L;
    ts->tv_nsec = ns % 1000000000L;
    return ts;
}

bool vs_spin_until(bool (*ready)(void *, const void *), void *arg, const void *arg2)
{
    long budget = vs_spin_ns();
    if (budget <= 0)
        return false;
    long end = vs_now_ns() + budget;
    for (unsigned i = 1;; i++) {
        if (ready(arg, arg2))
            return true;
        if (i % 16 == 0) {
            if (vs_now_ns() >= end)
                return false;
            /* The peer may be waiting for this very CPU. */
            sched_yield();
        }
        vs_cpu_relax();
    }
}
