/* ownfd.c - vsocket's own descriptors: a two-level table of owners by number. */
#include "core/ownfd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "config/config.h"
#include "base/syscall.h"

#define PER_CHUNK 1024
#define CHUNKS 1024 /* 1 Mi numbers, the kernel's default nr_open */
#define LIMIT (PER_CHUNK * CHUNKS)
#define AUTO_FLOOR_MAX 1024
/* Set in an entry's owner while the owner is told: the number is ours until
 * the program's call runs, but no longer ours to close. Owners are objects,
 * so the low bit is free. */
#define LEAVING ((uintptr_t)1)

struct entry {
    _Atomic(void *) owner;
    vs_ownfd_lost_fn lost; /* written before owner is published */
};

static _Atomic(struct entry *) chunks[CHUNKS];
static _Atomic unsigned top; /* highest number ever registered + 1 */

static struct entry *entry_of(int fd, bool create)
{
    if (fd < 0 || fd >= LIMIT)
        return NULL;
    _Atomic(struct entry *) *slot = &chunks[fd / PER_CHUNK];
    struct entry *chunk = atomic_load_explicit(slot, memory_order_acquire);
    if (!chunk && create) {
        int saved_errno = errno;
        void *p = mmap(NULL, PER_CHUNK * sizeof(struct entry), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        errno = saved_errno;
        if (p == MAP_FAILED)
            return NULL;
        struct entry *expected = NULL;
        if (atomic_compare_exchange_strong(slot, &expected, (struct entry *)p)) {
            chunk = p;
        } else {
            munmap(p, PER_CHUNK * sizeof(struct entry));
            chunk = expected;
        }
    }
    return chunk ? &chunk[fd % PER_CHUNK] : NULL;
}

int vs_ownfd_floor(void)
{
    static _Atomic int floor = -1;
    int f = atomic_load_explicit(&floor, memory_order_relaxed);
    if (f >= 0)
        return f;
    if (vs_config.fd_floor >= 0) {
        f = (int)vs_config.fd_floor;
    } else {
        /* Above the numbers programs pick by hand (3, 4, 5... for socket
         * activation, sshd, shells), below the limit so the move can work,
         * and low enough that the kernel's fd array stays small. */
        struct rlimit rl;
        rlim_t soft = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
        f = soft / 2 < AUTO_FLOOR_MAX ? (int)(soft / 2) : AUTO_FLOOR_MAX;
    }
    atomic_store_explicit(&floor, f, memory_order_relaxed);
    return f;
}

int vs_ownfd_take(int fd, void *owner, vs_ownfd_lost_fn lost)
{
    if (fd < 0)
        return fd;
    int saved_errno = errno;
    int floor = vs_ownfd_floor();
    if (fd < floor) {
        /* Raw system calls: fcntl and close are interposed inside libvsocket. */
        int moved = (int)vs_syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, floor);
        if (moved >= 0) {
            vs_syscall(SYS_close, fd);
            fd = moved;
        }
    }
    struct entry *e = entry_of(fd, true);
    if (e) {
        e->lost = lost;
        atomic_store_explicit(&e->owner, owner, memory_order_release);
        unsigned t = atomic_load(&top);
        while (t < (unsigned)fd + 1 && !atomic_compare_exchange_weak(&top, &t, (unsigned)fd + 1))
            ;
    }
    errno = saved_errno;
    return fd;
}

void vs_ownfd_close(int fd, const void *owner)
{
    if (fd < 0)
        return;
    struct entry *e = entry_of(fd, false);
    void *expected = (void *)owner;
    /* Beyond the table nothing is registered: the number is ours as given. */
    bool ours = fd >= LIMIT || (e && atomic_compare_exchange_strong(&e->owner, &expected, NULL));
    if (ours) {
        int saved_errno = errno;
        vs_syscall(SYS_close, fd);
        errno = saved_errno;
    }
}

void vs_ownfd_taken(unsigned first, unsigned last)
{
    unsigned t = atomic_load_explicit(&top, memory_order_relaxed);
    if (t == 0 || first >= t)
        return;
    if (last >= t)
        last = t - 1;
    for (unsigned fd = first; fd <= last; fd++) {
        struct entry *e = entry_of((int)fd, false);
        if (!e) { /* a whole chunk never used */
            fd |= PER_CHUNK - 1;
            continue;
        }
        void *owner = atomic_load_explicit(&e->owner, memory_order_acquire);
        if (!owner || ((uintptr_t)owner & LEAVING) ||
            !atomic_compare_exchange_strong(&e->owner, &owner,
                                            (void *)((uintptr_t)owner | LEAVING)))
            continue;
        if (e->lost)
            e->lost(owner, (int)fd, first, last);
        /* Unless the owner's own close cleared it meanwhile (and another
         * registration took the number after that). */
        void *leaving = (void *)((uintptr_t)owner | LEAVING);
        atomic_compare_exchange_strong(&e->owner, &leaving, NULL);
    }
}

bool vs_ownfd_is_ours(int fd)
{
    struct entry *e = entry_of(fd, false);
    void *owner = e ? atomic_load_explicit(&e->owner, memory_order_acquire) : NULL;
    return owner && !((uintptr_t)owner & LEAVING);
}

bool vs_ownfd_mine(int fd, const void *owner)
{
    if (fd < 0)
        return false;
    if (fd >= LIMIT)
        return true;
    struct entry *e = entry_of(fd, false);
    void *o = e ? atomic_load_explicit(&e->owner, memory_order_acquire) : NULL;
    return ((uintptr_t)o & ~LEAVING) == (uintptr_t)owner;
}
