/* fuzz_ring_attach.c - libFuzzer target: vs_ring_attach() on a descriptor
 * the peer prepared, then ring operations on what it accepted.
 *
 * The input picks the kind of descriptor (a memfd with or without sealing,
 * a pipe), its seals, its size, and its header: either a genuine header
 * (the first bytes of a ring vs_ring_create() just made, so the harness
 * needs no knowledge of the layout) or zeros, then patched at fuzzer-chosen
 * byte offsets. What attach accepts is then run as a ring program
 * (ring_prog.c) with the peer writing through its own mapping. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ring_prog.h"

#define PAGE 4096u
#define MAX_HEADER (64u << 10) /* the largest header the harness copies */

struct layout {
    unsigned char hdr[MAX_HEADER];
    size_t hdr_size;
    uint64_t window, most; /* the geometry asked for */
    uint64_t span;         /* the data area's size that goes with the header */
};

/* A genuine header for the geometry, layout unknown: create a ring, copy
 * the bytes in front of its data. */
static void genuine_header(struct layout *l)
{
    struct vs_ring r;
    int rc = vs_ring_create(&r, vs_ring_size_for(l->window, l->most, l->most), VS_RING_CONSUMER);
    FZ_CHECK(rc == 0, "vs_ring_create(%lu, %lu): %d", (unsigned long)l->window,
             (unsigned long)l->most, rc);
    size_t hdr = (size_t)(r.data - (unsigned char *)r.sh);
    FZ_CHECK(hdr <= MAX_HEADER, "a header of %zu bytes", hdr);
    memcpy(l->hdr, r.sh, hdr);
    l->hdr_size = hdr;
    l->span = r.capacity;
    vs_ring_destroy(&r);
}

/* Patches at raw byte offsets: aligned small indexes or any offset, values
 * raw or nudged from what is there (as ring_prog.c's header writes). */
static void patch_header(struct layout *l, struct fz_in *in)
{
    int count = fz_u8(in) % 16;
    for (int i = 0; i < count; i++) {
        uint8_t mode = fz_u8(in);
        size_t width = (size_t)1 << (mode & 3);
        size_t off = mode & 4 ? (size_t)fz_u8(in) * width : fz_u16(in);
        unsigned char *at = l->hdr + off % (l->hdr_size - width + 1);
        uint64_t v;
        if (mode & 8) {
            memcpy(&v, at, width);
            v += (uint64_t)(int64_t)(int8_t)fz_u8(in);
        } else {
            v = fz_le(in, (int)width);
        }
        memcpy(at, &v, width);
    }
}

/* The file's size: mostly the right one for the header, else off by a
 * little, doubled, raw or zero. */
static uint64_t pick_size(const struct layout *l, struct fz_in *in)
{
    uint64_t right = l->hdr_size + l->span;
    switch (fz_u8(in) % 8) {
    case 4:
        return right + (uint64_t)(int64_t)(int8_t)fz_u8(in);
    case 5:
        return (uint64_t)fz_le(in, 4);
    case 6:
        return right + l->span;
    case 7:
        return 0;
    default:
        return right;
    }
}

/* The seals to add: bit 7 the three a ring needs, else any mix. */
static int pick_seals(uint8_t b)
{
    if (b & 0x80)
        return F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    static const int seal[] = {F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL, F_SEAL_WRITE,
                               F_SEAL_FUTURE_WRITE};
    int seals = 0;
    for (int i = 0; i < 5; i++)
        if (b & (1u << i))
            seals |= seal[i];
    return seals;
}

/* A memfd of SIZE holding the header, sealed as asked. -1 on failure. */
static int make_memfd(const struct layout *l, uint64_t size, bool sealing, int seals)
{
    int fd = memfd_create("fuzz-attach", MFD_CLOEXEC | (sealing ? MFD_ALLOW_SEALING : 0));
    FZ_CHECK(fd >= 0, "memfd_create: %d", errno);
    size_t hdr = l->hdr_size < size ? l->hdr_size : (size_t)size;
    if (ftruncate(fd, (off_t)size) < 0 || pwrite(fd, l->hdr, hdr, 0) != (ssize_t)hdr) {
        close(fd);
        return -1;
    }
    /* Refused without MFD_ALLOW_SEALING: then the file has no seals. */
    (void)fcntl(fd, F_ADD_SEALS, seals);
    return fd;
}

/* The descriptor as the peer prepared it: a pipe (not a regular file) for
 * kind 7, else a memfd. -1 if it could not be made (e.g. too large). */
static int make_fd(struct layout *l, struct fz_in *in, int *spare)
{
    uint8_t kind = fz_u8(in), seals = fz_u8(in), cap = fz_u8(in);
    l->window = (uint64_t)VS_RING_MIN_CAPACITY << (cap % 15); /* 4 KiB .. 64 MiB */
    l->most = l->window;
    /* A ring that can grow: a ladder of regions up to MOST (at most
     * VS_RING_MAX_MOST), the span their sum. */
    if (cap & 0x40) {
        uint8_t shift = fz_u8(in) % 8;
        l->most = l->window << shift > VS_RING_MAX_MOST ? VS_RING_MAX_MOST : l->window << shift;
    }
    l->span = l->window;
    memset(l->hdr, 0, sizeof(l->hdr));
    l->hdr_size = PAGE;
    if (!(cap & 0x80))
        genuine_header(l);
    patch_header(l, in);
    uint64_t size = pick_size(l, in);
    if ((kind & 7) == 7) {
        int p[2];
        FZ_CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe2");
        *spare = p[1];
        return p[0];
    }
    if (size > (1ull << 32))
        return -1;
    return make_memfd(l, size, (kind & 7) != 6, pick_seals(seals));
}

/* Attach accepted the ring: what it kept must describe the file. The
 * span (capacity) is a ladder's sum, not a power of two; the window is. */
static void check_attached(const struct vs_ring *r, int fd)
{
    struct stat st;
    FZ_CHECK(fstat(fd, &st) == 0, "fstat");
    uint64_t c = r->capacity, w = r->window;
    FZ_CHECK(w >= VS_RING_MIN_CAPACITY && w <= VS_RING_MAX_CAPACITY && (w & (w - 1)) == 0 &&
                 w <= c && c <= VS_RING_MAX_SPAN,
             "attached with window %lu, span %lu", (unsigned long)w, (unsigned long)c);
    FZ_CHECK(r->map_size == (size_t)st.st_size, "map_size %zu, file %ld", r->map_size,
             (long)st.st_size);
    size_t hdr = (size_t)(r->data - (unsigned char *)r->sh);
    FZ_CHECK(r->data > (unsigned char *)r->sh && hdr + c <= r->map_size,
             "data at %zu + %lu past the mapping of %zu", hdr, (unsigned long)c, r->map_size);
    FZ_CHECK(r->fd == fd, "the ring holds fd %d, not %d", r->fd, fd);
}

/* The accepted ring as a program, the peer writing through its own
 * mapping (none if the file refuses a writable one: F_SEAL_WRITE). */
static void run_attached(struct vs_ring *r, enum vs_ring_role role, int fd, struct fz_in *in)
{
    struct ring_prog p = {.poisoned = true};
    if (role == VS_RING_CONSUMER)
        p.cons = r;
    else
        p.prod = r;
    void *view = mmap(NULL, r->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (view != MAP_FAILED) {
        p.view = view;
        p.view_size = r->map_size;
    }
    ring_prog_run(&p, in);
    if (view != MAP_FAILED)
        munmap(view, r->map_size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct layout l;
    struct fz_in in = {data, size};
    fz_leaks_begin();
    int spare = -1;
    int fd = make_fd(&l, &in, &spare);
    enum vs_ring_role role = fz_u8(&in) & 1 ? VS_RING_PRODUCER : VS_RING_CONSUMER;
    if (fd >= 0) {
        struct vs_ring r;
        memset(&r, 0, sizeof(r));
        int rc = vs_ring_attach(&r, fd, role);
        FZ_CHECK(rc == 0 || (rc < 0 && rc > -4096), "vs_ring_attach: %d", rc);
        if (rc == 0) {
            check_attached(&r, fd);
            run_attached(&r, role, fd, &in);
            vs_ring_destroy(&r);
            FZ_CHECK(fcntl(fd, F_GETFD) < 0 && errno == EBADF, "destroy left fd %d open", fd);
        } else {
            /* Ownership passes only on success: the fd is still ours. */
            FZ_CHECK(fcntl(fd, F_GETFD) >= 0, "a failed attach closed fd %d", fd);
            close(fd);
        }
    }
    if (spare >= 0)
        close(spare);
    fz_leaks_end();
    return 0;
}
