/* isolation.h -- hands containers the memory-limit library (libgpupool-cuda).
 *
 * With --isolation=memory the plugin installs libgpupool-cuda.so and an
 * ld.so.preload file naming it into --isolation-dir at start, creates one
 * region directory per container at Allocate, adds the three mounts and the
 * limit variables of the issue 15 contract to the container's edits, and
 * removes the directories of containers that are gone. The layout under
 * <dir>: libgpupool-cuda.so, ld.so.preload, priority/, containers/<key>, and
 * claims/<claim-uid> for a DRA driver's claims. Keys are
 * "<pod-uid>_<n>" in gpu-mem mode (n = the container's Allocate ordinal in
 * its pod) and "ts_<first replica ID, sanitized>" for time-sliced replicas.
 *
 * Threads: none of its own; install on the main thread before serving, the
 * rest on whichever thread answers Allocate (no shared state: every call
 * works on the file system). Errors: -1 + err naming the path and errno.
 * Removal never follows a symlink: a container can write anything into its
 * directory. Design: docs/gpumem.md ("Memory limits"). */
#ifndef GP_ISOLATION_H
#define GP_ISOLATION_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "container_edits.h"
#include "gpu.h"
#include "resource.h"
#include "compiler.h"
#include "poolapi_names.h"

/* The layout under --isolation-dir on the host. Where a container sees
 * these files, and the variables naming them, are the container contract's
 * (poolapi_names.h: POOL_CONTAINER_*, POOL_ENV_MEM_LIMIT_PREFIX,
 * POOL_ENV_SHARED_CACHE, POOL_MAX_CONTAINER_GPUS). */
#define ISOLATION_LIBRARY_NAME "libgpupool-cuda.so"
#define ISOLATION_PRELOAD_NAME "ld.so.preload"
#define ISOLATION_CONTAINERS_NAME "containers"
#define ISOLATION_CLAIMS_NAME "claims"
/* The node's priority directory (POOL_ENV_PRIORITY_DIR): one per node,
 * under --isolation-dir so that one flag places everything the plugin
 * hands containers. */
#define ISOLATION_PRIORITY_NAME "priority"
#define ISOLATION_KEY_LEN 160
#define ISOLATION_TS_PREFIX "ts_"

/* True when this configuration gives some container a limit: memory
 * isolation in gpu-mem mode, or a time-slicing entry with memoryLimit. */
bool isolation_active(const struct gp_config *cfg);

/* Copies cfg->isolation_library to <dir>/libgpupool-cuda.so and writes
 * <dir>/ld.so.preload, each through a temporary file and rename(2) (no
 * half file is ever visible), leaving a file whose content is already
 * identical untouched (running containers keep a valid mapping); creates
 * <dir>, <dir>/containers and <dir>/priority (mode 0777 like a region
 * directory: containers of every user write there). -1 + err when the library cannot be read or
 * the directory cannot be prepared. */
GP_MUST_USE int isolation_install(const struct gp_config *cfg, char *err, size_t errlen);

/* The key of gpu-mem container n of pod uid into out. -1 when the UID has
 * characters other than [A-Za-z0-9-] (never a path) or is too long. */
GP_MUST_USE int isolation_pod_key(const char *uid, unsigned n, char *out, size_t len);
/* The key of a time-sliced container from its first replica device ID:
 * "ts_" + the ID with every byte outside [A-Za-z0-9.-] replaced by '_'
 * ("GPU-1::2" -> "ts_GPU-1__2"). -1 when it does not fit. */
GP_MUST_USE int isolation_replica_key(const char *device_id, char *out, size_t len);

/* Creates <dir>/containers/<key> (an existing directory is reused) with
 * mode 0777 whatever the umask (non-root containers create their region
 * files there); its host path into path. */
GP_MUST_USE int isolation_container_dir(const char *dir, const char *key, char *path,
                                        size_t pathlen, char *err, size_t errlen);

/* A DRA claim's region directory: <dir>/claims/<claim_uid> (claims/
 * created if missing; the claim's directory as isolation_container_dir
 * makes it: reused, mode 0777, a symlink refused), its host path into
 * path. Every container of the claim mounts the same one, so the claim's
 * share is one limit across them. -1 + err when the UID has characters
 * other than [A-Za-z0-9-] (never a path) or on a file system error. */
GP_MUST_USE int isolation_claim_dir(const char *dir, const char *claim_uid, char *path,
                                    size_t pathlen, char *err, size_t errlen);
/* Removes <dir>/claims/<claim_uid> and everything in it, never following a
 * symlink; one already gone is not an error. -1 + err otherwise. */
GP_MUST_USE int isolation_remove_claim_dir(const char *dir, const char *claim_uid, char *err,
                                           size_t errlen);

/* Limit of each of a container's gpu_count GPUs: bytes split evenly,
 * floor (the contract's rule). 0 when gpu_count is 0. */
unsigned long long isolation_share(unsigned long long bytes, size_t gpu_count);

/* Time-slicing with sharing.timeSlicing.memoryLimit: the limit of each
 * physical device of a container holding the replicas positions[0..count)
 * of res, in the order the reply lists devices (first occurrence): the
 * device's memory (GPU or MIG) / its replica count in res x the replicas
 * of it the container holds. A device that is not a replica gets 0 (no
 * limit). Returns the number of devices (at most max). */
size_t isolation_replica_limits(const struct gpu_inventory *inv, const struct resource *res,
                                const size_t *positions, size_t count, unsigned long long *limits,
                                size_t max);

/* The edits of a memory limit, added to out: the three mounts (<dir>'s
 * library and preload file read-only, the region directory host_dir
 * read-write, at the POOL_CONTAINER_* paths) and the env
 * CUDA_DEVICE_MEMORY_LIMIT_<i>=limits[i] (decimal bytes; i the GPU's
 * ordinal in the container) for i < n plus
 * CUDA_DEVICE_MEMORY_SHARED_CACHE=POOL_CONTAINER_REGION_PREFIX. dir is the
 * host's --isolation-dir (isolation_install), host_dir a region directory
 * (isolation_container_dir, or any directory the caller keys its own
 * way, e.g. one per DRA claim). -1 + err: n > POOL_MAX_CONTAINER_GPUS
 * (out untouched) or out of memory. */
GP_MUST_USE int isolation_add_edits(const char *dir, const char *host_dir,
                                    const unsigned long long *limits, size_t n,
                                    struct container_edits *out, char *err, size_t errlen);

/* The priority edits of a gpu-mem container, added to out: <dir>/priority
 * mounted read-write at POOL_CONTAINER_PRIORITY_DIR, POOL_ENV_PRIORITY_DIR
 * naming it, and POOL_ENV_TASK_PRIORITY=0 when high (normal is the
 * library's default, so nothing is set for it). dir is the host's
 * --isolation-dir. -1 + err: path too long or out of memory. */
GP_MUST_USE int isolation_add_priority_edits(const char *dir, bool high,
                                             struct container_edits *out, char *err, size_t errlen);

/* Removes <dir>/containers/<uid>_<n> for every pod UID for which
 * keep(ctx, uid) is false; other names are left alone. Recursive, never
 * following a symlink. Returns the number of directories removed; failures
 * are logged and retried on the next call. */
size_t isolation_prune_pods(const char *dir, bool (*keep)(void *ctx, const char *uid), void *ctx);

/* Removes the tree `name` under the open directory dirfd without following
 * symlinks (a symlink is unlinked, never entered). 0, or -1 with errno. */
GP_MUST_USE int isolation_remove_tree(int dirfd, const char *name);

#endif
