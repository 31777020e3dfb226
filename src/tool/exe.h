/* exe.h - what kind of executable a program is, as far as vsocket's reach
 * goes: LD_PRELOAD only works for dynamically linked programs whose socket
 * calls go through libc. Static and Go programs run unaccelerated. */
#ifndef VSOCKET_TOOL_EXE_H
#define VSOCKET_TOOL_EXE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

enum vs_exe_kind {
    VS_EXE_UNKNOWN, /* a format we do not read: we say nothing about it */
    VS_EXE_DYNAMIC, /* ELF with an interpreter (the dynamic loader): reachable */
    VS_EXE_STATIC,  /* ELF without one: LD_PRELOAD never applies */
    VS_EXE_GO,      /* a Go program, static or dynamic: raw system calls */
    VS_EXE_LOADER,  /* a shared object without interpreter, e.g. ld.so run directly */
    VS_EXE_SCRIPT,  /* #!: interp is the program that runs it */
};

struct vs_exe {
    enum vs_exe_kind kind;
    /* DYNAMIC, GO: PT_INTERP ("" for a static Go program); SCRIPT: the
     * interpreter's path, after `env` and PATH. */
    char interp[PATH_MAX];
    const char *unknown; /* UNKNOWN: what the file is, e.g. "a 32-bit ELF file" */
    bool setid;          /* set-user-ID or set-group-ID */
    bool file_caps;      /* has file capabilities (security.capability) */
    /* Run by this process's user, the loader would run it in secure mode
     * (AT_SECURE: it changes ids or gains capabilities) and ignore
     * LD_PRELOAD entries with a slash, as vsocket's: it runs without. */
    bool secure;
};

/* Reads PATH's headers into *EXE. Returns 0, or -1 with errno set when PATH
 * cannot be opened or read. */
int vs_exe_inspect(const char *path, struct vs_exe *exe);

/* Why vsocket cannot see the sockets of a program of KIND, as a phrase
 * starting with "is" ("is a Go program: ..."), or NULL when it can or when
 * we cannot tell. */
const char *vs_exe_unseen_reason(enum vs_exe_kind kind);

/* Where PROGRAM would be executed from, following PATH like execvp. Returns 0,
 * or -1 with errno ENOENT or EACCES when there is nothing runnable. */
int vs_exe_resolve(const char *program, char *out, size_t outlen);

#endif
