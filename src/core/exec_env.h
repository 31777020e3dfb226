/* exec_env.h - keeping vsocket loaded in programs we exec.
 *
 * A program may exec another with an environment of its own making that
 * lacks LD_PRELOAD or our VSOCKET_* settings (nginx's binary upgrade, shells
 * that scrub the environment). Unless VSOCKET_FOLLOW_EXEC=off, the exec
 * wrappers put them back. */
#ifndef VSOCKET_EXEC_ENV_H
#define VSOCKET_EXEC_ENV_H

/* Records our LD_PRELOAD and VSOCKET_* values; called once at load. */
void vs_exec_env_capture(void);

struct vs_exec_env {
    char **env;    /* the environment to exec with */
    char *preload; /* the LD_PRELOAD entry we allocated, or NULL */
};

/* Fills OUT with ENVP plus what is missing and returns 1, or returns 0 when
 * ENVP needs nothing (or following exec is off, or memory ran out: the exec
 * then proceeds with ENVP unchanged). */
int vs_exec_env_build(char *const envp[], struct vs_exec_env *out);
void vs_exec_env_release(struct vs_exec_env *e);

#endif
