/* placement.h -- where a GPU pod goes: feasibility, GPU choice, node scores.
 *
 * The engine shared by the scheduler extender and gpupool-sim. Pure C: no
 * I/O, no logging, no threads, no allocation. Every function works on
 * caller-owned structs; nothing is kept between calls except what the caller
 * puts in a struct placement_ctx. Thread-compatible: concurrent readers of a
 * ctx/node are fine, writers (commit, release, observe) need the caller's lock.
 *
 * Units. GPU capacity is counted in integer "units" per GPU, whatever the
 * caller chooses: the extender uses GPU memory (MiB), the simulator uses
 * milli-GPU (1000 per GPU). GPUs of one node may have different totals.
 * CPU is milli-CPU; memory is in the caller's unit (sim: MiB, extender:
 * bytes). Feasibility is kube-scheduler's NodeResourcesFit rule:
 * requested + request <= allocatable, for CPU and memory, computed without
 * wrap-around (a huge request is simply infeasible).
 *
 * A request asks for gpu_count distinct GPUs with `units` on each (gpushare's
 * gpu-count N with gpu-mem M is N GPUs with M/N each), or for gpu_count
 * whole GPUs (`whole`: each must be untouched and is taken entirely), or, with
 * gpu_count == 0, for CPU and memory only.
 *
 * Cores. Each GPU also has a second capacity, compute "cores" (percent of
 * the GPU: 100 each in the extender and the simulator). A share request
 * may ask `cores` on each of its GPUs beside its units; a GPU gives a share
 * only when both fit, so the shares on a GPU never add up past its cores.
 * A request with cores == 0 ignores the dimension (a memory-only pod, best
 * effort as before); a whole GPU takes all of its cores as well as all of
 * its units. Parallel arrays rather than a struct per GPU, so that code
 * that counts only units reads what it read before.
 *
 * Policies:
 *   binpack  gpushare's best fit: the node and GPUs with the least free units
 *            that still fit.
 *   spread   the opposite: the most free units.
 *   gpupool  (default) fragmentation-aware: the placement that least
 *            increases the node's expected fragmentation against the pod mix
 *            learnt online through placement_stats_observe() (see
 *            docs/placement.md). Falls back to best fit while nothing has
 *            been observed.
 *
 * Cost: placement_fits() is O(GPUs); placement_score() is O(GPUs^2 +
 * classes * distinct free values among the node's GPUs) for gpupool (about
 * 1 us at 8 GPUs and 64 classes, bench/placement_bench.c), O(GPUs)
 * otherwise, with no allocation. */
#ifndef GP_PLACEMENT_H
#define GP_PLACEMENT_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

#define PLACEMENT_MAX_GPUS 16        /* per node */
#define PLACEMENT_MAX_MODELS 64      /* distinct GPU model names per ctx (bitmask width) */
#define PLACEMENT_MODEL_LEN 64       /* including the NUL */
#define PLACEMENT_MAX_CLASSES 64     /* distinct pod shapes the online model tracks */
#define PLACEMENT_MODEL_NONE (-1)    /* node model unknown: matches only unconstrained requests */
#define PLACEMENT_NO_FIT (-INFINITY) /* placement_score() of an infeasible node */

enum placement_policy {
    PLACEMENT_GPUPOOL = 0, /* the default */
    PLACEMENT_BINPACK,
    PLACEMENT_SPREAD,
};

/* One node. The caller fills and owns it; commit/release change only
 * cpu_requested, memory_requested and gpu_used. */
struct placement_node {
    const char *name;         /* caller-owned, may be NULL; never read */
    uint64_t cpu_allocatable; /* milli-CPU */
    uint64_t cpu_requested;   /* sum over pods already on the node */
    uint64_t memory_allocatable;
    uint64_t memory_requested;
    uint32_t gpu_count;                       /* <= PLACEMENT_MAX_GPUS */
    int32_t model;                            /* placement_model_id(), or PLACEMENT_MODEL_NONE */
    uint32_t unhealthy;                       /* bit i: GPU i takes no new pods */
    uint64_t gpu_total[PLACEMENT_MAX_GPUS];   /* units */
    uint64_t gpu_used[PLACEMENT_MAX_GPUS];    /* units; used <= total is kept by commit */
    uint32_t cores_total[PLACEMENT_MAX_GPUS]; /* cores (percent); 0: only cores-free requests fit */
    uint32_t cores_used[PLACEMENT_MAX_GPUS];  /* cores; used <= total is kept by commit */
};

struct placement_request {
    uint64_t cpu; /* milli-CPU */
    uint64_t memory;
    uint32_t gpu_count; /* 0: no GPU; N: N distinct GPUs (<= PLACEMENT_MAX_GPUS to fit) */
    bool whole;         /* each GPU untouched and taken entirely */
    uint64_t units;     /* per GPU when !whole; 0 with gpu_count > 0 never fits.
                              * whole: optional size of one GPU, read only by the
                              * workload model (CPU per unit); 0 = unknown */
    uint32_t cores;     /* per GPU when !whole (0: none asked); whole takes every core */
    uint64_t models;    /* bit m: model id m allowed; 0: any model */
};

/* The GPUs a placement takes. units[i] and cores[i] are what gpu[i] gives
 * (a whole GPU gives its totals), so release() undoes commit() exactly. */
struct placement_choice {
    uint32_t count;
    uint8_t gpu[PLACEMENT_MAX_GPUS];
    uint64_t units[PLACEMENT_MAX_GPUS];
    uint32_t cores[PLACEMENT_MAX_GPUS];
};

/* One pod shape of the online workload model. */
struct placement_class {
    uint32_t gpu_count;
    bool whole;
    uint64_t units;
    uint32_t cores;
    uint64_t models;
    double weight;  /* pods observed with this shape */
    double cpu_sum; /* their CPU and memory, summed (for inspection) */
    double memory_sum;
    uint64_t cpu_min;    /* the least CPU and the least memory one of */
    uint64_t memory_min; /* these pods asked: what a node needs to host one */
};

/* Model-name table and online workload model. Zero it with
 * placement_ctx_init(); one per cluster (the sim: per replay). */
struct placement_ctx {
    char model_names[PLACEMENT_MAX_MODELS][PLACEMENT_MODEL_LEN];
    uint32_t model_count;
    struct placement_class classes[PLACEMENT_MAX_CLASSES];
    uint32_t class_count;
    double observed; /* total weight of all classes */
    /* GPU pods with known units: their CPU, memory and units, summed. The
     * ratios say how much CPU and memory a unit of GPU brings along. */
    double gpu_pod_cpu;
    double gpu_pod_memory;
    double gpu_pod_units;
};

void placement_ctx_init(struct placement_ctx *ctx);

/* Interns a GPU model name; returns its id (0..PLACEMENT_MAX_MODELS-1), or
 * -1 when the name is empty, too long or the table is full. */
int placement_model_id(struct placement_ctx *ctx, const char *name) GP_MUST_USE;
/* The name of an id, or NULL. */
const char *placement_model_name(const struct placement_ctx *ctx, int id);
/* Adds `name` to req->models (interning it). Returns 0, or -1 as above. */
int placement_request_allow_model(struct placement_ctx *ctx, struct placement_request *req,
                                  const char *name) GP_MUST_USE;

/* Policy names: "gpupool" (also "default"), "binpack", "spread".
 * Returns 0 and sets *out, or -1 for an unknown name. */
int placement_policy_parse(const char *name, enum placement_policy *out) GP_MUST_USE;
const char *placement_policy_name(enum placement_policy policy);

/* Free units of GPU i (0 if unhealthy or out of range). */
uint64_t placement_gpu_free(const struct placement_node *node, uint32_t gpu);
/* Free cores of GPU i (0 if unhealthy or out of range). */
uint32_t placement_gpu_cores_free(const struct placement_node *node, uint32_t gpu);

/* Whether req fits on node now: CPU and memory (NodeResourcesFit), model,
 * and gpu_count distinct healthy GPUs each with `units` and `cores` free
 * (whole: each untouched in both). */
bool placement_fits(const struct placement_node *node, const struct placement_request *req);

/* Scores node for req under policy: higher is better, comparable across the
 * nodes of one request (not across requests). PLACEMENT_NO_FIT when req
 * does not fit. When `choice` is not NULL it receives the GPUs the policy
 * would take on this node (count 0 for a CPU-only request). ctx may be NULL
 * for binpack and spread; gpupool without a ctx behaves as binpack. */
double placement_score(const struct placement_ctx *ctx, enum placement_policy policy,
                       const struct placement_node *node, const struct placement_request *req,
                       struct placement_choice *choice);

/* The GPUs to take on node: placement_score()'s choice. Returns 0, or -1
 * when req does not fit. */
int placement_choose(const struct placement_ctx *ctx, enum placement_policy policy,
                     const struct placement_node *node, const struct placement_request *req,
                     struct placement_choice *choice) GP_MUST_USE;

/* Maps raw scores (PLACEMENT_NO_FIT allowed) of n nodes to integers
 * 0..max_priority for a scheduler-extender prioritize reply: best -> max,
 * worst feasible -> 0 (all equal -> max), infeasible -> 0. */
void placement_scores_to_priorities(const double *scores, size_t n, int max_priority,
                                    int *priorities);

/* Applies a placement: adds req's CPU/memory and choice's units and cores
 * to node. If anything would exceed allocatable/total, or a GPU index is out
 * of range, repeated or unhealthy, or the model is not allowed, changes
 * nothing and returns -1 with a message in err. On success choice->units
 * and choice->cores are filled in (req's, or each GPU's totals for a whole
 * request): only choice->count and choice->gpu are read. */
int placement_commit(struct placement_node *node, const struct placement_request *req,
                     struct placement_choice *choice, char *err, size_t errlen) GP_MUST_USE;

/* Undoes a commit(): subtracts req's CPU/memory and choice's units and
 * cores. If any counter would go below zero, changes nothing and returns -1
 * with err. */
int placement_release(struct placement_node *node, const struct placement_request *req,
                      const struct placement_choice *choice, char *err, size_t errlen) GP_MUST_USE;

/* Teaches the online workload model one pod (the sim calls it for every pod
 * before placing it; the extender for every pod it filters). Pods with the
 * same (gpu_count, whole, units, cores, models) form a class; when the
 * table is full a new shape joins the closest class of the same kind. */
void placement_stats_observe(struct placement_ctx *ctx, const struct placement_request *req);

#endif
