/* fuzz_podresources.c -- the kubelet's PodResources List reply: the
 * protobuf-c decode and our reading of it (podresources_decode for
 * aliyun.com/gpu-mem, podresources_count_decode for the metrics), then pod
 * identity (identify_pod) over the decoded list against a pod view that
 * mirrors it.
 *
 * Input: byte 0 shapes the view (bit 0: every other listed pod unknown to
 * the view, bit 1: terminal, bit 2: deleted, bits 3-4: calls answered so
 * far); byte 1 the units the Allocate asks for; the rest an encoded
 * v1.ListPodResourcesResponse. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "podidentity.h"
#include "podresources.h"
#include "fuzz_util.h"

#define VIEW_MAX 16
#define RESOURCE "aliyun.com/gpu-mem"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct view {
    unsigned flags;
    size_t n;
    struct gpumem_pod pods[VIEW_MAX];
    struct gpumem_container ctrs[VIEW_MAX][4];
    char uids[VIEW_MAX][32];
};

static const struct gpumem_pod *lookup(void *ctx, const char *ns, const char *name)
{
    const struct view *v = ctx;
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->pods[i].ns, ns) == 0 && strcmp(v->pods[i].name, name) == 0)
            return &v->pods[i];
    return NULL;
}

static unsigned progress(void *ctx, const char *uid)
{
    const struct view *v = ctx;
    (void)uid;
    return (v->flags >> 3) & 3;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_quiet();
    if (size < 2)
        return 0;
    unsigned flags = data[0];
    unsigned long long units = data[1] % 9;
    data += 2, size -= 2;
    char err[512];
    struct pr_list list;
    bool decoded = false;
    size_t total = 0;
    if (podresources_decode(data, size, RESOURCE, &list, err, sizeof(err)) == 0) {
        decoded = true;
        for (size_t i = 0; i < list.n_pods; i++)
            for (size_t c = 0; c < list.pods[i].n_containers; c++)
                total += list.pods[i].containers[c].units;
        static struct view v;
        memset(&v, 0, sizeof(v));
        v.flags = flags;
        for (size_t i = 0; i < list.n_pods && v.n < VIEW_MAX; i++) {
            const struct pr_pod *lp = &list.pods[i];
            if (((flags & 1) && i % 2) || !lp->ns || !lp->name)
                continue;
            struct gpumem_pod *p = &v.pods[v.n];
            snprintf(v.uids[v.n], sizeof(v.uids[v.n]), "uid-%zu", i);
            p->ns = lp->ns;
            p->name = lp->name;
            p->uid = v.uids[v.n];
            p->terminal = flags & 2;
            p->deleted = flags & 4;
            p->containers = v.ctrs[v.n];
            for (size_t c = 0; c < lp->n_containers && c < 4; c++) {
                p->containers[c].name = lp->containers[c].name;
                p->containers[c].units = lp->containers[c].units ? lp->containers[c].units : 1;
                p->n_containers++;
            }
            v.n++;
        }
        const struct identity_source src = {&v, lookup, progress};
        struct identity_decision d;
        enum identity_result r = identify_pod(&src, &list, units ? units : 1, &d);
        if (r == IDENTITY_FOUND && (!d.pod || d.container >= d.pod->n_containers + 1u))
            abort(); /* FOUND names a pod of the view and one of its containers */
        if (r != IDENTITY_FOUND && !memchr(d.why, '\0', sizeof(d.why)))
            abort();
        pr_list_free(&list);
    }
    static const char *const names[] = {"nvidia.com/gpu", RESOURCE, ""};
    size_t counts[3];
    if (podresources_count_decode(data, size, names, 3, counts, err, sizeof(err)) == 0 && decoded &&
        counts[1] != total)
        abort(); /* both readings of one reply count the same units */
    return 0;
}
