/* registry.c - the transports built into the library, and the calls that
 * concern all of them. The tables come from above, at load
 * (interpose/init.c), in order of preference: the registry names none. */
#include "transport/transport.h"

#include <netinet/in.h>

static const struct vs_transport_ops *table[VS_TRANSPORT_COUNT];
static size_t count;
/* The datagram layer (UDP sockets): apart from the stream transports,
 * since it takes a socket at creation and is never offered a TCP
 * connection. It hears of the process events after them. */
static const struct vs_transport_ops *dgram;

/* At load, before the configuration that lets a transport take a
 * connection (until then the table is empty: every socket stays on the
 * kernel, as it would anyway), and before any thread of ours. */
void vs_transports_register(const struct vs_transport_ops *ops)
{
    if (count < VS_TRANSPORT_COUNT)
        table[count++] = ops;
}

void vs_transports_register_dgram(const struct vs_transport_ops *ops)
{
    dgram = ops;
}

/* UDP only: raw, ICMP (ping) and UDP-Lite datagram sockets are none of the
 * layer's business. */
void vs_transports_offer_dgram(struct vs_sock *s, int fd)
{
    bool udp = s->type == SOCK_DGRAM && (s->protocol == 0 || s->protocol == IPPROTO_UDP);
    if (dgram && udp && !s->ops)
        dgram->on_socket(s, fd);
}

/* A connection goes to the first transport that will try it. A datagram
 * socket the layer took at creation hears of every connect, AF_UNSPEC
 * included: its peers' paths depend on it. */
void vs_transports_offer_connect(struct vs_sock *s, int fd, const struct sockaddr *peer,
                                 socklen_t len)
{
    if (s->ops) {
        if (s->type == SOCK_DGRAM)
            s->ops->on_connect(s, fd, peer, len);
        return;
    }
    for (size_t i = 0; i < count && !s->ops; i++)
        table[i]->on_connect(s, fd, peer, len);
}

void vs_transports_offer_accept(struct vs_sock *s, int fd)
{
    for (size_t i = 0; i < count && !s->ops; i++)
        table[i]->on_accept(s, fd);
}

void vs_transports_fork_prepare(void)
{
    for (size_t i = 0; i < count; i++)
        table[i]->fork_prepare();
    if (dgram)
        dgram->fork_prepare();
}

/* After fork, in the reverse order of prepare (locks are released in both processes). */
void vs_transports_fork_parent(void)
{
    if (dgram)
        dgram->fork_parent();
    for (size_t i = count; i-- > 0;)
        table[i]->fork_parent();
}

void vs_transports_fork_child(void)
{
    if (dgram)
        dgram->fork_child();
    for (size_t i = count; i-- > 0;)
        table[i]->fork_child();
}

void vs_transports_fork_failed(void)
{
    for (size_t i = 0; i < count; i++)
        table[i]->fork_failed();
    if (dgram)
        dgram->fork_failed();
}

void vs_transports_before_exec(void)
{
    for (size_t i = 0; i < count; i++)
        table[i]->before_exec();
    if (dgram)
        dgram->before_exec();
}

void vs_transports_exec_failed(void)
{
    for (size_t i = 0; i < count; i++)
        if (table[i]->exec_failed)
            table[i]->exec_failed();
    if (dgram && dgram->exec_failed)
        dgram->exec_failed();
}

void vs_transports_leave_all(const char *reason)
{
    for (size_t i = 0; i < count; i++)
        table[i]->leave_all(reason);
    if (dgram)
        dgram->leave_all(reason);
}

void vs_transports_before_creds(void)
{
    for (size_t i = 0; i < count; i++)
        if (table[i]->before_creds)
            table[i]->before_creds();
    if (dgram && dgram->before_creds)
        dgram->before_creds();
}

void vs_transports_after_creds(bool changed)
{
    for (size_t i = 0; i < count; i++)
        if (table[i]->after_creds)
            table[i]->after_creds(changed);
    if (dgram && dgram->after_creds)
        dgram->after_creds(changed);
}

unsigned vs_transports_fds_short(void)
{
    unsigned freed = 0;
    for (size_t i = 0; i < count; i++)
        if (table[i]->fds_short)
            freed += table[i]->fds_short();
    if (dgram && dgram->fds_short)
        freed += dgram->fds_short();
    return freed;
}
