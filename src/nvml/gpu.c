/* gpu.c -- reads the node's GPU inventory from NVML once (see gpu.h). */
#include "gpu.h"
#include "gpu_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

#define DEFAULT_PCI_DEVICES_DIR "/sys/bus/pci/devices"
#define DEFAULT_MIG_MINORS_FILE "/proc/driver/nvidia-caps/mig-minors"
#define PCI_VENDOR_NVIDIA 0x10de

/* go-gpuallocator's PCIe scores, by nvmlDeviceGetTopologyCommonAncestor. */
#define SCORE_SAME_BOARD 60
#define SCORE_SINGLE_SWITCH 50
#define SCORE_MULTI_SWITCH 40
#define SCORE_HOST_BRIDGE 30
#define SCORE_SAME_CPU 20
#define SCORE_CROSS_CPU 10
#define SCORE_PER_NVLINK 100

/* One line of mig-minors: gpu<gpu_minor>/gi<gi>[/ci<ci>]/access <minor>. */
struct cap_minor {
    int gpu_minor;
    int gi;
    int ci; /* -1 for the GPU-instance line */
    int minor;
};

struct cap_minors {
    struct cap_minor *entries;
    size_t count;
};

/* Everything one load needs besides the result. */
struct load_context {
    struct nvml *nvml;
    struct gpu_host_paths paths;
    struct cap_minors caps;
    nvmlDevice_t *handles; /* per GPU, for the topology pass */
    char *err;
    size_t errlen;
};

/* ---- MIG profile names ------------------------------------------------------ */

void gpu_mig_profile_name(unsigned gi_slices, unsigned ci_slices, unsigned long long mig_memory_mb,
                          unsigned long long parent_memory_bytes, char *out, size_t outlen)
{
    const unsigned long long one_mb = 1024ull * 1024;
    const unsigned long long one_gb = 1024ull * 1024 * 1024;
    unsigned long long gb;
    if (parent_memory_bytes == 0) {
        /* Without the parent's size only the instance's own size is known. */
        gb = (mig_memory_mb + 512) / 1024;
    } else {
        /* Profile names quote a share of the board rounded up to eighths,
         * times the board's size in whole GiB, so that a 40 GB board's
         * 4864 MiB slice is "5gb", as nvidia-smi says. Integer arithmetic:
         * round(eighths * total_gb / 8), halves rounded up. */
        unsigned long long eighths =
            (mig_memory_mb * one_mb * 8 + parent_memory_bytes - 1) / parent_memory_bytes;
        unsigned long long total_gb = (parent_memory_bytes + one_gb - 1) / one_gb;
        gb = (eighths * total_gb * 2 + 8) / 16;
    }
    if (ci_slices == gi_slices || ci_slices == 0)
        snprintf(out, outlen, "%ug.%llugb", gi_slices, gb);
    else
        snprintf(out, outlen, "%uc.%ug.%llugb", ci_slices, gi_slices, gb);
}

const char *gpu_mig_profile_suffix(int gpu_instance_profile_id)
{
    switch (gpu_instance_profile_id) {
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1:
    case NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1:
        return "+me";
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME:
    case NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
        return "+me.all";
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX:
    case NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX:
    case NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX:
        return "+gfx";
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME:
    case NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
        return "-me";
    default:
        return "";
    }
}

/* The GPU instance's profile id, through the parent GPU: the attributes
 * call gives slice counts only, which do not tell 1g.10gb from
 * 1g.10gb+me. Unknown when the driver lacks the calls. */
static int load_gpu_instance_profile(struct load_context *ctx, const struct gpu_device *g,
                                     const struct mig_device *m)
{
    struct nvml *nvml = ctx->nvml;
    nvmlGpuInstance_t gi;
    nvmlGpuInstanceInfo_t info;
    if (nvml->DeviceGetGpuInstanceById == NULL || nvml->GpuInstanceGetInfo == NULL)
        return GPU_PROFILE_ID_UNKNOWN;
    nvmlReturn_t rc =
        nvml->DeviceGetGpuInstanceById(ctx->handles[g->index], m->gpu_instance_id, &gi);
    if (rc == NVML_SUCCESS)
        rc = nvml->GpuInstanceGetInfo(gi, &info);
    if (rc != NVML_SUCCESS) {
        log_v(1, "GPU %u MIG device %s: GPU instance %u profile unknown: %s", g->index, m->uuid,
              m->gpu_instance_id, nvml_strerror(nvml, rc));
        return GPU_PROFILE_ID_UNKNOWN;
    }
    return (int)info.profileId;
}

/* ---- host files ------------------------------------------------------------ */

/* NVML writes an 8-digit domain ("00000000:3B:00.0"); sysfs names devices
 * with a 4-digit, lower-case one ("0000:3b:00.0"). */
static int sysfs_bus_id(const char *nvml_bus_id, char *out, size_t outlen)
{
    unsigned domain, bus, device, function;
    if (sscanf(nvml_bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4)
        return -1;
    snprintf(out, outlen, "%04x:%02x:%02x.%x", domain, bus, device, function);
    return 0;
}

/* Reads one integer (decimal, or hex with 0x) from a sysfs attribute. */
static int read_sysfs_number(const char *pci_devices_dir, const char *sysfs_id,
                             const char *attribute, long *value)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s/%s", pci_devices_dir, sysfs_id, attribute);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    int matched = fscanf(f, "%li", value);
    fclose(f);
    return matched == 1 ? 0 : -1;
}

/* Returns 0 and *node (possibly negative) when sysfs has the file, -1
 * when it does not. A device at that address with another vendor is not
 * this GPU (a simulated node on a host with real PCI devices), so its
 * entry is ignored. */
static int read_sysfs_numa_node(const char *pci_devices_dir, const char *bus_id, int *node)
{
    char sysfs_id[32];
    if (sysfs_bus_id(bus_id, sysfs_id, sizeof sysfs_id) != 0)
        return -1;
    long vendor;
    if (read_sysfs_number(pci_devices_dir, sysfs_id, "vendor", &vendor) == 0 &&
        vendor != PCI_VENDOR_NVIDIA) {
        log_v(2, "sysfs device %s is not NVIDIA's (vendor 0x%04lx): ignoring it", sysfs_id, vendor);
        return -1;
    }
    long value;
    if (read_sysfs_number(pci_devices_dir, sysfs_id, "numa_node", &value) != 0)
        return -1;
    *node = (int)value;
    return 0;
}

static int resolve_numa_node(struct load_context *ctx, nvmlDevice_t handle,
                             const struct gpu_device *g)
{
    int node;
    if (g->pci_bus_id[0] != '\0' &&
        read_sysfs_numa_node(ctx->paths.pci_devices_dir, g->pci_bus_id, &node) == 0)
        return node < 0 ? GPU_NUMA_UNKNOWN : node;
    /* No sysfs (a container without /sys, or a fake bus id): NVML knows too
     * on recent drivers. */
    if (ctx->nvml->DeviceGetNumaNodeId == NULL)
        return GPU_NUMA_UNKNOWN;
    unsigned int nvml_node;
    nvmlReturn_t rc = ctx->nvml->DeviceGetNumaNodeId(handle, &nvml_node);
    if (rc != NVML_SUCCESS) {
        log_v(2, "GPU %u: NUMA node unknown: nvmlDeviceGetNumaNodeId: %s", g->index,
              nvml_strerror(ctx->nvml, rc));
        return GPU_NUMA_UNKNOWN;
    }
    /* NVML reports "none" as a huge unsigned value. */
    return (int)nvml_node < 0 ? GPU_NUMA_UNKNOWN : (int)nvml_node;
}

static int parse_cap_minor_line(const char *line, struct cap_minor *out)
{
    int gpu, gi, ci, minor;
    if (sscanf(line, "gpu%d/gi%d/ci%d/access %d", &gpu, &gi, &ci, &minor) == 4) {
        *out = (struct cap_minor){gpu, gi, ci, minor};
        return 0;
    }
    if (sscanf(line, "gpu%d/gi%d/access %d", &gpu, &gi, &minor) == 3) {
        *out = (struct cap_minor){gpu, gi, -1, minor};
        return 0;
    }
    return -1; /* "config N", "monitor N": not per instance */
}

/* A missing file is normal (no MIG support in the driver): minors stay
 * unknown. */
static int load_cap_minors(const char *path, struct cap_minors *caps, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        log_v(2, "no MIG capability minors: %s: %s", path, strerror(errno));
        return 0;
    }
    char line[256];
    size_t capacity = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        struct cap_minor entry;
        if (parse_cap_minor_line(line, &entry) != 0)
            continue;
        if (caps->count == capacity) {
            size_t grown = capacity ? capacity * 2 : 64;
            struct cap_minor *entries = realloc(caps->entries, grown * sizeof *entries);
            if (entries == NULL) {
                fclose(f);
                snprintf(err, errlen, "out of memory reading %s", path);
                return -1;
            }
            caps->entries = entries;
            capacity = grown;
        }
        caps->entries[caps->count++] = entry;
    }
    fclose(f);
    return 0;
}

static int find_cap_minor(const struct cap_minors *caps, int gpu_minor, int gi, int ci)
{
    for (size_t i = 0; i < caps->count; i++) {
        const struct cap_minor *c = &caps->entries[i];
        if (c->gpu_minor == gpu_minor && c->gi == gi && c->ci == ci)
            return c->minor;
    }
    return GPU_MINOR_UNKNOWN;
}

/* ---- per GPU ------------------------------------------------------------------ */

/* Returns NVML_SUCCESS, or the failing call's code with *what naming it. */
static nvmlReturn_t load_identity(struct load_context *ctx, unsigned index, struct gpu_device *g,
                                  const char **what)
{
    struct nvml *nvml = ctx->nvml;
    nvmlDevice_t handle;
    g->index = index;
    *what = nvml->symbols.DeviceGetHandleByIndex;
    nvmlReturn_t rc = nvml->DeviceGetHandleByIndex(index, &handle);
    if (rc != NVML_SUCCESS)
        return rc;
    ctx->handles[index] = handle;
    *what = "nvmlDeviceGetUUID";
    rc = nvml->DeviceGetUUID(handle, g->uuid, sizeof g->uuid);
    if (rc != NVML_SUCCESS) {
        g->uuid[0] = '\0';
        return rc;
    }
    *what = "nvmlDeviceGetMinorNumber";
    unsigned int minor;
    rc = nvml->DeviceGetMinorNumber(handle, &minor);
    if (rc != NVML_SUCCESS)
        return rc;
    g->minor = (int)minor;
    return NVML_SUCCESS;
}

/* A GPU without a readable UUID still needs a stable, unique device ID to
 * be advertised (Unhealthy). The PCI address survives reboots and index
 * renumbering; the NVML index is the last resort. "unknown" is not hex, so
 * no real UUID ("GPU-" + hex groups) can ever equal a derived one. */
static void derive_uuid(struct load_context *ctx, struct gpu_device *g)
{
    nvmlDevice_t handle = ctx->handles[g->index];
    nvmlPciInfo_t pci;
    if (handle != NULL && ctx->nvml->DeviceGetPciInfo(handle, &pci) == NVML_SUCCESS &&
        pci.busId[0] != '\0') {
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "%s", pci.busId);
        snprintf(g->uuid, sizeof g->uuid, GPU_LOST_UUID_PREFIX "%s", g->pci_bus_id);
    } else {
        snprintf(g->uuid, sizeof g->uuid, GPU_LOST_UUID_PREFIX "index-%u", g->index);
    }
}

/* Keeps a GPU NVML cannot identify, flagged lost: its MIG devices (if any
 * were read) are dropped and it is served as one Unhealthy device. */
static void mark_lost(struct load_context *ctx, struct gpu_device *g, const char *why)
{
    g->lost = true;
    free(g->migs);
    g->migs = NULL;
    g->mig_count = 0;
    g->mig_enabled = false;
    g->numa_node = GPU_NUMA_UNKNOWN;
    if (g->uuid[0] == '\0')
        derive_uuid(ctx, g);
    log_warn("GPU %u (%s): %s; advertising it Unhealthy (it is not allocatable until NVML "
             "identifies it again after a restart or SIGHUP)",
             g->index, g->uuid, why);
}

static void load_description(struct load_context *ctx, nvmlDevice_t handle, struct gpu_device *g)
{
    struct nvml *nvml = ctx->nvml;
    nvmlReturn_t rc = nvml->DeviceGetName(handle, g->name, sizeof g->name);
    if (rc != NVML_SUCCESS) {
        log_warn("GPU %u (%s): nvmlDeviceGetName failed: %s", g->index, g->uuid,
                 nvml_strerror(nvml, rc));
        g->name[0] = '\0';
    }
    nvmlMemory_t memory;
    rc = nvml->DeviceGetMemoryInfo(handle, &memory);
    if (rc == NVML_SUCCESS)
        g->memory_bytes = memory.total;
    else
        log_warn("GPU %u (%s): nvmlDeviceGetMemoryInfo failed: %s", g->index, g->uuid,
                 nvml_strerror(nvml, rc));
    nvmlPciInfo_t pci;
    rc = nvml->DeviceGetPciInfo(handle, &pci);
    if (rc == NVML_SUCCESS)
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "%s", pci.busId);
    else
        log_warn("GPU %u (%s): %s failed: %s", g->index, g->uuid, nvml->symbols.DeviceGetPciInfo,
                 nvml_strerror(nvml, rc));
    g->numa_node = resolve_numa_node(ctx, handle, g);
    g->cc_major = g->cc_minor = 0;
    if (nvml->DeviceGetCudaComputeCapability != NULL) {
        rc = nvml->DeviceGetCudaComputeCapability(handle, &g->cc_major, &g->cc_minor);
        if (rc != NVML_SUCCESS) {
            log_v(2, "GPU %u: compute capability unknown: %s", g->index, nvml_strerror(nvml, rc));
            g->cc_major = g->cc_minor = 0;
        }
    }
}

static void load_mig_mode(struct load_context *ctx, nvmlDevice_t handle, struct gpu_device *g)
{
    g->mig_capable = false;
    g->mig_enabled = false;
    if (ctx->nvml->DeviceGetMigMode == NULL)
        return;
    unsigned int current, pending;
    nvmlReturn_t rc = ctx->nvml->DeviceGetMigMode(handle, &current, &pending);
    if (rc == NVML_ERROR_NOT_SUPPORTED)
        return;
    if (rc != NVML_SUCCESS) {
        log_warn("GPU %u (%s): nvmlDeviceGetMigMode failed: %s; treating MIG as disabled", g->index,
                 g->uuid, nvml_strerror(ctx->nvml, rc));
        return;
    }
    g->mig_capable = true;
    g->mig_enabled = current == NVML_DEVICE_MIG_ENABLE;
}

/* A MIG device that cannot be identified: returns 1 with the reason in
 * ctx->err; load_gpu then marks the whole GPU lost. */
static int fail_mig(struct load_context *ctx, unsigned slot, const char *what, nvmlReturn_t rc)
{
    snprintf(ctx->err, ctx->errlen, "MIG device %u: %s failed: %s", slot, what,
             nvml_strerror(ctx->nvml, rc));
    return 1;
}

static void load_mig_profile(struct load_context *ctx, nvmlDevice_t mig_handle,
                             const struct gpu_device *g, struct mig_device *m)
{
    nvmlDeviceAttributes_t attributes;
    nvmlReturn_t rc = NVML_ERROR_FUNCTION_NOT_FOUND;
    m->gpu_instance_profile_id = GPU_PROFILE_ID_UNKNOWN;
    if (ctx->nvml->DeviceGetAttributes != NULL)
        rc = ctx->nvml->DeviceGetAttributes(mig_handle, &attributes);
    if (rc != NVML_SUCCESS) {
        log_warn("GPU %u MIG device %s: %s failed: %s; profile unknown", g->index, m->uuid,
                 "nvmlDeviceGetAttributes", nvml_strerror(ctx->nvml, rc));
        /* The size alone is still worth having. */
        nvmlMemory_t memory;
        if (ctx->nvml->DeviceGetMemoryInfo(mig_handle, &memory) == NVML_SUCCESS)
            m->memory_bytes = memory.total;
        return;
    }
    m->gpu_instance_slices = attributes.gpuInstanceSliceCount;
    m->compute_instance_slices = attributes.computeInstanceSliceCount;
    m->memory_bytes = attributes.memorySizeMB * 1024ull * 1024ull;
    gpu_mig_profile_name(attributes.gpuInstanceSliceCount, attributes.computeInstanceSliceCount,
                         attributes.memorySizeMB, g->memory_bytes, m->profile, sizeof m->profile);
    m->gpu_instance_profile_id = load_gpu_instance_profile(ctx, g, m);
    const char *suffix = gpu_mig_profile_suffix(m->gpu_instance_profile_id);
    size_t len = strlen(m->profile);
    if (len + strlen(suffix) < sizeof m->profile)
        memcpy(m->profile + len, suffix, strlen(suffix) + 1);
}

static int load_mig_device(struct load_context *ctx, nvmlDevice_t mig_handle,
                           const struct gpu_device *g, unsigned slot, struct mig_device *m)
{
    struct nvml *nvml = ctx->nvml;
    m->index = slot;
    nvmlReturn_t rc = nvml->DeviceGetUUID(mig_handle, m->uuid, sizeof m->uuid);
    if (rc != NVML_SUCCESS)
        return fail_mig(ctx, slot, "nvmlDeviceGetUUID", rc);
    if (nvml->DeviceGetGpuInstanceId == NULL || nvml->DeviceGetComputeInstanceId == NULL)
        return fail_mig(ctx, slot, "nvmlDeviceGetGpuInstanceId", NVML_ERROR_FUNCTION_NOT_FOUND);
    rc = nvml->DeviceGetGpuInstanceId(mig_handle, &m->gpu_instance_id);
    if (rc != NVML_SUCCESS)
        return fail_mig(ctx, slot, "nvmlDeviceGetGpuInstanceId", rc);
    rc = nvml->DeviceGetComputeInstanceId(mig_handle, &m->compute_instance_id);
    if (rc != NVML_SUCCESS)
        return fail_mig(ctx, slot, "nvmlDeviceGetComputeInstanceId", rc);
    load_mig_profile(ctx, mig_handle, g, m);
    m->gi_access_minor = find_cap_minor(&ctx->caps, g->minor, (int)m->gpu_instance_id, -1);
    m->ci_access_minor =
        find_cap_minor(&ctx->caps, g->minor, (int)m->gpu_instance_id, (int)m->compute_instance_id);
    return 0;
}

static int load_migs(struct load_context *ctx, nvmlDevice_t handle, struct gpu_device *g)
{
    struct nvml *nvml = ctx->nvml;
    if (!g->mig_enabled)
        return 0;
    if (nvml->DeviceGetMaxMigDeviceCount == NULL || nvml->DeviceGetMigDeviceHandleByIndex == NULL)
        return fail_mig(ctx, 0, "nvmlDeviceGetMaxMigDeviceCount", NVML_ERROR_FUNCTION_NOT_FOUND);
    unsigned int max_count;
    nvmlReturn_t rc = nvml->DeviceGetMaxMigDeviceCount(handle, &max_count);
    if (rc != NVML_SUCCESS)
        return fail_mig(ctx, 0, "nvmlDeviceGetMaxMigDeviceCount", rc);
    if (max_count == 0)
        return 0;
    g->migs = calloc(max_count, sizeof *g->migs);
    if (g->migs == NULL) {
        snprintf(ctx->err, ctx->errlen, "out of memory listing MIG devices of GPU %u", g->index);
        return -1;
    }
    for (unsigned slot = 0; slot < max_count; slot++) {
        nvmlDevice_t mig_handle;
        rc = nvml->DeviceGetMigDeviceHandleByIndex(handle, slot, &mig_handle);
        /* Empty slots answer NOT_FOUND (or INVALID_ARGUMENT on some drivers). */
        if (rc == NVML_ERROR_NOT_FOUND || rc == NVML_ERROR_INVALID_ARGUMENT)
            continue;
        if (rc != NVML_SUCCESS)
            return fail_mig(ctx, slot, "nvmlDeviceGetMigDeviceHandleByIndex", rc);
        int mrc = load_mig_device(ctx, mig_handle, g, slot, &g->migs[g->mig_count]);
        if (mrc != 0)
            return mrc;
        g->mig_count++;
    }
    return 0;
}

/* Returns -1 (out of memory, ctx->err set) only; identity errors mark the
 * GPU lost. */
static int load_gpu(struct load_context *ctx, unsigned index, struct gpu_device *g)
{
    g->minor = GPU_MINOR_UNKNOWN;
    g->numa_node = GPU_NUMA_UNKNOWN;
    const char *what = NULL;
    nvmlReturn_t rc = load_identity(ctx, index, g, &what);
    if (rc != NVML_SUCCESS) {
        char why[256];
        snprintf(why, sizeof why, "%s failed: %s", what, nvml_strerror(ctx->nvml, rc));
        mark_lost(ctx, g, why);
        return 0;
    }
    nvmlDevice_t handle = ctx->handles[index];
    load_description(ctx, handle, g);
    load_mig_mode(ctx, handle, g);
    int mrc = load_migs(ctx, handle, g);
    if (mrc == 1) {
        char why[512];
        snprintf(why, sizeof why, "%s", ctx->err);
        ctx->err[0] = '\0';
        mark_lost(ctx, g, why);
        return 0;
    }
    return mrc;
}

/* ---- topology ------------------------------------------------------------------ */

static int pcie_score(nvmlGpuTopologyLevel_t level)
{
    switch (level) {
    case NVML_TOPOLOGY_INTERNAL:
        return SCORE_SAME_BOARD;
    case NVML_TOPOLOGY_SINGLE:
        return SCORE_SINGLE_SWITCH;
    case NVML_TOPOLOGY_MULTIPLE:
        return SCORE_MULTI_SWITCH;
    case NVML_TOPOLOGY_HOSTBRIDGE:
        return SCORE_HOST_BRIDGE;
    case NVML_TOPOLOGY_NODE:
        return SCORE_SAME_CPU;
    case NVML_TOPOLOGY_SYSTEM:
        return SCORE_CROSS_CPU;
    }
    return 0;
}

static bool same_bus_id(const char *a, const char *b)
{
    unsigned ad, ab, adev, af, bd, bb, bdev, bf;
    if (sscanf(a, "%x:%x:%x.%x", &ad, &ab, &adev, &af) != 4 ||
        sscanf(b, "%x:%x:%x.%x", &bd, &bb, &bdev, &bf) != 4)
        return false;
    return ad == bd && ab == bb && adev == bdev && af == bf;
}

/* Remote PCI bus ids of GPU i's active NVLinks (empty strings for inactive
 * links). Returns -1 on an NVML error other than "no such link". */
static int read_nvlink_peers(struct load_context *ctx, size_t i,
                             char peers[NVML_NVLINK_MAX_LINKS][NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE])
{
    struct nvml *nvml = ctx->nvml;
    memset(peers, 0, NVML_NVLINK_MAX_LINKS * NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE);
    if (nvml->DeviceGetNvLinkState == NULL || nvml->DeviceGetNvLinkRemotePciInfo == NULL)
        return 0;
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
        nvmlEnableState_t active;
        nvmlReturn_t rc = nvml->DeviceGetNvLinkState(ctx->handles[i], link, &active);
        if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT ||
            rc == NVML_ERROR_NOT_FOUND)
            continue;
        if (rc != NVML_SUCCESS) {
            log_v(2, "GPU %zu: nvmlDeviceGetNvLinkState(link %u) failed: %s", i, link,
                  nvml_strerror(nvml, rc));
            return -1;
        }
        if (active != NVML_FEATURE_ENABLED)
            continue;
        nvmlPciInfo_t pci;
        rc = nvml->DeviceGetNvLinkRemotePciInfo(ctx->handles[i], link, &pci);
        if (rc != NVML_SUCCESS) {
            log_v(2, "GPU %zu: %s(link %u) failed: %s", i,
                  nvml->symbols.DeviceGetNvLinkRemotePciInfo, link, nvml_strerror(nvml, rc));
            return -1;
        }
        snprintf(peers[link], NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE, "%s", pci.busId);
    }
    return 0;
}

static int count_links_to(char peers[NVML_NVLINK_MAX_LINKS][NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE],
                          const char *bus_id)
{
    int count = 0;
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; link++)
        if (peers[link][0] != '\0' && same_bus_id(peers[link], bus_id))
            count++;
    return count;
}

static int pair_score(struct load_context *ctx, const struct gpu_inventory *inv, size_t a, size_t b,
                      char peers[NVML_NVLINK_MAX_LINKS][NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE],
                      bool peers_known)
{
    if (!peers_known || inv->gpus[a].lost || inv->gpus[b].lost)
        return 0;
    if (ctx->nvml->DeviceGetTopologyCommonAncestor == NULL)
        return 0;
    nvmlGpuTopologyLevel_t level;
    nvmlReturn_t rc =
        ctx->nvml->DeviceGetTopologyCommonAncestor(ctx->handles[a], ctx->handles[b], &level);
    if (rc != NVML_SUCCESS) {
        log_v(2, "GPUs %zu-%zu: nvmlDeviceGetTopologyCommonAncestor failed: %s; link score 0", a, b,
              nvml_strerror(ctx->nvml, rc));
        return 0;
    }
    return pcie_score(level) + SCORE_PER_NVLINK * count_links_to(peers, inv->gpus[b].pci_bus_id);
}

/* Never fails: an unknown pair only loses its preference. */
static void load_topology(struct load_context *ctx, struct gpu_inventory *inv)
{
    char peers[NVML_NVLINK_MAX_LINKS][NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    for (size_t a = 0; a < inv->count; a++) {
        /* A lost GPU has no handle (or a dead one): its pairs stay unknown. */
        bool peers_known = !inv->gpus[a].lost && read_nvlink_peers(ctx, a, peers) == 0;
        if (!peers_known)
            log_v(2, "GPU %zu: NVLink state unknown; its link scores are 0", a);
        for (size_t b = 0; b < inv->count; b++) {
            int score = a == b ? 0 : pair_score(ctx, inv, a, b, peers, peers_known);
            inv->link_score[a * inv->count + b] = score;
        }
    }
    /* An error on either side of a pair makes the pair unknown both ways. */
    for (size_t a = 0; a < inv->count; a++)
        for (size_t b = a + 1; b < inv->count; b++)
            if (inv->link_score[a * inv->count + b] == 0 ||
                inv->link_score[b * inv->count + a] == 0)
                inv->link_score[a * inv->count + b] = inv->link_score[b * inv->count + a] = 0;
}

/* ---- public -------------------------------------------------------------------- */

static void load_driver_version(struct nvml *nvml, struct gpu_inventory *inv)
{
    if (nvml->SystemGetDriverVersion == NULL)
        return;
    nvmlReturn_t rc = nvml->SystemGetDriverVersion(inv->driver_version, sizeof inv->driver_version);
    if (rc != NVML_SUCCESS) {
        log_warn("nvmlSystemGetDriverVersion failed: %s", nvml_strerror(nvml, rc));
        inv->driver_version[0] = '\0';
    }
}

static int load_all(struct load_context *ctx, struct gpu_inventory *inv)
{
    unsigned int count;
    nvmlReturn_t rc = ctx->nvml->DeviceGetCount(&count);
    if (rc != NVML_SUCCESS) {
        snprintf(ctx->err, ctx->errlen, "%s failed: %s", ctx->nvml->symbols.DeviceGetCount,
                 nvml_strerror(ctx->nvml, rc));
        return -1;
    }
    if (load_cap_minors(ctx->paths.mig_minors_file, &ctx->caps, ctx->err, ctx->errlen) != 0)
        return -1;
    inv->gpus = calloc(count ? count : 1, sizeof *inv->gpus);
    inv->link_score = calloc(count ? (size_t)count * count : 1, sizeof *inv->link_score);
    ctx->handles = calloc(count ? count : 1, sizeof *ctx->handles);
    if (inv->gpus == NULL || inv->link_score == NULL || ctx->handles == NULL) {
        snprintf(ctx->err, ctx->errlen, "out of memory for %u GPUs", count);
        return -1;
    }
    for (unsigned i = 0; i < count; i++) {
        inv->count = i + 1; /* so that gpu_inventory_free sees partial MIG lists */
        if (load_gpu(ctx, i, &inv->gpus[i]) != 0)
            return -1;
    }
    inv->count = count;
    load_driver_version(ctx->nvml, inv);
    load_topology(ctx, inv);
    return 0;
}

int gpu_inventory_load_with_paths(struct nvml *nvml, const struct gpu_host_paths *paths,
                                  struct gpu_inventory *inv, char *err, size_t errlen)
{
    memset(inv, 0, sizeof *inv);
    struct load_context ctx = {
        .nvml = nvml,
        .paths = {DEFAULT_PCI_DEVICES_DIR, DEFAULT_MIG_MINORS_FILE},
        .err = err,
        .errlen = errlen,
    };
    if (paths != NULL && paths->pci_devices_dir != NULL)
        ctx.paths.pci_devices_dir = paths->pci_devices_dir;
    if (paths != NULL && paths->mig_minors_file != NULL)
        ctx.paths.mig_minors_file = paths->mig_minors_file;
    int rc = load_all(&ctx, inv);
    free(ctx.caps.entries);
    free(ctx.handles);
    if (rc != 0)
        gpu_inventory_free(inv);
    return rc;
}

int gpu_inventory_load(struct nvml *nvml, struct gpu_inventory *inv, char *err, size_t errlen)
{
    return gpu_inventory_load_with_paths(nvml, NULL, inv, err, errlen);
}

void gpu_inventory_free(struct gpu_inventory *inv)
{
    if (inv == NULL)
        return;
    for (size_t i = 0; inv->gpus != NULL && i < inv->count; i++)
        free(inv->gpus[i].migs);
    free(inv->gpus);
    free(inv->link_score);
    memset(inv, 0, sizeof *inv);
}

int gpu_link_score(const struct gpu_inventory *inv, size_t a, size_t b)
{
    if (a >= inv->count || b >= inv->count || inv->link_score == NULL)
        return -1;
    return inv->link_score[a * inv->count + b];
}
