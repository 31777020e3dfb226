/* sandbox.h - processes under a seccomp filter: the watch.
 *
 * A seccomp filter kills the process (or fails the call) on any system call
 * its program did not plan for, and ours are not in its plan. So from the
 * moment the program installs a filter (prctl(PR_SET_SECCOMP), seccomp(2)
 * through syscall()), or from load when the process already runs under one
 * (inherited across fork and exec: systemd's SystemCallFilter=, containers),
 * vsocket makes no system call of its own in the process: every interposed
 * call goes straight to libc, statistics included. Just before the filter
 * goes in, while we still may, every connection leaves the shm rings for TCP
 * and every socket shows reason "sandboxed". */
#ifndef VSOCKET_SANDBOX_H
#define VSOCKET_SANDBOX_H

#include <stdatomic.h>
#include <stdbool.h>

extern _Atomic bool vs_sandbox_on;

static inline bool vs_sandboxed(void)
{
    return atomic_load_explicit(&vs_sandbox_on, memory_order_relaxed);
}

/* At load: whether this process already runs under a filter (/proc/self/status). */
void vs_sandbox_check_at_load(void);

/* The program is about to install a filter: from now on every call passes
 * through. False when already sandboxed. The stepping aside (leaving the
 * rings, showing it) is the caller's: interpose/filter.c. */
bool vs_sandbox_claim(void);

/* The installation announced failed: vsocket may act again (the
 * connections that left the rings stay on TCP). */
void vs_sandbox_enter_failed(void);

/* In a process under a seccomp filter a wrapper is the
 * libc call alone: vsocket makes no system call of its own there. */
#define VS_PASS_IF_SANDBOXED(call)                                                                 \
    do {                                                                                           \
        if (__builtin_expect(vs_sandboxed(), 0))                                                   \
            return call;                                                                           \
    } while (0)

#endif
