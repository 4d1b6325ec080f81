/* gpu_usage.h -- what containers and processes really use on the GPUs, for
 * the node agent's /metrics (docs/metrics.md, "Used, not only booked").
 *
 * Two sources, read at scrape time:
 *   - the isolation regions, <isolation-dir>/containers/<key>/region.<uuid>
 *     (src/cuda/cuda_region.h): per container and GPU, its limit and the
 *     sum of its processes' charges. Each file is read with pread into a
 *     buffer of ours, never mapped: a container can truncate its own file,
 *     and a mapping read past the new end would kill the agent (SIGBUS).
 *     No lock of the region is taken (cudareg_peek is a pure function), so
 *     a hostile file only falsifies its own container's figures;
 *   - NVML: the compute processes of each GPU (host pids) with their
 *     memory, and their SM / memory utilization since the previous scrape.
 * A host pid is named after its container by the region slot that holds
 * its (pid namespace, pid in it) pair, else after its pod by the pod UID
 * in /proc/<pid>/cgroup; names come from the caller (the gpu-mem service's
 * pod view), NULL resolver = no names.
 *
 * Threads: the scrape thread only (the state is the caller's, not shared). */
#ifndef GP_GPU_USAGE_H
#define GP_GPU_USAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "gpu.h"
#include "nvml.h"

/* Names a pod (ordinal < 0) or its container of that Allocate ordinal:
 * true with ns, pod and container (container "" for a pod) filled, false
 * when unknown. Called on the scrape thread. */
struct usage_names {
    void *ctx;
    bool (*name)(void *ctx, const char *pod_uid, int ordinal, char *ns, size_t ns_len, char *pod,
                 size_t pod_len, char *container, size_t container_len);
};

/* Per GPU: the newest process sample seen (microseconds), so each scrape
 * asks NVML for the samples since the previous one. And the processes
 * already looked up in /proc, each held by a pidfd (pidfd_open(2)) that
 * says when it exits, so a scrape reads /proc only for processes it has not
 * seen (gpu_usage.c, "known processes"). Zeroed
 * memory is an empty state; usage_state_reset gives back what it holds. */
#define USAGE_MAX_GPUS 64
struct usage_known;
struct usage_state {
    unsigned long long last_seen_us[USAGE_MAX_GPUS];
    struct usage_known *known;
    size_t n_known, cap_known;
};

/* Closes the pidfds and frees the table; the state is empty after. */
void usage_state_reset(struct usage_state *st);

/* Writes the gpupool_container_gpu_* and gpupool_process_gpu_* families
 * (headers always, samples for what was found). isolation_dir NULL or "":
 * no region is read. skip[i] true: GPU i is not asked (lost). */
void usage_render(struct buf *f, struct usage_state *st, const char *isolation_dir,
                  struct nvml *nvml, const struct gpu_inventory *inv, const bool *skip,
                  const struct usage_names *names);

/* Writes, for every container (or claim: subdir) with a region under
 * <isolation_dir>/<subdir>, the map
 * of its GPU processes' host pids to their pids in the container
 * (<subdir>/<key>/POOL_REGION_PID_MAP, poolapi_names.h), which lets
 * libgpupool-cuda answer nvmlDeviceGetProcessUtilization inside the
 * container with its own processes only. A process is the container's when
 * its (pid namespace, pid there) pair holds a slot of one of the
 * container's regions. A file is rewritten only when its text changes;
 * st is the caller's (the pid map thread's), as for usage_render. */
void usage_write_pid_maps(struct usage_state *st, const char *isolation_dir, const char *subdir,
                          struct nvml *nvml, const struct gpu_inventory *inv, const bool *skip);

#endif
