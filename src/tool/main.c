/* main.c - `vsocket`: run programs with vsocket, show what it did, check
 * the host. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "tool/tool.h"
#include "core/transport_id.h"

static void usage(FILE *out)
{
    fputs("usage: vsocket COMMAND [OPTIONS]\n"
          "\n"
          "Commands:\n"
          "  run [OPTIONS] -- PROGRAM [ARGS...]  run PROGRAM with vsocket loaded\n"
          "  stat [--json] [--all] [--pid PID] [--watch[=SECONDS]]\n"
          "                                      show the sockets of running vsocket processes\n"
          "  doctor [--rdma | PROGRAM]           show what this host offers vsocket (--rdma: only\n"
          "                                      whether RDMA is usable), or whether vsocket can\n"
          "                                      see PROGRAM's sockets\n"
          "  version                             print the version\n"
          "  help [COMMAND]                      this text, or a command's\n"
          "\n"
          "Exit codes: 0 success, 1 internal error, 2 usage error, 3 no vsocket process (stat),\n"
          "4 something missing (doctor; with --rdma: RDMA not usable; with PROGRAM: vsocket\n"
          "cannot see its sockets),\n"
          "5 libvsocket.so not found (run), 126 program not executable (run, doctor),\n"
          "127 program not found (run, doctor); otherwise run exits as PROGRAM did.\n"
          "Configuration: VSOCKET_* environment variables, see `man 7 vsocket` or\n"
          "docs/configuration.md.\n",
          out);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return VS_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "stat") == 0)
        return cmd_stat(argc - 1, argv + 1);
    if (strcmp(cmd, "doctor") == 0)
        return cmd_doctor(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        char built[64];
        vs_config_format_transports(vs_transports_built(), built, sizeof(built));
        printf("vsocket %s\ntransports built: %s\n", VSOCKET_VERSION, built);
        return VS_EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        if (argc > 2 && cmd[0] == 'h') {
            char *help_argv[] = {argv[2], "--help", NULL};
            if (strcmp(argv[2], "run") == 0)
                return cmd_run(2, help_argv);
            if (strcmp(argv[2], "stat") == 0)
                return cmd_stat(2, help_argv);
            if (strcmp(argv[2], "doctor") == 0)
                return cmd_doctor(2, help_argv);
        }
        usage(stdout);
        return VS_EXIT_OK;
    }
    fprintf(stderr, "vsocket: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return VS_EXIT_USAGE;
}
