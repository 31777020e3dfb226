/* copy.h - the copy into and out of the rings. */
#ifndef VSOCKET_COPY_H
#define VSOCKET_COPY_H

#include <stddef.h>

/* memcpy, except where memcpy is pathologically slow: see copy.c. */
void vs_copy(void *dst, const void *src, size_t len);

#endif
