/* cuda_hooks_nvml.c -- NVML's memory figures on a limited GPU: nvidia-smi
 * and frameworks that size their pools from NVML see the container's share
 * and its use (docs/isolation.md, "The reporting side"). */
#include "cuda_glibc.h"
#include <stdlib.h>
#include <string.h>
#include "cuda_account.h"
#include "cuda_hooks.h"
#include "cuda_pidmap.h"
#include "cuda_real.h"

#define NVML_ERROR_UNKNOWN 999

static void nvml_view(struct cudareg *r, unsigned long long *total, unsigned long long *free_b,
                      unsigned long long *used)
{
    int64_t limit = cudareg_limit(r), u = cudareg_usage(r);
    *total = (unsigned long long)limit;
    *used = (unsigned long long)(u < limit ? u : limit);
    *free_b = *total - *used;
}

CUDA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m)
{
    if (!cuda_nvml_ready() || real.nvmlDeviceGetMemoryInfo == NULL)
        return NVML_ERROR_UNKNOWN; /* no real NVML behind us */
    nvmlReturn_t rc = real.nvmlDeviceGetMemoryInfo(device, m);
    if (rc != NVML_SUCCESS || m == NULL)
        return rc;
    bool refuse;
    struct cudareg *r = cuda_nvml_region(device, m->total, &refuse);
    if (refuse)
        return NVML_ERROR_NO_PERMISSION;
    if (r != NULL)
        nvml_view(r, &m->total, &m->free, &m->used);
    return rc;
}

CUDA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m)
{
    if (!cuda_nvml_ready() || real.nvmlDeviceGetMemoryInfo_v2 == NULL)
        return NVML_ERROR_UNKNOWN;
    nvmlReturn_t rc = real.nvmlDeviceGetMemoryInfo_v2(device, m);
    if (rc != NVML_SUCCESS || m == NULL)
        return rc;
    bool refuse;
    struct cudareg *r = cuda_nvml_region(device, m->total, &refuse);
    if (refuse)
        return NVML_ERROR_NO_PERMISSION;
    if (r != NULL) {
        nvml_view(r, &m->total, &m->free, &m->used);
        m->reserved = 0; /* the driver's reservation is outside the share */
    }
    return rc;
}

/* The container's own processes on a limited GPU (docs/isolation.md, "What
 * nvidia-smi shows"). The driver lists host pids, which a container cannot
 * see and which name its neighbours too; the region knows each of this
 * container's processes by its pid here and what it holds. So the list is
 * the region's live slots of this pid namespace, pids as the container sees
 * them, memory as the library charged it. Same sizing protocol as the
 * driver: room for fewer than there are = INSUFFICIENT_SIZE and the count. */
#define OWN_MAX 1024 /* CUDAREG_SLOTS: every slot of a region at most */

/* pass: where the driver's entry point will be, read once NVML is loaded
 * (the first NVML call of a process is what loads it). */
static nvmlReturn_t own_processes(nvmlDevice_t device, unsigned *count, nvmlProcessInfo_t *infos,
                                  nvmlReturn_t (*const *pass_slot)(nvmlDevice_t, unsigned *,
                                                                   nvmlProcessInfo_t *))
{
    if (!cuda_nvml_ready() || *pass_slot == NULL)
        return NVML_ERROR_UNKNOWN;
    nvmlReturn_t (*pass)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *) = *pass_slot;
    nvmlMemory_t m;
    if (real.nvmlDeviceGetMemoryInfo == NULL || real.nvmlDeviceGetMemoryInfo(device, &m) != 0)
        return pass(device, count, infos); /* cannot size the share: as the driver says */
    bool refuse;
    struct cudareg *r = cuda_nvml_region(device, m.total, &refuse);
    if (refuse)
        return NVML_ERROR_NO_PERMISSION;
    if (r == NULL)
        return pass(device, count, infos); /* no limit on this GPU: the driver's list */
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* On the heap: 16 KiB is too much for TLS in a preloaded library and
     * for the stack of an application thread we know nothing of. */
    struct cudareg_slot_view *slots = malloc(OWN_MAX * sizeof *slots);
    if (slots == NULL)
        return NVML_ERROR_UNKNOWN;
    size_t n = cudareg_own_processes(r, slots, OWN_MAX);
    if (n > OWN_MAX)
        n = OWN_MAX;
    unsigned room = *count;
    *count = (unsigned)n;
    nvmlReturn_t rc = NVML_SUCCESS;
    if (room < n)
        rc = NVML_ERROR_INSUFFICIENT_SIZE;
    else if (n > 0 && infos == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    for (size_t i = 0; rc == NVML_SUCCESS && i < n; i++)
        infos[i] = (nvmlProcessInfo_t){(unsigned)slots[i].pid, (unsigned long long)slots[i].used,
                                       0xFFFFFFFFu, 0xFFFFFFFFu};
    free(slots);
    return rc;
}

CUDA_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                 unsigned *count,
                                                                 nvmlProcessInfo_t *infos)
{
    return own_processes(device, count, infos, &real.nvmlDeviceGetComputeRunningProcesses_v3);
}

CUDA_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                 unsigned *count,
                                                                 nvmlProcessInfo_t *infos)
{
    return own_processes(device, count, infos, &real.nvmlDeviceGetComputeRunningProcesses_v2);
}

/* ---- per-process utilization ------------------------------------------------
 * The driver's samples name host pids. The node agent writes, into the
 * container's region directory, which host pids are this container's and
 * their pids here (POOL_REGION_PID_MAP, refreshed every second). So on a
 * limited GPU the answer is the driver's samples of those pids, renamed
 * to the container's pids; a neighbour's sample is never shown. Without a
 * map (no agent, or a process younger than its last refresh) none of the
 * samples is known to be ours, and the answer is NOT_FOUND, as the driver
 * says when it has no sample. */
CUDA_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                         nvmlProcessUtilizationSample_t *samples,
                                                         unsigned *count,
                                                         unsigned long long last_seen)
{
    if (!cuda_nvml_ready() || real.nvmlDeviceGetProcessUtilization == NULL)
        return NVML_ERROR_UNKNOWN;
    nvmlReturn_t (*pass)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned *,
                         unsigned long long) = real.nvmlDeviceGetProcessUtilization;
    nvmlMemory_t m;
    if (real.nvmlDeviceGetMemoryInfo == NULL || real.nvmlDeviceGetMemoryInfo(device, &m) != 0)
        return pass(device, samples, count, last_seen);
    bool refuse;
    struct cudareg *r = cuda_nvml_region(device, m.total, &refuse);
    if (refuse)
        return NVML_ERROR_NO_PERMISSION;
    if (r == NULL)
        return pass(device, samples, count, last_seen); /* no limit: the driver's list */
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* The driver's whole list into a buffer of ours, then ours out of it. */
    unsigned all = 0;
    nvmlReturn_t rc = pass(device, NULL, &all, last_seen);
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE && rc != NVML_SUCCESS)
        return rc; /* NOT_FOUND (no sample) and errors as the driver says */
    all += 16;     /* room for processes starting between the two calls */
    nvmlProcessUtilizationSample_t *mine = malloc(all * sizeof *mine);
    struct cudapid_pair *map = malloc(CUDAPID_MAX_PAIRS * sizeof *map);
    if (mine == NULL || map == NULL) {
        free(mine);
        free(map);
        return NVML_ERROR_UNKNOWN;
    }
    rc = pass(device, mine, &all, last_seen);
    size_t pairs = rc == NVML_SUCCESS ? cudapid_read(&cuda_cfg, map, CUDAPID_MAX_PAIRS) : 0;
    unsigned n = 0;
    for (unsigned i = 0; rc == NVML_SUCCESS && i < all; i++)
        for (size_t k = 0; k < pairs; k++)
            if (map[k].host == mine[i].pid) {
                mine[n] = mine[i];
                mine[n++].pid = map[k].inner;
                break;
            }
    free(map);
    if (rc == NVML_SUCCESS) {
        unsigned room = *count;
        *count = n;
        if (n == 0)
            rc = NVML_ERROR_NOT_FOUND;
        else if (samples == NULL || room < n)
            rc = NVML_ERROR_INSUFFICIENT_SIZE;
        else
            memcpy(samples, mine, n * sizeof *mine);
    }
    free(mine);
    return rc;
}
