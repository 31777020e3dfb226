/* Small socket helpers. Every wait here is bounded by a deadline. */
#include "stress.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static uint16_t sockaddr_port(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

int tcp_listen(const char *bind_addr, uint16_t port, bool ipv6, uint16_t *bound_port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(bind_addr, port, ipv6, SOCK_STREAM, true, &ss, &len) < 0)
        return -1;
    int fd = socket(ss.ss_family, SOCK_STREAM, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 128) < 0) {
        fprintf(stderr, "vsocket-stress: cannot listen on %s port %u: %s\n",
                bind_addr ? bind_addr : "(any)", port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    len = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &len);
    *bound_port = sockaddr_port(&ss);
    return fd;
}

int udp_bind(const char *bind_addr, uint16_t port, bool ipv6)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(bind_addr, port, ipv6, SOCK_DGRAM, true, &ss, &len) < 0)
        return -1;
    int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) < 0) {
        fprintf(stderr, "vsocket-stress: cannot bind UDP port %u: %s\n", port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

int set_io_timeout(int fd, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
        return -1;
    return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int set_nonblock(int fd, bool on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    return fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

/* Linux bounds a blocking connect() by SO_SNDTIMEO, which keeps this simple. */
int tcp_connect(const char *host, uint16_t port, bool ipv6, int timeout_ms)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(host, port, ipv6, SOCK_STREAM, false, &ss, &len) < 0)
        return -1;
    int fd = socket(ss.ss_family, SOCK_STREAM, 0);
    if (fd < 0) {
        perror("vsocket-stress: socket");
        return -1;
    }
    set_io_timeout(fd, timeout_ms);
    int rc;
    do
        rc = connect(fd, (struct sockaddr *)&ss, len);
    while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        fprintf(stderr, "vsocket-stress: cannot connect to %s port %u: %s\n", host, port,
                strerror(errno == EINPROGRESS ? ETIMEDOUT : errno));
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static int ms_left(uint64_t deadline_ns)
{
    uint64_t now = now_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now) / 1000000 + 1;
    return ms > 200 ? 200 : (int)ms;
}

int accept_until(int lfd, uint64_t deadline_ns)
{
    for (;;) {
        int left = ms_left(deadline_ns);
        if (left == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = {lfd, POLLIN, 0};
        int rc = poll(&p, 1, left);
        if (rc < 0 && errno != EINTR)
            return -1;
        if (rc <= 0)
            continue;
        int fd = accept(lfd, NULL, NULL);
        if (fd >= 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            return fd;
        }
        if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
            return -1;
    }
}

/* The fd must carry an SO_SNDTIMEO/SO_RCVTIMEO so that each call returns in time
 * to look at the deadline. The deadline is checked on every round, not only on
 * EAGAIN, because a slow but moving transfer must also stop in time. */
ssize_t send_some(int fd, const uint8_t *p, size_t n)
{
    uint64_t h = mix64((uint64_t)n ^ (uint64_t)(uintptr_t)p);
    if (n < 2 || (h & 1))
        return send(fd, p, n, MSG_NOSIGNAL);
    size_t a = 1 + (size_t)(h >> 1) % (n - 1), b = (size_t)mix64(h) % (n - a + 1);
    struct iovec iov[4] = {{(void *)p, a},
                           {(void *)(p + a), 0},
                           {(void *)(p + a), b},
                           {(void *)(p + a + b), n - a - b}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 4};
    return sendmsg(fd, &m, MSG_NOSIGNAL);
}

int send_all(int fd, const void *p, size_t n, uint64_t deadline_ns)
{
    const uint8_t *b = p;
    while (n > 0) {
        if (now_ns() >= deadline_ns) {
            errno = ETIMEDOUT;
            return -1;
        }
        ssize_t k = send_some(fd, b, n);
        if (k > 0) {
            b += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
    }
    return 1;
}

int recv_all(int fd, void *p, size_t n, uint64_t deadline_ns)
{
    uint8_t *b = p;
    while (n > 0) {
        if (now_ns() >= deadline_ns) {
            errno = ETIMEDOUT;
            return -1;
        }
        ssize_t k = recv(fd, b, n, 0);
        if (k > 0) {
            b += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0)
            return 0;
        if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
    }
    return 1;
}
