/* allocate.c -- one container's Allocate response (see allocate.h). */
#include "allocate.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "clock.h"

/* Growable pointer arrays inside the arena. Capacities are known up front
 * (bounded by the device count), so each array is sized once. */
struct reply_builder {
    struct arena *arena;
    V1beta1__ContainerAllocateResponse *out;
    size_t env_cap, mount_cap, spec_cap, annotation_cap, cdi_cap;
};

static int set_env(struct reply_builder *b, const char *key, const char *value)
{
    V1beta1__ContainerAllocateResponse *o = b->out;
    for (size_t i = 0; i < o->n_envs; i++) {
        if (strcmp(o->envs[i]->key, key) == 0) {
            o->envs[i]->value = arena_strdup(b->arena, value);
            return o->envs[i]->value ? 0 : -1;
        }
    }
    if (o->n_envs == b->env_cap)
        return -1;
    V1beta1__ContainerAllocateResponse__EnvsEntry *e = arena_alloc(b->arena, sizeof *e);
    if (e == NULL)
        return -1;
    v1beta1__container_allocate_response__envs_entry__init(e);
    e->key = arena_strdup(b->arena, key);
    e->value = arena_strdup(b->arena, value);
    if (e->key == NULL || e->value == NULL)
        return -1;
    o->envs[o->n_envs++] = e;
    return 0;
}

static int add_annotation(struct reply_builder *b, const char *key, const char *value)
{
    V1beta1__ContainerAllocateResponse *o = b->out;
    if (o->n_annotations == b->annotation_cap)
        return -1;
    V1beta1__ContainerAllocateResponse__AnnotationsEntry *e = arena_alloc(b->arena, sizeof *e);
    if (e == NULL)
        return -1;
    v1beta1__container_allocate_response__annotations_entry__init(e);
    e->key = arena_strdup(b->arena, key);
    e->value = arena_strdup(b->arena, value);
    if (e->key == NULL || e->value == NULL)
        return -1;
    o->annotations[o->n_annotations++] = e;
    return 0;
}

static int add_cdi_device(struct reply_builder *b, const char *name)
{
    V1beta1__ContainerAllocateResponse *o = b->out;
    if (o->n_cdi_devices == b->cdi_cap)
        return -1;
    V1beta1__CDIDevice *d = arena_alloc(b->arena, sizeof *d);
    if (d == NULL)
        return -1;
    v1beta1__cdidevice__init(d);
    d->name = arena_strdup(b->arena, name);
    if (d->name == NULL)
        return -1;
    o->cdi_devices[o->n_cdi_devices++] = d;
    return 0;
}

static int add_mount(struct reply_builder *b, const char *container_path, const char *host_path)
{
    V1beta1__ContainerAllocateResponse *o = b->out;
    if (o->n_mounts == b->mount_cap)
        return -1;
    V1beta1__Mount *m = arena_alloc(b->arena, sizeof *m);
    if (m == NULL)
        return -1;
    v1beta1__mount__init(m);
    m->container_path = arena_strdup(b->arena, container_path);
    m->host_path = arena_strdup(b->arena, host_path);
    if (m->container_path == NULL || m->host_path == NULL)
        return -1;
    o->mounts[o->n_mounts++] = m;
    return 0;
}

/* Device node path as seen on the host: the dev root prefixed. */
static void host_dev_path(const struct gp_config *cfg, const char *path, char *out, size_t len)
{
    const char *root = cfg->nvidia_dev_root ? cfg->nvidia_dev_root : "/";
    size_t rl = strlen(root);
    while (rl > 0 && root[rl - 1] == '/')
        rl--;
    snprintf(out, len, "%.*s%s", (int)rl, root, path);
}

static int add_device_spec(struct reply_builder *b, const struct gp_config *cfg, const char *path)
{
    V1beta1__ContainerAllocateResponse *o = b->out;
    for (size_t i = 0; i < o->n_devices; i++)
        if (strcmp(o->devices[i]->container_path, path) == 0)
            return 0;
    if (o->n_devices == b->spec_cap)
        return -1;
    char host[512];
    host_dev_path(cfg, path, host, sizeof host);
    V1beta1__DeviceSpec *d = arena_alloc(b->arena, sizeof *d);
    if (d == NULL)
        return -1;
    v1beta1__device_spec__init(d);
    d->container_path = arena_strdup(b->arena, path);
    d->host_path = arena_strdup(b->arena, host);
    d->permissions = "rw";
    if (d->container_path == NULL || d->host_path == NULL)
        return -1;
    o->devices[o->n_devices++] = d;
    return 0;
}

/* The IDs the container runtime understands: physical UUID or index,
 * replicas folded, first occurrence kept. */
static size_t runtime_ids(const struct gp_config *cfg, const struct resource *res,
                          const size_t *positions, size_t count, const char **ids,
                          size_t *first_position)
{
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        const struct resource_device *d = &res->devices[positions[i]];
        const char *id = cfg->device_id_strategy == DEVICE_ID_INDEX ? d->index : d->uuid;
        bool seen = false;
        for (size_t k = 0; k < n && !seen; k++)
            seen = strcmp(ids[k], id) == 0;
        if (seen)
            continue;
        first_position[n] = positions[i];
        ids[n++] = id;
    }
    return n;
}

static char *join_ids(struct arena *a, const char *prefix, const char **ids, size_t n)
{
    size_t len = 1;
    for (size_t i = 0; i < n; i++)
        len += strlen(prefix) + strlen(ids[i]) + 1;
    char *s = arena_alloc(a, len);
    if (s == NULL)
        return NULL;
    char *p = s;
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s%s%s", i ? "," : "", prefix, ids[i]);
    return s;
}

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

/* IMEX names its only valid channel; the GDS/MOFED/GDRCopy kinds take all. */
static const char *cdi_extra_device(const char *kind)
{
    return strcmp(kind, "imex-channel") == 0 ? "0" : "all";
}

static int add_cdi(struct reply_builder *b, const struct gp_config *cfg, const char **ids, size_t n)
{
    const char *extras[4];
    size_t n_extras = 0;
    if (cfg->gds_enabled)
        extras[n_extras++] = "gds";
    if (cfg->mofed_enabled)
        extras[n_extras++] = "mofed";
    if (cfg->gdrcopy_enabled)
        extras[n_extras++] = "gdrcopy";
    if (cfg->imex_channel_count > 0)
        extras[n_extras++] = "imex-channel";

    if (cfg->device_list_strategy & DEVICE_LIST_CDI_ANNOTATIONS) {
        char *value = join_ids(b->arena, ALLOCATE_CDI_KIND "=", ids, n);
        for (size_t i = 0; value != NULL && i < n_extras; i++)
            value = arena_printf(b->arena, "%s,k8s.device-plugin.nvidia.com/%s=%s", value,
                                 extras[i], cdi_extra_device(extras[i]));
        char uuid[37];
        random_uuid4(uuid);
        char *key = arena_printf(
            b->arena, "%snvidia-device-plugin_%s",
            cfg->cdi_annotation_prefix ? cfg->cdi_annotation_prefix : "cdi.k8s.io/", uuid);
        if (value == NULL || key == NULL || add_annotation(b, key, value) != 0)
            return -1;
    }
    if (cfg->device_list_strategy & DEVICE_LIST_CDI_CRI) {
        for (size_t i = 0; i < n; i++) {
            char *name = arena_printf(b->arena, ALLOCATE_CDI_KIND "=%s", ids[i]);
            if (name == NULL || add_cdi_device(b, name) != 0)
                return -1;
        }
        for (size_t i = 0; i < n_extras; i++) {
            char *name = arena_printf(b->arena, "k8s.device-plugin.nvidia.com/%s=%s", extras[i],
                                      cdi_extra_device(extras[i]));
            if (name == NULL || add_cdi_device(b, name) != 0)
                return -1;
        }
    }
    return 0;
}


static int add_device_specs(struct reply_builder *b, const struct gp_config *cfg,
                            const struct gpu_inventory *inv, const struct resource *res,
                            const size_t *positions, size_t n)
{
    for (size_t i = 0; i < resource_control_node_count; i++) {
        char host[512];
        struct stat st;
        host_dev_path(cfg, resource_control_nodes[i], host, sizeof host);
        if (stat(host, &st) == 0 && add_device_spec(b, cfg, resource_control_nodes[i]) != 0)
            return -1;
    }
    if (cfg->imex_channel_count > 0) {
        char host[512];
        struct stat st;
        host_dev_path(cfg, CONFIG_IMEX_CHANNEL0_NODE, host, sizeof host);
        if (stat(host, &st) == 0 && add_device_spec(b, cfg, CONFIG_IMEX_CHANNEL0_NODE) != 0)
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char nodes[RESOURCE_MAX_DEVICE_NODES][RESOURCE_NODE_LEN];
        size_t count = resource_device_nodes(inv, &res->devices[positions[i]], nodes);
        for (size_t k = 0; k < count; k++)
            if (add_device_spec(b, cfg, nodes[k]) != 0)
                return -1;
    }
    return 0;
}

static int size_arrays(struct reply_builder *b, size_t n)
{
    V1beta1__ContainerAllocateResponse *o = b->out;
    b->env_cap = 8;
    b->annotation_cap = 1;
    b->cdi_cap = n + 4;
    b->mount_cap = n + 1;
    b->spec_cap = n * 3 + 5;
    o->envs = arena_calloc(b->arena, b->env_cap, sizeof *o->envs);
    o->annotations = arena_calloc(b->arena, b->annotation_cap, sizeof *o->annotations);
    o->cdi_devices = arena_calloc(b->arena, b->cdi_cap, sizeof *o->cdi_devices);
    o->mounts = arena_calloc(b->arena, b->mount_cap ? b->mount_cap : 1, sizeof *o->mounts);
    o->devices = arena_calloc(b->arena, b->spec_cap, sizeof *o->devices);
    return o->envs && o->annotations && o->cdi_devices && o->mounts && o->devices ? 0 : -1;
}

int allocate_container(struct arena *a, const struct gp_config *cfg,
                       const struct gpu_inventory *inv, const struct resource *res,
                       const size_t *positions, size_t count,
                       V1beta1__ContainerAllocateResponse *out, char *err, size_t errlen)
{
    struct reply_builder b = {.arena = a, .out = out};
    v1beta1__container_allocate_response__init(out);
    const char **ids = arena_calloc(a, count ? count : 1, sizeof *ids);
    size_t *unique_positions = arena_calloc(a, count ? count : 1, sizeof *unique_positions);
    if (ids == NULL || unique_positions == NULL || size_arrays(&b, count) != 0)
        goto oom;
    size_t n = runtime_ids(cfg, res, positions, count, ids, unique_positions);

    unsigned cdi = DEVICE_LIST_CDI_ANNOTATIONS | DEVICE_LIST_CDI_CRI;
    if ((cfg->device_list_strategy & cdi) && add_cdi(&b, cfg, ids, n) != 0)
        goto oom;
    if ((cfg->gds_enabled && set_env(&b, "NVIDIA_GDS", "enabled") != 0) ||
        (cfg->mofed_enabled && set_env(&b, "NVIDIA_MOFED", "enabled") != 0) ||
        (cfg->gdrcopy_enabled && set_env(&b, "NVIDIA_GDRCOPY", "enabled") != 0))
        goto oom;
    if ((cfg->device_list_strategy & ~cdi) == 0)
        return 0;

    if (cfg->device_list_strategy & DEVICE_LIST_ENVVAR) {
        char *list = join_ids(a, "", ids, n);
        if (list == NULL || set_env(&b, "NVIDIA_VISIBLE_DEVICES", list) != 0)
            goto oom;
        if (cfg->imex_channel_count > 0 && set_env(&b, "NVIDIA_IMEX_CHANNELS", "0") != 0)
            goto oom;
    }
    if (cfg->device_list_strategy & DEVICE_LIST_VOLUME_MOUNTS) {
        if (set_env(&b, "NVIDIA_VISIBLE_DEVICES", ALLOCATE_VOLUME_MOUNT_ROOT) != 0)
            goto oom;
        for (size_t i = 0; i < n; i++) {
            char *path = arena_printf(a, ALLOCATE_VOLUME_MOUNT_ROOT "/%s", ids[i]);
            if (path == NULL || add_mount(&b, path, "/dev/null") != 0)
                goto oom;
        }
        if (cfg->imex_channel_count > 0 &&
            add_mount(&b, ALLOCATE_VOLUME_MOUNT_ROOT "/imex/0", "/dev/null") != 0)
            goto oom;
    }
    if (cfg->pass_device_specs && add_device_specs(&b, cfg, inv, res, unique_positions, n) != 0)
        goto oom;
    return 0;
oom:
    snprintf(err, errlen, "out of memory building the Allocate response");
    return -1;
}
