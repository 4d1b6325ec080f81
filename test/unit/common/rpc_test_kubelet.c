/* rpc_test_kubelet.c -- a fake kubelet's Registration service for tests and
 * benches (see rpc_test_client.h). A plain synchronous gRPC server: one
 * thread, one call at a time, each call's batches started and awaited in
 * turn, so no call state machine is needed. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include <grpc/grpc_security.h>

#include "rpc_internal.h"
#include "rpc_test_client.h"

static const char REGISTER_PATH[] = "/v1beta1.Registration/Register";

enum kubelet_tag { KTAG_NEW_CALL = 1, KTAG_RECV, KTAG_DONE, KTAG_SHUTDOWN };

struct rpc_test_kubelet {
    grpc_server *server;
    grpc_completion_queue *cq;
    pthread_t thread;
    bool thread_started;
    rpc_test_register_fn on_register;
    void *ctx;
    char *socket_path;
    bool shutdown_seen; /* the serving thread's until joined, then stop's */
};

#define TAG(kind) ((void *)(intptr_t)(kind))

/* Waits for `tag`; remembers the shutdown tag if it passes by. Returns the
 * event's success, false when the queue is shut down. */
static bool kubelet_wait(struct rpc_test_kubelet *k, enum kubelet_tag tag)
{
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(k->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            return false;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        if (ev.tag == TAG(KTAG_SHUTDOWN))
            k->shutdown_seen = true;
        if (ev.tag == TAG(tag))
            return ev.success != 0;
    }
}

/* The status (and message) for one call's request. */
static enum rpc_status kubelet_answer(struct rpc_test_kubelet *k, const grpc_call_details *d,
                                      grpc_byte_buffer *request, char *msg, size_t msglen)
{
    if (grpc_slice_str_cmp(d->method, REGISTER_PATH) != 0) {
        snprintf(msg, msglen, "not a device plugin: unknown method");
        return RPC_UNIMPLEMENTED;
    }
    grpc_slice bytes;
    if (request == NULL || rpc_buffer_flatten(request, &bytes) != 0) {
        snprintf(msg, msglen, "request message missing");
        return RPC_INVALID_ARGUMENT;
    }
    enum rpc_status st =
        k->on_register(k->ctx, GRPC_SLICE_START_PTR(bytes), GRPC_SLICE_LENGTH(bytes), msg, msglen);
    grpc_slice_unref(bytes);
    return st;
}

/* Serves one call. False when the server is shutting down. */
static bool kubelet_serve_one(struct rpc_test_kubelet *k)
{
    grpc_call *call = NULL;
    grpc_call_details details;
    grpc_metadata_array metadata;
    grpc_call_details_init(&details);
    grpc_metadata_array_init(&metadata);
    bool served = grpc_server_request_call(k->server, &call, &details, &metadata, k->cq, k->cq,
                                           TAG(KTAG_NEW_CALL)) == GRPC_CALL_OK &&
                  kubelet_wait(k, KTAG_NEW_CALL);
    if (served) {
        grpc_byte_buffer *request = NULL;
        grpc_op ops[4];
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_RECV_MESSAGE;
        ops[0].data.recv_message.recv_message = &request;
        if (grpc_call_start_batch(call, ops, 1, TAG(KTAG_RECV), NULL) == GRPC_CALL_OK)
            kubelet_wait(k, KTAG_RECV);

        char msg[RPC_MSG_LEN] = "";
        enum rpc_status st = kubelet_answer(k, &details, request, msg, sizeof msg);
        grpc_slice text = grpc_slice_from_copied_string(msg);
        grpc_byte_buffer *reply = rpc_buffer_copy(NULL, 0); /* Empty */
        int cancelled = 0;
        size_t n = 0;
        memset(ops, 0, sizeof ops);
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        if (st == RPC_OK) {
            ops[n].op = GRPC_OP_SEND_MESSAGE;
            ops[n++].data.send_message.send_message = reply;
        }
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = (grpc_status_code)st;
        ops[n++].data.send_status_from_server.status_details = msg[0] ? &text : NULL;
        /* No RECV_MESSAGE is pending, so the close may share this batch. */
        ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[n++].data.recv_close_on_server.cancelled = &cancelled;
        if (grpc_call_start_batch(call, ops, n, TAG(KTAG_DONE), NULL) == GRPC_CALL_OK)
            kubelet_wait(k, KTAG_DONE);
        grpc_byte_buffer_destroy(reply);
        grpc_slice_unref(text);
        if (request != NULL)
            grpc_byte_buffer_destroy(request);
    }
    if (call != NULL)
        grpc_call_unref(call);
    grpc_call_details_destroy(&details);
    grpc_metadata_array_destroy(&metadata);
    return served;
}

static void *kubelet_thread(void *arg)
{
    struct rpc_test_kubelet *k = arg;
    while (kubelet_serve_one(k))
        ;
    return NULL;
}

int rpc_test_kubelet_start(const char *socket_path, rpc_test_register_fn on_register, void *ctx,
                           struct rpc_test_kubelet **out, char *err, size_t errlen)
{
    char target[sizeof(struct sockaddr_un) + 8];
    struct rpc_test_kubelet *k = calloc(1, sizeof *k);
    if (k == NULL || (k->socket_path = strdup(socket_path)) == NULL) {
        free(k);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    k->on_register = on_register;
    k->ctx = ctx;
    grpc_init();
    k->cq = grpc_completion_queue_create_for_next(NULL);
    k->server = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(k->server, k->cq, NULL);
    snprintf(target, sizeof target, "unix:%s", socket_path);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(k->server, target, creds);
    grpc_server_credentials_release(creds);
    if (port == 0) {
        snprintf(err, errlen, "cannot listen on %s", socket_path);
        rpc_test_kubelet_stop(k);
        return -1;
    }
    grpc_server_start(k->server);
    int rc = pthread_create(&k->thread, NULL, kubelet_thread, k);
    if (rc != 0) {
        snprintf(err, errlen, "pthread_create: %s", strerror(rc));
        rpc_test_kubelet_stop(k);
        return -1;
    }
    k->thread_started = true;
    *out = k;
    return 0;
}

void rpc_test_kubelet_stop(struct rpc_test_kubelet *k)
{
    if (k == NULL)
        return;
    grpc_server_shutdown_and_notify(k->server, k->cq, TAG(KTAG_SHUTDOWN));
    grpc_server_cancel_all_calls(k->server);
    if (k->thread_started)
        pthread_join(k->thread, NULL);
    if (!k->shutdown_seen)
        kubelet_wait(k, KTAG_SHUTDOWN);
    grpc_server_destroy(k->server);
    grpc_completion_queue_shutdown(k->cq);
    while (grpc_completion_queue_next(k->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(k->cq);
    if (unlink(k->socket_path) != 0 && errno != ENOENT)
        fprintf(stderr, "cannot remove %s: %s\n", k->socket_path, strerror(errno));
    free(k->socket_path);
    free(k);
    grpc_shutdown_blocking();
}
