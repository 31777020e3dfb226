/* doctor_rdma.c - `vsocket doctor`'s RDMA section.
 *
 * It reads what libibverbs and librdmacm read (sysfs, /dev/infiniband,
 * rlimits) instead of calling them: a broken or missing libibverbs is one
 * of the things it must explain, so the tool does not link it, and only
 * dlopen()s it to say whether it loads. Every check prints one line: OK,
 * WARN (RDMA works, but something limits it) or PROBLEM (RDMA cannot work
 * until it is fixed), each with what to do. */
#include "tool/doctor_rdma.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "core/procfile.h"

/* Registered memory per connection: the receive ring of VSOCKET_RDMA_RING
 * bytes, the sender's copy of what the peer has not read (as large: see
 * config/config.h), plus the credit word and what the provider pins for the
 * queue pair and completion queues (hardware NICs register those too). An
 * estimate, for saying how many connections the limit allows. */
#define CONN_EXTRA (16ull << 10)
#define CONNS_WANTED 64
#define CAP_IPC_LOCK_BIT 14 /* linux/capability.h */
#define MAX_PORTS 64
#define NAME_LEN 64

struct port {
    char dev[NAME_LEN];
    unsigned num;
    char node_type[NAME_LEN];  /* "CA" (InfiniBand, RoCE), "RNIC" (iWARP) */
    char state[NAME_LEN];      /* "ACTIVE", "DOWN", "INIT", ... */
    char link_layer[NAME_LEN]; /* "Ethernet", "InfiniBand" */
    char netdev[NAME_LEN];     /* "" when unknown */
    int gid_index;             /* of the IPv4-mapped RoCE v2 GID, or -1 */
    char gid_ip[INET_ADDRSTRLEN];
    int uverbs; /* N of /dev/infiniband/uverbsN for dev, or -1 */
};

/* Tests point VSOCKET_DOCTOR_SYSROOT at a fake tree holding sys/ and dev/;
 * /proc and the libraries are always the real ones. */
static void sys_path(char *out, size_t len, const char *fmt, ...)
{
    const char *root = getenv("VSOCKET_DOCTOR_SYSROOT");
    int n = snprintf(out, len, "%s", root ? root : "");
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < len)
        vsnprintf(out + n, len - (size_t)n, fmt, ap);
    va_end(ap);
}

/* One sysfs attribute, its trailing newline removed. 0, or -1. */
static int read_attr(char *buf, size_t len, const char *fmt, ...)
{
    char rel[PATH_MAX], path[PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof(rel), fmt, ap);
    va_end(ap);
    sys_path(path, sizeof(path), "%s", rel);
    if (vs_read_small_file(path, buf, len) < 0)
        return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* sysfs writes enumerations as "4: ACTIVE": keep the name. */
static void strip_number(char *s)
{
    const char *colon = strstr(s, ": ");
    if (colon)
        memmove(s, colon + 2, strlen(colon + 2) + 1);
}

static int not_dot(const struct dirent *d)
{
    return d->d_name[0] != '.';
}

/* Entries of the directory, in version order (port 2 before port 10), or
 * -1 when it cannot be read. Free with free_list. */
static int list_dir(const char *path, struct dirent ***names)
{
    return scandir(path, names, not_dot, versionsort);
}

static void free_list(struct dirent **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

void vs_doctor_say(struct vs_doctor_verdict *v, enum vs_doctor_level lv, const char *reason,
                   const char *fmt, ...)
{
    static const char *const label[] = {"OK", "WARN", "PROBLEM"};
    printf("  %-8s ", label[lv]);
    if (reason)
        printf("%s: ", reason);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    if (lv == WARN)
        v->warnings++;
    if (lv == PROBLEM && v->problems++ == 0 && reason)
        snprintf(v->reason, sizeof(v->reason), "%s", reason);
}

/* sysfs prints a GID as eight groups of four hex digits. */
static int parse_gid(const char *text, uint8_t gid[16])
{
    unsigned short g[8];
    if (sscanf(text, "%4hx:%4hx:%4hx:%4hx:%4hx:%4hx:%4hx:%4hx", &g[0], &g[1], &g[2], &g[3], &g[4],
               &g[5], &g[6], &g[7]) != 8)
        return -1;
    for (int i = 0; i < 8; i++) {
        gid[2 * i] = (uint8_t)(g[i] >> 8);
        gid[2 * i + 1] = (uint8_t)g[i];
    }
    return 0;
}

/* ::ffff:a.b.c.d, which the kernel adds for each IPv4 address of a RoCE
 * port's network interface. */
static bool ipv4_mapped(const uint8_t gid[16])
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(gid, prefix, sizeof(prefix)) == 0;
}

static bool all_zero(const uint8_t gid[16])
{
    static const uint8_t zero[16];
    return memcmp(gid, zero, sizeof(zero)) == 0;
}

/* The GID table: which interface the port's GIDs belong to, and the first
 * IPv4 RoCE v2 GID, the one rdma_cm picks for an IPv4 address. The table
 * may have holes (deleted addresses), so every slot is read. */
static void scan_gids(struct port *p)
{
    const char *dir = "/sys/class/infiniband";
    char text[64], type[NAME_LEN];
    uint8_t gid[16];
    for (int i = 0;
         read_attr(text, sizeof(text), "%s/%s/ports/%u/gids/%d", dir, p->dev, p->num, i) == 0;
         i++) {
        if (parse_gid(text, gid) < 0 || all_zero(gid))
            continue;
        if (!p->netdev[0])
            read_attr(p->netdev, sizeof(p->netdev), "%s/%s/ports/%u/gid_attrs/ndevs/%d", dir,
                      p->dev, p->num, i);
        if (p->gid_index >= 0 || !ipv4_mapped(gid))
            continue;
        if (read_attr(type, sizeof(type), "%s/%s/ports/%u/gid_attrs/types/%d", dir, p->dev, p->num,
                      i) == 0 &&
            strcmp(type, "RoCE v2") == 0) {
            p->gid_index = i;
            inet_ntop(AF_INET, gid + 12, p->gid_ip, sizeof(p->gid_ip));
        }
    }
}

/* Without a GID the interface is named elsewhere: Soft-RoCE writes it in
 * "parent", a PCI device lists it under device/net/. */
static void find_netdev(struct port *p)
{
    if (p->netdev[0] ||
        read_attr(p->netdev, sizeof(p->netdev), "/sys/class/infiniband/%s/parent", p->dev) == 0)
        return;
    char path[PATH_MAX];
    struct dirent **names;
    sys_path(path, sizeof(path), "/sys/class/infiniband/%s/device/net", p->dev);
    int n = list_dir(path, &names);
    if (n > 0)
        snprintf(p->netdev, sizeof(p->netdev), "%.*s", NAME_LEN - 1, names[0]->d_name);
    if (n >= 0)
        free_list(names, n);
}

/* /sys/class/infiniband_verbs/uverbsN/ibdev names the device behind
 * /dev/infiniband/uverbsN. */
static int find_uverbs(const char *dev)
{
    char path[PATH_MAX], ibdev[NAME_LEN];
    struct dirent **names;
    int found = -1;
    sys_path(path, sizeof(path), "/sys/class/infiniband_verbs");
    int n = list_dir(path, &names);
    for (int i = 0; i < n && found < 0; i++)
        if (strncmp(names[i]->d_name, "uverbs", 6) == 0 &&
            read_attr(ibdev, sizeof(ibdev), "/sys/class/infiniband_verbs/%s/ibdev",
                      names[i]->d_name) == 0 &&
            strcmp(ibdev, dev) == 0)
            found = atoi(names[i]->d_name + 6);
    if (n >= 0)
        free_list(names, n);
    return found;
}

static int scan_device(const char *dev, struct port *ports, int n, int max)
{
    char path[PATH_MAX], node_type[NAME_LEN] = "?";
    struct dirent **names;
    if (read_attr(node_type, sizeof(node_type), "/sys/class/infiniband/%s/node_type", dev) == 0)
        strip_number(node_type);
    int uverbs = find_uverbs(dev);
    sys_path(path, sizeof(path), "/sys/class/infiniband/%s/ports", dev);
    int count = list_dir(path, &names);
    for (int i = 0; i < count && n < max; i++) {
        struct port *p = &ports[n++];
        memset(p, 0, sizeof(*p));
        snprintf(p->dev, sizeof(p->dev), "%.*s", NAME_LEN - 1, dev);
        snprintf(p->node_type, sizeof(p->node_type), "%s", node_type);
        p->num = (unsigned)atoi(names[i]->d_name);
        p->gid_index = -1;
        p->uverbs = uverbs;
        if (read_attr(p->state, sizeof(p->state), "/sys/class/infiniband/%s/ports/%u/state", dev,
                      p->num) == 0)
            strip_number(p->state);
        read_attr(p->link_layer, sizeof(p->link_layer),
                  "/sys/class/infiniband/%s/ports/%u/link_layer", dev, p->num);
        scan_gids(p);
        find_netdev(p);
    }
    if (count >= 0)
        free_list(names, count);
    return n;
}

/* Every port of every device, or -1 when the kernel has no RDMA core at
 * all (no /sys/class/infiniband). */
static int scan_ports(struct port *ports, int max)
{
    char path[PATH_MAX];
    struct dirent **names;
    sys_path(path, sizeof(path), "/sys/class/infiniband");
    int count = list_dir(path, &names);
    int n = 0;
    for (int i = 0; i < count; i++)
        n = scan_device(names[i]->d_name, ports, n, max);
    if (count < 0)
        return -1;
    free_list(names, count);
    return n;
}

/* RoCE: an Ethernet port of a channel adapter. iWARP (RNIC) runs over the
 * interface's TCP/IP stack and InfiniBand over IPoIB: neither keeps its IP
 * address in the GID table. */
static bool roce(const struct port *p)
{
    return strcmp(p->link_layer, "Ethernet") == 0 && strcmp(p->node_type, "CA") == 0;
}

static bool port_usable(const struct port *p)
{
    return strcmp(p->state, "ACTIVE") == 0 && (!roce(p) || p->gid_index >= 0);
}

static const char *netdev_or(const struct port *p, const char *dflt)
{
    return p->netdev[0] ? p->netdev : dflt;
}

static void say_port_down(struct vs_doctor_verdict *v, enum vs_doctor_level lv,
                          const struct port *p)
{
    char reason[160];
    snprintf(reason, sizeof(reason), "%s port %u is %s", p->dev, p->num,
             p->state[0] ? p->state : "in an unknown state");
    if (strcmp(p->link_layer, "InfiniBand") != 0)
        vs_doctor_say(
            v, lv, reason,
            "it needs its interface %s up with a link: `ip link set %s up`, and check the "
            "cable or, for Soft-RoCE, the interface it was added on",
            netdev_or(p, "(unknown)"), netdev_or(p, "IFACE"));
    else if (strcmp(p->state, "DOWN") == 0)
        vs_doctor_say(v, lv, reason, "no InfiniBand link: check the cable and the switch port");
    else
        vs_doctor_say(v, lv, reason,
                      "no subnet manager has brought the port up: run one on the fabric (opensm)");
}

static void say_port(struct vs_doctor_verdict *v, const struct port *p, bool others_usable)
{
    enum vs_doctor_level bad = others_usable ? WARN : PROBLEM;
    char reason[160];
    if (strcmp(p->state, "ACTIVE") != 0) {
        say_port_down(v, bad, p);
    } else if (!roce(p)) {
        vs_doctor_say(
            v, OK, NULL,
            "%s port %u: ACTIVE, %s %s, interface %s (its IP address is not in the GID table: "
            "not checked)",
            p->dev, p->num, p->link_layer, p->node_type, netdev_or(p, "unknown"));
    } else if (p->gid_index < 0) {
        snprintf(reason, sizeof(reason), "%s port %u has no IPv4 RoCE v2 GID", p->dev, p->num);
        vs_doctor_say(
            v, bad, reason,
            "vsocket's rdma_cm rendezvous needs an IPv4 address on its interface %s: `ip addr "
            "add ADDR/PREFIX dev %s`",
            netdev_or(p, "(unknown)"), netdev_or(p, "IFACE"));
    } else {
        vs_doctor_say(v, OK, NULL, "%s port %u: ACTIVE, RoCE on %s, GID index %d %s (RoCE v2)",
                      p->dev, p->num, netdev_or(p, "(unknown interface)"), p->gid_index, p->gid_ip);
    }
}

static const struct port *report_ports(struct vs_doctor_verdict *v, const struct port *ports, int n)
{
    const struct port *use = NULL;
    for (int i = 0; i < n && !use; i++)
        if (port_usable(&ports[i]))
            use = &ports[i];
    if (n <= 0)
        vs_doctor_say(
            v, PROBLEM, "no RDMA device",
            "%s: load the NIC's RDMA driver, or for testing Soft-RoCE: `modprobe rdma_rxe; "
            "rdma link add rxe0 type rxe netdev ETH`",
            n < 0 ? "no /sys/class/infiniband (RDMA core not loaded)"
                  : "/sys/class/infiniband is empty");
    for (int i = 0; i < n; i++) {
        if (i == 0 || strcmp(ports[i].dev, ports[i - 1].dev) != 0)
            vs_doctor_say(v, OK, NULL, "device %s: node type %s", ports[i].dev, ports[i].node_type);
        say_port(v, &ports[i], use != NULL);
    }
    return use;
}

/* "mode 0660, group rdma" for saying why a device node is not ours. */
static void describe_mode(const char *path, char *out, size_t len)
{
    struct stat st;
    struct group *g;
    if (stat(path, &st) < 0) {
        snprintf(out, len, "%s", strerror(errno));
        return;
    }
    g = getgrgid(st.st_gid);
    if (g)
        snprintf(out, len, "mode %04o, group %s", (unsigned)(st.st_mode & 07777), g->gr_name);
    else
        snprintf(out, len, "mode %04o, group %u", (unsigned)(st.st_mode & 07777),
                 (unsigned)st.st_gid);
}

/* Whether this user may open PATH read-write, as libibverbs and librdmacm
 * do. Reports a PROBLEM with LV when not; MISSING says what to load. */
static void check_node(struct vs_doctor_verdict *v, enum vs_doctor_level lv, const char *node,
                       const char *what, const char *missing)
{
    char path[PATH_MAX], mode[128], reason[160];
    sys_path(path, sizeof(path), "/dev/infiniband/%s", node);
    if (access(path, F_OK) < 0) {
        snprintf(reason, sizeof(reason), "no /dev/infiniband/%s", node);
        vs_doctor_say(v, lv, reason, "needed for %s: %s", what, missing);
    } else if (faccessat(AT_FDCWD, path, R_OK | W_OK, AT_EACCESS) < 0) {
        describe_mode(path, mode, sizeof(mode));
        snprintf(reason, sizeof(reason), "no read-write access to /dev/infiniband/%s", node);
        vs_doctor_say(
            v, lv, reason,
            "needed for %s; it has %s: add this user to that group, or install rdma-core's "
            "udev rules (they make it 0666)",
            what, mode);
    } else {
        vs_doctor_say(v, OK, NULL, "/dev/infiniband/%s: read-write, for %s", node, what);
    }
}

/* The verbs device node of each device with a port (the chosen one's is a
 * PROBLEM when missing; another device's only a WARN), and rdma_cm's. */
static void report_access(struct vs_doctor_verdict *v, const struct port *ports, int n,
                          const struct port *use)
{
    char node[32], what[128];
    for (int i = 0; i < n; i++) {
        if (i > 0 && strcmp(ports[i].dev, ports[i - 1].dev) == 0)
            continue;
        enum vs_doctor_level lv = !use || strcmp(use->dev, ports[i].dev) == 0 ? PROBLEM : WARN;
        snprintf(what, sizeof(what), "%.*s's verbs", NAME_LEN - 1, ports[i].dev);
        if (ports[i].uverbs < 0) {
            char reason[160];
            snprintf(reason, sizeof(reason), "no verbs device node for %.*s", NAME_LEN - 1,
                     ports[i].dev);
            vs_doctor_say(v, lv, reason,
                          "/sys/class/infiniband_verbs does not list it: `modprobe ib_uverbs`");
            continue;
        }
        snprintf(node, sizeof(node), "uverbs%d", ports[i].uverbs);
        check_node(v, lv, node, what, "`modprobe ib_uverbs`");
    }
    check_node(v, PROBLEM, "rdma_cm", "rdma_cm, vsocket's connection setup", "`modprobe rdma_ucm`");
}

/* VSOCKET_RDMA_RING as libvsocket reads it (config/config.c): whole bytes
 * in [VS_RDMA_RING_MIN, VS_RDMA_RING_MAX], rounded up to a power of two;
 * anything else (256K too) makes it use the default, and the estimate with
 * it: a WARN says so. */
static unsigned long long ring_size(struct vs_doctor_verdict *v)
{
    const char *s = getenv("VSOCKET_RDMA_RING");
    if (!s)
        return VS_RDMA_RING_DEFAULT;
    char *end;
    errno = 0;
    unsigned long long n = isdigit((unsigned char)s[0]) ? strtoull(s, &end, 10) : 0;
    if (n < VS_RDMA_RING_MIN || n > VS_RDMA_RING_MAX || errno || *end) {
        vs_doctor_say(
            v, WARN, "VSOCKET_RDMA_RING is invalid",
            "'%s': libvsocket takes a whole number of bytes from %lu to %lu (262144, not 256K) "
            "and uses %lu KiB instead; so does this estimate",
            s, VS_RDMA_RING_MIN, VS_RDMA_RING_MAX, VS_RDMA_RING_DEFAULT >> 10);
        return VS_RDMA_RING_DEFAULT;
    }
    unsigned long long pow2 = VS_RDMA_RING_MIN;
    while (pow2 < n)
        pow2 <<= 1;
    return pow2;
}

/* Root normally has CAP_IPC_LOCK, which lifts RLIMIT_MEMLOCK for memory
 * registration (the kernel checks the limit only without it). */
bool vs_doctor_has_ipc_lock(void)
{
    char buf[4096];
    unsigned long long eff;
    if (vs_read_small_file("/proc/self/status", buf, sizeof(buf)) < 0)
        return false;
    const char *line = strstr(buf, "\nCapEff:");
    return line && sscanf(line, "\nCapEff: %llx", &eff) == 1 && (eff >> CAP_IPC_LOCK_BIT & 1);
}

static void report_memlock(struct vs_doctor_verdict *v)
{
    static const char *fix = "raise it where the programs start: `ulimit -l unlimited` (as "
                             "root), memlock in /etc/security/limits.conf, or "
                             "LimitMEMLOCK=infinity (systemd)";
    unsigned long long ring = ring_size(v), per_conn = 2 * ring + CONN_EXTRA;
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0) {
        vs_doctor_say(v, WARN, "locked memory", "cannot read RLIMIT_MEMLOCK: %s", strerror(errno));
        return;
    }
    if (rl.rlim_cur == RLIM_INFINITY) {
        vs_doctor_say(v, OK, NULL, "locked memory (RLIMIT_MEMLOCK): unlimited");
        return;
    }
    unsigned long long conns = rl.rlim_cur / per_conn;
    char what[256], reason[96];
    snprintf(what, sizeof(what),
             "RLIMIT_MEMLOCK %llu KiB holds %llu connection%s per process (each registers "
             "~%llu KiB: 2 x %llu KiB rings (VSOCKET_RDMA_RING) + %llu KiB queues)",
             (unsigned long long)rl.rlim_cur >> 10, conns, conns == 1 ? "" : "s", per_conn >> 10,
             ring >> 10, CONN_EXTRA >> 10);
    if (conns >= CONNS_WANTED) {
        vs_doctor_say(v, OK, NULL, "locked memory: %s", what);
        return;
    }
    snprintf(reason, sizeof(reason), "locked memory limit too small for %s",
             conns ? "many connections" : "one connection");
    if (vs_doctor_has_ipc_lock())
        vs_doctor_say(v, WARN, reason,
                      "%s; this process has CAP_IPC_LOCK, which lifts the limit, but programs run "
                      "without it are held to it: %s",
                      what, fix);
    else
        vs_doctor_say(v, conns ? WARN : PROBLEM, reason, "%s: %s", what, fix);
}

/* A connection on RDMA holds one descriptor besides the program's socket
 * (a hold on the socket for close), against the same RLIMIT_NOFILE as the
 * program's own; its completion channel is its thread's (a few per
 * process). */
static void report_nofile(struct vs_doctor_verdict *v)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    unsigned long long conns = rl.rlim_cur / 2;
    char what[256];
    snprintf(what, sizeof(what),
             "RLIMIT_NOFILE %llu holds ~%llu connections on RDMA per process (each takes 2 "
             "descriptors: the socket and a hold on it; completion channels are per thread)",
             (unsigned long long)rl.rlim_cur, conns);
    if (conns >= CONNS_WANTED)
        vs_doctor_say(v, OK, NULL, "open files: %s", what);
    else
        vs_doctor_say(v, WARN, "open files limit too small for many connections",
                      "%s: raise it where the programs start: `ulimit -n`, nofile in "
                      "/etc/security/limits.conf, or LimitNOFILE= (systemd)",
                      what);
}

/* Verbs providers (one per driver: librxe, libmlx5, ...) live in a
 * libibverbs/ directory next to libibverbs.so.1; without them it finds no
 * device at all. */
static int count_providers(void *verbs, char *dir, size_t len)
{
    char origin[PATH_MAX];
    struct dirent **names;
    if (dlinfo(verbs, RTLD_DI_ORIGIN, origin) < 0)
        return -1;
    snprintf(dir, len, "%s/libibverbs", origin);
    int n = list_dir(dir, &names);
    int count = 0;
    for (int i = 0; i < n; i++)
        count += strstr(names[i]->d_name, "-rdmav") != NULL;
    if (n >= 0)
        free_list(names, n);
    return count;
}

static void report_libraries(struct vs_doctor_verdict *v)
{
    void *verbs = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!verbs)
        vs_doctor_say(v, PROBLEM, "libibverbs.so.1 does not load",
                      "%s: install rdma-core's libibverbs (Debian, Ubuntu: libibverbs1)",
                      dlerror());
    else
        vs_doctor_say(v, OK, NULL, "libibverbs.so.1 loads");
    void *cm = dlopen("librdmacm.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!cm)
        vs_doctor_say(v, PROBLEM, "librdmacm.so.1 does not load",
                      "%s: install rdma-core's librdmacm (Debian, Ubuntu: librdmacm1)", dlerror());
    else
        vs_doctor_say(v, OK, NULL, "librdmacm.so.1 loads");
    if (verbs) {
        char dir[PATH_MAX + 16];
        int n = count_providers(verbs, dir, sizeof(dir));
        if (n > 0)
            vs_doctor_say(v, OK, NULL, "%d verbs providers in %s", n, dir);
        else if (n == 0)
            vs_doctor_say(v, PROBLEM, "no verbs provider",
                          "%s holds none, so libibverbs sees no device: install ibverbs-providers "
                          "(Debian, Ubuntu) or rdma-core",
                          dir);
        dlclose(verbs);
    }
    if (cm)
        dlclose(cm);
}

static void report_result(const struct vs_doctor_verdict *v, const struct port *use)
{
    if (v->problems == 0 && use) {
        printf("rdma: usable (device %s port %u %s, ", use->dev, use->num, use->state);
        if (use->gid_index >= 0)
            printf("GID index %d %s)", use->gid_index, use->gid_ip);
        else
            printf("%s)", use->link_layer);
        if (v->warnings)
            printf(", %d warning%s above", v->warnings, v->warnings == 1 ? "" : "s");
        putchar('\n');
        return;
    }
    printf("rdma: not usable: %s", v->reason[0] ? v->reason : "no usable port");
    if (v->problems > 1)
        printf(" (and %d more problem%s above)", v->problems - 1, v->problems == 2 ? "" : "s");
    putchar('\n');
}

int vs_doctor_rdma(void)
{
    struct vs_doctor_verdict v = {0};
    struct port ports[MAX_PORTS];
    printf("RDMA (the rdma transport, for this user):\n");
    int n = scan_ports(ports, MAX_PORTS);
    const struct port *use = report_ports(&v, ports, n);
    report_access(&v, ports, n, use);
    report_memlock(&v);
    report_nofile(&v);
    report_libraries(&v);
    report_result(&v, use);
    struct vs_doctor_ud_port ud = {0};
    if (v.problems == 0 && use)
        ud = (struct vs_doctor_ud_port){use->dev, use->num, use->gid_index, use->gid_ip};
    vs_doctor_ud(ud.dev ? &ud : NULL);
    return v.problems;
}
