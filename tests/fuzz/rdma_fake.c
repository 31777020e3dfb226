/* rdma_fake.c - see rdma_fake.h. */
#include "rdma_fake.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>

#include "config/config.h"
#include "config/log.h"
#include "config/stats.h"
#include "fuzz_input.h"
#include "readiness/epoll.h"
#include "transport/rdma/dev.h"
#include "transport/upgrade.h"

struct fake fake;

/* One device, context, protection domain, queue pair and CQ: a run has one
 * connection. Memory regions: one per registration, from a small pool. */
static struct ibv_device dev;
static struct ibv_context ctx;
static struct ibv_pd pd;
static struct ibv_qp qp;
static struct ibv_cq cq;
/* A connection's ids: its own, and callers' (a connector's requests). */
#define FAKE_IDS 16
static struct rdma_cm_id ids[FAKE_IDS];
static unsigned n_ids;
static struct ibv_mr mrs[8];
static bool mr_used[8];
static unsigned keys;

static int post_send(struct ibv_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    (void)q;
    for (; wr; wr = wr->next) {
        /* The code counts what it posted (sq_room): a real queue pair
         * refuses a work request past its depth. */
        FZ_CHECK(fake.sq_count < fake.max_wr, "a send posted on a full queue (%u)", fake.max_wr);
        FZ_CHECK(wr->num_sge == 1 && wr->sg_list, "a send of %d pieces", wr->num_sge);
        struct fake_wr w = {
            .opcode = wr->opcode,
            .signaled = wr->send_flags & IBV_SEND_SIGNALED,
            .wr = (uint32_t)wr->wr_id,
            .local = wr->sg_list->addr,
            .len = wr->sg_list->length,
            .lkey = wr->sg_list->lkey,
            .remote = wr->wr.rdma.remote_addr,
            .rkey = wr->wr.rdma.rkey,
            .imm = wr->imm_data,
        };
        if (w.len >= 8 && (w.opcode == IBV_WR_RDMA_WRITE || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM))
            memcpy(&w.value, (void *)(uintptr_t)w.local, 8);
        if (fake.on_post)
            fake.on_post(&w);
        fake.sq[(fake.sq_first + fake.sq_count++) % FAKE_QUEUE] = w;
    }
    *bad = NULL;
    return 0;
}

static int post_recv(struct ibv_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    (void)q;
    for (; wr; wr = wr->next) {
        FZ_CHECK(fake.rq_count < fake.max_wr, "a receive posted on a full queue (%u)", fake.max_wr);
        fake.rq[(fake.rq_first + fake.rq_count++) % FAKE_QUEUE] = (uint32_t)wr->wr_id;
    }
    *bad = NULL;
    return 0;
}

void fake_reset(void)
{
    memset(&fake, 0, sizeof(fake));
    memset(mr_used, 0, sizeof(mr_used));
    keys = 0;
    n_ids = 0;
    snprintf(dev.name, sizeof(dev.name), "fake0");
    ctx.device = &dev;
    ctx.ops.post_send = post_send;
    ctx.ops.post_recv = post_recv;
    pd.context = &ctx;
    qp.context = &ctx;
    qp.pd = &pd;
}

struct rdma_cm_id *fake_id(const struct sockaddr_storage *local,
                           const struct sockaddr_storage *peer)
{
    FZ_CHECK(n_ids < FAKE_IDS, "more than %d ids", FAKE_IDS);
    struct rdma_cm_id *i = &ids[n_ids++];
    memset(i, 0, sizeof(*i));
    i->verbs = &ctx;
    i->ps = RDMA_PS_TCP;
    memcpy(&i->route.addr.src_storage, local, sizeof(*local));
    memcpy(&i->route.addr.dst_storage, peer, sizeof(*peer));
    return i;
}

bool fake_take_recv(uint32_t *slot)
{
    if (!fake.rq_count)
        return false;
    *slot = fake.rq[fake.rq_first++ % FAKE_QUEUE];
    fake.rq_count--;
    return true;
}

bool fake_take_send(struct fake_wr *out)
{
    if (!fake.sq_count)
        return false;
    *out = fake.sq[fake.sq_first++ % FAKE_QUEUE];
    fake.sq_count--;
    return true;
}

void fake_complete(const struct vs_rdma_wc *wc)
{
    if (fake.cq_count == FAKE_QUEUE)
        return; /* the harness never queues that many */
    fake.cq[(fake.cq_first + fake.cq_count++) % FAKE_QUEUE] = *wc;
}

unsigned fake_regions(void)
{
    unsigned n = 0;
    for (unsigned i = 0; i < 8; i++)
        n += mr_used[i];
    return n;
}

/* ------------------------------------------------------- verbs.c's areas */

/* A connection maps at most four areas (messages, ring, credit word, send
 * copy): room for twice that, mapped and kept. */
#define FAKE_MAPS 8
static struct {
    void *addr;
    size_t len;
    bool used;
} maps[FAKE_MAPS];

/* An area unmapped by an earlier input is kept and handed out again,
 * zeroed as a fresh mapping is: the mmap, madvise and munmap system calls
 * and the page faults of every input were a quarter of fuzz_rdma_msg's
 * time. Larger areas (a send copy as large as the peer's ring, up to
 * 256 MiB, touched only as we send) are mapped and unmapped as they come:
 * zeroing them would cost more than the calls. Which slot an area takes,
 * and whether one of its size was kept, depend on the inputs before: these
 * functions are not coverage, which must depend on the input alone
 * (fuzzing.md, "The gate"). */
FZ_NO_COVERAGE void *fz_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    FZ_CHECK(!addr && prot == (PROT_READ | PROT_WRITE) && flags == (MAP_PRIVATE | MAP_ANONYMOUS) &&
                 fd == -1 && off == 0 && len > 0,
             "an mmap verbs.c does not make");
    unsigned i, slot = FAKE_MAPS;
    for (i = 0; i < FAKE_MAPS; i++) {
        if (maps[i].used)
            continue;
        if (maps[i].addr && maps[i].len == len) {
            memset(maps[i].addr, 0, len);
            maps[i].used = true;
            return maps[i].addr;
        }
        if (slot == FAKE_MAPS || !maps[i].addr)
            slot = i; /* an empty slot, else one kept of another size */
    }
    FZ_CHECK(slot < FAKE_MAPS, "more than %d areas mapped", FAKE_MAPS);
    if (maps[slot].addr)
        munmap(maps[slot].addr, maps[slot].len);
    void *p = mmap(NULL, len, prot, flags, -1, 0);
    maps[slot].addr = p == MAP_FAILED ? NULL : p;
    maps[slot].len = len;
    maps[slot].used = p != MAP_FAILED;
    return p;
}

FZ_NO_COVERAGE static unsigned map_of(void *addr, size_t len)
{
    unsigned i = 0;
    while (i < FAKE_MAPS && !(maps[i].used && maps[i].addr == addr && maps[i].len == len))
        i++;
    FZ_CHECK(i < FAKE_MAPS, "an area of %zu bytes at %p not mapped", len, addr);
    return i;
}

FZ_NO_COVERAGE int fz_munmap(void *addr, size_t len)
{
    unsigned i = map_of(addr, len);
    maps[i].used = false;
    if (len > FAKE_KEEP_MAX) {
        munmap(addr, len);
        maps[i].addr = NULL;
    }
    return 0;
}

/* MADV_DONTFORK: nothing forks here. */
FZ_NO_COVERAGE int fz_madvise(void *addr, size_t len, int advice)
{
    map_of(addr, len);
    FZ_CHECK(advice == MADV_DONTFORK, "madvise %d", advice);
    return 0;
}

unsigned fake_mappings(void)
{
    unsigned n = 0;
    for (unsigned i = 0; i < FAKE_MAPS; i++)
        n += maps[i].used;
    return n;
}

/* ------------------------------------------------------------ libibverbs */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    FZ_CHECK(context == &ctx, "a protection domain on another device");
    return &pd;
}

int ibv_dealloc_pd(struct ibv_pd *p)
{
    FZ_CHECK(p == &pd, "dealloc of a foreign protection domain");
    return 0;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *p, void *addr, size_t length, uint64_t iova,
                                unsigned int access)
{
    (void)iova;
    FZ_CHECK(p == &pd, "a registration in a foreign protection domain");
    for (unsigned i = 0; i < 8; i++) {
        if (mr_used[i])
            continue;
        mr_used[i] = true;
        keys++;
        mrs[i] = (struct ibv_mr){.context = &ctx,
                                 .pd = p,
                                 .addr = addr,
                                 .length = length,
                                 .lkey = 0x1000 + keys,
                                 .rkey = access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
                                             ? 0x2000 + keys
                                             : 0};
        return &mrs[i];
    }
    errno = ENOMEM;
    return NULL;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *p, void *addr, size_t length, int access)
{
    return ibv_reg_mr_iova2(p, addr, length, (uintptr_t)addr, (unsigned)access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
    long i = mr - mrs;
    FZ_CHECK(i >= 0 && i < 8 && mr_used[i], "dereg of an unknown region");
    mr_used[i] = false;
    return 0;
}

const char *ibv_get_device_name(struct ibv_device *d)
{
    return d->name;
}

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    return status == IBV_WC_SUCCESS ? "success" : "error";
}

/* ------------------------------------------------------------- librdmacm */

int rdma_create_qp(struct rdma_cm_id *i, struct ibv_pd *p, struct ibv_qp_init_attr *attr)
{
    FZ_CHECK(p == &pd && attr->qp_type == IBV_QPT_RC, "a queue pair not RC or not ours");
    if (fake.stale || (fake.no_inline && attr->cap.max_inline_data)) {
        errno = EINVAL;
        return -1;
    }
    /* A new queue pair: its queues are empty. */
    fake.sq_count = fake.rq_count = 0;
    fake.max_wr = attr->cap.max_send_wr;
    FZ_CHECK(fake.max_wr <= FAKE_QUEUE && attr->cap.max_recv_wr == fake.max_wr,
             "queues of %u and %u work requests", attr->cap.max_send_wr, attr->cap.max_recv_wr);
    i->qp = &qp;
    return 0;
}

void rdma_destroy_qp(struct rdma_cm_id *i)
{
    i->qp = NULL;
}

int rdma_accept(struct rdma_cm_id *i, struct rdma_conn_param *param)
{
    (void)i;
    fake.accepted = true;
    fake.pdata_len = param->private_data_len;
    memcpy(fake.pdata, param->private_data, param->private_data_len);
    return 0;
}

int rdma_connect(struct rdma_cm_id *i, struct rdma_conn_param *param)
{
    (void)i;
    fake.connected = true;
    fake.pdata_len = param->private_data_len;
    memcpy(fake.pdata, param->private_data, param->private_data_len);
    return 0;
}

int rdma_reject(struct rdma_cm_id *i, const void *pdata, uint8_t len)
{
    (void)i;
    struct vs_rdma_rep rep;
    FZ_CHECK(len == sizeof(rep), "a rejection of %u bytes", len);
    memcpy(&rep, pdata, sizeof(rep));
    fake.rejected = true;
    fake.reject_code = rep.code;
    return 0;
}

int rdma_disconnect(struct rdma_cm_id *i)
{
    (void)i;
    fake.disconnected = true;
    return 0;
}

int rdma_destroy_id(struct rdma_cm_id *i)
{
    (void)i;
    return 0;
}

int rdma_set_option(struct rdma_cm_id *i, int level, int optname, void *optval, size_t optlen)
{
    (void)i, (void)level, (void)optname, (void)optval, (void)optlen;
    return 0;
}

/* Not on the harnesses' paths: set-up starts are not driven. */
#define UNEXPECTED(name) FZ_FAIL("unexpected call of %s", name)

int rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **i, void *context,
                   enum rdma_port_space ps)
{
    (void)ch, (void)i, (void)context, (void)ps;
    UNEXPECTED("rdma_create_id");
}

int rdma_bind_addr(struct rdma_cm_id *i, struct sockaddr *addr)
{
    (void)i, (void)addr;
    UNEXPECTED("rdma_bind_addr");
}

int rdma_listen(struct rdma_cm_id *i, int backlog)
{
    (void)i, (void)backlog;
    UNEXPECTED("rdma_listen");
}

int rdma_resolve_addr(struct rdma_cm_id *i, struct sockaddr *src, struct sockaddr *dst, int ms)
{
    (void)i, (void)src, (void)dst, (void)ms;
    UNEXPECTED("rdma_resolve_addr");
}

int rdma_resolve_route(struct rdma_cm_id *i, int ms)
{
    (void)i, (void)ms;
    return 0; /* ROUTE_RESOLVED comes when the harness says */
}

/* ------------------------------------- the rest of the library (not linked) */

struct vs_config vs_config;
/* Every message is formatted (its arguments evaluated, so fuzzed too), and
 * printed only when tracing. */
enum vs_log_level vs_log_level = VS_LOG_TRACE;

void vs_log_write(enum vs_log_level level, const char *fmt, ...)
{
    (void)level;
    if (!fz_tracing())
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("  log: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void vs_epoll_kick(void *rec)
{
    (void)rec;
}

void vs_stats_set_reason(struct vs_stats_record *r, const char *reason)
{
    (void)r, (void)reason;
}

/* conn.c: the connection stays on TCP for good. */
void vs_rdma_conn_fail(struct vs_rdma_conn *c, const char *reason)
{
    c->fail_reason = reason;
    atomic_store(&c->hs, VS_RDMA_FAILED);
}

/* cq.c: the connection's CQ is the fake one; its inbox is fake.cq. */
int vs_rdma_cq_attach(struct vs_rdma_conn *c, struct ibv_context *context)
{
    FZ_CHECK(context == &ctx, "a CQ on another device");
    c->cq = &cq;
    return 0;
}

/* The queue pair is gone: its completions still in the CQ go too. */
void vs_rdma_cq_home(struct vs_rdma_conn *c)
{
    (void)c;
}

void vs_rdma_cq_detach(struct vs_rdma_conn *c)
{
    c->cq = NULL;
    fake.cq_count = 0;
}

uint64_t vs_rdma_cq_wr_id(const struct vs_rdma_conn *c, uint32_t low)
{
    (void)c;
    return low;
}

int vs_rdma_cq_take(struct vs_rdma_conn *c, struct vs_rdma_wc *out, int max)
{
    (void)c;
    int n = 0;
    while (n < max && fake.cq_count) {
        out[n++] = fake.cq[fake.cq_first++ % FAKE_QUEUE];
        fake.cq_count--;
    }
    return n;
}

void vs_rdma_cq_notify(struct vs_rdma_conn *c)
{
    (void)c;
}

int vs_rdma_cq_fd(const struct vs_rdma_conn *c)
{
    (void)c;
    return -1;
}

unsigned vs_rdma_cq_events(int fd)
{
    (void)fd;
    return 0;
}

unsigned vs_rdma_cq_drain(struct vs_rdma_conn *c)
{
    (void)c;
    return 0;
}

/* dev.c: events are handed to vs_rdma_on_cm_event by the harness. */
void vs_rdma_dev_events(void)
{
}

/* A new call of the accepter's (after a retry) finds no device: it fails. */
struct rdma_event_channel *vs_rdma_dev_channel(const char **why)
{
    *why = "fake: no device";
    return NULL;
}

/* forked.c: no fork here. */
int vs_rdma_forked_alone(struct vs_rdma_conn *c)
{
    (void)c;
    return 1;
}

/* peer_cache.c */
void vs_rdma_peer_cache_remember(bool accepter, const struct sockaddr_storage *peer)
{
    (void)accepter, (void)peer;
}

void vs_rdma_peer_cache_forget(bool accepter, const struct sockaddr_storage *peer)
{
    (void)accepter, (void)peer;
}

/* upgrade.c: the set-up's clock is not driven (its deadlines never pass). */
bool vs_upgrade_lives(struct vs_upgrade *u, struct vs_stream *st)
{
    (void)u, (void)st;
    return true;
}

void vs_upgrade_start(struct vs_upgrade *u, long limit_ns)
{
    (void)u, (void)limit_ns;
}

void vs_upgrade_messages(struct vs_upgrade *u)
{
    (void)u;
}

bool vs_upgrade_peer_silent(struct vs_upgrade *u, struct vs_stream *st, int fd)
{
    (void)u, (void)st, (void)fd;
    return false;
}

/* io.c and leave.c: the send side and leaving, not driven (zcopy.c's
 * send and its reader's direct pull call them). */
int vs_rdma_answer_cut(struct vs_rdma_conn *c, int fd, uint64_t zpos, const void *zbuf, size_t zlen)
{
    (void)c, (void)fd, (void)zpos, (void)zbuf, (void)zlen;
    UNEXPECTED("vs_rdma_answer_cut");
}

void vs_rdma_ask_credit(struct vs_rdma_conn *c)
{
    (void)c;
    UNEXPECTED("vs_rdma_ask_credit");
}

void vs_rdma_credit_read(struct vs_rdma_conn *c)
{
    (void)c;
    UNEXPECTED("vs_rdma_credit_read");
}

int vs_rdma_spill(struct vs_rdma_conn *c, int fd, uint64_t zpos, const void *zbuf, size_t zlen)
{
    (void)c, (void)fd, (void)zpos, (void)zbuf, (void)zlen;
    UNEXPECTED("vs_rdma_spill");
}

void vs_rdma_stall(struct vs_rdma_conn *c, bool full)
{
    (void)c, (void)full;
    UNEXPECTED("vs_rdma_stall");
}

bool vs_rdma_stalled(struct vs_rdma_conn *c)
{
    (void)c;
    UNEXPECTED("vs_rdma_stalled");
}

bool vs_rdma_offer_stalled(struct vs_rdma_conn *c)
{
    (void)c;
    UNEXPECTED("vs_rdma_offer_stalled");
}

int vs_rdma_wait(struct vs_rdma_conn *c, int fd, short tcp_events, struct vs_blocking *b)
{
    (void)c, (void)fd, (void)tcp_events, (void)b;
    UNEXPECTED("vs_rdma_wait");
}

bool vs_rdma_wait_placed(struct vs_rdma_conn *c, long limit_ns)
{
    (void)c, (void)limit_ns;
    UNEXPECTED("vs_rdma_wait_placed");
}

int vs_rdma_post_msg_waiting(struct vs_rdma_conn *c, const struct vs_rdma_msg *m, long limit_ns)
{
    (void)c, (void)m, (void)limit_ns;
    UNEXPECTED("vs_rdma_post_msg_waiting");
}
