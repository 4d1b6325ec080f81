/* container_edits.c -- a container's edits in the arena (see container_edits.h). */
#include "container_edits.h"

#include <string.h>

#define FIRST_CAP 4

/* Room for one more element of `size` bytes in *array (n used, *cap
 * allocated): a bump allocator cannot grow in place, so a full array is
 * copied into one twice its size (the old block stays in the arena until
 * it is freed; the lists are a few dozen entries). */
static int reserve(struct arena *a, void **array, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return 0;
    size_t next = *cap ? *cap * 2 : FIRST_CAP;
    void *grown = arena_calloc(a, next, size);
    if (grown == NULL)
        return -1;
    if (n > 0)
        memcpy(grown, *array, n * size);
    *array = grown;
    *cap = next;
    return 0;
}

void container_edits_init(struct container_edits *e, struct arena *a)
{
    memset(e, 0, sizeof *e);
    e->arena = a;
}

int container_edits_set_env(struct container_edits *e, const char *key, const char *value)
{
    char *v = arena_strdup(e->arena, value);
    if (v == NULL)
        return -1;
    for (size_t i = 0; i < e->n_env; i++)
        if (strcmp(e->env[i].key, key) == 0) {
            e->env[i].value = v;
            return 0;
        }
    char *k = arena_strdup(e->arena, key);
    if (k == NULL ||
        reserve(e->arena, (void **)&e->env, e->n_env, &e->env_cap, sizeof *e->env) != 0)
        return -1;
    e->env[e->n_env++] = (struct container_env){k, v};
    return 0;
}

int container_edits_add_mount(struct container_edits *e, const char *host_path,
                              const char *container_path, bool read_only)
{
    char *h = arena_strdup(e->arena, host_path);
    char *c = arena_strdup(e->arena, container_path);
    if (h == NULL || c == NULL ||
        reserve(e->arena, (void **)&e->mounts, e->n_mounts, &e->mount_cap, sizeof *e->mounts) != 0)
        return -1;
    e->mounts[e->n_mounts++] = (struct container_mount){h, c, read_only};
    return 0;
}

int container_edits_add_device_node(struct container_edits *e, const char *path,
                                    const char *host_path, const char *permissions)
{
    if (container_edits_device_node(e, path) != NULL)
        return 0;
    char *p = arena_strdup(e->arena, path);
    char *h = arena_strdup(e->arena, host_path);
    char *perm = permissions != NULL ? arena_strdup(e->arena, permissions) : NULL;
    if (p == NULL || h == NULL || (permissions != NULL && perm == NULL) ||
        reserve(e->arena, (void **)&e->device_nodes, e->n_device_nodes, &e->device_node_cap,
                sizeof *e->device_nodes) != 0)
        return -1;
    e->device_nodes[e->n_device_nodes++] = (struct container_device_node){p, h, perm};
    return 0;
}

int container_edits_add_cdi_device(struct container_edits *e, const char *name)
{
    char *n = arena_strdup(e->arena, name);
    if (n == NULL || reserve(e->arena, (void **)&e->cdi_devices, e->n_cdi_devices,
                             &e->cdi_device_cap, sizeof *e->cdi_devices) != 0)
        return -1;
    e->cdi_devices[e->n_cdi_devices++] = n;
    return 0;
}

int container_edits_add_hook(struct container_edits *e, const char *hook_name, const char *path,
                             const char *const *args, size_t n_args)
{
    char *name = arena_strdup(e->arena, hook_name);
    char *p = arena_strdup(e->arena, path);
    const char **copy = arena_calloc(e->arena, n_args ? n_args : 1, sizeof *copy);
    if (name == NULL || p == NULL || copy == NULL)
        return -1;
    for (size_t i = 0; i < n_args; i++)
        if ((copy[i] = arena_strdup(e->arena, args[i])) == NULL)
            return -1;
    if (reserve(e->arena, (void **)&e->hooks, e->n_hooks, &e->hook_cap, sizeof *e->hooks) != 0)
        return -1;
    e->hooks[e->n_hooks++] = (struct container_hook){name, p, copy, n_args};
    return 0;
}

int container_edits_merge(struct container_edits *e, const struct container_edits *from)
{
    for (size_t i = 0; i < from->n_env; i++)
        if (container_edits_set_env(e, from->env[i].key, from->env[i].value) != 0)
            return -1;
    for (size_t i = 0; i < from->n_mounts; i++) {
        const struct container_mount *m = &from->mounts[i];
        if (container_edits_add_mount(e, m->host_path, m->container_path, m->read_only) != 0)
            return -1;
    }
    for (size_t i = 0; i < from->n_device_nodes; i++) {
        const struct container_device_node *d = &from->device_nodes[i];
        if (container_edits_add_device_node(e, d->path, d->host_path, d->permissions) != 0)
            return -1;
    }
    for (size_t i = 0; i < from->n_cdi_devices; i++)
        if (container_edits_add_cdi_device(e, from->cdi_devices[i]) != 0)
            return -1;
    for (size_t i = 0; i < from->n_hooks; i++) {
        const struct container_hook *h = &from->hooks[i];
        if (container_edits_add_hook(e, h->hook_name, h->path, h->args, h->n_args) != 0)
            return -1;
    }
    return 0;
}

const char *container_edits_env(const struct container_edits *e, const char *key)
{
    for (size_t i = 0; i < e->n_env; i++)
        if (strcmp(e->env[i].key, key) == 0)
            return e->env[i].value;
    return NULL;
}

const struct container_mount *container_edits_mount(const struct container_edits *e,
                                                    const char *container_path)
{
    for (size_t i = 0; i < e->n_mounts; i++)
        if (strcmp(e->mounts[i].container_path, container_path) == 0)
            return &e->mounts[i];
    return NULL;
}

const struct container_device_node *container_edits_device_node(const struct container_edits *e,
                                                                const char *path)
{
    for (size_t i = 0; i < e->n_device_nodes; i++)
        if (strcmp(e->device_nodes[i].path, path) == 0)
            return &e->device_nodes[i];
    return NULL;
}

bool container_edits_has_cdi_device(const struct container_edits *e, const char *name)
{
    for (size_t i = 0; i < e->n_cdi_devices; i++)
        if (strcmp(e->cdi_devices[i], name) == 0)
            return true;
    return false;
}

bool container_edits_empty(const struct container_edits *e)
{
    return e->n_env == 0 && e->n_mounts == 0 && e->n_device_nodes == 0 && e->n_cdi_devices == 0 &&
           e->n_hooks == 0;
}
