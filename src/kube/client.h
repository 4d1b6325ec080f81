/* client.h -- internals shared by kube.c (request/response) and watch.c
 * (watch, reflector, cancellation). Not for consumers: use kube.h. */
#ifndef GP_KUBE_CLIENT_H
#define GP_KUBE_CLIENT_H

#include "kube.h"
#include "kubeconfig.h"

#include "curl_api.h"
#include <pthread.h>
#include <time.h>

#include "compiler.h"

struct kube_client {
    struct kube_config cfg; /* immutable after kube_client_new */
    const struct kube_curl *curl; /* libcurl's functions (curl_api.h) */
    char *user_agent;
    long timeout_ms, connect_timeout_ms, watch_timeout_s;
    size_t max_body;
    bool compress;          /* ask for gzip on LISTs: the server is not on this host */
    struct kube_retry_policy retry;

    /* The request/response handle: one call at a time, so its connection
     * (keep-alive, TLS session) is reused by every call. */
    pthread_mutex_t request_lock;
    CURL *handle;

    /* Token, counters and the jitter generator: short critical sections,
     * never held across network I/O. */
    pthread_mutex_t state_lock;
    char *token;                 /* current bearer token, NULL for none */
    struct timespec token_read;  /* monotonic time token_file was last read */
    struct kube_client_stats stats;
    uint64_t random_state;
};

/* Re-reads cfg.token_file when older than a minute, or now when `force`
 * (after a 401). Keeps the old token if the file cannot be read. */
void kube_token_refresh(struct kube_client *c, bool force);

/* Applies every per-connection option (TLS, auth, timeouts, keepalive, user
 * agent) and headers to a freshly reset handle; *headers is the caller's to
 * curl_slist_free_all after the transfer. content_type may be NULL. */
int kube_handle_setup(struct kube_client *c, CURL *h, const char *url, const char *content_type,
                      struct curl_slist **headers, struct kube_error *err);

/* server + path (+ sep + extra when extra is not NULL): malloc'ed. */
GP_MUST_USE char *kube_url(const struct kube_client *c, const char *path, const char *extra);

/* Describes a failed transfer (reason "ConnectError", "TLSError", ...). */
void kube_error_from_curl(const struct kube_curl *curl, struct kube_error *err, CURLcode code,
                          const char *what, const char *curl_message);

void kube_stats_count(struct kube_client *c, bool retry, size_t body_bytes);
double kube_random01(struct kube_client *c);

/* One request/response call (kube.c). */
struct call {
    const char *method;       /* GET, POST, PATCH */
    const char *path;         /* API path and query */
    const char *content_type; /* NULL without a body */
    const char *body;
    size_t body_len;
    bool idempotent;          /* may be retried after the server could have acted */
    bool compressed;          /* ask for gzip (large GET answers: LISTs) */
    const char *accept;       /* the Accept header's value; NULL: application/json */
    struct kube_cancel *cancel;
};

/* A 2xx answer's body, NUL-terminated; data is the caller's to free(). */
struct kube_body {
    char *data;
    size_t len;
    long status;
    bool protobuf; /* Content-Type: application/vnd.kubernetes.protobuf */
};

/* Performs call with the client's retry policy; on success *out holds
 * the 2xx body. -1: err says why (the server's Status when it sent one). */
GP_MUST_USE int kube_call(struct kube_client *c, const struct call *call, struct kube_body *out,
                          struct kube_error *err);

/* kube_list with a cancellation token checked between pages and during
 * retry backoff (for the reflector), and the list's flags (kube.h). */
GP_MUST_USE enum kube_result kube_list_cancellable(struct kube_client *client, const char *path,
                                                   long limit, unsigned flags,
                                                   kube_item_fn on_item, void *ctx, char *rv,
                                                   struct kube_cancel *cancel,
                                                   struct kube_error *err);

/* Walks one LIST answer (a NodeList, PodList, ...) without building its
 * tree: every element of "items" is parsed on its own, handed to on_item
 * and freed before the next, so memory holds the text plus one item.
 * metadata.resourceVersion goes to rv (KUBE_RV_MAX, may be NULL) and a
 * non-empty metadata.continue to *next (malloc'ed; NULL when absent).
 * `what` names the request in error messages. */
GP_MUST_USE enum kube_result kube_list_walk(const char *body, size_t len, const char *what,
                                            kube_item_fn on_item, void *ctx, char *rv,
                                            char **next, struct kube_error *err);

/* kube_list_walk for an answer in Kubernetes' protobuf encoding ("k8s\0" +
 * runtime.Unknown holding a NodeList, PodList or ConfigMapList; another
 * kind is a BadResponse): each item is decoded with proto/k8s_list.proto
 * and handed to on_item as the JSON object holding those fields
 * (list_protobuf.c). */
GP_MUST_USE enum kube_result kube_list_walk_protobuf(const char *body, size_t len,
                                                     const char *what, kube_item_fn on_item,
                                                     void *ctx, char *rv, char **next,
                                                     struct kube_error *err);

/* An error answer's protobuf Status as the JSON Status object the JSON
 * answer would hold (new reference), NULL when the body is not one. */
GP_MUST_USE json_t *kube_protobuf_status(const char *body, size_t len);

/* Sleeps ms, waking early when cancel fires; true when it has fired.
 * A NULL cancel sleeps the whole time. */
bool kube_cancel_sleep(struct kube_cancel *cancel, long ms);

#endif
