/* usage_extender.h -- the used figures from the extender's last sweep, in
 * one request: `kubectl gpupool top --from extender`.
 *
 * The extender (with --ui-node-metrics-port) already reads every
 * GPU-sharing node's agent for its /ui, at most once per 15 s, and keeps
 * the sums (src/extender/ui_usage.h). Reading its /ui/usage.json through
 * the API server's service proxy,
 *   GET /api/v1/namespaces/NS/services/NAME:PORT/proxy/ui/usage.json
 * (RBAC: get services/proxy), costs one request whatever the cluster's
 * size, for figures up to ~15 s old; only GPU-sharing nodes are in it.
 * When the extender has no sweep yet (age_ms -1: nobody looked lately)
 * this asks again every 200 ms until one ends or the deadline passes. */
#ifndef GP_CLI_USAGE_EXTENDER_H
#define GP_CLI_USAGE_EXTENDER_H

#include "kube.h"
#include "node_usage.h"

#include <stddef.h>

#include "compiler.h"

/* service: "namespace/name:port" (port: a number or the port's name).
 * Fills usage[i] for nodes[i] (zero-initialised by the caller); -1 with err
 * when the extender could not be read (then nothing is filled). */
int usage_from_extender(struct kube_client *client, const char *service, long timeout_ms,
                        const char *const *nodes, size_t n, struct node_usage *usage, char *err,
                        size_t errlen) GP_MUST_USE;

#endif
