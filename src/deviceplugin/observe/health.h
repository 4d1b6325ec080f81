/* health.h -- XID health checking with recovery.
 *
 * A thread waits on one NVML event set (XID critical errors, plus ECC
 * events where supported, which are logged and otherwise ignored). A
 * critical XID makes the physical GPU -- with every replica and MIG device
 * carved from it -- Unhealthy at once (a XID the driver attributes to one
 * GPU/compute instance only affects that MIG device, or the whole GPU
 * where it is served whole). Unlike NVIDIA's plugin, a device recovers:
 * while Unhealthy it is probed through NVML every probe interval (found by
 * UUID, same UUID back, memory readable, no row remap or page retirement
 * pending), and after `recovery_probes` consecutive good answers it is
 * Healthy again. A GPU that fell off the bus (XID 79 or
 * NVML_ERROR_GPU_IS_LOST) stays Unhealthy until the plugin is restarted or
 * reloaded, and Allocate refuses its devices (node_state_set_gpu_lost).
 * Everything it finds is written to the node's GPU state (node_state.h),
 * whose observers (the DevicePlugin node, ...) advertise it.
 *
 * Which XIDs count follows NVIDIA's plugin: 13, 31, 43, 45, 68 and 109 are
 * application errors and ignored; DP_DISABLE_HEALTHCHECKS (`all`, `xids`
 * or a list) adds to that or disables checking; DP_ENABLE_HEALTHCHECKS
 * (`all` or a list) forces XIDs back on. */
#ifndef GP_HEALTH_H
#define GP_HEALTH_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "gpu.h"
#include "nvml.h"
#include "node_state.h"
#include "compiler.h"

#define HEALTH_MAX_XIDS 64
#define HEALTH_XID_GPU_LOST 79

struct health_policy {
    bool disabled;   /* DP_DISABLE_HEALTHCHECKS=all|xids */
    bool enable_all; /* DP_ENABLE_HEALTHCHECKS=all */
    size_t ignored_count, enabled_count;
    unsigned long long ignored[HEALTH_MAX_XIDS];
    unsigned long long enabled[HEALTH_MAX_XIDS];
};

/* Parses the two variables (NULL = unset). Malformed entries are skipped
 * with a warning, as NVIDIA does. */
void health_policy_init(struct health_policy *p, const char *disable, const char *enable);
/* Does this XID make a device Unhealthy? */
bool health_xid_is_critical(const struct health_policy *p, unsigned long long xid);

struct health_monitor;
struct plugin_metrics;

/* Creates the event set, registers every GPU of inv and starts the thread.
 * With checking disabled returns 0 and *out = NULL. When the event set or
 * a GPU's registration fails (other than "not supported"), the unwatched
 * devices are marked Unhealthy right away (before the servers start) and
 * the thread retries with backoff (250 ms doubling to 30 s); they are
 * Healthy again once their events flow. A failing nvmlEventSetWait is
 * handled the same way. GPUs the inventory marked lost are Unhealthy and
 * never registered. Returns -1 only when out of memory or when the thread
 * cannot start. nvml, inv, state and metrics (XID counters; NULL = off)
 * are borrowed and must outlive the monitor. */
GP_MUST_USE int health_monitor_start(struct nvml *nvml, const struct gpu_inventory *inv,
                                     struct node_state *state, struct plugin_metrics *metrics,
                                     const struct gp_config *cfg, struct health_monitor **out,
                                     char *err, size_t errlen);
/* Stops and joins the thread (within one wait timeout), frees. NULL ok. */
void health_monitor_stop(struct health_monitor *m);

#endif
