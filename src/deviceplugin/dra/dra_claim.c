/* dra_claim.c -- a ResourceClaim's results and opaque config (see dra_claim.h). */
#include "dra_claim.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "poolapi_names.h"
#include "poolapi_quantity.h"

#define MIB (1ull << 20)

int dra_config_parse(const json_t *parameters, struct dra_gpu_config *out, char *err, size_t errlen)
{
    *out = (struct dra_gpu_config){0};
    if (!json_is_object(parameters))
        return gp_errf(err, errlen, "the parameters are not an object");
    const char *api = json_string_value(json_object_get(parameters, "apiVersion"));
    const char *kind = json_string_value(json_object_get(parameters, "kind"));
    if (api == NULL || strcmp(api, POOL_DRA_CONFIG_API_VERSION) != 0)
        return gp_errf(err, errlen, "apiVersion %s%s%s is not " POOL_DRA_CONFIG_API_VERSION,
                       api ? "\"" : "", api ? api : "missing", api ? "\"" : "");
    if (kind == NULL || strcmp(kind, POOL_DRA_CONFIG_KIND) != 0)
        return gp_errf(err, errlen, "kind %s%s%s is not " POOL_DRA_CONFIG_KIND, kind ? "\"" : "",
                       kind ? kind : "missing", kind ? "\"" : "");
    const char *key;
    const json_t *value;
    json_object_foreach ((json_t *)parameters, key, value) {
        if (strcmp(key, "apiVersion") == 0 || strcmp(key, "kind") == 0)
            continue;
        if (strcmp(key, "memoryLimit") == 0) {
            char why[128];
            uint64_t bytes = 0;
            if (poolapi_quantity_json(value, "memoryLimit", 1, &bytes, why, sizeof why) != 0)
                return gp_errf(err, errlen, "%s", why);
            if (bytes == 0)
                return gp_errf(err, errlen, "memoryLimit must be more than 0");
            out->memory_limit = bytes;
            continue;
        }
        return gp_errf(err, errlen,
                       "unknown field \"%s\" (a " POOL_DRA_CONFIG_KIND
                       " has apiVersion, kind, memoryLimit)",
                       key);
    }
    return 0;
}

int dra_claim_cdi_id(const char *driver, const char *uid, const char *device, char *out, size_t len)
{
    int n = snprintf(out, len, POOL_DRA_CDI_VENDOR_PREFIX "%s/" POOL_DRA_CDI_CLASS "=%s-%s", driver,
                     uid, device);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static const char *text(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "";
}

/* Does a config entry's request list name this result's request? An empty
 * list names all; "req" also names its subrequests "req/sub". */
static bool names_request(const json_t *requests, const char *request)
{
    if (json_array_size(requests) == 0)
        return true;
    size_t rl = strlen(request);
    const char *slash = strchr(request, '/');
    size_t parent = slash ? (size_t)(slash - request) : rl;
    size_t i;
    const json_t *r;
    json_array_foreach (requests, i, r) {
        const char *name = json_string_value(r);
        if (name == NULL)
            continue;
        size_t nl = strlen(name);
        if ((nl == rl && memcmp(name, request, rl) == 0) ||
            (nl == parent && memcmp(name, request, parent) == 0))
            return true;
    }
    return false;
}

/* The configuration for `request`: every entry of ours that names it,
 * class entries before claim entries (the API's order), later ones win. */
static int config_for(const json_t *configs, const char *driver, const char *request,
                      struct dra_gpu_config *out, char *err, size_t errlen)
{
    *out = (struct dra_gpu_config){0};
    for (int pass = 0; pass < 2; pass++) {
        const char *source = pass == 0 ? "FromClass" : "FromClaim";
        size_t i;
        const json_t *c;
        json_array_foreach (configs, i, c) {
            const char *src = text(c, "source");
            /* an entry without a source is the claim's own (spec config) */
            if ((pass == 0) != (strcmp(src, "FromClass") == 0))
                continue;
            const json_t *opaque = json_object_get(c, "opaque");
            if (opaque == NULL || strcmp(text(opaque, "driver"), driver) != 0 ||
                !names_request(json_object_get(c, "requests"), request))
                continue;
            struct dra_gpu_config one;
            char why[GP_ERR_LEN];
            if (dra_config_parse(json_object_get(opaque, "parameters"), &one, why, sizeof why) != 0)
                return gp_errf(err, errlen, "opaque config %zu (%s) for driver %s: %s", i, source,
                               driver, why);
            if (one.memory_limit != 0)
                out->memory_limit = one.memory_limit;
        }
    }
    return 0;
}

static int copy_field(char *out, size_t len, const char *value, const char *what, char *err,
                      size_t errlen)
{
    if (strlen(value) >= len)
        return gp_errf(err, errlen, "%s \"%.64s...\" is too long", what, value);
    memcpy(out, value, strlen(value) + 1);
    return 0;
}

/* One result of ours into d: its device, limit and CDI ID. */
static int resolve_result(const json_t *r, const json_t *configs,
                          const struct dra_claim_scope *scope, const char *uid,
                          struct dra_device *d, char *err, size_t errlen)
{
    const char *name = text(r, "device");
    const struct dra_node_device *dev = dra_devices_find(scope->devices, name);
    if (dev == NULL)
        return gp_errf(err, errlen,
                       "device \"%s\" of pool %s is not a device of this node (driver %s)", name,
                       scope->pool, scope->driver);
    if (dev->lost)
        return gp_errf(err, errlen,
                       "device %s (%s) is lost: its GPU fell off the bus or NVML "
                       "cannot read it",
                       name, dev->uuid);
    if (copy_field(d->request, sizeof d->request, text(r, "request"), "request", err, errlen) ||
        copy_field(d->pool, sizeof d->pool, scope->pool, "pool", err, errlen) ||
        copy_field(d->device, sizeof d->device, name, "device", err, errlen) ||
        copy_field(d->share_id, sizeof d->share_id, text(r, "shareID"), "shareID", err, errlen) ||
        copy_field(d->uuid, sizeof d->uuid, dev->uuid, "uuid", err, errlen))
        return -1;
    if (dra_claim_cdi_id(scope->driver, uid, name, d->cdi_id, sizeof d->cdi_id) != 0)
        return gp_errf(err, errlen, "the CDI device ID of %s is too long", name);

    /* shared or whole: the allocator's consumedCapacity.memory */
    uint64_t share = dev->memory;
    const json_t *memory = json_object_get(json_object_get(r, "consumedCapacity"), "memory");
    if (memory != NULL) {
        char why[128];
        if (poolapi_quantity_json(memory, "consumedCapacity.memory", 1, &share, why, sizeof why) !=
            0)
            return gp_errf(err, errlen, "device %s: %s", name, why);
        if (share == 0 || share > dev->memory)
            return gp_errf(err, errlen,
                           "device %s: consumedCapacity.memory %llu is not in 1..%llu bytes "
                           "(the device's memory)",
                           name, (unsigned long long)share, (unsigned long long)dev->memory);
    }
    if (json_is_true(json_object_get(r, "adminAccess")))
        share = dev->memory; /* monitoring sees the device, never limited */
    /* The slices' requestPolicy steps in MiB and its default is the memory
     * rounded down to a MiB: that much is all of it, the whole device. */
    d->limit = share < (dev->memory & ~(MIB - 1)) ? share : 0;

    /* consumedCapacity.cores (percent of the GPU's compute, the slices'
     * `cores` capacity of 100): 1..99 is a compute limit; absent, 0 (a
     * memory-only share) or 100 (all of it) is none. */
    d->cores = 0;
    const json_t *cores = json_object_get(json_object_get(r, "consumedCapacity"), "cores");
    if (cores != NULL && !json_is_true(json_object_get(r, "adminAccess"))) {
        char why[128];
        uint64_t pct;
        if (poolapi_quantity_json(cores, "consumedCapacity.cores", 1, &pct, why, sizeof why) != 0)
            return gp_errf(err, errlen, "device %s: %s", name, why);
        if (pct > 100)
            return gp_errf(err, errlen,
                           "device %s: consumedCapacity.cores %llu is not in 0..100 (percent "
                           "of the GPU)",
                           name, (unsigned long long)pct);
        d->cores = pct < 100 ? (unsigned)pct : 0;
    }

    struct dra_gpu_config cfg;
    if (config_for(configs, scope->driver, d->request, &cfg, err, errlen) != 0)
        return -1;
    if (cfg.memory_limit != 0) {
        if (cfg.memory_limit > share)
            return gp_errf(err, errlen,
                           "device %s: memoryLimit %llu bytes is more than the %llu bytes "
                           "allocated to the claim",
                           name, (unsigned long long)cfg.memory_limit, (unsigned long long)share);
        d->limit = cfg.memory_limit < (dev->memory & ~(MIB - 1)) ? cfg.memory_limit : 0;
    }
    return 0;
}

int dra_claim_resolve(const json_t *claim, const struct dra_claim_scope *scope,
                      struct dra_claim_entry *e, char *err, size_t errlen)
{
    e->devices = NULL;
    e->device_count = 0;
    e->state = DRA_PREPARE_STARTED;
    const json_t *meta = json_object_get(claim, "metadata");
    const char *uid = text(meta, "uid");
    if (strcmp(uid, e->uid) != 0)
        return gp_errf(err, errlen,
                       "ResourceClaim %s/%s has UID %s, not %s: the claim was deleted and "
                       "created again since the kubelet asked",
                       e->ns, e->name, uid[0] ? uid : "(none)", e->uid);
    const json_t *devices =
        json_object_get(json_object_get(json_object_get(claim, "status"), "allocation"), "devices");
    const json_t *results = json_object_get(devices, "results");
    if (!json_is_array(results))
        return gp_errf(err, errlen, "ResourceClaim %s/%s is not allocated", e->ns, e->name);
    const json_t *configs = json_object_get(devices, "config");
    size_t ours = 0, elsewhere = 0, i;
    const json_t *r;
    json_array_foreach (results, i, r) {
        if (strcmp(text(r, "driver"), scope->driver) != 0)
            continue;
        if (strcmp(text(r, "pool"), scope->pool) == 0)
            ours++;
        else
            elsewhere++;
    }
    if (ours == 0 && elsewhere > 0)
        return gp_errf(err, errlen,
                       "ResourceClaim %s/%s is allocated devices of driver %s in another pool "
                       "(not node %s)",
                       e->ns, e->name, scope->driver, scope->pool);
    if (ours == 0)
        return 0;
    struct dra_device *out = calloc(ours, sizeof *out);
    if (out == NULL)
        return gp_errf(err, errlen, "out of memory");
    size_t n = 0;
    json_array_foreach (results, i, r) {
        if (strcmp(text(r, "driver"), scope->driver) != 0 ||
            strcmp(text(r, "pool"), scope->pool) != 0)
            continue;
        if (resolve_result(r, configs, scope, e->uid, &out[n], err, errlen) != 0) {
            free(out);
            return -1;
        }
        n++;
    }
    e->devices = out;
    e->device_count = n;
    return 0;
}
