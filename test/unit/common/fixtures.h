/* fixtures.h -- hand-built inventories and configurations for unit tests
 * of the pure modules (resource, preferred, allocate), no NVML involved. */
#ifndef GP_TEST_FIXTURES_H
#define GP_TEST_FIXTURES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "gpu.h"

/* n GPUs named "NVIDIA A100-SXM4-40GB", UUID GPU-0000000<i>-..., NUMA i/(n/2),
 * PCIe switch per pair (score 50), NODE otherwise within a NUMA node (20),
 * SYSTEM across (10); NVLink (x2) between 0-1, 2-3, ... when nvlink set. */
static inline void fixture_inventory(struct gpu_inventory *inv, size_t n, int nvlink)
{
    memset(inv, 0, sizeof *inv);
    inv->count = n;
    inv->gpus = calloc(n, sizeof *inv->gpus);
    inv->link_score = calloc(n * n, sizeof *inv->link_score);
    for (size_t i = 0; i < n; i++) {
        struct gpu_device *g = &inv->gpus[i];
        snprintf(g->uuid, sizeof g->uuid, "GPU-%08zu-0000-0000-0000-000000000000", i);
        snprintf(g->name, sizeof g->name, "NVIDIA A100-SXM4-40GB");
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "00000000:%02zX:00.0", i + 7);
        g->index = (unsigned)i;
        g->minor = (int)i;
        g->memory_bytes = 40ull << 30;
        g->numa_node = (int)(i / (n / 2 ? n / 2 : 1));
        g->cc_major = 8;
        g->mig_capable = 1;
    }
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < n; b++) {
            int s = 0;
            if (a != b) {
                if (a / 2 == b / 2)
                    s = 50 + (nvlink ? 200 : 0);
                else if (inv->gpus[a].numa_node == inv->gpus[b].numa_node)
                    s = 20;
                else
                    s = 10;
            }
            inv->link_score[a * n + b] = s;
        }
}

/* Puts GPU g in MIG mode with `count` devices of `profile`. */
static inline void fixture_mig(struct gpu_inventory *inv, size_t g, size_t count,
                               const char *profile)
{
    struct gpu_device *d = &inv->gpus[g];
    d->mig_enabled = 1;
    d->mig_count = count;
    d->migs = calloc(count, sizeof *d->migs);
    for (size_t j = 0; j < count; j++) {
        struct mig_device *m = &d->migs[j];
        snprintf(m->uuid, sizeof m->uuid, "MIG-%08zu-%04zu-0000-0000-000000000000", g, j);
        m->index = (unsigned)j;
        m->gpu_instance_id = (unsigned)(j + 1);
        m->compute_instance_id = 0;
        snprintf(m->profile, sizeof m->profile, "%s", profile);
        m->gi_access_minor = (int)(100 + g * 10 + j);
        m->ci_access_minor = (int)(200 + g * 10 + j);
    }
}

static inline void fixture_inventory_free(struct gpu_inventory *inv)
{
    for (size_t i = 0; i < inv->count; i++)
        free(inv->gpus[i].migs);
    free(inv->gpus);
    free(inv->link_score);
    memset(inv, 0, sizeof *inv);
}

/* NVIDIA's defaults, no file. Strings are static: do not config_free(). */
static inline void fixture_config(struct gp_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->mig_strategy = MIG_STRATEGY_NONE;
    cfg->fail_on_init_error = 1;
    cfg->nvidia_driver_root = "/";
    cfg->nvidia_dev_root = "/";
    cfg->device_list_strategy = DEVICE_LIST_ENVVAR;
    cfg->device_id_strategy = DEVICE_ID_UUID;
    cfg->cdi_annotation_prefix = "cdi.k8s.io/";
    cfg->shared_alloc_policy = SHARED_ALLOC_DISTRIBUTED;
    cfg->health_recovery_probes = 3;
    cfg->health_probe_interval_ms = 5000;
}

static inline struct config_time_slice *fixture_time_slice(struct gp_config *cfg, const char *name,
                                                           int replicas)
{
    cfg->time_slices =
        realloc(cfg->time_slices, (cfg->time_slice_count + 1) * sizeof *cfg->time_slices);
    struct config_time_slice *ts = &cfg->time_slices[cfg->time_slice_count++];
    memset(ts, 0, sizeof *ts);
    snprintf(ts->name, sizeof ts->name, "%s", name);
    ts->replicas = replicas;
    ts->all_devices = 1;
    return ts;
}

#endif
