/* mps_edits.c -- see mps_edits.h. */
#include "mps_edits.h"

#include <stdio.h>
#include <string.h>

#include "isolation.h"

int mps_resource_dir(const char *root, const char *resource, const char *leaf, char *out,
                     size_t outlen)
{
    int n = snprintf(out, outlen, "%s/%s/%s", root, resource, leaf);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

/* The largest share held on one GPU: the variable is one number for all
 * of the container's devices. */
static unsigned thread_percentage(const struct resource *res, const size_t *positions, size_t count)
{
    unsigned best = 0;
    for (size_t i = 0; i < count; i++) {
        const struct resource_device *d = &res->devices[positions[i]];
        size_t replicas = 0, held = 0;
        for (size_t j = 0; j < res->device_count; j++)
            replicas += res->devices[j].gpu == d->gpu;
        for (size_t k = 0; k < count; k++)
            held += res->devices[positions[k]].gpu == d->gpu;
        unsigned pct = replicas == 0 ? 100 : (unsigned)(100 * held / replicas);
        if (pct > best)
            best = pct;
    }
    return best == 0 ? 1 : best > 100 ? 100 : best;
}

int mps_add_edits(const struct gp_config *cfg, const struct gpu_inventory *inv,
                  const struct resource *res, const size_t *positions, size_t count,
                  struct container_edits *edits)
{
    if (!cfg->sharing_mps || !res->shared || count == 0)
        return 0;
    char host[4096], ctr[4096], shm[4096], val[1024];
    if (mps_resource_dir(cfg->mps_root, res->name, "pipe", host, sizeof host) != 0 ||
        mps_resource_dir(MPS_CONTAINER_ROOT, res->name, "pipe", ctr, sizeof ctr) != 0 ||
        snprintf(shm, sizeof shm, "%s/shm", cfg->mps_root) >= (int)sizeof shm)
        return -1;
    if (container_edits_set_env(edits, "CUDA_MPS_PIPE_DIRECTORY", ctr) != 0 ||
        container_edits_add_mount(edits, host, ctr, false) != 0 ||
        container_edits_add_mount(edits, shm, "/dev/shm", false) != 0)
        return -1;
    snprintf(val, sizeof val, "%u", thread_percentage(res, positions, count));
    if (container_edits_set_env(edits, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", val) != 0)
        return -1;
    unsigned long long limits[POOL_MAX_CONTAINER_GPUS];
    size_t n =
        isolation_replica_limits(inv, res, positions, count, limits, POOL_MAX_CONTAINER_GPUS);
    size_t used = 0;
    val[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (limits[i] == 0)
            continue;
        int w = snprintf(val + used, sizeof val - used, "%s%zu=%lluM", used ? "," : "", i,
                         limits[i] >> 20);
        if (w < 0 || (size_t)w >= sizeof val - used)
            return -1;
        used += (size_t)w;
    }
    if (used > 0 && container_edits_set_env(edits, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", val) != 0)
        return -1;
    return 0;
}
