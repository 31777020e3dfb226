/* unix_msg.c - one message and its descriptors on a unix socket (unix_msg.h). */
#include <string.h>
#include <sys/socket.h>

#include "base/real.h"
#include "base/syscall.h"
#include "transport/unix_msg.h"

bool vs_unix_send(int chan, const void *buf, size_t len, const int *fds, int nfds)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(VS_UNIX_MAX_FDS * sizeof(int))];
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds < 0 || nfds > VS_UNIX_MAX_FDS)
        return false;
    if (nfds > 0) {
        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
    }
    return chan >= 0 && vs_real.sendmsg(chan, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)len;
}

ssize_t vs_unix_recv(int chan, void *buf, size_t len, int *fds, int maxfds, int *nfds,
                     int *msg_flags)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(2 * VS_UNIX_MAX_FDS * sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl)};
    ssize_t n = vs_real.recvmsg(chan, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    *nfds = 0;
    if (n < 0)
        return n;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (*nfds < maxfds)
                fds[(*nfds)++] = fd;
            else
                vs_syscall(SYS_close, fd);
        }
    }
    *msg_flags = mh.msg_flags;
    return n;
}
