/* procfile.h - reading a small kernel file (/proc, /proc/sys) whole.
 *
 * Raw system calls: linked into libvsocket, where read() and close() are
 * our own wrappers. */
#ifndef VSOCKET_PROCFILE_H
#define VSOCKET_PROCFILE_H

#include <stddef.h>
#include <sys/types.h>

/* Reads at most LEN - 1 bytes of PATH into BUF, NUL-terminated. The count
 * read, or -1 (nothing in BUF) when the file cannot be read or is empty. */
ssize_t vs_read_small_file(const char *path, char *buf, size_t len);

#endif
