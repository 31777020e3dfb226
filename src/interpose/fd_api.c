/* fd_api.c - calls that create, copy or destroy descriptors, and the
 * generic control calls (fcntl, ioctl). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <linux/sockios.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "core/reason.h"
#include "core/fdtable.h"
#include "core/ownfd.h"
#include "base/real.h"
#include "base/sandbox.h"
#include "readiness/epoll.h"
#include "transport/transport.h"

/* The program is about to close FD or put another file there. If the number
 * is one of ours, we let go of it first, while it is still ours (core/ownfd.h). */
static void fd_closing(int fd)
{
    int saved_errno = errno;
    vs_ownfd_taken((unsigned)fd, (unsigned)fd);
    vs_epoll_fd_closing(fd);
    errno = saved_errno;
}

static void range_closing(unsigned first, unsigned last)
{
    int saved_errno = errno;
    vs_ownfd_taken(first, last);
    vs_epoll_range_closing(first, last);
    errno = saved_errno;
}

VS_EXPORT int close(int fd)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.close(fd));
    fd_closing(fd);
    struct vs_sock *s = vs_fd_close_begin(fd);
    int r = vs_real.close(fd);
    int saved_errno = errno;
    vs_fd_close_end(fd, s);
    errno = saved_errno;
    return r;
}

/* fclose closes its fd inside libc, out of our sight: forget it here, or a
 * file opened later under the same number would pass for the socket. */
VS_EXPORT int fclose(FILE *stream)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.fclose(stream));
    int fd = stream ? fileno(stream) : -1;
    if (fd >= 0)
        fd_closing(fd);
    struct vs_sock *s = fd >= 0 ? vs_fd_close_begin(fd) : NULL;
    int r = vs_real.fclose(stream);
    int saved_errno = errno;
    if (fd >= 0)
        vs_fd_close_end(fd, s);
    errno = saved_errno;
    return r;
}

VS_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
    VS_REAL_READY();
    if (!vs_real.close_range) {
        errno = ENOSYS;
        return -1;
    }
    VS_PASS_IF_SANDBOXED(vs_real.close_range(first, last, flags));
    if (!(flags & CLOSE_RANGE_CLOEXEC))
        range_closing(first, last);
    int r = vs_real.close_range(first, last, flags);
    int saved_errno = errno;
    if (r == 0 && !(flags & CLOSE_RANGE_CLOEXEC))
        vs_fd_forget_range(first, last);
    errno = saved_errno;
    return r;
}

VS_EXPORT void closefrom(int lowfd)
{
    VS_REAL_READY();
    if (vs_sandboxed() && vs_real.closefrom) {
        vs_real.closefrom(lowfd);
        return;
    }
    int saved_errno = errno;
    if (lowfd >= 0)
        range_closing((unsigned)lowfd, ~0u);
    if (vs_real.closefrom)
        vs_real.closefrom(lowfd);
    if (lowfd >= 0)
        vs_fd_forget_range((unsigned)lowfd, ~0u);
    errno = saved_errno;
}

/* NEWFD is a copy of OLDFD: it names the same socket, or is foreign too. */
static int track_dup(int oldfd, int newfd)
{
    if (newfd < 0 || newfd == oldfd)
        return newfd;
    int saved_errno = errno;
    vs_fd_set(newfd, vs_fd_get(oldfd));
    errno = saved_errno;
    return newfd;
}

VS_EXPORT int dup(int fd)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.dup(fd));
    return track_dup(fd, vs_real.dup(fd));
}

/* dup2/dup3 close NEWFD first when it is open. */
static void dup_target_closing(int oldfd, int newfd)
{
    if (newfd >= 0 && newfd != oldfd)
        fd_closing(newfd);
}

VS_EXPORT int dup2(int oldfd, int newfd)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.dup2(oldfd, newfd));
    dup_target_closing(oldfd, newfd);
    return track_dup(oldfd, vs_real.dup2(oldfd, newfd));
}

VS_EXPORT int dup3(int oldfd, int newfd, int flags)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.dup3(oldfd, newfd, flags));
    dup_target_closing(oldfd, newfd);
    return track_dup(oldfd, vs_real.dup3(oldfd, newfd, flags));
}

/* The third argument of fcntl/ioctl is an int, a long or a pointer depending
 * on the command; on the ABIs we support all travel in one register or stack
 * slot, so it is read and forwarded as a pointer-sized value. */
static int fcntl_common(int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
    VS_PASS_IF_SANDBOXED(real(fd, cmd, arg));
    int r = real(fd, cmd, arg);
    if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
        return track_dup(fd, r);
    return r;
}

VS_EXPORT int fcntl(int fd, int cmd, ...)
{
    VS_REAL_READY();
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_common(vs_real.fcntl, fd, cmd, arg);
}

VS_EXPORT int fcntl64(int fd, int cmd, ...)
{
    VS_REAL_READY();
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_common(vs_real.fcntl64 ? vs_real.fcntl64 : vs_real.fcntl, fd, cmd, arg);
}

VS_EXPORT int ioctl(int fd, unsigned long request, ...)
{
    VS_REAL_READY();
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    VS_PASS_IF_SANDBOXED(vs_real.ioctl(fd, request, arg));
    if (request == FIONREAD || request == SIOCOUTQ) {
        /* Bytes in the rings are out of the kernel's sight. */
        struct vs_sock *s = vs_fd_get(fd);
        int value;
        bool ours = s && s->ops && arg && s->ops->ioctl(s, fd, request, &value);
        if (s)
            vs_sock_put(s);
        if (ours) {
            /* The program's buffer need not be aligned (Python's
             * fcntl.ioctl passes a bytes object's). */
            memcpy(arg, &value, sizeof(value));
            return 0;
        }
    }
    return vs_real.ioctl(fd, request, arg);
}

/* Bytes that libc's stdio or the kernel's splice move never pass through our
 * wrappers: such a connection goes back to TCP first (ops->leave). */
static void leave_rings(int fd, const char *reason)
{
    struct vs_sock *s = fd >= 0 ? vs_fd_get(fd) : NULL;
    if (!s)
        return;
    int saved_errno = errno;
    if (s->ops)
        s->ops->leave(s, fd, reason);
    vs_sock_put(s);
    errno = saved_errno;
}

VS_EXPORT FILE *fdopen(int fd, const char *mode)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.fdopen(fd, mode));
    leave_rings(fd, VS_REASON_STDIO);
    return vs_real.fdopen(fd, mode);
}

VS_EXPORT ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
                         unsigned int flags)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.splice(fd_in, off_in, fd_out, off_out, len, flags));
    leave_rings(fd_in, VS_REASON_SPLICE);
    leave_rings(fd_out, VS_REASON_SPLICE);
    return vs_real.splice(fd_in, off_in, fd_out, off_out, len, flags);
}
