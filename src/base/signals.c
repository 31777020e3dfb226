/* signals.c - which installed signal handlers lack SA_RESTART, and ours in
 * front of them: it counts their runs per thread, so that a call whose
 * copy a handler interrupted does not then sleep (signals.h). */
#include "base/signals.h"

#include <stdatomic.h>
#include <stddef.h>

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

/* ------------------------------------------------- the program's handlers */

typedef void (*info_fn)(int, siginfo_t *, void *);

/* What the program installed where ours stands in front. The functions
 * are what our handler calls (read in a handler: atomics); ACT is what
 * sigaction reports to the program. Never cleared: a signal on its way to
 * ours while the program installs another action still finds a handler. */
static struct program_handler {
    _Atomic(info_fn) info;       /* SA_SIGINFO's */
    _Atomic(sighandler_t) plain; /* otherwise */
    struct sigaction act;
} program[NSIG];

/* Runs of the handlers behind ours on this thread. Initial-exec: read in a
 * signal handler, where a lazy TLS allocation must not happen. */
static __thread _Atomic unsigned ran __attribute__((tls_model("initial-exec")));

/* The mark of the socket call this thread is in (vs_signals_call_begin). */
static __thread unsigned call_mark __attribute__((tls_model("initial-exec")));

/* The timeout of the sleep this thread is about to start, kept here and not
 * in the caller's frame: a handler that longjmps out of the sleep leaves it
 * published, and a later handler must then write into live memory. */
static __thread struct timespec sleep_slot __attribute__((tls_model("initial-exec")));
static __thread _Atomic(struct timespec *) sleep_ts __attribute__((tls_model("initial-exec")));

static void in_front(int sig, siginfo_t *si, void *uc)
{
    atomic_fetch_add_explicit(&ran, 1, memory_order_relaxed);
    /* Taken, not only read: a handler that longjmps out of the sleep's
     * call must not leave us a pointer into a dead stack frame. */
    struct timespec *ts = atomic_exchange_explicit(&sleep_ts, NULL, memory_order_relaxed);
    if (ts)
        *ts = (struct timespec){0, 0};
    struct program_handler *p = &program[sig];
    info_fn info = atomic_load_explicit(&p->info, memory_order_acquire);
    if (info) {
        info(sig, si, uc);
        return;
    }
    sighandler_t plain = atomic_load_explicit(&p->plain, memory_order_acquire);
    /* With all three arguments, as the kernel calls any handler (some
     * read them without SA_SIGINFO). */
    if (plain && plain != SIG_DFL && plain != SIG_IGN)
        ((info_fn)(void (*)(void))plain)(sig, si, uc);
}

/* Whether ACT on SIG is a handler a sleeping call must end for. Faults
 * (the program's own crash handlers, a JVM's) never interrupt a sleep:
 * those stay as they are. */
static bool stands_in_front(int sig, const struct sigaction *act)
{
    if (sig <= 0 || sig >= NSIG || (act->sa_flags & SA_RESTART))
        return false;
    /* The kernel reads SIG_DFL and SIG_IGN as such whatever the flags. */
    if (act->sa_handler == SIG_DFL || act->sa_handler == SIG_IGN)
        return false;
    switch (sig) {
    case SIGSEGV:
    case SIGBUS:
    case SIGILL:
    case SIGFPE:
    case SIGTRAP:
    case SIGSYS:
        return false;
    default:
        return true;
    }
}

static void record(int sig, const struct sigaction *act)
{
    struct program_handler *p = &program[sig];
    p->act = *act;
    /* The new function first: a signal in between runs one of the two. */
    if (act->sa_flags & SA_SIGINFO) {
        atomic_store_explicit(&p->info, act->sa_sigaction, memory_order_release);
    } else {
        atomic_store_explicit(&p->plain, act->sa_handler, memory_order_release);
        atomic_store_explicit(&p->info, NULL, memory_order_release);
    }
}

const struct sigaction *vs_signals_install(int sig, const struct sigaction *act,
                                           struct sigaction *mine, struct sigaction *prev)
{
    if (sig > 0 && sig < NSIG)
        *prev = program[sig].act;
    if (!act || !stands_in_front(sig, act))
        return act;
    record(sig, act);
    *mine = *act;
    mine->sa_flags |= SA_SIGINFO;
    mine->sa_sigaction = in_front;
    return mine;
}

void vs_signals_installed(int sig, const struct sigaction *act, bool ok,
                          const struct sigaction *prev)
{
    if (!ok && act && stands_in_front(sig, act))
        record(sig, prev);
}

void vs_signals_program(struct sigaction *old, const struct sigaction *prev)
{
    if (!old)
        return;
    if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction == in_front) {
        *old = *prev;
        return;
    }
    /* SA_RESETHAND put SIG_DFL in place of ours, with our SA_SIGINFO. */
    if (old->sa_handler == SIG_DFL && (prev->sa_flags & SA_RESETHAND) &&
        !(prev->sa_flags & SA_SIGINFO))
        old->sa_flags &= ~SA_SIGINFO;
}

/* ---------------------------------------------------------- the calls' side */

unsigned vs_signals_mark(void)
{
    return atomic_load_explicit(&ran, memory_order_relaxed);
}

bool vs_signals_ran(unsigned mark)
{
    atomic_signal_fence(memory_order_seq_cst);
    return atomic_load_explicit(&ran, memory_order_relaxed) != mark;
}

unsigned vs_signals_call_begin(void)
{
    unsigned outer = call_mark;
    call_mark = vs_signals_mark();
    return outer;
}

void vs_signals_call_end(unsigned outer)
{
    call_mark = outer;
}

unsigned vs_signals_call_mark(void)
{
    return call_mark;
}

/* A sleep without a timeout sleeps this long, then its caller's loop looks
 * again: a handler must have a timeout to zero. */
#define UNBOUNDED_S 3600

void vs_signals_sleep_begin(unsigned mark, struct timespec **ts, struct vs_sleep_guard *g)
{
    /* A sleep this one interrupted (we run in a handler) gets its timeout
     * back at the end: taken first, so no handler writes it meanwhile. */
    g->outer = atomic_exchange_explicit(&sleep_ts, NULL, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    g->outer_ts = sleep_slot;
    sleep_slot = *ts ? **ts : (struct timespec){UNBOUNDED_S, 0};
    *ts = &sleep_slot;
    atomic_store_explicit(&sleep_ts, &sleep_slot, memory_order_relaxed);
    /* A handler after this store zeroes the slot; one before it moved RAN. */
    if (vs_signals_ran(mark))
        sleep_slot = (struct timespec){0, 0};
}

bool vs_signals_sleep_end(unsigned mark, const struct vs_sleep_guard *g)
{
    atomic_store_explicit(&sleep_ts, NULL, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    sleep_slot = g->outer_ts;
    atomic_store_explicit(&sleep_ts, g->outer, memory_order_relaxed);
    return vs_signals_ran(mark);
}
