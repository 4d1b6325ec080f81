/* log.h -- klog-format logging to stderr, or to a sink the program sets.
 *
 * Lines look like every Kubernetes component's:
 *   I1126 04:46:34.020261   12345 plugin.c:154] message
 * (severity, month, day, wall time with microseconds, pid padded to 7,
 * source file:line). Each line is formatted into one buffer and written with
 * one write(2), so lines from different threads never interleave. Safe to
 * call from any thread.
 *
 * A library loaded into other programs (LD_PRELOAD into users' containers)
 * must not write klog lines to the application's stderr: it sets its own
 * sink with log_set_sink() and formats (or drops) the messages itself. */
#ifndef GP_LOG_H
#define GP_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum log_severity { LOG_INFO, LOG_WARNING, LOG_ERROR, LOG_FATAL };

/* Verbosity for log_v(); klog's -v. Default 0. */
void log_set_verbosity(int verbosity);
int log_get_verbosity(void);

/* Where formatted messages go instead of klog on stderr. `message` is the
 * formatted text without header or newline (NUL-terminated, len bytes);
 * file and line are the caller's. Called on the logging thread, so it
 * must be thread-safe itself. */
typedef void (*log_sink_fn)(void *ctx, enum log_severity severity, const char *file, int line,
                            const char *message, size_t len);
/* Replaces the sink; NULL = back to klog lines on stderr (the default).
 * Set it once, before other threads log: the pair is not swapped atomically. */
void log_set_sink(log_sink_fn sink, void *ctx);

void log_write(enum log_severity severity, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void log_writev(enum log_severity severity, const char *file, int line, const char *fmt,
                va_list ap);

#define log_info(...) log_write(LOG_INFO, __FILE_NAME__, __LINE__, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARNING, __FILE_NAME__, __LINE__, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, __FILE_NAME__, __LINE__, __VA_ARGS__)
/* Verbose info: formatted only when the verbosity is at least `level`. */
#define log_v(level, ...)                                              \
    do {                                                               \
        if (log_get_verbosity() >= (level))                            \
            log_write(LOG_INFO, __FILE_NAME__, __LINE__, __VA_ARGS__); \
    } while (0)

#endif
