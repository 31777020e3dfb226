/* vsocket-stress: shared types and declarations.
 *
 * The tool is split by concern:
 *   proto.c    message framing, PRNG, checksum, the stream checker
 *   net.c      small socket helpers (resolve, connect, listen, timeouts, I/O with EINTR)
 *   engine_*.c the TCP I/O strategies (blocking, threads, poll/epoll loop)
 *   udp.c      UDP flows (client) and the UDP echo/verifier (server)
 *   session.c  control protocol and the client/server side of one run
 *   main.c     command line, self-contained mode, reporting, exit codes
 */
#ifndef VSOCKET_STRESS_H
#define VSOCKET_STRESS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "toolutil.h"

/* Exit codes (documented in README.md). */
enum { EXIT_PASS = 0, EXIT_DATA = 1, EXIT_USAGE = 2, EXIT_SETUP = 3 };

enum mode { MODE_BLOCKING, MODE_POLL, MODE_EPOLL_LT, MODE_EPOLL_ET, MODE_THREADS, MODE_COUNT };

/* Deliberate faults, used to prove the checker can fail. */
enum inject {
    INJECT_NONE,
    INJECT_PAYLOAD, /* flip one payload byte after the checksum was computed */
    INJECT_HEADER,  /* flip one header byte: the connection must be abandoned */
    INJECT_LOSS,    /* never send one message */
    INJECT_REORDER, /* swap two messages */
    INJECT_UDP,     /* flip one payload byte of one datagram */
};

/* Everything both ends must agree on; the client sends it to the server. */
struct config {
    enum mode mode;
    uint32_t conns;
    uint32_t udp_flows;
    uint64_t messages;
    uint64_t min_size;
    uint64_t max_size;
    uint64_t udp_max_size;
    uint64_t seed;
    uint64_t timeout_ms; /* the server gives up on the run after this */
    enum inject inject;
};

/* ---- proto.c ---- */

#define HDR_SIZE 48
#define MSG_MAGIC 0x76736f636b4d5347ULL /* "vsockMSG" */

struct msg_hdr {
    uint64_t magic;
    uint64_t stream; /* conn id * 2 + direction (0 = client->server) */
    uint64_t seq;
    uint64_t len;
    uint64_t sum; /* FNV-1a 64 of the payload */
};

uint64_t mix64(uint64_t x);
uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n);
#define FNV_INIT 0xcbf29ce484222325ULL

struct rng {
    uint64_t s;
};
uint64_t rng_next(struct rng *r);
uint64_t rng_below(struct rng *r, uint64_t n);
uint64_t log_uniform(uint64_t r, uint64_t lo, uint64_t hi);

void hdr_encode(uint8_t *out, const struct msg_hdr *h);
bool hdr_decode(const uint8_t *in, struct msg_hdr *h); /* false: magic or header sum wrong */

uint64_t stream_id(uint32_t conn, bool from_server);
uint64_t msg_len(const struct config *cfg, uint64_t stream, uint64_t seq);
void fill_payload(uint8_t *p, size_t n, uint64_t seed, uint64_t stream, uint64_t seq);

/* Sender side of one direction of one connection. */
struct tx_stream {
    const struct config *cfg;
    uint64_t stream;
    uint64_t next; /* index into the send order */
    uint8_t *buf;  /* header + payload of the current message */
    size_t cap, len, off;
    uint64_t bytes;   /* bytes handed to the kernel */
    bool inject_here; /* this stream carries the --inject-corruption fault */
};
void tx_init(struct tx_stream *tx, const struct config *cfg, uint64_t stream, bool inject_here);
bool tx_prepare(struct tx_stream *tx); /* build the next message; false when none left */
bool tx_pending(const struct tx_stream *tx);
bool tx_more(const struct tx_stream *tx); /* another message is left to prepare */
void tx_free(struct tx_stream *tx);

/* Receiver side: verifies headers, sequence and checksum as bytes arrive. */
struct rx_stream {
    const struct config *cfg;
    uint64_t stream;
    uint8_t hdr[HDR_SIZE];
    size_t hdr_got;
    bool in_payload;
    struct msg_hdr cur;
    uint64_t pay_got;
    uint64_t sum;
    uint8_t *seen; /* bitmap over sequence numbers */
    uint64_t max_seq_seen_plus1;
    bool abandoned; /* after a corrupt header the rest of the stream is garbage */
    bool eof;
    /* results */
    uint64_t bytes, msgs, lost, corrupt, reordered, corrupt_bytes;
};
void rx_init(struct rx_stream *rx, const struct config *cfg, uint64_t stream);
void rx_feed(struct rx_stream *rx, const uint8_t *p, size_t n);
size_t rx_want(const struct rx_stream *rx); /* bytes until the end of the current message */
void rx_finish(struct rx_stream *rx, bool count_lost);
void rx_free(struct rx_stream *rx);

/* ---- one TCP connection end, as the engines see it ---- */
struct conn {
    int fd;
    uint32_t id;
    struct tx_stream tx;
    struct rx_stream rx;
    bool shut_wr;   /* we sent FIN */
    bool peer_gone; /* EOF before the end, ECONNRESET or EPIPE */
    int err;        /* errno of the first unexpected error, 0 if none */
    bool done;
};

enum run_status { RUN_OK, RUN_TIMEOUT };

struct engine_opts {
    bool is_client;
    uint64_t deadline_ns; /* CLOCK_MONOTONIC */
    uint64_t read_seed;
};

enum run_status engine_blocking(struct conn *c, int n, const struct engine_opts *o);
enum run_status engine_threads(struct conn *c, int n, const struct engine_opts *o);
enum run_status engine_loop(enum mode m, struct conn *c, int n, const struct engine_opts *o);
enum run_status engine_run(enum mode m, struct conn *c, int n, const struct engine_opts *o);

/* helpers shared by the engines (engine_common.c) */
#define READ_MAX (256 * 1024)
size_t pick_read_size(struct rng *r, size_t cap);
bool peer_gone_errno(int err);
void conn_note_error(struct conn *c, int err);
void conn_shutdown_wr(struct conn *c);
bool deadline_passed(const struct engine_opts *o);

/* ---- net.c ---- */
static inline int resolve(const char *host, uint16_t port, bool ipv6, int socktype, bool passive,
                          struct sockaddr_storage *ss, socklen_t *len)
{
    return tool_resolve("vsocket-stress", host, port, ipv6 ? AF_INET6 : AF_INET, socktype, passive,
                        ss, len);
}
int tcp_listen(const char *bind_addr, uint16_t port, bool ipv6, uint16_t *bound_port);
int udp_bind(const char *bind_addr, uint16_t port, bool ipv6);
int tcp_connect(const char *host, uint16_t port, bool ipv6, int timeout_ms);
int accept_until(int lfd, uint64_t deadline_ns);
int set_io_timeout(int fd, int ms);
int set_nonblock(int fd, bool on);
/* Full-length blocking transfer; -1 with errno on error, ETIMEDOUT past the deadline. */
/* One send of up to N bytes; every other call (by N and P) as one sendmsg of
 * several buffers, a zero-length one among them, which a transport must
 * carry as the same bytes. */
ssize_t send_some(int fd, const uint8_t *p, size_t n);
int send_all(int fd, const void *p, size_t n, uint64_t deadline_ns);
int recv_all(int fd, void *p, size_t n, uint64_t deadline_ns); /* 0 on EOF before n */

/* ---- udp.c ---- */
struct udp_result {
    uint64_t sent, received, lost, corrupt, late;
};
int udp_client_run(const struct config *cfg, const char *host, uint16_t port, bool ipv6,
                   uint64_t deadline_ns, struct udp_result *res);

struct udp_server {
    int fd;
    const struct config *cfg;
    atomic_bool stop;
    struct udp_result res;
};
void *udp_server_thread(void *arg);

/* ---- session.c ---- */
struct side_result {
    uint64_t conns_ok, bytes, msgs, lost, corrupt, reordered, corrupt_bytes;
    uint64_t peer_gone, errors;
    bool timed_out;
};

struct client_opts {
    const char *host;
    uint16_t port;
    bool ipv6;
    bool quiet;
    uint64_t deadline_ns;
    int kill_peer_after_ms; /* <0: off */
};

struct client_report {
    struct side_result client, server;
    bool have_server; /* the server's numbers arrived over the control connection */
    bool peer_killed; /* we killed the server during the run */
    struct udp_result udp;
    uint64_t server_udp_corrupt;
    int status;      /* exit code */
    const char *why; /* message for a setup failure or time-out */
};

void client_run(const struct config *cfg, const struct client_opts *o, struct client_report *r);

struct server_opts {
    const char *bind_addr;
    uint16_t port;
    bool ipv6;
    bool quiet;
    bool once;
    int ready_fd; /* self-contained mode: write the bound port here, -1 if unused */
};
int server_run(const struct server_opts *o);

const char *mode_name(enum mode m);
void tally(struct side_result *s, const struct conn *c, int n);

#endif
