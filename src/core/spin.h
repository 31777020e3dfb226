/* spin.h - busy-polling before a wait sleeps (VSOCKET_POLL_US), for
 * readiness's waits and the transports' blocking calls. */
#ifndef VSOCKET_SPIN_H
#define VSOCKET_SPIN_H

#include <stdbool.h>

/* Busy-polls READY(ARG, ARG2) for the thread's current budget (at most
 * VSOCKET_POLL_US; it adapts, see spin.c), unless the machine has more
 * running threads than CPUs (VSOCKET_POLL_CROWDED). ASKED_NS > 0: the
 * program asked for busy-polling (SO_BUSY_POLL, net.core.busy_read or
 * busy_poll): spin that long, whatever the budget and the load, as the
 * kernel would. A caller that then sleeps calls vs_spin_woke() when the
 * sleep ends. */
bool vs_spin_until(bool (*ready)(void *, const void *), void *arg, const void *arg2, long asked_ns);
void vs_spin_woke(void);
/* True when a spin now would sleep at once (the thread's budget is spent
 * and ASKED_NS is 0): counted as vs_spin_until would, and the caller, which
 * then sleeps without a spin, calls vs_spin_woke() after as well. */
bool vs_spin_spent(long asked_ns);
/* The kernel's busy-poll settings, read once per process: net.core.busy_read
 * (a new socket's SO_BUSY_POLL), net.core.busy_poll (poll, select and
 * epoll_wait), in microseconds; 0 when off or unreadable. */
int vs_busy_read_us(void);
long vs_busy_poll_ns(void);
/* The running threads in /proc/loadavg's TEXT, or -1. */
int vs_spin_parse_running(const char *text);
/* Logs what the process's spins came to (at exit). */
void vs_spin_report(void);

#endif
