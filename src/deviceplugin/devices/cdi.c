/* cdi.c -- writes the CDI spec of the served devices (cdi.h). */
#include "cdi.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "allocate.h"
#include "buf.h"
#include "errmsg.h"
#include "file.h"
#include "log.h"

#define PATH_LEN 4096

/* Where distributions put the driver's libraries, relative to its root. */
static const char *const library_dirs[] = {
    "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
    "/lib64",     "/lib/x86_64-linux-gnu",     "/lib/aarch64-linux-gnu",
    "/usr/lib",
};

/* The driver libraries a CUDA container needs, by soname. */
static const char *const libraries[] = {
    "libnvidia-ml.so.1",
    "libcuda.so.1",
    "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-nvvm.so.4",
    "libcudadebugger.so.1",
    "libnvidia-opencl.so.1",
    "libnvidia-cfg.so.1",
    "libnvidia-allocator.so.1",
};

static const char *const binary_dirs[] = {"/usr/bin", "/usr/sbin", "/bin", "/sbin"};
static const char *const binaries[] = {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"};

#define PERSISTENCED_SOCKET "/run/nvidia-persistenced/socket"

struct spec_builder {
    const struct gp_config *cfg;
    const char *search_root; /* where this process sees the driver */
    json_t *mounts;          /* common containerEdits.mounts */
    json_t *links;           /* create-symlinks hook arguments */
    json_t *ldcache_dirs;    /* update-ldcache folders */
};

/* root + path without a doubled slash; "/" + "/dev/x" = "/dev/x". A path
 * too long for the buffer becomes "" (which exists nowhere). */
static void join_root(const char *root, const char *path, char *out, size_t len)
{
    size_t rl = strlen(root);
    while (rl > 0 && root[rl - 1] == '/')
        rl--;
    int n = snprintf(out, len, "%.*s%s", (int)rl, root, path);
    if (n < 0 || (size_t)n >= len)
        out[0] = '\0';
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int append(json_t *array, json_t *value)
{
    return value == NULL || json_array_append_new(array, value) != 0 ? -1 : 0;
}

static json_t *device_node(const struct gp_config *cfg, const char *path)
{
    char host[PATH_LEN];
    join_root(cfg->nvidia_dev_root, path, host, sizeof host);
    return json_pack("{s:s,s:s}", "path", path, "hostPath", host);
}

/* Read-only bind mount of `rel` (a path relative to the driver root). */
static json_t *driver_mount(const struct spec_builder *b, const char *rel)
{
    char host[PATH_LEN];
    join_root(b->cfg->nvidia_driver_root, rel, host, sizeof host);
    return json_pack("{s:s,s:s,s:[s,s,s,s]}", "hostPath", host, "containerPath", rel, "options",
                     "ro", "nosuid", "nodev", "bind");
}

/* dir + "/" + name relative to the driver root, and where this process
 * sees it; false when absent. */
static bool find_file(const struct spec_builder *b, const char *dir, const char *name, char *rel,
                      size_t rel_len, char *seen, size_t seen_len)
{
    snprintf(rel, rel_len, "%s/%s", dir, name);
    join_root(b->search_root, rel, seen, seen_len);
    return exists(seen);
}

/* A library found by soname: the file it resolves to is mounted, and the
 * soname is recreated as a link to it by the create-symlinks hook (the
 * runtime binds files, not links). */
static int add_library(struct spec_builder *b, const char *dir, const char *soname)
{
    char rel[PATH_LEN], seen[PATH_LEN], real[PATH_MAX];
    if (!find_file(b, dir, soname, rel, sizeof rel, seen, sizeof seen))
        return 0;
    if (realpath(seen, real) == NULL)
        return 0; /* vanished or a dangling link: nothing to mount */
    const char *base = strrchr(real, '/') + 1;
    if (strcmp(base, soname) != 0) {
        char link[PATH_LEN * 2], target[PATH_LEN];
        snprintf(target, sizeof target, "%s/%s", dir, base);
        snprintf(link, sizeof link, "%s::%s", base, rel);
        if (append(b->mounts, driver_mount(b, target)) != 0 ||
            append(b->links, json_string("--link")) != 0 ||
            append(b->links, json_string(link)) != 0)
            return -1;
    } else if (append(b->mounts, driver_mount(b, rel)) != 0) {
        return -1;
    }
    /* Each folder once, for update-ldcache. */
    for (size_t i = 0; i < json_array_size(b->ldcache_dirs); i++)
        if (strcmp(json_string_value(json_array_get(b->ldcache_dirs, i)), dir) == 0)
            return 1;
    return append(b->ldcache_dirs, json_string(dir)) == 0 ? 1 : -1;
}

static int add_libraries(struct spec_builder *b)
{
    for (size_t l = 0; l < sizeof libraries / sizeof libraries[0]; l++)
        for (size_t d = 0; d < sizeof library_dirs / sizeof library_dirs[0]; d++) {
            int rc = add_library(b, library_dirs[d], libraries[l]);
            if (rc < 0)
                return -1;
            if (rc > 0)
                break; /* the first directory that has it, as the loader would */
        }
    return 0;
}

static int add_binaries(struct spec_builder *b)
{
    char rel[PATH_LEN], seen[PATH_LEN];
    for (size_t i = 0; i < sizeof binaries / sizeof binaries[0]; i++)
        for (size_t d = 0; d < sizeof binary_dirs / sizeof binary_dirs[0]; d++)
            if (find_file(b, binary_dirs[d], binaries[i], rel, sizeof rel, seen, sizeof seen)) {
                if (append(b->mounts, driver_mount(b, rel)) != 0)
                    return -1;
                break;
            }
    return 0;
}

/* The hook command line: nvidia-ctk takes `hook <name>`, the standalone
 * nvidia-cdi-hook takes `<name>` directly. */
static json_t *hook(const struct gp_config *cfg, const char *name, json_t *extra_args)
{
    const char *path = cfg->nvidia_ctk_path;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    json_t *args = json_pack("[s]", base);
    if (args != NULL && strcmp(base, "nvidia-ctk") == 0)
        json_array_append_new(args, json_string("hook"));
    if (args != NULL)
        json_array_append_new(args, json_string(name));
    if (args != NULL && extra_args != NULL)
        json_array_extend(args, extra_args);
    json_decref(extra_args);
    if (args == NULL)
        return NULL;
    return json_pack("{s:s,s:s,s:o}", "hookName", "createContainer", "path", path, "args", args);
}

static json_t *hooks(const struct spec_builder *b, const struct gpu_inventory *inv)
{
    unsigned off = b->cfg->cdi_disabled_hooks;
    json_t *list = json_array();
    if (list == NULL)
        return NULL;
    int rc = 0;
    if (!(off & CDI_HOOK_CREATE_SYMLINKS) && json_array_size(b->links) > 0)
        rc |= append(list, hook(b->cfg, "create-symlinks", json_copy(b->links)));
    if (!(off & CDI_HOOK_ENABLE_CUDA_COMPAT) && inv->driver_version[0] != '\0') {
        char arg[128];
        snprintf(arg, sizeof arg, "--host-driver-version=%s", inv->driver_version);
        rc |= append(list, hook(b->cfg, "enable-cuda-compat", json_pack("[s]", arg)));
    }
    if (!(off & CDI_HOOK_UPDATE_LDCACHE) && json_array_size(b->ldcache_dirs) > 0) {
        json_t *args = json_array();
        for (size_t i = 0; args != NULL && i < json_array_size(b->ldcache_dirs); i++) {
            json_array_append_new(args, json_string("--folder"));
            json_array_append(args, json_array_get(b->ldcache_dirs, i));
        }
        rc |= append(list, hook(b->cfg, "update-ldcache", args));
    }
    if (rc != 0) {
        json_decref(list);
        return NULL;
    }
    return list;
}

static json_t *common_edits(struct spec_builder *b, const struct gpu_inventory *inv)
{
    const struct gp_config *cfg = b->cfg;
    json_t *nodes = json_array();
    /* nvidiactl always (a spec is written once for the node), the optional
     * control nodes when the host has them. */
    if (nodes == NULL || append(nodes, device_node(cfg, resource_control_nodes[0])) != 0)
        goto fail;
    for (size_t i = 1; i < resource_control_node_count; i++) {
        char host[PATH_LEN];
        join_root(cfg->nvidia_dev_root, resource_control_nodes[i], host, sizeof host);
        if (exists(host) && append(nodes, device_node(cfg, resource_control_nodes[i])) != 0)
            goto fail;
    }
    if (add_libraries(b) != 0 || add_binaries(b) != 0)
        goto fail;
    if (cfg->cdi_feature_flags & CDI_FEATURE_INCLUDE_PERSISTENCED_SOCKET) {
        char seen[PATH_LEN];
        join_root(b->search_root, PERSISTENCED_SOCKET, seen, sizeof seen);
        if (exists(seen) && append(b->mounts, driver_mount(b, PERSISTENCED_SOCKET)) != 0)
            goto fail;
    }
    json_t *hook_list = hooks(b, inv);
    if (hook_list == NULL)
        goto fail;
    json_t *edits = json_pack("{s:[s],s:o,s:O}", "env", "NVIDIA_VISIBLE_DEVICES=void",
                              "deviceNodes", nodes, "mounts", b->mounts);
    if (edits == NULL || json_array_size(hook_list) == 0) {
        json_decref(hook_list);
        return edits;
    }
    if (json_object_set_new(edits, "hooks", hook_list) != 0) {
        json_decref(edits);
        return NULL;
    }
    return edits;
fail:
    json_decref(nodes);
    return NULL;
}

static json_t *device_edits(const struct gp_config *cfg, const struct gpu_inventory *inv,
                            const struct resource_device *d)
{
    char paths[RESOURCE_MAX_DEVICE_NODES][RESOURCE_NODE_LEN];
    size_t count = resource_device_nodes(inv, d, paths);
    json_t *nodes = json_array();
    if (nodes == NULL)
        goto fail;
    for (size_t k = 0; k < count; k++)
        if (append(nodes, device_node(cfg, paths[k])) != 0)
            goto fail;
    return json_pack("{s:{s:o}}", "containerEdits", "deviceNodes", nodes);
fail:
    json_decref(nodes);
    return NULL;
}

/* One device per distinct runtime ID, named as Allocate names it. */
static json_t *devices(const struct gp_config *cfg, const struct gpu_inventory *inv,
                       const struct resource_set *set)
{
    json_t *list = json_array();
    json_t *seen = json_object(); /* names already written */
    if (list == NULL || seen == NULL)
        goto fail;
    for (size_t r = 0; r < set->count; r++)
        for (size_t i = 0; i < set->resources[r].device_count; i++) {
            const struct resource_device *d = &set->resources[r].devices[i];
            const char *id = cfg->device_id_strategy == DEVICE_ID_INDEX ? d->index : d->uuid;
            if (json_object_get(seen, id) != NULL)
                continue;
            json_t *dev = device_edits(cfg, inv, d);
            if (dev == NULL || json_object_set_new(dev, "name", json_string(id)) != 0 ||
                json_array_append_new(list, dev) != 0 ||
                json_object_set_new(seen, id, json_true()) != 0)
                goto fail;
        }
    json_decref(seen);
    return list;
fail:
    json_decref(seen);
    json_decref(list);
    return NULL;
}

/* Replaced whole (file_replace, synced): readers see the old spec or the
 * new one, never a partial file. */
static int write_atomically(const char *dir, json_t *spec, char *err, size_t errlen)
{
    char path[PATH_LEN];
    snprintf(path, sizeof path, "%s/%s", dir, CDI_SPEC_FILE);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return gp_errf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
    struct buf text = {0};
    char *json = json_dumps(spec, JSON_INDENT(2));
    bool ok = json != NULL && buf_str(&text, json) && buf_str(&text, "\n");
    free(json);
    if (!ok) {
        buf_free(&text);
        return gp_errf(err, errlen, "cannot write %s: out of memory", path);
    }
    int rc = file_replace(path, text.data, text.len, 0644, FILE_REPLACE_SYNC);
    int saved = errno;
    buf_free(&text);
    if (rc == FILE_REPLACE_NO_TEMP)
        return gp_errf(err, errlen, "cannot create a file in %s: %s", dir, strerror(saved));
    if (rc != 0)
        return gp_errf(err, errlen, "cannot write %s: %s", path, strerror(saved));
    log_info("Wrote CDI spec %s", path);
    return 0;
}

int cdi_write_spec(const struct gp_config *cfg, const struct gpu_inventory *inv,
                   const struct resource_set *set, char *err, size_t errlen)
{
    struct spec_builder b = {
        .cfg = cfg,
        .search_root = is_dir(cfg->container_driver_root) ? cfg->container_driver_root
                                                          : cfg->nvidia_driver_root,
        .mounts = json_array(),
        .links = json_array(),
        .ldcache_dirs = json_array(),
    };
    json_t *spec = NULL, *edits = NULL, *list = NULL;
    int rc = -1;
    if (b.mounts == NULL || b.links == NULL || b.ldcache_dirs == NULL)
        goto out;
    list = devices(cfg, inv, set);
    edits = list ? common_edits(&b, inv) : NULL;
    if (edits != NULL)
        spec = json_pack("{s:s,s:s,s:O,s:O}", "cdiVersion", CDI_SPEC_VERSION, "kind",
                         ALLOCATE_CDI_KIND, "devices", list, "containerEdits", edits);
    if (spec != NULL)
        rc = write_atomically(cfg->cdi_spec_dir, spec, err, errlen);
    else
        gp_errf(err, errlen, "out of memory building the CDI spec");
out:
    json_decref(spec);
    json_decref(edits);
    json_decref(list);
    json_decref(b.mounts);
    json_decref(b.links);
    json_decref(b.ldcache_dirs);
    return rc;
}
