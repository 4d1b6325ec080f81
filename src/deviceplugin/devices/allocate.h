/* allocate.h -- the Allocate response for one container.
 *
 * Builds what NVIDIA's plugin answers for the same flags: CDI annotations
 * and/or CDI devices, GDS/MOFED/GDRCopy switches, NVIDIA_VISIBLE_DEVICES
 * (envvar) or /dev/null mounts under /var/run/nvidia-container-devices
 * (volume-mounts), and device specs with --pass-device-specs. Replicas map
 * back to their physical device and duplicates are dropped, so two replicas
 * of one GPU never list it twice.
 *
 * Every string and array of the response lives in the caller's arena. */
#ifndef GP_ALLOCATE_H
#define GP_ALLOCATE_H

#include <stddef.h>

#include "api.pb-c.h"
#include "arena.h"
#include "config.h"
#include "gpu.h"
#include "resource.h"
#include "compiler.h"

#define ALLOCATE_VOLUME_MOUNT_ROOT "/var/run/nvidia-container-devices"
#define ALLOCATE_CDI_KIND "k8s.device-plugin.nvidia.com/gpu"

/* positions: devices of res (already validated). Returns 0, or -1 + err
 * (allocation failure only). */
GP_MUST_USE int allocate_container(struct arena *a, const struct gp_config *cfg,
                                   const struct gpu_inventory *inv, const struct resource *res,
                                   const size_t *positions, size_t count,
                                   V1beta1__ContainerAllocateResponse *out, char *err,
                                   size_t errlen);

#endif
