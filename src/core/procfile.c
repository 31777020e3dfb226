/* procfile.c - reading a small kernel file whole. */
#include "core/procfile.h"
#include "base/syscall.h"

#include <fcntl.h>
#include <unistd.h>

ssize_t vs_read_small_file(const char *path, char *buf, size_t len)
{
    int fd = (int)vs_syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || len == 0)
        return -1;
    ssize_t n = vs_syscall(SYS_read, fd, buf, len - 1);
    vs_syscall(SYS_close, fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return n;
}
