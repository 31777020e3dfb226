/* wait_common.c - time and busy-polling for the readiness waits. */
#include "readiness/wait_common.h"

#include "transport/shm/shm.h"

long vs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

struct timespec *vs_timespec(long ns, struct timespec *ts)
{
    if (ns < 0)
        return NULL;
    ts->tv_sec = ns / 1000000000L;
    ts->tv_nsec = ns % 1000000000L;
    return ts;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

bool vs_spin_until(bool (*ready)(void *, const void *), void *arg, const void *arg2)
{
    long budget = vs_shm_spin_ns();
    if (budget <= 0)
        return false;
    long end = vs_now_ns() + budget;
    for (unsigned i = 1;; i++) {
        if (ready(arg, arg2))
            return true;
        if (i % 16 == 0 && vs_now_ns() >= end)
            return false;
        cpu_relax();
    }
}
