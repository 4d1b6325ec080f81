/* resource.c -- inventory + configuration -> named resources (resource.h).
 *
 * Order of work, mirroring what NVIDIA's plugin advertises for the same
 * flags so that device IDs match:
 *   1. physical devices: full GPUs, or MIG devices (per --mig-strategy);
 *   2. each is named by the first matching resources.gpus / resources.mig
 *      pattern (defaults: `*` -> gpu, MIG mixed: mig-<profile>);
 *   3. time-slicing entries replace a device by `replicas` copies with IDs
 *      "<uuid>::<k>", optionally under another name (rename).
 * Unlike NVIDIA, rename, resources.* and per-device lists are honoured. */
#include "resource.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define NVIDIA_PREFIX "nvidia.com/"

/* A growable list of devices for one resource name while building. */
struct builder_entry {
    char name[CONFIG_NAME_LEN];
    size_t count, cap;
    struct resource_device *devices;
    bool shared;
    bool fail_requests_greater_than_one;
};

struct builder {
    size_t count, cap;
    struct builder_entry *entries;
};

static struct builder_entry *builder_entry_for(struct builder *b, const char *name)
{
    for (size_t i = 0; i < b->count; i++)
        if (strcmp(b->entries[i].name, name) == 0)
            return &b->entries[i];
    if (b->count == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4;
        struct builder_entry *e = realloc(b->entries, cap * sizeof *e);
        if (e == NULL)
            return NULL;
        b->entries = e;
        b->cap = cap;
    }
    struct builder_entry *e = &b->entries[b->count++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    return e;
}

static int builder_add(struct builder *b, const char *name, const struct resource_device *dev)
{
    struct builder_entry *e = builder_entry_for(b, name);
    if (e == NULL)
        return -1;
    if (e->count == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 8;
        struct resource_device *d = realloc(e->devices, cap * sizeof *d);
        if (d == NULL)
            return -1;
        e->devices = d;
        e->cap = cap;
    }
    e->devices[e->count++] = *dev;
    return 0;
}

static void builder_free(struct builder *b)
{
    for (size_t i = 0; i < b->count; i++)
        free(b->entries[i].devices);
    free(b->entries);
    memset(b, 0, sizeof *b);
}

bool resource_pattern_match(const char *pattern, const char *text)
{
    /* Iterative glob with backtracking to the last '*'. */
    const char *star = NULL, *resume = NULL;
    while (*text) {
        if (*pattern == '*') {
            star = pattern++;
            resume = text;
        } else if (*pattern == *text) {
            pattern++;
            text++;
        } else if (star) {
            pattern = star + 1;
            text = ++resume;
        } else {
            return false;
        }
    }
    while (*pattern == '*')
        pattern++;
    return *pattern == '\0';
}

const char *const resource_control_nodes[] = {
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
};
const size_t resource_control_node_count =
    sizeof resource_control_nodes / sizeof resource_control_nodes[0];

size_t resource_device_nodes(const struct gpu_inventory *inv, const struct resource_device *d,
                             char out[RESOURCE_MAX_DEVICE_NODES][RESOURCE_NODE_LEN])
{
    const struct gpu_device *g = &inv->gpus[d->gpu];
    size_t n = 0;
    snprintf(out[n++], RESOURCE_NODE_LEN, "/dev/nvidia%d", g->minor);
    if (d->mig == RESOURCE_NO_MIG)
        return n;
    const struct mig_device *m = &g->migs[d->mig];
    int caps[2] = {m->gi_access_minor, m->ci_access_minor};
    for (size_t k = 0; k < 2; k++)
        if (caps[k] != GPU_MINOR_UNKNOWN)
            snprintf(out[n++], RESOURCE_NODE_LEN, "/dev/nvidia-caps/nvidia-cap%d", caps[k]);
    return n;
}

void resource_device_init_gpu(struct resource_device *d, const struct gpu_device *g, size_t pos)
{
    memset(d, 0, sizeof *d);
    snprintf(d->id, sizeof d->id, "%s", g->uuid);
    snprintf(d->uuid, sizeof d->uuid, "%s", g->uuid);
    snprintf(d->index, sizeof d->index, "%u", g->index);
    d->gpu = pos;
    d->mig = RESOURCE_NO_MIG;
    d->replica = RESOURCE_NO_REPLICA;
    d->numa_node = g->numa_node;
    /* A GPU NVML could not identify is advertised from the first snapshot
     * on as Unhealthy, never as a device the kubelet may hand out. */
    d->healthy = !g->lost;
}

static void device_init_mig(struct resource_device *d, const struct gpu_device *g, size_t pos,
                            size_t mig)
{
    const struct mig_device *m = &g->migs[mig];
    resource_device_init_gpu(d, g, pos);
    snprintf(d->id, sizeof d->id, "%s", m->uuid);
    snprintf(d->uuid, sizeof d->uuid, "%s", m->uuid);
    snprintf(d->index, sizeof d->index, "%u:%u", g->index, m->index);
    d->mig = (int)mig;
}

/* "1g.10gb+me" -> "nvidia.com/mig-1g.10gb.me" */
static void default_mig_name(const char *profile, char *out, size_t outlen)
{
    snprintf(out, outlen, NVIDIA_PREFIX "mig-%s", profile);
    for (char *p = out; *p; p++)
        if (*p == '+')
            *p = '.';
}

/* First pattern matching `text`, else the default name; NULL when a list
 * was configured and nothing in it matched (the device is not served). */
static const char *pick_name(const struct config_resource_pattern *patterns, size_t count,
                             const char *text, const char *fallback)
{
    for (size_t i = 0; i < count; i++)
        if (resource_pattern_match(patterns[i].pattern, text))
            return patterns[i].name;
    return count == 0 ? fallback : NULL;
}

static int add_full_gpus(struct builder *b, const struct gpu_inventory *inv,
                         const struct gp_config *cfg, bool skip_mig_enabled)
{
    for (size_t i = 0; i < inv->count; i++) {
        const struct gpu_device *g = &inv->gpus[i];
        if (skip_mig_enabled && g->mig_enabled)
            continue; /* a lost GPU never is: it is listed whole, Unhealthy */
        const char *name =
            pick_name(cfg->gpu_resources, cfg->gpu_resource_count, g->name, NVIDIA_PREFIX "gpu");
        if (name == NULL) {
            log_warn("GPU %u (%s, %s) matches no resources.gpus pattern; not served", g->index,
                     g->uuid, g->name);
            continue;
        }
        struct resource_device d;
        resource_device_init_gpu(&d, g, i);
        if (builder_add(b, name, &d) != 0)
            return -1;
    }
    return 0;
}

static int add_mig_devices(struct builder *b, const struct gpu_inventory *inv,
                           const struct gp_config *cfg, bool single)
{
    for (size_t i = 0; i < inv->count; i++) {
        const struct gpu_device *g = &inv->gpus[i];
        if (!g->mig_enabled)
            continue;
        for (size_t j = 0; j < g->mig_count; j++) {
            char fallback[CONFIG_NAME_LEN];
            if (single)
                snprintf(fallback, sizeof fallback, NVIDIA_PREFIX "gpu");
            else
                default_mig_name(g->migs[j].profile, fallback, sizeof fallback);
            const char *name = pick_name(cfg->mig_resources, cfg->mig_resource_count,
                                         g->migs[j].profile, fallback);
            if (name == NULL) {
                log_warn("MIG device %s (%s) matches no resources.mig pattern; not served",
                         g->migs[j].uuid, g->migs[j].profile);
                continue;
            }
            struct resource_device d;
            device_init_mig(&d, g, i, j);
            if (builder_add(b, name, &d) != 0)
                return -1;
        }
    }
    return 0;
}

/* --mig-strategy single: every GPU MIG-enabled with identical, non-empty
 * layouts (served as nvidia.com/gpu), or none MIG-enabled (full GPUs). */
static int check_single_uniform(const struct gpu_inventory *inv, char *err, size_t errlen)
{
    size_t enabled = 0;
    const char *profile = NULL;
    size_t identified = 0;
    for (size_t i = 0; i < inv->count; i++) {
        const struct gpu_device *g = &inv->gpus[i];
        /* A lost GPU's MIG layout is unknown: it cannot break uniformity,
         * and is listed whole (Unhealthy) under nvidia.com/gpu. */
        if (g->lost)
            continue;
        identified++;
        if (!g->mig_enabled)
            continue;
        enabled++;
        if (g->mig_count == 0) {
            snprintf(err, errlen,
                     "mig-strategy single: GPU %u (%s) has MIG enabled but no MIG "
                     "devices; create MIG devices or use --mig-strategy none",
                     g->index, g->uuid);
            return -1;
        }
        for (size_t j = 0; j < g->mig_count; j++) {
            if (profile == NULL)
                profile = g->migs[j].profile;
            if (strcmp(profile, g->migs[j].profile) != 0) {
                snprintf(err, errlen,
                         "mig-strategy single needs all MIG devices to have the "
                         "same profile, found %s and %s (GPU %u); use --mig-strategy mixed",
                         profile, g->migs[j].profile, g->index);
                return -1;
            }
        }
    }
    if (enabled != 0 && enabled != identified) {
        snprintf(err, errlen,
                 "mig-strategy single needs MIG enabled on all GPUs or on none; "
                 "%zu of %zu GPUs have it; use --mig-strategy mixed",
                 enabled, identified);
        return -1;
    }
    return 0;
}

static bool device_matches_ref(const struct resource_device *d, const char *ref)
{
    return strcmp(d->uuid, ref) == 0 || strcmp(d->index, ref) == 0;
}

/* rank: the device's position in its resource, for `devices: <N>`. */
static bool slice_selects(const struct config_time_slice *ts, const struct resource_device *d,
                          size_t rank)
{
    if (ts->all_devices)
        return ts->first_n_devices == 0 || rank < ts->first_n_devices;
    for (size_t k = 0; k < ts->device_count; k++)
        if (device_matches_ref(d, ts->devices[k]))
            return true;
    return false;
}

/* A reference that names no device of the resource is warned about, not
 * fatal: one ConfigMap usually serves every node of a cluster, and a GPU
 * UUID or index present on one node is absent from the others. A failure
 * here would be a cluster-wide crash loop. Malformed references never get
 * this far (config_load rejects them). */
static void warn_absent_slice_refs(const struct config_time_slice *ts,
                                   const struct builder_entry *e)
{
    for (size_t k = 0; k < ts->device_count; k++) {
        bool found = false;
        for (size_t i = 0; i < e->count && !found; i++)
            found = device_matches_ref(&e->devices[i], ts->devices[k]);
        if (!found)
            log_warn("sharing.timeSlicing: device \"%s\" of resource %s is not a device of "
                     "this node; sharing the devices that are",
                     ts->devices[k], ts->name);
    }
}

static int apply_time_slice(struct builder *out, const struct builder_entry *src,
                            const struct config_time_slice *ts, const struct gp_config *cfg)
{
    const char *shared_name = ts->rename[0] ? ts->rename : src->name;
    for (size_t i = 0; i < src->count; i++) {
        const struct resource_device *d = &src->devices[i];
        if (!slice_selects(ts, d, i)) {
            if (builder_add(out, src->name, d) != 0)
                return -1;
            continue;
        }
        for (int k = 0; k < ts->replicas; k++) {
            struct resource_device r = *d;
            snprintf(r.id, sizeof r.id, "%s::%d", d->uuid, k);
            r.replica = k;
            if (builder_add(out, shared_name, &r) != 0)
                return -1;
        }
        struct builder_entry *e = builder_entry_for(out, shared_name);
        if (e == NULL)
            return -1;
        e->shared = true;
        e->fail_requests_greater_than_one = cfg->fail_requests_greater_than_one;
    }
    return 0;
}

static const struct config_time_slice *slice_for(const struct gp_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->time_slice_count; i++)
        if (strcmp(cfg->time_slices[i].name, name) == 0)
            return &cfg->time_slices[i];
    return NULL;
}

static int apply_time_slicing(struct builder *b, const struct gp_config *cfg, char *err,
                              size_t errlen)
{
    for (size_t i = 0; i < cfg->time_slice_count; i++) {
        bool found = false;
        for (size_t j = 0; j < b->count && !found; j++)
            found = strcmp(b->entries[j].name, cfg->time_slices[i].name) == 0;
        if (!found)
            log_warn("sharing.timeSlicing: resource %s has no devices on this node",
                     cfg->time_slices[i].name);
    }
    struct builder out = {0};
    for (size_t j = 0; j < b->count; j++) {
        const struct builder_entry *e = &b->entries[j];
        const struct config_time_slice *ts = slice_for(cfg, e->name);
        int rc = 0;
        if (ts == NULL) {
            for (size_t i = 0; i < e->count && rc == 0; i++)
                rc = builder_add(&out, e->name, &e->devices[i]);
        } else {
            warn_absent_slice_refs(ts, e);
            if ((rc = apply_time_slice(&out, e, ts, cfg)) != 0)
                snprintf(err, errlen, "out of memory building replicas");
        }
        if (rc != 0) {
            if (err[0] == '\0')
                snprintf(err, errlen, "out of memory building resources");
            builder_free(&out);
            return -1;
        }
    }
    builder_free(b);
    *b = out;
    return 0;
}

static void socket_name_for(const char *resource, char *out, size_t outlen)
{
    /* nvidia.com/gpu -> gpupool-nvidia-gpu.sock, as NVIDIA's nvidia-gpu.sock */
    const char *slash = strchr(resource, '/');
    const char *domain_end = slash ? slash : resource;
    const char *dot = memchr(resource, '.', (size_t)(domain_end - resource));
    size_t vendor_len = dot ? (size_t)(dot - resource) : (size_t)(domain_end - resource);
    snprintf(out, outlen, "gpupool-%.*s-%s.sock", (int)vendor_len, resource,
             slash ? slash + 1 : resource);
}

static int builder_finish(struct builder *b, struct resource_set *set)
{
    set->resources = calloc(b->count ? b->count : 1, sizeof *set->resources);
    if (set->resources == NULL)
        return -1;
    set->count = b->count;
    for (size_t i = 0; i < b->count; i++) {
        struct builder_entry *e = &b->entries[i];
        struct resource *r = &set->resources[i];
        snprintf(r->name, sizeof r->name, "%s", e->name);
        socket_name_for(r->name, r->socket_name, sizeof r->socket_name);
        r->shared = e->shared;
        r->fail_requests_greater_than_one = e->fail_requests_greater_than_one;
        r->device_count = e->count;
        r->devices = e->devices; /* ownership moves to the set */
        e->devices = NULL;
    }
    builder_free(b);
    return 0;
}

int resource_set_build(const struct gpu_inventory *inv, const struct gp_config *cfg,
                       struct resource_set *set, char *err, size_t errlen)
{
    struct builder b = {0};
    int rc = 0;

    memset(set, 0, sizeof *set);
    err[0] = '\0';
    switch (cfg->mig_strategy) {
    case MIG_STRATEGY_NONE:
        rc = add_full_gpus(&b, inv, cfg, false);
        break;
    case MIG_STRATEGY_SINGLE:
        rc = check_single_uniform(inv, err, errlen);
        if (rc == 0)
            rc = add_full_gpus(&b, inv, cfg, true);
        if (rc == 0)
            rc = add_mig_devices(&b, inv, cfg, true);
        break;
    case MIG_STRATEGY_MIXED:
        rc = add_full_gpus(&b, inv, cfg, true);
        if (rc == 0)
            rc = add_mig_devices(&b, inv, cfg, false);
        break;
    }
    if (rc == 0)
        rc = apply_time_slicing(&b, cfg, err, errlen);
    if (rc == 0)
        rc = builder_finish(&b, set);
    if (rc != 0) {
        if (err[0] == '\0')
            snprintf(err, errlen, "out of memory building resources");
        builder_free(&b);
        resource_set_free(set);
        return -1;
    }
    return 0;
}

void resource_set_free(struct resource_set *set)
{
    for (size_t i = 0; i < set->count; i++)
        free(set->resources[i].devices);
    free(set->resources);
    memset(set, 0, sizeof *set);
}
