/* dra_edits.c -- a prepared claim's CDI spec and region directory (see dra_edits.h). */
#include "dra_edits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "cdi_spec.h"
#include "errmsg.h"
#include "isolation.h"
#include "log.h"
#include "poolapi_names.h"

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

/* A device node at its path in the container, found under the dev root on the host. */
/* The UUID as an environment name spells it: '_' for each '-' (shells drop
 * names with '-', poolapi_names.h). */
static void env_uuid(const char *uuid, char *out, size_t len)
{
    size_t i = 0;
    for (; uuid[i] != '\0' && i + 1 < len; i++)
        out[i] = uuid[i] == '-' ? POOL_ENV_UUID_SEPARATOR : uuid[i];
    out[i] = '\0';
}

static int add_node(struct container_edits *e, const struct dra_edits_options *o, const char *path)
{
    char host[PATH_LEN];
    size_t rl = o->dev_root ? strlen(o->dev_root) : 0;
    while (rl > 0 && o->dev_root[rl - 1] == '/')
        rl--;
    snprintf(host, sizeof host, "%.*s%s", (int)rl, rl ? o->dev_root : "", path);
    return container_edits_add_device_node(e, path, host, NULL);
}

/* One device's own edits: its nodes; for a limited device its limit and
 * its region prefix, keyed by its UUID. */
static int device_edits(struct container_edits *e, const struct dra_edits_options *o,
                        const struct dra_device *d, const struct dra_node_device *nd,
                        const char *uid)
{
    for (size_t k = 0; k < nd->node_count; k++)
        if (add_node(e, o, nd->nodes[k]) != 0)
            return -1;
    if (d->limit == 0 && d->cores == 0)
        return 0;
    char key[160], value[PATH_LEN], uuid[96];
    env_uuid(d->uuid, uuid, sizeof uuid);
    snprintf(key, sizeof key, POOL_ENV_MEM_LIMIT_PREFIX "%s", uuid);
    snprintf(value, sizeof value, "%llu", (unsigned long long)d->limit);
    if (d->limit > 0 && container_edits_set_env(e, key, value) != 0)
        return -1;
    snprintf(key, sizeof key, POOL_ENV_SM_LIMIT_PREFIX "%s", uuid);
    snprintf(value, sizeof value, "%u", d->cores);
    if (d->cores > 0 && container_edits_set_env(e, key, value) != 0)
        return -1;
    snprintf(key, sizeof key, POOL_ENV_SHARED_CACHE_PREFIX "%s", uuid);
    snprintf(value, sizeof value, POOL_CONTAINER_CLAIMS_DIR "/%s/region", uid);
    return container_edits_set_env(e, key, value);
}

/* The library, its preload file (read-only) and the claim's region
 * directory (read-write): what every container of a limited claim mounts. */
static int isolation_mounts(struct container_edits *e, const struct dra_edits_options *o,
                            const char *uid, const char *region)
{
    char lib[PATH_LEN], preload[PATH_LEN], target[PATH_LEN];
    snprintf(lib, sizeof lib, "%s/%s", o->isolation_dir, ISOLATION_LIBRARY_NAME);
    snprintf(preload, sizeof preload, "%s/%s", o->isolation_dir, ISOLATION_PRELOAD_NAME);
    snprintf(target, sizeof target, POOL_CONTAINER_CLAIMS_DIR "/%s", uid);
    if (container_edits_add_mount(e, lib, POOL_CONTAINER_LIBRARY, true) != 0 ||
        container_edits_add_mount(e, preload, POOL_CONTAINER_PRELOAD, true) != 0 ||
        container_edits_add_mount(e, region, target, false) != 0)
        return -1;
    return 0;
}

/* The spec of claim e into <cdi-root>/<file>. */
static int write_spec(const struct dra_edits_options *o, const struct dra_claim_entry *e,
                      const struct dra_device_table *t, bool limited, const char *region,
                      const char *file, char *err, size_t errlen)
{
    struct arena a = ARENA_INIT;
    struct container_edits common;
    int rc = -1;
    container_edits_init(&common, &a);
    struct cdi_spec_device *devices =
        arena_calloc(&a, e->device_count ? e->device_count : 1, sizeof *devices);
    struct container_edits *own =
        arena_calloc(&a, e->device_count ? e->device_count : 1, sizeof *own);
    if (devices == NULL || own == NULL)
        goto oom;
    for (size_t i = 0; i < e->device_count; i++) {
        const struct dra_device *d = &e->devices[i];
        const struct dra_node_device *nd = dra_devices_find(t, d->device);
        if (nd == NULL) {
            gp_errf(err, errlen, "device %s is not a device of this node", d->device);
            goto out;
        }
        container_edits_init(&own[i], &a);
        devices[i].name = arena_printf(&a, "%s-%s", e->uid, d->device);
        devices[i].edits = &own[i];
        if (devices[i].name == NULL || device_edits(&own[i], o, d, nd, e->uid) != 0)
            goto oom;
    }
    if (o->node_edits != NULL && container_edits_merge(&common, o->node_edits) != 0)
        goto oom;
    if (limited && isolation_mounts(&common, o, e->uid, region) != 0)
        goto oom;
    char *kind = arena_printf(&a, POOL_DRA_CDI_VENDOR_PREFIX "%s/" POOL_DRA_CDI_CLASS, o->driver);
    if (kind == NULL)
        goto oom;
    const struct cdi_spec spec = {
        .kind = kind, .devices = devices, .device_count = e->device_count, .common = &common};
    rc = cdi_spec_write(&spec, o->cdi_root, file, err, errlen);
    goto out;
oom:
    gp_errf(err, errlen, "out of memory building the CDI spec of claim %s", e->uid);
out:
    arena_free(&a);
    return rc;
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
        limited |= e->devices[i].limit > 0 || e->devices[i].cores > 0;
    if (limited && !isolation_on(o))
        return gp_errf(err, errlen,
                       "claim %s asks for a share of a GPU, but this node enforces no memory "
                       "limits (the plugin runs without --isolation-library)",
                       e->uid);
    /* one region directory per claim (devices/isolation.h), whatever
     * number of containers mount it */
    if (limited &&
        isolation_claim_dir(o->isolation_dir, e->uid, region, sizeof region, err, errlen) != 0)
        return -1;
    const char *file = strrchr(path, '/') + 1;
    return write_spec(o, e, t, limited, region, file, err, errlen);
}

int dra_edits_remove(const struct dra_edits_options *o, const char *uid, char *err, size_t errlen)
{
    char path[PATH_LEN];
    if (!dra_edits_uid_ok(uid))
        return gp_errf(err, errlen, "claim UID \"%.80s\" is not usable in a path", uid);
    if (dra_edits_spec_path(o, uid, path, sizeof path) != 0)
        return gp_errf(err, errlen, "the CDI spec path of claim %s is too long", uid);
    if (cdi_spec_remove(o->cdi_root, strrchr(path, '/') + 1, err, errlen) != 0)
        return -1;
    if (!isolation_on(o))
        return 0;
    return isolation_remove_claim_dir(o->isolation_dir, uid, err, errlen);
}
