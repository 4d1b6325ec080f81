/* plugin.c -- DevicePlugin RPC semantics (see plugin.h). */
#include "plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "allocate.h"
#include "api.pb-c.h"
#include "arena.h"
#include "clock.h"
#include "gpumem.h"
#include "isolation.h"
#include "mps_edits.h"
#include "log.h"
#include "preferred.h"

/* A gpu-mem Allocate handed to the allocator; parked once it is taken. */
struct plugin_allocation {
    struct rpc_call *call;         /* while the handler runs */
    struct rpc_deferred *deferred; /* once parked */
    struct plugin_node *node;      /* alive until the allocator unregistered */
    const char *resource;          /* its name, for the allocate observers */
    int64_t arrived_ns;            /* clock_now_ns() */
};

static const struct rpc_method METHODS[PLUGIN_METHOD_COUNT] = {
    [PLUGIN_GET_DEVICE_PLUGIN_OPTIONS] = {"/v1beta1.DevicePlugin/GetDevicePluginOptions",
                                          RPC_METHOD_UNARY},
    [PLUGIN_LIST_AND_WATCH] = {"/v1beta1.DevicePlugin/ListAndWatch", RPC_METHOD_STREAM},
    [PLUGIN_GET_PREFERRED_ALLOCATION] = {"/v1beta1.DevicePlugin/GetPreferredAllocation",
                                         RPC_METHOD_UNARY},
    [PLUGIN_ALLOCATE] = {"/v1beta1.DevicePlugin/Allocate", RPC_METHOD_UNARY},
    [PLUGIN_PRE_START_CONTAINER] = {"/v1beta1.DevicePlugin/PreStartContainer", RPC_METHOD_UNARY},
};

static void state_changed(void *ctx, const struct node_state_change *change);

/* ---- setup --------------------------------------------------------------- */

static int compare_by_id(const void *a, const void *b, void *ctx)
{
    const struct resource *r = ctx;
    return strcmp(r->devices[*(const size_t *)a].id, r->devices[*(const size_t *)b].id);
}

static int build_index(struct plugin_endpoint *ep, const struct resource *res)
{
    ep->by_id = calloc(res->device_count ? res->device_count : 1, sizeof *ep->by_id);
    if (ep->by_id == NULL)
        return -1;
    for (size_t i = 0; i < res->device_count; i++)
        ep->by_id[i] = i;
    qsort_r(ep->by_id, res->device_count, sizeof *ep->by_id, compare_by_id, (void *)res);
    return 0;
}

/* The configuration, narrowed to what the container edits read. */
static struct edits_options edits_options_from(const struct gp_config *cfg)
{
    unsigned list = 0;
    if (cfg->device_list_strategy & DEVICE_LIST_ENVVAR)
        list |= EDITS_LIST_ENVVAR;
    if (cfg->device_list_strategy & DEVICE_LIST_VOLUME_MOUNTS)
        list |= EDITS_LIST_VOLUME_MOUNTS;
    if (cfg->device_list_strategy & (DEVICE_LIST_CDI_ANNOTATIONS | DEVICE_LIST_CDI_CRI))
        list |= EDITS_LIST_CDI;
    return (struct edits_options){
        .device_list = list,
        .id_by_index = cfg->device_id_strategy == DEVICE_ID_INDEX,
        .gds = cfg->gds_enabled,
        .mofed = cfg->mofed_enabled,
        .gdrcopy = cfg->gdrcopy_enabled,
        .imex_channel = cfg->imex_channel_count > 0,
        .pass_device_specs = cfg->pass_device_specs,
        .dev_root = cfg->nvidia_dev_root,
    };
}

/* The node observes its GPU state first: the kubelet hears of a change
 * before anything else does. The state has room for it (the observer list
 * is empty after init and move), so the registration cannot fail. */
static void init_locks_and_registrations(struct plugin_node *node)
{
    pthread_mutex_init(&node->lock, NULL);
    pthread_mutex_init(&node->notify_lock, NULL);
    pthread_mutex_init(&node->alloc_lock, NULL);
    if (node_state_add_observer(&node->state, node, state_changed) != 0)
        log_error("the GPU state has no room for the node's observer");
    node->allocate_observer_count = 0;
    node->allocator = (struct plugin_allocator){0};
}

static void destroy_locks(struct plugin_node *node)
{
    pthread_mutex_destroy(&node->lock);
    pthread_mutex_destroy(&node->notify_lock);
    pthread_mutex_destroy(&node->alloc_lock);
}

int plugin_node_init(struct plugin_node *node, const struct gp_config *cfg,
                     const struct gpu_inventory *inv, char *err, size_t errlen)
{
    memset(node, 0, sizeof *node);
    node->cfg = cfg;
    node->inv = inv;
    node->edits = edits_options_from(cfg);
    int built = cfg->resource_mode == RESOURCE_MODE_GPU_MEM
                    ? gpumem_resource_build(inv, cfg, &node->resources, err, errlen)
                    : resource_set_build(inv, cfg, &node->resources, err, errlen);
    if (built != 0)
        return -1;
    size_t n = node->resources.count;
    if (node_state_init(&node->state, inv, err, errlen) != 0) {
        resource_set_free(&node->resources);
        return -1;
    }
    node->endpoints = calloc(n ? n : 1, sizeof *node->endpoints);
    if (node->endpoints == NULL)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        node->endpoints[i].node = node;
        node->endpoints[i].resource = i;
        node->endpoints[i].generation = 1;
        if (build_index(&node->endpoints[i], &node->resources.resources[i]) != 0)
            goto oom;
    }
    init_locks_and_registrations(node);
    return 0;
oom:
    snprintf(err, errlen, "out of memory setting up %zu resources", n);
    if (node->endpoints)
        for (size_t i = 0; i < n; i++)
            free(node->endpoints[i].by_id);
    free(node->endpoints);
    node->endpoints = NULL;
    node_state_free(&node->state);
    resource_set_free(&node->resources);
    return -1;
}

void plugin_node_free(struct plugin_node *node)
{
    if (node->endpoints == NULL)
        return;
    for (size_t i = 0; i < node->resources.count; i++)
        free(node->endpoints[i].by_id);
    free(node->endpoints);
    node_state_free(&node->state);
    resource_set_free(&node->resources);
    destroy_locks(node);
    node->endpoints = NULL;
}

void plugin_node_move(struct plugin_node *to, struct plugin_node *from, const struct gp_config *cfg,
                      const struct gpu_inventory *inv)
{
    /* Mutexes are not copied (POSIX leaves a copy undefined): the new home
     * gets fresh ones, the old ones are destroyed. Nothing is registered
     * yet but the node's own state observer, whose context is the old
     * home: the move drops it and the new home registers itself. */
    *to = (struct plugin_node){
        .cfg = cfg,
        .inv = inv,
        .edits = edits_options_from(cfg), /* its strings are cfg's */
        .resources = from->resources,
        .endpoints = from->endpoints,
    };
    node_state_move(&to->state, &from->state);
    for (size_t i = 0; i < to->resources.count; i++)
        to->endpoints[i].node = to;
    init_locks_and_registrations(to);
    destroy_locks(from);
    memset(from, 0, sizeof *from);
}

void plugin_node_attach_server(struct plugin_node *node, size_t resource, struct rpc_server *srv)
{
    pthread_mutex_lock(&node->notify_lock);
    node->endpoints[resource].server = srv;
    pthread_mutex_unlock(&node->notify_lock);
}

/* ---- lookups --------------------------------------------------------------- */

static long find_position(const struct plugin_endpoint *ep, const struct resource *res,
                          const char *id)
{
    size_t lo = 0, hi = res->device_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(res->devices[ep->by_id[mid]].id, id);
        if (c == 0)
            return (long)ep->by_id[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static const struct resource *endpoint_resource(const struct plugin_endpoint *ep)
{
    return &ep->node->resources.resources[ep->resource];
}

/* ---- encoding helpers --------------------------------------------------------- */

/* The one packer of every reply, the deferred AllocateResponse included. */
static int pack(const ProtobufCMessage *msg, struct rpc_buf *out)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    out->data = malloc(len ? len : 1);
    if (out->data == NULL)
        return -1;
    out->len = protobuf_c_message_pack(msg, out->data);
    return 0;
}

/* A request that does not decode is the caller's error, named as such. */
static ProtobufCMessage *decode(const ProtobufCMessageDescriptor *type, const uint8_t *req,
                                size_t len, char *msg, size_t msglen)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(type, NULL, len, req);
    if (m == NULL)
        snprintf(msg, msglen, "cannot decode %s (%zu bytes)", type->short_name, len);
    return m;
}

/* ---- the v1beta1 encoder ------------------------------------------------------------ */

static void random_uuid4(char out[37])
{
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        /* Kernel without getrandom: the key only needs to be unique per
         * reply, which the monotonic clock gives. */
        int64_t ns = clock_now_ns();
        memcpy(b, &ns, sizeof ns);
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

/* The CDI names as NVIDIA's plugin hands them over: one annotation
 * <prefix>nvidia-device-plugin_<uuid4> = "name,name,..." (cdi-annotations)
 * and/or the CRI field (cdi-cri). */
static int encode_cdi(struct arena *a, const struct gp_config *cfg, const struct container_edits *e,
                      V1beta1__ContainerAllocateResponse *out)
{
    if (e->n_cdi_devices == 0)
        return 0;
    if (cfg->device_list_strategy & DEVICE_LIST_CDI_ANNOTATIONS) {
        size_t len = 1;
        for (size_t i = 0; i < e->n_cdi_devices; i++)
            len += strlen(e->cdi_devices[i]) + 1;
        char *value = arena_alloc(a, len);
        char uuid[37];
        random_uuid4(uuid);
        char *key = arena_printf(
            a, "%snvidia-device-plugin_%s",
            cfg->cdi_annotation_prefix ? cfg->cdi_annotation_prefix : "cdi.k8s.io/", uuid);
        V1beta1__ContainerAllocateResponse__AnnotationsEntry *entry = arena_alloc(a, sizeof *entry);
        out->annotations = arena_calloc(a, 1, sizeof *out->annotations);
        if (value == NULL || key == NULL || entry == NULL || out->annotations == NULL)
            return -1;
        char *p = value;
        for (size_t i = 0; i < e->n_cdi_devices; i++)
            p += sprintf(p, "%s%s", i ? "," : "", e->cdi_devices[i]);
        v1beta1__container_allocate_response__annotations_entry__init(entry);
        entry->key = key;
        entry->value = value;
        out->annotations[out->n_annotations++] = entry;
    }
    if (cfg->device_list_strategy & DEVICE_LIST_CDI_CRI) {
        out->cdi_devices = arena_calloc(a, e->n_cdi_devices, sizeof *out->cdi_devices);
        if (out->cdi_devices == NULL)
            return -1;
        for (size_t i = 0; i < e->n_cdi_devices; i++) {
            V1beta1__CDIDevice *d = arena_alloc(a, sizeof *d);
            if (d == NULL)
                return -1;
            v1beta1__cdidevice__init(d);
            d->name = (char *)e->cdi_devices[i];
            out->cdi_devices[out->n_cdi_devices++] = d;
        }
    }
    return 0;
}

/* One container's edits as its ContainerAllocateResponse; the strings are
 * borrowed from the edits (the reply is packed before they go). */
static int encode_container(struct arena *a, const struct gp_config *cfg,
                            const struct container_edits *e,
                            V1beta1__ContainerAllocateResponse *out, char *err, size_t errlen)
{
    v1beta1__container_allocate_response__init(out);
    if (e->n_hooks > 0) {
        snprintf(err, errlen, "a v1beta1 Allocate reply cannot carry CDI hooks (%zu given)",
                 e->n_hooks);
        return -1;
    }
    out->envs = arena_calloc(a, e->n_env + 1, sizeof *out->envs);
    out->mounts = arena_calloc(a, e->n_mounts + 1, sizeof *out->mounts);
    out->devices = arena_calloc(a, e->n_device_nodes + 1, sizeof *out->devices);
    if (out->envs == NULL || out->mounts == NULL || out->devices == NULL)
        goto oom;
    for (size_t i = 0; i < e->n_env; i++) {
        V1beta1__ContainerAllocateResponse__EnvsEntry *v = arena_alloc(a, sizeof *v);
        if (v == NULL)
            goto oom;
        v1beta1__container_allocate_response__envs_entry__init(v);
        v->key = (char *)e->env[i].key;
        v->value = (char *)e->env[i].value;
        out->envs[out->n_envs++] = v;
    }
    for (size_t i = 0; i < e->n_mounts; i++) {
        V1beta1__Mount *m = arena_alloc(a, sizeof *m);
        if (m == NULL)
            goto oom;
        v1beta1__mount__init(m);
        m->container_path = (char *)e->mounts[i].container_path;
        m->host_path = (char *)e->mounts[i].host_path;
        m->read_only = e->mounts[i].read_only;
        out->mounts[out->n_mounts++] = m;
    }
    for (size_t i = 0; i < e->n_device_nodes; i++) {
        V1beta1__DeviceSpec *d = arena_alloc(a, sizeof *d);
        if (d == NULL)
            goto oom;
        v1beta1__device_spec__init(d);
        d->container_path = (char *)e->device_nodes[i].path;
        d->host_path = (char *)e->device_nodes[i].host_path;
        d->permissions =
            (char *)(e->device_nodes[i].permissions ? e->device_nodes[i].permissions : "rw");
        out->devices[out->n_devices++] = d;
    }
    if (encode_cdi(a, cfg, e, out) != 0)
        goto oom;
    return 0;
oom:
    snprintf(err, errlen, "out of memory building the Allocate response");
    return -1;
}

/* ---- Allocate ------------------------------------------------------------------- */

static enum rpc_status resolve_ids(const struct plugin_endpoint *ep, char **ids, size_t n,
                                   size_t *positions, char *msg, size_t msglen)
{
    const struct resource *res = endpoint_resource(ep);
    for (size_t i = 0; i < n; i++) {
        long pos = find_position(ep, res, ids[i]);
        if (pos < 0) {
            snprintf(msg, msglen, "invalid allocation request for \"%s\": unknown device: %.128s",
                     res->name, ids[i]);
            return RPC_INVALID_ARGUMENT;
        }
        positions[i] = (size_t)pos;
    }
    return RPC_OK;
}

static enum rpc_status check_container_request(const struct resource *res, size_t container,
                                               const size_t *positions, size_t n, char *msg,
                                               size_t msglen)
{
    if (n == 0) {
        snprintf(msg, msglen,
                 "invalid allocation request for \"%s\": container request %zu "
                 "lists no devices",
                 res->name, container);
        return RPC_INVALID_ARGUMENT;
    }
    if (!res->fail_requests_greater_than_one || n < 2)
        return RPC_OK;
    for (size_t i = 0; i < n; i++) {
        if (res->devices[positions[i]].replica != RESOURCE_NO_REPLICA) {
            snprintf(msg, msglen,
                     "invalid allocation request for \"%s\": maximum request size "
                     "for shared resources is 1; found %zu",
                     res->name, n);
            return RPC_INVALID_ARGUMENT;
        }
    }
    return RPC_OK;
}

/* A device of a lost GPU cannot run anything: a kubelet that raced the
 * Unhealthy snapshot (or restarted with a stale checkpoint) must not
 * start a container on it. Unhealthy devices of live GPUs still answer,
 * as NVIDIA's do: the kubelet decides what is available. */
static enum rpc_status check_not_lost(struct plugin_node *node, const struct resource *res,
                                      const size_t *positions, size_t n, char *msg, size_t msglen)
{
    enum rpc_status st = RPC_OK;
    for (size_t i = 0; i < n && st == RPC_OK; i++) {
        const struct resource_device *d = &res->devices[positions[i]];
        if (!node_state_gpu_lost(&node->state, d->gpu))
            continue;
        const struct gpu_device *g = &node->inv->gpus[d->gpu];
        snprintf(msg, msglen,
                 "cannot allocate \"%s\" of \"%s\": its GPU %u (%s) is lost "
                 "(fallen off the bus or not identified by NVML)",
                 d->id, res->name, g->index, g->uuid);
        st = RPC_FAILED_PRECONDITION;
    }
    return st;
}

/* sharing.timeSlicing.memoryLimit: a container of replicas gets a region
 * directory keyed by its first replica's ID (time-slicing has no pod
 * identity; a replica is held by one container at a time) and a limit per
 * device of memory / replicas x the replicas it holds. */
static enum rpc_status add_replica_limit(struct plugin_node *node, const struct resource *res,
                                         const size_t *positions, size_t count,
                                         struct container_edits *edits, char *msg, size_t msglen)
{
    if (!res->shared || !isolation_active(node->cfg) ||
        node->cfg->resource_mode != RESOURCE_MODE_GPU || count == 0)
        return RPC_OK;
    const char *first = NULL;
    for (size_t i = 0; i < count && first == NULL; i++)
        if (res->devices[positions[i]].replica != RESOURCE_NO_REPLICA)
            first = res->devices[positions[i]].id;
    if (first == NULL)
        return RPC_OK; /* only unshared devices: nothing to limit */
    char key[ISOLATION_KEY_LEN], dir[4096], why[8192];
    unsigned long long limits[POOL_MAX_CONTAINER_GPUS];
    if (isolation_replica_key(first, key, sizeof key) != 0) {
        snprintf(msg, msglen, "replica ID %s cannot name a region directory", first);
        return RPC_INTERNAL;
    }
    if (isolation_container_dir(node->cfg->isolation_dir, key, dir, sizeof dir, why, sizeof why) !=
        0) {
        snprintf(msg, msglen, "no GPU-memory limit can be given to this container (%.900s)", why);
        return RPC_INTERNAL;
    }
    size_t n =
        isolation_replica_limits(node->inv, res, positions, count, limits, POOL_MAX_CONTAINER_GPUS);
    if (isolation_add_edits(node->cfg->isolation_dir, dir, limits, n, edits, msg, msglen) != 0)
        return RPC_RESOURCE_EXHAUSTED;
    log_v(2, "Allocate %s: region directory %s, limit %llu bytes on the first of %zu device(s)",
          res->name, dir, limits[0], n);
    return RPC_OK;
}

static enum rpc_status handle_allocate(struct plugin_endpoint *ep, const uint8_t *req, size_t len,
                                       struct rpc_buf *resp, char *msg, size_t msglen)
{
    const struct resource *res = endpoint_resource(ep);
    struct plugin_node *node = ep->node;
    V1beta1__AllocateRequest *in = (V1beta1__AllocateRequest *)decode(
        &v1beta1__allocate_request__descriptor, req, len, msg, msglen);
    if (in == NULL)
        return RPC_INVALID_ARGUMENT;
    struct arena a = ARENA_INIT;
    enum rpc_status st = RPC_INTERNAL;
    V1beta1__AllocateResponse out = V1BETA1__ALLOCATE_RESPONSE__INIT;
    size_t nc = in->n_container_requests;
    out.container_responses = arena_calloc(&a, nc ? nc : 1, sizeof *out.container_responses);
    if (out.container_responses == NULL)
        goto oom;
    for (size_t c = 0; c < nc; c++) {
        V1beta1__ContainerAllocateRequest *creq = in->container_requests[c];
        size_t *positions = arena_calloc(&a, creq->n_devices_ids + 1, sizeof *positions);
        V1beta1__ContainerAllocateResponse *cresp = arena_alloc(&a, sizeof *cresp);
        if (positions == NULL || cresp == NULL)
            goto oom;
        st = resolve_ids(ep, creq->devices_ids, creq->n_devices_ids, positions, msg, msglen);
        if (st == RPC_OK)
            st = check_container_request(res, c, positions, creq->n_devices_ids, msg, msglen);
        if (st == RPC_OK)
            st = check_not_lost(node, res, positions, creq->n_devices_ids, msg, msglen);
        if (st != RPC_OK)
            goto out;
        struct container_edits edits;
        container_edits_init(&edits, &a);
        if (allocate_container(&node->edits, node->inv, res, positions, creq->n_devices_ids, &edits,
                               msg, msglen) != 0)
            goto oom;
        st = add_replica_limit(node, res, positions, creq->n_devices_ids, &edits, msg, msglen);
        if (st != RPC_OK)
            goto out;
        if (mps_add_edits(node->cfg, node->inv, res, positions, creq->n_devices_ids, &edits) != 0)
            goto oom;
        if (encode_container(&a, node->cfg, &edits, cresp, msg, msglen) != 0)
            goto oom;
        out.container_responses[out.n_container_responses++] = cresp;
        log_v(1, "Allocate %s: %zu devices for container %zu", res->name, creq->n_devices_ids, c);
    }
    if (pack(&out.base, resp) != 0)
        goto oom;
    st = RPC_OK;
    goto out;
oom:
    snprintf(msg, msglen, "out of memory answering Allocate");
    st = RPC_RESOURCE_EXHAUSTED;
out:
    arena_free(&a);
    v1beta1__allocate_request__free_unpacked(in, NULL);
    return st;
}

/* Tells the allocate observers of an answered Allocate, timed from its
 * arrival. alloc_lock held. */
static void notify_allocate_observers(struct plugin_node *node, const char *resource,
                                      int64_t arrived_ns, bool ok)
{
    if (node->allocate_observer_count == 0)
        return;
    double seconds = (double)(clock_now_ns() - arrived_ns) / 1e9;
    for (size_t i = 0; i < node->allocate_observer_count; i++)
        node->allocate_observers[i].fn(node->allocate_observers[i].ctx, resource, seconds, ok);
}

/* The same for a parked Allocate answered later: no lock of the node held. */
static void observe_allocate(struct plugin_node *node, const char *resource, int64_t arrived_ns,
                             bool ok)
{
    pthread_mutex_lock(&node->alloc_lock);
    notify_allocate_observers(node, resource, arrived_ns, ok);
    pthread_mutex_unlock(&node->alloc_lock);
}

/* Hands the call to the allocator (alloc_lock held). Unless it took the
 * job (parked, RPC_DEFERRED), the job is still ours and the call is
 * answered at once with the allocator's status. */
static enum rpc_status defer_to_allocator(struct plugin_endpoint *ep, struct rpc_call *call,
                                          int64_t arrived_ns, size_t units, char *msg,
                                          size_t msglen)
{
    struct plugin_node *node = ep->node;
    struct plugin_allocation *job = calloc(1, sizeof *job);
    if (job == NULL) {
        snprintf(msg, msglen, "out of memory answering Allocate");
        return RPC_RESOURCE_EXHAUSTED;
    }
    job->call = call;
    job->node = node;
    job->resource = endpoint_resource(ep)->name;
    job->arrived_ns = arrived_ns;
    enum rpc_status st =
        node->allocator.allocate(node->allocator.ctx, job, ep->resource, units, msg, msglen);
    if (st == RPC_DEFERRED)
        return st; /* the allocator's now */
    if (job->deferred != NULL)
        log_error("the allocator parked an Allocate but returned %d", (int)st);
    free(job);
    return st;
}

/* gpu-mem mode: the IDs are checked here; which GPU the container gets is
 * the pod's (the extender's choice), found by the registered allocator. */
static enum rpc_status handle_gpumem_allocate(struct plugin_endpoint *ep, struct rpc_call *call,
                                              int64_t arrived_ns, const uint8_t *req, size_t len,
                                              char *msg, size_t msglen)
{
    const struct resource *res = endpoint_resource(ep);
    V1beta1__AllocateRequest *in = (V1beta1__AllocateRequest *)decode(
        &v1beta1__allocate_request__descriptor, req, len, msg, msglen);
    if (in == NULL)
        return RPC_INVALID_ARGUMENT;
    enum rpc_status st = RPC_OK;
    size_t units = 0;
    if (in->n_container_requests != 1) {
        snprintf(msg, msglen,
                 "invalid allocation request for \"%s\": %zu container requests; "
                 "the kubelet sends one per container",
                 res->name, in->n_container_requests);
        st = RPC_INVALID_ARGUMENT;
    } else {
        V1beta1__ContainerAllocateRequest *creq = in->container_requests[0];
        size_t *positions = calloc(creq->n_devices_ids + 1, sizeof *positions);
        units = creq->n_devices_ids;
        if (positions == NULL) {
            snprintf(msg, msglen, "out of memory answering Allocate");
            st = RPC_RESOURCE_EXHAUSTED;
        } else {
            st = resolve_ids(ep, creq->devices_ids, units, positions, msg, msglen);
            if (st == RPC_OK)
                st = check_container_request(res, 0, positions, units, msg, msglen);
        }
        free(positions);
    }
    v1beta1__allocate_request__free_unpacked(in, NULL);
    if (st != RPC_OK)
        return st;
    return defer_to_allocator(ep, call, arrived_ns, units, msg, msglen);
}

/* ---- GetPreferredAllocation ------------------------------------------------------------ */

/* Available IDs -> positions, duplicates dropped. */
static enum rpc_status resolve_unique(const struct plugin_endpoint *ep, char **ids, size_t n,
                                      size_t *positions, size_t *count, bool *seen, char *msg,
                                      size_t msglen)
{
    enum rpc_status st = resolve_ids(ep, ids, n, positions, msg, msglen);
    if (st != RPC_OK)
        return st;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (seen[positions[i]])
            continue;
        seen[positions[i]] = true;
        positions[k++] = positions[i];
    }
    *count = k;
    return RPC_OK;
}

static enum rpc_status prefer_container(struct plugin_endpoint *ep, struct arena *a,
                                        const V1beta1__ContainerPreferredAllocationRequest *creq,
                                        V1beta1__ContainerPreferredAllocationResponse *cresp,
                                        char *msg, size_t msglen)
{
    const struct resource *res = endpoint_resource(ep);
    const struct plugin_node *node = ep->node;
    /* Checked before anything is allocated: allocation_size comes from the
     * wire (up to 2^31-1) and sizes two arrays below. More than the listed
     * IDs can never be met (duplicates only lower the count). */
    if (creq->allocation_size <= 0 || (size_t)creq->allocation_size > creq->n_available_deviceids) {
        snprintf(msg, msglen,
                 "invalid preferred allocation request for \"%s\": allocation "
                 "size %d with %zu available devices",
                 res->name, (int)creq->allocation_size, creq->n_available_deviceids);
        return RPC_INVALID_ARGUMENT;
    }
    size_t n_avail = 0, n_req = 0;
    size_t *avail = arena_calloc(a, creq->n_available_deviceids + 1, sizeof *avail);
    size_t *req = arena_calloc(a, creq->n_must_include_deviceids + 1, sizeof *req);
    bool *seen_avail = arena_calloc(a, res->device_count + 1, sizeof *seen_avail);
    bool *seen_req = arena_calloc(a, res->device_count + 1, sizeof *seen_req);
    if (!avail || !req || !seen_avail || !seen_req)
        return RPC_RESOURCE_EXHAUSTED;
    enum rpc_status st = resolve_unique(ep, creq->available_deviceids, creq->n_available_deviceids,
                                        avail, &n_avail, seen_avail, msg, msglen);
    if (st == RPC_OK)
        st = resolve_unique(ep, creq->must_include_deviceids, creq->n_must_include_deviceids, req,
                            &n_req, seen_req, msg, msglen);
    if (st != RPC_OK)
        return st;
    size_t size = (size_t)creq->allocation_size;
    size_t *chosen = arena_calloc(a, size, sizeof *chosen);
    char **ids = arena_calloc(a, size, sizeof *ids);
    if (!chosen || !ids)
        return RPC_RESOURCE_EXHAUSTED;
    char why[256];
    if (preferred_choose(res, node->inv, node->cfg->shared_alloc_policy, avail, n_avail, req, n_req,
                         size, chosen, why, sizeof why) != 0) {
        snprintf(msg, msglen, "invalid preferred allocation request for \"%s\": %s", res->name,
                 why);
        return RPC_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < size; i++)
        ids[i] = res->devices[chosen[i]].id;
    v1beta1__container_preferred_allocation_response__init(cresp);
    cresp->n_deviceids = size;
    cresp->deviceids = ids;
    return RPC_OK;
}

static enum rpc_status handle_preferred(struct plugin_endpoint *ep, const uint8_t *req, size_t len,
                                        struct rpc_buf *resp, char *msg, size_t msglen)
{
    V1beta1__PreferredAllocationRequest *in = (V1beta1__PreferredAllocationRequest *)decode(
        &v1beta1__preferred_allocation_request__descriptor, req, len, msg, msglen);
    if (in == NULL)
        return RPC_INVALID_ARGUMENT;
    struct arena a = ARENA_INIT;
    enum rpc_status st = RPC_RESOURCE_EXHAUSTED;
    V1beta1__PreferredAllocationResponse out = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
    size_t nc = in->n_container_requests;
    out.container_responses = arena_calloc(&a, nc ? nc : 1, sizeof *out.container_responses);
    if (out.container_responses == NULL)
        goto out;
    for (size_t c = 0; c < nc; c++) {
        V1beta1__ContainerPreferredAllocationResponse *cresp = arena_alloc(&a, sizeof *cresp);
        if (cresp == NULL) {
            st = RPC_RESOURCE_EXHAUSTED;
            goto out;
        }
        st = prefer_container(ep, &a, in->container_requests[c], cresp, msg, msglen);
        if (st != RPC_OK)
            goto out;
        out.container_responses[out.n_container_responses++] = cresp;
    }
    st = pack(&out.base, resp) == 0 ? RPC_OK : RPC_RESOURCE_EXHAUSTED;
out:
    if (st == RPC_RESOURCE_EXHAUSTED)
        snprintf(msg, msglen, "out of memory answering GetPreferredAllocation");
    arena_free(&a);
    v1beta1__preferred_allocation_request__free_unpacked(in, NULL);
    return st;
}

/* ---- small RPCs ------------------------------------------------------------------------- */

/* Requests whose content does not matter still have to decode. */
static enum rpc_status check_decodes(const ProtobufCMessageDescriptor *type, const uint8_t *req,
                                     size_t len, char *msg, size_t msglen)
{
    ProtobufCMessage *in = decode(type, req, len, msg, msglen);
    if (in == NULL)
        return RPC_INVALID_ARGUMENT;
    protobuf_c_message_free_unpacked(in, NULL);
    return RPC_OK;
}

static enum rpc_status handle_options(const struct plugin_endpoint *ep, const uint8_t *req,
                                      size_t len, struct rpc_buf *resp, char *msg, size_t msglen)
{
    enum rpc_status st = check_decodes(&v1beta1__empty__descriptor, req, len, msg, msglen);
    if (st != RPC_OK)
        return st;
    V1beta1__DevicePluginOptions out = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    out.pre_start_required = 0;
    /* gpu-mem units are counters: which ones the kubelet picks is moot. */
    out.get_preferred_allocation_available = ep->node->cfg->resource_mode != RESOURCE_MODE_GPU_MEM;
    return pack(&out.base, resp) == 0 ? RPC_OK : RPC_RESOURCE_EXHAUSTED;
}

static enum rpc_status handle_pre_start(const uint8_t *req, size_t len, struct rpc_buf *resp,
                                        char *msg, size_t msglen)
{
    enum rpc_status st =
        check_decodes(&v1beta1__pre_start_container_request__descriptor, req, len, msg, msglen);
    if (st != RPC_OK)
        return st;
    V1beta1__PreStartContainerResponse out = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
    return pack(&out.base, resp) == 0 ? RPC_OK : RPC_RESOURCE_EXHAUSTED;
}

/* Allocate, timed from its arrival for the allocate observers: at once
 * when answered here, at its answer when the allocator holds it. The
 * allocator is read under alloc_lock, so unregistering waits for us. */
static enum rpc_status timed_allocate(struct plugin_endpoint *ep, struct rpc_call *call,
                                      const uint8_t *req, size_t len, struct rpc_buf *resp,
                                      char *msg, size_t msglen)
{
    struct plugin_node *node = ep->node;
    int64_t arrived_ns = clock_now_ns();
    pthread_mutex_lock(&node->alloc_lock);
    enum rpc_status st = node->allocator.allocate != NULL
                             ? handle_gpumem_allocate(ep, call, arrived_ns, req, len, msg, msglen)
                             : handle_allocate(ep, req, len, resp, msg, msglen);
    /* Answered here: observed in the same critical section. */
    if (st != RPC_DEFERRED)
        notify_allocate_observers(node, endpoint_resource(ep)->name, arrived_ns, st == RPC_OK);
    pthread_mutex_unlock(&node->alloc_lock);
    return st;
}

/* Whole-GPU handlers answer at once; `call` is for rpc_call_defer(). */
static enum rpc_status plugin_unary(void *ctx, struct rpc_call *call, size_t method,
                                    const uint8_t *req, size_t len, struct rpc_buf *resp, char *msg,
                                    size_t msglen)
{
    struct plugin_endpoint *ep = ctx;
    switch ((enum plugin_method)method) {
    case PLUGIN_GET_DEVICE_PLUGIN_OPTIONS:
        return handle_options(ep, req, len, resp, msg, msglen);
    case PLUGIN_ALLOCATE:
        return timed_allocate(ep, call, req, len, resp, msg, msglen);
    case PLUGIN_GET_PREFERRED_ALLOCATION:
        return handle_preferred(ep, req, len, resp, msg, msglen);
    case PLUGIN_PRE_START_CONTAINER:
        return handle_pre_start(req, len, resp, msg, msglen);
    case PLUGIN_LIST_AND_WATCH:
    case PLUGIN_METHOD_COUNT:
        break;
    }
    snprintf(msg, msglen, "method not implemented");
    return RPC_UNIMPLEMENTED;
}

/* ---- ListAndWatch ------------------------------------------------------------------------ */

static int plugin_snapshot(void *ctx, struct rpc_buf *out, uint64_t *generation)
{
    struct plugin_endpoint *ep = ctx;
    struct plugin_node *node = ep->node;
    const struct resource *res = endpoint_resource(ep);
    struct arena a = ARENA_INIT;
    int rc = -1;
    size_t n = res->device_count;
    V1beta1__ListAndWatchResponse msg = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    V1beta1__Device *devices = arena_calloc(&a, n + 1, sizeof *devices);
    V1beta1__Device **ptrs = arena_calloc(&a, n + 1, sizeof *ptrs);
    V1beta1__TopologyInfo *topo = arena_calloc(&a, n + 1, sizeof *topo);
    V1beta1__NUMANode *numa = arena_calloc(&a, n + 1, sizeof *numa);
    V1beta1__NUMANode **numa_ptrs = arena_calloc(&a, n + 1, sizeof *numa_ptrs);
    if (!devices || !ptrs || !topo || !numa || !numa_ptrs)
        goto out;

    pthread_mutex_lock(&node->lock);
    for (size_t i = 0; i < n; i++) {
        const struct resource_device *d = &res->devices[i];
        v1beta1__device__init(&devices[i]);
        devices[i].id = (char *)d->id;
        devices[i].health = d->healthy ? "Healthy" : "Unhealthy";
        if (d->numa_node != GPU_NUMA_UNKNOWN) {
            v1beta1__topology_info__init(&topo[i]);
            v1beta1__numanode__init(&numa[i]);
            numa[i].id = d->numa_node;
            numa_ptrs[i] = &numa[i];
            topo[i].n_nodes = 1;
            topo[i].nodes = &numa_ptrs[i];
            devices[i].topology = &topo[i];
        }
        ptrs[i] = &devices[i];
    }
    *generation = ep->generation;
    pthread_mutex_unlock(&node->lock);

    msg.n_devices = n;
    msg.devices = ptrs;
    rc = pack(&msg.base, out);
out:
    arena_free(&a);
    return rc;
}

struct rpc_handlers plugin_node_handlers(struct plugin_node *node, size_t resource)
{
    struct rpc_handlers h = {
        .ctx = &node->endpoints[resource],
        .methods = METHODS,
        .method_count = PLUGIN_METHOD_COUNT,
        .unary = plugin_unary,
        .snapshot = plugin_snapshot,
    };
    return h;
}

int plugin_node_register_request(struct plugin_node *node, size_t resource, struct rpc_buf *out)
{
    const struct resource *res = &node->resources.resources[resource];
    V1beta1__DevicePluginOptions options = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    options.get_preferred_allocation_available = node->cfg->resource_mode != RESOURCE_MODE_GPU_MEM;
    V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
    req.version = PLUGIN_API_VERSION;
    req.endpoint = (char *)res->socket_name;
    req.resource_name = (char *)res->name;
    req.options = &options;
    return pack(&req.base, out);
}

/* ---- health ---------------------------------------------------------------------------- */

/* The node's GPU state observer: the devices carved from what changed
 * take the new health (the state's rule: a GPU's change reaches its
 * replicas and MIG devices, a MIG device's the GPU where it is served
 * whole), the resources they belong to get a new generation, and every
 * ListAndWatch stream of such a resource sends the new snapshot. Changes
 * come one at a time, in order (the state's observer_lock), so applying
 * the change keeps the devices equal to the state. */
static void state_changed(void *ctx, const struct node_state_change *change)
{
    struct plugin_node *node = ctx;
    size_t gpu = change->gpu;
    int mig = change->mig;
    bool changed[node->resources.count + 1];
    memset(changed, 0, sizeof changed);

    pthread_mutex_lock(&node->lock);
    for (size_t r = 0; r < node->resources.count; r++) {
        struct resource *res = &node->resources.resources[r];
        for (size_t i = 0; i < res->device_count; i++) {
            struct resource_device *d = &res->devices[i];
            if (gpu != NODE_STATE_ALL_GPUS &&
                (d->gpu != gpu ||
                 (mig != NODE_STATE_WHOLE_GPU && d->mig != mig && d->mig != RESOURCE_NO_MIG)))
                continue;
            if (d->healthy == change->healthy)
                continue;
            d->healthy = change->healthy;
            changed[r] = true;
        }
        if (changed[r])
            node->endpoints[r].generation++;
    }
    pthread_mutex_unlock(&node->lock);

    pthread_mutex_lock(&node->notify_lock);
    for (size_t r = 0; r < node->resources.count; r++)
        if (changed[r] && node->endpoints[r].server != NULL)
            rpc_server_notify(node->endpoints[r].server);
    pthread_mutex_unlock(&node->notify_lock);
}

/* ---- registrations ---------------------------------------------------------------- */

void plugin_node_set_allocator(struct plugin_node *node, const struct plugin_allocator *a)
{
    pthread_mutex_lock(&node->alloc_lock);
    node->allocator = a != NULL ? *a : (struct plugin_allocator){0};
    pthread_mutex_unlock(&node->alloc_lock);
}

int plugin_node_add_allocate_observer(struct plugin_node *node, void *ctx, plugin_allocate_fn fn)
{
    int rc = -1;
    pthread_mutex_lock(&node->alloc_lock);
    if (node->allocate_observer_count < PLUGIN_MAX_OBSERVERS) {
        node->allocate_observers[node->allocate_observer_count++] =
            (struct plugin_allocate_observer){ctx, fn};
        rc = 0;
    }
    pthread_mutex_unlock(&node->alloc_lock);
    return rc;
}

void plugin_node_remove_allocate_observer(struct plugin_node *node, void *ctx,
                                          plugin_allocate_fn fn)
{
    pthread_mutex_lock(&node->alloc_lock);
    size_t k = 0;
    for (size_t i = 0; i < node->allocate_observer_count; i++)
        if (node->allocate_observers[i].ctx != ctx || node->allocate_observers[i].fn != fn)
            node->allocate_observers[k++] = node->allocate_observers[i];
    node->allocate_observer_count = k;
    pthread_mutex_unlock(&node->alloc_lock);
}

/* ---- answering a parked Allocate ------------------------------------------------------ */

int plugin_allocation_park(struct plugin_allocation *job)
{
    job->deferred = rpc_call_defer(job->call);
    job->call = NULL;
    return job->deferred != NULL ? 0 : -1;
}

int plugin_allocation_reply(struct plugin_allocation *job, const struct container_edits *edits,
                            char *err, size_t errlen)
{
    struct arena a = ARENA_INIT;
    V1beta1__ContainerAllocateResponse cresp;
    if (encode_container(&a, job->node->cfg, edits, &cresp, err, errlen) != 0) {
        arena_free(&a);
        return -1;
    }
    V1beta1__AllocateResponse out = V1BETA1__ALLOCATE_RESPONSE__INIT;
    V1beta1__ContainerAllocateResponse *list[1] = {&cresp};
    out.n_container_responses = 1;
    out.container_responses = list;
    struct rpc_buf buf;
    int packed = pack(&out.base, &buf);
    arena_free(&a);
    if (packed != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rpc_call_complete(job->deferred, RPC_OK, &buf, NULL);
    observe_allocate(job->node, job->resource, job->arrived_ns, true);
    free(job);
    return 0;
}

void plugin_allocation_fail(struct plugin_allocation *job, enum rpc_status status, const char *msg)
{
    rpc_call_complete(job->deferred, status, NULL, msg);
    observe_allocate(job->node, job->resource, job->arrived_ns, false);
    free(job);
}

/* ---- locked accessors -------------------------------------------------------------------- */

struct node_state *plugin_node_state(struct plugin_node *node)
{
    return &node->state;
}

const struct edits_options *plugin_node_edits_options(const struct plugin_node *node)
{
    return &node->edits;
}

size_t plugin_node_resource_count(const struct plugin_node *node)
{
    return node->resources.count;
}

const struct resource *plugin_node_resource(const struct plugin_node *node, size_t resource)
{
    return &node->resources.resources[resource];
}

const struct resource_set *plugin_node_resources(const struct plugin_node *node)
{
    return &node->resources;
}

size_t plugin_node_healthy_devices(struct plugin_node *node, size_t resource)
{
    const struct resource *res = &node->resources.resources[resource];
    size_t healthy = 0;
    pthread_mutex_lock(&node->lock);
    for (size_t i = 0; i < res->device_count; i++)
        healthy += res->devices[i].healthy;
    pthread_mutex_unlock(&node->lock);
    return healthy;
}
