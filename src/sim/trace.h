/* trace.h -- the openb GPU trace (Alibaba cluster-trace-gpu-v2023) in memory.
 *
 * Node list: `sn,cpu_milli,memory_mib,gpu,model`; every GPU counts 1000
 * milli-GPU. Pod lists: the 11-column files
 * (`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,...`) and the
 * 5-column multigpu file (`name,cpu_milli,memory_mib,num_gpu,gpu_milli`).
 * A pod becomes a placement request:
 *   num_gpu == 0                   CPU and memory only
 *   num_gpu == 1, gpu_milli < 1000 a share of one GPU (gpu_milli units)
 *   num_gpu == 1, gpu_milli = 1000 one whole GPU
 *   num_gpu  > 1                   num_gpu whole GPUs
 * gpu_spec `A|B` allows only those GPU models. GPU demand, the replay's
 * yardstick, is num_gpu * 1000 for whole GPUs and gpu_milli for shares.
 *
 * Cores, the engine's second per-GPU dimension: every GPU has 100, and a
 * share asks ceil(gpu_milli / 10) of them -- gpu_milli is the trace's only
 * GPU quantity and a compute fraction (FGD), so on openb both dimensions
 * carry it (SIM_CORES_MILLI, what the loaders set). sim_trace_set_cores()
 * can drop them (SIM_CORES_OFF: the one-dimensional replay) or decouple
 * them from the units (SIM_CORES_SKEW: each share's cores are its
 * gpu_milli / 10 times a factor in [0.5, 1.5) fixed per pod row, so that
 * some pods are short of cores and others of units, as pods whose memory
 * and compute shares differ are).
 *
 * The trace owns everything it points to; sim_trace_free() releases it.
 * Errors are reported as `file:line: what`. */
#ifndef GP_SIM_TRACE_H
#define GP_SIM_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "placement.h"
#include "compiler.h"

#define SIM_MILLI_PER_GPU 1000
#define SIM_CORES_PER_GPU 100

struct sim_pod {
    struct placement_request req;
    uint64_t demand_milli; /* GPU demand, see above */
};

struct sim_trace {
    struct placement_node *nodes; /* as loaded: nothing requested or used */
    char **node_names;            /* nodes[i].name points here */
    size_t node_count;
    struct sim_pod *pods;
    size_t pod_count;
    struct placement_ctx models; /* model names interned by the loaders; no stats */
};

void sim_trace_init(struct sim_trace *trace);
void sim_trace_free(struct sim_trace *trace);

/* Load a node list / pod list into trace (load nodes first so that node
 * models get the low ids; either order works). Returns 0, or -1 with
 * `path:line: what` in err (the trace keeps what it had before the call). */
int sim_load_nodes(struct sim_trace *trace, const char *path, char *err, size_t errlen) GP_MUST_USE;
int sim_load_pods(struct sim_trace *trace, const char *path, char *err, size_t errlen) GP_MUST_USE;

/* Sum of every node's GPU capacity, milli-GPU. */
uint64_t sim_trace_capacity_milli(const struct sim_trace *trace);

enum sim_cores {
    SIM_CORES_MILLI = 0, /* cores = ceil(gpu_milli / 10): the default */
    SIM_CORES_OFF,       /* no share asks cores */
    SIM_CORES_SKEW,      /* cores decoupled from units, see above */
};

/* Sets every share pod's cores by `mode` (whole GPUs take all cores
 * whatever the mode). Deterministic: the skew factor depends only on the
 * pod's row. */
void sim_trace_set_cores(struct sim_trace *trace, enum sim_cores mode);

#endif
