/* Message framing, deterministic payloads and the stream checker. */
#include "stress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64 finaliser: a cheap, well-mixed hash of one word. */
uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t rng_next(struct rng *r)
{
    r->s += 0x9e3779b97f4a7c15ULL;
    return mix64(r->s);
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
    return n ? rng_next(r) % n : 0;
}

static int log2_floor(uint64_t v)
{
    return 63 - __builtin_clzll(v);
}

/* Log-uniform in [lo, hi]: pick a power-of-two bucket uniformly, then a value
 * uniformly inside it, so 1..2 is as likely as 2 MiB..4 MiB and small sizes are common. */
uint64_t log_uniform(uint64_t r, uint64_t lo, uint64_t hi)
{
    if (lo < 1)
        lo = 1;
    if (hi <= lo)
        return lo;
    int blo = log2_floor(lo), bhi = log2_floor(hi);
    int b = blo + (int)((r & 0xffffffff) % (uint64_t)(bhi - blo + 1));
    uint64_t from = 1ULL << b, to = (b >= 63) ? UINT64_MAX : (1ULL << (b + 1)) - 1;
    if (from < lo)
        from = lo;
    if (to > hi)
        to = hi;
    return from + (r >> 32) % (to - from + 1);
}

/* Layout: magic, stream, seq, len, payload sum, header sum (all little-endian u64). */
void hdr_encode(uint8_t *out, const struct msg_hdr *h)
{
    put_u64(out, h->magic);
    put_u64(out + 8, h->stream);
    put_u64(out + 16, h->seq);
    put_u64(out + 24, h->len);
    put_u64(out + 32, h->sum);
    put_u64(out + 40, fnv1a(FNV_INIT, out, 40));
}

bool hdr_decode(const uint8_t *in, struct msg_hdr *h)
{
    h->magic = get_u64(in);
    h->stream = get_u64(in + 8);
    h->seq = get_u64(in + 16);
    h->len = get_u64(in + 24);
    h->sum = get_u64(in + 32);
    return h->magic == MSG_MAGIC && get_u64(in + 40) == fnv1a(FNV_INIT, in, 40);
}

uint64_t stream_id(uint32_t conn, bool from_server)
{
    return (uint64_t)conn * 2 + (from_server ? 1 : 0);
}

/* The length of message `seq` is a pure function of (seed, stream, seq), so the
 * receiver knows what to expect without any extra state. */
uint64_t msg_len(const struct config *cfg, uint64_t stream, uint64_t seq)
{
    uint64_t r = mix64(cfg->seed ^ mix64(stream * 0x100000001ULL + seq));
    return log_uniform(r, cfg->min_size, cfg->max_size);
}

void fill_payload(uint8_t *p, size_t n, uint64_t seed, uint64_t stream, uint64_t seq)
{
    uint64_t base = mix64(seed ^ mix64(stream)) ^ mix64(seq);
    size_t i = 0;
    for (uint64_t k = 0; i + 8 <= n; k++, i += 8) {
        uint64_t w = mix64(base + k);
        memcpy(p + i, &w, 8);
    }
    if (i < n) {
        uint64_t w = mix64(base + n / 8);
        memcpy(p + i, &w, n - i);
    }
}

/* ---- sender ---- */

void tx_init(struct tx_stream *tx, const struct config *cfg, uint64_t stream, bool inject_here)
{
    memset(tx, 0, sizeof(*tx));
    tx->cfg = cfg;
    tx->stream = stream;
    tx->inject_here = inject_here;
}

/* Which message the victim of an injected fault is. */
static uint64_t victim_seq(const struct config *cfg)
{
    return cfg->messages > 1 ? 1 : 0;
}

static uint64_t send_count(const struct tx_stream *tx)
{
    if (tx->inject_here && tx->cfg->inject == INJECT_LOSS && tx->cfg->messages > 0)
        return tx->cfg->messages - 1;
    return tx->cfg->messages;
}

/* Map the i-th send to a sequence number, applying --inject-corruption loss/reorder. */
static uint64_t send_order(const struct tx_stream *tx, uint64_t i)
{
    if (!tx->inject_here)
        return i;
    if (tx->cfg->inject == INJECT_LOSS)
        return i < victim_seq(tx->cfg) ? i : i + 1;
    if (tx->cfg->inject == INJECT_REORDER && tx->cfg->messages >= 3 && (i == 1 || i == 2))
        return 3 - i;
    return i;
}

bool tx_prepare(struct tx_stream *tx)
{
    if (tx->next >= send_count(tx))
        return false;
    uint64_t seq = send_order(tx, tx->next++);
    uint64_t len = msg_len(tx->cfg, tx->stream, seq);
    size_t need = HDR_SIZE + (size_t)len;
    if (need > tx->cap) {
        free(tx->buf);
        tx->buf = malloc(need);
        if (!tx->buf) {
            perror("vsocket-stress: malloc");
            exit(EXIT_SETUP);
        }
        tx->cap = need;
    }
    uint8_t *pay = tx->buf + HDR_SIZE;
    fill_payload(pay, len, tx->cfg->seed, tx->stream, seq);
    struct msg_hdr h = {MSG_MAGIC, tx->stream, seq, len, fnv1a(FNV_INIT, pay, len)};
    hdr_encode(tx->buf, &h);
    if (tx->inject_here && seq == victim_seq(tx->cfg)) {
        if (tx->cfg->inject == INJECT_PAYLOAD)
            pay[len / 2] ^= 0x01;
        else if (tx->cfg->inject == INJECT_HEADER)
            tx->buf[17] ^= 0x01; /* inside the seq field */
    }
    tx->len = need;
    tx->off = 0;
    return true;
}

bool tx_pending(const struct tx_stream *tx)
{
    return tx->off < tx->len;
}

bool tx_more(const struct tx_stream *tx)
{
    return tx->next < send_count(tx);
}

void tx_free(struct tx_stream *tx)
{
    free(tx->buf);
    tx->buf = NULL;
}

/* ---- receiver ---- */

void rx_init(struct rx_stream *rx, const struct config *cfg, uint64_t stream)
{
    memset(rx, 0, sizeof(*rx));
    rx->cfg = cfg;
    rx->stream = stream;
    rx->seen = calloc(cfg->messages / 8 + 1, 1);
    if (!rx->seen) {
        perror("vsocket-stress: calloc");
        exit(EXIT_SETUP);
    }
}

static bool header_plausible(const struct rx_stream *rx, const struct msg_hdr *h)
{
    return h->stream == rx->stream && h->seq < rx->cfg->messages &&
           h->len == msg_len(rx->cfg, rx->stream, h->seq);
}

static void note_seq(struct rx_stream *rx, uint64_t seq)
{
    uint8_t bit = (uint8_t)(1u << (seq % 8));
    /* A duplicate, or a sequence number below one already seen, is out of order. */
    if ((rx->seen[seq / 8] & bit) || seq + 1 < rx->max_seq_seen_plus1)
        rx->reordered++;
    rx->seen[seq / 8] |= bit;
    if (seq + 1 > rx->max_seq_seen_plus1)
        rx->max_seq_seen_plus1 = seq + 1;
}

static void header_done(struct rx_stream *rx)
{
    if (!hdr_decode(rx->hdr, &rx->cur) || !header_plausible(rx, &rx->cur)) {
        /* We no longer know where messages start: give up on this stream. */
        rx->corrupt++;
        rx->corrupt_bytes += HDR_SIZE;
        rx->abandoned = true;
        return;
    }
    rx->in_payload = true;
    rx->pay_got = 0;
    rx->sum = FNV_INIT;
}

static void payload_done(struct rx_stream *rx)
{
    note_seq(rx, rx->cur.seq);
    if (rx->sum != rx->cur.sum) {
        rx->corrupt++;
        rx->corrupt_bytes += rx->cur.len;
    } else {
        rx->msgs++;
    }
    rx->in_payload = false;
    rx->hdr_got = 0;
}

void rx_feed(struct rx_stream *rx, const uint8_t *p, size_t n)
{
    rx->bytes += n;
    while (n > 0) {
        if (rx->abandoned) {
            rx->corrupt_bytes += n;
            return;
        }
        if (!rx->in_payload) {
            size_t k = HDR_SIZE - rx->hdr_got;
            if (k > n)
                k = n;
            memcpy(rx->hdr + rx->hdr_got, p, k);
            rx->hdr_got += k;
            p += k;
            n -= k;
            if (rx->hdr_got == HDR_SIZE)
                header_done(rx);
        } else {
            uint64_t k = rx->cur.len - rx->pay_got;
            if (k > n)
                k = n;
            rx->sum = fnv1a(rx->sum, p, (size_t)k);
            rx->pay_got += k;
            p += k;
            n -= (size_t)k;
        }
        /* A zero-length payload completes as soon as its header does. */
        if (rx->in_payload && rx->pay_got == rx->cur.len)
            payload_done(rx);
    }
}

size_t rx_want(const struct rx_stream *rx)
{
    if (rx->abandoned)
        return READ_MAX;
    if (!rx->in_payload)
        return HDR_SIZE - rx->hdr_got;
    return (size_t)(rx->cur.len - rx->pay_got);
}

/* At EOF every sequence number never seen was lost (a message cut short by the
 * EOF included). When the peer was killed on purpose, loss is expected and not counted. */
void rx_finish(struct rx_stream *rx, bool count_lost)
{
    rx->eof = true;
    if (!count_lost || rx->abandoned)
        return;
    for (uint64_t s = 0; s < rx->cfg->messages; s++)
        if (!(rx->seen[s / 8] & (1u << (s % 8))))
            rx->lost++;
}

void rx_free(struct rx_stream *rx)
{
    free(rx->seen);
    rx->seen = NULL;
}
