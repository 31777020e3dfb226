/* init.c - what happens when libvsocket is loaded, at exit and at fork: the
 * one place that calls every layer in turn, so it stands on top. */
#include "interpose/init.h"

#include <pthread.h>

#include "base/real.h"
#include "base/sandbox.h"
#include "config/config.h"
#include "config/log.h"
#include "config/stats.h"
#include "core/exec_env.h"
#include "core/sock.h"
#include "readiness/epoll.h"
#include "core/spin.h"
#include "transport/dgram/ops.h"
#include "transport/rdma/ops.h"
#include "transport/shm/ops.h"
#include "transport/transport.h"
#include "transport/wake.h"

/* What only this floor may do: give the layers below the names above them.
 * The transports, in order of preference, to the registry, and the
 * datagram layer; the registry's offer of inherited UDP sockets to core;
 * readiness's wake-ups to the transports. */
static void wire(void)
{
    static const struct vs_wake_hooks epoll_hooks = {
        .kick = vs_epoll_kick,
        .phase_changed = vs_epoll_phase_changed,
        .shared_read = vs_epoll_wake_shared,
    };
    vs_wake_set(&epoll_hooks);
    vs_transports_register(&vs_shm_ops);
    vs_transports_register(&vs_rdma_ops);
    vs_transports_register_dgram(&vs_dgram_ops);
    vs_sock_set_adopt_hook(vs_transports_offer_dgram);
}

__attribute__((constructor)) static void vs_load(void)
{
    /* First: under a filter, nothing below may make a call of its own. */
    vs_sandbox_check_at_load();
    vs_real_init();
    wire();
    if (vs_sandboxed())
        return;
    vs_config_load(&vs_config);
    vs_exec_env_capture();
    vs_fork_handlers_install();
    char transports[64];
    vs_config_format_transports(vs_config.transports, transports, sizeof(transports));
    vs_info("loaded: transports %s, statistics %s", transports, vs_config.stats ? "on" : "off");
}

__attribute__((destructor)) static void vs_unload(void)
{
    if (vs_sandboxed())
        return;
    vs_spin_report();
    vs_stats_exit(); /* its file stays: `vsocket stat` removes it */
}

/* Locks are taken in one order (epoll records, connections, sockets, then
 * statistics) and released in both processes, so the child never inherits
 * a lock held by a thread it does not have. */
void vs_fork_prepare(void)
{
    vs_epoll_fork_prepare();
    vs_transports_fork_prepare();
    vs_sock_fork_prepare();
    vs_stats_fork_prepare();
}

void vs_fork_parent(void)
{
    vs_stats_fork_parent();
    vs_sock_fork_parent();
    vs_transports_fork_parent();
    vs_epoll_fork_parent();
}

void vs_fork_child(void)
{
    vs_stats_fork_child();
    vs_sock_fork_child();
    vs_transports_fork_child();
    vs_epoll_fork_child();
}

/* Whether this thread's fork runs our handlers (not under a filter). */
static __thread bool forking;

static void at_prepare(void)
{
    forking = !vs_sandboxed();
    if (forking)
        vs_fork_prepare();
}

static void at_parent(void)
{
    if (forking)
        vs_fork_parent();
}

static void at_child(void)
{
    if (forking)
        vs_fork_child();
}

/* Our handlers run inside the libc's fork, through pthread_atfork, not
 * before it: prepare handlers run in the reverse order of registration, so
 * ours, registered at load, come after those of every library the program
 * loads later. A library's prepare handler may wait for its own threads to
 * settle (gRPC's waits for its poller thread to leave epoll_wait), and
 * those threads need our locks: taken first, they deadlocked it. The child
 * and parent handlers run in registration order: ours first, so the
 * library's child handler finds our state already repaired. */
void vs_fork_handlers_install(void)
{
    pthread_atfork(at_prepare, at_parent, at_child);
}
