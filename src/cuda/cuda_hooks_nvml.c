/* cuda_hooks_nvml.c -- NVML's memory figures on a limited GPU: nvidia-smi
 * and frameworks that size their pools from NVML see the container's share
 * and its use (docs/isolation.md, "The reporting side"). */
#include "cuda_glibc.h"
#include "cuda_account.h"
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
