/* usage_fetch.h -- reads the node agents' /metrics, many nodes at once.
 *
 * Two ways to a node's agent:
 *   proxy  (addresses NULL) GET /api/v1/nodes/<node>:<port>/proxy/metrics,
 *          the API server's node proxy (RBAC: `get` on `nodes/proxy`;
 *          deploy/cli/gpupool-viewer-rbac.yaml). The API server connects
 *          to the node's address at <port> (the agent's --metrics-addr,
 *          9401 in deploy/), so the caller needs no route to the nodes and
 *          no credentials of its own beyond the kubeconfig's. The CLI's way.
 *   direct (addresses given) GET http://<address>:<port>/metrics, the
 *          node's own address (node_facts.address), with no credentials
 *          at all (kube_http_get): the extender's way in the cluster, as
 *          metrics-server reads the kubelets, with no API server between.
 *
 * Cost (docs/cli.md, "top"): one request per node in the view. They run on
 * a bounded pool of `workers` threads (proxy: each with its own client,
 * its own connection, since a client serializes its requests), taking the
 * next node from a shared counter; the whole fetch has one deadline, and a
 * node not answered by then reads as "no data" with the reason, the
 * others are shown. Each answer is parsed in its worker and only the sums
 * are kept (node_usage.h), so memory holds `workers` answers at a time. */
#ifndef GP_CLI_USAGE_FETCH_H
#define GP_CLI_USAGE_FETCH_H

#include "kube.h"
#include "node_usage.h"

#include <stddef.h>

#include "compiler.h"

struct usage_fetch_options {
    const struct kube_client_options *client; /* proxy: the caller's; copied per worker */
    /* direct: addresses[i] is nodes[i]'s address (NULL: it has none, and
     * reads as failed); NULL: proxy. */
    const char *const *addresses;
    int port;                   /* the agents' metrics port */
    int workers;                /* at most this many requests in flight */
    long timeout_ms;            /* the whole fetch */
    struct kube_cancel *cancel; /* may be NULL; firing it ends the fetch early:
                                   nodes not read by then read "cancelled" */
};

struct usage_fetch_stats {
    size_t requests, failed;
    size_t bytes; /* answers' bodies (decoded) */
    double ms;
};

/* Fetches nodes[0..n) into usage[0..n) (zero-initialised by the caller,
 * released with node_usage_free()). Per-node failures are in the records;
 * -1 only when no worker could start (err says why). */
int usage_fetch(const struct usage_fetch_options *opt, const char *const *nodes, size_t n,
                struct node_usage *usage, struct usage_fetch_stats *stats, char *err,
                size_t errlen) GP_MUST_USE;

#endif
