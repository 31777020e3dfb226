/* spin.c - busy-polling before a wait sleeps: readiness's waits and the
 * transports' blocking calls alike. */
#include "core/spin.h"

#include <sched.h>
#include <stdatomic.h>

#include "config/log.h"
#include "core/clock.h"
#include "memory/cpu.h"

/* What the spins of this process came to, logged at exit
 * (VSOCKET_LOG_LEVEL=info): whether spinning pays is a question of
 * measurement. Relaxed counters, one add per wait. */
enum { VS_SPIN_TRIED, VS_SPIN_PAID, VS_SPIN_SKIPPED, VS_SPIN_KINDS };
static _Atomic unsigned long spin_counts[VS_SPIN_KINDS];

static void vs_spin_count(int kind)
{
    atomic_fetch_add_explicit(&spin_counts[kind], 1, memory_order_relaxed);
}

void vs_spin_report(void)
{
    unsigned long tried = atomic_load(&spin_counts[VS_SPIN_TRIED]);
    unsigned long skipped = atomic_load(&spin_counts[VS_SPIN_SKIPPED]);
    if (tried + skipped > 0)
        vs_info("busy-poll: %lu spins, %lu paid, %lu waits slept at once", tried,
                atomic_load(&spin_counts[VS_SPIN_PAID]), skipped);
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

bool vs_spin_until(bool (*ready)(void *, const void *), void *arg, const void *arg2)
{
    long ceiling = vs_spin_ns();
    if (ceiling <= 0)
        return false;
    long start = vs_now_ns(), budget = budget_now(ceiling);
    vs_spin_count(budget > 0 ? VS_SPIN_TRIED : VS_SPIN_SKIPPED);
    if (budget == 0) {
        gave_up_at = start;
        return false;
    }
    long end = start + budget;
    for (unsigned i = 1;; i++) {
        if (ready(arg, arg2)) {
            vs_spin_count(VS_SPIN_PAID);
            spin_budget = ceiling;
            gave_up_at = 0;
            return true;
        }
        if (i % 16 == 0) {
            long now = vs_now_ns();
            if (now >= end) {
                gave_up(ceiling, now);
                return false;
            }
            /* The peer may be waiting for this very CPU. */
            sched_yield();
        }
        vs_cpu_relax();
    }
}
