/* cmd_stat.c - `vsocket stat`: the sockets of running vsocket processes,
 * read from their statistics segments without stopping them. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/stats_format.h"
#include "core/transport_id.h"
#include "tool/tool.h"

struct stat_options {
    bool json, all;
    pid_t pid;    /* 0: every process */
    double watch; /* seconds between refreshes; 0: print once */
    const char *dir;
};

struct segment {
    const struct vs_stats_header *header;
    size_t size;
    pid_t pid; /* the writer, numbered in our pid namespace */
};

static void usage(FILE *out)
{
    fputs("usage: vsocket stat [--json] [--all] [--pid PID] [--watch[=SECONDS]]\n"
          "\n"
          "Shows every socket of every running process that uses vsocket: pid, fd,\n"
          "protocol, state, local and peer address, transport, bytes and messages each\n"
          "way, and why the socket is not accelerated when it is not.\n"
          "\n"
          "  --json             one JSON document instead of a table\n"
          "  --all              also recently closed sockets\n"
          "  --pid PID          only that process\n"
          "  --watch[=SECONDS]  refresh every SECONDS (default 1) until interrupted\n"
          "\n"
          "Statistics are read from $VSOCKET_STATS_DIR (default /dev/shm).\n"
          "Exit codes: 0 at least one process shown, 2 usage error, 3 no vsocket process.\n",
          out);
}

static int parse(int argc, char **argv, struct stat_options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *end;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 1;
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
        } else if (strcmp(a, "--all") == 0) {
            o->all = true;
        } else if (strcmp(a, "--watch") == 0) {
            o->watch = 1;
        } else if (strncmp(a, "--watch=", 8) == 0) {
            o->watch = strtod(a + 8, &end);
            if (end == a + 8 || *end || !(o->watch >= 0.1 && o->watch <= 3600)) {
                fprintf(stderr, "vsocket stat: --watch takes seconds from 0.1 to 3600\n");
                return -1;
            }
        } else if (strcmp(a, "--pid") == 0 || strncmp(a, "--pid=", 6) == 0) {
            const char *v = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : "");
            long pid = strtol(v, &end, 10);
            if (!*v || *end || pid <= 0 || pid > INT_MAX) {
                fprintf(stderr, "vsocket stat: --pid takes a process id\n");
                return -1;
            }
            o->pid = (pid_t)pid;
        } else {
            fprintf(stderr, "vsocket stat: unknown argument '%s' (see vsocket stat --help)\n", a);
            return -1;
        }
    }
    return 0;
}

/* The last number of the NSpid line of process PID: its pid in its own
 * pid namespace. */
static pid_t own_ns_pid(pid_t pid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    pid_t last = 0;
    while (fgets(buf, sizeof(buf), f)) {
        if (strncmp(buf, "NSpid:", 6) != 0)
            continue;
        for (char *t = strtok(buf + 6, " \t\n"); t; t = strtok(NULL, " \t\n"))
            last = (pid_t)atoi(t);
        break;
    }
    fclose(f);
    return last;
}

/* Our number for the process that is NS_PID in pid namespace NS, found in
 * /proc; 0 when we do not see it (dead, or in a namespace beside ours). */
static pid_t pid_in_our_ns(uint32_t ns, pid_t ns_pid)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    pid_t found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid > 0 && vs_stats_pid_ns(pid) == ns && own_ns_pid(pid) == ns_pid)
            found = pid;
    }
    closedir(d);
    return found;
}

/* The writer of H as we number it (0: not seen). A writer in another pid
 * namespace (a container) is found through /proc when its namespace is
 * below ours. */
static pid_t writer_pid(const struct vs_stats_header *h, bool *foreign)
{
    static uint32_t our_ns;
    if (!our_ns)
        our_ns = vs_stats_pid_ns(0);
    *foreign = h->pid_ns && our_ns && h->pid_ns != our_ns;
    return *foreign ? pid_in_our_ns(h->pid_ns, h->pid) : h->pid;
}

/* Removes PATH if it is still the file ST describes. The name may have
 * been taken meanwhile by a new process of the same pid (a container's pid 1
 * in a namespace whose inode the kernel reused): removing by name alone
 * removed the live one's file (seen in test_pid_namespace.py). */
static void unlink_if_same(const char *path, const struct stat *st)
{
    struct stat now;
    if (lstat(path, &now) == 0 && now.st_ino == st->st_ino && now.st_dev == st->st_dev)
        unlink(path);
}

/* Maps FILE (a name in O->dir) if it is a valid segment of a live process.
 * A file left by a process that died is removed when it is ours to remove;
 * one of another pid namespace whose writer we do not see only when we are
 * the host's (then every namespace is below ours, and it died). */
static int open_segment(const struct stat_options *o, const char *file, struct segment *seg)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", o->dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == EACCES)
            fprintf(stderr, "vsocket stat: %s belongs to another user: run as that user or root\n",
                    path);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
        (size_t)st.st_size < sizeof(struct vs_stats_header)) {
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return -1;
    const struct vs_stats_header *h = p;
    /* No magic yet: a process writing its header now (stats.c), not ours
     * to judge. */
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == 0) {
        munmap(p, (size_t)st.st_size);
        return -1;
    }
    size_t need = (size_t)h->header_size + (size_t)h->capacity * h->record_size;
    bool valid = h->magic == VS_STATS_MAGIC && h->version == VS_STATS_VERSION &&
                 h->header_size == sizeof(*h) && h->record_size == sizeof(struct vs_stats_record) &&
                 need <= (size_t)st.st_size;
    if (!valid) {
        fprintf(stderr, "vsocket stat: %s: not a statistics file of this version, skipped\n", path);
        munmap(p, (size_t)st.st_size);
        return -1;
    }
    bool foreign;
    pid_t pid = writer_pid(h, &foreign);
    bool alive = pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
    if (!alive || vs_stats_proc_start_ticks(pid) != h->start_ticks) {
        bool judged = !foreign || pid > 0 || vs_stats_pid_ns(0) == VS_STATS_INIT_PID_NS;
        if (judged && st.st_uid == getuid())
            unlink_if_same(path, &st);
        munmap(p, (size_t)st.st_size);
        return -1;
    }
    seg->header = h;
    seg->size = (size_t)st.st_size;
    seg->pid = pid;
    return 0;
}

/* A consistent copy of R's fields (see the sequence counter in stats_format.h). */
static void read_record(const struct vs_stats_record *r, struct vs_stats_record *out)
{
    for (int tries = 0; tries < 1000; tries++) {
        unsigned before = atomic_load_explicit(&r->seq, memory_order_acquire);
        memcpy((void *)out, (const void *)r, sizeof(*out));
        atomic_thread_fence(memory_order_acquire);
        if (!(before & 1) && atomic_load_explicit(&r->seq, memory_order_relaxed) == before)
            return;
    }
}

static void format_addr(const struct vs_stats_addr *a, char *out, size_t outlen)
{
    char host[INET6_ADDRSTRLEN] = "";
    if (a->family == AF_INET) {
        inet_ntop(AF_INET, a->addr, host, sizeof(host));
        snprintf(out, outlen, "%s:%u", host, a->port);
    } else if (a->family == AF_INET6) {
        inet_ntop(AF_INET6, a->addr, host, sizeof(host));
        snprintf(out, outlen, "[%s]:%u", host, a->port);
    } else {
        out[0] = '\0';
    }
}

static const char *proto_name(const struct vs_stats_record *r)
{
    return r->type == SOCK_STREAM ? "tcp" : r->type == SOCK_DGRAM ? "udp" : "raw";
}

/* JSON strings we print come from our own writer, but a corrupt segment
 * must not produce invalid JSON. */
static void json_string(const char *s, size_t max)
{
    putchar('"');
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* A set-up moves only when the program calls on its socket (vsocket has no
 * thread of its own): past its due time it is stalled, and stays on the
 * kernel until the next call ends it with a reason. */
static bool stalled(const struct vs_stats_record *r)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    return r->due_ns && now > r->due_ns && atomic_load(&r->use) == VS_REC_LIVE;
}

static void print_record(const struct stat_options *o, pid_t pid, const struct vs_stats_record *r,
                         bool first)
{
    char reason[sizeof(r->reason) + 16];
    snprintf(reason, sizeof(reason), "%.*s%s", (int)sizeof(r->reason), r->reason,
             stalled(r) ? ",stalled" : "");
    char local[64], peer[64];
    format_addr(&r->local, local, sizeof(local));
    format_addr(&r->peer, peer, sizeof(peer));
    bool udp = r->type == SOCK_DGRAM;
    unsigned peers = atomic_load(&r->dgram_peers);
    unsigned long long drops = atomic_load(&r->dgram_drops);
    const char *transport = vs_transport_name((enum vs_transport)r->transport);
    unsigned long long tx = atomic_load(&r->tx_bytes), rx = atomic_load(&r->rx_bytes),
                       txm = atomic_load(&r->tx_msgs), rxm = atomic_load(&r->rx_msgs);
    if (!o->json) {
        /* A UDP socket's peers on shared memory, and its drops there, after
         * the reason (the last column: scripts that read columns keep
         * working). */
        char shown[sizeof(reason) + 64];
        int used = snprintf(shown, sizeof(shown), "%s", reason);
        if (udp && peers)
            used += snprintf(shown + used, sizeof(shown) - (size_t)used, "%sshm-peers=%u",
                             used ? "," : "", peers);
        if (udp && drops)
            snprintf(shown + used, sizeof(shown) - (size_t)used, "%sreceiver-full-drops=%llu",
                     used ? "," : "", drops);
        printf("%-7d %-4d %-4s %-10s %-24s %-24s %-9s %12llu %12llu %9llu %9llu %s\n", pid, r->fd,
               proto_name(r), vs_stats_state_name(r->state), local[0] ? local : "-",
               peer[0] ? peer : "-", transport, tx, rx, txm, rxm, shown[0] ? shown : "-");
        return;
    }
    printf("%s{\"fd\":%d,\"proto\":\"%s\",\"family\":\"%s\",\"state\":\"%s\",\"local\":\"%s\","
           "\"peer\":\"%s\",\"transport\":\"%s\",\"reason\":",
           first ? "" : ",", r->fd, proto_name(r), r->family == AF_INET6 ? "ipv6" : "ipv4",
           vs_stats_state_name(r->state), local, peer, transport);
    json_string(reason, sizeof(reason));
    printf(",\"tx_bytes\":%llu,\"rx_bytes\":%llu,\"tx_msgs\":%llu,\"rx_msgs\":%llu", tx, rx, txm,
           rxm);
    if (udp)
        printf(",\"shm_peers\":%u,\"receiver_full_drops\":%llu", peers, drops);
    printf(",\"closed\":%s}", atomic_load(&r->use) == VS_REC_CLOSED ? "true" : "false");
}

static void print_segment(const struct stat_options *o, const struct segment *seg, bool first)
{
    const struct vs_stats_header *h = seg->header;
    if (o->json) {
        printf("%s{\"pid\":%d,\"comm\":", first ? "" : ",", seg->pid);
        json_string(h->comm, sizeof(h->comm));
        printf(",\"transports\":");
        json_string(h->transports, sizeof(h->transports));
        printf(",\"untracked\":%llu,\"sockets\":[", (unsigned long long)atomic_load(&h->untracked));
    }
    const struct vs_stats_record *records = (const void *)((const char *)h + h->header_size);
    unsigned n = atomic_load(&h->high_water);
    if (n > h->capacity)
        n = h->capacity;
    bool first_record = true;
    for (unsigned i = 0; i < n; i++) {
        unsigned use = atomic_load(&records[i].use);
        if (use != VS_REC_LIVE && !(o->all && use == VS_REC_CLOSED))
            continue;
        struct vs_stats_record copy;
        read_record(&records[i], &copy);
        print_record(o, seg->pid, &copy, first_record);
        first_record = false;
    }
    if (o->json)
        printf("]}");
    else if (atomic_load(&h->untracked))
        printf("%-7d (%llu more sockets not shown: raise VSOCKET_STATS_MAX)\n", seg->pid,
               (unsigned long long)atomic_load(&h->untracked));
}

/* Prints every matching process once; returns how many there were. */
static int show(const struct stat_options *o)
{
    DIR *d = opendir(o->dir);
    if (!d) {
        fprintf(stderr, "vsocket stat: cannot read %s: %s\n", o->dir, strerror(errno));
        return -1;
    }
    if (o->json)
        printf("{\"processes\":[");
    else
        printf("%-7s %-4s %-4s %-10s %-24s %-24s %-9s %12s %12s %9s %9s %s\n", "PID", "FD", "PROTO",
               "STATE", "LOCAL", "PEER", "TRANSPORT", "TX_BYTES", "RX_BYTES", "TX_MSGS", "RX_MSGS",
               "REASON");
    int count = 0;
    struct dirent *e;
    size_t prefix = strlen(VS_STATS_FILE_PREFIX);
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, VS_STATS_FILE_PREFIX, prefix) != 0)
            continue;
        /* A container's file (nsINODE.PID) names a pid of its own. */
        const char *num = e->d_name + prefix;
        if (o->pid && strncmp(num, "ns", 2) != 0 && atoi(num) != o->pid)
            continue;
        struct segment seg;
        if (open_segment(o, e->d_name, &seg) < 0)
            continue;
        if (o->pid && seg.pid != o->pid) {
            munmap((void *)seg.header, seg.size);
            continue;
        }
        print_segment(o, &seg, count == 0);
        munmap((void *)seg.header, seg.size);
        count++;
    }
    closedir(d);
    if (o->json)
        printf("]}\n");
    fflush(stdout);
    return count;
}

int cmd_stat(int argc, char **argv)
{
    struct stat_options o = {.dir = getenv("VSOCKET_STATS_DIR")};
    if (!o.dir || !*o.dir)
        o.dir = "/dev/shm";
    int r = parse(argc, argv, &o);
    if (r != 0)
        return r > 0 ? VS_EXIT_OK : VS_EXIT_USAGE;
    for (;;) {
        if (o.watch > 0 && !o.json)
            printf("\033[H\033[2J");
        int count = show(&o);
        if (count < 0)
            return VS_EXIT_ERROR;
        if (o.watch <= 0) {
            if (count == 0) {
                fprintf(stderr,
                        "vsocket stat: no process is running with vsocket%s (looked in %s)\n",
                        o.pid ? " under that pid" : "", o.dir);
                return VS_EXIT_NO_PROCESS;
            }
            return VS_EXIT_OK;
        }
        usleep((useconds_t)(o.watch * 1e6));
    }
}
