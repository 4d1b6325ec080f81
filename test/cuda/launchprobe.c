/* launchprobe.c -- gpupool-launchprobe: a GPU workload of the fake driver for
 * the compute throttle's tests and bench (docs/compute.md).
 *
 * Usage: gpupool-launchprobe [--via dlsym|proc|proc2] [--ptsz]
 *                            [--kind kernel|ex|coop|graph] [--grid N] [--graph-kernels K]
 *                            [--ms T | --count N] [--sync-every N] [--bench N]
 *                            [--then-capture K] [--ptx ITERS]
 * Reaches libcuda.so.1 as applications do (dlopen + dlsym, or
 * cuGetProcAddress[_v2] of CUDA 12.4, per-thread-stream variants with
 * --ptsz), makes the primary context of device 0 current and launches:
 *   kernel  cuLaunchKernel            ex     cuLaunchKernelEx
 *   coop    cuLaunchCooperativeKernel graph  cuGraphLaunch of a graph of K
 *                                            kernels captured from a stream
 * with N blocks (--grid, default 8192). --ms T launches for T ms (0: until
 * killed), --count N launches N times; --sync-every N synchronises the
 * context after every N launches (a latency-bound loop), and always at the
 * end. Prints "ready" once set up and "done launches=<n>" at the end.
 * --bench N: N launches timed, "bench ns_per_launch=<x>" (the fake without
 * FAKECUDA_TIMELINE makes a launch a no-op: what is timed is the path).
 * --then-capture K: afterwards, K cuLaunchKernel captured into a graph from
 * a new stream, timed: "capture ms=<x>".
 * --ptx ITERS: launch a real kernel, for a real driver (the GPU conformance
 * kit, docs/gpu-check.md): the PTX text below is loaded with cuModuleLoadData
 * (the driver compiles it for the GPU, so no nvcc is needed where the probe is
 * built) and every launch spins ITERS dependent FMAs per thread. Without it
 * the function is NULL, which only the fake accepts.
 * "done" also says s=<seconds from the first launch to the final
 * synchronisation>, so launches/s is what the GPU completed. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakecuda_api.h"

typedef CUresult (*proc_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*proc2_fn)(const char *, void **, int, cuuint64_t, void *);

/* gp_spin(float *out, unsigned iters): a dependent FMA chain per thread
 * (compute-bound, no memory traffic); the result is stored only if it is
 * FLT_MAX, which it never is, so the JIT cannot drop the loop. */
static const char spin_ptx[] = ".version 6.0\n"
                               ".target sm_50\n"
                               ".address_size 64\n"
                               ".visible .entry gp_spin(.param .u64 out, .param .u32 iters)\n"
                               "{\n"
                               "  .reg .pred %p<3>;\n"
                               "  .reg .b32 %r<4>;\n"
                               "  .reg .f32 %f<3>;\n"
                               "  .reg .b64 %rd<3>;\n"
                               "  ld.param.u64 %rd1, [out];\n"
                               "  ld.param.u32 %r1, [iters];\n"
                               "  mov.u32 %r2, %tid.x;\n"
                               "  cvt.rn.f32.u32 %f1, %r2;\n"
                               "  mov.f32 %f2, 0f3F800000;\n"
                               "  mov.u32 %r3, 0;\n"
                               "  setp.eq.u32 %p1, %r1, 0;\n"
                               "  @%p1 bra DONE;\n"
                               "LOOP:\n"
                               "  fma.rn.f32 %f2, %f2, 0f3F7FF000, %f1;\n"
                               "  add.u32 %r3, %r3, 1;\n"
                               "  setp.lt.u32 %p2, %r3, %r1;\n"
                               "  @%p2 bra LOOP;\n"
                               "DONE:\n"
                               "  setp.neu.f32 %p1, %f2, 0f7F7FFFFF;\n"
                               "  @%p1 bra END;\n"
                               "  cvta.to.global.u64 %rd2, %rd1;\n"
                               "  st.global.f32 [%rd2], %f2;\n"
                               "END:\n"
                               "  ret;\n"
                               "}\n";

/* Not in the fake's header: the fake has no modules (--ptx is for a real driver). */
typedef struct CUmod_st *CUmodule;

static void *lib;
static const char *via = "dlsym";
static bool ptsz;

/* The entry point `base` as the chosen path finds it. */
static void *find(const char *base)
{
    void *fn = NULL;
    if (strcmp(via, "dlsym") == 0) {
        char name[96];
        snprintf(name, sizeof name, "%s%s", base, ptsz ? "_ptsz" : "");
        fn = dlsym(lib, name);
        return fn != NULL ? fn : dlsym(lib, base); /* no _ptsz form: the plain one */
    }
    cuuint64_t flags = ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
    if (strcmp(via, "proc2") == 0) {
        proc2_fn p = (proc2_fn)dlsym(lib, "cuGetProcAddress_v2");
        int status = 0;
        if (p == NULL || p(base, &fn, 12040, flags, &status) != CUDA_SUCCESS)
            return NULL;
    } else {
        proc_fn p = (proc_fn)dlsym(lib, "cuGetProcAddress");
        if (p == NULL || p(base, &fn, 12040, flags) != CUDA_SUCCESS)
            return NULL;
    }
    return fn;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "launchprobe: %s: %d\n", what, rc);
    return 1;
}

#define NEED(var, type, name)                            \
    __typeof__(type) var = (__typeof__(type))find(name); \
    if (var == NULL) {                                   \
        fprintf(stderr, "launchprobe: no %s\n", name);   \
        return 1;                                        \
    }

int main(int argc, char **argv)
{
    const char *kind = "kernel";
    unsigned grid = 8192, graph_kernels = 4;
    long ms = -1, count = -1, sync_every = 0, bench = 0, then_capture = 0, ptx_iters = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--ptsz") == 0) {
            ptsz = true;
            continue;
        }
        if (v == NULL) {
            fprintf(stderr, "launchprobe: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--via") == 0)
            via = v;
        else if (strcmp(a, "--kind") == 0)
            kind = v;
        else if (strcmp(a, "--grid") == 0)
            grid = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--graph-kernels") == 0)
            graph_kernels = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--ms") == 0)
            ms = strtol(v, NULL, 10);
        else if (strcmp(a, "--count") == 0)
            count = strtol(v, NULL, 10);
        else if (strcmp(a, "--sync-every") == 0)
            sync_every = strtol(v, NULL, 10);
        else if (strcmp(a, "--bench") == 0)
            bench = strtol(v, NULL, 10);
        else if (strcmp(a, "--then-capture") == 0)
            then_capture = strtol(v, NULL, 10);
        else if (strcmp(a, "--ptx") == 0)
            ptx_iters = strtol(v, NULL, 10);
        else {
            fprintf(stderr, "launchprobe: unknown option %s\n", a);
            return 2;
        }
    }
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL) {
        fprintf(stderr, "launchprobe: %s\n", dlerror());
        return 3;
    }
    NEED(init, CUresult(*)(unsigned), "cuInit");
    NEED(retain, CUresult(*)(CUcontext *, CUdevice), "cuDevicePrimaryCtxRetain");
    NEED(set_current, CUresult(*)(CUcontext), "cuCtxSetCurrent");
    NEED(ctx_sync, CUresult(*)(void), "cuCtxSynchronize");
    CUcontext ctx;
    int rc;
    if ((rc = init(0)) != CUDA_SUCCESS || (rc = retain(&ctx, 0)) != CUDA_SUCCESS ||
        (rc = set_current(ctx)) != CUDA_SUCCESS)
        return fail("setup", rc);

    NEED(launch_kernel,
         CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void **, void **),
         "cuLaunchKernel");
    CUfunction fn = NULL;
    void **params = NULL;
    CUdeviceptr out = 0;
    unsigned iters = (unsigned)(ptx_iters > 0 ? ptx_iters : 0);
    void *spin_args[] = {&out, &iters};
    if (ptx_iters >= 0) {
        NEED(load, CUresult(*)(CUmodule *, const void *), "cuModuleLoadData");
        NEED(get_fn, CUresult(*)(CUfunction *, CUmodule, const char *), "cuModuleGetFunction");
        NEED(mem_alloc, CUresult(*)(CUdeviceptr *, size_t), "cuMemAlloc_v2");
        CUmodule mod;
        if ((rc = load(&mod, spin_ptx)) != CUDA_SUCCESS ||
            (rc = get_fn(&fn, mod, "gp_spin")) != CUDA_SUCCESS ||
            (rc = mem_alloc(&out, sizeof(float))) != CUDA_SUCCESS)
            return fail("module", rc);
        params = spin_args;
    }
    CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **) = NULL;
    CUresult (*launch_coop)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void **) = NULL;
    CUresult (*graph_launch)(CUgraphExec, CUstream) = NULL;
    CUgraphExec exec = NULL;
    CUstream stream = NULL;
    CUlaunchConfig cfg = {grid, 1, 1, 256, 1, 1, 0, NULL, NULL, 0};
    if (strcmp(kind, "ex") == 0) {
        launch_ex = find("cuLaunchKernelEx");
    } else if (strcmp(kind, "coop") == 0) {
        launch_coop = find("cuLaunchCooperativeKernel");
    } else if (strcmp(kind, "graph") == 0) {
        NEED(stream_create, CUresult(*)(CUstream *, unsigned), "cuStreamCreate");
        NEED(begin, CUresult(*)(CUstream, int), "cuStreamBeginCapture");
        NEED(end, CUresult(*)(CUstream, CUgraph *), "cuStreamEndCapture");
        NEED(inst, CUresult(*)(CUgraphExec *, CUgraph, unsigned long long),
             "cuGraphInstantiateWithFlags");
        graph_launch = find("cuGraphLaunch");
        CUgraph graph;
        if ((rc = stream_create(&stream, 0)) != CUDA_SUCCESS ||
            (rc = begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL)) != CUDA_SUCCESS)
            return fail("capture", rc);
        for (unsigned k = 0; k < graph_kernels; k++)
            if ((rc = launch_kernel(fn, grid, 1, 1, 256, 1, 1, 0, stream, params, NULL)) !=
                CUDA_SUCCESS)
                return fail("captured launch", rc);
        if ((rc = end(stream, &graph)) != CUDA_SUCCESS || (rc = inst(&exec, graph, 0)) != 0)
            return fail("instantiate", rc);
    } else if (strcmp(kind, "kernel") != 0) {
        fprintf(stderr, "launchprobe: unknown kind %s\n", kind);
        return 2;
    }
    if ((launch_ex == NULL && strcmp(kind, "ex") == 0) ||
        (launch_coop == NULL && strcmp(kind, "coop") == 0) ||
        (graph_launch == NULL && strcmp(kind, "graph") == 0)) {
        fprintf(stderr, "launchprobe: no entry point for %s\n", kind);
        return 1;
    }
    printf("ready\n");
    fflush(stdout);

    long n = bench > 0 ? bench : count;
    double t0 = now_s(), deadline = ms > 0 ? t0 + (double)ms / 1000.0 : 0;
    long done = 0;
    for (;; done++) {
        if (n >= 0 && done >= n)
            break;
        if (ms > 0 && (done & 15) == 0 && now_s() >= deadline)
            break;
        if (launch_ex != NULL)
            rc = launch_ex(&cfg, fn, params, NULL);
        else if (launch_coop != NULL)
            rc = launch_coop(fn, grid, 1, 1, 256, 1, 1, 0, NULL, params);
        else if (graph_launch != NULL)
            rc = graph_launch(exec, stream);
        else
            rc = launch_kernel(fn, grid, 1, 1, 256, 1, 1, 0, NULL, params, NULL);
        if (rc != CUDA_SUCCESS)
            return fail("launch", rc);
        if (sync_every > 0 && (done + 1) % sync_every == 0 && (rc = ctx_sync()) != CUDA_SUCCESS)
            return fail("synchronize", rc);
    }
    double t1 = now_s();
    if ((rc = ctx_sync()) != CUDA_SUCCESS)
        return fail("synchronize", rc);
    double t_synced = now_s();
    if (bench > 0)
        printf("bench ns_per_launch=%.1f\n", (t1 - t0) * 1e9 / (double)bench);
    if (then_capture > 0) {
        NEED(stream_create, CUresult(*)(CUstream *, unsigned), "cuStreamCreate");
        NEED(begin, CUresult(*)(CUstream, int), "cuStreamBeginCapture");
        NEED(end, CUresult(*)(CUstream, CUgraph *), "cuStreamEndCapture");
        CUstream cs;
        CUgraph graph;
        double c0 = now_s();
        if ((rc = stream_create(&cs, 0)) != CUDA_SUCCESS ||
            (rc = begin(cs, CU_STREAM_CAPTURE_MODE_GLOBAL)) != CUDA_SUCCESS)
            return fail("capture", rc);
        for (long k = 0; k < then_capture; k++)
            if ((rc = launch_kernel(fn, grid, 1, 1, 256, 1, 1, 0, cs, params, NULL)) !=
                CUDA_SUCCESS)
                return fail("captured launch", rc);
        if ((rc = end(cs, &graph)) != CUDA_SUCCESS)
            return fail("end capture", rc);
        printf("capture ms=%.1f\n", (now_s() - c0) * 1e3);
    }
    printf("done launches=%ld s=%.6f\n", done, t_synced - t0);
    return 0;
}
