/* signal_api.c - sigaction and signal, watched for SA_RESTART. */
#include <signal.h>
#include <stdatomic.h>

#include "base/real.h"
#include "interpose/signals.h"

/* Bit N: signal N has a handler installed without SA_RESTART. */
static _Atomic unsigned long long no_restart;

static void note(int sig, bool catches, bool restarts)
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

VS_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.sigaction(sig, act, old));
    int r = vs_real.sigaction(sig, act, old);
    if (r == 0 && act) {
        bool catches = (act->sa_flags & SA_SIGINFO) ||
                       (act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN);
        note(sig, catches, (act->sa_flags & SA_RESTART) != 0);
    }
    return r;
}

/* glibc's signal() installs BSD semantics: SA_RESTART. */
VS_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.signal(sig, handler));
    sighandler_t r = vs_real.signal(sig, handler);
    if (r != SIG_ERR)
        note(sig, handler != SIG_DFL && handler != SIG_IGN, true);
    return r;
}
