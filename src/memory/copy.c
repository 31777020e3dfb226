/* copy.c - memcpy for the rings' data path.
 *
 * glibc copies blocks from a few KiB up with `rep movsb` on CPUs that
 * advertise fast short rep movs (FSRM). On AMD EPYC hosts (measured on this
 * project's machines) that copy runs at ~2.5 GB/s instead of ~45 GB/s
 * whenever the destination lies 1 to 31 bytes after the source modulo 4 KiB.
 * A receive into a buffer from malloc (16 bytes past a page) out of a ring
 * position on a page boundary is exactly that case. An explicit 16-byte
 * vector loop does not care about the distance, and is as fast as memcpy
 * elsewhere, so it takes the aliased copies of 1 KiB and more. */
#include "memory/copy.h"

#include <stdint.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>

static void copy_vectors(unsigned char *dst, const unsigned char *src, size_t len)
{
    size_t i = 0;
    for (; i + 64 <= len; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_storeu_si128((__m128i *)(dst + i), a);
        _mm_storeu_si128((__m128i *)(dst + i + 16), b);
        _mm_storeu_si128((__m128i *)(dst + i + 32), c);
        _mm_storeu_si128((__m128i *)(dst + i + 48), d);
    }
    memcpy(dst + i, src + i, len - i);
}
#endif

void vs_copy(void *dst, const void *src, size_t len)
{
#ifdef __SSE2__
    uintptr_t distance = ((uintptr_t)dst - (uintptr_t)src) & 4095;
    if (len >= 1024 && distance - 1 < 63) {
        copy_vectors(dst, src, len);
        return;
    }
#endif
    memcpy(dst, src, len);
}
