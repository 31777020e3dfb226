/* cmd_run.c - `vsocket run`: exec a program with libvsocket.so preloaded. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/log.h"
#include "tool/exe.h"
#include "tool/tool.h"

#define LIBRARY "libvsocket.so"

/* The directory holding this executable (the library is found beside it). */
static int exe_dir(char *out, unsigned long outlen)
{
    ssize_t n = readlink("/proc/self/exe", out, outlen - 1);
    if (n <= 0)
        return -1;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    return 0;
}

static void usage(FILE *out)
{
    fputs("usage: vsocket run [OPTIONS] -- PROGRAM [ARGS...]\n"
          "\n"
          "Runs PROGRAM with vsocket loaded (LD_PRELOAD). Its children and the programs it\n"
          "executes inherit vsocket. The exit code is PROGRAM's.\n"
          "\n"
          "vsocket cannot see the sockets of Go programs (the Go runtime makes system calls\n"
          "without libc) nor of statically linked ones (no dynamic loader, so no LD_PRELOAD).\n"
          "For such a PROGRAM, or a #! script run by one, run prints one line saying so on\n"
          "stderr, then runs it unchanged and unaccelerated; `vsocket doctor PROGRAM` explains.\n"
          "So it does for a set-user-ID or set-group-ID PROGRAM, or one with file\n"
          "capabilities, that would run with privileges other than yours: the dynamic\n"
          "loader then ignores LD_PRELOAD (secure mode). A child that is such a program\n"
          "runs without vsocket too, and nothing can say so then.\n"
          "\n"
          "Options (each sets the VSOCKET_* variable named, which see):\n"
          "  --transport=LIST   transports sockets may use, e.g. kernel (VSOCKET_TRANSPORTS)\n"
          "  --log-level=LEVEL  none, error, warn, info, debug, trace (VSOCKET_LOG_LEVEL)\n"
          "  --log-file=PATH    log to PATH instead of stderr; %p is the pid (VSOCKET_LOG_FILE)\n"
          "  --stats=on|off     publish per-socket statistics (VSOCKET_STATS)\n"
          "  -h, --help         this text\n"
          "\n"
          "The library is looked for in $VSOCKET_LIBRARY, then next to this program and in\n"
          "../lib, then in the install directory.\n"
          "Exit codes: 2 usage error, 5 libvsocket.so not found, 126 PROGRAM not executable,\n"
          "127 PROGRAM not found; otherwise PROGRAM's own.\n",
          out);
}

static int readable(const char *path)
{
    return access(path, R_OK) == 0;
}

static int find_library(char *out, size_t outlen)
{
    const char *forced = getenv("VSOCKET_LIBRARY");
    if (forced) {
        if (!readable(forced)) {
            fprintf(stderr, "vsocket run: VSOCKET_LIBRARY=%s: %s\n", forced, strerror(errno));
            return -1;
        }
        snprintf(out, outlen, "%s", forced);
        return 0;
    }
    char dir[PATH_MAX];
    if (exe_dir(dir, sizeof(dir)) == 0) {
        const char *rel[] = {"/../lib/", "/", "/../lib/x86_64-linux-gnu/"};
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            char path[PATH_MAX + 64];
            snprintf(path, sizeof(path), "%s%s%s", dir, rel[i], LIBRARY);
            char *real = realpath(path, NULL);
            if (real && readable(real) && strlen(real) < outlen) {
                snprintf(out, outlen, "%s", real);
                free(real);
                return 0;
            }
            free(real);
        }
    }
    snprintf(out, outlen, "%s/%s", VSOCKET_LIBDIR, LIBRARY);
    if (readable(out))
        return 0;
    fprintf(stderr,
            "vsocket run: cannot find %s (looked next to this program, in ../lib and in %s);\n"
            "set VSOCKET_LIBRARY to its path\n",
            LIBRARY, VSOCKET_LIBDIR);
    return -1;
}

/* Sets NAME, or reports VALUE as invalid for OPTION. Returns 0 or -1. */
static int set_option(const char *option, const char *name, const char *value)
{
    char err[256];
    unsigned mask;
    if (strcmp(name, "VSOCKET_TRANSPORTS") == 0 &&
        vs_config_parse_transports(value, &mask, err, sizeof(err)) < 0) {
        fprintf(stderr, "vsocket run: %s=%s: %s\n", option, value, err);
        return -1;
    }
    if (strcmp(name, "VSOCKET_LOG_LEVEL") == 0 && vs_log_level_by_name(value) < 0) {
        fprintf(stderr,
                "vsocket run: %s=%s: accepted values: none, error, warn, info, debug, trace\n",
                option, value);
        return -1;
    }
    if (strcmp(name, "VSOCKET_STATS") == 0 && strcmp(value, "on") != 0 &&
        strcmp(value, "off") != 0) {
        fprintf(stderr, "vsocket run: %s=%s: accepted values: on, off\n", option, value);
        return -1;
    }
    setenv(name, value, 1);
    return 0;
}

static int parse_options(int argc, char **argv, int *first_arg)
{
    static const struct {
        const char *option, *variable;
    } options[] = {{"--transport", "VSOCKET_TRANSPORTS"},
                   {"--log-level", "VSOCKET_LOG_LEVEL"},
                   {"--log-file", "VSOCKET_LOG_FILE"},
                   {"--stats", "VSOCKET_STATS"}};
    int i = 1;
    for (; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            return 1;
        }
        if (arg[0] != '-')
            break; /* the program; "--" is optional */
        size_t k = 0, n = sizeof(options) / sizeof(options[0]);
        for (; k < n; k++) {
            size_t len = strlen(options[k].option);
            if (strncmp(arg, options[k].option, len) != 0)
                continue;
            const char *value = NULL;
            if (arg[len] == '=')
                value = arg + len + 1;
            else if (arg[len] == '\0' && i + 1 < argc)
                value = argv[++i];
            else if (arg[len] != '\0')
                continue;
            if (!value) {
                fprintf(stderr, "vsocket run: %s needs a value\n", options[k].option);
                return -1;
            }
            if (set_option(options[k].option, options[k].variable, value) < 0)
                return -1;
            break;
        }
        if (k == n) {
            fprintf(stderr, "vsocket run: unknown option '%s' (see vsocket run --help)\n", arg);
            return -1;
        }
    }
    *first_arg = i;
    return 0;
}

/* One line on stderr when PROGRAM (or the interpreter of a #! script) is a
 * program whose sockets vsocket cannot see: it runs anyway, and without this
 * the user would take its kernel TCP figures for vsocket's. */
static void warn_unseen(const char *program)
{
    struct vs_exe exe, interp;
    if (vs_exe_inspect(program, &exe) < 0)
        return;
    if (exe.secure) {
        fprintf(stderr,
                "vsocket: %s is %s: run by you, the loader ignores LD_PRELOAD for it (secure "
                "mode), so it runs unaccelerated (see: vsocket doctor %s)\n",
                program,
                exe.file_caps ? "a program with file capabilities" : "set-user-ID or set-group-ID",
                program);
        return;
    }
    const char *why = vs_exe_unseen_reason(exe.kind);
    if (why) {
        fprintf(stderr, "vsocket: %s %s; it runs unaccelerated (see: vsocket doctor %s)\n", program,
                why, program);
        return;
    }
    if (exe.kind != VS_EXE_SCRIPT || vs_exe_inspect(exe.interp, &interp) < 0)
        return;
    why = vs_exe_unseen_reason(interp.kind);
    if (why)
        fprintf(stderr,
                "vsocket: %s runs under %s, which %s; it runs unaccelerated (see: vsocket "
                "doctor %s)\n",
                program, exe.interp, why, program);
}

static void set_preload(const char *library)
{
    const char *asan = VSOCKET_ASAN_RUNTIME;
    const char *old = getenv("LD_PRELOAD");
    char value[3 * PATH_MAX];
    /* An instrumented library needs the sanitizer runtime loaded first. */
    snprintf(value, sizeof(value), "%s%s%s%s%s", asan, *asan ? ":" : "", library,
             old && *old ? ":" : "", old && *old ? old : "");
    setenv("LD_PRELOAD", value, 1);
    if (*asan && !getenv("ASAN_OPTIONS"))
        /* The programs we run are not ours to judge for leaks, and are not
         * linked with the runtime that we preload. */
        setenv("ASAN_OPTIONS", "detect_leaks=0:verify_asan_link_order=0", 1);
}

int cmd_run(int argc, char **argv)
{
    int first;
    int r = parse_options(argc, argv, &first);
    if (r != 0)
        return r > 0 ? VS_EXIT_OK : VS_EXIT_USAGE;
    if (first >= argc) {
        fprintf(stderr, "vsocket run: no program given\n");
        usage(stderr);
        return VS_EXIT_USAGE;
    }
    char library[PATH_MAX];
    if (find_library(library, sizeof(library)) < 0)
        return VS_EXIT_NO_LIBRARY;
    char program[PATH_MAX];
    if (vs_exe_resolve(argv[first], program, sizeof(program)) < 0) {
        int e = errno;
        fprintf(stderr, "vsocket run: %s: %s\n", argv[first],
                e == ENOENT ? "command not found" : strerror(e));
        return e == ENOENT ? VS_EXIT_NOT_FOUND : VS_EXIT_NOT_EXECUTABLE;
    }
    warn_unseen(program);
    set_preload(library);
    execv(program, argv + first);
    int e = errno;
    fprintf(stderr, "vsocket run: %s: %s\n", argv[first], strerror(e));
    return e == ENOENT ? VS_EXIT_NOT_FOUND : VS_EXIT_NOT_EXECUTABLE;
}
