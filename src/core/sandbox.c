/* sandbox.c - noticing a seccomp filter, and stepping aside for it. */
#include "core/sandbox.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "config/log.h"
#include "core/fdtable.h"
#include "core/reason.h"
#include "readiness/epoll.h"
#include "base/syscall.h"
#include "transport/transport.h"

_Atomic bool vs_sandbox_on;

/* The "Seccomp:" field of /proc/self/status: 0 none, 1 strict, 2 filter.
 * Read with the calls the dynamic loader has just made to load us
 * (openat, read, close), which any filter we could be loaded under allows. */
static int seccomp_mode(void)
{
    char buf[8192];
    int fd = (int)vs_syscall(SYS_openat, AT_FDCWD, "/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0; /* no /proc (a chroot): cannot know */
    ssize_t n = vs_syscall(SYS_read, fd, buf, sizeof(buf) - 1);
    vs_syscall(SYS_close, fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *p = strstr(buf, "\nSeccomp:");
    if (!p)
        return 0;
    p += strlen("\nSeccomp:");
    p += strspn(p, " \t");
    return *p >= '0' && *p <= '9' ? *p - '0' : 0;
}

void vs_sandbox_check_at_load(void)
{
    if (seccomp_mode() != 0)
        atomic_store(&vs_sandbox_on, true);
}

static void show_sandboxed(int fd, struct vs_sock *s, void *arg)
{
    (void)fd;
    (void)arg;
    s->transport = VS_TRANSPORT_KERNEL;
    vs_stats_set_transport(s->stat, VS_TRANSPORT_KERNEL, VS_REASON_SANDBOXED);
}

bool vs_sandbox_enter(void)
{
    bool was = false;
    if (!atomic_compare_exchange_strong(&vs_sandbox_on, &was, true))
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

void vs_sandbox_enter_failed(void)
{
    atomic_store(&vs_sandbox_on, false);
}
