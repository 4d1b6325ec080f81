/* pid_map.h -- keeps each limited container's map of host pids to its own
 * pids (usage_write_pid_maps) fresh, once a second, on a thread of its own.
 *
 * libgpupool-cuda reads the map to answer nvmlDeviceGetProcessUtilization
 * inside the container with the container's processes, pids as the
 * container sees them (docs/isolation.md, "What nvidia-smi shows"). The
 * driver answers with host pids, which a container cannot name itself; the
 * agent, in the host pid namespace, can. A process appears in its map at
 * most PID_MAP_INTERVAL_MS after NVML first lists it.
 *
 * Threads: one, started by pid_map_start, joined by pid_map_stop. The
 * inventory and NVML must outlive it. */
#ifndef GP_PID_MAP_H
#define GP_PID_MAP_H

#include <stddef.h>

#include "compiler.h"
#include "gpu.h"
#include "nvml.h"

#define PID_MAP_INTERVAL_MS 1000

struct pid_map;

/* Starts the thread over <isolation_dir>/<subdir> (ISOLATION_CONTAINERS_NAME
 * or ISOLATION_CLAIMS_NAME, isolation.h). -1 + err when the thread cannot be
 * made. */
GP_MUST_USE int pid_map_start(const char *isolation_dir, const char *subdir, struct nvml *nvml,
                              const struct gpu_inventory *inv, struct pid_map **out, char *err,
                              size_t errlen);

/* Stops and joins the thread, frees everything; NULL is a no-op. */
void pid_map_stop(struct pid_map *m);

#endif
