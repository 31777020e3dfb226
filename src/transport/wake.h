/* wake.h - how a transport tells the layer above that a socket may have
 * become ready, or that sleepers must look again.
 *
 * Readiness (readiness/epoll.c) owns its records and its sleepers; a
 * transport never includes it. It calls these hooks, which readiness gives
 * at load (interpose/init.c wires them, before the configuration that lets
 * any transport take a connection). Until then they do nothing: there is
 * no connection to tell of. */
#ifndef VSOCKET_WAKE_H
#define VSOCKET_WAKE_H

#include <stdatomic.h>

struct vs_wake_hooks {
    /* A cold record's news was read by somebody else (transport_ops.h,
     * cold_attach): its set must look at it. Any thread, any lock held;
     * REC may be stale. */
    void (*kick)(void *rec);
    /* A connection's phase changed (its generation) in this thread: a wait
     * asleep in another thread on the kernel registrations of the old
     * phase must look again. Any thread, any lock held. */
    void (*phase_changed)(void);
    /* Shared watch FD was read by a thread that may have taken another
     * thread's wake-up: every wait on a set holding it looks again (-1:
     * every wait on a shared watch). */
    void (*shared_read)(int fd);
};

extern struct vs_wake_hooks vs_wake_hooks;

/* At load, by the layer above: the hooks from now on. */
void vs_wake_set(const struct vs_wake_hooks *hooks);

static inline void vs_wake_kick(void *rec)
{
    vs_wake_hooks.kick(rec);
}

/* News of a connection reached this process other than through its cold
 * record, *COLD_REC (NULL: none): pass it on. Called after acting on the
 * news: the cooling publishes the record before it looks, so one of the two
 * sees the other. */
static inline void vs_wake_cold(void *_Atomic *cold_rec)
{
    void *cold = atomic_load(cold_rec);
    if (cold)
        vs_wake_kick(cold);
}

static inline void vs_wake_phase_changed(void)
{
    vs_wake_hooks.phase_changed();
}

static inline void vs_wake_shared_read(int fd)
{
    vs_wake_hooks.shared_read(fd);
}

#endif
