/* exec_env.c - carrying vsocket across exec. */
#include "core/exec_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

#define LIBRARY_NAME "libvsocket.so"

static char *preload;   /* our LD_PRELOAD value at load, NULL when unset */
static char **settings; /* "VSOCKET_X=value" strings set at load, NULL-terminated */

static void forget_capture(void)
{
    for (int s = 0; settings && settings[s]; s++)
        free(settings[s]);
    free(settings);
    free(preload);
    settings = NULL;
    preload = NULL;
}

void vs_exec_env_capture(void)
{
    forget_capture();
    const char *p = getenv("LD_PRELOAD");
    if (p && strstr(p, LIBRARY_NAME))
        preload = strdup(p);
    size_t n = 0;
    for (int i = 0; vs_config_variables[i]; i++)
        n++;
    settings = calloc(n + 1, sizeof(*settings));
    if (!settings)
        return;
    n = 0;
    for (int i = 0; vs_config_variables[i]; i++) {
        const char *v = getenv(vs_config_variables[i]);
        if (v && asprintf(&settings[n], "%s=%s", vs_config_variables[i], v) >= 0)
            n++;
    }
}

/* The entry of ENVP that sets the variable of ASSIGNMENT ("NAME=..."), or -1. */
static int find(char *const envp[], const char *assignment)
{
    size_t len = strcspn(assignment, "=") + 1;
    for (int i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], assignment, len) == 0)
            return i;
    return -1;
}

static bool complete(char *const envp[])
{
    if (preload) {
        int i = find(envp, "LD_PRELOAD=");
        if (i < 0 || !strstr(envp[i], LIBRARY_NAME))
            return false;
    }
    for (int s = 0; settings && settings[s]; s++)
        if (find(envp, settings[s]) < 0)
            return false;
    return true;
}

/* The LD_PRELOAD entry ENVP should carry: ours ahead of the program's own. */
static char *preload_entry(char *const envp[], int old)
{
    char *entry = NULL;
    int r = old < 0 ? asprintf(&entry, "LD_PRELOAD=%s", preload)
                    : asprintf(&entry, "LD_PRELOAD=%s:%s", preload, envp[old] + 11);
    return r < 0 ? NULL : entry;
}

int vs_exec_env_build(char *const envp[], struct vs_exec_env *out)
{
    if (!vs_config.follow_exec || complete(envp))
        return 0;
    size_t n = 0, extra = 1;
    while (envp && envp[n])
        n++;
    for (int s = 0; settings && settings[s]; s++)
        extra++;
    out->preload = NULL;
    int old = find(envp, "LD_PRELOAD=");
    if (preload && (old < 0 || !strstr(envp[old], LIBRARY_NAME))) {
        out->preload = preload_entry(envp, old);
        if (!out->preload)
            return 0;
    }
    out->env = calloc(n + extra + 1, sizeof(*out->env));
    if (!out->env) {
        free(out->preload);
        return 0;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        if (!out->preload || strncmp(envp[i], "LD_PRELOAD=", 11) != 0)
            out->env[o++] = envp[i];
    /* A value the program set itself wins over ours. */
    for (int s = 0; settings && settings[s]; s++)
        if (find(envp, settings[s]) < 0)
            out->env[o++] = settings[s];
    if (out->preload)
        out->env[o++] = out->preload;
    out->env[o] = NULL;
    return 1;
}

void vs_exec_env_release(struct vs_exec_env *e)
{
    free(e->env);
    free(e->preload);
}
