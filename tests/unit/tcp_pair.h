/* tcp_pair.h - a connected TCP pair over IPv4 loopback, for tests. */
#ifndef VSOCKET_TCP_PAIR_H
#define VSOCKET_TCP_PAIR_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

/* *A connects, *B is the accepted end. */
static void tcp_pair(int *a, int *b)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    CHECK_EQ(bind(l, (void *)&sin, sizeof(sin)), 0);
    CHECK_EQ(listen(l, 1), 0);
    CHECK_EQ(getsockname(l, (void *)&sin, &len), 0);
    *a = socket(AF_INET, SOCK_STREAM, 0);
    CHECK_EQ(connect(*a, (void *)&sin, sizeof(sin)), 0);
    *b = accept(l, NULL, NULL);
    CHECK(*b >= 0);
    close(l);
}

#endif
