/* ring_use.h - shared by the ring growth and reclaim preload tests: what a
 * process maps of vsocket's rings, read from /proc/PID/smaps (each ring is
 * one mapping of a memfd named "vsocket-ring"), checksummed streams, and
 * loops that send or receive a whole buffer. */
#ifndef VSOCKET_RING_USE_H
#define VSOCKET_RING_USE_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

/* The rings PID maps, the shared memory they hold (Rss, bytes), and the
 * largest one's: an average over many rings would hide one that never gives
 * its pages back. */
struct ring_use {
    long rings;
    long rss;
    long largest;
};

static inline int ring_use_of(pid_t pid, struct ring_use *u)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int in_ring = 0;
    long kb;
    unsigned long from, to;
    *u = (struct ring_use){0, 0, 0};
    while (fgets(line, sizeof(line), f)) {
        /* A mapping's line starts with its address range, then its fields. */
        if (sscanf(line, "%lx-%lx ", &from, &to) == 2) {
            in_ring = strstr(line, "vsocket-ring") != NULL;
            u->rings += in_ring;
        } else if (in_ring && sscanf(line, "Rss: %ld kB", &kb) == 1) {
            u->rss += kb * 1024;
            if (kb * 1024 > u->largest)
                u->largest = kb * 1024;
        }
    }
    fclose(f);
    return 0;
}

/* The shared memory (Rss, bytes) of the largest of PID's rings, or -1. */
static inline long ring_largest_of(pid_t pid)
{
    struct ring_use u;
    return ring_use_of(pid, &u) < 0 ? -1 : u.largest;
}

/* Whether this run may use the shm transport (`vsocket run --transport=kernel`
 * says no). */
static inline int shm_expected(void)
{
    const char *t = getenv("VSOCKET_TRANSPORTS");
    return !t || strstr(t, "shm") != NULL;
}

/* A byte of stream SEED at offset I. */
static inline unsigned char stream_byte(unsigned seed, size_t i)
{
    return (unsigned char)(seed * 131u + i * 7u + (i >> 9) * 13u + (i >> 17));
}

static inline void stream_fill(unsigned char *p, unsigned seed, size_t off, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = stream_byte(seed, off + i);
}

/* Offset of the first byte of P that is not stream SEED at OFF, or -1. */
static inline long stream_check(const unsigned char *p, unsigned seed, size_t off, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != stream_byte(seed, off + i))
            return (long)(off + i);
    return -1;
}

/* Sends LEN bytes of stream SEED in chunks of at most CHUNK. 0 or -errno. */
static inline int send_stream(int fd, unsigned seed, size_t len, size_t chunk)
{
    unsigned char *buf = malloc(chunk);
    int rc = 0;
    for (size_t off = 0; off < len && rc == 0;) {
        size_t n = len - off < chunk ? len - off : chunk;
        stream_fill(buf, seed, off, n);
        for (size_t done = 0; done < n;) {
            ssize_t w = send(fd, buf + done, n - done, MSG_NOSIGNAL);
            if (w <= 0) {
                rc = w < 0 ? -errno : -EPIPE;
                break;
            }
            done += (size_t)w;
        }
        off += n;
    }
    free(buf);
    return rc;
}

/* Receives LEN bytes and checks they are stream SEED. 0, -errno, -EPIPE at
 * an early end of stream, -EBADMSG on a wrong byte. */
static inline int recv_stream(int fd, unsigned seed, size_t len, size_t chunk)
{
    unsigned char *buf = malloc(chunk);
    int rc = 0;
    for (size_t off = 0; off < len;) {
        size_t want = len - off < chunk ? len - off : chunk;
        ssize_t r = recv(fd, buf, want, 0);
        if (r <= 0) {
            rc = r < 0 ? -errno : -EPIPE;
            break;
        }
        long bad = stream_check(buf, seed, off, (size_t)r);
        if (bad >= 0) {
            fprintf(stderr, "stream %u: wrong byte at offset %ld\n", seed, bad);
            rc = -EBADMSG;
            break;
        }
        off += (size_t)r;
    }
    free(buf);
    return rc;
}

#endif
