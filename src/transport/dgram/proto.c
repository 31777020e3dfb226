/* proto.c - the wire formats of UDP over UD and shm (proto.h). */
#include "transport/dgram/proto.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

/* ------------------------------------------------------------- primitives */

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    uint8_t any = 0;
    for (size_t i = 0; i < n; i++)
        any |= p[i];
    return any == 0;
}

bool vs_udp_addr_key(const struct sockaddr_storage *ss, uint8_t out[16], uint16_t *port)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)ss;
        memset(out, 0, 10);
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &in->sin_addr, 4);
        *port = ntohs(in->sin_port);
        return true;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)ss;
        memcpy(out, &in6->sin6_addr, 16);
        *port = ntohs(in6->sin6_port);
        return true;
    }
    return false;
}

static bool v4_mapped(const uint8_t a[16])
{
    return all_zero(a, 10) && a[10] == 0xff && a[11] == 0xff;
}

static bool put_addr(uint8_t *p, const struct sockaddr_storage *ss)
{
    uint16_t port;
    if (!vs_udp_addr_key(ss, p + 4, &port))
        return false;
    put16(p, ss->ss_family == AF_INET ? 2 : 10);
    put16(p + 2, port);
    return true;
}

/* A peer's address: a known family, a port, and for IPv4 the mapped form. */
static bool get_addr(const uint8_t *p, struct sockaddr_storage *ss)
{
    uint16_t family = get16(p), port = get16(p + 2);
    const uint8_t *a = p + 4;
    memset(ss, 0, sizeof(*ss));
    if (port == 0)
        return false;
    if (family == 2 && v4_mapped(a)) {
        struct sockaddr_in *in = (void *)ss;
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
        memcpy(&in->sin_addr, a + 12, 4);
        return true;
    }
    if (family == 10 && !v4_mapped(a)) {
        struct sockaddr_in6 *in6 = (void *)ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        memcpy(&in6->sin6_addr, a, 16);
        return true;
    }
    return false;
}

bool vs_udp_token_equal(const uint8_t a[VS_UDP_NONCE], const uint8_t b[VS_UDP_NONCE])
{
    uint8_t diff = 0;
    for (int i = 0; i < VS_UDP_NONCE; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

/* ----------------------------------------------------------------- control */

static size_t ctl_len(uint8_t type)
{
    return type == VS_UDP_CTL_CHALLENGE ? VS_UDP_CHALLENGE_LEN
           : type == VS_UDP_CTL_RETRACT ? VS_UDP_RETRACT_LEN
                                        : 0;
}

size_t vs_udp_ctl_encode(const struct vs_udp_ctl *m, uint8_t *buf)
{
    size_t len = ctl_len(m->type);
    if (!len)
        return 0;
    memset(buf, 0, len);
    memcpy(buf, VS_UDP_CTL_MAGIC, 8); /* with the string's zero */
    buf[8] = VS_UDP_VERSION;
    buf[9] = m->type;
    put16(buf + 10, (uint16_t)len);
    put32(buf + 12, m->slot);
    memcpy(buf + 16, m->echo, VS_UDP_NONCE);
    memcpy(buf + 32, m->body, VS_UDP_NONCE);
    return len;
}

enum vs_udp_verdict vs_udp_ctl_parse(const uint8_t *buf, size_t len, struct vs_udp_ctl *out)
{
    /* The magic alone makes it ours: consumed, never the program's. */
    if (len < VS_UDP_CTL_HEAD || memcmp(buf, VS_UDP_CTL_MAGIC, 8) != 0)
        return VS_UDP_NOT_OURS;
    if (buf[8] != VS_UDP_VERSION)
        return VS_UDP_OTHER_VERSION;
    size_t want = ctl_len(buf[9]);
    if (!want || get16(buf + 10) != want || len != want)
        return VS_UDP_MALFORMED;
    if (want > 48 && !all_zero(buf + 48, want - 48))
        return VS_UDP_MALFORMED;
    out->type = buf[9];
    out->slot = get32(buf + 12);
    memcpy(out->echo, buf + 16, VS_UDP_NONCE);
    memcpy(out->body, buf + 32, VS_UDP_NONCE);
    return VS_UDP_OK;
}

/* -------------------------------------------------------------- rendezvous */

static void put_ud(uint8_t *p, const struct vs_udp_ud_addr *ud)
{
    memcpy(p, ud->gid, VS_UDP_GID);
    put32(p + 16, ud->qpn);
    put32(p + 20, ud->qkey);
    put32(p + 24, ud->slot);
}

/* QPs 0 and 1 are the special ones; a Q_Key with its top bit set is the
 * kernel's privileged range. */
static bool get_ud(const uint8_t *p, struct vs_udp_ud_addr *ud)
{
    memcpy(ud->gid, p, VS_UDP_GID);
    ud->qpn = get32(p + 16);
    ud->qkey = get32(p + 20);
    ud->slot = get32(p + 24);
    return ud->qpn >= 2 && ud->qpn < (1u << 24) && !(ud->qkey & 0x80000000u);
}

static void put_rv_head(uint8_t *buf, uint8_t byte5)
{
    memcpy(buf, VS_UDP_RV_MAGIC, 4);
    buf[4] = VS_UDP_VERSION;
    buf[5] = byte5;
    buf[6] = buf[7] = 0;
}

/* The first 8 bytes, which every version keeps. */
static enum vs_udp_verdict rv_head(const uint8_t *buf, size_t len, size_t want)
{
    if (len < 8 || memcmp(buf, VS_UDP_RV_MAGIC, 4) != 0)
        return VS_UDP_NOT_OURS;
    if (buf[4] != VS_UDP_VERSION)
        return VS_UDP_OTHER_VERSION;
    if (len != want || buf[6] || buf[7])
        return VS_UDP_MALFORMED;
    return VS_UDP_OK;
}

size_t vs_udp_offer_encode(const struct vs_udp_offer *m, uint8_t *buf)
{
    put_rv_head(buf, m->flags);
    if (m->from.ss_family != m->to.ss_family || !put_addr(buf + 8, &m->from) ||
        !put_addr(buf + 28, &m->to))
        return 0;
    put_ud(buf + 48, &m->ud);
    memcpy(buf + 76, m->nonce, VS_UDP_NONCE);
    return VS_UDP_OFFER_LEN;
}

/* Whether TO names the socket bound at BOUND: the same port, and the same
 * address unless BOUND is a wildcard (:: takes any, 0.0.0.0 any IPv4). */
static bool names_bound(const struct sockaddr_storage *to, const struct sockaddr_storage *bound)
{
    uint8_t t[16], b[16];
    uint16_t tport, bport;
    if (!vs_udp_addr_key(to, t, &tport) || !vs_udp_addr_key(bound, b, &bport) || tport != bport)
        return false;
    if (all_zero(b, 16))
        return true;
    if (v4_mapped(b) && all_zero(b + 12, 4))
        return v4_mapped(t);
    return memcmp(t, b, 16) == 0;
}

enum vs_udp_verdict vs_udp_offer_parse(const uint8_t *buf, size_t len,
                                       const struct sockaddr_storage *bound,
                                       struct vs_udp_offer *out)
{
    enum vs_udp_verdict v = rv_head(buf, len, VS_UDP_OFFER_LEN);
    if (v != VS_UDP_OK)
        return v;
    struct vs_udp_offer m;
    m.flags = buf[5];
    if (!get_addr(buf + 8, &m.from) || !get_addr(buf + 28, &m.to) ||
        m.from.ss_family != m.to.ss_family || !names_bound(&m.to, bound) ||
        !get_ud(buf + 48, &m.ud))
        return VS_UDP_MALFORMED;
    memcpy(m.nonce, buf + 76, VS_UDP_NONCE);
    *out = m;
    return VS_UDP_OK;
}

size_t vs_udp_answer_encode(const struct vs_udp_answer *m, uint8_t *buf)
{
    put_rv_head(buf, m->status);
    put_ud(buf + 8, &m->ud);
    memcpy(buf + 36, m->nonce, VS_UDP_NONCE);
    return VS_UDP_ANSWER_LEN;
}

enum vs_udp_verdict vs_udp_answer_parse(const uint8_t *buf, size_t len, struct vs_udp_answer *out)
{
    enum vs_udp_verdict v = rv_head(buf, len, VS_UDP_ANSWER_LEN);
    if (v != VS_UDP_OK)
        return v;
    struct vs_udp_answer m;
    m.status = buf[5];
    /* A refusal's addressing is not used: only an acceptance's is checked. */
    bool ud_ok = get_ud(buf + 8, &m.ud);
    if (m.status > VS_UDP_ANSWER_VERSION || (m.status == VS_UDP_ANSWER_OK && !ud_ok))
        return VS_UDP_MALFORMED;
    memcpy(m.nonce, buf + 36, VS_UDP_NONCE);
    *out = m;
    return VS_UDP_OK;
}

/* ---------------------------------------------------------------- UD head */

size_t vs_udp_hs_encode(const struct vs_udp_hs *m, uint8_t *buf)
{
    memset(buf, 0, VS_UDP_HS_LEN);
    memcpy(buf, VS_UDP_HS_MAGIC, 4);
    buf[4] = VS_UDP_VERSION;
    buf[5] = m->type;
    buf[6] = m->status;
    memcpy(buf + 8, &m->fd, 8);
    if (m->type == VS_UDP_HS_HELLO &&
        (!put_addr(buf + 16, &m->from) || !put_addr(buf + 36, &m->to)))
        return 0;
    return VS_UDP_HS_LEN;
}

enum vs_udp_verdict vs_udp_hs_parse(const uint8_t *buf, size_t len,
                                    const struct sockaddr_storage *bound, struct vs_udp_hs *out)
{
    if (len < 8 || memcmp(buf, VS_UDP_HS_MAGIC, 4) != 0)
        return VS_UDP_NOT_OURS;
    if (buf[4] != VS_UDP_VERSION)
        return VS_UDP_OTHER_VERSION;
    if (len != VS_UDP_HS_LEN || buf[7] || buf[5] < VS_UDP_HS_HELLO || buf[5] > VS_UDP_HS_DECLINE)
        return VS_UDP_MALFORMED;
    struct vs_udp_hs m;
    memset(&m, 0, sizeof(m));
    m.type = buf[5];
    m.status = buf[6];
    memcpy(&m.fd, buf + 8, 8);
    if (m.type == VS_UDP_HS_HELLO) {
        if (!get_addr(buf + 16, &m.from) || !get_addr(buf + 36, &m.to) ||
            !names_bound(&m.to, bound))
            return VS_UDP_MALFORMED;
    } else if (!all_zero(buf + 16, 40)) {
        return VS_UDP_MALFORMED;
    }
    *out = m;
    return VS_UDP_OK;
}

size_t vs_udp_head_encode(const struct vs_udp_head *h, uint8_t *buf)
{
    if (h->type < VS_UDP_MSG_DATA || h->type > VS_UDP_MSG_RETRACT)
        return 0;
    buf[0] = VS_UDP_VERSION;
    buf[1] = h->type;
    put16(buf + 2, 0);
    put32(buf + 4, h->slot);
    put32(buf + 8, h->seq);
    put32(buf + 12, h->value);
    memcpy(buf + 16, h->token, VS_UDP_NONCE);
    if (h->type != VS_UDP_MSG_FRAG)
        return VS_UDP_HEAD_LEN;
    put16(buf + 32, h->frag_index);
    put16(buf + 34, h->frag_count);
    put32(buf + 36, h->frag_total);
    return VS_UDP_FRAG_HEAD_LEN;
}

/* A fragment's place in its datagram: every fragment full but the last,
 * and exactly as many as the total needs. Its payload: LEN bytes. */
static bool frag_fits(const struct vs_udp_head *h, size_t len, size_t payload_max)
{
    size_t total = h->frag_total;
    if (total <= payload_max || total > VS_UDP_DATAGRAM_MAX)
        return false; /* one message would have carried it */
    size_t count = (total + payload_max - 1) / payload_max;
    if (h->frag_count != count || h->frag_index >= count)
        return false;
    size_t want =
        (size_t)h->frag_index + 1 < count ? payload_max : total - (count - 1) * payload_max;
    return len == want;
}

enum vs_udp_verdict vs_udp_head_parse(const uint8_t *buf, size_t len, size_t payload_max,
                                      struct vs_udp_head *out, size_t *payload)
{
    if (len < VS_UDP_HEAD_LEN || payload_max == 0)
        return VS_UDP_MALFORMED;
    if (buf[0] != VS_UDP_VERSION)
        return VS_UDP_OTHER_VERSION;
    struct vs_udp_head h = {.type = buf[1]};
    h.slot = get32(buf + 4);
    h.seq = get32(buf + 8);
    h.value = get32(buf + 12);
    memcpy(h.token, buf + 16, VS_UDP_NONCE);
    if (get16(buf + 2) != 0) /* no flag is defined yet */
        return VS_UDP_MALFORMED;
    size_t body = len - VS_UDP_HEAD_LEN;
    switch (h.type) {
    case VS_UDP_MSG_DATA:
        if (h.value != body || body > payload_max || body > VS_UDP_DATAGRAM_MAX)
            return VS_UDP_MALFORMED;
        break;
    case VS_UDP_MSG_FRAG:
        if (len < VS_UDP_FRAG_HEAD_LEN)
            return VS_UDP_MALFORMED;
        h.frag_index = get16(buf + 32);
        h.frag_count = get16(buf + 34);
        h.frag_total = get32(buf + 36);
        body = len - VS_UDP_FRAG_HEAD_LEN;
        if (!frag_fits(&h, body, payload_max))
            return VS_UDP_MALFORMED;
        break;
    case VS_UDP_MSG_CREDIT:
        if (body)
            return VS_UDP_MALFORMED;
        break;
    case VS_UDP_MSG_CONFIRM:
    case VS_UDP_MSG_RETRACT:
        if (body || h.value)
            return VS_UDP_MALFORMED;
        break;
    default:
        return VS_UDP_MALFORMED;
    }
    *out = h;
    *payload = len - body;
    return VS_UDP_OK;
}
