/* node_usage.h -- what one node agent says is used, read from its /metrics.
 *
 * The series (docs/metrics.md, issue 26's contract), read by name; any of
 * them may be missing (an older agent, isolation off, NVML without
 * per-process data), and the views print "no data" for what is missing
 * rather than a zero:
 *   gpupool_container_gpu_memory_used_bytes{namespace,pod,container,gpu_uuid}
 *   gpupool_container_gpu_memory_limit_bytes{namespace,pod,container,gpu_uuid}
 *   gpupool_process_gpu_memory_used_bytes{namespace,pod,container,gpu_uuid,pid}
 *   gpupool_process_gpu_sm_utilization_ratio{...}
 *   gpupool_process_gpu_memory_utilization_ratio{...}
 *   gpupool_gpu_memory_used_bytes / _total_bytes{gpu_uuid|uuid,[gpu],model}
 *   gpupool_gpu_sm_utilization_ratio{gpu_uuid,model}, or the older
 *   gpupool_gpu_utilization_ratio{gpu,uuid,model}
 *   gpupool_gpu_healthy{gpu,uuid,model} (GPU index <-> UUID)
 * GPUs are matched to the pool's GPU indices by the `gpu` label that the
 * per-GPU series carry beside the UUID.
 *
 * Only sums are kept, per GPU and per (namespace, pod) -- not per
 * container or process -- so a node's record stays small whatever it
 * runs. Ownership: everything hangs off the struct and its arena;
 * node_usage_free() releases it. One record is built by one thread. */
#ifndef GP_CLI_NODE_USAGE_H
#define GP_CLI_NODE_USAGE_H

#include "arena.h"
#include "compiler.h"

#include <stdbool.h>
#include <stddef.h>

/* What a record knows: bits of `has`. */
enum {
    USAGE_MEM_USED = 1u << 0,  /* GPU: NVML used; pod: sum of its regions' use */
    USAGE_MEM_TOTAL = 1u << 1, /* GPU: NVML total */
    USAGE_MEM_LIMIT = 1u << 2, /* pod: sum of its regions' limits */
    USAGE_SM = 1u << 3,        /* SM utilization (GPU: device; pod: sum of its processes) */
    USAGE_MEM_UTIL = 1u << 4,  /* pod: memory-controller utilization, sum of processes */
    USAGE_PROC_MEM = 1u << 5,  /* pod: NVML per-process memory, summed */
};

struct usage_gpu {
    const char *uuid;
    int index; /* -1 when no series named it */
    const char *model;
    unsigned has;
    double mem_used, mem_total, sm; /* bytes, bytes, 0..1 */
};

struct usage_pod {
    const char *ns, *name;
    unsigned has;
    double mem_used, mem_limit, sm, mem_util, proc_mem;
    unsigned processes;
};

enum usage_state {
    USAGE_NOT_READ = 0, /* not asked (not in the view, or no time left) */
    USAGE_OK,
    USAGE_FAILED, /* the request failed: error says why */
};

struct node_usage {
    enum usage_state state;
    char error[200];
    double fetch_ms;
    size_t bytes; /* the answer's size */
    size_t bad_lines;
    struct arena arena;
    struct usage_gpu *gpus;
    size_t ngpus, gpus_cap;
    struct usage_pod *pods;
    size_t npods, pods_cap;
};

/* Reads a node agent's answer into u (state USAGE_OK). -1 only when out of
 * memory (u then holds what was read so far). */
int node_usage_parse(struct node_usage *u, const char *text, size_t len) GP_MUST_USE;
void node_usage_free(struct node_usage *u);

/* The record of GPU `uuid` (index -1: unknown; a known one is kept) or of
 * pod ns/name, made when new; NULL only when out of memory. For readers
 * of other sources than the text (usage_extender.h). */
struct usage_gpu *node_usage_add_gpu(struct node_usage *u, const char *uuid, int index) GP_MUST_USE;
struct usage_pod *node_usage_add_pod(struct node_usage *u, const char *ns,
                                     const char *name) GP_MUST_USE;

const struct usage_gpu *node_usage_gpu(const struct node_usage *u, int index);
const struct usage_pod *node_usage_pod(const struct node_usage *u, const char *ns,
                                       const char *name);

#endif
