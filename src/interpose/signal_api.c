/* signal_api.c - sigaction and signal, watched for SA_RESTART (base/signals.h). */
#include <signal.h>

#include "base/real.h"
#include "base/sandbox.h"
#include "base/signals.h"

VS_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.sigaction(sig, act, old));
    int r = vs_real.sigaction(sig, act, old);
    if (r == 0 && act) {
        bool catches = (act->sa_flags & SA_SIGINFO) ||
                       (act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN);
        vs_signals_note(sig, catches, (act->sa_flags & SA_RESTART) != 0);
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
        vs_signals_note(sig, handler != SIG_DFL && handler != SIG_IGN, true);
    return r;
}
