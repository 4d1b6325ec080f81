/* rpc_podresources.c -- the kubelet's PodResources List (see podresources.h). */
#include "podresources.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "podresources.pb-c.h"
#include "rpc_internal.h"

static const char LIST_PATH[] = "/v1.PodResourcesLister/List";

struct podresources_client {
    struct rpc_client *rpc;
};

void pr_list_free(struct pr_list *list)
{
    for (size_t i = 0; i < list->n_pods; i++) {
        struct pr_pod *p = &list->pods[i];
        for (size_t c = 0; c < p->n_containers; c++)
            free(p->containers[c].name);
        free(p->containers);
        free(p->ns);
        free(p->name);
    }
    free(list->pods);
    list->pods = NULL;
    list->n_pods = 0;
}

int podresources_open(struct rpc_runtime *rt, const char *socket_path,
                      struct podresources_client **out, char *err, size_t errlen)
{
    struct podresources_client *c = calloc(1, sizeof *c);
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (rpc_client_open(rt, socket_path, &c->rpc, err, errlen) != 0) {
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void podresources_close(struct podresources_client *c)
{
    if (c == NULL)
        return;
    rpc_client_close(c->rpc);
    free(c);
}

static size_t units_of(const V1__ContainerResources *cr, const char *resource)
{
    size_t n = 0;
    for (size_t d = 0; d < cr->n_devices; d++)
        if (cr->devices[d]->resource_name != NULL &&
            strcmp(cr->devices[d]->resource_name, resource) == 0)
            n += cr->devices[d]->n_device_ids;
    return n;
}

static int copy_pod(const V1__PodResources *in, const char *resource, struct pr_pod *out)
{
    out->ns = strdup(in->namespace_ ? in->namespace_ : "");
    out->name = strdup(in->name ? in->name : "");
    out->containers = calloc(in->n_containers ? in->n_containers : 1, sizeof *out->containers);
    if (out->ns == NULL || out->name == NULL || out->containers == NULL)
        return -1;
    for (size_t c = 0; c < in->n_containers; c++) {
        struct pr_container *pc = &out->containers[out->n_containers];
        pc->name = strdup(in->containers[c]->name ? in->containers[c]->name : "");
        if (pc->name == NULL)
            return -1;
        pc->units = units_of(in->containers[c], resource);
        out->n_containers++;
    }
    return 0;
}

/* The response, or NULL with err naming the problem. */
static V1__ListPodResourcesResponse *unpack_response(const unsigned char *data, size_t len,
                                                     char *err, size_t errlen)
{
    V1__ListPodResourcesResponse *resp = v1__list_pod_resources_response__unpack(NULL, len, data);
    if (resp == NULL)
        snprintf(err, errlen, "cannot decode the kubelet's ListPodResourcesResponse (%zu bytes)",
                 len);
    return resp;
}

int podresources_decode(const unsigned char *data, size_t len, const char *resource,
                        struct pr_list *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    V1__ListPodResourcesResponse *resp = unpack_response(data, len, err, errlen);
    if (resp == NULL)
        return -1;
    out->pods = calloc(resp->n_pod_resources ? resp->n_pod_resources : 1, sizeof *out->pods);
    int rc = out->pods ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < resp->n_pod_resources; i++) {
        rc = copy_pod(resp->pod_resources[i], resource, &out->pods[i]);
        out->n_pods = i + 1; /* the partly copied one is freed too */
    }
    v1__list_pod_resources_response__free_unpacked(resp, NULL);
    if (rc != 0) {
        pr_list_free(out);
        snprintf(err, errlen, "out of memory");
    }
    return rc;
}

/* One List call: the encoded response in *resp (free resp->data). */
static int list_call(struct podresources_client *c, int timeout_ms, struct rpc_buf *resp, char *err,
                     size_t errlen)
{
    V1__ListPodResourcesRequest req = V1__LIST_POD_RESOURCES_REQUEST__INIT;
    uint8_t buf[8];
    size_t len = v1__list_pod_resources_request__pack(&req, buf);
    char msg[RPC_MSG_LEN];
    int status = 0;
    if (rpc_client_unary(c->rpc, LIST_PATH, buf, len, timeout_ms, 0, resp, &status, msg,
                         sizeof msg) != 0) {
        snprintf(err, errlen, "PodResources List failed: %s (%d): %s", rpc_status_name(status),
                 status, msg);
        return -1;
    }
    return 0;
}

int podresources_list(struct podresources_client *c, const char *resource, int timeout_ms,
                      struct pr_list *out, char *err, size_t errlen)
{
    struct rpc_buf resp = {0};
    if (list_call(c, timeout_ms, &resp, err, errlen) != 0)
        return -1;
    int rc = podresources_decode(resp.data, resp.len, resource, out, err, errlen);
    free(resp.data);
    return rc;
}

int podresources_count_decode(const unsigned char *data, size_t len, const char *const names[],
                              size_t n, size_t counts[], char *err, size_t errlen)
{
    V1__ListPodResourcesResponse *resp = unpack_response(data, len, err, errlen);
    if (resp == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        counts[i] = 0;
    for (size_t p = 0; p < resp->n_pod_resources; p++) {
        const V1__PodResources *pod = resp->pod_resources[p];
        for (size_t c = 0; c < pod->n_containers; c++)
            for (size_t i = 0; i < n; i++)
                counts[i] += units_of(pod->containers[c], names[i]);
    }
    v1__list_pod_resources_response__free_unpacked(resp, NULL);
    return 0;
}

int podresources_count(struct podresources_client *c, const char *const names[], size_t n,
                       size_t counts[], int timeout_ms, char *err, size_t errlen)
{
    struct rpc_buf resp = {0};
    if (list_call(c, timeout_ms, &resp, err, errlen) != 0)
        return -1;
    int rc = podresources_count_decode(resp.data, resp.len, names, n, counts, err, errlen);
    free(resp.data);
    return rc;
}
