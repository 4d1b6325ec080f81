/* fuzz_kube_json.c -- the API client's JSON decoding: kube_list_walk() over
 * a LIST answer (NodeList, PodList, ...), every item read as the programs
 * read it (poolapi_pod_facts / poolapi_node_facts for the extender and the
 * CLI, gpumem_pod_parse for the device plugin's pod view), and the same
 * body as an error answer (kube_error_from_response). Seeds: real API
 * answers (corpus/kube_json/). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "poolapi_facts.h"
#include "podidentity.h"
#include "podview.h"
#include "wire.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_item(json_t *item, void *ctx)
{
    size_t *items = ctx;
    char err[512];
    struct pod_facts pod;
    struct node_facts node;
    struct gpumem_pod gp;
    if (poolapi_pod_facts(item, &pod, err, sizeof(err)) < 0 && !err[0])
        abort(); /* a refusal says why */
    if (poolapi_node_facts(item, &node, err, sizeof(err)) == 0 && node.gpu_count > POOL_MAX_GPUS)
        abort(); /* the contract's GPU limit */
    memset(&gp, 0, sizeof(gp));
    if (gpumem_pod_parse(item, &gp, err, sizeof(err)) == 0)
        gpumem_pod_clear(&gp);
    ++*items;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_quiet();
    const char *body = (const char *)data;
    struct kube_error err = {0};
    char rv[KUBE_RV_MAX];
    char *next = NULL;
    size_t items = 0;
    enum kube_result r =
        kube_list_walk(body, size, "GET /api/v1/pods", on_item, &items, rv, &next, &err);
    if (r == KUBE_OK && !memchr(rv, '\0', sizeof(rv)))
        abort();
    free(next);
    struct kube_error answer = {0};
    kube_error_from_response(&answer, 500, "GET /api/v1/nodes", body, size);
    if (!memchr(answer.message, '\0', sizeof(answer.message)) ||
        !memchr(answer.reason, '\0', sizeof(answer.reason)))
        abort();
    return 0;
}
