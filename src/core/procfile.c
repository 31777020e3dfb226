/* procfile.c - reading a small kernel file whole. */
#include "core/procfile.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

ssize_t vs_read_small_file(const char *path, char *buf, size_t len)
{
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || len == 0)
        return -1;
    ssize_t n = syscall(SYS_read, fd, buf, len - 1);
    syscall(SYS_close, fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return n;
}
