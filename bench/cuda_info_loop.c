/* cuda_info_loop.c -- the cost of one cuMemGetInfo_v2, for bench/isolation_bench.sh.
 *
 * Usage: cuda_info_loop N. Loads libcuda.so.1 as applications do (dlopen,
 * dlsym), makes device 0's primary context current, then times N calls of
 * cuMemGetInfo_v2, or as many as fit in about a second when they are slow
 * (CLOCK_MONOTONIC around the loop only), and prints
 * "info n=<calls> ns=<per call> free=<bytes>". Exit 1 when a CUDA call fails.
 * Only libc: the benchmark compiles it with the system's cc. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*init_fn)(unsigned);
typedef int (*retain_fn)(void **, int);
typedef int (*set_fn)(void *);
typedef int (*info_fn)(size_t *, size_t *);

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 0;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (n <= 0 || cuda == NULL) {
        fprintf(stderr, "usage: cuda_info_loop N (libcuda.so.1 on the library path)\n");
        return 1;
    }
    init_fn init = (init_fn)dlsym(cuda, "cuInit");
    retain_fn retain = (retain_fn)dlsym(cuda, "cuDevicePrimaryCtxRetain");
    set_fn set = (set_fn)dlsym(cuda, "cuCtxSetCurrent");
    info_fn info = (info_fn)dlsym(cuda, "cuMemGetInfo_v2");
    void *ctx = NULL;
    size_t free_b = 0, total = 0;
    if (!init || !retain || !set || !info || init(0) != 0 || retain(&ctx, 0) != 0 ||
        set(ctx) != 0 || info(&free_b, &total) != 0) {
        fprintf(stderr, "cuda_info_loop: a CUDA call failed\n");
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long done = 0;
    double ns = 0;
    while (done < n) {
        for (long i = 0; i < 64 && done < n; i++, done++)
            if (info(&free_b, &total) != 0)
                return 1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
        if (ns > 1e9)
            break;
    }
    printf("info n=%ld ns=%.1f free=%zu\n", done, ns / (double)done, free_b);
    return 0;
}
