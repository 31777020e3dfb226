/* dgram_ring.c - datagrams over a byte ring (dgram_ring.h). */
#include "memory/dgram_ring.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

/* The most iovec entries a caller may pass, as the kernel's sendmsg. */
#define IOV_MAX_ENTRIES 1024

static size_t pad8(size_t len)
{
    return (len + 7) & ~(size_t)7;
}

size_t vs_dgram_charge(size_t len)
{
    return VS_DGRAM_HEAD + pad8(len);
}

static size_t iov_total(const struct iovec *iov, int cnt)
{
    size_t total = 0;
    for (int i = 0; i < cnt; i++)
        total += iov[i].iov_len;
    return total;
}

static void put_head(uint8_t *p, const struct vs_dgram_meta *m)
{
    memcpy(p, &m->len, 4);
    memcpy(p + 4, &m->tag, 4);
    memcpy(p + 8, &m->stamp, 8);
}

/* Writes every byte of IOV: the caller made sure the ring can take them,
 * so a short write here is a ring that broke its word, unless nothing was
 * written yet and the consumer began giving the pages back since (-EBUSY;
 * the reclaim may be over by the time we look: it does so only with the
 * ring read to its end, and never while a record is half written, so the
 * first write alone can meet it). IOV is ours: its entries are advanced. */
static int write_all(struct vs_ring *r, struct iovec *iov, int cnt)
{
    for (bool first = true; cnt > 0; first = false) {
        ssize_t n = vs_ring_write(r, iov, cnt, 0);
        if (n == -EAGAIN && first)
            return -EBUSY; /* the room was there: only a reclaim takes it */
        if (n <= 0)
            return n == 0 || n == -EAGAIN ? -EPROTO : (int)n;
        size_t left = (size_t)n;
        for (; cnt > 0 && left >= iov->iov_len; cnt--, iov++)
            left -= iov->iov_len;
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

int vs_dgram_put(struct vs_ring *r, const struct vs_dgram_meta *m, const struct iovec *iov,
                 int iovcnt)
{
    if (iovcnt < 0 || iovcnt > IOV_MAX_ENTRIES)
        return -EINVAL;
    size_t len = iov_total(iov, iovcnt);
    if (len > VS_DGRAM_MAX)
        return -EMSGSIZE;
    ssize_t room = vs_ring_writable(r);
    if (room < 0)
        return (int)room;
    if ((size_t)room < vs_dgram_charge(len))
        return vs_ring_reclaiming(r) ? -EBUSY : -EAGAIN;
    struct vs_dgram_meta head = *m;
    head.len = (uint32_t)len;
    uint8_t h[VS_DGRAM_HEAD], zeros[8] = {0};
    put_head(h, &head);
    struct iovec all[iovcnt + 2];
    int cnt = 0;
    all[cnt++] = (struct iovec){h, sizeof(h)};
    for (int i = 0; i < iovcnt; i++)
        if (iov[i].iov_len)
            all[cnt++] = iov[i];
    if (pad8(len) > len)
        all[cnt++] = (struct iovec){zeros, pad8(len) - len};
    return write_all(r, all, cnt);
}

/* The next record's head, peeked: 1, or -EAGAIN (none whole yet), -EPIPE
 * (the writer closed and every record was read), -EPROTO. */
static int peek_head(struct vs_ring *r, struct vs_dgram_meta *m)
{
    *m = (struct vs_dgram_meta){0};
    ssize_t avail = vs_ring_readable(r);
    if (avail < 0)
        return (int)avail;
    uint8_t h[VS_DGRAM_HEAD];
    struct iovec v = {h, sizeof(h)};
    if (avail < VS_DGRAM_HEAD) {
        if (avail > 0)
            return -EAGAIN; /* the rest of the record is on its way */
        ssize_t n = vs_ring_read(r, &v, 1, VS_RING_PEEK);
        return n == 0 || n == -ECONNRESET ? -EPIPE : n < 0 ? (int)n : -EAGAIN;
    }
    if (vs_ring_read(r, &v, 1, VS_RING_PEEK) != VS_DGRAM_HEAD)
        return -EPROTO;
    memcpy(&m->len, h, 4);
    memcpy(&m->tag, h + 4, 4);
    memcpy(&m->stamp, h + 8, 8);
    if (m->len > VS_DGRAM_MAX)
        return -EPROTO;
    return (size_t)avail < vs_dgram_charge(m->len) ? -EAGAIN : 1;
}

ssize_t vs_dgram_next_len(struct vs_ring *r)
{
    struct vs_dgram_meta m;
    int rc = peek_head(r, &m);
    return rc < 0 ? rc : (ssize_t)m.len;
}

/* Drops N bytes at the consumer's cursor. */
static int skip(struct vs_ring *r, size_t n)
{
    uint8_t junk[512];
    while (n > 0) {
        struct iovec v = {junk, n < sizeof(junk) ? n : sizeof(junk)};
        ssize_t got = vs_ring_read(r, &v, 1, 0);
        if (got <= 0)
            return -EPROTO; /* it was readable a moment ago */
        n -= (size_t)got;
    }
    return 0;
}

ssize_t vs_dgram_take(struct vs_ring *r, struct vs_dgram_meta *m, const struct iovec *iov,
                      int iovcnt, int flags)
{
    if (iovcnt < 0 || iovcnt > IOV_MAX_ENTRIES)
        return -EINVAL;
    int rc = peek_head(r, m);
    if (rc < 0)
        return rc;
    /* The head, then as much of the datagram as the buffers hold. */
    uint8_t h[VS_DGRAM_HEAD];
    struct iovec all[iovcnt + 1];
    int cnt = 0;
    all[cnt++] = (struct iovec){h, sizeof(h)};
    size_t want = 0;
    for (int i = 0; i < iovcnt && want < m->len; i++) {
        size_t part = iov[i].iov_len < m->len - want ? iov[i].iov_len : m->len - want;
        if (part)
            all[cnt++] = (struct iovec){iov[i].iov_base, part};
        want += part;
    }
    ssize_t n = vs_ring_read(r, all, cnt, flags & VS_RING_PEEK);
    if (n != (ssize_t)(VS_DGRAM_HEAD + want))
        return -EPROTO;
    if (!(flags & VS_RING_PEEK) && skip(r, vs_dgram_charge(m->len) - VS_DGRAM_HEAD - want) < 0)
        return -EPROTO;
    return (ssize_t)want;
}
