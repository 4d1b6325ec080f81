/* client.h -- internals shared by the API client's files: kube.c
 * (request/response), list.c, cancel.c, watch.c and reflector.c. The files
 * call down this list, never back up it. Not for consumers: use kube.h. */
#ifndef GP_KUBE_CLIENT_H
#define GP_KUBE_CLIENT_H

#include "exec_credential.h"
#include "kube.h"
#include "kubeconfig.h"

#include "curl_api.h"
#include <pthread.h>
#include <time.h>

#include "compiler.h"

struct kube_client {
    struct kube_config cfg;       /* immutable after kube_client_new */
    const struct kube_curl *curl; /* libcurl's functions (curl_api.h) */
    char *user_agent;
    long timeout_ms, connect_timeout_ms, watch_timeout_s;
    size_t max_body;
    bool compress; /* ask for gzip on LISTs: the server is not on this host */
    struct kube_retry_policy retry;

    /* The request/response handle: one call at a time, so its connection
     * (keep-alive, TLS session) is reused by every call. */
    pthread_mutex_t request_lock;
    CURL *handle;

    /* Token, counters and the jitter generator: short critical sections,
     * never held across network I/O. */
    pthread_mutex_t state_lock;
    char *token;           /* current bearer token, NULL for none */
    int64_t token_read_ms; /* clock_now_ms() when token_file was last read */
    /* What token_file was when last read: a rotation (kubelet swaps the
     * projected token's symlink, an editor rewrites the file) changes one. */
    uint64_t token_dev, token_ino;
    int64_t token_mtime_ns, token_size;
    /* An exec user's credential (cfg.exec): this client's copy of the
     * process-wide cached one; exec_refused asks for a new run (a 401). */
    struct kube_exec_credential exec_cred;
    bool exec_refused;
    long exec_timeout_ms;
    struct kube_client_stats stats;
    uint64_t random_state;
};

/* Re-reads cfg.token_file when it changed (inode, size, mtime) or was read
 * over a minute ago, or now when `force` (after a 401); keeps the old token
 * if the file cannot be read. For an exec user, `force` makes the next
 * request ask for a new credential. */
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

/* A 2xx answer in Kubernetes' protobuf (Content-Type
 * application/vnd.kubernetes.protobuf) consumed while it arrives instead
 * of buffered: a protobuf LIST (list.c, list_protobuf.c). Other answers
 * (JSON, errors) are buffered as usual. kube_call resets it before
 * each attempt, feeds it every chunk from libcurl's write callback, and
 * finishes it when the transfer completed. Once it has handed anything to
 * its caller (delivered() > 0) a broken transfer is not retried: what was
 * handed over would be handed over twice. */
struct kube_stream {
    void (*reset)(void *ctx);
    /* 0, or -1 with err filled: the transfer is aborted, not retried. */
    int (*feed)(void *ctx, const char *data, size_t len, struct kube_error *err);
    /* At the end of a complete transfer: 0, or -1 (err filled) when the
     * answer stopped short of a clean boundary. */
    int (*finish)(void *ctx, struct kube_error *err);
    size_t (*delivered)(const void *ctx); /* items handed on in this attempt */
    size_t (*peak)(const void *ctx);      /* largest buffer held, for the stats */
    void *ctx;
};

/* One request/response call (kube.c). */
struct call {
    const char *method;       /* GET, POST, PATCH */
    const char *path;         /* API path and query */
    const char *content_type; /* NULL without a body */
    const char *body;
    size_t body_len;
    bool idempotent;    /* may be retried after the server could have acted */
    bool compressed;    /* ask for gzip (large GET answers: LISTs) */
    const char *accept; /* the Accept header's value; NULL: application/json */
    struct kube_cancel *cancel;
    struct kube_stream *stream; /* NULL: every answer is buffered */
    int64_t deadline_ns;        /* clock_now_ns() instant no attempt may outlive; 0: none */
};

/* A 2xx answer's body, NUL-terminated; data is the caller's to free(). */
struct kube_body {
    char *data;
    size_t len;
    long status;
    bool streamed; /* call->stream consumed it (data NULL) and finished cleanly */
};

/* Performs call with the client's retry policy; on success *out holds
 * the 2xx body. -1: err says why (the server's Status when it sent one). */
GP_MUST_USE int kube_call(struct kube_client *c, const struct call *call, struct kube_body *out,
                          struct kube_error *err);

/* kube_list with a cancellation token checked between pages and during
 * retry backoff (for the reflector), and the list's flags (kube.h). */
GP_MUST_USE enum kube_result kube_list_cancellable(struct kube_client *client, const char *path,
                                                   long limit, unsigned flags, kube_item_fn on_item,
                                                   void *ctx, char *rv, struct kube_cancel *cancel,
                                                   struct kube_error *err);

/* Walks one LIST answer (a NodeList, PodList, ...) without building its
 * tree: every element of "items" is parsed on its own, handed to on_item
 * and freed before the next, so memory holds the text plus one item.
 * metadata.resourceVersion goes to rv (KUBE_RV_MAX, may be NULL) and a
 * non-empty metadata.continue to *next (malloc'ed; NULL when absent).
 * `what` names the request in error messages. */
GP_MUST_USE enum kube_result kube_list_walk(const char *body, size_t len, const char *what,
                                            kube_item_fn on_item, void *ctx, char *rv, char **next,
                                            struct kube_error *err);

/* The streaming decoder of a LIST answer in Kubernetes' protobuf encoding
 * ("k8s\0" + runtime.Unknown holding a NodeList, PodList or ConfigMapList;
 * another kind is a BadResponse), list_protobuf.c. Bytes are fed as they
 * arrive; each item is decoded with proto/k8s_list.proto and handed to
 * on_item as the JSON object holding those fields as soon as its last byte
 * is in. Memory: one item (at most max_field bytes, else "BadResponse").
 * Owner: the caller (kube_pb_list_free); `what` must outlive it. */
struct kube_pb_list;
GP_MUST_USE struct kube_pb_list *kube_pb_list_new(const char *what, kube_item_fn on_item, void *ctx,
                                                  size_t max_field);
void kube_pb_list_reset(struct kube_pb_list *pb); /* before each attempt */
/* 0, or -1 with err filled: malformed ("BadResponse"), on_item's stop
 * ("CallbackError"), out of memory. */
GP_MUST_USE int kube_pb_list_feed(struct kube_pb_list *pb, const char *data, size_t len,
                                  struct kube_error *err);
/* At the end of the answer: KUBE_OK when it ended at a clean boundary with
 * a kind and a List (rv, KUBE_RV_MAX or NULL, gets ListMeta's version;
 * *next the continue token, malloc'ed, NULL when none), else KUBE_ERROR
 * ("BadResponse", "truncated ..."). */
GP_MUST_USE enum kube_result kube_pb_list_finish(struct kube_pb_list *pb, char *rv, char **next,
                                                 struct kube_error *err);
size_t kube_pb_list_items(const struct kube_pb_list *pb); /* handed to on_item */
size_t kube_pb_list_peak(const struct kube_pb_list *pb);  /* largest buffer held */
void kube_pb_list_free(struct kube_pb_list *pb);

/* An error answer's protobuf Status as the JSON Status object the JSON
 * answer would hold (new reference), NULL when the body is not one. */
GP_MUST_USE json_t *kube_protobuf_status(const char *body, size_t len);

/* ---- cancel.c ---- */

/* kube_cancel_sleep(): kube.h. */

/* A watch's multi handle, woken by kube_cancel_fire() while attached. The
 * registration is the watch's (on its stack); attach and detach bracket
 * the transfer, from the watch's own thread. */
struct cancel_reg {
    const struct kube_curl *curl;
    CURLM *multi;
    struct cancel_reg *next;
};
void kube_cancel_attach(struct kube_cancel *cancel, struct cancel_reg *reg);
void kube_cancel_detach(struct kube_cancel *cancel, struct cancel_reg *reg);

/* ---- watch.c ---- */

/* kube_watch(), also counting the events delivered (*events): the
 * reflector tells a healthy watch that the server ended from a dead one.
 * `interrupt` (may be NULL) firing ends the watch as if the server had
 * (KUBE_OK): the reflector's re-list request. */
GP_MUST_USE enum kube_result kube_watch_counted(struct kube_client *c, const char *path, char *rv,
                                                kube_event_fn on_event, void *ctx,
                                                struct kube_cancel *cancel,
                                                struct kube_cancel *interrupt,
                                                struct kube_error *err, size_t *events);

#endif
