/* test_udp_kcap.c - how many datagrams the running kernel keeps for a UDP
 * socket nobody reads, against what vsocket's inbox keeps at the same
 * SO_RCVBUF (docs/design/udp.md §5.3: each datagram charged its length +
 * UDP_CHARGE_OVERHEAD). The inbox must never keep fewer than the kernel, or
 * a program that reads late would lose datagrams under vsocket that the
 * kernel would have kept. Measured here, on the kernel that runs the tests,
 * because the kernel's charge (an skb's truesize) differs between kernels.
 *
 * Loopback only; the sender never blocks (UDP drops at a full receiver). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

/* The design's charge per datagram beyond its bytes (udp.md §5.3): the
 * implementation's inbox uses the same rule. */
#define UDP_CHARGE_OVERHEAD 768
/* No kernel charges less than this per datagram (an sk_buff alone is about
 * 230 bytes): it bounds how many sends it takes to fill a socket. */
#define MIN_KERNEL_CHARGE 256

struct probe {
    int rx, tx;
    int rcvbuf; /* effective, as getsockopt reports it */
};

static int probe_open(struct probe *p, int want_rcvbuf)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a), ilen = sizeof(int);
    p->rx = socket(AF_INET, SOCK_DGRAM, 0);
    p->tx = socket(AF_INET, SOCK_DGRAM, 0);
    if (p->rx < 0 || p->tx < 0)
        return -1;
    if (want_rcvbuf &&
        setsockopt(p->rx, SOL_SOCKET, SO_RCVBUF, &want_rcvbuf, sizeof(want_rcvbuf)) != 0)
        return -1;
    if (bind(p->rx, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(p->rx, (struct sockaddr *)&a, &alen) != 0 ||
        connect(p->tx, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockopt(p->rx, SOL_SOCKET, SO_RCVBUF, &p->rcvbuf, &ilen) != 0)
        return -1;
    return 0;
}

static void probe_close(struct probe *p)
{
    close(p->rx);
    close(p->tx);
}

/* Sends enough datagrams of LEN bytes to overfill the receiver, then counts
 * those it kept. -1 if the socket could not be filled (the count would say
 * nothing). */
static long kernel_keeps(struct probe *p, size_t len, char *buf)
{
    size_t charge = len > MIN_KERNEL_CHARGE ? len : MIN_KERNEL_CHARGE;
    long sends = 2 * (long)((size_t)p->rcvbuf / charge) + 64;
    for (long i = 0; i < sends; i++) {
        /* A full receiver drops; the send itself succeeds. ENOBUFS is the
         * sender's own buffer: let it drain (the sends have a margin). */
        if (send(p->tx, buf, len, 0) < 0 && errno == ENOBUFS)
            usleep(1000);
    }
    long kept = 0;
    while (recv(p->rx, buf, len, MSG_DONTWAIT) >= 0)
        kept++;
    if (errno != EAGAIN || kept >= sends)
        return -1;
    return kept;
}

static long inbox_keeps(int rcvbuf, size_t len)
{
    return (long)((size_t)rcvbuf / (len + UDP_CHARGE_OVERHEAD));
}

static void check_size(int want_rcvbuf, size_t len)
{
    static char buf[65507];
    struct probe p;
    if (probe_open(&p, want_rcvbuf) != 0) {
        fprintf(stderr, "cannot open the probe's sockets: %s\n", strerror(errno));
        CHECK(0);
        return;
    }
    long kernel = kernel_keeps(&p, len, buf);
    long inbox = inbox_keeps(p.rcvbuf, len);
    printf("SO_RCVBUF %d, %zu B: kernel keeps %ld, inbox keeps %ld\n", p.rcvbuf, len, kernel,
           inbox);
    CHECK(kernel > 0);
    CHECK(inbox >= kernel);
    probe_close(&p);
}

int main(void)
{
    static const size_t sizes[] = {1, 64, 512, 1400, 4096, 8972, 65507};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        check_size(0, sizes[i]);
    /* A program that asks for more: the kernel caps it at rmem_max (and
     * doubles it); whatever it grants, the inbox gets the same budget. */
    check_size(4 << 20, 64);
    check_size(4 << 20, 1400);
    return check_finish("test_udp_kcap");
}
