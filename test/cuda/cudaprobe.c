/* cudaprobe.c -- gpupool-cudaprobe: reach libcuda as applications do and run a script.
 *
 * Usage: gpupool-cudaprobe [--via dlsym|proc|proc2|proc-old] [--ptsz] [--no-load] COMMAND...
 * Runs the commands given on the command line in order and prints one line
 * per command, "<command> <CUDA error name> [values]", flushed at once (tests
 * kill the probe mid-script). Exit 0 once the script ran (whatever the CUDA
 * calls answered), 2 on a usage error, 3 when libcuda cannot be loaded.
 *
 * How the entry points are found (--via):
 *   dlsym     dlopen("libcuda.so.1") + dlsym of the _v2 names (the default)
 *   proc      cuGetProcAddress, cudaVersion 12040
 *   proc2     cuGetProcAddress_v2, cudaVersion 12040
 *   proc-old  cuGetProcAddress, cudaVersion 11030
 * --ptsz asks the proc paths for the per-thread-default-stream variants.
 * --no-load: libcuda is not loaded at start but by the first command that
 * needs the driver (dlsym-default, sleep, hold, exec-self and ctor-deadlock
 * do not; ctor-deadlock makes the first lookup itself).
 * Built with GP_CUDAPROBE_LINKED (gpupool-cudaprobe-linked), it links
 * libcuda.so.1 and calls the _v2 symbols by name instead: the direct path.
 *
 * The commands (SIZE takes k/m/g) are listed in usage() and README.md. Needs
 * only libc (dlopen, dladdr and threads live there since glibc 2.34), so it
 * can be copied into a container image. */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda_api.h"
#include "fakecuda_size.h"

#define PROBE_MAX_THREADS 1024
#define PROBE_MAX_DEVICES 64
#define PROBE_FILL_MAX (1u << 24)
#define PROBE_THREAD_ROUNDS 100
#define PROBE_VMM_STACK 64
#define PROBE_VERSION_NEW 12040
#define PROBE_VERSION_OLD 11030
#define PROBE_VERSION_LEGACY_RELEASE 10000 /* before the _v2 of 11000 */
#define PROBE_ALARM_S 10                   /* ctor-deadlock: a hang ends in exit 124 */
#define PROBE_CTOR_LIB "libgpupool-ctor-dlsym.so"
#define PROBE_CTOR_DELAY_MS 20 /* thread B starts inside A's constructor (which sleeps 200) */

/* The entry points the commands call: the symbol a dlsym/direct caller uses
 * and the base name cuGetProcAddress takes. */
#define PROBE_FNS(XX)                                                    \
    XX(cuInit, "cuInit")                                                 \
    XX(cuDeviceGet, "cuDeviceGet")                                       \
    XX(cuDeviceGetCount, "cuDeviceGetCount")                             \
    XX(cuDeviceGetUuid_v2, "cuDeviceGetUuid")                            \
    XX(cuDeviceTotalMem_v2, "cuDeviceTotalMem")                          \
    XX(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")             \
    XX(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset")            \
    XX(cuCtxCreate_v2, "cuCtxCreate")                                    \
    XX(cuCtxDestroy_v2, "cuCtxDestroy")                                  \
    XX(cuCtxSetCurrent, "cuCtxSetCurrent")                               \
    XX(cuMemAlloc_v2, "cuMemAlloc")                                      \
    XX(cuMemFree_v2, "cuMemFree")                                        \
    XX(cuMemAllocPitch_v2, "cuMemAllocPitch")                            \
    XX(cuMemAllocManaged, "cuMemAllocManaged")                           \
    XX(cuMemGetInfo_v2, "cuMemGetInfo")                                  \
    XX(cuMemAllocAsync, "cuMemAllocAsync")                               \
    XX(cuMemFreeAsync, "cuMemFreeAsync")                                 \
    XX(cuMemPoolCreate, "cuMemPoolCreate")                               \
    XX(cuMemPoolDestroy, "cuMemPoolDestroy")                             \
    XX(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync")               \
    XX(cuMemCreate, "cuMemCreate")                                       \
    XX(cuMemRelease, "cuMemRelease")                                     \
    XX(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity")   \
    XX(cuArrayCreate_v2, "cuArrayCreate")                                \
    XX(cuArray3DCreate_v2, "cuArray3DCreate")                            \
    XX(cuArrayDestroy, "cuArrayDestroy")                                 \
    XX(cuMipmappedArrayCreate, "cuMipmappedArrayCreate")                 \
    XX(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy")               \
    XX(cuLaunchKernel, "cuLaunchKernel")                                 \
    XX(cuStreamCreate, "cuStreamCreate")                                 \
    XX(cuStreamSynchronize, "cuStreamSynchronize")                       \
    XX(cuStreamGetCtx, "cuStreamGetCtx")                                 \
    XX(cuCtxSynchronize, "cuCtxSynchronize")                             \
    XX(cuCtxPushCurrent_v2, "cuCtxPushCurrent")                          \
    XX(cuCtxPopCurrent_v2, "cuCtxPopCurrent")                            \
    XX(cuDeviceGetMemPool, "cuDeviceGetMemPool")                         \
    XX(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool")           \
    XX(cuDeviceSetMemPool, "cuDeviceSetMemPool")                         \
    XX(cuMemPoolSetAttribute, "cuMemPoolSetAttribute")                   \
    XX(cuMemPoolGetAttribute, "cuMemPoolGetAttribute")                   \
    XX(cuMemPoolTrimTo, "cuMemPoolTrimTo")                               \
    XX(cuPointerGetAttribute, "cuPointerGetAttribute")                   \
    XX(cuMemMap, "cuMemMap")                                             \
    XX(cuMemUnmap, "cuMemUnmap")                                         \
    XX(cuMemAddressReserve, "cuMemAddressReserve")                       \
    XX(cuMemAddressFree, "cuMemAddressFree")                             \
    XX(cuMemSetAccess, "cuMemSetAccess")                                 \
    XX(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle")       \
    XX(cuMemExportToShareableHandle, "cuMemExportToShareableHandle")     \
    XX(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle") \
    XX(cuCtxSetLimit, "cuCtxSetLimit")                                   \
    XX(cuCtxGetLimit, "cuCtxGetLimit")                                   \
    XX(cuStreamBeginCapture_v2, "cuStreamBeginCapture")                  \
    XX(cuStreamEndCapture, "cuStreamEndCapture")                         \
    XX(cuStreamIsCapturing, "cuStreamIsCapturing")                       \
    XX(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags")       \
    XX(cuGraphLaunch, "cuGraphLaunch")                                   \
    XX(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim")                     \
    XX(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute")     \
    XX(cuGraphGetNodes, "cuGraphGetNodes")                               \
    XX(cuGraphNodeGetType, "cuGraphNodeGetType")                         \
    XX(cuGraphMemAllocNodeGetParams, "cuGraphMemAllocNodeGetParams")     \
    XX(cuGraphExecDestroy, "cuGraphExecDestroy")                         \
    XX(cuGraphDestroy, "cuGraphDestroy")

static struct {
#define PROBE_FIELD(sym, base) __typeof__(sym) *sym;
    PROBE_FNS(PROBE_FIELD)
#undef PROBE_FIELD
    __typeof__(cuGetProcAddress) *gpa;
    __typeof__(cuGetProcAddress_v2) *gpa2;
    /* The unversioned legacy symbol (cuGetProcAddress at 10000). */
    __typeof__(cuDevicePrimaryCtxRelease) *legacy_release;
} cu;

/* Calls an entry point, or answers NOT_FOUND where the library did not
 * provide it (dlsym or cuGetProcAddress came back empty). */
#define CALL(fn, ...) (cu.fn ? cu.fn(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND)

enum via { VIA_DLSYM, VIA_PROC, VIA_PROC2, VIA_PROC_OLD };

/* --- the script ----------------------------------------------------------- */

enum arg { A_NONE, A_INT, A_SIZE, A_NAME };

struct op {
    const char *name;
    enum arg args[3];
    bool no_driver; /* runs without libcuda loaded (--no-load) */
};

enum opcode {
    OP_INIT,
    OP_DEVICE,
    OP_CTX_CREATE,
    OP_CTX_DESTROY,
    OP_PRIMARY_RESET,
    OP_ALLOC,
    OP_PITCH,
    OP_MANAGED,
    OP_ASYNC,
    OP_POOLALLOC,
    OP_CREATE,
    OP_ARRAY,
    OP_ARRAY3D,
    OP_MIPMAP,
    OP_FREE,
    OP_FREE_ALL,
    OP_INFO,
    OP_TOTAL,
    OP_FILL,
    OP_FILL_FREE,
    OP_LOOP,
    OP_LAUNCH,
    OP_THREADS,
    OP_NVML,
    OP_NVML_PROCS,
    OP_NVML_UTIL,
    OP_HOLD,
    OP_SLEEP,
    OP_NULL_INFO,
    OP_NULL_ALLOC,
    OP_PROCADDR,
    OP_GRAPH_NODE,
    OP_ZOMBIE,
    OP_EXEC_SELF,
    OP_DLSYM_DEFAULT,
    OP_CTOR_DEADLOCK,
    OP_LEGACY_RELEASE,
    OP_DEVICE_COUNT,
    OP_UUID,
    OP_POOL_THRESHOLD,
    OP_POOL_TRIM,
    OP_POOL_ATTR,
    OP_SYNC,
    OP_XDEV_POOL,
    OP_STREAM_ON,
    OP_ASYNC_ON_STREAM,
    OP_NO_CTX,
    OP_SET_MEMPOOL,
    OP_PTR_DEV,
    OP_STREAM_CTX,
    OP_VMM,
    OP_VMM_CREATE,
    OP_VMM_MAP,
    OP_VMM_RELEASE,
    OP_VMM_UNMAP,
    OP_VMM_RETAIN,
    OP_VMM_IMPORT,
    OP_SET_LIMIT,
    OP_CAPTURE,
    OP_GRAPH_LAUNCH,
    OP_GRAPH_TRIM,
    OP_GRAPH_ATTR,
    OP_GRAPH_DESTROY,
    OP_FORK_HOLD,
    OP_POOL_DESTROY,
    OP_POOL_RESET_HIGH,
    OP_COUNT
};

static const struct op ops[OP_COUNT] = {
    [OP_INIT] = {"init", {A_NONE}},
    [OP_DEVICE] = {"device", {A_INT}},
    [OP_CTX_CREATE] = {"ctx-create", {A_NONE}},
    [OP_CTX_DESTROY] = {"ctx-destroy", {A_NONE}},
    [OP_PRIMARY_RESET] = {"primary-reset", {A_NONE}},
    [OP_ALLOC] = {"alloc", {A_SIZE}},
    [OP_PITCH] = {"pitch", {A_SIZE, A_INT}},
    [OP_MANAGED] = {"managed", {A_SIZE}},
    [OP_ASYNC] = {"async", {A_SIZE}},
    [OP_POOLALLOC] = {"poolalloc", {A_SIZE}},
    [OP_CREATE] = {"create", {A_SIZE}},
    [OP_ARRAY] = {"array", {A_INT, A_INT}},
    [OP_ARRAY3D] = {"array3d", {A_INT, A_INT, A_INT}},
    [OP_MIPMAP] = {"mipmap", {A_INT, A_INT, A_INT}},
    [OP_FREE] = {"free", {A_NONE}},
    [OP_FREE_ALL] = {"free-all", {A_NONE}},
    [OP_INFO] = {"info", {A_NONE}},
    [OP_TOTAL] = {"total", {A_NONE}},
    [OP_FILL] = {"fill", {A_SIZE}},
    [OP_FILL_FREE] = {"fill-free", {A_NONE}},
    [OP_LOOP] = {"loop", {A_INT, A_SIZE}},
    [OP_LAUNCH] = {"launch", {A_INT}},
    [OP_THREADS] = {"threads", {A_INT, A_SIZE}},
    [OP_NVML] = {"nvml", {A_NONE}},
    [OP_NVML_PROCS] = {"nvml-procs", {A_NONE}},
    [OP_NVML_UTIL] = {"nvml-util", {A_NONE}},
    [OP_HOLD] = {"hold", {A_NONE}, true},
    [OP_SLEEP] = {"sleep", {A_INT}, true},
    [OP_NULL_INFO] = {"null-info", {A_NONE}},
    [OP_NULL_ALLOC] = {"null-alloc", {A_NONE}},
    [OP_PROCADDR] = {"procaddr", {A_NAME, A_INT}}, /* [FLAGS] optional */
    [OP_GRAPH_NODE] = {"graph-node", {A_INT}},
    [OP_ZOMBIE] = {"zombie", {A_SIZE}},
    [OP_EXEC_SELF] = {"exec-self", {A_NONE}, true}, /* the rest of argv is the new script */
    [OP_DLSYM_DEFAULT] = {"dlsym-default", {A_NAME}, true},
    [OP_CTOR_DEADLOCK] = {"ctor-deadlock", {A_NONE}, true},
    [OP_LEGACY_RELEASE] = {"legacy-release", {A_NONE}},
    [OP_DEVICE_COUNT] = {"count", {A_NONE}},
    [OP_UUID] = {"uuid", {A_NONE}},
    [OP_POOL_THRESHOLD] = {"pool-threshold", {A_NAME}}, /* bytes or "max" */
    [OP_POOL_TRIM] = {"pool-trim", {A_SIZE}},
    [OP_POOL_ATTR] = {"pool-attr", {A_NONE}},
    [OP_SYNC] = {"sync", {A_NONE}},
    [OP_XDEV_POOL] = {"xdev-pool", {A_SIZE, A_INT}},
    [OP_STREAM_ON] = {"stream-on", {A_INT}},
    [OP_ASYNC_ON_STREAM] = {"async-on-stream", {A_SIZE}},
    [OP_NO_CTX] = {"no-ctx", {A_NONE}},
    [OP_SET_MEMPOOL] = {"set-mempool", {A_INT}},
    [OP_PTR_DEV] = {"ptr-dev", {A_NONE}},
    [OP_STREAM_CTX] = {"stream-ctx", {A_NONE}},
    [OP_VMM] = {"vmm", {A_SIZE}},
    [OP_VMM_CREATE] = {"vmm-create", {A_SIZE}},
    [OP_VMM_MAP] = {"vmm-map", {A_NONE}},
    [OP_VMM_RELEASE] = {"vmm-release", {A_NONE}},
    [OP_VMM_UNMAP] = {"vmm-unmap", {A_NONE}},
    [OP_VMM_RETAIN] = {"vmm-retain", {A_NONE}},
    [OP_VMM_IMPORT] = {"vmm-import", {A_NONE}},
    [OP_SET_LIMIT] = {"set-limit", {A_NAME, A_SIZE}}, /* heap|stack BYTES */
    [OP_CAPTURE] = {"capture", {A_SIZE}},             /* [free] optional */
    [OP_GRAPH_LAUNCH] = {"graph-launch", {A_NONE}},
    [OP_GRAPH_TRIM] = {"graph-trim", {A_NONE}},
    [OP_GRAPH_ATTR] = {"graph-attr", {A_NONE}},
    [OP_GRAPH_DESTROY] = {"graph-destroy", {A_NONE}},
    [OP_FORK_HOLD] = {"fork-hold", {A_SIZE}},
    [OP_POOL_DESTROY] = {"pool-destroy", {A_NONE}},
    [OP_POOL_RESET_HIGH] = {"pool-reset-high", {A_NONE}},
};

struct cmd {
    enum opcode op;
    uint64_t a[3];
    const char *name;
};

static void usage(void)
{
    fputs("usage: gpupool-cudaprobe [--via dlsym|proc|proc2|proc-old] [--ptsz] [--no-load] "
          "COMMAND...\n"
          "commands (SIZE: bytes or a number with k/m/g):\n"
          "  init | device N | ctx-create | ctx-destroy | primary-reset\n"
          "  alloc SIZE | pitch WIDTH HEIGHT | managed SIZE | async SIZE | poolalloc SIZE\n"
          "  create SIZE | array W H | array3d W H D | mipmap W H LEVELS\n"
          "  free | free-all | info | total | fill STEP | fill-free\n"
          "  loop N SIZE | launch N | threads N SIZE | nvml | nvml-procs | nvml-util | hold | "
          "sleep MS\n"
          "  null-info | null-alloc | procaddr NAME VERSION [FLAGS] | graph-node VERSION\n"
          "  zombie SIZE | exec-self COMMAND... | dlsym-default NAME | ctor-deadlock\n"
          "  legacy-release | count | uuid\n"
          "  pool-threshold BYTES|max | pool-trim BYTES | pool-attr | sync | xdev-pool SIZE DEV\n"
          "  stream-on DEV | async-on-stream SIZE | no-ctx | set-mempool DEV | ptr-dev\n"
          "  stream-ctx | vmm SIZE | vmm-create SIZE | vmm-map | vmm-release | vmm-unmap\n"
          "  vmm-retain | vmm-import | set-limit heap|stack BYTES\n"
          "  capture SIZE [free] | graph-launch | graph-trim | graph-attr | graph-destroy\n"
          "  fork-hold SIZE | pool-destroy | pool-reset-high\n",
          stderr);
}

static int parse_u64(const char *s, bool size, uint64_t *out)
{
    return s ? fakecuda_parse_size(s, strlen(s), size, out) : -1;
}

/* argv[i..] into cmds; -1 (and a message) on a usage error. */
static int parse_script(int argc, char **argv, int i, struct cmd *cmds, int *ncmds)
{
    int n = 0;
    while (i < argc) {
        int op = -1;
        for (int k = 0; k < OP_COUNT; k++)
            if (strcmp(argv[i], ops[k].name) == 0)
                op = k;
        if (op < 0) {
            fprintf(stderr, "gpupool-cudaprobe: unknown command \"%s\"\n", argv[i]);
            return -1;
        }
        struct cmd *c = &cmds[n++];
        memset(c, 0, sizeof(*c));
        c->op = (enum opcode)op;
        i++;
        for (int k = 0; k < 3 && ops[op].args[k] != A_NONE; k++, i++) {
            enum arg a = ops[op].args[k];
            if (i >= argc || (a == A_NAME ? (c->name = argv[i]) == NULL
                                          : parse_u64(argv[i], a == A_SIZE, &c->a[k]) != 0)) {
                fprintf(stderr, "gpupool-cudaprobe: %s: argument %d missing or not a %s\n",
                        ops[op].name, k + 1,
                        a == A_SIZE  ? "size"
                        : a == A_INT ? "number"
                                     : "name");
                return -1;
            }
        }
        /* procaddr's optional FLAGS: a number (no command is one). */
        if (op == OP_PROCADDR && i < argc && parse_u64(argv[i], false, &c->a[2]) == 0)
            i++;
        if (op == OP_POOL_THRESHOLD) {
            if (strcmp(c->name, "max") == 0)
                c->a[0] = UINT64_MAX;
            else if (parse_u64(c->name, true, &c->a[0]) != 0) {
                fprintf(stderr, "gpupool-cudaprobe: pool-threshold: \"%s\" is not a size or max\n",
                        c->name);
                return -1;
            }
        }
        if (op == OP_SET_LIMIT && strcmp(c->name, "heap") != 0 && strcmp(c->name, "stack") != 0) {
            fprintf(stderr, "gpupool-cudaprobe: set-limit: \"%s\" is not heap or stack\n", c->name);
            return -1;
        }
        /* capture's optional "free": the captured allocation is freed in the graph. */
        if (op == OP_CAPTURE && i < argc && strcmp(argv[i], "free") == 0) {
            c->a[1] = 1;
            i++;
        }
        /* exec-self: what follows is the new image's script, checked there. */
        if (op == OP_EXEC_SELF) {
            c->a[0] = (uint64_t)i;
            break;
        }
    }
    *ncmds = n;
    return 0;
}

/* --- output ----------------------------------------------------------------- */

static const char *err_name(CUresult rc)
{
    static char buf[32];
    switch (rc) {
#define PROBE_ERR(sym, value, text) \
    case sym:                       \
        return #sym;
        CU_RESULT_MAP(PROBE_ERR)
#undef PROBE_ERR
    }
    snprintf(buf, sizeof(buf), "CUresult(%d)", (int)rc);
    return buf;
}

static void say(const char *cmd, CUresult rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(const char *cmd, CUresult rc, const char *fmt, ...)
{
    printf("%s %s", cmd, err_name(rc));
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        putchar(' ');
        vprintf(fmt, ap);
        va_end(ap);
    }
    putchar('\n');
    fflush(stdout);
}

/* Where a code pointer lives: "lib=<basename> sym=<name>". */
static void where(void *fn, char *buf, size_t len)
{
    Dl_info info;
    if (!fn || dladdr(fn, &info) == 0 || !info.dli_fname) {
        snprintf(buf, len, "lib=? sym=?");
        return;
    }
    const char *slash = strrchr(info.dli_fname, '/');
    snprintf(buf, len, "lib=%s sym=%s", slash ? slash + 1 : info.dli_fname,
             info.dli_sname ? info.dli_sname : "?");
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* --- loading ------------------------------------------------------------------ */

/* How the process was started: exec-self repeats the options, and --no-load
 * defers load() to the first command that needs the driver. */
static struct {
    enum via via;
    bool ptsz;
    bool loaded;
    char **argv;
    int nopts; /* argv[1..nopts] are the options */
} opt;

#ifndef GP_CUDAPROBE_LINKED
/* One entry point through cuGetProcAddress(_v2) at `version`; NULL if absent. */
static void *proc_get(enum via via, const char *base, int version, cuuint64_t flags)
{
    CUdriverProcAddressQueryResult status;
    void *p = NULL;
    if ((via == VIA_PROC2 ? cu.gpa2(base, &p, version, flags, &status)
                          : cu.gpa(base, &p, version, flags)) != CUDA_SUCCESS)
        p = NULL;
    return p;
}
#endif

/* The first half of loading: dlopen only (ctor-deadlock runs the halves
 * apart). -1 and a message when the library cannot be loaded. */
#ifndef GP_CUDAPROBE_LINKED
static void *lib;
#endif

static int load_open(void)
{
#ifndef GP_CUDAPROBE_LINKED
    if (!lib && !(lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL))) {
        fprintf(stderr, "gpupool-cudaprobe: cannot load libcuda.so.1: %s\n", dlerror());
        return -1;
    }
#endif
    return 0;
}

/* The second half: every entry point the commands call, by --via. */
static int load_syms(enum via via, bool ptsz)
{
    opt.loaded = true;
#ifdef GP_CUDAPROBE_LINKED
    (void)via;
    (void)ptsz;
#define PROBE_LINK(sym, base) cu.sym = sym;
    PROBE_FNS(PROBE_LINK)
#undef PROBE_LINK
    cu.gpa = cuGetProcAddress;
    cu.gpa2 = cuGetProcAddress_v2;
    cu.legacy_release = cuDevicePrimaryCtxRelease;
    return 0;
#else
    void *h = lib;
    cu.gpa = (__typeof__(cu.gpa))dlsym(h, "cuGetProcAddress");
    cu.gpa2 = (__typeof__(cu.gpa2))dlsym(h, "cuGetProcAddress_v2");
    if (via == VIA_DLSYM) {
#define PROBE_DLSYM(sym, base) cu.sym = (__typeof__(cu.sym))dlsym(h, #sym);
        PROBE_FNS(PROBE_DLSYM)
#undef PROBE_DLSYM
        cu.legacy_release = (__typeof__(cu.legacy_release))dlsym(h, "cuDevicePrimaryCtxRelease");
        return 0;
    }
    if ((via == VIA_PROC2 && !cu.gpa2) || (via != VIA_PROC2 && !cu.gpa)) {
        fprintf(stderr, "gpupool-cudaprobe: libcuda.so.1 has no %s\n",
                via == VIA_PROC2 ? "cuGetProcAddress_v2" : "cuGetProcAddress");
        return -1;
    }
    int version = via == VIA_PROC_OLD ? PROBE_VERSION_OLD : PROBE_VERSION_NEW;
    cuuint64_t flags = ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
#define PROBE_PROC(sym, base) cu.sym = (__typeof__(cu.sym))proc_get(via, base, version, flags);
    PROBE_FNS(PROBE_PROC)
#undef PROBE_PROC
    cu.legacy_release = (__typeof__(cu.legacy_release))proc_get(
        via, "cuDevicePrimaryCtxRelease", PROBE_VERSION_LEGACY_RELEASE, flags);
    return 0;
#endif
}

static int load(enum via via, bool ptsz)
{
    return load_open() == 0 ? load_syms(via, ptsz) : -1;
}

/* --- state the commands share ------------------------------------------------- */

enum akind { AK_PTR, AK_ASYNC, AK_VMM, AK_ARRAY, AK_MIPMAP };

struct alloc {
    enum akind kind;
    uint64_t h;
    CUcontext ctx;   /* what its teardown frees it with */
    CUstream stream; /* async: the stream it came from (and is freed on) */
};

static struct {
    CUdevice dev;
    CUcontext cur;
    CUcontext primary[PROBE_MAX_DEVICES];
    CUcontext created[PROBE_MAX_DEVICES];
    int ncreated;
    CUmemoryPool pool[PROBE_MAX_DEVICES];
    struct {
        CUmemGenericAllocationHandle h;
        size_t size;
    } vh[PROBE_VMM_STACK]; /* vmm: handles (H) */
    struct {
        CUdeviceptr va;
        size_t size;
        CUmemGenericAllocationHandle h;
    } vm[PROBE_VMM_STACK]; /* vmm: mappings (M), each in its own reservation */
    int nvh, nvm;
    CUstream gstream; /* capture: its stream, graph, executable graph */
    CUgraph graph;
    CUgraphExec gexec;
    CUdeviceptr gptr;     /* the captured allocation's address */
    bool gfreed;          /* the graph frees it itself */
    CUstream stream;      /* stream-on's newest stream */
    CUcontext stream_ctx; /* the context it was made in */
    struct alloc *live;
    size_t nlive, caplive;
    CUdeviceptr *fill;
    size_t nfill, capfill;
} st;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 64;
    void *np = realloc(*p, n * elem);
    if (!np)
        return -1;
    *p = np;
    *cap = n;
    return 0;
}

static CUresult remember_in(enum akind kind, uint64_t h, CUcontext ctx, CUstream stream)
{
    if (grow((void **)&st.live, &st.caplive, st.nlive + 1, sizeof(*st.live)) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    st.live[st.nlive++] = (struct alloc){kind, h, ctx, stream};
    return CUDA_SUCCESS;
}

static CUresult remember(enum akind kind, uint64_t h)
{
    return remember_in(kind, h, st.cur, NULL);
}

static CUresult release(const struct alloc *a)
{
    switch (a->kind) {
    case AK_PTR:
        return CALL(cuMemFree_v2, a->h);
    case AK_ASYNC:
        return CALL(cuMemFreeAsync, a->h, a->stream);
    case AK_VMM:
        return CALL(cuMemRelease, a->h);
    case AK_ARRAY:
        return CALL(cuArrayDestroy, (CUarray)(uintptr_t)a->h);
    case AK_MIPMAP:
        return CALL(cuMipmappedArrayDestroy, (CUmipmappedArray)(uintptr_t)a->h);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* A context's teardown freed what was allocated in it (VMM handles are
 * device-level and survive). */
static void forget_ctx(CUcontext ctx)
{
    size_t k = 0;
    for (size_t i = 0; i < st.nlive; i++)
        if (st.live[i].ctx != ctx || st.live[i].kind == AK_VMM)
            st.live[k++] = st.live[i];
    st.nlive = k;
}

static CUresult use_device(int ordinal)
{
    CUdevice d;
    CUresult rc = CALL(cuDeviceGet, &d, ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (d < 0 || d >= PROBE_MAX_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!st.primary[d] && (rc = CALL(cuDevicePrimaryCtxRetain, &st.primary[d], d)) != CUDA_SUCCESS)
        return rc;
    if ((rc = CALL(cuCtxSetCurrent, st.primary[d])) != CUDA_SUCCESS)
        return rc;
    st.dev = d;
    st.cur = st.primary[d];
    return CUDA_SUCCESS;
}

/* --- commands ------------------------------------------------------------------ */

struct worker {
    pthread_t tid;
    uint64_t size;
    int failures;
    CUresult first;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    CUresult rc = CALL(cuCtxSetCurrent, st.cur);
    w->first = rc;
    if (rc != CUDA_SUCCESS) {
        w->failures = PROBE_THREAD_ROUNDS;
        return NULL;
    }
    for (int i = 0; i < PROBE_THREAD_ROUNDS; i++) {
        CUdeviceptr p;
        rc = CALL(cuMemAlloc_v2, &p, w->size);
        if (rc == CUDA_SUCCESS)
            rc = CALL(cuMemFree_v2, p);
        if (rc != CUDA_SUCCESS) {
            if (w->failures++ == 0)
                w->first = rc;
        }
    }
    return NULL;
}

static void cmd_threads(uint64_t n, uint64_t size)
{
    if (n == 0 || n > PROBE_MAX_THREADS) {
        say("threads", CUDA_ERROR_INVALID_VALUE, "max=%d", PROBE_MAX_THREADS);
        return;
    }
    struct worker *w = calloc(n, sizeof(*w));
    if (!w) {
        say("threads", CUDA_ERROR_OUT_OF_MEMORY, NULL);
        return;
    }
    uint64_t started = 0;
    for (; started < n; started++) {
        w[started].size = size;
        if (pthread_create(&w[started].tid, NULL, worker_main, &w[started]) != 0)
            break;
    }
    int failures = (int)(n - started) * PROBE_THREAD_ROUNDS;
    CUresult first = started < n ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
    for (uint64_t i = 0; i < started; i++) {
        if (pthread_join(w[i].tid, NULL) != 0)
            continue;
        if (w[i].failures && first == CUDA_SUCCESS)
            first = w[i].first;
        failures += w[i].failures;
    }
    free(w);
    say("threads", first, "failures=%d", failures);
}

/* NVML's memory structs (nvml.h), declared here to keep the probe
 * self-contained. */
struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_memory_v2 {
    unsigned int version;
    unsigned long long total, reserved, free, used;
};

static void cmd_nvml(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) {
        say("nvml", CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "dlopen=failed");
        return;
    }
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*by_index)(unsigned, void **) =
        (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    int (*info)(void *, struct nvml_memory *) =
        (int (*)(void *, struct nvml_memory *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    int (*info2)(void *, struct nvml_memory_v2 *) =
        (int (*)(void *, struct nvml_memory_v2 *))dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
    if (!init || !by_index || !info || !info2) {
        say("nvml", CUDA_ERROR_NOT_FOUND, "dlsym=failed");
        return;
    }
    void *dev = NULL;
    struct nvml_memory m = {0};
    struct nvml_memory_v2 m2 = {.version = (unsigned)sizeof(m2) | (2u << 24)};
    int rc = init();
    const char *step = "nvmlInit_v2";
    if (rc == 0) {
        step = "nvmlDeviceGetHandleByIndex_v2";
        rc = by_index(0, &dev);
    }
    if (rc == 0) {
        step = "nvmlDeviceGetMemoryInfo";
        rc = info(dev, &m);
    }
    if (rc == 0) {
        step = "nvmlDeviceGetMemoryInfo_v2";
        rc = info2(dev, &m2);
    }
    if (rc != 0) {
        say("nvml", CUDA_ERROR_UNKNOWN, "call=%s nvml_rc=%d", step, rc);
        return;
    }
    say("nvml", CUDA_SUCCESS, "total=%llu used=%llu free=%llu total2=%llu used2=%llu free2=%llu",
        m.total, m.used, m.free, m2.total, m2.used, m2.free);
}

/* nvmlProcessInfo_t of the _v2/_v3 queries. */
struct nvml_process {
    unsigned int pid;
    unsigned long long used;
    unsigned int gi, ci;
};

/* nvmlDeviceGetComputeRunningProcesses_v3 then _v2 on device 0, first
 * asked for the count only (room 0): "n=N pids=P,... used=U,... n2=N2". */
static void cmd_nvml_procs(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) {
        say("nvml-procs", CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "dlopen=failed");
        return;
    }
    typedef int (*procs_fn)(void *, unsigned *, struct nvml_process *);
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*by_index)(unsigned, void **) =
        (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    procs_fn v3 = (procs_fn)dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
    procs_fn v2 = (procs_fn)dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v2");
    void *dev = NULL;
    if (!init || !by_index || !v3 || !v2 || init() != 0 || by_index(0, &dev) != 0) {
        say("nvml-procs", CUDA_ERROR_NOT_FOUND, "setup=failed");
        return;
    }
    unsigned need = 0;
    int rc0 = v3(dev, &need, NULL);
    struct nvml_process p[64];
    unsigned n = 64, n2 = 64;
    int rc = v3(dev, &n, p);
    struct nvml_process q[64];
    int rc2 = v2(dev, &n2, q);
    if (rc != 0 || rc2 != 0) {
        say("nvml-procs", CUDA_ERROR_UNKNOWN, "nvml_rc=%d nvml_rc2=%d", rc, rc2);
        return;
    }
    char pids[512] = "", used[1024] = "";
    size_t lp = 0, lu = 0;
    for (unsigned i = 0; i < n && i < 64; i++) {
        lp += (size_t)snprintf(pids + lp, lp < sizeof pids ? sizeof pids - lp : 0, "%s%u",
                               i ? "," : "", p[i].pid);
        lu += (size_t)snprintf(used + lu, lu < sizeof used ? sizeof used - lu : 0, "%s%llu",
                               i ? "," : "", p[i].used);
    }
    say("nvml-procs", CUDA_SUCCESS, "count_rc=%d need=%u n=%u pids=%s used=%s n2=%u", rc0, need, n,
        n ? pids : "-", n ? used : "-", n2);
}

/* nvmlProcessUtilizationSample_t (nvml.h). */
struct nvml_util_sample {
    unsigned pid;
    unsigned long long ts;
    unsigned sm, mem, enc, dec;
};

/* nvmlDeviceGetProcessUtilization on GPU 0 with the driver's sizing
 * protocol (NULL buffer first): the pids and SM percents it answers. */
static void cmd_nvml_util(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) {
        say("nvml-util", CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "dlopen=failed");
        return;
    }
    typedef int (*util_fn)(void *, struct nvml_util_sample *, unsigned *, unsigned long long);
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*by_index)(unsigned, void **) =
        (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    util_fn util = (util_fn)dlsym(h, "nvmlDeviceGetProcessUtilization");
    void *dev = NULL;
    if (!init || !by_index || !util || init() != 0 || by_index(0, &dev) != 0) {
        say("nvml-util", CUDA_ERROR_NOT_FOUND, "setup=failed");
        return;
    }
    unsigned need = 0;
    int rc0 = util(dev, NULL, &need, 0);
    struct nvml_util_sample s[64];
    unsigned n = 64;
    int rc = util(dev, s, &n, 0);
    char pids[1024] = "";
    size_t lp = 0;
    for (unsigned i = 0; rc == 0 && i < n && i < 64; i++)
        lp += (size_t)snprintf(pids + lp, lp < sizeof pids ? sizeof pids - lp : 0, "%s%u:%u",
                               i ? "," : "", s[i].pid, s[i].sm);
    say("nvml-util", CUDA_SUCCESS, "count_rc=%d need=%u rc=%d n=%u samples=%s", rc0, need, rc,
        rc == 0 ? n : 0, lp ? pids : "-");
}

static CUresult proc_lookup(const char *name, int version, cuuint64_t flags, void **p, char *status,
                            size_t len)
{
    CUdriverProcAddressQueryResult s = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult rc;
    *p = NULL;
    if (cu.gpa2) {
        rc = cu.gpa2(name, p, version, flags, &s);
        snprintf(status, len, "status=%d", (int)s);
    } else if (cu.gpa) {
        rc = cu.gpa(name, p, version, flags);
        snprintf(status, len, "status=none");
    } else {
        snprintf(status, len, "status=none");
        return CUDA_ERROR_NOT_FOUND;
    }
    return rc;
}

static void cmd_procaddr(const char *name, uint64_t version, uint64_t flags)
{
    void *p;
    char status[32], loc[256];
    CUresult rc = proc_lookup(name, (int)version, flags, &p, status, sizeof(status));
    if (p)
        where(p, loc, sizeof(loc));
    else
        snprintf(loc, sizeof(loc), "pfn=null");
    say("procaddr", rc, "%s %s", status, loc);
}

static void cmd_graph_node(uint64_t version)
{
    void *p;
    char status[32], loc[256];
    CUresult rc = proc_lookup("cuGraphAddKernelNode", (int)version, 0, &p, status, sizeof(status));
    if (rc != CUDA_SUCCESS || !p) {
        say("graph-node", rc, "%s pfn=null", status);
        return;
    }
    /* v2's parameters extend v1's, so one zeroed v2 block serves either ABI. */
    CUDA_KERNEL_NODE_PARAMS_v2 params = {0};
    CUgraphNode node = NULL;
    rc = ((__typeof__(cuGraphAddKernelNode_v2) *)p)(&node, (CUgraph)(uintptr_t)0x1, NULL, 0,
                                                    &params);
    where(p, loc, sizeof(loc));
    say("graph-node", rc, "abi=%s %s",
        node == FAKECUDA_GRAPH_NODE_V1   ? "v1"
        : node == FAKECUDA_GRAPH_NODE_V2 ? "v2"
                                         : "unknown",
        loc);
}

/* zombie: a worker holds the memory while the main thread exits, leaving
 * the process alive behind a zombie thread-group leader. */
static void *zombie_main(void *arg)
{
    uint64_t size = *(uint64_t *)arg;
    CUdeviceptr p = 0;
    CUresult rc = CALL(cuCtxSetCurrent, st.cur);
    if (rc == CUDA_SUCCESS)
        rc = CALL(cuMemAlloc_v2, &p, size);
    say("zombie", rc, NULL);
    printf("holding\n");
    fflush(stdout);
    for (;;)
        pause();
    return NULL;
}

static void cmd_zombie(uint64_t size)
{
    static uint64_t arg;
    pthread_t tid;
    arg = size;
    if (pthread_create(&tid, NULL, zombie_main, &arg) != 0) {
        say("zombie", CUDA_ERROR_OUT_OF_MEMORY, "thread=failed");
        return;
    }
    pthread_exit(NULL);
}

/* exec-self: the same options, the rest of argv as the new script. */
static void cmd_exec_self(int rest)
{
    int argc = 0;
    while (opt.argv[argc])
        argc++;
    char **nargv = calloc((size_t)argc + 1, sizeof(*nargv));
    if (!nargv) {
        say("exec-self", CUDA_ERROR_OUT_OF_MEMORY, NULL);
        return;
    }
    int n = 0;
    for (int k = 0; k <= opt.nopts; k++)
        nargv[n++] = opt.argv[k];
    for (int k = rest; k < argc; k++)
        nargv[n++] = opt.argv[k];
    fflush(stdout);
    execv("/proc/self/exe", nargv);
    int e = errno;
    free(nargv);
    say("exec-self", CUDA_ERROR_UNKNOWN, "errno=%d", e);
}

/* ctor-deadlock: thread A dlopen()s a library whose constructor looks up
 * cuInit through dlsym(RTLD_DEFAULT) (with the loader's lock held), while
 * thread B makes the process's first CUDA lookup: B dlopens libcuda, then A
 * starts its dlopen, then (A inside the constructor) B looks the entry points
 * up and calls cuInit. A lookup layer that loads libcuda under its own
 * once-lock inside dlsym deadlocks here: B holds the once and waits for the
 * loader lock, A holds the loader lock and waits for the once. */
static pthread_barrier_t ctor_start;

struct ctor_run {
    char path[PATH_MAX];
    void *lib;
    CUresult rc;
};

static void *ctor_thread_a(void *arg)
{
    struct ctor_run *r = arg;
    (void)pthread_barrier_wait(&ctor_start); /* B has dlopened libcuda */
    r->lib = dlopen(r->path, RTLD_NOW);
    return NULL;
}

static void *ctor_thread_b(void *arg)
{
    struct ctor_run *r = arg;
    struct timespec ts = {0, PROBE_CTOR_DELAY_MS * 1000000L};
    int opened = load_open();
    (void)pthread_barrier_wait(&ctor_start);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    r->rc = opened == 0 && load_syms(opt.via, opt.ptsz) == 0 ? CALL(cuInit, 0)
                                                             : CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
    return NULL;
}

static void on_alarm(int sig)
{
    (void)sig;
    _exit(124);
}

static void cmd_ctor_deadlock(void)
{
    static struct ctor_run r;
    ssize_t n = readlink("/proc/self/exe", r.path, sizeof(r.path) - 1);
    char *slash = n > 0 ? memrchr(r.path, '/', (size_t)n) : NULL;
    if (!slash || (size_t)(slash - r.path) + sizeof("/" PROBE_CTOR_LIB) > sizeof(r.path)) {
        say("ctor-deadlock", CUDA_ERROR_NOT_FOUND, "lib=unknown");
        return;
    }
    memcpy(slash + 1, PROBE_CTOR_LIB, sizeof(PROBE_CTOR_LIB));
    pthread_t a, b;
    if (signal(SIGALRM, on_alarm) == SIG_ERR || pthread_barrier_init(&ctor_start, NULL, 2) != 0) {
        say("ctor-deadlock", CUDA_ERROR_UNKNOWN, "setup=failed");
        return;
    }
    alarm(PROBE_ALARM_S);
    if (pthread_create(&a, NULL, ctor_thread_a, &r) != 0)
        _exit(2);
    if (pthread_create(&b, NULL, ctor_thread_b, &r) != 0)
        _exit(2);
    (void)pthread_join(a, NULL);
    (void)pthread_join(b, NULL);
    alarm(0);
    (void)pthread_barrier_destroy(&ctor_start);
    if (!r.lib) {
        say("ctor-deadlock", CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "dlopen=%s", dlerror());
        return;
    }
    const int *found = dlsym(r.lib, "gp_ctor_dlsym_found");
    say("ctor-deadlock", r.rc, "cuInit=%s", !found ? "?" : *found ? "found" : "null");
}

/* The current pool of the current device (cuDeviceGetMemPool). */
static CUresult cur_mempool(CUmemoryPool *pool)
{
    return CALL(cuDeviceGetMemPool, pool, st.dev);
}

/* The probe's own pool on device d (cuMemPoolCreate, made once). */
static CUresult own_pool(int d, CUmemoryPool *pool)
{
    CUresult rc = CUDA_SUCCESS;
    if (d < 0 || d >= PROBE_MAX_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!st.pool[d]) {
        CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, d}};
        rc = CALL(cuMemPoolCreate, &st.pool[d], &props);
    }
    *pool = st.pool[d];
    return rc;
}

static void cmd_pool_attr(void)
{
    CUmemoryPool pool = NULL;
    cuuint64_t v[5] = {0};
    static const CUmemPool_attribute which[5] = {
        CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
        CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
        CU_MEMPOOL_ATTR_USED_MEM_HIGH};
    CUresult rc = cur_mempool(&pool);
    for (int k = 0; k < 5 && rc == CUDA_SUCCESS; k++)
        rc = CALL(cuMemPoolGetAttribute, pool, which[k], &v[k]);
    say("pool-attr", rc,
        "reserved=%" PRIu64 " used=%" PRIu64 " threshold=%" PRIu64 " reserved-high=%" PRIu64
        " used-high=%" PRIu64,
        (uint64_t)v[0], (uint64_t)v[1], (uint64_t)v[2], (uint64_t)v[3], (uint64_t)v[4]);
}

/* A stream in device d's primary context, the current context unchanged. */
static void cmd_stream_on(uint64_t d)
{
    CUdevice dev = 0;
    CUcontext popped = NULL;
    CUstream s = NULL;
    CUresult rc = d > INT_MAX ? CUDA_ERROR_INVALID_DEVICE : CALL(cuDeviceGet, &dev, (int)d);
    if (rc == CUDA_SUCCESS && (dev < 0 || dev >= PROBE_MAX_DEVICES))
        rc = CUDA_ERROR_INVALID_DEVICE;
    if (rc == CUDA_SUCCESS && !st.primary[dev])
        rc = CALL(cuDevicePrimaryCtxRetain, &st.primary[dev], dev);
    if (rc == CUDA_SUCCESS)
        rc = CALL(cuCtxPushCurrent_v2, st.primary[dev]);
    if (rc == CUDA_SUCCESS) {
        rc = CALL(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
        CUresult r = CALL(cuCtxPopCurrent_v2, &popped);
        rc = rc == CUDA_SUCCESS ? r : rc;
    }
    if (rc == CUDA_SUCCESS) {
        st.stream = s;
        st.stream_ctx = st.primary[dev];
    }
    say("stream-on", rc, NULL);
}

static void cmd_ptr_dev(void)
{
    int dev = -1;
    size_t k = st.nlive;
    while (k > 0 && st.live[k - 1].kind != AK_PTR && st.live[k - 1].kind != AK_ASYNC)
        k--;
    CUresult rc = k == 0 ? CUDA_ERROR_INVALID_VALUE
                         : CALL(cuPointerGetAttribute, &dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                st.live[k - 1].h);
    say("ptr-dev", rc, "dev=%d", dev);
}

static void cmd_stream_ctx(void)
{
    CUcontext ctx = NULL;
    CUresult rc = CALL(cuStreamGetCtx, st.stream, &ctx);
    for (int d = 0; rc == CUDA_SUCCESS && d < PROBE_MAX_DEVICES; d++)
        if (ctx && ctx == st.primary[d]) {
            say("stream-ctx", rc, "primary=%d", d);
            return;
        }
    say("stream-ctx", rc, "ctx=%s", ctx ? "other" : "null");
}

/* --- vmm: a stack of handles (H) and one of mappings (M) --- */

static CUresult vmm_push_h(CUmemGenericAllocationHandle h, size_t size)
{
    if (st.nvh == PROBE_VMM_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    st.vh[st.nvh].h = h;
    st.vh[st.nvh++].size = size;
    return CUDA_SUCCESS;
}

/* cuMemCreate of size rounded up to the granularity, exportable as a POSIX
 * file descriptor; pushed on H. */
static CUresult vmm_create(uint64_t size, size_t *bytes)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, st.dev}};
    size_t gran = 0;
    CUmemGenericAllocationHandle h = 0;
    *bytes = 0;
    CUresult rc =
        CALL(cuMemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (rc == CUDA_SUCCESS && (gran == 0 || st.nvh == PROBE_VMM_STACK))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        *bytes = size == 0 ? 0 : (size + gran - 1) / gran * gran;
        rc = CALL(cuMemCreate, &h, *bytes, &prop, 0);
    }
    return rc == CUDA_SUCCESS ? vmm_push_h(h, *bytes) : rc;
}

/* The top of H mapped in a new reservation with read-write access; pushed
 * on M. */
static CUresult vmm_map(void)
{
    if (st.nvh == 0 || st.nvm == PROBE_VMM_STACK)
        return CUDA_ERROR_INVALID_VALUE;
    CUmemGenericAllocationHandle h = st.vh[st.nvh - 1].h;
    size_t size = st.vh[st.nvh - 1].size;
    CUdeviceptr va = 0;
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, st.dev},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUresult rc = CALL(cuMemAddressReserve, &va, size, 0, 0, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = CALL(cuMemMap, va, size, 0, h, 0);
    if (rc != CUDA_SUCCESS) {
        (void)CALL(cuMemAddressFree, va, size);
        return rc;
    }
    st.vm[st.nvm].va = va;
    st.vm[st.nvm].size = size;
    st.vm[st.nvm++].h = h;
    return CALL(cuMemSetAccess, va, size, &access, 1);
}

static void cmd_vmm(const char *name, enum opcode op, uint64_t size)
{
    CUresult rc = CUDA_SUCCESS;
    size_t bytes = 0;
    switch (op) {
    case OP_VMM:
        rc = vmm_create(size, &bytes);
        if (rc == CUDA_SUCCESS)
            rc = vmm_map();
        say(name, rc, "bytes=%zu", bytes);
        return;
    case OP_VMM_CREATE:
        rc = vmm_create(size, &bytes);
        say(name, rc, "bytes=%zu", bytes);
        return;
    case OP_VMM_MAP:
        say(name, vmm_map(), NULL);
        return;
    case OP_VMM_RELEASE:
        say(name, st.nvh ? CALL(cuMemRelease, st.vh[--st.nvh].h) : CUDA_ERROR_INVALID_VALUE, NULL);
        return;
    case OP_VMM_UNMAP:
        if (st.nvm == 0) {
            say(name, CUDA_ERROR_INVALID_VALUE, NULL);
            return;
        }
        st.nvm--;
        rc = CALL(cuMemUnmap, st.vm[st.nvm].va, st.vm[st.nvm].size);
        if (rc == CUDA_SUCCESS)
            rc = CALL(cuMemAddressFree, st.vm[st.nvm].va, st.vm[st.nvm].size);
        say(name, rc, NULL);
        return;
    case OP_VMM_RETAIN: {
        CUmemGenericAllocationHandle h = 0;
        int same = 0;
        rc = st.nvm ? CALL(cuMemRetainAllocationHandle, &h, (void *)(uintptr_t)st.vm[st.nvm - 1].va)
                    : CUDA_ERROR_INVALID_VALUE;
        if (rc == CUDA_SUCCESS) {
            same = h == st.vm[st.nvm - 1].h;
            rc = vmm_push_h(h, st.vm[st.nvm - 1].size);
        }
        say(name, rc, "same=%d", same);
        return;
    }
    case OP_VMM_IMPORT: {
        CUmemGenericAllocationHandle h = 0, top = st.nvh ? st.vh[st.nvh - 1].h : 0;
        int fd = -1;
        rc = st.nvh ? CALL(cuMemExportToShareableHandle, &fd, top,
                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
                    : CUDA_ERROR_INVALID_VALUE;
        if (rc == CUDA_SUCCESS) {
            rc = CALL(cuMemImportFromShareableHandle, &h, (void *)(intptr_t)fd,
                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            if (close(fd) != 0 && rc == CUDA_SUCCESS)
                rc = CUDA_ERROR_UNKNOWN;
        }
        if (rc == CUDA_SUCCESS)
            rc = vmm_push_h(h, st.vh[st.nvh - 1].size);
        say(name, rc, "new=%d", rc == CUDA_SUCCESS && h != top);
        return;
    }
    default:
        return;
    }
}

/* --- graphs: capture one allocation (and its free) on a new stream --- */

static void cmd_capture(uint64_t size, bool with_free)
{
    CUstream s = NULL;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CUdeviceptr p = 0;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    size_t nodes = 0;
    CUDA_MEM_ALLOC_NODE_PARAMS params = {0};
    CUresult rc = CALL(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
    if (rc == CUDA_SUCCESS)
        rc = CALL(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    if (rc == CUDA_SUCCESS)
        rc = CALL(cuMemAllocAsync, &p, size, s);
    if (rc == CUDA_SUCCESS && with_free)
        rc = CALL(cuMemFreeAsync, p, s);
    if (rc == CUDA_SUCCESS)
        rc = CALL(cuStreamIsCapturing, s, &status);
    if (rc == CUDA_SUCCESS)
        rc = CALL(cuStreamEndCapture, s, &graph);
    if (rc == CUDA_SUCCESS)
        rc = CALL(cuGraphGetNodes, graph, NULL, &nodes);
    if (rc == CUDA_SUCCESS && nodes > 0) {
        CUgraphNode first = NULL;
        CUgraphNodeType type = CU_GRAPH_NODE_TYPE_KERNEL;
        size_t one = 1;
        rc = CALL(cuGraphGetNodes, graph, &first, &one);
        if (rc == CUDA_SUCCESS)
            rc = CALL(cuGraphNodeGetType, first, &type);
        if (rc == CUDA_SUCCESS && type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
            rc = CALL(cuGraphMemAllocNodeGetParams, first, &params);
    }
    if (rc == CUDA_SUCCESS)
        rc = CALL(cuGraphInstantiateWithFlags, &exec, graph, 0);
    if (rc == CUDA_SUCCESS) {
        st.gstream = s;
        st.graph = graph;
        st.gexec = exec;
        st.gptr = p;
        st.gfreed = with_free;
    }
    say("capture", rc, "capturing=%d nodes=%zu bytes=%zu same-ptr=%d", (int)status, nodes,
        params.bytesize, params.dptr == p);
}

static void cmd_graph_attr(void)
{
    static const CUgraphMem_attribute which[4] = {
        CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT,
        CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH};
    cuuint64_t v[4] = {0};
    CUresult rc = CUDA_SUCCESS;
    for (int k = 0; k < 4 && rc == CUDA_SUCCESS; k++)
        rc = CALL(cuDeviceGetGraphMemAttribute, st.dev, which[k], &v[k]);
    say("graph-attr", rc,
        "reserved=%" PRIu64 " used=%" PRIu64 " reserved-high=%" PRIu64 " used-high=%" PRIu64,
        (uint64_t)v[0], (uint64_t)v[1], (uint64_t)v[2], (uint64_t)v[3]);
}

/* Launch + sync; an allocation the graph does not free lives on (freed by
 * `free` with cuMemFreeAsync on the capture stream). */
static void cmd_graph_launch(void)
{
    CUresult rc = CALL(cuGraphLaunch, st.gexec, st.gstream);
    if (rc == CUDA_SUCCESS)
        rc = CALL(cuStreamSynchronize, st.gstream);
    if (rc == CUDA_SUCCESS && !st.gfreed)
        rc = remember_in(AK_ASYNC, st.gptr, st.cur, st.gstream);
    say("graph-launch", rc, NULL);
}

static void cmd_graph_destroy(void)
{
    CUresult rc = CALL(cuGraphExecDestroy, st.gexec);
    CUresult r = CALL(cuGraphDestroy, st.graph);
    rc = rc == CUDA_SUCCESS ? r : rc;
    st.gexec = NULL;
    st.graph = NULL;
    say("graph-destroy", rc, NULL);
}

/* fork-hold: a forked child allocates SIZE on the current context and
 * holds it until killed; the parent reports the child's result and pid and
 * goes on with the script. */
static void cmd_fork_hold(uint64_t size)
{
    int fds[2];
    if (pipe(fds) != 0) {
        say("fork-hold", CUDA_ERROR_UNKNOWN, "pipe=failed");
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        (void)close(fds[0]);
        (void)close(fds[1]);
        say("fork-hold", CUDA_ERROR_UNKNOWN, "fork=failed");
        return;
    }
    if (pid == 0) {
        CUdeviceptr p = 0;
        int code = (int)CALL(cuMemAlloc_v2, &p, size);
        (void)close(fds[0]);
        if (write(fds[1], &code, sizeof(code)) != (ssize_t)sizeof(code))
            _exit(1);
        for (;;)
            pause();
    }
    int code = (int)CUDA_ERROR_UNKNOWN;
    (void)close(fds[1]);
    if (read(fds[0], &code, sizeof(code)) != (ssize_t)sizeof(code))
        code = (int)CUDA_ERROR_UNKNOWN;
    (void)close(fds[0]);
    say("fork-hold", (CUresult)code, "pid=%d", (int)pid);
}

/* pool-destroy: cuMemPoolDestroy of the probe's own pool on the current
 * device (its outstanding allocations stay in the live list). */
static void cmd_pool_destroy(void)
{
    CUresult rc = st.dev >= 0 && st.dev < PROBE_MAX_DEVICES && st.pool[st.dev]
                      ? CALL(cuMemPoolDestroy, st.pool[st.dev])
                      : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        st.pool[st.dev] = NULL;
    say("pool-destroy", rc, NULL);
}

/* pool-reset-high: both high marks of the current pool set to 0 (reset). */
static void cmd_pool_reset_high(void)
{
    CUmemoryPool pool = NULL;
    cuuint64_t zero = 0;
    CUresult rc = cur_mempool(&pool);
    if (rc == CUDA_SUCCESS)
        rc = CALL(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero);
    if (rc == CUDA_SUCCESS)
        rc = CALL(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero);
    /* A CURRENT figure is read-only. */
    CUresult ro = rc == CUDA_SUCCESS ? CALL(cuMemPoolSetAttribute, pool,
                                            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &zero)
                                     : rc;
    say("pool-reset-high", rc, "set-current=%s", err_name(ro));
}

static void cmd_legacy_release(void)
{
    CUresult rc = cu.legacy_release ? cu.legacy_release(st.dev) : CUDA_ERROR_NOT_FOUND;
    if (rc == CUDA_SUCCESS && st.dev >= 0 && st.dev < PROBE_MAX_DEVICES && st.primary[st.dev]) {
        /* The probe retains once per device: the context is gone, and the
         * next `device` retains it afresh. */
        forget_ctx(st.primary[st.dev]);
        st.primary[st.dev] = NULL;
    }
    say("legacy-release", rc, NULL);
}

static void run(const struct cmd *c)
{
    const char *name = ops[c->op].name;
    CUresult rc = CUDA_SUCCESS;
    CUdeviceptr p = 0;
    if (!ops[c->op].no_driver && !opt.loaded && load(opt.via, opt.ptsz) != 0)
        exit(3);
    switch (c->op) {
    case OP_INIT:
        rc = CALL(cuInit, 0);
        if (rc == CUDA_SUCCESS)
            rc = use_device(0);
        say(name, rc, NULL);
        return;
    case OP_DEVICE:
        say(name, c->a[0] > INT_MAX ? CUDA_ERROR_INVALID_DEVICE : use_device((int)c->a[0]), NULL);
        return;
    case OP_CTX_CREATE: {
        CUcontext ctx = NULL;
        if (st.ncreated == PROBE_MAX_DEVICES)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            rc = CALL(cuCtxCreate_v2, &ctx, 0, st.dev);
        if (rc == CUDA_SUCCESS) {
            st.created[st.ncreated++] = ctx;
            st.cur = ctx;
        }
        say(name, rc, NULL);
        return;
    }
    case OP_CTX_DESTROY: {
        CUcontext ctx = st.ncreated ? st.created[st.ncreated - 1] : NULL;
        rc = CALL(cuCtxDestroy_v2, ctx);
        if (rc == CUDA_SUCCESS) {
            st.ncreated--;
            forget_ctx(ctx);
            st.cur = st.ncreated ? st.created[st.ncreated - 1] : st.primary[st.dev];
            if (st.cur)
                rc = CALL(cuCtxSetCurrent, st.cur);
        }
        say(name, rc, NULL);
        return;
    }
    case OP_PRIMARY_RESET:
        rc = CALL(cuDevicePrimaryCtxReset_v2, st.dev);
        if (rc == CUDA_SUCCESS)
            forget_ctx(st.primary[st.dev]);
        say(name, rc, NULL);
        return;
    case OP_ALLOC:
        rc = CALL(cuMemAlloc_v2, &p, c->a[0]);
        if (rc == CUDA_SUCCESS)
            rc = remember(AK_PTR, p);
        say(name, rc, NULL);
        return;
    case OP_PITCH: {
        size_t pitch = 0;
        rc = CALL(cuMemAllocPitch_v2, &p, &pitch, c->a[0], c->a[1], 4);
        if (rc == CUDA_SUCCESS)
            rc = remember(AK_PTR, p);
        say(name, rc, "pitch=%zu", pitch);
        return;
    }
    case OP_MANAGED:
        rc = CALL(cuMemAllocManaged, &p, c->a[0], CU_MEM_ATTACH_GLOBAL);
        if (rc == CUDA_SUCCESS)
            rc = remember(AK_PTR, p);
        say(name, rc, NULL);
        return;
    case OP_ASYNC:
        rc = CALL(cuMemAllocAsync, &p, c->a[0], NULL);
        if (rc == CUDA_SUCCESS)
            rc = remember(AK_ASYNC, p);
        say(name, rc, NULL);
        return;
    case OP_POOLALLOC: {
        CUmemoryPool pool = NULL;
        rc = own_pool(st.dev, &pool);
        if (rc == CUDA_SUCCESS)
            rc = CALL(cuMemAllocFromPoolAsync, &p, c->a[0], pool, NULL);
        if (rc == CUDA_SUCCESS)
            rc = remember(AK_ASYNC, p);
        say(name, rc, NULL);
        return;
    }
    case OP_CREATE: {
        CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .location = {CU_MEM_LOCATION_TYPE_DEVICE, st.dev}};
        size_t gran = 0, bytes = 0;
        CUmemGenericAllocationHandle h = 0;
        rc = CALL(cuMemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (rc == CUDA_SUCCESS && gran == 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        if (rc == CUDA_SUCCESS) {
            bytes = c->a[0] == 0 ? 0 : (c->a[0] + gran - 1) / gran * gran;
            rc = CALL(cuMemCreate, &h, bytes, &prop, 0);
        }
        if (rc == CUDA_SUCCESS)
            rc = remember(AK_VMM, h);
        say(name, rc, "bytes=%zu", bytes);
        return;
    }
    case OP_ARRAY: {
        CUDA_ARRAY_DESCRIPTOR d = {c->a[0], c->a[1], CU_AD_FORMAT_FLOAT, 1};
        CUarray a = NULL;
        rc = CALL(cuArrayCreate_v2, &a, &d);
        if (rc == CUDA_SUCCESS)
            rc = remember(AK_ARRAY, (uint64_t)(uintptr_t)a);
        say(name, rc, NULL);
        return;
    }
    case OP_ARRAY3D:
    case OP_MIPMAP: {
        CUDA_ARRAY3D_DESCRIPTOR d = {
            c->a[0], c->a[1], c->op == OP_ARRAY3D ? c->a[2] : 0, CU_AD_FORMAT_FLOAT, 1, 0};
        void *h = NULL;
        if (c->op == OP_ARRAY3D)
            rc = CALL(cuArray3DCreate_v2, (CUarray *)&h, &d);
        else
            rc = CALL(cuMipmappedArrayCreate, (CUmipmappedArray *)&h, &d,
                      c->a[2] > UINT_MAX ? UINT_MAX : (unsigned)c->a[2]);
        if (rc == CUDA_SUCCESS)
            rc = remember(c->op == OP_ARRAY3D ? AK_ARRAY : AK_MIPMAP, (uint64_t)(uintptr_t)h);
        say(name, rc, NULL);
        return;
    }
    case OP_FREE:
        if (st.nlive == 0) {
            say(name, CUDA_ERROR_INVALID_VALUE, "nothing-live");
            return;
        }
        rc = release(&st.live[st.nlive - 1]);
        st.nlive--;
        say(name, rc, NULL);
        return;
    case OP_FREE_ALL: {
        size_t n = st.nlive;
        while (st.nlive > 0) {
            CUresult r = release(&st.live[--st.nlive]);
            if (rc == CUDA_SUCCESS)
                rc = r;
        }
        say(name, rc, "count=%zu", n);
        return;
    }
    case OP_INFO: {
        size_t f = 0, t = 0;
        rc = CALL(cuMemGetInfo_v2, &f, &t);
        say(name, rc, "free=%zu total=%zu", f, t);
        return;
    }
    case OP_TOTAL: {
        size_t b = 0;
        rc = CALL(cuDeviceTotalMem_v2, &b, st.dev);
        say(name, rc, "bytes=%zu", b);
        return;
    }
    case OP_FILL: {
        uint64_t bytes = 0;
        for (unsigned i = 0; i < PROBE_FILL_MAX; i++) {
            rc = CALL(cuMemAlloc_v2, &p, c->a[0]);
            if (rc != CUDA_SUCCESS)
                break;
            if (grow((void **)&st.fill, &st.capfill, st.nfill + 1, sizeof(*st.fill)) != 0) {
                rc = CALL(cuMemFree_v2, p);
                rc = rc == CUDA_SUCCESS ? CUDA_ERROR_OUT_OF_MEMORY : rc;
                break;
            }
            st.fill[st.nfill++] = p;
            bytes += c->a[0];
        }
        say(name, rc, "bytes=%" PRIu64, bytes);
        return;
    }
    case OP_FILL_FREE: {
        size_t n = st.nfill;
        while (st.nfill > 0) {
            CUresult r = CALL(cuMemFree_v2, st.fill[--st.nfill]);
            if (rc == CUDA_SUCCESS)
                rc = r;
        }
        say(name, rc, "count=%zu", n);
        return;
    }
    case OP_LOOP: {
        double t0 = now_ns();
        uint64_t i = 0;
        for (; i < c->a[0]; i++) {
            rc = CALL(cuMemAlloc_v2, &p, c->a[1]);
            if (rc == CUDA_SUCCESS)
                rc = CALL(cuMemFree_v2, p);
            if (rc != CUDA_SUCCESS)
                break;
        }
        double dt = now_ns() - t0;
        say(name, rc, "n=%" PRIu64 " ns=%.1f", i, i ? dt / (double)i : 0.0);
        return;
    }
    case OP_LAUNCH: {
        double t0 = now_ns();
        uint64_t i = 0;
        for (; i < c->a[0]; i++) {
            rc = CALL(cuLaunchKernel, NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            if (rc != CUDA_SUCCESS)
                break;
        }
        double dt = now_ns() - t0;
        say(name, rc, "n=%" PRIu64 " ns=%.1f", i, i ? dt / (double)i : 0.0);
        return;
    }
    case OP_THREADS:
        cmd_threads(c->a[0], c->a[1]);
        return;
    case OP_NVML_PROCS:
        cmd_nvml_procs();
        return;
    case OP_NVML_UTIL:
        cmd_nvml_util();
        return;
    case OP_NVML:
        cmd_nvml();
        return;
    case OP_HOLD:
        printf("holding\n");
        fflush(stdout);
        for (;;)
            pause();
    case OP_SLEEP: {
        struct timespec ts = {(time_t)(c->a[0] / 1000), (long)(c->a[0] % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        say(name, CUDA_SUCCESS, NULL);
        return;
    }
    case OP_NULL_INFO: {
        size_t v = 0;
        CUresult r1 = CALL(cuMemGetInfo_v2, NULL, &v);
        CUresult r2 = CALL(cuMemGetInfo_v2, &v, NULL);
        say(name, r1, "%s", err_name(r2));
        return;
    }
    case OP_NULL_ALLOC:
        say(name, CALL(cuMemAlloc_v2, NULL, 1u << 20), NULL);
        return;
    case OP_PROCADDR:
        cmd_procaddr(c->name, c->a[1], c->a[2]);
        return;
    case OP_GRAPH_NODE:
        cmd_graph_node(c->a[0]);
        return;
    case OP_ZOMBIE:
        cmd_zombie(c->a[0]);
        return;
    case OP_EXEC_SELF:
        cmd_exec_self((int)c->a[0]);
        return;
    case OP_DLSYM_DEFAULT:
        say(name, CUDA_SUCCESS, "%s", dlsym(RTLD_DEFAULT, c->name) ? "found" : "null");
        return;
    case OP_CTOR_DEADLOCK:
        cmd_ctor_deadlock();
        return;
    case OP_LEGACY_RELEASE:
        cmd_legacy_release();
        return;
    case OP_DEVICE_COUNT: {
        int n = 0;
        rc = CALL(cuDeviceGetCount, &n);
        say(name, rc, "n=%d", n);
        return;
    }
    case OP_POOL_THRESHOLD: {
        CUmemoryPool pool = NULL;
        cuuint64_t v = c->a[0];
        rc = cur_mempool(&pool);
        if (rc == CUDA_SUCCESS)
            rc = CALL(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
        say(name, rc, NULL);
        return;
    }
    case OP_POOL_TRIM: {
        CUmemoryPool pool = NULL;
        rc = cur_mempool(&pool);
        if (rc == CUDA_SUCCESS)
            rc = CALL(cuMemPoolTrimTo, pool, c->a[0]);
        say(name, rc, NULL);
        return;
    }
    case OP_POOL_ATTR:
        cmd_pool_attr();
        return;
    case OP_SYNC:
        rc = CALL(cuStreamSynchronize, NULL);
        if (rc == CUDA_SUCCESS)
            rc = CALL(cuCtxSynchronize);
        say(name, rc, NULL);
        return;
    case OP_XDEV_POOL: {
        CUmemoryPool pool = NULL;
        rc = c->a[1] > INT_MAX ? CUDA_ERROR_INVALID_DEVICE
                               : CALL(cuDeviceGetDefaultMemPool, &pool, (int)c->a[1]);
        if (rc == CUDA_SUCCESS)
            rc = CALL(cuMemAllocFromPoolAsync, &p, c->a[0], pool, NULL);
        if (rc == CUDA_SUCCESS)
            rc = remember(AK_ASYNC, p);
        say(name, rc, NULL);
        return;
    }
    case OP_STREAM_ON:
        cmd_stream_on(c->a[0]);
        return;
    case OP_ASYNC_ON_STREAM:
        rc = st.stream ? CALL(cuMemAllocAsync, &p, c->a[0], st.stream) : CUDA_ERROR_INVALID_HANDLE;
        if (rc == CUDA_SUCCESS)
            rc = remember_in(AK_ASYNC, p, st.stream_ctx, st.stream);
        say(name, rc, NULL);
        return;
    case OP_NO_CTX:
        rc = CALL(cuCtxSetCurrent, NULL);
        if (rc == CUDA_SUCCESS)
            st.cur = NULL;
        say(name, rc, NULL);
        return;
    case OP_SET_MEMPOOL: {
        CUmemoryPool pool = NULL;
        rc = c->a[0] >= PROBE_MAX_DEVICES ? CUDA_ERROR_INVALID_DEVICE
                                          : own_pool((int)c->a[0], &pool);
        if (rc == CUDA_SUCCESS)
            rc = CALL(cuDeviceSetMemPool, (int)c->a[0], pool);
        say(name, rc, NULL);
        return;
    }
    case OP_PTR_DEV:
        cmd_ptr_dev();
        return;
    case OP_STREAM_CTX:
        cmd_stream_ctx();
        return;
    case OP_VMM:
    case OP_VMM_CREATE:
    case OP_VMM_MAP:
    case OP_VMM_RELEASE:
    case OP_VMM_UNMAP:
    case OP_VMM_RETAIN:
    case OP_VMM_IMPORT:
        cmd_vmm(name, c->op, c->a[0]);
        return;
    case OP_SET_LIMIT: {
        CUlimit which =
            strcmp(c->name, "heap") == 0 ? CU_LIMIT_MALLOC_HEAP_SIZE : CU_LIMIT_STACK_SIZE;
        size_t v = 0;
        rc = CALL(cuCtxSetLimit, which, c->a[1]);
        CUresult r = CALL(cuCtxGetLimit, &v, which);
        say(name, rc, "value=%zu", r == CUDA_SUCCESS ? v : 0);
        return;
    }
    case OP_CAPTURE:
        cmd_capture(c->a[0], c->a[1] != 0);
        return;
    case OP_GRAPH_LAUNCH:
        cmd_graph_launch();
        return;
    case OP_GRAPH_TRIM:
        say(name, CALL(cuDeviceGraphMemTrim, st.dev), NULL);
        return;
    case OP_GRAPH_ATTR:
        cmd_graph_attr();
        return;
    case OP_GRAPH_DESTROY:
        cmd_graph_destroy();
        return;
    case OP_FORK_HOLD:
        cmd_fork_hold(c->a[0]);
        return;
    case OP_POOL_DESTROY:
        cmd_pool_destroy();
        return;
    case OP_POOL_RESET_HIGH:
        cmd_pool_reset_high();
        return;
    case OP_UUID: {
        CUuuid u = {{0}};
        const unsigned char *b = (const unsigned char *)u.bytes;
        rc = CALL(cuDeviceGetUuid_v2, &u, st.dev);
        say(name, rc,
            "uuid=GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
            b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
            b[15]);
        return;
    }
    case OP_COUNT:
        break;
    }
}

int main(int argc, char **argv)
{
    enum via via = VIA_DLSYM;
    bool ptsz = false, no_load = false;
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--ptsz") == 0) {
            ptsz = true;
            continue;
        }
        if (strcmp(argv[i], "--no-load") == 0) {
            no_load = true;
            continue;
        }
        if (strcmp(argv[i], "--via") != 0 || i + 1 >= argc) {
            usage();
            return 2;
        }
        const char *v = argv[++i];
        if (strcmp(v, "dlsym") == 0)
            via = VIA_DLSYM;
        else if (strcmp(v, "proc") == 0)
            via = VIA_PROC;
        else if (strcmp(v, "proc2") == 0)
            via = VIA_PROC2;
        else if (strcmp(v, "proc-old") == 0)
            via = VIA_PROC_OLD;
        else {
            usage();
            return 2;
        }
    }
#ifdef GP_CUDAPROBE_LINKED
    if (via != VIA_DLSYM || ptsz || no_load) {
        fputs("gpupool-cudaprobe-linked: --via, --ptsz and --no-load need the dlopen build\n",
              stderr);
        return 2;
    }
#endif
    opt.via = via;
    opt.ptsz = ptsz;
    opt.argv = argv;
    opt.nopts = i - 1;
    if (i >= argc) {
        usage();
        return 2;
    }
    struct cmd *cmds = calloc((size_t)(argc - i), sizeof(*cmds));
    int ncmds = 0;
    if (!cmds) {
        fputs("gpupool-cudaprobe: out of memory\n", stderr);
        return 2;
    }
    if (parse_script(argc, argv, i, cmds, &ncmds) != 0) {
        usage();
        free(cmds);
        return 2;
    }
    if (!no_load && load(via, ptsz) != 0) {
        free(cmds);
        return 3;
    }
    for (int k = 0; k < ncmds; k++)
        run(&cmds[k]);
    free(cmds);
    free(st.live);
    free(st.fill);
    return 0;
}
