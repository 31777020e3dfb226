/* upgrade.c - the set-up policy every transport shares (upgrade.h). */
#include "transport/upgrade.h"

#include <netinet/in.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "base/syscall.h"
#include "config/config.h"
#include "core/clock.h"
#include "core/reason.h"
#include "core/sock.h"

bool vs_upgrade_eligible(const struct vs_sock *s, enum vs_transport t)
{
    bool tcp = s->type == SOCK_STREAM && (s->protocol == 0 || s->protocol == IPPROTO_TCP);
    return (vs_config.transports & VS_TRANSPORT_BIT(t)) && tcp && !s->ops &&
           !atomic_load(&s->in_epoll_plain);
}

void vs_upgrade_show_peer_left(struct vs_sock *s, enum vs_transport t, struct vs_stream *st)
{
    if (s->transport == t && atomic_load_explicit(&st->rx_reverted, memory_order_relaxed)) {
        s->transport = VS_TRANSPORT_KERNEL;
        vs_stats_set_transport(s->stat, VS_TRANSPORT_KERNEL, VS_REASON_PEER_LEFT);
    }
}

void vs_upgrade_show_pending(struct vs_sock *s, const struct vs_upgrade *u, int shown)
{
    if (s->conn_shown == shown)
        return;
    s->conn_shown = shown;
    vs_stats_set_reason_due(s->stat, VS_REASON_PENDING,
                            u->deadline_ns + VS_UPGRADE_GRACE_NS - vs_now_ns());
}

void vs_upgrade_init(struct vs_upgrade *u)
{
    u->born_ns = vs_now_ns();
    atomic_store(&u->young_calls, 0);
    u->deadline_ns = 0;
    u->next_check_ns = 0;
    u->calls_seen = 0;
    u->in_mark = 0;
}

/* One that ends after a request or two costs less on the kernel than any
 * set-up. Never once TCP has ended in both directions (one still open may
 * move: a receiver whose program shut its sending side down). */
bool vs_upgrade_lives(struct vs_upgrade *u, struct vs_stream *st)
{
    if (atomic_load(&st->tcp_eof) && __atomic_load_n(&st->tx_shut, __ATOMIC_RELAXED))
        return false;
    uint64_t moved = __atomic_load_n(&st->tcp_tx, __ATOMIC_RELAXED) +
                     __atomic_load_n(&st->tcp_rx, __ATOMIC_RELAXED);
    if (moved >= vs_config.upgrade_after_bytes)
        return true;
    /* Age alone is not life: on a loaded machine a one-request connection
     * waits in queues for milliseconds. A few more calls than one request
     * takes (send, receive, end of stream) say it carries several. */
    return vs_now_ns() - u->born_ns >= (long)vs_config.upgrade_after_us * 1000 &&
           (vs_config.upgrade_after_us == 0 ||
            atomic_load_explicit(&u->young_calls, memory_order_relaxed) >= VS_UPGRADE_MIN_CALLS);
}

void vs_upgrade_start(struct vs_upgrade *u, long limit_ns)
{
    u->deadline_ns = vs_now_ns() + limit_ns;
}

/* However long the peer took to do its part. */
void vs_upgrade_messages(struct vs_upgrade *u)
{
    long limit = vs_now_ns() + VS_UPGRADE_MESSAGES_NS;
    if (u->deadline_ns < limit)
        u->deadline_ns = limit;
}

/* Bytes the kernel has received on TCP from the peer so far. */
static uint64_t bytes_in(struct vs_stream *st, int fd)
{
    int queued = 0;
    if (vs_syscall(SYS_ioctl, fd, FIONREAD, &queued) < 0 || queued < 0)
        queued = 0;
    return __atomic_load_n(&st->tcp_rx, __ATOMIC_RELAXED) + (uint64_t)queued;
}

/* Each end does its part only at a call of its program, so silence proves
 * nothing: past the deadline, we give up once the peer has been seen
 * calling twice since, at least a millisecond apart (bytes from it arrived
 * after a mark, twice: a vsocket peer does its part at one of two such
 * calls) and a last look found nothing; or after VS_UPGRADE_GIVE_UP_NS.
 * Bytes can also come from one long send still under way in the peer,
 * which is why the deadline is long (stream.h). Checked once a millisecond
 * at most (an ioctl). */
bool vs_upgrade_peer_silent(struct vs_upgrade *u, struct vs_stream *st, int fd)
{
    long now = vs_now_ns();
    if (now <= u->deadline_ns || now < u->next_check_ns)
        return false;
    u->next_check_ns = now + VS_RENDEZVOUS_RETRY_NS;
    uint64_t in = bytes_in(st, fd);
    if (u->calls_seen == 0 || in > u->in_mark) {
        u->in_mark = in;
        if (++u->calls_seen > 2)
            return true;
    }
    return now > u->deadline_ns + VS_UPGRADE_GIVE_UP_NS;
}
