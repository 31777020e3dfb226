/* stats.c - the per-process statistics segment. */
#include "config/stats.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "config/log.h"
#include "base/syscall.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct vs_stats_header *segment; /* NULL until the first socket */
static size_t segment_size;
static pid_t segment_pid;
static bool segment_failed;            /* do not retry after an error */
static struct vs_stats_record scratch; /* target of every record we cannot publish */

static struct vs_stats_record *records(void)
{
    return (struct vs_stats_record *)((char *)segment + sizeof(*segment));
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void program_name(char *out, size_t outlen)
{
    int fd = (int)vs_syscall(SYS_openat, AT_FDCWD, "/proc/self/comm", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? vs_syscall(SYS_read, fd, out, outlen - 1) : -1;
    if (fd >= 0)
        vs_syscall(SYS_close, fd);
    if (n <= 0)
        n = 0;
    out[n] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

/* Our pid namespace's inode, in the file's name and header. */
static uint32_t segment_pid_ns;

static void fill_header(struct vs_stats_header *h, unsigned capacity)
{
    h->version = VS_STATS_VERSION;
    h->header_size = sizeof(*h);
    h->record_size = sizeof(struct vs_stats_record);
    h->capacity = capacity;
    h->pid = getpid();
    h->pid_ns = segment_pid_ns;
    h->start_ticks = vs_stats_proc_start_ticks(h->pid);
    program_name(h->comm, sizeof(h->comm));
    vs_config_format_transports(vs_config.transports, h->transports, sizeof(h->transports));
    /* Last: `vsocket stat` takes a file with the magic for a whole header,
     * and one whose process start differs for a dead process's (it
     * removes it: read half-written, this live process's file went). */
    __atomic_store_n(&h->magic, VS_STATS_MAGIC, __ATOMIC_RELEASE);
}

/* The file this process writes (vs_stats_exit removes it). */
static char segment_path[PATH_MAX + 32];

static int create_at(const char *path, size_t size)
{
    unlink(path);
    int fd =
        (int)vs_syscall(SYS_openat, AT_FDCWD, path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)size) < 0) {
        int e = errno;
        vs_syscall(SYS_close, fd);
        unlink(path);
        errno = e;
        return -1;
    }
    return fd;
}

/* Creates this process's file afresh, readable by the owner only, and
 * names it in segment_path: a file left by our pre-exec image or a dead
 * process with our pid is replaced. One a dead process of another user
 * left (pid reuse; the sticky /dev/shm lets only its owner remove it)
 * cannot be: then a name with our uid too (`vsocket stat` reads both). */
static int create_file(size_t size)
{
    segment_pid_ns = vs_stats_pid_ns(0);
    vs_stats_path(vs_config.stats_dir, getpid(), segment_pid_ns, segment_path,
                  sizeof(segment_path));
    int fd = create_at(segment_path, size);
    if (fd >= 0 || errno != EEXIST)
        return fd;
    size_t len = strlen(segment_path);
    snprintf(segment_path + len, sizeof(segment_path) - len, "-%u", (unsigned)getuid());
    return create_at(segment_path, size);
}

static void create_segment(void)
{
    size_t size = sizeof(struct vs_stats_header) +
                  (size_t)vs_config.stats_max * sizeof(struct vs_stats_record);
    int fd = create_file(size);
    if (fd < 0) {
        vs_warn("statistics disabled: cannot create %s (%s); set VSOCKET_STATS_DIR to a writable "
                "directory or VSOCKET_STATS=off",
                segment_path, strerror(errno));
        segment_failed = true;
        return;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    vs_syscall(SYS_close, fd);
    if (p == MAP_FAILED) {
        vs_warn("statistics disabled: cannot map %s (%s)", segment_path, strerror(errno));
        unlink(segment_path);
        segment_failed = true;
        return;
    }
    segment = p;
    segment_size = size;
    segment_pid = getpid();
    fill_header(segment, vs_config.stats_max);
}

/* Once every record has been used, a clock hand sweeps them in order:
 * records are closed roughly in the order they were opened, so the first
 * one not live after the hand is about the oldest closed, found without
 * scanning the whole table on every new socket (nginx accepts thousands a
 * second). all_live: the last sweep found none; only a close can change that. */
static unsigned hand;
static bool all_live;

/* A never used record, else the next one not live; NULL when all are live. */
static struct vs_stats_record *take_record(void)
{
    struct vs_stats_record *r = records();
    unsigned hw = atomic_load(&segment->high_water);
    if (hw < segment->capacity) {
        atomic_store(&segment->high_water, hw + 1);
        return &r[hw];
    }
    for (unsigned n = 0; n < hw && !all_live; n++) {
        unsigned i = hand++ % hw;
        if (atomic_load(&r[i].use) != VS_REC_LIVE)
            return &r[i];
    }
    all_live = true;
    return NULL;
}

static void begin_update(struct vs_stats_record *r)
{
    atomic_fetch_add_explicit(&r->seq, 1, memory_order_acq_rel);
}

static void end_update(struct vs_stats_record *r)
{
    atomic_fetch_add_explicit(&r->seq, 1, memory_order_release);
}

/* A reason into its record, cut to fit: a plain copy, where snprintf's
 * "%s" cost ~300 instructions, three times per short connection. */
static void set_reason(struct vs_stats_record *r, const char *reason)
{
    size_t n = reason ? strnlen(reason, sizeof(r->reason) - 1) : 0;
    memcpy(r->reason, reason ? reason : "", n);
    r->reason[n] = '\0';
}

struct vs_stats_record *vs_stats_open(int fd, int family, int type, unsigned transport,
                                      const char *reason)
{
    if (!vs_config.stats)
        return &scratch;
    pthread_mutex_lock(&lock);
    if (!segment && !segment_failed)
        create_segment();
    struct vs_stats_record *r = segment ? take_record() : NULL;
    if (!r) {
        if (segment)
            atomic_fetch_add(&segment->untracked, 1);
        pthread_mutex_unlock(&lock);
        return &scratch;
    }
    begin_update(r);
    r->fd = fd;
    r->family = (uint16_t)family;
    r->type = (uint8_t)type;
    r->state = VS_STATE_OPEN;
    r->transport = (uint8_t)transport;
    set_reason(r, reason);
    memset(&r->local, 0, sizeof(r->local));
    memset(&r->peer, 0, sizeof(r->peer));
    r->open_ns = now_ns();
    r->close_ns = 0;
    r->due_ns = 0;
    atomic_store(&r->tx_bytes, 0);
    atomic_store(&r->rx_bytes, 0);
    atomic_store(&r->tx_msgs, 0);
    atomic_store(&r->rx_msgs, 0);
    atomic_store(&r->dgram_peers, 0);
    atomic_store(&r->dgram_drops, 0);
    end_update(r);
    atomic_store(&r->use, VS_REC_LIVE);
    pthread_mutex_unlock(&lock);
    return r;
}

void vs_stats_close(struct vs_stats_record *r)
{
    if (r == &scratch)
        return;
    pthread_mutex_lock(&lock);
    begin_update(r);
    r->state = VS_STATE_CLOSED;
    r->close_ns = now_ns();
    end_update(r);
    atomic_store(&r->use, VS_REC_CLOSED);
    all_live = false;
    pthread_mutex_unlock(&lock);
}

/* Metadata writers are serialised by the allocation lock: they are rare
 * (connect, accept, bind, close) and must not interleave inside one record. */
void vs_stats_set_state(struct vs_stats_record *r, enum vs_sock_state state)
{
    if (r == &scratch)
        return;
    pthread_mutex_lock(&lock);
    begin_update(r);
    r->state = (uint8_t)state;
    end_update(r);
    pthread_mutex_unlock(&lock);
}

void vs_stats_set_fd(struct vs_stats_record *r, int fd)
{
    if (r == &scratch)
        return;
    pthread_mutex_lock(&lock);
    begin_update(r);
    r->fd = fd;
    end_update(r);
    pthread_mutex_unlock(&lock);
}

void vs_stats_set_reason_due(struct vs_stats_record *r, const char *reason, long in_ns)
{
    if (r == &scratch)
        return;
    uint64_t now = now_ns();
    pthread_mutex_lock(&lock);
    begin_update(r);
    set_reason(r, reason);
    r->due_ns = in_ns > 0 ? now + (uint64_t)in_ns : 0;
    end_update(r);
    pthread_mutex_unlock(&lock);
}

void vs_stats_set_reason(struct vs_stats_record *r, const char *reason)
{
    vs_stats_set_reason_due(r, reason, 0);
}

void vs_stats_set_transport(struct vs_stats_record *r, unsigned transport, const char *reason)
{
    if (r == &scratch)
        return;
    pthread_mutex_lock(&lock);
    begin_update(r);
    r->transport = (uint8_t)transport;
    set_reason(r, reason);
    r->due_ns = 0;
    end_update(r);
    pthread_mutex_unlock(&lock);
}

static void copy_addr(struct vs_stats_addr *out, const struct sockaddr *sa)
{
    memset(out, 0, sizeof(*out));
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)sa;
        out->family = AF_INET;
        out->port = ntohs(in->sin_port);
        memcpy(out->addr, &in->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)sa;
        out->family = AF_INET6;
        out->port = ntohs(in6->sin6_port);
        memcpy(out->addr, &in6->sin6_addr, 16);
    }
}

void vs_stats_set_addrs(struct vs_stats_record *r, const struct sockaddr *local,
                        const struct sockaddr *peer)
{
    if (r == &scratch)
        return;
    pthread_mutex_lock(&lock);
    begin_update(r);
    if (local)
        copy_addr(&r->local, local);
    if (peer)
        copy_addr(&r->peer, peer);
    end_update(r);
    pthread_mutex_unlock(&lock);
}

void vs_stats_fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}

void vs_stats_fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

/* The child must not keep writing into its parent's file: it gets a file of
 * its own holding a copy of the records it inherited (its sockets are the
 * parent's live ones), mapped at the same address so that every record
 * pointer held by the socket table stays valid. */
void vs_stats_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    if (!segment)
        return;
    int fd = create_file(segment_size);
    size_t used =
        sizeof(*segment) + atomic_load(&segment->high_water) * sizeof(struct vs_stats_record);
    if (fd >= 0 && pwrite(fd, segment, used, 0) == (ssize_t)used &&
        mmap(segment, segment_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) !=
            MAP_FAILED) {
        vs_syscall(SYS_close, fd);
        segment_pid = getpid();
        fill_header(segment, segment->capacity);
        /* The parent's records are its history, not the child's (and the
         * parent may have changed them while we copied): the child's own
         * sockets are marked live again by vs_stats_mark_live(). */
        struct vs_stats_record *r = records();
        for (unsigned i = 0; i < atomic_load(&segment->high_water); i++)
            atomic_store(&r[i].use, VS_REC_FREE);
        all_live = false;
        return;
    }
    vs_warn("statistics disabled in child: cannot create %s (%s)", segment_path, strerror(errno));
    if (fd >= 0) {
        vs_syscall(SYS_close, fd);
        unlink(segment_path);
    }
    /* Keep the mapping valid but private, so writes no longer reach the
     * parent's file. */
    mmap(segment, segment_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
         0);
    segment_failed = true;
}

void vs_stats_mark_live(struct vs_stats_record *r, enum vs_sock_state state)
{
    if (r == &scratch || segment_failed)
        return;
    begin_update(r);
    r->state = (uint8_t)state;
    r->close_ns = 0;
    end_update(r);
    atomic_store(&r->use, VS_REC_LIVE);
}

void vs_stats_exit(void)
{
    if (!segment || segment_pid != getpid())
        return;
    unlink(segment_path);
}
