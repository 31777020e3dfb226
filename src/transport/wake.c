/* wake.c - the hooks through which transports wake readiness (wake.h). */
#include "transport/wake.h"

static void kick_nothing(void *rec)
{
    (void)rec;
}

static void nothing(void)
{
}

struct vs_wake_hooks vs_wake_hooks = {kick_nothing, nothing, nothing};

void vs_wake_set(const struct vs_wake_hooks *hooks)
{
    vs_wake_hooks = *hooks;
}
