/* test_udp_proto.c - the wire formats of UDP over UD and shm
 * (transport/dgram/proto.c, docs/design/udp.md §3.3, §3.4, §5.1): every
 * message round-trips, and each rule of each parser refuses what breaks it. */
#include <arpa/inet.h>
#include <string.h>

#include "check.h"
#include "transport/dgram/proto.h"

static struct sockaddr_storage addr(const char *ip, int port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (strchr(ip, ':')) {
        struct sockaddr_in6 *in6 = (void *)&ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        inet_pton(AF_INET6, ip, &in6->sin6_addr);
    } else {
        struct sockaddr_in *in = (void *)&ss;
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, ip, &in->sin_addr);
    }
    return ss;
}

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    size_t n = a->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    return a->ss_family == b->ss_family && memcmp(a, b, n) == 0;
}

static void test_ctl(void)
{
    struct vs_udp_ctl m = {.type = VS_UDP_CTL_CHALLENGE, .slot = 7}, got;
    memset(m.echo, 0xab, sizeof(m.echo));
    memset(m.body, 0xcd, sizeof(m.body));
    uint8_t buf[VS_UDP_CHALLENGE_LEN];
    CHECK_EQ(vs_udp_ctl_encode(&m, buf), VS_UDP_CHALLENGE_LEN);
    CHECK_EQ(vs_udp_ctl_parse(buf, sizeof(buf), &got), VS_UDP_OK);
    CHECK(got.type == m.type && got.slot == 7 && memcmp(got.echo, m.echo, 16) == 0 &&
          memcmp(got.body, m.body, 16) == 0);
    /* A RETRACT is shorter. */
    m.type = VS_UDP_CTL_RETRACT;
    CHECK_EQ(vs_udp_ctl_encode(&m, buf), VS_UDP_RETRACT_LEN);
    CHECK_EQ(vs_udp_ctl_parse(buf, VS_UDP_RETRACT_LEN, &got), VS_UDP_OK);
    m.type = 9;
    CHECK_EQ(vs_udp_ctl_encode(&m, buf), 0);

    /* The program's datagrams: short, or without the magic (a DNS query). */
    const uint8_t dns[] = {0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'w', 'w', 'w'};
    CHECK_EQ(vs_udp_ctl_parse(dns, sizeof(dns), &got), VS_UDP_NOT_OURS);
    CHECK_EQ(vs_udp_ctl_parse(buf, VS_UDP_CTL_HEAD - 1, &got), VS_UDP_NOT_OURS);
    CHECK_EQ(vs_udp_ctl_parse(buf, 0, &got), VS_UDP_NOT_OURS);

    /* Ours but wrong: each field, the length, the reserved tail. */
    m.type = VS_UDP_CTL_CHALLENGE;
    vs_udp_ctl_encode(&m, buf);
    uint8_t bad[VS_UDP_CHALLENGE_LEN + 1];
    memcpy(bad, buf, sizeof(buf));
    bad[8] = 2;
    CHECK_EQ(vs_udp_ctl_parse(bad, VS_UDP_CHALLENGE_LEN, &got), VS_UDP_OTHER_VERSION);
    memcpy(bad, buf, sizeof(buf));
    bad[9] = 3;
    CHECK_EQ(vs_udp_ctl_parse(bad, VS_UDP_CHALLENGE_LEN, &got), VS_UDP_MALFORMED);
    memcpy(bad, buf, sizeof(buf));
    bad[10] = VS_UDP_RETRACT_LEN;
    CHECK_EQ(vs_udp_ctl_parse(bad, VS_UDP_CHALLENGE_LEN, &got), VS_UDP_MALFORMED);
    CHECK_EQ(vs_udp_ctl_parse(buf, VS_UDP_CHALLENGE_LEN - 1, &got), VS_UDP_MALFORMED);
    memcpy(bad, buf, sizeof(buf));
    bad[VS_UDP_CHALLENGE_LEN] = 0;
    CHECK_EQ(vs_udp_ctl_parse(bad, VS_UDP_CHALLENGE_LEN + 1, &got), VS_UDP_MALFORMED);
    bad[63] = 1;
    CHECK_EQ(vs_udp_ctl_parse(bad, VS_UDP_CHALLENGE_LEN, &got), VS_UDP_MALFORMED);
}

static struct vs_udp_offer offer(const char *from, const char *to)
{
    struct vs_udp_offer m = {.flags = 0};
    m.from = addr(from, 40000);
    m.to = addr(to, 53);
    memset(m.ud.gid, 0x11, sizeof(m.ud.gid));
    m.ud.qpn = 0x123456;
    m.ud.qkey = 0x7654321;
    m.ud.slot = 3;
    memset(m.nonce, 0x22, sizeof(m.nonce));
    return m;
}

static void test_offer(void)
{
    struct vs_udp_offer m = offer("10.0.0.1", "10.0.0.2"), got;
    struct sockaddr_storage bound = addr("10.0.0.2", 53), any4 = addr("0.0.0.0", 53),
                            any6 = addr("::", 53), other = addr("10.0.0.3", 53),
                            port = addr("10.0.0.2", 54);
    uint8_t buf[VS_UDP_OFFER_LEN];
    CHECK_EQ(vs_udp_offer_encode(&m, buf), VS_UDP_OFFER_LEN);
    CHECK_EQ(vs_udp_offer_parse(buf, sizeof(buf), &bound, &got), VS_UDP_OK);
    CHECK(same_addr(&got.from, &m.from) && same_addr(&got.to, &m.to));
    CHECK(got.ud.qpn == m.ud.qpn && got.ud.qkey == m.ud.qkey && got.ud.slot == 3);
    CHECK(memcmp(got.nonce, m.nonce, 16) == 0 && memcmp(got.ud.gid, m.ud.gid, 16) == 0);
    /* Wildcards take any address on the port; another socket's does not. */
    CHECK_EQ(vs_udp_offer_parse(buf, sizeof(buf), &any4, &got), VS_UDP_OK);
    CHECK_EQ(vs_udp_offer_parse(buf, sizeof(buf), &any6, &got), VS_UDP_OK);
    CHECK_EQ(vs_udp_offer_parse(buf, sizeof(buf), &other, &got), VS_UDP_MALFORMED);
    CHECK_EQ(vs_udp_offer_parse(buf, sizeof(buf), &port, &got), VS_UDP_MALFORMED);

    /* IPv6 end to end; an IPv4 wildcard does not take it. */
    struct vs_udp_offer m6 = offer("fd00::1", "fd00::2");
    struct sockaddr_storage bound6 = addr("fd00::2", 53);
    CHECK_EQ(vs_udp_offer_encode(&m6, buf), VS_UDP_OFFER_LEN);
    CHECK_EQ(vs_udp_offer_parse(buf, sizeof(buf), &bound6, &got), VS_UDP_OK);
    CHECK(same_addr(&got.to, &m6.to));
    CHECK_EQ(vs_udp_offer_parse(buf, sizeof(buf), &any4, &got), VS_UDP_MALFORMED);
    /* Mixed families cannot be written. */
    struct vs_udp_offer mixed = offer("10.0.0.1", "fd00::2");
    CHECK_EQ(vs_udp_offer_encode(&mixed, buf), 0);

    /* Each rule: length, magic, version, reserved, family, port, mapping,
     * QPN range, Q_Key's top bit. */
    uint8_t ok[VS_UDP_OFFER_LEN], bad[VS_UDP_OFFER_LEN];
    vs_udp_offer_encode(&m, ok);
    CHECK_EQ(vs_udp_offer_parse(ok, VS_UDP_OFFER_LEN - 1, &bound, &got), VS_UDP_MALFORMED);
    CHECK_EQ(vs_udp_offer_parse(ok, 7, &bound, &got), VS_UDP_NOT_OURS);
    struct {
        size_t at;
        uint8_t value;
        enum vs_udp_verdict want;
    } cases[] = {
        {0, 'X', VS_UDP_NOT_OURS},    {4, 2, VS_UDP_OTHER_VERSION},
        {6, 1, VS_UDP_MALFORMED},     {8, 10, VS_UDP_MALFORMED}, /* IPv6 family, mapped */
        {10, 0, VS_UDP_MALFORMED},                               /* port 0 (with 11) */
        {20, 1, VS_UDP_MALFORMED},                               /* not v4-mapped */
        {28, 3, VS_UDP_MALFORMED},                               /* unknown family */
        {67, 0x01, VS_UDP_MALFORMED},                            /* QPN's 25th bit */
        {71, 0x80, VS_UDP_MALFORMED},                            /* Q_Key's top bit */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memcpy(bad, ok, sizeof(ok));
        bad[cases[i].at] = cases[i].value;
        if (cases[i].at == 10)
            bad[11] = 0;
        enum vs_udp_verdict v = vs_udp_offer_parse(bad, sizeof(bad), &bound, &got);
        if (v != cases[i].want)
            fprintf(stderr, "offer case at byte %zu: %d\n", cases[i].at, v);
        CHECK_EQ(v, cases[i].want);
    }
    /* QPs 0 and 1 are special. */
    m.ud.qpn = 1;
    vs_udp_offer_encode(&m, bad);
    CHECK_EQ(vs_udp_offer_parse(bad, sizeof(bad), &bound, &got), VS_UDP_MALFORMED);
}

static void test_answer(void)
{
    struct vs_udp_answer m = {.status = VS_UDP_ANSWER_OK}, got;
    memset(m.ud.gid, 0x33, 16);
    m.ud.qpn = 77;
    m.ud.qkey = 5;
    m.ud.slot = 9;
    memset(m.nonce, 0x44, 16);
    uint8_t buf[VS_UDP_ANSWER_LEN];
    CHECK_EQ(vs_udp_answer_encode(&m, buf), VS_UDP_ANSWER_LEN);
    CHECK_EQ(vs_udp_answer_parse(buf, sizeof(buf), &got), VS_UDP_OK);
    CHECK(got.status == 0 && got.ud.qpn == 77 && got.ud.qkey == 5 && got.ud.slot == 9);
    CHECK(memcmp(got.nonce, m.nonce, 16) == 0);
    CHECK_EQ(vs_udp_answer_parse(buf, sizeof(buf) - 1, &got), VS_UDP_MALFORMED);
    /* A refusal needs no addressing; an acceptance needs a valid one. */
    struct vs_udp_answer busy = {.status = VS_UDP_ANSWER_BUSY};
    vs_udp_answer_encode(&busy, buf);
    CHECK_EQ(vs_udp_answer_parse(buf, sizeof(buf), &got), VS_UDP_OK);
    CHECK_EQ(got.status, VS_UDP_ANSWER_BUSY);
    busy.status = VS_UDP_ANSWER_OK;
    vs_udp_answer_encode(&busy, buf);
    CHECK_EQ(vs_udp_answer_parse(buf, sizeof(buf), &got), VS_UDP_MALFORMED);
    m.status = 4;
    vs_udp_answer_encode(&m, buf);
    CHECK_EQ(vs_udp_answer_parse(buf, sizeof(buf), &got), VS_UDP_MALFORMED);
    buf[4] = 9;
    CHECK_EQ(vs_udp_answer_parse(buf, sizeof(buf), &got), VS_UDP_OTHER_VERSION);
}

static void test_head(void)
{
    enum { MAX = 992 };
    uint8_t buf[VS_UDP_FRAG_HEAD_LEN + MAX];
    struct vs_udp_head h = {.type = VS_UDP_MSG_DATA, .slot = 5 << 8 | 1, .seq = 42, .value = 100},
                       got;
    memset(h.token, 0x55, 16);
    size_t at;
    CHECK_EQ(vs_udp_head_encode(&h, buf), VS_UDP_HEAD_LEN);
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_HEAD_LEN + 100, MAX, &got, &at), VS_UDP_OK);
    CHECK(got.slot == h.slot && got.seq == 42 && got.value == 100 && at == VS_UDP_HEAD_LEN);
    CHECK(vs_udp_token_equal(got.token, h.token));
    /* The stated length is the message's, and fits a message. */
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_HEAD_LEN + 99, MAX, &got, &at), VS_UDP_MALFORMED);
    h.value = MAX + 1;
    vs_udp_head_encode(&h, buf);
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_HEAD_LEN + MAX + 1, MAX, &got, &at), VS_UDP_MALFORMED);
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_HEAD_LEN - 1, MAX, &got, &at), VS_UDP_MALFORMED);
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_HEAD_LEN, 0, &got, &at), VS_UDP_MALFORMED);

    /* A 2,000-byte datagram in 3 fragments of 992, 992, 16. */
    struct vs_udp_head f = {.type = VS_UDP_MSG_FRAG, .frag_count = 3, .frag_total = 2000};
    for (uint16_t i = 0; i < 3; i++) {
        f.frag_index = i;
        CHECK_EQ(vs_udp_head_encode(&f, buf), VS_UDP_FRAG_HEAD_LEN);
        size_t part = i < 2 ? MAX : 2000 - 2 * MAX;
        CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_FRAG_HEAD_LEN + part, MAX, &got, &at), VS_UDP_OK);
        CHECK(at == VS_UDP_FRAG_HEAD_LEN && got.frag_index == i);
        CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_FRAG_HEAD_LEN + part - 1, MAX, &got, &at),
                 VS_UDP_MALFORMED);
    }
    f.frag_index = 3; /* past the count */
    vs_udp_head_encode(&f, buf);
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_FRAG_HEAD_LEN + 16, MAX, &got, &at), VS_UDP_MALFORMED);
    f.frag_index = 0;
    f.frag_count = 4; /* not the count the total needs */
    vs_udp_head_encode(&f, buf);
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_FRAG_HEAD_LEN + MAX, MAX, &got, &at), VS_UDP_MALFORMED);
    f.frag_count = 1;
    f.frag_total = 500; /* fits one message: not a fragment */
    vs_udp_head_encode(&f, buf);
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_FRAG_HEAD_LEN + 500, MAX, &got, &at), VS_UDP_MALFORMED);
    f.frag_total = VS_UDP_DATAGRAM_MAX + 1;
    f.frag_count = (uint16_t)((f.frag_total + MAX - 1) / MAX);
    vs_udp_head_encode(&f, buf);
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_FRAG_HEAD_LEN + MAX, MAX, &got, &at), VS_UDP_MALFORMED);

    /* Bodiless messages, flags, version, unknown types. */
    struct vs_udp_head c = {.type = VS_UDP_MSG_CREDIT, .value = 64};
    vs_udp_head_encode(&c, buf);
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_HEAD_LEN, MAX, &got, &at), VS_UDP_OK);
    CHECK_EQ(got.value, 64);
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_HEAD_LEN + 1, MAX, &got, &at), VS_UDP_MALFORMED);
    c.type = VS_UDP_MSG_CONFIRM;
    vs_udp_head_encode(&c, buf);
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_HEAD_LEN, MAX, &got, &at), VS_UDP_MALFORMED);
    c.value = 0;
    vs_udp_head_encode(&c, buf);
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_HEAD_LEN, MAX, &got, &at), VS_UDP_OK);
    buf[2] = 1;
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_HEAD_LEN, MAX, &got, &at), VS_UDP_MALFORMED);
    buf[2] = 0;
    buf[1] = 6;
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_HEAD_LEN, MAX, &got, &at), VS_UDP_MALFORMED);
    buf[0] = 2;
    CHECK_EQ(vs_udp_head_parse(buf, VS_UDP_HEAD_LEN, MAX, &got, &at), VS_UDP_OTHER_VERSION);
    c.type = 0;
    CHECK_EQ(vs_udp_head_encode(&c, buf), 0);

    uint8_t a[16] = {0}, b[16] = {0};
    CHECK(vs_udp_token_equal(a, b));
    b[15] = 1;
    CHECK(!vs_udp_token_equal(a, b));
}

int main(void)
{
    test_ctl();
    test_offer();
    test_answer();
    test_head();
    return check_finish("test_udp_proto");
}
