/* sandbox.c - noticing a seccomp filter. */
#include "base/sandbox.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "base/syscall.h"

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

bool vs_sandbox_claim(void)
{
    bool was = false;
    return atomic_compare_exchange_strong(&vs_sandbox_on, &was, true);
}

void vs_sandbox_enter_failed(void)
{
    atomic_store(&vs_sandbox_on, false);
}
