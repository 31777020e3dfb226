/* test_signals.c - a handler without SA_RESTART ends a call's sleep even
 * when it ran before the sleep began (base/signals.h): the mark a call
 * takes moves, a sleep about to start gets a zero timeout, and what the
 * program asked for is what sigaction and signal report back. Signals
 * here are raised by the thread itself, so each lands at a known point. */
#define _GNU_SOURCE 1 /* pthread_sigqueue */
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/real.h"
#include "base/signals.h"
#include "check.h"

static volatile sig_atomic_t plain_runs, info_runs, info_value;

static void on_plain(int sig)
{
    (void)sig;
    plain_runs++;
}

static void on_info(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    info_runs++;
    info_value = si->si_value.sival_int;
}

static void install(int sig, void (*fn)(int), int flags)
{
    struct sigaction sa = {.sa_handler = fn, .sa_flags = flags};
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(sig, &sa, NULL), 0);
}

/* The program sees its own handler and flags, whatever the kernel holds. */
static void test_reports_the_programs_action(void)
{
    install(SIGUSR1, on_plain, 0);
    struct sigaction old;
    CHECK_EQ(sigaction(SIGUSR1, NULL, &old), 0);
    CHECK(old.sa_handler == on_plain);
    CHECK(!(old.sa_flags & SA_SIGINFO));
    struct sigaction kernel;
    CHECK_EQ(vs_real.sigaction(SIGUSR1, NULL, &kernel), 0);
    CHECK(kernel.sa_handler != on_plain); /* ours stands in front */
    /* signal() replaces it and returns the program's, not ours. */
    CHECK(signal(SIGUSR1, SIG_DFL) == on_plain);
    CHECK(signal(SIGUSR1, SIG_DFL) == SIG_DFL);
}

/* SA_RESTART handlers and fault handlers are the kernel's alone. */
static void test_leaves_restarting_handlers_alone(void)
{
    install(SIGUSR2, on_plain, SA_RESTART);
    install(SIGSEGV, on_plain, 0);
    struct sigaction kernel;
    CHECK_EQ(vs_real.sigaction(SIGUSR2, NULL, &kernel), 0);
    CHECK(kernel.sa_handler == on_plain);
    CHECK_EQ(vs_real.sigaction(SIGSEGV, NULL, &kernel), 0);
    CHECK(kernel.sa_handler == on_plain);
    unsigned mark = vs_signals_mark();
    int before = plain_runs;
    raise(SIGUSR2);
    CHECK_EQ(plain_runs, before + 1);
    CHECK(!vs_signals_ran(mark)); /* the kernel restarts such calls */
    signal(SIGUSR2, SIG_DFL);
    signal(SIGSEGV, SIG_DFL);
}

/* The handler ran during the call, before its sleep: no sleep. */
static void test_handler_before_the_sleep(void)
{
    install(SIGUSR1, on_plain, 0);
    unsigned mark = vs_signals_mark();
    int before = plain_runs;
    raise(SIGUSR1);
    CHECK_EQ(plain_runs, before + 1);
    CHECK(vs_signals_ran(mark));
    struct timespec ts = {5, 0};
    CHECK(!vs_signals_sleep_begin(mark, &ts));
    CHECK(!vs_signals_ran(vs_signals_mark()));
    signal(SIGUSR1, SIG_DFL);
}

/* The handler ran between the last look and the sleep's system call: the
 * sleep's timeout is zero, so it ends at once. */
static void test_handler_as_the_sleep_starts(void)
{
    install(SIGUSR1, on_plain, 0);
    unsigned mark = vs_signals_mark();
    struct timespec ts = {5, 0};
    CHECK(vs_signals_sleep_begin(mark, &ts));
    raise(SIGUSR1);
    CHECK_EQ(ts.tv_sec, 0);
    CHECK_EQ(ts.tv_nsec, 0);
    struct pollfd none = {.fd = -1};
    CHECK_EQ(syscall(SYS_ppoll, &none, 1, &ts, NULL, _NSIG / 8), 0); /* at once */
    CHECK(vs_signals_sleep_end(mark));
    /* After the sleep, a handler leaves the next sleep's time alone. */
    struct timespec later = {5, 0};
    raise(SIGUSR1);
    CHECK_EQ(later.tv_sec, 5);
    signal(SIGUSR1, SIG_DFL);
}

/* SA_SIGINFO handlers get the kernel's siginfo. */
static void test_siginfo_passes(void)
{
    struct sigaction sa = {.sa_sigaction = on_info, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGUSR2, &sa, NULL), 0);
    unsigned mark = vs_signals_mark();
    CHECK_EQ(pthread_sigqueue(pthread_self(), SIGUSR2, (union sigval){.sival_int = 4242}), 0);
    sched_yield(); /* valgrind delivers it at the next system call */
    CHECK_EQ(info_runs, 1);
    CHECK_EQ(info_value, 4242);
    CHECK(vs_signals_ran(mark));
    struct sigaction old;
    CHECK_EQ(sigaction(SIGUSR2, NULL, &old), 0);
    CHECK(old.sa_sigaction == on_info);
    CHECK(old.sa_flags & SA_SIGINFO);
    signal(SIGUSR2, SIG_DFL);
}

/* Deprecated, and still what older programs call. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* siginterrupt changes the restart flag through us, and signal() after it
 * keeps what it said (glibc's rule), so the count follows the kernel's. */
static void test_siginterrupt(void)
{
    struct sigaction kernel;
    install(SIGUSR1, on_plain, 0);
    CHECK_EQ(siginterrupt(SIGUSR1, 0), 0); /* restart: the kernel's alone */
    CHECK_EQ(vs_real.sigaction(SIGUSR1, NULL, &kernel), 0);
    CHECK(kernel.sa_handler == on_plain && (kernel.sa_flags & SA_RESTART));
    unsigned mark = vs_signals_mark();
    raise(SIGUSR1);
    CHECK(!vs_signals_ran(mark));
    CHECK_EQ(siginterrupt(SIGUSR1, 1), 0); /* interrupt: ours in front */
    struct sigaction old;
    CHECK_EQ(sigaction(SIGUSR1, NULL, &old), 0);
    CHECK(old.sa_handler == on_plain && !(old.sa_flags & SA_RESTART));
    raise(SIGUSR1);
    CHECK(vs_signals_ran(mark));
    signal(SIGUSR1, SIG_DFL);
    CHECK(signal(SIGUSR1, on_plain) == SIG_DFL); /* still "interrupt" */
    mark = vs_signals_mark();
    raise(SIGUSR1);
    CHECK(vs_signals_ran(mark));
    CHECK_EQ(siginterrupt(SIGUSR1, 0), 0);
    signal(SIGUSR1, SIG_DFL);
}

static void *raise_here(void *arg)
{
    (void)arg;
    raise(SIGUSR1);
    return NULL;
}

/* A handler on another thread interrupts that thread's calls only. */
static void test_per_thread(void)
{
    install(SIGUSR1, on_plain, 0);
    unsigned mark = vs_signals_mark();
    int before = plain_runs;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, raise_here, NULL), 0);
    pthread_join(t, NULL);
    CHECK_EQ(plain_runs, before + 1);
    CHECK(!vs_signals_ran(mark));
    signal(SIGUSR1, SIG_DFL);
}

int main(void)
{
    test_reports_the_programs_action();
    test_leaves_restarting_handlers_alone();
    test_handler_before_the_sleep();
    test_handler_as_the_sleep_starts();
    test_siginfo_passes();
    test_per_thread();
    test_siginterrupt();
    return check_finish("test_signals");
}
