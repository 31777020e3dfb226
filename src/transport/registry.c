/* registry.c - the transports built into the library, and the calls that
 * concern all of them. The tables come from above, at load
 * (interpose/init.c), in order of preference: the registry names none. */
#include "transport/transport.h"

static const struct vs_transport_ops *table[VS_TRANSPORT_COUNT];
static size_t count;

/* At load, before the configuration that lets a transport take a
 * connection (until then the table is empty: every socket stays on the
 * kernel, as it would anyway), and before any thread of ours. */
void vs_transports_register(const struct vs_transport_ops *ops)
{
    if (count < VS_TRANSPORT_COUNT)
        table[count++] = ops;
}

/* A connection goes to the first transport that will try it. */
void vs_transports_offer_connect(struct vs_sock *s, int fd, const struct sockaddr *peer,
                                 socklen_t len)
{
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
}

/* After fork, in the reverse order of prepare (locks are released in both processes). */
void vs_transports_fork_parent(void)
{
    for (size_t i = count; i-- > 0;)
        table[i]->fork_parent();
}

void vs_transports_fork_child(void)
{
    for (size_t i = count; i-- > 0;)
        table[i]->fork_child();
}

void vs_transports_fork_failed(void)
{
    for (size_t i = 0; i < count; i++)
        table[i]->fork_failed();
}

void vs_transports_before_exec(void)
{
    for (size_t i = 0; i < count; i++)
        table[i]->before_exec();
}

void vs_transports_exec_failed(void)
{
    for (size_t i = 0; i < count; i++)
        if (table[i]->exec_failed)
            table[i]->exec_failed();
}

void vs_transports_leave_all(const char *reason)
{
    for (size_t i = 0; i < count; i++)
        table[i]->leave_all(reason);
}

void vs_transports_before_creds(void)
{
    for (size_t i = 0; i < count; i++)
        if (table[i]->before_creds)
            table[i]->before_creds();
}

void vs_transports_after_creds(bool changed)
{
    for (size_t i = 0; i < count; i++)
        if (table[i]->after_creds)
            table[i]->after_creds(changed);
}

unsigned vs_transports_fds_short(void)
{
    unsigned freed = 0;
    for (size_t i = 0; i < count; i++)
        if (table[i]->fds_short)
            freed += table[i]->fds_short();
    return freed;
}
