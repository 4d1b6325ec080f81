/* rpc_test_client.h -- test-only gRPC helpers: a generic unary client, a
 * ListAndWatch reader, a wait-for-ready Register, and a fake kubelet that
 * serves /v1beta1.Registration/Register. Built into the gp_rpc_test library
 * that unit tests and benches link; never part of a program.
 *
 * Threads: every call blocks the calling thread on a queue of its own. A
 * client (and each watch) is used by one thread at a time. A fake kubelet
 * serves on a thread of its own, one call at a time; its register function
 * runs on that thread and may call back into a plugin server.
 *
 * Errors: 0 / -1 with a message, as in rpc.h. */
#ifndef GP_RPC_TEST_CLIENT_H
#define GP_RPC_TEST_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "rpc.h"

/* Pass as req_len to send no request message at all, only the half-close. */
#ifndef RPC_NO_MESSAGE
#define RPC_NO_MESSAGE SIZE_MAX
#endif

/* Unary call on an open client. Returns 0 when the status is OK (*resp is
 * malloc'd, free it), otherwise -1 with *status (a gRPC code, RPC_INTERNAL
 * for local failures) and the status message in msg. timeout_ms < 0: no
 * deadline. method is the full path ("/v1beta1.DevicePlugin/Allocate"). */
GP_MUST_USE int rpc_test_client_call(struct rpc_client *client, const char *method,
                                     const uint8_t *req, size_t req_len, int timeout_ms,
                                     struct rpc_buf *resp, int *status, char *msg, size_t msglen);
/* open + call + close. */
GP_MUST_USE int rpc_test_call(struct rpc_runtime *rt, const char *socket_path, const char *method,
                              const uint8_t *req, size_t req_len, int timeout_ms,
                              struct rpc_buf *resp, int *status, char *err, size_t errlen);
/* Register on a fresh client, waiting up to timeout_ms for the socket to
 * accept (wait-for-ready). */
GP_MUST_USE int rpc_test_register(struct rpc_runtime *rt, const char *kubelet_socket,
                                  const uint8_t *req, size_t req_len, int timeout_ms, char *err,
                                  size_t errlen);

/* ---- ListAndWatch reader ------------------------------------------------------- */
struct rpc_watch;

/* Open a ListAndWatch stream on the client's channel. */
GP_MUST_USE int rpc_test_watch_open(struct rpc_client *client, struct rpc_watch **out, char *err,
                                    size_t errlen);
/* Next stream message: 1 with *msg malloc'd, 0 when timeout_ms passed first
 * (call again; nothing is lost), -1 when the stream ended (status and message
 * in err; *status set when status is not NULL). */
GP_MUST_USE int rpc_test_watch_next(struct rpc_watch *watch, int timeout_ms, struct rpc_buf *msg,
                                    int *status, char *err, size_t errlen);
/* Cancels the stream if still open and frees it. NULL is a no-op. */
void rpc_test_watch_close(struct rpc_watch *watch);

/* Number of ListAndWatch streams the server has open now. */
int rpc_test_stream_count(struct rpc_server *srv);

/* ---- a fake kubelet --------------------------------------------------------------- */
struct rpc_test_kubelet;

/* Answers one Register: RPC_OK, or a status with a message in msg. */
typedef enum rpc_status (*rpc_test_register_fn)(void *ctx, const uint8_t *req, size_t req_len,
                                                char *msg, size_t msglen);

/* Serve Registration on socket_path (other methods: UNIMPLEMENTED). */
GP_MUST_USE int rpc_test_kubelet_start(const char *socket_path, rpc_test_register_fn on_register,
                                       void *ctx, struct rpc_test_kubelet **out, char *err,
                                       size_t errlen);
/* Cancels a call in progress, stops, removes the socket, frees. NULL: no-op. */
void rpc_test_kubelet_stop(struct rpc_test_kubelet *k);

#endif
