/* fuzz_kube_protobuf.c -- the streaming protobuf LIST decoder
 * (list_protobuf.c): "k8s\0" + the input fed in chunks of a size taken from
 * byte 0 (so items and fields are cut everywhere), each item dumped as the
 * JSON the callers read, then kube_pb_list_finish(); and the same bytes as
 * an error answer (kube_protobuf_status). Seeds: lists encoded by
 * test/fakeapi/k8s_protobuf.py (corpus/kube_protobuf/, without the magic). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_item(json_t *item, void *ctx)
{
    (void)ctx;
    if (!json_is_object(item))
        abort(); /* the contract: a JSON object per item */
    free(json_dumps(item, JSON_COMPACT));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_quiet();
    if (size == 0)
        return 0;
    size_t chunk = (size_t)data[0] % 64 + 1;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    static const char magic[4] = {'k', '8', 's', '\0'};
    struct kube_error err = {0};
    struct kube_pb_list *pb = kube_pb_list_new("GET /api/v1/nodes", on_item, NULL, 1 << 20);
    if (!pb)
        return 0;
    kube_pb_list_reset(pb);
    int rc = kube_pb_list_feed(pb, magic, sizeof(magic), &err);
    for (size_t off = 0; rc == 0 && off < n; off += chunk)
        rc = kube_pb_list_feed(pb, p + off, n - off < chunk ? n - off : chunk, &err);
    if (rc == 0) {
        char rv[KUBE_RV_MAX];
        char *next = NULL;
        if (kube_pb_list_finish(pb, rv, &next, &err) == KUBE_OK && !memchr(rv, '\0', sizeof(rv)))
            abort();
        free(next);
    }
    kube_pb_list_free(pb);

    char *whole = malloc(n + sizeof(magic));
    if (!whole)
        return 0;
    memcpy(whole, magic, sizeof(magic));
    memcpy(whole + sizeof(magic), p, n);
    json_decref(kube_protobuf_status(whole, n + sizeof(magic)));
    free(whole);
    return 0;
}
