/* registry.c - the transports built into the library, and the calls that
 * concern all of them. The only place that names a transport's table. */
#include "core/sock.h"
#include "transport/rdma/ops.h"
#include "transport/shm/ops.h"
#include "transport/transport.h"

static const struct vs_transport_ops *const table[] = {&vs_shm_ops, &vs_rdma_ops};

#define COUNT (sizeof(table) / sizeof(table[0]))

/* A connection goes to the first transport that will try it. */
void vs_transports_offer_connect(struct vs_sock *s, int fd, const struct sockaddr *peer,
                                 socklen_t len)
{
    for (size_t i = 0; i < COUNT && !s->ops; i++)
        table[i]->on_connect(s, fd, peer, len);
}

void vs_transports_offer_accept(struct vs_sock *s, int fd)
{
    for (size_t i = 0; i < COUNT && !s->ops; i++)
        table[i]->on_accept(s, fd);
}

void vs_transports_fork_prepare(void)
{
    for (size_t i = 0; i < COUNT; i++)
        table[i]->fork_prepare();
}

/* After fork, in the reverse order of prepare (locks are released in both processes). */
void vs_transports_fork_parent(void)
{
    for (size_t i = COUNT; i-- > 0;)
        table[i]->fork_parent();
}

void vs_transports_fork_child(void)
{
    for (size_t i = COUNT; i-- > 0;)
        table[i]->fork_child();
}

void vs_transports_fork_failed(void)
{
    for (size_t i = 0; i < COUNT; i++)
        table[i]->fork_failed();
}

void vs_transports_before_exec(void)
{
    for (size_t i = 0; i < COUNT; i++)
        table[i]->before_exec();
}

void vs_transports_exec_failed(void)
{
    for (size_t i = 0; i < COUNT; i++)
        if (table[i]->exec_failed)
            table[i]->exec_failed();
}

void vs_transports_leave_all(const char *reason)
{
    for (size_t i = 0; i < COUNT; i++)
        table[i]->leave_all(reason);
}

void vs_transports_before_creds(void)
{
    for (size_t i = 0; i < COUNT; i++)
        if (table[i]->before_creds)
            table[i]->before_creds();
}

void vs_transports_after_creds(bool changed)
{
    for (size_t i = 0; i < COUNT; i++)
        if (table[i]->after_creds)
            table[i]->after_creds(changed);
}

unsigned vs_transports_fds_short(void)
{
    unsigned freed = 0;
    for (size_t i = 0; i < COUNT; i++)
        if (table[i]->fds_short)
            freed += table[i]->fds_short();
    return freed;
}
