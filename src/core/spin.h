/* spin.h - busy-polling before a wait sleeps (VSOCKET_POLL_US), for
 * readiness's waits and the transports' blocking calls. */
#ifndef VSOCKET_SPIN_H
#define VSOCKET_SPIN_H

#include <stdbool.h>

/* Busy-polls READY(ARG, ARG2) for the thread's current budget (at most
 * VSOCKET_POLL_US; it adapts, see spin.c), unless the machine has more
 * running threads than CPUs (VSOCKET_POLL_CROWDED). A caller that then
 * sleeps calls vs_spin_woke() when the sleep ends. */
bool vs_spin_until(bool (*ready)(void *, const void *), void *arg, const void *arg2);
void vs_spin_woke(void);
/* True when the thread's budget is spent (a spin now would sleep at once):
 * counted as vs_spin_until would, and the caller, which then sleeps without
 * a spin, calls vs_spin_woke() after as well. */
bool vs_spin_spent(void);
/* The running threads in /proc/loadavg's TEXT, or -1. */
int vs_spin_parse_running(const char *text);
/* Logs what the process's spins came to (at exit). */
void vs_spin_report(void);

#endif
