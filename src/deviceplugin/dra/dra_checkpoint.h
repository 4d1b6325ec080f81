/* dra_checkpoint.h -- the DRA plugin's record of prepared claims, on disk.
 *
 * One JSON file (<state-dir>/checkpoint.json) holding every claim the
 * plugin has started or finished preparing: its identity, its state and
 * the devices it was given (with their limits and CDI device IDs). It is
 * written whole (file_replace, synced) BEFORE each side effect it
 * describes, so after a crash at any instant the file names every claim
 * that may have left files behind:
 *
 *   PrepareStarted   devices decided, side effects (region directory, CDI
 *                    spec) may be partly done; the kubelet has no answer yet,
 *                    so a restart rolls it back (dra_prepare.h);
 *   PrepareCompleted everything done; a repeated prepare answers from here.
 *
 * Format: {"magic": "gpupool.io/dra-checkpoint", "version": 1, "claims": [...]}.
 * A file with another magic, another version, or that is not complete JSON
 * is refused with an error naming the file and the problem; the loader then
 * keeps it aside (<file>.bad, never deleted) so that nothing is lost, and the
 * plugin starts from an empty record (every prepared claim's files are at
 * paths derived from its UID, so unprepare still finds them).
 *
 * Ownership: a checkpoint owns its entries. Threads: one user at a time
 * (the plugin's worker thread). */
#ifndef GP_DRA_CHECKPOINT_H
#define GP_DRA_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

#define DRA_CHECKPOINT_MAGIC "gpupool.io/dra-checkpoint"
#define DRA_CHECKPOINT_VERSION 1
#define DRA_CHECKPOINT_FILE "checkpoint.json"

/* Bounds from the API's validation: a UID (36 in practice), a namespace
 * (DNS label, 63), an object name (DNS subdomain, 253), a request name
 * ("<request>/<subrequest>", 63 each), a device name (63), a pool name
 * (a node name here, 253), a CDI device ID (kind + "=" + name). */
#define DRA_UID_LEN 64
#define DRA_NS_LEN 64
#define DRA_NAME_LEN 254
#define DRA_REQUEST_LEN 128
#define DRA_DEVICE_LEN 64
#define DRA_POOL_LEN 254
#define DRA_CDI_ID_LEN 512
#define DRA_GPU_UUID_LEN 96

enum dra_claim_state {
    DRA_PREPARE_STARTED = 1,
    DRA_PREPARE_COMPLETED = 2,
};

/* One allocated device of a claim, as prepared. */
struct dra_device {
    char request[DRA_REQUEST_LEN]; /* the result's request */
    char pool[DRA_POOL_LEN];
    char device[DRA_DEVICE_LEN]; /* "gpu-0", "gpu-0-mig-1-0" */
    char share_id[DRA_UID_LEN];  /* "" when the allocation has none */
    char uuid[DRA_GPU_UUID_LEN]; /* the GPU's or MIG device's UUID */
    char cdi_id[DRA_CDI_ID_LEN]; /* "k8s.<driver>/claim=<uid>-<device>" */
    uint64_t limit;              /* bytes enforced; 0 = whole device, no limit */
    unsigned cores;              /* compute percent enforced, 1..99; 0 = no limit */
};

struct dra_claim_entry {
    char uid[DRA_UID_LEN];
    char ns[DRA_NS_LEN];
    char name[DRA_NAME_LEN];
    enum dra_claim_state state;
    size_t device_count;
    struct dra_device *devices; /* owned */
};

struct dra_checkpoint {
    char *path; /* owned */
    size_t count, cap;
    struct dra_claim_entry *entries; /* owned */
};

/* Reads path into cp (an absent file is an empty record). -1 + err when
 * the file exists but is not a checkpoint of this version: cp is then
 * empty and usable, and the file was renamed to <path>.bad (err says so).
 * -1 with cp->path NULL only when out of memory. */
GP_MUST_USE int dra_checkpoint_load(struct dra_checkpoint *cp, const char *path, char *err,
                                    size_t errlen);
/* Writes the whole record (file_replace, synced). -1 + err on failure:
 * the file on disk is the previous one. */
GP_MUST_USE int dra_checkpoint_save(const struct dra_checkpoint *cp, char *err, size_t errlen);
void dra_checkpoint_free(struct dra_checkpoint *cp);

/* The entry of uid, or NULL. */
struct dra_claim_entry *dra_checkpoint_find(struct dra_checkpoint *cp, const char *uid);
/* Replaces (or adds) the entry of e->uid with a copy of e (devices copied).
 * -1 when out of memory (cp unchanged). */
GP_MUST_USE int dra_checkpoint_put(struct dra_checkpoint *cp, const struct dra_claim_entry *e);
/* Drops the entry of uid; false when there was none. */
bool dra_checkpoint_remove(struct dra_checkpoint *cp, const char *uid);

/* Text forms used in the file: "PrepareStarted", "PrepareCompleted". */
const char *dra_claim_state_name(enum dra_claim_state s);

#endif
