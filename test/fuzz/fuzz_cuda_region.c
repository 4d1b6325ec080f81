/* fuzz_cuda_region.c -- cudareg_attach() on a region file whose contents
 * are the input (the header fields, the total, the slots: their liveness
 * state, pid, token and share), then a charge, a report and a release
 * through it when it is accepted. Slots the input marks used are judged by
 * their liveness locks, which nobody holds here, or by their pid.
 *
 * The input overlays a genuine region made once at start; only the robust
 * mutex keeps the genuine bytes: a mutex word naming a live owner would
 * wait for ever by design (any process of the container may hold the lock),
 * which says nothing about our parsing. An input shorter than the magic,
 * version, size and slot count (16 bytes) is the whole file instead (the
 * size checks). An input whose header says version 1 is a file of version
 * 1's size (32,904 bytes), which attach makes anew when it is a complete
 * version 1 region.
 * The same bytes (the whole input, unpatched, at its own length) also go
 * to cudareg_peek, the node agent's lock-free reader: it must never read
 * outside them nor give a negative sum.
 * The file is a real one (cudareg_attach refuses symlinks such as
 * /proc/self/fd/N), in a directory made under $TMPDIR once per process and
 * left there (a few dozen KiB) for the process's whole run. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_region.h"

/* struct region_file (cuda_region.c): 32 bytes of header, then the
 * pthread_mutex_t. */
#define MUTEX_AT 32
#define MUTEX_LEN sizeof(pthread_mutex_t)
/* A shorter input is the whole file: the size checks. */
#define SHORT_BELOW 16
/* The file size of a layout version 1 region (the version field is the
 * second 32-bit word). */
#define V1_SIZE 32904u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[4096];
static uint8_t *genuine;

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    char dir[4000];
    snprintf(dir, sizeof(dir), "%s/gpupool-fuzz-region.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        abort();
    }
    snprintf(path, sizeof(path), "%s/region", dir);
    char err[512];
    struct cudareg *r = cudareg_attach(path, (int64_t)1 << 30, err, sizeof(err));
    if (!r) {
        fprintf(stderr, "fuzz_cuda_region: %s\n", err);
        abort();
    }
    cudareg_detach(r);
    size_t n = cudareg_file_size();
    genuine = malloc(n);
    int fd = open(path, O_RDONLY);
    if (!genuine || fd < 0 || pread(fd, genuine, n, 0) != (ssize_t)n) {
        perror("reading the genuine region");
        abort();
    }
    close(fd);
    /* Each input rewrites the file at the same path. */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!genuine)
        setup();
    size_t n = cudareg_file_size();
    uint8_t *file = malloc(n);
    if (!file)
        return 0;
    memcpy(file, genuine, n);
    memcpy(file, data, size < n ? size : n);
    memcpy(file + MUTEX_AT, genuine + MUTEX_AT, MUTEX_LEN);
    size_t len = size > 0 && size < SHORT_BELOW ? size : n;
    if (size >= 8 && data[4] == 1 && data[5] == 0 && data[6] == 0 && data[7] == 0)
        len = V1_SIZE;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || pwrite(fd, file, len, 0) != (ssize_t)len) {
        perror("region file");
        abort();
    }
    close(fd);
    free(file);

    /* The reader sees exactly the input, as the agent sees a file of any
     * length a container wrote (a copy of the right size, or refused). */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    struct cudareg_view v;
    if (cudareg_peek(copy, size, &v, NULL, NULL) == 0 && (v.used < 0 || v.limit < 0))
        abort();
    /* The agent's two-step read: never asks for more than a file. */
    if (cudareg_peek_size(copy, size) > cudareg_file_size())
        abort();
    free(copy);

    char err[512];
    struct cudareg *r = cudareg_attach(path, (int64_t)1 << 30, err, sizeof(err));
    if (r) {
        int64_t limit = cudareg_limit(r);
        int64_t want = limit > 0 ? limit / 2 : 4096;
        if (cudareg_reserve(r, want) == 0)
            cudareg_release(r, want);
        if (cudareg_usage(r) < 0)
            abort(); /* the bytes charged: never negative, whatever the file held */
        cudareg_detach(r);
    } else if (!memchr(err, '\0', sizeof(err)) || !err[0]) {
        abort(); /* a refusal says why */
    }
    return 0;
}
