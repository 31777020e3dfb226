/* signals.c - which installed signal handlers lack SA_RESTART. */
#include "base/signals.h"

#include <stdatomic.h>

/* Bit N: signal N has a handler installed without SA_RESTART. */
static _Atomic unsigned long long no_restart;

void vs_signals_note(int sig, bool catches, bool restarts)
{
    if (sig <= 0 || sig >= 64)
        return;
    unsigned long long bit = 1ull << sig;
    if (catches && !restarts)
        atomic_fetch_or(&no_restart, bit);
    else
        atomic_fetch_and(&no_restart, ~bit);
}

bool vs_signals_restart(void)
{
    return atomic_load_explicit(&no_restart, memory_order_relaxed) == 0;
}
