/* gpu_internal.h -- the inventory load with its host files named, for
 * gpu.c and its unit test (test/unit/nvml/test_gpu.c) only. Programs use
 * gpu_inventory_load() (gpu.h), which reads the real host files. */
#ifndef GP_GPU_INTERNAL_H
#define GP_GPU_INTERNAL_H

#include "gpu.h"

/* Host files read besides NVML; NULL members mean the defaults
 * (/sys/bus/pci/devices and /proc/driver/nvidia-caps/mig-minors). The
 * unit test points them at fixtures. */
struct gpu_host_paths {
    const char *pci_devices_dir;
    const char *mig_minors_file;
};

/* gpu_inventory_load() with those files; same result and errors. */
GP_MUST_USE int gpu_inventory_load_with_paths(struct nvml *nvml, const struct gpu_host_paths *paths,
                                              struct gpu_inventory *inv, char *err, size_t errlen);

#endif
