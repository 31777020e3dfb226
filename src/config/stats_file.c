/* stats_file.c - what the statistics writer and reader share. */
#include "core/procfile.h"
#include "config/stats_format.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

uint64_t vs_stats_proc_start_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (vs_read_small_file(path, buf, sizeof(buf)) < 0)
        return 0;
    /* The command name may contain spaces and parentheses: fields are counted
     * from the last ')'. starttime is field 22; field 3 follows ") ". */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++;
    for (int field = 3; field < 22 && p; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

uint32_t vs_stats_pid_ns(pid_t pid)
{
    char path[64];
    if (pid)
        snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
    else
        snprintf(path, sizeof(path), "/proc/self/ns/pid");
    struct stat st;
    return stat(path, &st) == 0 ? (uint32_t)st.st_ino : 0;
}

void vs_stats_path(const char *dir, pid_t pid, uint32_t pid_ns, char *out, size_t outlen)
{
    if (pid_ns == 0 || pid_ns == VS_STATS_INIT_PID_NS)
        snprintf(out, outlen, "%s/%s%d", dir, VS_STATS_FILE_PREFIX, (int)pid);
    else
        snprintf(out, outlen, "%s/%sns%u.%d", dir, VS_STATS_FILE_PREFIX, pid_ns, (int)pid);
}

const char *vs_stats_state_name(unsigned state)
{
    static const char *const names[] = {"open",       "bound",     "listening",
                                        "connecting", "connected", "closed"};
    return state <= VS_STATE_CLOSED ? names[state] : "?";
}
