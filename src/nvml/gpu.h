/* gpu.h -- the node's GPU inventory as plain structs.
 *
 * gpu_inventory_load() asks NVML once for everything the plugin needs
 * (identity, memory, PCI/NUMA placement, compute capability, MIG layout and
 * the pairwise link topology) so that no RPC ever has to call NVML: a GPU
 * that falls off the bus later cannot break GetPreferredAllocation.
 * Owner: the caller of gpu_inventory_load(); free with gpu_inventory_free().
 * Not thread-safe to load; read-only (and so shareable) once loaded. */
#ifndef GP_GPU_H
#define GP_GPU_H

#include <stdbool.h>
#include <stddef.h>

#include "nvml.h"
#include "compiler.h"

#define GPU_UUID_LEN 96
#define GPU_NAME_LEN 96
#define GPU_BUS_ID_LEN 32
#define GPU_PROFILE_LEN 32
#define GPU_NUMA_UNKNOWN (-1)
#define GPU_MINOR_UNKNOWN (-1)
#define GPU_PROFILE_ID_UNKNOWN (-1)

/* One MIG device (a compute instance inside a GPU instance). */
struct mig_device {
    char uuid[GPU_UUID_LEN]; /* "MIG-..." */
    unsigned index;          /* j in the "i:j" index form */
    unsigned gpu_instance_id;
    unsigned compute_instance_id;
    char profile[GPU_PROFILE_LEN]; /* "1g.10gb", "1c.2g.20gb", "1g.10gb+me" */
    int gpu_instance_profile_id;   /* NVML_GPU_INSTANCE_PROFILE_*, GPU_PROFILE_ID_UNKNOWN */
    unsigned long long memory_bytes;
    unsigned gpu_instance_slices;
    unsigned compute_instance_slices;
    /* /dev/nvidia-caps/nvidia-cap<N> minors from /proc/driver/nvidia-caps/mig-minors;
     * GPU_MINOR_UNKNOWN when the file or the line is missing. */
    int gi_access_minor;
    int ci_access_minor;
};

struct gpu_device {
    char uuid[GPU_UUID_LEN];         /* "GPU-..." */
    char name[GPU_NAME_LEN];         /* "NVIDIA A100-SXM4-40GB" */
    char pci_bus_id[GPU_BUS_ID_LEN]; /* NVML form, "00000000:3B:00.0" */
    unsigned index;                  /* NVML index */
    int minor;                       /* /dev/nvidia<minor> */
    unsigned long long memory_bytes;
    int numa_node; /* GPU_NUMA_UNKNOWN when not known */
    int cc_major, cc_minor;
    bool mig_capable;
    bool mig_enabled; /* current mode */
    size_t mig_count;
    struct mig_device *migs; /* owned */
    /* NVML could not identify this GPU (fallen off the bus, or an error in
     * its handle, UUID, minor or MIG listing): it is kept so that it can be
     * advertised Unhealthy, with no MIG devices and only the facts read
     * before the error. When the UUID itself is unknown, `uuid` holds a
     * derived ID, GPU_LOST_UUID_PREFIX + the PCI bus id when NVML still
     * gave it, else + "index-<N>": never a real UUID, which is all hex. */
    bool lost;
};

#define GPU_LOST_UUID_PREFIX "GPU-unknown-"

/* Link quality between two GPUs, higher is better: the PCIe part follows
 * go-gpuallocator's scale (10 cross-CPU ... 60 same board), plus 100 per
 * active NVLink between the pair. 0 = unknown (an NVML error on either). */
struct gpu_inventory {
    size_t count;
    struct gpu_device *gpus; /* owned, count entries, ordered by index */
    int *link_score;         /* owned, count*count, [a*count+b] */
    char driver_version[80];
};

/* Fills *inv from an initialised NVML. Per-GPU errors in optional facts
 * (NUMA, topology, MIG attributes) are logged and leave the fact unknown;
 * errors in one GPU's identity (handle, UUID, minor, MIG device listing)
 * are logged naming the GPU and the NVML error and mark that GPU `lost`:
 * one GPU off the bus must not take the node's other GPUs down with it.
 * Only the device count and out-of-memory fail the load.
 * Returns 0 or -1 (+ err). */
GP_MUST_USE int gpu_inventory_load(struct nvml *nvml, struct gpu_inventory *inv, char *err,
                                   size_t errlen);

/* go-nvlib's MIG profile name: "<g>g.<gb>gb", or "<c>c.<g>g.<gb>gb" when
 * the compute instance uses fewer slices than its GPU instance. gb is the
 * instance's memory as a fraction of the parent's, rounded up to eighths,
 * times the parent's memory in whole GiB (rounded up), rounded. */
void gpu_mig_profile_name(unsigned gi_slices, unsigned ci_slices, unsigned long long mig_memory_mb,
                          unsigned long long parent_memory_bytes, char *out, size_t outlen);
/* go-nvlib's attribute suffix of a GPU instance profile id: "+me" (with
 * media extensions: the REV1 profiles), "+me.all", "+gfx", "-me" (NO_ME),
 * or "" (none, or an unknown id). Appended to the name above. */
const char *gpu_mig_profile_suffix(int gpu_instance_profile_id);
void gpu_inventory_free(struct gpu_inventory *inv);

/* The link score of GPUs a and b; -1 when either is absent. */
int gpu_link_score(const struct gpu_inventory *inv, size_t a, size_t b);

#endif
