/* local_proof.c - proving that the process at the other end of a unix
 * socket holds a given socket (local_proof.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/real.h"
#include "base/syscall.h"
#include "config/config.h"
#include "core/procfile.h"
#include "transport/local_proof.h"

bool vs_local_peer_cred(int chan, struct ucred *cred)
{
    socklen_t len = sizeof(*cred);
    return vs_real.getsockopt(chan, SOL_SOCKET, SO_PEERCRED, cred, &len) == 0 &&
           vs_config_peer_allowed(cred->uid);
}

/* Whether PID (as we number it) lives in our pid namespace. A peer in
 * another one (a container of the same pod or host network) cannot find us
 * under /proc: the kernel hands it pid 0 for us, or a number of its own. */
static bool same_pid_ns(pid_t pid)
{
    char path[64], mine[64], theirs[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
    ssize_t a = readlink("/proc/self/ns/pid", mine, sizeof(mine));
    ssize_t b = pid > 0 ? readlink(path, theirs, sizeof(theirs)) : -1;
    return a > 0 && a == b && memcmp(mine, theirs, (size_t)a) == 0;
}

/* Only a process that may look into our /proc/PID/fd (ours, or one with
 * ptrace read rights over us) can make such a descriptor. Sent to a peer
 * that may not look into ours: another user's, or one in another pid
 * namespace. */
int vs_local_proof_fd(int chan, int fd)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (vs_real.getsockopt(chan, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
        (cred.uid == geteuid() && same_pid_ns(cred.pid)))
        return -1;
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    return (int)vs_syscall(SYS_openat, AT_FDCWD, path, O_PATH | O_CLOEXEC);
}

/* Whether /proc/PID/fdinfo/FD shows a descriptor opened for I/O: an O_PATH
 * one is what anybody allowed to look at /proc/PID/fd can make of someone
 * else's socket, so it proves nothing. */
static bool fd_is_real(pid_t pid, int fd)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/fdinfo/%d", (int)pid, fd);
    if (vs_read_small_file(path, buf, sizeof(buf)) < 0)
        return false;
    const char *flags = strstr(buf, "flags:");
    return flags && !(strtoul(flags + 6, NULL, 8) & O_PATH);
}

/* Whether a failed look into /proc/PID/fd (ERR) means that we may not look
 * (another user's process; with hidepid, invisible; in a pid namespace we do
 * not see, which the kernel reports as pid 0), not that the peer named a
 * descriptor it does not have. A process of our own user that we can see
 * never gets the weaker proof below. */
static bool may_not_look(const struct ucred *cred, int err)
{
    if (cred->pid == 0)
        return true;
    if (cred->uid == geteuid())
        return false;
    if (err == EACCES || err == EPERM)
        return true;
    char path[32];
    snprintf(path, sizeof(path), "/proc/%d", (int)cred->pid);
    return err == ENOENT && access(path, F_OK) < 0;
}

static bool proof_by_fd(int proof, uint64_t want)
{
    struct stat st;
    return proof >= 0 && fstat(proof, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == want;
}

/* Nobody but the holder can pass: /proc/PID/fd of another process yields
 * O_PATH descriptors at most, and passing such a descriptor is not holding
 * the socket. */
bool vs_local_holds(int chan, uint64_t fd_no, int proof, uint64_t want)
{
    struct ucred cred;
    if (!want || !vs_local_peer_cred(chan, &cred) || fd_no > INT_MAX)
        return false;
    char path[64], link[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)cred.pid, (int)fd_no);
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    unsigned long long ino = 0;
    if (n > 0) {
        link[n] = '\0';
        if (sscanf(link, "socket:[%llu]", &ino) != 1)
            ino = 0;
    }
    if (n < 0) {
        int err = errno;
        if (may_not_look(&cred, err))
            return proof_by_fd(proof, want);
        errno = err;
        return false;
    }
    errno = 0;
    return ino == want && fd_is_real(cred.pid, (int)fd_no);
}
