/* dra_slices.h -- this node's GPUs published as DRA ResourceSlices
 * (resource.k8s.io/v1) and kept true.
 *
 * What is published (docs/dra.md, "The slice format"):
 *   one pool named after the node, spec.driver = the driver name,
 *   spec.nodeName = the node, ownerReferences -> the v1 Node (its uid read
 *   with one GET), generateName "<node>-<driver>-". Devices:
 *     "gpu-<index>"               per GPU with MIG off,
 *     "gpu-<index>-mig-<gi>-<ci>" per MIG device of a GPU with MIG on (the
 *                                 whole GPU is then not offered: its
 *                                 memory belongs to the MIG devices).
 *   Attributes as NVIDIA's DRA driver names them: type ("gpu"|"mig"), uuid,
 *   productName, architecture (from the compute capability), and the
 *   versions cudaComputeCapability, driverVersion, cudaDriverVersion
 *   (semantic versions "8.0.0"; each left out when unknown), pciBusID and
 *   resource.kubernetes.io/pciBusID ("0000:3b:00.0"), index, minor; a MIG
 *   device has parentUUID, parentIndex, parentMinor and profile instead of
 *   index/minor. NVML's brand is not in the inventory and is not published.
 *   Capacity memory (bytes); a whole GPU also cores (100, percent of its
 *   compute).
 *   Consumable capacity on: every device also gets
 *   allowMultipleAllocations: true and capacity.memory.requestPolicy
 *   {default: all of it (rounded down to a MiB when it is not a whole
 *   number of MiB), validRange {min: 1Mi, step: 1Mi}}: a claim that asks
 *   for no memory consumes all of it, i.e. gets the whole device; and
 *   capacity.cores.requestPolicy {default: 0, validRange {min: 0, max: 100,
 *   step: 1}}: a memory-only share consumes no compute (docs/dra.md).
 *   Health: a GPU marked unhealthy, or lost by NVML, is left out of the
 *   pool with its MIG devices (no new claim is allocated to it; claims
 *   already on it keep their allocation) and comes back when healthy
 *   again. Leaving it out rather than tainting it works on every 1.34+
 *   cluster (device taints are beta, 1.36) and is what a scheduler of any
 *   version honours.
 *   At most max_devices_per_slice (128, the API's limit) devices per
 *   slice; more make several slices with pool.resourceSliceCount = their
 *   number. A pool with no device is one empty slice.
 *   pool.generation is bumped by every write round, so a scheduler never
 *   mixes an old slice with a new one.
 *
 * Consumable capacity detection (DRA_CONSUMABLE_AUTO): a server whose
 * DRAConsumableCapacity gate is off drops allowMultipleAllocations and
 * requestPolicy from what it stores, without an error. So the first write
 * is made with them, and the stored object the server answers with tells:
 * fields kept -> on for good; fields gone -> off for good, and the pool is
 * written again as plain whole-device slices (next generation). Until a
 * slice with a device has been written the question stays open. ON and
 * OFF skip the test.
 *
 * Keeping them true: a reflector (list + watch, fieldSelector spec.nodeName
 * and spec.driver) mirrors the driver's slices on this node; a kube_writer
 * (kube_writer.h: backoff, Warning Event about the Node after 3 failed
 * rounds) writes the desired pool whenever it changes or the mirror no
 * longer holds exactly the objects it last wrote (a kubelet restart
 * deleting them, someone editing one): existing slices are replaced (PUT,
 * guarded by their resourceVersion), missing ones created, extra ones
 * deleted. Health changes and deletions are written back at once (no
 * polling; the backoff applies only after failures).
 *
 * Threads: dra_slices_start starts two (the reflector and the writer);
 * every function below is safe from any thread. */
#ifndef GP_DRA_SLICES_H
#define GP_DRA_SLICES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "gpu.h"
#include "kube.h"

#define DRA_SLICE_MAX_DEVICES 128

enum dra_consumable {
    DRA_CONSUMABLE_AUTO, /* ask the server (above) */
    DRA_CONSUMABLE_ON,
    DRA_CONSUMABLE_OFF,
};

/* "auto" | "on" | "off" -> *out; -1 for anything else. */
GP_MUST_USE int dra_consumable_parse(const char *text, enum dra_consumable *out);

struct dra_slices_options {
    struct kube_client *client; /* borrowed: must outlive the publisher */
    const char *driver;         /* spec.driver, "gpu.gpupool.io" */
    const char *node;           /* spec.nodeName and the pool's name */
    enum dra_consumable consumable;
    /* NVML's CUDA driver version (nvmlSystemGetCudaDriverVersion, 12040 ->
     * "12.4.0"); 0: unknown, the attribute is left out. */
    int cuda_driver_version;
    size_t max_devices_per_slice; /* 0 = DRA_SLICE_MAX_DEVICES; larger is refused */
};

/* The devices (spec.devices, a JSON array) of the pool for this inventory
 * and health: healthy has inv->count entries (NULL = all healthy);
 * mig_healthy one per MIG device in inventory order (gpus[0].migs...,
 * gpus[1].migs...), or NULL. With mig_healthy, a MIG device is published
 * when it is healthy, whatever its GPU's entry says (one failed instance
 * does not take its neighbours out); without, when its GPU is. Lost GPUs
 * are never published. Pure; NULL when out of memory. */
GP_MUST_USE json_t *dra_slices_devices(const struct gpu_inventory *inv, const bool *healthy,
                                       const bool *mig_healthy, bool consumable,
                                       int cuda_driver_version);

struct dra_slices;

/* Starts publishing. inv is borrowed (must outlive the publisher and not
 * change); healthy (inv->count entries, NULL = all) is copied. The first
 * write is under way when this returns; dra_slices_wait_published waits
 * for it. -1 + err on bad options or no memory/threads. */
GP_MUST_USE int dra_slices_start(const struct dra_slices_options *opt,
                                 const struct gpu_inventory *inv, const bool *healthy,
                                 struct dra_slices **out, char *err, size_t errlen);

/* The GPUs' health changed (inv->count entries, copied): the pool is
 * rewritten at once when the set of healthy GPUs differs. Stops following
 * a node_state (below): the caller speaks for whole GPUs from here on. */
void dra_slices_health_changed(struct dra_slices *s, const bool *healthy);

struct node_state;
/* Follows the node's per-GPU state (state/node_state.h) instead: reads it
 * now and on every change (an observer of it), with each MIG device's own
 * health, and rewrites the pool. The state must outlive the publisher (or
 * dra_slices_stop, which unregisters, must come first). -1 + err when out
 * of memory or the state has no room for another observer. */
GP_MUST_USE int dra_slices_follow(struct dra_slices *s, struct node_state *state, char *err,
                                  size_t errlen);

/* Waits until the server holds the desired pool (or timeout_ms passes);
 * true when it does. */
bool dra_slices_wait_published(struct dra_slices *s, long timeout_ms);

struct dra_slices_status {
    int64_t generation;    /* of the last completed write round; 0: none yet */
    size_t slices;         /* in that round */
    size_t devices;        /* published in that round */
    bool consumable;       /* the devices carry allowMultipleAllocations */
    bool consumable_known; /* decided: by the option or by the server's answer */
    uint64_t write_rounds; /* completed rounds */
    uint64_t write_failures;
};
void dra_slices_status(struct dra_slices *s, struct dra_slices_status *out);

/* Stops both threads and frees (NULL is fine). remove: then deletes every
 * slice of the driver on this node (the uninstall path, as
 * dra_slices_remove_all); -1 + err when that failed, 0 otherwise. Without
 * remove the slices stay: a restarted plugin takes them over, and when it
 * never comes back the kubelet deletes them 30 s after the plugin's socket
 * went away. */
int dra_slices_stop(struct dra_slices *s, bool remove, char *err, size_t errlen);

/* Deletes every ResourceSlice of driver on node (LIST with the field
 * selector, then DELETE each; a 404 counts as deleted); up to 3 rounds
 * with the client's backoff while transient errors last. 0, or -1 + err. */
GP_MUST_USE int dra_slices_remove_all(struct kube_client *client, const char *driver,
                                      const char *node, char *err, size_t errlen);

#endif
