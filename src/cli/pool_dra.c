/* pool_dra.c -- DRA devices and claims in the pool (see pool_dra.h). */
#include "pool_dra.h"

#include "poolapi_quantity.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *jstr(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* A quantity ("16Gi", "17179869184") in bytes; 0 when absent or malformed. */
static int64_t quantity_bytes(const json_t *v)
{
    uint64_t u;
    if (json_is_integer(v))
        return json_integer_value(v) > 0 ? json_integer_value(v) : 0;
    if (json_is_string(v) && poolapi_quantity_parse(json_string_value(v), 1, &u, NULL, 0) == 0 &&
        u <= INT64_MAX)
        return (int64_t)u;
    return 0;
}

static int cmp_str(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "");
}

/* (driver, pool, device): the key a claim's result names. */
static int device_key(const void *a, const void *b)
{
    const struct pool_dra_device *x = a, *y = b;
    int c = cmp_str(x->driver, y->driver);
    if (c == 0)
        c = cmp_str(x->pool, y->pool);
    return c != 0 ? c : cmp_str(x->name, y->name);
}

static int by_string(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int pool_add_resourceslice(struct pool *pool, const json_t *slice)
{
    const json_t *spec = json_object_get(slice, "spec");
    const char *node = jstr(spec, "nodeName");
    const char *driver = jstr(spec, "driver");
    const char *pname = jstr(json_object_get(spec, "pool"), "name");
    if (node == NULL || driver == NULL || pname == NULL)
        return 0; /* a slice for many nodes (nodeSelector, allNodes): not one node's GPUs */
    if (pool->only_node && strcmp(pool->only_node, node) != 0)
        return 0;
    size_t i;
    const json_t *dev;
    json_array_foreach (json_object_get(spec, "devices"), i, dev) {
        const char *name = jstr(dev, "name");
        if (name == NULL)
            continue;
        if (pool->ndra == pool->dra_cap) {
            size_t cap = pool->dra_cap ? pool->dra_cap * 2 : 16;
            struct pool_dra_device *grown = realloc(pool->dra, cap * sizeof *grown);
            if (grown == NULL)
                return -1;
            pool->dra = grown;
            pool->dra_cap = cap;
        }
        struct pool_dra_device *d = &pool->dra[pool->ndra];
        *d = (struct pool_dra_device){
            .node = arena_strdup(&pool->arena, node),
            .driver = arena_strdup(&pool->arena, driver),
            .pool = arena_strdup(&pool->arena, pname),
            .name = arena_strdup(&pool->arena, name),
            .memory = quantity_bytes(json_object_get(
                json_object_get(json_object_get(dev, "capacity"), "memory"), "value")),
            .shared = json_is_true(json_object_get(dev, "allowMultipleAllocations")),
        };
        if (!d->node || !d->driver || !d->pool || !d->name)
            return -1;
        pool->ndra++;
    }
    return 0;
}

int pool_dra_index(struct pool *pool)
{
    if (pool->ndra == 0)
        return 0;
    qsort(pool->dra, pool->ndra, sizeof *pool->dra, device_key);
    pool->dra_nodes = malloc(pool->ndra * sizeof *pool->dra_nodes);
    if (pool->dra_nodes == NULL)
        return -1;
    for (size_t d = 0; d < pool->ndra; d++)
        pool->dra_nodes[d] = pool->dra[d].node;
    qsort(pool->dra_nodes, pool->ndra, sizeof *pool->dra_nodes, by_string);
    size_t n = 0;
    for (size_t d = 0; d < pool->ndra; d++)
        if (n == 0 || strcmp(pool->dra_nodes[n - 1], pool->dra_nodes[d]) != 0)
            pool->dra_nodes[n++] = pool->dra_nodes[d];
    pool->ndra_nodes = n;
    return 0;
}

static int add_claim(struct pool *pool, struct pool_dra_device *d, const char *ns, const char *name,
                     int64_t consumed)
{
    if (d->nclaims == d->claims_cap) {
        size_t cap = d->claims_cap ? d->claims_cap * 2 : 4;
        struct pool_dra_claim *grown = realloc(d->claims, cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        d->claims = grown;
        d->claims_cap = cap;
    }
    struct pool_dra_claim *c = &d->claims[d->nclaims];
    c->ns = arena_strdup(&pool->arena, ns);
    c->name = arena_strdup(&pool->arena, name);
    c->consumed = consumed;
    if (!c->ns || !c->name)
        return -1;
    d->nclaims++;
    d->consumed += consumed;
    return 0;
}

int pool_add_resourceclaim(struct pool *pool, const json_t *claim)
{
    const json_t *meta = json_object_get(claim, "metadata");
    const char *ns = jstr(meta, "namespace"), *name = jstr(meta, "name");
    const json_t *results = json_object_get(
        json_object_get(json_object_get(json_object_get(claim, "status"), "allocation"), "devices"),
        "results");
    if (ns == NULL || name == NULL || pool->ndra == 0)
        return 0;
    size_t i;
    const json_t *r;
    json_array_foreach (results, i, r) {
        struct pool_dra_device key = {
            .driver = jstr(r, "driver"), .pool = jstr(r, "pool"), .name = jstr(r, "device")};
        if (!key.driver || !key.pool || !key.name)
            continue;
        struct pool_dra_device *d =
            bsearch(&key, pool->dra, pool->ndra, sizeof *pool->dra, device_key);
        if (d == NULL)
            continue; /* a device no slice lists (any more) */
        const json_t *mem = json_object_get(json_object_get(r, "consumedCapacity"), "memory");
        /* No consumedCapacity: the claim holds the whole device. */
        int64_t consumed = mem != NULL ? quantity_bytes(mem) : d->memory;
        if (add_claim(pool, d, ns, name, consumed) != 0)
            return -1;
    }
    return 0;
}

static int device_by_name(const void *a, const void *b)
{
    const struct pool_dra_device *x = *(const struct pool_dra_device *const *)a;
    const struct pool_dra_device *y = *(const struct pool_dra_device *const *)b;
    /* gpu-2 before gpu-10: names with a number compare by it. */
    size_t lx = strlen(x->name), ly = strlen(y->name);
    int c = cmp_str(x->driver, y->driver);
    if (c != 0)
        return c;
    return lx != ly ? (lx < ly ? -1 : 1) : strcmp(x->name, y->name);
}

static int claim_by_name(const void *a, const void *b)
{
    const struct pool_dra_claim *x = a, *y = b;
    int c = strcmp(x->ns, y->ns);
    return c != 0 ? c : strcmp(x->name, y->name);
}

void pool_dra_finish(struct pool *pool)
{
    for (size_t i = 0; i < pool->ndra; i++) {
        struct pool_dra_device *d = &pool->dra[i];
        if (d->nclaims > 1)
            qsort(d->claims, d->nclaims, sizeof *d->claims, claim_by_name);
        struct pool_node *n = pool_find(pool, d->node);
        if (n == NULL)
            continue; /* a node that was not listed (deleted meanwhile) */
        struct pool_dra_device **grown = realloc(n->dra, (n->ndra + 1) * sizeof *grown);
        if (grown == NULL)
            continue; /* out of memory: shown without this device */
        n->dra = grown;
        n->dra[n->ndra++] = d;
    }
    for (size_t i = 0; i < pool->nnodes; i++)
        if (pool->nodes[i]->ndra > 1)
            qsort(pool->nodes[i]->dra, pool->nodes[i]->ndra, sizeof *pool->nodes[i]->dra,
                  device_by_name);
}
