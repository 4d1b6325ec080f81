/* ui_usage.h -- what /ui shows beside the bookings: each GPU's used memory
 * and SM utilization, as its node agent reports them (/ui/usage.json).
 *
 * A thread of its own sweeps every GPU-sharing node's agent once per
 * `interval_ms` (start to start; a sweep that takes longer is followed by
 * the next at once, never by a second one beside it) from ui_usage_start()
 * until ui_usage_free(), so the snapshot is always warm: a request for
 * usage.json returns it at once and never starts a sweep, whatever the
 * number of readers (the way metrics-server keeps its snapshot for
 * `kubectl top`; docs/extender.md, "Used beside booked"). A sweep reads
 * the agents with usage_fetch (src/cli/usage_fetch.h): 32 requests in
 * flight, one deadline (10 s, or the interval when shorter), either
 *   direct  GET http://<node address>:<port>/metrics, the node's first
 *           InternalIP (else ExternalIP, else Hostname) from the cache,
 *           with no credentials: no API server between, no RBAC; or
 *   proxy   through the API server's node proxy (RBAC `get nodes/proxy`).
 *
 * The snapshot:
 *   {"port":9401,"from":"direct","interval_ms":15000,"age_ms":1200,"refreshing":false,
 *    "nodes":{"n1":{"gpus":{"0":[used_bytes|null, sm_ratio|null],...},
 *                   "pods":[[namespace, name, used_bytes, limit_bytes, sm_ratio,
 *                            memory_utilization, process_memory_bytes, processes],...]},
 *             "n2":{"error":"HTTP 503: ..."}}}
 * (age_ms -1 and no nodes before the first sweep ends; null for a figure
 * the agent did not give). `kubectl gpupool top` reads it (--from auto, the
 * default, and --from extender).
 *
 * Ownership: ui_usage_free() stops the thread (an agent being read is let
 * go at once) and frees everything. Thread-safe: any HTTP thread may call
 * ui_usage_json(). */
#ifndef GP_EXTENDER_UI_USAGE_H
#define GP_EXTENDER_UI_USAGE_H

#include "cache.h"
#include "compiler.h"
#include "kube.h"

#include <stdbool.h>
#include <stddef.h>

struct ui_usage;

/* client: the extender's client options (its strings must outlive the
 * ui_usage; used in proxy mode only); port: the agents' metrics port;
 * direct: read the agents at their nodes' addresses, else through the
 * node proxy. Starts nothing. */
struct ui_usage *ui_usage_new(const struct kube_client_options *client, struct cache *cache,
                              int port, bool direct, long interval_ms) GP_MUST_USE;
/* Starts the sweeping thread (once the cache holds the nodes). -1 with err
 * when it cannot start. */
int ui_usage_start(struct ui_usage *u, char *err, size_t errlen) GP_MUST_USE;
void ui_usage_free(struct ui_usage *u);

/* The snapshot as text (malloc'ed, *len bytes; NULL when out of memory). */
char *ui_usage_json(struct ui_usage *u, size_t *len) GP_MUST_USE;

#endif
