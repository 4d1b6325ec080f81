/* gpumem.c -- GPU memory units as aliyun.com/gpu-mem (see gpumem.h). */
#include "gpumem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolapi_index.h"

#define GPUMEM_SOCKET_NAME "gpupool-aliyun-gpu-mem.sock"

unsigned long long gpumem_units(const struct gpu_device *gpu, enum pool_mem_unit unit)
{
    return poolapi_unit_from_bytes(gpu->memory_bytes, unit);
}

const char *gpumem_unit_name(enum pool_mem_unit unit)
{
    return poolapi_unit_name(unit);
}

/* ---- the encoded size of a snapshot ------------------------------------ */

static size_t varint_size(unsigned long long v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* A length-delimited field with a one-byte tag. */
static size_t field_size(size_t payload)
{
    return 1 + varint_size(payload) + payload;
}

static size_t decimal_digits(unsigned long long v)
{
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* Mirrors plugin_snapshot(): Device{id, health, topology{nodes[{ID}]}}
 * inside the repeated field 1 of ListAndWatchResponse. Checked against
 * protobuf-c's own count in the unit test. */
size_t gpumem_snapshot_size(const struct gpu_inventory *inv, enum pool_mem_unit unit)
{
    size_t total = 0;
    for (size_t g = 0; g < inv->count; g++) {
        const struct gpu_device *gpu = &inv->gpus[g];
        unsigned long long units = gpumem_units(gpu, unit);
        size_t topology = 0;
        if (gpu->numa_node != GPU_NUMA_UNKNOWN) {
            size_t numa =
                gpu->numa_node == 0 ? 0 : 1 + varint_size((unsigned long long)gpu->numa_node);
            topology = field_size(field_size(numa));
        }
        size_t fixed = strlen(gpu->uuid) + strlen(POOL_DEVICE_ID_SEPARATOR);
        for (unsigned long long j = 0; j < units; j++) {
            size_t device =
                field_size(fixed + decimal_digits(j)) + field_size(strlen("Unhealthy")) + topology;
            total += field_size(device);
        }
    }
    return total;
}

/* ---- the resource ------------------------------------------------------------ */

static int refuse_whole_gpu_features(const struct gpu_inventory *inv, const struct gp_config *cfg,
                                     char *err, size_t errlen)
{
    const char *what = NULL;
    if (cfg->mig_strategy != MIG_STRATEGY_NONE)
        what = "--mig-strategy single/mixed";
    else if (cfg->time_slice_count > 0)
        what = "sharing.timeSlicing";
    else if (cfg->gpu_resource_count > 0 || cfg->mig_resource_count > 0)
        what = "resources.gpus/resources.mig";
    if (what != NULL) {
        snprintf(err, errlen,
                 "--resource-mode=gpu-mem serves GPU memory as %s and cannot "
                 "be combined with %s (a whole-GPU feature)",
                 POOL_RES_GPU_MEM, what);
        return -1;
    }
    for (size_t g = 0; g < inv->count; g++) {
        if (inv->gpus[g].mig_enabled) {
            snprintf(err, errlen,
                     "GPU %u (%s) has MIG enabled: --resource-mode=gpu-mem shares "
                     "whole GPUs by memory; disable MIG on it or use --resource-mode=gpu",
                     inv->gpus[g].index, inv->gpus[g].uuid);
            return -1;
        }
    }
    return 0;
}

static int check_message_size(const struct gpu_inventory *inv, enum pool_mem_unit unit, char *err,
                              size_t errlen)
{
    size_t size = gpumem_snapshot_size(inv, unit);
    if (size <= GPUMEM_KUBELET_MAX_MESSAGE)
        return 0;
    unsigned long long units = 0;
    for (size_t g = 0; g < inv->count; g++)
        units += gpumem_units(&inv->gpus[g], unit);
    snprintf(err, errlen,
             "%llu %s devices of %s make a ListAndWatch message of %zu bytes, "
             "more than the kubelet accepts (%zu): use --gpu-memory-unit=GiB",
             units, gpumem_unit_name(unit), POOL_RES_GPU_MEM, size, GPUMEM_KUBELET_MAX_MESSAGE);
    return -1;
}

int gpumem_resource_build(const struct gpu_inventory *inv, const struct gp_config *cfg,
                          struct resource_set *set, char *err, size_t errlen)
{
    memset(set, 0, sizeof *set);
    if (refuse_whole_gpu_features(inv, cfg, err, errlen) != 0 ||
        check_message_size(inv, cfg->memory_unit, err, errlen) != 0)
        return -1;
    size_t total = 0;
    for (size_t g = 0; g < inv->count; g++)
        total += (size_t)gpumem_units(&inv->gpus[g], cfg->memory_unit);
    struct resource *res = calloc(1, sizeof *res);
    struct resource_device *devices = calloc(total ? total : 1, sizeof *devices);
    if (res == NULL || devices == NULL) {
        free(res);
        free(devices);
        snprintf(err, errlen, "out of memory building %zu %s devices", total, POOL_RES_GPU_MEM);
        return -1;
    }
    size_t k = 0;
    for (size_t g = 0; g < inv->count; g++) {
        const struct gpu_device *gpu = &inv->gpus[g];
        unsigned long long units = gpumem_units(gpu, cfg->memory_unit);
        for (unsigned long long j = 0; j < units; j++, k++) {
            struct resource_device *d = &devices[k];
            resource_device_init_gpu(d, gpu, g);
            snprintf(d->id, sizeof d->id, "%s" POOL_DEVICE_ID_SEPARATOR "%llu", gpu->uuid, j);
        }
    }
    snprintf(res->name, sizeof res->name, "%s", POOL_RES_GPU_MEM);
    snprintf(res->socket_name, sizeof res->socket_name, "%s", GPUMEM_SOCKET_NAME);
    res->device_count = total;
    res->devices = devices;
    set->count = 1;
    set->resources = res;
    return 0;
}

/* ---- the assignment ---------------------------------------------------------- */

int gpumem_parse_idx(const char *idx, const struct gpu_inventory *inv,
                     struct gpumem_assignment *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (idx == NULL || idx[0] == '\0') {
        snprintf(err, errlen, "annotation %s is missing or empty", POOL_ANN_GPU_MEM_IDX);
        return -1;
    }
    if (strlen(idx) >= sizeof out->idx) {
        snprintf(err, errlen, "annotation %s is too long", POOL_ANN_GPU_MEM_IDX);
        return -1;
    }
    snprintf(out->idx, sizeof out->idx, "%s", idx);
    struct poolapi_index_list list;
    char why[160];
    if (poolapi_index_parse(idx, &list, why, sizeof why) != 0) {
        snprintf(err, errlen, "annotation %s", why);
        return -1;
    }
    for (unsigned i = 0; i < list.count; i++) {
        size_t pos = inv->count;
        for (size_t g = 0; g < inv->count; g++)
            if (inv->gpus[g].index == list.gpu[i])
                pos = g;
        if (pos == inv->count) {
            snprintf(err, errlen,
                     "annotation %s=\"%s\" names GPU %u, which this node does "
                     "not have (%zu GPUs)",
                     POOL_ANN_GPU_MEM_IDX, idx, list.gpu[i], inv->count);
            return -1;
        }
        out->gpus[out->gpu_count++] = pos; /* in annotation order */
    }
    return 0;
}

/* ---- the reply --------------------------------------------------------------------- */

/* Devices are laid out GPU by GPU: the first unit of GPU `gpu`. */
static long first_unit_of(const struct resource *res, size_t gpu)
{
    size_t lo = 0, hi = res->device_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (res->devices[mid].gpu < gpu)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < res->device_count && res->devices[lo].gpu == gpu ? (long)lo : -1;
}

int gpumem_container_edits(const struct edits_options *opts, enum pool_mem_unit unit,
                           const struct gpu_inventory *inv, const struct resource *res,
                           const struct gpumem_assignment *as, size_t container_units,
                           struct container_edits *out, char *err, size_t errlen)
{
    size_t positions[POOL_MAX_GPUS];
    for (size_t i = 0; i < as->gpu_count; i++) {
        long p = first_unit_of(res, as->gpus[i]);
        if (p < 0) {
            snprintf(err, errlen, "GPU %u has no %s of memory to share",
                     inv->gpus[as->gpus[i]].index, gpumem_unit_name(unit));
            return -1;
        }
        positions[i] = (size_t)p;
    }
    if (allocate_container(opts, inv, res, positions, as->gpu_count, out, err, errlen) != 0)
        return -1;
    char pod[24], container[24], dev[24];
    snprintf(pod, sizeof pod, "%llu", as->pod_units);
    snprintf(container, sizeof container, "%zu", container_units);
    snprintf(dev, sizeof dev, "%llu", gpumem_units(&inv->gpus[as->gpus[0]], unit));
    if (container_edits_set_env(out, POOL_ENV_GPU_MEM_IDX, as->idx) != 0 ||
        container_edits_set_env(out, POOL_ENV_GPU_MEM_POD, pod) != 0 ||
        container_edits_set_env(out, POOL_ENV_GPU_MEM_CONTAINER, container) != 0 ||
        container_edits_set_env(out, POOL_ENV_GPU_MEM_DEV, dev) != 0) {
        snprintf(err, errlen, "out of memory building the Allocate response");
        return -1;
    }
    /* The compute share the scheduler booked for this container, on each
     * of its GPUs, for libgpupool-cuda's throttle (HAMi-core's name). */
    char cores[16];
    snprintf(cores, sizeof cores, "%u", as->container_cores);
    if (as->container_cores > 0 && container_edits_set_env(out, POOL_ENV_SM_LIMIT, cores) != 0) {
        snprintf(err, errlen, "out of memory building the Allocate response");
        return -1;
    }
    return 0;
}
