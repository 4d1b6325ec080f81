/* render.c -- gpupool's own inspect views (render.h, docs/cli.md).
 *
 * Memory figures are printed in each node's unit (gpushare's heuristic:
 * GPUs of more than 100 units are MiB, else GiB); cluster totals in that
 * unit when all nodes agree, else converted to MiB. */
#include "render.h"

#include "tabwriter.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdbool.h>
#include <string.h>

static const char *node_unit(const struct pool_node *n)
{
    return poolapi_unit_name(pool_node_unit(n));
}

/* A node's GPUs: the GPU-memory ones, or the physical GPUs behind its
 * nvidia.com/gpu (whole or time-sliced), whichever is more (a node may
 * offer both resources from the same GPUs). */
static int64_t node_gpus(const struct pool_node *n)
{
    int64_t whole = pool_node_whole_gpus(n);
    return whole > n->ngpus ? whole : n->ngpus;
}

/* Cluster-wide sums, in one unit. */
struct totals {
    bool mib; /* the cluster unit */
    int64_t allocated, total, pending;
    size_t nodes, gpus, unhealthy, pending_pods;
    bool any_memory; /* some node shares GPU memory: the memory line is printed */
    /* nvidia.com/... resources, summed by name (first POOL_TOTALS_RESOURCES) */
    struct {
        const char *name;
        int64_t requested, allocatable;
    } res[32];
    size_t nres;
};

static int64_t node_allocated(const struct pool_node *n)
{
    int64_t sum = 0;
    for (int g = 0; g < n->ngpus; g++)
        sum += n->gpus[g].allocated;
    return sum;
}

static size_t node_unhealthy(const struct pool_node *n)
{
    size_t count = 0;
    for (int g = 0; g < n->ngpus; g++)
        count += n->gpus[g].unhealthy;
    return count;
}

static void sum_resources(struct totals *t, const struct pool_node *n)
{
    for (size_t r = 0; r < n->nresources; r++) {
        size_t i = 0;
        while (i < t->nres && strcmp(t->res[i].name, n->resources[r].name) != 0)
            i++;
        if (i == t->nres) {
            if (t->nres == sizeof t->res / sizeof t->res[0])
                continue;
            t->res[t->nres++].name = n->resources[r].name;
        }
        t->res[i].requested += n->resources[r].requested;
        t->res[i].allocatable += n->resources[r].allocatable;
    }
}

static void compute_totals(const struct pool *pool, struct totals *t)
{
    memset(t, 0, sizeof *t);
    bool any_mib = false;
    for (size_t i = 0; i < pool->nnodes; i++) {
        const struct pool_node *n = pool->nodes[i];
        if (n->mem_total <= 0 && n->ngpus == 0)
            continue;
        any_mib |= pool_node_unit(n) == POOL_UNIT_MIB;
    }
    t->mib = any_mib; /* all GiB: GiB; any MiB: everything in MiB */
    for (size_t i = 0; i < pool->nnodes; i++) {
        const struct pool_node *n = pool->nodes[i];
        int64_t scale = (t->mib && pool_node_unit(n) != POOL_UNIT_MIB) ? 1024 : 1;
        t->nodes++;
        t->gpus += (size_t)node_gpus(n);
        t->any_memory |= n->mem_total > 0 || n->ngpus > 0 || n->npending > 0;
        t->unhealthy += node_unhealthy(n);
        t->pending_pods += n->npending;
        t->allocated += (node_allocated(n) + n->pending) * scale; /* pending is allocated too */
        t->total += n->mem_total * scale;
        t->pending += n->pending * scale;
        sum_resources(t, n);
    }
}

static void memory_cell(struct tabwriter *tw, int64_t allocated, int64_t total, const char *unit)
{
    tabwriter_printf(tw, "%" PRId64 "/%" PRId64 " %s (%" PRId64 "%%)", allocated, total, unit,
                     pool_percent(allocated, total));
}

static void unhealthy_cell(struct tabwriter *tw, const struct pool_node *n)
{
    bool any = false;
    for (int g = 0; g < n->ngpus; g++) {
        if (n->gpus[g].unhealthy) {
            tabwriter_printf(tw, "%s%d", any ? "," : "", g);
            any = true;
        }
    }
    if (!any)
        tabwriter_printf(tw, "-");
}

static void resources_cell(struct tabwriter *tw, const struct pool_node *n)
{
    for (size_t r = 0; r < n->nresources; r++)
        tabwriter_printf(tw, "%s%s %" PRId64 "/%" PRId64, r ? ", " : "",
                         tabwriter_safe(tw, n->resources[r].name + strlen(POOL_RES_NVIDIA_PREFIX)),
                         n->resources[r].requested, n->resources[r].allocatable);
    if (!n->nresources)
        tabwriter_printf(tw, "-");
}

static void pending_cell(struct tabwriter *tw, const struct pool_node *n)
{
    if (n->npending)
        tabwriter_printf(tw, "%" PRId64 " %s (%zu pod%s)", n->pending, node_unit(n), n->npending,
                         n->npending == 1 ? "" : "s");
    else
        tabwriter_printf(tw, "-");
}

static void cluster_footer(struct tabwriter *tw, const struct totals *t)
{
    const char *unit = t->mib ? "MiB" : "GiB";
    tabwriter_printf(tw, "\nCluster: %zu node%s, %zu GPU%s", t->nodes, t->nodes == 1 ? "" : "s",
                     t->gpus, t->gpus == 1 ? "" : "s");
    if (t->unhealthy)
        tabwriter_printf(tw, " (%zu unhealthy)", t->unhealthy);
    tabwriter_printf(tw, "\n");
    if (t->any_memory) { /* a whole-GPU cluster has no GPU memory to count */
        tabwriter_printf(tw, "GPU memory allocated: ");
        memory_cell(tw, t->allocated, t->total, unit);
        if (t->pending_pods)
            tabwriter_printf(tw, ", %" PRId64 " %s pending (%zu pod%s)", t->pending, unit,
                             t->pending_pods, t->pending_pods == 1 ? "" : "s");
        tabwriter_printf(tw, "\n");
    }
    for (size_t i = 0; i < t->nres; i++)
        tabwriter_printf(tw, "%s requested: %" PRId64 "/%" PRId64 " (%" PRId64 "%%)\n",
                         tabwriter_safe(tw, t->res[i].name), t->res[i].requested,
                         t->res[i].allocatable,
                         pool_percent(t->res[i].requested, t->res[i].allocatable));
}

static int finish(struct tabwriter *tw, FILE *out)
{
    int rc = tabwriter_flush(tw, out);
    tabwriter_free(tw);
    return rc;
}

int render_table(const struct pool *pool, FILE *out)
{
    struct tabwriter tw;
    tabwriter_init(&tw, 2);
    tabwriter_printf(&tw, "NAME\tIPADDRESS\tGPUS\tGPU MEMORY(ALLOCATED/TOTAL)\tPER GPU\t"
                          "PENDING\tUNHEALTHY\tNVIDIA.COM(REQUESTED/ALLOCATABLE)\n");
    for (size_t i = 0; i < pool->nnodes; i++) {
        const struct pool_node *n = pool->nodes[i];
        tabwriter_printf(&tw, "%s\t%s\t%" PRId64 "\t", tabwriter_safe(&tw, n->name),
                         tabwriter_safe(&tw, n->address), node_gpus(n));
        if (n->mem_total > 0 || n->ngpus > 0 || n->npending > 0)
            memory_cell(&tw, node_allocated(n) + n->pending, n->mem_total, node_unit(n));
        else
            tabwriter_printf(&tw, "-");
        tabwriter_printf(&tw, "\t");
        for (int g = 0; g < n->ngpus; g++)
            tabwriter_printf(&tw, "%s%" PRId64 "/%" PRId64, g ? " " : "", n->gpus[g].allocated,
                             n->gpus[g].total);
        tabwriter_printf(&tw, n->ngpus ? "\t" : "-\t");
        pending_cell(&tw, n);
        tabwriter_printf(&tw, "\t");
        unhealthy_cell(&tw, n);
        tabwriter_printf(&tw, "\t");
        resources_cell(&tw, n);
        tabwriter_printf(&tw, "\n");
    }
    struct totals t;
    compute_totals(pool, &t);
    cluster_footer(&tw, &t);
    return finish(&tw, out);
}

static void gpu_row(struct tabwriter *tw, const struct pool_node *n, int g,
                    const struct node_usage *nu)
{
    const struct pool_gpu *gpu = &n->gpus[g];
    const struct usage_gpu *u = node_usage_gpu(nu, g);
    char used[32] = "no data", sm[16] = "no data";
    if (u && (u->has & USAGE_MEM_USED))
        render_bytes(used, sizeof used, u->mem_used);
    if (u && (u->has & USAGE_SM))
        snprintf(sm, sizeof sm, "%.0f%%", u->sm * 100.0);
    tabwriter_printf(tw, "%s\t%s\t%d\t%s\t", tabwriter_safe(tw, n->name),
                     tabwriter_safe(tw, n->address), g,
                     gpu->model ? tabwriter_safe(tw, gpu->model) : "-");
    memory_cell(tw, gpu->allocated, gpu->total, node_unit(n));
    tabwriter_printf(tw, "\t%s\t%s\t%u\t%s\n", used, sm, gpu->shares,
                     gpu->unhealthy ? "Unhealthy" : "Healthy");
}

int render_wide(const struct pool *pool, const struct node_usage *usage, FILE *out)
{
    struct tabwriter tw;
    tabwriter_init(&tw, 2);
    tabwriter_printf(&tw, "NODE\tIPADDRESS\tGPU\tMODEL\tMEMORY(ALLOCATED/TOTAL)\tUSED\tSM\tPODS\t"
                          "HEALTH\n");
    for (size_t i = 0; i < pool->nnodes; i++) {
        const struct pool_node *n = pool->nodes[i];
        const struct node_usage *nu = usage && usage[i].state == USAGE_OK ? &usage[i] : NULL;
        for (int g = 0; g < n->ngpus; g++)
            gpu_row(&tw, n, g, nu);
        if (n->npending)
            tabwriter_printf(&tw, "%s\t%s\tpending\t-\t%" PRId64 " %s\t-\t-\t%zu\t-\n",
                             tabwriter_safe(&tw, n->name), tabwriter_safe(&tw, n->address),
                             n->pending, node_unit(n), n->npending);
    }
    bool any_resource = false;
    for (size_t i = 0; i < pool->nnodes; i++)
        any_resource |= pool->nodes[i]->nresources > 0;
    if (any_resource) {
        tabwriter_printf(&tw, "\nNODE\tRESOURCE\tMODEL\tGPUS\tREPLICAS\tCAPACITY\t"
                              "REQUESTED/ALLOCATABLE\tPODS\n");
        for (size_t i = 0; i < pool->nnodes; i++) {
            const struct pool_node *n = pool->nodes[i];
            for (size_t r = 0; r < n->nresources; r++) {
                const struct pool_resource *res = &n->resources[r];
                bool gpu = strcmp(res->name, POOL_RES_NVIDIA_GPU) == 0;
                tabwriter_printf(&tw, "%s\t%s\t%s\t", tabwriter_safe(&tw, n->name),
                                 tabwriter_safe(&tw, res->name),
                                 n->product ? tabwriter_safe(&tw, n->product) : "-");
                if (gpu)
                    tabwriter_printf(&tw, "%" PRId64 "\t%" PRId64 "\t", pool_node_whole_gpus(n),
                                     pool_node_replicas(n));
                else
                    tabwriter_printf(&tw, "-\t-\t");
                tabwriter_printf(&tw, "%" PRId64 "\t%" PRId64 "/%" PRId64 " (%" PRId64 "%%)\t%zu\n",
                                 res->capacity, res->requested, res->allocatable,
                                 pool_percent(res->requested, res->allocatable), res->npods);
            }
        }
    }
    struct totals t;
    compute_totals(pool, &t);
    cluster_footer(&tw, &t);
    return finish(&tw, out);
}

static void share_gpus(struct tabwriter *tw, const struct pool_share *s)
{
    if (s->nparts == 0) {
        tabwriter_printf(tw, "pending");
        return;
    }
    for (int p = 0; p < s->nparts; p++)
        tabwriter_printf(tw, "%s%d", p ? "," : "", s->gpu[p]);
}

static void share_amount(struct tabwriter *tw, const struct pool_node *n,
                         const struct pool_share *s)
{
    tabwriter_printf(tw, "%" PRId64 " %s", s->amount, node_unit(n));
    if (s->nparts > 1) {
        for (int p = 0; p < s->nparts; p++)
            tabwriter_printf(tw, "%s%" PRId64, p ? "+" : " (", s->part[p]);
        tabwriter_printf(tw, ")");
    }
}

static void node_details(struct tabwriter *tw, const struct pool_node *n)
{
    tabwriter_printf(tw, "\nNODE: %s (%s)\n", tabwriter_safe(tw, n->name),
                     tabwriter_safe(tw, n->address));
    if (n->mem_total > 0 || n->ngpus > 0 || n->npending > 0) {
        tabwriter_printf(tw, "GPU memory allocated: ");
        memory_cell(tw, node_allocated(n) + n->pending, n->mem_total, node_unit(n));
        tabwriter_printf(tw, "\n");
    }
    if (n->ngpus) {
        /* Cores only where some pod books them: the table stays gpushare's
         * shape for memory-only pools. */
        bool cores = false;
        for (int g = 0; g < n->ngpus; g++)
            cores |= n->gpus[g].cores_booked > 0;
        tabwriter_printf(tw, "\nGPU\tMODEL\tMEMORY(ALLOCATED/TOTAL)\t%sPODS\tHEALTH\n",
                         cores ? "CORES(BOOKED/TOTAL)\t" : "");
        for (int g = 0; g < n->ngpus; g++) {
            const struct pool_gpu *gpu = &n->gpus[g];
            tabwriter_printf(tw, "%d\t%s\t", g, gpu->model ? tabwriter_safe(tw, gpu->model) : "-");
            memory_cell(tw, gpu->allocated, gpu->total, node_unit(n));
            if (cores)
                tabwriter_printf(tw, "\t%" PRId64 "/%" PRId64, gpu->cores_booked, gpu->cores_total);
            tabwriter_printf(tw, "\t%u\t%s\n", gpu->shares,
                             gpu->unhealthy ? "Unhealthy" : "Healthy");
        }
    }
    if (n->nshares) {
        tabwriter_printf(tw, "\nNAMESPACE\tPOD\tGPU\tMEMORY\n");
        for (size_t i = 0; i < n->nshares; i++) {
            const struct pool_share *s = &n->shares[i];
            tabwriter_printf(tw, "%s\t%s\t", tabwriter_safe(tw, s->ns),
                             tabwriter_safe(tw, s->name));
            share_gpus(tw, s);
            tabwriter_printf(tw, "\t");
            share_amount(tw, n, s);
            tabwriter_printf(tw, "\n");
        }
    }
    if (pool_node_gpu_resource(n) != NULL)
        tabwriter_printf(tw, "Whole GPUs: %" PRId64 " x %s, %" PRId64 " device%s each\n",
                         pool_node_whole_gpus(n),
                         n->product ? tabwriter_safe(tw, n->product) : "(model unknown)",
                         pool_node_replicas(n), pool_node_replicas(n) == 1 ? "" : "s");
    if (n->nresources) {
        tabwriter_printf(tw, "\nRESOURCE\tCAPACITY\tREQUESTED/ALLOCATABLE\n");
        for (size_t r = 0; r < n->nresources; r++) {
            const struct pool_resource *res = &n->resources[r];
            tabwriter_printf(tw, "%s\t%" PRId64 "\t%" PRId64 "/%" PRId64 " (%" PRId64 "%%)\n",
                             tabwriter_safe(tw, res->name), res->capacity, res->requested,
                             res->allocatable, pool_percent(res->requested, res->allocatable));
        }
        bool header = false;
        for (size_t r = 0; r < n->nresources; r++) {
            const struct pool_resource *res = &n->resources[r];
            for (size_t p = 0; p < res->npods; p++) {
                if (!header)
                    tabwriter_printf(tw, "\nNAMESPACE\tPOD\tRESOURCE\tCOUNT\n");
                header = true;
                tabwriter_printf(tw, "%s\t%s\t%s\t%" PRId64 "\n",
                                 tabwriter_safe(tw, res->pods[p].ns),
                                 tabwriter_safe(tw, res->pods[p].name),
                                 tabwriter_safe(tw, res->name), res->pods[p].count);
            }
        }
    }
}

/* Bytes as kubectl writes a quantity when it is a whole number of Gi or
 * Mi, else plain bytes. */
static void bytes_cell(struct tabwriter *tw, int64_t bytes)
{
    const int64_t mi = 1024 * 1024, gi = 1024 * mi;
    if (bytes > 0 && bytes % gi == 0)
        tabwriter_printf(tw, "%" PRId64 "Gi", bytes / gi);
    else if (bytes > 0 && bytes % mi == 0)
        tabwriter_printf(tw, "%" PRId64 "Mi", bytes / mi);
    else
        tabwriter_printf(tw, "%" PRId64, bytes);
}

/* The node's DRA devices: memory consumed by claims, and the claims. */
static void dra_details(struct tabwriter *tw, const struct pool_node *n)
{
    if (n->ndra == 0)
        return;
    tabwriter_printf(tw, "\nDRA DEVICE\tDRIVER\tMEMORY(CONSUMED/TOTAL)\tSHARED\tCLAIMS\n");
    for (size_t i = 0; i < n->ndra; i++) {
        const struct pool_dra_device *d = n->dra[i];
        tabwriter_printf(tw, "%s\t%s\t", tabwriter_safe(tw, d->name),
                         tabwriter_safe(tw, d->driver));
        bytes_cell(tw, d->consumed);
        tabwriter_printf(tw, "/");
        bytes_cell(tw, d->memory);
        tabwriter_printf(tw, " (%" PRId64 "%%)\t%s\t", pool_percent(d->consumed, d->memory),
                         d->shared ? "yes" : "no");
        for (size_t c = 0; c < d->nclaims; c++) {
            tabwriter_printf(tw, "%s%s/%s=", c ? " " : "", tabwriter_safe(tw, d->claims[c].ns),
                             tabwriter_safe(tw, d->claims[c].name));
            bytes_cell(tw, d->claims[c].consumed);
        }
        tabwriter_printf(tw, d->nclaims ? "\n" : "-\n");
    }
}

int render_details(const struct pool *pool, FILE *out)
{
    struct tabwriter tw;
    tabwriter_init(&tw, 2);
    for (size_t i = 0; i < pool->nnodes; i++) {
        node_details(&tw, pool->nodes[i]);
        dra_details(&tw, pool->nodes[i]);
    }
    struct totals t;
    compute_totals(pool, &t);
    cluster_footer(&tw, &t);
    return finish(&tw, out);
}
