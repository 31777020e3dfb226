/* proto.h - the messages of the shared-memory side channel.
 *
 * The side channel is an AF_UNIX SOCK_SEQPACKET connection between the two
 * processes holding the two ends of one TCP connection. Nothing of it ever
 * travels on the TCP stream. Every message is one fixed-size record; the
 * descriptors it carries (SCM_RIGHTS) are listed per type. Anything else
 * (wrong size, magic, version or type, unexpected descriptors) is refused.
 *
 * Handshake (the accepting side A calls the connecting side C):
 *   A -> C  HELLO     arg2=fd               [proof]
 *   C -> A  HELLO_ACK arg=capacity arg2=fd  [memfd of C's receive ring, proof]
 *   A -> C  READY     arg=capacity          [memfd of A's receive ring]
 *   either  DECLINE   arg=VS_DECLINE_LEAVING when the sender leaves the rings
 *                     (exec, stdio, splice), else 0
 * arg2=fd is the sender's descriptor number of its TCP socket: the receiver
 * checks that the process the kernel names as its caller (SO_PEERCRED)
 * holds, under that number, a real (not O_PATH) descriptor of the socket
 * NETLINK_SOCK_DIAG reports for the mirrored 4-tuple. [proof] is sent to a
 * receiver of another user only (who may not look into the sender's
 * /proc/PID/fd): an O_PATH descriptor of that socket, which only the sender
 * or a process with ptrace read rights over it can open.
 * Data phase:
 *   SWITCH  arg=S   the sender's bytes after stream offset S are in the ring
 *   WAKE            the ring changed while the other side slept
 *   REVERT  arg=consumed, arg2=end: the sender of REVERT leaves the rings (exec):
 *           it consumed `consumed` bytes of its receive ring (resend the rest
 *           on TCP) and its transmit ring ends at `end` (read TCP after it). */
#ifndef VSOCKET_SHM_PROTO_H
#define VSOCKET_SHM_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VS_SHM_MAGIC 0x314b5356u /* "VSK1" */
#define VS_SHM_VERSION 2u

enum vs_shm_msg_type {
    VS_MSG_HELLO = 1,
    VS_MSG_HELLO_ACK,
    VS_MSG_READY,
    VS_MSG_DECLINE,
    VS_MSG_SWITCH,
    VS_MSG_WAKE,
    VS_MSG_REVERT,
};

struct vs_shm_msg {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint64_t arg;
    uint64_t arg2;
};

#define VS_DECLINE_LEAVING 1

/* Whether LEN bytes received as one record (MSG_FLAGS: the recvmsg flags)
 * are a message of this version: the only check of peer bytes before they
 * are used. The type is the receiver's to judge. (proto.c) */
bool vs_shm_msg_ok(const struct vs_shm_msg *m, size_t len, int msg_flags);

/* The abstract AF_UNIX name the connecting side listens on:
 * "\0vsocket/1/<its address>:<port>/<peer address>:<port>". */
#define VS_SHM_RENDEZVOUS_PREFIX "vsocket/1/"

#endif
