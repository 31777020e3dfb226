/* pool.h - a type-stable object pool.
 *
 * Memory handed out by a pool is never returned to the system: a freed
 * object may be reused for another object of the same type, but it stays
 * mapped and keeps its type. This is what lets the fd table look an object up
 * and take a reference without a lock: a thread that raced with the last
 * put() touches a dead object of the right type, sees its zero reference
 * count and retries, instead of touching unmapped memory. */
#ifndef VSOCKET_POOL_H
#define VSOCKET_POOL_H

#include <pthread.h>
#include <stddef.h>

struct vs_pool {
    size_t object_size;
    size_t link_offset; /* of a void * member that links free objects */
    pthread_mutex_t lock;
    void *free_list;
    char *chunk, *chunk_end; /* the part of the newest chunk not yet handed out */
};

#define VS_POOL_INIT(type, link_member)                                                            \
    {                                                                                              \
        .object_size = sizeof(type), .link_offset = offsetof(type, link_member),                   \
        .lock = PTHREAD_MUTEX_INITIALIZER                                                          \
    }

/* An object whose bytes are those it had when freed (zero when new): the
 * caller initialises every field. NULL when memory is exhausted. */
void *vs_pool_alloc(struct vs_pool *pool);
void vs_pool_free(struct vs_pool *pool, void *object);

/* fork: the lock must not be held by a thread that does not exist in the
 * child. */
void vs_pool_fork_prepare(struct vs_pool *pool);
void vs_pool_fork_parent(struct vs_pool *pool);
void vs_pool_fork_child(struct vs_pool *pool);

#endif
