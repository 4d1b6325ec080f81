/* dra_claim.h -- what a ResourceClaim asks of this node's driver.
 *
 * Reads a resource.k8s.io/v1 ResourceClaim (as the API server returns it)
 * and decides, for each allocation result of OUR driver in OUR pool (the
 * node), which device it is and what limit its containers get:
 *
 *   consumedCapacity.memory < the device's memory  -> shared: limit = it
 *   == the device's memory (or its whole MiBs: the
 *   slices' default), absent, or adminAccess       -> whole device: no limit
 *   consumedCapacity.cores 1..99 (percent)        -> that compute limit
 *   (absent, 0, 100 or adminAccess: none)
 *
 * then applies the claim's opaque configuration for our driver
 * (status.allocation.devices.config[].opaque with driver == ours; class
 * configuration first, the claim's own after it, later entries win):
 *
 *   apiVersion: gpupool.io/v1alpha1
 *   kind: GpuConfig
 *   memoryLimit: 6Gi    # optional: a tighter limit than the share (or a
 *                       # limit on a whole GPU); never above the share
 *
 * Any unknown field, another kind or apiVersion, an unparsable quantity, a
 * limit above what was allocated: an error naming the field, answered on
 * the claim. Results naming a device this node does not have, a lost GPU,
 * a claim whose UID is not the one the kubelet asked for, a claim that is
 * not allocated: errors too. Nothing here touches the file system.
 *
 * Pure: any thread. */
#ifndef GP_DRA_CLAIM_H
#define GP_DRA_CLAIM_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "compiler.h"
#include "dra_checkpoint.h"
#include "dra_devices.h"

/* A GpuConfig's options. */
struct dra_gpu_config {
    uint64_t memory_limit; /* bytes; 0 = unset */
};

/* Parses one opaque `parameters` object. -1 + err naming the problem. */
GP_MUST_USE int dra_config_parse(const json_t *parameters, struct dra_gpu_config *out, char *err,
                                 size_t errlen);

struct dra_claim_scope {
    const char *driver; /* our driver name */
    const char *pool;   /* our pool: the node name */
    const struct dra_device_table *devices;
};

/* Fills e from the claim: e->uid/ns/name must be set by the caller (the
 * kubelet's request); the claim's metadata.uid must equal e->uid. Sets
 * e->devices (malloc'd, the caller frees; NULL when the claim has no result
 * of ours), each with its limit, UUID and CDI device ID, and e->state
 * DRA_PREPARE_STARTED. -1 + err (e->devices NULL) on any problem. */
GP_MUST_USE int dra_claim_resolve(const json_t *claim, const struct dra_claim_scope *scope,
                                  struct dra_claim_entry *e, char *err, size_t errlen);

/* "k8s.<driver>/claim=<uid>-<device>" into out. -1 when it does not fit. */
GP_MUST_USE int dra_claim_cdi_id(const char *driver, const char *uid, const char *device, char *out,
                                 size_t len);

#endif
