/* cuda_region.h -- one container's use of one GPU, shared by all its
 * processes through a small mapped file (docs/isolation.md, "The region").
 *
 * The file holds the limit, the total charged, and one slot per process
 * with what that process holds. Every change happens under one robust,
 * process-shared mutex: a process killed inside it (SIGKILL included) leaves
 * the mutex to the next locker with EOWNERDEAD, which recomputes the total
 * from the slots, so nothing is ever wedged or lost. A dead process's slot is
 * reclaimed as soon as someone would be refused for lack of memory, and by
 * every report (cudareg_usage).
 *
 * Threads: every function is safe from any thread of any process that has
 * the region mapped. A struct cudareg belongs to the process that attached
 * it (shared by its threads and inherited by fork, see cudareg_after_fork). */
#ifndef GP_CUDA_REGION_H
#define GP_CUDA_REGION_H

#include <stddef.h>
#include <stdint.h>

#define CUDAREG_SLOTS 1024

struct cudareg;

/* Maps the region at path, creating it with `limit` bytes when it does not
 * exist (0666, so every user of the container can share it); an existing
 * region keeps the limit it was created with. NULL with a reason in err when
 * the file cannot be created or mapped, or is not a region of this version. */
struct cudareg *cudareg_attach(const char *path, int64_t limit, char *err, size_t errlen);

/* Unmaps the region after giving back whatever this process still holds in
 * it (the process is exiting or no longer uses the GPU). NULL is a no-op. */
void cudareg_detach(struct cudareg *r);

/* The limit stored in the region, in bytes. */
int64_t cudareg_limit(const struct cudareg *r);

/* Charges bytes to this process if the container stays within the limit.
 * 0: charged. 1: it would exceed the limit (nothing charged). -1: this
 * process cannot get a slot (all CUDAREG_SLOTS held by live processes). */
int cudareg_reserve(struct cudareg *r, int64_t bytes);

/* Gives back bytes this process charged earlier. */
void cudareg_release(struct cudareg *r, int64_t bytes);

/* The container's use in bytes, after reclaiming dead processes' slots. */
int64_t cudareg_usage(struct cudareg *r);

/* In a forked child: the child holds nothing yet and needs its own slot. */
void cudareg_after_fork(struct cudareg *r);

/* The size of the mapping in bytes (fixed by the layout version). */
size_t cudareg_file_size(void);

#endif
