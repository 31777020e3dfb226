/* holders.c - which processes hold a connection, and whether one holds it
 * alone.
 *
 * Rings and side channels are mapped and opened by one process: a process
 * forked after that inherits them, one forked before does not. So the
 * set-up, which creates them, runs only while one process holds the
 * connection; a connection shared by fork before or during its set-up
 * waits (shared-after-fork) until the others are gone: they closed it,
 * exec'd with it close-on-exec, or died. Once on the rings, a connection
 * is shared as the kernel's socket is (both processes map the rings).
 *
 * The holders are the pids in holder_pid[] of the connection's shared page:
 * BORN while a fork is under way (the child writes its pid in), 0 for a
 * free entry. A holder that died without closing (a zombie too) is noticed
 * by kill(pid, 0) and /proc and its entry and count are taken back. More holders than entries
 * (crowded) never count as alone again: the connection stays on TCP. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "base/syscall.h"
#include "transport/shm/conn.h"
#include "transport/shm/shm_internal.h"

#define BORN (-1)
/* How often a waiting holder looks for the others (a kill per holder). */
#define CHECK_NS 1000000L

/* Set-up steps take it shared; fork takes it exclusive, so no step is half
 * done when the child is made (a ring mapped after the fork would be
 * missing in the child). */
static pthread_rwlock_t setup_lock = PTHREAD_RWLOCK_INITIALIZER;
static pid_t self;

static pid_t my_pid(void)
{
    if (!self)
        self = (pid_t)vs_syscall(SYS_getpid);
    return self;
}

static bool put(struct vs_shm_conn *c, int pid)
{
    for (int i = 0; i < VS_SHM_HOLDERS; i++) {
        int free_ = 0;
        if (atomic_compare_exchange_strong(&c->holder_pid[i], &free_, pid))
            return true;
    }
    atomic_store(&c->crowded, true);
    return false;
}

static void take(struct vs_shm_conn *c, int pid)
{
    for (int i = 0; i < VS_SHM_HOLDERS; i++) {
        int held = pid;
        if (atomic_compare_exchange_strong(&c->holder_pid[i], &held, 0))
            return;
    }
}

void vs_shm_holder_new(struct vs_shm_conn *c)
{
    put(c, my_pid());
}

void vs_shm_holder_fork_prepare(struct vs_shm_conn *c)
{
    put(c, BORN);
}

void vs_shm_holder_fork_child(struct vs_shm_conn *c)
{
    for (int i = 0; i < VS_SHM_HOLDERS; i++) {
        int born = BORN;
        if (atomic_compare_exchange_strong(&c->holder_pid[i], &born, my_pid()))
            return;
    }
}

void vs_shm_holder_fork_failed(struct vs_shm_conn *c)
{
    take(c, BORN);
}

void vs_shm_holder_gone(struct vs_shm_conn *c)
{
    take(c, my_pid());
}

void vs_shm_holder_back(struct vs_shm_conn *c)
{
    put(c, my_pid());
}

/* A zombie holds nothing: a parent that reads before it reaps its exited
 * child must not wait for it (it would wait for itself). */
static bool zombie(int pid)
{
    char path[32], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    int fd = (int)vs_syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = vs_syscall(SYS_read, fd, buf, sizeof(buf) - 1);
    vs_syscall(SYS_close, fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    const char *end = strrchr(buf, ')');
    return end && (end[2] == 'Z' || end[2] == 'X');
}

static bool alive(int pid)
{
    return (kill(pid, 0) == 0 || errno == EPERM) && !zombie(pid);
}

/* Whether no other process holds C. The entry of one that died is freed
 * and its count given back, exactly once (the compare-and-swap). */
static bool alone(struct vs_shm_conn *c)
{
    if (atomic_load(&c->crowded))
        return false;
    if (atomic_load(&c->holders) == 1)
        return true;
    long now = vs_now_ns();
    if (now < atomic_load_explicit(&c->next_alone_ns, memory_order_relaxed))
        return false;
    bool others = false;
    int saved_errno = errno;
    for (int i = 0; i < VS_SHM_HOLDERS; i++) {
        int pid = atomic_load(&c->holder_pid[i]);
        if (pid == 0 || pid == my_pid())
            continue;
        if (pid == BORN || alive(pid)) {
            others = true;
            continue;
        }
        if (atomic_compare_exchange_strong(&c->holder_pid[i], &pid, 0))
            atomic_fetch_sub(&c->holders, 1);
    }
    errno = saved_errno;
    if (others)
        atomic_store_explicit(&c->next_alone_ns, now + CHECK_NS, memory_order_relaxed);
    return !others;
}

bool vs_shm_setup_begin(struct vs_shm_conn *c)
{
    if (pthread_rwlock_tryrdlock(&setup_lock) != 0)
        return false;
    if (alone(c))
        return true;
    pthread_rwlock_unlock(&setup_lock);
    return false;
}

void vs_shm_setup_end(void)
{
    pthread_rwlock_unlock(&setup_lock);
}

void vs_shm_setup_fork_prepare(void)
{
    pthread_rwlock_wrlock(&setup_lock);
}

void vs_shm_setup_fork_parent(void)
{
    pthread_rwlock_unlock(&setup_lock);
}

/* A new lock: the child's one thread is not the writer the old one names
 * (glibc keeps the writer's thread id). */
void vs_shm_setup_fork_child(void)
{
    self = 0;
    pthread_rwlock_init(&setup_lock, NULL);
}
