/* config.h - VSOCKET_* environment variables (documented in
 * docs/configuration.md: keep the two in step).
 *
 * A bad value never stops the program: it is reported once, naming the
 * variable and the accepted values, and the default is used instead. */
#ifndef VSOCKET_CONFIG_H
#define VSOCKET_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define VS_STATS_MAX_DEFAULT 4096u
#define VS_STATS_MAX_MIN 16u
#define VS_STATS_MAX_MAX 1048576u

/* VSOCKET_POLL_US: busy-poll budget before sleeping in the kernel. Spinning
 * about as long as a sleep-and-wake-up costs keeps the total within twice
 * the optimum; a cross-CPU wake-up costs ~50 us on the VMs we measure on
 * (bench/RESULTS.md), a few us on bare metal. */
#define VS_POLL_US_DEFAULT 50ul
#define VS_POLL_US_MAX 1000000ul
/* VSOCKET_SHM_RING_MIN: a ring's first and smallest region, where it
 * starts and goes back to when empty. VSOCKET_SHM_RING_MAX: the most one
 * direction of a connection may buffer; 0 (the default): what the kernel
 * would, its largest receive plus send buffer (transport/shm/sizing.c). */
#define VS_SHM_RING_MIN_DEFAULT (256ul << 10)
#define VS_SHM_RING_MAX_DEFAULT 0ul
#define VS_SHM_RING_LIMIT_MIN (4ul << 10)
#define VS_SHM_RING_LIMIT_MAX (64ul << 20)  /* of MIN (memory/ring.h: VS_RING_MAX_CAPACITY) */
#define VS_SHM_RING_MAX_LIMIT (256ul << 20) /* of MAX (VS_RING_MAX_MOST) */
/* VSOCKET_UPGRADE_AFTER_US / _BYTES: a connection starts its upgrade once
 * it has lived this long or moved this much (either). A connection that
 * lives for one request is cheaper on the kernel than any set-up: on the
 * VMs we measure on, one request over a fresh kernel connection takes
 * 100-150 us, the shm set-up several times that (bench/RESULTS.md). */
#define VS_UPGRADE_AFTER_US_DEFAULT 5000ul
#define VS_UPGRADE_AFTER_US_MAX 60000000ul
#define VS_UPGRADE_AFTER_BYTES_DEFAULT (256ul << 10)
#define VS_UPGRADE_AFTER_BYTES_MAX (1ul << 40)
/* VSOCKET_SHM_PEERS: which peer processes may share rings with us. */
enum vs_peer_policy { VS_PEERS_ANY, VS_PEERS_SAME_UID, VS_PEERS_LIST };
#define VS_PEER_UIDS_MAX 16
/* The rdma transport (docs/configuration.md). VSOCKET_RDMA_RING: the
 * receive ring of each direction, in registered memory (the sender keeps a
 * copy of what the peer has not read yet, of the same size). QP_DEPTH: work
 * requests per queue pair in each queue. INLINE: sends up to this size go
 * inline in the work request. PEER_CACHE_S: how long a destination that
 * did not answer the rendezvous is not asked again. Separate settings: the
 * ring sizes the buffering, the depth the messages in flight.
 * VSOCKET_RDMA_RING_MAX: how large a ring may grow while its reader keeps
 * up and the ring is what limits the stream (transport/rdma/grow.c); at
 * VSOCKET_RDMA_RING or below, rings never grow. */
#define VS_RDMA_RING_DEFAULT (256ul << 10)
#define VS_RDMA_RING_MIN (4ul << 10)
#define VS_RDMA_RING_MAX (256ul << 20)
#define VS_RDMA_RING_GROW_DEFAULT (4ul << 20)
/* 255, not 256: Soft-RoCE gives a queue the power of two above its depth
 * (one slot kept empty), so 256 took 512 slots: 163 KiB more per end. */
#define VS_RDMA_QP_DEPTH_DEFAULT 255ul
#define VS_RDMA_QP_DEPTH_MIN 16ul
#define VS_RDMA_QP_DEPTH_MAX 16384ul
#define VS_RDMA_INLINE_DEFAULT 64ul
#define VS_RDMA_INLINE_MAX 1024ul
/* VSOCKET_RDMA_ZCOPY: blocking sends from this size are pulled by the peer
 * (RDMA READ) instead of copied; 0 turns it off. bench/RESULTS.md: sweep. */
#define VS_RDMA_ZCOPY_DEFAULT (1ul << 20)
#define VS_RDMA_ZCOPY_MAX (1ul << 30)
/* A blocking send that found the peer's ring full this long leaves RDMA for
 * TCP (leave.c: the program may rely on the kernel's buffers). */
#define VS_RDMA_SPILL_MS_DEFAULT 200ul
#define VS_RDMA_SPILL_MS_MAX 600000ul
#define VS_RDMA_PEER_CACHE_S_DEFAULT 60ul
#define VS_RDMA_PEER_CACHE_S_MAX 86400ul
/* A pair of UDP sockets moves off the kernel after this many datagrams
 * (docs/design/udp.md §3.5): one-shot exchanges never pay for the set-up. */
#define VS_UDP_UPGRADE_AFTER_DEFAULT 16ul
#define VS_UDP_UPGRADE_AFTER_MAX 1000000ul
/* VSOCKET_FD_FLOOR: where vsocket's own descriptors go (core/ownfd.h). */
#define VS_FD_FLOOR_MAX 1048576ul

struct vs_config {
    unsigned transports; /* VS_TRANSPORT_BIT mask; kernel always included */
    bool transports_set; /* VSOCKET_TRANSPORTS was given (and valid) */
    int log_level;       /* enum vs_log_level */
    char log_file[PATH_MAX];
    bool stats; /* publish per-socket statistics */
    char stats_dir[PATH_MAX];
    unsigned stats_max;         /* socket records per process */
    bool follow_exec;           /* keep vsocket loaded across execve with a new env */
    unsigned long poll_us;      /* VSOCKET_POLL_US */
    bool poll_crowded;          /* VSOCKET_POLL_CROWDED */
    unsigned long shm_ring_min; /* bytes */
    unsigned long shm_ring_max; /* bytes; 0: from the kernel's limits */
    long fd_floor;              /* VSOCKET_FD_FLOOR; -1: automatic (core/ownfd.h) */
    unsigned long upgrade_after_us;
    unsigned long upgrade_after_bytes;
    enum vs_peer_policy peers; /* VSOCKET_SHM_PEERS */
    unsigned peer_uid_count;   /* VS_PEERS_LIST: our own uid is always allowed */
    unsigned peer_uids[VS_PEER_UIDS_MAX];
    unsigned long rdma_ring;         /* VSOCKET_RDMA_RING, bytes, a power of two */
    unsigned long rdma_ring_max;     /* VSOCKET_RDMA_RING_MAX, a power of two */
    unsigned long rdma_qp_depth;     /* VSOCKET_RDMA_QP_DEPTH */
    unsigned long rdma_inline;       /* VSOCKET_RDMA_INLINE, bytes */
    unsigned long rdma_peer_cache_s; /* VSOCKET_RDMA_PEER_CACHE_S */
    unsigned long rdma_zcopy;        /* VSOCKET_RDMA_ZCOPY, bytes; 0: never */
    bool rdma_fork_leave;            /* VSOCKET_RDMA_FORK_LEAVE: leave RDMA before fork */
    unsigned long rdma_spill_ms;     /* VSOCKET_RDMA_SPILL_MS: a stalled writer leaves RDMA */
    bool udp; /* VSOCKET_UDP: the datagram layer takes UDP sockets (docs/design/udp.md) */
    /* VSOCKET_UDP_SHM: UDP between processes of this host over shared
     * memory (udp.md §7); experimental, off until step 3 is whole. */
    bool udp_shm;
    unsigned long udp_upgrade_after; /* VSOCKET_UDP_UPGRADE_AFTER_DGRAMS */
};

extern struct vs_config vs_config;

void vs_config_defaults(struct vs_config *c);

/* Reads the environment into C, reporting bad values through the log. */
void vs_config_load(struct vs_config *c);

/* Parses a VSOCKET_TRANSPORTS list ("shm,rdma,kernel"). Returns 0 and the
 * mask, or -1 with a message in ERR naming the accepted values. */
int vs_config_parse_transports(const char *value, unsigned *mask, char *err, size_t errlen);

/* Parses a VSOCKET_SHM_PEERS value ("any", "same-uid", or a comma-separated
 * list of user names and numeric uids) into C. 0, or -1 with a message in ERR. */
int vs_config_parse_peers(const char *value, struct vs_config *c, char *err, size_t errlen);

/* Whether the policy lets a process of UID (the kernel's word) share rings
 * with this one. */
bool vs_config_peer_allowed(unsigned uid);

/* Writes the transports of MASK as a comma-separated list. */
void vs_config_format_transports(unsigned mask, char *out, size_t outlen);

/* The names of all VSOCKET_* variables, NULL-terminated (for exec). */
extern const char *const vs_config_variables[];

#endif
