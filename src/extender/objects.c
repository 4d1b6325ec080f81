/* objects.c -- a pod's facts as the placement engine's request (see objects.h). */
#include "objects.h"

#include <stdio.h>
#include <string.h>

int objects_pod_request(const struct pod_facts *pod, struct placement_request *req, char *err,
                        size_t errlen)
{
    memset(req, 0, sizeof(*req));
    req->cpu = pod->cpu_milli;
    req->memory = pod->memory_bytes;
    if (pod->gpu_memory == 0)
        return poolapi_gpu_cores_check(pod, err, errlen); /* cores alone: refused */
    if (pod->gpu_count == 0 || pod->gpu_count > PLACEMENT_MAX_GPUS) {
        snprintf(err, errlen, "%s %u is out of range (1..%d)", POOL_RES_GPU_COUNT, pod->gpu_count,
                 PLACEMENT_MAX_GPUS);
        return -1;
    }
    if (pod->gpu_memory % pod->gpu_count != 0) {
        snprintf(err, errlen, "%s %llu is not divisible by %s %u: each GPU must get an equal share",
                 POOL_RES_GPU_MEM, (unsigned long long)pod->gpu_memory, POOL_RES_GPU_COUNT,
                 pod->gpu_count);
        return -1;
    }
    if (poolapi_gpu_cores_check(pod, err, errlen) < 0)
        return -1;
    req->gpu_count = pod->gpu_count;
    req->units = pod->gpu_memory / pod->gpu_count;
    req->cores = (uint32_t)pod->gpu_cores; /* <= 100: checked above */
    return 0;
}
