/* fork_closeall.c - run under `vsocket run` (ctest fork_closeall_*); argv[1]
 * is the vsocket tool.
 *
 * A process with a live connection forks a child that closes every
 * descriptor from 3 up (close_range, as Python's subprocess and most spawn
 * code do before exec) and execs. The child's close_range takes vsocket's
 * side-channel numbers too, but only in the child, which is dropping the
 * connection anyway: the parent's connection must carry on where it was
 * (on shm: `vsocket stat` still shows it there) and move its data intact. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "live_conn.h"

/* The transport `vsocket stat` shows for our connection, into OUT. */
static void transport_of(const char *tool, char *out, size_t outlen)
{
    char cmd[1200], line[512];
    snprintf(cmd, sizeof(cmd), "%s stat --pid %d", tool, (int)getpid());
    snprintf(out, outlen, "?");
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    while (fgets(line, sizeof(line), p))
        if (strstr(line, "connected"))
            snprintf(out, outlen, "%s", strstr(line, " shm ") ? "shm" : line);
    pclose(p);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fork_closeall VSOCKET-TOOL kernel|shm\n");
        return 2;
    }
    struct sockaddr_in a;
    char why[200], before[512], after[512];
    pid_t peer = echo_peer_start(&a);
    int c = echo_connect(&a);
    if (c < 0 || warm_up(c, 1500) < 0) {
        fprintf(stderr, "fork_closeall: cannot set up the connection\n");
        return 2;
    }
    transport_of(argv[1], before, sizeof(before));
    for (int round = 0; round < 5; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            close_range(3, ~0U, 0);
            execl("/bin/true", "true", (char *)NULL);
            _exit(127);
        }
        int status;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "fork_closeall: the child failed (status %d)\n", status);
            return 1;
        }
        if (echo_check(c, c, 256 * 1024, (unsigned)round, why, sizeof(why)) < 0) {
            fprintf(stderr, "fork_closeall: round %d: the parent's connection: %s\n", round, why);
            return 1;
        }
    }
    transport_of(argv[1], after, sizeof(after));
    kill(peer, SIGKILL);
    waitpid(peer, NULL, 0);
    if (strcmp(argv[2], "shm") == 0 && (strcmp(before, "shm") || strcmp(after, "shm"))) {
        fprintf(stderr,
                "fork_closeall: the connection was on '%s' before the children, '%s' after\n",
                before, after);
        return 1;
    }
    return 0;
}
