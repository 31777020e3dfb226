/* rendezvous.c - finding a UDP peer on this host and setting up its pair
 * (udp_shm.h; docs/design/udp.md §7).
 *
 * A socket that has sent VSOCKET_UDP_UPGRADE_AFTER_DGRAMS datagrams to a
 * peer calls the peer's rendezvous, the abstract name of its bound address
 * (exact, then the wildcards), and says HELLO: its descriptor number and
 * both addresses. The responder checks that the caller holds the socket
 * that receives what it sends to the initiator's address (SO_PEERCRED and
 * sock_diag, transport/local_proof.h), and answers ACCEPT with its receive
 * ring, its page and its eventfd; the initiator checks the responder the
 * same way and answers READY with its own three. Nothing goes on the
 * program's socket. A peer that cannot prove, or is not there, stays on
 * the kernel. Nothing here blocks: it runs at the program's calls. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "base/real.h"
#include "base/syscall.h"
#include "config/config.h"
#include "config/log.h"
#include "config/stats.h"
#include "core/clock.h"
#include "core/reason.h"
#include "transport/addr.h"
#include "transport/dgram/proto.h"
#include "transport/dgram/udp_shm.h"
#include "transport/diag.h"
#include "transport/local_proof.h"
#include "transport/unix_msg.h"

#define MAX_FDS 3
/* A caller gets this long to say HELLO. */
#define CALLER_PATIENCE_NS 200000000L

/* An IPv4 peer of an IPv6 socket as plain IPv4: how the peer's own socket
 * and the kernel's lookups name it. */
static struct sockaddr_storage plain(const struct sockaddr_storage *ss)
{
    struct sockaddr_storage out = *ss;
    const struct sockaddr_in6 *in6 = (const void *)ss;
    if (ss->ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
        struct sockaddr_in *in = (void *)&out;
        memset(&out, 0, sizeof(out));
        in->sin_family = AF_INET;
        in->sin_port = in6->sin6_port;
        memcpy(&in->sin_addr, &in6->sin6_addr.s6_addr[12], 4);
    }
    return out;
}

static uint16_t port_of(const struct sockaddr_storage *ss)
{
    return ss->ss_family == AF_INET ? ((const struct sockaddr_in *)ss)->sin_port
                                    : ((const struct sockaddr_in6 *)ss)->sin6_port;
}

socklen_t vs_udp_rendezvous_name(const struct sockaddr_storage *ss, struct sockaddr_un *un)
{
    memset(un, 0, sizeof(*un));
    un->sun_family = AF_UNIX;
    char *p = un->sun_path + 1;
    size_t room = sizeof(un->sun_path) - 1;
    size_t n = (size_t)snprintf(p, room, "vsocket/u1/");
    n += vs_addr_format(p + n, room - n, ss);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* The source address the kernel gives our datagrams to PEER (its route's),
 * with our port: how the peer sees us. */
static bool source_for(const struct sockaddr_storage *peer, uint16_t port,
                       struct sockaddr_storage *out)
{
    struct sockaddr_storage to = plain(peer);
    int t = vs_real.socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    socklen_t len = sizeof(*out);
    socklen_t tolen =
        to.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    bool ok = t >= 0 && vs_real.connect(t, (void *)&to, tolen) == 0 &&
              vs_real.getsockname(t, (void *)out, &len) == 0;
    if (t >= 0)
        vs_syscall(SYS_close, t);
    if (ok && out->ss_family == AF_INET)
        ((struct sockaddr_in *)out)->sin_port = port;
    else if (ok)
        ((struct sockaddr_in6 *)out)->sin6_port = port;
    return ok;
}

static bool wildcard(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
    return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

/* Whether ADDR is one of this host's: a datagram to it stays here. Only
 * then may shm carry it (a wildcard socket here would pass for a remote
 * one in the kernel's lookup, which ignores whether the address is ours). */
static bool on_this_host(const struct sockaddr_storage *addr)
{
    struct sockaddr_storage a = plain(addr), src;
    if (vs_addr_loopback(&a))
        return true;
    return source_for(&a, port_of(&a), &src) &&
           vs_addr_same_ip((const struct sockaddr *)&a, (const struct sockaddr *)&src);
}

static bool send_hs(int chan, const struct vs_udp_hs *m, const int *fds, int nfds)
{
    uint8_t buf[VS_UDP_HS_LEN];
    return vs_udp_hs_encode(m, buf) == VS_UDP_HS_LEN &&
           vs_unix_send(chan, buf, sizeof(buf), fds, nfds);
}

static void close_fds(int *fds, int nfds)
{
    for (int i = 0; i < nfds; i++)
        vs_syscall(SYS_close, fds[i]);
}

/* One message and its descriptors (at most MAX_FDS: more are closed). 1
 * read, 0 none waiting, -1 hang-up, error, or not a message of ours (its
 * descriptors closed). */
static int recv_hs(int chan, const struct sockaddr_storage *bound, struct vs_udp_hs *m, int *fds,
                   int *nfds)
{
    uint8_t buf[VS_UDP_HS_LEN + 1];
    int flags = 0;
    ssize_t n = vs_unix_recv(chan, buf, sizeof(buf), fds, MAX_FDS, nfds, &flags);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (n == 0 || (flags & (MSG_TRUNC | MSG_CTRUNC)) ||
        vs_udp_hs_parse(buf, (size_t)n, bound, m) != VS_UDP_OK) {
        close_fds(fds, *nfds);
        *nfds = 0;
        return -1;
    }
    return 1;
}

static void decline(int chan, uint8_t status)
{
    struct vs_udp_hs m = {.type = VS_UDP_HS_DECLINE, .status = status};
    send_hs(chan, &m, NULL, 0);
}

void vs_udp_recount(struct vs_udp_sock *u)
{
    unsigned live = 0, up = 0;
    for (uint32_t k = 0; k < u->nmade; k++) {
        struct vs_udp_pair *p = u->pair[u->made[k]];
        live += p->state == VS_PAIR_CALLING || p->state == VS_PAIR_ANSWERING ||
                p->state == VS_PAIR_UP || p->rx_ok;
        up += p->state == VS_PAIR_UP;
    }
    /* A socket that left shm is the kernel's alone once its last ring
     * is read: readiness must hear that translated() changed. */
    if (u->off && u->live && !live)
        vs_udp_bump(u);
    u->live = live;
    if ((u->up == 0) != (up == 0))
        vs_stats_set_transport(u->stat, up ? VS_TRANSPORT_SHM : VS_TRANSPORT_KERNEL,
                               up       ? ""
                               : u->off ? u->off
                                        : VS_REASON_UDP);
    if (u->up != up)
        vs_stats_set_dgram_peers(u->stat, up);
    u->up = up;
}

void vs_udp_pair_down(struct vs_udp_sock *u, int slot, const char *reason)
{
    struct vs_udp_pair *p = vs_udp_pair_at(u, slot);
    if (!p || (p->state == VS_PAIR_PLAIN && p->chan < 0 && !p->tx_ok))
        return;
    vs_udp_close(u, &p->chan); /* the peer sees the hang-up */
    if (p->tx_ok) {
        vs_ring_close_writer(&p->tx, false);
        vs_ring_destroy(&p->tx);
        p->tx_ok = false;
    }
    /* What the peer wrote before it saw the end is still delivered. */
    if (p->rx_ok && !p->draining) {
        vs_ring_close_reader(&p->rx);
        p->draining = true;
        p->cut = vs_ring_head(&p->rx);
    }
    if (p->peer_page)
        munmap((void *)p->peer_page, VS_UDP_PAGE_SIZE);
    p->peer_page = NULL;
    vs_udp_close(u, &p->peer_event);
    char who[64];
    vs_addr_format(who, sizeof(who), &p->peer);
    if (reason)
        vs_info("udp shm: pair with %s on the kernel from now on: %s", who, reason);
    if (p->state == VS_PAIR_UP)
        vs_debug("udp shm: pair with %s ended: %llu datagrams sent on the ring, %llu "
                 "dropped there (receiver full), %llu received from it",
                 who, (unsigned long long)p->ring_tx, (unsigned long long)p->ring_full,
                 (unsigned long long)p->ring_rx);
    p->state = VS_PAIR_PLAIN;
    vs_udp_recount(u);
}

void vs_udp_connected(struct vs_udp_sock *u, const struct sockaddr_storage *peer)
{
    u->connected = peer != NULL;
    if (peer)
        u->conn = *peer;
    int keep = -1;
    if (peer)
        vs_udp_pair_for(u, peer, false, &keep);
    /* Others' datagrams are the kernel's to refuse from now on: their pairs
     * end, and what they wrote before stays deliverable, as datagrams the
     * kernel queued before a connect do. */
    for (uint32_t k = 0; peer && k < u->nmade; k++)
        if ((int)u->made[k] != keep)
            vs_udp_pair_down(u, (int)u->made[k], "the socket connected to another peer");
}

/* Our three descriptors for the peer: our receive ring, page, eventfd. */
static bool send_ours(struct vs_udp_sock *u, struct vs_udp_pair *p, int chan, int fd, uint8_t type)
{
    struct vs_ring_size size = vs_ring_size_for(64u << 10, u->budget, u->budget);
    if (vs_ring_create(&p->rx, size, VS_RING_CONSUMER) < 0)
        return false;
    p->rx.futex_signal = false;
    struct vs_udp_hs m = {.type = type, .fd = (uint64_t)fd};
    int fds[3] = {p->rx.fd, u->page_fd, u->event};
    bool ok = send_hs(chan, &m, fds, 3);
    vs_ring_close_fd(&p->rx);
    if (!ok) {
        vs_ring_destroy(&p->rx);
        return false;
    }
    p->rx_ok = true;
    p->fresh = true;
    p->draining = false;
    return true;
}

static bool is_eventfd(int fd)
{
    char path[64], link[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    if (n <= 0)
        return false;
    link[n] = '\0';
    return strcmp(link, "anon_inode:[eventfd]") == 0;
}

/* The peer's page: sealed to its size (nobody can shrink it under us) and
 * mapped read-only. */
static const struct vs_udp_page *map_page(int fd)
{
    struct stat st;
    long seals = vs_syscall(SYS_fcntl, fd, F_GET_SEALS);
    if (fstat(fd, &st) < 0 || st.st_size != VS_UDP_PAGE_SIZE || seals < 0 ||
        !(seals & F_SEAL_SHRINK))
        return NULL;
    void *mem = mmap(NULL, VS_UDP_PAGE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    return mem == MAP_FAILED ? NULL : mem;
}

/* The peer's three descriptors (FDS, taken over or closed): its receive
 * ring becomes ours to write, its page and eventfd ours to wake it with. */
static bool take_theirs(struct vs_udp_sock *u, struct vs_udp_pair *p, int *fds, int nfds)
{
    if (nfds != 3 || !is_eventfd(fds[2]) || !(p->peer_page = map_page(fds[1]))) {
        close_fds(fds, nfds);
        return false;
    }
    vs_syscall(SYS_close, fds[1]);
    if (vs_ring_attach(&p->tx, fds[0], VS_RING_PRODUCER) < 0) {
        vs_syscall(SYS_close, fds[0]);
        vs_syscall(SYS_close, fds[2]);
        return false;
    }
    p->tx.futex_signal = false;
    vs_ring_close_fd(&p->tx);
    p->tx_ok = true;
    /* A full counter would block our write: never wait on a peer's file. */
    vs_syscall(SYS_fcntl, fds[2], F_SETFL, O_NONBLOCK);
    p->peer_event = vs_udp_own(u, fds[2]);
    (void)u;
    return true;
}

static void pair_up(struct vs_udp_sock *u, struct vs_udp_pair *p)
{
    p->state = VS_PAIR_UP;
    char who[64];
    vs_addr_format(who, sizeof(who), &p->peer);
    vs_debug("udp shm: pair with %s up", who);
    vs_udp_recount(u);
}

/* The peer holds the socket that receives what we send it: the socket
 * sock_diag finds for a datagram from ME to PEER is its descriptor FD_NO. */
static bool peer_proven(int chan, const struct sockaddr_storage *me,
                        const struct sockaddr_storage *peer, uint64_t fd_no)
{
    return vs_local_holds(chan, fd_no, -1, vs_diag_udp(me, peer, NULL));
}

/* ---------------------------------------------------------------- initiator */

static void call_failed(struct vs_udp_pair *p)
{
    p->tries++;
    if (p->tries >= VS_UDP_CALL_TRIES) {
        p->state = VS_PAIR_PLAIN;
        return;
    }
    p->next_try_ns = vs_now_ns() + (VS_UDP_CALL_RETRY_NS << (p->tries - 1));
}

/* Connects CHAN to the rendezvous of PEER: its exact address, then the
 * wildcards that would receive for it. */
static bool dial(int chan, const struct sockaddr_storage *peer)
{
    struct sockaddr_storage names[3];
    int n = 0;
    names[n++] = plain(peer);
    struct sockaddr_storage any;
    memset(&any, 0, sizeof(any));
    if (names[0].ss_family == AF_INET) {
        struct sockaddr_in *in = (void *)&any;
        in->sin_family = AF_INET;
        in->sin_port = port_of(&names[0]);
        names[n++] = any;
    }
    memset(&any, 0, sizeof(any));
    struct sockaddr_in6 *in6 = (void *)&any;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = port_of(&names[0]);
    names[n++] = any;
    for (int i = 0; i < n; i++) {
        struct sockaddr_un un;
        socklen_t len = vs_udp_rendezvous_name(&names[i], &un);
        if (vs_real.connect(chan, (void *)&un, len) == 0)
            return true;
    }
    return false;
}

static void call(struct vs_udp_sock *u, int fd, int slot, struct vs_udp_pair *p)
{
    if (!on_this_host(&p->peer)) {
        p->state = VS_PAIR_PLAIN; /* another host's: a later step's business */
        return;
    }
    /* How the peer sees us: our bound address, or for a wildcard bind the
     * source the kernel picks for it. */
    struct sockaddr_storage me = plain(&u->local);
    if (wildcard(&me) && !source_for(&p->peer, port_of(&me), &me))
        return call_failed(p);
    p->me = me;
    int chan = vs_real.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (chan < 0)
        return call_failed(p);
    struct ucred cred;
    struct vs_udp_hs m = {
        .type = VS_UDP_HS_HELLO, .fd = (uint64_t)fd, .from = me, .to = plain(&p->peer)};
    if (!dial(chan, &p->peer) || !vs_local_peer_cred(chan, &cred) || !send_hs(chan, &m, NULL, 0)) {
        vs_syscall(SYS_close, chan);
        return call_failed(p);
    }
    p->chan = vs_udp_own(u, chan);
    vs_udp_watch(u, p->chan, VS_UDP_TAG_PAIR | (uint32_t)slot, false);
    p->state = VS_PAIR_CALLING;
    p->deadline_ns = vs_now_ns() + VS_UDP_SETUP_NS;
    vs_udp_recount(u);
}

void vs_udp_sent_on_kernel(struct vs_udp_sock *u, int fd, const struct sockaddr_storage *peer)
{
    vs_udp_use(u, fd);
    if (!u->used || u->off)
        return;
    int slot;
    struct vs_udp_pair *p = vs_udp_pair_for(u, peer, true, &slot);
    if (!p || p->state != VS_PAIR_KERNEL)
        return;
    if (++p->kernel_sent < vs_config.udp_upgrade_after || vs_now_ns() < p->next_try_ns)
        return;
    call(u, fd, slot, p);
}

static void initiator_message(struct vs_udp_sock *u, int fd, int slot, struct vs_udp_pair *p,
                              const struct vs_udp_hs *m, int *fds, int nfds)
{
    if (m->type == VS_UDP_HS_DECLINE && m->status == VS_UDP_HS_CROSSING) {
        /* The peer's own call wins: it comes to our rendezvous. */
        close_fds(fds, nfds);
        vs_udp_close(u, &p->chan);
        p->state = VS_PAIR_KERNEL;
        p->next_try_ns = vs_now_ns() + VS_UDP_SETUP_NS;
        return vs_udp_recount(u);
    }
    if (m->type != VS_UDP_HS_ACCEPT) {
        close_fds(fds, nfds);
        return vs_udp_pair_down(u, slot, VS_REASON_DECLINED_BY_PEER);
    }
    if (!peer_proven(p->chan, &p->me, &p->peer, m->fd)) {
        close_fds(fds, nfds);
        decline(p->chan, VS_UDP_HS_REFUSED);
        return vs_udp_pair_down(u, slot, VS_REASON_PEER_PROOF_FAILED);
    }
    if (!take_theirs(u, p, fds, nfds) || !send_ours(u, p, p->chan, fd, VS_UDP_HS_READY))
        return vs_udp_pair_down(u, slot, VS_REASON_HANDSHAKE_MALFORMED);
    pair_up(u, p);
}

/* ---------------------------------------------------------------- responder */

static void accept_callers(struct vs_udp_sock *u)
{
    for (int budget = 8; budget > 0; budget--) {
        int chan = vs_real.accept4(u->listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (chan < 0)
            return;
        struct ucred cred;
        int i = 0;
        while (i < VS_UDP_CALLERS && u->caller[i] >= 0)
            i++;
        if (i == VS_UDP_CALLERS || !vs_local_peer_cred(chan, &cred)) {
            vs_syscall(SYS_close, chan);
            continue;
        }
        u->caller[i] = vs_udp_own(u, chan);
        u->caller_deadline_ns[i] = vs_now_ns() + CALLER_PATIENCE_NS;
        vs_udp_watch(u, u->caller[i], VS_UDP_TAG_CALLER | (uint32_t)i, false);
    }
}

/* Both call at once: the call of the lower address wins, on both sides. */
static bool ours_wins(const struct sockaddr_storage *me, const struct sockaddr_storage *peer)
{
    uint8_t a[16], b[16];
    uint16_t pa, pb;
    vs_udp_addr_key(me, a, &pa);
    vs_udp_addr_key(peer, b, &pb);
    int c = memcmp(a, b, 16);
    return c < 0 || (c == 0 && pa < pb);
}

static void answer(struct vs_udp_sock *u, int fd, int i, const struct vs_udp_hs *m)
{
    int chan = u->caller[i];
    int slot;
    struct vs_udp_pair *p = NULL;
    const char *refused = NULL;
    if (u->off) /* left shm: no pair comes up again */
        refused = u->off;
    else if (!on_this_host(&m->from) || !peer_proven(chan, &m->to, &m->from, m->fd))
        refused = "the caller does not hold the socket it speaks for";
    else if (!(p = vs_udp_pair_for(u, &m->from, true, &slot)))
        refused = "peer table full";
    if (refused) {
        vs_info("udp shm: rendezvous caller refused: %s", refused);
        decline(chan, VS_UDP_HS_REFUSED);
        return vs_udp_close(u, &u->caller[i]);
    }
    if (p->state == VS_PAIR_CALLING && ours_wins(&p->me, &m->from)) {
        decline(chan, VS_UDP_HS_CROSSING);
        return vs_udp_close(u, &u->caller[i]);
    }
    if (p->state == VS_PAIR_ANSWERING || p->state == VS_PAIR_UP || p->rx_ok) {
        decline(chan, VS_UDP_HS_BUSY);
        return vs_udp_close(u, &u->caller[i]);
    }
    vs_udp_close(u, &p->chan); /* our own call, which lost */
    p->me = m->to;
    if (!send_ours(u, p, chan, fd, VS_UDP_HS_ACCEPT)) {
        p->state = VS_PAIR_PLAIN;
        return vs_udp_close(u, &u->caller[i]);
    }
    p->chan = chan;
    u->caller[i] = -1;
    vs_udp_watch(u, p->chan, VS_UDP_TAG_PAIR | (uint32_t)slot, true);
    p->state = VS_PAIR_ANSWERING;
    p->deadline_ns = vs_now_ns() + VS_UDP_SETUP_NS;
    vs_udp_recount(u);
}

static void caller_message(struct vs_udp_sock *u, int fd, int i)
{
    struct vs_udp_hs m;
    int fds[MAX_FDS], nfds = 0;
    int r = recv_hs(u->caller[i], &u->local, &m, fds, &nfds);
    if (r == 0)
        return;
    close_fds(fds, nfds); /* a HELLO carries none */
    if (r < 0 || m.type != VS_UDP_HS_HELLO || nfds) {
        vs_info("udp shm: rendezvous caller refused: not a HELLO");
        return vs_udp_close(u, &u->caller[i]);
    }
    answer(u, fd, i, &m);
}

static void responder_message(struct vs_udp_sock *u, int slot, struct vs_udp_pair *p,
                              const struct vs_udp_hs *m, int *fds, int nfds)
{
    if (m->type != VS_UDP_HS_READY) {
        close_fds(fds, nfds);
        return vs_udp_pair_down(u, slot, VS_REASON_DECLINED_BY_PEER);
    }
    if (!take_theirs(u, p, fds, nfds))
        return vs_udp_pair_down(u, slot, VS_REASON_HANDSHAKE_MALFORMED);
    pair_up(u, p);
}

/* ------------------------------------------------------------------ service */

static void pair_message(struct vs_udp_sock *u, int fd, int slot)
{
    struct vs_udp_pair *p = vs_udp_pair_at(u, slot);
    for (int budget = 4; p && p->chan >= 0 && budget > 0; budget--) {
        struct vs_udp_hs m;
        int fds[MAX_FDS], nfds = 0;
        int r = recv_hs(p->chan, &u->local, &m, fds, &nfds);
        if (r == 0)
            return;
        if (r < 0)
            return vs_udp_pair_down(u, slot, VS_REASON_PEER_LEFT);
        if (p->state == VS_PAIR_CALLING)
            initiator_message(u, fd, slot, p, &m, fds, nfds);
        else if (p->state == VS_PAIR_ANSWERING)
            responder_message(u, slot, p, &m, fds, nfds);
        else {
            close_fds(fds, nfds);
            if (m.type == VS_UDP_HS_DECLINE)
                return vs_udp_pair_down(u, slot, VS_REASON_PEER_LEFT);
        }
    }
}

/* Set-ups and callers out of time. */
static void expire(struct vs_udp_sock *u)
{
    long now = vs_now_ns();
    for (int i = 0; i < VS_UDP_CALLERS; i++)
        if (u->caller[i] >= 0 && now > u->caller_deadline_ns[i])
            vs_udp_close(u, &u->caller[i]);
    for (uint32_t k = 0; u->live && k < u->nmade; k++) {
        struct vs_udp_pair *p = u->pair[u->made[k]];
        if ((p->state == VS_PAIR_CALLING || p->state == VS_PAIR_ANSWERING) && now > p->deadline_ns)
            vs_udp_pair_down(u, (int)u->made[k], VS_REASON_HANDSHAKE_TIMEOUT);
    }
}

void vs_udp_service(struct vs_udp_sock *u, int fd)
{
    vs_udp_check_left(u);
    if (u->news < 0)
        return;
    struct epoll_event ev[16];
    int n = (int)vs_syscall(SYS_epoll_wait, u->news, ev, 16, 0);
    for (int i = 0; i < n; i++) {
        uint64_t tag = ev[i].data.u64;
        if (tag == VS_UDP_TAG_EVENT) {
            uint64_t count;
            vs_syscall(SYS_read, u->event, &count, sizeof(count));
        } else if (tag == VS_UDP_TAG_LISTENER) {
            accept_callers(u);
        } else if ((tag >> 32) == (VS_UDP_TAG_CALLER >> 32)) {
            if ((uint32_t)tag < VS_UDP_CALLERS && u->caller[(uint32_t)tag] >= 0)
                caller_message(u, fd, (int)(uint32_t)tag);
        } else if ((tag >> 32) == (VS_UDP_TAG_PAIR >> 32)) {
            pair_message(u, fd, (int)(uint32_t)tag);
        }
    }
    expire(u);
    long now = vs_now_ns();
    vs_udp_rings_idle(u, now);
    u->next_service_ns = now + VS_UDP_SERVICE_NS;
}
