/* process_api.c - fork, vfork, daemon and the exec family.
 *
 * fork: the child inherits the fd table and the sockets (plain memory) and
 * gets a statistics segment of its own. exec: the new image starts with an
 * empty table and adopts the sockets it inherited on first use; here we only
 * make sure it loads vsocket again. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <linux/seccomp.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/exec_env.h"
#include "interpose/init.h"
#include "interpose/filter.h"
#include "base/real.h"
#include "base/sandbox.h"
#include "transport/transport.h"

VS_EXPORT pid_t fork(void)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.fork());
    /* vs_fork_prepare, _parent and _child run inside (interpose/init.c). */
    pid_t pid = vs_real.fork();
    int saved_errno = errno;
    if (pid < 0)
        vs_transports_fork_failed();
    errno = saved_errno;
    return pid;
}

/* A vfork child shares our memory and must not run our fork handlers on it;
 * a real fork is always a correct vfork (the child may only exec or _exit),
 * at the cost of copying the page tables. But not the libc's fork: it runs
 * the program's atfork handlers, which a vfork never does, and programs
 * count on that. gRPC's child handler starts threads again in the child,
 * which then find their descriptors closed by Python's subprocess (which
 * vforks, then closes every fd before exec) and abort. So _Fork, which
 * runs none, with our handlers around it: the child may take a lock of the
 * libc another thread held (malloc of its arena, stdio), as a vfork child
 * that called it would. */
VS_EXPORT pid_t vfork(void)
{
    VS_REAL_READY();
    if (vs_sandboxed())
        return fork();
    vs_fork_prepare();
    pid_t pid = _Fork();
    int saved_errno = errno;
    if (pid == 0)
        vs_fork_child();
    else
        vs_fork_parent();
    if (pid < 0)
        vs_transports_fork_failed();
    errno = saved_errno;
    return pid;
}

/* glibc's daemon() forks internally, out of our sight: it is redone here
 * with our fork, with the same behaviour. */
VS_EXPORT int daemon(int nochdir, int noclose)
{
    switch (fork()) {
    case -1:
        return -1;
    case 0:
        break;
    default:
        _exit(0);
    }
    if (setsid() < 0)
        return -1;
    if (!nochdir && chdir("/") < 0)
        return -1;
    if (noclose)
        return 0;
    int fd = open("/dev/null", O_RDWR);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISCHR(st.st_mode)) {
        close(fd);
        errno = ENODEV;
        return -1;
    }
    dup2(fd, STDIN_FILENO);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    if (fd > STDERR_FILENO)
        close(fd);
    return 0;
}

/* Runs EXEC with ENVP completed by vs_exec_env_build; returns only on failure. */
#define EXEC_WITH_ENV(envp, exec)                                                                  \
    do {                                                                                           \
        struct vs_exec_env built;                                                                  \
        vs_transports_before_exec();                                                               \
        if (!vs_exec_env_build((envp), &built))                                                    \
            built.env = (char **)(envp), built.preload = NULL;                                     \
        char *const *env = built.env;                                                              \
        int r = (exec);                                                                            \
        int saved_errno = errno;                                                                   \
        vs_transports_exec_failed();                                                               \
        if (built.env != (char **)(envp))                                                          \
            vs_exec_env_release(&built);                                                           \
        errno = saved_errno;                                                                       \
        return r;                                                                                  \
    } while (0)

VS_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.execve(path, argv, envp));
    EXEC_WITH_ENV(envp, vs_real.execve(path, argv, env));
}

VS_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.execvpe(file, argv, envp));
    EXEC_WITH_ENV(envp, vs_real.execvpe(file, argv, env));
}

VS_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.fexecve(fd, argv, envp));
    EXEC_WITH_ENV(envp, vs_real.fexecve(fd, argv, env));
}

VS_EXPORT int execv(const char *path, char *const argv[])
{
    return execve(path, argv, environ);
}

VS_EXPORT int execvp(const char *file, char *const argv[])
{
    return execvpe(file, argv, environ);
}

/* The list forms collect their arguments, then use the vector forms. */
#define COLLECT_ARGS(first, argv)                                                                  \
    size_t argc = 1;                                                                               \
    va_list ap;                                                                                    \
    va_start(ap, first);                                                                           \
    while (va_arg(ap, char *))                                                                     \
        argc++;                                                                                    \
    va_end(ap);                                                                                    \
    char *argv[argc + 1];                                                                          \
    argv[0] = (char *)(first);                                                                     \
    va_start(ap, first);                                                                           \
    for (size_t i = 1; i <= argc; i++)                                                             \
    argv[i] = va_arg(ap, char *)

VS_EXPORT int execl(const char *path, const char *arg, ...)
{
    COLLECT_ARGS(arg, argv);
    va_end(ap);
    return execve(path, argv, environ);
}

VS_EXPORT int execlp(const char *file, const char *arg, ...)
{
    COLLECT_ARGS(arg, argv);
    va_end(ap);
    return execvpe(file, argv, environ);
}

VS_EXPORT int execle(const char *path, const char *arg, ...)
{
    COLLECT_ARGS(arg, argv);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}

/* A seccomp filter is about to go in: vsocket steps aside first, while it
 * may still make calls of its own (base/sandbox.h, interpose/filter.c). A failed installation
 * gives the process back to us. */
#define INSTALL_FILTER(installs, positive_ok, call)                                                \
    do {                                                                                           \
        bool entered = (installs) && vs_sandbox_enter();                                           \
        long r = (call);                                                                           \
        /* seccomp with TSYNC fails with a thread id > 0; with NEW_LISTENER                        \
         * it succeeds with a descriptor */                                                        \
        if ((r < 0 || (r > 0 && !(positive_ok))) && entered) {                                     \
            int saved_errno = errno;                                                               \
            vs_sandbox_enter_failed();                                                             \
            errno = saved_errno;                                                                   \
        }                                                                                          \
        return r;                                                                                  \
    } while (0)

static bool seccomp_installs(unsigned long op)
{
    return op == SECCOMP_SET_MODE_STRICT || op == SECCOMP_SET_MODE_FILTER;
}

/* prctl's and syscall's further arguments are read as the kernel takes
 * them: whole registers, however many the caller passed. */
VS_EXPORT int prctl(int option, ...)
{
    VS_REAL_READY();
    unsigned long a[4];
    va_list ap;
    va_start(ap, option);
    for (int i = 0; i < 4; i++)
        a[i] = va_arg(ap, unsigned long);
    va_end(ap);
    INSTALL_FILTER(option == PR_SET_SECCOMP, false, vs_real.prctl(option, a[0], a[1], a[2], a[3]));
}

/* Raw calls that change credentials (libcap's capset, programs that set
 * ids with syscall): the transports hear of them as of setuid
 * (creds_api.c). */
static bool changes_creds(long number)
{
    switch (number) {
    case SYS_setuid:
    case SYS_setgid:
    case SYS_setreuid:
    case SYS_setregid:
    case SYS_setresuid:
    case SYS_setresgid:
    case SYS_setfsuid:
    case SYS_setfsgid:
    case SYS_setgroups:
    case SYS_capset:
        return true;
    default:
        return false;
    }
}

/* libseccomp and most runtimes install filters with syscall(SYS_seccomp).
 * libvsocket's own raw system calls do not come here: a plain syscall()
 * in the library would (we are first in the lookup order), so they go to
 * libc's through vs_syscall (base/syscall.h). */
VS_EXPORT long syscall(long number, ...)
{
    VS_REAL_READY();
    long a[6];
    va_list ap;
    va_start(ap, number);
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (changes_creds(number)) {
        vs_transports_before_creds();
        long r = vs_real.syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
        int saved_errno = errno;
        vs_transports_after_creds(r >= 0); /* setfsuid: the previous id */
        errno = saved_errno;
        return r;
    }
    bool installs = (number == SYS_seccomp && seccomp_installs((unsigned long)a[0])) ||
                    (number == SYS_prctl && a[0] == PR_SET_SECCOMP);
    bool listener = number == SYS_seccomp && (a[1] & SECCOMP_FILTER_FLAG_NEW_LISTENER);
    INSTALL_FILTER(installs, listener, vs_real.syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]));
}
