/* rpc.c -- the kubelet Device Plugin API v1beta1 over gRPC's C core.
 *
 * The only file that includes a gRPC header. Design notes: docs/rpc.md.
 *
 * Server side: one completion queue (cq) and one thread serve every
 * rpc_server. Every event is handled with rt->lock held; other threads that
 * must start a batch (rpc_server_notify, rpc_server_stop) take the same lock,
 * which is how the core wants concurrent start_batch calls serialised. The cq
 * thread only waits in grpc_completion_queue_next() without the lock.
 *
 * Each incoming call is a `struct call` with one tag per batch kind. A batch
 * kind is never started twice at once (the core refuses that), the number of
 * started-but-not-completed batches is counted, and the call is freed only
 * when that count is 0 and RECV_CLOSE_ON_SERVER has completed.
 *
 * Client side: each call blocks its own thread on a pluck queue. */
#include "rpc.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "log.h"

/* Request slots kept posted per server: enough for the kubelet's pattern
 * (one stream plus sequential unary calls) without waiting for a re-post. */
#define RPC_SLOTS 2
/* How long rpc_server_stop lets streams end by themselves before cancelling. */
#define RPC_STOP_GRACE_MS 2000
/* Reconnect backoff for wait-for-ready clients: the kubelet socket usually
 * appears within a second; the core's default first retry is after 1 s.
 * (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is left alone: in 1.51 it is also the
 * connect-attempt timeout, 20 s, and a small value fails slow handshakes.) */
#define RPC_RECONNECT_BACKOFF_MS 100
#define RPC_MSG_LEN 256

static const char REGISTER_PATH[] = "/v1beta1.Registration/Register";
static const char LIST_AND_WATCH_PATH[] = "/v1beta1.DevicePlugin/ListAndWatch";

static const struct {
    const char *path;
    enum rpc_method method;
} METHODS[] = {
    {"/v1beta1.DevicePlugin/GetDevicePluginOptions", RPC_GET_DEVICE_PLUGIN_OPTIONS},
    {"/v1beta1.DevicePlugin/ListAndWatch", RPC_LIST_AND_WATCH},
    {"/v1beta1.DevicePlugin/GetPreferredAllocation", RPC_GET_PREFERRED_ALLOCATION},
    {"/v1beta1.DevicePlugin/Allocate", RPC_ALLOCATE},
    {"/v1beta1.DevicePlugin/PreStartContainer", RPC_PRE_START_CONTAINER},
};

/* ---- types ------------------------------------------------------------------ */

enum tag_kind {
    TAG_NEW_CALL, /* a posted request slot completed */
    TAG_RECV,     /* RECV_MESSAGE */
    TAG_SEND,     /* a stream message (with initial metadata the first time) */
    TAG_STATUS,   /* the final batch: [initial metadata, message,] status */
    TAG_CLOSE,    /* RECV_CLOSE_ON_SERVER: the call is over */
    TAG_SHUTDOWN, /* grpc_server_shutdown_and_notify */
};

struct tag {
    enum tag_kind kind;
    void *owner; /* struct call * or struct rpc_server * */
};

enum route { ROUTE_UNARY, ROUTE_STREAM, ROUTE_REGISTRATION, ROUTE_UNKNOWN };

struct call {
    struct rpc_server *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array request_metadata;
    struct tag new_call_tag, recv_tag, send_tag, status_tag, close_tag;
    enum route route;
    enum rpc_method method;
    int outstanding;          /* batches started and not yet completed */
    bool started;             /* the slot completed: a real call */
    bool closed;              /* RECV_CLOSE_ON_SERVER completed */
    int cancelled;            /* filled by RECV_CLOSE_ON_SERVER */
    bool initial_metadata_sent;
    bool status_started;
    bool sending;             /* a stream SEND_MESSAGE is in flight */
    bool dirty;               /* a notify arrived: send the newest snapshot */
    bool have_sent;           /* sent_generation is meaningful */
    uint64_t sent_generation;
    grpc_byte_buffer *recv_buffer;
    grpc_byte_buffer *send_buffer;
    grpc_slice status_details;
    bool have_status_details;
    struct call *prev, *next; /* the server's open-stream list */
};

struct rpc_server {
    struct rpc_runtime *rt;
    grpc_server *server;
    struct rpc_handlers handlers;
    char *socket_path;
    dev_t socket_dev;
    ino_t socket_ino;
    struct timespec socket_ctime;
    bool have_socket_identity;
    struct tag shutdown_tag;
    bool stopping;
    bool shutdown_done;
    int live_calls;           /* struct calls allocated, slots included */
    struct call *streams;
    int stream_count;
    struct rpc_server *next_server;
};

struct rpc_runtime {
    grpc_completion_queue *cq;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed;   /* a server's shutdown progressed */
    struct rpc_server *servers;
};

/* ---- small helpers ------------------------------------------------------------ */

static gpr_timespec deadline_after_ms(int timeout_ms)
{
    if (timeout_ms < 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

static const char *status_name(int status)
{
    static const char *const names[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if (status < 0 || (size_t)status >= sizeof names / sizeof names[0])
        return "UNKNOWN_STATUS";
    return names[status];
}

/* A byte buffer that owns `data` (freed by the core when the buffer dies). */
static grpc_byte_buffer *buffer_take(uint8_t *data, size_t len)
{
    grpc_slice slice;
    if (len == 0 || data == NULL) {
        free(data);
        slice = grpc_empty_slice();
    } else {
        slice = grpc_slice_new(data, len, free);
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice); /* the buffer holds its own reference */
    return bb;
}

static grpc_byte_buffer *buffer_copy(const uint8_t *data, size_t len)
{
    grpc_slice slice = len == 0 ? grpc_empty_slice()
                                : grpc_slice_from_copied_buffer((const char *)data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

/* Flatten a received buffer into one owned slice (decompressing if needed). */
static int buffer_flatten(grpc_byte_buffer *bb, grpc_slice *out)
{
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return -1;
    *out = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    return 0;
}

/* Received buffer -> malloc'd rpc_buf (always non-NULL data, even for 0 bytes). */
static int buffer_to_rpc_buf(grpc_byte_buffer *bb, struct rpc_buf *out)
{
    grpc_slice slice;
    if (buffer_flatten(bb, &slice) != 0)
        return -1;
    size_t len = GRPC_SLICE_LENGTH(slice);
    out->data = malloc(len + 1);
    if (out->data == NULL) {
        grpc_slice_unref(slice);
        return -1;
    }
    memcpy(out->data, GRPC_SLICE_START_PTR(slice), len);
    out->len = len;
    grpc_slice_unref(slice);
    return 0;
}

static void copy_slice_text(grpc_slice slice, char *out, size_t outlen)
{
    if (outlen == 0)
        return;
    size_t len = GRPC_SLICE_LENGTH(slice);
    if (len >= outlen)
        len = outlen - 1;
    memcpy(out, GRPC_SLICE_START_PTR(slice), len);
    out[len] = '\0';
}

/* ---- server: call lifetime ------------------------------------------------------- */

static void stream_unlink(struct call *c);

static void call_free(struct call *c)
{
    struct rpc_server *srv = c->srv;
    stream_unlink(c); /* never leave a freed call in the stream list */
    if (c->call != NULL)
        grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->request_metadata);
    if (c->recv_buffer != NULL)
        grpc_byte_buffer_destroy(c->recv_buffer);
    if (c->send_buffer != NULL)
        grpc_byte_buffer_destroy(c->send_buffer);
    if (c->have_status_details)
        grpc_slice_unref(c->status_details);
    free(c);
    srv->live_calls--;
    pthread_cond_broadcast(&srv->rt->changed);
}

/* Free the call once nothing of it is pending in the core any more. */
static void call_release_if_done(struct call *c)
{
    if (c->outstanding == 0 && (c->closed || !c->started))
        call_free(c);
}

static bool call_start(struct call *c, const grpc_op *ops, size_t nops, struct tag *tag)
{
    grpc_call_error e = grpc_call_start_batch(c->call, ops, nops, tag, NULL);
    if (e != GRPC_CALL_OK) {
        /* Misuse is reported only here; the call is then left to its close. */
        log_error("grpc_call_start_batch (batch %d) failed: %d", (int)tag->kind, (int)e);
        return false;
    }
    c->outstanding++;
    return true;
}

static void stream_unlink(struct call *c)
{
    struct rpc_server *srv = c->srv;
    if (c->route != ROUTE_STREAM || (c->prev == NULL && srv->streams != c))
        return;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        srv->streams = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    srv->stream_count--;
}

static void stream_link(struct call *c)
{
    struct rpc_server *srv = c->srv;
    c->prev = NULL;
    c->next = srv->streams;
    if (srv->streams != NULL)
        srv->streams->prev = c;
    srv->streams = c;
    srv->stream_count++;
}

/* The final batch. message may be NULL (error statuses carry none). */
static void call_finish(struct call *c, enum rpc_status status, const char *text,
                        grpc_byte_buffer *message)
{
    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!c->initial_metadata_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->initial_metadata_sent = true;
    }
    if (message != NULL) {
        c->send_buffer = message; /* kept alive until the batch completes */
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = message;
    }
    if (text != NULL && text[0] != '\0') {
        c->status_details = grpc_slice_from_copied_string(text);
        c->have_status_details = true;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)status;
    ops[n++].data.send_status_from_server.status_details =
        c->have_status_details ? &c->status_details : NULL;
    c->status_started = true;
    call_start(c, ops, n, &c->status_tag);
}

/* ---- server: ListAndWatch ---------------------------------------------------------- */

/* Send the newest snapshot if it is newer than the last one sent and no send
 * is in flight. Called with rt->lock held, from any thread. */
static void stream_send(struct call *c)
{
    if (c->sending || c->closed || c->status_started || !c->dirty)
        return;
    struct rpc_server *srv = c->srv;
    if (srv->stopping) {
        call_finish(c, RPC_OK, NULL, NULL);
        return;
    }
    struct rpc_buf snap = {0};
    uint64_t generation = 0;
    c->dirty = false;
    if (srv->handlers.snapshot(srv->handlers.ctx, &snap, &generation) != 0) {
        free(snap.data);
        log_error("ListAndWatch: cannot build the device list; ending the stream");
        call_finish(c, RPC_INTERNAL, "cannot build the device list", NULL);
        return;
    }
    if (c->have_sent && generation == c->sent_generation) {
        free(snap.data); /* already sent: coalesced */
        return;
    }
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!c->initial_metadata_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->initial_metadata_sent = true;
    }
    c->send_buffer = buffer_take(snap.data, snap.len);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = c->send_buffer;
    if (!call_start(c, ops, n, &c->send_tag)) {
        grpc_byte_buffer_destroy(c->send_buffer);
        c->send_buffer = NULL;
        return;
    }
    c->sending = true;
    c->have_sent = true;
    c->sent_generation = generation;
}

static void on_stream_sent(struct call *c, bool success)
{
    c->sending = false;
    grpc_byte_buffer_destroy(c->send_buffer);
    c->send_buffer = NULL;
    if (!success || c->closed)
        return; /* the client went away; RECV_CLOSE_ON_SERVER will say so */
    if (c->srv->stopping) {
        call_finish(c, RPC_OK, NULL, NULL);
        return;
    }
    stream_send(c);
}

/* ---- server: dispatch ------------------------------------------------------------- */

static void run_unary(struct call *c, const uint8_t *req, size_t len)
{
    struct rpc_server *srv = c->srv;
    struct rpc_buf resp = {0};
    char msg[RPC_MSG_LEN] = "";
    enum rpc_status status;

    if (c->route == ROUTE_REGISTRATION)
        status = srv->handlers.registration(srv->handlers.ctx, req, len, msg, sizeof msg);
    else
        status = srv->handlers.unary(srv->handlers.ctx, c->method, req, len, &resp, msg,
                                     sizeof msg);
    if (status != RPC_OK) {
        free(resp.data);
        call_finish(c, status, msg[0] != '\0' ? msg : status_name((int)status), NULL);
        return;
    }
    /* Registration answers Empty, encoded as zero bytes. */
    call_finish(c, RPC_OK, NULL, buffer_take(resp.data, resp.len));
}

static void on_request_received(struct call *c, bool success)
{
    grpc_byte_buffer *bb = c->recv_buffer;
    c->recv_buffer = NULL;
    if (bb == NULL) {
        /* success with no message: a clean half-close without a request,
         * unless the call already failed (then there is nobody to answer). */
        if (success && !grpc_call_failed_before_recv_message(c->call) && !c->closed)
            call_finish(c, RPC_INVALID_ARGUMENT, "request message missing", NULL);
        return;
    }
    if (c->closed) {
        /* Cancelled while the request was in flight: nobody to answer. */
        grpc_byte_buffer_destroy(bb);
        return;
    }
    grpc_slice request;
    if (buffer_flatten(bb, &request) != 0) {
        grpc_byte_buffer_destroy(bb);
        call_finish(c, RPC_INTERNAL, "cannot read the request", NULL);
        return;
    }
    grpc_byte_buffer_destroy(bb);
    if (c->route == ROUTE_STREAM) {
        /* The request is Empty; its content does not matter. */
        grpc_slice_unref(request);
        stream_link(c);
        c->dirty = true;
        stream_send(c);
        return;
    }
    run_unary(c, GRPC_SLICE_START_PTR(request), GRPC_SLICE_LENGTH(request));
    grpc_slice_unref(request);
}

static void route_call(struct call *c)
{
    c->route = ROUTE_UNKNOWN;
    if (grpc_slice_str_cmp(c->details.method, REGISTER_PATH) == 0) {
        if (c->srv->handlers.registration != NULL)
            c->route = ROUTE_REGISTRATION;
        return;
    }
    for (size_t i = 0; i < sizeof METHODS / sizeof METHODS[0]; i++) {
        if (grpc_slice_str_cmp(c->details.method, METHODS[i].path) == 0) {
            c->method = METHODS[i].method;
            c->route = c->method == RPC_LIST_AND_WATCH ? ROUTE_STREAM : ROUTE_UNARY;
            return;
        }
    }
}

static int post_slot(struct rpc_server *srv);

static void on_new_call(struct call *c, bool success)
{
    struct rpc_server *srv = c->srv;
    if (!success) {
        /* The server is shutting down: the slot is returned unused. */
        return;
    }
    c->started = true;
    if (!srv->stopping && post_slot(srv) != 0)
        log_error("cannot post a gRPC request slot; serving with fewer");

    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    if (!call_start(c, &op, 1, &c->close_tag)) {
        /* Without the close batch we would never learn the call ended. */
        grpc_call_cancel(c->call, NULL);
        c->closed = true;
        return;
    }
    route_call(c);
    if (c->route == ROUTE_UNKNOWN) {
        char text[RPC_MSG_LEN];
        snprintf(text, sizeof text, "unknown method %.*s",
                 (int)GRPC_SLICE_LENGTH(c->details.method),
                 (const char *)GRPC_SLICE_START_PTR(c->details.method));
        log_v(1, "%s", text);
        call_finish(c, RPC_UNIMPLEMENTED, text, NULL);
        return;
    }
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_buffer;
    call_start(c, &op, 1, &c->recv_tag);
}

static void on_closed(struct call *c)
{
    c->closed = true;
    if (c->route == ROUTE_STREAM)
        log_v(2, "ListAndWatch stream closed (cancelled=%d)", c->cancelled);
    stream_unlink(c);
    pthread_cond_broadcast(&c->srv->rt->changed);
}

static void dispatch_call_event(struct tag *tag, bool success)
{
    /* Copy what we need out of the tag first: handling may free the call. */
    enum tag_kind kind = tag->kind;
    struct call *c = tag->owner;

    if (kind != TAG_NEW_CALL)
        c->outstanding--;
    switch (kind) {
    case TAG_NEW_CALL:
        on_new_call(c, success);
        break;
    case TAG_RECV:
        on_request_received(c, success);
        break;
    case TAG_SEND:
        on_stream_sent(c, success);
        break;
    case TAG_STATUS:
        if (c->send_buffer != NULL) {
            grpc_byte_buffer_destroy(c->send_buffer);
            c->send_buffer = NULL;
        }
        break;
    case TAG_CLOSE:
        on_closed(c);
        break;
    case TAG_SHUTDOWN:
        break;
    }
    call_release_if_done(c);
}

static void dispatch(struct rpc_runtime *rt, struct tag *tag, bool success)
{
    if (tag->kind == TAG_SHUTDOWN) {
        struct rpc_server *srv = tag->owner;
        srv->shutdown_done = true;
        pthread_cond_broadcast(&rt->changed);
        return;
    }
    dispatch_call_event(tag, success);
}

static void *cq_thread_main(void *arg)
{
    struct rpc_runtime *rt = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(rt->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                                   NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        pthread_mutex_lock(&rt->lock);
        dispatch(rt, ev.tag, ev.success != 0);
        pthread_mutex_unlock(&rt->lock);
    }
    return NULL;
}

/* Keep one more generic request slot posted. Called with rt->lock held. */
static int post_slot(struct rpc_server *srv)
{
    struct call *c = calloc(1, sizeof *c);
    if (c == NULL)
        return -1;
    c->srv = srv;
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->request_metadata);
    c->new_call_tag = (struct tag){TAG_NEW_CALL, c};
    c->recv_tag = (struct tag){TAG_RECV, c};
    c->send_tag = (struct tag){TAG_SEND, c};
    c->status_tag = (struct tag){TAG_STATUS, c};
    c->close_tag = (struct tag){TAG_CLOSE, c};
    srv->live_calls++;
    grpc_call_error e = grpc_server_request_call(srv->server, &c->call, &c->details,
                                                 &c->request_metadata, srv->rt->cq,
                                                 srv->rt->cq, &c->new_call_tag);
    if (e != GRPC_CALL_OK) {
        log_error("grpc_server_request_call failed: %d", (int)e);
        call_free(c);
        return -1;
    }
    return 0;
}

/* ---- runtime -------------------------------------------------------------------- */

int rpc_runtime_start(struct rpc_runtime **out, char *err, size_t errlen)
{
    struct rpc_runtime *rt = calloc(1, sizeof *rt);
    if (rt == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    grpc_init();
    rt->cq = grpc_completion_queue_create_for_next(NULL);
    if (rt->cq == NULL) {
        snprintf(err, errlen, "cannot create a gRPC completion queue");
        goto fail_grpc;
    }
    pthread_mutex_init(&rt->lock, NULL);
    pthread_cond_init(&rt->changed, NULL);
    int rc = pthread_create(&rt->thread, NULL, cq_thread_main, rt);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the gRPC thread: %s", strerror(rc));
        goto fail_cq;
    }
    *out = rt;
    return 0;

fail_cq:
    pthread_cond_destroy(&rt->changed);
    pthread_mutex_destroy(&rt->lock);
    grpc_completion_queue_shutdown(rt->cq);
    grpc_completion_queue_destroy(rt->cq);
fail_grpc:
    grpc_shutdown_blocking();
    free(rt);
    return -1;
}

void rpc_runtime_stop(struct rpc_runtime *rt)
{
    if (rt == NULL)
        return;
    for (;;) {
        pthread_mutex_lock(&rt->lock);
        struct rpc_server *srv = rt->servers;
        pthread_mutex_unlock(&rt->lock);
        if (srv == NULL)
            break;
        rpc_server_stop(srv);
    }
    /* Every server is destroyed, so nothing can queue events any more; the
     * thread sees GRPC_QUEUE_SHUTDOWN once the queue is drained. */
    grpc_completion_queue_shutdown(rt->cq);
    pthread_join(rt->thread, NULL);
    grpc_completion_queue_destroy(rt->cq);
    pthread_cond_destroy(&rt->changed);
    pthread_mutex_destroy(&rt->lock);
    free(rt);
    grpc_shutdown_blocking();
}

/* ---- socket safety -------------------------------------------------------------- */

/* The core unlinks whatever file sits at the path and binds, which would take
 * the socket away from a live server. Look first: connect, and only remove a
 * file nobody answers on. */
static int socket_path_claim(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    struct stat st;

    if (strlen(path) >= sizeof addr.sun_path) {
        snprintf(err, errlen, "socket path %s is too long", path);
        return -1;
    }
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "cannot stat %s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "%s exists and is not a socket; refusing to replace it", path);
        return -1;
    }
    memcpy(addr.sun_path, path, strlen(path) + 1);
    /* Non-blocking: a live server with a full backlog answers EAGAIN
     * instead of blocking us; that is a live server too. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    int rc = connect(fd, (struct sockaddr *)&addr, sizeof addr);
    int saved = errno;
    close(fd);
    if (rc == 0 || saved == EAGAIN || saved == EINPROGRESS) {
        snprintf(err, errlen, "%s is served by another live process; refusing to take it over",
                 path);
        return -1;
    }
    if (saved != ECONNREFUSED && saved != ENOENT) {
        snprintf(err, errlen, "cannot probe %s: %s", path, strerror(saved));
        return -1;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "cannot remove stale socket %s: %s", path, strerror(errno));
        return -1;
    }
    log_info("removed stale socket %s", path);
    return 0;
}

static void socket_remember(struct rpc_server *srv)
{
    struct stat st;
    if (stat(srv->socket_path, &st) != 0) {
        log_warn("cannot stat %s after bind: %s", srv->socket_path, strerror(errno));
        return;
    }
    srv->socket_dev = st.st_dev;
    srv->socket_ino = st.st_ino;
    srv->socket_ctime = st.st_ctim;
    srv->have_socket_identity = true;
}

/* Remove the socket file only if it is still the one we bound: someone may
 * have replaced it since (a new instance, a kubelet cleaning its directory). */
static void socket_release(struct rpc_server *srv)
{
    struct stat st;
    if (!srv->have_socket_identity || lstat(srv->socket_path, &st) != 0)
        return;
    if (st.st_dev != srv->socket_dev || st.st_ino != srv->socket_ino ||
        st.st_ctim.tv_sec != srv->socket_ctime.tv_sec ||
        st.st_ctim.tv_nsec != srv->socket_ctime.tv_nsec) {
        log_info("%s was replaced by someone else; leaving it", srv->socket_path);
        return;
    }
    if (unlink(srv->socket_path) != 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", srv->socket_path, strerror(errno));
}

/* ---- servers -------------------------------------------------------------------- */

static grpc_server *server_create(void)
{
    grpc_arg args[] = {
        /* channelz keeps per-channel bookkeeping nobody reads here */
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ENABLE_CHANNELZ, .value.integer = 0},
    };
    grpc_channel_args channel_args = {.num_args = sizeof args / sizeof args[0], .args = args};
    return grpc_server_create(&channel_args, NULL);
}

/* The core unlinks its listening socket's path when the server shuts down,
 * whoever owns the file by then. So it binds a private name next to the real
 * one, and rename(2) moves the socket into place atomically; the core later
 * unlinks only the private name (long gone), and the real path is removed by
 * socket_release() alone. Falls back to binding the path itself when the
 * private name would not fit in sun_path. */
static void private_bind_path(const char *path, char *out, size_t outlen)
{
    const char *slash = strrchr(path, '/');
    int dir_len = slash != NULL ? (int)(slash - path) + 1 : 0;
    int n = snprintf(out, outlen, "%.*s.%s.%ld", dir_len, path, path + dir_len, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof((struct sockaddr_un *)0)->sun_path || (size_t)n >= outlen)
        snprintf(out, outlen, "%s", path);
}

static int server_bind(struct rpc_server *srv, char *err, size_t errlen)
{
    char bind_path[sizeof(struct sockaddr_un)], target[sizeof(struct sockaddr_un) + 8];
    private_bind_path(srv->socket_path, bind_path, sizeof bind_path);
    snprintf(target, sizeof target, "unix:%s", bind_path);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(srv->server, target, creds);
    grpc_server_credentials_release(creds);
    if (port == 0) {
        snprintf(err, errlen, "cannot listen on %s", bind_path);
        return -1;
    }
    if (strcmp(bind_path, srv->socket_path) != 0 && rename(bind_path, srv->socket_path) != 0) {
        snprintf(err, errlen, "cannot move %s to %s: %s", bind_path, srv->socket_path,
                 strerror(errno));
        unlink(bind_path);
        return -1;
    }
    return 0;
}

int rpc_server_start(struct rpc_runtime *rt, const char *socket_path,
                     const struct rpc_handlers *handlers, struct rpc_server **out,
                     char *err, size_t errlen)
{
    if (socket_path_claim(socket_path, err, errlen) != 0)
        return -1;
    struct rpc_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL || (srv->socket_path = strdup(socket_path)) == NULL) {
        free(srv);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    srv->rt = rt;
    srv->handlers = *handlers;
    srv->shutdown_tag = (struct tag){TAG_SHUTDOWN, srv};
    srv->server = server_create();
    if (srv->server == NULL) {
        snprintf(err, errlen, "cannot create a gRPC server");
        goto fail;
    }
    grpc_server_register_completion_queue(srv->server, rt->cq, NULL);
    if (server_bind(srv, err, errlen) != 0) {
        grpc_server_destroy(srv->server); /* never started: no shutdown needed */
        goto fail;
    }
    grpc_server_start(srv->server);
    socket_remember(srv);

    pthread_mutex_lock(&rt->lock);
    int posted = 0;
    for (int i = 0; i < RPC_SLOTS; i++)
        posted += post_slot(srv) == 0;
    srv->next_server = rt->servers;
    rt->servers = srv;
    pthread_mutex_unlock(&rt->lock);
    if (posted == 0) {
        rpc_server_stop(srv);
        snprintf(err, errlen, "cannot post gRPC request slots on %s", socket_path);
        return -1;
    }
    *out = srv;
    return 0;

fail:
    free(srv->socket_path);
    free(srv);
    return -1;
}

void rpc_server_notify(struct rpc_server *srv)
{
    if (srv == NULL)
        return;
    pthread_mutex_lock(&srv->rt->lock);
    for (struct call *c = srv->streams; c != NULL; c = c->next) {
        c->dirty = true;
        stream_send(c); /* from this thread: no wait for the cq thread */
    }
    pthread_mutex_unlock(&srv->rt->lock);
}

int rpc_server_stream_count(struct rpc_server *srv)
{
    pthread_mutex_lock(&srv->rt->lock);
    int n = srv->stream_count;
    pthread_mutex_unlock(&srv->rt->lock);
    return n;
}

static void server_unlink_from_runtime(struct rpc_server *srv)
{
    struct rpc_server **p = &srv->rt->servers;
    while (*p != NULL && *p != srv)
        p = &(*p)->next_server;
    if (*p == srv)
        *p = srv->next_server;
}

static bool server_drained(const struct rpc_server *srv)
{
    return srv->shutdown_done && srv->live_calls == 0;
}

/* Wait (rt->lock held) until drained or the deadline passes. */
static void server_wait_drained(struct rpc_server *srv, const struct timespec *deadline)
{
    while (!server_drained(srv)) {
        if (deadline == NULL) {
            pthread_cond_wait(&srv->rt->changed, &srv->rt->lock);
        } else if (pthread_cond_timedwait(&srv->rt->changed, &srv->rt->lock, deadline) ==
                   ETIMEDOUT) {
            return;
        }
    }
}

void rpc_server_stop(struct rpc_server *srv)
{
    if (srv == NULL)
        return;
    struct rpc_runtime *rt = srv->rt;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += RPC_STOP_GRACE_MS / 1000;
    deadline.tv_nsec += (long)(RPC_STOP_GRACE_MS % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }

    pthread_mutex_lock(&rt->lock);
    srv->stopping = true;
    /* Streams never end by themselves, and shutdown waits for every call:
     * end them with OK first (after any send in flight). */
    for (struct call *c = srv->streams; c != NULL; c = c->next)
        if (!c->sending && !c->status_started && !c->closed)
            call_finish(c, RPC_OK, NULL, NULL);
    grpc_server_shutdown_and_notify(srv->server, rt->cq, &srv->shutdown_tag);
    server_wait_drained(srv, &deadline);
    if (!server_drained(srv)) {
        log_warn("gRPC calls on %s still open after %d ms; cancelling them", srv->socket_path,
                 RPC_STOP_GRACE_MS);
        grpc_server_cancel_all_calls(srv->server);
        server_wait_drained(srv, NULL);
    }
    server_unlink_from_runtime(srv);
    pthread_mutex_unlock(&rt->lock);

    grpc_server_destroy(srv->server);
    socket_release(srv);
    free(srv->socket_path);
    free(srv);
}

/* ---- client ---------------------------------------------------------------------- */

struct rpc_client {
    grpc_channel *channel;
    grpc_completion_queue *cq; /* pluck queue for unary calls */
};

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

static grpc_channel *channel_open(const char *socket_path)
{
    char target[sizeof(struct sockaddr_un) + 8];
    snprintf(target, sizeof target, "unix:%s", socket_path);
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ENABLE_CHANNELZ, .value.integer = 0},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ENABLE_RETRIES, .value.integer = 0},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
         .value.integer = RPC_RECONNECT_BACKOFF_MS},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
         .value.integer = 1000},
    };
    grpc_channel_args channel_args = {.num_args = sizeof args / sizeof args[0], .args = args};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *channel = grpc_channel_create(target, creds, &channel_args);
    grpc_channel_credentials_release(creds);
    return channel;
}

static void pluck_queue_destroy(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    /* Every tag was plucked already; this only observes the shutdown. */
    grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_completion_queue_destroy(cq);
}

/* One unary call on `channel`, waiting on the pluck queue `cq`. */
static int unary_call(grpc_channel *channel, grpc_completion_queue *cq, const char *method,
                      const uint8_t *req, size_t req_len, int timeout_ms, uint32_t flags,
                      struct rpc_buf *resp, int *status, char *msg, size_t msglen)
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
    grpc_call *call = grpc_channel_create_call(channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                               grpc_slice_from_static_string(method), NULL,
                                               deadline_after_ms(timeout_ms), NULL);
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
        request = buffer_copy(req, req_len);
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
        grpc_call_unref(call);
        goto out;
    }
    /* The batch always completes (at the latest at the deadline); the
     * outcome is in `code`, not in the event's success flag. */
    grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_call_unref(call);

    *status = (int)code;
    if (code != GRPC_STATUS_OK) {
        if (GRPC_SLICE_LENGTH(details) > 0)
            copy_slice_text(details, msg, msglen);
        else
            snprintf(msg, msglen, "%s", error_string ? error_string : status_name((int)code));
        goto out;
    }
    if (response == NULL) {
        resp->data = malloc(1); /* OK without a message: an empty reply */
    } else if (buffer_to_rpc_buf(response, resp) != 0) {
        *status = RPC_INTERNAL;
        snprintf(msg, msglen, "cannot read the response");
        goto out;
    }
    if (resp->data == NULL) {
        *status = RPC_INTERNAL;
        snprintf(msg, msglen, "out of memory");
        goto out;
    }
    msg[0] = msglen > 0 ? '\0' : msg[0];
    rc = 0;
out:
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

int rpc_client_call(struct rpc_client *client, const char *method, const uint8_t *req,
                    size_t req_len, int timeout_ms, struct rpc_buf *resp, int *status,
                    char *msg, size_t msglen)
{
    return unary_call(client->channel, client->cq, method, req, req_len, timeout_ms, 0, resp,
                      status, msg, msglen);
}

void rpc_client_close(struct rpc_client *client)
{
    if (client == NULL)
        return;
    if (client->channel != NULL)
        grpc_channel_destroy(client->channel);
    if (client->cq != NULL)
        pluck_queue_destroy(client->cq);
    free(client);
}

int rpc_call(struct rpc_runtime *rt, const char *socket_path, const char *method,
             const uint8_t *req, size_t req_len, int timeout_ms, struct rpc_buf *resp,
             int *status, char *err, size_t errlen)
{
    struct rpc_client *client = NULL;
    if (rpc_client_open(rt, socket_path, &client, err, errlen) != 0) {
        *status = RPC_INTERNAL;
        return -1;
    }
    int rc = rpc_client_call(client, method, req, req_len, timeout_ms, resp, status, err,
                             errlen);
    rpc_client_close(client);
    return rc;
}

void rpc_client_connect(struct rpc_client *client)
{
    /* try_to_connect = 1: the handshake runs on gRPC's threads meanwhile. */
    (void)grpc_channel_check_connectivity_state(client->channel, 1);
}

int rpc_client_register(struct rpc_client *client, const uint8_t *req, size_t req_len,
                        int timeout_ms, bool wait_for_ready, char *err, size_t errlen)
{
    struct rpc_buf resp = {0};
    char msg[RPC_MSG_LEN];
    int status = RPC_INTERNAL;

    uint32_t flags = wait_for_ready ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
    int rc = unary_call(client->channel, client->cq, REGISTER_PATH, req, req_len, timeout_ms,
                        flags, &resp, &status, msg, sizeof msg);
    free(resp.data);
    if (rc != 0) {
        snprintf(err, errlen, "Register failed: %s (%d): %s", status_name(status), status, msg);
        return -1;
    }
    return 0;
}

int rpc_register(struct rpc_runtime *rt, const char *kubelet_socket, const uint8_t *req,
                 size_t req_len, int timeout_ms, char *err, size_t errlen)
{
    struct rpc_client *client = NULL;
    if (rpc_client_open(rt, kubelet_socket, &client, err, errlen) != 0)
        return -1;
    /* Wait for the kubelet socket to accept instead of failing at once. */
    int rc = rpc_client_register(client, req, req_len, timeout_ms, true, err, errlen);
    rpc_client_close(client);
    return rc;
}

/* ---- client: ListAndWatch -------------------------------------------------------- */

int rpc_client_watch_open(struct rpc_client *client, struct rpc_watch **out, char *err,
                          size_t errlen)
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
                                       grpc_slice_from_static_string(LIST_AND_WATCH_PATH),
                                       NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (w->call == NULL) {
        snprintf(err, errlen, "cannot create the ListAndWatch call");
        pluck_queue_destroy(w->cq);
        free(w);
        return -1;
    }
    grpc_metadata_array_init(&w->initial_metadata);
    grpc_metadata_array_init(&w->trailing_metadata);
    w->status_details = grpc_empty_slice();

    /* The first batch completes only when the server answers; it is
     * collected in close, so a silent server cannot block open. */
    w->request = buffer_copy(NULL, 0); /* Empty */
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
    if (e == GRPC_CALL_OK) {
        /* The status arrives when the stream ends: a batch of its own. */
        grpc_op status_op;
        memset(&status_op, 0, sizeof status_op);
        status_op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        status_op.data.recv_status_on_client.trailing_metadata = &w->trailing_metadata;
        status_op.data.recv_status_on_client.status = &w->status;
        status_op.data.recv_status_on_client.status_details = &w->status_details;
        e = grpc_call_start_batch(w->call, &status_op, 1, &w->status_tag, NULL);
    }
    if (e != GRPC_CALL_OK) {
        snprintf(err, errlen, "cannot start the ListAndWatch call: %d", (int)e);
        w->status_done = true; /* nothing to collect */
        rpc_client_watch_close(w);
        return -1;
    }
    *out = w;
    return 0;
}

static void watch_report_end(struct rpc_watch *w, int *status, char *err, size_t errlen)
{
    if (!w->status_done) {
        grpc_completion_queue_pluck(w->cq, &w->status_tag,
                                    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        w->status_done = true;
    }
    w->ended = true;
    if (status != NULL)
        *status = (int)w->status;
    char text[RPC_MSG_LEN];
    copy_slice_text(w->status_details, text, sizeof text);
    snprintf(err, errlen, "stream ended: %s (%d)%s%s", status_name((int)w->status),
             (int)w->status, text[0] ? ": " : "", text);
}

int rpc_client_watch_next(struct rpc_watch *w, int timeout_ms, struct rpc_buf *msg,
                          int *status, char *err, size_t errlen)
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
    grpc_event ev = grpc_completion_queue_pluck(w->cq, &w->recv_tag,
                                                deadline_after_ms(timeout_ms), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT)
        return 0;
    w->recv_pending = false;
    if (w->message == NULL) {
        watch_report_end(w, status, err, errlen);
        return -1;
    }
    int rc = buffer_to_rpc_buf(w->message, msg);
    grpc_byte_buffer_destroy(w->message);
    w->message = NULL;
    if (rc != 0) {
        snprintf(err, errlen, "cannot read a stream message");
        return -1;
    }
    return 1;
}

void rpc_client_watch_close(struct rpc_watch *w)
{
    if (w == NULL)
        return;
    grpc_call_cancel(w->call, NULL);
    /* Cancelling completes every pending batch; collect them before unref. */
    if (w->start_pending)
        grpc_completion_queue_pluck(w->cq, &w->start_tag, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL);
    if (w->recv_pending)
        grpc_completion_queue_pluck(w->cq, &w->recv_tag, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL);
    if (!w->status_done)
        grpc_completion_queue_pluck(w->cq, &w->status_tag, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL);
    if (w->message != NULL)
        grpc_byte_buffer_destroy(w->message);
    if (w->request != NULL)
        grpc_byte_buffer_destroy(w->request);
    grpc_call_unref(w->call);
    grpc_metadata_array_destroy(&w->initial_metadata);
    grpc_metadata_array_destroy(&w->trailing_metadata);
    grpc_slice_unref(w->status_details);
    pluck_queue_destroy(w->cq);
    free(w);
}
