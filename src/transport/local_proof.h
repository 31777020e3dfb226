/* local_proof.h - proving, between two processes of one host joined by a
 * unix socket, that the other holds a given TCP or UDP socket
 * (docs/design/shm-transport.md, "Proof of identity"): the kernel names
 * the process at the other end (SO_PEERCRED), the process names its
 * descriptor number, and /proc/PID/fd/N must be a real descriptor of the
 * socket sock_diag reports (diag.h). Shared by shm TCP and shm UDP. */
#ifndef VSOCKET_LOCAL_PROOF_H
#define VSOCKET_LOCAL_PROOF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* The credentials of the process at the other end of CHAN (the kernel's
 * word), if VSOCKET_SHM_PEERS lets its user share memory with us. */
bool vs_local_peer_cred(int chan, struct ucred *cred);

/* Our part of the proof for a peer who may not look into our /proc/PID/fd
 * (another user's, or in another pid namespace): an O_PATH descriptor of
 * our socket FD (the caller closes it). -1 when the peer at the other end
 * of CHAN is of our user and our pid namespace. */
int vs_local_proof_fd(int chan, int fd);

/* Whether the process at the other end of CHAN holds, under number FD_NO,
 * a real (not O_PATH) descriptor of the socket of inode WANT; when we may
 * not look into its /proc/PID/fd (another user, another pid namespace),
 * PROOF (an O_PATH descriptor it sent, or -1) must be one of that socket.
 * False with errno ENOENT when it has no descriptor of that number (any
 * more: a peer that closed or exited while we looked). */
bool vs_local_holds(int chan, uint64_t fd_no, int proof, uint64_t want);

#endif
