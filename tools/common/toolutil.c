/* toolutil.c - helpers shared by the test and benchmark programs. */
#include "toolutil.h"

#include <errno.h>
#include <unistd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

int tool_resolve(const char *prog, const char *host, uint16_t port, int family, int socktype,
                 bool passive, struct sockaddr_storage *ss, socklen_t *len)
{
    struct addrinfo hints = {0}, *res = NULL;
    char portstr[8];
    hints.ai_family = family;
    hints.ai_socktype = socktype;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    snprintf(portstr, sizeof(portstr), "%u", port);
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "%s: cannot resolve %s: %s\n", prog, host ? host : "(any)",
                gai_strerror(rc));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int tool_parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return -1;
    const char *suffixes = "kKmMgG";
    const char *p = *end ? strchr(suffixes, *end) : NULL;
    if (p) {
        v <<= 10 * (1 + (p - suffixes) / 2);
        end++;
    }
    if (*end)
        return -1;
    *out = v;
    return 0;
}

int write_full(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

int read_full(int fd, void *p, size_t n)
{
    char *b = p;
    while (n > 0) {
        ssize_t k = read(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            return 0;
        b += k;
        n -= (size_t)k;
    }
    return 1;
}
