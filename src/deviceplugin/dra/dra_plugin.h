/* dra_plugin.h -- the DRA kubelet plugin's two gRPC services on kubelet/.
 *
 *   <root>/plugins_registry/<driver>-reg.sock   pluginregistration.Registration:
 *       GetInfo -> {type "DRAPlugin", name <driver>, endpoint <dra.sock>,
 *                   supported_versions ["v1.DRAPlugin", "v1beta1.DRAPlugin",
 *                                       "v1alpha1.DRAResourceHealth"]}
 *       NotifyRegistrationStatus -> logged
 *   <root>/plugins/<driver>/dra.sock
 *       k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin and ...v1beta1.DRAPlugin:
 *       NodePrepareResources / NodeUnprepareResources, one handler for both
 *       versions (v1 answers also carry the allocation's share_id);
 *       v1alpha1.DRAResourceHealth/NodeWatchResources: every device with its
 *       health, sent again on every change.
 *
 * Prepare and unprepare wait on the API server and the disk, so they do not
 * run on the gRPC thread: each call is parked (rpc_call_defer) and answered
 * by one worker thread, which serializes every claim operation. Every
 * claim of a request gets an entry in the reply: its devices, or an error
 * string saying what is wrong with it (dra_prepare.h); a request that does
 * not decode is answered INVALID_ARGUMENT.
 *
 * Threads: the gRPC thread (handlers, snapshots), the worker, and
 * dra_plugin_set_health() from any thread. */
#ifndef GP_DRA_PLUGIN_H
#define GP_DRA_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler.h"
#include "dra_devices.h"
#include "dra_prepare.h"
#include "rpc.h"

#define DRA_PLUGIN_TYPE "DRAPlugin"
#define DRA_SERVICE_V1 "v1.DRAPlugin"
#define DRA_SERVICE_V1BETA1 "v1beta1.DRAPlugin"
#define DRA_SERVICE_HEALTH "v1alpha1.DRAResourceHealth"

struct dra_plugin;

struct dra_plugin_options {
    const char *driver;
    const char *pool;                       /* the node name */
    const char *registration_path;          /* <root>/plugins_registry/<driver>-reg.sock */
    const char *endpoint;                   /* <root>/plugins/<driver>/dra.sock */
    const struct dra_device_table *devices; /* borrowed */
    struct dra_preparer *preparer;          /* borrowed; used by the worker only */
};

/* Starts the worker and both servers (DRA first: the kubelet dials the
 * endpoint as soon as GetInfo answers). -1 + err. */
GP_MUST_USE int dra_plugin_start(struct rpc_runtime *rt, const struct dra_plugin_options *o,
                                 struct dra_plugin **out, char *err, size_t errlen);
/* Restarts the servers whose socket file is gone (a wiped directory).
 * Returns how many were restarted, -1 when one cannot be. */
int dra_plugin_check_sockets(struct dra_plugin *p, char *err, size_t errlen);
/* Device `index` of the table is (un)healthy; the health stream sends the
 * new list when it changed. message: why (may be NULL). */
void dra_plugin_set_health(struct dra_plugin *p, size_t index, bool healthy, const char *message);
/* Sends the health list again (its times now): the kubelet takes a device
 * whose health was not reported within its timeout (30 s by default) as
 * Unknown, so the daemon calls this every DRA_HEALTH_RESEND_S. */
#define DRA_HEALTH_RESEND_S 10
void dra_plugin_refresh_health(struct dra_plugin *p);
/* Stops the servers (parked calls are cancelled), joins the worker, frees. */
void dra_plugin_stop(struct dra_plugin *p);

#endif
