/* podresources.h -- client of the kubelet's PodResources API (List).
 *
 * gpu-mem mode asks the kubelet, while an Allocate is in flight, which pods
 * its pod manager holds and which app containers already have devices of
 * our resource (for podidentity.h, which reads the types below; this
 * client knows nothing of identity); the metrics endpoint counts, per resource,
 * the device IDs assigned to containers (podresources_count). Implemented in
 * rpc_podresources.c (the rpc_*.c files are the only ones that touch gRPC).
 *
 * A client is used by one thread at a time. Errors: -1 + err. */
#ifndef GP_PODRESOURCES_H
#define GP_PODRESOURCES_H

#include <stddef.h>

#include "rpc.h"
#include "compiler.h"

/* A List reduced to what pod identity (podidentity.h) needs: per pod, its
 * containers and how many device IDs of one resource each holds. */
struct pr_container {
    char *name;
    size_t units; /* device IDs of the listed resource */
};
struct pr_pod {
    char *ns, *name;
    size_t n_containers;
    struct pr_container *containers;
};
struct pr_list {
    size_t n_pods;
    struct pr_pod *pods;
};
/* Frees what a List filled in and empties *list. */
void pr_list_free(struct pr_list *list);

struct podresources_client;

GP_MUST_USE int podresources_open(struct rpc_runtime *rt, const char *socket_path,
                                  struct podresources_client **out, char *err, size_t errlen);
void podresources_close(struct podresources_client *c);

/* /v1.PodResourcesLister/List; keeps, per container, the number of device
 * IDs of `resource`. *out is filled (pr_list_free) on success. */
GP_MUST_USE int podresources_list(struct podresources_client *c, const char *resource,
                                  int timeout_ms, struct pr_list *out, char *err, size_t errlen);

/* Decodes an encoded ListPodResourcesResponse (exposed for unit tests). */
GP_MUST_USE int podresources_decode(const unsigned char *data, size_t len, const char *resource,
                                    struct pr_list *out, char *err, size_t errlen);

/* /v1.PodResourcesLister/List, counted: counts[i] = the device IDs of
 * resource names[i] over every container of every pod listed, 0 when none.
 * One ID is one device whatever the mode (a GPU, a MIG device, a
 * time-slicing replica, a gpu-mem unit). On error counts[] is unspecified. */
GP_MUST_USE int podresources_count(struct podresources_client *c, const char *const names[],
                                   size_t n, size_t counts[], int timeout_ms, char *err,
                                   size_t errlen);

/* The counting half of podresources_count, on an encoded
 * ListPodResourcesResponse (exposed for unit tests). */
GP_MUST_USE int podresources_count_decode(const unsigned char *data, size_t len,
                                          const char *const names[], size_t n, size_t counts[],
                                          char *err, size_t errlen);

#endif
