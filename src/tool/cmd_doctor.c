/* cmd_doctor.c - `vsocket doctor`: what this host offers each transport,
 * and what is missing; `vsocket doctor PROGRAM`: whether vsocket can see
 * PROGRAM's sockets, why, and what to do if not. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "core/transport_id.h"
#include "tool/doctor_rdma.h"
#include "tool/exe.h"
#include "tool/tool.h"

static int missing;

static void usage(FILE *out)
{
    fputs("usage: vsocket doctor [--rdma | PROGRAM]\n"
          "\n"
          "Shows what this host offers vsocket: the transports in this build, whether RDMA\n"
          "can be used (devices, ports, GIDs, device access, locked memory, libraries),\n"
          "shared-memory limits, kernel features, and a list of what is missing. Each RDMA\n"
          "check prints OK, WARN (usable, but limited) or PROBLEM (not usable until fixed,\n"
          "with what to do), then \"rdma: usable (...)\" or \"rdma: not usable: REASON\".\n"
          "When RDMA is usable, the UD checks follow (for UDP over RDMA: MTU, queue limits,\n"
          "inline data, rdma_cm UDP listen, locked memory, a loopback self-test, run in a\n"
          "child process killed after 60 s), then \"ud: usable (...)\" or \"ud: not usable:\n"
          "REASON\"; they do not change the exit code.\n"
          "\n"
          "  --rdma   only the RDMA section\n"
          "\n"
          "With PROGRAM (looked up in PATH like `vsocket run`), examines that program\n"
          "instead: what kind of executable it is, whether vsocket can see its sockets, and\n"
          "what to do if not. vsocket cannot see the sockets of Go programs (the Go runtime\n"
          "makes system calls without libc) nor of statically linked ones (no dynamic loader,\n"
          "so no LD_PRELOAD); they run unchanged, unaccelerated.\n"
          "\n"
          "Exit codes: 0 nothing missing, 4 something missing (listed; RDMA not usable\n"
          "counts), 2 usage error. With --rdma: 0 RDMA usable (WARN lines allowed), 4 not\n"
          "usable. With PROGRAM: 0 nothing found that keeps vsocket out, 4 vsocket cannot\n"
          "see its sockets, 126 PROGRAM not executable or not readable, 127 PROGRAM not\n"
          "found. docs/doctor.md explains every line.\n",
          out);
}

static void report_missing(const char *what)
{
    printf("  MISSING: %s\n", what);
    missing++;
}

static void check_memory(void)
{
    printf("Shared memory and limits:\n");
    struct statvfs vfs;
    if (statvfs("/dev/shm", &vfs) == 0)
        printf("  /dev/shm: %.1f MiB free of %.1f MiB\n",
               (double)vfs.f_bavail * vfs.f_frsize / 1048576.0,
               (double)vfs.f_blocks * vfs.f_frsize / 1048576.0);
    else
        report_missing("/dev/shm is not mounted: statistics need VSOCKET_STATS_DIR elsewhere");
    int fd = memfd_create("vsocket-doctor", MFD_CLOEXEC);
    if (fd >= 0) {
        printf("  memfd_create: available\n");
        close(fd);
    } else {
        report_missing("memfd_create is not available: the shm transport needs it");
    }
    /* RLIMIT_MEMLOCK is the RDMA section's. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        printf("  open files (RLIMIT_NOFILE): %llu\n", (unsigned long long)rl.rlim_cur);
}

static void check_kernel(void)
{
    struct utsname u;
    printf("Kernel:\n");
    if (uname(&u) == 0)
        printf("  %s %s %s\n", u.sysname, u.release, u.machine);
}

static void check_build(void)
{
    printf("This build (vsocket %s):\n", VSOCKET_VERSION);
    for (int t = 0; t < VS_TRANSPORT_COUNT; t++)
        printf("  transport %-6s %s\n", vs_transport_name((enum vs_transport)t),
               vs_transport_built((enum vs_transport)t) ? "built" : "not built yet");
}

/* The dynamic loader's name tells the C library: glibc's are ld-linux*.so
 * and ld64.so (ppc64, s390x); musl's is ld-musl-ARCH.so.1. */
static bool glibc_loader(const char *interp)
{
    const char *base = strrchr(interp, '/');
    base = base ? base + 1 : interp;
    return strncmp(base, "ld-linux", 8) == 0 || strncmp(base, "ld64.so", 7) == 0;
}

static const char *privileged_kind(const struct vs_exe *exe)
{
    return exe->file_caps ? "a program with file capabilities" : "set-user-ID or set-group-ID";
}

/* Returns the exit code. */
static int explain_dynamic(const struct vs_exe *exe)
{
    printf("  kind: a dynamically linked program (64-bit ELF), interpreter %s%s\n", exe->interp,
           glibc_loader(exe->interp) ? " (glibc)" : "");
    if (exe->secure) {
        /* The loader then runs in secure mode (AT_SECURE): it ignores
         * LD_PRELOAD entries with a slash, which ours has. */
        printf("  vsocket: NOT LOADED when you run it: it is %s, so it runs with\n"
               "    privileges other than yours, and the loader then ignores LD_PRELOAD (secure\n"
               "    mode). It runs unchanged, over kernel TCP, unaccelerated; so do the programs\n"
               "    it starts, unless they are given LD_PRELOAD again.\n",
               privileged_kind(exe));
        return VS_EXIT_MISSING;
    }
    printf("  vsocket: can interpose: the loader loads vsocket first (LD_PRELOAD) and the\n"
           "    program's socket calls go through libc. While it runs, `vsocket stat` shows each\n"
           "    socket's transport; calls that bypass libc (raw syscall(), io_uring) are listed\n"
           "    in docs/interposition.md.\n");
    if (!glibc_loader(exe->interp))
        printf("  note: its loader is not glibc's; vsocket is built against glibc and may fail\n"
               "    to load into it.\n");
    if (exe->setid || exe->file_caps)
        printf("  note: it is %s: run by a user other than its owner (or one\n"
               "    without those capabilities) it runs with other privileges, and then the\n"
               "    loader ignores LD_PRELOAD and vsocket is not loaded.\n",
               privileged_kind(exe));
    return VS_EXIT_OK;
}

static void explain_go(const struct vs_exe *exe)
{
    if (exe->interp[0])
        printf("  kind: a Go program (64-bit ELF), dynamically linked, interpreter %s\n",
               exe->interp);
    else
        printf("  kind: a Go program (64-bit ELF), statically linked\n");
    printf("  vsocket: cannot see its sockets. The Go runtime makes its system calls itself,\n"
           "    without libc, even in a dynamically linked program: vsocket may be loaded, but\n"
           "    the libc functions it replaces are never called for Go's sockets.\n");
    printf("  what to do: nothing at the libc level. It runs unchanged, over kernel TCP,\n"
           "    unaccelerated; programs it starts get vsocket if they are dynamically linked.\n");
}

static void explain_static(void)
{
    printf("  kind: a statically linked program (64-bit ELF, no interpreter)\n");
    printf("  vsocket: cannot be loaded into it: LD_PRELOAD is read by the dynamic loader,\n"
           "    and a static program has none, so vsocket never sees its sockets.\n");
    printf("  what to do: relink it dynamically (without -static). Until then it runs\n"
           "    unchanged, over kernel TCP, unaccelerated.\n");
}

/* What vsocket can do for a program of EXE's kind. Returns the exit code. */
static int explain(const struct vs_exe *exe)
{
    switch (exe->kind) {
    case VS_EXE_DYNAMIC:
        return explain_dynamic(exe);
    case VS_EXE_GO:
        explain_go(exe);
        return VS_EXIT_MISSING;
    case VS_EXE_STATIC:
        explain_static();
        return VS_EXIT_MISSING;
    case VS_EXE_LOADER:
        printf("  kind: a shared object without interpreter, such as the dynamic loader run\n"
               "    directly\n"
               "  vsocket: the loader honours LD_PRELOAD for the program it runs: ask `vsocket\n"
               "    doctor` about that program.\n");
        return VS_EXIT_OK;
    case VS_EXE_SCRIPT:
        printf("  kind: a #! script whose interpreter is a #! script too: not examined\n");
        return VS_EXIT_OK;
    default:
        printf("  kind: %s\n"
               "  vsocket: cannot tell (it reads 64-bit little-endian ELF headers and #! lines).\n"
               "    Try it: while it runs under `vsocket run`, `vsocket stat` lists the sockets\n"
               "    vsocket sees.\n",
               exe->unknown);
        return VS_EXIT_OK;
    }
}

/* A #! script is as reachable as its interpreter (one level deep). */
static int explain_script(const struct vs_exe *script)
{
    struct vs_exe interp;
    printf("  script: a #! script run by %s, which is examined below\n", script->interp);
    if (vs_exe_inspect(script->interp, &interp) < 0) {
        printf("  cannot read %s: %s\n", script->interp, strerror(errno));
        return VS_EXIT_OK;
    }
    return explain(&interp);
}

static int doctor_program(const char *arg)
{
    char path[PATH_MAX];
    struct vs_exe exe;
    if (vs_exe_resolve(arg, path, sizeof(path)) < 0) {
        int e = errno;
        bool searched = strchr(arg, '/') == NULL;
        fprintf(stderr, "vsocket doctor: %s: %s\n", arg,
                e == ENOENT && searched ? "command not found" : strerror(e));
        return e == ENOENT ? VS_EXIT_NOT_FOUND : VS_EXIT_NOT_EXECUTABLE;
    }
    if (vs_exe_inspect(path, &exe) < 0) {
        fprintf(stderr, "vsocket doctor: %s: cannot read it: %s\n", path, strerror(errno));
        return VS_EXIT_NOT_EXECUTABLE;
    }
    printf("Program %s:\n", path);
    if (exe.kind == VS_EXE_SCRIPT)
        return explain_script(&exe);
    return explain(&exe);
}

/* The RDMA section alone: for scripts asking "can this host do RDMA?". */
static int doctor_rdma_only(void)
{
    return vs_doctor_rdma() ? VS_EXIT_MISSING : VS_EXIT_OK;
}

static int doctor_host(void)
{
    check_build();
    int rdma_problems = vs_doctor_rdma();
    check_memory();
    check_kernel();
    if (missing || rdma_problems) {
        int n = missing + rdma_problems;
        printf("%d thing%s missing (see MISSING and PROBLEM above).\n", n, n == 1 ? "" : "s");
        return VS_EXIT_MISSING;
    }
    printf("Nothing missing.\n");
    return VS_EXIT_OK;
}

int cmd_doctor(int argc, char **argv)
{
    const char *program = NULL;
    bool rdma = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return VS_EXIT_OK;
        }
        if (strcmp(argv[i], "--rdma") == 0) {
            rdma = true;
            continue;
        }
        if (argv[i][0] == '-') {
            fprintf(stderr, "vsocket doctor: unknown argument '%s'\n", argv[i]);
            return VS_EXIT_USAGE;
        }
        if (program) {
            fprintf(stderr, "vsocket doctor: one program at a time ('%s' is one too many)\n",
                    argv[i]);
            return VS_EXIT_USAGE;
        }
        program = argv[i];
    }
    if (program && rdma) {
        fprintf(stderr, "vsocket doctor: --rdma examines the host, not a program ('%s')\n",
                program);
        return VS_EXIT_USAGE;
    }
    if (program)
        return doctor_program(program);
    return rdma ? doctor_rdma_only() : doctor_host();
}
