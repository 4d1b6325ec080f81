/* usage_extender.h -- the used figures from the extender's last sweep, in
 * one request: `kubectl gpupool top` (--from auto, the default, and
 * --from extender).
 *
 * The extender (with --ui-node-metrics-port) reads every GPU-sharing
 * node's agent in the background, once per --ui-node-metrics-interval
 * (15 s), and keeps the sums (src/extender/ui_usage.h). Reading its /ui/usage.json through
 * the API server's service proxy,
 *   GET /api/v1/namespaces/NS/services/NAME:PORT/proxy/ui/usage.json
 * (RBAC: get services/proxy), costs one request whatever the cluster's
 * size, for figures up to one interval (+ a sweep) old; only GPU-sharing
 * nodes are in it. When the extender has no sweep yet (age_ms -1: it has
 * just started) this asks again every 200 ms until one ends or the
 * deadline passes. */
#ifndef GP_CLI_USAGE_EXTENDER_H
#define GP_CLI_USAGE_EXTENDER_H

#include "kube.h"
#include "node_usage.h"

#include <stddef.h>

#include "compiler.h"

/* service: "namespace/name:port" (port: a number or the port's name).
 * Fills usage[i] for nodes[i] (zero-initialised by the caller); a node the
 * sweep does not cover (not GPU-sharing: whole-GPU, time-sliced) is left
 * USAGE_NOT_READ, with the reason in its error. -1 with err when the
 * extender could not be read (nothing filled, or out of memory). */
int usage_from_extender(struct kube_client *client, const char *service, long timeout_ms,
                        const char *const *nodes, size_t n, struct node_usage *usage, char *err,
                        size_t errlen) GP_MUST_USE;

#endif
