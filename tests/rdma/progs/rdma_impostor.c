/* rdma_impostor - speaks vsocket's RDMA rendezvous (src/transport/rdma/
 * proto.h) from outside vsocket, as the impostors of the design's threat
 * model (docs/design/rdma-transport.md) and as an honest peer that holds the
 * TCP connection. For tests/rdma/cases/impostor-*.sh; see tests/rdma/README.md.
 *
 * PORT may be "@FILE:INDEX": the local port of connection INDEX in a
 * vs_pair --ready-file, waited for (the impostor starts before the
 * connection exists and acts as soon as it does).
 *
 *   rdma_impostor call IP PORT [--attempts N] [--proof random|none]
 *                 [--op write|read ADDR RKEY LEN] [--timeout S]
 *       A caller that does NOT hold the TCP connection: connects to the
 *       connector's rendezvous at IP:PORT with a well-formed vs_rdma_req,
 *       then either sends a forged PROOF (random MAC, a fake ring of its own,
 *       registered and filled with 0xa5) or, with --op, posts one RDMA WRITE
 *       or READ at ADDR/RKEY (a leaked ring of another connection) on the
 *       queue pair the connector accepted. Prints CALL-* lines; exit 0 when
 *       every accepted call was refused (no RING, fake ring untouched) or,
 *       with --op, when every op completed with "remote access error"; 1 when
 *       the connector was fooled or an op did not fail that way; 3 when no
 *       call got through at all (nothing was tested).
 *
 *   rdma_impostor squat IP PORT [--timeout S] [--proof-wait-ms M]
 *       A squatter: listens with rdma_cm on IP:PORT (the connector's TCP
 *       address) before the connector does, accepts the first caller with a
 *       forged vs_rdma_rep, waits for a PROOF (which would carry the
 *       caller's ring), then posts RDMA WRITEs at every key (rkey, and
 *       lkey as a guess) `rdma res show mr` lists for other processes;
 *       --write-first: the WRITEs go at once, while the caller's queue pair
 *       is surely up (the first one then meets it; else it has usually hung
 *       up already and the WRITEs end in "transport retry counter exceeded"). Prints SQUAT-* lines,
 *       keeps the address until --timeout or SIGTERM. Exit 0 when the caller
 *       gave nothing (no PROOF) and no WRITE succeeded; 1 otherwise; 3 when
 *       no caller came.
 *
 *   rdma_impostor honest IP PORT --ops LIST [--start-file F] [--leak-file L] [--timeout S]
 *       A peer that HOLDS the TCP connections: a plain TCP server on IP:PORT
 *       that echoes the client's 64-byte hello on each connection (as
 *       vs_pair does), then, once F exists, does the accepter's part of the
 *       rendezvous correctly (checks the connector's MAC, sends its own) and
 *       receives the connector's RING, for every connection; then, once L
 *       exists, runs the ops. LIST has one entry per connection,
 *       separated by ';', each a comma-separated list of ops run in order on
 *       that connection's queue pair:
 *         write-own-ring   8 bytes into the ring the RING named (expected: success)
 *         read-own-ring    RDMA READ of that ring  (expected: remote access error)
 *         read-own-credit  RDMA READ of its credit word (remote access error)
 *         write-past-ring  WRITE across the ring's end (remote access error)
 *         write-leaked     WRITE at the ADDR RKEY in F (another connection's ring)
 *         read-leaked      READ of it (both: remote access error)
 *       L holds "ADDR RKEY" (hex), e.g. from vsocket's debug log. Prints
 *       HONEST-* lines; exit 0 when every proof checked and every op ended as
 *       expected. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "transport/rdma/proof.h"
#include "transport/rdma/proto.h"

#define FAKE_RING (64u << 10)
#define SLOTS 8
#define ACK_TIMEOUT 16 /* 4.096 us * 2^16 = 268 ms */
/* How long a refused call may take to be hung up on: rdma_cm's DREQ under
 * emulation (TCG) and a busy connector took more than 8 s in CI. */
#define HANGUP_WAIT_S 30
/* rdma_cm's DISCONNECTED may never come (its DREQ lost, seen under TCG):
 * after this long without it, a zero-length WRITE tells whether the
 * connector's queue pair still answers. */
#define PROBE_AFTER_S 5
#define PROBE_WR_ID 3000

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void rnd(void *p, size_t n)
{
    if (getrandom(p, n, 0) != (ssize_t)n) {
        perror("getrandom");
        exit(2);
    }
}

static volatile sig_atomic_t stop;
static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

/* PORT, or "@FILE:INDEX": waits (up to 60 s) for FILE, a vs_pair
 * --ready-file ("INDEX LOCAL PEER" lines), and takes the port of LOCAL on
 * line INDEX. The impostor can then be started before the connection
 * exists, and act as soon as it does. */
static int port_arg(const char *arg)
{
    if (arg[0] != '@')
        return atoi(arg);
    char path[512];
    snprintf(path, sizeof(path), "%s", arg + 1);
    char *colon = strrchr(path, ':');
    int index = colon ? atoi(colon + 1) : 0;
    if (colon)
        *colon = 0;
    double end = now_s() + 60;
    while (now_s() < end && !stop) {
        FILE *f = fopen(path, "r");
        if (f) {
            int i;
            char local[128], peer[128];
            while (fscanf(f, "%d %127s %127s", &i, local, peer) == 3) {
                if (i == index) {
                    fclose(f);
                    char *c = strrchr(local, ':');
                    return c ? atoi(c + 1) : 0;
                }
            }
            fclose(f);
        }
        usleep(10000);
    }
    fprintf(stderr, "no connection %d in %s\n", index, path);
    exit(2);
}

/* ---------------------------------------------------------------- rdma_cm */

struct ev {
    enum rdma_cm_event_type type;
    int status;
    struct rdma_cm_id *id;
    uint8_t pdata[256];
    uint8_t pdata_len;
};

/* The next event within MS, or -1. */
static int next_event(struct rdma_event_channel *ch, int ms, struct ev *out)
{
    double end = now_s() + ms / 1000.0;
    for (;;) {
        struct rdma_cm_event *e;
        if (rdma_get_cm_event(ch, &e) == 0) {
            out->type = e->event;
            out->status = e->status;
            out->id = e->id;
            out->pdata_len = 0;
            if (e->param.conn.private_data && e->param.conn.private_data_len) {
                out->pdata_len = e->param.conn.private_data_len;
                memcpy(out->pdata, e->param.conn.private_data, out->pdata_len);
            }
            rdma_ack_cm_event(e);
            return 0;
        }
        if (errno != EAGAIN || stop)
            return -1;
        int left = (int)((end - now_s()) * 1000);
        if (left <= 0)
            return -1;
        poll(&(struct pollfd){.fd = ch->fd, .events = POLLIN}, 1, left > 20 ? 20 : left);
    }
}

static struct rdma_event_channel *channel(void)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    if (!ch) {
        perror("rdma_create_event_channel");
        exit(2);
    }
    fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
    return ch;
}

static struct rdma_conn_param conn_param(const void *pd, size_t len)
{
    struct rdma_conn_param p = {.private_data = pd,
                                .private_data_len = (uint8_t)len,
                                .responder_resources = 1,
                                .initiator_depth = 1,
                                .retry_count = 3,
                                .rnr_retry_count = 3};
    return p;
}

static void ack_timeout(struct rdma_cm_id *id)
{
    uint8_t t = ACK_TIMEOUT;
    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t));
}

/* ------------------------------------------------------------------ verbs */

struct link {
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *msgs_mr, *ring_mr, *credit_mr, *scratch_mr;
    uint8_t *msgs, *ring, *credit, *scratch;
};

static struct ibv_mr *reg(struct ibv_pd *pd, uint8_t **mem, size_t size, int access, int fill)
{
    *mem = aligned_alloc(4096, size);
    memset(*mem, fill, size);
    struct ibv_mr *mr = ibv_reg_mr(pd, *mem, size, access);
    if (!mr) {
        perror("ibv_reg_mr");
        exit(2);
    }
    return mr;
}

static int post_recv(struct link *l, unsigned slot)
{
    struct ibv_sge sge = {.addr = (uintptr_t)l->msgs + slot * VS_RDMA_MSG_SIZE,
                          .length = VS_RDMA_MSG_SIZE,
                          .lkey = l->msgs_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;
    return ibv_post_recv(l->id->qp, &wr, &bad);
}

/* Protection domain, CQ, queue pair on ID; a fake ring and credit word
 * registered for remote write and filled with 0xa5 (never expected to
 * change); receive buffers posted. */
static void link_setup(struct link *l, struct rdma_cm_id *id)
{
    memset(l, 0, sizeof(*l));
    l->id = id;
    l->pd = ibv_alloc_pd(id->verbs);
    l->cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
    if (!l->pd || !l->cq) {
        perror("pd/cq");
        exit(2);
    }
    l->msgs_mr = reg(l->pd, &l->msgs, 2 * SLOTS * VS_RDMA_MSG_SIZE, IBV_ACCESS_LOCAL_WRITE, 0);
    int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    l->ring_mr = reg(l->pd, &l->ring, FAKE_RING, remote, 0xa5);
    l->credit_mr = reg(l->pd, &l->credit, 4096, remote, 0xa5);
    l->scratch_mr = reg(l->pd, &l->scratch, 4096, IBV_ACCESS_LOCAL_WRITE, 0x5a);
    struct ibv_qp_init_attr attr = {
        .send_cq = l->cq,
        .recv_cq = l->cq,
        .cap = {.max_send_wr = 16, .max_recv_wr = SLOTS, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 1};
    if (rdma_create_qp(id, l->pd, &attr) < 0) {
        perror("rdma_create_qp");
        exit(2);
    }
    for (unsigned i = 0; i < SLOTS; i++)
        post_recv(l, i);
}

static void link_free(struct link *l)
{
    if (l->id && l->id->qp)
        rdma_destroy_qp(l->id);
    struct ibv_mr *mrs[] = {l->msgs_mr, l->ring_mr, l->credit_mr, l->scratch_mr};
    for (unsigned i = 0; i < 4; i++)
        if (mrs[i])
            ibv_dereg_mr(mrs[i]);
    free(l->msgs);
    free(l->ring);
    free(l->credit);
    free(l->scratch);
    if (l->cq)
        ibv_destroy_cq(l->cq);
    if (l->pd)
        ibv_dealloc_pd(l->pd);
    if (l->id)
        rdma_destroy_id(l->id);
    memset(l, 0, sizeof(*l));
}

static bool untouched(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0xa5)
            return false;
    return true;
}

/* One completion within MS: 0 and WC, or -1. */
static int next_wc(struct link *l, int ms, struct ibv_wc *wc)
{
    double end = now_s() + ms / 1000.0;
    while (now_s() < end && !stop) {
        int n = ibv_poll_cq(l->cq, 1, wc);
        if (n > 0)
            return 0;
        if (n < 0)
            return -1;
        usleep(1000);
    }
    return -1;
}

static int send_msg(struct link *l, const struct vs_rdma_msg *m)
{
    uint8_t *buf = l->msgs + SLOTS * VS_RDMA_MSG_SIZE;
    memcpy(buf, m, sizeof(*m));
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = sizeof(*m), .lkey = l->msgs_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 1000, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND},
                       *bad;
    return ibv_post_send(l->id->qp, &wr, &bad);
}

/* Posts one RDMA WRITE or READ of LEN bytes at ADDR/RKEY and waits for its
 * completion: its status, or -1 when none came. Receives that complete
 * meanwhile (messages from the peer) are reported. */
static int rdma_op(struct link *l, bool write, uint64_t addr, uint32_t rkey, uint32_t len,
                   const char *tag)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)l->scratch, .length = len, .lkey = l->scratch_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 2000,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
                             .wr.rdma = {.remote_addr = addr, .rkey = rkey}},
                       *bad;
    int rc = ibv_post_send(l->id->qp, &wr, &bad);
    if (rc) {
        printf("%s post %s failed: %s\n", tag, write ? "write" : "read", strerror(rc));
        return -1;
    }
    struct ibv_wc wc;
    double end = now_s() + 15;
    while (now_s() < end) {
        if (next_wc(l, 1000, &wc) < 0)
            continue;
        if (wc.wr_id == 2000)
            return wc.status;
        printf("%s (other completion: wr_id %llu status %s opcode %d)\n", tag,
               (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode);
    }
    return -1;
}

/* Posts a zero-length RDMA WRITE (no memory touched, no key checked) whose
 * completion says whether the other end's queue pair answers. */
static bool probe(struct link *l)
{
    struct ibv_send_wr wr = {.wr_id = PROBE_WR_ID,
                             .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    return ibv_post_send(l->id->qp, &wr, &bad) == 0;
}

static const char *status_str(int st)
{
    return st < 0 ? "no-completion" : ibv_wc_status_str((enum ibv_wc_status)st);
}

/* Resolves DST from SRC (port 0): the new id, or NULL. */
static struct rdma_cm_id *resolve(struct rdma_event_channel *ch, struct sockaddr_in *src,
                                  struct sockaddr_in *dst)
{
    struct rdma_cm_id *id;
    struct ev e;
    if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) < 0)
        return NULL;
    if (rdma_resolve_addr(id, (void *)src, (void *)dst, 2000) < 0 || next_event(ch, 5000, &e) < 0 ||
        e.type != RDMA_CM_EVENT_ADDR_RESOLVED || rdma_resolve_route(id, 2000) < 0 ||
        next_event(ch, 5000, &e) < 0 || e.type != RDMA_CM_EVENT_ROUTE_RESOLVED) {
        rdma_destroy_id(id);
        return NULL;
    }
    return id;
}

static void mkaddr(struct sockaddr_in *a, const char *ip, int port)
{
    memset(a, 0, sizeof(*a));
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, ip, &a->sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", ip);
        exit(2);
    }
}

/* Connects L (resolved) with REQ; waits for the answer. 1: established
 * (REP filled), 0: rejected or unreachable (try again), -1: timeout. */
static int call_once(struct rdma_event_channel *ch, struct link *l, const struct vs_rdma_req *req,
                     struct vs_rdma_rep *rep, const char *tag)
{
    struct rdma_conn_param p = conn_param(req, sizeof(*req));
    ack_timeout(l->id);
    if (rdma_connect(l->id, &p) < 0)
        return 0;
    struct ev e;
    double end = now_s() + 10;
    while (now_s() < end) {
        if (next_event(ch, 1000, &e) < 0)
            continue;
        if (e.type == RDMA_CM_EVENT_ESTABLISHED) {
            memset(rep, 0, sizeof(*rep));
            memcpy(rep, e.pdata, e.pdata_len < sizeof(*rep) ? e.pdata_len : sizeof(*rep));
            return 1;
        }
        if (e.type == RDMA_CM_EVENT_REJECTED) {
            struct vs_rdma_rep r = {0};
            memcpy(&r, e.pdata, e.pdata_len < sizeof(r) ? e.pdata_len : sizeof(r));
            static unsigned said;
            if (said++ < 3 || r.magic == VS_RDMA_MAGIC)
                printf("%s rejected (status %d, %s code %u)\n", tag, e.status,
                       r.magic == VS_RDMA_MAGIC ? "vsocket" : "no vsocket answer", r.code);
            return 0;
        }
        if (e.type == RDMA_CM_EVENT_UNREACHABLE || e.type == RDMA_CM_EVENT_CONNECT_ERROR)
            return 0;
    }
    return -1;
}

/* ------------------------------------------------------------------- call */

static int cmd_call(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    const char *ip = argv[2];
    int port = port_arg(argv[3]);
    int attempts = 1;
    bool proof = true, have_op = false, op_write = false;
    uint64_t op_addr = 0;
    uint32_t op_rkey = 0, op_len = 64;
    double timeout = 40;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--attempts") && i + 1 < argc)
            attempts = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--proof") && i + 1 < argc)
            proof = strcmp(argv[++i], "none") != 0;
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            timeout = atof(argv[++i]);
        else if (!strcmp(argv[i], "--op") && i + 4 < argc) {
            have_op = true;
            op_write = !strcmp(argv[++i], "write");
            op_addr = strtoull(argv[++i], NULL, 16);
            op_rkey = (uint32_t)strtoul(argv[++i], NULL, 16);
            op_len = (uint32_t)strtoul(argv[++i], NULL, 0);
        } else {
            fprintf(stderr, "call: unknown %s\n", argv[i]);
            return 2;
        }
    }
    struct rdma_event_channel *ch = channel();
    struct sockaddr_in src, dst;
    mkaddr(&src, ip, 0);
    mkaddr(&dst, ip, port);
    int accepted = 0, refused = 0, fooled = 0, ops_ok = 0, ops_bad = 0;
    double end = now_s() + timeout;
    while (accepted < attempts && now_s() < end) {
        struct link l;
        struct rdma_cm_id *id = resolve(ch, &src, &dst);
        if (!id) {
            usleep(50000);
            continue;
        }
        link_setup(&l, id);
        struct vs_rdma_req req = {.magic = VS_RDMA_MAGIC, .version = VS_RDMA_VERSION};
        rnd(&req.nonce, sizeof(req.nonce));
        /* Plausible counts: more than the connector can have, so that the
         * proof covers whatever it has. */
        req.tx = req.rx = 1u << 20;
        struct vs_rdma_rep rep;
        int rc = call_once(ch, &l, &req, &rep, "CALL");
        if (rc != 1) {
            link_free(&l);
            usleep(rc == 0 ? 50000 : 0);
            continue;
        }
        accepted++;
        printf("CALL-ACCEPTED attempt=%d connector answered: magic %#x nonce %#llx tx %llu rx %llu "
               "(its MAC is over the stream we do not have)\n",
               accepted, rep.magic, (unsigned long long)rep.nonce, (unsigned long long)rep.tx,
               (unsigned long long)rep.rx);
        if (have_op) {
            int st = rdma_op(&l, op_write, op_addr, op_rkey, op_len, "CALL-OP");
            printf("CALL-OP attempt=%d %s addr=%#llx rkey=%#x len=%u status=%s (%d)\n", accepted,
                   op_write ? "write" : "read", (unsigned long long)op_addr, op_rkey, op_len,
                   status_str(st), st);
            if (st == IBV_WC_REM_ACCESS_ERR)
                ops_ok++;
            else
                ops_bad++;
            link_free(&l);
            continue;
        }
        if (proof) {
            struct vs_rdma_msg m = {.type = VS_RDMA_MSG_PROOF};
            rnd(m.mac, sizeof(m.mac));
            m.rkey = l.ring_mr->rkey;
            m.a = (uintptr_t)l.ring;
            m.b = FAKE_RING;
            m.credit_addr = (uintptr_t)l.credit;
            m.credit_rkey = l.credit_mr->rkey;
            int prc = send_msg(&l, &m);
            printf("CALL-PROOF attempt=%d forged PROOF sent (random MAC, fake ring %p rkey %#x, "
                   "credit %p rkey %#x): %s\n",
                   accepted, (void *)l.ring, l.ring_mr->rkey, (void *)l.credit, l.credit_mr->rkey,
                   prc ? strerror(prc) : "posted");
        }
        /* What the connector does now: hang up (refused) or answer RING. */
        bool hung_up = false, ring = false, probing = false;
        const char *how = "";
        double until = now_s() + HANGUP_WAIT_S, probe_at = now_s() + PROBE_AFTER_S;
        while (now_s() < until && !hung_up) {
            struct ibv_wc wc;
            if (!probing && now_s() > probe_at)
                probing = probe(&l);
            while (ibv_poll_cq(l.cq, 1, &wc) > 0) {
                if (wc.wr_id == PROBE_WR_ID) {
                    /* Unanswered: the connector's queue pair is gone. */
                    probing = false;
                    probe_at = now_s() + PROBE_AFTER_S;
                    if (wc.status != IBV_WC_SUCCESS) {
                        hung_up = true;
                        how = " (its queue pair is gone: our probe failed)";
                    }
                    continue;
                }
                if (wc.status == IBV_WC_SUCCESS && (wc.opcode & IBV_WC_RECV)) {
                    struct vs_rdma_msg *got =
                        (void *)(l.msgs + (wc.wr_id % SLOTS) * VS_RDMA_MSG_SIZE);
                    printf("CALL-GOT-MSG attempt=%d type %u rkey %#x addr %#llx size %llu\n",
                           accepted, got->type, got->rkey, (unsigned long long)got->a,
                           (unsigned long long)got->b);
                    if (got->type == VS_RDMA_MSG_RING)
                        ring = true;
                }
            }
            struct ev e;
            if (next_event(ch, 50, &e) == 0 && e.id == l.id &&
                (e.type == RDMA_CM_EVENT_DISCONNECTED || e.type == RDMA_CM_EVENT_CONNECT_ERROR))
                hung_up = true, how = "";
        }
        usleep(200000); /* a late write would land by now */
        bool clean = untouched(l.ring, FAKE_RING) && untouched(l.credit, 4096);
        if (hung_up && !ring)
            refused++;
        if (ring || !clean)
            fooled++;
        printf("CALL-RESULT attempt=%d %s%s%s, fake ring and credit word %s\n", accepted,
               hung_up ? "connector hung up (refused)" : "connector did NOT hang up in time", how,
               ring ? ", connector SENT ITS RING" : ", no RING", clean ? "untouched" : "WRITTEN");
        link_free(&l);
    }
    printf(
        "CALL-SUMMARY accepted=%d refused=%d fooled=%d ops_remote_access_error=%d ops_other=%d\n",
        accepted, refused, fooled, ops_ok, ops_bad);
    if (accepted == 0)
        return 3;
    if (have_op)
        return ops_bad ? 1 : 0;
    return fooled || refused != accepted ? 1 : 0;
}

/* ------------------------------------------------------------------ squat */

/* Keys `rdma res show mr` lists for processes other than ours, newest
 * region first (the caller's own, in the protection domain of the queue
 * pair we hold, comes last in the list): its rkey when it has one, and its
 * lkey as a guess at one. */
static int guess_rkeys(uint32_t *out, int max)
{
    FILE *f = popen("rdma res show mr 2>/dev/null", "r");
    if (!f)
        return 0;
    char line[512];
    uint32_t all[64];
    int n = 0;
    while (n + 2 <= 64 && fgets(line, sizeof(line), f)) {
        char *k = strstr(line, "rkey "), *lk = strstr(line, "lkey "), *p = strstr(line, "pid ");
        if (!k || (p && atoi(p + 4) == getpid()))
            continue;
        uint32_t rkey = (uint32_t)strtoul(k + 5, NULL, 16);
        uint32_t lkey = lk ? (uint32_t)strtoul(lk + 5, NULL, 16) : 0;
        if (rkey)
            all[n++] = rkey;
        if (lkey && lkey != rkey)
            all[n++] = lkey;
        printf("SQUAT-GUESS %s", line);
    }
    pclose(f);
    int m = 0;
    for (int i = n - 1; i >= 0 && m < max; i--)
        out[m++] = all[i];
    return m;
}

/* Posts a WRITE at each key (all at once: the first error puts the queue
 * pair in error and flushes the rest) and reports each status. */
static void guessed_writes(struct link *l, const uint32_t *keys, int n, int *ok, int *err)
{
    for (int i = 0; i < n; i++) {
        struct ibv_sge sge = {
            .addr = (uintptr_t)l->scratch, .length = 64, .lkey = l->scratch_mr->lkey};
        struct ibv_send_wr wr = {.wr_id = 3000 + (uint64_t)i,
                                 .sg_list = &sge,
                                 .num_sge = 1,
                                 .opcode = IBV_WR_RDMA_WRITE,
                                 .wr.rdma = {.remote_addr = 0x10000, .rkey = keys[i]}},
                           *bad;
        int rc = ibv_post_send(l->id->qp, &wr, &bad);
        if (rc) {
            printf("SQUAT-OP write key=%#x not posted: %s\n", keys[i], strerror(rc));
            (*err)++;
        }
    }
    int seen = 0;
    double end = now_s() + 15;
    while (seen < n && now_s() < end) {
        struct ibv_wc wc;
        if (next_wc(l, 500, &wc) < 0 || wc.wr_id < 3000)
            continue;
        int i = (int)(wc.wr_id - 3000);
        printf("SQUAT-OP write key=%#x status=%s (%d)\n", keys[i], ibv_wc_status_str(wc.status),
               wc.status);
        wc.status == IBV_WC_SUCCESS ? (*ok)++ : (*err)++;
        seen++;
    }
    if (seen < n) {
        printf("SQUAT-OP %d writes without a completion\n", n - seen);
        *err += n - seen;
    }
}

static int cmd_squat(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    const char *ip = argv[2];
    int port = port_arg(argv[3]);
    double timeout = 40;
    int proof_wait = 3000;
    bool write_first = false;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--write-first"))
            write_first = true;
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            timeout = atof(argv[++i]);
        else if (!strcmp(argv[i], "--proof-wait-ms") && i + 1 < argc)
            proof_wait = atoi(argv[++i]);
    }
    struct rdma_event_channel *ch = channel();
    struct rdma_cm_id *lid;
    struct sockaddr_in a;
    mkaddr(&a, ip, port);
    if (rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) < 0 || rdma_bind_addr(lid, (void *)&a) < 0) {
        printf("SQUAT-BIND-FAILED %s:%d: %s (the connector listens already: too late)\n", ip, port,
               strerror(errno));
        return 4;
    }
    if (rdma_listen(lid, 4) < 0) {
        printf("SQUAT-LISTEN-FAILED: %s\n", strerror(errno));
        return 4;
    }
    printf("SQUAT-LISTENING %s:%d\n", ip, port);
    fflush(stdout);
    int handled = 0, gave_proof = 0, writes_ok = 0, writes_err = 0;
    double end = now_s() + timeout;
    struct link l = {0};
    while (now_s() < end && !stop) {
        struct ev e;
        if (next_event(ch, 200, &e) < 0)
            continue;
        if (e.type != RDMA_CM_EVENT_CONNECT_REQUEST || handled) {
            if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
                rdma_reject(e.id, NULL, 0);
                rdma_destroy_id(e.id);
            }
            continue;
        }
        handled = 1;
        struct vs_rdma_req req = {0};
        memcpy(&req, e.pdata, e.pdata_len < sizeof(req) ? e.pdata_len : sizeof(req));
        printf("SQUAT-REQUEST magic %#x version %u nonce %#llx tx %llu rx %llu (%s)\n", req.magic,
               req.version, (unsigned long long)req.nonce, (unsigned long long)req.tx,
               (unsigned long long)req.rx,
               req.magic == VS_RDMA_MAGIC ? "a vsocket accepter" : "not vsocket");
        uint32_t guesses[16];
        int ng = guess_rkeys(guesses, 16);
        link_setup(&l, e.id);
        struct vs_rdma_rep rep = {.magic = VS_RDMA_MAGIC, .version = VS_RDMA_VERSION};
        rnd(&rep.nonce, sizeof(rep.nonce));
        rep.tx = req.rx; /* whatever it says it has */
        rep.rx = req.tx;
        rnd(rep.mac, sizeof(rep.mac));
        struct rdma_conn_param p = conn_param(&rep, sizeof(rep));
        ack_timeout(e.id);
        if (rdma_accept(e.id, &p) < 0) {
            printf("SQUAT-ACCEPT-FAILED: %s\n", strerror(errno));
            return 1;
        }
        printf("SQUAT-ACCEPTED with a forged answer (random MAC)\n");
        fflush(stdout);
        if (ng == 0)
            guesses[ng++] = 0x1234;
        if (write_first) {
            /* At once, while the caller's queue pair is surely up. */
            struct ev e2;
            while (next_event(ch, 5000, &e2) == 0 && e2.type != RDMA_CM_EVENT_ESTABLISHED)
                ;
            printf("SQUAT-EVENT established: writing before the caller can look at our answer\n");
            guessed_writes(&l, guesses, ng, &writes_ok, &writes_err);
        }
        /* Wait for the caller's PROOF (its ring) or its hang-up. */
        bool hung_up = false;
        double until = now_s() + proof_wait / 1000.0;
        while (now_s() < until && !hung_up && !gave_proof) {
            struct ibv_wc wc;
            while (ibv_poll_cq(l.cq, 1, &wc) > 0) {
                if (wc.status == IBV_WC_SUCCESS && (wc.opcode & IBV_WC_RECV)) {
                    struct vs_rdma_msg *m =
                        (void *)(l.msgs + (wc.wr_id % SLOTS) * VS_RDMA_MSG_SIZE);
                    printf("SQUAT-GOT-PROOF type %u: the caller gave its ring %#llx rkey %#x\n",
                           m->type, (unsigned long long)m->a, m->rkey);
                    gave_proof = 1;
                    if (m->type == VS_RDMA_MSG_PROOF) {
                        int st = rdma_op(&l, true, m->a, m->rkey, 64, "SQUAT-OP");
                        printf("SQUAT-OP write into the given ring: status=%s\n", status_str(st));
                    }
                } else if (wc.status != IBV_WC_SUCCESS && wc.wr_id < SLOTS) {
                    printf("SQUAT-WC receive %s\n", ibv_wc_status_str(wc.status));
                }
            }
            struct ev e2;
            if (next_event(ch, 50, &e2) == 0) {
                printf("SQUAT-EVENT %s\n", rdma_event_str(e2.type));
                if (e2.id == l.id && e2.type == RDMA_CM_EVENT_DISCONNECTED)
                    hung_up = true;
            }
        }
        printf("SQUAT-RESULT the caller %s, %s\n", gave_proof ? "GAVE A PROOF" : "gave no proof",
               hung_up ? "and hung up" : "and did not hang up (yet)");
        if (!write_first)
            guessed_writes(&l, guesses, ng, &writes_ok, &writes_err);
        printf("SQUAT-SUMMARY proof_given=%d writes_succeeded=%d writes_failed=%d\n", gave_proof,
               writes_ok, writes_err);
        fflush(stdout);
    }
    /* Keep the address until told (the connector must find it taken). */
    if (!handled) {
        printf("SQUAT-SUMMARY no caller came\n");
        return 3;
    }
    return gave_proof || writes_ok ? 1 : 0;
}

/* ----------------------------------------------------------------- honest */

struct hconn {
    int fd;
    struct sockaddr_storage local, peer;
    struct vs_rdma_proof proof;
    uint64_t tx, rx;
    char ops[128];
};

/* Whether PATH (none: true at once) exists before END. */
static bool wait_file(const char *path, double end)
{
    struct stat st;
    while (path && stat(path, &st) != 0) {
        if (now_s() > end)
            return false;
        usleep(20000);
    }
    return true;
}

static int cmd_honest(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    const char *ip = argv[2];
    int port = atoi(argv[3]);
    const char *ops = NULL, *start_file = NULL, *leak_file = NULL;
    double timeout = 60;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--ops") && i + 1 < argc)
            ops = argv[++i];
        else if (!strcmp(argv[i], "--start-file") && i + 1 < argc)
            start_file = argv[++i];
        else if (!strcmp(argv[i], "--leak-file") && i + 1 < argc)
            leak_file = argv[++i];
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            timeout = atof(argv[++i]);
    }
    if (!ops)
        return 2;
    static struct hconn h[16];
    int n = 0;
    {
        char tmp[1024];
        snprintf(tmp, sizeof(tmp), "%s", ops);
        char *save;
        for (char *t = strtok_r(tmp, ";", &save); t && n < 16; t = strtok_r(NULL, ";", &save))
            snprintf(h[n++].ops, sizeof(h[0].ops), "%s", t);
    }
    double end = now_s() + timeout;
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a;
    mkaddr(&a, ip, port);
    if (bind(l, (void *)&a, sizeof(a)) < 0 || listen(l, 16) < 0) {
        perror("honest: bind");
        return 2;
    }
    printf("HONEST-LISTENING %s:%d, %d connections\n", ip, port, n);
    fflush(stdout);
    /* TCP: accept, echo the 64-byte hello, keep the prefixes. */
    for (int i = 0; i < n; i++) {
        socklen_t ll = sizeof(h[i].peer);
        h[i].fd = accept(l, (void *)&h[i].peer, &ll);
        ll = sizeof(h[i].local);
        getsockname(h[i].fd, (void *)&h[i].local, &ll);
        uint8_t buf[64];
        size_t got = 0;
        while (got < sizeof(buf)) {
            ssize_t r = read(h[i].fd, buf + got, sizeof(buf) - got);
            if (r <= 0) {
                perror("honest: hello");
                return 2;
            }
            got += (size_t)r;
        }
        struct iovec iov = {buf, got};
        vs_rdma_proof_rcvd(&h[i].proof, 0, &iov, 1, got);
        if (write(h[i].fd, buf, got) != (ssize_t)got) {
            perror("honest: echo");
            return 2;
        }
        vs_rdma_proof_sent(&h[i].proof, 0, &iov, 1, got);
        h[i].tx = h[i].rx = got;
        printf("HONEST-TCP conn=%d port %u: hello of %zu bytes echoed\n", i,
               ntohs(((struct sockaddr_in *)&h[i].peer)->sin_port), got);
    }
    fflush(stdout);
    if (!wait_file(start_file, end)) {
        printf("HONEST no start file\n");
        return 2;
    }
    struct rdma_event_channel *ch = channel();
    int failures = 0;
    struct link links[16];
    /* Every connection set up first, the ops after: a connector listens
     * for its caller only so long (cm.c), and the ops of the connections
     * before it (each failing one ends its queue pair, slowly under
     * emulation) once made a busy guest's later calls too late. */
    struct vs_rdma_msg rings[16];
    bool set_up[16] = {false};
    for (int i = 0; i < n; i++) {
        struct hconn *c = &h[i];
        struct link *lk = &links[i];
        struct sockaddr_in src = *(struct sockaddr_in *)&c->local;
        src.sin_port = 0;
        int rc = 0;
        struct vs_rdma_rep rep;
        /* Call until the connector listens and answers. */
        while (now_s() < end) {
            struct rdma_cm_id *id = resolve(ch, &src, (struct sockaddr_in *)&c->peer);
            if (!id) {
                usleep(50000);
                continue;
            }
            link_setup(lk, id);
            rnd(&c->proof.nonce_a, 8);
            c->proof.a_tx = c->tx;
            c->proof.a_rx = c->rx;
            struct vs_rdma_req req = {.magic = VS_RDMA_MAGIC,
                                      .version = VS_RDMA_VERSION,
                                      .nonce = c->proof.nonce_a,
                                      .tx = c->tx,
                                      .rx = c->rx};
            rc = call_once(ch, lk, &req, &rep, "HONEST-CALL");
            if (rc == 1)
                break;
            link_free(lk);
            usleep(50000);
        }
        if (rc != 1) {
            printf("HONEST-FAIL conn=%d: the connector never answered\n", i);
            failures++;
            continue;
        }
        c->proof.nonce_c = rep.nonce;
        c->proof.c_tx = rep.tx;
        c->proof.c_rx = rep.rx;
        uint8_t want[VS_SHA256_LEN];
        vs_rdma_proof_mac(&c->proof, true, false, &c->peer, &c->local, want);
        bool ok = vs_rdma_proof_covered(&c->proof) > 0 && vs_equal_ct(want, rep.mac, sizeof(want));
        printf("HONEST-CONNECTOR-PROOF conn=%d %s (covered %llu bytes)\n", i, ok ? "ok" : "BAD",
               (unsigned long long)vs_rdma_proof_covered(&c->proof));
        failures += !ok;
        struct vs_rdma_msg m = {.type = VS_RDMA_MSG_PROOF};
        vs_rdma_proof_mac(&c->proof, true, true, &c->peer, &c->local, m.mac);
        m.rkey = lk->ring_mr->rkey;
        m.a = (uintptr_t)lk->ring;
        m.b = FAKE_RING;
        m.credit_addr = (uintptr_t)lk->credit;
        m.credit_rkey = lk->credit_mr->rkey;
        send_msg(lk, &m);
        struct vs_rdma_msg ring = {0};
        bool got = false;
        double until = now_s() + 10;
        while (!got && now_s() < until) {
            struct ibv_wc wc;
            if (next_wc(lk, 200, &wc) < 0)
                continue;
            if (wc.status != IBV_WC_SUCCESS) {
                printf("HONEST conn=%d completion %s\n", i, ibv_wc_status_str(wc.status));
                break;
            }
            if (wc.opcode & IBV_WC_RECV) {
                memcpy(&ring, lk->msgs + (wc.wr_id % SLOTS) * VS_RDMA_MSG_SIZE, sizeof(ring));
                got = ring.type == VS_RDMA_MSG_RING;
            }
        }
        if (!got) {
            printf("HONEST-FAIL conn=%d: no RING from the connector (our proof refused?)\n", i);
            failures++;
            continue;
        }
        printf("HONEST-RING conn=%d ring %#llx rkey %#x size %llu, credit word %#llx rkey %#x\n", i,
               (unsigned long long)ring.a, ring.rkey, (unsigned long long)ring.b,
               (unsigned long long)ring.credit_addr, ring.credit_rkey);
        fflush(stdout);
        rings[i] = ring;
        set_up[i] = true;
    }
    uint64_t leak_addr = 0;
    uint32_t leak_rkey = 0;
    if (leak_file) {
        if (!wait_file(leak_file, end)) {
            printf("HONEST no leak file\n");
            return 2;
        }
        FILE *f = fopen(leak_file, "r");
        unsigned long long ad = 0;
        unsigned rk = 0;
        if (f && fscanf(f, "%llx %x", &ad, &rk) == 2) {
            leak_addr = ad;
            leak_rkey = rk;
        }
        if (f)
            fclose(f);
        printf("HONEST-LEAKED addr=%#llx rkey=%#x\n", (unsigned long long)leak_addr, leak_rkey);
    }
    for (int i = 0; i < n; i++) {
        if (!set_up[i])
            continue;
        struct hconn *c = &h[i];
        struct link *lk = &links[i];
        const struct vs_rdma_msg ring = rings[i];
        char tmp[128];
        snprintf(tmp, sizeof(tmp), "%s", c->ops);
        char *save;
        bool dead = false;
        for (char *op = strtok_r(tmp, ",", &save); op; op = strtok_r(NULL, ",", &save)) {
            bool write = true;
            uint64_t addr = 0;
            uint32_t rkey = 0, len = 8;
            int expect = IBV_WC_REM_ACCESS_ERR;
            if (!strcmp(op, "write-own-ring")) {
                addr = ring.a, rkey = ring.rkey, expect = IBV_WC_SUCCESS;
            } else if (!strcmp(op, "read-own-ring")) {
                write = false, addr = ring.a, rkey = ring.rkey;
            } else if (!strcmp(op, "read-own-credit")) {
                write = false, addr = ring.credit_addr, rkey = ring.credit_rkey;
            } else if (!strcmp(op, "write-past-ring")) {
                addr = ring.a + ring.b - 8, rkey = ring.rkey, len = 64;
            } else if (!strcmp(op, "write-leaked")) {
                addr = leak_addr, rkey = leak_rkey;
            } else if (!strcmp(op, "read-leaked")) {
                write = false, addr = leak_addr, rkey = leak_rkey;
            } else {
                printf("HONEST unknown op %s\n", op);
                return 2;
            }
            if (dead) {
                printf("HONEST-OP conn=%d op=%s skipped (queue pair in error)\n", i, op);
                failures++;
                continue;
            }
            int st = rdma_op(lk, write, addr, rkey, len, "HONEST-OP");
            bool pass = st == expect;
            printf("HONEST-OP conn=%d op=%s addr=%#llx rkey=%#x len=%u status=%s (%d) expected=%s "
                   "%s\n",
                   i, op, (unsigned long long)addr, rkey, len, status_str(st), st,
                   status_str(expect), pass ? "PASS" : "FAIL");
            failures += !pass;
            dead = st != IBV_WC_SUCCESS;
        }
        fflush(stdout);
    }
    printf("HONEST-SUMMARY connections=%d failures=%d\n", n, failures);
    fflush(stdout);
    /* Hold the TCP connections until the client lets go. */
    for (int i = 0; i < n; i++) {
        char b[256];
        while (now_s() < end && !stop) {
            struct pollfd p = {.fd = h[i].fd, .events = POLLIN};
            if (poll(&p, 1, 200) > 0) {
                if (read(h[i].fd, b, sizeof(b)) <= 0)
                    break;
            }
        }
    }
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    signal(SIGPIPE, SIG_IGN);
    int rc = 2;
    if (argc >= 2 && !strcmp(argv[1], "call"))
        rc = cmd_call(argc, argv);
    else if (argc >= 2 && !strcmp(argv[1], "squat"))
        rc = cmd_squat(argc, argv);
    else if (argc >= 2 && !strcmp(argv[1], "honest"))
        rc = cmd_honest(argc, argv);
    if (rc == 2)
        fprintf(stderr, "usage: rdma_impostor call|squat|honest IP PORT ... (see the source)\n");
    return rc;
}
