/* filter.c - stepping aside for a seccomp filter: every layer is told here,
 * from the top, so that the watch itself (base/sandbox.c) calls nothing. */
#include "interpose/filter.h"

#include "base/sandbox.h"
#include "config/log.h"
#include "core/fdtable.h"
#include "core/reason.h"
#include "readiness/epoll.h"
#include "transport/transport.h"

static void show_sandboxed(int fd, struct vs_sock *s, void *arg)
{
    (void)fd;
    (void)arg;
    s->transport = VS_TRANSPORT_KERNEL;
    vs_stats_set_transport(s->stat, VS_TRANSPORT_KERNEL, VS_REASON_SANDBOXED);
}

bool vs_sandbox_enter(void)
{
    if (!vs_sandbox_claim())
        return false;
    /* From here on, new sockets and other threads' calls pass through; the
     * connections already there leave while we may still make calls. */
    /* Records first, while their watch fds are known: then leave. */
    vs_epoll_make_plain();
    vs_transports_leave_all(VS_REASON_SANDBOXED);
    vs_fd_for_each(show_sandboxed, NULL);
    vs_info("a seccomp filter goes in: from now on this process only passes calls on");
    return true;
}
