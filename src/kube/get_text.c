/* get_text.c -- GET of a non-JSON answer (kube.h, kube_get_text_until). */
#include "client.h"
#include "kube.h"

#include <stdlib.h>

int kube_get_text_until(struct kube_client *client, const char *path, int64_t deadline_ns,
                        char **out, size_t *len, struct kube_error *err)
{
    /* A node agent's Prometheus text through the node proxy: the proxy
     * passes Accept on, and gzip cuts a scrape several times on the wire. */
    struct call call = {.method = "GET",
                        .path = path,
                        .idempotent = true,
                        .compressed = true,
                        .accept = "text/plain;version=0.0.4;q=1,*/*;q=0.1",
                        .deadline_ns = deadline_ns};
    struct kube_body body = {0};
    *out = NULL;
    *len = 0;
    if (kube_call(client, &call, &body, err) != 0)
        return -1;
    *out = body.data;
    *len = body.len;
    return 0;
}
