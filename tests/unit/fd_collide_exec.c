/* fd_collide_exec.c - run under `vsocket run` (ctest fd_collide_exec_*).
 *
 * The sshd pattern (issue 11): a child forked per connection puts the
 * connection on fds 0 and 1, dup2s a socketpair onto a fixed number (sshd:
 * 5) and execs itself, and the new image reads its configuration from that
 * number. vsocket holds descriptors of its own for an upgraded connection
 * (the side channel) at low numbers; the program may take any number, and
 * what vsocket does before exec must not touch the program's descriptor
 * that now has it.
 *
 * For N = 3..20: connect to an echo peer and move data (under shm the
 * connection is then upgraded), fork; the child lists what vsocket holds,
 * puts the connection on 0/1 and a socketpair end on N, execs
 * `fd_collide_exec --reader N INODE ENVFDS`. The reader checks that it has
 * exactly the descriptors it was given (0, 1, 2, N and those the test
 * started with: nothing of vsocket's leaks across exec), that N is the
 * socketpair (same inode, FD_CLOEXEC clear), that the parent's message
 * arrives on it intact, and that the connection on 0/1 still echoes
 * checksummed data. Exit 0 if every N passed. */
#include <sys/wait.h>

#include "live_conn.h"

#define WARM_MS 400 /* the upgrade takes a few ms; 18 rounds must stay short */

static int reader(int n, unsigned long ino, const char *envfds)
{
    char who[32], err[200];
    snprintf(who, sizeof(who), "reader N=%d", n);
    int failed = reader_check(who, n, ino, envfds);
    if (echo_check(0, 1, 16384, (unsigned)n, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s: the connection on fds 0/1 after exec: %s\n", who, err);
        failed = 1;
    }
    return failed;
}

/* The forked child: the sshd steps, then exec. */
static void child(int c, int sp[2], int n, const char *envfds, const int *env, int nenv)
{
    int mine[LC_MAX_FDS], nmine = 0, fds[LC_MAX_FDS], nfds = fd_list(fds, LC_MAX_FDS);
    char d[200], ns[16], inos[32], lib[1024] = "";
    struct stat st;

    memcpy(mine, env, sizeof(int) * (size_t)nenv);
    nmine = nenv;
    mine[nmine++] = c, mine[nmine++] = sp[0], mine[nmine++] = sp[1];
    for (int i = 0, len = 0; i < nfds && len < (int)sizeof(lib) - 1; i++) {
        if (fd_in(fds[i], mine, nmine))
            continue;
        fd_describe(fds[i], d, sizeof(d));
        len +=
            snprintf(lib + len, sizeof(lib) - (size_t)len, " %s%s", d, fds[i] == n ? " <- N" : "");
    }
    fprintf(stderr, "fd_collide_exec: N=%d: vsocket's descriptors before dup2:%s\n", n,
            lib[0] ? lib : " none");

    fstat(sp[1], &st);
    if (dup2(c, 0) < 0 || dup2(c, 1) < 0) {
        perror("fd_collide_exec: dup2 onto 0/1");
        _exit(3);
    }
    if (c > 2)
        close(c);
    close(sp[0]);
    if (sp[1] != n && (dup2(sp[1], n) < 0 || close(sp[1]) < 0)) {
        perror("fd_collide_exec: dup2 onto N");
        _exit(3);
    }
    fcntl(n, F_SETFD, 0);
    snprintf(ns, sizeof(ns), "%d", n);
    snprintf(inos, sizeof(inos), "%lu", (unsigned long)st.st_ino);
    char *argv[] = {"fd_collide_exec", "--reader", ns, inos, (char *)envfds, NULL};
    execv("/proc/self/exe", argv);
    perror("fd_collide_exec: execv");
    _exit(127);
}

static int run_one(int n, const struct sockaddr_in *a, const char *envfds, const int *env, int nenv)
{
    int c = echo_connect(a), sp[2], status;
    char msg[64];

    if (c < 0 || warm_up(c, WARM_MS) < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sp) < 0) {
        fprintf(stderr, "fd_collide_exec: N=%d: cannot set up the connection\n", n);
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0)
        child(c, sp, n, envfds, env, nenv);
    close(c);
    close(sp[1]);
    int len = snprintf(msg, sizeof(msg), "config for fd %d\n", n);
    send(sp[0], msg, (size_t)len, MSG_NOSIGNAL);
    close(sp[0]);
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFSIGNALED(status))
        fprintf(stderr, "fd_collide_exec: N=%d: FAILED: the child was killed by signal %d (%s)\n",
                n, WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        fprintf(stderr, "fd_collide_exec: N=%d: FAILED: the child exited with %d\n", n,
                WEXITSTATUS(status));
    return 1;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--reader") == 0)
        return reader(atoi(argv[2]), strtoul(argv[3], NULL, 10), argv[4]);

    struct lc_env env;
    struct sockaddr_in a;
    int failed = 0;
    lc_env_capture(&env);

    pid_t peer = echo_peer_start(&a);
    for (int n = 3; n <= 20; n++)
        failed += run_one(n, &a, env.text, env.fds, env.n);
    kill(peer, SIGKILL);
    waitpid(peer, NULL, 0);
    if (failed) {
        fprintf(stderr, "fd_collide_exec: %d of 18 descriptor numbers failed\n", failed);
        return 1;
    }
    printf("fd_collide_exec: ok\n");
    return 0;
}
