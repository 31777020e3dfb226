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

/* The handler ran during the call, before its sleep: the sleep's timeout
 * is zero (it only looks at what is ready). */
static void test_handler_before_the_sleep(void)
{
    install(SIGUSR1, on_plain, 0);
    unsigned mark = vs_signals_mark();
    int before = plain_runs;
    raise(SIGUSR1);
    CHECK_EQ(plain_runs, before + 1);
    CHECK(vs_signals_ran(mark));
    struct timespec ts = {5, 0}, *tsp = &ts;
    struct vs_sleep_guard g;
    vs_signals_sleep_begin(mark, &tsp, &g);
    CHECK_EQ(tsp->tv_sec, 0);
    CHECK_EQ(tsp->tv_nsec, 0);
    CHECK(vs_signals_sleep_end(mark, &g));
    /* A sleep without a timeout gets one a handler can zero. */
    mark = vs_signals_mark();
    tsp = NULL;
    vs_signals_sleep_begin(mark, &tsp, &g);
    CHECK(tsp != NULL && tsp->tv_sec > 0);
    CHECK(!vs_signals_sleep_end(mark, &g));
    signal(SIGUSR1, SIG_DFL);
}

/* The handler ran between the last look and the sleep's system call: the
 * sleep's timeout is zero, so it ends at once. */
static void test_handler_as_the_sleep_starts(void)
{
    install(SIGUSR1, on_plain, 0);
    unsigned mark = vs_signals_mark();
    struct timespec ts = {5, 0}, *tsp = &ts;
    struct vs_sleep_guard g;
    vs_signals_sleep_begin(mark, &tsp, &g);
    CHECK_EQ(tsp->tv_sec, 5);
    raise(SIGUSR1);
    CHECK_EQ(tsp->tv_sec, 0);
    CHECK_EQ(tsp->tv_nsec, 0);
    struct pollfd none = {.fd = -1};
    CHECK_EQ(syscall(SYS_ppoll, &none, 1, tsp, NULL, _NSIG / 8), 0); /* at once */
    CHECK(vs_signals_sleep_end(mark, &g));
    CHECK_EQ(ts.tv_sec, 5); /* the caller's own is never written */
    signal(SIGUSR1, SIG_DFL);
}

/* A handler's own call sleeps while an outer sleep was about to start: the
 * outer one gets its timeout back, zeroed only by a handler of ours. */
static void test_nested_sleep(void)
{
    install(SIGUSR1, on_plain, 0);
    unsigned outer_mark = vs_signals_mark();
    struct timespec outer = {7, 0}, *otsp = &outer;
    struct vs_sleep_guard og, ig;
    vs_signals_sleep_begin(outer_mark, &otsp, &og);
    unsigned inner_mark = vs_signals_mark(); /* as if a restarting handler called */
    struct timespec inner = {3, 0}, *itsp = &inner;
    vs_signals_sleep_begin(inner_mark, &itsp, &ig);
    CHECK_EQ(itsp->tv_sec, 3);
    CHECK(!vs_signals_sleep_end(inner_mark, &ig));
    CHECK_EQ(otsp->tv_sec, 7); /* back */
    raise(SIGUSR1);            /* and still ours to zero */
    CHECK_EQ(otsp->tv_sec, 0);
    CHECK(vs_signals_sleep_end(outer_mark, &og));
    signal(SIGUSR1, SIG_DFL);
}

/* SIG_IGN and SIG_DFL are themselves whatever the flags: nothing of ours
 * in front (a handler at address 1 would be called). */
static void test_ignore_with_siginfo(void)
{
    struct sigaction sa = {.sa_handler = SIG_IGN, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
    struct sigaction kernel;
    CHECK_EQ(vs_real.sigaction(SIGUSR1, NULL, &kernel), 0);
    CHECK(kernel.sa_handler == SIG_IGN);
    raise(SIGUSR1); /* ignored: the test goes on */
    signal(SIGUSR1, SIG_DFL);
}

/* A one-shot handler: after it ran, the program reads back SIG_DFL with
 * its own flags (not our SA_SIGINFO). */
static void test_oneshot_reads_back(void)
{
    install(SIGUSR2, on_plain, SA_RESETHAND);
    int before = plain_runs;
    raise(SIGUSR2);
    CHECK_EQ(plain_runs, before + 1);
    struct sigaction old;
    CHECK_EQ(sigaction(SIGUSR2, NULL, &old), 0);
    CHECK(old.sa_handler == SIG_DFL);
    CHECK(!(old.sa_flags & SA_SIGINFO));
}

/* sysv_signal: one-shot and interrupting, through ours. */
static void test_sysv_signal(void)
{
    CHECK(sysv_signal(SIGUSR1, on_plain) == SIG_DFL);
    unsigned mark = vs_signals_mark();
    raise(SIGUSR1);
    CHECK(vs_signals_ran(mark));
    struct sigaction old;
    CHECK_EQ(sigaction(SIGUSR1, NULL, &old), 0);
    CHECK(old.sa_handler == SIG_DFL); /* one-shot */
}

/* sigset: lasting and interrupting, through ours; SIG_HOLD blocks, and
 * the next handler unblocks (the held signal then runs it). Deprecated,
 * and still called by old programs. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void test_sigset(void)
{
    CHECK(sigset(SIGUSR1, on_plain) == SIG_DFL);
    unsigned mark = vs_signals_mark();
    raise(SIGUSR1);
    CHECK(vs_signals_ran(mark));
    struct sigaction old;
    CHECK_EQ(sigaction(SIGUSR1, NULL, &old), 0);
    CHECK(old.sa_handler == on_plain); /* not one-shot */
    CHECK(!(old.sa_flags & SA_RESTART));
    CHECK(sigset(SIGUSR1, SIG_HOLD) == on_plain);
    mark = vs_signals_mark();
    raise(SIGUSR1);
    CHECK(!vs_signals_ran(mark)); /* held */
    CHECK(sigset(SIGUSR1, on_plain) == SIG_HOLD);
    CHECK(vs_signals_ran(mark)); /* delivered once unblocked */
    CHECK(signal(SIGUSR1, SIG_DFL) == on_plain);
}
#pragma GCC diagnostic pop

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
    test_nested_sleep();
    test_ignore_with_siginfo();
    test_oneshot_reads_back();
    test_sysv_signal();
    test_sigset();
    return check_finish("test_signals");
}
