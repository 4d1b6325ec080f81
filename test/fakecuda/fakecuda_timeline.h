/* fakecuda_timeline.h -- the simulated device timeline that FAKECUDA_TIMELINE
 * names: one GPU's execution shared by every process using the fake driver
 * (README.md, "Device timeline").
 *
 * Model: the device runs one kernel at a time, first come first served
 * across processes, as a time-sliced GPU does between contexts. A launch
 * reserves the next free stretch of the device for its duration (after the
 * process's own earlier work: one stream per process) and returns at once;
 * a process with more than FAKECUDA_QUEUE kernels not yet finished waits
 * before its launch is accepted (the driver's bounded push buffer); a
 * synchronize waits for the process's last kernel to end. Times are
 * CLOCK_MONOTONIC nanoseconds, so every process reads the same clock.
 *
 * Processes are recorded by the pid the host knows them by (NSpid's first
 * field), as the real driver reports them. What is recorded per process:
 * the device time its kernels took (busy),
 * the time its kernels waited for other processes' kernels (wait), the
 * number of kernels, and its last FC_TL_RING kernel stretches, from which
 * the busy time within any recent window is exact (fake NVML's per-process
 * utilisation, the tool's "busy until now").
 *
 * Sharing: an open-file-description write lock on byte 0 guards every
 * update, so a process killed at any point leaves the file consistent and
 * nobody waiting (the kernel drops the lock with the process). */
#ifndef GP_FAKECUDA_TIMELINE_H
#define GP_FAKECUDA_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FC_TL_MAGIC 0x4c544346u /* "FCTL" */
#define FC_TL_VERSION 1u
#define FC_TL_PROCS 64
#define FC_TL_RING 2048
#define FC_TL_UUID 48

struct fc_tl_span {
    uint64_t start, end;
};

struct fc_tl_proc {
    int32_t pid; /* 0: free */
    uint32_t pad;
    uint64_t busy_ns; /* device time of every kernel reserved (some may lie ahead) */
    uint64_t wait_ns; /* time its kernels waited behind other processes' */
    uint64_t kernels; /* kernels reserved */
    uint64_t tail_ns; /* end of its last kernel */
    uint64_t head;    /* spans written; the newest is ring[(head - 1) % FC_TL_RING] */
    struct fc_tl_span ring[FC_TL_RING];
};

struct fc_tl_file {
    uint32_t magic, version;
    uint32_t size, nprocs;
    uint64_t free_at;      /* end of the last kernel reserved on the device */
    char uuid[FC_TL_UUID]; /* the device it models (first launcher's); "" any */
    struct fc_tl_proc procs[FC_TL_PROCS];
};

struct fc_tl {
    struct fc_tl_file *f; /* NULL: no timeline */
    int fd;
    uint64_t kernel_ns; /* FAKECUDA_KERNEL_US */
    uint64_t grid_ref;  /* FAKECUDA_KERNEL_GRID: blocks of one kernel_ns (0: fixed) */
    unsigned queue;     /* FAKECUDA_QUEUE */
};

/* CLOCK_MONOTONIC in ns. */
uint64_t fc_tl_now(void);

/* Maps the file at path (created, zeroed, when absent or empty). 0, or -1
 * with a message in why. */
int fc_tl_open(struct fc_tl *tl, const char *path, char *why, size_t whylen);

/* The duration of a kernel of `blocks` blocks. */
uint64_t fc_tl_kernel_ns(const struct fc_tl *tl, uint64_t blocks);

/* Reserves the device for `kernels` kernels taking dur_ns in all, back to
 * back (a graph's kernel nodes), for the calling process; waits first while
 * the process has FAKECUDA_QUEUE kernels or more not yet finished. uuid
 * names the device (the first launcher's is kept). */
void fc_tl_launch(struct fc_tl *tl, const char *uuid, uint64_t kernels, uint64_t dur_ns);

/* Waits until the calling process's last kernel has ended. */
void fc_tl_sync(struct fc_tl *tl);

/* The device time process rec's kernels ran within [from, to): exact as
 * long as the window lies within its last FC_TL_RING kernels. Unlocked
 * readers see a consistent-enough copy: spans are written before head. */
uint64_t fc_tl_busy_within(const struct fc_tl_proc *rec, uint64_t from, uint64_t to);

/* The record of pid, or NULL. */
const struct fc_tl_proc *fc_tl_find(const struct fc_tl_file *f, int32_t pid);

#endif
