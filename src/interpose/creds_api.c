/* creds_api.c - calls that change the process's credentials.
 *
 * The kernel refuses a process every command on an RDMA device file it
 * opened before its credentials changed (even setuid to the same uid
 * makes new credentials), and Soft-RoCE rings its send doorbell through
 * one. rsync's daemon, sshd, a web server's workers change them after
 * accepting. So the transports hear of a change before it happens, while
 * their connections can still leave (transport.h: before_creds). */
#include <errno.h>
#include <grp.h>
#include <stdbool.h>
#include <sys/fsuid.h>
#include <unistd.h>

#include "base/real.h"
#include "transport/transport.h"

/* Runs CALL between the transports' before and after (CHANGED: whether
 * the result R says the credentials changed); returns R with its errno. */
#define CHANGING_CREDS_IF(call, changed)                                                           \
    do {                                                                                           \
        VS_REAL_READY();                                                                           \
        vs_transports_before_creds();                                                              \
        int r = (call);                                                                            \
        int saved_errno = errno;                                                                   \
        vs_transports_after_creds(changed);                                                        \
        errno = saved_errno;                                                                       \
        return r;                                                                                  \
    } while (0)
#define CHANGING_CREDS(call) CHANGING_CREDS_IF(call, r == 0)

VS_EXPORT int setuid(uid_t uid)
{
    CHANGING_CREDS(vs_real.setuid(uid));
}

VS_EXPORT int setgid(gid_t gid)
{
    CHANGING_CREDS(vs_real.setgid(gid));
}

VS_EXPORT int seteuid(uid_t uid)
{
    CHANGING_CREDS(vs_real.seteuid(uid));
}

VS_EXPORT int setegid(gid_t gid)
{
    CHANGING_CREDS(vs_real.setegid(gid));
}

VS_EXPORT int setreuid(uid_t ruid, uid_t euid)
{
    CHANGING_CREDS(vs_real.setreuid(ruid, euid));
}

VS_EXPORT int setregid(gid_t rgid, gid_t egid)
{
    CHANGING_CREDS(vs_real.setregid(rgid, egid));
}

VS_EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid)
{
    CHANGING_CREDS(vs_real.setresuid(ruid, euid, suid));
}

VS_EXPORT int setresgid(gid_t rgid, gid_t egid, gid_t sgid)
{
    CHANGING_CREDS(vs_real.setresgid(rgid, egid, sgid));
}

VS_EXPORT int setgroups(size_t size, const gid_t *list)
{
    CHANGING_CREDS(vs_real.setgroups(size, list));
}

/* libc's initgroups calls its own setgroups, not ours. */
VS_EXPORT int initgroups(const char *user, gid_t group)
{
    CHANGING_CREDS(vs_real.initgroups(user, group));
}

/* setfsuid and setfsgid return the previous id, never an error: whether
 * anything changed is not known, so the device stays retired. */
VS_EXPORT int setfsuid(uid_t uid)
{
    CHANGING_CREDS_IF(vs_real.setfsuid(uid), true);
}

VS_EXPORT int setfsgid(gid_t gid)
{
    CHANGING_CREDS_IF(vs_real.setfsgid(gid), true);
}
