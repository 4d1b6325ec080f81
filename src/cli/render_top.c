/* render_top.c -- `kubectl gpupool top pods|gpus` (render.h, docs/cli.md).
 *
 * Booked figures come from the pool (the API server's objects), used ones
 * from the node agents (node_usage.h). A figure the agent did not give is
 * printed "no data" (null in JSON), never 0: a GPU nobody uses and a GPU
 * whose agent did not answer must not look alike. */
#include "render.h"

#include "tabwriter.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define NO_DATA "no data"

void render_bytes(char *buf, size_t len, double bytes)
{
    if (bytes >= (double)(1ull << 30))
        snprintf(buf, len, "%.1fGiB", bytes / (double)(1ull << 30));
    else
        snprintf(buf, len, "%.0fMiB", bytes / (double)(1ull << 20));
}

static const char *bytes_cell(char *buf, size_t len, bool has, double bytes)
{
    if (!has)
        return NO_DATA;
    render_bytes(buf, len, bytes);
    return buf;
}

static const char *ratio_cell(char *buf, size_t len, bool has, double ratio)
{
    if (!has)
        return NO_DATA;
    snprintf(buf, len, "%.0f%%", ratio * 100.0);
    return buf;
}

static double node_unit_bytes(const struct pool_node *n)
{
    return (double)poolapi_unit_bytes(pool_node_unit(n));
}

static const struct node_usage *usage_of(const struct pool *pool, const struct node_usage *usage,
                                         const struct pool_node *n)
{
    if (!usage)
        return NULL;
    for (size_t i = 0; i < pool->nnodes; i++)
        if (pool->nodes[i] == n)
            return usage[i].state == USAGE_OK ? &usage[i] : NULL;
    return NULL;
}

/* ---- pods ---- */

struct pod_row {
    const char *ns, *name;
    const struct pool_node *node;
    const struct pool_share *share;  /* GPU memory booked, NULL for device pods */
    const struct pool_resource *res; /* nvidia.com/..., NULL for shares */
    int64_t count;
    const struct usage_pod *u;
    bool node_read; /* the agent answered */
    double booked;  /* bytes */
    double used;    /* region use, else NVML process memory; valid when has_used */
    bool has_used;
};

static int cmp_name(const struct pod_row *a, const struct pod_row *b)
{
    int c = strcmp(a->ns, b->ns);
    return c ? c : strcmp(a->name, b->name);
}

/* The key qsort compares by (qsort has no context argument; the CLI renders
 * one view, in one thread). */
static int top_sort_key;

static int cmp_desc(double a, bool has_a, double b, bool has_b)
{
    if (has_a != has_b)
        return has_a ? -1 : 1; /* figures before "no data" */
    return a > b ? -1 : a < b ? 1 : 0;
}

static int cmp_pod(const void *pa, const void *pb)
{
    const struct pod_row *a = pa, *b = pb;
    int c = 0;
    bool sa = a->u && (a->u->has & USAGE_SM), sb = b->u && (b->u->has & USAGE_SM);
    switch (top_sort_key) {
    case TOP_SORT_BOOKED:
        c = cmp_desc(a->booked, true, b->booked, true);
        break;
    case TOP_SORT_USED:
        c = cmp_desc(a->used, a->has_used, b->used, b->has_used);
        break;
    case TOP_SORT_SM:
        c = cmp_desc(sa ? a->u->sm : 0, sa, sb ? b->u->sm : 0, sb);
        break;
    default:
        break;
    }
    return c ? c : cmp_name(a, b);
}

static bool grow_rows(struct pod_row **rows, size_t *cap, size_t n)
{
    if (n < *cap)
        return true;
    size_t ncap = *cap ? *cap * 2 : 64;
    struct pod_row *r = realloc(*rows, ncap * sizeof *r);
    if (!r)
        return false;
    *rows = r;
    *cap = ncap;
    return true;
}

static void fill_usage(struct pod_row *r, const struct node_usage *nu)
{
    r->node_read = nu != NULL;
    r->u = node_usage_pod(nu, r->ns, r->name);
    if (r->u && (r->u->has & USAGE_MEM_USED)) {
        r->used = r->u->mem_used;
        r->has_used = true;
    } else if (r->u && (r->u->has & USAGE_PROC_MEM)) {
        r->used = r->u->proc_mem; /* no region (whole GPU): NVML's per-process figure */
        r->has_used = true;
    }
}

static int collect_pods(const struct pool *pool, const struct node_usage *usage,
                        struct pod_row **rows, size_t *nrows)
{
    size_t cap = 0;
    *rows = NULL;
    *nrows = 0;
    for (size_t i = 0; i < pool->nnodes; i++) {
        const struct pool_node *n = pool->nodes[i];
        const struct node_usage *nu = usage_of(pool, usage, n);
        size_t first = *nrows;
        for (size_t s = 0; s < n->nshares; s++) {
            const struct pool_share *sh = &n->shares[s];
            if (pool->pod_namespace && strcmp(sh->ns, pool->pod_namespace) != 0)
                continue;
            if (!grow_rows(rows, &cap, *nrows))
                return -1;
            struct pod_row *r = &(*rows)[(*nrows)++];
            *r = (struct pod_row){.ns = sh->ns, .name = sh->name, .node = n, .share = sh};
            r->booked = (double)sh->amount * node_unit_bytes(n);
            fill_usage(r, nu);
        }
        for (size_t k = 0; k < n->nresources; k++) {
            const struct pool_resource *res = &n->resources[k];
            for (size_t p = 0; p < res->npods; p++) {
                const struct pool_device_pod *dp = &res->pods[p];
                if (pool->pod_namespace && strcmp(dp->ns, pool->pod_namespace) != 0)
                    continue;
                bool seen = false; /* a pod holding two resources is one row */
                for (size_t j = first; j < *nrows && !seen; j++)
                    seen = strcmp((*rows)[j].ns, dp->ns) == 0 &&
                           strcmp((*rows)[j].name, dp->name) == 0;
                if (seen)
                    continue;
                if (!grow_rows(rows, &cap, *nrows))
                    return -1;
                struct pod_row *r = &(*rows)[(*nrows)++];
                *r = (struct pod_row){
                    .ns = dp->ns, .name = dp->name, .node = n, .res = res, .count = dp->count};
                fill_usage(r, nu);
            }
        }
    }
    return 0;
}

static void gpus_cell(char *buf, size_t len, const struct pod_row *r)
{
    if (r->res) {
        snprintf(buf, len, "%s:%" PRId64, r->res->name, r->count);
        return;
    }
    if (r->share->nparts == 0) {
        snprintf(buf, len, "pending");
        return;
    }
    size_t at = 0;
    buf[0] = '\0';
    for (int p = 0; p < r->share->nparts && at < len; p++)
        at += (size_t)snprintf(buf + at, len - at, "%s%d", p ? "," : "", r->share->gpu[p]);
}

static json_t *num_or_null(bool has, double v)
{
    return has ? json_real(v) : json_null();
}

static json_t *int_or_null(bool has, double v)
{
    return has ? json_integer((json_int_t)(v >= 0 ? v + 0.5 : v - 0.5)) : json_null();
}

static int pods_json(const struct pod_row *rows, size_t n, FILE *out)
{
    json_t *doc = json_pack("{s:s, s:[]}", "kind", "GPUPoolTopPods", "pods");
    json_t *arr = doc ? json_object_get(doc, "pods") : NULL;
    bool failed = !arr;
    for (size_t i = 0; i < n && !failed; i++) {
        const struct pod_row *r = &rows[i];
        const struct usage_pod *u = r->u;
        unsigned has = u ? u->has : 0;
        json_t *gpus = json_array();
        if (r->share)
            for (int p = 0; gpus && p < r->share->nparts; p++)
                json_array_append_new(gpus, json_integer(r->share->gpu[p]));
        json_t *o = json_pack(
            "{s:s, s:s, s:s, s:o*, s:o*, s:o*, s:I, s:o*, s:o*, s:o*, s:o*, s:o*, s:I, s:b}",
            "namespace", r->ns, "name", r->name, "node", r->node->name, "gpus", gpus, "resource",
            r->res ? json_string(r->res->name) : json_null(), "bookedBytes",
            int_or_null(r->share != NULL, r->booked), "devices", (json_int_t)r->count, "limitBytes",
            int_or_null(has & USAGE_MEM_LIMIT, u ? u->mem_limit : 0), "usedBytes",
            int_or_null(r->has_used, r->used), "processMemoryBytes",
            int_or_null(has & USAGE_PROC_MEM, u ? u->proc_mem : 0), "smUtilization",
            num_or_null(has & USAGE_SM, u ? u->sm : 0), "memoryUtilization",
            num_or_null(has & USAGE_MEM_UTIL, u ? u->mem_util : 0), "processes",
            (json_int_t)(u ? u->processes : 0), "nodeMetrics", r->node_read);
        if (!o || json_array_append_new(arr, o) != 0)
            failed = true;
    }
    int rc = failed ? -1 : json_dumpf(doc, out, JSON_INDENT(2)) == 0 && fputc('\n', out) != EOF;
    json_decref(doc);
    return rc == 1 ? 0 : -1;
}

int render_top_pods(const struct pool *pool, const struct node_usage *usage, int sort, bool json,
                    bool wide, FILE *out)
{
    struct pod_row *rows;
    size_t n;
    if (collect_pods(pool, usage, &rows, &n) != 0) {
        free(rows);
        return -1;
    }
    top_sort_key = sort;
    if (n > 1)
        qsort(rows, n, sizeof *rows, cmp_pod);
    int rc;
    if (json) {
        rc = pods_json(rows, n, out);
    } else {
        struct tabwriter tw;
        tabwriter_init(&tw, 2);
        tabwriter_printf(&tw, "NAMESPACE\tNAME\tNODE\tGPU\tBOOKED\tLIMIT\tUSED\tSM%s\n",
                         wide ? "\tMEM-UTIL\tPROCESSES" : "");
        for (size_t i = 0; i < n; i++) {
            const struct pod_row *r = &rows[i];
            unsigned has = r->u ? r->u->has : 0;
            char gpus[128], booked[32], limit[32], used[32], sm[32], mu[32];
            gpus_cell(gpus, sizeof gpus, r);
            tabwriter_printf(
                &tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", tabwriter_safe(&tw, r->ns),
                tabwriter_safe(&tw, r->name), tabwriter_safe(&tw, r->node->name),
                tabwriter_safe(&tw, gpus),
                r->share ? bytes_cell(booked, sizeof booked, true, r->booked) : "-",
                bytes_cell(limit, sizeof limit, has & USAGE_MEM_LIMIT, r->u ? r->u->mem_limit : 0),
                bytes_cell(used, sizeof used, r->has_used, r->used),
                ratio_cell(sm, sizeof sm, has & USAGE_SM, r->u ? r->u->sm : 0));
            if (wide)
                tabwriter_printf(
                    &tw, "\t%s\t%u",
                    ratio_cell(mu, sizeof mu, has & USAGE_MEM_UTIL, r->u ? r->u->mem_util : 0),
                    r->u ? r->u->processes : 0);
            tabwriter_printf(&tw, "\n");
        }
        if (n == 0)
            tabwriter_printf(&tw, "No GPU pods found%s%s.\n",
                             pool->pod_namespace ? " in namespace " : "",
                             pool->pod_namespace ? tabwriter_safe(&tw, pool->pod_namespace) : "");
        rc = tabwriter_flush(&tw, out);
        tabwriter_free(&tw);
    }
    free(rows);
    return rc;
}

/* ---- GPUs ---- */

struct gpu_row {
    const struct pool_node *node;
    int index;
    const char *model;
    const struct pool_gpu *pg; /* NULL: known from the agent only (whole GPUs) */
    const struct usage_gpu *u;
    bool node_read;
    double total, booked; /* bytes; total from the pool, else NVML */
    bool has_total;
};

static int cmp_gpu(const void *pa, const void *pb)
{
    const struct gpu_row *a = pa, *b = pb;
    int c = 0;
    bool ua = a->u && (a->u->has & USAGE_MEM_USED), ub = b->u && (b->u->has & USAGE_MEM_USED);
    bool sa = a->u && (a->u->has & USAGE_SM), sb = b->u && (b->u->has & USAGE_SM);
    switch (top_sort_key) {
    case TOP_SORT_BOOKED:
        c = cmp_desc(a->booked, a->pg != NULL, b->booked, b->pg != NULL);
        break;
    case TOP_SORT_USED:
        c = cmp_desc(ua ? a->u->mem_used : 0, ua, ub ? b->u->mem_used : 0, ub);
        break;
    case TOP_SORT_SM:
        c = cmp_desc(sa ? a->u->sm : 0, sa, sb ? b->u->sm : 0, sb);
        break;
    default:
        break;
    }
    if (c)
        return c;
    c = strcmp(a->node->name, b->node->name);
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

static int collect_gpus(const struct pool *pool, const struct node_usage *usage,
                        struct gpu_row **out, size_t *nout)
{
    size_t n = 0, cap = 0;
    struct gpu_row *rows = NULL;
    for (size_t i = 0; i < pool->nnodes; i++) {
        const struct pool_node *nd = pool->nodes[i];
        const struct node_usage *nu = usage_of(pool, usage, nd);
        size_t extra = nu ? nu->ngpus : 0;
        if (n + (size_t)nd->ngpus + extra > cap) {
            cap = (n + (size_t)nd->ngpus + extra) * 2;
            struct gpu_row *r = realloc(rows, cap * sizeof *r);
            if (!r) {
                free(rows);
                return -1;
            }
            rows = r;
        }
        for (int g = 0; g < nd->ngpus; g++) {
            const struct pool_gpu *pg = &nd->gpus[g];
            const struct usage_gpu *u = node_usage_gpu(nu, g);
            rows[n++] = (struct gpu_row){.node = nd,
                                         .index = g,
                                         .model = pg->model ? pg->model
                                                  : u       ? u->model
                                                            : NULL,
                                         .pg = pg,
                                         .u = u,
                                         .node_read = nu != NULL,
                                         .total = (double)pg->total * node_unit_bytes(nd),
                                         .booked = (double)pg->allocated * node_unit_bytes(nd),
                                         .has_total = true};
        }
        /* GPUs the pool has no record of (whole-GPU and time-sliced nodes
         * publish counts, not GPUs): as the agent reports them. */
        for (size_t k = 0; nu && k < nu->ngpus; k++) {
            const struct usage_gpu *u = &nu->gpus[k];
            if (u->index >= 0 && u->index < nd->ngpus)
                continue;
            rows[n++] = (struct gpu_row){.node = nd,
                                         .index = u->index,
                                         .model = u->model,
                                         .u = u,
                                         .node_read = true,
                                         .total = u->mem_total,
                                         .has_total = (u->has & USAGE_MEM_TOTAL) != 0};
        }
    }
    *out = rows;
    *nout = n;
    return 0;
}

static int gpus_json(const struct gpu_row *rows, size_t n, FILE *out)
{
    json_t *doc = json_pack("{s:s, s:[]}", "kind", "GPUPoolTopGPUs", "gpus");
    json_t *arr = doc ? json_object_get(doc, "gpus") : NULL;
    bool failed = !arr;
    for (size_t i = 0; i < n && !failed; i++) {
        const struct gpu_row *r = &rows[i];
        unsigned has = r->u ? r->u->has : 0;
        json_t *o =
            json_pack("{s:s, s:o*, s:o*, s:o*, s:o*, s:o*, s:o*, s:o*, s:o*, s:I, s:b}", "node",
                      r->node->name, "index", r->index >= 0 ? json_integer(r->index) : json_null(),
                      "uuid", r->u ? json_string(r->u->uuid) : json_null(), "model",
                      r->model ? json_string(r->model) : json_null(), "totalBytes",
                      int_or_null(r->has_total, r->total), "bookedBytes",
                      int_or_null(r->pg != NULL, r->booked), "usedBytes",
                      int_or_null(has & USAGE_MEM_USED, r->u ? r->u->mem_used : 0), "smUtilization",
                      num_or_null(has & USAGE_SM, r->u ? r->u->sm : 0), "healthy",
                      r->pg ? json_boolean(!r->pg->unhealthy) : json_null(), "pods",
                      (json_int_t)(r->pg ? r->pg->shares : 0), "nodeMetrics", r->node_read);
        if (!o || json_array_append_new(arr, o) != 0)
            failed = true;
    }
    int rc = failed ? -1 : json_dumpf(doc, out, JSON_INDENT(2)) == 0 && fputc('\n', out) != EOF;
    json_decref(doc);
    return rc == 1 ? 0 : -1;
}

/* "used/booked" bar of `width` cells: '#' used, '=' booked but idle, '.'
 * free; the picture an operator reads at a glance. */
static void bar(char *buf, size_t width, double total, double booked, bool has_used, double used)
{
    for (size_t i = 0; i < width; i++) {
        double at = total > 0 ? ((double)i + 0.5) / (double)width * total : 0;
        buf[i] = has_used && at < used ? '#' : at < booked ? '=' : '.';
    }
    buf[width] = '\0';
}

int render_top_gpus(const struct pool *pool, const struct node_usage *usage, int sort, bool json,
                    bool wide, FILE *out)
{
    struct gpu_row *rows;
    size_t n;
    if (collect_gpus(pool, usage, &rows, &n) != 0)
        return -1;
    top_sort_key = sort;
    if (n > 1)
        qsort(rows, n, sizeof *rows, cmp_gpu);
    int rc;
    if (json) {
        rc = gpus_json(rows, n, out);
    } else {
        struct tabwriter tw;
        tabwriter_init(&tw, 2);
        tabwriter_printf(&tw, "NODE\tGPU\tMODEL\tTOTAL\tBOOKED\tUSED\tSM\tPODS%s\n",
                         wide ? "\tUUID\tUSED(#)/BOOKED(=)" : "");
        for (size_t i = 0; i < n; i++) {
            const struct gpu_row *r = &rows[i];
            unsigned has = r->u ? r->u->has : 0;
            char index[16], total[32], booked[32], used[32], sm[32];
            snprintf(index, sizeof index, r->index >= 0 ? "%d" : "?", r->index);
            tabwriter_printf(
                &tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t", tabwriter_safe(&tw, r->node->name), index,
                r->model ? tabwriter_safe(&tw, r->model) : "-",
                bytes_cell(total, sizeof total, r->has_total, r->total),
                r->pg ? bytes_cell(booked, sizeof booked, true, r->booked) : "-",
                bytes_cell(used, sizeof used, has & USAGE_MEM_USED, r->u ? r->u->mem_used : 0),
                ratio_cell(sm, sizeof sm, has & USAGE_SM, r->u ? r->u->sm : 0));
            if (r->pg)
                tabwriter_printf(&tw, "%u", r->pg->shares);
            else
                tabwriter_printf(&tw, "-");
            if (wide) {
                char b[21];
                bar(b, 20, r->total, r->booked, has & USAGE_MEM_USED, r->u ? r->u->mem_used : 0);
                tabwriter_printf(&tw, "\t%s\t[%s]", r->u ? tabwriter_safe(&tw, r->u->uuid) : "-",
                                 b);
            }
            tabwriter_printf(&tw, "\n");
        }
        if (n == 0)
            tabwriter_printf(&tw, "No GPUs found.\n");
        rc = tabwriter_flush(&tw, out);
        tabwriter_free(&tw);
    }
    free(rows);
    return rc;
}
