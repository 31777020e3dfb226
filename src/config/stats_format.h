/* stats_format.h - layout of the per-process statistics segment.
 *
 * Each process that uses vsocket publishes one file, STATS_DIR/vsocket-stats.PID
 * (mode 0600), that `vsocket stat` maps read-only while the process runs. A
 * process in a pid namespace of its own (a container) names its file
 * vsocket-stats.nsINODE.PID: containers of one pod share /dev/shm, and each
 * has its own pid 1. The writer is libvsocket; this header is all the reader
 * needs.
 *
 * Consistency: the counters are independent 64-bit atomics. The other fields
 * of a record change rarely (connect, accept, close) and are guarded by a
 * sequence counter: odd while being written; a reader retries until it sees
 * the same even value before and after its copy. */
#ifndef VSOCKET_STATS_FORMAT_H
#define VSOCKET_STATS_FORMAT_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define VS_STATS_MAGIC 0x3174736b636f7376ull /* "vsockst1" */
#define VS_STATS_VERSION 3
#define VS_STATS_FILE_PREFIX "vsocket-stats."

enum vs_record_use { VS_REC_FREE, VS_REC_LIVE, VS_REC_CLOSED };

enum vs_sock_state {
    VS_STATE_OPEN,
    VS_STATE_BOUND,
    VS_STATE_LISTENING,
    VS_STATE_CONNECTING,
    VS_STATE_CONNECTED,
    VS_STATE_CLOSED,
};

struct vs_stats_addr {
    uint16_t family; /* AF_INET, AF_INET6 or 0 when unknown */
    uint16_t port;   /* host byte order */
    uint8_t addr[16];
};

struct vs_stats_record {
    _Atomic uint32_t use; /* enum vs_record_use */
    _Atomic uint32_t seq; /* odd while the fields below are changing */
    int32_t fd;
    uint16_t family;
    uint8_t type; /* SOCK_STREAM, SOCK_DGRAM, ... */
    uint8_t state;
    uint8_t transport;
    uint8_t pad[3];
    char reason[48]; /* why the socket is not accelerated; "" when it is */
    struct vs_stats_addr local, peer;
    uint64_t open_ns, close_ns; /* CLOCK_REALTIME */
    /* CLOCK_REALTIME by which the state in reason (a set-up under way) ends,
     * provided the program calls on the socket; 0 when no end is due. */
    uint64_t due_ns;
    _Atomic uint64_t tx_bytes, rx_bytes, tx_msgs, rx_msgs;
    /* UDP sockets: the peers whose datagrams go on shared memory now, and
     * the datagrams this socket sent there that the receiver had no room
     * for (its SO_RCVBUF held: dropped, as UDP drops). */
    _Atomic uint32_t dgram_peers;
    uint32_t pad4;
    _Atomic uint64_t dgram_drops;
};

struct vs_stats_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint32_t record_size;
    uint32_t capacity;
    int32_t pid;          /* in the writer's pid namespace */
    uint32_t pid_ns;      /* that namespace's inode (/proc/self/ns/pid); 0: unknown */
    uint64_t start_ticks; /* /proc/PID/stat start time: a reused pid differs */
    char comm[64];
    char transports[64];         /* the configured list */
    _Atomic uint32_t high_water; /* records [0, high_water) have been used */
    _Atomic uint32_t pad2;
    _Atomic uint64_t untracked; /* sockets not recorded because the table was full */
};

/* Start time of process PID in clock ticks after boot, or 0. */
uint64_t vs_stats_proc_start_ticks(pid_t pid);

/* The kernel's first pid namespace, the host's (PROC_PID_INIT_INO). */
#define VS_STATS_INIT_PID_NS 0xEFFFFFFCu

/* The inode of process PID's pid namespace (0: our own), or 0 when we may
 * not look. */
uint32_t vs_stats_pid_ns(pid_t pid);

/* Writes the segment path of PID of pid namespace PID_NS under DIR into OUT. */
void vs_stats_path(const char *dir, pid_t pid, uint32_t pid_ns, char *out, size_t outlen);

const char *vs_stats_state_name(unsigned state);

#endif
