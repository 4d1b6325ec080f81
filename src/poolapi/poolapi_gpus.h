/* poolapi_gpus.h -- the node annotation gpupool.io/gpus: per-GPU memory, cores, model, health.
 *
 * Written by the device plugin in gpu-mem mode (it knows each GPU), read by
 * the extender (what it schedules on) and the CLI (what it prints):
 *   [{"index":0,"memory":16,"model":"Tesla-V100","healthy":true,"cores":100},...]
 * memory is in the node's unit (poolapi_unit.h); cores is the compute
 * capacity in percent of the GPU (POOL_RES_GPU_CORES), optional: absent,
 * as in every annotation written before cores existed, it is
 * POOL_GPU_CORES_PER_GPU. Older readers ignore the key. A reader accepts
 * the annotation only whole: a JSON array of 1..max objects, indices
 * 0..n-1 each once, memory a non-negative integer, healthy a boolean when
 * present (absent: healthy), cores an integer 0..100 when present, no
 * duplicate keys; anything else makes the caller fall back to
 * aliyun.com/gpu-count uniform GPUs (a half-read inventory is worse).
 * Any thread; no shared state. */
#ifndef GP_POOLAPI_GPUS_H
#define GP_POOLAPI_GPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "poolapi_names.h"

/* The longest model kept (NVML names, NUL included; the extender keeps
 * POOL_MODEL_LEN of it). */
#define POOL_GPUS_MODEL_LEN 96

struct poolapi_gpu {
    unsigned index;  /* reader: the position; writer: what is written */
    uint64_t memory; /* units of aliyun.com/gpu-mem */
    bool healthy;
    uint32_t cores;                  /* percent of the GPU; reader: 100 when absent */
    bool has_cores;                  /* writer: write "cores"; reader: it was there */
    bool has_model;                  /* reader: "model" was a string */
    char model[POOL_GPUS_MODEL_LEN]; /* truncated to fit */
};

/* Parses the annotation into a malloc'd array of *count GPUs in index
 * order (the caller frees *gpus). -1 with the reason in err (and *gpus
 * NULL) when malformed, when it lists more than max_gpus GPUs, or when out
 * of memory. */
int poolapi_gpus_parse(const char *text, size_t max_gpus, struct poolapi_gpu **gpus, size_t *count,
                       char *err, size_t errlen) GP_MUST_USE;

/* The annotation's value for n GPUs (compact JSON, keys in the order
 * above; "cores" only for GPUs with has_cores), malloc'd: the caller frees
 * it. NULL when out of memory. */
char *poolapi_gpus_format(const struct poolapi_gpu *gpus, size_t n);

#endif
