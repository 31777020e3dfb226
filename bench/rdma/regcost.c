/* bench/rdma/regcost.c - what registering memory costs on an RDMA device,
 * for the elastic ring's window and growth policy
 * (docs/design/rdma-elastic-ring.md, §2.1 and §7 step 0).
 *
 *   regcost [-d DEVICE] [-n ITERATIONS] [-T]
 *
 * DEVICE: the first device when not named. For each size (16 KiB … 16 MiB),
 * ITERATIONS (100) cycles in each of four ways (three a ring region may come
 * and go by, and a yardstick):
 *
 *   fresh     mmap + MADV_DONTFORK + ibv_reg_mr, then ibv_dereg_mr + munmap:
 *             what vsocket's area_new/area_free do today (the kernel faults
 *             and zeroes every page while it pins it);
 *   freelist  one span kept mapped, given back with MADV_DONTNEED after each
 *             dereg: a free list of spans (saves the mmap/munmap and the VMA,
 *             not the page faults);
 *   warm      one span kept mapped and its pages kept: reg/dereg only (a
 *             region kept registered-ready, pages resident);
 *   touch     no registration: mmap, memset (the "reg" column: faulting and
 *             zeroing the pages), munmap (in "cycle" only). A yardstick of
 *             the machine's speed at what "fresh" registration mostly does,
 *             so figures from the emulated guest can be scaled to a host.
 *
 * Then memory windows (type 2), skipped with a line if the device refuses
 * ibv_alloc_mw: ibv_alloc_mw, a bind
 * (IBV_WR_BIND_MW posted on a connected loopback RC QP, waited for) and a
 * local invalidate (IBV_WR_LOCAL_INV, waited for), each timed; one RDMA WRITE
 * through the bound window from the other QP proves the bind was real.
 *
 * Then the queues: a CQ of 2 × D entries and an RC QP of depth D (send and
 * receive, 1 SGE) for a few D and inline sizes: the KiB each adds to the
 * process's uverbs mappings (rxe's queues) and the time to create them. And
 * the kernel memory of a registration besides its pages: kmalloc growth per
 * region while 200 × 16 KiB, 20 × 1 MiB, 10 × 4 MiB are registered (root).
 *
 * -T: the yardsticks only (a system call, mode "touch"), no device: on a host,
 * to scale the guest's figures.
 *
 * Output: "key=value" lines; times in microseconds, median and p99 of the
 * ITERATIONS (p99 of 100 is the second largest). Access of every region:
 * LOCAL_WRITE | REMOTE_WRITE, as a receive ring's. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { MODE_FRESH, MODE_FREELIST, MODE_WARM, MODE_TOUCH, NMODES };
static const char *mode_name[NMODES] = {"fresh", "freelist", "warm", "touch"};
static const size_t sizes[] = {16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define RING_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts V in place. The median, and the value 1 % of the samples exceed. */
static void stats(double *v, int n, double *med, double *p99)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    *med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    int i = n - 1 - n / 100;
    *p99 = v[i < 0 ? 0 : i];
}

static void *map_span(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    madvise(p, size, MADV_DONTFORK);
    return p;
}

/* ITERS cycles of MODE for SIZE; fills the reg, dereg and whole-cycle times.
 * Returns 0, or -1 with a line on stderr. */
static int cycles(struct ibv_pd *pd, int mode, size_t size, int iters, double *reg, double *dereg,
                  double *cycle)
{
    void *span = NULL;
    if (mode == MODE_FREELIST || mode == MODE_WARM) {
        if (!(span = map_span(size)))
            return perror("mmap"), -1;
        if (mode == MODE_WARM)
            memset(span, 1, size);
    }
    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        void *p = mode == MODE_FRESH || mode == MODE_TOUCH ? map_span(size) : span;
        if (!p)
            return perror("mmap"), -1;
        double t1 = now_us();
        struct ibv_mr *mr = NULL;
        if (mode == MODE_TOUCH)
            memset(p, 1, size);
        else if (!(mr = ibv_reg_mr(pd, p, size, RING_ACCESS)))
            return fprintf(stderr, "ibv_reg_mr %zu: %s\n", size, strerror(errno)), -1;
        double t2 = now_us();
        if (mr)
            ibv_dereg_mr(mr);
        double t3 = now_us();
        if (mode == MODE_FRESH || mode == MODE_TOUCH)
            munmap(p, size);
        else if (mode == MODE_FREELIST)
            madvise(p, size, MADV_DONTNEED);
        double t4 = now_us();
        reg[i] = t2 - t1;
        dereg[i] = t3 - t2;
        cycle[i] = t4 - t0;
    }
    if (span)
        munmap(span, size);
    return 0;
}

/* PD NULL: the touch yardstick only (no device needed: run it on a host to
 * scale the guest's figures). */
static int reg_costs(struct ibv_pd *pd, int iters)
{
    double *reg = calloc((size_t)iters, sizeof(double));
    double *dereg = calloc((size_t)iters, sizeof(double));
    double *cycle = calloc((size_t)iters, sizeof(double));
    if (!reg || !dereg || !cycle)
        return -1;
    printf("# mode size_kib reg_med reg_p99 dereg_med dereg_p99 cycle_med cycle_p99 (us)\n");
    int rc = 0;
    for (size_t s = 0; s < NSIZES && rc == 0; s++)
        for (int m = pd ? 0 : MODE_TOUCH; m < NMODES && rc == 0; m++) {
            rc = cycles(pd, m, sizes[s], iters, reg, dereg, cycle);
            if (rc)
                break;
            double rm, r99, dm, d99, cm, c99;
            stats(reg, iters, &rm, &r99);
            stats(dereg, iters, &dm, &d99);
            stats(cycle, iters, &cm, &c99);
            printf("reg mode=%s size_kib=%zu reg_med=%.1f reg_p99=%.1f dereg_med=%.1f "
                   "dereg_p99=%.1f cycle_med=%.1f cycle_p99=%.1f\n",
                   mode_name[m], sizes[s] >> 10, rm, r99, dm, d99, cm, c99);
            fflush(stdout);
        }
    free(reg);
    free(dereg);
    free(cycle);
    return rc;
}

/* ------------------------------------------------------------ windows */

struct loop {
    struct ibv_cq *cq;
    struct ibv_qp *a, *b; /* a binds windows; b writes through them */
};

/* A GID index of port 1 that is set (RoCE needs one for the GRH). */
static int pick_gid(struct ibv_context *ctx, union ibv_gid *gid)
{
    struct ibv_port_attr pa;
    if (ibv_query_port(ctx, 1, &pa))
        return -1;
    for (int i = 0; i < pa.gid_tbl_len; i++) {
        if (ibv_query_gid(ctx, 1, i, gid))
            continue;
        static const union ibv_gid zero;
        if (memcmp(gid, &zero, sizeof(zero)))
            return i;
    }
    return -1;
}

static int to_rts(struct ibv_qp *qp, uint32_t remote_qpn, const union ibv_gid *gid, int gid_index)
{
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT,
                             .port_num = 1,
                             .qp_access_flags = RING_ACCESS | IBV_ACCESS_REMOTE_READ};
    if (ibv_modify_qp(qp, &at,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        return -1;
    memset(&at, 0, sizeof(at));
    at.qp_state = IBV_QPS_RTR;
    at.path_mtu = IBV_MTU_1024;
    at.dest_qp_num = remote_qpn;
    at.max_dest_rd_atomic = 1;
    at.min_rnr_timer = 12;
    at.ah_attr.is_global = 1;
    at.ah_attr.grh.dgid = *gid;
    at.ah_attr.grh.sgid_index = (uint8_t)gid_index;
    at.ah_attr.grh.hop_limit = 1;
    at.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &at,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return -1;
    memset(&at, 0, sizeof(at));
    at.qp_state = IBV_QPS_RTS;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &at,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Two RC QPs of PD on one device, connected to each other. */
static int loop_open(struct ibv_context *ctx, struct ibv_pd *pd, struct loop *l)
{
    union ibv_gid gid;
    int gi = pick_gid(ctx, &gid);
    if (gi < 0)
        return fprintf(stderr, "no GID on port 1\n"), -1;
    if (!(l->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0)))
        return perror("ibv_create_cq"), -1;
    struct ibv_qp_init_attr ia = {
        .send_cq = l->cq,
        .recv_cq = l->cq,
        .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC};
    if (!(l->a = ibv_create_qp(pd, &ia)) || !(l->b = ibv_create_qp(pd, &ia)))
        return perror("ibv_create_qp"), -1;
    if (to_rts(l->a, l->b->qp_num, &gid, gi) || to_rts(l->b, l->a->qp_num, &gid, gi))
        return perror("ibv_modify_qp"), -1;
    return 0;
}

/* Posts WR (signalled) on QP and waits for its completion. */
static int post_wait(struct loop *l, struct ibv_qp *qp, struct ibv_send_wr *wr)
{
    struct ibv_send_wr *bad;
    wr->send_flags |= IBV_SEND_SIGNALED;
    int rc = ibv_post_send(qp, wr, &bad);
    if (rc)
        return fprintf(stderr, "ibv_post_send opcode %d: %s\n", wr->opcode, strerror(rc)), -1;
    struct ibv_wc wc;
    int n;
    while ((n = ibv_poll_cq(l->cq, 1, &wc)) == 0)
        ;
    if (n < 0 || wc.status != IBV_WC_SUCCESS)
        return fprintf(stderr, "completion of opcode %d: %s\n", wr->opcode,
                       n < 0 ? "poll failed" : ibv_wc_status_str(wc.status)),
               -1;
    return 0;
}

static int mw_bind(struct loop *l, struct ibv_mw *mw, struct ibv_mr *mr, size_t len, uint32_t *rkey)
{
    struct ibv_send_wr wr = {.opcode = IBV_WR_BIND_MW};
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info.mr = mr;
    wr.bind_mw.bind_info.addr = (uintptr_t)mr->addr;
    wr.bind_mw.bind_info.length = len;
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (post_wait(l, l->a, &wr))
        return -1;
    *rkey = wr.bind_mw.rkey;
    return 0;
}

static int invalidate(struct loop *l, uint32_t rkey)
{
    struct ibv_send_wr wr = {.opcode = IBV_WR_LOCAL_INV};
    wr.invalidate_rkey = rkey;
    return post_wait(l, l->a, &wr);
}

/* One RDMA WRITE from b through the window into a's region: the bind was
 * real (the bytes land). */
static int prove(struct loop *l, struct ibv_pd *pd, struct ibv_mr *dst, uint32_t rkey)
{
    static char src[64] = "written through a type-2 memory window";
    struct ibv_mr *smr = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
    if (!smr)
        return perror("ibv_reg_mr"), -1;
    memset(dst->addr, 0, sizeof(src));
    struct ibv_sge sge = {.addr = (uintptr_t)src, .length = sizeof(src), .lkey = smr->lkey};
    struct ibv_send_wr wr = {.opcode = IBV_WR_RDMA_WRITE, .sg_list = &sge, .num_sge = 1};
    wr.wr.rdma.remote_addr = (uintptr_t)dst->addr;
    wr.wr.rdma.rkey = rkey;
    int rc = post_wait(l, l->b, &wr);
    if (rc == 0 && memcmp(dst->addr, src, sizeof(src)) != 0)
        rc = -1, fprintf(stderr, "the write through the window did not land\n");
    ibv_dereg_mr(smr);
    return rc;
}

static void report(const char *what, double *v, int n)
{
    double m, p;
    stats(v, n, &m, &p);
    printf("mw op=%s med=%.1f p99=%.1f\n", what, m, p);
}

static int mw_costs(struct ibv_context *ctx, struct ibv_pd *pd, int iters)
{
    /* The capability bits are not reliable across kernels (some moved to
     * kernel-only flags): try, and skip on a refusal. */
    struct ibv_device_attr da;
    if (ibv_query_device(ctx, &da) == 0)
        printf("mw device_cap_flags=0x%x type2a=%d type2b=%d\n", da.device_cap_flags,
               !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A),
               !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B));
    struct loop l = {0};
    if (loop_open(ctx, pd, &l))
        return -1;
    size_t len = 64 << 10;
    void *mem = map_span(len);
    struct ibv_mr *mr = mem ? ibv_reg_mr(pd, mem, len, RING_ACCESS | IBV_ACCESS_MW_BIND) : NULL;
    if (!mr)
        return perror("ibv_reg_mr (MW_BIND)"), -1;
    double *alloc = calloc((size_t)iters, sizeof(double));
    double *bnd = calloc((size_t)iters, sizeof(double));
    double *inv = calloc((size_t)iters, sizeof(double));
    double *dealloc = calloc((size_t)iters, sizeof(double));
    if (!alloc || !bnd || !inv || !dealloc)
        return -1;
    int rc = 0;
    for (int i = 0; i < iters && rc == 0; i++) {
        double t0 = now_us();
        struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
        double t1 = now_us();
        if (!mw) {
            printf("mw skipped=ibv_alloc_mw: %s\n", strerror(errno));
            break;
        }
        uint32_t rkey;
        rc = mw_bind(&l, mw, mr, len, &rkey);
        double t2 = now_us();
        if (rc == 0 && i == 0)
            rc = prove(&l, pd, mr, rkey);
        double t3 = now_us();
        if (rc == 0)
            rc = invalidate(&l, rkey);
        double t4 = now_us();
        ibv_dealloc_mw(mw);
        double t5 = now_us();
        alloc[i] = t1 - t0, bnd[i] = t2 - t1, inv[i] = t4 - t3, dealloc[i] = t5 - t4;
        if (rc == 0 && i == iters - 1) {
            printf("mw region_kib=%zu bound_write_landed=yes\n", len >> 10);
            report("alloc", alloc, iters);
            report("bind", bnd, iters);
            report("local_inv", inv, iters);
            report("dealloc", dealloc, iters);
        }
    }
    free(alloc), free(bnd), free(inv), free(dealloc);
    ibv_dereg_mr(mr);
    munmap(mem, len);
    ibv_destroy_qp(l.a);
    ibv_destroy_qp(l.b);
    ibv_destroy_cq(l.cq);
    return rc;
}

/* ------------------------------------------------------------ queues */

/* KiB of this process's mappings of the uverbs device (rxe maps its QP
 * and CQ queues into the process), or -1. */
static long uverbs_kib(void)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    long kib = 0, v;
    unsigned long lo, hi;
    int in = 0;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            in = strstr(line, "uverbs") != NULL;
        else if (in && sscanf(line, "Size: %ld kB", &v) == 1)
            kib += v;
    }
    fclose(f);
    return kib;
}

/* Bytes of the kmalloc slab caches (active objects × object size), or -1
 * (no /proc/slabinfo: not root). Only kmalloc: rxe allocates its page maps
 * there, while the other caches (dentries, inodes) shrink and grow with
 * whatever else the system does. */
static long long slab_bytes(void)
{
    FILE *f = fopen("/proc/slabinfo", "r");
    if (!f)
        return -1;
    char line[512], name[128];
    long long total = 0, active, num, size;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "%127s %lld %lld %lld", name, &active, &num, &size) == 4 &&
            strncmp(name, "kmalloc-", 8) == 0)
            total += active * size;
    fclose(f);
    return total;
}

/* What a QP's and a CQ's queues take, by depth and inline size: the CQ
 * holds both queues' completions, as vsocket's share of a group's CQ. */
static void queue_costs(struct ibv_context *ctx, struct ibv_pd *pd)
{
    static const unsigned depths[] = {16, 31, 63, 64, 255, 256};
    static const unsigned inlines[] = {0, 64, 128};
    printf("# queues: kib = the process's uverbs mappings (4 KiB header each)\n");
    for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++)
        for (size_t j = 0; j < sizeof(inlines) / sizeof(inlines[0]); j++) {
            unsigned d = depths[i];
            long k0 = uverbs_kib();
            double t0 = now_us();
            struct ibv_cq *cq = ibv_create_cq(ctx, (int)(2 * d), NULL, NULL, 0);
            double t1 = now_us();
            long k1 = uverbs_kib();
            struct ibv_qp_init_attr ia = {.send_cq = cq,
                                          .recv_cq = cq,
                                          .cap = {.max_send_wr = d,
                                                  .max_recv_wr = d,
                                                  .max_send_sge = 1,
                                                  .max_recv_sge = 1,
                                                  .max_inline_data = inlines[j]},
                                          .qp_type = IBV_QPT_RC};
            struct ibv_qp *qp = cq ? ibv_create_qp(pd, &ia) : NULL;
            double t2 = now_us();
            long k2 = uverbs_kib();
            if (!qp) {
                printf("queue depth=%u inline=%u failed=%s\n", d, inlines[j], strerror(errno));
            } else {
                printf("queue depth=%u inline=%u cq_entries=%u cq_kib=%ld qp_kib=%ld "
                       "create_cq_us=%.0f create_qp_us=%.0f\n",
                       d, inlines[j], 2 * d, k1 - k0, k2 - k1, t1 - t0, t2 - t1);
                ibv_destroy_qp(qp);
            }
            if (cq)
                ibv_destroy_cq(cq);
        }
}

/* The kernel memory of a registration besides its pages (rxe's page map):
 * slab growth while COUNT regions of SIZE are registered, per region. */
static void mr_state(struct ibv_pd *pd, size_t size, int count)
{
    struct ibv_mr **mr = calloc((size_t)count, sizeof(*mr));
    char *mem = map_span(size * (size_t)count);
    if (!mr || !mem)
        return;
    long long s0 = slab_bytes();
    int n = 0;
    while (n < count && (mr[n] = ibv_reg_mr(pd, mem + (size_t)n * size, size, RING_ACCESS)))
        n++;
    long long s1 = slab_bytes();
    for (int i = 0; i < n; i++)
        ibv_dereg_mr(mr[i]);
    if (s0 < 0 || n == 0)
        printf("mrstate size_kib=%zu skipped=%s\n", size >> 10,
               n ? "no /proc/slabinfo" : "reg failed");
    else
        printf("mrstate size_kib=%zu regions=%d kmalloc_bytes_per_region=%lld\n", size >> 10, n,
               (s1 - s0) / n);
    munmap(mem, size * (size_t)count);
    free(mr);
}

/* A system call's cost here (getppid), the other yardstick: on rxe every
 * verb, including each post, is one. */
static void syscall_cost(void)
{
    double v[1000];
    for (int i = 0; i < 1000; i++) {
        double t0 = now_us();
        getppid();
        v[i] = now_us() - t0;
    }
    double m, p;
    stats(v, 1000, &m, &p);
    printf("syscall getppid_med=%.2f getppid_p99=%.2f\n", m, p);
}

int main(int argc, char **argv)
{
    const char *want = NULL;
    int iters = 100, opt, touch_only = 0;
    while ((opt = getopt(argc, argv, "d:n:T")) != -1) {
        if (opt == 'd')
            want = optarg;
        else if (opt == 'T')
            touch_only = 1;
        else if (opt == 'n' && atoi(optarg) > 0)
            iters = atoi(optarg);
        else
            return fprintf(stderr, "usage: regcost [-d DEVICE] [-n ITERATIONS] [-T]\n"), 2;
    }
    if (touch_only) {
        printf("device=none iterations=%d page=%ld\n", iters, sysconf(_SC_PAGESIZE));
        syscall_cost();
        return reg_costs(NULL, iters) ? 1 : 0;
    }
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_device *dev = NULL;
    for (int i = 0; list && i < n && !dev; i++)
        if (!want || strcmp(ibv_get_device_name(list[i]), want) == 0)
            dev = list[i];
    if (!dev)
        return fprintf(stderr, "regcost: no RDMA device%s%s\n", want ? " " : "", want ? want : ""),
               1;
    struct ibv_context *ctx = ibv_open_device(dev);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd)
        return fprintf(stderr, "regcost: cannot open %s\n", ibv_get_device_name(dev)), 1;
    printf("device=%s iterations=%d page=%ld\n", ibv_get_device_name(dev), iters,
           sysconf(_SC_PAGESIZE));
    syscall_cost();
    int rc = reg_costs(pd, iters);
    if (rc == 0)
        rc = mw_costs(ctx, pd, iters);
    if (rc == 0) {
        queue_costs(ctx, pd);
        mr_state(pd, 16 << 10, 200);
        mr_state(pd, 1 << 20, 20);
        mr_state(pd, 4 << 20, 10);
    }
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return rc ? 1 : 0;
}
