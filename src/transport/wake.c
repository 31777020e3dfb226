/* wake.c - the hooks through which transports wake readiness (wake.h). */
#include "transport/wake.h"

static void kick_nothing(void *rec)
{
    (void)rec;
}

static void nothing(void)
{
}

static void read_nothing(int fd)
{
    (void)fd;
}

struct vs_wake_hooks vs_wake_hooks = {kick_nothing, nothing, read_nothing};

void vs_wake_set(const struct vs_wake_hooks *hooks)
{
    vs_wake_hooks = *hooks;
}
