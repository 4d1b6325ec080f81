/* rpc_buffer.c -- byte buffers, slices, status names: what the server and
 * the client side of rpc share (see rpc_internal.h). */
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>

#include "rpc_internal.h"

gpr_timespec rpc_deadline_after_ms(int timeout_ms)
{
    if (timeout_ms < 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

const char *rpc_status_name(int status)
{
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if (status < 0 || (size_t)status >= sizeof names / sizeof names[0])
        return "UNKNOWN_STATUS";
    return names[status];
}

grpc_byte_buffer *rpc_buffer_take(uint8_t *data, size_t len)
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

grpc_byte_buffer *rpc_buffer_copy(const uint8_t *data, size_t len)
{
    grpc_slice slice =
        len == 0 ? grpc_empty_slice() : grpc_slice_from_copied_buffer((const char *)data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

int rpc_buffer_flatten(grpc_byte_buffer *bb, grpc_slice *out)
{
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return -1;
    *out = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    return 0;
}

int rpc_buffer_to_rpc_buf(grpc_byte_buffer *bb, struct rpc_buf *out)
{
    grpc_slice slice;
    if (rpc_buffer_flatten(bb, &slice) != 0)
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

void rpc_copy_slice_text(grpc_slice slice, char *out, size_t outlen)
{
    if (outlen == 0)
        return;
    size_t len = GRPC_SLICE_LENGTH(slice);
    if (len >= outlen)
        len = outlen - 1;
    memcpy(out, GRPC_SLICE_START_PTR(slice), len);
    out[len] = '\0';
}
