/* syscall.h - vsocket's own raw system calls.
 *
 * libvsocket interposes syscall() itself (interpose/process_api.c watches
 * it for seccomp filters) and comes first in the lookup order, so a plain
 * syscall() inside the library would bind to that wrapper: a call from the
 * bottom floor up to the entry points. vs_syscall() goes to libc's own
 * syscall(), resolving the table first if nothing has yet (a call from
 * another library's constructor, before ours ran). */
#ifndef VSOCKET_BASE_SYSCALL_H
#define VSOCKET_BASE_SYSCALL_H

#include <sys/syscall.h>

#include "base/real.h"

#define vs_syscall(...) (vs_real_ready(), vs_real.syscall(__VA_ARGS__))

#endif
