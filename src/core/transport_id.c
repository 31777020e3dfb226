/* transport_id.c - transport names and what this build contains. */
#include "core/transport_id.h"

#include <string.h>

static const char *const names[VS_TRANSPORT_COUNT] = {"kernel", "shm", "rdma"};

static const bool built[VS_TRANSPORT_COUNT] = {true, true, true};

const char *vs_transport_name(enum vs_transport t)
{
    return (unsigned)t < VS_TRANSPORT_COUNT ? names[t] : "?";
}

int vs_transport_by_name(const char *name, size_t len)
{
    for (int t = 0; t < VS_TRANSPORT_COUNT; t++)
        if (strlen(names[t]) == len && memcmp(names[t], name, len) == 0)
            return t;
    return -1;
}

bool vs_transport_built(enum vs_transport t)
{
    return (unsigned)t < VS_TRANSPORT_COUNT && built[t];
}

unsigned vs_transports_built(void)
{
    unsigned mask = 0;
    for (int t = 0; t < VS_TRANSPORT_COUNT; t++)
        if (built[t])
            mask |= VS_TRANSPORT_BIT(t);
    return mask;
}
