/* doctor_rdma.h - `vsocket doctor`'s RDMA section: whether the rdma
 * transport can run on this host for this user and, if not, why and what
 * to do. docs/doctor.md describes every line it prints. */
#ifndef VSOCKET_TOOL_DOCTOR_RDMA_H
#define VSOCKET_TOOL_DOCTOR_RDMA_H

/* Prints the RDMA section: one OK, WARN or PROBLEM line per check, then
 * "rdma: usable (...)" or "rdma: not usable: REASON". Returns the number of
 * PROBLEM lines: 0 when RDMA is usable (WARN lines do not prevent it). */
int vs_doctor_rdma(void);

#endif
