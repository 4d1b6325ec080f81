/* node_usage.c -- one node agent's /metrics reduced to sums (node_usage.h). */
#include "node_usage.h"

#include "prom_text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static bool grow(void **items, size_t *cap, size_t count, size_t size)
{
    if (count < *cap)
        return true;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *n = realloc(*items, ncap * size);
    if (!n)
        return false;
    *items = n;
    *cap = ncap;
    return true;
}

struct usage_gpu *node_usage_add_gpu(struct node_usage *u, const char *uuid, int index)
{
    struct usage_gpu *g = NULL;
    for (size_t i = 0; i < u->ngpus && !g; i++)
        if (strcmp(u->gpus[i].uuid, uuid) == 0)
            g = &u->gpus[i];
    if (!g) {
        const char *copy = arena_strdup(&u->arena, uuid);
        if (!copy || !grow((void **)&u->gpus, &u->gpus_cap, u->ngpus, sizeof *u->gpus))
            return NULL;
        g = &u->gpus[u->ngpus++];
        *g = (struct usage_gpu){.uuid = copy, .index = -1};
    }
    if (index >= 0 && g->index < 0)
        g->index = index;
    return g;
}

/* The GPU of a sample: by UUID (gpu_uuid, or the older uuid label), and
 * its index from a `gpu` label when the sample has one. NULL when the
 * sample names no GPU or memory ran out (*oom set). */
static struct usage_gpu *gpu_of(struct node_usage *u, const struct prom_sample *s, bool *oom)
{
    const char *uuid = prom_sample_label(s, "gpu_uuid");
    if (!uuid)
        uuid = prom_sample_label(s, "uuid");
    if (!uuid || !uuid[0])
        return NULL;
    int index = -1;
    const char *label = prom_sample_label(s, "gpu");
    if (label) {
        char *end;
        long v = strtol(label, &end, 10);
        if (end != label && *end == '\0' && v >= 0 && v < 1 << 20)
            index = (int)v;
    }
    struct usage_gpu *g = node_usage_add_gpu(u, uuid, index);
    if (!g) {
        *oom = true;
        return NULL;
    }
    const char *model = prom_sample_label(s, "model");
    if (model && !g->model && !(g->model = arena_strdup(&u->arena, model)))
        *oom = true;
    return g;
}

struct usage_pod *node_usage_add_pod(struct node_usage *u, const char *ns, const char *name)
{
    for (size_t i = 0; i < u->npods; i++)
        if (strcmp(u->pods[i].name, name) == 0 && strcmp(u->pods[i].ns, ns) == 0)
            return &u->pods[i];
    const char *cns = arena_strdup(&u->arena, ns);
    const char *cname = arena_strdup(&u->arena, name);
    if (!cns || !cname || !grow((void **)&u->pods, &u->pods_cap, u->npods, sizeof *u->pods))
        return NULL;
    struct usage_pod *p = &u->pods[u->npods++];
    *p = (struct usage_pod){.ns = cns, .name = cname};
    return p;
}

/* The pod of a sample (namespace and pod labels); processes of no pod
 * (namespace="") are left out: no row of `top` shows them. */
static struct usage_pod *pod_of(struct node_usage *u, const struct prom_sample *s, bool *oom)
{
    const char *ns = prom_sample_label(s, "namespace");
    const char *name = prom_sample_label(s, "pod");
    if (!ns || !name || !ns[0] || !name[0])
        return NULL;
    struct usage_pod *p = node_usage_add_pod(u, ns, name);
    if (!p)
        *oom = true;
    return p;
}

static void add(double *sum, unsigned *has, unsigned bit, double v)
{
    *sum = (*has & bit) ? *sum + v : v;
    *has |= bit;
}

static int on_sample(const struct prom_sample *s, void *ctx)
{
    struct node_usage *u = ctx;
    bool oom = false;
    const char *n = s->name;
    double v = s->value;
    if (v != v) /* NaN: no figure */
        return 0;
    if (strncmp(n, "gpupool_container_gpu_memory_", 29) == 0) {
        struct usage_pod *p = pod_of(u, s, &oom);
        if (p && strcmp(n + 29, "used_bytes") == 0)
            add(&p->mem_used, &p->has, USAGE_MEM_USED, v);
        else if (p && strcmp(n + 29, "limit_bytes") == 0)
            add(&p->mem_limit, &p->has, USAGE_MEM_LIMIT, v);
    } else if (strncmp(n, "gpupool_process_gpu_", 20) == 0) {
        struct usage_pod *p = pod_of(u, s, &oom);
        if (p && strcmp(n + 20, "memory_used_bytes") == 0) {
            add(&p->proc_mem, &p->has, USAGE_PROC_MEM, v);
            p->processes++;
        } else if (p && strcmp(n + 20, "sm_utilization_ratio") == 0) {
            add(&p->sm, &p->has, USAGE_SM, v);
        } else if (p && strcmp(n + 20, "memory_utilization_ratio") == 0) {
            add(&p->mem_util, &p->has, USAGE_MEM_UTIL, v);
        }
    } else if (strncmp(n, "gpupool_gpu_", 12) == 0) {
        const char *what = n + 12;
        bool known = strcmp(what, "memory_used_bytes") == 0 ||
                     strcmp(what, "memory_total_bytes") == 0 ||
                     strcmp(what, "sm_utilization_ratio") == 0 ||
                     strcmp(what, "utilization_ratio") == 0 || strcmp(what, "healthy") == 0;
        struct usage_gpu *g = known ? gpu_of(u, s, &oom) : NULL;
        if (g && strcmp(what, "memory_used_bytes") == 0) {
            g->mem_used = v;
            g->has |= USAGE_MEM_USED;
        } else if (g && strcmp(what, "memory_total_bytes") == 0) {
            g->mem_total = v;
            g->has |= USAGE_MEM_TOTAL;
        } else if (g && strcmp(what, "sm_utilization_ratio") == 0) {
            g->sm = v; /* the contract's name wins over the older one */
            g->has |= USAGE_SM;
        } else if (g && strcmp(what, "utilization_ratio") == 0 && !(g->has & USAGE_SM)) {
            g->sm = v;
            g->has |= USAGE_SM;
        }
    }
    return oom ? -1 : 0;
}

int node_usage_parse(struct node_usage *u, const char *text, size_t len)
{
    u->state = USAGE_OK;
    u->bytes = len;
    return prom_text_parse(text, len, on_sample, u, &u->bad_lines) == 0 ? 0 : -1;
}

void node_usage_free(struct node_usage *u)
{
    arena_free(&u->arena);
    free(u->gpus);
    free(u->pods);
    *u = (struct node_usage){0};
}

const struct usage_gpu *node_usage_gpu(const struct node_usage *u, int index)
{
    for (size_t i = 0; u && i < u->ngpus; i++)
        if (u->gpus[i].index == index)
            return &u->gpus[i];
    return NULL;
}

const struct usage_pod *node_usage_pod(const struct node_usage *u, const char *ns, const char *name)
{
    for (size_t i = 0; u && i < u->npods; i++)
        if (strcmp(u->pods[i].name, name) == 0 && strcmp(u->pods[i].ns, ns) == 0)
            return &u->pods[i];
    return NULL;
}
