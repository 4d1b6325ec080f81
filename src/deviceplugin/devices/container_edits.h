/* container_edits.h -- what a container gets from the node, in no protocol.
 *
 * The device model answers "what does this container need" once, as a
 * list of edits: environment variables, bind mounts, device nodes, CDI
 * device names and (CDI only) hooks. Each protocol encodes the same
 * edits its own way: the DevicePlugin v1beta1 Allocate reply (node/plugin.c,
 * the only encoder into V1beta1__ContainerAllocateResponse) and CDI
 * containerEdits (cdi_spec.h, which a DRA prepare writes per claim).
 *
 * Owner: every string and array lives in the arena given to
 * container_edits_init() (borrowed; it must outlive the edits), so one
 * arena_free() releases all of it. Adding copies its strings. Order is
 * kept: lists read back in the order they were added (a replaced variable
 * keeps its first place). Not thread-safe.
 *
 * Errors: the add functions return 0, or -1 when the arena is out of
 * memory; the edits stay valid (without the failed entry). */
#ifndef GP_CONTAINER_EDITS_H
#define GP_CONTAINER_EDITS_H

#include <stdbool.h>
#include <stddef.h>

#include "arena.h"
#include "compiler.h"

struct container_env {
    const char *key;
    const char *value;
};

/* A bind mount of host_path at container_path. */
struct container_mount {
    const char *host_path;
    const char *container_path;
    bool read_only;
};

struct container_device_node {
    const char *path;        /* inside the container: "/dev/nvidia0" */
    const char *host_path;   /* on the host (under the dev root) */
    const char *permissions; /* "rw", ...; NULL = the runtime's default */
};

/* A CDI createContainer-style hook: `path` run with args[0..n_args). */
struct container_hook {
    const char *hook_name; /* "createContainer" */
    const char *path;
    const char **args;
    size_t n_args;
};

struct container_edits {
    struct arena *arena; /* borrowed */
    struct container_env *env;
    size_t n_env, env_cap;
    struct container_mount *mounts;
    size_t n_mounts, mount_cap;
    struct container_device_node *device_nodes;
    size_t n_device_nodes, device_node_cap;
    const char **cdi_devices; /* fully qualified: "vendor/class=name" */
    size_t n_cdi_devices, cdi_device_cap;
    /* Only CDI carries hooks; the v1beta1 encoder refuses edits that have
     * any (nothing on the Allocate path adds one). */
    struct container_hook *hooks;
    size_t n_hooks, hook_cap;
};

/* Empty edits whose entries will live in arena a. */
void container_edits_init(struct container_edits *e, struct arena *a);

/* key=value; a key already set gets the new value in its old place. */
GP_MUST_USE int container_edits_set_env(struct container_edits *e, const char *key,
                                        const char *value);
GP_MUST_USE int container_edits_add_mount(struct container_edits *e, const char *host_path,
                                          const char *container_path, bool read_only);
/* A path already listed is kept as it is (one node, one entry). */
GP_MUST_USE int container_edits_add_device_node(struct container_edits *e, const char *path,
                                                const char *host_path, const char *permissions);
GP_MUST_USE int container_edits_add_cdi_device(struct container_edits *e, const char *name);
GP_MUST_USE int container_edits_add_hook(struct container_edits *e, const char *hook_name,
                                         const char *path, const char *const *args, size_t n_args);
/* Adds every entry of `from` to e by the rules above (from may live in
 * another arena: its strings are copied). */
GP_MUST_USE int container_edits_merge(struct container_edits *e,
                                      const struct container_edits *from);

/* Lookups: NULL when absent. */
const char *container_edits_env(const struct container_edits *e, const char *key);
const struct container_mount *container_edits_mount(const struct container_edits *e,
                                                    const char *container_path);
const struct container_device_node *container_edits_device_node(const struct container_edits *e,
                                                                const char *path);
bool container_edits_has_cdi_device(const struct container_edits *e, const char *name);
/* True when e holds no entry at all. */
bool container_edits_empty(const struct container_edits *e);

#endif
