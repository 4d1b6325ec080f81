/* dra_devices.h -- the node's GPUs as DRA devices: names and what a
 * prepared container needs of each.
 *
 * Device names follow the driver contract (docs/dra.md, poolapi_names.h):
 * "gpu-<index>" per GPU with MIG off, "gpu-<index>-mig-<gi>-<ci>" per MIG
 * device of a GPU with MIG on (GPU instance and compute instance IDs; the
 * whole GPU is then no device: its memory is the MIG devices'). The
 * ResourceSlices publish the same devices; a claim's allocation result
 * names one of them. Lost GPUs are listed (their claims fail to prepare
 * with a clear error).
 *
 * Pure: built once from the inventory, read-only afterwards (any thread). */
#ifndef GP_DRA_DEVICES_H
#define GP_DRA_DEVICES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "gpu.h"

#define DRA_DEVICE_NAME_LEN 64
#define DRA_MAX_DEVICE_NODES 3
#define DRA_NODE_PATH_LEN 48

struct dra_node_device {
    char name[DRA_DEVICE_NAME_LEN];
    char uuid[GPU_UUID_LEN];
    uint64_t memory; /* bytes: the GPU's, or the MIG device's */
    size_t gpu;      /* position of the physical GPU in the inventory */
    int mig;         /* position in gpus[gpu].migs, -1 for the whole GPU */
    bool lost;       /* the GPU fell off the bus or NVML could not read it */
    size_t node_count;
    char nodes[DRA_MAX_DEVICE_NODES][DRA_NODE_PATH_LEN]; /* /dev/nvidia<minor>, MIG caps */
};

struct dra_device_table {
    size_t count;
    struct dra_node_device *devices; /* owned */
};

/* In inventory order: a GPU, or the MIG devices of a GPU with MIG on.
 * -1 + err when out of memory. */
GP_MUST_USE int dra_devices_build(const struct gpu_inventory *inv, struct dra_device_table *t,
                                  char *err, size_t errlen);
void dra_devices_free(struct dra_device_table *t);
const struct dra_node_device *dra_devices_find(const struct dra_device_table *t, const char *name);

#endif
