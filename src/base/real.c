/* real.c - resolution of the libc functions we interpose. */
#include "base/real.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct vs_real_table vs_real;
int vs_real_resolved;

static void die_unresolved(const char *name)
{
    /* Without the real function we cannot even pass a call through. libc's
     * own syscall(), looked up here: write() and syscall() in this library
     * are our wrappers, and the table is not complete. */
    static const char msg[] = "vsocket: fatal: cannot resolve libc symbol ";
    long (*sys)(long, ...) = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    if (sys) {
        sys(SYS_write, 2, msg, sizeof(msg) - 1);
        sys(SYS_write, 2, name, strlen(name));
        sys(SYS_write, 2, "\n", 1);
    }
    abort();
}

/* Symbols that an older libc may lack; their wrappers fall back to another
 * real function when the pointer is NULL. */
static int is_optional(const char *name)
{
    static const char *const optional[] = {"close_range", "closefrom", "epoll_pwait2",
                                           "fcntl64",     "execvpe",   NULL};
    for (int i = 0; optional[i]; i++)
        if (strcmp(optional[i], name) == 0)
            return 1;
    return 0;
}

void vs_real_init(void)
{
    if (__atomic_load_n(&vs_real_resolved, __ATOMIC_ACQUIRE))
        return;
        /* Two threads may race here before the constructor ran; both store the
         * same pointers, so the race is benign. */
#define VS_REAL_RESOLVE(ret, name, params)                                                         \
    {                                                                                              \
        void *sym = dlsym(RTLD_NEXT, #name);                                                       \
        if (!sym && !is_optional(#name))                                                           \
            die_unresolved(#name);                                                                 \
        __atomic_store_n((void **)&vs_real.name, sym, __ATOMIC_RELAXED);                           \
    }
    VS_REAL_SYMBOLS(VS_REAL_RESOLVE)
#undef VS_REAL_RESOLVE
    __atomic_store_n(&vs_real_resolved, 1, __ATOMIC_RELEASE);
}
