/* test_exec_env.c - exec keeps vsocket loaded, and never overrides what the
 * program set itself. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config/config.h"
#include "core/exec_env.h"

static const char *get(char **env, const char *name)
{
    size_t len = strlen(name);
    for (int i = 0; env[i]; i++)
        if (strncmp(env[i], name, len) == 0 && env[i][len] == '=')
            return env[i] + len + 1;
    return NULL;
}

int main(void)
{
    setenv("LD_PRELOAD", "/opt/x/libvsocket.so", 1);
    setenv("VSOCKET_TRANSPORTS", "kernel", 1);
    setenv("VSOCKET_LOG_LEVEL", "error", 1);
    vs_config_load(&vs_config);
    vs_exec_env_capture();
    struct vs_exec_env e;

    /* A scrubbed environment gets everything back. */
    char *bare[] = {"PATH=/bin", NULL};
    CHECK_EQ(vs_exec_env_build(bare, &e), 1);
    CHECK(strcmp(get(e.env, "LD_PRELOAD"), "/opt/x/libvsocket.so") == 0);
    CHECK(strcmp(get(e.env, "VSOCKET_TRANSPORTS"), "kernel") == 0);
    CHECK(strcmp(get(e.env, "PATH"), "/bin") == 0);
    vs_exec_env_release(&e);

    /* The program's own preload stays, after ours; its own settings win. */
    char *own[] = {"LD_PRELOAD=/y/other.so", "VSOCKET_LOG_LEVEL=debug", NULL};
    CHECK_EQ(vs_exec_env_build(own, &e), 1);
    CHECK(strcmp(get(e.env, "LD_PRELOAD"), "/opt/x/libvsocket.so:/y/other.so") == 0);
    CHECK(strcmp(get(e.env, "VSOCKET_LOG_LEVEL"), "debug") == 0);
    int preloads = 0;
    for (int i = 0; e.env[i]; i++)
        preloads += strncmp(e.env[i], "LD_PRELOAD=", 11) == 0;
    CHECK_EQ(preloads, 1);
    vs_exec_env_release(&e);

    /* Complete already: nothing to do. */
    char *complete[] = {"LD_PRELOAD=libvsocket.so", "VSOCKET_TRANSPORTS=kernel",
                        "VSOCKET_LOG_LEVEL=warn", NULL};
    CHECK_EQ(vs_exec_env_build(complete, &e), 0);

    /* An empty environment pointer is allowed by execve. */
    CHECK_EQ(vs_exec_env_build(NULL, &e), 1);
    CHECK(get(e.env, "LD_PRELOAD") != NULL);
    vs_exec_env_release(&e);

    vs_config.follow_exec = false;
    CHECK_EQ(vs_exec_env_build(bare, &e), 0);
    return check_finish("test_exec_env");
}
