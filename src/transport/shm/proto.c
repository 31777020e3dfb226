/* proto.c - the one check every side-channel record passes before use. */
#include <sys/socket.h>

#include "transport/shm/proto.h"

bool vs_shm_msg_ok(const struct vs_shm_msg *m, size_t len, int msg_flags)
{
    return len == sizeof(*m) && !(msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
           m->magic == VS_SHM_MAGIC && m->version == VS_SHM_VERSION;
}
