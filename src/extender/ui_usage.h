/* ui_usage.h -- what /ui shows beside the bookings: each GPU's used memory
 * and SM utilization, as its node agent reports them (/ui/usage.json).
 *
 * The extender reads the agents' /metrics the way `kubectl gpupool top`
 * does (src/cli/usage_fetch.h: the API server's node proxy, RBAC `get
 * nodes/proxy`, a bounded pool of workers, one deadline) -- but only while
 * someone looks: a request for usage.json returns the last snapshot at once
 * and, when it is older than `max_age_ms` and no refresh runs, starts one
 * refresh in a thread of its own. So an unwatched page costs nothing, a
 * watched one at most one sweep of the GPU-sharing nodes per max_age_ms,
 * whatever the number of browsers (docs/extender.md, "Used beside booked").
 *
 * The snapshot:
 *   {"port":9401,"age_ms":1200,"refreshing":false,
 *    "nodes":{"n1":{"gpus":{"0":[used_bytes|null, sm_ratio|null],...},
 *                   "pods":[[namespace, name, used_bytes, limit_bytes, sm_ratio,
 *                            memory_utilization, process_memory_bytes, processes],...]},
 *             "n2":{"error":"HTTP 503: ..."}}}
 * (age_ms -1 and no nodes before the first sweep ends; null for a figure
 * the agent did not give). `kubectl gpupool top --from extender` reads it.
 *
 * Ownership: ui_usage_free() joins a running sweep and frees everything.
 * Thread-safe: any HTTP thread may call ui_usage_json(). */
#ifndef GP_EXTENDER_UI_USAGE_H
#define GP_EXTENDER_UI_USAGE_H

#include "cache.h"
#include "compiler.h"
#include "kube.h"

#include <stddef.h>

struct ui_usage;

/* client: the extender's client options (its strings must outlive the
 * ui_usage); port: the agents' metrics port. */
struct ui_usage *ui_usage_new(const struct kube_client_options *client, struct cache *cache,
                              int port, long max_age_ms) GP_MUST_USE;
void ui_usage_free(struct ui_usage *u);

/* The snapshot as text (malloc'ed, *len bytes; NULL when out of memory). */
char *ui_usage_json(struct ui_usage *u, size_t *len) GP_MUST_USE;

#endif
