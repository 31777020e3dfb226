/* real.h - the libc functions vsocket interposes, resolved once with
 * dlsym(RTLD_NEXT).
 *
 * Inside libvsocket every call to one of these functions must go through
 * vs_real.NAME: a plain call would bind to our own wrapper and recurse. */
#ifndef VSOCKET_REAL_H
#define VSOCKET_REAL_H

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

/* X(return type, name, parameter list) for every interposed symbol. */
#define VS_REAL_SYMBOLS(X)                                                                         \
    X(int, socket, (int, int, int))                                                                \
    X(int, socketpair, (int, int, int, int[2]))                                                    \
    X(int, bind, (int, const struct sockaddr *, socklen_t))                                        \
    X(int, listen, (int, int))                                                                     \
    X(int, accept, (int, struct sockaddr *, socklen_t *))                                          \
    X(int, accept4, (int, struct sockaddr *, socklen_t *, int))                                    \
    X(int, connect, (int, const struct sockaddr *, socklen_t))                                     \
    X(int, close, (int))                                                                           \
    X(int, close_range, (unsigned int, unsigned int, int))                                         \
    X(void, closefrom, (int))                                                                      \
    X(int, fclose, (FILE *))                                                                       \
    X(int, shutdown, (int, int))                                                                   \
    X(ssize_t, read, (int, void *, size_t))                                                        \
    X(ssize_t, write, (int, const void *, size_t))                                                 \
    X(ssize_t, readv, (int, const struct iovec *, int))                                            \
    X(ssize_t, writev, (int, const struct iovec *, int))                                           \
    X(ssize_t, recv, (int, void *, size_t, int))                                                   \
    X(ssize_t, recvfrom, (int, void *, size_t, int, struct sockaddr *, socklen_t *))               \
    X(ssize_t, recvmsg, (int, struct msghdr *, int))                                               \
    X(int, recvmmsg, (int, struct mmsghdr *, unsigned int, int, struct timespec *))                \
    X(ssize_t, send, (int, const void *, size_t, int))                                             \
    X(ssize_t, sendto, (int, const void *, size_t, int, const struct sockaddr *, socklen_t))       \
    X(ssize_t, sendmsg, (int, const struct msghdr *, int))                                         \
    X(int, sendmmsg, (int, struct mmsghdr *, unsigned int, int))                                   \
    X(ssize_t, sendfile, (int, int, off_t *, size_t))                                              \
    X(ssize_t, sendfile64, (int, int, off64_t *, size_t))                                          \
    X(int, getsockopt, (int, int, int, void *, socklen_t *))                                       \
    X(int, setsockopt, (int, int, int, const void *, socklen_t))                                   \
    X(int, getsockname, (int, struct sockaddr *, socklen_t *))                                     \
    X(int, getpeername, (int, struct sockaddr *, socklen_t *))                                     \
    X(int, fcntl, (int, int, ...))                                                                 \
    X(int, fcntl64, (int, int, ...))                                                               \
    X(int, ioctl, (int, unsigned long, ...))                                                       \
    X(int, dup, (int))                                                                             \
    X(int, dup2, (int, int))                                                                       \
    X(int, dup3, (int, int, int))                                                                  \
    X(int, poll, (struct pollfd *, nfds_t, int))                                                   \
    X(int, ppoll, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *))            \
    X(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *))                          \
    X(int, pselect,                                                                                \
      (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *))              \
    X(int, epoll_create, (int))                                                                    \
    X(int, epoll_create1, (int))                                                                   \
    X(int, epoll_ctl, (int, int, int, struct epoll_event *))                                       \
    X(int, epoll_wait, (int, struct epoll_event *, int, int))                                      \
    X(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *))                   \
    X(int, epoll_pwait2,                                                                           \
      (int, struct epoll_event *, int, const struct timespec *, const sigset_t *))                 \
    X(FILE *, fdopen, (int, const char *))                                                         \
    X(ssize_t, splice, (int, loff_t *, int, loff_t *, size_t, unsigned int))                       \
    X(int, sigaction, (int, const struct sigaction *, struct sigaction *))                         \
    X(sighandler_t, signal, (int, sighandler_t))                                                   \
    X(int, siginterrupt, (int, int))                                                               \
    X(pid_t, fork, (void))                                                                         \
    X(int, execve, (const char *, char *const[], char *const[]))                                   \
    X(int, execvpe, (const char *, char *const[], char *const[]))                                  \
    X(int, fexecve, (int, char *const[], char *const[]))                                           \
    X(int, execv, (const char *, char *const[]))                                                   \
    X(int, execvp, (const char *, char *const[]))                                                  \
    X(int, prctl, (int, ...))                                                                      \
    X(int, setuid, (uid_t))                                                                        \
    X(int, setgid, (gid_t))                                                                        \
    X(int, seteuid, (uid_t))                                                                       \
    X(int, setegid, (gid_t))                                                                       \
    X(int, setreuid, (uid_t, uid_t))                                                               \
    X(int, setregid, (gid_t, gid_t))                                                               \
    X(int, setresuid, (uid_t, uid_t, uid_t))                                                       \
    X(int, setresgid, (gid_t, gid_t, gid_t))                                                       \
    X(int, setfsuid, (uid_t))                                                                      \
    X(int, setfsgid, (gid_t))                                                                      \
    X(int, setgroups, (size_t, const gid_t *))                                                     \
    X(int, initgroups, (const char *, gid_t))                                                      \
    X(long, syscall, (long, ...))

#define VS_REAL_FIELD(ret, name, params) ret(*name) params;
struct vs_real_table {
    VS_REAL_SYMBOLS(VS_REAL_FIELD)
};
#undef VS_REAL_FIELD

extern struct vs_real_table vs_real;

/* Resolves every symbol. Idempotent and cheap after the first call; called
 * from the library constructor and, for calls that arrive before it (from
 * another library's constructor), from the first wrapper that runs. */
void vs_real_init(void);

extern int vs_real_resolved;

/* Every interposed entry point starts with this: the table is complete after
 * it. A single relaxed load once the constructor has run. */
static inline void vs_real_ready(void)
{
    if (__builtin_expect(!vs_real_resolved, 0))
        vs_real_init();
}
#define VS_REAL_READY() vs_real_ready()

/* The symbols libvsocket exports; everything else is hidden. */
#define VS_EXPORT __attribute__((visibility("default")))

#endif
