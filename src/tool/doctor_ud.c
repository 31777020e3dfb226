/* doctor_ud.c - `vsocket doctor --rdma`'s UD checks: what one process's UD
 * endpoint for UDP over RDMA (docs/design/udp.md §9) gets on the RDMA
 * section's port. Active MTU (the largest UD message), max_qp_wr, max_cqe,
 * the max_inline_data a UD QP really obtains, an rdma_cm RDMA_PS_UDP id
 * bound and listening, locked memory for the endpoint's receive slots, and
 * a loopback self-test: two UD QPs of this process, datagrams checked byte
 * by byte.
 *
 * Unlike the rest of the section these need libibverbs and librdmacm
 * themselves. The tool must not link them (it explains hosts where they are
 * missing), so they are dlopen()ed, and all of it runs in a child process
 * the parent kills after CHILD_LIMIT_S: a provider that crashes or hangs
 * costs a PROBLEM line, not the tool. The verdict line is
 * "ud: usable (...)" or "ud: not usable: REASON"; it never changes the
 * exit code (UDP over UD is not built yet). */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "tool/doctor_rdma.h"

/* The design's defaults (docs/design/udp.md §5, §11): the endpoint posts
 * VSOCKET_UDP_RECV_DEPTH receive slots of MTU + 40 bytes, the GRH first,
 * and every UD message starts with a 32-byte vsocket header. */
#define UD_RECV_DEPTH 1024
#define GRH_BYTES 40
#define UD_HEADER_BYTES 32
#define UD_QKEY 0x11111111u
/* Bounds for hangs only: on the Soft-RoCE guest (~100x slower than a host)
 * the whole child takes about a second. VSOCKET_DOCTOR_UD_LIMIT_S (whole
 * seconds, for the tests of a hang) replaces CHILD_LIMIT_S. */
#define CHILD_LIMIT_S 60
#define RECV_WAIT_S 10

/* The libibverbs and librdmacm functions used, resolved by dlsym. Posting
 * and polling are static inline in verbs.h (they go through the context's
 * ops), so they need no symbol. */
struct verbs {
    struct ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int (*close_device)(struct ibv_context *context);
    int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *context, uint8_t port,
                      struct _compat_ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
    int (*destroy_ah)(struct ibv_ah *ah);
    const char *(*wc_status_str)(enum ibv_wc_status status);
    struct rdma_event_channel *(*create_event_channel)(void);
    void (*destroy_event_channel)(struct rdma_event_channel *channel);
    int (*create_id)(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
                     enum rdma_port_space ps);
    int (*destroy_id)(struct rdma_cm_id *id);
    int (*bind_addr)(struct rdma_cm_id *id, struct sockaddr *addr);
    int (*listen)(struct rdma_cm_id *id, int backlog);
    uint16_t (*get_src_port)(struct rdma_cm_id *id);
};

#define SYM(lib, name, field)                                                                      \
    {                                                                                              \
        lib, name, offsetof(struct verbs, field)                                                   \
    }
static const struct {
    int lib; /* 0 libibverbs, 1 librdmacm */
    const char *name;
    size_t offset;
} symbols[] = {
    SYM(0, "ibv_get_device_list", get_device_list),
    SYM(0, "ibv_free_device_list", free_device_list),
    SYM(0, "ibv_get_device_name", get_device_name),
    SYM(0, "ibv_open_device", open_device),
    SYM(0, "ibv_close_device", close_device),
    SYM(0, "ibv_query_device", query_device),
    SYM(0, "ibv_query_port", query_port),
    SYM(0, "ibv_query_gid", query_gid),
    SYM(0, "ibv_alloc_pd", alloc_pd),
    SYM(0, "ibv_dealloc_pd", dealloc_pd),
    SYM(0, "ibv_reg_mr", reg_mr),
    SYM(0, "ibv_dereg_mr", dereg_mr),
    SYM(0, "ibv_create_cq", create_cq),
    SYM(0, "ibv_destroy_cq", destroy_cq),
    SYM(0, "ibv_create_qp", create_qp),
    SYM(0, "ibv_modify_qp", modify_qp),
    SYM(0, "ibv_destroy_qp", destroy_qp),
    SYM(0, "ibv_create_ah", create_ah),
    SYM(0, "ibv_destroy_ah", destroy_ah),
    SYM(0, "ibv_wc_status_str", wc_status_str),
    SYM(1, "rdma_create_event_channel", create_event_channel),
    SYM(1, "rdma_destroy_event_channel", destroy_event_channel),
    SYM(1, "rdma_create_id", create_id),
    SYM(1, "rdma_destroy_id", destroy_id),
    SYM(1, "rdma_bind_addr", bind_addr),
    SYM(1, "rdma_listen", listen),
    SYM(1, "rdma_get_src_port", get_src_port),
};

/* What the checks found, for the later checks and the verdict line. */
struct facts {
    struct ibv_context *ctx;
    struct ibv_port_attr port;
    struct ibv_device_attr dev;
    unsigned mtu;      /* active MTU in bytes: the largest UD message */
    int inline_max;    /* the largest max_inline_data a UD QP obtained, or -1 */
    union ibv_gid gid; /* the port's GID at the section's index */
    const struct vs_doctor_ud_port *at;
};

static int load(struct vs_doctor_verdict *v, struct verbs *vb)
{
    static const char *const names[] = {"libibverbs.so.1", "librdmacm.so.1"};
    void *lib[2];
    for (int i = 0; i < 2; i++) {
        lib[i] = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib[i]) {
            vs_doctor_say(v, PROBLEM, "a library does not load", "%s", dlerror());
            return -1;
        }
    }
    for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
        void *fn = dlsym(lib[symbols[i].lib], symbols[i].name);
        if (!fn) {
            vs_doctor_say(v, PROBLEM, "a library lacks a function",
                          "%s has no %s: rdma-core is too old or broken", names[symbols[i].lib],
                          symbols[i].name);
            return -1;
        }
        /* POSIX's way to turn dlsym's answer into a function pointer. */
        memcpy((char *)vb + symbols[i].offset, &fn, sizeof(fn));
    }
    return 0;
}

/* As verbs.h's ibv_query_port: the provider's own query_port when it has
 * one (the whole struct), else the library's (the older, shorter one). */
static int query_port(const struct verbs *vb, struct ibv_context *ctx, uint8_t num,
                      struct ibv_port_attr *attr)
{
    struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
    memset(attr, 0, sizeof(*attr));
    if (vctx)
        return vctx->query_port(ctx, num, attr, sizeof(*attr));
    return vb->query_port(ctx, num, (struct _compat_ibv_port_attr *)attr);
}

/* Opens the section's device and queries it and the port. */
static int open_port(struct vs_doctor_verdict *v, const struct verbs *vb, struct facts *f)
{
    int n = 0;
    struct ibv_device **list = vb->get_device_list(&n);
    if (!list) {
        vs_doctor_say(v, PROBLEM, "libibverbs lists no device", "ibv_get_device_list: %s",
                      strerror(errno));
        return -1;
    }
    for (int i = 0; i < n && !f->ctx; i++)
        if (strcmp(vb->get_device_name(list[i]), f->at->dev) == 0)
            f->ctx = vb->open_device(list[i]);
    vb->free_device_list(list);
    if (!f->ctx) {
        vs_doctor_say(v, PROBLEM, "libibverbs cannot open the device",
                      "%s is not among the %d device%s it lists, or does not open: is its "
                      "verbs provider installed (ibverbs-providers)?",
                      f->at->dev, n, n == 1 ? "" : "s");
        return -1;
    }
    if (vb->query_device(f->ctx, &f->dev) != 0 ||
        query_port(vb, f->ctx, (uint8_t)f->at->num, &f->port) != 0) {
        vs_doctor_say(v, PROBLEM, "cannot query the device", "%s port %u: %s", f->at->dev,
                      f->at->num, strerror(errno));
        return -1;
    }
    f->mtu = 128u << f->port.active_mtu; /* IBV_MTU_256 is 1 */
    if (f->at->gid_index >= 0 &&
        vb->query_gid(f->ctx, (uint8_t)f->at->num, f->at->gid_index, &f->gid) != 0) {
        vs_doctor_say(v, PROBLEM, "cannot read the port's GID", "index %d: %s", f->at->gid_index,
                      strerror(errno));
        return -1;
    }
    return 0;
}

static void report_mtu(struct vs_doctor_verdict *v, const struct facts *f)
{
    unsigned max = 128u << f->port.max_mtu;
    vs_doctor_say(
        v, OK, NULL,
        "MTU %u: a UD message carries up to %u bytes, %u of datagram after "
        "vsocket's %d-byte header; a receive slot is %u bytes (the %d-byte GRH "
        "first)%s",
        f->mtu, f->mtu, f->mtu - UD_HEADER_BYTES, UD_HEADER_BYTES, f->mtu + GRH_BYTES, GRH_BYTES,
        max > f->mtu ? "; the port allows more (RoCE: a larger interface MTU raises it)" : "");
}

static void report_queues(struct vs_doctor_verdict *v, const struct facts *f)
{
    int qp_wr = f->dev.max_qp_wr, cqe = f->dev.max_cqe;
    if (qp_wr >= UD_RECV_DEPTH && cqe >= UD_RECV_DEPTH)
        vs_doctor_say(v, OK, NULL,
                      "queues: max_qp_wr %d, max_cqe %d (the endpoint posts %d receives)", qp_wr,
                      cqe, UD_RECV_DEPTH);
    else
        vs_doctor_say(v, WARN, "queues smaller than the endpoint's depth",
                      "max_qp_wr %d, max_cqe %d, below the %d receives the endpoint posts: it "
                      "posts fewer and loses datagrams sooner under bursts",
                      qp_wr, cqe, UD_RECV_DEPTH);
}

/* A UD QP on CQ with room for 2 sends and 2 receives and INLINE bytes of
 * inline data; the provider writes what it granted back into *GOT. */
static struct ibv_qp *create_ud_qp(const struct verbs *vb, struct ibv_pd *pd, struct ibv_cq *cq,
                                   unsigned inline_data, struct ibv_qp_cap *got)
{
    struct ibv_qp_init_attr init = {
        .send_cq = cq,
        .recv_cq = cq,
        .qp_type = IBV_QPT_UD,
        .cap = {.max_send_wr = 2,
                .max_recv_wr = 2,
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = inline_data},
    };
    struct ibv_qp *qp = vb->create_qp(pd, &init);
    if (qp && got)
        *got = init.cap;
    return qp;
}

/* The largest max_inline_data a UD QP is created with, up to the MTU (no
 * UD message is larger): providers refuse more than they support (rxe) or
 * round up (mlx5), so search for the largest accepted request and keep
 * what the provider granted for it. -1 when no UD QP can be created. */
static int probe_inline(const struct verbs *vb, struct ibv_pd *pd, struct ibv_cq *cq, unsigned mtu)
{
    struct ibv_qp_cap cap;
    struct ibv_qp *qp = create_ud_qp(vb, pd, cq, 0, &cap);
    if (!qp)
        return -1;
    vb->destroy_qp(qp);
    int granted = (int)cap.max_inline_data;
    unsigned lo = 0, hi = mtu; /* lo is accepted; search (lo, hi] */
    while (lo < hi) {
        unsigned mid = lo + (hi - lo + 1) / 2;
        qp = create_ud_qp(vb, pd, cq, mid, &cap);
        if (qp) {
            vb->destroy_qp(qp);
            lo = mid;
            granted = (int)cap.max_inline_data;
        } else {
            hi = mid - 1;
        }
    }
    return granted;
}

static void report_inline(struct vs_doctor_verdict *v, struct facts *f, const struct verbs *vb,
                          struct ibv_pd *pd, struct ibv_cq *cq)
{
    f->inline_max = probe_inline(vb, pd, cq, f->mtu);
    if (f->inline_max < 0)
        vs_doctor_say(v, PROBLEM, "the device creates no UD queue pair",
                      "ibv_create_qp(IBV_QPT_UD): %s; iWARP devices have no UD at all",
                      strerror(errno));
    else if (f->inline_max == 0)
        vs_doctor_say(v, WARN, "no inline data",
                      "a UD QP takes max_inline_data 0: every datagram is copied into a "
                      "registered send slot first");
    else
        vs_doctor_say(v, OK, NULL,
                      "inline: max_inline_data %d (the largest a UD QP was created with, "
                      "searched up to the MTU)",
                      f->inline_max);
}

/* Every UD endpoint registers its receive slots; RLIMIT_MEMLOCK holds them
 * beside the connections' rings (the RDMA lines above). */
static void report_ud_memlock(struct vs_doctor_verdict *v, const struct facts *f)
{
    unsigned long long need = (unsigned long long)UD_RECV_DEPTH * (f->mtu + GRH_BYTES);
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0) {
        vs_doctor_say(v, WARN, "locked memory", "cannot read RLIMIT_MEMLOCK: %s", strerror(errno));
        return;
    }
    char what[160];
    snprintf(what, sizeof(what), "the UD endpoint registers %llu KiB (%d receive slots of %u B)",
             need >> 10, UD_RECV_DEPTH, f->mtu + GRH_BYTES);
    if (rl.rlim_cur == RLIM_INFINITY)
        vs_doctor_say(v, OK, NULL, "locked memory: %s; RLIMIT_MEMLOCK unlimited", what);
    else if (rl.rlim_cur >= need)
        vs_doctor_say(v, OK, NULL, "locked memory: %s; RLIMIT_MEMLOCK %llu KiB holds it", what,
                      (unsigned long long)rl.rlim_cur >> 10);
    else
        vs_doctor_say(v, vs_doctor_has_ipc_lock() ? WARN : PROBLEM,
                      "locked memory limit too small for the endpoint",
                      "%s; RLIMIT_MEMLOCK is %llu KiB%s: raise it as for the connections above",
                      what, (unsigned long long)rl.rlim_cur >> 10,
                      vs_doctor_has_ipc_lock()
                          ? " (this process has CAP_IPC_LOCK, programs run without it do not)"
                          : "");
}

/* vsocket finds UD peers with rdma_cm's SIDR, which needs an RDMA_PS_UDP
 * id bound to the address and listening. */
static void check_cm(struct vs_doctor_verdict *v, const struct verbs *vb, const struct facts *f)
{
    if (!f->at->ip[0]) {
        vs_doctor_say(v, OK, NULL,
                      "rdma_cm: not checked (the port's IP address is not in its GID table)");
        return;
    }
    struct sockaddr_in sin = {.sin_family = AF_INET};
    inet_pton(AF_INET, f->at->ip, &sin.sin_addr);
    struct rdma_event_channel *ch = vb->create_event_channel();
    struct rdma_cm_id *id = NULL;
    const char *step = "rdma_create_event_channel";
    if (ch) {
        step = "rdma_create_id(RDMA_PS_UDP)";
        if (vb->create_id(ch, &id, NULL, RDMA_PS_UDP) == 0) {
            step = "rdma_bind_addr";
            if (vb->bind_addr(id, (struct sockaddr *)&sin) == 0) {
                step = "rdma_listen";
                if (vb->listen(id, 8) == 0)
                    step = NULL;
            }
        }
    }
    if (step) {
        vs_doctor_say(v, PROBLEM, "rdma_cm cannot listen for UD peers", "%s on %s: %s", step,
                      f->at->ip, strerror(errno));
    } else {
        const char *on = id->verbs ? vb->get_device_name(id->verbs->device) : "no device";
        vs_doctor_say(v, strcmp(on, f->at->dev) == 0 ? OK : WARN,
                      strcmp(on, f->at->dev) == 0 ? NULL : "rdma_cm chose another device",
                      "rdma_cm: an RDMA_PS_UDP id binds and listens on %s port %u (device %s)",
                      f->at->ip, ntohs(vb->get_src_port(id)), on);
    }
    if (id)
        vb->destroy_id(id);
    if (ch)
        vb->destroy_event_channel(ch);
}

/* ---- the loopback self-test: QP a sends to QP b, both of this process */

struct loop {
    struct ibv_cq *cq_a, *cq_b;
    struct ibv_qp *a, *b;
    struct ibv_ah *ah;
    struct ibv_mr *mr;
    unsigned char *buf;    /* 2 receive slots, then 2 messages to send */
    unsigned slot;         /* MTU + GRH */
    unsigned char *msg[2]; /* the messages, after the slots */
    unsigned len[2];       /* of each message; 0 when not sent */
};

static int to_rts(const struct verbs *vb, struct ibv_qp *qp, unsigned port)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = (uint8_t)port, .qkey = UD_QKEY};
    if (vb->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
        return -1;
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
    if (vb->modify_qp(qp, &a, IBV_QP_STATE))
        return -1;
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 1};
    return vb->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

/* The address of this very port: its GID on RoCE, its LID on InfiniBand. */
static struct ibv_ah *self_ah(const struct verbs *vb, struct ibv_pd *pd, const struct facts *f)
{
    struct ibv_ah_attr ah = {.port_num = (uint8_t)f->at->num, .dlid = f->port.lid};
    if (f->at->gid_index >= 0) {
        ah.is_global = 1;
        ah.grh.dgid = f->gid;
        ah.grh.sgid_index = (uint8_t)f->at->gid_index;
        ah.grh.hop_limit = 1;
    }
    return vb->create_ah(pd, &ah);
}

/* Bytes nobody would send by accident: a stale or misplaced datagram does
 * not match. */
static void fill(unsigned char *p, unsigned len, uint32_t seed)
{
    for (unsigned i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (unsigned char)(seed >> 16);
    }
}

static const char *loop_setup(const struct verbs *vb, struct ibv_pd *pd, struct facts *f,
                              struct loop *l)
{
    l->slot = f->mtu + GRH_BYTES;
    size_t size = 2 * (size_t)l->slot + 2 * (size_t)f->mtu;
    if (posix_memalign((void **)&l->buf, 4096, size))
        return "no memory for the buffers";
    memset(l->buf, 0, size);
    l->msg[0] = l->buf + 2 * (size_t)l->slot;
    l->msg[1] = l->msg[0] + f->mtu;
    if (!(l->mr = vb->reg_mr(pd, l->buf, size, IBV_ACCESS_LOCAL_WRITE)))
        return "ibv_reg_mr";
    if (!(l->cq_a = vb->create_cq(f->ctx, 4, NULL, NULL, 0)) ||
        !(l->cq_b = vb->create_cq(f->ctx, 4, NULL, NULL, 0)))
        return "ibv_create_cq";
    unsigned inl = f->inline_max > 0 ? (unsigned)f->inline_max : 0;
    if (!(l->a = create_ud_qp(vb, pd, l->cq_a, inl, NULL)) ||
        !(l->b = create_ud_qp(vb, pd, l->cq_b, 0, NULL)))
        return "ibv_create_qp(IBV_QPT_UD)";
    if (to_rts(vb, l->a, f->at->num) || to_rts(vb, l->b, f->at->num))
        return "ibv_modify_qp to RTS";
    if (!(l->ah = self_ah(vb, pd, f)))
        return "ibv_create_ah for the port's own address";
    return NULL;
}

/* Posts both receive slots on b, then from a: message 0, a whole MTU from
 * registered memory; message 1, the largest inline send (if any). */
static const char *loop_send(struct facts *f, struct loop *l)
{
    for (unsigned i = 0; i < 2; i++) {
        struct ibv_sge sge = {(uintptr_t)(l->buf + i * l->slot), l->slot, l->mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
        if (ibv_post_recv(l->b, &wr, &bad))
            return "ibv_post_recv";
    }
    l->len[0] = f->mtu;
    l->len[1] = f->inline_max > 0 ? (unsigned)f->inline_max : 0;
    uint32_t seed = (uint32_t)getpid() ^ (uint32_t)time(NULL);
    for (unsigned i = 0; i < 2 && l->len[i]; i++) {
        fill(l->msg[i], l->len[i], seed + i);
        struct ibv_sge sge = {(uintptr_t)l->msg[i], l->len[i], l->mr->lkey};
        struct ibv_send_wr wr = {.wr_id = i,
                                 .sg_list = &sge,
                                 .num_sge = 1,
                                 .opcode = IBV_WR_SEND,
                                 .send_flags = IBV_SEND_SIGNALED | (i ? IBV_SEND_INLINE : 0)},
                           *bad;
        wr.wr.ud.ah = l->ah;
        wr.wr.ud.remote_qpn = l->b->qp_num;
        wr.wr.ud.remote_qkey = UD_QKEY;
        if (ibv_post_send(l->a, &wr, &bad))
            return i ? "ibv_post_send (inline)" : "ibv_post_send";
    }
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits for WANT completions on CQ (RECV_WAIT_S at most, only against
 * hangs), into WC. The number received. */
static int poll_for(struct ibv_cq *cq, struct ibv_wc *wc, int want, double deadline)
{
    int got = 0;
    while (got < want) {
        int n = ibv_poll_cq(cq, want - got, wc + got);
        if (n < 0)
            break;
        got += n;
        if (got < want && now_s() > deadline)
            break;
        if (n == 0)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return got;
}

static const char *because(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Formats why a step failed into WHY, and returns it. */
static const char *because(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return why;
}

/* Both ends' completions, then each datagram: length (GRH + message), the
 * sender's QPN, and every byte. NULL when all arrived intact, else why. */
static const char *loop_check(const struct verbs *vb, struct loop *l, char *why, size_t len)
{
    int sent = 1 + (l->len[1] > 0);
    struct ibv_wc wa[2], wb[2];
    double deadline = now_s() + RECV_WAIT_S;
    int na = poll_for(l->cq_a, wa, sent, deadline), nb = poll_for(l->cq_b, wb, sent, deadline);
    for (int i = 0; i < na; i++)
        if (wa[i].status != IBV_WC_SUCCESS)
            return because(why, len, "send %d completed with %s", (int)wa[i].wr_id,
                           vb->wc_status_str(wa[i].status));
    if (na < sent)
        return because(why, len, "%d of %d sends completed within %d s", na, sent, RECV_WAIT_S);
    if (nb < sent)
        return because(why, len, "%d of %d datagrams received within %d s", nb, sent, RECV_WAIT_S);
    bool matched[2] = {false, false};
    for (int i = 0; i < nb; i++) {
        const unsigned char *got = l->buf + wb[i].wr_id * l->slot + GRH_BYTES;
        if (wb[i].status != IBV_WC_SUCCESS)
            return because(why, len, "a receive completed with %s",
                           vb->wc_status_str(wb[i].status));
        if (wb[i].src_qp != l->a->qp_num)
            return because(why, len, "a datagram came from QPN %u, not %u", wb[i].src_qp,
                           l->a->qp_num);
        /* UD keeps the order on one path, but match by content anyway. */
        for (int m = 0; m < sent; m++)
            if (!matched[m] && wb[i].byte_len == l->len[m] + GRH_BYTES &&
                memcmp(got, l->msg[m], l->len[m]) == 0)
                matched[m] = true;
    }
    for (int m = 0; m < sent; m++)
        if (!matched[m])
            return because(why, len, "the %u-byte datagram%s did not arrive intact", l->len[m],
                           m ? " sent inline" : "");
    return NULL;
}

static void loop_free(const struct verbs *vb, struct loop *l)
{
    if (l->ah)
        vb->destroy_ah(l->ah);
    if (l->a)
        vb->destroy_qp(l->a);
    if (l->b)
        vb->destroy_qp(l->b);
    if (l->cq_a)
        vb->destroy_cq(l->cq_a);
    if (l->cq_b)
        vb->destroy_cq(l->cq_b);
    if (l->mr)
        vb->dereg_mr(l->mr);
    free(l->buf);
}

static void self_test(struct vs_doctor_verdict *v, const struct verbs *vb, struct ibv_pd *pd,
                      struct facts *f)
{
    struct loop l = {0};
    char why[160];
    const char *failed = loop_setup(vb, pd, f, &l);
    if (failed) {
        snprintf(why, sizeof(why), "%s: %s", failed, strerror(errno));
        failed = why;
    } else if ((failed = loop_send(f, &l))) {
        snprintf(why, sizeof(why), "%s: %s", failed, strerror(errno));
        failed = why;
    } else {
        failed = loop_check(vb, &l, why, sizeof(why));
    }
    char via[64];
    if (f->at->gid_index >= 0)
        snprintf(via, sizeof(via), "GID index %d", f->at->gid_index);
    else
        snprintf(via, sizeof(via), "LID %u", f->port.lid);
    if (failed)
        vs_doctor_say(v, PROBLEM, "self-test failed", "%s (two UD QPs of this process, %s)", failed,
                      via);
    else if (l.len[1])
        vs_doctor_say(v, OK, NULL,
                      "self-test: %u bytes and %u inline from one UD QP to another over %s, "
                      "received intact",
                      l.len[0], l.len[1], via);
    else
        vs_doctor_say(v, OK, NULL,
                      "self-test: %u bytes from one UD QP to another over %s, received intact",
                      l.len[0], via);
    loop_free(vb, &l);
}

/* ---- the child: every check, then the verdict line */

static void ud_checks(const struct vs_doctor_ud_port *at)
{
    struct vs_doctor_verdict v = {0};
    struct verbs vb;
    struct facts f = {.at = at, .inline_max = -1};
    if (load(&v, &vb) == 0 && open_port(&v, &vb, &f) == 0) {
        report_mtu(&v, &f);
        report_queues(&v, &f);
        struct ibv_pd *pd = vb.alloc_pd(f.ctx);
        struct ibv_cq *cq = pd ? vb.create_cq(f.ctx, 4, NULL, NULL, 0) : NULL;
        if (!cq)
            vs_doctor_say(&v, PROBLEM, "no protection domain or completion queue", "%s",
                          strerror(errno));
        else
            report_inline(&v, &f, &vb, pd, cq);
        report_ud_memlock(&v, &f);
        check_cm(&v, &vb, &f);
        if (f.inline_max >= 0)
            self_test(&v, &vb, pd, &f);
        if (cq)
            vb.destroy_cq(cq);
        if (pd)
            vb.dealloc_pd(pd);
    }
    if (f.ctx)
        vb.close_device(f.ctx);
    if (v.problems)
        printf("ud: not usable: %s", v.reason);
    else
        printf("ud: usable (%s port %u: MTU %u, max_inline_data %d, max_qp_wr %d, max_cqe %d)",
               at->dev, at->num, f.mtu, f.inline_max, f.dev.max_qp_wr, f.dev.max_cqe);
    if (v.problems > 1)
        printf(" (and %d more problem%s above)", v.problems - 1, v.problems == 2 ? "" : "s");
    if (!v.problems && v.warnings)
        printf(", %d warning%s above", v.warnings, v.warnings == 1 ? "" : "s");
    putchar('\n');
}

/* Waits for the child to close its end of DONE (it never writes: EOF is
 * its exit), LIMIT_S at most, and kills it if it still runs then.
 * Its wait status, or -1 when it had to be killed. */
static int reap(pid_t pid, int done, int limit_s)
{
    struct pollfd p = {.fd = done, .events = POLLIN};
    double deadline = now_s() + limit_s;
    char c;
    int status, hung = 1;
    for (int left; hung && (left = (int)((deadline - now_s()) * 1000)) > 0;) {
        int n = poll(&p, 1, left);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && read(done, &c, 1) <= 0)
            hung = 0;
    }
    if (hung)
        kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return hung ? -1 : status;
}

static int child_limit(void)
{
    const char *s = getenv("VSOCKET_DOCTOR_UD_LIMIT_S");
    char *end;
    long n = s ? strtol(s, &end, 10) : 0;
    return s && *s && !*end && n >= 1 && n <= 3600 ? (int)n : CHILD_LIMIT_S;
}

void vs_doctor_ud(const struct vs_doctor_ud_port *port)
{
    printf("UD (datagrams for UDP over RDMA, one endpoint per process):\n");
    if (!port) {
        printf("ud: not checked: RDMA is not usable (the problems above)\n");
        return;
    }
    fflush(stdout);
    struct vs_doctor_verdict v = {0};
    int done[2];
    pid_t pid = -1;
    if (pipe(done) == 0) {
        pid = fork();
        if (pid == 0) {
            close(done[0]);
            ud_checks(port);
            fflush(stdout);
            _exit(0);
        }
        int err = errno;
        close(done[1]);
        if (pid < 0)
            close(done[0]);
        errno = err;
    }
    if (pid < 0) {
        vs_doctor_say(&v, PROBLEM, "UD checks not run", "pipe or fork: %s", strerror(errno));
        printf("ud: not usable: %s\n", v.reason);
        return;
    }
    int limit = child_limit();
    int status = reap(pid, done[0], limit);
    close(done[0]);
    if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return; /* it printed its verdict */
    if (status == -1)
        vs_doctor_say(&v, PROBLEM, "UD checks hung",
                      "killed after %d s, inside libibverbs, librdmacm or the device's driver",
                      limit);
    else if (WIFSIGNALED(status))
        vs_doctor_say(&v, PROBLEM, "UD checks crashed",
                      "signal %d (%s), inside libibverbs, librdmacm or the device's provider",
                      WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        vs_doctor_say(&v, PROBLEM, "UD checks failed", "exit status %d", WEXITSTATUS(status));
    printf("ud: not usable: %s\n", v.reason);
}
