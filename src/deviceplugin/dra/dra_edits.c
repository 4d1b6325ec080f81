/* dra_edits.c -- a prepared claim's CDI spec and region directory (see dra_edits.h). */
#include "dra_edits.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "errmsg.h"
#include "file.h"
#include "isolation.h"
#include "log.h"
#include "poolapi_names.h"
#include "resource.h"

#define CDI_VERSION "0.5.0"
#define PATH_LEN 4096

bool dra_edits_uid_ok(const char *uid)
{
    size_t n = strlen(uid);
    if (n == 0 || n >= DRA_UID_LEN)
        return false;
    for (const char *p = uid; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-'))
            return false;
    return true;
}

int dra_edits_spec_path(const struct dra_edits_options *o, const char *uid, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/" POOL_DRA_CDI_VENDOR_PREFIX "%s-" POOL_DRA_CDI_CLASS "_%s.json",
                     o->cdi_root, o->driver, uid);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static bool isolation_on(const struct dra_edits_options *o)
{
    return o->isolation_dir != NULL && o->isolation_dir[0] != '\0';
}

static int append(json_t *array, json_t *value)
{
    return value == NULL || json_array_append_new(array, value) != 0 ? -1 : 0;
}

static json_t *device_node(const char *path)
{
    return json_pack("{s:s,s:s}", "path", path, "hostPath", path);
}

static bool host_has(const struct dra_edits_options *o, const char *path)
{
    char seen[PATH_LEN];
    struct stat st;
    const char *root = o->dev_root && strcmp(o->dev_root, "/") != 0 ? o->dev_root : "";
    snprintf(seen, sizeof seen, "%s%s", root, path);
    return stat(seen, &st) == 0;
}

static json_t *mount(const char *host, const char *container, bool ro)
{
    return ro ? json_pack("{s:s,s:s,s:[s,s,s,s]}", "hostPath", host, "containerPath", container,
                          "options", "ro", "nosuid", "nodev", "bind")
              : json_pack("{s:s,s:s,s:[s,s,s]}", "hostPath", host, "containerPath", container,
                          "options", "nosuid", "nodev", "bind");
}

static json_t *device_json(const struct dra_device *d, const struct dra_node_device *nd,
                           const char *uid)
{
    json_t *nodes = json_array(), *env = json_array();
    if (nodes == NULL || env == NULL)
        goto fail;
    for (size_t k = 0; k < nd->node_count; k++)
        if (append(nodes, device_node(nd->nodes[k])) != 0)
            goto fail;
    if (d->limit > 0 && (append(env, json_sprintf(POOL_ENV_MEM_LIMIT_PREFIX "%s=%llu", d->uuid,
                                                  (unsigned long long)d->limit)) != 0 ||
                         append(env, json_sprintf(POOL_ENV_SHARED_CACHE_PREFIX
                                                  "%s=" POOL_CONTAINER_CLAIMS_DIR "/%s/region",
                                                  d->uuid, uid)) != 0))
        goto fail;
    json_t *edits = json_pack("{s:o}", "deviceNodes", nodes);
    nodes = NULL;
    if (edits == NULL)
        goto fail;
    if (json_array_size(env) > 0 && json_object_set(edits, "env", env) != 0) {
        json_decref(edits);
        goto fail;
    }
    json_decref(env);
    return json_pack("{s:s++,s:o}", "name", uid, "-", d->device, "containerEdits", edits);
fail:
    json_decref(nodes);
    json_decref(env);
    return NULL;
}

static json_t *spec_json(const struct dra_edits_options *o, const struct dra_claim_entry *e,
                         const struct dra_device_table *t, bool limited, const char *region,
                         char *err, size_t errlen)
{
    json_t *devices = json_array(), *nodes = json_array(), *mounts = json_array();
    json_t *spec = NULL;
    if (devices == NULL || nodes == NULL || mounts == NULL)
        goto oom;
    for (size_t i = 0; i < e->device_count; i++) {
        const struct dra_node_device *nd = dra_devices_find(t, e->devices[i].device);
        if (nd == NULL) {
            gp_errf(err, errlen, "device %s is not a device of this node", e->devices[i].device);
            goto out;
        }
        if (append(devices, device_json(&e->devices[i], nd, e->uid)) != 0)
            goto oom;
    }
    if (append(nodes, device_node(resource_control_nodes[0])) != 0)
        goto oom;
    for (size_t i = 1; i < resource_control_node_count; i++)
        if (host_has(o, resource_control_nodes[i]) &&
            append(nodes, device_node(resource_control_nodes[i])) != 0)
            goto oom;
    if (limited) {
        char lib[PATH_LEN], preload[PATH_LEN], target[PATH_LEN];
        snprintf(lib, sizeof lib, "%s/%s", o->isolation_dir, ISOLATION_LIBRARY_NAME);
        snprintf(preload, sizeof preload, "%s/%s", o->isolation_dir, ISOLATION_PRELOAD_NAME);
        snprintf(target, sizeof target, POOL_CONTAINER_CLAIMS_DIR "/%s", e->uid);
        if (append(mounts, mount(lib, POOL_CONTAINER_LIBRARY, true)) != 0 ||
            append(mounts, mount(preload, POOL_CONTAINER_PRELOAD, true)) != 0 ||
            append(mounts, mount(region, target, false)) != 0)
            goto oom;
    }
    json_t *common = json_pack("{s:O}", "deviceNodes", nodes);
    if (common == NULL ||
        (json_array_size(mounts) > 0 && json_object_set(common, "mounts", mounts)))
        goto oom_common;
    char kind[DRA_CDI_ID_LEN];
    snprintf(kind, sizeof kind, POOL_DRA_CDI_VENDOR_PREFIX "%s/" POOL_DRA_CDI_CLASS, o->driver);
    spec = json_pack("{s:s,s:s,s:O,s:o}", "cdiVersion", CDI_VERSION, "kind", kind, "devices",
                     devices, "containerEdits", common);
    if (spec == NULL)
        goto oom;
    goto out;
oom_common:
    json_decref(common);
oom:
    gp_errf(err, errlen, "out of memory building the CDI spec of claim %s", e->uid);
out:
    json_decref(devices);
    json_decref(nodes);
    json_decref(mounts);
    return spec;
}

/* <isolation-dir>/claims/<uid>, 0777 whatever the umask: non-root
 * containers create their region files there. */
static int make_region_dir(const struct dra_edits_options *o, const char *uid, char *path,
                           size_t len, char *err, size_t errlen)
{
    char parent[PATH_LEN];
    snprintf(parent, sizeof parent, "%s/" DRA_CLAIMS_DIR, o->isolation_dir);
    if (snprintf(path, len, "%s/%s", parent, uid) >= (int)len)
        return gp_errf(err, errlen, "region path of claim %s is too long", uid);
    if (mkdir(parent, 0755) != 0 && errno != EEXIST)
        return gp_errf(err, errlen, "cannot create %s: %s", parent, strerror(errno));
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return gp_errf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return gp_errf(err, errlen, "%s is not a directory", path);
    if ((st.st_mode & 07777) != 0777 && chmod(path, 0777) != 0)
        return gp_errf(err, errlen, "cannot chmod %s: %s", path, strerror(errno));
    return 0;
}

int dra_edits_apply(const struct dra_edits_options *o, const struct dra_claim_entry *e,
                    const struct dra_device_table *t, char *err, size_t errlen)
{
    char path[PATH_LEN], region[PATH_LEN] = "";
    if (!dra_edits_uid_ok(e->uid))
        return gp_errf(err, errlen, "claim UID \"%.80s\" is not usable in a path", e->uid);
    if (dra_edits_spec_path(o, e->uid, path, sizeof path) != 0)
        return gp_errf(err, errlen, "the CDI spec path of claim %s is too long", e->uid);
    bool limited = false;
    for (size_t i = 0; i < e->device_count; i++)
        limited |= e->devices[i].limit > 0;
    if (limited && !isolation_on(o))
        return gp_errf(err, errlen,
                       "claim %s asks for a share of a GPU, but this node enforces no memory "
                       "limits (the plugin runs without --isolation-library)",
                       e->uid);
    if (limited && make_region_dir(o, e->uid, region, sizeof region, err, errlen) != 0)
        return -1;
    json_t *spec = spec_json(o, e, t, limited, region, err, errlen);
    if (spec == NULL)
        return -1;
    char *text = json_dumps(spec, JSON_INDENT(2));
    json_decref(spec);
    if (text == NULL)
        return gp_errf(err, errlen, "out of memory writing %s", path);
    if (mkdir(o->cdi_root, 0755) != 0 && errno != EEXIST) {
        int saved = errno;
        free(text);
        return gp_errf(err, errlen, "cannot create %s: %s", o->cdi_root, strerror(saved));
    }
    int rc = file_replace(path, text, strlen(text), 0644, FILE_REPLACE_SYNC);
    int saved = errno;
    free(text);
    if (rc != 0)
        return gp_errf(err, errlen, "cannot write the CDI spec %s: %s", path, strerror(saved));
    return 0;
}

int dra_edits_remove(const struct dra_edits_options *o, const char *uid, char *err, size_t errlen)
{
    char path[PATH_LEN];
    if (!dra_edits_uid_ok(uid))
        return gp_errf(err, errlen, "claim UID \"%.80s\" is not usable in a path", uid);
    if (dra_edits_spec_path(o, uid, path, sizeof path) != 0)
        return gp_errf(err, errlen, "the CDI spec path of claim %s is too long", uid);
    if (unlink(path) != 0 && errno != ENOENT)
        return gp_errf(err, errlen, "cannot remove %s: %s", path, strerror(errno));
    if (!isolation_on(o))
        return 0;
    char parent[PATH_LEN];
    snprintf(parent, sizeof parent, "%s/" DRA_CLAIMS_DIR, o->isolation_dir);
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT
                   ? 0
                   : gp_errf(err, errlen, "cannot open %s: %s", parent, strerror(errno));
    int rc = isolation_remove_tree(fd, uid);
    int saved = errno;
    close(fd);
    if (rc != 0 && saved != ENOENT)
        return gp_errf(err, errlen, "cannot remove %s/%s: %s", parent, uid, strerror(saved));
    return 0;
}
