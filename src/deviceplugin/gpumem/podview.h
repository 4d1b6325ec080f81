/* podview.h -- the API's view of the pods bound to this node (gpu-mem mode).
 *
 * A reflector thread (kube.h) lists and watches
 * /api/v1/pods?fieldSelector=spec.nodeName=<node> and keeps, per pod, only
 * what pod identity needs (struct gpumem_pod: names, UID, phase, the
 * gpu-mem limits of its containers in the kubelet's order, gpushare's
 * annotations). Deleted pods stay a while as tombstones, because the
 * kubelet may still hold a pod the API has already forgotten.
 *
 * Threads: the reflector thread writes; readers take the view's lock
 * (podview_lock) and may wait on it for the next change. Pointers returned
 * by podview_find() are valid until podview_unlock().
 * Owner: podview_start()'s caller, released by podview_stop(). */
#ifndef GP_PODVIEW_H
#define GP_PODVIEW_H

#include <stdbool.h>
#include <stddef.h>

#include "kube.h"
#include "podidentity.h"
#include "compiler.h"

struct podview;

/* Starts the reflector for pods on `node`. kc must outlive the view. */
GP_MUST_USE int podview_start(struct kube_client *kc, const char *node, struct podview **out,
                              char *err, size_t errlen);
/* Cancels the watch, joins the thread, frees everything. NULL: no-op. */
void podview_stop(struct podview *v);

void podview_lock(struct podview *v);
void podview_unlock(struct podview *v);

/* The following need the lock. */
/* The first LIST has completed. */
bool podview_synced(const struct podview *v);
/* Bumped by every change (and by podview_poke). */
unsigned long long podview_generation(const struct podview *v);
/* Waits (releasing the lock meanwhile) until the generation is no longer
 * `gen` or CLOCK_MONOTONIC reaches deadline_ms. false on timeout. */
bool podview_wait(struct podview *v, unsigned long long gen, long long deadline_ms);
/* Pod ns/name, tombstones included; NULL when unknown. */
const struct gpumem_pod *podview_find(const struct podview *v, const char *ns, const char *name);
/* The live (not deleted) pod with this UID, or NULL. */
const struct gpumem_pod *podview_find_uid(const struct podview *v, const char *uid);
/* A live (not deleted) pod with this UID exists. */
bool podview_has_uid(const struct podview *v, const char *uid);

/* Wakes the waiters (another thread has news for them). Any thread. */
void podview_poke(struct podview *v);

/* Parses one v1 Pod into *out (malloc'd strings; gpumem_pod_clear frees).
 * -1 + err only when the object is not a pod with metadata. Exposed for
 * the unit tests. */
GP_MUST_USE int gpumem_pod_parse(const json_t *pod, struct gpumem_pod *out, char *err,
                                 size_t errlen);
void gpumem_pod_clear(struct gpumem_pod *pod);


#endif
