/* bench_util.h -- what the benchmarks share: the clock, order statistics,
 * an encoded AllocateRequest. (The kubelet stand-in is rpc_test_kubelet.) */
#ifndef GP_BENCH_UTIL_H
#define GP_BENCH_UTIL_H

#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "api.pb-c.h"
#include "rpc.h"

static inline double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static inline int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank on a sorted array; 0 for an empty one. */
static inline double percentile(const double *sorted, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

/* AllocateRequest{container_requests: [{devices_ids: ids}]}; out->data is malloc'd. */
static inline int encode_allocate(char **ids, size_t n, struct rpc_buf *out)
{
    V1beta1__ContainerAllocateRequest container = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    V1beta1__ContainerAllocateRequest *containers[] = {&container};
    V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
    container.n_devices_ids = n;
    container.devices_ids = ids;
    req.n_container_requests = 1;
    req.container_requests = containers;
    out->len = v1beta1__allocate_request__get_packed_size(&req);
    out->data = malloc(out->len + 1);
    if (out->data == NULL)
        return -1;
    v1beta1__allocate_request__pack(&req, out->data);
    return 0;
}

#endif
