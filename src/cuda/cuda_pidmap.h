/* cuda_pidmap.h -- reading the node agent's pid maps inside the container.
 *
 * NVML names processes by host pid, which a process in a pid namespace
 * cannot learn. The node agent (observe/pid_map.c) writes into each
 * limited container's (or DRA claim's) region directory the map of its
 * processes' host pids to their pids in the container: POOL_REGION_PID_MAP,
 * a POOL_PID_MAP_HEADER line, then "<host> <inner>" lines. Used by NVML's
 * process utilization hook and by the compute sampler. Reads only; a
 * missing or damaged map gives nothing (never a neighbour's pid). */
#ifndef GP_CUDA_PIDMAP_H
#define GP_CUDA_PIDMAP_H

#include <stddef.h>

#include "cuda_config.h"
#include "poolapi_names.h"

struct cudapid_pair {
    unsigned host, inner;
};
/* The most pairs a map can hold ("1 1\n" is the shortest line). */
#define CUDAPID_MAX_PAIRS (POOL_PID_MAP_MAX / 4)

/* The pairs of every map the container was given (at most max): the one
 * beside cfg's region prefix (device plugin) and the one beside each
 * UUID's own prefix (DRA: <claims dir>/<uid>/region). */
size_t cudapid_read(const struct cudacfg *cfg, struct cudapid_pair *out, size_t max);

/* The host pid of the container's process whose pid here is inner; 0 when
 * no map names it. */
unsigned cudapid_host(const struct cudacfg *cfg, unsigned inner);

#endif
