/* handshake.c - the side channel: rendezvous, proof of identity, ring
 * exchange, and the data-phase messages (proto.h).
 *
 * Nothing here blocks: every step is tried when the application calls into
 * the socket, and a step that cannot proceed is retried at the next call.
 * A handshake that does not complete in time leaves the connection on the
 * kernel, which it never left. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/procfile.h"
#include "core/reason.h"
#include "core/clock.h"
#include "config/config.h"
#include "config/log.h"
#include "base/real.h"
#include "base/syscall.h"
#include "transport/shm/conn.h"
#include "transport/shm/proto.h"
#include "transport/shm/shm.h"
#include "transport/addr.h"
#include "transport/diag.h"
#include "transport/local_proof.h"
#include "transport/unix_msg.h"

#define MAX_FDS 2
/* A caller on the rendezvous gets this long to say HELLO: the accepter
 * sends it right after connecting, so only a squatter holding the line to
 * keep the real accepter queued is ever that slow. */
#define CALLER_PATIENCE_NS 200000000L
/* The accepter calls a rendezvous not bound yet at most this often, and
 * either end looks for signs of a peer without vsocket at most this often. */

static void close_fd(int *fd)
{
    if (*fd >= 0)
        vs_syscall(SYS_close, *fd);
    *fd = -1;
}

/* The connector's rendezvous; the accepter computes the same name from the
 * mirrored 4-tuple. */
static socklen_t rendezvous_name(struct vs_shm_conn *c, struct sockaddr_un *un)
{
    const struct sockaddr_storage *conn_side = c->accepter ? &c->peer : &c->local;
    const struct sockaddr_storage *acc_side = c->accepter ? &c->local : &c->peer;
    memset(un, 0, sizeof(*un));
    un->sun_family = AF_UNIX;
    char *p = un->sun_path + 1;
    size_t room = sizeof(un->sun_path) - 1;
    size_t n = (size_t)snprintf(p, room, "%s", VS_SHM_RENDEZVOUS_PREFIX);
    n += vs_addr_format(p + n, room - n, conn_side);
    n += (size_t)snprintf(p + n, room - n, "/");
    n += vs_addr_format(p + n, room - n, acc_side);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static int unix_socket(void)
{
    return vs_real.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

int vs_shm_rendezvous_listen(struct vs_shm_conn *c)
{
    struct sockaddr_un un;
    socklen_t len = rendezvous_name(c, &un);
    int fd = unix_socket();
    if (fd < 0)
        return -errno;
    if (vs_real.bind(fd, (void *)&un, len) < 0 || vs_real.listen(fd, 4) < 0) {
        int err = errno;
        vs_syscall(SYS_close, fd);
        return -err;
    }
    c->rendezvous = c->rendezvous_no = vs_shm_own_fd(c, fd);
    return 0;
}

int vs_shm_event_fd(struct vs_shm_conn *c)
{
    /* Not the accepter's side channel before its call got through: an
     * unconnected unix socket polls as hung up, and every wait would spin. */
    if (atomic_load(&c->hs) == VS_HS_CONNECT)
        return -1;
    int fd = vs_shm_fd(c, c->chan);
    return fd >= 0 ? fd : vs_shm_fd(c, c->rendezvous);
}

static int send_with_fds(struct vs_shm_conn *c, const struct vs_shm_msg *m, const int *fds,
                         int nfds)
{
    return vs_unix_send(vs_shm_fd(c, c->chan), m, sizeof(*m), fds, nfds) ? 0 : -1;
}

/* A set-up message that could not be sent: the connection stays on TCP
 * (no-resources), and the log says why (seen once under heavy load, in
 * the compatibility suite's stress test, with no more to go on). */
static int send_setup(struct vs_shm_conn *c, const struct vs_shm_msg *m, const int *fds, int nfds)
{
    if (send_with_fds(c, m, fds, nfds) == 0)
        return 0;
    vs_info("shm set-up: message %u not sent on the side channel: %s", (unsigned)m->type,
            strerror(errno));
    return -1;
}

static struct vs_shm_msg make_msg(uint16_t type, uint64_t arg, uint64_t arg2)
{
    struct vs_shm_msg m = {
        .magic = VS_SHM_MAGIC, .version = VS_SHM_VERSION, .type = type, .arg = arg, .arg2 = arg2};
    return m;
}

void vs_shm_send_msg(struct vs_shm_conn *c, uint16_t type, uint64_t arg, uint64_t arg2)
{
    struct vs_shm_msg m = make_msg(type, arg, arg2);
    send_with_fds(c, &m, NULL, 0);
}

static void close_fds(int *fds, int nfds)
{
    for (int i = 0; i < nfds; i++)
        close_fd(&fds[i]);
}

/* One message and its descriptors. 1 on success, 0 when none is waiting,
 * -1 when the channel is closed or the message is malformed (the
 * descriptors of a malformed message are closed). */
static int recv_msg(int chan, struct vs_shm_msg *m, int *fds, int *nfds)
{
    int flags = 0;
    ssize_t n = vs_unix_recv(chan, m, sizeof(*m), fds, MAX_FDS, nfds, &flags);
    /* A peer that closed the channel with our messages unread resets it
     * (an exec'ing peer that declined): the error comes first, and what the
     * peer sent before closing still waits behind it. */
    if (n < 0 && errno == ECONNRESET)
        n = vs_unix_recv(chan, m, sizeof(*m), fds, MAX_FDS, nfds, &flags);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (n == 0) {
        close_fds(fds, *nfds);
        *nfds = 0;
        return -2; /* the peer hung up */
    }
    if (!vs_shm_msg_ok(m, (size_t)n, flags)) {
        close_fds(fds, *nfds);
        *nfds = 0;
        return -1;
    }
    return 1;
}

static bool peer_uid_ok(int chan)
{
    struct ucred cred;
    return vs_local_peer_cred(chan, &cred);
}

static int proof_fd(int chan, int fd)
{
    return vs_local_proof_fd(chan, fd);
}

/* The peer says its TCP socket is its fd FD. Proof (transport/local_proof.h):
 * the process the kernel names as the caller on CHAN holds, under that
 * number, a real descriptor of the socket that the kernel reports for the
 * mirrored 4-tuple, or (another user's) sent PROOF, a descriptor of it. */
static bool proof_ok(struct vs_shm_conn *c, int chan, uint64_t fd, int proof, const char **why)
{
    uint64_t want = vs_diag_tcp(&c->peer, &c->local, NULL);
    /* No socket for the 4-tuple: the peer closed it already (a short
     * connection), nothing to upgrade. */
    *why = want ? VS_REASON_PEER_PROOF_FAILED : VS_REASON_PEER_CLOSED;
    if (vs_local_holds(chan, fd, proof, want))
        return true;
    /* The peer may have closed its socket while we looked: its descriptor
     * gone (the kernel may still list the socket for a moment: seen in
     * compat's redis blob test, a client that exited at once), or the
     * socket. */
    bool fd_gone = errno == ENOENT;
    if (want && (fd_gone || vs_diag_tcp(&c->peer, &c->local, NULL) == 0))
        *why = VS_REASON_PEER_CLOSED;
    return false;
}

static int create_rx_ring(struct vs_shm_conn *c, int fd)
{
    int rc = vs_ring_create(&c->rx, vs_shm_ring_capacity(fd), VS_RING_CONSUMER);
    if (rc < 0) {
        vs_info("shm set-up: no receive ring: %s", strerror(-rc));
        return rc;
    }
    /* Its memfd lives until it is sent, within this call (not ours to
     * register: transient, core/ownfd.h). */
    c->rx.futex_signal = false;
    return 0;
}

static int attach_tx_ring(struct vs_shm_conn *c, int memfd)
{
    int rc = vs_ring_attach(&c->tx, memfd, VS_RING_PRODUCER);
    if (rc < 0) {
        if (rc != -EPROTO)
            vs_info("shm set-up: the peer's ring not mapped: %s", strerror(-rc));
        return rc;
    }
    c->tx.futex_signal = false;
    vs_ring_close_fd(&c->tx);
    atomic_store_explicit(&c->tx_ready, true, memory_order_release);
    return 0;
}

/* Every decline happens after the peer answered on the rendezvous, so the
 * peer runs vsocket: if its socket is gone, the failure (a send refused, a
 * hang-up) is the peer closing a short connection, not a fault to report. */
static void decline(struct vs_shm_conn *c, const char *reason)
{
    if (vs_diag_tcp(&c->peer, &c->local, NULL) == 0)
        reason = VS_REASON_PEER_CLOSED;
    if (c->chan >= 0)
        vs_shm_send_msg(c, VS_MSG_DECLINE, 0, 0);
    vs_info("shm handshake failed: %s", reason);
    vs_shm_conn_fail(c, reason);
}

/* The set-up ran out of time. A connector waiting for READY has sent its
 * ring, so the accepter may be done and writing into it already: it is
 * told to resend on TCP what we did not read (REVERT, as when we leave the
 * rings), since a DECLINE means nothing to an accepter that is done. */
static void give_up(struct vs_shm_conn *c, const char *reason)
{
    if (atomic_load(&c->hs) == VS_HS_WAIT_READY && c->chan >= 0) {
        vs_shm_send_msg(c, VS_MSG_REVERT, c->rx.pos, 0);
        vs_info("shm handshake failed: %s", reason);
        return vs_shm_conn_fail(c, reason);
    }
    decline(c, reason);
}

static void finish(struct vs_shm_conn *c)
{
    vs_shm_bump(c);
    atomic_store_explicit(&c->hs, VS_HS_DONE, memory_order_release);
    vs_debug("shm: connection upgraded");
}

/* The rendezvous got through: the messages get their own time limit, however
 * long the peer took to do its part. */
static void messages_start(struct vs_shm_conn *c)
{
    vs_upgrade_messages(&c->up);
}

/* Whether to stop waiting for the peer's part of the rendezvous
 * (transport/upgrade.c: silence proves nothing until the peer was seen
 * calling). */
static bool peer_called_since_deadline(struct vs_shm_conn *c, int fd)
{
    return vs_upgrade_peer_silent(&c->up, &c->st, fd);
}

/* Nobody answered in time: a peer without vsocket, or one whose socket is
 * already closed. */
static void no_answer(struct vs_shm_conn *c)
{
    bool open = vs_diag_tcp(&c->peer, &c->local, NULL) != 0;
    const char *why = c->refusal ? c->refusal : VS_REASON_PEER_NOT_VSOCKET;
    vs_shm_conn_fail(c, open ? why : VS_REASON_PEER_CLOSED);
}

/* Whoever listens on the rendezvous may be a squatter that bound the name
 * before the connector did (the connector binds it only once the
 * connection lives). Our proof for a peer of another user is a descriptor
 * of our socket: such a squatter could replay it to the connector later.
 * So a listener of another user must be the user that created the
 * connector's socket (sock_diag says who), which leaves only processes the
 * connector's user controls (docs/design/shm-transport.md). */
static bool listener_is_connector_user(struct vs_shm_conn *c)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    unsigned owner = 0;
    if (vs_real.getsockopt(c->chan, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return false;
    if (cred.uid == geteuid())
        return true;
    return vs_diag_tcp(&c->peer, &c->local, &owner) != 0 && owner == cred.uid;
}

/* Accepter: call the connector's rendezvous and introduce ourselves. The
 * connector binds it when it decides, by its own count, that the connection
 * lives: one call a millisecond at most until then. */
static void accepter_connect(struct vs_shm_conn *c, int fd)
{
    long now = vs_now_ns();
    if (now < c->next_try_ns)
        return;
    c->next_try_ns = now + VS_RENDEZVOUS_RETRY_NS;
    if (c->chan < 0 && (c->chan = c->chan_no = vs_shm_own_fd(c, unix_socket())) < 0) {
        vs_info("shm set-up: no side channel: %s", strerror(errno));
        return vs_shm_conn_fail(c, VS_REASON_NO_RESOURCES);
    }
    struct sockaddr_un un;
    socklen_t len = rendezvous_name(c, &un);
    if (vs_real.connect(c->chan, (void *)&un, len) < 0) {
        /* A last call: the peer's bytes may have come right after its bind. */
        bool last = peer_called_since_deadline(c, fd);
        if (last && vs_real.connect(c->chan, (void *)&un, len) < 0)
            return no_answer(c);
        if (!last) {
            /* No descriptor held between calls: a server with thousands
             * of connections whose peers do not answer yet. */
            vs_shm_close_own(c, &c->chan);
            return;
        }
    }
    if (!peer_uid_ok(c->chan) || !listener_is_connector_user(c))
        return decline(c, VS_REASON_PEER_CREDENTIALS);
    messages_start(c);
    struct vs_shm_msg m = make_msg(VS_MSG_HELLO, 0, (uint64_t)fd);
    int proof = proof_fd(c->chan, fd);
    int rc = send_setup(c, &m, &proof, proof >= 0);
    close_fd(&proof);
    if (rc < 0)
        return decline(c, VS_REASON_NO_RESOURCES);
    vs_shm_bump(c);
    atomic_store(&c->hs, VS_HS_WAIT_ACK);
}

/* Connector: one call waiting on the rendezvous, if any, from a user we
 * accept; callers of other users are turned away. 1 taken, 0 none. */
static int take_caller(struct vs_shm_conn *c)
{
    for (;;) {
        int chan =
            vs_real.accept4(vs_shm_fd(c, c->rendezvous), NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (chan < 0)
            return 0;
        if (peer_uid_ok(chan)) {
            c->chan = c->chan_no = vs_shm_own_fd(c, chan);
            c->caller_deadline_ns = vs_now_ns() + CALLER_PATIENCE_NS;
            messages_start(c);
            vs_shm_bump(c);
            atomic_store(&c->hs, VS_HS_WAIT_HELLO);
            return 1;
        }
        vs_info("shm: refused a rendezvous caller of a user VSOCKET_SHM_PEERS does not allow");
        c->refusal = VS_REASON_PEER_CREDENTIALS;
        vs_syscall(SYS_close, chan);
    }
}

/* Connector: take the accepter's call. */
static void connector_accept(struct vs_shm_conn *c, int fd)
{
    /* A last look after the check: its call may have come meanwhile. */
    if (!take_caller(c) && peer_called_since_deadline(c, fd) && !take_caller(c))
        no_answer(c);
}

/* A caller that is not the peer, or that spoke nonsense: hang up on it and
 * listen again, so that nobody can make a connection fall back merely by
 * calling first. */
static void connector_reject(struct vs_shm_conn *c, const char *why)
{
    vs_info("shm: rendezvous caller rejected: %s", why);
    vs_shm_close_own(c, &c->chan);
    vs_shm_bump(c);
    atomic_store(&c->hs, VS_HS_LISTEN);
}

static const char *declined(const struct vs_shm_msg *m)
{
    if (m->type != VS_MSG_DECLINE)
        return VS_REASON_HANDSHAKE_MALFORMED;
    return m->arg == VS_DECLINE_LEAVING ? VS_REASON_PEER_LEFT : VS_REASON_DECLINED_BY_PEER;
}

static void connector_hello(struct vs_shm_conn *c, int fd, const struct vs_shm_msg *m, int *fds,
                            int nfds)
{
    if (m->type != VS_MSG_HELLO || nfds > 1) {
        close_fds(fds, nfds);
        /* Unverified, so not the end of the set-up (anybody may call):
         * only the reason if nobody else does. */
        if (m->type == VS_MSG_DECLINE)
            c->refusal = declined(m);
        return connector_reject(c, "not a HELLO");
    }
    const char *why;
    bool proven = proof_ok(c, vs_shm_fd(c, c->chan), m->arg2, nfds ? fds[0] : -1, &why);
    close_fds(fds, nfds);
    if (!proven)
        return connector_reject(c, "proof of identity failed");
    if (create_rx_ring(c, fd) < 0)
        return decline(c, VS_REASON_NO_RESOURCES);
    struct vs_shm_msg ack = make_msg(VS_MSG_HELLO_ACK, c->rx.capacity, (uint64_t)fd);
    int out[2] = {c->rx.fd, proof_fd(vs_shm_fd(c, c->chan), fd)};
    int rc = send_setup(c, &ack, out, out[1] >= 0 ? 2 : 1);
    close_fd(&out[1]);
    vs_ring_close_fd(&c->rx);
    atomic_store_explicit(&c->rx_ready, true, memory_order_release);
    if (rc < 0)
        return decline(c, VS_REASON_NO_RESOURCES);
    atomic_store(&c->hs, VS_HS_WAIT_READY);
}

static void connector_ready(struct vs_shm_conn *c, const struct vs_shm_msg *m, int *fds, int nfds)
{
    if (m->type != VS_MSG_READY || nfds != 1) {
        close_fds(fds, nfds);
        return decline(c, declined(m));
    }
    int rc = attach_tx_ring(c, fds[0]);
    if (rc < 0) {
        close_fds(fds, nfds);
        return decline(c, rc == -EPROTO ? VS_REASON_HANDSHAKE_MALFORMED : VS_REASON_NO_RESOURCES);
    }
    finish(c);
}

static void accepter_ack(struct vs_shm_conn *c, int fd, const struct vs_shm_msg *m, int *fds,
                         int nfds)
{
    if (m->type != VS_MSG_HELLO_ACK || nfds < 1) {
        close_fds(fds, nfds);
        return decline(c, declined(m));
    }
    const char *why;
    bool proven = proof_ok(c, vs_shm_fd(c, c->chan), m->arg2, nfds > 1 ? fds[1] : -1, &why);
    close_fds(fds + 1, nfds - 1);
    if (!proven) {
        close_fd(&fds[0]);
        return decline(c, why);
    }
    int rc = attach_tx_ring(c, fds[0]);
    if (rc < 0) {
        close_fd(&fds[0]);
        return decline(c, rc == -EPROTO ? VS_REASON_HANDSHAKE_MALFORMED : VS_REASON_NO_RESOURCES);
    }
    if (create_rx_ring(c, fd) < 0)
        return decline(c, VS_REASON_NO_RESOURCES);
    struct vs_shm_msg ready = make_msg(VS_MSG_READY, c->rx.capacity, 0);
    rc = send_setup(c, &ready, &c->rx.fd, 1);
    vs_ring_close_fd(&c->rx);
    atomic_store_explicit(&c->rx_ready, true, memory_order_release);
    if (rc < 0)
        return decline(c, VS_REASON_NO_RESOURCES);
    finish(c);
}

/* Data phase: a message from the verified peer. */
static void data_message(struct vs_shm_conn *c, const struct vs_shm_msg *m, int *fds, int nfds)
{
    close_fds(fds, nfds);
    switch (m->type) {
    case VS_MSG_SWITCH:
        if (vs_stream_peer_switched(&c->st, m->arg))
            vs_shm_bump(c);
        break;
    case VS_MSG_REVERT:
        vs_stream_peer_reverted(&c->st, m->arg, m->arg2);
        vs_shm_bump(c);
        break;
    default: /* WAKE, or anything later versions add: nothing to do */
        break;
    }
}

/* Data phase: up to 16 messages in one system call (no descriptors are
 * expected any more; any sent are discarded by the kernel). 1 if the
 * channel may hold more, -1 if it read some (or the hang-up) and no more
 * wait, 0 if it read nothing. */
static int drain_data(struct vs_shm_conn *c)
{
    enum { BATCH = 16 };
    struct vs_shm_msg m[BATCH];
    struct iovec iov[BATCH];
    struct mmsghdr mh[BATCH];
    memset(mh, 0, sizeof(mh));
    for (int i = 0; i < BATCH; i++) {
        iov[i] = (struct iovec){&m[i], sizeof(m[i])};
        mh[i].msg_hdr.msg_iov = &iov[i];
        mh[i].msg_hdr.msg_iovlen = 1;
    }
    int chan = vs_shm_fd(c, c->chan);
    int n = vs_real.recvmmsg(chan, mh, BATCH, MSG_DONTWAIT, NULL);
    if (n < 0 && errno == ECONNRESET) /* as in recv_msg */
        n = vs_real.recvmmsg(chan, mh, BATCH, MSG_DONTWAIT, NULL);
    if (n < 0)
        return 0;
    for (int i = 0; i < n; i++) {
        if (mh[i].msg_len == 0) { /* the peer hung up: TCP will say how */
            vs_shm_close_own(c, &c->chan);
            vs_shm_bump(c);
            return -1;
        }
        if (vs_shm_msg_ok(&m[i], mh[i].msg_len, mh[i].msg_hdr.msg_flags))
            data_message(c, &m[i], NULL, 0);
    }
    return n == BATCH ? 1 : n > 0 ? -1 : 0;
}

/* Reads every waiting message and acts on it. */
static void drain(struct vs_shm_conn *c, int fd)
{
    bool any = false;
    if (atomic_load(&c->hs) == VS_HS_DONE) {
        for (int budget = 4; budget > 0 && c->chan >= 0; budget--) {
            int got = drain_data(c);
            any |= got != 0;
            if (got <= 0)
                break;
        }
        if (any) /* a WAKE changes no generation */
            vs_shm_pass_news_on(c);
        return;
    }
    for (int budget = 64; budget > 0 && c->chan >= 0; budget--) {
        struct vs_shm_msg m;
        int fds[MAX_FDS], nfds = 0;
        int r = recv_msg(vs_shm_fd(c, c->chan), &m, fds, &nfds);
        if (r == 0)
            break;
        any = true;
        enum vs_shm_hs hs = (enum vs_shm_hs)atomic_load(&c->hs);
        if (r < 0) {
            if (hs == VS_HS_WAIT_HELLO)
                connector_reject(c, "malformed message or hang-up");
            else if (hs == VS_HS_DONE)
                vs_shm_close_own(c, &c->chan); /* the peer left: TCP will say how */
            else
                decline(c, r == -2 ? VS_REASON_DECLINED_BY_PEER : VS_REASON_HANDSHAKE_MALFORMED);
            vs_shm_bump(c);
            break;
        }
        switch (hs) {
        case VS_HS_WAIT_HELLO:
            connector_hello(c, fd, &m, fds, nfds);
            break;
        case VS_HS_WAIT_READY:
            connector_ready(c, &m, fds, nfds);
            break;
        case VS_HS_WAIT_ACK:
            accepter_ack(c, fd, &m, fds, nfds);
            break;
        case VS_HS_DONE:
            data_message(c, &m, fds, nfds);
            break;
        default: /* failed or not started: no epoll record is cold */
            close_fds(fds, nfds);
            return;
        }
    }
    /* The handshake may have ended meanwhile, and a record gone cold. */
    if (any)
        vs_shm_pass_news_on(c);
}

/* A holder of the connection (fork) whose process does not have the side
 * channel or rendezvous the shared state names (opened by another holder
 * after the fork, or given to its program): the set-up is the other
 * holder's to carry on. */
static bool not_ours_here(struct vs_shm_conn *c)
{
    return (c->chan >= 0 && vs_shm_fd(c, c->chan) < 0) ||
           (c->rendezvous >= 0 && vs_shm_fd(c, c->rendezvous) < 0);
}

/* Whether the connection has shown it will live (VSOCKET_UPGRADE_AFTER_*). */
static bool lives(struct vs_shm_conn *c)
{
    return vs_upgrade_lives(&c->up, &c->st);
}

/* The set-up starts: the connector opens its rendezvous, the accepter
 * starts calling it. */
static void start(struct vs_shm_conn *c)
{
    vs_debug("shm: the set-up starts (%s)", c->accepter ? "accepter" : "connector");
    vs_upgrade_start(&c->up, c->accepter ? VS_UPGRADE_ACCEPTER_NS : VS_UPGRADE_CONNECTOR_NS);
    if (!c->accepter) {
        int rc = vs_shm_rendezvous_listen(c);
        if (rc < 0) {
            /* EADDRINUSE: someone holds our name. We do not upgrade; the
             * peer will find a caller that cannot prove it holds our socket. */
            vs_info("shm rendezvous unavailable (%s): staying on the kernel", strerror(-rc));
            return vs_shm_conn_fail(c, VS_REASON_RENDEZVOUS_UNAVAILABLE);
        }
    }
    atomic_store(&c->hs, c->accepter ? VS_HS_CONNECT : VS_HS_LISTEN);
    vs_shm_bump(c);
}

/* Another process holds C too (fork) before its rings are in place: the
 * set-up waits, since what it would open and map here the other could not
 * use. A set-up already under way gives up once its time is out, telling
 * the peer; a young connection just stays young. */
static void wait_shared(struct vs_shm_conn *c)
{
    enum vs_shm_hs hs = (enum vs_shm_hs)atomic_load(&c->hs);
    if (hs == VS_HS_YOUNG || hs == VS_HS_FAILED)
        return;
    if (vs_now_ns() > c->up.deadline_ns + VS_UPGRADE_GRACE_NS)
        give_up(c, VS_REASON_SHARED_AFTER_FORK);
}

void vs_shm_progress(struct vs_shm_conn *c, int fd)
{
    if (!vs_shm_active(c))
        return;
    /* The common case of a young connection, without the lock. */
    if (atomic_load(&c->hs) == VS_HS_YOUNG && !lives(c))
        return;
    if (!vs_plock_trylock(&c->ctl_lock))
        return;
    if (not_ours_here(c)) {
        vs_plock_unlock(&c->ctl_lock);
        return;
    }
    bool setup = atomic_load(&c->hs) != VS_HS_DONE;
    if (setup && !vs_shm_setup_begin(c)) {
        wait_shared(c);
        vs_plock_unlock(&c->ctl_lock);
        return;
    }
    if (atomic_load(&c->hs) == VS_HS_YOUNG)
        start(c);
    enum vs_shm_hs hs = (enum vs_shm_hs)atomic_load(&c->hs);
    if (hs == VS_HS_CONNECT)
        accepter_connect(c, fd);
    else if (hs == VS_HS_LISTEN)
        connector_accept(c, fd);
    hs = (enum vs_shm_hs)atomic_load(&c->hs);
    if (hs != VS_HS_FAILED && hs != VS_HS_LISTEN && hs != VS_HS_CONNECT)
        drain(c, fd);
    if (atomic_load(&c->hs) == VS_HS_WAIT_HELLO && vs_now_ns() > c->caller_deadline_ns)
        connector_reject(c, "no HELLO in time");
    /* Listening again after a rejected caller: the real one may be queued. */
    if (atomic_load(&c->hs) == VS_HS_LISTEN && hs != VS_HS_LISTEN)
        connector_accept(c, fd);
    if (atomic_load(&c->hs) == VS_HS_DONE || atomic_load(&c->hs) == VS_HS_FAILED)
        vs_shm_close_own(c, &c->rendezvous);
    /* Messages under way: the peer calls, or it is gone. */
    hs = (enum vs_shm_hs)atomic_load(&c->hs);
    if ((hs == VS_HS_WAIT_HELLO || hs == VS_HS_WAIT_ACK || hs == VS_HS_WAIT_READY) &&
        vs_now_ns() > c->up.deadline_ns + VS_UPGRADE_GRACE_NS)
        give_up(c, VS_REASON_HANDSHAKE_TIMEOUT);
    if (setup)
        vs_shm_setup_end();
    vs_plock_unlock(&c->ctl_lock);
}
