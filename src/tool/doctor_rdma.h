/* doctor_rdma.h - `vsocket doctor`'s RDMA section: whether the rdma
 * transport can run on this host for this user and, if not, why and what
 * to do; then the UD checks (doctor_ud.c). docs/doctor.md describes every
 * line it prints. */
#ifndef VSOCKET_TOOL_DOCTOR_RDMA_H
#define VSOCKET_TOOL_DOCTOR_RDMA_H

#include <stdbool.h>

enum vs_doctor_level { OK, WARN, PROBLEM };

struct vs_doctor_verdict {
    int problems;
    int warnings;
    char reason[160]; /* the first problem, for the result line */
};

/* Prints the RDMA section: one OK, WARN or PROBLEM line per check, then
 * "rdma: usable (...)" or "rdma: not usable: REASON", then the UD part
 * (vs_doctor_ud). Returns the number of PROBLEM lines of the RDMA part: 0
 * when RDMA is usable (WARN lines do not prevent it; the UD part never
 * counts). */
int vs_doctor_rdma(void);

/* One check's line, "  OK       [REASON: ]TEXT", counted in V (REASON of
 * the first PROBLEM kept for the verdict). Flushed at once: the UD checks
 * print from a child process that may be killed. */
void vs_doctor_say(struct vs_doctor_verdict *v, enum vs_doctor_level lv, const char *reason,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Whether this process has CAP_IPC_LOCK, which lifts RLIMIT_MEMLOCK for
 * memory registration. */
bool vs_doctor_has_ipc_lock(void);

/* The port the UD checks use: the RDMA section's chosen one. */
struct vs_doctor_ud_port {
    const char *dev;
    unsigned num;
    int gid_index;  /* of the IPv4 RoCE v2 GID, or -1 (InfiniBand: by LID) */
    const char *ip; /* that GID's address, "" when none */
};

/* The UD checks (datagrams for UDP over RDMA, docs/design/udp.md), on PORT,
 * or "ud: not checked" when PORT is NULL (RDMA not usable). They call
 * libibverbs and librdmacm in a child process with a deadline, so a
 * provider that crashes or hangs gives a PROBLEM line, not a dead tool.
 * Ends with "ud: usable (...)" or "ud: not usable: REASON". */
void vs_doctor_ud(const struct vs_doctor_ud_port *port);

#endif
