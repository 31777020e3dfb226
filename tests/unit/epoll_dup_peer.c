/* epoll_dup_peer.c - run under `vsocket run` (ctest epoll_dup_peer).
 *
 * A connected socket and its dup sit in one epoll set; the program deletes
 * the first, then the peer's first bytes after the upgrade arrive. With the
 * shm transport the two records share one kernel registration of the side
 * channel, and the peer's SWITCH message wakes the deleted (dormant) one:
 * the dup must still report both messages. Exit 0 if it did. */
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void serve(int listener)
{
    int c = accept(listener, NULL, NULL);
    char b;
    if (c < 0 || send(c, "x", 1, 0) != 1 || recv(c, &b, 1, 0) != 1)
        _exit(1);
    pause_ms(300);
    send(c, "hello", 5, 0);
    pause_ms(300);
    send(c, "again", 5, 0);
    pause_ms(10000);
    _exit(0);
}

int main(void)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (l < 0 || bind(l, (struct sockaddr *)&a, al) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) < 0) {
        perror("epoll_dup_peer: listener");
        return 2;
    }
    pid_t server = fork();
    if (server == 0)
        serve(l);
    close(l);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    char b;
    if (connect(s, (struct sockaddr *)&a, al) < 0 || recv(s, &b, 1, 0) != 1 ||
        send(s, "y", 1, 0) != 1) {
        perror("epoll_dup_peer: client");
        return 2;
    }
    pause_ms(100);
    int d = dup(s), ep = epoll_create1(0);
    struct epoll_event e = {.events = EPOLLIN, .data.fd = s};
    epoll_ctl(ep, EPOLL_CTL_ADD, s, &e);
    e.data.fd = d;
    epoll_ctl(ep, EPOLL_CTL_ADD, d, &e);
    struct epoll_event ev[4];
    for (int i = 0; i < 5; i++)
        epoll_wait(ep, ev, 4, 2);
    epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL);
    char got[32] = "";
    size_t have = 0;
    for (int round = 0; round < 4 && have < 10; round++) {
        int n = epoll_wait(ep, ev, 4, 15000); /* the peer's next send; long: a hang only */
        for (int i = 0; i < n; i++) {
            ssize_t r =
                ev[i].data.fd == d ? recv(d, got + have, sizeof(got) - 1 - have, MSG_DONTWAIT) : 0;
            if (r > 0)
                have += (size_t)r;
        }
    }
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
    got[have] = '\0';
    if (strcmp(got, "helloagain") != 0) {
        fprintf(stderr, "epoll_dup_peer: the dup reported '%s', want 'helloagain'\n", got);
        return 1;
    }
    printf("epoll_dup_peer: ok\n");
    return 0;
}
