/* cuda_throttle.h -- the compute limiter's arithmetic (docs/compute.md):
 * pure functions of what was measured and of a time the caller passes in
 * (the injectable clock), so every decision is unit-tested without a GPU.
 *
 * The controller: a container may use `percent` of a GPU's time. Its
 * processes measure the GPU time their kernels took (NVML's per-process
 * utilisation, cuda_compute.c) and add it here; the shared state keeps a
 * theoretical time `tat`, pushed forward by busy * 100 / percent for every
 * measured busy ns, never left further than THROTTLE_BURST_NS behind the
 * clock. Launches go while tat <= now and wait otherwise. tat - now is the
 * integral of (measured use - allowed use): the loop closes on what the GPU
 * did, not on a guess of what a launch will cost, so grid sizes, graphs and
 * the number of processes do not change the share, and the long-run share
 * is the target up to (burst + one measurement's lag) over the period. */
#ifndef GP_CUDA_THROTTLE_H
#define GP_CUDA_THROTTLE_H

#include "cuda_abi.h"

#include <stdbool.h>
#include <stdint.h>

/* How far tat may lag the clock: how much unused share an idle container
 * keeps for a burst (at its own percent). */
#define THROTTLE_BURST_NS (20ull * 1000 * 1000)
/* The longest stretch one utilisation sample is trusted to cover. */
#define THROTTLE_SAMPLE_MAX_US (1000ull * 1000)
/* How long after a high-priority container's last sign of work the others
 * keep yielding (its launch-to-launch gaps must not hand the GPU back). */
#define THROTTLE_PRIORITY_GRACE_NS (50ull * 1000 * 1000)

/* One container's state on one GPU, shared by its processes (in a mapped
 * file): every field is read and written with atomics only, so a process
 * killed at any instant leaves nothing half-done. */
struct throttle_shared {
    uint64_t tat_ns;  /* the theoretical time (CLOCK_MONOTONIC ns) */
    uint64_t busy_ns; /* GPU time measured so far, all processes (for people) */
};

/* Adds busy_ns of measured GPU time at time now against percent (1..100). */
void throttle_account(struct throttle_shared *s, uint64_t now, uint64_t busy_ns, unsigned percent);

/* 0 when a launch may go at time now, else how many ns until it may. */
uint64_t throttle_delay(const struct throttle_shared *s, uint64_t now);

/* The GPU time, in ns, the samples (nvmlDeviceGetProcessUtilization's, n of
 * them) give process pid after *last_us: each sample's percent of the time
 * since the one before it (or *last_us), at most THROTTLE_SAMPLE_MAX_US.
 * *last_us moves to the newest sample of any process, the next lastSeen. */
uint64_t throttle_busy_from_samples(const nvmlProcessUtilizationSample_t *samples, unsigned n,
                                    unsigned pid, unsigned long long *last_us);

/* Whether a normal-priority container yields at time now, given the time
 * high-priority work was last seen on the GPU (0: never). */
bool throttle_yields(uint64_t high_seen_ns, uint64_t now);

#endif
