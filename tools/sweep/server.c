/* vsocket-sweep server: serves clients one after another until killed (or --once). */
#include "sweep.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SIZE (1ULL << 30)

static int listen_tcp(const struct server_opts *o)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(o->bind_addr, o->port, SOCK_STREAM, true, &ss, &len) < 0)
        return -1;
    int fd = socket(ss.ss_family, SOCK_STREAM, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 16) < 0) {
        fprintf(stderr, "vsocket-sweep: cannot listen on port %u: %s\n", o->port, strerror(errno));
        return -1;
    }
    return fd;
}

static void echo_pingpong(int fd, char *buf, size_t size)
{
    while (read_full(fd, buf, size) == 1)
        if (write_full(fd, buf, size) < 0)
            return;
}

/* Count bytes until EOF; time from the first byte to EOF is the receiver's view. */
static void sink_stream(int fd, char *buf, size_t bufsize)
{
    uint64_t bytes = 0, t0 = 0;
    for (;;) {
        ssize_t k = read(fd, buf, bufsize);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        if (bytes == 0)
            t0 = now_ns();
        bytes += (uint64_t)k;
    }
    uint8_t reply[8 * STREAM_REPLY_WORDS];
    put_u64(reply, bytes);
    put_u64(reply + 8, bytes ? now_ns() - t0 : 0);
    write_full(fd, reply, sizeof(reply));
}

static void serve_client(int fd)
{
    uint8_t req[8 * REQ_WORDS], ack[8];
    if (read_full(fd, req, sizeof(req)) != 1 || get_u64(req) != REQ_MAGIC)
        return;
    uint64_t test = get_u64(req + 8), size = get_u64(req + 16);
    uint64_t warm = test >> 8;
    test &= REQ_TEST_MASK;
    if ((test != TEST_PINGPONG && test != TEST_STREAM) || size < 1 || size > MAX_SIZE ||
        (warm && test != TEST_STREAM) || warm > MAX_STREAM_WARMUP)
        return;
    size_t bufsize = size < 65536 ? 65536 : (size_t)size;
    char *buf = malloc(bufsize);
    if (!buf)
        return;
    put_u64(ack, REQ_MAGIC);
    if (write_full(fd, ack, sizeof(ack)) == 0) {
        if (test == TEST_PINGPONG)
            echo_pingpong(fd, buf, (size_t)size);
        else {
            uint64_t i = 0;
            for (; i < warm && read_full(fd, buf, 8) == 1 && write_full(fd, buf, 8) == 0; i++)
                ;
            if (i == warm)
                sink_stream(fd, buf, bufsize);
        }
    }
    free(buf);
}

static int serve_tcp(const struct server_opts *o)
{
    int lfd = listen_tcp(o);
    if (lfd < 0)
        return EXIT_CONNECT;
    do {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            perror("vsocket-sweep: accept");
            return EXIT_CONNECT;
        }
        set_nodelay(fd);
        serve_client(fd);
        close(fd);
    } while (!o->once);
    close(lfd);
    return EXIT_OK;
}

/* UDP: echo every datagram to its sender, until killed (UDP has no end of
 * session, so --once does not apply). */
static int serve_udp(const struct server_opts *o)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(o->bind_addr, o->port, SOCK_DGRAM, true, &ss, &len) < 0)
        return EXIT_CONNECT;
    int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) < 0) {
        fprintf(stderr, "vsocket-sweep: cannot bind UDP port %u: %s\n", o->port, strerror(errno));
        return EXIT_CONNECT;
    }
    static char buf[65536];
    for (;;) {
        struct sockaddr_storage from;
        socklen_t fl = sizeof(from);
        ssize_t k = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            perror("vsocket-sweep: recvfrom");
            return EXIT_CONNECT;
        }
        sendto(fd, buf, (size_t)k, 0, (struct sockaddr *)&from, fl);
    }
}

int server_main(const struct server_opts *o)
{
    return o->udp ? serve_udp(o) : serve_tcp(o);
}
