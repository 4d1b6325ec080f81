/* allocate.c -- one container's edits for an Allocate (see allocate.h). */
#include "allocate.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Device node path as seen on the host: the dev root prefixed. */
static void host_dev_path(const struct edits_options *opts, const char *path, char *out, size_t len)
{
    const char *root = opts->dev_root ? opts->dev_root : "/";
    size_t rl = strlen(root);
    while (rl > 0 && root[rl - 1] == '/')
        rl--;
    snprintf(out, len, "%.*s%s", (int)rl, root, path);
}

static int add_device_node(struct container_edits *out, const struct edits_options *opts,
                           const char *path)
{
    char host[512];
    host_dev_path(opts, path, host, sizeof host);
    return container_edits_add_device_node(out, path, host, "rw");
}

/* The IDs the container runtime understands: physical UUID or index,
 * replicas folded, first occurrence kept. */
static size_t runtime_ids(const struct edits_options *opts, const struct resource *res,
                          const size_t *positions, size_t count, const char **ids,
                          size_t *first_position)
{
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        const struct resource_device *d = &res->devices[positions[i]];
        const char *id = opts->id_by_index ? d->index : d->uuid;
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

static char *join_ids(struct arena *a, const char **ids, size_t n)
{
    size_t len = 1;
    for (size_t i = 0; i < n; i++)
        len += strlen(ids[i]) + 1;
    char *s = arena_alloc(a, len);
    if (s == NULL)
        return NULL;
    char *p = s;
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s%s", i ? "," : "", ids[i]);
    return s;
}

/* IMEX names its only valid channel; the GDS/MOFED/GDRCopy kinds take all. */
static const char *cdi_extra_device(const char *kind)
{
    return strcmp(kind, "imex-channel") == 0 ? "0" : "all";
}

static int add_cdi(struct container_edits *out, const struct edits_options *opts, const char **ids,
                   size_t n)
{
    const char *extras[4];
    size_t n_extras = 0;
    if (opts->gds)
        extras[n_extras++] = "gds";
    if (opts->mofed)
        extras[n_extras++] = "mofed";
    if (opts->gdrcopy)
        extras[n_extras++] = "gdrcopy";
    if (opts->imex_channel)
        extras[n_extras++] = "imex-channel";
    for (size_t i = 0; i < n; i++) {
        char *name = arena_printf(out->arena, ALLOCATE_CDI_KIND "=%s", ids[i]);
        if (name == NULL || container_edits_add_cdi_device(out, name) != 0)
            return -1;
    }
    for (size_t i = 0; i < n_extras; i++) {
        char *name = arena_printf(out->arena, ALLOCATE_CDI_VENDOR "/%s=%s", extras[i],
                                  cdi_extra_device(extras[i]));
        if (name == NULL || container_edits_add_cdi_device(out, name) != 0)
            return -1;
    }
    return 0;
}

static int add_device_nodes(struct container_edits *out, const struct edits_options *opts,
                            const struct gpu_inventory *inv, const struct resource *res,
                            const size_t *positions, size_t n)
{
    for (size_t i = 0; i < resource_control_node_count; i++) {
        char host[512];
        struct stat st;
        host_dev_path(opts, resource_control_nodes[i], host, sizeof host);
        if (stat(host, &st) == 0 && add_device_node(out, opts, resource_control_nodes[i]) != 0)
            return -1;
    }
    if (opts->imex_channel) {
        char host[512];
        struct stat st;
        host_dev_path(opts, ALLOCATE_IMEX_CHANNEL0_NODE, host, sizeof host);
        if (stat(host, &st) == 0 && add_device_node(out, opts, ALLOCATE_IMEX_CHANNEL0_NODE) != 0)
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char nodes[RESOURCE_MAX_DEVICE_NODES][RESOURCE_NODE_LEN];
        size_t count = resource_device_nodes(inv, &res->devices[positions[i]], nodes);
        for (size_t k = 0; k < count; k++)
            if (add_device_node(out, opts, nodes[k]) != 0)
                return -1;
    }
    return 0;
}

int allocate_container(const struct edits_options *opts, const struct gpu_inventory *inv,
                       const struct resource *res, const size_t *positions, size_t count,
                       struct container_edits *out, char *err, size_t errlen)
{
    struct arena *a = out->arena;
    const char **ids = arena_calloc(a, count ? count : 1, sizeof *ids);
    size_t *unique_positions = arena_calloc(a, count ? count : 1, sizeof *unique_positions);
    if (ids == NULL || unique_positions == NULL)
        goto oom;
    size_t n = runtime_ids(opts, res, positions, count, ids, unique_positions);

    if ((opts->device_list & EDITS_LIST_CDI) && add_cdi(out, opts, ids, n) != 0)
        goto oom;
    if ((opts->gds && container_edits_set_env(out, "NVIDIA_GDS", "enabled") != 0) ||
        (opts->mofed && container_edits_set_env(out, "NVIDIA_MOFED", "enabled") != 0) ||
        (opts->gdrcopy && container_edits_set_env(out, "NVIDIA_GDRCOPY", "enabled") != 0))
        goto oom;
    if ((opts->device_list & ~(unsigned)EDITS_LIST_CDI) == 0)
        return 0;

    if (opts->device_list & EDITS_LIST_ENVVAR) {
        char *list = join_ids(a, ids, n);
        if (list == NULL || container_edits_set_env(out, "NVIDIA_VISIBLE_DEVICES", list) != 0)
            goto oom;
        if (opts->imex_channel && container_edits_set_env(out, "NVIDIA_IMEX_CHANNELS", "0") != 0)
            goto oom;
    }
    if (opts->device_list & EDITS_LIST_VOLUME_MOUNTS) {
        if (container_edits_set_env(out, "NVIDIA_VISIBLE_DEVICES", ALLOCATE_VOLUME_MOUNT_ROOT) != 0)
            goto oom;
        for (size_t i = 0; i < n; i++) {
            char *path = arena_printf(a, ALLOCATE_VOLUME_MOUNT_ROOT "/%s", ids[i]);
            if (path == NULL || container_edits_add_mount(out, "/dev/null", path, false) != 0)
                goto oom;
        }
        if (opts->imex_channel &&
            container_edits_add_mount(out, "/dev/null", ALLOCATE_VOLUME_MOUNT_ROOT "/imex/0",
                                      false) != 0)
            goto oom;
    }
    if (opts->pass_device_specs && add_device_nodes(out, opts, inv, res, unique_positions, n) != 0)
        goto oom;
    return 0;
oom:
    snprintf(err, errlen, "out of memory building the Allocate response");
    return -1;
}
