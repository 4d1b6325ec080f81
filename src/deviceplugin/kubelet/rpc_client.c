/* rpc_client.c -- the unary client and the pre-connect (see rpc.h).
 *
 * Each call blocks its own thread on the client's pluck queue; nothing here
 * touches a runtime's lock or thread, so the kubelet's callbacks into our
 * servers are served while Register is in flight. No method is known
 * here: the caller names it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>

#include "rpc_internal.h"

/* Reconnect backoff for wait-for-ready clients: the kubelet socket usually
 * appears within a second; the core's default first retry is after 1 s.
 * (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is left alone: in 1.51 it is also the
 * connect-attempt timeout, 20 s, and a small value fails slow handshakes.) */
#define RPC_RECONNECT_BACKOFF_MS 100
#define RPC_RECONNECT_BACKOFF_MAX_MS 1000
/* Register's reply is Empty, the test client's replies are at most a
 * device list; 4 MiB (the core's default) is far more than either needs. */
#define RPC_MAX_REPLY_BYTES (1 << 20)

static grpc_channel *channel_open(const char *socket_path)
{
    char target[sizeof(struct sockaddr_un) + 8];
    snprintf(target, sizeof target, "unix:%s", socket_path);
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ENABLE_CHANNELZ, .value.integer = 0},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ENABLE_RETRIES, .value.integer = 0},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
         .value.integer = RPC_RECONNECT_BACKOFF_MS},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
         .value.integer = RPC_RECONNECT_BACKOFF_MAX_MS},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = RPC_MAX_REPLY_BYTES},
    };
    grpc_channel_args channel_args = {.num_args = sizeof args / sizeof args[0], .args = args};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *channel = grpc_channel_create(target, creds, &channel_args);
    grpc_channel_credentials_release(creds);
    return channel;
}

void rpc_pluck_queue_destroy(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    /* Every tag was plucked already; this only observes the shutdown. */
    grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_completion_queue_destroy(cq);
}

/* Status, message and reply of a finished call into the caller's terms. */
static int unary_outcome(grpc_status_code code, grpc_slice details, const char *error_string,
                         grpc_byte_buffer *response, struct rpc_buf *resp, int *status, char *msg,
                         size_t msglen)
{
    *status = (int)code;
    if (code != GRPC_STATUS_OK) {
        if (GRPC_SLICE_LENGTH(details) > 0)
            rpc_copy_slice_text(details, msg, msglen);
        else
            snprintf(msg, msglen, "%s", error_string ? error_string : rpc_status_name((int)code));
        return -1;
    }
    if (response == NULL) {
        resp->data = malloc(1); /* OK without a message: an empty reply */
    } else if (rpc_buffer_to_rpc_buf(response, resp) != 0) {
        *status = RPC_INTERNAL;
        snprintf(msg, msglen, "cannot read the response");
        return -1;
    }
    if (resp->data == NULL) {
        *status = RPC_INTERNAL;
        snprintf(msg, msglen, "out of memory");
        return -1;
    }
    if (msglen > 0)
        msg[0] = '\0';
    return 0;
}

int rpc_client_unary(struct rpc_client *client, const char *method, const uint8_t *req,
                     size_t req_len, int timeout_ms, uint32_t flags, struct rpc_buf *resp,
                     int *status, char *msg, size_t msglen)
{
    grpc_metadata_array initial_metadata, trailing_metadata;
    grpc_byte_buffer *request = NULL, *response = NULL;
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    grpc_op ops[6];
    size_t n = 0;
    int tag = 0;

    resp->data = NULL;
    resp->len = 0;
    grpc_call *call = grpc_channel_create_call(client->channel, NULL, GRPC_PROPAGATE_DEFAULTS,
                                               client->cq, grpc_slice_from_static_string(method),
                                               NULL, rpc_deadline_after_ms(timeout_ms), NULL);
    if (call == NULL) {
        *status = RPC_INTERNAL;
        snprintf(msg, msglen, "cannot create a call to %s", method);
        return -1;
    }
    grpc_metadata_array_init(&initial_metadata);
    grpc_metadata_array_init(&trailing_metadata);
    memset(ops, 0, sizeof ops);
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n++].flags = flags;
    if (req_len != RPC_NO_MESSAGE) {
        request = rpc_buffer_copy(req, req_len);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = request;
    }
    ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &initial_metadata;
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &response;
    ops[n].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[n].data.recv_status_on_client.trailing_metadata = &trailing_metadata;
    ops[n].data.recv_status_on_client.status = &code;
    ops[n].data.recv_status_on_client.status_details = &details;
    ops[n++].data.recv_status_on_client.error_string = &error_string;

    int rc = -1;
    grpc_call_error e = grpc_call_start_batch(call, ops, n, &tag, NULL);
    if (e != GRPC_CALL_OK) {
        *status = RPC_INTERNAL;
        snprintf(msg, msglen, "grpc_call_start_batch failed: %d", (int)e);
    } else {
        /* The batch always completes (at the latest at the deadline); the
         * outcome is in `code`, not in the event's success flag. */
        grpc_completion_queue_pluck(client->cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        rc = unary_outcome(code, details, error_string, response, resp, status, msg, msglen);
    }
    grpc_call_unref(call);
    if (request != NULL)
        grpc_byte_buffer_destroy(request);
    if (response != NULL)
        grpc_byte_buffer_destroy(response);
    grpc_slice_unref(details);
    gpr_free((void *)error_string);
    grpc_metadata_array_destroy(&initial_metadata);
    grpc_metadata_array_destroy(&trailing_metadata);
    return rc;
}

int rpc_client_open(struct rpc_runtime *rt, const char *socket_path, struct rpc_client **out,
                    char *err, size_t errlen)
{
    (void)rt; /* grpc_init is held by the runtime for as long as it lives */
    if (strlen(socket_path) >= sizeof((struct sockaddr_un *)0)->sun_path) {
        snprintf(err, errlen, "socket path %s is too long", socket_path);
        return -1;
    }
    struct rpc_client *client = calloc(1, sizeof *client);
    if (client == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    client->channel = channel_open(socket_path);
    client->cq = grpc_completion_queue_create_for_pluck(NULL);
    if (client->channel == NULL || client->cq == NULL) {
        snprintf(err, errlen, "cannot create a gRPC channel to %s", socket_path);
        rpc_client_close(client);
        return -1;
    }
    *out = client;
    return 0;
}

void rpc_client_close(struct rpc_client *client)
{
    if (client == NULL)
        return;
    if (client->channel != NULL)
        grpc_channel_destroy(client->channel);
    if (client->cq != NULL)
        rpc_pluck_queue_destroy(client->cq);
    free(client);
}

void rpc_client_connect(struct rpc_client *client)
{
    /* try_to_connect = 1: the handshake runs on gRPC's threads meanwhile.
     * The state it returns is of no use yet. */
    grpc_connectivity_state state = grpc_channel_check_connectivity_state(client->channel, 1);
    (void)state;
}

int rpc_client_call(struct rpc_client *client, const char *method, const uint8_t *req,
                    size_t req_len, int timeout_ms, bool wait_for_ready, struct rpc_buf *resp,
                    char *err, size_t errlen)
{
    struct rpc_buf reply = {0};
    char msg[RPC_MSG_LEN];
    int status = RPC_INTERNAL;

    uint32_t flags = wait_for_ready ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
    int rc = rpc_client_unary(client, method, req, req_len, timeout_ms, flags, &reply, &status, msg,
                              sizeof msg);
    if (rc != 0) {
        /* "/v1beta1.Registration/Register" -> "Register failed: ..." */
        const char *slash = strrchr(method, '/');
        snprintf(err, errlen, "%s failed: %s (%d): %s", slash != NULL ? slash + 1 : method,
                 rpc_status_name(status), status, msg);
        return -1;
    }
    if (resp != NULL)
        *resp = reply;
    else
        free(reply.data);
    return 0;
}
