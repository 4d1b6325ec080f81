/* rpc.h -- the kubelet Device Plugin API v1beta1 transport (gRPC C core).
 *
 * All grpc_* code lives in rpc.c; nothing else includes a gRPC header.
 * Messages cross this boundary as protobuf-encoded bytes (api.pb-c.h types
 * are encoded/decoded by the caller), so the plugin logic is testable
 * without gRPC.
 *
 * Threading: rpc_runtime_start() starts one completion-queue thread that
 * serves every rpc_server. Handlers run on that thread, one at a time.
 * rpc_server_notify() may be called from any thread. */
#ifndef GP_RPC_H
#define GP_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum rpc_method {
    RPC_GET_DEVICE_PLUGIN_OPTIONS,
    RPC_LIST_AND_WATCH,
    RPC_GET_PREFERRED_ALLOCATION,
    RPC_ALLOCATE,
    RPC_PRE_START_CONTAINER,
};

/* gRPC status codes used in replies (values from the gRPC spec). */
enum rpc_status {
    RPC_OK = 0,
    RPC_INVALID_ARGUMENT = 3,
    RPC_NOT_FOUND = 5,
    RPC_RESOURCE_EXHAUSTED = 8,
    RPC_FAILED_PRECONDITION = 9,
    RPC_UNIMPLEMENTED = 12,
    RPC_INTERNAL = 13,
    RPC_UNAVAILABLE = 14,
};

/* A heap buffer handed from a handler to rpc.c, which free()s data. */
struct rpc_buf {
    uint8_t *data;
    size_t len;
};

struct rpc_handlers {
    void *ctx;
    /* Unary methods. req/req_len: the request's bytes (borrowed). On OK fill
     * *resp (ownership passes to rpc.c); otherwise write a message naming
     * the problem into msg and return the status. Never called for
     * RPC_LIST_AND_WATCH. */
    enum rpc_status (*unary)(void *ctx, enum rpc_method method, const uint8_t *req,
                             size_t req_len, struct rpc_buf *resp, char *msg, size_t msglen);
    /* ListAndWatch: the current encoded ListAndWatchResponse and its
     * generation (bumped on every change). Called whenever a stream can send;
     * a stream that already sent `generation` is not sent the same again. */
    int (*snapshot)(void *ctx, struct rpc_buf *out, uint64_t *generation);
    /* Optional (NULL in the plugin): also serve /v1beta1.Registration/Register,
     * the kubelet's side, for tests and benchmarks that play the kubelet.
     * Called on the runtime's thread with the RegisterRequest bytes. */
    enum rpc_status (*registration)(void *ctx, const uint8_t *req, size_t req_len, char *msg,
                                    size_t msglen);
};

struct rpc_runtime;
struct rpc_server;

/* grpc_init + the completion-queue thread. Signals must already be blocked
 * in the calling thread so gRPC's threads inherit the mask. */
int rpc_runtime_start(struct rpc_runtime **out, char *err, size_t errlen);
/* Stops every server still running, joins the thread, grpc_shutdown. */
void rpc_runtime_stop(struct rpc_runtime *rt);

/* Serve the DevicePlugin service on a unix socket. Refuses (-1, err) when
 * another live process accepts connections on socket_path; a stale socket
 * file is replaced. handlers is copied. */
int rpc_server_start(struct rpc_runtime *rt, const char *socket_path,
                     const struct rpc_handlers *handlers, struct rpc_server **out,
                     char *err, size_t errlen);
/* The snapshot changed: every open ListAndWatch stream sends the new one. */
void rpc_server_notify(struct rpc_server *srv);
/* Number of ListAndWatch streams open now (tests, logs). */
int rpc_server_stream_count(struct rpc_server *srv);
/* Ends open streams with status OK, stops serving, removes the socket file
 * (only if it is still ours), frees srv. NULL is a no-op. */
void rpc_server_stop(struct rpc_server *srv);

/* Blocking unary call of /v1beta1.Registration/Register on the kubelet
 * socket with an encoded RegisterRequest. Waits for the socket to accept
 * up to timeout_ms. Returns 0, or -1 with the gRPC status and message in err. */
int rpc_register(struct rpc_runtime *rt, const char *kubelet_socket, const uint8_t *req,
                 size_t req_len, int timeout_ms, char *err, size_t errlen);

/* Generic blocking unary client call (bench and tests): method is the full
 * path ("/v1beta1.DevicePlugin/Allocate"). *resp is malloc'd on success. */
int rpc_call(struct rpc_runtime *rt, const char *socket_path, const char *method,
             const uint8_t *req, size_t req_len, int timeout_ms, struct rpc_buf *resp,
             int *status, char *err, size_t errlen);

/* ---- client side: benchmarks, tests, fake kubelets ------------------------
 * One persistent channel per rpc_client; calls block the calling thread on
 * their own queue and never touch the runtime's thread. A client (and each
 * watch) is used by one thread at a time. */
struct rpc_client;
struct rpc_watch;

/* Pass as req_len to send no request message at all, only the half-close. */
#define RPC_NO_MESSAGE SIZE_MAX

int rpc_client_open(struct rpc_runtime *rt, const char *socket_path, struct rpc_client **out,
                    char *err, size_t errlen);
/* Unary call. Returns 0 when the status is OK (*resp is malloc'd, free it),
 * otherwise -1 with *status (a gRPC code, RPC_INTERNAL for local failures)
 * and the status message in msg. timeout_ms < 0: no deadline. */
int rpc_client_call(struct rpc_client *client, const char *method, const uint8_t *req,
                    size_t req_len, int timeout_ms, struct rpc_buf *resp, int *status,
                    char *msg, size_t msglen);
void rpc_client_close(struct rpc_client *client);
/* Start connecting now (non-blocking), so that a later call on this client
 * finds the connection made: the daemon overlaps the kubelet handshake with
 * NVML enumeration. */
void rpc_client_connect(struct rpc_client *client);
/* rpc_register() on an open client. With wait_for_ready false the call
 * fails at once (UNAVAILABLE) when nothing accepts on the socket, instead
 * of retrying the connection until the deadline: the daemon prefers to
 * retry on its own schedule and stay responsive. */
int rpc_client_register(struct rpc_client *client, const uint8_t *req, size_t req_len,
                        int timeout_ms, bool wait_for_ready, char *err, size_t errlen);

/* Open a ListAndWatch stream on the client's channel. */
int rpc_client_watch_open(struct rpc_client *client, struct rpc_watch **out, char *err,
                          size_t errlen);
/* Next stream message: 1 with *msg malloc'd, 0 when timeout_ms passed first
 * (call again; nothing is lost), -1 when the stream ended (status and message
 * in err; *status set when status is not NULL). */
int rpc_client_watch_next(struct rpc_watch *watch, int timeout_ms, struct rpc_buf *msg,
                          int *status, char *err, size_t errlen);
/* Cancels the stream if still open and frees it. NULL is a no-op. */
void rpc_client_watch_close(struct rpc_watch *watch);

#endif
