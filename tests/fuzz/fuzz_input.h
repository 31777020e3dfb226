/* fuzz_input.h - the fuzz input read as a stream of small integers, and the
 * harnesses' failure report.
 *
 * Every target reads its input front to back with these; an exhausted input
 * yields zeros, so any byte string is a valid program. */
#ifndef VSOCKET_FUZZ_INPUT_H
#define VSOCKET_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct fz_in {
    const uint8_t *p;
    size_t n;
};

static inline uint8_t fz_u8(struct fz_in *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

/* Little-endian, WIDTH bytes (1..8). */
static inline uint64_t fz_le(struct fz_in *in, int width)
{
    uint64_t v = 0;
    for (int i = 0; i < width; i++)
        v |= (uint64_t)fz_u8(in) << (8 * i);
    return v;
}

static inline uint16_t fz_u16(struct fz_in *in)
{
    return (uint16_t)fz_le(in, 2);
}

static inline uint64_t fz_u64(struct fz_in *in)
{
    return fz_le(in, 8);
}

/* A field as a peer states it: the honest value, nudged by a small signed
 * step, or raw (MODE's low two bits: 1 nudged, 2 raw, else honest). */
static inline uint64_t fz_stated(uint64_t honest, uint8_t mode, struct fz_in *in)
{
    switch (mode % 4) {
    case 1:
        return honest + (uint64_t)(int64_t)(int8_t)fz_u8(in);
    case 2:
        return fz_u64(in);
    default:
        return honest;
    }
}

/* A function of the harness left out of libFuzzer's coverage, when what
 * its edges would count is not the input's doing (state kept from earlier
 * inputs) or is noise (a byte loop's 8-bit counter, which wraps at 256:
 * inputs kept for writing a few bytes more or less). ASan stays. Not
 * inlined: in an instrumented caller its code would be instrumented. */
#define FZ_NO_COVERAGE __attribute__((no_sanitize("coverage"), noinline))

/* An invariant broke: print why and abort, which libFuzzer reports as a
 * crash with this input saved as the reproducer. */
#define FZ_FAIL(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "fuzz invariant violated at %s:%d: ", __FILE__, __LINE__);                 \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

/* VS_FUZZ_TRACE=1 prints every step and its result: how to read a
 * reproducer. */
static inline int fz_tracing(void)
{
    static int on = -1;
    if (on < 0) {
        const char *s = getenv("VS_FUZZ_TRACE");
        on = s && *s && *s != '0';
    }
    return on;
}

#define FZ_TRACE(...)                                                                              \
    do {                                                                                           \
        if (fz_tracing())                                                                          \
            fprintf(stderr, __VA_ARGS__);                                                          \
    } while (0)

#define FZ_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond))                                                                               \
            FZ_FAIL(__VA_ARGS__);                                                                  \
    } while (0)

#endif
