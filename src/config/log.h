/* log.h - levelled logging to stderr or a file.
 *
 * Safe to call from any wrapper: it never allocates, writes with one raw
 * write(2) per line (lines from several processes do not interleave) and
 * preserves errno. */
#ifndef VSOCKET_LOG_H
#define VSOCKET_LOG_H

enum vs_log_level {
    VS_LOG_NONE,
    VS_LOG_ERROR,
    VS_LOG_WARN,
    VS_LOG_INFO,
    VS_LOG_DEBUG,
    VS_LOG_TRACE,
};

extern enum vs_log_level vs_log_level;

/* Directs output to PATH ("%p" in it becomes the pid), or stderr when PATH
 * is NULL or empty. Returns 0, or -1 with errno when PATH cannot be opened
 * (output then stays on stderr). */
int vs_log_open(const char *path);

/* The level called NAME, or -1. */
int vs_log_level_by_name(const char *name);
const char *vs_log_level_name(enum vs_log_level level);

void vs_log_write(enum vs_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define vs_log(level, ...)                                                                         \
    do {                                                                                           \
        if ((level) <= vs_log_level)                                                               \
            vs_log_write((level), __VA_ARGS__);                                                    \
    } while (0)
#define vs_error(...) vs_log(VS_LOG_ERROR, __VA_ARGS__)
#define vs_warn(...) vs_log(VS_LOG_WARN, __VA_ARGS__)
#define vs_info(...) vs_log(VS_LOG_INFO, __VA_ARGS__)
#define vs_debug(...) vs_log(VS_LOG_DEBUG, __VA_ARGS__)
#define vs_trace(...) vs_log(VS_LOG_TRACE, __VA_ARGS__)

#endif
