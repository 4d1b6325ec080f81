/* dra_prepare.h -- NodePrepareResources / NodeUnprepareResources for one
 * claim at a time: the checkpointed state machine.
 *
 * Prepare (idempotent):
 *   PrepareCompleted in the checkpoint -> the recorded devices, nothing else;
 *   else: GET the claim (through the caller's claim source), resolve its
 *   results (dra_claim.h), record PrepareStarted with the devices (synced),
 *   create the region directory and CDI spec (dra_edits.h), record
 *   PrepareCompleted (synced). Any failure rolls back what was done and
 *   drops the entry: a claim is prepared whole or not at all.
 * Unprepare (idempotent): remove the spec and the region directory (by UID,
 *   known or not), then drop the entry (synced).
 * Open: entries still PrepareStarted were interrupted (the kubelet never
 *   got their devices): rolled back and dropped.
 *
 * Threads: one caller at a time (the plugin's worker). */
#ifndef GP_DRA_PREPARE_H
#define GP_DRA_PREPARE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "compiler.h"
#include "dra_checkpoint.h"
#include "dra_devices.h"
#include "dra_edits.h"

/* Where claims come from: the API server in the program (a GET of
 * /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name>).
 * get() returns 0 with *out (the caller's reference) or -1 + err. */
struct dra_claim_source {
    int (*get)(void *ctx, const char *ns, const char *name, json_t **out, char *err, size_t errlen);
    void *ctx;
};

struct dra_preparer {
    struct dra_checkpoint cp;
    struct dra_edits_options edits;         /* strings borrowed */
    const struct dra_device_table *devices; /* borrowed */
    const char *pool;                       /* borrowed: the node name */
    struct dra_claim_source source;
    bool dirty;  /* the last write of the record failed: write it again */
    int lock_fd; /* <state-dir>/checkpoint.lock, flock'ed for the preparer's life */
};

/* Locks <state_dir> (flock on checkpoint.lock: a second plugin on the same
 * directory is refused before it reads or rolls back anything of the
 * first's), loads <state_dir>/checkpoint.json and rolls back interrupted
 * prepares.
 * A refused checkpoint is logged (and kept aside) and the preparer starts
 * empty: returns 0 then. -1 + err when out of memory, the state directory
 * cannot be created, or another process holds its lock. */
GP_MUST_USE int dra_preparer_open(struct dra_preparer *p, const char *state_dir,
                                  const struct dra_edits_options *edits,
                                  const struct dra_device_table *devices, const char *pool,
                                  const struct dra_claim_source *source, char *err, size_t errlen);
void dra_preparer_close(struct dra_preparer *p);

/* Prepares one claim; on 0 *out is its completed entry (valid until the
 * next call). -1 + err: nothing of the claim is left on the node. */
GP_MUST_USE int dra_prepare_claim(struct dra_preparer *p, const char *ns, const char *name,
                                  const char *uid, const struct dra_claim_entry **out, char *err,
                                  size_t errlen);
/* -1 + err: something could not be removed; the entry stays (the kubelet
 * asks again). */
GP_MUST_USE int dra_unprepare_claim(struct dra_preparer *p, const char *uid, char *err,
                                    size_t errlen);

#endif
