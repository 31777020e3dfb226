/* vsocket-sweep: latency / bandwidth sweep over message sizes.
 *
 * Deliberately plain socket usage (socket(AF_INET, SOCK_STREAM, 0), blocking
 * read/write, no SOCK_* flags, almost no options) so that it also runs under
 * rsocket's librspreload.so, which supports only a subset of the socket API.
 *
 *   net.c     connect/listen and full-length read/write
 *   server.c  the server (TCP pingpong echo, TCP stream sink, UDP echo)
 *   client.c  the measurements
 *   main.c    command line and output
 */
#ifndef VSOCKET_SWEEP_H
#define VSOCKET_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "toolutil.h"

enum { EXIT_OK = 0, EXIT_USAGE = 2, EXIT_CONNECT = 3 };

enum test { TEST_PINGPONG = 1, TEST_STREAM = 2 };

/* Control request, sent by the client at the start of every TCP connection:
 * REQ_WORDS little-endian u64: magic, test, size. For a stream, bits 8 and up of
 * the test word are a warm-up: that many 8-byte round trips (echoed by the
 * server) before the timed stream, e.g. so that a transport upgrade ends first. The server answers
 * with one u64 (REQ_MAGIC) before the test starts; after a stream test it sends back
 * STREAM_REPLY_WORDS u64: bytes received and nanoseconds from first byte to EOF. */
#define REQ_MAGIC 0x7673776565703031ULL /* "vsweep01" */
#define REQ_WORDS 3
#define STREAM_REPLY_WORDS 2
#define UDP_MAX_PAYLOAD 65507
#define REQ_TEST_MASK 0xffULL
#define MAX_STREAM_WARMUP 1000000ULL

/* Any family: sweep runs over IPv4 and IPv6 alike. */
static inline int resolve(const char *host, uint16_t port, int socktype, bool passive,
                          struct sockaddr_storage *ss, socklen_t *len)
{
    return tool_resolve("vsocket-sweep", host, port, AF_UNSPEC, socktype, passive, ss, len);
}
void set_nodelay(int fd);

struct server_opts {
    const char *bind_addr;
    uint16_t port;
    bool udp, once;
};
int server_main(const struct server_opts *o);

struct client_opts {
    const char *host;
    uint16_t port;
    enum test test;
    bool udp, json;
    uint64_t iters; /* 0: not given */
    double seconds; /* per size */
    uint64_t warmup;
    uint64_t stream_warmup; /* stream: 8-byte round trips before the timed stream */
    size_t *sizes;
    int nsizes;
};
int client_main(const struct client_opts *o);

#endif
