/* allocate.h -- what one container of an Allocate gets, as container edits.
 *
 * Builds the edits NVIDIA's plugin answers for the same flags: CDI device
 * names, GDS/MOFED/GDRCopy switches, NVIDIA_VISIBLE_DEVICES (envvar) or
 * /dev/null mounts under /var/run/nvidia-container-devices (volume-mounts),
 * and device nodes with --pass-device-specs. Replicas map back to their
 * physical device and duplicates are dropped, so two replicas of one GPU
 * never list it twice. How the CDI names travel (annotations, the CRI
 * field) is the encoder's business (node/plugin.c for v1beta1).
 *
 * The inputs are narrowed to struct edits_options, which the caller builds
 * from its own configuration (plugin_node from gp_config); the edits'
 * strings live in their arena. */
#ifndef GP_ALLOCATE_H
#define GP_ALLOCATE_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler.h"
#include "container_edits.h"
#include "gpu.h"
#include "resource.h"

#define ALLOCATE_VOLUME_MOUNT_ROOT "/var/run/nvidia-container-devices"
#define ALLOCATE_CDI_KIND "k8s.device-plugin.nvidia.com/gpu"
/* The vendor of the GDS/MOFED/GDRCopy/IMEX CDI devices NVIDIA's plugin names. */
#define ALLOCATE_CDI_VENDOR "k8s.device-plugin.nvidia.com"
/* IMEX channel 0, which imex.channelIDs [0] hands to a container. */
#define ALLOCATE_IMEX_CHANNEL0_NODE "/dev/nvidia-caps-imex-channels/channel0"

/* How devices reach the container (--device-list-strategy, a set). */
enum edits_list_bits {
    EDITS_LIST_ENVVAR = 1u << 0,        /* NVIDIA_VISIBLE_DEVICES=<ids> */
    EDITS_LIST_VOLUME_MOUNTS = 1u << 1, /* /dev/null at the volume-mount root */
    EDITS_LIST_CDI = 1u << 2,           /* CDI device names */
};

struct edits_options {
    unsigned device_list; /* EDITS_LIST_* bits */
    bool id_by_index;     /* name devices "0" / "1:0", not by UUID */
    bool gds, mofed, gdrcopy;
    bool imex_channel;      /* IMEX channel 0 is handed out */
    bool pass_device_specs; /* device nodes in the edits */
    const char *dev_root;   /* host prefix of /dev paths; NULL = "/" */
};

/* positions: devices of res (already validated). Adds to out. Returns 0,
 * or -1 + err (allocation failure only). */
GP_MUST_USE int allocate_container(const struct edits_options *opts,
                                   const struct gpu_inventory *inv, const struct resource *res,
                                   const size_t *positions, size_t count,
                                   struct container_edits *out, char *err, size_t errlen);

#endif
