/* rpc_server.c -- the runtime, the servers and their call state machine on
 * one completion queue; deferred replies. Design: docs/rpc.md.
 *
 * One completion queue (cq) and one thread serve every rpc_server of a
 * runtime. Every event is handled with rt->lock held; other threads that
 * must start a batch (rpc_server_notify, rpc_server_stop, rpc_call_complete)
 * take the same lock, which is how the core wants concurrent start_batch
 * calls serialised. The cq thread waits in grpc_completion_queue_next()
 * without the lock.
 *
 * Each incoming call is a `struct rpc_call` with one tag per batch kind. A
 * batch kind is never started twice at once (the core refuses that), the
 * number of started-but-not-completed batches is counted (a parked call
 * counts one more), and the call is freed only when that count is 0 and
 * RECV_CLOSE_ON_SERVER has completed. A call is routed by the server's
 * method table (rpc_handlers.methods, the caller's): no service is
 * known here. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>

#include <grpc/grpc_security.h>

#include "clock.h"
#include "log.h"
#include "rpc_internal.h"

/* Request slots kept posted per server: enough for the kubelet's pattern
 * (one stream plus sequential unary calls) without waiting for a re-post. */
#define RPC_SLOTS 2
/* How long rpc_server_stop lets streams end by themselves before cancelling. */
#define RPC_STOP_GRACE_MS 2000
/* The largest request the API needs: an Allocate or GetPreferredAllocation
 * naming every device of a node (512 replicas × ~100 bytes is 50 KiB).
 * Anything bigger is refused with RESOURCE_EXHAUSTED before it is read. */
#define RPC_MAX_REQUEST_BYTES (1 << 20)
/* The cq thread runs handlers and protobuf-c; 256 KiB is ample (the
 * default 8 MiB only costs address space, but says nothing about need). */
#define RPC_THREAD_STACK_BYTES (256 * 1024)

/* A deferred handle's life: PARKED until one of two parties claims it.
 * rpc_call_complete() moves it to COMPLETING and answers; the server moves
 * it to DETACHED when the client went away or the server stops, cancels the
 * call and forgets the handle, which rpc_call_complete() then only frees. */
enum deferred_state { DEFERRED_PARKED, DEFERRED_COMPLETING, DEFERRED_DETACHED };

struct rpc_deferred {
    _Atomic int state;
    struct rpc_call *call; /* valid while PARKED or COMPLETING: the park holds the call */
};

/* ---- call lists (streams, parked calls) ------------------------------------------ */

static bool list_contains(struct rpc_call *const *head, const struct rpc_call *c)
{
    return c->prev != NULL || *head == c;
}

static void list_link(struct rpc_call **head, struct rpc_call *c)
{
    c->prev = NULL;
    c->next = *head;
    if (*head != NULL)
        (*head)->prev = c;
    *head = c;
}

static void list_unlink(struct rpc_call **head, struct rpc_call *c)
{
    if (!list_contains(head, c))
        return;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void stream_unlink(struct rpc_call *c)
{
    if (c->route == ROUTE_STREAM)
        list_unlink(&c->srv->streams, c);
}

/* ---- call lifetime ---------------------------------------------------------------- */

static void call_free(struct rpc_call *c)
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
static void call_release_if_done(struct rpc_call *c)
{
    if (c->outstanding == 0 && (c->closed || !c->started))
        call_free(c);
}

static bool call_start(struct rpc_call *c, const grpc_op *ops, size_t nops, struct rpc_tag *tag)
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

/* The final batch. message may be NULL (error statuses carry none). */
static void call_finish(struct rpc_call *c, enum rpc_status status, const char *text,
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
    if (!call_start(c, ops, n, &c->status_tag) && message != NULL) {
        grpc_byte_buffer_destroy(c->send_buffer);
        c->send_buffer = NULL;
    }
}

/* ---- deferred replies -------------------------------------------------------------- */

struct rpc_deferred *rpc_call_defer(struct rpc_call *c)
{
    if (c == NULL || c->route != ROUTE_UNARY || c->deferred != NULL) {
        log_error("rpc_call_defer outside a unary handler, or twice");
        return NULL;
    }
    struct rpc_deferred *d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    atomic_init(&d->state, DEFERRED_PARKED);
    d->call = c;
    c->deferred = d;
    c->outstanding++; /* the park holds the call until completed or detached */
    list_link(&c->srv->parked, c);
    return d;
}

/* Lock held. Take the handle away from a parked call, unless a completer
 * already claimed it (then that completer answers, soon). True when the
 * call is no longer parked. */
static bool call_detach(struct rpc_call *c)
{
    struct rpc_deferred *d = c->deferred;
    if (d == NULL)
        return true;
    int expected = DEFERRED_PARKED;
    if (!atomic_compare_exchange_strong(&d->state, &expected, DEFERRED_DETACHED))
        return false;
    /* From here on the handle belongs to its holder alone. */
    c->deferred = NULL;
    list_unlink(&c->srv->parked, c);
    c->outstanding--;
    return true;
}

void rpc_call_complete(struct rpc_deferred *d, enum rpc_status status, struct rpc_buf *resp,
                       const char *msg)
{
    uint8_t *data = resp != NULL ? resp->data : NULL;
    size_t len = resp != NULL ? resp->len : 0;
    if (d == NULL) {
        free(data);
        return;
    }
    int expected = DEFERRED_PARKED;
    if (!atomic_compare_exchange_strong(&d->state, &expected, DEFERRED_COMPLETING)) {
        /* Detached: the call was cancelled and nobody else knows d. */
        free(data);
        free(d);
        return;
    }
    /* The park still holds the call, so the call, its server and the
     * runtime are alive until we release it below. */
    struct rpc_call *c = d->call;
    struct rpc_runtime *rt = c->srv->rt;
    pthread_mutex_lock(&rt->lock);
    c->deferred = NULL;
    list_unlink(&c->srv->parked, c);
    c->outstanding--;
    if (c->closed || c->status_started) {
        free(data);
    } else if (status == RPC_OK) {
        call_finish(c, RPC_OK, NULL, rpc_buffer_take(data, len));
    } else {
        free(data);
        call_finish(c, status, msg != NULL && msg[0] != '\0' ? msg : rpc_status_name((int)status),
                    NULL);
    }
    call_release_if_done(c);
    pthread_mutex_unlock(&rt->lock);
    free(d);
}

/* ---- ListAndWatch ------------------------------------------------------------------ */

/* Send the newest snapshot if it is newer than the last one sent and no send
 * is in flight. Called with rt->lock held, from any thread. */
static void stream_send(struct rpc_call *c)
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
    c->send_buffer = rpc_buffer_take(snap.data, snap.len);
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

static void on_stream_sent(struct rpc_call *c, bool success)
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

/* ---- dispatch ------------------------------------------------------------------------ */

static void run_unary(struct rpc_call *c, const uint8_t *req, size_t len)
{
    struct rpc_server *srv = c->srv;
    struct rpc_buf resp = {0};
    char msg[RPC_MSG_LEN] = "";
    enum rpc_status status =
        srv->handlers.unary(srv->handlers.ctx, c, c->method, req, len, &resp, msg, sizeof msg);

    if (c->deferred != NULL) {
        free(resp.data); /* a parked call is answered by rpc_call_complete() */
        if (status != RPC_DEFERRED)
            log_error("a handler parked its call but returned %d; the call stays parked",
                      (int)status);
        return;
    }
    if (status == RPC_DEFERRED) {
        free(resp.data);
        log_error("a handler returned RPC_DEFERRED without parking its call");
        call_finish(c, RPC_INTERNAL, "the handler did not answer", NULL);
        return;
    }
    if (status != RPC_OK) {
        free(resp.data);
        call_finish(c, status, msg[0] != '\0' ? msg : rpc_status_name((int)status), NULL);
        return;
    }
    call_finish(c, RPC_OK, NULL, rpc_buffer_take(resp.data, resp.len));
}

static void on_request_received(struct rpc_call *c, bool success)
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
    if (rpc_buffer_flatten(bb, &request) != 0) {
        grpc_byte_buffer_destroy(bb);
        call_finish(c, RPC_INTERNAL, "cannot read the request", NULL);
        return;
    }
    grpc_byte_buffer_destroy(bb);
    if (c->route == ROUTE_STREAM) {
        /* The request is Empty; its content does not matter. */
        grpc_slice_unref(request);
        list_link(&c->srv->streams, c);
        c->dirty = true;
        stream_send(c);
        return;
    }
    run_unary(c, GRPC_SLICE_START_PTR(request), GRPC_SLICE_LENGTH(request));
    grpc_slice_unref(request);
}

static void route_call(struct rpc_call *c)
{
    const struct rpc_handlers *h = &c->srv->handlers;
    c->route = ROUTE_UNKNOWN;
    for (size_t i = 0; i < h->method_count; i++) {
        if (grpc_slice_str_cmp(c->details.method, h->methods[i].name) == 0) {
            c->method = i;
            c->route = h->methods[i].kind == RPC_METHOD_STREAM ? ROUTE_STREAM : ROUTE_UNARY;
            return;
        }
    }
}

static int post_slot(struct rpc_server *srv);

static void on_new_call(struct rpc_call *c, bool success)
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
    if (!call_start(c, &op, 1, &c->recv_tag))
        grpc_call_cancel(c->call, NULL); /* its close then frees it */
}

static void on_closed(struct rpc_call *c)
{
    c->closed = true;
    if (c->route == ROUTE_STREAM)
        log_v(2, "ListAndWatch stream closed (cancelled=%d)", c->cancelled);
    stream_unlink(c);
    /* A parked call whose client went away: its completer only frees. If a
     * completer holds it already, it answers into the void and releases it. */
    if (c->deferred != NULL && call_detach(c))
        log_v(1, "a deferred call was cancelled by its client");
    pthread_cond_broadcast(&c->srv->rt->changed);
}

static void dispatch_call_event(struct rpc_tag *tag, bool success)
{
    /* Copy what we need out of the tag first: handling may free the call. */
    enum rpc_tag_kind kind = tag->kind;
    struct rpc_call *c = tag->owner;

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

static void dispatch(struct rpc_runtime *rt, struct rpc_tag *tag, bool success)
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
        grpc_event ev =
            grpc_completion_queue_next(rt->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
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
    struct rpc_call *c = calloc(1, sizeof *c);
    if (c == NULL)
        return -1;
    c->srv = srv;
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->request_metadata);
    c->new_call_tag = (struct rpc_tag){TAG_NEW_CALL, c};
    c->recv_tag = (struct rpc_tag){TAG_RECV, c};
    c->send_tag = (struct rpc_tag){TAG_SEND, c};
    c->status_tag = (struct rpc_tag){TAG_STATUS, c};
    c->close_tag = (struct rpc_tag){TAG_CLOSE, c};
    srv->live_calls++;
    grpc_call_error e =
        grpc_server_request_call(srv->server, &c->call, &c->details, &c->request_metadata,
                                 srv->rt->cq, srv->rt->cq, &c->new_call_tag);
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
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        rc = pthread_attr_setstacksize(&attr, RPC_THREAD_STACK_BYTES);
        if (rc == 0)
            rc = pthread_create(&rt->thread, &attr, cq_thread_main, rt);
        pthread_attr_destroy(&attr);
    }
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

/* ---- servers -------------------------------------------------------------------- */

static grpc_server *server_create(void)
{
    grpc_arg args[] = {
        /* channelz keeps per-channel bookkeeping nobody reads here */
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ENABLE_CHANNELZ, .value.integer = 0},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = RPC_MAX_REQUEST_BYTES},
    };
    grpc_channel_args channel_args = {.num_args = sizeof args / sizeof args[0], .args = args};
    return grpc_server_create(&channel_args, NULL);
}

/* Binds a private name next to the real path and renames it into place
 * (see rpc_socket.h for why). */
static int server_bind(struct rpc_server *srv, char *err, size_t errlen)
{
    char bind_path[sizeof(struct sockaddr_un)], target[sizeof(struct sockaddr_un) + 8];
    rpc_socket_private_name(srv->socket.path, bind_path, sizeof bind_path);
    snprintf(target, sizeof target, "unix:%s", bind_path);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(srv->server, target, creds);
    grpc_server_credentials_release(creds);
    if (port == 0) {
        snprintf(err, errlen, "cannot listen on %s", bind_path);
        return -1;
    }
    return rpc_socket_install(&srv->socket, bind_path, err, errlen);
}

/* Every method has its handler: a call must never find a NULL one. */
static int check_handlers(const struct rpc_handlers *h, char *err, size_t errlen)
{
    if (h->methods == NULL && h->method_count > 0) {
        snprintf(err, errlen, "no method table");
        return -1;
    }
    for (size_t i = 0; i < h->method_count; i++) {
        bool stream = h->methods[i].kind == RPC_METHOD_STREAM;
        if (h->methods[i].name == NULL || (stream ? h->snapshot == NULL : h->unary == NULL)) {
            snprintf(err, errlen, "method %zu (%s) has no %s handler", i,
                     h->methods[i].name ? h->methods[i].name : "unnamed",
                     stream ? "stream" : "unary");
            return -1;
        }
    }
    return 0;
}

int rpc_server_start(struct rpc_runtime *rt, const char *socket_path,
                     const struct rpc_handlers *handlers, struct rpc_server **out, char *err,
                     size_t errlen)
{
    if (check_handlers(handlers, err, errlen) != 0)
        return -1;
    if (rpc_socket_claim(socket_path, err, errlen) != 0)
        return -1;
    struct rpc_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL || (srv->socket.path = strdup(socket_path)) == NULL) {
        free(srv);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    srv->rt = rt;
    srv->handlers = *handlers;
    srv->shutdown_tag = (struct rpc_tag){TAG_SHUTDOWN, srv};
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
    free(srv->socket.path);
    free(srv);
    return -1;
}

void rpc_server_notify(struct rpc_server *srv)
{
    if (srv == NULL)
        return;
    pthread_mutex_lock(&srv->rt->lock);
    for (struct rpc_call *c = srv->streams; c != NULL; c = c->next) {
        c->dirty = true;
        stream_send(c); /* from this thread: no wait for the cq thread */
    }
    pthread_mutex_unlock(&srv->rt->lock);
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

/* Lock held. Streams never end by themselves, and shutdown waits for every
 * call: end streams with OK (after any send in flight), and answer parked
 * calls UNAVAILABLE now rather than wait for their workers. */
static void server_end_calls(struct rpc_server *srv)
{
    for (struct rpc_call *c = srv->streams; c != NULL; c = c->next)
        if (!c->sending && !c->status_started && !c->closed)
            call_finish(c, RPC_OK, NULL, NULL);
    struct rpc_call *next;
    for (struct rpc_call *c = srv->parked; c != NULL; c = next) {
        next = c->next;
        if (call_detach(c) && !c->closed && !c->status_started)
            call_finish(c, RPC_UNAVAILABLE, "the device plugin is stopping", NULL);
    }
}

static struct timespec grace_deadline(void)
{
    return clock_deadline(CLOCK_REALTIME, RPC_STOP_GRACE_MS);
}

void rpc_server_stop(struct rpc_server *srv)
{
    if (srv == NULL)
        return;
    struct rpc_runtime *rt = srv->rt;
    struct timespec deadline = grace_deadline();

    pthread_mutex_lock(&rt->lock);
    srv->stopping = true;
    server_end_calls(srv);
    grpc_server_shutdown_and_notify(srv->server, rt->cq, &srv->shutdown_tag);
    server_wait_drained(srv, &deadline);
    if (!server_drained(srv)) {
        log_warn("gRPC calls on %s still open after %d ms; cancelling them", srv->socket.path,
                 RPC_STOP_GRACE_MS);
        grpc_server_cancel_all_calls(srv->server);
        server_wait_drained(srv, NULL);
    }
    server_unlink_from_runtime(srv);
    pthread_mutex_unlock(&rt->lock);

    grpc_server_destroy(srv->server);
    rpc_socket_release(&srv->socket);
    free(srv);
}
