/* filter.h - stepping aside for a seccomp filter (base/sandbox.h). */
#ifndef VSOCKET_FILTER_H
#define VSOCKET_FILTER_H

#include <stdbool.h>

/* The program is about to install a filter: leave the rings, show it, and
 * pass everything through from now on. False when already sandboxed. */
bool vs_sandbox_enter(void);

#endif
