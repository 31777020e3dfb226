/* signal_api.c - sigaction and signal: watched for SA_RESTART, and a
 * handler without it gets ours in front (base/signals.h). */
#include <errno.h>
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
        bool catches = act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN;
        vs_signals_note(sig, catches, (act->sa_flags & SA_RESTART) != 0);
    }
    return r;
}

/* glibc's signal() installs BSD semantics: SA_RESTART, unless siginterrupt
 * said otherwise for that signal. Its choice read back, ours goes in front
 * of a handler without it; what it replaced may have been ours too. */
VS_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.signal(sig, handler));
    struct sigaction prev = {0}, now, old = {0};
    vs_signals_install(sig, NULL, NULL, &prev);
    sighandler_t r = vs_real.signal(sig, handler);
    if (r == SIG_ERR)
        return r;
    if (vs_real.sigaction(sig, NULL, &now) == 0)
        sigaction(sig, &now, NULL);
    old.sa_flags = SA_SIGINFO;
    old.sa_handler = r;
    vs_signals_program(&old, &prev);
    return old.sa_handler;
}

/* glibc's own changes the kernel's flags behind our back (and notes the
 * signal for signal() above): then the program's action, changed alike,
 * goes in through sigaction. */
VS_EXPORT int siginterrupt(int sig, int interrupt)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.siginterrupt(sig, interrupt));
    struct sigaction act;
    if (sigaction(sig, NULL, &act) != 0 || vs_real.siginterrupt(sig, interrupt) != 0)
        return -1;
    if (interrupt)
        act.sa_flags &= ~SA_RESTART;
    else
        act.sa_flags |= SA_RESTART;
    return sigaction(sig, &act, NULL);
}

/* What glibc's signal() becomes for a program built for strict POSIX or
 * System V (-std=c99 -D_POSIX_C_SOURCE, or called by name): one-shot, not
 * restarting. glibc installs it with its internal sigaction, behind our
 * back; so it is made here through ours, with glibc's flags. */
static sighandler_t sysv_signal_ours(int sig, sighandler_t handler)
{
    if (sig <= 0 || sig >= NSIG || handler == SIG_ERR) {
        errno = EINVAL;
        return SIG_ERR;
    }
    struct sigaction act = {.sa_handler = handler, .sa_flags = SA_RESETHAND | SA_NODEFER}, old;
    sigemptyset(&act.sa_mask);
    return sigaction(sig, &act, &old) == 0 ? old.sa_handler : SIG_ERR;
}

VS_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler)
{
    return sysv_signal_ours(sig, handler);
}

VS_EXPORT sighandler_t __sysv_signal(int sig, sighandler_t handler)
{
    return sysv_signal_ours(sig, handler);
}

/* BSD's name for signal(): the same, through ours. */
VS_EXPORT sighandler_t bsd_signal(int sig, sighandler_t handler)
{
    return signal(sig, handler);
}

/* System V's sigset: a lasting handler, not restarting (glibc: flags 0),
 * and the signal unblocked; SIG_HOLD blocks it instead. Either returns
 * SIG_HOLD if the signal was blocked, else the handler it had. glibc makes
 * it with its internal sigaction, so it is made here through ours. */
VS_EXPORT sighandler_t sigset(int sig, sighandler_t disp)
{
    if (sig <= 0 || sig >= NSIG || disp == SIG_ERR) {
        errno = EINVAL;
        return SIG_ERR;
    }
    sigset_t one, was;
    sigemptyset(&one);
    sigaddset(&one, sig);
    struct sigaction old;
    if (disp == SIG_HOLD) {
        if (sigaction(sig, NULL, &old) != 0 || sigprocmask(SIG_BLOCK, &one, &was) != 0)
            return SIG_ERR;
    } else {
        struct sigaction act = {.sa_handler = disp, .sa_flags = 0};
        sigemptyset(&act.sa_mask);
        if (sigaction(sig, &act, &old) != 0 || sigprocmask(SIG_UNBLOCK, &one, &was) != 0)
            return SIG_ERR;
    }
    return sigismember(&was, sig) ? SIG_HOLD : old.sa_handler;
}
