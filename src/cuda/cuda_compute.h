/* cuda_compute.h -- the compute limit and priority on the launch path
 * (docs/compute.md): before a launch, a process of a limited container
 * waits while its container is over its share of the GPU (cuda_throttle.h)
 * or while a high-priority container uses the GPU; a sampler thread per
 * process measures the GPU time of the process's kernels (NVML's
 * per-process utilisation) and adds it to the container's shared state.
 *
 * Threads: safe from any thread; per-device state is decided once under a
 * lock and read without it. */
#ifndef GP_CUDA_COMPUTE_H
#define GP_CUDA_COMPUTE_H

#include "cuda_abi.h"

#include <stdbool.h>

/* True when any compute variable is set (read once, at load): without one,
 * a launch wrapper is a straight call to the driver. */
extern bool cuda_compute_on;

/* The slow path: waits until the calling thread's current device may take
 * a launch from this container into stream s. A launch into a stream that
 * is being captured never waits: it runs nothing (the graph's launch is
 * gated), and capture of large graphs (frameworks capture thousands of
 * kernels at start-up) must not crawl at the container's share. */
void cuda_compute_before_launch(CUstream s);

/* Where every launch wrapper starts: one predictable branch when off. */
#define COMPUTE_GATE(s)                           \
    do {                                          \
        if (__builtin_expect(cuda_compute_on, 0)) \
            cuda_compute_before_launch(s);        \
    } while (0)

#endif
