/* shm_buffering.c - run under `vsocket run` (ctest shm_buffering_*).
 *
 * Issue 9: programs that rely on the kernel's buffering. An echo client
 * writes 1 MiB and only then reads the echo, while the server echoes in
 * 64 KiB reads: on kernel loopback the socket buffers hold it all; the
 * shared-memory rings must too, growing when the writer fills them, or both
 * ends block in write for ever. Variants: one connection; four at once (all
 * written before any is read); both ends writing before either reads; the
 * program's SO_SNDBUF/SO_RCVBUF set small and set large (the payload is then
 * what those buffers hold on the kernel). Every stream is checksummed. Under
 * the shm transport the test also checks that the connections really are on
 * the rings (their mappings exist). A variant that does not finish within
 * 20 s fails the test, naming itself. Exit 0 if all passed. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ring_use.h"

#define ECHO_CHUNK (64 << 10)
#define PING 0x50494e47u /* a warm-up record, echoed */
#define GO 0x474f2121u   /* the end of the warm-up; the task follows */

enum mode { ECHO, BOTH };

/* After the warm-up, the client tells the server what to do. */
struct task {
    uint32_t mode;
    uint32_t seed;
    uint64_t bytes;
};

struct variant {
    const char *name;
    int conns;
    enum mode mode;
    size_t bytes; /* 0: what the buffers below hold on the kernel */
    int bufsize;  /* SO_SNDBUF and SO_RCVBUF on both ends; 0: not set */
};

static const char *current = "setup";

/* A variant takes well under a second; only a hang takes this long, even
 * under valgrind on a loaded machine. */
#define HANG_S 300

static void on_alarm(int sig)
{
    (void)sig;
    char msg[200];
    int n = snprintf(msg, sizeof(msg), "shm_buffering: FAILED: '%s' did not finish within %d s\n",
                     current, HANG_S);
    (void)!write(2, msg, (size_t)n);
    _exit(1);
}

static int set_bufs(int fd, int size)
{
    if (size == 0)
        return 0;
    return setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)) ||
           setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

static int recv_exact(int fd, void *p, size_t len)
{
    for (size_t got = 0; got < len;) {
        ssize_t r = recv(fd, (char *)p + got, len - got, 0);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static int send_exact(int fd, const void *p, size_t len)
{
    for (size_t done = 0; done < len;) {
        ssize_t w = send(fd, (const char *)p + done, len - done, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

/* --- the server: one thread per connection ---------------------------- */

struct served {
    int fd, bufsize;
};

static int echo_all(int fd)
{
    char *buf = malloc(ECHO_CHUNK);
    ssize_t r;
    while ((r = recv(fd, buf, ECHO_CHUNK, 0)) > 0)
        if (send_exact(fd, buf, (size_t)r) < 0)
            break;
    free(buf);
    return r == 0 ? 0 : -1;
}

static void *serve(void *arg)
{
    struct served *sv = arg;
    int fd = sv->fd;
    uint32_t rec;
    struct task t;
    set_bufs(fd, sv->bufsize);
    free(sv);
    while (recv_exact(fd, &rec, sizeof(rec)) == 0 && rec == PING)
        if (send_exact(fd, &rec, sizeof(rec)) < 0)
            break;
    if (rec == GO && recv_exact(fd, &t, sizeof(t)) == 0) {
        if (t.mode == ECHO)
            echo_all(fd);
        else if (send_stream(fd, t.seed + 1000, t.bytes, ECHO_CHUNK) == 0)
            recv_stream(fd, t.seed, t.bytes, ECHO_CHUNK);
    }
    close(fd);
    return NULL;
}

static void server(int l, int bufsize)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (;;) {
        int fd = accept(l, NULL, NULL);
        if (fd < 0)
            continue;
        struct served *sv = malloc(sizeof(*sv));
        *sv = (struct served){fd, bufsize};
        pthread_t t;
        pthread_create(&t, NULL, serve, sv);
        pthread_detach(t);
    }
}

static pid_t server_start(struct sockaddr_in *a, int bufsize)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t al = sizeof(*a);
    *a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (l < 0 || set_bufs(l, bufsize) || bind(l, (struct sockaddr *)a, al) < 0 ||
        listen(l, 16) < 0 || getsockname(l, (struct sockaddr *)a, &al) < 0) {
        perror("shm_buffering: listener");
        exit(2);
    }
    pid_t pid = fork();
    if (pid == 0)
        server(l, bufsize);
    close(l);
    return pid;
}

/* --- the client --------------------------------------------------------- */

static int ping(int fd)
{
    uint32_t rec = PING;
    return send_exact(fd, &rec, sizeof(rec)) || recv_exact(fd, &rec, sizeof(rec)) || rec != PING
               ? -1
               : 0;
}

/* Ping-pongs until this process maps WANT rings (the handshake is over:
 * it may take up to about a second), then twice more, so that both ends
 * have switched their sending side to the ring. Without shm, 20 pings. */
static int warm_up(int fd, long want)
{
    struct ring_use u = {0, 0, 0};
    for (int i = 0; i < 6000; i++) {
        if (ping(fd) < 0)
            return -1;
        if (!shm_expected() && i >= 20)
            return 0;
        if (shm_expected() && ring_use_of(getpid(), &u) == 0 && u.rings >= want)
            return ping(fd) || ping(fd);
        usleep(10000);
    }
    fprintf(stderr,
            "shm_buffering: %s: not upgraded after 6000 pings (%ld rings mapped, want %ld)\n",
            current, u.rings, want);
    return -1;
}

static int connect_one(const struct sockaddr_in *a, int bufsize)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || set_bufs(fd, bufsize) ||
        connect(fd, (const struct sockaddr *)a, sizeof(*a)) < 0) {
        perror("shm_buffering: connect");
        return -1;
    }
    return fd;
}

/* What the kernel holds in one direction with both ends' buffers set to
 * BUFSIZE, with a wide margin for its per-packet overhead: the sender's send
 * buffer and the receiver's receive buffer, as the kernel reports them
 * (doubled and capped), halved. */
static size_t kernel_holds(int fd)
{
    int snd = 0, rcv = 0;
    socklen_t len = sizeof(int);
    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, &len);
    len = sizeof(int);
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, &len);
    return ((size_t)snd + (size_t)rcv) / 2;
}

static int start_task(int fd, enum mode mode, unsigned seed, size_t bytes)
{
    uint32_t go = GO;
    struct task t = {mode, seed, bytes};
    return send_exact(fd, &go, sizeof(go)) || send_exact(fd, &t, sizeof(t));
}

static int report(const struct variant *v, int i, const char *what, int rc)
{
    if (rc < 0)
        fprintf(stderr, "shm_buffering: %s: connection %d: %s: %s\n", v->name, i, what,
                strerror(-rc));
    return rc < 0;
}

/* Every connection's whole payload written before any is read. */
static int transfer(const struct variant *v, const int *fds, size_t bytes)
{
    int failed = 0;
    for (int i = 0; i < v->conns && !failed; i++)
        failed |= report(v, i, "send", send_stream(fds[i], (unsigned)i, bytes, 100000));
    for (int i = 0; i < v->conns && !failed; i++) {
        unsigned seed = v->mode == ECHO ? (unsigned)i : (unsigned)i + 1000;
        failed |= report(v, i, "receive", recv_stream(fds[i], seed, bytes, 77777));
    }
    /* BOTH: the server checks our stream, then closes. */
    for (int i = 0; i < v->conns && !failed && v->mode == BOTH; i++) {
        char b;
        failed |= report(v, i, "server's end of stream", recv(fds[i], &b, 1, 0) == 0 ? 0 : -EPROTO);
    }
    return failed;
}

static int run(const struct variant *v)
{
    struct sockaddr_in a;
    int fds[8], failed = 0;
    current = v->name;
    alarm(HANG_S);
    pid_t srv = server_start(&a, v->bufsize);
    for (int i = 0; i < v->conns && !failed; i++) {
        fds[i] = connect_one(&a, v->bufsize);
        failed |= fds[i] < 0 || warm_up(fds[i], 2L * (i + 1)) < 0;
    }
    size_t bytes = v->bytes ? v->bytes : kernel_holds(fds[0]);
    for (int i = 0; i < v->conns && !failed; i++)
        failed |= start_task(fds[i], v->mode, (unsigned)i, bytes) != 0;
    struct ring_use u = {0, 0, 0};
    if (!failed) {
        failed |= transfer(v, fds, bytes);
        ring_use_of(getpid(), &u);
    }
    if (!failed && shm_expected() && u.rings < 2L * v->conns) {
        fprintf(stderr, "shm_buffering: %s: only %ld rings mapped: not on shm\n", v->name, u.rings);
        failed = 1;
    }
    for (int i = 0; i < v->conns; i++)
        close(fds[i]);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    alarm(0);
    printf("shm_buffering: %s: %zu bytes x %d: %s (%ld rings, %ld KiB mapped at the end)\n",
           v->name, bytes, v->conns, failed ? "FAILED" : "ok", u.rings, u.rss >> 10);
    fflush(stdout);
    return failed;
}

int main(void)
{
    static const struct variant variants[] = {
        {"echo 1 MiB", 1, ECHO, 1 << 20, 0},
        {"echo 1 MiB on four connections at once", 4, ECHO, 1 << 20, 0},
        {"both ends write 1 MiB, then read", 1, BOTH, 1 << 20, 0},
        {"both ends write 1 MiB on two connections", 2, BOTH, 1 << 20, 0},
        {"echo with SO_SNDBUF/SO_RCVBUF 16 KiB", 1, ECHO, 0, 16 << 10},
        {"echo with SO_SNDBUF/SO_RCVBUF 2 MiB", 1, ECHO, 0, 2 << 20},
        {"both ends write, SO_SNDBUF/SO_RCVBUF 2 MiB", 1, BOTH, 0, 2 << 20},
    };
    signal(SIGALRM, on_alarm);
    signal(SIGPIPE, SIG_IGN);
    int failed = 0;
    for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++)
        failed |= run(&variants[i]);
    return failed;
}
