/* fakecuda.c -- a libcuda.so.1 that serves a CUDA driver API subset over host memory.
 *
 * Exports the driver's symbol names (versioned and legacy) with the documented
 * signatures (fakecuda_api.h) so that a program, or an interposer between a
 * program and the driver, loads it exactly as it loads the real libcuda. See
 * README.md for the devices (FAKECUDA_DEVICES, CUDA_VISIBLE_DEVICES), failure
 * injection (FAKECUDA_FAIL), the physical use shared by every live process
 * (FAKECUDA_PHYS, fakecuda_phys.c), pool retention (FAKECUDA_POOL_RETAIN),
 * cuGetProcAddress pointers apart from the exports
 * (FAKECUDA_PROCADDR_DISTINCT) and the semantics chosen where the
 * documentation is silent.
 *
 * Device memory is bookkeeping only: allocations get unique fake device
 * addresses and are charged against the device's configured total (every
 * charge goes through dev_take/dev_give); nothing is mapped on the host. All
 * state is process-global and guarded by one mutex; the current context is
 * per thread. The hot paths (cuMemAlloc/cuMemFree) take the mutex, hash a
 * key and reuse a record from a free list: no syscall (without
 * FAKECUDA_PHYS, whose charges take the file's lock).
 *
 * Every entry point is defined as a file-local fc_<name> and exported under
 * <name> as an alias, so cuGetProcAddress hands out this library's own code
 * (never a symbol an LD_PRELOADed interposer put in front of it), as the real
 * driver does; -fno-ipa-icf keeps identical bodies (legacy vs _v2) apart. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fakecuda_api.h"
#include "fakecuda_phys.h"
#include "fakecuda_size.h"
#include "fakecuda_timeline.h"

/* FAKECUDA_PROCADDR_DISTINCT's second entry points are one-jump assembly
 * stubs (any signature, arguments untouched): x86-64 and AArch64 only. */
#if defined(__x86_64__) || defined(__aarch64__)
#define FC_HAVE_DISTINCT 1
#endif

#define FC_DRIVER_VERSION 12040
#define FC_MAX_DEVICES 16
#define FC_DEFAULT_TOTAL (16ULL << 30)
#define FC_GRANULARITY (2ULL << 20)
#define FC_PTR_ALIGN 512ULL
#define FC_PITCH_ALIGN 512ULL
#define FC_VA_BASE (1ULL << 44)
#define FC_VA_LIMIT (1ULL << 62)
#define FC_VA32_BASE 0x10000000ULL
#define FC_VA32_LIMIT 0xfffffe00ULL
#define FC_HANDLE_BASE 0xcafe00000000ULL
#define FC_MAX_ATTRIBUTE 200
#define FC_CTX_MAGIC 0x46434358u
#define FC_INSTANTIATE_FLAGS 0xfu    /* AUTO_FREE_ON_LAUNCH, UPLOAD, DEVICE_LAUNCH, NODE_PRIORITY */
#define FC_LIMITS 3                  /* CUlimit values below this are known */
#define FC_SMS 132                   /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
#define FC_THREADS_PER_SM 2048       /* resident threads, each with its stack */
#define FC_DEFAULT_STACK 1024ULL     /* CU_LIMIT_STACK_SIZE, bytes per thread */
#define FC_DEFAULT_HEAP (8ULL << 20) /* CU_LIMIT_MALLOC_HEAP_SIZE */

/* Every exported entry point, once: failure injection names them, and each
 * one is exported from its fc_ definition. */
#define FC_ENTRY_POINTS(XX)            \
    XX(cuInit)                         \
    XX(cuDriverGetVersion)             \
    XX(cuGetErrorName)                 \
    XX(cuGetErrorString)               \
    XX(cuGetProcAddress)               \
    XX(cuGetProcAddress_v2)            \
    XX(cuDeviceGet)                    \
    XX(cuDeviceGetCount)               \
    XX(cuDeviceGetName)                \
    XX(cuDeviceGetUuid)                \
    XX(cuDeviceGetUuid_v2)             \
    XX(cuDeviceTotalMem)               \
    XX(cuDeviceTotalMem_v2)            \
    XX(cuDeviceGetAttribute)           \
    XX(cuCtxCreate)                    \
    XX(cuCtxCreate_v2)                 \
    XX(cuCtxDestroy)                   \
    XX(cuCtxDestroy_v2)                \
    XX(cuCtxGetCurrent)                \
    XX(cuCtxSetCurrent)                \
    XX(cuCtxGetDevice)                 \
    XX(cuCtxSynchronize)               \
    XX(cuDevicePrimaryCtxRetain)       \
    XX(cuDevicePrimaryCtxGetState)     \
    XX(cuDevicePrimaryCtxRelease)      \
    XX(cuDevicePrimaryCtxRelease_v2)   \
    XX(cuDevicePrimaryCtxReset)        \
    XX(cuDevicePrimaryCtxReset_v2)     \
    XX(cuMemAlloc)                     \
    XX(cuMemAlloc_v2)                  \
    XX(cuMemFree)                      \
    XX(cuMemFree_v2)                   \
    XX(cuMemAllocPitch)                \
    XX(cuMemAllocPitch_v2)             \
    XX(cuMemAllocManaged)              \
    XX(cuMemGetInfo)                   \
    XX(cuMemGetInfo_v2)                \
    XX(cuMemAllocAsync)                \
    XX(cuMemAllocAsync_ptsz)           \
    XX(cuMemFreeAsync)                 \
    XX(cuMemFreeAsync_ptsz)            \
    XX(cuMemPoolCreate)                \
    XX(cuMemPoolDestroy)               \
    XX(cuDeviceGetDefaultMemPool)      \
    XX(cuDeviceGetMemPool)             \
    XX(cuMemAllocFromPoolAsync)        \
    XX(cuMemAllocFromPoolAsync_ptsz)   \
    XX(cuDeviceSetMemPool)             \
    XX(cuMemPoolTrimTo)                \
    XX(cuMemPoolSetAttribute)          \
    XX(cuMemPoolGetAttribute)          \
    XX(cuStreamGetCtx)                 \
    XX(cuPointerGetAttribute)          \
    XX(cuCtxPushCurrent)               \
    XX(cuCtxPushCurrent_v2)            \
    XX(cuCtxPopCurrent)                \
    XX(cuCtxPopCurrent_v2)             \
    XX(cuCtxSetLimit)                  \
    XX(cuCtxGetLimit)                  \
    XX(cuStreamBeginCapture)           \
    XX(cuStreamBeginCapture_v2)        \
    XX(cuStreamEndCapture)             \
    XX(cuStreamIsCapturing)            \
    XX(cuGraphInstantiateWithFlags)    \
    XX(cuGraphInstantiate_v2)          \
    XX(cuGraphLaunch)                  \
    XX(cuGraphLaunch_ptsz)             \
    XX(cuDeviceGraphMemTrim)           \
    XX(cuDeviceGetGraphMemAttribute)   \
    XX(cuGraphGetNodes)                \
    XX(cuGraphNodeGetType)             \
    XX(cuGraphMemAllocNodeGetParams)   \
    XX(cuGraphMemFreeNodeGetParams)    \
    XX(cuGraphExecDestroy)             \
    XX(cuGraphDestroy)                 \
    XX(cuMemCreate)                    \
    XX(cuMemRelease)                   \
    XX(cuMemMap)                       \
    XX(cuMemUnmap)                     \
    XX(cuMemAddressReserve)            \
    XX(cuMemAddressFree)               \
    XX(cuMemGetAllocationGranularity)  \
    XX(cuMemRetainAllocationHandle)    \
    XX(cuMemExportToShareableHandle)   \
    XX(cuMemImportFromShareableHandle) \
    XX(cuMemSetAccess)                 \
    XX(cuArrayCreate)                  \
    XX(cuArrayCreate_v2)               \
    XX(cuArray3DCreate)                \
    XX(cuArray3DCreate_v2)             \
    XX(cuArrayDestroy)                 \
    XX(cuMipmappedArrayCreate)         \
    XX(cuMipmappedArrayDestroy)        \
    XX(cuStreamCreate)                 \
    XX(cuStreamDestroy)                \
    XX(cuStreamDestroy_v2)             \
    XX(cuStreamSynchronize)            \
    XX(cuStreamSynchronize_ptsz)       \
    XX(cuLaunchKernel)                 \
    XX(cuLaunchKernel_ptsz)            \
    XX(cuLaunchKernelEx)               \
    XX(cuLaunchKernelEx_ptsz)          \
    XX(cuLaunchCooperativeKernel)      \
    XX(cuLaunchCooperativeKernel_ptsz) \
    XX(cuGraphAddKernelNode)           \
    XX(cuGraphAddKernelNode_v2)

enum fc_ep {
#define FC_EP_ENUM(sym) EP_##sym,
    FC_ENTRY_POINTS(FC_EP_ENUM)
#undef FC_EP_ENUM
        EP_COUNT
};

static const char *const ep_names[EP_COUNT] = {
#define FC_EP_NAME(sym) #sym,
    FC_ENTRY_POINTS(FC_EP_NAME)
#undef FC_EP_NAME
};

/* What a key in the object table names; the kind sits in the key's low bits
 * (addresses and handles are 512-aligned), so a handle of one kind is never
 * found as another. */
enum fc_kind {
    KIND_PTR = 1, /* cuMemAlloc*, cuMemAllocManaged, async and pool allocations */
    KIND_ARRAY,
    KIND_MIPMAP,
    KIND_STREAM,
    KIND_POOL,
    KIND_VMM,     /* cuMemCreate handle */
    KIND_RESERVE, /* cuMemAddressReserve range */
    KIND_MAP,     /* cuMemMap mapping */
    KIND_LIMIT,   /* a context's cuCtxSetLimit growth (charged) */
    KIND_GRAPH,   /* a graph (made by stream capture) */
    KIND_GNODE,   /* a graph's memory node */
    KIND_GEXEC,   /* an executable graph */
};

struct fc_obj {
    uint64_t key;               /* address or handle | kind */
    struct fc_obj *hnext;       /* hash chain */
    struct fc_obj *prev, *next; /* the owning context's list, the VA list or the pool list */
    struct fc_ctx *ctx;         /* owning context; NULL: device-level (pools, VMM) */
    enum fc_kind kind;
    int dev;
    uint64_t addr, size; /* address range (pointers, reservations, maps) */
    uint64_t charged;    /* bytes charged to the device */
    uint64_t link;       /* map: the VMM allocation's key; pool allocation: the pool's */
    bool gmem;           /* pointer: a graph allocation, from the graph pool */
    /* What only one kind needs (the record stays small: the hot path clears
     * it on every allocation). */
    union {
        struct { /* KIND_POOL (charged = reserved) */
            uint64_t reserved, used, reserved_high, used_high, threshold;
            int reuse[3];    /* REUSE_* attributes */
            bool is_default; /* a device's default pool */
            bool destroyed;  /* cuMemPoolDestroy called, allocations outstanding */
        };
        struct {                       /* KIND_VMM */
            int maps;                  /* allocation: live mappings */
            int refs;                  /* handle value: references not yet released */
            int holders;               /* allocation: refs over all its handle values */
            unsigned htypes;           /* allocation: requestedHandleTypes */
            uint64_t alias;            /* imported handle: its allocation's key (0: is one) */
            struct fc_obj *alias_next; /* allocation: its imported handles */
        };
        struct {                   /* KIND_MAP, KIND_GNODE */
            uint64_t handle;       /* map: the handle value it was mapped with; node: dptr */
            CUgraphNodeType ntype; /* node: MEM_ALLOC (size) or MEM_FREE */
        };
        struct {                       /* KIND_GRAPH, KIND_GEXEC */
            uint64_t *nodes;           /* graph: its nodes' keys in order (owned) */
            size_t nnodes, capnodes;   /* graph: nodes; exec: ops */
            struct fc_gop *ops;        /* exec: its steps (owned) */
            unsigned long long gflags; /* exec: instantiate flags */
        };
        uint64_t capture; /* KIND_STREAM: the graph it is capturing into (0: none) */
    };
};

/* obj_new clears the kind's part from `reserved` on: the union's start. */
_Static_assert(offsetof(struct fc_obj, reserved) == offsetof(struct fc_obj, maps) &&
                   offsetof(struct fc_obj, reserved) == offsetof(struct fc_obj, handle) &&
                   offsetof(struct fc_obj, reserved) == offsetof(struct fc_obj, nodes) &&
                   offsetof(struct fc_obj, reserved) == offsetof(struct fc_obj, capture),
               "the per-kind union starts at reserved");

struct fc_ctx {
    uint32_t magic;
    int dev;
    bool primary;
    bool live;
    int refs;          /* primary: retain count */
    struct fc_obj own; /* list head: what teardown frees */
    struct fc_ctx *next_all;
    uint64_t limit[FC_LIMITS];        /* cuCtxSetLimit values (0: the default) */
    struct fc_obj *growth[FC_LIMITS]; /* their charge above the default, in `own` */
};

struct fc_dev {
    char uuid[48];
    unsigned char raw[16];
    uint64_t total;
    uint64_t used;
    int real; /* its index in FAKECUDA_DEVICES (ordinals follow CUDA_VISIBLE_DEVICES) */
    struct fc_ctx primary;
    uint64_t default_pool; /* key of the default pool */
    uint64_t mempool;      /* the current pool (cuDeviceSetMemPool) */
    uint64_t greserved, gused, greserved_high, gused_high; /* graph memory pool */
    CUmemAccessDesc access; /* read-write for this device (graph alloc nodes) */
};

static struct {
    pthread_mutex_t lock;
    const char *broken; /* non-NULL: bad configuration, every call fails */
    atomic_int initialized;
    int fail[EP_COUNT];                /* FAKECUDA_FAIL: code to return, 0 = none */
    int ndev;                          /* visible devices: the process's ordinals */
    struct fc_dev dev[FC_MAX_DEVICES]; /* (FAKECUDA_DEVICES until fc_load remaps) */
    int nall;                          /* FAKECUDA_DEVICES, all of them */
    char all_uuid[FC_MAX_DEVICES][FC_PHYS_UUID];
    bool distinct;       /* FAKECUDA_PROCADDR_DISTINCT: cuGetProcAddress gives other addresses */
    struct fc_ctx *ctxs; /* every context ever created (kept: stale handles stay checkable) */
    struct fc_obj **buckets;
    unsigned bits;
    size_t count;
    struct fc_obj *spare; /* free records */
    struct fc_obj va;     /* list head: reservations and mappings */
    uint64_t next_va, next_va32, next_handle;
    bool phys_on;        /* FAKECUDA_PHYS: physical use shared with other processes */
    bool pool_retain;    /* FAKECUDA_POOL_RETAIN: pools keep freed memory until sync/trim */
    struct fc_obj pools; /* list head: every live or draining pool */
    struct fc_phys phys; /* its file; a slot once initialised (again after a fork) */
    struct fc_tl tl;     /* FAKECUDA_TIMELINE: the device time shared with other processes */
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local struct fc_ctx *tls_ctx;

/* --- configuration ------------------------------------------------------- */

/* A device total: a size with its suffix, never 0. */
static int parse_size(const char *s, size_t n, uint64_t *out)
{
    uint64_t v;
    if (fakecuda_parse_size(s, n, true, &v) != 0 || v == 0)
        return -1;
    *out = v;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx into its 16 raw bytes. */
static int parse_uuid(const char *s, size_t n, unsigned char raw[16])
{
    static const char shape[] = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    if (n != sizeof(shape) - 1)
        return -1;
    unsigned nib = 0;
    for (size_t i = 0; i < n; i++) {
        if (shape[i] != 'x') {
            if (s[i] != shape[i])
                return -1;
            continue;
        }
        int h = hexval(s[i]);
        if (h < 0)
            return -1;
        if (nib % 2 == 0)
            raw[nib / 2] = (unsigned char)(h << 4);
        else
            raw[nib / 2] |= (unsigned char)h;
        nib++;
    }
    return 0;
}

static const char *parse_devices(const char *spec)
{
    static char why[160];
    const char *p = spec;
    g.ndev = 0;
    if (*p == '\0')
        return "FAKECUDA_DEVICES is empty";
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (g.ndev == FC_MAX_DEVICES) {
            snprintf(why, sizeof(why), "FAKECUDA_DEVICES lists more than %d devices",
                     FC_MAX_DEVICES);
            return why;
        }
        struct fc_dev *d = &g.dev[g.ndev];
        const char *size = eq ? eq + 1 : p;
        size_t size_n = eq ? n - (size_t)(eq + 1 - p) : n;
        if (eq) {
            if (parse_uuid(p, (size_t)(eq - p), d->raw) != 0) {
                snprintf(why, sizeof(why),
                         "FAKECUDA_DEVICES: \"%.*s\" is not a GPU-xxxxxxxx-xxxx-xxxx-xxxx-"
                         "xxxxxxxxxxxx UUID",
                         (int)(eq - p), p);
                return why;
            }
            memcpy(d->uuid, p, (size_t)(eq - p));
            d->uuid[eq - p] = '\0';
        } else {
            snprintf(d->uuid, sizeof(d->uuid), "GPU-fa4ecada-0000-0000-0000-%012x", g.ndev);
            if (parse_uuid(d->uuid, strlen(d->uuid), d->raw) != 0)
                return "FAKECUDA_DEVICES: internal UUID error";
        }
        if (parse_size(size, size_n, &d->total) != 0) {
            snprintf(why, sizeof(why),
                     "FAKECUDA_DEVICES: \"%.*s\" is not a size (bytes, or a number with k/m/g/t)",
                     (int)size_n, size);
            return why;
        }
        g.ndev++;
        if (!end)
            return NULL;
        p = end + 1;
    }
}

static int parse_code(const char *s, size_t n, int *code)
{
#define FC_CODE_BY_NAME(name, value, text)                    \
    if (n == sizeof(#name) - 1 && memcmp(s, #name, n) == 0) { \
        *code = value;                                        \
        return 0;                                             \
    }
    CU_RESULT_MAP(FC_CODE_BY_NAME)
#undef FC_CODE_BY_NAME
    char buf[16];
    if (n == 0 || n >= sizeof(buf))
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *endp;
    errno = 0;
    long v = strtol(buf, &endp, 10);
    if (errno != 0 || *endp != '\0' || v <= 0 || v > 100000)
        return -1;
    *code = (int)v;
    return 0;
}

static const char *parse_fail(const char *spec)
{
    static char why[160];
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', n);
        size_t name_n = colon ? (size_t)(colon - p) : n;
        int code = CUDA_ERROR_OUT_OF_MEMORY;
        if (colon && parse_code(colon + 1, n - name_n - 1, &code) != 0) {
            snprintf(why, sizeof(why), "FAKECUDA_FAIL: bad code in \"%.*s\"", (int)n, p);
            return why;
        }
        int ep = -1;
        for (int i = 0; i < EP_COUNT; i++)
            if (strlen(ep_names[i]) == name_n && memcmp(ep_names[i], p, name_n) == 0)
                ep = i;
        if (ep < 0) {
            snprintf(why, sizeof(why), "FAKECUDA_FAIL: \"%.*s\" is not an entry point of the fake",
                     (int)name_n, p);
            return why;
        }
        g.fail[ep] = code;
        if (!end)
            break;
        p = end + 1;
    }
    return NULL;
}

/* CUDA_VISIBLE_DEVICES: the listed devices, in that order, become ordinals
 * 0..n-1. An entry is an index into FAKECUDA_DEVICES or a UUID (full, or a
 * prefix matching exactly one device); the list ends at the first entry that
 * names no device (or one already listed), as the driver's does. */
static int visible_entry(const struct fc_dev *all, const char *e, size_t n, const bool *taken)
{
    int found = -1;
    if (n > 0 && e[0] >= '0' && e[0] <= '9') {
        uint64_t v;
        if (fakecuda_parse_size(e, n, false, &v) != 0 || v >= (uint64_t)g.ndev)
            return -1;
        found = (int)v;
    } else if (n > 4 && memcmp(e, "GPU-", 4) == 0) {
        for (int i = 0; i < g.ndev; i++) {
            if (strlen(all[i].uuid) < n || strncmp(all[i].uuid, e, n) != 0)
                continue;
            if (found >= 0)
                return -1; /* ambiguous prefix */
            found = i;
        }
    }
    return found >= 0 && !taken[found] ? found : -1;
}

static void apply_visible(const char *list)
{
    struct fc_dev all[FC_MAX_DEVICES];
    bool taken[FC_MAX_DEVICES] = {false};
    int n = 0;
    memcpy(all, g.dev, sizeof(all));
    for (const char *p = list; *p && n < g.ndev;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int i = visible_entry(all, p, len, taken);
        if (i < 0)
            break;
        taken[i] = true;
        g.dev[n++] = all[i];
        if (!end)
            break;
        p = end + 1;
    }
    g.ndev = n;
}

/* fork: the child must not run on the parent's slot (the inherited
 * descriptor is the parent's lock), and no update may be in flight. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&g.lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&g.lock);
}

static void fork_child(void)
{
    fc_phys_forget(&g.phys);
    pthread_mutex_unlock(&g.lock);
}

static const char *open_phys(const char *path)
{
    static char why[600];
    char msg[512];
    if (*path == '\0')
        return "FAKECUDA_PHYS is empty";
    if (fc_phys_open(&g.phys, path, msg, sizeof(msg)) != 0) {
        snprintf(why, sizeof(why), "FAKECUDA_PHYS: %s", msg);
        return why;
    }
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0) {
        fc_phys_close(&g.phys);
        return "FAKECUDA_PHYS: pthread_atfork failed";
    }
    /* Kept open (and mapped) until the process ends: the kernel drops the
     * slot's lock then, and no exit-time handler can race a charge. */
    g.phys_on = true;
    return NULL;
}

__attribute__((constructor)) static void fc_load(void)
{
    const char *devs = getenv("FAKECUDA_DEVICES");
    const char *fail = getenv("FAKECUDA_FAIL");
    const char *phys = getenv("FAKECUDA_PHYS");
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    const char *distinct = getenv("FAKECUDA_PROCADDR_DISTINCT");
    const char *retain = getenv("FAKECUDA_POOL_RETAIN");
    const char *timeline = getenv("FAKECUDA_TIMELINE");
    if (devs)
        g.broken = parse_devices(devs);
    else {
        g.ndev = 1;
        g.dev[0].total = FC_DEFAULT_TOTAL;
        snprintf(g.dev[0].uuid, sizeof(g.dev[0].uuid), "GPU-fa4ecada-0000-0000-0000-%012x", 0);
        (void)parse_uuid(g.dev[0].uuid, strlen(g.dev[0].uuid), g.dev[0].raw);
    }
    if (!g.broken && fail)
        g.broken = parse_fail(fail);
    if (!g.broken && distinct && strcmp(distinct, "0") != 0 && strcmp(distinct, "1") != 0)
        g.broken = "FAKECUDA_PROCADDR_DISTINCT is neither 0 nor 1";
    g.distinct = distinct && strcmp(distinct, "1") == 0;
    if (!g.broken && retain && strcmp(retain, "0") != 0 && strcmp(retain, "1") != 0)
        g.broken = "FAKECUDA_POOL_RETAIN is neither 0 nor 1";
    g.pool_retain = retain && strcmp(retain, "1") == 0;
    static char tl_why[600];
    if (!g.broken && timeline && fc_tl_open(&g.tl, timeline, tl_why, sizeof(tl_why)) != 0)
        g.broken = tl_why;
#ifndef FC_HAVE_DISTINCT
    if (!g.broken && g.distinct)
        g.broken = "FAKECUDA_PROCADDR_DISTINCT is not supported on this architecture";
#endif
    if (!g.broken) {
        g.nall = g.ndev;
        for (int i = 0; i < g.ndev; i++) {
            g.dev[i].real = i;
            memcpy(g.all_uuid[i], g.dev[i].uuid, FC_PHYS_UUID);
        }
        if (visible)
            apply_visible(visible);
    }
    if (!g.broken && phys)
        g.broken = open_phys(phys);
    if (g.broken) {
        fprintf(stderr, "fakecuda: %s; every call returns CUDA_ERROR_UNKNOWN\n", g.broken);
        return;
    }
    g.next_va = FC_VA_BASE;
    g.next_va32 = FC_VA32_BASE;
    g.next_handle = FC_HANDLE_BASE;
    g.va.prev = g.va.next = &g.va;
    g.pools.prev = g.pools.next = &g.pools;
    for (int i = 0; i < g.ndev; i++) {
        struct fc_ctx *c = &g.dev[i].primary;
        g.dev[i].access =
            (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, i}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        c->magic = FC_CTX_MAGIC;
        c->dev = i;
        c->primary = true;
        c->own.prev = c->own.next = &c->own;
    }
}

/* --- bookkeeping (callers hold g.lock) ----------------------------------- */

static size_t bucket_of(uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> (64 - g.bits));
}

static int table_grow(void)
{
    unsigned bits = g.bits ? g.bits + 1 : 10;
    struct fc_obj **nb = calloc((size_t)1 << bits, sizeof(*nb));
    if (!nb)
        return -1;
    struct fc_obj **old = g.buckets;
    size_t oldn = g.bits ? (size_t)1 << g.bits : 0;
    g.buckets = nb;
    g.bits = bits;
    for (size_t i = 0; i < oldn; i++) {
        struct fc_obj *o = old[i];
        while (o) {
            struct fc_obj *next = o->hnext;
            size_t b = bucket_of(o->key);
            o->hnext = nb[b];
            nb[b] = o;
            o = next;
        }
    }
    free(old);
    return 0;
}

static struct fc_obj *lookup(uint64_t addr, enum fc_kind kind)
{
    if (!g.buckets)
        return NULL;
    uint64_t key = addr | (uint64_t)kind;
    for (struct fc_obj *o = g.buckets[bucket_of(key)]; o; o = o->hnext)
        if (o->key == key)
            return o;
    return NULL;
}

static void list_add(struct fc_obj *head, struct fc_obj *o)
{
    o->next = head;
    o->prev = head->prev;
    head->prev->next = o;
    head->prev = o;
}

static void list_del(struct fc_obj *o)
{
    if (!o->next)
        return;
    o->prev->next = o->next;
    o->next->prev = o->prev;
    o->prev = o->next = NULL;
}

/* This process's slot in the physical-use file: claimed at cuInit, and again
 * by a forked child at its first charge. */
static CUresult phys_slot(void)
{
    if (g.phys.slot >= 0)
        return CUDA_SUCCESS;
    char why[600];
    /* Every configured device, visible or not, in FAKECUDA_DEVICES order:
     * the file's device numbers do not depend on CUDA_VISIBLE_DEVICES. */
    if (fc_phys_claim(&g.phys, (const char(*)[FC_PHYS_UUID])g.all_uuid, g.nall, why, sizeof(why)) !=
        0) {
        fprintf(stderr, "fakecuda: FAKECUDA_PHYS: %s\n", why);
        return CUDA_ERROR_UNKNOWN;
    }
    return CUDA_SUCCESS;
}

/* Takes `bytes` of dev's memory for this process: OUT_OF_MEMORY when the
 * device's total would be passed, counting this process alone or, with
 * FAKECUDA_PHYS, every live process. Every charge goes through here and
 * dev_give, so the physical file always mirrors `used`. */
static CUresult dev_take(int dev, uint64_t bytes)
{
    struct fc_dev *d = &g.dev[dev];
    if (bytes > d->total - d->used || bytes > INT64_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (g.phys_on && bytes) {
        CUresult rc = phys_slot();
        if (rc != CUDA_SUCCESS)
            return rc;
        int r = fc_phys_charge(&g.phys, d->real, (int64_t)bytes, d->total);
        if (r != 0)
            return r > 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
    }
    d->used += bytes;
    return CUDA_SUCCESS;
}

static void dev_give(int dev, uint64_t bytes)
{
    g.dev[dev].used -= bytes;
    /* A failure here (the file's lock) would leave our share too high, never
     * too low; a forked child that has no slot yet holds nothing there. */
    if (g.phys_on && bytes && g.phys.slot >= 0)
        (void)fc_phys_charge(&g.phys, g.dev[dev].real, -(int64_t)bytes, g.dev[dev].total);
}

/* A new record in the table for addr/kind, charged `charge` bytes on dev and
 * owned by ctx (NULL: device-level). OUT_OF_MEMORY when the device is full
 * (or the host is); nothing changes then. */
static CUresult obj_new(uint64_t addr, enum fc_kind kind, int dev, uint64_t charge,
                        struct fc_ctx *ctx, struct fc_obj **out)
{
    if (g.count >= ((size_t)1 << g.bits) && table_grow() != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fc_obj *o = g.spare;
    if (o)
        g.spare = o->hnext;
    else if (!(o = malloc(sizeof(*o))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = dev_take(dev, charge);
    if (rc != CUDA_SUCCESS) {
        o->hnext = g.spare;
        g.spare = o;
        return rc;
    }
    /* Field by field, and the kind's part as one small block: a memset of
     * the whole record costs the hot path a slow string store. */
    memset(&o->reserved, 0, sizeof(*o) - offsetof(struct fc_obj, reserved));
    o->key = addr | (uint64_t)kind;
    o->prev = o->next = NULL;
    o->kind = kind;
    o->dev = dev;
    o->addr = addr;
    o->size = 0;
    o->charged = charge;
    o->link = 0;
    o->gmem = false;
    o->ctx = ctx;
    size_t b = bucket_of(o->key);
    o->hnext = g.buckets[b];
    g.buckets[b] = o;
    g.count++;
    if (ctx)
        list_add(&ctx->own, o);
    *out = o;
    return CUDA_SUCCESS;
}

static void pool_give(struct fc_obj *p, uint64_t bytes);
static void graph_free(struct fc_obj *graph);
static struct fc_obj *capture_of(CUstream s);
static CUresult graph_add_node(struct fc_obj *graph, CUgraphNodeType type, int dev, uint64_t va,
                               uint64_t size);
static CUresult pool_new(int dev, struct fc_obj **out);

static void obj_free(struct fc_obj *o)
{
    struct fc_obj **pp = &g.buckets[bucket_of(o->key)];
    while (*pp != o)
        pp = &(*pp)->hnext;
    *pp = o->hnext;
    g.count--;
    dev_give(o->dev, o->charged);
    list_del(o);
    o->hnext = g.spare;
    g.spare = o;
    /* A pool allocation's bytes are the pool's: it decides what goes back;
     * a graph allocation's stay reserved in the device's graph pool. */
    struct fc_obj *pool = o->kind == KIND_PTR && o->link ? lookup(o->link, KIND_POOL) : NULL;
    if (pool)
        pool_give(pool, o->size);
    if (o->kind == KIND_PTR && o->gmem)
        g.dev[o->dev].gused -= o->size;
    /* A stream torn down mid-capture takes its unfinished graph along. */
    struct fc_obj *graph =
        o->kind == KIND_STREAM && o->capture ? lookup(o->capture, KIND_GRAPH) : NULL;
    if (graph)
        graph_free(graph);
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/* A fresh device address range: never reused, so a stale pointer is always
 * unknown rather than someone else's. 0 when the space is exhausted. */
static uint64_t va_take(uint64_t size, uint64_t align)
{
    uint64_t va = round_up(g.next_va, align);
    uint64_t len = round_up(size, FC_PTR_ALIGN);
    if (va >= FC_VA_LIMIT || len > FC_VA_LIMIT - va)
        return 0;
    g.next_va = va + len;
    return va;
}

static uint64_t handle_take(void)
{
    g.next_handle += 16 * FC_PTR_ALIGN;
    return g.next_handle;
}

/* Frees everything made in the context, its limit growth included (the
 * limits are back to their defaults). */
static void ctx_teardown(struct fc_ctx *c)
{
    while (c->own.next != &c->own)
        obj_free(c->own.next);
    memset(c->limit, 0, sizeof(c->limit));
    memset(c->growth, 0, sizeof(c->growth));
}

/* The calling thread's usable context. */
static CUresult current(struct fc_ctx **out)
{
    struct fc_ctx *c = tls_ctx;
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!c->live)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

static bool ctx_known(CUcontext h)
{
    for (int i = 0; i < g.ndev; i++)
        if ((struct fc_ctx *)h == &g.dev[i].primary)
            return true;
    for (struct fc_ctx *c = g.ctxs; c; c = c->next_all)
        if ((struct fc_ctx *)h == c)
            return true;
    return false;
}

/* The first check of every entry point: configuration, injected failure,
 * initialisation. */
static CUresult enter(enum fc_ep ep, bool need_init)
{
    if (g.broken)
        return CUDA_ERROR_UNKNOWN;
    if (g.fail[ep])
        return (CUresult)g.fail[ep];
    if (need_init && !atomic_load_explicit(&g.initialized, memory_order_acquire))
        return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_SUCCESS;
}

static CUresult check_dev(CUdevice dev)
{
    return dev >= 0 && dev < g.ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* --- initialisation, errors, devices ------------------------------------- */

static CUresult fc_cuInit(unsigned int Flags)
{
    CUresult rc = enter(EP_cuInit, false);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (g.ndev == 0)
        return CUDA_ERROR_NO_DEVICE; /* CUDA_VISIBLE_DEVICES named none */
    pthread_mutex_lock(&g.lock);
    if (!atomic_load(&g.initialized)) {
        if (table_grow() != 0) {
            pthread_mutex_unlock(&g.lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (g.phys_on && (rc = phys_slot()) != CUDA_SUCCESS) {
            pthread_mutex_unlock(&g.lock);
            return rc;
        }
        for (int i = 0; i < g.ndev; i++) {
            struct fc_obj *pool;
            rc = pool_new(i, &pool);
            if (rc != CUDA_SUCCESS)
                break;
            pool->is_default = true;
            g.dev[i].default_pool = g.dev[i].mempool = pool->addr;
        }
        if (rc == CUDA_SUCCESS)
            atomic_store_explicit(&g.initialized, 1, memory_order_release);
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuDriverGetVersion(int *driverVersion)
{
    CUresult rc = enter(EP_cuDriverGetVersion, false);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = FC_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

static CUresult error_text(CUresult error, const char **pStr, bool name)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define FC_ERROR_CASE(sym, value, text) \
    case sym:                           \
        *pStr = name ? #sym : text;     \
        return CUDA_SUCCESS;
        CU_RESULT_MAP(FC_ERROR_CASE)
#undef FC_ERROR_CASE
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult fc_cuGetErrorName(CUresult error, const char **pStr)
{
    CUresult rc = enter(EP_cuGetErrorName, false);
    return rc != CUDA_SUCCESS ? rc : error_text(error, pStr, true);
}

static CUresult fc_cuGetErrorString(CUresult error, const char **pStr)
{
    CUresult rc = enter(EP_cuGetErrorString, false);
    return rc != CUDA_SUCCESS ? rc : error_text(error, pStr, false);
}

static CUresult fc_cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = enter(EP_cuDeviceGet, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_dev(ordinal)) != CUDA_SUCCESS)
        return rc;
    *device = ordinal;
    return CUDA_SUCCESS;
}

static CUresult fc_cuDeviceGetCount(int *count)
{
    CUresult rc = enter(EP_cuDeviceGetCount, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = g.ndev;
    return CUDA_SUCCESS;
}

static CUresult fc_cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = enter(EP_cuDeviceGetName, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_dev(dev)) != CUDA_SUCCESS)
        return rc;
    snprintf(name, (size_t)len, "fakecuda GPU %d", g.dev[dev].real);
    return CUDA_SUCCESS;
}

static CUresult device_uuid(enum fc_ep ep, CUuuid *uuid, CUdevice dev)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_dev(dev)) != CUDA_SUCCESS)
        return rc;
    memcpy(uuid->bytes, g.dev[dev].raw, sizeof(uuid->bytes));
    return CUDA_SUCCESS;
}

static CUresult fc_cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return device_uuid(EP_cuDeviceGetUuid, uuid, dev);
}

static CUresult fc_cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return device_uuid(EP_cuDeviceGetUuid_v2, uuid, dev);
}

static CUresult fc_cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = enter(EP_cuDeviceTotalMem_v2, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_dev(dev)) != CUDA_SUCCESS)
        return rc;
    *bytes = g.dev[dev].total;
    return CUDA_SUCCESS;
}

/* The legacy 32-bit form: totals of 4 GiB and more are clamped to UINT_MAX. */
static CUresult fc_cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    CUresult rc = enter(EP_cuDeviceTotalMem, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_dev(dev)) != CUDA_SUCCESS)
        return rc;
    uint64_t t = g.dev[dev].total;
    *bytes = t > UINT32_MAX ? UINT32_MAX : (unsigned int)t;
    return CUDA_SUCCESS;
}

static CUresult fc_cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = enter(EP_cuDeviceGetAttribute, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pi || (int)attrib <= 0 || (int)attrib > FC_MAX_ATTRIBUTE)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_dev(dev)) != CUDA_SUCCESS)
        return rc;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *pi = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        *pi = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        *pi = 132;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        *pi = 2048; /* the stack limit's device bytes use it (FC_SMS x 2048) */
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        *pi = g.dev[dev].real + 1;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *pi = 9;
        break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
        *pi = 1;
        break;
    default:
        *pi = 0;
        break;
    }
    return CUDA_SUCCESS;
}

/* --- contexts -------------------------------------------------------------- */

static CUresult ctx_create(enum fc_ep ep, CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_dev(dev)) != CUDA_SUCCESS)
        return rc;
    struct fc_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->magic = FC_CTX_MAGIC;
    c->dev = dev;
    c->live = true;
    c->own.prev = c->own.next = &c->own;
    pthread_mutex_lock(&g.lock);
    c->next_all = g.ctxs;
    g.ctxs = c;
    pthread_mutex_unlock(&g.lock);
    tls_ctx = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

static CUresult fc_cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(EP_cuCtxCreate, pctx, flags, dev);
}

static CUresult fc_cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(EP_cuCtxCreate_v2, pctx, flags, dev);
}

static CUresult ctx_destroy(enum fc_ep ep, CUcontext ctx)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_ctx *c = (struct fc_ctx *)ctx;
    pthread_mutex_lock(&g.lock);
    if (!ctx || !ctx_known(ctx) || c->primary || !c->live) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    ctx_teardown(c);
    c->live = false;
    pthread_mutex_unlock(&g.lock);
    if (tls_ctx == c)
        tls_ctx = NULL;
    return CUDA_SUCCESS;
}

static CUresult fc_cuCtxDestroy(CUcontext ctx)
{
    return ctx_destroy(EP_cuCtxDestroy, ctx);
}

static CUresult fc_cuCtxDestroy_v2(CUcontext ctx)
{
    return ctx_destroy(EP_cuCtxDestroy_v2, ctx);
}

static CUresult fc_cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = enter(EP_cuCtxGetCurrent, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)tls_ctx;
    return CUDA_SUCCESS;
}

static CUresult fc_cuCtxSetCurrent(CUcontext ctx)
{
    CUresult rc = enter(EP_cuCtxSetCurrent, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx) {
        pthread_mutex_lock(&g.lock);
        bool ok = ctx_known(ctx) && ((struct fc_ctx *)ctx)->live;
        pthread_mutex_unlock(&g.lock);
        if (!ok)
            return CUDA_ERROR_INVALID_CONTEXT;
    }
    tls_ctx = (struct fc_ctx *)ctx;
    return CUDA_SUCCESS;
}

/* The calling thread's context stack: tls_ctx is its top; below it, what
 * cuCtxPushCurrent pushed down. */
#define FC_CTX_STACK 64
static _Thread_local struct fc_ctx *tls_stack[FC_CTX_STACK];
static _Thread_local int tls_depth;

static CUresult ctx_push(enum fc_ep ep, CUcontext ctx)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    bool ok = ctx && ctx_known(ctx) && ((struct fc_ctx *)ctx)->live;
    pthread_mutex_unlock(&g.lock);
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth == FC_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    tls_stack[tls_depth++] = tls_ctx;
    tls_ctx = (struct fc_ctx *)ctx;
    return CUDA_SUCCESS;
}

static CUresult fc_cuCtxPushCurrent_v2(CUcontext ctx)
{
    return ctx_push(EP_cuCtxPushCurrent_v2, ctx);
}

static CUresult fc_cuCtxPushCurrent(CUcontext ctx)
{
    return ctx_push(EP_cuCtxPushCurrent, ctx);
}

/* Pops the current context (into *pctx when given); the one below becomes
 * current. */
static CUresult ctx_pop(enum fc_ep ep, CUcontext *pctx)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!tls_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx)
        *pctx = (CUcontext)tls_ctx;
    tls_ctx = tls_depth > 0 ? tls_stack[--tls_depth] : NULL;
    return CUDA_SUCCESS;
}

static CUresult fc_cuCtxPopCurrent_v2(CUcontext *pctx)
{
    return ctx_pop(EP_cuCtxPopCurrent_v2, pctx);
}

static CUresult fc_cuCtxPopCurrent(CUcontext *pctx)
{
    return ctx_pop(EP_cuCtxPopCurrent, pctx);
}

/* The device memory a limit's value takes: the stack size is per thread,
 * for every resident thread of every SM; the heap is what it says. Other
 * limits are UNSUPPORTED_LIMIT. UINT64_MAX on overflow. */
static CUresult limit_bytes(CUlimit limit, uint64_t value, uint64_t *bytes)
{
    switch (limit) {
    case CU_LIMIT_STACK_SIZE:
        *bytes = value > UINT64_MAX / (FC_SMS * FC_THREADS_PER_SM)
                     ? UINT64_MAX
                     : value * FC_SMS * FC_THREADS_PER_SM;
        return CUDA_SUCCESS;
    case CU_LIMIT_MALLOC_HEAP_SIZE:
        *bytes = value;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    }
}

static uint64_t limit_default(CUlimit limit)
{
    return limit == CU_LIMIT_STACK_SIZE ? FC_DEFAULT_STACK : FC_DEFAULT_HEAP;
}

/* Growth above the default is device memory the context holds: charged
 * (OUT_OF_MEMORY when it does not fit; nothing changes then), given back
 * by a smaller value or the context's teardown. */
static CUresult fc_cuCtxSetLimit(CUlimit limit, size_t value)
{
    CUresult rc = enter(EP_cuCtxSetLimit, true);
    struct fc_ctx *c;
    uint64_t need, base;
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = limit_bytes(limit, value, &need)) != CUDA_SUCCESS ||
        (rc = limit_bytes(limit, limit_default(limit), &base)) != CUDA_SUCCESS)
        return rc;
    if ((rc = current(&c)) != CUDA_SUCCESS)
        return rc;
    uint64_t grow = need > base ? need - base : 0;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *o = c->growth[limit];
    if (!o) {
        rc = obj_new(handle_take(), KIND_LIMIT, c->dev, grow, c, &o);
        if (rc == CUDA_SUCCESS)
            c->growth[limit] = o;
    } else if (grow > o->charged) {
        rc = dev_take(c->dev, grow - o->charged);
        if (rc == CUDA_SUCCESS)
            o->charged = grow;
    } else {
        dev_give(c->dev, o->charged - grow);
        o->charged = grow;
    }
    if (rc == CUDA_SUCCESS)
        c->limit[limit] = value;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    CUresult rc = enter(EP_cuCtxGetLimit, true);
    struct fc_ctx *c;
    uint64_t b;
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pvalue)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = limit_bytes(limit, 0, &b)) != CUDA_SUCCESS || (rc = current(&c)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    *pvalue = c->growth[limit] ? c->limit[limit] : limit_default(limit);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

static CUresult fc_cuCtxGetDevice(CUdevice *device)
{
    CUresult rc = enter(EP_cuCtxGetDevice, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = current(&c)) != CUDA_SUCCESS)
        return rc;
    *device = c->dev;
    return CUDA_SUCCESS;
}

static CUresult fc_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = enter(EP_cuDevicePrimaryCtxRetain, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_dev(dev)) != CUDA_SUCCESS)
        return rc;
    struct fc_ctx *c = &g.dev[dev].primary;
    pthread_mutex_lock(&g.lock);
    c->refs++;
    c->live = true;
    pthread_mutex_unlock(&g.lock);
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

/* Release: the last reference resets the context (frees everything in it)
 * and leaves it inactive until the next retain. */
static CUresult primary_release(enum fc_ep ep, CUdevice dev)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = check_dev(dev)) != CUDA_SUCCESS)
        return rc;
    struct fc_ctx *c = &g.dev[dev].primary;
    pthread_mutex_lock(&g.lock);
    if (c->refs == 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--c->refs == 0) {
        ctx_teardown(c);
        c->live = false;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return primary_release(EP_cuDevicePrimaryCtxRelease, dev);
}

static CUresult fc_cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    return primary_release(EP_cuDevicePrimaryCtxRelease_v2, dev);
}

/* Whether the primary context is active (retained at least once); flags 0. */
static CUresult fc_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = enter(EP_cuDevicePrimaryCtxGetState, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_dev(dev)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    *active = g.dev[dev].primary.refs > 0;
    pthread_mutex_unlock(&g.lock);
    *flags = 0;
    return CUDA_SUCCESS;
}

/* Reset: frees everything in the primary context; the retain count is kept
 * ("resetting does not release it"), so a retained context stays usable. */
static CUresult primary_reset(enum fc_ep ep, CUdevice dev)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = check_dev(dev)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    ctx_teardown(&g.dev[dev].primary);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

static CUresult fc_cuDevicePrimaryCtxReset(CUdevice dev)
{
    return primary_reset(EP_cuDevicePrimaryCtxReset, dev);
}

static CUresult fc_cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    return primary_reset(EP_cuDevicePrimaryCtxReset_v2, dev);
}

/* --- linear allocations ---------------------------------------------------- */

/* Allocates `bytes` on the current context's device (or on `dev` >= 0):
 * the common body of every pointer-returning allocator. */
static CUresult ptr_alloc(enum fc_ep ep, uint64_t *dptr, uint64_t bytes, int dev, bool va32)
{
    CUresult rc = enter(ep, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dptr || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = current(&c)) != CUDA_SUCCESS)
        return rc;
    if (bytes > FC_VA_LIMIT)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (dev < 0)
        dev = c->dev;
    pthread_mutex_lock(&g.lock);
    uint64_t va;
    if (va32) {
        uint64_t len = round_up(bytes, FC_PTR_ALIGN);
        va = g.next_va32;
        if (len > FC_VA32_LIMIT - va) {
            pthread_mutex_unlock(&g.lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else if (!(va = va_take(0, FC_PTR_ALIGN))) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct fc_obj *o;
    rc = obj_new(va, KIND_PTR, dev, bytes, c, &o);
    if (rc == CUDA_SUCCESS) {
        o->size = bytes;
        if (va32)
            g.next_va32 = va + round_up(bytes, FC_PTR_ALIGN);
        else
            g.next_va = va + round_up(bytes, FC_PTR_ALIGN);
        *dptr = va;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult ptr_free(enum fc_ep ep, uint64_t dptr)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* cuMemFree(0) is a no-op, like free(NULL). */
    if (dptr == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *o = lookup(dptr, KIND_PTR);
    if (o)
        obj_free(o);
    pthread_mutex_unlock(&g.lock);
    return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fc_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return ptr_alloc(EP_cuMemAlloc_v2, (uint64_t *)dptr, bytesize, -1, false);
}

static CUresult fc_cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    uint64_t p = 0;
    CUresult rc = ptr_alloc(EP_cuMemAlloc, dptr ? &p : NULL, bytesize, -1, true);
    if (rc == CUDA_SUCCESS)
        *dptr = (CUdeviceptr_v1)p;
    return rc;
}

static CUresult fc_cuMemFree_v2(CUdeviceptr dptr)
{
    return ptr_free(EP_cuMemFree_v2, dptr);
}

static CUresult fc_cuMemFree(CUdeviceptr_v1 dptr)
{
    return ptr_free(EP_cuMemFree, dptr);
}

static CUresult pitch_alloc(enum fc_ep ep, uint64_t *dptr, uint64_t *pitch, uint64_t width,
                            uint64_t height, unsigned elem, bool va32)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dptr || !pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p = round_up(width, FC_PITCH_ALIGN);
    if (p < width || height > UINT64_MAX / p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = ptr_alloc(ep, dptr, p * height, -1, va32);
    if (rc == CUDA_SUCCESS)
        *pitch = p;
    return rc;
}

static CUresult fc_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                      size_t Height, unsigned int ElementSizeBytes)
{
    uint64_t pitch = 0;
    CUresult rc = pitch_alloc(EP_cuMemAllocPitch_v2, (uint64_t *)dptr, pPitch ? &pitch : NULL,
                              WidthInBytes, Height, ElementSizeBytes, false);
    if (rc == CUDA_SUCCESS)
        *pPitch = pitch;
    return rc;
}

static CUresult fc_cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                   unsigned int WidthInBytes, unsigned int Height,
                                   unsigned int ElementSizeBytes)
{
    uint64_t p = 0, pitch = 0;
    CUresult rc = pitch_alloc(EP_cuMemAllocPitch, dptr ? &p : NULL, pPitch ? &pitch : NULL,
                              WidthInBytes, Height, ElementSizeBytes, true);
    if (rc == CUDA_SUCCESS) {
        *dptr = (CUdeviceptr_v1)p;
        *pPitch = (unsigned int)pitch;
    }
    return rc;
}

static CUresult fc_cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) {
        CUresult rc = enter(EP_cuMemAllocManaged, true);
        return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_VALUE;
    }
    return ptr_alloc(EP_cuMemAllocManaged, (uint64_t *)dptr, bytesize, -1, false);
}

static CUresult mem_info(enum fc_ep ep, uint64_t *free_out, uint64_t *total_out)
{
    CUresult rc = enter(ep, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = current(&c)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_dev *d = &g.dev[c->dev];
    uint64_t used = d->used, phys = 0;
    /* As on a real GPU, other live processes' memory is not free either. */
    if (g.phys_on && g.phys.slot >= 0) {
        if (fc_phys_current(&g.phys, d->real, &phys) != 0)
            rc = CUDA_ERROR_UNKNOWN;
        else if (phys > used)
            used = phys;
    }
    *free_out = used < d->total ? d->total - used : 0;
    *total_out = d->total;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuMemGetInfo_v2(size_t *free, size_t *total)
{
    uint64_t f, t;
    if (!free || !total) {
        CUresult rc = enter(EP_cuMemGetInfo_v2, true);
        return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_VALUE;
    }
    CUresult rc = mem_info(EP_cuMemGetInfo_v2, &f, &t);
    if (rc == CUDA_SUCCESS) {
        *free = f;
        *total = t;
    }
    return rc;
}

/* The legacy 32-bit form: values of 4 GiB and more are clamped to UINT_MAX. */
static CUresult fc_cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    uint64_t f, t;
    if (!free || !total) {
        CUresult rc = enter(EP_cuMemGetInfo, true);
        return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_VALUE;
    }
    CUresult rc = mem_info(EP_cuMemGetInfo, &f, &t);
    if (rc == CUDA_SUCCESS) {
        *free = f > UINT32_MAX ? UINT32_MAX : (unsigned int)f;
        *total = t > UINT32_MAX ? UINT32_MAX : (unsigned int)t;
    }
    return rc;
}

/* --- streams, pools, stream-ordered allocation ----------------------------- */

/* A stream's context: the null and special streams are the current
 * context's (which must exist); a created stream belongs to the context it
 * was made in, whatever is current (or whether anything is). */
static CUresult stream_ctx(CUstream s, struct fc_ctx **out)
{
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return current(out);
    pthread_mutex_lock(&g.lock);
    struct fc_obj *o = lookup((uint64_t)(uintptr_t)s, KIND_STREAM);
    if (o)
        *out = o->ctx;
    pthread_mutex_unlock(&g.lock);
    return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fc_cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    CUresult rc = enter(EP_cuStreamCreate, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phStream || (Flags != CU_STREAM_DEFAULT && Flags != CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = current(&c)) != CUDA_SUCCESS)
        return rc;
    struct fc_obj *o;
    pthread_mutex_lock(&g.lock);
    rc = obj_new(handle_take(), KIND_STREAM, c->dev, 0, c, &o);
    if (rc == CUDA_SUCCESS)
        *phStream = (CUstream)(uintptr_t)o->addr;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult stream_destroy(enum fc_ep ep, CUstream s)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *o = s ? lookup((uint64_t)(uintptr_t)s, KIND_STREAM) : NULL;
    if (o)
        obj_free(o);
    pthread_mutex_unlock(&g.lock);
    return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fc_cuStreamDestroy(CUstream hStream)
{
    return stream_destroy(EP_cuStreamDestroy, hStream);
}

static CUresult fc_cuStreamDestroy_v2(CUstream hStream)
{
    return stream_destroy(EP_cuStreamDestroy_v2, hStream);
}

static CUresult fc_cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    CUresult rc = enter(EP_cuStreamGetCtx, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = stream_ctx(hStream, &c)) == CUDA_SUCCESS)
        *pctx = (CUcontext)c;
    return rc;
}

/* A pool's reserved bytes are what it holds of the device (charged there);
 * `used` is what its live allocations take of them. */
static void pool_shrink(struct fc_obj *p, uint64_t keep)
{
    if (keep < p->used)
        keep = p->used;
    if (p->reserved <= keep)
        return;
    dev_give(p->dev, p->reserved - keep);
    p->reserved = keep;
    p->charged = keep;
}

/* An allocation of `bytes` takes the pool's cached bytes first, and grows
 * the reservation (a device charge) for the rest. */
static CUresult pool_take(struct fc_obj *p, uint64_t bytes)
{
    uint64_t cached = p->reserved - p->used;
    if (bytes > cached) {
        CUresult rc = dev_take(p->dev, bytes - cached);
        if (rc != CUDA_SUCCESS)
            return rc;
        p->reserved += bytes - cached;
        p->charged = p->reserved;
    }
    p->used += bytes;
    if (p->used > p->used_high)
        p->used_high = p->used;
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
    return CUDA_SUCCESS;
}

/* A pool allocation is gone (freed, or its context torn down). Without
 * FAKECUDA_POOL_RETAIN the pool keeps nothing back; with it, the bytes stay
 * reserved until a synchronisation or a trim. A destroyed pool goes once its
 * last allocation has. */
static void pool_give(struct fc_obj *p, uint64_t bytes)
{
    p->used -= bytes < p->used ? bytes : p->used;
    if (!g.pool_retain || p->destroyed)
        pool_shrink(p, p->used);
    if (p->destroyed && p->used == 0)
        obj_free(p);
}

/* Every synchronisation: each pool's reservation falls to its release
 * threshold (or what is in use, if more). */
static void pools_sync(void)
{
    for (struct fc_obj *p = g.pools.next; p != &g.pools; p = p->next)
        pool_shrink(p, p->threshold);
}

/* A pool handle the caller may use (not destroyed); under g.lock. */
static struct fc_obj *pool_get(CUmemoryPool pool)
{
    struct fc_obj *p = pool ? lookup((uint64_t)(uintptr_t)pool, KIND_POOL) : NULL;
    return p && !p->destroyed ? p : NULL;
}

static CUresult stream_sync(enum fc_ep ep, CUstream s)
{
    CUresult rc = enter(ep, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS || (rc = stream_ctx(s, &c)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    pools_sync();
    pthread_mutex_unlock(&g.lock);
    fc_tl_sync(&g.tl);
    return CUDA_SUCCESS;
}

static CUresult fc_cuStreamSynchronize(CUstream hStream)
{
    return stream_sync(EP_cuStreamSynchronize, hStream);
}

static CUresult fc_cuStreamSynchronize_ptsz(CUstream hStream)
{
    return stream_sync(EP_cuStreamSynchronize_ptsz, hStream);
}

static CUresult fc_cuCtxSynchronize(void)
{
    CUresult rc = enter(EP_cuCtxSynchronize, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS || (rc = current(&c)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    pools_sync();
    pthread_mutex_unlock(&g.lock);
    fc_tl_sync(&g.tl);
    return CUDA_SUCCESS;
}

/* Stream-ordered allocation happens at once (no stream semantics). The
 * pool is the given one, or the current pool of the stream's device; the
 * memory is the pool's device's, and the allocation belongs to the
 * stream's context (its teardown frees it). */
static CUresult async_alloc(enum fc_ep ep, CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                            bool from_pool, CUstream s)
{
    CUresult rc = enter(ep, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dptr || bytesize == 0 || (from_pool && !pool))
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = stream_ctx(s, &c)) != CUDA_SUCCESS)
        return rc;
    if (bytesize > FC_VA_LIMIT)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *p = from_pool ? pool_get(pool) : lookup(g.dev[c->dev].mempool, KIND_POOL),
                  *o = NULL;
    struct fc_obj *graph = capture_of(s);
    uint64_t va = 0;
    if (!p) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (graph) {
        /* Under capture: an allocation node with its address, no memory. */
        if (!(va = va_take(bytesize, FC_PTR_ALIGN)))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else if ((rc = graph_add_node(graph, CU_GRAPH_NODE_TYPE_MEM_ALLOC, p->dev, va, bytesize)) ==
                 CUDA_SUCCESS)
            *dptr = va;
        pthread_mutex_unlock(&g.lock);
        return rc;
    } else if (!(va = va_take(0, FC_PTR_ALIGN)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else if ((rc = obj_new(va, KIND_PTR, p->dev, 0, c, &o)) == CUDA_SUCCESS &&
             (rc = pool_take(p, bytesize)) != CUDA_SUCCESS)
        obj_free(o);
    if (rc == CUDA_SUCCESS) {
        o->size = bytesize;
        o->link = p->addr;
        g.next_va = va + round_up(bytesize, FC_PTR_ALIGN);
        *dptr = va;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return async_alloc(EP_cuMemAllocAsync, dptr, bytesize, NULL, false, hStream);
}

static CUresult fc_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return async_alloc(EP_cuMemAllocAsync_ptsz, dptr, bytesize, NULL, false, hStream);
}

static CUresult fc_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                           CUstream hStream)
{
    return async_alloc(EP_cuMemAllocFromPoolAsync, dptr, bytesize, pool, true, hStream);
}

static CUresult fc_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                CUmemoryPool pool, CUstream hStream)
{
    return async_alloc(EP_cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, true, hStream);
}

static CUresult async_free(enum fc_ep ep, CUdeviceptr dptr, CUstream s)
{
    CUresult rc = enter(ep, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = stream_ctx(s, &c)) != CUDA_SUCCESS)
        return rc;
    if (dptr == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* Under capture: a free node (what it frees is checked at launch). */
    pthread_mutex_lock(&g.lock);
    struct fc_obj *graph = capture_of(s);
    if (graph)
        rc = graph_add_node(graph, CU_GRAPH_NODE_TYPE_MEM_FREE, c->dev, dptr, 0);
    pthread_mutex_unlock(&g.lock);
    return graph ? rc : ptr_free(ep, dptr);
}

static CUresult fc_cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return async_free(EP_cuMemFreeAsync, dptr, hStream);
}

static CUresult fc_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return async_free(EP_cuMemFreeAsync_ptsz, dptr, hStream);
}

static CUresult device_location(const CUmemLocation *loc)
{
    if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    return check_dev(loc->id);
}

/* Under g.lock: a pool record on dev, in the pool list. */
static CUresult pool_new(int dev, struct fc_obj **out)
{
    CUresult rc = obj_new(handle_take(), KIND_POOL, dev, 0, NULL, out);
    if (rc == CUDA_SUCCESS) {
        list_add(&g.pools, *out);
        (*out)->reuse[0] = (*out)->reuse[1] = (*out)->reuse[2] = 1;
    }
    return rc;
}

static CUresult fc_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    CUresult rc = enter(EP_cuMemPoolCreate, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pool || !poolProps || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = device_location(&poolProps->location)) != CUDA_SUCCESS)
        return rc;
    struct fc_obj *o;
    pthread_mutex_lock(&g.lock);
    rc = pool_new(poolProps->location.id, &o);
    if (rc == CUDA_SUCCESS)
        *pool = (CUmemoryPool)(uintptr_t)o->addr;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

/* The handle is invalid at once; its cached bytes go back now, and the rest
 * when its outstanding allocations are freed. A device whose current pool
 * it was gets its default pool back. */
static CUresult fc_cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult rc = enter(EP_cuMemPoolDestroy, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *o = pool_get(pool);
    if (o && !o->is_default) {
        if (g.dev[o->dev].mempool == o->addr)
            g.dev[o->dev].mempool = g.dev[o->dev].default_pool;
        o->destroyed = true;
        pool_give(o, 0);
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult device_pool(enum fc_ep ep, CUmemoryPool *pool, CUdevice dev, bool dflt)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_dev(dev)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    *pool = (CUmemoryPool)(uintptr_t)(dflt ? g.dev[dev].default_pool : g.dev[dev].mempool);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

static CUresult fc_cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    return device_pool(EP_cuDeviceGetDefaultMemPool, pool_out, dev, true);
}

static CUresult fc_cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return device_pool(EP_cuDeviceGetMemPool, pool, dev, false);
}

/* The pool must be one of dev's own. */
static CUresult fc_cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    CUresult rc = enter(EP_cuDeviceSetMemPool, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = check_dev(dev)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *p = pool_get(pool);
    if (p && p->dev == dev)
        g.dev[dev].mempool = p->addr;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CUresult rc = enter(EP_cuMemPoolTrimTo, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *p = pool_get(pool);
    if (p)
        pool_shrink(p, minBytesToKeep);
    pthread_mutex_unlock(&g.lock);
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* REUSE_* are ints (0/1), the others cuuint64_t. The CURRENT figures are
 * read-only; a HIGH mark can only be reset, by writing 0 (it becomes the
 * current figure). */
static CUresult pool_attr(enum fc_ep ep, CUmemoryPool pool, CUmemPool_attribute attr, void *value,
                          bool set)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *p = pool_get(pool);
    cuuint64_t v = 0;
    if (set && attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
        memcpy(&v, value, sizeof(v));
    if (!p) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
               attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES) {
        int *slot = &p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        if (set)
            memcpy(slot, value, sizeof(*slot));
        else
            memcpy(value, slot, sizeof(*slot));
    } else if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
        if (set)
            p->threshold = v;
        else
            memcpy(value, &p->threshold, sizeof(p->threshold));
    } else if (attr >= CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT &&
               attr <= CU_MEMPOOL_ATTR_USED_MEM_HIGH) {
        uint64_t *fig[] = {&p->reserved, &p->reserved_high, &p->used, &p->used_high};
        int k = attr - CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT;
        if (!set)
            memcpy(value, fig[k], sizeof(uint64_t));
        else if (k % 2 == 0 || v != 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            *fig[k] = *fig[k - 1];
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    return pool_attr(EP_cuMemPoolSetAttribute, pool, attr, value, true);
}

static CUresult fc_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    return pool_attr(EP_cuMemPoolGetAttribute, pool, attr, value, false);
}

/* DEVICE_ORDINAL (the device whose memory it is) and CONTEXT, for any
 * address inside a pointer allocation or a mapping. */
static CUresult fc_cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    CUresult rc = enter(EP_cuPointerGetAttribute, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!data || (attribute != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL &&
                  attribute != CU_POINTER_ATTRIBUTE_CONTEXT))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *o = lookup(ptr, KIND_PTR);
    for (size_t b = 0; !o && b < ((size_t)1 << g.bits); b++)
        for (struct fc_obj *x = g.buckets[b]; !o && x; x = x->hnext)
            if (x->kind == KIND_PTR && ptr >= x->addr && ptr - x->addr < x->size)
                o = x;
    for (struct fc_obj *x = g.va.next; !o && x != &g.va; x = x->next)
        if (x->kind == KIND_MAP && ptr >= x->addr && ptr - x->addr < x->size)
            o = x;
    if (!o)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (attribute == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
        *(int *)data = o->dev;
    else
        *(CUcontext *)data = (CUcontext)o->ctx;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

/* --- virtual memory management --------------------------------------------- */

static CUresult fc_cuMemGetAllocationGranularity(size_t *granularity,
                                                 const CUmemAllocationProp *prop,
                                                 CUmemAllocationGranularity_flags option)
{
    CUresult rc = enter(EP_cuMemGetAllocationGranularity, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!granularity || !prop ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = device_location(&prop->location)) != CUDA_SUCCESS)
        return rc;
    *granularity = FC_GRANULARITY;
    return CUDA_SUCCESS;
}

/* --- VMM references ----------------------------------------------------------
 * An allocation (the cuMemCreate record, charged) is reachable through handle
 * values: its own, and one per cuMemImportFromShareableHandle (alias records,
 * uncharged, chained from it). Each value has `refs` outstanding references
 * (1 at creation or import, +1 per cuMemRetainAllocationHandle), each needing
 * its own cuMemRelease; `holders` on the allocation is their sum. The memory
 * goes back when holders and mappings are both 0, whatever the order; until
 * then every handle value stays known, so a retain through a mapping can
 * hand out the value it was mapped with. Callers hold g.lock. */

static struct fc_obj *vmm_alloc_of(struct fc_obj *h)
{
    return h->alias ? lookup(h->alias, KIND_VMM) : h;
}

static void vmm_maybe_free(struct fc_obj *a)
{
    if (a->holders > 0 || a->maps > 0)
        return;
    while (a->alias_next) {
        struct fc_obj *n = a->alias_next;
        a->alias_next = n->alias_next;
        obj_free(n);
    }
    obj_free(a);
}

/* Physical allocations are device-level: a context's teardown leaves them. */
static CUresult fc_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult rc = enter(EP_cuMemCreate, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle || !prop || size == 0 || size % FC_GRANULARITY != 0 || flags != 0 ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = device_location(&prop->location)) != CUDA_SUCCESS)
        return rc;
    if ((rc = current(&c)) != CUDA_SUCCESS)
        return rc;
    struct fc_obj *o;
    pthread_mutex_lock(&g.lock);
    rc = obj_new(handle_take(), KIND_VMM, prop->location.id, size, NULL, &o);
    if (rc == CUDA_SUCCESS) {
        o->size = size;
        o->refs = o->holders = 1;
        o->htypes = (unsigned)prop->requestedHandleTypes;
        *handle = o->addr;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

/* One reference of this handle value goes; a value with none left is
 * unknown to cuMemMap, cuMemRelease and export. */
static CUresult fc_cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult rc = enter(EP_cuMemRelease, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *h = lookup(handle, KIND_VMM), *a = h ? vmm_alloc_of(h) : NULL;
    if (!h || !a || h->refs == 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        h->refs--;
        a->holders--;
        vmm_maybe_free(a);
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

/* The handle value that mapped `addr` (any address inside a mapping), with
 * one more reference. */
static CUresult fc_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult rc = enter(EP_cuMemRetainAllocationHandle, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t va = (uint64_t)(uintptr_t)addr;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *m = NULL, *h = NULL, *a = NULL;
    for (struct fc_obj *x = g.va.next; !m && x != &g.va; x = x->next)
        if (x->kind == KIND_MAP && va >= x->addr && va - x->addr < x->size)
            m = x;
    if (m && (h = lookup(m->handle, KIND_VMM)) != NULL && (a = vmm_alloc_of(h)) != NULL) {
        h->refs++;
        a->holders++;
        *handle = m->handle;
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

/* POSIX file descriptor only (the allocation must have asked for it): a
 * memfd holding the allocation's key, which only this process's import
 * understands. The descriptor holds no reference. */
static CUresult fc_cuMemExportToShareableHandle(void *shareableHandle,
                                                CUmemGenericAllocationHandle handle,
                                                CUmemAllocationHandleType handleType,
                                                unsigned long long flags)
{
    CUresult rc = enter(EP_cuMemExportToShareableHandle, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!shareableHandle || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *h = lookup(handle, KIND_VMM), *a = h ? vmm_alloc_of(h) : NULL;
    uint64_t key = a ? a->addr : 0;
    bool ok = h && a && h->refs > 0 && (a->htypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    pthread_mutex_unlock(&g.lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (pwrite(fd, &key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
        (void)close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

/* A new handle value (refs 1) for the allocation the descriptor names. */
static CUresult fc_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                  void *osHandle,
                                                  CUmemAllocationHandleType shHandleType)
{
    CUresult rc = enter(EP_cuMemImportFromShareableHandle, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key = 0;
    int fd = (int)(intptr_t)osHandle;
    if (pread(fd, &key, sizeof(key), 0) != (ssize_t)sizeof(key))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *a = lookup(key, KIND_VMM), *h = NULL;
    if (!a || a->alias || a->holders + a->maps == 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = obj_new(handle_take(), KIND_VMM, a->dev, 0, NULL, &h);
    if (rc == CUDA_SUCCESS) {
        h->size = a->size;
        h->alias = a->addr;
        h->refs = 1;
        h->alias_next = a->alias_next;
        a->alias_next = h;
        a->holders++;
        *handle = h->addr;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                       CUdeviceptr addr, unsigned long long flags)
{
    CUresult rc = enter(EP_cuMemAddressReserve, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ptr || size == 0 || size % FC_GRANULARITY != 0 || flags != 0 ||
        (alignment & (alignment - 1)) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    uint64_t va = va_take(size, alignment > FC_GRANULARITY ? alignment : FC_GRANULARITY);
    struct fc_obj *o = NULL;
    rc = va ? obj_new(va, KIND_RESERVE, 0, 0, NULL, &o) : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        o->size = size;
        list_add(&g.va, o);
        *ptr = va;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

/* Mappings left inside the range are not checked (the caller's bug). */
static CUresult fc_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult rc = enter(EP_cuMemAddressFree, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *o = lookup(ptr, KIND_RESERVE);
    if (o && o->size == size)
        obj_free(o);
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                            CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult rc = enter(EP_cuMemMap, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (size == 0 || size % FC_GRANULARITY != 0 || offset != 0 || flags != 0 ||
        ptr % FC_GRANULARITY != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *h = lookup(handle, KIND_VMM), *a = h ? vmm_alloc_of(h) : NULL;
    bool inside = false, overlap = false;
    for (struct fc_obj *o = g.va.next; o != &g.va; o = o->next) {
        if (o->kind == KIND_RESERVE && ptr >= o->addr && ptr - o->addr <= o->size &&
            size <= o->size - (ptr - o->addr))
            inside = true;
        if (o->kind == KIND_MAP && ptr < o->addr + o->size && o->addr < ptr + size)
            overlap = true;
    }
    struct fc_obj *m = NULL;
    if (!h || !a || h->refs == 0 || size > a->size || !inside || overlap)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = obj_new(ptr, KIND_MAP, a->dev, 0, NULL, &m);
    if (rc == CUDA_SUCCESS) {
        m->size = size;
        m->link = a->addr;
        m->handle = handle;
        list_add(&g.va, m);
        a->maps++;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

/* Unmaps every mapping inside [ptr, ptr+size); one straddling its edge, or
 * none at all, is INVALID_VALUE and nothing changes. */
static CUresult fc_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = enter(EP_cuMemUnmap, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    int found = 0;
    for (struct fc_obj *o = g.va.next; o != &g.va; o = o->next) {
        if (o->kind != KIND_MAP || !(ptr < o->addr + o->size && o->addr < ptr + size))
            continue;
        if (o->addr < ptr || o->addr + o->size > ptr + size)
            rc = CUDA_ERROR_INVALID_VALUE;
        found++;
    }
    if (found == 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    for (struct fc_obj *o = g.va.next; rc == CUDA_SUCCESS && o != &g.va;) {
        struct fc_obj *next = o->next;
        if (o->kind == KIND_MAP && o->addr >= ptr && o->addr + o->size <= ptr + size) {
            struct fc_obj *a = lookup(o->link, KIND_VMM);
            obj_free(o);
            if (a) {
                a->maps--;
                vmm_maybe_free(a);
            }
        }
        o = next;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

/* The range must be mapped throughout; each descriptor names a device and
 * a protection (NONE 0, READ 1, READWRITE 3). Access is not modelled. */
static CUresult fc_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                  size_t count)
{
    CUresult rc = enter(EP_cuMemSetAccess, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (size == 0 || !desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
        if ((rc = device_location(&desc[i].location)) != CUDA_SUCCESS)
            return rc;
    }
    pthread_mutex_lock(&g.lock);
    uint64_t covered = 0;
    for (struct fc_obj *o = g.va.next; o != &g.va; o = o->next) {
        if (o->kind != KIND_MAP || !(ptr < o->addr + o->size && o->addr < ptr + size))
            continue;
        uint64_t lo = o->addr > ptr ? o->addr : ptr;
        uint64_t hi = o->addr + o->size < ptr + size ? o->addr + o->size : ptr + size;
        covered += hi - lo;
    }
    pthread_mutex_unlock(&g.lock);
    return covered == size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* --- arrays ----------------------------------------------------------------- */

static uint64_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    }
    return 0;
}

static bool mul_ok(uint64_t *acc, uint64_t v)
{
    if (v != 0 && *acc > UINT64_MAX / v)
        return false;
    *acc *= v;
    return true;
}

/* Bytes of a w x h x d array (h, d of 0 count as 1); 0 for a bad descriptor,
 * UINT64_MAX when it overflows. */
static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned ch)
{
    uint64_t e = format_bytes(f), b = 1;
    if (w == 0 || e == 0 || (ch != 1 && ch != 2 && ch != 4))
        return 0;
    if (!mul_ok(&b, w) || !mul_ok(&b, h ? h : 1) || !mul_ok(&b, d ? d : 1) || !mul_ok(&b, e) ||
        !mul_ok(&b, ch))
        return UINT64_MAX;
    return b;
}

static CUresult handle_alloc(enum fc_ep ep, enum fc_kind kind, bool out, uint64_t *h,
                             uint64_t bytes)
{
    CUresult rc = enter(ep, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!out || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytes == UINT64_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((rc = current(&c)) != CUDA_SUCCESS)
        return rc;
    struct fc_obj *o;
    pthread_mutex_lock(&g.lock);
    rc = obj_new(handle_take(), kind, c->dev, bytes, c, &o);
    if (rc == CUDA_SUCCESS) {
        o->size = bytes;
        *h = o->addr;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult handle_free(enum fc_ep ep, enum fc_kind kind, const void *h)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *o = h ? lookup((uint64_t)(uintptr_t)h, kind) : NULL;
    if (o)
        obj_free(o);
    pthread_mutex_unlock(&g.lock);
    return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fc_cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    uint64_t b = d ? array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels) : 0;
    uint64_t h = 0;
    CUresult rc = handle_alloc(EP_cuArrayCreate_v2, KIND_ARRAY, pHandle != NULL, &h, b);
    if (rc == CUDA_SUCCESS)
        *pHandle = (CUarray)(uintptr_t)h;
    return rc;
}

static CUresult fc_cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *d)
{
    uint64_t b = d ? array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels) : 0;
    uint64_t h = 0;
    CUresult rc = handle_alloc(EP_cuArrayCreate, KIND_ARRAY, pHandle != NULL, &h, b);
    if (rc == CUDA_SUCCESS)
        *pHandle = (CUarray)(uintptr_t)h;
    return rc;
}

static CUresult fc_cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    uint64_t b = d ? array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels) : 0;
    uint64_t h = 0;
    CUresult rc = handle_alloc(EP_cuArray3DCreate_v2, KIND_ARRAY, pHandle != NULL, &h, b);
    if (rc == CUDA_SUCCESS)
        *pHandle = (CUarray)(uintptr_t)h;
    return rc;
}

static CUresult fc_cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d)
{
    uint64_t b = d ? array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels) : 0;
    uint64_t h = 0;
    CUresult rc = handle_alloc(EP_cuArray3DCreate, KIND_ARRAY, pHandle != NULL, &h, b);
    if (rc == CUDA_SUCCESS)
        *pHandle = (CUarray)(uintptr_t)h;
    return rc;
}

static CUresult fc_cuArrayDestroy(CUarray hArray)
{
    return handle_free(EP_cuArrayDestroy, KIND_ARRAY, hArray);
}

/* Sum over the levels, each dimension halved per level (at least 1); more
 * levels than the largest dimension allows is INVALID_VALUE. */
static CUresult fc_cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                          const CUDA_ARRAY3D_DESCRIPTOR *d,
                                          unsigned int numMipmapLevels)
{
    uint64_t total = 0;
    if (d && numMipmapLevels > 0) {
        uint64_t w = d->Width, h = d->Height ? d->Height : 1, z = d->Depth ? d->Depth : 1;
        uint64_t max = w > h ? (w > z ? w : z) : (h > z ? h : z);
        unsigned levels = 1;
        while (max >>= 1)
            levels++;
        for (unsigned l = 0; l < numMipmapLevels && numMipmapLevels <= levels; l++) {
            uint64_t b = array_bytes(w, h, z, d->Format, d->NumChannels);
            if (b == 0 || b == UINT64_MAX || total > UINT64_MAX - b) {
                total = b == 0 ? 0 : UINT64_MAX;
                break;
            }
            total += b;
            w = w > 1 ? w / 2 : 1;
            h = h > 1 ? h / 2 : 1;
            z = z > 1 ? z / 2 : 1;
        }
    }
    uint64_t h = 0;
    CUresult rc = handle_alloc(EP_cuMipmappedArrayCreate, KIND_MIPMAP, pHandle != NULL, &h, total);
    if (rc == CUDA_SUCCESS)
        *pHandle = (CUmipmappedArray)(uintptr_t)h;
    return rc;
}

static CUresult fc_cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    return handle_free(EP_cuMipmappedArrayDestroy, KIND_MIPMAP, hMipmappedArray);
}

/* --- graphs with memory nodes ---------------------------------------------------
 * Stream capture records what the fake models of a stream's work: memory
 * allocation and free nodes (cuMemAllocAsync / cuMemAllocFromPoolAsync /
 * cuMemFreeAsync on a capturing stream). An allocation node has its address
 * from capture on but no memory: a launch takes the memory from its device's
 * graph memory pool, whose reservation grows to what the launch needs and
 * stays after it (until cuDeviceGraphMemTrim). An allocation the graph does
 * not free itself is a live pointer after the launch (freed by
 * cuMemFree(Async) or a later graph's free node); launching again while it
 * lives is INVALID_VALUE unless instantiated with AUTO_FREE_ON_LAUNCH.
 * Graphs and executable graphs are device-level objects (no context). */

/* One step of an executable graph. */
struct fc_gop {
    CUgraphNodeType type;
    int dev;
    uint64_t va, size;
    bool freed_inside; /* allocation: a free node of the same graph frees it */
};

/* Under g.lock: a node of a graph being captured. */
static CUresult graph_add_node(struct fc_obj *graph, CUgraphNodeType type, int dev, uint64_t va,
                               uint64_t size)
{
    if (graph->nnodes == graph->capnodes) {
        size_t n = graph->capnodes ? graph->capnodes * 2 : 8;
        uint64_t *nn = realloc(graph->nodes, n * sizeof(*nn));
        if (!nn)
            return CUDA_ERROR_OUT_OF_MEMORY;
        graph->nodes = nn;
        graph->capnodes = n;
    }
    struct fc_obj *node;
    CUresult rc = obj_new(handle_take(), KIND_GNODE, dev, 0, NULL, &node);
    if (rc != CUDA_SUCCESS)
        return rc;
    node->ntype = type;
    node->handle = va;
    node->size = size;
    node->link = graph->addr;
    graph->nodes[graph->nnodes++] = node->addr;
    return CUDA_SUCCESS;
}

/* Under g.lock: the graph and its nodes go. */
static void graph_free(struct fc_obj *graph)
{
    for (size_t i = 0; i < graph->nnodes; i++) {
        struct fc_obj *node = lookup(graph->nodes[i], KIND_GNODE);
        if (node)
            obj_free(node);
    }
    free(graph->nodes);
    graph->nodes = NULL;
    graph->nnodes = graph->capnodes = 0;
    obj_free(graph);
}

/* Under g.lock: the graph stream s is capturing into, if any. */
static struct fc_obj *capture_of(CUstream s)
{
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return NULL;
    struct fc_obj *o = lookup((uint64_t)(uintptr_t)s, KIND_STREAM);
    return o && o->capture ? lookup(o->capture, KIND_GRAPH) : NULL;
}

static CUresult begin_capture(enum fc_ep ep, CUstream s, CUstreamCaptureMode mode)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *o = lookup((uint64_t)(uintptr_t)s, KIND_STREAM), *graph = NULL;
    if (!o)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (o->capture)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    else if ((rc = obj_new(handle_take(), KIND_GRAPH, o->dev, 0, NULL, &graph)) == CUDA_SUCCESS)
        o->capture = graph->addr;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(EP_cuStreamBeginCapture_v2, hStream, mode);
}

/* The 10.0 form, before capture modes: global. */
static CUresult fc_cuStreamBeginCapture(CUstream hStream)
{
    return begin_capture(EP_cuStreamBeginCapture, hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

static CUresult fc_cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    CUresult rc = enter(EP_cuStreamEndCapture, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *o = hStream ? lookup((uint64_t)(uintptr_t)hStream, KIND_STREAM) : NULL;
    if (!o || !o->capture) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
    } else {
        *phGraph = (CUgraph)(uintptr_t)o->capture;
        o->capture = 0;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    CUresult rc = enter(EP_cuStreamIsCapturing, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!captureStatus)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = stream_ctx(hStream, &c)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    *captureStatus =
        capture_of(hStream) ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

static CUresult instantiate(enum fc_ep ep, CUgraphExec *phGraphExec, CUgraph hGraph,
                            unsigned long long flags)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phGraphExec || (flags & ~(unsigned long long)FC_INSTANTIATE_FLAGS) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *graph = hGraph ? lookup((uint64_t)(uintptr_t)hGraph, KIND_GRAPH) : NULL;
    struct fc_obj *exec = NULL;
    struct fc_gop *ops = NULL;
    if (!graph)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (graph->nnodes && !(ops = calloc(graph->nnodes, sizeof(*ops))))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < graph->nnodes; i++) {
        struct fc_obj *node = lookup(graph->nodes[i], KIND_GNODE);
        ops[i] = (struct fc_gop){node->ntype, node->dev, node->handle, node->size, false};
        for (size_t k = 0; node->ntype == CU_GRAPH_NODE_TYPE_MEM_FREE && k < i; k++)
            if (ops[k].type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && ops[k].va == node->handle)
                ops[k].freed_inside = true;
    }
    if (rc == CUDA_SUCCESS)
        rc = obj_new(handle_take(), KIND_GEXEC, graph->dev, 0, NULL, &exec);
    if (rc == CUDA_SUCCESS) {
        exec->ops = ops;
        exec->nnodes = graph->nnodes;
        exec->gflags = flags;
        *phGraphExec = (CUgraphExec)(uintptr_t)exec->addr;
    } else {
        free(ops);
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                               unsigned long long flags)
{
    return instantiate(EP_cuGraphInstantiateWithFlags, phGraphExec, hGraph, flags);
}

/* No error node or log to report: instantiation fails only on bad handles. */
static CUresult fc_cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                         CUgraphNode *phErrorNode, char *logBuffer,
                                         size_t bufferSize)
{
    if (phErrorNode)
        *phErrorNode = NULL;
    if (logBuffer && bufferSize > 0)
        logBuffer[0] = '\0';
    return instantiate(EP_cuGraphInstantiate_v2, phGraphExec, hGraph, 0);
}

/* Under g.lock: a graph allocation that is live as a pointer goes. */
static void graph_mem_free(uint64_t va)
{
    struct fc_obj *p = lookup(va, KIND_PTR);
    if (p && p->gmem)
        obj_free(p);
}

static CUresult graph_launch(enum fc_ep ep, CUgraphExec hGraphExec, CUstream hStream)
{
    CUresult rc = enter(ep, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = stream_ctx(hStream, &c)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *exec = hGraphExec ? lookup((uint64_t)(uintptr_t)hGraphExec, KIND_GEXEC) : NULL;
    uint64_t need[FC_MAX_DEVICES] = {0}, grown[FC_MAX_DEVICES] = {0};
    for (size_t i = 0; exec && i < exec->nnodes; i++) {
        const struct fc_gop *op = &exec->ops[i];
        if (op->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
            continue;
        struct fc_obj *live = lookup(op->va, KIND_PTR);
        if (live && !(exec->gflags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
            rc = CUDA_ERROR_INVALID_VALUE; /* last launch's allocation still lives */
        if (op->size > FC_VA_LIMIT - need[op->dev])
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            need[op->dev] += op->size;
    }
    if (!exec)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_unlock(&g.lock);
        return rc;
    }
    /* Frees of other graphs' allocations, and auto-frees, come first. */
    for (size_t i = 0; i < exec->nnodes; i++) {
        const struct fc_gop *op = &exec->ops[i];
        bool own = false;
        for (size_t k = 0; op->type == CU_GRAPH_NODE_TYPE_MEM_FREE && k < exec->nnodes; k++)
            own |= exec->ops[k].type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && exec->ops[k].va == op->va;
        if ((op->type == CU_GRAPH_NODE_TYPE_MEM_FREE && !own) ||
            op->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
            graph_mem_free(op->va);
    }
    for (int d = 0; rc == CUDA_SUCCESS && d < g.ndev; d++) {
        struct fc_dev *dv = &g.dev[d];
        uint64_t peak = dv->gused + need[d];
        if (peak > dv->greserved && (rc = dev_take(d, peak - dv->greserved)) == CUDA_SUCCESS) {
            grown[d] = peak - dv->greserved;
            dv->greserved = peak;
        }
        if (dv->greserved > dv->greserved_high)
            dv->greserved_high = dv->greserved;
        if (peak > dv->gused_high)
            dv->gused_high = peak;
    }
    for (int d = 0; rc != CUDA_SUCCESS && d < g.ndev; d++) {
        g.dev[d].greserved -= grown[d];
        dev_give(d, grown[d]);
    }
    /* What the graph does not free itself lives on as a pointer. */
    for (size_t i = 0; rc == CUDA_SUCCESS && i < exec->nnodes; i++) {
        const struct fc_gop *op = &exec->ops[i];
        struct fc_obj *p;
        if (op->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC || op->freed_inside)
            continue;
        if ((rc = obj_new(op->va, KIND_PTR, op->dev, 0, c, &p)) != CUDA_SUCCESS)
            break;
        p->size = op->size;
        p->gmem = true;
        g.dev[op->dev].gused += op->size;
    }
    /* The kernel nodes run back to back on the device, as one piece of work
     * (size: a kernel node's blocks). */
    uint64_t kernels = 0, ns = 0;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < exec->nnodes; i++)
        if (exec->ops[i].type == CU_GRAPH_NODE_TYPE_KERNEL) {
            kernels++;
            ns += fc_tl_kernel_ns(&g.tl, exec->ops[i].size);
        }
    const char *uuid = g.dev[c->dev].uuid;
    pthread_mutex_unlock(&g.lock);
    if (rc == CUDA_SUCCESS)
        fc_tl_launch(&g.tl, uuid, kernels, ns);
    return rc;
}

static CUresult fc_cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(EP_cuGraphLaunch, hGraphExec, hStream);
}

static CUresult fc_cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(EP_cuGraphLaunch_ptsz, hGraphExec, hStream);
}

/* What the device's graph pool holds beyond what graph allocations use
 * goes back. */
static CUresult fc_cuDeviceGraphMemTrim(CUdevice device)
{
    CUresult rc = enter(EP_cuDeviceGraphMemTrim, true);
    if (rc != CUDA_SUCCESS || (rc = check_dev(device)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_dev *d = &g.dev[device];
    if (d->greserved > d->gused) {
        dev_give(device, d->greserved - d->gused);
        d->greserved = d->gused;
    }
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

static CUresult fc_cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                                void *value)
{
    CUresult rc = enter(EP_cuDeviceGetGraphMemAttribute, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = check_dev(device)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_dev *d = &g.dev[device];
    cuuint64_t v = 0;
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
        v = d->gused;
        break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
        v = d->gused_high;
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
        v = d->greserved;
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
        v = d->greserved_high;
        break;
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&g.lock);
    if (rc == CUDA_SUCCESS)
        memcpy(value, &v, sizeof(v));
    return rc;
}

static CUresult fc_cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    CUresult rc = enter(EP_cuGraphGetNodes, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *graph = hGraph ? lookup((uint64_t)(uintptr_t)hGraph, KIND_GRAPH) : NULL;
    if (!graph) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (size_t i = 0; nodes && i < *numNodes; i++)
            nodes[i] = i < graph->nnodes ? (CUgraphNode)(uintptr_t)graph->nodes[i] : NULL;
        *numNodes = graph->nnodes;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

/* Under g.lock. */
static struct fc_obj *node_get(CUgraphNode hNode)
{
    return hNode ? lookup((uint64_t)(uintptr_t)hNode, KIND_GNODE) : NULL;
}

static CUresult fc_cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    CUresult rc = enter(EP_cuGraphNodeGetType, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!type)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *node = node_get(hNode);
    if (node)
        *type = node->ntype;
    pthread_mutex_unlock(&g.lock);
    return node ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The pool properties a captured allocation gets: pinned device memory of
 * the pool's device, read-write for that device (the access list is the
 * node's, valid while the node is). */
static CUresult fc_cuGraphMemAllocNodeGetParams(CUgraphNode hNode,
                                                CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
    CUresult rc = enter(EP_cuGraphMemAllocNodeGetParams, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!params_out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *node = node_get(hNode);
    if (!node || node->ntype != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        memset(params_out, 0, sizeof(*params_out));
        params_out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        params_out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        params_out->poolProps.location.id = node->dev;
        params_out->accessDescs = &g.dev[node->dev].access;
        params_out->accessDescCount = 1;
        params_out->bytesize = node->size;
        params_out->dptr = node->handle;
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

static CUresult fc_cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out)
{
    CUresult rc = enter(EP_cuGraphMemFreeNodeGetParams, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dptr_out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *node = node_get(hNode);
    if (!node || node->ntype != CU_GRAPH_NODE_TYPE_MEM_FREE)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *dptr_out = node->handle;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

/* An executable graph's allocations outlive it (their pointers stay). */
static CUresult fc_cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    CUresult rc = enter(EP_cuGraphExecDestroy, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *exec = hGraphExec ? lookup((uint64_t)(uintptr_t)hGraphExec, KIND_GEXEC) : NULL;
    if (exec) {
        free(exec->ops);
        exec->ops = NULL;
        obj_free(exec);
    }
    pthread_mutex_unlock(&g.lock);
    return exec ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fc_cuGraphDestroy(CUgraph hGraph)
{
    CUresult rc = enter(EP_cuGraphDestroy, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *graph = hGraph ? lookup((uint64_t)(uintptr_t)hGraph, KIND_GRAPH) : NULL;
    bool capturing = false;
    /* A graph still being captured belongs to its stream. */
    for (size_t b = 0; graph && b < ((size_t)1 << g.bits); b++)
        for (struct fc_obj *x = g.buckets[b]; x; x = x->hnext)
            capturing |= x->kind == KIND_STREAM && x->capture == graph->addr;
    if (graph && !capturing)
        graph_free(graph);
    pthread_mutex_unlock(&g.lock);
    return graph && !capturing ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* --- launches and kernel nodes (stubs) --------------------------------------- */

/* A launch: on a capturing stream, a kernel node of the graph (its blocks
 * kept as the node's size); else, with FAKECUDA_TIMELINE, the device's time
 * for one kernel; else nothing (benches time the call itself). */
static CUresult launch(enum fc_ep ep, CUstream s, unsigned gx, unsigned gy, unsigned gz)
{
    CUresult rc = enter(ep, true);
    struct fc_ctx *c;
    if (rc != CUDA_SUCCESS || g.tl.f == NULL)
        return rc; /* without a timeline, the no-op of old: no lock, no lookup */
    if ((rc = stream_ctx(s, &c)) != CUDA_SUCCESS)
        return rc;
    uint64_t blocks = (uint64_t)gx * gy * gz;
    pthread_mutex_lock(&g.lock);
    struct fc_obj *graph = capture_of(s);
    if (graph)
        rc = graph_add_node(graph, CU_GRAPH_NODE_TYPE_KERNEL, c->dev, 0, blocks);
    const char *uuid = g.dev[c->dev].uuid;
    pthread_mutex_unlock(&g.lock);
    if (!graph)
        fc_tl_launch(&g.tl, uuid, 1, fc_tl_kernel_ns(&g.tl, blocks));
    return rc;
}

static CUresult fc_cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                  unsigned int gridDimZ, unsigned int blockDimX,
                                  unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream,
                                  void **kernelParams, void **extra)
{
    return launch(EP_cuLaunchKernel, hStream, gridDimX, gridDimY, gridDimZ);
}

static CUresult fc_cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                       unsigned int gridDimZ, unsigned int blockDimX,
                                       unsigned int blockDimY, unsigned int blockDimZ,
                                       unsigned int sharedMemBytes, CUstream hStream,
                                       void **kernelParams, void **extra)
{
    return launch(EP_cuLaunchKernel_ptsz, hStream, gridDimX, gridDimY, gridDimZ);
}

static CUresult launch_ex(enum fc_ep ep, const CUlaunchConfig *config)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(ep, config->hStream, config->gridDimX, config->gridDimY, config->gridDimZ);
}

static CUresult fc_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                    void **extra)
{
    return launch_ex(EP_cuLaunchKernelEx, config);
}

static CUresult fc_cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                         void **kernelParams, void **extra)
{
    return launch_ex(EP_cuLaunchKernelEx_ptsz, config);
}

static CUresult fc_cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                             unsigned int gridDimY, unsigned int gridDimZ,
                                             unsigned int blockDimX, unsigned int blockDimY,
                                             unsigned int blockDimZ, unsigned int sharedMemBytes,
                                             CUstream hStream, void **kernelParams)
{
    return launch(EP_cuLaunchCooperativeKernel, hStream, gridDimX, gridDimY, gridDimZ);
}

static CUresult fc_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                  unsigned int gridDimY, unsigned int gridDimZ,
                                                  unsigned int blockDimX, unsigned int blockDimY,
                                                  unsigned int blockDimZ,
                                                  unsigned int sharedMemBytes, CUstream hStream,
                                                  void **kernelParams)
{
    return launch(EP_cuLaunchCooperativeKernel_ptsz, hStream, gridDimX, gridDimY, gridDimZ);
}

/* The two ABIs answer with different node values (FAKECUDA_GRAPH_NODE_V1/V2). */
static CUresult graph_node(enum fc_ep ep, CUgraphNode *node, CUgraph graph, const void *params,
                           CUgraphNode value)
{
    CUresult rc = enter(ep, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!node || !graph || !params)
        return CUDA_ERROR_INVALID_VALUE;
    *node = value;
    return CUDA_SUCCESS;
}

static CUresult fc_cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                        const CUgraphNode *dependencies, size_t numDependencies,
                                        const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    return graph_node(EP_cuGraphAddKernelNode, phGraphNode, hGraph, nodeParams,
                      FAKECUDA_GRAPH_NODE_V1);
}

static CUresult fc_cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                           const CUgraphNode *dependencies, size_t numDependencies,
                                           const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
    return graph_node(EP_cuGraphAddKernelNode_v2, phGraphNode, hGraph, nodeParams,
                      FAKECUDA_GRAPH_NODE_V2);
}

/* --- cuGetProcAddress ----------------------------------------------------- */

/* One row per ABI of a base name: the version that introduced it, its code,
 * and its per-thread-default-stream variant where one exists. A request for
 * cudaVersion V gets the newest row with since <= V. */
struct fc_proc {
    const char *name;
    int since;
    void *fn;
    void *ptsz;
};

static CUresult fc_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags);
static CUresult fc_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus);

#define FC_FN(f) ((void *)fc_##f)

static const struct fc_proc procs[] = {
    {"cuInit", 2000, FC_FN(cuInit), NULL},
    {"cuDriverGetVersion", 2020, FC_FN(cuDriverGetVersion), NULL},
    {"cuGetErrorName", 6000, FC_FN(cuGetErrorName), NULL},
    {"cuGetErrorString", 6000, FC_FN(cuGetErrorString), NULL},
    {"cuGetProcAddress", 11030, FC_FN(cuGetProcAddress), NULL},
    {"cuGetProcAddress", 12000, FC_FN(cuGetProcAddress_v2), NULL},
    {"cuDeviceGet", 2000, FC_FN(cuDeviceGet), NULL},
    {"cuDeviceGetCount", 2000, FC_FN(cuDeviceGetCount), NULL},
    {"cuDeviceGetName", 2000, FC_FN(cuDeviceGetName), NULL},
    {"cuDeviceGetUuid", 9020, FC_FN(cuDeviceGetUuid), NULL},
    {"cuDeviceGetUuid", 11040, FC_FN(cuDeviceGetUuid_v2), NULL},
    {"cuDeviceTotalMem", 2000, FC_FN(cuDeviceTotalMem), NULL},
    {"cuDeviceTotalMem", 3020, FC_FN(cuDeviceTotalMem_v2), NULL},
    {"cuDeviceGetAttribute", 2000, FC_FN(cuDeviceGetAttribute), NULL},
    {"cuCtxCreate", 2000, FC_FN(cuCtxCreate), NULL},
    {"cuCtxCreate", 3020, FC_FN(cuCtxCreate_v2), NULL},
    {"cuCtxDestroy", 2000, FC_FN(cuCtxDestroy), NULL},
    {"cuCtxDestroy", 4000, FC_FN(cuCtxDestroy_v2), NULL},
    {"cuCtxGetCurrent", 4000, FC_FN(cuCtxGetCurrent), NULL},
    {"cuCtxSetCurrent", 4000, FC_FN(cuCtxSetCurrent), NULL},
    {"cuCtxGetDevice", 2000, FC_FN(cuCtxGetDevice), NULL},
    {"cuCtxSynchronize", 2000, FC_FN(cuCtxSynchronize), NULL},
    {"cuDevicePrimaryCtxRetain", 7000, FC_FN(cuDevicePrimaryCtxRetain), NULL},
    {"cuDevicePrimaryCtxGetState", 7000, FC_FN(cuDevicePrimaryCtxGetState), NULL},
    {"cuDevicePrimaryCtxRelease", 7000, FC_FN(cuDevicePrimaryCtxRelease), NULL},
    {"cuDevicePrimaryCtxRelease", 11000, FC_FN(cuDevicePrimaryCtxRelease_v2), NULL},
    {"cuDevicePrimaryCtxReset", 7000, FC_FN(cuDevicePrimaryCtxReset), NULL},
    {"cuDevicePrimaryCtxReset", 11000, FC_FN(cuDevicePrimaryCtxReset_v2), NULL},
    {"cuMemAlloc", 2000, FC_FN(cuMemAlloc), NULL},
    {"cuMemAlloc", 3020, FC_FN(cuMemAlloc_v2), NULL},
    {"cuMemFree", 2000, FC_FN(cuMemFree), NULL},
    {"cuMemFree", 3020, FC_FN(cuMemFree_v2), NULL},
    {"cuMemAllocPitch", 2000, FC_FN(cuMemAllocPitch), NULL},
    {"cuMemAllocPitch", 3020, FC_FN(cuMemAllocPitch_v2), NULL},
    {"cuMemAllocManaged", 6000, FC_FN(cuMemAllocManaged), NULL},
    {"cuMemGetInfo", 2000, FC_FN(cuMemGetInfo), NULL},
    {"cuMemGetInfo", 3020, FC_FN(cuMemGetInfo_v2), NULL},
    {"cuMemAllocAsync", 11020, FC_FN(cuMemAllocAsync), FC_FN(cuMemAllocAsync_ptsz)},
    {"cuMemFreeAsync", 11020, FC_FN(cuMemFreeAsync), FC_FN(cuMemFreeAsync_ptsz)},
    {"cuMemPoolCreate", 11020, FC_FN(cuMemPoolCreate), NULL},
    {"cuMemPoolDestroy", 11020, FC_FN(cuMemPoolDestroy), NULL},
    {"cuDeviceGetDefaultMemPool", 11020, FC_FN(cuDeviceGetDefaultMemPool), NULL},
    {"cuDeviceGetMemPool", 11020, FC_FN(cuDeviceGetMemPool), NULL},
    {"cuMemAllocFromPoolAsync", 11020, FC_FN(cuMemAllocFromPoolAsync),
     FC_FN(cuMemAllocFromPoolAsync_ptsz)},
    {"cuDeviceSetMemPool", 11020, FC_FN(cuDeviceSetMemPool), NULL},
    {"cuMemPoolTrimTo", 11020, FC_FN(cuMemPoolTrimTo), NULL},
    {"cuMemPoolSetAttribute", 11020, FC_FN(cuMemPoolSetAttribute), NULL},
    {"cuMemPoolGetAttribute", 11020, FC_FN(cuMemPoolGetAttribute), NULL},
    {"cuStreamGetCtx", 9020, FC_FN(cuStreamGetCtx), NULL},
    {"cuPointerGetAttribute", 4000, FC_FN(cuPointerGetAttribute), NULL},
    {"cuCtxPushCurrent", 2000, FC_FN(cuCtxPushCurrent), NULL},
    {"cuCtxPushCurrent", 4000, FC_FN(cuCtxPushCurrent_v2), NULL},
    {"cuCtxPopCurrent", 2000, FC_FN(cuCtxPopCurrent), NULL},
    {"cuCtxPopCurrent", 4000, FC_FN(cuCtxPopCurrent_v2), NULL},
    {"cuCtxSetLimit", 3010, FC_FN(cuCtxSetLimit), NULL},
    {"cuCtxGetLimit", 3010, FC_FN(cuCtxGetLimit), NULL},
    {"cuStreamBeginCapture", 10000, FC_FN(cuStreamBeginCapture), NULL},
    {"cuStreamBeginCapture", 10010, FC_FN(cuStreamBeginCapture_v2), NULL},
    {"cuStreamEndCapture", 10000, FC_FN(cuStreamEndCapture), NULL},
    {"cuStreamIsCapturing", 10000, FC_FN(cuStreamIsCapturing), NULL},
    {"cuGraphInstantiate", 11000, FC_FN(cuGraphInstantiate_v2), NULL},
    {"cuGraphInstantiateWithFlags", 11040, FC_FN(cuGraphInstantiateWithFlags), NULL},
    {"cuGraphLaunch", 10000, FC_FN(cuGraphLaunch), FC_FN(cuGraphLaunch_ptsz)},
    {"cuDeviceGraphMemTrim", 11040, FC_FN(cuDeviceGraphMemTrim), NULL},
    {"cuDeviceGetGraphMemAttribute", 11040, FC_FN(cuDeviceGetGraphMemAttribute), NULL},
    {"cuGraphGetNodes", 10000, FC_FN(cuGraphGetNodes), NULL},
    {"cuGraphNodeGetType", 10000, FC_FN(cuGraphNodeGetType), NULL},
    {"cuGraphMemAllocNodeGetParams", 11040, FC_FN(cuGraphMemAllocNodeGetParams), NULL},
    {"cuGraphMemFreeNodeGetParams", 11040, FC_FN(cuGraphMemFreeNodeGetParams), NULL},
    {"cuGraphExecDestroy", 10000, FC_FN(cuGraphExecDestroy), NULL},
    {"cuGraphDestroy", 10000, FC_FN(cuGraphDestroy), NULL},
    {"cuMemCreate", 10020, FC_FN(cuMemCreate), NULL},
    {"cuMemRelease", 10020, FC_FN(cuMemRelease), NULL},
    {"cuMemMap", 10020, FC_FN(cuMemMap), NULL},
    {"cuMemUnmap", 10020, FC_FN(cuMemUnmap), NULL},
    {"cuMemAddressReserve", 10020, FC_FN(cuMemAddressReserve), NULL},
    {"cuMemAddressFree", 10020, FC_FN(cuMemAddressFree), NULL},
    {"cuMemGetAllocationGranularity", 10020, FC_FN(cuMemGetAllocationGranularity), NULL},
    {"cuMemRetainAllocationHandle", 11000, FC_FN(cuMemRetainAllocationHandle), NULL},
    {"cuMemExportToShareableHandle", 10020, FC_FN(cuMemExportToShareableHandle), NULL},
    {"cuMemImportFromShareableHandle", 10020, FC_FN(cuMemImportFromShareableHandle), NULL},
    {"cuMemSetAccess", 10020, FC_FN(cuMemSetAccess), NULL},
    {"cuArrayCreate", 2000, FC_FN(cuArrayCreate), NULL},
    {"cuArrayCreate", 3020, FC_FN(cuArrayCreate_v2), NULL},
    {"cuArray3DCreate", 2000, FC_FN(cuArray3DCreate), NULL},
    {"cuArray3DCreate", 3020, FC_FN(cuArray3DCreate_v2), NULL},
    {"cuArrayDestroy", 2000, FC_FN(cuArrayDestroy), NULL},
    {"cuMipmappedArrayCreate", 5000, FC_FN(cuMipmappedArrayCreate), NULL},
    {"cuMipmappedArrayDestroy", 5000, FC_FN(cuMipmappedArrayDestroy), NULL},
    {"cuStreamCreate", 2000, FC_FN(cuStreamCreate), NULL},
    {"cuStreamDestroy", 2000, FC_FN(cuStreamDestroy), NULL},
    {"cuStreamDestroy", 4000, FC_FN(cuStreamDestroy_v2), NULL},
    {"cuStreamSynchronize", 2000, FC_FN(cuStreamSynchronize), FC_FN(cuStreamSynchronize_ptsz)},
    {"cuLaunchKernel", 4000, FC_FN(cuLaunchKernel), FC_FN(cuLaunchKernel_ptsz)},
    {"cuLaunchKernelEx", 11060, FC_FN(cuLaunchKernelEx), FC_FN(cuLaunchKernelEx_ptsz)},
    {"cuLaunchCooperativeKernel", 9000, FC_FN(cuLaunchCooperativeKernel),
     FC_FN(cuLaunchCooperativeKernel_ptsz)},
    {"cuGraphAddKernelNode", 10000, FC_FN(cuGraphAddKernelNode), NULL},
    {"cuGraphAddKernelNode", 12000, FC_FN(cuGraphAddKernelNode_v2), NULL},
};

/* FAKECUDA_PROCADDR_DISTINCT: a real driver's cuGetProcAddress may hand out
 * internal entry points rather than its exported symbols. Each export gets a
 * twin, fcd_<name>, a stub that jumps to the same code: same behaviour, an
 * address that no dlsym returns (and no dynamic symbol names). */
#ifdef FC_HAVE_DISTINCT
#if defined(__x86_64__)
#define FC_JUMP "jmp"
#else
#define FC_JUMP "b"
#endif
#define FC_DISTINCT_STUB(sym)                                                               \
    __asm__(".text\n.p2align 4\n.globl fcd_" #sym "\n.hidden fcd_" #sym "\n.type fcd_" #sym \
            ",%function\nfcd_" #sym ":\n\t" FC_JUMP " fc_" #sym "\n.size fcd_" #sym         \
            ", .-fcd_" #sym "\n");                                                          \
    extern char fcd_##sym[] __attribute__((visibility("hidden")));
FC_ENTRY_POINTS(FC_DISTINCT_STUB)
#undef FC_DISTINCT_STUB

static void *distinct_of(void *fn)
{
#define FC_DISTINCT_CASE(sym) \
    if (fn == FC_FN(sym))     \
        return (void *)fcd_##sym;
    FC_ENTRY_POINTS(FC_DISTINCT_CASE)
#undef FC_DISTINCT_CASE
    return fn;
}
#else
static void *distinct_of(void *fn)
{
    return fn;
}
#endif

static CUresult proc_address(enum fc_ep ep, const char *symbol, void **pfn, int cudaVersion,
                             cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    CUresult rc = enter(ep, false);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!symbol || !pfn || flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fc_proc *best = NULL;
    bool named = false;
    for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
        if (strcmp(procs[i].name, symbol) != 0)
            continue;
        named = true;
        if (procs[i].since <= cudaVersion && (!best || procs[i].since > best->since))
            best = &procs[i];
    }
    *pfn = NULL;
    if (!best) {
        if (status)
            *status = named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM && best->ptsz ? best->ptsz
                                                                                : best->fn;
    if (g.distinct)
        *pfn = distinct_of(*pfn);
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

static CUresult fc_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags)
{
    return proc_address(EP_cuGetProcAddress, symbol, pfn, cudaVersion, flags, NULL);
}

static CUresult fc_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus)
{
    return proc_address(EP_cuGetProcAddress_v2, symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* --- exports --------------------------------------------------------------- */

#define FC_EXPORT(sym) \
    extern __typeof__(fc_##sym) sym __attribute__((alias("fc_" #sym), visibility("default")));
FC_ENTRY_POINTS(FC_EXPORT)
#undef FC_EXPORT
