/* pool.c - type-stable object pool. */
#include "memory/pool.h"

#include <sys/mman.h>

#define CHUNK_SIZE (64 * 1024)

/* The free list threads through a pointer-sized member of each object. */
static void **link_of(struct vs_pool *pool, void *object)
{
    return (void **)((char *)object + pool->link_offset);
}

void *vs_pool_alloc(struct vs_pool *pool)
{
    void *object = NULL;
    pthread_mutex_lock(&pool->lock);
    if (pool->free_list) {
        object = pool->free_list;
        pool->free_list = *link_of(pool, object);
        goto out;
    }
    if ((size_t)(pool->chunk_end - pool->chunk) < pool->object_size) {
        void *chunk =
            mmap(NULL, CHUNK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (chunk == MAP_FAILED)
            goto out;
        pool->chunk = chunk;
        pool->chunk_end = pool->chunk + CHUNK_SIZE;
    }
    object = pool->chunk;
    /* Keep objects aligned for their atomics. */
    pool->chunk += (pool->object_size + 63) & ~(size_t)63;
out:
    pthread_mutex_unlock(&pool->lock);
    return object;
}

void vs_pool_free(struct vs_pool *pool, void *object)
{
    pthread_mutex_lock(&pool->lock);
    *link_of(pool, object) = pool->free_list;
    pool->free_list = object;
    pthread_mutex_unlock(&pool->lock);
}

void vs_pool_fork_prepare(struct vs_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
}

void vs_pool_fork_parent(struct vs_pool *pool)
{
    pthread_mutex_unlock(&pool->lock);
}

void vs_pool_fork_child(struct vs_pool *pool)
{
    pthread_mutex_init(&pool->lock, NULL);
}
