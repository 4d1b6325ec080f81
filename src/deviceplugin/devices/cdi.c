/* cdi.c -- writes the CDI spec of the served devices (cdi.h). */
#include "cdi.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "allocate.h"
#include "arena.h"
#include "cdi_spec.h"
#include "errmsg.h"

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
/* create-symlinks pairs and update-ldcache folders: one per library at most. */
#define MAX_LINKS (sizeof libraries / sizeof libraries[0])

struct driver_scan {
    const struct cdi_options *opts;
    const char *search_root;      /* where this process sees the driver */
    struct container_edits *out;  /* the mounts go here */
    const char *links[MAX_LINKS]; /* "<file>::<soname path>", arena strings */
    size_t link_count;
    const char *ldcache_dirs[MAX_LINKS];
    size_t ldcache_dir_count;
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

static int add_device_node(struct container_edits *out, const struct cdi_options *opts,
                           const char *path)
{
    char host[PATH_LEN];
    join_root(opts->dev_root, path, host, sizeof host);
    return container_edits_add_device_node(out, path, host, NULL);
}

/* Read-only bind mount of `rel` (a path relative to the driver root). */
static int add_driver_mount(struct driver_scan *s, const char *rel)
{
    char host[PATH_LEN];
    join_root(s->opts->driver_root, rel, host, sizeof host);
    return container_edits_add_mount(s->out, host, rel, true);
}

/* dir + "/" + name relative to the driver root, and where this process
 * sees it; false when absent. */
static bool find_file(const struct driver_scan *s, const char *dir, const char *name, char *rel,
                      size_t rel_len, char *seen, size_t seen_len)
{
    snprintf(rel, rel_len, "%s/%s", dir, name);
    join_root(s->search_root, rel, seen, seen_len);
    return exists(seen);
}

/* A library found by soname: the file it resolves to is mounted, and the
 * soname is recreated as a link to it by the create-symlinks hook (the
 * runtime binds files, not links). 1 found, 0 absent, -1 out of memory. */
static int add_library(struct driver_scan *s, const char *dir, const char *soname)
{
    char rel[PATH_LEN], seen[PATH_LEN], real[PATH_MAX];
    if (!find_file(s, dir, soname, rel, sizeof rel, seen, sizeof seen))
        return 0;
    if (realpath(seen, real) == NULL)
        return 0; /* vanished or a dangling link: nothing to mount */
    const char *base = strrchr(real, '/') + 1;
    struct arena *a = s->out->arena;
    if (strcmp(base, soname) != 0) {
        char target[PATH_LEN];
        snprintf(target, sizeof target, "%s/%s", dir, base);
        const char *link = arena_printf(a, "%s::%s", base, rel);
        if (link == NULL || add_driver_mount(s, target) != 0)
            return -1;
        s->links[s->link_count++] = link;
    } else if (add_driver_mount(s, rel) != 0) {
        return -1;
    }
    /* Each folder once, for update-ldcache. */
    for (size_t i = 0; i < s->ldcache_dir_count; i++)
        if (strcmp(s->ldcache_dirs[i], dir) == 0)
            return 1;
    s->ldcache_dirs[s->ldcache_dir_count++] = dir;
    return 1;
}

static int add_libraries(struct driver_scan *s)
{
    for (size_t l = 0; l < sizeof libraries / sizeof libraries[0]; l++)
        for (size_t d = 0; d < sizeof library_dirs / sizeof library_dirs[0]; d++) {
            int rc = add_library(s, library_dirs[d], libraries[l]);
            if (rc < 0)
                return -1;
            if (rc > 0)
                break; /* the first directory that has it, as the loader would */
        }
    return 0;
}

static int add_binaries(struct driver_scan *s)
{
    char rel[PATH_LEN], seen[PATH_LEN];
    for (size_t i = 0; i < sizeof binaries / sizeof binaries[0]; i++)
        for (size_t d = 0; d < sizeof binary_dirs / sizeof binary_dirs[0]; d++)
            if (find_file(s, binary_dirs[d], binaries[i], rel, sizeof rel, seen, sizeof seen)) {
                if (add_driver_mount(s, rel) != 0)
                    return -1;
                break;
            }
    return 0;
}

/* The hook command line: nvidia-ctk takes `hook <name>`, the standalone
 * nvidia-cdi-hook takes `<name>` directly. */
static int add_hook(struct driver_scan *s, const char *name, const char *const *extra,
                    size_t n_extra)
{
    const char *path = s->opts->ctk_path;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const char *args[3 + 2 * MAX_LINKS];
    size_t n = 0;
    args[n++] = base;
    if (strcmp(base, "nvidia-ctk") == 0)
        args[n++] = "hook";
    args[n++] = name;
    for (size_t i = 0; i < n_extra; i++)
        args[n++] = extra[i];
    return container_edits_add_hook(s->out, "createContainer", path, args, n);
}

static int add_hooks(struct driver_scan *s, const struct gpu_inventory *inv)
{
    const char *args[2 * MAX_LINKS];
    size_t n = 0;
    if (s->opts->hook_create_symlinks && s->link_count > 0) {
        for (size_t i = 0; i < s->link_count; i++) {
            args[n++] = "--link";
            args[n++] = s->links[i];
        }
        if (add_hook(s, "create-symlinks", args, n) != 0)
            return -1;
    }
    if (s->opts->hook_enable_cuda_compat && inv->driver_version[0] != '\0') {
        char arg[128];
        snprintf(arg, sizeof arg, "--host-driver-version=%s", inv->driver_version);
        const char *one[1] = {arg};
        if (add_hook(s, "enable-cuda-compat", one, 1) != 0)
            return -1;
    }
    if (s->opts->hook_update_ldcache && s->ldcache_dir_count > 0) {
        n = 0;
        for (size_t i = 0; i < s->ldcache_dir_count; i++) {
            args[n++] = "--folder";
            args[n++] = s->ldcache_dirs[i];
        }
        if (add_hook(s, "update-ldcache", args, n) != 0)
            return -1;
    }
    return 0;
}

int cdi_node_edits(const struct cdi_options *opts, const struct gpu_inventory *inv,
                   struct container_edits *out, char *err, size_t errlen)
{
    struct driver_scan s = {
        .opts = opts,
        .search_root =
            is_dir(opts->container_driver_root) ? opts->container_driver_root : opts->driver_root,
        .out = out,
    };
    /* nvidiactl always (a spec is written once for the node), the optional
     * control nodes when the host has them. */
    if (add_device_node(out, opts, resource_control_nodes[0]) != 0)
        goto oom;
    for (size_t i = 1; i < resource_control_node_count; i++) {
        char host[PATH_LEN];
        join_root(opts->dev_root, resource_control_nodes[i], host, sizeof host);
        if (exists(host) && add_device_node(out, opts, resource_control_nodes[i]) != 0)
            goto oom;
    }
    if (add_libraries(&s) != 0 || add_binaries(&s) != 0)
        goto oom;
    if (opts->persistenced_socket) {
        char seen[PATH_LEN];
        join_root(s.search_root, PERSISTENCED_SOCKET, seen, sizeof seen);
        if (exists(seen) && add_driver_mount(&s, PERSISTENCED_SOCKET) != 0)
            goto oom;
    }
    if (add_hooks(&s, inv) != 0)
        goto oom;
    return 0;
oom:
    return gp_errf(err, errlen, "out of memory building the driver's container edits");
}

int cdi_device_edits(const struct cdi_options *opts, const struct gpu_inventory *inv,
                     const struct resource_device *d, struct container_edits *out)
{
    char paths[RESOURCE_MAX_DEVICE_NODES][RESOURCE_NODE_LEN];
    size_t count = resource_device_nodes(inv, d, paths);
    for (size_t k = 0; k < count; k++)
        if (add_device_node(out, opts, paths[k]) != 0)
            return -1;
    return 0;
}

/* One device per distinct runtime ID, named as Allocate names it. */
static int spec_devices(struct arena *a, const struct cdi_options *opts,
                        const struct gpu_inventory *inv, const struct resource_set *set,
                        struct cdi_spec_device **out, size_t *count)
{
    size_t total = 0;
    for (size_t r = 0; r < set->count; r++)
        total += set->resources[r].device_count;
    struct cdi_spec_device *list = arena_calloc(a, total ? total : 1, sizeof *list);
    if (list == NULL)
        return -1;
    size_t n = 0;
    for (size_t r = 0; r < set->count; r++)
        for (size_t i = 0; i < set->resources[r].device_count; i++) {
            const struct resource_device *d = &set->resources[r].devices[i];
            const char *id = opts->id_by_index ? d->index : d->uuid;
            bool seen = false;
            for (size_t k = 0; k < n && !seen; k++)
                seen = strcmp(list[k].name, id) == 0;
            if (seen)
                continue;
            struct container_edits *edits = arena_alloc(a, sizeof *edits);
            if (edits == NULL)
                return -1;
            container_edits_init(edits, a);
            if (cdi_device_edits(opts, inv, d, edits) != 0)
                return -1;
            list[n++] = (struct cdi_spec_device){.name = id, .edits = edits};
        }
    *out = list;
    *count = n;
    return 0;
}

int cdi_write_spec(const struct cdi_options *opts, const struct gpu_inventory *inv,
                   const struct resource_set *set, char *err, size_t errlen)
{
    struct arena a = ARENA_INIT;
    struct container_edits common;
    struct cdi_spec spec = {.kind = ALLOCATE_CDI_KIND, .common = &common};
    struct cdi_spec_device *devices = NULL;
    int rc = -1;
    container_edits_init(&common, &a);
    /* A container that names only the spec's devices sees no GPU through
     * the NVIDIA runtime's own variable. */
    if (container_edits_set_env(&common, "NVIDIA_VISIBLE_DEVICES", "void") != 0 ||
        spec_devices(&a, opts, inv, set, &devices, &spec.device_count) != 0) {
        gp_errf(err, errlen, "out of memory building the CDI spec");
        goto out;
    }
    spec.devices = devices;
    if (cdi_node_edits(opts, inv, &common, err, errlen) != 0)
        goto out;
    rc = cdi_spec_write(&spec, opts->spec_dir, CDI_SPEC_FILE, err, errlen);
out:
    arena_free(&a);
    return rc;
}
