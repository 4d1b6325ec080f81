/* dra_edits.h -- what a prepared claim leaves on the node, and its removal.
 *
 * A claim's containers reach their devices through one CDI spec file,
 * <cdi-root>/k8s.<driver>-claim_<uid>.json (kind "k8s.<driver>/claim",
 * one CDI device "<uid>-<device>" per allocated device), and, when some
 * device of the claim is shared, one region directory
 * <isolation-dir>/claims/<uid> that every container of the claim mounts
 * (two containers sharing a claim share its one limit):
 *
 *   per device     its device nodes; for a limited device
 *                  CUDA_DEVICE_MEMORY_LIMIT_<UUID>=<bytes> and
 *                  CUDA_DEVICE_MEMORY_SHARED_CACHE_<UUID>=<claim dir>/region
 *                  (keyed by UUID: a container holding several claims gets
 *                  every claim's edits without two setting one variable);
 *   whole spec     the node's edits every GPU container needs (control
 *                  nodes, driver libraries, nvidia-ctk hooks: cdi_node_edits(),
 *                  computed once by the caller);
 *                  with a limited device: libgpupool-cuda and the
 *                  ld.so.preload naming it (read-only) and the claim's
 *                  region directory (read-write), at the container
 *                  contract's paths (poolapi_names.h).
 *
 * A whole-device claim gets its device nodes and the node's edits only: no
 * library, no limit. The spec is built with container_edits and written by
 * cdi_spec (devices/).
 * Every path derives from the claim UID, so removal needs nothing but the
 * UID (a claim unknown to a lost checkpoint is still cleaned up).
 * Writes are atomic (file_replace); creation and removal are idempotent.
 *
 * Threads: none of its own; one caller at a time per claim. */
#ifndef GP_DRA_EDITS_H
#define GP_DRA_EDITS_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler.h"
#include "container_edits.h"
#include "dra_checkpoint.h"
#include "dra_devices.h"


struct dra_edits_options {
    const char *driver;
    const char *cdi_root;      /* where the runtime reads CDI specs */
    const char *isolation_dir; /* NULL or "": no memory limits on this node */
    const char *dev_root;      /* the host's /dev root, for hostPath ("/" normally) */
    const struct container_edits *node_edits; /* every claim's common edits; NULL: none */
};

/* The spec file of claim uid into out. -1 when it does not fit. */
GP_MUST_USE int dra_edits_spec_path(const struct dra_edits_options *o, const char *uid, char *out,
                                    size_t len);

/* Creates the region directory (when a device is limited) and writes the
 * spec of e. -1 + err; a limited device on a node without isolation is
 * refused before anything is written. */
GP_MUST_USE int dra_edits_apply(const struct dra_edits_options *o, const struct dra_claim_entry *e,
                                const struct dra_device_table *t, char *err, size_t errlen);

/* Removes the spec file and the region directory of uid; absent ones are
 * fine. -1 + err when one of them is still there. */
GP_MUST_USE int dra_edits_remove(const struct dra_edits_options *o, const char *uid, char *err,
                                 size_t errlen);

/* A UID is used in paths: [A-Za-z0-9-] only, 1..63 bytes. */
bool dra_edits_uid_ok(const char *uid);

#endif
