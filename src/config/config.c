/* config.c - VSOCKET_* environment variables. */
#include "config/config.h"

#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "config/log.h"
#include "core/transport_id.h"

struct vs_config vs_config;

const char *const vs_config_variables[] = {
    "VSOCKET_TRANSPORTS",
    "VSOCKET_LOG_LEVEL",
    "VSOCKET_LOG_FILE",
    "VSOCKET_STATS",
    "VSOCKET_STATS_DIR",
    "VSOCKET_STATS_MAX",
    "VSOCKET_FOLLOW_EXEC",
    "VSOCKET_POLL_US",
    "VSOCKET_POLL_CROWDED",
    "VSOCKET_SHM_RING_MIN",
    "VSOCKET_SHM_RING_MAX",
    "VSOCKET_FD_FLOOR",
    "VSOCKET_UPGRADE_AFTER_US",
    "VSOCKET_UPGRADE_AFTER_BYTES",
    "VSOCKET_SHM_PEERS",
    "VSOCKET_RDMA_RING",
    "VSOCKET_RDMA_RING_MAX",
    "VSOCKET_RDMA_QP_DEPTH",
    "VSOCKET_RDMA_INLINE",
    "VSOCKET_RDMA_PEER_CACHE_S",
    "VSOCKET_RDMA_ZCOPY",
    "VSOCKET_RDMA_FORK_LEAVE",
    "VSOCKET_RDMA_SPILL_MS",
    "VSOCKET_UDP",
    "VSOCKET_UDP_SHM",
    "VSOCKET_UDP_UPGRADE_AFTER_DGRAMS",
    NULL,
};

void vs_config_defaults(struct vs_config *c)
{
    memset(c, 0, sizeof(*c));
    c->transports = vs_transports_built();
    c->log_level = VS_LOG_WARN;
    c->stats = true;
    snprintf(c->stats_dir, sizeof(c->stats_dir), "/dev/shm");
    c->stats_max = VS_STATS_MAX_DEFAULT;
    c->follow_exec = true;
    c->poll_us = VS_POLL_US_DEFAULT;
    c->poll_crowded = true;
    c->shm_ring_min = VS_SHM_RING_MIN_DEFAULT;
    c->shm_ring_max = VS_SHM_RING_MAX_DEFAULT;
    c->fd_floor = -1;
    c->upgrade_after_us = VS_UPGRADE_AFTER_US_DEFAULT;
    c->upgrade_after_bytes = VS_UPGRADE_AFTER_BYTES_DEFAULT;
    c->peers = VS_PEERS_ANY;
    c->rdma_ring = VS_RDMA_RING_DEFAULT;
    c->rdma_ring_max = VS_RDMA_RING_GROW_DEFAULT;
    c->rdma_qp_depth = VS_RDMA_QP_DEPTH_DEFAULT;
    c->rdma_inline = VS_RDMA_INLINE_DEFAULT;
    c->rdma_peer_cache_s = VS_RDMA_PEER_CACHE_S_DEFAULT;
    c->rdma_zcopy = VS_RDMA_ZCOPY_DEFAULT;
    c->rdma_spill_ms = VS_RDMA_SPILL_MS_DEFAULT;
    c->udp = true;
    c->udp_upgrade_after = VS_UDP_UPGRADE_AFTER_DEFAULT;
}

void vs_config_format_transports(unsigned mask, char *out, size_t outlen)
{
    size_t o = 0;
    out[0] = '\0';
    for (int t = 0; t < VS_TRANSPORT_COUNT; t++) {
        if (!(mask & VS_TRANSPORT_BIT(t)) || o >= outlen)
            continue;
        o += (size_t)snprintf(out + o, outlen - o, "%s%s", o ? "," : "",
                              vs_transport_name((enum vs_transport)t));
    }
}

int vs_config_parse_transports(const char *value, unsigned *mask, char *err, size_t errlen)
{
    char built[64];
    vs_config_format_transports(vs_transports_built(), built, sizeof(built));
    unsigned m = VS_TRANSPORT_BIT(VS_TRANSPORT_KERNEL);
    const char *p = value;
    if (!*p) {
        snprintf(err, errlen, "empty list; accepted values: a comma-separated list of %s", built);
        return -1;
    }
    while (*p) {
        size_t len = strcspn(p, ",");
        int t = vs_transport_by_name(p, len);
        if (t < 0) {
            snprintf(err, errlen,
                     "unknown transport '%.*s'; accepted values: a comma-separated list of %s",
                     (int)len, p, built);
            return -1;
        }
        if (!vs_transport_built((enum vs_transport)t)) {
            snprintf(err, errlen,
                     "transport '%.*s' is not available in this build; accepted values: %s",
                     (int)len, p, built);
            return -1;
        }
        m |= VS_TRANSPORT_BIT(t);
        p += len;
        if (*p == ',' && *++p == '\0') {
            snprintf(err, errlen, "trailing comma; accepted values: a comma-separated list of %s",
                     built);
            return -1;
        }
    }
    *mask = m;
    return 0;
}

static void report_invalid(const char *name, const char *value, const char *why, const char *dflt)
{
    vs_warn("%s='%s' is invalid: %s. Using the default (%s).", name, value, why, dflt);
}

static int parse_bool(const char *v)
{
    static const char *const yes[] = {"1", "on", "yes", "true", NULL};
    static const char *const no[] = {"0", "off", "no", "false", NULL};
    for (int i = 0; yes[i]; i++)
        if (strcasecmp(v, yes[i]) == 0)
            return 1;
    for (int i = 0; no[i]; i++)
        if (strcasecmp(v, no[i]) == 0)
            return 0;
    return -1;
}

static void load_bool(const char *name, bool *out)
{
    const char *v = getenv(name);
    if (!v)
        return;
    int b = parse_bool(v);
    if (b < 0)
        report_invalid(name, v, "accepted values: on, off (or 1/0, yes/no, true/false)",
                       *out ? "on" : "off");
    else
        *out = b;
}

static void load_path(const char *name, char *out, size_t outlen, const char *dflt_desc)
{
    const char *v = getenv(name);
    if (!v)
        return;
    /* In a set-user-ID, set-group-ID or capability program (secure-execution
     * mode: an administrator made the library preloadable there, README.md)
     * the environment is the unprivileged caller's. A path from it would let
     * the caller have the privileged process create or append to any file
     * (the log takes quoted values from the environment too). */
    if (getauxval(AT_SECURE)) {
        vs_warn("%s ignored in a set-user-ID or capability program (secure-execution mode); "
                "using the default (%s).",
                name, dflt_desc);
        return;
    }
    if (strlen(v) >= outlen)
        report_invalid(name, v, "path too long", dflt_desc);
    else
        snprintf(out, outlen, "%s", v);
}

static void load_log(struct vs_config *c)
{
    /* The log destination first, so that later messages reach it. */
    load_path("VSOCKET_LOG_FILE", c->log_file, sizeof(c->log_file), "stderr");
    if (c->log_file[0] && vs_log_open(c->log_file) < 0) {
        int e = errno;
        vs_warn("VSOCKET_LOG_FILE='%s' cannot be opened (%s). Logging to stderr.", c->log_file,
                strerror(e));
        c->log_file[0] = '\0';
    }
    const char *v = getenv("VSOCKET_LOG_LEVEL");
    if (v) {
        int level = vs_log_level_by_name(v);
        if (level < 0)
            report_invalid("VSOCKET_LOG_LEVEL", v,
                           "accepted values: none, error, warn, info, debug, trace", "warn");
        else
            c->log_level = level;
    }
    vs_log_level = (enum vs_log_level)c->log_level;
}

static void load_transports(struct vs_config *c)
{
    const char *v = getenv("VSOCKET_TRANSPORTS");
    if (!v)
        return;
    char err[256], dflt[64];
    unsigned mask;
    if (vs_config_parse_transports(v, &mask, err, sizeof(err)) < 0) {
        vs_config_format_transports(c->transports, dflt, sizeof(dflt));
        report_invalid("VSOCKET_TRANSPORTS", v, err, dflt);
        return;
    }
    c->transports = mask;
    c->transports_set = true;
}

/* The whole number in [MIN, MAX] that NAME is set to, into *OUT; false when
 * unset or bad (reported, naming DFLT as what is used instead). */
static bool parse_uint(const char *v, unsigned long min, unsigned long max, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || end == v || *end || *v == '-' || n < min || n > max)
        return false;
    *out = n;
    return true;
}

static void report_uint(const char *name, const char *v, unsigned long min, unsigned long max,
                        const char *dflt)
{
    char why[96];
    snprintf(why, sizeof(why), "accepted values: a whole number from %lu to %lu", min, max);
    report_invalid(name, v, why, dflt);
}

static bool read_uint(const char *name, unsigned long min, unsigned long max, unsigned long *out,
                      const char *dflt)
{
    const char *v = getenv(name);
    if (!v)
        return false;
    if (!parse_uint(v, min, max, out)) {
        report_uint(name, v, min, max, dflt);
        return false;
    }
    return true;
}

/* A whole number in [MIN, MAX]; a bad value keeps *OUT. */
static void load_uint(const char *name, unsigned long min, unsigned long max, unsigned long *out)
{
    char dflt[24];
    snprintf(dflt, sizeof(dflt), "%lu", *out);
    read_uint(name, min, max, out, dflt);
}

/* One entry of a VSOCKET_SHM_PEERS list: a numeric uid or a user name. */
static bool parse_peer(const char *name, unsigned *uid)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(name, &end, 10);
    if (*name && *end == '\0' && errno == 0 && n < UINT_MAX) {
        *uid = (unsigned)n;
        return true;
    }
    struct passwd pw, *found = NULL;
    char buf[1024];
    if (getpwnam_r(name, &pw, buf, sizeof(buf), &found) != 0 || !found)
        return false;
    *uid = (unsigned)found->pw_uid;
    return true;
}

int vs_config_parse_peers(const char *value, struct vs_config *c, char *err, size_t errlen)
{
    if (strcmp(value, "any") == 0 || strcmp(value, "same-uid") == 0) {
        c->peers = value[0] == 'a' ? VS_PEERS_ANY : VS_PEERS_SAME_UID;
        return 0;
    }
    char list[512];
    if (snprintf(list, sizeof(list), "%s", value) >= (int)sizeof(list)) {
        snprintf(err, errlen, "too long");
        return -1;
    }
    unsigned count = 0;
    char *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (count == VS_PEER_UIDS_MAX) {
            snprintf(err, errlen, "more than %d users", VS_PEER_UIDS_MAX);
            return -1;
        }
        if (!parse_peer(tok, &c->peer_uids[count])) {
            snprintf(err, errlen, "no such user: '%s'", tok);
            return -1;
        }
        count++;
    }
    if (count == 0) {
        snprintf(err, errlen, "empty list");
        return -1;
    }
    c->peers = VS_PEERS_LIST;
    c->peer_uid_count = count;
    return 0;
}

bool vs_config_peer_allowed(unsigned uid)
{
    if (vs_config.peers == VS_PEERS_ANY || uid == (unsigned)geteuid())
        return true;
    for (unsigned i = 0; vs_config.peers == VS_PEERS_LIST && i < vs_config.peer_uid_count; i++)
        if (vs_config.peer_uids[i] == uid)
            return true;
    return false;
}

static void load_peers(struct vs_config *c)
{
    const char *v = getenv("VSOCKET_SHM_PEERS");
    char err[128];
    if (v && vs_config_parse_peers(v, c, err, sizeof(err)) < 0) {
        vs_warn("VSOCKET_SHM_PEERS='%s': %s; accepted: any, same-uid, or a comma-separated list "
                "of user names and uids. Using the default: any.",
                v, err);
        c->peers = VS_PEERS_ANY;
    }
}

static void load_shm(struct vs_config *c)
{
    load_uint("VSOCKET_POLL_US", 0, VS_POLL_US_MAX, &c->poll_us);
    load_bool("VSOCKET_POLL_CROWDED", &c->poll_crowded);
    load_uint("VSOCKET_SHM_RING_MIN", VS_SHM_RING_LIMIT_MIN, VS_SHM_RING_LIMIT_MAX,
              &c->shm_ring_min);
    read_uint("VSOCKET_SHM_RING_MAX", VS_SHM_RING_LIMIT_MIN, VS_SHM_RING_MAX_LIMIT,
              &c->shm_ring_max, "what the kernel would buffer");
    if (c->shm_ring_max && c->shm_ring_max < c->shm_ring_min) {
        vs_warn("VSOCKET_SHM_RING_MAX (%lu) is below VSOCKET_SHM_RING_MIN (%lu): using %lu for "
                "both.",
                c->shm_ring_max, c->shm_ring_min, c->shm_ring_min);
        c->shm_ring_max = c->shm_ring_min;
    }
    load_uint("VSOCKET_UPGRADE_AFTER_US", 0, VS_UPGRADE_AFTER_US_MAX, &c->upgrade_after_us);
    load_uint("VSOCKET_UPGRADE_AFTER_BYTES", 0, VS_UPGRADE_AFTER_BYTES_MAX,
              &c->upgrade_after_bytes);
    load_peers(c);
}

/* A ring's offsets wrap by masking: its size is a power of two. */
static void ring_pow2(const char *name, unsigned long *v)
{
    unsigned long pow2 = VS_RDMA_RING_MIN;
    while (pow2 < *v)
        pow2 <<= 1;
    if (pow2 != *v) {
        vs_warn("%s (%lu) is not a power of two: using %lu.", name, *v, pow2);
        *v = pow2;
    }
}

static void load_rdma(struct vs_config *c)
{
    load_uint("VSOCKET_RDMA_RING", VS_RDMA_RING_MIN, VS_RDMA_RING_MAX, &c->rdma_ring);
    ring_pow2("VSOCKET_RDMA_RING", &c->rdma_ring);
    load_uint("VSOCKET_RDMA_RING_MAX", VS_RDMA_RING_MIN, VS_RDMA_RING_MAX, &c->rdma_ring_max);
    ring_pow2("VSOCKET_RDMA_RING_MAX", &c->rdma_ring_max);
    load_uint("VSOCKET_RDMA_QP_DEPTH", VS_RDMA_QP_DEPTH_MIN, VS_RDMA_QP_DEPTH_MAX,
              &c->rdma_qp_depth);
    load_uint("VSOCKET_RDMA_INLINE", 0, VS_RDMA_INLINE_MAX, &c->rdma_inline);
    load_uint("VSOCKET_RDMA_PEER_CACHE_S", 0, VS_RDMA_PEER_CACHE_S_MAX, &c->rdma_peer_cache_s);
    load_uint("VSOCKET_RDMA_ZCOPY", 0, VS_RDMA_ZCOPY_MAX, &c->rdma_zcopy);
    load_bool("VSOCKET_RDMA_FORK_LEAVE", &c->rdma_fork_leave);
    load_uint("VSOCKET_RDMA_SPILL_MS", 1, VS_RDMA_SPILL_MS_MAX, &c->rdma_spill_ms);
}

/* Before the log file, which is one of our descriptors; a bad value is
 * reported once the log is in place. The value, or NULL when it is bad. */
static const char *load_fd_floor(struct vs_config *c)
{
    const char *v = getenv("VSOCKET_FD_FLOOR");
    unsigned long n;
    if (!v)
        return NULL;
    if (!parse_uint(v, 0, VS_FD_FLOOR_MAX, &n))
        return v;
    c->fd_floor = (long)n;
    return NULL;
}

void vs_config_load(struct vs_config *c)
{
    vs_config_defaults(c);
    const char *bad_floor = load_fd_floor(c);
    load_log(c);
    if (bad_floor)
        report_uint("VSOCKET_FD_FLOOR", bad_floor, 0, VS_FD_FLOOR_MAX,
                    "half the descriptor limit, at most 1024");
    load_transports(c);
    load_bool("VSOCKET_STATS", &c->stats);
    load_path("VSOCKET_STATS_DIR", c->stats_dir, sizeof(c->stats_dir), "/dev/shm");
    unsigned long stats_max = c->stats_max;
    load_uint("VSOCKET_STATS_MAX", VS_STATS_MAX_MIN, VS_STATS_MAX_MAX, &stats_max);
    c->stats_max = (unsigned)stats_max;
    load_bool("VSOCKET_FOLLOW_EXEC", &c->follow_exec);
    load_shm(c);
    load_rdma(c);
    load_bool("VSOCKET_UDP", &c->udp);
    load_bool("VSOCKET_UDP_SHM", &c->udp_shm);
    load_uint("VSOCKET_UDP_UPGRADE_AFTER_DGRAMS", 1, VS_UDP_UPGRADE_AFTER_MAX,
              &c->udp_upgrade_after);
}
