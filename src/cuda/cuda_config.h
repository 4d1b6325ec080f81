/* cuda_config.h -- what libgpupool-cuda enforces, read from the container's
 * environment once per process (docs/isolation.md has the variables; their
 * names are the container contract's, poolapi_names.h).
 *
 * Pure: no I/O beyond reading the array it is given, no allocation, no
 * locks. Used by the library's constructor and by the tests and fuzz target
 * with environments of their own. */
#ifndef GP_CUDA_CONFIG_H
#define GP_CUDA_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "poolapi_names.h"

/* GPUs of one process the library tracks: the contract's maximum. */
#define CUDACFG_MAX_DEVICES POOL_MAX_CONTAINER_GPUS
/* The region prefix when CUDA_DEVICE_MEMORY_SHARED_CACHE is unset (the
 * library used outside the device plugin). */
#define CUDACFG_DEFAULT_PREFIX "/tmp/gpupool-cuda"
/* CUDA_VISIBLE_DEVICES entry that is not a container ordinal: a GPU UUID, a
 * MIG name, or anything else the library does not resolve. */
#define CUDACFG_VISIBLE_BY_NAME (-1)

enum cudacfg_state {
    CUDACFG_OFF,    /* no limit variable at all: pure pass-through */
    CUDACFG_ON,     /* limits to enforce */
    CUDACFG_BROKEN, /* a limit was asked for but cannot be understood: refuse CUDA */
};

/* A device UUID as a limit variable names it: "GPU-..." / "MIG-..." + NUL
 * (NVML_DEVICE_UUID_V2_BUFFER_SIZE), and the region prefix of that device. */
#define CUDACFG_UUID_LEN 96
#define CUDACFG_UUID_PREFIX_LEN 256

/* CUDA_DEVICE_MEMORY_LIMIT_<UUID> and CUDA_DEVICE_MEMORY_SHARED_CACHE_<UUID>:
 * the DRA driver's form (a container may hold several claims, whose
 * devices it numbers in an order nobody knows in advance). */
struct cudacfg_uuid {
    char uuid[CUDACFG_UUID_LEN];
    int64_t limit;                        /* -1 unset (only a prefix was given) */
    int sm;                               /* CUDA_DEVICE_SM_LIMIT_<UUID>: -1 unset */
    char prefix[CUDACFG_UUID_PREFIX_LEN]; /* "" unset: cudacfg.prefix */
};

struct cudacfg {
    enum cudacfg_state state;
    int64_t all;                      /* CUDA_DEVICE_MEMORY_LIMIT; -1 unset, 0 none */
    int64_t dev[CUDACFG_MAX_DEVICES]; /* CUDA_DEVICE_MEMORY_LIMIT_<i>; -1 unset */
    uint64_t share_units, share_of;   /* gpushare's CONTAINER / DEV, share_of 0: unset */
    /* CUDA_VISIBLE_DEVICES: this process's CUDA ordinal k is the container's
     * ordinal visible[k] (or CUDACFG_VISIBLE_BY_NAME) for k < visible_count;
     * visible_count -1 when unset (the two numberings are the same). */
    int visible_count;
    int visible[CUDACFG_MAX_DEVICES];
    /* Compute (docs/compute.md): CUDA_DEVICE_SM_LIMIT[_<i>] in percent, -1
     * unset; CUDA_TASK_PRIORITY (-1 unset); GPUPOOL_PRIORITY_DIR ("" unset).
     * compute: any of them asks the launch path to do something. */
    int sm_all;
    int sm_dev[CUDACFG_MAX_DEVICES];
    int priority;
    bool compute;
    char priority_dir[1024];
    char prefix[1024]; /* CUDA_DEVICE_MEMORY_SHARED_CACHE */
    int uuid_count;
    struct cudacfg_uuid by_uuid[CUDACFG_MAX_DEVICES];
    char why[320]; /* when BROKEN: the one message for stderr */
};

/* Parses "1073741824", "1g", "1024m", "1048576k", "2t" (1024-based, either
 * case, an optional "i" and/or "b" after the letter: "1GiB") into bytes.
 * 0 on success, -1 on anything else (empty, sign, junk, overflow). */
int cudacfg_parse_size(const char *s, int64_t *bytes);

/* Reads the limit variables and CUDA_VISIBLE_DEVICES from env
 * (NULL-terminated "NAME=value" strings, like environ; NULL means none).
 * Never fails: a bad value, or a name of the limit family that does not end
 * in an ordinal 0..63, makes the state CUDACFG_BROKEN with the reason in
 * why. */
void cudacfg_load(struct cudacfg *cfg, char *const *env);

/* The limit of the device with this UUID when a variable names it by UUID
 * (> 0 bytes, or 0 for an explicit "no limit"), else -1: the ordinal forms
 * decide. UUIDs match on their hex part, so NVML's "MIG-<hex>" and the
 * "GPU-<hex>" the library prints from cuDeviceGetUuid are one device. */
int64_t cudacfg_uuid_limit(const struct cudacfg *cfg, const char *uuid);

/* The region path prefix of the device with this UUID: its
 * CUDA_DEVICE_MEMORY_SHARED_CACHE_<UUID>, else the container's prefix. */
const char *cudacfg_region_prefix(const struct cudacfg *cfg, const char *uuid);

/* The limit of the GPU the CONTAINER numbers `ordinal` (the index the limit
 * variables use; NVML's index inside the container), whose memory is
 * device_total bytes: > 0 bytes to enforce, 0 for none. A per-device
 * variable wins over the all-devices one, which wins over gpushare's
 * share. */
int64_t cudacfg_container_limit(const struct cudacfg *cfg, int ordinal, int64_t device_total);

/* The limit of this PROCESS's CUDA ordinal `ordinal` (what the driver API
 * numbers, after CUDA_VISIBLE_DEVICES): without CUDA_VISIBLE_DEVICES the
 * container's limit of the same ordinal; with it, the container's limit of
 * the ordinal its entry names; for an entry that names no ordinal (a UUID,
 * a MIG name, junk) or an ordinal past the list, the smallest limit any
 * container ordinal gets (conservative; exact when all are equal, as the
 * plugin writes them). */
int64_t cudacfg_limit(const struct cudacfg *cfg, int ordinal, int64_t device_total);

/* The compute limit of this PROCESS's CUDA ordinal, in percent: 1..99 to
 * enforce, 0 for none (unset, 0 or 100). CUDA_VISIBLE_DEVICES is undone as
 * for memory (cudacfg_limit), an entry naming no ordinal getting the
 * smallest limit of any container ordinal. */
int cudacfg_sm_limit(const struct cudacfg *cfg, int ordinal);

/* The compute limit of the device with this UUID when
 * CUDA_DEVICE_SM_LIMIT_<UUID> (the DRA driver's form) names it: 1..99 to
 * enforce, 0 for none (0 or 100); -1 when no variable names it and the
 * ordinal forms decide. UUIDs match as for cudacfg_uuid_limit. */
int cudacfg_uuid_sm_limit(const struct cudacfg *cfg, const char *uuid);

/* Whether this container is high priority (CUDA_TASK_PRIORITY 0). */
bool cudacfg_high_priority(const struct cudacfg *cfg);

#endif
