/* sizing.c - how large a connection's rings are, and how much they may
 * hold: what the kernel would have buffered in the same direction.
 *
 * On kernel TCP a writer blocks only once the receiver's receive buffer and
 * its own send buffer are full; programs rely on it (an echo client that
 * writes everything before it reads). Those buffers autotune up to
 * net.ipv4.tcp_rmem[2] and tcp_wmem[2], or stay at what the program set
 * (SO_RCVBUF, SO_SNDBUF: the kernel doubles the value). A ring may hold
 * their sum in that direction: the receiver's share is fixed when it
 * creates the ring (published in the ring's header), the sender adds its
 * own when it starts writing. More than the kernel would hold is harmless,
 * less is not: whenever we cannot tell, we take the larger figure. */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/procfile.h"
#include "config/config.h"
#include "core/fdtable.h"
#include "base/real.h"
#include "transport/shm/conn.h"
#include "transport/shm/sizing.h"

_Static_assert(VS_SHM_RING_LIMIT_MAX == VS_RING_MAX_CAPACITY, "VSOCKET_SHM_RING_MIN's bound");
_Static_assert(VS_SHM_RING_MAX_LIMIT == VS_RING_MAX_MOST, "VSOCKET_SHM_RING_MAX's bound");

/* The kernel's limits; Linux's defaults when /proc says nothing. */
static struct {
    uint64_t tcp_rmem, tcp_wmem; /* autotuning maxima */
    uint64_t rmem_max, wmem_max; /* the most SO_RCVBUF/SO_SNDBUF may set, before doubling */
} kernel = {6u << 20, 4u << 20, 212992, 212992};

static pthread_once_t kernel_once = PTHREAD_ONCE_INIT;

/* Field FIELD (from 0) of the numbers in sysctl file PATH, or 0. */
static uint64_t sysctl_field(const char *path, int field)
{
    char buf[128];
    if (vs_read_small_file(path, buf, sizeof(buf)) < 0)
        return 0;
    char *p = buf;
    unsigned long long v = 0;
    for (int i = 0; i <= field; i++)
        v = strtoull(p, &p, 10);
    return v;
}

static void set_if(uint64_t *out, uint64_t v)
{
    if (v > 0)
        *out = v;
}

static void read_kernel(void)
{
    set_if(&kernel.tcp_rmem, sysctl_field("/proc/sys/net/ipv4/tcp_rmem", 2));
    set_if(&kernel.tcp_wmem, sysctl_field("/proc/sys/net/ipv4/tcp_wmem", 2));
    set_if(&kernel.rmem_max, sysctl_field("/proc/sys/net/core/rmem_max", 0));
    set_if(&kernel.wmem_max, sysctl_field("/proc/sys/net/core/wmem_max", 0));
}

static void load_kernel(void)
{
    pthread_once(&kernel_once, read_kernel);
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* The most a receive (send) buffer may ever reach: autotuned, or set. */
static uint64_t rcv_most(void)
{
    return max_u64(kernel.tcp_rmem, 2 * kernel.rmem_max);
}

static uint64_t snd_most(void)
{
    return max_u64(kernel.tcp_wmem, 2 * kernel.wmem_max);
}

uint64_t vs_shm_ring_ceiling(void)
{
    load_kernel();
    uint64_t c = vs_config.shm_ring_max ? vs_config.shm_ring_max : rcv_most() + snd_most();
    return min_u64(max_u64(c, vs_config.shm_ring_min), VS_RING_MAX_MOST);
}

/* What the kernel would hold in FD's buffer OPT (SO_RCVBUF or SO_SNDBUF):
 * the size the program set, as the kernel reports it (doubled); else the
 * autotuning maximum AUTO, or the size now if larger (inherited from a
 * listener the program sized). */
static uint64_t share(int fd, int opt, unsigned set_bit, uint64_t autotuned)
{
    int v = 0;
    socklen_t len = sizeof(v);
    if (vs_real.getsockopt(fd, SOL_SOCKET, opt, &v, &len) < 0)
        v = 0;
    uint64_t now = v > 0 ? (uint64_t)v : 0;
    struct vs_sock *s = vs_fd_peek(fd);
    bool set = s && (atomic_load(&s->bufs_set) & set_bit);
    if (s)
        vs_sock_put(s);
    return set && now ? now : max_u64(now, autotuned);
}

struct vs_ring_size vs_shm_ring_capacity(int fd)
{
    load_kernel();
    uint64_t ceiling = vs_shm_ring_ceiling();
    uint64_t rcv = min_u64(share(fd, SO_RCVBUF, VS_SOCK_RCVBUF_SET, kernel.tcp_rmem), ceiling);
    /* The sender's share is not known yet: room for the largest. */
    return vs_ring_size_for(vs_config.shm_ring_min, min_u64(rcv + snd_most(), ceiling), rcv);
}

uint64_t vs_shm_tx_limit(int fd, uint64_t peer_rcv)
{
    load_kernel();
    uint64_t snd = share(fd, SO_SNDBUF, VS_SOCK_SNDBUF_SET, kernel.tcp_wmem);
    return min_u64(peer_rcv + snd, vs_shm_ring_ceiling());
}
