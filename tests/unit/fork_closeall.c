/* fork_closeall.c - run under `vsocket run` (ctest fork_closeall_*); argv[1]
 * is the vsocket tool.
 *
 * A process with live connections forks a child that closes every
 * descriptor from 3 up and execs or exits: with close_range, as Python's
 * subprocess and most spawn code do before exec, or one close() at a time
 * and then a fork of its own, as Ceph's fork_function does. The child's
 * closes take vsocket's side-channel numbers too, but only in the child,
 * which is dropping the connections anyway: the parent's connections must
 * carry on where they were (on shm: `vsocket stat` still shows them there)
 * and move their data intact.
 *
 * Several connections, not one: the child unlinks each from its list of
 * connections, and that list must be the child's alone (issue 19: links
 * kept in the connections' shared pages let a child's close unlink the
 * parent's connections; the next child then tore them down under the
 * parent, and the parent's own close wrote into pages it had unmapped). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "live_conn.h"

#define CONNS 6
#define ROUNDS 6

/* Whether `vsocket stat` shows every connected socket of ours on shm: "shm",
 * or the first line that is not, into OUT. */
static void transport_of(const char *tool, char *out, size_t outlen)
{
    char cmd[1200], line[512];
    int shm = 0;
    snprintf(cmd, sizeof(cmd), "%s stat --pid %d", tool, (int)getpid());
    snprintf(out, outlen, "?");
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    while (fgets(line, sizeof(line), p)) {
        if (!strstr(line, "connected"))
            continue;
        if (strstr(line, " shm "))
            shm++;
        else if (strcmp(out, "?") == 0 || strcmp(out, "shm") == 0)
            snprintf(out, outlen, "%s", line);
    }
    pclose(p);
    if (shm == CONNS && strcmp(out, "?") == 0)
        snprintf(out, outlen, "shm");
}

/* The child: every descriptor from 3 up closed, then exec (even rounds) or,
 * like Ceph's fork_function, a grandchild forked and waited for. */
static void child(int round)
{
    if (round % 2 == 0) {
        close_range(3, ~0U, 0);
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    for (int fd = 3; fd < 4096; fd++)
        close(fd);
    pid_t g = fork();
    if (g == 0)
        _exit(0);
    int status;
    _exit(g > 0 && waitpid(g, &status, 0) == g && WIFEXITED(status) ? 0 : 1);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fork_closeall VSOCKET-TOOL kernel|shm\n");
        return 2;
    }
    struct sockaddr_in a;
    char why[200], before[512], after[512];
    int c[CONNS];
    pid_t peer = echo_peer_start(&a);
    for (int i = 0; i < CONNS; i++) {
        c[i] = echo_connect(&a);
        if (c[i] < 0 || warm_up(c[i], 300) < 0) {
            fprintf(stderr, "fork_closeall: cannot set up connection %d\n", i);
            return 2;
        }
    }
    /* The first connections' set-up may still be under way: a last ping on
     * each until stat shows them all (3 s at most). */
    for (int t = 0; t < 30; t++) {
        transport_of(argv[1], before, sizeof(before));
        if (strcmp(argv[2], "shm") || strcmp(before, "shm") == 0)
            break;
        for (int i = 0; i < CONNS; i++)
            if (warm_up(c[i], 50) < 0)
                return 2;
    }
    for (int round = 0; round < ROUNDS; round++) {
        pid_t pid = fork();
        if (pid == 0)
            child(round);
        int status;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "fork_closeall: the child failed (status %d)\n", status);
            return 1;
        }
        for (int i = 0; i < CONNS; i++) {
            if (echo_check(c[i], c[i], 64 * 1024, (unsigned)(round * CONNS + i), why, sizeof(why)) <
                0) {
                fprintf(stderr, "fork_closeall: round %d: the parent's connection %d: %s\n", round,
                        i, why);
                return 1;
            }
        }
    }
    transport_of(argv[1], after, sizeof(after));
    /* Closing them in the order they were made unlinks each from the middle
     * of the list. */
    for (int i = 0; i < CONNS; i++)
        close(c[i]);
    kill(peer, SIGKILL);
    waitpid(peer, NULL, 0);
    if (strcmp(argv[2], "shm") == 0 && (strcmp(before, "shm") || strcmp(after, "shm"))) {
        fprintf(stderr,
                "fork_closeall: the connections were on '%s' before the children, '%s' after\n",
                before, after);
        return 1;
    }
    return 0;
}
