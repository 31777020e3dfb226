/* test_spin.c - the adaptive busy-poll budget (core/spin.c):
 * spins that bring nothing shrink it to 0, a quick wake-up raises it again,
 * a spin that pays keeps it; a spin the program asked for runs whatever the
 * budget. Counted in calls of the condition, not timed:
 * the ceiling is long (100 ms) so only a stall of that length between two
 * adjacent calls here could change what the checks see. */
#include "check.h"
#include "config/config.h"
#include "core/spin.h"

static long looks;
static long pay_after; /* the condition comes true on this look; 0: never */

static bool ready(void *arg, const void *arg2)
{
    (void)arg;
    (void)arg2;
    looks++;
    return pay_after > 0 && looks >= pay_after;
}

/* One wait's spin: how many times it looked at the condition. */
static long spin_looks_asked(bool *paid, long asked_ns)
{
    looks = 0;
    *paid = vs_spin_until(ready, NULL, NULL, asked_ns);
    return looks;
}

static long spin_looks(bool *paid)
{
    return spin_looks_asked(paid, 0);
}

static void test_unpaid_spins_stop(void)
{
    bool paid;
    pay_after = 0;
    CHECK(spin_looks(&paid) > 0); /* the full ceiling */
    CHECK(!paid);
    CHECK(spin_looks(&paid) > 0); /* half of it */
    CHECK(!paid);
    CHECK_EQ(spin_looks(&paid), 0); /* then none: sleep at once */
    CHECK_EQ(spin_looks(&paid), 0);
}

static void test_quick_wakeup_spins_again(void)
{
    bool paid;
    pay_after = 0;
    CHECK_EQ(spin_looks(&paid), 0);
    vs_spin_woke(); /* at once: a spin would have caught it */
    pay_after = 3;
    CHECK_EQ(spin_looks(&paid), 3);
    CHECK(paid);
    /* A spin that paid keeps the budget. */
    CHECK_EQ(spin_looks(&paid), 3);
    CHECK(paid);
}

/* /proc/loadavg's running count, and what is not one. */
static void test_parse_running(void)
{
    CHECK_EQ(vs_spin_parse_running("0.50 0.40 0.30 3/456 12345\n"), 3);
    CHECK_EQ(vs_spin_parse_running("7.82 6.99 5.45 16/121 9394"), 16);
    CHECK_EQ(vs_spin_parse_running("0.50 0.40 0.30"), -1);
    CHECK_EQ(vs_spin_parse_running("0.50 0.40 0.30 x/4 1"), -1);
    CHECK_EQ(vs_spin_parse_running("0.50 0.40 0.30 3 1"), -1);
    CHECK_EQ(vs_spin_parse_running(""), -1);
}

static void test_zero_ceiling_never_spins(void)
{
    bool paid;
    vs_config.poll_us = 0;
    pay_after = 1;
    CHECK_EQ(spin_looks(&paid), 0);
    CHECK(!paid);
    vs_spin_woke();
    CHECK_EQ(spin_looks(&paid), 0);
}

/* SO_BUSY_POLL and the kernel's busy-poll settings: a spin whatever the
 * budget (VSOCKET_POLL_US=0 here), which leaves the budget as it was. */
static void test_asked_spin_whatever_the_budget(void)
{
    bool paid;
    vs_config.poll_us = 0;
    pay_after = 5;
    CHECK_EQ(spin_looks_asked(&paid, 100000000L), 5);
    CHECK(paid);
    CHECK(!vs_spin_spent(100000000L));
    CHECK_EQ(spin_looks(&paid), 0);
    CHECK(!paid);
    pay_after = 0;
    CHECK(spin_looks_asked(&paid, 1000000L) > 0); /* 1 ms, then it gives up */
    CHECK(!paid);
}

int main(void)
{
    vs_config_load(&vs_config);
    vs_config.poll_us = 100000;
    /* The budget's rules, whatever else runs on the machine meanwhile. */
    vs_config.poll_crowded = true;
    test_parse_running();
    test_unpaid_spins_stop();
    test_quick_wakeup_spins_again();
    test_zero_ceiling_never_spins();
    test_asked_spin_whatever_the_budget();
    return check_finish("test_spin");
}
