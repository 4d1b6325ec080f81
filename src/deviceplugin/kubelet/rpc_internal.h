/* rpc_internal.h -- what the rpc_*.c files share; not part of rpc.h's API.
 *
 * Includes gRPC headers: only rpc_*.c (and the test-only client library
 * under test/unit/common, which reads these structures) include it.
 *
 * Ownership: a runtime owns its completion queue and thread and lists its
 * servers; a server owns its grpc_server, socket path and every struct
 * rpc_call of its posted slots and live calls; a call owns its buffers.
 * Every field below marked "lock" is read and written with rt->lock held. */
#ifndef GP_RPC_INTERNAL_H
#define GP_RPC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "rpc.h"
#include "rpc_socket.h"
#include "compiler.h"

#define RPC_MSG_LEN 256

enum rpc_tag_kind {
    TAG_NEW_CALL, /* a posted request slot completed */
    TAG_RECV,     /* RECV_MESSAGE */
    TAG_SEND,     /* a stream message (with initial metadata the first time) */
    TAG_STATUS,   /* the final batch: [initial metadata, message,] status */
    TAG_CLOSE,    /* RECV_CLOSE_ON_SERVER: the call is over */
    TAG_SHUTDOWN, /* grpc_server_shutdown_and_notify */
};

struct rpc_tag {
    enum rpc_tag_kind kind;
    void *owner; /* struct rpc_call * or struct rpc_server * */
};

enum rpc_route { ROUTE_UNARY, ROUTE_STREAM, ROUTE_UNKNOWN };

/* One posted request slot, then the call it became (all fields: lock). */
struct rpc_call {
    struct rpc_server *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array request_metadata;
    struct rpc_tag new_call_tag, recv_tag, send_tag, status_tag, close_tag;
    enum rpc_route route;
    size_t method;   /* position in srv->handlers.methods */
    int outstanding; /* batches started and not yet completed, + 1 while parked */
    bool started;    /* the slot completed: a real call */
    bool closed;     /* RECV_CLOSE_ON_SERVER completed */
    int cancelled;   /* filled by RECV_CLOSE_ON_SERVER */
    bool initial_metadata_sent;
    bool status_started;
    bool sending;   /* a stream SEND_MESSAGE is in flight */
    bool dirty;     /* a notify arrived: send the newest snapshot */
    bool have_sent; /* sent_generation is meaningful */
    uint64_t sent_generation;
    grpc_byte_buffer *recv_buffer;
    grpc_byte_buffer *send_buffer;
    grpc_slice status_details;
    bool have_status_details;
    struct rpc_deferred *deferred; /* the handle while parked, else NULL */
    struct rpc_call *prev, *next;  /* the server's stream list, or its parked list */
};

struct rpc_server {
    struct rpc_runtime *rt;
    grpc_server *server;
    struct rpc_handlers handlers;
    struct rpc_socket socket;
    struct rpc_tag shutdown_tag;
    bool stopping;            /* lock */
    bool shutdown_done;       /* lock */
    int live_calls;           /* lock: struct rpc_calls allocated, slots included */
    struct rpc_call *streams; /* lock: open ListAndWatch streams */
    struct rpc_call *parked;  /* lock: deferred unary calls */
    struct rpc_server *next_server;
};

struct rpc_runtime {
    grpc_completion_queue *cq;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a server's shutdown progressed */
    struct rpc_server *servers;
};

struct rpc_client {
    grpc_channel *channel;
    grpc_completion_queue *cq; /* pluck queue for unary calls */
};

/* ---- rpc_buffer.c ------------------------------------------------------------ */

gpr_timespec rpc_deadline_after_ms(int timeout_ms);
/* "OK", "NOT_FOUND", ...; "UNKNOWN_STATUS" outside the gRPC range. */
const char *rpc_status_name(int status);
/* A byte buffer that owns `data` (freed by the core when the buffer dies;
 * freed at once when len is 0). The core aborts when out of memory. */
GP_MUST_USE grpc_byte_buffer *rpc_buffer_take(uint8_t *data, size_t len);
GP_MUST_USE grpc_byte_buffer *rpc_buffer_copy(const uint8_t *data, size_t len);
/* Flatten a received buffer into one owned slice (decompressing if needed). */
GP_MUST_USE int rpc_buffer_flatten(grpc_byte_buffer *bb, grpc_slice *out);
/* Received buffer -> malloc'd rpc_buf (data non-NULL even for 0 bytes). */
GP_MUST_USE int rpc_buffer_to_rpc_buf(grpc_byte_buffer *bb, struct rpc_buf *out);
void rpc_copy_slice_text(grpc_slice slice, char *out, size_t outlen);

/* ---- rpc_client.c -------------------------------------------------------------- */

/* Sentinel for req_len: send no request message at all, only the half-close. */
#define RPC_NO_MESSAGE SIZE_MAX

/* One blocking unary call on the client's channel and pluck queue. Returns
 * 0 when the status is OK (*resp malloc'd), otherwise -1 with *status (a
 * gRPC code, RPC_INTERNAL for local failures) and the message in msg.
 * timeout_ms < 0: no deadline. flags: GRPC_INITIAL_METADATA_* bits. */
GP_MUST_USE int rpc_client_unary(struct rpc_client *client, const char *method, const uint8_t *req,
                                 size_t req_len, int timeout_ms, uint32_t flags,
                                 struct rpc_buf *resp, int *status, char *msg, size_t msglen);
/* Shut down and destroy a pluck queue whose tags were all collected. */
void rpc_pluck_queue_destroy(grpc_completion_queue *cq);

#endif
