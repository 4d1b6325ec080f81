/* log.c -- klog-format lines, one write(2) each. */
#include "log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* The only process-wide logging knob; atomic so any thread may read it. */
/* The sink is set once at start (log.h), then only read. */
static struct {
    atomic_int verbosity;
    log_sink_fn sink;
    void *sink_ctx;
} log_state = {0};

void log_set_sink(log_sink_fn sink, void *ctx)
{
    log_state.sink = sink;
    log_state.sink_ctx = ctx;
}

void log_set_verbosity(int verbosity)
{
    atomic_store(&log_state.verbosity, verbosity);
}
int log_get_verbosity(void)
{
    return atomic_load(&log_state.verbosity);
}

static const char severity_letter[] = {'I', 'W', 'E', 'F'};

void log_writev(enum log_severity severity, const char *file, int line, const char *fmt, va_list ap)
{
    char buf[4096];
    if (log_state.sink != NULL) {
        int m = vsnprintf(buf, sizeof buf, fmt, ap);
        if (m < 0)
            return;
        size_t len = (size_t)m < sizeof buf ? (size_t)m : sizeof buf - 1;
        log_state.sink(log_state.sink_ctx, severity, file, line, buf, len);
        return;
    }
    struct timeval tv;
    struct tm tm;

    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    int n = snprintf(buf, sizeof buf, "%c%02d%02d %02d:%02d:%02d.%06ld %7d %s:%d] ",
                     severity_letter[severity], tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (long)tv.tv_usec, (int)getpid(), file, line);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    int m = vsnprintf(buf + len, sizeof buf - len, fmt, ap);
    if (m > 0)
        len += (size_t)m < sizeof buf - len ? (size_t)m : sizeof buf - len - 1;
    /* Truncated lines keep their newline so the next line starts clean. */
    if (len >= sizeof buf - 1)
        len = sizeof buf - 2;
    buf[len++] = '\n';

    const int fd = STDERR_FILENO;
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w <= 0)
            break;
        p += w;
        len -= (size_t)w;
    }
}

void log_write(enum log_severity severity, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_writev(severity, file, line, fmt, ap);
    va_end(ap);
}
