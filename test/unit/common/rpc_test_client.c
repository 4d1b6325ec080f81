/* rpc_test_client.c -- test-only clients (see rpc_test_client.h). Reads the
 * transport's structures through rpc_internal.h. */
#include "rpc_test_client.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_internal.h"

static const char LIST_AND_WATCH_PATH[] = "/v1beta1.DevicePlugin/ListAndWatch";

int rpc_test_client_call(struct rpc_client *client, const char *method, const uint8_t *req,
                         size_t req_len, int timeout_ms, struct rpc_buf *resp, int *status,
                         char *msg, size_t msglen)
{
    return rpc_client_unary(client, method, req, req_len, timeout_ms, 0, resp, status, msg, msglen);
}

int rpc_test_call(struct rpc_runtime *rt, const char *socket_path, const char *method,
                  const uint8_t *req, size_t req_len, int timeout_ms, struct rpc_buf *resp,
                  int *status, char *err, size_t errlen)
{
    struct rpc_client *client = NULL;
    resp->data = NULL;
    resp->len = 0;
    if (rpc_client_open(rt, socket_path, &client, err, errlen) != 0) {
        *status = RPC_INTERNAL;
        return -1;
    }
    int rc =
        rpc_test_client_call(client, method, req, req_len, timeout_ms, resp, status, err, errlen);
    rpc_client_close(client);
    return rc;
}

int rpc_test_register(struct rpc_runtime *rt, const char *kubelet_socket, const uint8_t *req,
                      size_t req_len, int timeout_ms, char *err, size_t errlen)
{
    struct rpc_client *client = NULL;
    if (rpc_client_open(rt, kubelet_socket, &client, err, errlen) != 0)
        return -1;
    int rc = rpc_client_call(client, "/v1beta1.Registration/Register", req, req_len, timeout_ms,
                             true, NULL, err, errlen);
    rpc_client_close(client);
    return rc;
}

int rpc_test_stream_count(struct rpc_server *srv)
{
    int n = 0;
    pthread_mutex_lock(&srv->rt->lock);
    for (const struct rpc_call *c = srv->streams; c != NULL; c = c->next)
        n++;
    pthread_mutex_unlock(&srv->rt->lock);
    return n;
}

/* ---- ListAndWatch reader -------------------------------------------------------- */

struct rpc_watch {
    grpc_call *call;
    grpc_completion_queue *cq;
    grpc_metadata_array initial_metadata;
    grpc_metadata_array trailing_metadata;
    grpc_status_code status;
    grpc_slice status_details;
    grpc_byte_buffer *request;
    grpc_byte_buffer *message;
    int start_tag, recv_tag, status_tag; /* addresses used as tags */
    bool start_pending;
    bool recv_pending;
    bool status_done;
    bool ended;
};

/* The first batch completes only when the server answers; it is collected
 * in close, so a silent server cannot block open. The status arrives when
 * the stream ends: a batch of its own. */
static grpc_call_error watch_start(struct rpc_watch *w)
{
    w->request = rpc_buffer_copy(NULL, 0); /* Empty */
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = w->request;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &w->initial_metadata;
    grpc_call_error e = grpc_call_start_batch(w->call, ops, 4, &w->start_tag, NULL);
    w->start_pending = e == GRPC_CALL_OK;
    if (e != GRPC_CALL_OK)
        return e;
    grpc_op status_op;
    memset(&status_op, 0, sizeof status_op);
    status_op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    status_op.data.recv_status_on_client.trailing_metadata = &w->trailing_metadata;
    status_op.data.recv_status_on_client.status = &w->status;
    status_op.data.recv_status_on_client.status_details = &w->status_details;
    return grpc_call_start_batch(w->call, &status_op, 1, &w->status_tag, NULL);
}

int rpc_test_watch_open(struct rpc_client *client, struct rpc_watch **out, char *err, size_t errlen)
{
    struct rpc_watch *w = calloc(1, sizeof *w);
    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    w->cq = grpc_completion_queue_create_for_pluck(NULL);
    if (w->cq == NULL) {
        snprintf(err, errlen, "cannot create a completion queue");
        free(w);
        return -1;
    }
    w->call = grpc_channel_create_call(client->channel, NULL, GRPC_PROPAGATE_DEFAULTS, w->cq,
                                       grpc_slice_from_static_string(LIST_AND_WATCH_PATH), NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (w->call == NULL) {
        snprintf(err, errlen, "cannot create the ListAndWatch call");
        rpc_pluck_queue_destroy(w->cq);
        free(w);
        return -1;
    }
    grpc_metadata_array_init(&w->initial_metadata);
    grpc_metadata_array_init(&w->trailing_metadata);
    w->status_details = grpc_empty_slice();
    grpc_call_error e = watch_start(w);
    if (e != GRPC_CALL_OK) {
        snprintf(err, errlen, "cannot start the ListAndWatch call: %d", (int)e);
        w->status_done = true; /* nothing to collect */
        rpc_test_watch_close(w);
        return -1;
    }
    *out = w;
    return 0;
}

static void watch_report_end(struct rpc_watch *w, int *status, char *err, size_t errlen)
{
    if (!w->status_done) {
        grpc_completion_queue_pluck(w->cq, &w->status_tag, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL);
        w->status_done = true;
    }
    w->ended = true;
    if (status != NULL)
        *status = (int)w->status;
    char text[RPC_MSG_LEN];
    rpc_copy_slice_text(w->status_details, text, sizeof text);
    snprintf(err, errlen, "stream ended: %s (%d)%s%s", rpc_status_name((int)w->status),
             (int)w->status, text[0] ? ": " : "", text);
}

int rpc_test_watch_next(struct rpc_watch *w, int timeout_ms, struct rpc_buf *msg, int *status,
                        char *err, size_t errlen)
{
    msg->data = NULL;
    msg->len = 0;
    if (w->ended) {
        watch_report_end(w, status, err, errlen);
        return -1;
    }
    if (!w->recv_pending) {
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &w->message;
        if (grpc_call_start_batch(w->call, &op, 1, &w->recv_tag, NULL) != GRPC_CALL_OK) {
            watch_report_end(w, status, err, errlen);
            return -1;
        }
        w->recv_pending = true;
    }
    grpc_event ev =
        grpc_completion_queue_pluck(w->cq, &w->recv_tag, rpc_deadline_after_ms(timeout_ms), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT)
        return 0;
    w->recv_pending = false;
    if (w->message == NULL) {
        watch_report_end(w, status, err, errlen);
        return -1;
    }
    int rc = rpc_buffer_to_rpc_buf(w->message, msg);
    grpc_byte_buffer_destroy(w->message);
    w->message = NULL;
    if (rc != 0) {
        snprintf(err, errlen, "cannot read a stream message");
        return -1;
    }
    return 1;
}

void rpc_test_watch_close(struct rpc_watch *w)
{
    if (w == NULL)
        return;
    grpc_call_cancel(w->call, NULL);
    /* Cancelling completes every pending batch; collect them before unref. */
    gpr_timespec forever = gpr_inf_future(GPR_CLOCK_REALTIME);
    if (w->start_pending)
        grpc_completion_queue_pluck(w->cq, &w->start_tag, forever, NULL);
    if (w->recv_pending)
        grpc_completion_queue_pluck(w->cq, &w->recv_tag, forever, NULL);
    if (!w->status_done)
        grpc_completion_queue_pluck(w->cq, &w->status_tag, forever, NULL);
    if (w->message != NULL)
        grpc_byte_buffer_destroy(w->message);
    if (w->request != NULL)
        grpc_byte_buffer_destroy(w->request);
    grpc_call_unref(w->call);
    grpc_metadata_array_destroy(&w->initial_metadata);
    grpc_metadata_array_destroy(&w->trailing_metadata);
    grpc_slice_unref(w->status_details);
    rpc_pluck_queue_destroy(w->cq);
    free(w);
}
