/* wait.h - spin-then-sleep waiting on a word in memory shared by two
 * processes.
 *
 * A vs_event lives in a MAP_SHARED region. The side that waits for a
 * condition (bytes to read, space to write) calls vs_event_wait(); the side
 * that makes the condition true publishes with a release store and then
 * calls vs_event_signal(). The signaller issues FUTEX_WAKE only when a waiter
 * has announced itself, so the common case costs no system call.
 *
 * Both words may be scribbled by a hostile peer at any time: the worst it can
 * cause is a spurious wake-up or a missed one, and every sleep is bounded by
 * a slice, so a waiter never depends on the peer for its own progress. */
#ifndef VSOCKET_WAIT_H
#define VSOCKET_WAIT_H

#include <stdatomic.h>
#include <stdint.h>

struct vs_event {
    _Atomic uint32_t seq;     /* the futex word; bumped by a signal that finds a waiter */
    _Atomic uint32_t waiters; /* threads sleeping, or about to sleep, on seq */
};

/* Default busy-poll budget before sleeping: about the cost of a futex
 * sleep and wake-up, so spinning never costs more than twice the optimum.
 * VSOCKET_POLL_US will override it. */
#define VS_WAIT_SPIN_NS_DEFAULT 10000L

/* How often a sleeper looks at its watched fd (the peer's liveness). */
#define VS_WAIT_SLICE_NS_DEFAULT 200000000L

struct vs_wait_opts {
    long spin_ns;    /* busy-poll this long before sleeping; 0: sleep at once */
    long timeout_ns; /* give up after this long; < 0: never */
    int watch_fd;    /* < 0: none; else end the wait when this fd is readable or hung up */
    long slice_ns;   /* longest single sleep; 0: VS_WAIT_SLICE_NS_DEFAULT */
};

/* vs_event_wait() results besides 0 ("look at the condition again"). */
#define VS_WAIT_WATCHED 1 /* watch_fd became readable or hung up */

/* The condition waited for: non-zero to stop waiting (also on an error the
 * caller will find when it retries its operation). */
typedef int (*vs_ready_fn)(void *arg);

void vs_event_init(struct vs_event *ev);

/* Waits until ready(arg) is non-zero: 0. Or -ETIMEDOUT, -EINTR (a signal
 * handler ran while asleep, whatever its SA_RESTART flag: the caller decides
 * whether to restart), VS_WAIT_WATCHED. */
int vs_event_wait(struct vs_event *ev, vs_ready_fn ready, void *arg,
                  const struct vs_wait_opts *opts);

/* Wakes the waiters, if any. Call after the release store that made their
 * condition true. */
void vs_event_signal(struct vs_event *ev);

#endif
