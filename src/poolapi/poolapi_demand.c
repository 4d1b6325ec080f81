/* poolapi_demand.c -- a pod's effective request (see poolapi_demand.h). */
#include "poolapi_demand.h"

#include <stdio.h>
#include <string.h>

#include "poolapi_quantity.h"

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

void poolapi_demand_add_app(struct poolapi_demand *d, uint64_t request)
{
    d->app = add_sat(d->app, request);
}

void poolapi_demand_add_init(struct poolapi_demand *d, uint64_t request, bool sidecar)
{
    uint64_t phase;
    if (sidecar) {
        /* It keeps running: it holds its request next to the app containers
         * and under every init container that starts after it. */
        d->sidecars = add_sat(d->sidecars, request);
        phase = d->sidecars;
    } else {
        phase = add_sat(request, d->sidecars);
    }
    if (phase > d->init_max)
        d->init_max = phase;
}

uint64_t poolapi_demand_total(const struct poolapi_demand *d)
{
    uint64_t running = add_sat(d->app, d->sidecars);
    return running > d->init_max ? running : d->init_max;
}

bool poolapi_container_is_sidecar(const json_t *container)
{
    const char *policy = json_string_value(json_object_get(container, "restartPolicy"));
    return policy != NULL && strcmp(policy, "Always") == 0;
}

/* obj.key when it is an object; NULL when absent or null; -1 when mistyped. */
static int object_member(const json_t *obj, const char *key, const char *where, json_t **out,
                         char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v)) {
        snprintf(err, errlen, "%s.%s must be an object", where, key);
        return -1;
    }
    *out = v;
    return 0;
}

int poolapi_container_request(const json_t *c, const char *where, const char *resource,
                              uint64_t scale, uint64_t *out, char *err, size_t errlen)
{
    json_t *res, *req, *lim;
    *out = 0;
    if (!json_is_object(c)) {
        snprintf(err, errlen, "%s must be an object", where);
        return -1;
    }
    if (object_member(c, "resources", where, &res, err, errlen) < 0)
        return -1;
    if (!res)
        return 0;
    if (object_member(res, "requests", "resources", &req, err, errlen) < 0 ||
        object_member(res, "limits", "resources", &lim, err, errlen) < 0)
        return -1;
    json_t *v = req ? json_object_get(req, resource) : NULL;
    if (!v && lim)
        v = json_object_get(lim, resource);
    if (!v)
        return 0;
    char what[160];
    snprintf(what, sizeof(what), "%s resources %s", where, resource);
    /* Extended resources ("domain/name") are whole numbers (API validation). */
    if (scale == 1 && strchr(resource, '/'))
        return poolapi_quantity_whole(v, what, out, err, errlen);
    return poolapi_quantity_json(v, what, scale, out, err, errlen);
}

/* spec.key when it is an array; NULL when absent or null; -1 when mistyped. */
static int array_member(const json_t *spec, const char *key, json_t **out, char *err, size_t errlen)
{
    json_t *v = json_object_get(spec, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v)) {
        snprintf(err, errlen, "spec.%s must be an array", key);
        return -1;
    }
    *out = v;
    return 0;
}

int poolapi_pod_containers(const json_t *spec, poolapi_container_fn fn, void *ctx, char *err,
                           size_t errlen)
{
    json_t *lists[2], *c;
    if (array_member(spec, "containers", &lists[0], err, errlen) < 0 ||
        array_member(spec, "initContainers", &lists[1], err, errlen) < 0)
        return -1;
    for (int init = 0; init < 2; init++) {
        size_t i;
        json_array_foreach (lists[init], i, c) {
            char where[64];
            snprintf(where, sizeof(where), "spec.%s[%zu]", init ? "initContainers" : "containers",
                     i);
            bool sidecar = init && poolapi_container_is_sidecar(c);
            if (fn(ctx, c, where, init, sidecar, err, errlen) != 0)
                return -1;
        }
    }
    return 0;
}

/* One resource's walk for poolapi_pod_demand. */
struct demand_walk {
    const char *resource;
    uint64_t scale;
    struct poolapi_demand d;
};

static int add_to_demand(void *ctx, const json_t *c, const char *where, bool init, bool sidecar,
                         char *err, size_t errlen)
{
    struct demand_walk *w = ctx;
    uint64_t one;
    if (poolapi_container_request(c, where, w->resource, w->scale, &one, err, errlen) < 0)
        return -1;
    if (init)
        poolapi_demand_add_init(&w->d, one, sidecar);
    else
        poolapi_demand_add_app(&w->d, one);
    return 0;
}

int poolapi_pod_demand(const json_t *spec, const char *resource, uint64_t scale, uint64_t *out,
                       char *err, size_t errlen)
{
    struct demand_walk w = {.resource = resource, .scale = scale};
    *out = 0;
    if (poolapi_pod_containers(spec, add_to_demand, &w, err, errlen) < 0)
        return -1;
    *out = poolapi_demand_total(&w.d);
    return 0;
}
