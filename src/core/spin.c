/* spin.c - busy-polling before a wait sleeps: readiness's waits and the
 * transports' blocking calls alike. */
#include "core/spin.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/log.h"
#include "core/clock.h"
#include "core/procfile.h"
#include "memory/cpu.h"

/* What the spins of this process came to, logged at exit
 * (VSOCKET_LOG_LEVEL=info): whether spinning pays is a question of
 * measurement. Relaxed counters, one add per wait. */
enum { VS_SPIN_TRIED, VS_SPIN_PAID, VS_SPIN_SKIPPED, VS_SPIN_CROWDED, VS_SPIN_KINDS };
static _Atomic unsigned long spin_counts[VS_SPIN_KINDS];

static void vs_spin_count(int kind)
{
    atomic_fetch_add_explicit(&spin_counts[kind], 1, memory_order_relaxed);
}

void vs_spin_report(void)
{
    unsigned long tried = atomic_load(&spin_counts[VS_SPIN_TRIED]);
    unsigned long skipped = atomic_load(&spin_counts[VS_SPIN_SKIPPED]);
    unsigned long crowded = atomic_load(&spin_counts[VS_SPIN_CROWDED]);
    if (tried + skipped + crowded > 0)
        vs_info("busy-poll: %lu spins, %lu paid, %lu waits slept at once, %lu with the CPUs "
                "crowded",
                tried, atomic_load(&spin_counts[VS_SPIN_PAID]), skipped, crowded);
}

/* The busy-poll budget adapts, per thread, to whether spinning pays.
 *
 * A spin pays when the news comes within it: a peer on this host, or on a
 * fast link, answering at once. It does not when the answer takes longer
 * than the spin (a peer across a slow link, a busy peer): then it is CPU
 * burnt for nothing, and where vCPUs are oversubscribed CPU taken from the
 * peer (issue 21: across two guests 11 spins, 0 paid). So: a spin that
 * gives up halves the budget, and below a quarter of the ceiling
 * (VSOCKET_POLL_US) it drops to 0, sleeping at once: two spins in a row
 * that bring nothing. A spin that pays, or a sleep that ends sooner than
 * the ceiling (a spin would have paid), gives the whole ceiling back: where
 * half the spins pay (one host: the peer's answer near the ceiling) the
 * thread keeps spinning almost as if the budget were fixed. Per thread: a thread's waits
 * are mostly for the same peers, and the budget needs no lock. */
static __thread long spin_budget = -1; /* ns; < 0: not set yet (the ceiling) */
static __thread long gave_up_at;       /* when the last spin gave up; 0: none */

static long budget_now(long ceiling)
{
    if (spin_budget < 0 || spin_budget > ceiling)
        spin_budget = ceiling;
    return spin_budget;
}

static void gave_up(long ceiling, long now)
{
    spin_budget /= 2;
    if (spin_budget <= ceiling / 4)
        spin_budget = 0;
    gave_up_at = now;
}

void vs_spin_woke(void)
{
    if (gave_up_at == 0)
        return;
    long ceiling = vs_spin_ns(), slept = vs_now_ns() - gave_up_at;
    gave_up_at = 0;
    if (ceiling > 0 && slept < ceiling)
        spin_budget = ceiling;
}

/* Spinning takes a CPU. With more runnable threads than CPUs (a bulk flow
 * beside a latency-bound connection on a host running other work), a
 * spinner delays the threads it waits for and everybody's wake-ups, even
 * when its own spins pay: bench/isolation on shm, 2 CPUs shared with two
 * emulated guests, a 64 B ping-pong's p99 beside a 4 MiB stream of the same
 * processes was 200-4,700 us with spins and 37-66 us without (kernel TCP
 * 49-65 us). The kernel's busy-poll stops when another task wants the CPU
 * (need_resched); a process cannot see that, so with
 * VSOCKET_POLL_CROWDED=off it looks at the machine's count of running
 * threads (/proc/loadavg), at most once per CROWD_NS per process, and does
 * not spin while it exceeds the CPUs. Not the default: on a quiet host the
 * same pair of flows did better spinning (p99 17-27 us against ~50, the
 * stream 55-69 Gb/s against 35), and in a Soft-RoCE guest the RDMA
 * completion threads count as running, so the 64 B round trip lost its
 * spins (sockperf 193-209 us against 130-181). */
#define CROWD_NS 5000000L
static _Atomic long crowd_at = -CROWD_NS;
static _Atomic bool crowd_flag;

int vs_spin_parse_running(const char *text)
{
    /* "0.50 0.40 0.30 RUNNING/TOTAL LASTPID" */
    const char *p = text;
    for (int field = 0; field < 3; field++) {
        p = strchr(p, ' ');
        if (!p)
            return -1;
        p++;
    }
    char *end;
    long running = strtol(p, &end, 10);
    return end == p || *end != '/' || running < 0 || running > 1000000 ? -1 : (int)running;
}

static bool crowded(long now)
{
    if (vs_config.poll_crowded)
        return false;
    long at = atomic_load_explicit(&crowd_at, memory_order_relaxed);
    if (now - at < CROWD_NS || !atomic_compare_exchange_strong(&crowd_at, &at, now))
        return atomic_load_explicit(&crowd_flag, memory_order_relaxed);
    static long cpus;
    if (!cpus)
        cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char buf[128];
    bool flag = vs_read_small_file("/proc/loadavg", buf, sizeof(buf)) > 0 &&
                vs_spin_parse_running(buf) > cpus;
    atomic_store_explicit(&crowd_flag, flag, memory_order_relaxed);
    return flag;
}

bool vs_spin_spent(long asked_ns)
{
    long ceiling = vs_spin_ns();
    if (asked_ns > 0 || ceiling <= 0 || budget_now(ceiling) > 0)
        return false;
    vs_spin_count(VS_SPIN_SKIPPED);
    gave_up_at = vs_now_ns();
    return true;
}

/* Polls READY until it says yes (true) or the clock passes END (false),
 * yielding now and then: the peer may be waiting for this very CPU. */
static bool spin_loop(bool (*ready)(void *, const void *), void *arg, const void *arg2, long end)
{
    for (unsigned i = 1;; i++) {
        if (ready(arg, arg2))
            return true;
        if (i % 16 == 0) {
            if (vs_now_ns() >= end)
                return false;
            sched_yield();
        }
        vs_cpu_relax();
    }
}

/* What the program asked for (SO_BUSY_POLL and the kernel's busy-poll
 * settings) is honoured as the kernel honours it: a spin of that length on
 * every wait, load or no load. It leaves the adaptive budget alone. */
static bool spin_asked(bool (*ready)(void *, const void *), void *arg, const void *arg2,
                       long asked_ns)
{
    vs_spin_count(VS_SPIN_TRIED);
    if (!spin_loop(ready, arg, arg2, vs_now_ns() + asked_ns))
        return false;
    vs_spin_count(VS_SPIN_PAID);
    return true;
}

bool vs_spin_until(bool (*ready)(void *, const void *), void *arg, const void *arg2, long asked_ns)
{
    if (asked_ns > 0)
        return spin_asked(ready, arg, arg2, asked_ns);
    long ceiling = vs_spin_ns();
    if (ceiling <= 0)
        return false;
    long start = vs_now_ns(), budget = budget_now(ceiling);
    if (budget > 0 && crowded(start)) {
        vs_spin_count(VS_SPIN_CROWDED);
        return false;
    }
    vs_spin_count(budget > 0 ? VS_SPIN_TRIED : VS_SPIN_SKIPPED);
    if (budget == 0) {
        gave_up_at = start;
        return false;
    }
    if (!spin_loop(ready, arg, arg2, start + budget)) {
        gave_up(ceiling, vs_now_ns());
        return false;
    }
    vs_spin_count(VS_SPIN_PAID);
    spin_budget = ceiling;
    gave_up_at = 0;
    return true;
}

/* A sysctl in microseconds, read once: a value of 0 or one that cannot be
 * read (a sandbox without /proc) means off. */
static int sysctl_us(const char *path, _Atomic int *cache)
{
    int v = atomic_load_explicit(cache, memory_order_relaxed);
    if (v >= 0)
        return v;
    char buf[32], *end;
    long us = vs_read_small_file(path, buf, sizeof(buf)) > 0 ? strtol(buf, &end, 10) : 0;
    v = us > 0 ? (int)(us < (long)VS_POLL_US_MAX ? us : (long)VS_POLL_US_MAX) : 0;
    atomic_store_explicit(cache, v, memory_order_relaxed);
    return v;
}

int vs_busy_read_us(void)
{
    static _Atomic int cache = -1;
    return sysctl_us("/proc/sys/net/core/busy_read", &cache);
}

long vs_busy_poll_ns(void)
{
    static _Atomic int cache = -1;
    return sysctl_us("/proc/sys/net/core/busy_poll", &cache) * 1000L;
}
