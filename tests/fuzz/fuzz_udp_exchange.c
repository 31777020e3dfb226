/* fuzz_udp_exchange.c - libFuzzer target: the parsers of UDP over UD and
 * shm (transport/dgram/proto.c) on a hostile peer's bytes: control
 * datagrams on the program's kernel socket, the rendezvous's OFFER and
 * ANSWER, the shm set-up's HELLO/ACCEPT/READY/DECLINE, the UD message
 * header.
 *
 * The input's first byte picks the parser (and, for the header, the
 * payload size of a message); for OFFER and the shm set-up the next 20
 * bytes are the responder socket's bound address; the rest is the message, copied to a
 * buffer of exactly its size (ASan sees any read past it). Checks:
 *   - no ASan or UBSan report;
 *   - a datagram of the program's (no magic, or shorter than the head) is
 *     never taken for a control datagram, and one with the magic always is;
 *   - whatever a parser accepts, its encoder writes back byte for byte (the
 *     parsers keep nothing they did not check, and drop nothing they read);
 *   - an accepted header's payload lies inside the message. */
#include <arpa/inet.h>
#include <string.h>

#include "fuzz_input.h"
#include "transport/dgram/proto.h"

static void bound_addr(const uint8_t *p, size_t n, struct sockaddr_storage *ss)
{
    uint8_t b[20] = {0};
    memcpy(b, p, n < 20 ? n : 20);
    memset(ss, 0, sizeof(*ss));
    if (b[0] & 1) {
        struct sockaddr_in6 *in6 = (void *)ss;
        in6->sin6_family = AF_INET6;
        memcpy(&in6->sin6_port, b + 1, 2);
        memcpy(&in6->sin6_addr, b + 4, 16);
    } else {
        struct sockaddr_in *in = (void *)ss;
        in->sin_family = AF_INET;
        memcpy(&in->sin_port, b + 1, 2);
        memcpy(&in->sin_addr, b + 4, 4);
    }
}

static void ctl(const uint8_t *m, size_t len)
{
    struct vs_udp_ctl c;
    enum vs_udp_verdict v = vs_udp_ctl_parse(m, len, &c);
    bool magic = len >= VS_UDP_CTL_HEAD && memcmp(m, VS_UDP_CTL_MAGIC, 8) == 0;
    if ((v == VS_UDP_NOT_OURS) == magic)
        FZ_FAIL("ctl: verdict %d for a datagram %s the magic", v, magic ? "with" : "without");
    if (v != VS_UDP_OK)
        return;
    uint8_t out[VS_UDP_CHALLENGE_LEN];
    size_t n = vs_udp_ctl_encode(&c, out);
    if (n != len || memcmp(out, m, len) != 0)
        FZ_FAIL("ctl: accepted %zu bytes that encode back as %zu other bytes", len, n);
}

static void offer(const uint8_t *m, size_t len, const struct sockaddr_storage *bound)
{
    struct vs_udp_offer o;
    if (vs_udp_offer_parse(m, len, bound, &o) != VS_UDP_OK)
        return;
    uint8_t out[VS_UDP_OFFER_LEN];
    size_t n = vs_udp_offer_encode(&o, out);
    if (n != len || memcmp(out, m, len) != 0)
        FZ_FAIL("offer: accepted %zu bytes that encode back as %zu other bytes", len, n);
}

static void answer(const uint8_t *m, size_t len)
{
    struct vs_udp_answer a;
    if (vs_udp_answer_parse(m, len, &a) != VS_UDP_OK)
        return;
    uint8_t out[VS_UDP_ANSWER_LEN];
    size_t n = vs_udp_answer_encode(&a, out);
    if (n != len || memcmp(out, m, len) != 0)
        FZ_FAIL("answer: accepted %zu bytes that encode back as %zu other bytes", len, n);
}

static void shm_setup(const uint8_t *m, size_t len, const struct sockaddr_storage *bound)
{
    struct vs_udp_hs h;
    if (vs_udp_hs_parse(m, len, bound, &h) != VS_UDP_OK)
        return;
    uint8_t out[VS_UDP_HS_LEN];
    size_t n = vs_udp_hs_encode(&h, out);
    if (n != len || memcmp(out, m, len) != 0)
        FZ_FAIL("hs: accepted %zu bytes that encode back as %zu other bytes", len, n);
}

static void head(const uint8_t *m, size_t len, size_t payload_max)
{
    struct vs_udp_head h;
    size_t at = 0;
    if (vs_udp_head_parse(m, len, payload_max, &h, &at) != VS_UDP_OK)
        return;
    uint8_t out[VS_UDP_FRAG_HEAD_LEN];
    size_t n = vs_udp_head_encode(&h, out);
    if (n != at || at > len || len - at > payload_max || memcmp(out, m, n) != 0)
        FZ_FAIL("head: accepted a header of %zu bytes (payload at %zu of %zu, max %zu) that "
                "encodes back as %zu other bytes",
                at, at, len, payload_max, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t pick = data[0];
    data++;
    size--;
    struct sockaddr_storage bound;
    /* Pick 2 with bit 2 set: the shm set-up (bound address first). */
    bool hs = (pick & 7) == 6;
    if ((pick & 3) == 1 || hs) {
        bound_addr(data, size, &bound);
        size_t skip = size < 20 ? size : 20;
        data += skip;
        size -= skip;
    }
    uint8_t *m = malloc(size ? size : 1);
    memcpy(m, data, size);
    switch (pick & 3) {
    case 0:
        ctl(m, size);
        break;
    case 1:
        offer(m, size, &bound);
        break;
    case 2:
        if (hs)
            shm_setup(m, size, &bound);
        else
            answer(m, size);
        break;
    default:
        /* Payload sizes around rxe's: MTU 256 … 4096, less the header. */
        head(m, size, (size_t)(pick >> 2) * 64 + 1);
        break;
    }
    free(m);
    return 0;
}
