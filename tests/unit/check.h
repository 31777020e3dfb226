/* check.h - the smallest test harness: CHECK records a failure and goes on;
 * a test program exits non-zero if any check failed. */
#ifndef VSOCKET_CHECK_H
#define VSOCKET_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_failures, check_count;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        check_count++;                                                                             \
        if (a_ != b_) {                                                                            \
            fprintf(stderr, "%s:%d: check failed: %s == %s (%lld != %lld)\n", __FILE__, __LINE__,  \
                    #a, #b, a_, b_);                                                               \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

static inline int check_finish(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
