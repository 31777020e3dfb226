/* init.h - library load, exit and fork hooks. */
#ifndef VSOCKET_INIT_H
#define VSOCKET_INIT_H

void vs_fork_prepare(void);
void vs_fork_parent(void);
void vs_fork_child(void);

#endif
