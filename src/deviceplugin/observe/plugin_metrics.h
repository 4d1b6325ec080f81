/* plugin_metrics.h -- the device plugin's Prometheus endpoint (--metrics-addr).
 *
 * A struct plugin_metrics holds the counters the hot paths bump (Allocate
 * latency histogram, registrations, XIDs) and one HTTP server answering
 * `GET /metrics` in the Prometheus text exposition format (0.0.4); every
 * other path is 404, every other method 405. Per-GPU gauges (health, memory,
 * utilisation, temperature, power) and the per-resource device counts are
 * read at scrape time from the attached plugin_node and NVML handle; the
 * allocated counts from the kubelet's PodResources List (podresources.h),
 * with a client the metrics context owns, opened by the first scrape that
 * needs it and re-opened after a failed List.
 *
 * libmicrohttpd is dlopen'ed by metrics_start() only: without
 * --metrics-addr the library is never loaded, let alone initialised, and
 * every metrics_* call below takes a NULL context and does nothing.
 *
 * Threads: the counters are lock-free atomics (Allocate: on the RPC
 * thread, or on the gpu-mem allocator thread when a deferred call
 * completes) or take a short mutex (XIDs and registrations, which are rare). The HTTP
 * server runs one internal thread (512 KiB stack), which makes the scrapes'
 * gRPC call. metrics_attach() and metrics_set_pod_resources() are called by
 * the main thread; they wait for a scrape in progress (the latter for at
 * most the List's 1 s deadline), so detaching before the node and NVML are
 * freed is safe. The PodResources client is only used under its mutex, by
 * one scrape at a time.
 * Names and labels: docs/metrics.md. */
#ifndef GP_PLUGIN_METRICS_H
#define GP_PLUGIN_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include "gpu.h"
#include "gpu_usage.h"
#include "nvml.h"
#include "options.h"
#include "compiler.h"

struct plugin_node;
struct plugin_metrics;
struct rpc_runtime;

/* Loads libmicrohttpd, binds addr (split once by the option engine) and
 * starts serving. -1 + err (the address, the bind error, a missing
 * library). *out owned by the caller. */
GP_MUST_USE int metrics_start(const struct option_hostport *addr, struct plugin_metrics **out,
                              char *err, size_t errlen);
/* Stops the server, unloads the library, frees. NULL ok. */
void metrics_stop(struct plugin_metrics *m);

/* "127.0.0.1:39211": the address actually bound (port 0 resolved). */
const char *metrics_bound_address(const struct plugin_metrics *m);

/* What the scrapes read: the node being served, its inventory and NVML
 * handle (borrowed). All NULL = detach (no per-GPU or per-resource
 * gauges until the next attach). */
void metrics_attach(struct plugin_metrics *m, struct nvml *nvml, const struct gpu_inventory *inv,
                    struct plugin_node *node);

/* Where scrapes find what containers use (gpu_usage.h): the isolation
 * directory whose containers/ holds the regions (copied; NULL or "" = no
 * container series) and who names pods (copied struct; its ctx must stay
 * valid until the next metrics_attach, which drops both: the daemon
 * detaches before it frees the gpu-mem service). Call after
 * metrics_attach. */
void metrics_set_usage_source(struct plugin_metrics *m, const char *isolation_dir,
                              const struct usage_names *names);

/* Where scrapes count gpupool_deviceplugin_devices_allocated: the
 * kubelet's PodResources socket (copied; NULL or "" = off, and then
 * neither that gauge nor gpupool_deviceplugin_pod_resources_up is served)
 * and the runtime the client runs on (borrowed: it must outlive m). A
 * changed path or runtime drops the open client. */
void metrics_set_pod_resources(struct plugin_metrics *m, struct rpc_runtime *rt,
                               const char *socket_path);

/* An XID event reported by NVML for GPU g (critical or not). */
void metrics_count_xid(struct plugin_metrics *m, const struct gpu_device *g,
                       unsigned long long xid);
/* One Allocate of `resource` took `seconds` from its arrival to its
 * answer (a deferred gpu-mem call's included); ok = answered without an
 * error status. The daemon registers it as the node's allocate observer
 * (plugin.h); the node never calls the metrics itself. */
void metrics_observe_allocate(struct plugin_metrics *m, const char *resource, double seconds,
                              bool ok);
/* One registration attempt of `resource` with the kubelet. */
void metrics_count_registration(struct plugin_metrics *m, const char *resource, bool ok);

/* The exposition text a scrape would return, malloc'd (free()); NULL when
 * out of memory. For tests and the HTTP handler. */
GP_MUST_USE char *plugin_metrics_render(struct plugin_metrics *m);

#endif
