/* fuzz_util.h -- helpers shared by the fuzz targets (test-only).
 *
 * fz_quiet(): log lines go to a sink that drops them (they are still
 * formatted, so a bad format argument is still caught), keeping the
 * fuzzer's output readable and its speed up.
 * fz_file(), fz_file_n(): the input as the contents of a file, for parsers that take a
 * path: one memfd per target, rewritten per input, named
 * /proc/self/fd/<n>. Single-threaded, like libFuzzer's loop. */
#ifndef GP_TEST_FUZZ_UTIL_H
#define GP_TEST_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

static void fz_drop(void *ctx, enum log_severity severity, const char *file, int line,
                    const char *message, size_t len)
{
    (void)ctx, (void)severity, (void)file, (void)line, (void)message, (void)len;
}

static inline void fz_quiet(void)
{
    static int done;
    if (!done) {
        log_set_sink(fz_drop, NULL);
        done = 1;
    }
}

/* Writes data to this target's memfd number `which` (0 or 1) and returns
 * its path; aborts on a failure of the harness itself. */
static inline const char *fz_file_n(int which, const uint8_t *data, size_t size)
{
    static int fds[2] = {-1, -1};
    static char paths[2][64];
    int fd = fds[which];
    char *path = paths[which];
    if (fd < 0) {
        fd = memfd_create("gpupool-fuzz", 0);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        fds[which] = fd;
        snprintf(path, sizeof(paths[which]), "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz input file");
        abort();
    }
    return path;
}

static inline const char *fz_file(const uint8_t *data, size_t size)
{
    return fz_file_n(0, data, size);
}

/* The next record of data (up to sep, or the end); *rest past it. */
static inline size_t fz_split(const uint8_t **data, size_t *size, const char *sep,
                              const uint8_t **rec)
{
    size_t seplen = strlen(sep);
    const uint8_t *hit = memmem(*data, *size, sep, seplen);
    size_t n = hit ? (size_t)(hit - *data) : *size;
    *rec = *data;
    *data += hit ? n + seplen : n;
    *size -= hit ? n + seplen : n;
    return n;
}

#endif
