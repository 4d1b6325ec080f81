/* cdi.h -- the CDI spec for the devices the plugin serves.
 *
 * With a cdi-annotations or cdi-cri device list strategy, Allocate replies
 * name CDI devices `k8s.device-plugin.nvidia.com/gpu=<id>` (allocate.h)
 * and the container runtime resolves those names through a spec file, as
 * NVIDIA's plugin writes it itself. cdi_write_spec() writes
 * <cdi-spec-dir>/k8s.device-plugin.nvidia.com-gpu.json (CDI 0.5.0):
 *
 *  - one device per served device ID (GPU/MIG UUID, or "0" / "1:0" with
 *    --device-id-strategy index), with its device nodes: /dev/nvidia<minor>,
 *    plus the MIG GI/CI access capability nodes for a MIG device;
 *  - containerEdits common to every device: /dev/nvidiactl, and
 *    /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia-modeset when they
 *    exist under the dev root; the driver libraries and binaries found
 *    under the driver root as read-only bind mounts; the nvidia-ctk hooks
 *    (create-symlinks, enable-cuda-compat, update-ldcache) unless
 *    --cdi-disable-hooks leaves them out.
 *
 * Files are looked for where the plugin sees the driver
 * (--container-driver-root, or the driver root itself when that directory
 * does not exist, i.e. the plugin runs on the host) and named in the spec
 * by their host path (--driver-root) and their path inside the container.
 *
 * The spec is put together by the vendor-neutral builder (cdi_spec.h)
 * from container edits; cdi_node_edits() and cdi_device_edits() give those
 * edits to any other spec writer (a DRA driver's per-claim specs). The
 * write is atomic (a temporary file in the same directory, renamed), so a
 * runtime never reads half a spec. */
#ifndef GP_CDI_H
#define GP_CDI_H

#include <stddef.h>

#include <stdbool.h>

#include "cdi_spec.h"
#include "compiler.h"
#include "container_edits.h"
#include "gpu.h"
#include "resource.h"

#define CDI_SPEC_FILE "k8s.device-plugin.nvidia.com-gpu.json"

/* What the spec writer reads, built by the caller from its configuration
 * (the device plugin's daemon from gp_config: --driver-root, --dev-root,
 * --container-driver-root, --nvidia-ctk-path, --cdi-disable-hooks,
 * --cdi-feature-flags, --device-id-strategy, --cdi-spec-dir). */
struct cdi_options {
    const char *driver_root;           /* the driver on the host: mounts' host paths */
    const char *dev_root;              /* device nodes' host prefix */
    const char *container_driver_root; /* where this process sees the driver, if it exists */
    const char *ctk_path;              /* nvidia-ctk, or the standalone nvidia-cdi-hook */
    bool hook_create_symlinks, hook_enable_cuda_compat, hook_update_ldcache;
    bool persistenced_socket; /* bind the persistenced socket where it exists */
    bool id_by_index;         /* devices named "0" / "1:0", not by UUID */
    const char *spec_dir;     /* where cdi_write_spec() writes */
};

/* The edits every GPU container of this node needs, added to out: the
 * control nodes, the driver's libraries and binaries (read-only mounts)
 * and the nvidia-ctk hooks, as described above (not the spec's
 * NVIDIA_VISIBLE_DEVICES=void). -1 + err when out of memory. */
GP_MUST_USE int cdi_node_edits(const struct cdi_options *opts, const struct gpu_inventory *inv,
                               struct container_edits *out, char *err, size_t errlen);

/* The device nodes of one device (resource_device_nodes(), host paths
 * under the dev root), added to out. -1 when out of memory. */
GP_MUST_USE int cdi_device_edits(const struct cdi_options *opts, const struct gpu_inventory *inv,
                                 const struct resource_device *d, struct container_edits *out);

/* Returns 0, or -1 with err naming the path and the reason. */
int cdi_write_spec(const struct cdi_options *opts, const struct gpu_inventory *inv,
                   const struct resource_set *set, char *err, size_t errlen) GP_MUST_USE;

#endif
