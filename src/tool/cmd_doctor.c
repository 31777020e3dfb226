/* cmd_doctor.c - `vsocket doctor`: what this host offers each transport,
 * and what is missing. */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "transport/transport.h"
#include "tool/tool.h"

static int missing;

static void usage(FILE *out)
{
    fputs("usage: vsocket doctor\n"
          "\n"
          "Shows what this host offers vsocket: the transports in this build, RDMA devices\n"
          "with their ports and GIDs, shared-memory and locked-memory limits, kernel\n"
          "features, and a list of what is missing.\n"
          "Exit codes: 0 nothing missing, 4 something missing (listed), 2 usage error.\n",
          out);
}

static void report_missing(const char *what)
{
    printf("  MISSING: %s\n", what);
    missing++;
}

static const char *port_state(enum ibv_port_state s)
{
    switch (s) {
    case IBV_PORT_ACTIVE:
        return "active";
    case IBV_PORT_DOWN:
        return "down";
    case IBV_PORT_INIT:
        return "init";
    case IBV_PORT_ARMED:
        return "armed";
    default:
        return "other";
    }
}

static void show_gids(struct ibv_context *ctx, uint8_t port, int gid_len)
{
    for (int i = 0; i < gid_len && i < 16; i++) {
        union ibv_gid gid;
        if (ibv_query_gid(ctx, port, i, &gid) < 0)
            break;
        static const uint8_t zero[16];
        if (memcmp(gid.raw, zero, 16) == 0)
            continue;
        char text[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
        printf("      gid[%d] %s\n", i, text);
    }
}

static void show_device(struct ibv_device *dev)
{
    printf("  %s (%s)\n", ibv_get_device_name(dev),
           dev->transport_type == IBV_TRANSPORT_IWARP ? "iWARP" : "InfiniBand/RoCE");
    struct ibv_context *ctx = ibv_open_device(dev);
    if (!ctx) {
        printf("    cannot open: %s\n", strerror(errno));
        return;
    }
    struct ibv_device_attr attr;
    if (ibv_query_device(ctx, &attr) == 0) {
        printf("    max_qp %d, max_mr_size %llu, max_qp_wr %d\n", attr.max_qp,
               (unsigned long long)attr.max_mr_size, attr.max_qp_wr);
        for (uint8_t port = 1; port <= attr.phys_port_cnt; port++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(ctx, port, &pa) != 0)
                continue;
            printf("    port %u: %s, link layer %s, active mtu %d\n", port, port_state(pa.state),
                   pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand",
                   128 << pa.active_mtu);
            show_gids(ctx, port, pa.gid_tbl_len);
        }
    }
    ibv_close_device(ctx);
}

static void check_rdma(void)
{
    printf("RDMA devices:\n");
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n; i++)
        show_device(list[i]);
    if (list)
        ibv_free_device_list(list);
    if (n == 0)
        report_missing("no RDMA device: the rdma transport needs an RDMA NIC or Soft-RoCE "
                       "(`rdma link add rxe0 type rxe netdev IFACE`); tools/rdma-guest runs "
                       "one in a VM");
}

static void check_memory(void)
{
    printf("Shared memory and limits:\n");
    struct statvfs vfs;
    if (statvfs("/dev/shm", &vfs) == 0)
        printf("  /dev/shm: %.1f MiB free of %.1f MiB\n",
               (double)vfs.f_bavail * vfs.f_frsize / 1048576.0,
               (double)vfs.f_blocks * vfs.f_frsize / 1048576.0);
    else
        report_missing("/dev/shm is not mounted: statistics need VSOCKET_STATS_DIR elsewhere");
    int fd = memfd_create("vsocket-doctor", MFD_CLOEXEC);
    if (fd >= 0) {
        printf("  memfd_create: available\n");
        close(fd);
    } else {
        report_missing("memfd_create is not available: the shm transport needs it");
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY)
            printf("  locked memory (RLIMIT_MEMLOCK): unlimited\n");
        else
            printf("  locked memory (RLIMIT_MEMLOCK): %llu KiB (RDMA registers its buffers "
                   "against it; raise it with `ulimit -l` for many connections)\n",
                   (unsigned long long)rl.rlim_cur / 1024);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        printf("  open files (RLIMIT_NOFILE): %llu\n", (unsigned long long)rl.rlim_cur);
}

static void check_kernel(void)
{
    struct utsname u;
    printf("Kernel:\n");
    if (uname(&u) == 0)
        printf("  %s %s %s\n", u.sysname, u.release, u.machine);
    bool uverbs = access("/dev/infiniband/uverbs0", F_OK) == 0;
    bool ucm = access("/dev/infiniband/rdma_cm", F_OK) == 0;
    printf("  /dev/infiniband/uverbs0: %s\n", uverbs ? "present" : "absent");
    printf("  /dev/infiniband/rdma_cm: %s\n", ucm ? "present" : "absent");
}

static void check_build(void)
{
    printf("This build (vsocket %s):\n", VSOCKET_VERSION);
    for (int t = 0; t < VS_TRANSPORT_COUNT; t++)
        printf("  transport %-6s %s\n", vs_transport_name((enum vs_transport)t),
               vs_transport_built((enum vs_transport)t) ? "built" : "not built yet");
}

int cmd_doctor(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return VS_EXIT_OK;
        }
        fprintf(stderr, "vsocket doctor: unknown argument '%s'\n", argv[i]);
        return VS_EXIT_USAGE;
    }
    check_build();
    check_rdma();
    check_memory();
    check_kernel();
    if (missing) {
        printf("%d thing%s missing (see MISSING above).\n", missing, missing == 1 ? "" : "s");
        return VS_EXIT_MISSING;
    }
    printf("Nothing missing.\n");
    return VS_EXIT_OK;
}
