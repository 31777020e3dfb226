/* init.h - library load, exit and fork hooks. */
#ifndef VSOCKET_INIT_H
#define VSOCKET_INIT_H

/* Registers the three below with pthread_atfork (at load): they run
 * inside every fork of the libc, after the prepare handlers of the
 * libraries loaded later. */
void vs_fork_handlers_install(void);

void vs_fork_prepare(void);
void vs_fork_parent(void);
void vs_fork_child(void);

#endif
