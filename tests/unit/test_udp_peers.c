/* test_udp_peers.c - a UDP socket's table of peers
 * (transport/dgram/peers.c): finding, adding, removing against a model
 * under churn (linear probing's deletion), a full table, ids that die with
 * their peer, v4-mapped addresses as the IPv4 ones. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "transport/dgram/peers.h"

static struct sockaddr_storage v4(uint32_t ip, uint16_t port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *in = (void *)&ss;
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    in->sin_addr.s_addr = htonl(ip);
    return ss;
}

static struct sockaddr_storage mapped(uint32_t ip, uint16_t port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in6 *in6 = (void *)&ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    in6->sin6_addr.s6_addr[10] = in6->sin6_addr.s6_addr[11] = 0xff;
    uint32_t n = htonl(ip);
    memcpy(&in6->sin6_addr.s6_addr[12], &n, 4);
    return ss;
}

static void test_basics(void)
{
    uint32_t cap = 4;
    void *mem = malloc(vs_udp_peers_size(cap));
    struct vs_udp_peers *t = vs_udp_peers_init(mem, cap, 42);
    CHECK(t != NULL);
    CHECK(vs_udp_peers_init(mem, 0, 1) == NULL);
    CHECK(vs_udp_peers_init(mem, VS_UDP_PEERS_MAX + 1, 1) == NULL);
    t = vs_udp_peers_init(mem, cap, 42);

    struct sockaddr_storage a = v4(0x0a000001, 53), b = v4(0x0a000001, 54);
    CHECK_EQ(vs_udp_peers_find(t, &a), -1);
    int sa = vs_udp_peers_add(t, &a), sb = vs_udp_peers_add(t, &b);
    CHECK(sa >= 0 && sb >= 0 && sa != sb);
    CHECK_EQ(vs_udp_peers_add(t, &a), sa); /* already there */
    CHECK_EQ(vs_udp_peers_find(t, &a), sa);
    /* The same peer through a v4-mapped address. */
    struct sockaddr_storage am = mapped(0x0a000001, 53);
    CHECK_EQ(vs_udp_peers_find(t, &am), sa);
    CHECK_EQ(vs_udp_peers_count(t), 2);

    /* Ids: valid while the peer lives, dead after, even once the slot is
     * reused by another peer. */
    uint32_t id = vs_udp_peers_id(t, sa);
    CHECK_EQ(vs_udp_peers_by_id(t, id), sa);
    CHECK_EQ(vs_udp_peers_by_id(t, id ^ 1), -1);
    CHECK_EQ(vs_udp_peers_by_id(t, (cap + 3) << 8), -1);
    vs_udp_peers_remove(t, sa);
    CHECK_EQ(vs_udp_peers_by_id(t, id), -1);
    CHECK_EQ(vs_udp_peers_find(t, &a), -1);
    CHECK(vs_udp_peers_at(t, sa) == NULL);
    CHECK_EQ(vs_udp_peers_find(t, &b), sb);

    /* Full. */
    struct sockaddr_storage unspec = {.ss_family = AF_UNSPEC};
    CHECK_EQ(vs_udp_peers_add(t, &unspec), -EAFNOSUPPORT);
    CHECK_EQ(vs_udp_peers_find(t, &unspec), -1);
    int s[3];
    for (uint16_t i = 0; i < 3; i++) {
        struct sockaddr_storage x = v4(0x0a000002, (uint16_t)(100 + i));
        s[i] = vs_udp_peers_add(t, &x);
        CHECK(s[i] >= 0);
    }
    struct sockaddr_storage one_more = v4(0x0a000003, 1);
    CHECK_EQ(vs_udp_peers_add(t, &one_more), -ENOSPC);
    CHECK_EQ(vs_udp_peers_count(t), cap);
    int used = 0;
    for (int k = vs_udp_peers_next(t, 0); k >= 0; k = vs_udp_peers_next(t, k + 1))
        used++;
    CHECK_EQ(used, (int)cap);
    free(mem);
}

/* Random adds and removes against a plain array: every present key is
 * found at its slot, every absent one is not. */
static void test_churn(void)
{
    enum { CAP = 64, KEYS = 200, STEPS = 200000 };
    void *mem = malloc(vs_udp_peers_size(CAP));
    struct vs_udp_peers *t = vs_udp_peers_init(mem, CAP, 7);
    int where[KEYS];
    for (int k = 0; k < KEYS; k++)
        where[k] = -1;
    unsigned rnd = 1, present = 0;
    bool ok = true;
    for (int i = 0; i < STEPS && ok; i++) {
        rnd = rnd * 1103515245u + 12345u;
        int k = (int)((rnd >> 8) % KEYS);
        /* Few ports on few addresses: many collide in the index. */
        struct sockaddr_storage a = v4(0x0a000000u + (uint32_t)(k % 7), (uint16_t)(k / 7));
        if (where[k] >= 0 && (rnd & 1)) {
            vs_udp_peers_remove(t, where[k]);
            where[k] = -1;
            present--;
        } else if (where[k] < 0) {
            int s = vs_udp_peers_add(t, &a);
            if (present == CAP) {
                ok = s == -ENOSPC;
            } else {
                ok = s >= 0;
                where[k] = s;
                present++;
            }
        }
        if (i % 97 == 0)
            for (int j = 0; j < KEYS && ok; j++) {
                struct sockaddr_storage b = v4(0x0a000000u + (uint32_t)(j % 7), (uint16_t)(j / 7));
                ok = vs_udp_peers_find(t, &b) == where[j];
            }
        ok = ok && vs_udp_peers_count(t) == present;
    }
    CHECK(ok);
    free(mem);
}

int main(void)
{
    test_basics();
    test_churn();
    return check_finish("test_udp_peers");
}
