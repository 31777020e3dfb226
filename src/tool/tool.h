/* tool.h - the `vsocket` command-line tool: subcommands and exit codes.
 * The exit codes are documented in docs/vsocket.1.md; scripts rely on them. */
#ifndef VSOCKET_TOOL_H
#define VSOCKET_TOOL_H

enum vs_exit {
    VS_EXIT_OK = 0,
    VS_EXIT_ERROR = 1,      /* the tool itself failed */
    VS_EXIT_USAGE = 2,      /* bad command line */
    VS_EXIT_NO_PROCESS = 3, /* stat: no process is running with vsocket */
    VS_EXIT_MISSING = 4,    /* doctor: something vsocket can use is missing */
    VS_EXIT_NO_LIBRARY = 5, /* run: libvsocket.so not found */
    VS_EXIT_NOT_EXECUTABLE = 126,
    VS_EXIT_NOT_FOUND = 127,
};

int cmd_run(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_doctor(int argc, char **argv);

#endif
