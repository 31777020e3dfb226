/* seccomp_child.c - run under `vsocket run --stats=on` (ctest seccomp_child_*).
 *
 * Issue 11, sshd's pre-auth child: a forked child that inherited a live
 * connection (under shm: upgraded) confines itself with a strict seccomp
 * filter, then talks to its peer and exits with exit(0), as sshd's does. The
 * filter allows only the system calls the child makes itself (read, write,
 * sendto, recvfrom, close, exit, exit_group, rt_sigreturn: a blocking recv
 * with SO_RCVTIMEO, no poll); anything else kills the process (SIGSYS), so
 * vsocket must make no system call of its own there: no side-channel
 * message, futex wake-up or statistics file work, not even at exit.
 * Variants: the filter set with prctl(PR_SET_SECCOMP) (sshd) and with
 * seccomp(2) (libseccomp), both before the child touches the socket; and
 * prctl after the child has moved data itself; and the socket in an epoll
 * set made before the filter and waited on under it (epoll_wait allowed:
 * the event must come back with the program's own data). Each child sends 16 KiB,
 * checks their echo, closes and exits 0. Exit 0 if every variant did; 77
 * (skipped) off x86_64 and under AddressSanitizer. */
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "live_conn.h"

/* Off x86_64 the filter would need other numbers; under AddressSanitizer the
 * sanitizer runtime makes system calls of its own at exit (sigaltstack, ...). */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)

#define ALLOW(nr)                                                                                  \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

static struct sock_filter filter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    ALLOW(__NR_read),
    ALLOW(__NR_write),
    ALLOW(__NR_sendto),
    ALLOW(__NR_recvfrom),
    ALLOW(__NR_close),
    ALLOW(__NR_exit_group),
    ALLOW(__NR_exit),
    ALLOW(__NR_rt_sigreturn),
    ALLOW(__NR_epoll_wait),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
};

enum variant { PRCTL, SECCOMP_SYSCALL, PRCTL_AFTER_DATA, EPOLL_SET };
static const char *variant_names[] = {"prctl(PR_SET_SECCOMP)", "seccomp(SECCOMP_SET_MODE_FILTER)",
                                      "prctl after the child moved data",
                                      "epoll set made before the filter"};

#define EPOLL_DATA 0x5eedull

/* Under the filter: a byte sent comes back, and the set made before the
 * filter reports it with the program's data. 0 if so. */
static int epoll_echo(int ep, int c)
{
    struct epoll_event ev;
    char b = 0;
    if (send(c, "x", 1, 0) != 1 || epoll_wait(ep, &ev, 1, 3000) != 1 || ev.data.u64 != EPOLL_DATA ||
        !(ev.events & EPOLLIN) || recv(c, &b, 1, 0) != 1 || b != 'x')
        return -1;
    return 0;
}

static void child(int c, enum variant v)
{
    struct sock_fprog prog = {.len = sizeof(filter) / sizeof(filter[0]), .filter = filter};
    char err[200], msg[300];

    if (v == PRCTL_AFTER_DATA && echo_check(c, c, 4096, 3, err, sizeof(err)) < 0) {
        fprintf(stderr, "seccomp_child %s: before the filter: %s\n", variant_names[v], err);
        exit(1);
    }
    int ep = -1;
    if (v == EPOLL_SET) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EPOLL_DATA};
        ep = epoll_create1(0);
        if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) < 0) {
            perror("seccomp_child: epoll");
            exit(3);
        }
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        (v == SECCOMP_SYSCALL ? syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)
                              : prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) < 0) {
        perror("seccomp_child: installing the filter");
        exit(3);
    }
    /* From here on: only the calls the filter allows (no stdio). */
    if (v == EPOLL_SET && epoll_echo(ep, c) < 0) {
        int len = snprintf(msg, sizeof(msg), "seccomp_child %s: FAILED: no echo through epoll\n",
                           variant_names[v]);
        write(2, msg, (size_t)len);
        exit(1);
    }
    if (echo_check(c, c, 16384, 1, err, sizeof(err)) < 0) {
        int len = snprintf(msg, sizeof(msg), "seccomp_child %s: FAILED: under the filter: %s\n",
                           variant_names[v], err);
        write(2, msg, (size_t)len);
        exit(1);
    }
    close(c);
    exit(0);
}

int main(void)
{
    struct sockaddr_in a;
    int failed = 0, status;
    pid_t peer = echo_peer_start(&a);

    for (enum variant v = PRCTL; v <= EPOLL_SET; v++) {
        int c = echo_connect(&a);
        if (c < 0 || warm_up(c, 1500) < 0) {
            fprintf(stderr, "seccomp_child: cannot set up the connection\n");
            return 2;
        }
        pid_t pid = fork();
        if (pid == 0)
            child(c, v);
        close(c);
        waitpid(pid, &status, 0);
        if (WIFSIGNALED(status)) {
            fprintf(stderr, "seccomp_child %s: FAILED: the child was killed by signal %d (%s)%s\n",
                    variant_names[v], WTERMSIG(status), strsignal(WTERMSIG(status)),
                    WTERMSIG(status) == SIGSYS
                        ? ": it made a system call outside its filter that the program itself "
                          "does not make (strace -f shows which)"
                        : "");
            failed++;
        } else if (WEXITSTATUS(status) != 0) {
            fprintf(stderr, "seccomp_child %s: FAILED: the child exited with %d\n",
                    variant_names[v], WEXITSTATUS(status));
            failed++;
        } else {
            fprintf(stderr, "seccomp_child %s: ok\n", variant_names[v]);
        }
    }
    kill(peer, SIGKILL);
    waitpid(peer, NULL, 0);
    if (failed)
        return 1;
    printf("seccomp_child: ok\n");
    return 0;
}

#else
int main(void)
{
    printf("seccomp_child: skipped: x86_64 only, and not under AddressSanitizer\n");
    return 77;
}
#endif
