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

/* Only a process that may look into our /proc/PID/fd (ours, or one with
 * ptrace read rights over us) can make such a descriptor. */
int vs_local_proof_fd(int chan, int fd)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (vs_real.getsockopt(chan, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid == geteuid())
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
 * (another user's process; with hidepid, invisible), not that the peer
 * named a descriptor it does not have. A process of our own user never
 * gets the weaker proof below. */
static bool may_not_look(const struct ucred *cred, int err)
{
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
    if (n < 0 && may_not_look(&cred, errno))
        return proof_by_fd(proof, want);
    return ino == want && fd_is_real(cred.pid, (int)fd_no);
}
