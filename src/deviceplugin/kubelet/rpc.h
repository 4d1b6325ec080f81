/* rpc.h -- the kubelet gRPC transport (gRPC C core), for any service.
 *
 * Only the rpc_*.c files include a gRPC header. Messages cross this
 * boundary as protobuf-encoded bytes (the *.pb-c.h types are encoded and
 * decoded by the caller), so the plugin logic is testable without gRPC.
 * The transport knows no service: a server is given its method table
 * (full names, unary or server-streaming) by the caller, and a client
 * calls any unary method by its full name. The DevicePlugin service is
 * plugin.c's table; a DRA kubelet plugin (the DRAPlugin service,
 * pluginregistration.Registration) brings its own.
 *
 * Files: rpc_server.c (runtime, servers, the call state machine, deferred
 * replies), rpc_socket.c (socket-path safety), rpc_client.c (the unary
 * client), rpc_buffer.c (byte buffers, status names). Design: docs/rpc.md.
 *
 * Threads: rpc_runtime_start() starts one completion-queue thread that
 * serves every rpc_server of the runtime. Handlers run on that thread, one
 * at a time, with the runtime's lock held. rpc_server_notify() and
 * rpc_call_complete() may be called from any thread. Client calls block the
 * calling thread on a queue of their own.
 *
 * Errors: functions returning int return 0, or -1 with a message in
 * err[errlen]. */
#ifndef GP_RPC_H
#define GP_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

/* How a method is answered. */
enum rpc_method_kind {
    RPC_METHOD_UNARY,  /* one request, one reply: rpc_handlers.unary */
    RPC_METHOD_STREAM, /* server-streaming snapshots: rpc_handlers.snapshot */
};

/* One method a server serves: its full gRPC name
 * ("/v1beta1.DevicePlugin/Allocate") and how it is answered. */
struct rpc_method {
    const char *name;
    enum rpc_method_kind kind;
};

/* gRPC status codes used in replies (values from the gRPC spec), plus
 * RPC_DEFERRED, which is not a gRPC code: a handler returns it after
 * rpc_call_defer() parked the call. */
enum rpc_status {
    RPC_OK = 0,
    RPC_CANCELLED = 1,
    RPC_INVALID_ARGUMENT = 3,
    RPC_DEADLINE_EXCEEDED = 4,
    RPC_NOT_FOUND = 5,
    RPC_RESOURCE_EXHAUSTED = 8,
    RPC_FAILED_PRECONDITION = 9,
    RPC_UNIMPLEMENTED = 12,
    RPC_INTERNAL = 13,
    RPC_UNAVAILABLE = 14,
    RPC_DEFERRED = 100,
};

/* A heap buffer handed between a handler and rpc; the receiver free()s data. */
struct rpc_buf {
    uint8_t *data;
    size_t len;
};

/* One incoming unary call; valid only while its handler runs. */
struct rpc_call;
/* A parked call: owned by whoever holds it until rpc_call_complete(). */
struct rpc_deferred;

struct rpc_handlers {
    void *ctx;
    /* The service: methods[0..method_count) (borrowed: the table must
     * outlive the server). Handlers are told a method by its position in
     * the table; a call to any other name is answered UNIMPLEMENTED
     * without reaching them. */
    const struct rpc_method *methods;
    size_t method_count;
    /* RPC_METHOD_UNARY methods; `method` indexes `methods`. req/req_len:
     * the request's bytes (borrowed until the handler returns). NULL only
     * when the table has no unary method. Three ways to answer:
     *   - fill *resp (ownership passes to rpc) and return RPC_OK;
     *   - write a message naming the problem into msg, return the status;
     *   - d = rpc_call_defer(call), hand d to another thread, return
     *     RPC_DEFERRED; that thread answers with rpc_call_complete(d, ...). */
    enum rpc_status (*unary)(void *ctx, struct rpc_call *call, size_t method, const uint8_t *req,
                             size_t req_len, struct rpc_buf *resp, char *msg, size_t msglen);
    /* RPC_METHOD_STREAM methods (ListAndWatch): the request's content is
     * ignored; the stream sends the current encoded snapshot (for the
     * DevicePlugin, a ListAndWatchResponse) and its generation (bumped on
     * every change). Called whenever a stream can send; a stream that
     * already sent `generation` is not sent the same again. Returns 0, or
     * -1 (the stream ends with INTERNAL). NULL only when the table has no
     * stream method. */
    int (*snapshot)(void *ctx, struct rpc_buf *out, uint64_t *generation);
};

struct rpc_runtime;
struct rpc_server;

/* grpc_init + the completion-queue thread. Signals must already be blocked
 * in the calling thread so gRPC's threads inherit the mask. */
GP_MUST_USE int rpc_runtime_start(struct rpc_runtime **out, char *err, size_t errlen);
/* Stops every server still running, joins the thread, grpc_shutdown. Parked
 * calls are cancelled; their handles stay valid for rpc_call_complete(). */
void rpc_runtime_stop(struct rpc_runtime *rt);

/* Serve handlers->methods on a unix socket. Refuses (-1, err) when
 * another live process accepts connections on socket_path (a stale socket
 * file is replaced), or when the table lacks the handler one of its
 * methods needs. handlers is copied (the method table is borrowed). */
GP_MUST_USE int rpc_server_start(struct rpc_runtime *rt, const char *socket_path,
                                 const struct rpc_handlers *handlers, struct rpc_server **out,
                                 char *err, size_t errlen);
/* The snapshot changed: every open ListAndWatch stream sends the new one.
 * Any thread, but not a handler. */
void rpc_server_notify(struct rpc_server *srv);
/* Ends open streams with status OK, cancels parked calls (UNAVAILABLE),
 * stops serving, removes the socket file (only if it is still ours), frees
 * srv. NULL is a no-op. Not from a handler. */
void rpc_server_stop(struct rpc_server *srv);

/* ---- deferred replies -------------------------------------------------------
 * A handler that cannot answer at once parks its call: the completion-queue
 * thread goes on serving every other call, stream and socket meanwhile. */

/* In a unary handler only. Returns the handle (the caller owns it until it
 * passes it to rpc_call_complete), or NULL when out of memory: then answer
 * synchronously. */
GP_MUST_USE struct rpc_deferred *rpc_call_defer(struct rpc_call *call);
/* Answers a parked call and frees d; from any thread, exactly once per
 * handle. resp->data (may be NULL) is taken over and freed in every case;
 * msg is the status message for a status other than RPC_OK. When the client
 * went away or the server stopped meanwhile, the answer is dropped (the
 * call was already cancelled) and d is freed all the same. Safe after
 * rpc_server_stop() and rpc_runtime_stop(). */
void rpc_call_complete(struct rpc_deferred *d, enum rpc_status status, struct rpc_buf *resp,
                       const char *msg);

/* ---- the unary client ----------------------------------------------------------
 * One persistent channel per rpc_client; calls block the calling thread on
 * their own queue and never touch the runtime's thread, so the kubelet's
 * callbacks (GetDevicePluginOptions inside Register) are served meanwhile.
 * A client is used by one thread at a time. */
struct rpc_client;

GP_MUST_USE int rpc_client_open(struct rpc_runtime *rt, const char *socket_path,
                                struct rpc_client **out, char *err, size_t errlen);
/* Start connecting now (non-blocking), so that a later call on this client
 * finds the connection made: the daemon overlaps the kubelet handshake with
 * NVML enumeration. */
void rpc_client_connect(struct rpc_client *client);
/* Unary method `method` (its full name: "/v1beta1.Registration/Register")
 * with an encoded request. On OK, *resp (when resp is not NULL) holds the
 * encoded reply, malloc'd (free() it; data is non-NULL even for 0 bytes).
 * With wait_for_ready false the call fails at once (UNAVAILABLE) when
 * nothing accepts on the socket, instead of retrying the connection until
 * the deadline: the daemon prefers to retry on its own schedule and stay
 * responsive. timeout_ms < 0: no deadline. Errors read
 * "<Method> failed: <STATUS> (<code>): <message>", <Method> being the
 * name's last component ("Register failed: UNAVAILABLE (14): ..."). */
GP_MUST_USE int rpc_client_call(struct rpc_client *client, const char *method, const uint8_t *req,
                                size_t req_len, int timeout_ms, bool wait_for_ready,
                                struct rpc_buf *resp, char *err, size_t errlen);
/* NULL is a no-op. */
void rpc_client_close(struct rpc_client *client);

#endif
