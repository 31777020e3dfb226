/* udp_shm.h - UDP between processes of this host over shared memory
 * (docs/design/udp.md §7), internal to transport/dgram.
 *
 * A socket on shm has a state of its own (s->conn): a rendezvous, an
 * abstract SOCK_SEQPACKET name derived from its bound address, where peers
 * call it; an eventfd producers ring when it sleeps; a page it publishes
 * to them read-only (who sleeps); and a peer table whose entries each have
 * a pair: a unix socket to the peer, and one datagram ring each way
 * (memory/dgram_ring.h), memfds passed over it. A peer's datagrams go on
 * the kernel until its pair is up, then on the rings; the kernel socket is
 * always read too.
 *
 * The state is this process's, the carrier's: another process holding the
 * socket (a forked child, an exec'd image) sends and receives on the
 * kernel. A socket forked before its first use is carried by the holder
 * that uses it first (a pre-fork server's child). The page, made with the
 * state, is shared by the holders: another holder's first use, or an exec
 * that passes the socket on, marks it "left": producers then send to this
 * socket on the kernel, where every holder reads, and the carrier ends
 * its pairs at its next call, delivering what its rings still hold
 * (udp.md §8).
 * Every function here is called with U->lock held unless it says so. */
#ifndef VSOCKET_DGRAM_UDP_SHM_H
#define VSOCKET_DGRAM_UDP_SHM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "core/sock.h"
#include "memory/dgram_ring.h"
#include "transport/dgram/peers.h"

/* The page a receiving socket publishes to its producers (read-only for
 * them): they ring its eventfd when a thread of it sleeps, once per sleep. */
#define VS_UDP_PAGE_MAGIC 0x31505355u /* "USP1" */
#define VS_UDP_PAGE_SIZE 4096

struct vs_udp_page {
    uint32_t magic;
    _Atomic uint32_t sleepers; /* threads asleep waiting for datagrams */
    _Atomic uint32_t seq;      /* bumped at each sleep: one wake-up per sleep */
    /* Set for good when another process than the carrier receives on the
     * socket: its datagrams must then reach the kernel socket. */
    _Atomic uint32_t left;
    /* A socket not used yet when its process forked: the holder that uses
     * it first writes its pid here and carries it (0: nobody yet). */
    _Atomic int32_t carrier;
};

enum vs_udp_pair_state {
    VS_PAIR_KERNEL,    /* on the kernel, counting datagrams before a set-up */
    VS_PAIR_CALLING,   /* we called the peer's rendezvous: HELLO sent */
    VS_PAIR_ANSWERING, /* the peer called ours: ACCEPT sent, its READY awaited */
    VS_PAIR_UP,        /* both rings in place */
    VS_PAIR_PLAIN,     /* on the kernel for good: no vsocket there, or it failed */
};

struct vs_udp_pair {
    int state;            /* enum vs_udp_pair_state */
    int chan;             /* the unix socket to the peer, -1 */
    uint32_t kernel_sent; /* datagrams sent to it on the kernel */
    unsigned tries;       /* calls that found no rendezvous */
    long next_try_ns, deadline_ns;
    struct sockaddr_storage peer; /* as the kernel names it to us */
    struct sockaddr_storage me;   /* our address as the peer sees it */
    struct vs_ring rx, tx;        /* we consume / we produce */
    bool rx_ok, tx_ok;
    /* No datagram of this ring delivered yet: the kernel first, where the
     * peer's datagrams from before the switch wait (udp.md §3.5). */
    bool fresh;
    /* Torn down with datagrams unread: deliver them up to CUT, then free. */
    bool draining;
    uint64_t cut;
    int peer_event;                      /* the peer's eventfd, -1 */
    const struct vs_udp_page *peer_page; /* mapped read-only, or NULL */
    uint32_t rung;                       /* the peer's sleep we last rang for */
    long next_look_ns;                   /* producer: next look for a hang-up */
    uint64_t ring_tx, ring_rx;           /* datagrams written, delivered, on the rings */
    uint64_t ring_full;                  /* dropped: the receiver held its capacity */
    uint32_t made_at;                    /* its place in the socket's made[] */
};

/* A caller on our rendezvous whose HELLO is not read yet. */
#define VS_UDP_CALLERS 4

struct vs_udp_sock {
    pthread_mutex_t lock;
    _Atomic pid_t pid; /* the process the state is of: the carrier */
    /* Forked before its first use: its page is shared with the other
     * holders, and the first to use it carries it (page->carrier). */
    _Atomic bool young_shared;
    struct vs_stats_record *stat;
    int family;      /* the socket's */
    const char *off; /* set: the socket stays on the kernel, and why */
    bool used;       /* its rendezvous was tried */
    int listener;    /* the rendezvous, -1 */
    int event;       /* our eventfd, -1 */
    int news;        /* an epoll set of the three above and the pairs' sockets: the watch fd */
    int page_fd;     /* the page's memfd, sent to each peer */
    struct vs_udp_page *page;
    struct sockaddr_storage local; /* bound address, when known */
    bool bound;
    int caller[VS_UDP_CALLERS];
    long caller_deadline_ns[VS_UDP_CALLERS];
    struct vs_udp_peers *peers;
    struct vs_udp_pair **pair; /* by peer slot, NULL until needed */
    uint32_t cap;
    /* The slots that have a pair, in the order made (a pair lives as long
     * as the socket): the sweeps visit these, not all cap slots, which cost
     * a scan of the whole table per receive. */
    uint32_t *made;
    uint32_t nmade;
    unsigned live;      /* pairs with a set-up under way or a ring to read */
    unsigned up;        /* pairs up */
    unsigned next_ring; /* where in made[] the next sweep starts: every ring gets its turn */
    unsigned ring_run;  /* ring datagrams delivered since the kernel was last read */
    int peek;           /* where the last MSG_PEEK looked: -1, VS_UDP_PEEK_KERNEL, or a slot */
    bool connected;
    struct sockaddr_storage conn;
    long next_service_ns;
    long next_reclaim_ns;     /* the rings' next look for pages to give back */
    uint64_t budget;          /* the ring's capacity: the effective SO_RCVBUF */
    _Atomic uint32_t gen;     /* bumped when the socket leaves shm (translated() changes) */
    _Atomic uint64_t rx_gone; /* datagram bytes of rings freed (rx_mark) */
};

#define VS_UDP_PEEK_KERNEL (-2)
/* At most this many ring datagrams before the kernel socket is read again. */
#define VS_UDP_RING_RUN 16
/* A set-up the peer has not finished by then fails (the pair stays on the
 * kernel). */
#define VS_UDP_SETUP_NS 2000000000L
/* Calls that found no rendezvous: again after 10, 20, ... ms, then never. */
#define VS_UDP_CALL_TRIES 8
#define VS_UDP_CALL_RETRY_NS 10000000L
/* How often the data path looks at the set-ups and the peers' sockets. */
#define VS_UDP_SERVICE_NS 1000000L
/* A ring quiet this long gives its pages back (as shm TCP's), looked at
 * every VS_UDP_RECLAIM_NS at most. */
#define VS_UDP_IDLE_NS 100000000L
#define VS_UDP_RECLAIM_NS 50000000L

/* state.c */
struct vs_udp_sock *vs_udp_new(int fd, int family, struct vs_stats_record *stat);
/* The socket's state if it is this process's and on shm (or its rings
 * still drain), else NULL: the kernel then has the call. In another
 * holder than the carrier, marks the socket left. */
struct vs_udp_sock *vs_udp_of(struct vs_sock *s);
void vs_udp_free(struct vs_udp_sock *u);
void vs_udp_set_pid(pid_t pid);
/* fork: every state of the process locked if free (a state busy in
 * another thread is skipped), those not used yet made claimable by the
 * first holder to use them; then, in both processes, unlocked, the child
 * closing its copies of the carrier's rendezvous and pair sockets. */
void vs_udp_fork_prepare(void);
void vs_udp_fork_done(bool child);
/* The socket stays on the kernel from now on: every pair ends (what
 * their rings hold is still delivered). */
void vs_udp_off(struct vs_udp_sock *u, const char *reason);
/* Marks S's page left (the header above): another process than the
 * carrier uses S (vs_udp_of calls it for any use), or an exec'd image will
 * read it on the kernel. Without the lock. WHY names the use, for the log;
 * FD, or -1. */
void vs_udp_mark_left(struct vs_sock *s, int fd, const char *why);
/* The carrier: another process received, the socket leaves shm. */
void vs_udp_check_left(struct vs_udp_sock *u);
/* SO_RCVBUF changed: rings made from now on hold its new value. */
void vs_udp_budget(struct vs_udp_sock *u, int fd);
/* The first use: bound address, rendezvous, eventfd, page. */
void vs_udp_use(struct vs_udp_sock *u, int fd);
int vs_udp_own(struct vs_udp_sock *u, int fd);
void vs_udp_close(struct vs_udp_sock *u, int *fd);
/* Adds FD to the watch set under TAG (VS_UDP_TAG_*), or changes its tag. */
void vs_udp_watch(struct vs_udp_sock *u, int fd, uint64_t tag, bool change);
struct vs_udp_pair *vs_udp_pair_at(struct vs_udp_sock *u, int slot);
/* The pair of ADDR, made when MAKE; its slot in *SLOT. */
struct vs_udp_pair *vs_udp_pair_for(struct vs_udp_sock *u, const struct sockaddr_storage *addr,
                                    bool make, int *slot);
void vs_udp_bump(struct vs_udp_sock *u);

#define VS_UDP_TAG_EVENT 1ull
#define VS_UDP_TAG_LISTENER 2ull
#define VS_UDP_TAG_CALLER (1ull << 32) /* | index */
#define VS_UDP_TAG_PAIR (2ull << 32)   /* | slot */

/* rendezvous.c */
struct sockaddr_un;
/* The name a socket bound at SS listens on: "\0vsocket/u1/<address>:<port>". */
socklen_t vs_udp_rendezvous_name(const struct sockaddr_storage *ss, struct sockaddr_un *un);
/* Reads the watch set and acts on it: callers, messages, hang-ups,
 * set-ups out of time. FD: the program's socket. */
void vs_udp_service(struct vs_udp_sock *u, int fd);
/* A datagram to PEER went on the kernel: count it, and call the peer once
 * the pair has shown it lives. */
void vs_udp_sent_on_kernel(struct vs_udp_sock *u, int fd, const struct sockaddr_storage *peer);
/* The pair leaves the rings for the kernel, for good; REASON is logged. */
void vs_udp_pair_down(struct vs_udp_sock *u, int slot, const char *reason);
/* Counts the pairs live and up again (after one changed). */
void vs_udp_recount(struct vs_udp_sock *u);
/* connect(): only PEER's datagrams are delivered from now on (NULL: any). */
void vs_udp_connected(struct vs_udp_sock *u, const struct sockaddr_storage *peer);

/* shm_path.c */
/* Writes the datagram of MSG into the pair's ring. 0 (taken, or dropped
 * since the receiver is full, as UDP drops), or -1: the pair went down, the
 * kernel must carry it. */
int vs_udp_ring_send(struct vs_udp_sock *u, int slot, const struct msghdr *msg);
/* The slot of a ring with a datagram to deliver, or -1. */
int vs_udp_ring_ready(struct vs_udp_sock *u);
/* Delivers the next datagram of SLOT's ring into MSG as recvmsg would:
 * its length (the whole length with MSG_TRUNC), or -EAGAIN when it had
 * none after all (it went down). */
ssize_t vs_udp_ring_take(struct vs_udp_sock *u, int slot, struct msghdr *msg, int flags);
/* Our sleepers: announce before sleeping (full fence), withdraw after. */
void vs_udp_arm(struct vs_udp_sock *u);
void vs_udp_disarm(struct vs_udp_sock *u);
uint64_t vs_udp_rx_mark(struct vs_udp_sock *u);
/* Gives back the pages of the pairs' rings quiet for VS_UDP_IDLE_NS: our
 * send rings as their producer, our receive rings as their consumer (the
 * peer's program need not call). At most every VS_UDP_RECLAIM_NS. */
void vs_udp_rings_idle(struct vs_udp_sock *u, long now);

#endif
