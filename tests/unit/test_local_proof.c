/* test_local_proof.c - transport/local_proof.c: the process at the other
 * end of a unix channel holds a socket when its /proc/PID/fd says so; a
 * descriptor it does not have (any more) fails with ENOENT, which the shm
 * handshake reports as peer-closed; another socket, or an O_PATH
 * descriptor of the right one, fails otherwise. The channel is a
 * socketpair, so the kernel names this very process as the peer. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include "check.h"
#include "tcp_pair.h"
#include "transport/local_proof.h"

int main(void)
{
    int ch[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ch), 0);
    int a, b;
    tcp_pair(&a, &b);
    struct stat st;
    CHECK_EQ(fstat(a, &st), 0);
    uint64_t want = st.st_ino;

    CHECK(vs_local_holds(ch[0], (uint64_t)a, -1, want));

    errno = 0;
    CHECK(!vs_local_holds(ch[0], (uint64_t)b, -1, want)); /* another socket */
    CHECK(errno != ENOENT);

    int gone = dup(a);
    CHECK(gone >= 0);
    close(gone);
    errno = 0;
    CHECK(!vs_local_holds(ch[0], (uint64_t)gone, -1, want)); /* closed meanwhile */
    CHECK_EQ(errno, ENOENT);

    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", a);
    int opath = open(path, O_PATH | O_CLOEXEC);
    CHECK(opath >= 0);
    CHECK(!vs_local_holds(ch[0], (uint64_t)opath, -1, want)); /* not held for I/O */
    CHECK(!vs_local_holds(ch[0], (uint64_t)1 << 40, -1, want));
    CHECK(!vs_local_holds(ch[0], (uint64_t)a, -1, 0));

    /* Same user, same pid namespace: we may look, so no O_PATH proof. */
    CHECK_EQ(vs_local_proof_fd(ch[0], a), -1);

    close(opath);
    close(a);
    close(b);
    close(ch[0]);
    close(ch[1]);
    return check_finish("test_local_proof");
}
