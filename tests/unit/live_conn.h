/* live_conn.h - shared by the descriptor and seccomp preload tests: an echo
 * peer in a child process, connections to it that have moved data (so that
 * under the shm transport they are upgraded and vsocket holds a side channel
 * for them), checksummed traffic, and listings of /proc/self/fd that name
 * the descriptors a test did not open itself.
 *
 * Connections to the echo peer have a receive timeout of 3 s (SO_RCVTIMEO),
 * so that echo_check() needs no poll: it makes no system call but sendto
 * and recvfrom, and can run under a strict seccomp filter. */
#ifndef VSOCKET_LIVE_CONN_H
#define VSOCKET_LIVE_CONN_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define LC_MAX_FDS 256

static inline void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The echo peer: one process, a poll loop over the listener and every
 * connection, each byte read sent back. It dies with the test (SIGKILL). */
static inline void echo_serve(int l)
{
    struct pollfd p[64] = {{.fd = l, .events = POLLIN}};
    int n = 1;
    static char buf[65536];

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (;;) {
        if (poll(p, (nfds_t)n, -1) < 0)
            continue;
        for (int i = n - 1; i >= 0; i--) {
            if (!p[i].revents)
                continue;
            if (p[i].fd == l) {
                int c = accept(l, NULL, NULL);
                if (c >= 0 && n < 64)
                    p[n++] = (struct pollfd){.fd = c, .events = POLLIN};
                else if (c >= 0)
                    close(c);
                continue;
            }
            ssize_t r = recv(p[i].fd, buf, sizeof(buf), 0), w = 0;
            while (r > 0 && w < r) {
                ssize_t k = send(p[i].fd, buf + w, (size_t)(r - w), MSG_NOSIGNAL);
                if (k <= 0)
                    break;
                w += k;
            }
            if (r <= 0 || w < r) {
                close(p[i].fd);
                p[i] = p[--n];
            }
        }
    }
}

/* Starts the echo peer; its address goes to *A. */
static inline pid_t echo_peer_start(struct sockaddr_in *a)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t al = sizeof(*a);
    *a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (l < 0 || bind(l, (struct sockaddr *)a, al) < 0 || listen(l, 64) < 0 ||
        getsockname(l, (struct sockaddr *)a, &al) < 0) {
        perror("echo peer: listener");
        exit(2);
    }
    pid_t pid = fork();
    if (pid == 0)
        echo_serve(l);
    close(l);
    return pid;
}

static inline int echo_connect(const struct sockaddr_in *a)
{
    struct timeval tv = {.tv_sec = 3};
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s >= 0 && setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
        connect(s, (const struct sockaddr *)a, sizeof(*a)) == 0)
        return s;
    perror("connect to the echo peer");
    if (s >= 0)
        close(s);
    return -1;
}

/* Receives exactly LEN bytes (each recv waits 3 s at most: SO_RCVTIMEO). */
static inline int recv_all(int fd, char *p, size_t len)
{
    while (len > 0) {
        ssize_t r = recv(fd, p, len, 0);
        if (r <= 0)
            return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/* A byte of the test stream SEED at offset I. */
static inline unsigned char pattern(unsigned seed, size_t i)
{
    return (unsigned char)(seed * 131u + i * 7u + (i >> 8) * 13u);
}

/* Sends TOTAL bytes of stream SEED on WFD in 1 KiB pieces, each echoed back
 * on RFD and checked byte by byte (and the Fletcher sums over the whole
 * stream compared). 0 if all came back intact; else -1, ERR says why. */
static inline int echo_check(int rfd, int wfd, size_t total, unsigned seed, char *err,
                             size_t errlen)
{
    char out[1024], in[1024];
    unsigned s1 = 0, s2 = 0, r1 = 0, r2 = 0;
    for (size_t off = 0; off < total; off += sizeof(out)) {
        size_t n = total - off < sizeof(out) ? total - off : sizeof(out);
        for (size_t i = 0; i < n; i++) {
            out[i] = (char)pattern(seed, off + i);
            s1 = (s1 + (unsigned char)out[i]) % 65535, s2 = (s2 + s1) % 65535;
        }
        if (send(wfd, out, n, MSG_NOSIGNAL) != (ssize_t)n) {
            snprintf(err, errlen, "send of %zu bytes at offset %zu failed: %s", n, off,
                     strerror(errno));
            return -1;
        }
        errno = 0;
        if (recv_all(rfd, in, n) < 0) {
            snprintf(err, errlen, "no echo of the %zu bytes at offset %zu within 3 s (%s)", n, off,
                     errno ? strerror(errno) : "end of stream");
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            r1 = (r1 + (unsigned char)in[i]) % 65535, r2 = (r2 + r1) % 65535;
            if (in[i] != out[i]) {
                snprintf(err, errlen, "echo corrupted at offset %zu: got 0x%02x, want 0x%02x",
                         off + i, (unsigned char)in[i], (unsigned char)out[i]);
                return -1;
            }
        }
    }
    if (r1 != s1 || r2 != s2) {
        snprintf(err, errlen, "checksum %04x%04x, want %04x%04x", r2, r1, s2, s1);
        return -1;
    }
    return 0;
}

/* Ping-pongs a few bytes every 50 ms for MS milliseconds: under the shm
 * transport the connection is then upgraded (the first bytes start the
 * handshake, which can take up to about a second). */
static inline int warm_up(int fd, long ms)
{
    char err[160];
    for (long t = 0; t < ms; t += 50) {
        if (echo_check(fd, fd, 16, (unsigned)t, err, sizeof(err)) < 0) {
            fprintf(stderr, "warm-up: %s\n", err);
            return -1;
        }
        pause_ms(50);
    }
    return 0;
}

/* The open descriptors, ascending (not the listing's own); their count. */
static inline int fd_list(int *fds, int max)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == dirfd(d) || n == max)
            continue;
        int i = n++;
        for (; i > 0 && fds[i - 1] > fd; i--)
            fds[i] = fds[i - 1];
        fds[i] = fd;
    }
    closedir(d);
    return n;
}

static inline int fd_in(int fd, const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] == fd)
            return 1;
    return 0;
}

/* Is socket inode INO an AF_UNIX socket? (/proc/net/unix: no call on the fd
 * itself, which vsocket could take for one of the program's sockets.) */
static inline int is_unix_inode(unsigned long ino)
{
    FILE *f = fopen("/proc/self/net/unix", "r");
    char line[512];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f)) {
        unsigned long i;
        if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu", &i) == 1 && i == ino)
            found = 1;
    }
    if (f)
        fclose(f);
    return found;
}

/* "5=socket:[1234](unix)", "7=/memfd:vsocket-ring (deleted)", ... */
static inline void fd_describe(int fd, char *out, size_t outlen)
{
    char path[32], target[200];
    unsigned long ino;
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    target[n > 0 ? n : 0] = '\0';
    int unix_sock = sscanf(target, "socket:[%lu]", &ino) == 1 && is_unix_inode(ino);
    snprintf(out, outlen, "%d=%.150s%s", fd, target, unix_sock ? "(unix)" : "");
}

/* Prints every open descriptor to stderr, marking with '*' those not in
 * MINE (the ones the program opened or inherited itself). */
static inline void fd_dump(const char *who, const int *mine, int nmine)
{
    int fds[LC_MAX_FDS], n = fd_list(fds, LC_MAX_FDS);
    char d[256];
    fprintf(stderr, "%s: open descriptors (* = not the program's):", who);
    for (int i = 0; i < n; i++) {
        fd_describe(fds[i], d, sizeof(d));
        fprintf(stderr, " %s%s", fd_in(fds[i], mine, nmine) ? "" : "*", d);
    }
    fprintf(stderr, "\n");
}

/* "0,1,2,10" <-> an array. */
static inline void fds_format(const int *fds, int n, char *out, size_t outlen)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < n && len < outlen; i++)
        len += (size_t)snprintf(out + len, outlen - len, "%s%d", i ? "," : "", fds[i]);
}

static inline int fds_parse(const char *s, int *fds, int max)
{
    int n = 0;
    for (char *end; *s && n < max; s = *end ? end + 1 : end)
        fds[n++] = (int)strtol(s, &end, 10);
    return n;
}

/* In an exec'd helper: 0 if the open descriptors are all in OK (what the
 * test passed and what it started with), else -1 naming each other one:
 * nothing vsocket opened for itself may cross exec. */
static inline int fds_exactly(const int *ok, int nok, const char *who)
{
    int fds[LC_MAX_FDS], n = fd_list(fds, LC_MAX_FDS), rc = 0;
    char d[256];
    for (int i = 0; i < n; i++) {
        if (!fd_in(fds[i], ok, nok)) {
            fd_describe(fds[i], d, sizeof(d));
            fprintf(stderr, "%s: descriptor %s leaked across exec\n", who, d);
            rc = -1;
        }
    }
    return rc;
}

/* In an exec'd helper: 0 if FD is the socket with inode INO, without
 * FD_CLOEXEC, and reading it to end of stream (3 s at most) gives exactly
 * WANT; else -1, saying why. */
static inline int fd_passed_ok(int fd, unsigned long ino, const char *want, const char *who)
{
    struct stat st;
    char got[256], d[256];
    size_t have = 0;
    struct pollfd pf = {.fd = fd, .events = POLLIN};

    if (fstat(fd, &st) < 0) {
        fprintf(stderr, "%s: fd %d: %s\n", who, fd, strerror(errno));
        return -1;
    }
    if (st.st_ino != ino) {
        fd_describe(fd, d, sizeof(d));
        fprintf(stderr, "%s: fd %d is %s, not the socketpair the test passed (inode %lu)\n", who,
                fd, d, ino);
        return -1;
    }
    int fl = fcntl(fd, F_GETFD);
    if (fl != 0) {
        fprintf(stderr, "%s: fd %d has flags %d, want 0 (FD_CLOEXEC clear)\n", who, fd, fl);
        return -1;
    }
    while (have < sizeof(got) - 1 && poll(&pf, 1, 3000) == 1) {
        ssize_t r = read(fd, got + have, sizeof(got) - 1 - have);
        if (r <= 0)
            break;
        have += (size_t)r;
    }
    got[have] = '\0';
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "%s: read '%s' (%zu bytes) from fd %d, want '%s'\n", who, got, have, fd,
                want);
        return -1;
    }
    return 0;
}

/* The descriptors the environment gave the test, before any socket exists:
 * listed, and as text for an exec'd helper's argv. */
struct lc_env {
    int fds[LC_MAX_FDS], n;
    char text[1024];
};

static inline void lc_env_capture(struct lc_env *e)
{
    e->n = fd_list(e->fds, LC_MAX_FDS - 3);
    fds_format(e->fds, e->n, e->text, sizeof(e->text));
}

/* The exec'd (or spawned) reader of descriptor N: exactly 0, 1, 2, N and
 * the descriptors the test started with (ENVFDS) are open, and N is the
 * socketpair with inode INO carrying "config for fd N". 0 if so. */
static inline int reader_check(const char *who, int n, unsigned long ino, const char *envfds)
{
    int ok[LC_MAX_FDS], nok = fds_parse(envfds, ok, LC_MAX_FDS - 4), failed = 0;
    char want[64];

    alarm(300); /* a hang only (valgrind, a loaded machine) */
    ok[nok++] = 0, ok[nok++] = 1, ok[nok++] = 2, ok[nok++] = n;
    snprintf(want, sizeof(want), "config for fd %d\n", n);
    failed |= fds_exactly(ok, nok, who) < 0;
    failed |= fd_passed_ok(n, ino, want, who) < 0;
    if (failed)
        fd_dump(who, ok, nok);
    return failed;
}

#endif
