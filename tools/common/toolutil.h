/* toolutil.h - helpers shared by the test and benchmark programs
 * (vsocket-stress, vsocket-sweep, bench/isolation): plain POSIX, no
 * vsocket dependency. */
#ifndef VSOCKET_TOOLUTIL_H
#define VSOCKET_TOOLUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t now_ns(void);

/* Little-endian 64-bit integers in wire headers. */
void put_u64(uint8_t *p, uint64_t v);
uint64_t get_u64(const uint8_t *p);

/* The first address of HOST:PORT for FAMILY (AF_UNSPEC, AF_INET or
 * AF_INET6) and SOCKTYPE; HOST NULL with PASSIVE means any address. Prints
 * "PROG: cannot resolve ..." and returns -1 on failure. */
int tool_resolve(const char *prog, const char *host, uint16_t port, int family, int socktype,
                 bool passive, struct sockaddr_storage *ss, socklen_t *len);

/* Blocking I/O of exactly N bytes, restarted after EINTR. write_full: 0,
 * or -1. read_full: 1, 0 (end of stream before N), or -1. */
int write_full(int fd, const void *p, size_t n);
int read_full(int fd, void *p, size_t n);

/* A whole number with an optional binary K/M/G suffix; -1 when S is not one. */
int tool_parse_size(const char *s, uint64_t *out);

#endif
