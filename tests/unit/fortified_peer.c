/* fortified_peer.c - run under `vsocket run`: a program built with
 * _FORTIFY_SOURCE reaches vsocket through glibc's __*_chk entry points, and
 * its traffic shows in its own statistics segment. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tcp_pair.h"
#include "config/stats_format.h"

/* Whether SYMBOL resolves to vsocket. In a sanitizer build the ASan runtime
 * is preloaded first and intercepts some calls itself before passing them on
 * to us (the statistics check below proves they arrive). */
static int from_vsocket(const char *symbol)
{
    Dl_info info;
    void *p = dlsym(RTLD_DEFAULT, symbol);
    if (!p || !dladdr(p, &info))
        return 0;
    const char *preload = getenv("LD_PRELOAD");
    return strstr(info.dli_fname, "libvsocket") != NULL ||
           (preload && strstr(preload, "libasan") && strstr(info.dli_fname, "libasan"));
}

int main(void)
{
    CHECK(from_vsocket("__read_chk"));
    CHECK(from_vsocket("__recv_chk"));
    CHECK(from_vsocket("__poll_chk"));
    CHECK(from_vsocket("recvmmsg"));
    CHECK(from_vsocket("epoll_pwait"));

    int a, b;
    tcp_pair(&a, &b);
    CHECK_EQ(write(a, "0123456789", 10), 10);

    /* With -D_FORTIFY_SOURCE these become __poll_chk, __recv_chk, __read_chk. */
    struct pollfd pfd = {.fd = b, .events = POLLIN};
    CHECK_EQ(poll(&pfd, 1, 5000), 1);
    char buf[4];
    CHECK_EQ(recv(b, buf, sizeof(buf), 0), 4);
    CHECK_EQ(read(b, buf, sizeof(buf)), 4);

    /* Our own statistics: b received 8 bytes in 2 calls. */
    const char *dir = getenv("VSOCKET_STATS_DIR");
    char path[512];
    snprintf(path, sizeof(path), "%s/%s%d", dir ? dir : "/dev/shm", VS_STATS_FILE_PREFIX,
             (int)getpid());
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0) {
        const struct vs_stats_header *h =
            mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        const struct vs_stats_record *r = (const void *)(h + 1);
        int found = 0;
        for (unsigned i = 0; i < h->high_water; i++)
            if (r[i].fd == b && r[i].use == VS_REC_LIVE) {
                found = 1;
                CHECK_EQ(r[i].rx_bytes, 8);
                CHECK_EQ(r[i].rx_msgs, 2);
                CHECK_EQ(r[i].state, VS_STATE_CONNECTED);
            }
        CHECK(found);
        close(fd);
    }
    close(a), close(b);
    return check_finish("fortified_peer");
}
