/* ring_image - what tests/security/attacker.py needs to forge a ring and a
 * message of this build, without copying its layouts into Python (they
 * changed twice under the attacker, whose forged rings and messages were
 * then refused for their version before the check under attack ran).
 *
 *   ring_image make WINDOW   a ring as the connector makes its own (memory/ring.c):
 *                            prints {"shm_magic", "shm_version", "span", "header"
 *                            (the header page, hex)}; the attacker copies the page
 *                            into a memfd of header + span bytes and seals it
 *   ring_image read FD N     FD (inherited) attached as its consumer: prints
 *                            {"head": bytes ever written, "first": the first N, hex} */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/ring.h"
#include "transport/shm/proto.h"

static void hex(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("%02x", p[i]);
}

static int make(uint64_t window)
{
    struct vs_ring r;
    int rc = vs_ring_create(&r, vs_ring_size_for(window, window, window), VS_RING_CONSUMER);
    if (rc < 0) {
        fprintf(stderr, "ring_image: vs_ring_create: %s\n", strerror(-rc));
        return 1;
    }
    size_t header = (size_t)(r.data - (unsigned char *)r.sh);
    printf("{\"shm_magic\":%u,\"shm_version\":%u,\"span\":%llu,\"header\":\"", VS_SHM_MAGIC,
           VS_SHM_VERSION, (unsigned long long)r.capacity);
    hex((const unsigned char *)r.sh, header);
    printf("\"}\n");
    vs_ring_destroy(&r);
    return 0;
}

static int read_ring(int fd, size_t n)
{
    struct vs_ring r;
    int rc = vs_ring_attach(&r, fd, VS_RING_CONSUMER);
    if (rc < 0) {
        fprintf(stderr, "ring_image: vs_ring_attach: %s\n", strerror(-rc));
        return 1;
    }
    unsigned char buf[4096];
    if (n > sizeof(buf))
        n = sizeof(buf);
    struct iovec iov = {buf, n};
    ssize_t got = vs_ring_read(&r, &iov, 1, VS_RING_PEEK);
    printf("{\"head\":%llu,\"first\":\"", (unsigned long long)vs_ring_head(&r));
    hex(buf, got > 0 ? (size_t)got : 0);
    printf("\"}\n");
    vs_ring_destroy(&r);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "make") == 0)
        return make(strtoull(argv[2], NULL, 0));
    if (argc == 4 && strcmp(argv[1], "read") == 0)
        return read_ring(atoi(argv[2]), strtoull(argv[3], NULL, 0));
    fprintf(stderr, "usage: ring_image make WINDOW | ring_image read FD N\n");
    return 2;
}
