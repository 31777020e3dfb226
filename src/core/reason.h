/* reason.h - why a socket is not accelerated, as shown by `vsocket stat`.
 * docs/statistics.md lists them for users: keep the two in step. */
#ifndef VSOCKET_REASON_H
#define VSOCKET_REASON_H

/* No transport other than the kernel is built into this library. */
#define VS_REASON_NO_TRANSPORT "no-accelerated-transport"
/* VSOCKET_TRANSPORTS allows the kernel only. */
#define VS_REASON_DISABLED "disabled-by-config"
/* Raw, sequenced-packet and other socket types are passed through. */
#define VS_REASON_UNSUPPORTED_TYPE "unsupported-type"
/* The peer does not run vsocket (reserved for the shm and rdma transports). */
#define VS_REASON_PEER_NOT_VSOCKET "peer-not-vsocket"
/* A TCP socket that is not a connection (yet): only connections move. */
#define VS_REASON_NOT_CONNECTED "not-connected"
/* Listening sockets stay on the kernel; the connections they accept may move. */
#define VS_REASON_LISTENER "listener"
/* A UDP socket every peer of which is on the kernel: no transport carries
 * UDP datagrams yet (docs/design/udp.md). */
#define VS_REASON_UDP "udp-on-kernel"
/* VSOCKET_UDP=off: UDP sockets are left to the kernel alone. */
#define VS_REASON_UDP_DISABLED "udp-disabled"
/* The program set an option shm does not give as the kernel does yet
 * (IP_PKTINFO, timestamps, SO_REUSEPORT, UDP_CORK...): the socket stays on
 * the kernel (docs/design/udp.md §6). */
#define VS_REASON_UDP_OPTION "udp-option"
/* A connection inherited through exec (its rings, if any, were left before exec). */
#define VS_REASON_INHERITED "inherited"
/* The peer is on another host (the shm transport serves this host only). */
#define VS_REASON_PEER_NOT_LOCAL "peer-not-local"
/* The connection has not yet lived VSOCKET_UPGRADE_AFTER_US nor moved
 * VSOCKET_UPGRADE_AFTER_BYTES: it runs on the kernel, and its upgrade starts
 * at the first call on it past either mark. */
#define VS_REASON_DEFERRED "upgrade-deferred"
/* The shm upgrade is being negotiated; the connection runs on the kernel meanwhile. */
#define VS_REASON_PENDING "upgrade-pending"
/* No usable RDMA device, or rdma_cm cannot be used (rdma_ucm not loaded). */
#define VS_REASON_NO_RDMA_DEVICE "no-rdma-device"
/* The rdma transport tried this destination lately and found no vsocket
 * peer there (VSOCKET_RDMA_PEER_CACHE_S): not asked again. */
#define VS_REASON_PEER_CACHED "peer-not-vsocket-cached"
/* A process forked by one that used RDMA cannot use it (librdmacm's state
 * is its parent's): its connections stay on TCP. */
#define VS_REASON_RDMA_FORKED "rdma-after-fork"
/* The process changed its credentials (setuid, setgroups, ...) after it
 * opened the RDMA device: the kernel refuses it the device's files from
 * then on. Its connections left RDMA before the change; new ones stay on
 * TCP. */
#define VS_REASON_CREDS_CHANGED "credentials-changed"
/* A connection not yet upgraded when the process forked is held by more
 * than one process: its upgrade waits until one of them holds it alone. */
#define VS_REASON_SHARED_AFTER_FORK "shared-after-fork"
/* The connection left RDMA because the process forked (registered memory
 * and queue pairs do not follow into the child). */
#define VS_REASON_LEFT_BY_FORK "left-by-fork"
/* A forked child's copy of a connection its parent carries on RDMA: the
 * child has not used it (its first use makes the connection leave RDMA,
 * then left-by-fork). */
#define VS_REASON_RDMA_IN_PARENT "rdma-in-parent"
/* The peer did not read for a while and a blocking send would have waited
 * where the kernel buffers: the rest of the connection went on TCP. */
#define VS_REASON_SPILLED "left-for-buffering"
/* The queue pair failed, or the device went away: the connection ended. */
#define VS_REASON_RDMA_ERROR "rdma-error"
/* The program closed or replaced a descriptor the connection's side channel
 * used (a daemon closing everything, dup2 onto a number): back to TCP. */
#define VS_REASON_FD_TAKEN "fd-taken"
/* The process runs under a seccomp filter: vsocket only passes calls on. */
#define VS_REASON_SANDBOXED "sandboxed"
/* Why an upgrade ended on TCP, or a connection left its transport. */
/* The peer closed its socket before the upgrade finished (a short connection). */
#define VS_REASON_PEER_CLOSED "peer-closed"
/* The upgrade did not finish within its time limits (transport/stream.h). */
#define VS_REASON_HANDSHAKE_TIMEOUT "handshake-timeout"
/* A descriptor, memory or a message could not be had for the upgrade. */
#define VS_REASON_NO_RESOURCES "no-resources"
/* The process is at its descriptor limit (RLIMIT_NOFILE): the program's
 * own sockets come first. */
#define VS_REASON_NO_DESCRIPTORS "no-descriptors"
/* The peer turned the upgrade down (or hung up during it). */
#define VS_REASON_DECLINED_BY_PEER "declined-by-peer"
/* The peer spoke nonsense during the upgrade. */
#define VS_REASON_HANDSHAKE_MALFORMED "handshake-malformed"
/* The process at the other end is not one this policy accepts. */
#define VS_REASON_PEER_CREDENTIALS "peer-credentials"
/* The process at the other end could not prove it holds the peer socket. */
#define VS_REASON_PEER_PROOF_FAILED "peer-proof-failed"
/* The connection's rendezvous name was taken by someone else. */
#define VS_REASON_RENDEZVOUS_UNAVAILABLE "rendezvous-unavailable"
/* The process exec'd: its connections went back to TCP. */
#define VS_REASON_LEFT_BY_EXEC "left-by-exec"
/* The peer left the transport (exec, stdio, splice): back to TCP. */
#define VS_REASON_PEER_LEFT "peer-left-rings"
/* stdio on the socket (fdopen): bytes move out of our sight, back to TCP. */
#define VS_REASON_STDIO "stdio-on-socket"
/* splice on the socket: bytes move out of our sight, back to TCP. */
#define VS_REASON_SPLICE "splice"
/* Prefix: an option the transport cannot honour, e.g. unsupported-option:SO_XYZ. */
#define VS_REASON_UNSUPPORTED_OPTION "unsupported-option:"

#endif
