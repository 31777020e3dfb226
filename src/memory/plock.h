/* plock.h - a lock shared by the processes that hold one connection.
 *
 * A connection's local state lives in a MAP_SHARED mapping, so a parent and
 * the child it forked use the same state, exactly as they use the same
 * kernel socket; this lock serialises their threads. It is a plain futex
 * mutex (0 free, 1 locked, 2 locked with waiters), not FUTEX_PRIVATE. */
#ifndef VSOCKET_PLOCK_H
#define VSOCKET_PLOCK_H

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "base/syscall.h"

typedef struct {
    _Atomic uint32_t word;
} vs_plock;

static inline bool vs_plock_trylock(vs_plock *l)
{
    uint32_t free_ = 0;
    return atomic_compare_exchange_strong_explicit(&l->word, &free_, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}

static inline void vs_plock_lock(vs_plock *l)
{
    if (vs_plock_trylock(l))
        return;
    while (atomic_exchange_explicit(&l->word, 2, memory_order_acquire) != 0)
        vs_syscall(SYS_futex, (uint32_t *)&l->word, FUTEX_WAIT, 2, NULL, NULL, 0);
}

static inline void vs_plock_unlock(vs_plock *l)
{
    if (atomic_exchange_explicit(&l->word, 0, memory_order_release) == 2)
        vs_syscall(SYS_futex, (uint32_t *)&l->word, FUTEX_WAKE, 1, NULL, NULL, 0);
}

#endif
