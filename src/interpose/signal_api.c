/* signal_api.c - sigaction and signal: watched for SA_RESTART, and a
 * handler without it gets ours in front (base/signals.h). */
#include <signal.h>

#include "base/real.h"
#include "base/sandbox.h"
#include "base/signals.h"

VS_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.sigaction(sig, act, old));
    struct sigaction mine, prev = {0};
    const struct sigaction *give = vs_signals_install(sig, act, &mine, &prev);
    int r = vs_real.sigaction(sig, give, old);
    vs_signals_installed(sig, act, r == 0, &prev);
    if (r != 0)
        return r;
    vs_signals_program(old, &prev);
    if (act) {
        bool catches = (act->sa_flags & SA_SIGINFO) ||
                       (act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN);
        vs_signals_note(sig, catches, (act->sa_flags & SA_RESTART) != 0);
    }
    return r;
}

/* glibc's signal() installs BSD semantics: SA_RESTART, so never ours in
 * front; what it replaced may have been. */
VS_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.signal(sig, handler));
    struct sigaction prev = {0}, old = {0};
    vs_signals_install(sig, NULL, NULL, &prev);
    sighandler_t r = vs_real.signal(sig, handler);
    if (r == SIG_ERR)
        return r;
    vs_signals_note(sig, handler != SIG_DFL && handler != SIG_IGN, true);
    old.sa_flags = SA_SIGINFO;
    old.sa_handler = r;
    vs_signals_program(&old, &prev);
    return old.sa_handler;
}
