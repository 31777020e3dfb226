/* log.c - levelled logging. */
#include "config/log.h"

#include "core/ownfd.h"
#include "base/syscall.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum vs_log_level vs_log_level = VS_LOG_WARN;
static int log_fd = 2;

static const char *const level_names[] = {"none", "error", "warn", "info", "debug", "trace"};

int vs_log_level_by_name(const char *name)
{
    for (int i = 0; i <= VS_LOG_TRACE; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

const char *vs_log_level_name(enum vs_log_level level)
{
    return level <= VS_LOG_TRACE ? level_names[level] : "?";
}

/* Expands "%p" to the pid so that every process of a tree can log apart. */
static void expand_path(const char *path, char *out, size_t outlen)
{
    size_t o = 0;
    for (const char *p = path; *p && o + 1 < outlen; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            o += (size_t)snprintf(out + o, outlen - o, "%d", (int)getpid());
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o < outlen ? o : outlen - 1] = '\0';
}

/* The program closed the log file's number (a daemon closing everything):
 * no line may reach whatever it opens there next. */
static void log_fd_lost(void *owner, int fd, unsigned first, unsigned last)
{
    (void)owner;
    (void)fd;
    (void)first;
    (void)last;
    __atomic_store_n(&log_fd, -1, __ATOMIC_RELAXED);
}

int vs_log_open(const char *path)
{
    if (!path || !*path) {
        log_fd = 2;
        return 0;
    }
    char expanded[4096];
    expand_path(path, expanded, sizeof(expanded));
    /* A raw syscall: open() is not interposed, but keep logging independent
     * of libc state. Close-on-exec: the file must not leak into exec'd
     * programs; and out of the program's way (core/ownfd.h). */
    int fd = (int)vs_syscall(SYS_openat, AT_FDCWD, expanded,
                             O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    log_fd = vs_ownfd_take(fd, &log_fd, log_fd_lost);
    return 0;
}

void vs_log_write(enum vs_log_level level, const char *fmt, ...)
{
    int fd = __atomic_load_n(&log_fd, __ATOMIC_RELAXED);
    if (fd < 0)
        return;
    int saved_errno = errno;
    char line[1024];
    int n =
        snprintf(line, sizeof(line), "vsocket[%d] %s: ", (int)getpid(), vs_log_level_name(level));
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    vs_syscall(SYS_write, fd, line, (size_t)n);
    errno = saved_errno;
}
