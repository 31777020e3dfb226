/* fd_spawn.c - run under `vsocket run` (ctest fd_spawn_*).
 *
 * Issue 11, through posix_spawn: glibc's posix_spawn clones and execs
 * inside libc, where vsocket does not see it, and applies the file actions
 * with its own dup2. A program with a live (under shm: upgraded)
 * connection spawns a helper with a socketpair end dup2'd onto N, for
 * N = 3..20, whatever vsocket holds at N in the parent. The helper checks
 * that it has exactly 0, 1, 2, N and the descriptors the test started with
 * (nothing of vsocket's crosses exec), that N is the socketpair (inode,
 * FD_CLOEXEC clear) and that the parent's message arrives on it intact.
 * After each spawn the parent's connection must still echo checksummed
 * data. The connection itself is close-on-exec: a shm socket inherited
 * through posix_spawn is a documented limitation (docs/interposition.md).
 * Exit 0 if every N passed. */
#include <spawn.h>
#include <sys/wait.h>

#include "live_conn.h"

extern char **environ;

static int reader(int n, unsigned long ino, const char *envfds)
{
    char who[32];
    snprintf(who, sizeof(who), "spawned reader N=%d", n);
    return reader_check(who, n, ino, envfds);
}

static int spawn_one(int c, int n, const char *envfds, const int *env, int nenv)
{
    int sp[2], mine[LC_MAX_FDS], fds[LC_MAX_FDS], nfds, status, err;
    char d[200], ns[16], inos[32], msg[64], lib[1024] = "", why[200];
    struct stat st;
    posix_spawn_file_actions_t fa;
    pid_t pid;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0 || fstat(sp[1], &st) < 0) {
        perror("fd_spawn: socketpair");
        return 1;
    }
    memcpy(mine, env, sizeof(int) * (size_t)nenv);
    mine[nenv] = c, mine[nenv + 1] = sp[0], mine[nenv + 2] = sp[1];
    nfds = fd_list(fds, LC_MAX_FDS);
    for (int i = 0, len = 0; i < nfds && len < (int)sizeof(lib) - 1; i++) {
        if (fd_in(fds[i], mine, nenv + 3))
            continue;
        fd_describe(fds[i], d, sizeof(d));
        len +=
            snprintf(lib + len, sizeof(lib) - (size_t)len, " %s%s", d, fds[i] == n ? " <- N" : "");
    }
    fprintf(stderr, "fd_spawn: N=%d: vsocket's descriptors before spawn:%s\n", n,
            lib[0] ? lib : " none");

    snprintf(ns, sizeof(ns), "%d", n);
    snprintf(inos, sizeof(inos), "%lu", (unsigned long)st.st_ino);
    char *argv[] = {"fd_spawn", "--reader", ns, inos, (char *)envfds, NULL};
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sp[1], n); /* sp[1] == n: clears FD_CLOEXEC */
    err = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(sp[1]);
    if (err != 0) {
        fprintf(stderr, "fd_spawn: N=%d: posix_spawn: %s\n", n, strerror(err));
        close(sp[0]);
        return 1;
    }
    int len = snprintf(msg, sizeof(msg), "config for fd %d\n", n);
    send(sp[0], msg, (size_t)len, MSG_NOSIGNAL);
    close(sp[0]);
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "fd_spawn: N=%d: FAILED: the helper was killed by signal %d (%s)\n", n,
                WTERMSIG(status), strsignal(WTERMSIG(status)));
        return 1;
    }
    if (WEXITSTATUS(status) != 0) {
        fprintf(stderr, "fd_spawn: N=%d: FAILED: the helper exited with %d\n", n,
                WEXITSTATUS(status));
        return 1;
    }
    if (echo_check(c, c, 8192, (unsigned)n, why, sizeof(why)) < 0) {
        fprintf(stderr, "fd_spawn: N=%d: FAILED: the parent's connection after the spawn: %s\n", n,
                why);
        fd_dump("fd_spawn", mine, nenv + 1);
        return 1;
    }
    return 0;
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
    int c = echo_connect(&a);
    if (c < 0 || fcntl(c, F_SETFD, FD_CLOEXEC) < 0 || warm_up(c, 1500) < 0) {
        fprintf(stderr, "fd_spawn: cannot set up the connection\n");
        return 2;
    }
    for (int n = 3; n <= 20; n++)
        failed += spawn_one(c, n, env.text, env.fds, env.n);
    close(c);
    kill(peer, SIGKILL);
    waitpid(peer, NULL, 0);
    if (failed) {
        fprintf(stderr, "fd_spawn: %d of 18 descriptor numbers failed\n", failed);
        return 1;
    }
    printf("fd_spawn: ok\n");
    return 0;
}
