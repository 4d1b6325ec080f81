/* kube.h -- a small Kubernetes API client (libcurl + jansson).
 *
 * What every gpupool program needs from the API server and nothing more:
 * GET, paginated LIST, WATCH, PATCH, POST, PUT, DELETE, plus a reflector (list, then watch
 * forever, re-list when the watch is too old) that feeds a caller's cache.
 *
 * Configuration (kube_client_new): a kubeconfig (explicit path, else
 * $KUBECONFIG, else ~/.kube/config) or the in-cluster service account
 * (/var/run/secrets/kubernetes.io/serviceaccount + KUBERNETES_SERVICE_HOST/PORT).
 * See kubeconfig.h for what a kubeconfig may contain.
 *
 * Paths are API paths with an optional query, e.g.
 *   "/api/v1/namespaces/kube-system/configmaps/unhealthy-gpu-node1"
 *   "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode1"
 * Query values must be URL-escaped by the caller (kube_escape()).
 *
 * Threads: a client is thread-safe. Request/response calls (get, list pages,
 * patch, post) share one connection behind a mutex, so they serialize; each
 * kube_watch() / kube_reflector_run() uses its own connection and may run in
 * its own thread concurrently with everything else. A watch or reflector is
 * stopped from any thread with kube_cancel_fire().
 *
 * Ownership: json_t values handed to callbacks are borrowed (valid during the
 * call; json_incref() to keep one). json_t **out results belong to the caller
 * (json_decref()). Nothing here keeps a pointer to a caller's buffer after
 * returning, except the options' strings, which are copied.
 *
 * Errors: every fallible call fills a struct kube_error. When the server
 * answered with a Kubernetes Status object its code, reason and message are
 * copied verbatim (message "pods \"x\" not found", reason "NotFound"); other
 * failures get http_status 0 (or the HTTP status) and a reason of our own:
 * "ConnectError", "Timeout", "TLSError", "BadResponse", "TooLarge",
 * "Cancelled", "CallbackError", "InvalidArgument", "Interrupted" (a protobuf
 * LIST page broke off after items were handed over: not retried).
 *
 * Retries (see docs/kube.md): connect failures and 429 (honouring
 * Retry-After) are retried for every verb, since the server did not act on
 * the request; 500/502/503/504 and transfer timeouts only for GET, LIST and
 * DELETE (a repeated DELETE is answered 404), never for POST (a retried binding could bind twice) or PATCH. Backoff is
 * exponential with jitter, bounded by kube_retry_policy; Retry-After is
 * honoured up to 60 s. A 401 re-reads a token file, or runs an exec
 * credential plugin again, once and retries. */
#ifndef GP_KUBE_H
#define GP_KUBE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

/* Longest resourceVersion we keep (they are opaque strings; etcd's are
 * decimal integers). A buffer of this size always fits one. */
#define KUBE_RV_MAX 128

struct kube_client;
struct kube_cancel;

/* Results of the calls that can end in more than ok/failed. */
enum kube_result {
    KUBE_OK = 0,
    KUBE_ERROR = -1,     /* see the struct kube_error */
    KUBE_GONE = -2,      /* 410: the resourceVersion/continue token is too old: re-list */
    KUBE_CANCELLED = -3, /* kube_cancel_fire() was called */
};

struct kube_error {
    int http_status;     /* HTTP status, or Status.code; 0 when none was received */
    char reason[64];     /* Status.reason ("NotFound", "Conflict", "Gone", ...) or ours */
    char message[1024];  /* Status.message, or a description of the local failure */
    long retry_after_ms; /* the last answer's Retry-After (capped at 60 s); 0 when none */
};

/* printf into err->message with reason and status (0: a local failure,
 * nothing was received), Retry-After cleared; returns -1 so error paths can
 * `return kube_fail(...)`. Callers outside gp_kube report their own
 * failures in the same struct (the DRA slice writer, the node publish). */
int kube_fail(struct kube_error *err, int http_status, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

struct kube_retry_policy {
    int max_attempts;        /* tries per call including the first; 0 = 5; 1 = no retry */
    long initial_backoff_ms; /* first wait before jitter; 0 = 200 */
    long max_backoff_ms;     /* cap of the exponential wait and of Retry-After; 0 = 10000 */
};

struct kube_client_options {
    const char *kubeconfig; /* NULL: $KUBECONFIG (a ':' list, merged), ~/.kube/config, in-cluster */
    const char *context;    /* NULL: the kubeconfig's current-context */
    const char *cluster;    /* NULL: the context's cluster (kubectl --cluster) */
    const char *user;       /* NULL: the context's user (kubectl --user) */
    bool in_cluster;        /* use the service account even when a kubeconfig exists */
    long exec_timeout_ms;   /* an exec credential plugin's run; 0 = 60000 */
    const char *user_agent; /* NULL: "gpupool/<version>" */
    long timeout_ms;        /* whole request/response call, per attempt; 0 = 30000 */
    long connect_timeout_ms; /* 0 = 10000 */
    long watch_timeout_s;    /* server-side timeoutSeconds of a watch; 0 = 300 */
    size_t max_body_bytes;   /* largest response body or watch event; 0 = 64 MiB */
    struct kube_retry_policy retry;
    /* Test hook: directory replacing /var/run/secrets/kubernetes.io/serviceaccount. */
    const char *serviceaccount_dir;
};

/* Counters, for logs, metrics and tests. */
struct kube_client_stats {
    uint64_t requests;      /* HTTP requests sent, retries included (watches too) */
    uint64_t retries;       /* of which were retries */
    size_t peak_body_bytes; /* largest response body or watch line held in memory */
};

/* Retrying a write in the caller (the device plugin's pod patches, the
 * extender's bind): the client retries only what the server cannot have
 * acted on, so a caller that knows its write is safe to repeat (a JSON patch
 * with a uid test, an idempotent annotation) runs its own loop with these.
 *
 * kube_error_transient: the failure may go away by itself: HTTP 408, 429,
 * 500, 502, 503, 504 (also as a Status code), or no answer at all (reasons
 * "ConnectError", "ConnectionError", "Timeout"). Anything else (4xx,
 * "TLSError", "TooLarge", "Cancelled", ...) is a final answer.
 *
 * kube_retry_delay_ms: the wait before retry number `retry` (1 = first):
 * min(max_backoff_ms, initial_backoff_ms * 2^(retry-1)) times a jitter
 * factor in [0.5, 1), and never less than err->retry_after_ms (err may be
 * NULL). policy NULL = the client's own (kube_client_options.retry, with
 * zeros replaced by the defaults, as everywhere). Thread-safe. */
bool kube_error_transient(const struct kube_error *err);
long kube_retry_delay_ms(struct kube_client *client, const struct kube_retry_policy *policy,
                         int retry, const struct kube_error *err);

/* Builds a client from the options (NULL = all defaults). Reads and checks
 * the whole configuration now: a bad kubeconfig fails here with
 * "path:line: what" in err. Does not contact the server. */
struct kube_client *kube_client_new(const struct kube_client_options *opt, char *err,
                                    size_t errlen) GP_MUST_USE;
void kube_client_free(struct kube_client *client);

/* The context's namespace ("default" when unset; the service account's own
 * namespace in-cluster) and the server URL ("https://host:port"). */
const char *kube_client_namespace(const struct kube_client *client);
const char *kube_client_server(const struct kube_client *client);
void kube_client_stats(struct kube_client *client, struct kube_client_stats *out);

/* URL-escapes a query value ("spec.nodeName=n1" -> "spec.nodeName%3Dn1").
 * Returns a malloc'ed string (free()), NULL when out of memory. */
GP_MUST_USE char *kube_escape(const char *value);

/* GET path; *out receives the parsed JSON object. */
int kube_get(struct kube_client *client, const char *path, json_t **out,
             struct kube_error *err) GP_MUST_USE;
/* The same, but no attempt outlives deadline_ns (clock_now_ns() terms; 0:
 * none): each attempt's time limit is the shorter of the client's timeout
 * and what is left, a retry that would start past it is not made, and when
 * it has passed before the request is sent the call fails with reason
 * "DeadlineExceeded", nothing sent. Every step that may wait (the client's
 * connection, a token file, an exec credential plugin, which is waited for
 * only until the deadline) comes before the time left is measured, and the
 * deadline is looked at once more just before the request is written
 * (libcurl's CURLOPT_PREREQFUNCTION, 7.80 on): a request leaves after its
 * deadline only if the process stops between that look and the send()
 * (docs/ha.md, the fence). */
int kube_get_until(struct kube_client *client, const char *path, int64_t deadline_ns, json_t **out,
                   struct kube_error *err) GP_MUST_USE;
/* GET path whose answer is not JSON (a node agent's /metrics through
 * /api/v1/nodes/<node>:<port>/proxy/metrics): on 0 *out holds the 2xx
 * body, NUL-terminated, *len bytes, the caller's to free(). Retries and
 * deadline as for kube_get_until(). */
int kube_get_text_until(struct kube_client *client, const char *path, int64_t deadline_ns,
                        char **out, size_t *len, struct kube_error *err) GP_MUST_USE;

/* LIST: fetches `limit` items per request (0 = 500) following the
 * `continue` token and calls on_item once per item, in order. Each item is
 * parsed on its own and freed after its call, so memory holds one page's
 * text and one item, never a page's whole tree.
 * on_item returns 0 to go on, anything else to stop (the call then returns
 * KUBE_ERROR with reason "CallbackError"). On KUBE_OK, rv (KUBE_RV_MAX bytes,
 * may be NULL) receives the list's resourceVersion, the one to watch from.
 * KUBE_GONE: the continue token expired mid-list; the caller starts again.
 *
 * flags 0 (KUBE_LIST_CONSISTENT) is a quorum read from etcd, page by page,
 * like `kubectl get`. KUBE_LIST_ANY_VERSION sends resourceVersion=0, which
 * lets the apiserver answer from its watch cache, as informers' first list
 * does: several times faster at thousands of objects and no load on etcd,
 * but possibly a moment behind, and in one answer (a 1.20 apiserver
 * ignores `limit` there, so max_body_bytes must hold the whole list; on
 * "TooLarge" retry without the flag). An apiserver without a watch cache
 * pages from etcd as usual. Both ask for gzip, as client-go does, unless
 * the apiserver is on this host (127.x, [::1], localhost). */
#define KUBE_LIST_CONSISTENT 0u
#define KUBE_LIST_ANY_VERSION 1u
/* KUBE_LIST_PROTOBUF (OR it with either of the above) asks for Kubernetes'
 * protobuf encoding, then JSON: the apiserver encodes a big list several
 * times faster that way and sends under half the bytes. Only for nodes,
 * pods and configmaps (/api/v1): a protobuf answer of another kind is a
 * "BadResponse" error; a JSON answer (CRDs, old servers) is walked as
 * without the flag. A protobuf item reaches on_item as a JSON object that
 * holds ONLY the fields of proto/k8s_list.proto, named as in JSON, with
 * empty strings, empty lists and empty maps left out, Quantities as their
 * strings. A protobuf answer is decoded while it arrives: on_item runs as
 * each item's last byte comes in, memory holds one item, and a page whose
 * transfer breaks off after its first item is not retried (reason
 * "Interrupted"; the caller lists again). Items:
 *   Node:      metadata.{name, namespace, labels, annotations},
 *              status.{capacity, allocatable}, status.addresses[].{type, address}
 *   Pod:       metadata.{name, namespace, annotations}, spec.nodeName,
 *              spec.{containers, initContainers}[].{name, resources.{limits, requests}},
 *              status.phase
 *   ConfigMap: metadata.{name, namespace, annotations}, data
 * Use it only where those fields are all the callback reads. */
#define KUBE_LIST_PROTOBUF 2u
typedef int (*kube_item_fn)(json_t *item, void *ctx);
enum kube_result kube_list(struct kube_client *client, const char *path, long limit, unsigned flags,
                           kube_item_fn on_item, void *ctx, char *rv,
                           struct kube_error *err) GP_MUST_USE;

enum kube_event_type {
    KUBE_EVENT_ADDED,
    KUBE_EVENT_MODIFIED,
    KUBE_EVENT_DELETED,
    KUBE_EVENT_BOOKMARK, /* object carries only metadata.resourceVersion */
};
const char *kube_event_type_name(enum kube_event_type type);

/* on_event returns 0 to go on, anything else to stop (KUBE_ERROR,
 * reason "CallbackError"). */
typedef int (*kube_event_fn)(enum kube_event_type type, json_t *object, void *ctx);

/* One WATCH request: streams path?watch=1&resourceVersion=<rv>&
 * allowWatchBookmarks=true&timeoutSeconds=<watch_timeout_s> on its own
 * connection and calls on_event for each event until the server ends the
 * stream. rv (KUBE_RV_MAX bytes) is in/out: the version to start from ("" =
 * the server's current state, which first replays every object as ADDED) and,
 * on return, the version of the last event seen, to resume from.
 * Returns KUBE_OK when the stream ended normally (call again to resume),
 * KUBE_GONE on HTTP 410 or an ERROR event whose Status code is 410 (re-list),
 * KUBE_CANCELLED when `cancel` (may be NULL) fired, KUBE_ERROR otherwise (an
 * ERROR event with another code, HTTP errors, malformed events, a dead
 * connection). Not retried here: the reflector does that. */
enum kube_result kube_watch(struct kube_client *client, const char *path, char *rv,
                            kube_event_fn on_event, void *ctx, struct kube_cancel *cancel,
                            struct kube_error *err) GP_MUST_USE;

enum kube_patch_type {
    KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json (built-in kinds only) */
    KUBE_PATCH_MERGE,     /* application/merge-patch+json (RFC 7386) */
    KUBE_PATCH_JSON,      /* application/json-patch+json (RFC 6902; body is an array) */
};

/* PATCH path with body; *out (may be NULL) receives the patched object.
 * Example: annotate a pod
 *   {"metadata":{"annotations":{"gpupool.io/gpu-index":"1"}}}
 * or a node's capacity on "/api/v1/nodes/<n>/status". */
int kube_patch(struct kube_client *client, const char *path, enum kube_patch_type type,
               const json_t *body, json_t **out, struct kube_error *err) GP_MUST_USE;

/* POST body to path (create; pods/<name>/binding); *out (may be NULL)
 * receives the response object. Not retried once the server may have acted. */
int kube_post(struct kube_client *client, const char *path, const json_t *body, json_t **out,
              struct kube_error *err) GP_MUST_USE;

/* PUT body to path (replace; with metadata.resourceVersion set the server
 * refuses with 409 Conflict when the object changed since: an optimistic
 * update, as for a Lease); *out (may be NULL) receives the stored object.
 * Not retried once the server may have acted. */
int kube_put(struct kube_client *client, const char *path, const json_t *body, json_t **out,
             struct kube_error *err) GP_MUST_USE;

/* kube_put with a deadline (as for kube_get_until): the Lease renew of a
 * holder that must step down at a known instant. */
int kube_put_until(struct kube_client *client, const char *path, const json_t *body,
                   int64_t deadline_ns, json_t **out, struct kube_error *err) GP_MUST_USE;

/* DELETE path (an object), with DeleteOptions propagationPolicy Background
 * and, when uid is not NULL, preconditions.uid (the server refuses with 409
 * when the name now belongs to another object). A 404 is an error with
 * http_status 404 (kube_error_not_found): for a caller that wants the
 * object gone it means done. Retried like a GET (see above). */
int kube_delete(struct kube_client *client, const char *path, const char *uid,
                struct kube_error *err) GP_MUST_USE;
/* The object was not there (HTTP 404, reason NotFound). */
bool kube_error_not_found(const struct kube_error *err);

/* A plain HTTP POST to a URL outside the API server (the extender forwards
 * a bind to its leader replica): body of len bytes as application/json,
 * plus `header` (one "Name: value" line, may be NULL); no credentials, no
 * retry, never through a proxy from the environment (a replica's address is
 * inside the cluster), the whole exchange within timeout_ms. On 0 *status is the HTTP
 * status and *resp (NUL-terminated, at most max_resp bytes, the caller's
 * to free()) the answer's body; -1 with err when no answer came (connect
 * failure, timeout, too large). Thread-safe: a handle of its own per call. */
int kube_http_post(const char *url, const char *header, const char *body, size_t len,
                   long timeout_ms, size_t max_resp, long *status, char **resp, char *err,
                   size_t errlen) GP_MUST_USE;

/* A plain HTTP GET of an http:// URL outside the API server (the extender
 * reading a node agent's /metrics at the node's own address, docs/extender.md
 * "Used beside booked"): no credentials of any kind (no token, no client
 * certificate: whoever answers on a node's address must not get the
 * caller's identity), never through a proxy from the environment, no
 * redirect followed, no retry, the whole exchange before deadline_ns
 * (clock_now_ns() terms), `accept` the Accept header (NULL: any).
 * `cancel` (may be NULL) firing aborts the transfer. On 0 *status is the
 * HTTP status and *resp (NUL-terminated, *len bytes, at most max_resp, the
 * caller's to free()) the answer's body; -1 with err when no answer came
 * (connect failure, timeout, too large, cancelled). Thread-safe: a handle
 * of its own per call. */
int kube_http_get(const char *url, const char *accept, int64_t deadline_ns, size_t max_resp,
                  struct kube_cancel *cancel, long *status, char **resp, size_t *len, char *err,
                  size_t errlen) GP_MUST_USE;

/* POST a v1 Binding of pod ns/name to node: one write that sets
 * spec.nodeName and merges `annotations` (a JSON object of strings, may be
 * NULL; copied) into the pod's. uid (may be NULL) is sent as
 * metadata.uid, a precondition from kube-apiserver 1.23 on (1.20-1.22
 * ignore it). deadline_ns as for kube_get_until(); a failure with
 * http_status 0 and reason "DeadlineExceeded" or "ConnectError" was never
 * sent, any other one without a 4xx Status may have been applied. */
int kube_bind_pod(struct kube_client *client, const char *ns, const char *name, const char *uid,
                  const char *node, const json_t *annotations, int64_t deadline_ns,
                  struct kube_error *err) GP_MUST_USE;

/* A core/v1 Event about a pod, as `kubectl describe pod` shows it. */
struct kube_pod_event {
    const char *ns, *name, *uid; /* the pod (involvedObject); uid may be NULL */
    bool warning;                /* type Warning, else Normal */
    const char *reason;          /* CamelCase, e.g. "GPUMemAssignFailed" */
    const char *message;         /* for people; the server keeps up to 1 KiB of it */
    const char *component;       /* source.component / reportingComponent */
    const char *host;            /* source.host / reportingInstance (the node); may be NULL */
};

/* POSTs one Event (generateName "<pod>.", first/lastTimestamp now, count 1)
 * to /api/v1/namespaces/<ns>/events. Needs RBAC `create` on `events`.
 * Retried like any POST (connect failures, 429); a caller treats a failure
 * as a lost note, never as a failed operation. */
int kube_post_pod_event(struct kube_client *client, const struct kube_pod_event *ev,
                        struct kube_error *err) GP_MUST_USE;

/* The object an Event is about (involvedObject), any kind. */
struct kube_object_ref {
    const char *api_version; /* "v1", "resource.k8s.io/v1" */
    const char *kind;        /* "Node", "Pod", ... */
    const char *ns;          /* NULL for a cluster-scoped object */
    const char *name;
    const char *uid; /* may be NULL */
};

/* kube_post_pod_event for any object: the Event goes to the object's
 * namespace, or to "default" for a cluster-scoped one (where `kubectl
 * describe node` looks). reason, message, component, host as above. */
int kube_post_event(struct kube_client *client, const struct kube_object_ref *about, bool warning,
                    const char *reason, const char *message, const char *component,
                    const char *host, struct kube_error *err) GP_MUST_USE;

/* Cancellation token for watches and reflectors. kube_cancel_fire() is
 * thread-safe and makes a running kube_watch()/kube_reflector_run() that
 * uses this token return KUBE_CANCELLED promptly (it interrupts the network
 * wait and the backoff sleep). Once fired it stays fired. */
struct kube_cancel *kube_cancel_new(void) GP_MUST_USE;
void kube_cancel_free(struct kube_cancel *cancel);
void kube_cancel_fire(struct kube_cancel *cancel);
bool kube_cancel_fired(struct kube_cancel *cancel);
/* Un-fires a token, for one used as a reusable request (the reflector's
 * re-list token below); a stop token is never reset. */
void kube_cancel_reset(struct kube_cancel *cancel);
/* Sleeps ms, waking early when cancel fires; true when it has fired.
 * A NULL cancel sleeps the whole time. */
bool kube_cancel_sleep(struct kube_cancel *cancel, long ms);

/* The reflector: keeps a caller's cache in sync with a collection.
 *
 *   loop: list_begin(); list_item()* (paginated); list_end(rv);
 *         watch from rv: event()* ... when the stream ends, watch again from
 *         the last rv; on 410 Gone go back to list; on errors, back off
 *         (exponential with jitter, reset after a healthy watch) and retry.
 *
 * A re-list replays every object through list_item: the caller replaces its
 * view of the collection at list_end (objects not seen since list_begin were
 * deleted while the watch was down). All callbacks run in the thread that
 * called kube_reflector_run; any may be NULL except list_item and event. A
 * non-zero return from a callback stops the reflector with KUBE_ERROR.
 * on_error (may be NULL) is told about each failure that will be retried. */
struct kube_reflector_ops {
    int (*list_begin)(void *ctx);
    int (*list_item)(json_t *item, void *ctx);
    int (*list_end)(const char *rv, void *ctx);
    int (*event)(enum kube_event_type type, json_t *object, void *ctx);
    void (*on_error)(const struct kube_error *err, void *ctx);
};

/* Runs until `cancel` fires (returns KUBE_CANCELLED) or a callback fails
 * (KUBE_ERROR, err says which). page_limit as for kube_list. */
enum kube_result kube_reflector_run(struct kube_client *client, const char *path, long page_limit,
                                    const struct kube_reflector_ops *ops, void *ctx,
                                    struct kube_cancel *cancel, struct kube_error *err) GP_MUST_USE;

/* kube_reflector_run with a re-list request: firing `relist` (kube_cancel_fire,
 * any thread) makes the reflector drop its watch or its backoff sleep and
 * LIST again at once (consistent, from etcd); the reflector resets the
 * token before that LIST's list_begin, so a list_begin that follows a fire
 * belongs to a LIST started after it (the extender's "cache current" proof,
 * docs/ha.md). The watch notices within its 1 s poll. */
enum kube_result kube_reflector_run_relist(struct kube_client *client, const char *path,
                                           long page_limit, const struct kube_reflector_ops *ops,
                                           void *ctx, struct kube_cancel *cancel,
                                           struct kube_cancel *relist,
                                           struct kube_error *err) GP_MUST_USE;

#endif
