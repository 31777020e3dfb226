/* pingpong.c - a minimal, deterministic TCP/UDP ping-pong for instruction counting.
 *
 * bench/passthrough compiles it (cc -O2) and runs client and server under
 * `valgrind --tool=callgrind`, with and without vsocket, for two iteration
 * counts; the difference divided by the difference in iterations is the
 * user-space instructions per round trip, free of start-up costs.
 *
 *   pingpong server tcp|udp PORT SIZE ITERS   answers ITERS messages, then exits
 *   pingpong client tcp|udp PORT SIZE ITERS   sends ITERS messages to 127.0.0.1:PORT
 *
 * Exit code 0 when every message came back with the right length. It uses
 * send/recv only, one call each way per round trip on each side (TCP reads
 * loop only if the kernel splits a 64-byte message, which loopback does not).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int recv_all(int fd, char *buf, size_t len, int stream)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, buf + got, len - got, 0);
        if (n <= 0)
            return -1;
        got += (size_t)n;
        if (!stream)
            return n == (ssize_t)len ? 0 : -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s server|client tcp|udp PORT SIZE ITERS\n", argv[0]);
        return 2;
    }
    int server = strcmp(argv[1], "server") == 0;
    int stream = strcmp(argv[2], "tcp") == 0;
    int port = atoi(argv[3]);
    size_t size = (size_t)atol(argv[4]);
    long iters = atol(argv[5]);
    char *buf = calloc(1, size ? size : 1);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    int one = 1;

    int fd = socket(AF_INET, stream ? SOCK_STREAM : SOCK_DGRAM, 0);
    if (fd < 0 || !buf) {
        perror("socket");
        return 1;
    }
    if (server) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
            perror("bind");
            return 1;
        }
        int conn = fd;
        struct sockaddr_in peer;
        socklen_t plen = sizeof(peer);
        if (stream) {
            if (listen(fd, 1) < 0 || (conn = accept(fd, NULL, NULL)) < 0) {
                perror("listen/accept");
                return 1;
            }
            setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        for (long i = 0; i < iters; i++) {
            if (stream) {
                if (recv_all(conn, buf, size, 1) < 0 || send(conn, buf, size, 0) != (ssize_t)size)
                    goto fail;
            } else {
                plen = sizeof(peer);
                if (recvfrom(fd, buf, size, 0, (struct sockaddr *)&peer, &plen) != (ssize_t)size ||
                    sendto(fd, buf, size, 0, (struct sockaddr *)&peer, plen) != (ssize_t)size)
                    goto fail;
            }
        }
        if (conn != fd)
            close(conn);
    } else {
        if (stream)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        /* UDP: connect() so that send/recv work and stray datagrams are filtered */
        for (int tries = 0; connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0; tries++) {
            if (tries > 500) {
                perror("connect");
                return 1;
            }
            usleep(10000);
        }
        for (long i = 0; i < iters; i++) {
            memset(buf, (int)(i & 0xff), size);
            if (send(fd, buf, size, 0) != (ssize_t)size || recv_all(fd, buf, size, stream) < 0)
                goto fail;
        }
    }
    close(fd);
    free(buf);
    return 0;
fail:
    fprintf(stderr, "pingpong %s: transfer failed\n", argv[1]);
    return 1;
}
