/* clock.h - the time base of waits and deadlines, and the busy-poll budget. */
#ifndef VSOCKET_CLOCK_H
#define VSOCKET_CLOCK_H

#include <time.h>

#include "config/config.h"

/* CLOCK_MONOTONIC in ns (the vDSO: no system call). */
static inline long vs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* The busy-poll budget of blocking calls and readiness waits (VSOCKET_POLL_US). */
static inline long vs_spin_ns(void)
{
    return (long)vs_config.poll_us * 1000L;
}

#endif
