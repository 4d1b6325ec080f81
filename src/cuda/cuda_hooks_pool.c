/* cuda_hooks_pool.c -- stream-ordered allocation, memory pools and graph
 * memory (docs/isolation.md, "Pools and graphs").
 *
 * A pool keeps the memory its allocations are freed into, up to its release
 * threshold -- and applications set that threshold to UINT64_MAX (RMM-style
 * pools, cudarc users): the memory stays on the GPU, used or not (D3). So a
 * pool is charged what the driver says it has RESERVED, not what is handed
 * out: an allocation is charged up front (rounded up to the 2 MiB the
 * driver's pools grow by), then the charge is set to the pool's reserved
 * bytes once the driver answered; a free into the pool changes nothing. A
 * pool that shrank (synchronisation, trim) is seen at the next allocation
 * from it, at cuMemGetInfo, and before any refusal, which also asks the
 * driver to trim the device's pools and graph memory first.
 *
 * The GPU charged is the one whose memory is used (D4): a pool's device
 * (from its creation, or the device whose default or current pool it is),
 * the device of the stream's context for cuMemAllocAsync -- not the
 * calling thread's current context, which may be another GPU or none.
 *
 * Graph allocation nodes (stream capture or explicit) take memory when the
 * graph is launched, from the device's graph memory pool, which keeps it
 * across launches until cuDeviceGraphMemTrim. Captured allocations are not
 * charged; a launch is charged up front what the graph's allocation nodes
 * need beyond what the graph pool already holds unused, and the graph pool
 * is then charged what the driver says it has reserved.
 *
 * All of it under one process-wide lock held across the driver's call:
 * stream-ordered calls only enqueue, so the lock is held briefly. */
#include "cuda_glibc.h"
#include "cuda_account.h"
#include "cuda_compute.h"
#include "cuda_real.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define POOL_GROWTH (2ull << 20) /* the driver's pools grow in 2 MiB pages */
#define MAX_POOLS 256
#define MAX_EXECS 256
#define EXEC_DEVICES 4

struct pool_rec {
    CUmemoryPool pool;
    CUdevice dev;
    int64_t charged; /* bytes of dev's region held for this pool */
    bool gone;       /* destroyed: its charge is frozen */
};

/* An instantiated graph: what its allocation nodes need per device. */
struct exec_rec {
    CUgraphExec exec;
    struct {
        CUdevice dev;
        int64_t bytes;
    } need[EXEC_DEVICES];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool_rec pools[MAX_POOLS];
static unsigned n_pools;
static CUmemoryPool current_pool[CUDACFG_MAX_DEVICES]; /* cuDeviceGetMemPool */
static bool defaults_known;
static int64_t graph_charged[CUDACFG_MAX_DEVICES];
static struct exec_rec execs[MAX_EXECS];
static unsigned n_execs;
/* Set once a pool or graph charge was made; read without the lock. */
static bool anything_charged;

static int64_t round_growth(size_t bytes)
{
    if (bytes > (size_t)INT64_MAX - POOL_GROWTH)
        return INT64_MAX;
    return (int64_t)((bytes + POOL_GROWTH - 1) & ~(POOL_GROWTH - 1));
}

/* ---- the pool table (under lock) ------------------------------------------- */

static struct pool_rec *pool_rec_find(CUmemoryPool p)
{
    for (unsigned i = 0; i < n_pools; i++)
        if (pools[i].pool == p && !pools[i].gone)
            return &pools[i];
    return NULL;
}

static struct pool_rec *pool_note(CUmemoryPool p, CUdevice dev)
{
    struct pool_rec *r = pool_rec_find(p);
    if (r != NULL || p == NULL || dev < 0 || dev >= CUDACFG_MAX_DEVICES)
        return r;
    if (n_pools == MAX_POOLS) {
        /* Reuse a destroyed pool's place whose charge is settled. */
        for (unsigned i = 0; i < n_pools; i++)
            if (pools[i].gone && pools[i].charged == 0) {
                pools[i] = (struct pool_rec){.pool = p, .dev = dev};
                return &pools[i];
            }
        return NULL;
    }
    pools[n_pools] = (struct pool_rec){.pool = p, .dev = dev};
    return &pools[n_pools++];
}

/* A pool we did not see made: a device's default pool, found by asking
 * each device for its own once. */
static struct pool_rec *pool_lookup(CUmemoryPool p)
{
    struct pool_rec *r = pool_rec_find(p);
    if (r != NULL || defaults_known || real.cuDeviceGetDefaultMemPool == NULL)
        return r;
    int n = 0;
    if (real.cuDeviceGetCount == NULL || real.cuDeviceGetCount(&n) != CUDA_SUCCESS)
        return NULL;
    for (int d = 0; d < n && d < CUDACFG_MAX_DEVICES; d++) {
        CUmemoryPool dp;
        if (real.cuDeviceGetDefaultMemPool(&dp, d) == CUDA_SUCCESS)
            (void)pool_note(dp, d);
    }
    defaults_known = true;
    return pool_rec_find(p);
}

/* The pool cuMemAllocAsync uses on dev: the device's current pool. */
static struct pool_rec *device_pool(CUdevice dev)
{
    if (dev < 0 || dev >= CUDACFG_MAX_DEVICES)
        return NULL;
    if (current_pool[dev] == NULL) {
        CUmemoryPool p;
        if (real.cuDeviceGetMemPool == NULL || real.cuDeviceGetMemPool(&p, dev) != CUDA_SUCCESS)
            return NULL;
        current_pool[dev] = p;
    }
    return pool_note(current_pool[dev], dev);
}

/* ---- charges brought to what the driver holds -------------------------------- */

/* Sets *charged to `target` bytes on dev. Up may be refused (false: the
 * charge stays); down always succeeds. */
static bool charge_to(CUdevice dev, int64_t *charged, int64_t target)
{
    struct cudareg *r = cuda_device_region(dev);
    if (r == NULL || target < 0)
        return true;
    if (target > *charged) {
        if (cudareg_reserve(r, target - *charged) != 0)
            return false;
        __atomic_store_n(&anything_charged, true, __ATOMIC_RELAXED);
    } else if (target < *charged) {
        cudareg_release(r, *charged - target);
    }
    *charged = target;
    return true;
}

static bool pool_attr(CUmemoryPool p, int attr, int64_t *out)
{
    cuuint64_t v = 0;
    if (real.cuMemPoolGetAttribute == NULL || real.cuMemPoolGetAttribute(p, attr, &v) != 0 ||
        v > (cuuint64_t)INT64_MAX)
        return false;
    *out = (int64_t)v;
    return true;
}

/* A pool's charge set to its reserved bytes; false when the driver cannot
 * say or the growth cannot be charged (the charge is unchanged then). */
static bool pool_settle(struct pool_rec *r)
{
    int64_t reserved;
    if (r->gone || !pool_attr(r->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved))
        return false;
    return charge_to(r->dev, &r->charged, reserved);
}

static bool graph_reserved(CUdevice dev, int attr, int64_t *out)
{
    cuuint64_t v = 0;
    if (real.cuDeviceGetGraphMemAttribute == NULL ||
        real.cuDeviceGetGraphMemAttribute(dev, attr, &v) != 0 || v > (cuuint64_t)INT64_MAX)
        return false;
    *out = (int64_t)v;
    return true;
}

static void graph_settle(CUdevice dev)
{
    int64_t reserved;
    if (graph_reserved(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved))
        (void)charge_to(dev, &graph_charged[dev], reserved);
}

/* Under lock. */
static void settle_device(CUdevice dev, bool trim)
{
    if (dev < 0 || dev >= CUDACFG_MAX_DEVICES || cuda_device_region(dev) == NULL)
        return;
    for (unsigned i = 0; i < n_pools; i++) {
        if (pools[i].dev != dev || pools[i].gone)
            continue;
        if (trim && real.cuMemPoolTrimTo != NULL)
            (void)real.cuMemPoolTrimTo(pools[i].pool, 0);
        (void)pool_settle(&pools[i]);
    }
    if (trim && real.cuDeviceGraphMemTrim != NULL)
        (void)real.cuDeviceGraphMemTrim(dev);
    graph_settle(dev);
}

void cuda_pools_settle(CUdevice dev, bool trim)
{
    /* Nothing to ask the driver in a process that made no stream-ordered
     * allocation and launched no graph: cuMemGetInfo stays a table read. */
    if (cuda_cfg.state != CUDACFG_ON || !__atomic_load_n(&anything_charged, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&lock);
    settle_device(dev, trim);
    pthread_mutex_unlock(&lock);
}

/* Charges bytes on dev, making room first if it would be refused: the
 * device's pools and graph memory brought down to what they hold, then
 * trimmed. Under lock. */
static CUresult charge_roomy(CUdevice dev, int64_t bytes)
{
    struct cudareg *r = cuda_device_region(dev);
    for (int attempt = 0; attempt < 3; attempt++) {
        switch (cudareg_reserve(r, bytes)) {
        case 0:
            return CUDA_SUCCESS;
        case 1:
            break;
        default:
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (attempt < 2)
            settle_device(dev, attempt == 1);
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* ---- stream-ordered allocation -------------------------------------------------- */

static bool capturing(CUstream s)
{
    int status = CU_STREAM_CAPTURE_STATUS_NONE;
    return real.cuStreamIsCapturing != NULL && real.cuStreamIsCapturing(s, &status) == 0 &&
           status != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The device whose context owns stream s: the current one for the special
 * handles, else the stream's own context's. */
static CUdevice stream_device(CUstream s)
{
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return cuda_current_device(NULL);
    CUcontext ctx = NULL;
    if (real.cuStreamGetCtx == NULL || real.cuStreamGetCtx(s, &ctx) != CUDA_SUCCESS)
        return cuda_current_device(NULL);
    return cuda_context_device(ctx);
}

typedef CUresult (*async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*free_fn)(CUdeviceptr, CUstream);

/* One stream-ordered allocation of bytes from the pool rec on its device:
 * charged up front, then to what the pool reserved. A driver that cannot
 * tell a pool's reserved bytes gets per-allocation charges instead, given
 * back at the free (the ledger). Under lock. */
static CUresult pool_alloc(struct pool_rec *rec, CUdeviceptr *dptr, size_t bytes, CUstream s,
                           async_fn afn, pool_fn pfn, free_fn ffn)
{
    CUdevice dev = rec->dev;
    /* The pool's growth in whole pages first; at the very edge of the limit
     * the exact size, and what the pool really took is checked after. */
    int64_t pre = round_growth(bytes);
    CUresult rc = charge_roomy(dev, pre);
    if (rc != CUDA_SUCCESS && pre > (int64_t)bytes) {
        pre = (int64_t)bytes;
        rc = charge_roomy(dev, pre);
    }
    if (rc != CUDA_SUCCESS)
        return rc;
    rec->charged += pre;
    __atomic_store_n(&anything_charged, true, __ATOMIC_RELAXED);
    rc = afn != NULL ? afn(dptr, bytes, s) : pfn(dptr, bytes, rec->pool, s);
    struct cudareg *r = cuda_device_region(dev);
    if (rc != CUDA_SUCCESS) {
        rec->charged -= pre;
        cudareg_release(r, pre);
        return rc;
    }
    int64_t reserved;
    if (pool_attr(rec->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved)) {
        if (charge_to(dev, &rec->charged, reserved))
            return CUDA_SUCCESS;
        /* The pool grew past what was charged and the rest does not fit:
         * the allocation is undone, never kept over the limit. */
        (void)ffn(*dptr, s);
        if (real.cuMemPoolTrimTo != NULL)
            (void)real.cuMemPoolTrimTo(rec->pool, 0);
        (void)pool_settle(rec);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* No pool figures: the allocation itself is charged, given back at its
     * free, as for cuMemAlloc. */
    rec->charged -= pre;
    cudareg_release(r, pre - (int64_t)bytes);
    struct cudaledger_entry e = {
        .handle = *dptr, .bytes = (int64_t)bytes, .device = dev, .kind = LEDGER_POINTER};
    if (cuda_record(r, &e) != 0) {
        (void)ffn(*dptr, s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* What every stream-ordered allocation shares: pass-through without a limit
 * and for captured allocations (the graph takes the memory at launch);
 * refused while a limit cannot be enforced. */
static CUresult stream_alloc(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s,
                             async_fn afn, pool_fn pfn, free_fn ffn)
{
#define PASS() (afn != NULL ? afn(dptr, bytes, s) : pfn(dptr, bytes, pool, s))
    if (cuda_cfg.state == CUDACFG_OFF || dptr == NULL || capturing(s))
        return PASS();
    if (cuda_cfg.state == CUDACFG_BROKEN)
        return cuda_refuse_broken();
    pthread_mutex_lock(&lock);
    struct pool_rec *rec;
    if (afn != NULL) {
        rec = device_pool(stream_device(s));
    } else {
        rec = pool_lookup(pool);
        if (rec == NULL) /* an unknown pool: the stream's device is the best guess */
            rec = pool_note(pool, stream_device(s));
    }
    CUresult rc;
    int st = rec != NULL ? cuda_device_state(rec->dev) : DEV_UNKNOWN;
    if (st == DEV_LIMITED)
        rc = pool_alloc(rec, dptr, bytes, s, afn, pfn, ffn);
    else if (st == DEV_FAILED)
        rc = CUDA_ERROR_NOT_PERMITTED;
    else
        rc = PASS();
    pthread_mutex_unlock(&lock);
    return rc;
#undef PASS
}

CUDA_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    NEED_ALLOC(cuMemAllocAsync);
    return stream_alloc(dptr, bytesize, NULL, s, real.cuMemAllocAsync, NULL, real.cuMemFreeAsync);
}

CUDA_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    NEED_ALLOC(cuMemAllocAsync_ptsz);
    return stream_alloc(dptr, bytesize, NULL, s, real.cuMemAllocAsync_ptsz, NULL,
                        real.cuMemFreeAsync_ptsz != NULL ? real.cuMemFreeAsync_ptsz
                                                         : real.cuMemFreeAsync);
}

CUDA_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream s)
{
    NEED_ALLOC(cuMemAllocFromPoolAsync);
    return stream_alloc(dptr, bytesize, pool, s, NULL, real.cuMemAllocFromPoolAsync,
                        real.cuMemFreeAsync);
}

CUDA_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                  CUmemoryPool pool, CUstream s)
{
    NEED_ALLOC(cuMemAllocFromPoolAsync_ptsz);
    return stream_alloc(dptr, bytesize, pool, s, NULL, real.cuMemAllocFromPoolAsync_ptsz,
                        real.cuMemFreeAsync_ptsz != NULL ? real.cuMemFreeAsync_ptsz
                                                         : real.cuMemFreeAsync);
}

/* A free into a pool keeps the memory in the pool (still charged); only a
 * pointer charged by itself (cuMemAlloc, or a driver without pool figures)
 * is given back. */
CUDA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    NEED(cuMemFreeAsync);
    FREE_TRACKED(LEDGER_POINTER, dptr, real.cuMemFreeAsync(dptr, s));
}

CUDA_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    NEED(cuMemFreeAsync_ptsz);
    FREE_TRACKED(LEDGER_POINTER, dptr, real.cuMemFreeAsync_ptsz(dptr, s));
}

/* ---- pools ----------------------------------------------------------------------- */

CUDA_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    NEED(cuMemPoolCreate);
    CUresult rc = real.cuMemPoolCreate(pool, props);
    if (rc == CUDA_SUCCESS && pool != NULL && props != NULL &&
        props->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        pthread_mutex_lock(&lock);
        (void)pool_note(*pool, props->location.id);
        pthread_mutex_unlock(&lock);
    }
    return rc;
}

/* A destroyed pool's memory goes once its last allocation is freed, which
 * can no longer be asked: an empty pool gives its charge back now, one
 * with allocations outstanding keeps it until the process exits. */
CUDA_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    NEED(cuMemPoolDestroy);
    pthread_mutex_lock(&lock);
    struct pool_rec *rec = pool_rec_find(pool);
    int64_t used = -1;
    if (rec != NULL && !pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used))
        used = -1;
    CUresult rc = real.cuMemPoolDestroy(pool);
    if (rc == CUDA_SUCCESS && rec != NULL) {
        if (used == 0)
            (void)charge_to(rec->dev, &rec->charged, 0);
        rec->gone = true;
        for (int d = 0; d < CUDACFG_MAX_DEVICES; d++)
            if (current_pool[d] == pool)
                current_pool[d] = NULL;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUDA_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    NEED(cuMemPoolTrimTo);
    pthread_mutex_lock(&lock);
    CUresult rc = real.cuMemPoolTrimTo(pool, keep);
    struct pool_rec *rec = pool_rec_find(pool);
    if (rc == CUDA_SUCCESS && rec != NULL)
        (void)pool_settle(rec);
    pthread_mutex_unlock(&lock);
    return rc;
}

CUDA_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    NEED(cuDeviceGetDefaultMemPool);
    CUresult rc = real.cuDeviceGetDefaultMemPool(pool, dev);
    if (rc == CUDA_SUCCESS && pool != NULL) {
        pthread_mutex_lock(&lock);
        (void)pool_note(*pool, dev);
        pthread_mutex_unlock(&lock);
    }
    return rc;
}

CUDA_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    NEED(cuDeviceGetMemPool);
    CUresult rc = real.cuDeviceGetMemPool(pool, dev);
    if (rc == CUDA_SUCCESS && pool != NULL && dev >= 0 && dev < CUDACFG_MAX_DEVICES) {
        pthread_mutex_lock(&lock);
        current_pool[dev] = *pool;
        (void)pool_note(*pool, dev);
        pthread_mutex_unlock(&lock);
    }
    return rc;
}

/* Another device's pool may be made a device's current pool: it keeps its
 * own device (its memory's). */
CUDA_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    NEED(cuDeviceSetMemPool);
    pthread_mutex_lock(&lock);
    CUresult rc = real.cuDeviceSetMemPool(dev, pool);
    if (rc == CUDA_SUCCESS && dev >= 0 && dev < CUDACFG_MAX_DEVICES) {
        if (pool_lookup(pool) == NULL)
            (void)pool_note(pool, dev);
        current_pool[dev] = pool;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- graph memory ---------------------------------------------------------------- */

/* Adds what the graph's allocation nodes ask for, per device. */
static void exec_needs(struct exec_rec *x, CUgraph g)
{
    size_t n = 0;
    if (real.cuGraphGetNodes == NULL || real.cuGraphNodeGetType == NULL ||
        real.cuGraphMemAllocNodeGetParams == NULL || real.cuGraphGetNodes(g, NULL, &n) != 0 ||
        n == 0 || n > 65536)
        return;
    CUgraphNode nodes[n];
    if (real.cuGraphGetNodes(g, nodes, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        int type = -1;
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        if (real.cuGraphNodeGetType(nodes[i], &type) != 0 || type != CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
            real.cuGraphMemAllocNodeGetParams(nodes[i], &p) != 0)
            continue;
        CUmemLocation loc;
        memcpy(&loc, p.poolProps + 8, sizeof loc); /* after allocType, handleTypes */
        for (int k = 0; k < EXEC_DEVICES; k++) {
            if (x->need[k].bytes == 0 || x->need[k].dev == loc.id) {
                x->need[k].dev = loc.id;
                x->need[k].bytes += round_growth(p.bytesize);
                break;
            }
        }
    }
}

static struct exec_rec *exec_find(CUgraphExec e)
{
    for (unsigned i = 0; i < n_execs; i++)
        if (execs[i].exec == e)
            return &execs[i];
    return NULL;
}

CUDA_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g,
                                                 unsigned long long flags)
{
    NEED(cuGraphInstantiateWithFlags);
    CUresult rc = real.cuGraphInstantiateWithFlags(exec, g, flags);
    if (rc != CUDA_SUCCESS || exec == NULL || cuda_cfg.state != CUDACFG_ON)
        return rc;
    struct exec_rec x = {.exec = *exec};
    exec_needs(&x, g);
    if (x.need[0].bytes == 0)
        return rc;
    pthread_mutex_lock(&lock);
    struct exec_rec *slot = exec_find(*exec);
    if (slot == NULL && n_execs < MAX_EXECS)
        slot = &execs[n_execs++];
    if (slot != NULL)
        *slot = x;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* A launch takes its allocations from the graph pool: what they need beyond
 * what the pool holds unused is charged first (a refusal, after trimming,
 * is the launch's CUDA_ERROR_OUT_OF_MEMORY and nothing runs), then the
 * graph pool is charged what the driver says it reserved. */
static CUresult graph_launch(CUresult (*fn)(CUgraphExec, CUstream), CUgraphExec exec, CUstream s)
{
    if (cuda_cfg.state != CUDACFG_ON)
        return fn(exec, s);
    pthread_mutex_lock(&lock);
    struct exec_rec *x = exec_find(exec);
    struct exec_rec need = x != NULL ? *x : (struct exec_rec){.exec = exec};
    CUresult rc = CUDA_SUCCESS;
    for (int k = 0; k < EXEC_DEVICES && need.need[k].bytes > 0; k++) {
        CUdevice dev = need.need[k].dev;
        if (cuda_device_state(dev) != DEV_LIMITED)
            continue;
        int64_t reserved = 0, used = 0, spare = 0;
        graph_settle(dev);
        if (graph_reserved(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) &&
            graph_reserved(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used) && reserved > used)
            spare = reserved - used;
        int64_t more = need.need[k].bytes - spare;
        if (more > 0 && (rc = charge_roomy(dev, more)) != CUDA_SUCCESS)
            break;
        graph_charged[dev] += more > 0 ? more : 0;
        __atomic_store_n(&anything_charged, true, __ATOMIC_RELAXED);
    }
    if (rc == CUDA_SUCCESS)
        rc = fn(exec, s);
    /* Launched or not, the graph pools are charged what they hold now. */
    for (int k = 0; k < EXEC_DEVICES && need.need[k].bytes > 0; k++)
        if (cuda_device_state(need.need[k].dev) == DEV_LIMITED)
            graph_settle(need.need[k].dev);
    if (x == NULL) { /* a graph instantiated where we did not see it */
        CUdevice dev = stream_device(s);
        if (cuda_device_state(dev) == DEV_LIMITED)
            graph_settle(dev);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUDA_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    NEED(cuGraphLaunch);
    COMPUTE_GATE(s);
    return graph_launch(real.cuGraphLaunch, exec, s);
}

CUDA_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s)
{
    NEED(cuGraphLaunch_ptsz);
    COMPUTE_GATE(s);
    return graph_launch(real.cuGraphLaunch_ptsz, exec, s);
}

CUDA_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    NEED(cuGraphExecDestroy);
    CUresult rc = real.cuGraphExecDestroy(exec);
    if (rc != CUDA_SUCCESS || cuda_cfg.state != CUDACFG_ON)
        return rc;
    pthread_mutex_lock(&lock);
    struct exec_rec *x = exec_find(exec);
    if (x != NULL) {
        for (int k = 0; k < EXEC_DEVICES && x->need[k].bytes > 0; k++)
            if (cuda_device_state(x->need[k].dev) == DEV_LIMITED)
                graph_settle(x->need[k].dev);
        *x = execs[--n_execs];
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUDA_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    NEED(cuDeviceGraphMemTrim);
    CUresult rc = real.cuDeviceGraphMemTrim(dev);
    if (rc == CUDA_SUCCESS && cuda_cfg.state == CUDACFG_ON &&
        cuda_device_state(dev) == DEV_LIMITED) {
        pthread_mutex_lock(&lock);
        graph_settle(dev);
        pthread_mutex_unlock(&lock);
    }
    return rc;
}

/* ---- process life ---------------------------------------------------------------- */

/* The lock is held across driver calls: a fork in the middle must not
 * leave it locked in the child. The child owns none of its parent's pools
 * (they are the parent's memory): it starts with nothing charged. */
static void before_fork(void)
{
    pthread_mutex_lock(&lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

static void after_fork_child(void)
{
    memset(pools, 0, sizeof pools);
    n_pools = 0;
    memset(current_pool, 0, sizeof current_pool);
    defaults_known = false;
    memset(graph_charged, 0, sizeof graph_charged);
    n_execs = 0;
    anything_charged = false;
    pthread_mutex_unlock(&lock);
}

/* After cuda_account.c's constructor (101) has read the limits. */
__attribute__((constructor(102))) static void cuda_hooks_pool_load(void)
{
    if (cuda_hooks_active())
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
