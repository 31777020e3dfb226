/* wait.c - spin, then sleep on a shared futex word. */
#include "memory/wait.h"
#include "memory/cpu.h"
#include "base/syscall.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#define SPIN_CLOCK_EVERY 64 /* spins between two clock reads */

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

void vs_event_init(struct vs_event *ev)
{
    atomic_store(&ev->seq, 0);
    atomic_store(&ev->waiters, 0);
}

/* Not the _PRIVATE variants: the word is shared with another process. */
static int futex_wait(struct vs_event *ev, uint32_t seen, long ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000L, .tv_nsec = ns % 1000000000L};
    if (vs_syscall(SYS_futex, (uint32_t *)&ev->seq, FUTEX_WAIT, seen, &ts, NULL, 0) == 0)
        return 0;
    return errno == EAGAIN ? 0 : -errno;
}

/* Raw ppoll: poll() is interposed inside libvsocket. */
static int fd_has_event(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    struct timespec zero = {0, 0};
    if (vs_syscall(SYS_ppoll, &p, 1, &zero, NULL, 0) != 1)
        return 0;
    return p.revents != 0;
}

static int spin(vs_ready_fn ready, void *arg, long spin_ns)
{
    long end = now_ns() + spin_ns;
    for (unsigned i = 1;; i++) {
        if (ready(arg))
            return 1;
        if (i % SPIN_CLOCK_EVERY == 0 && now_ns() >= end)
            return 0;
        vs_cpu_relax();
    }
}

/* One announced sleep. The order is what prevents a lost wake-up: read seq,
 * announce ourselves, then look at the condition again. A signaller that
 * published before our look is seen by the look; one that published after
 * it sees waiters != 0 (the fences pair) and bumps seq, so FUTEX_WAIT
 * returns at once because seq no longer matches what we read. */
static int sleep_once(struct vs_event *ev, vs_ready_fn ready, void *arg, long ns)
{
    uint32_t seen = atomic_load_explicit(&ev->seq, memory_order_acquire);
    atomic_fetch_add_explicit(&ev->waiters, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    int rc = ready(arg) ? 0 : futex_wait(ev, seen, ns);
    atomic_fetch_sub_explicit(&ev->waiters, 1, memory_order_relaxed);
    return rc;
}

int vs_event_wait(struct vs_event *ev, vs_ready_fn ready, void *arg, const struct vs_wait_opts *o)
{
    long start = now_ns();
    long slice = o->slice_ns > 0 ? o->slice_ns : VS_WAIT_SLICE_NS_DEFAULT;
    if (o->spin_ns > 0 && spin(ready, arg, o->spin_ns))
        return 0;
    for (;;) {
        if (ready(arg))
            return 0;
        long ns = slice;
        if (o->timeout_ns >= 0) {
            long left = start + o->timeout_ns - now_ns();
            if (left <= 0)
                return -ETIMEDOUT;
            if (left < ns)
                ns = left;
        }
        int rc = sleep_once(ev, ready, arg, ns);
        if (rc == -EINTR)
            return -EINTR;
        if (rc == -ETIMEDOUT && o->watch_fd >= 0 && fd_has_event(o->watch_fd))
            return VS_WAIT_WATCHED;
    }
}

void vs_event_signal(struct vs_event *ev)
{
    /* Pairs with the fence in sleep_once(): either the waiter sees our
     * publication, or we see its announcement. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&ev->waiters, memory_order_relaxed) == 0)
        return;
    atomic_fetch_add_explicit(&ev->seq, 1, memory_order_release);
    vs_syscall(SYS_futex, (uint32_t *)&ev->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
