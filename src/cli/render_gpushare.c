/* render_gpushare.c -- kubectl-inspect-gpushare's two tables (render.h).
 *
 * Every string below is one of gpushare's format strings, written through a
 * Go-compatible tabwriter (minwidth 0, tabwidth 0, padding 2, ' ', no flags)
 * so that cell widths, trailing padding and separator lengths come out the
 * same. The separator under the summary is as long as the first node row
 * plus 20; the one under each node of the detail view as long as the first
 * node's pod rows plus 10 -- raw byte lengths, tabs included. */
#include "render.h"

#include "tabwriter.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The nodes gpushare prints: those with GPU memory. A node asked for by
 * name counts for the column layout even without any. */
static bool listed(const struct pool *pool, const struct pool_node *n)
{
    return n->mem_total > 0;
}

static bool counted(const struct pool *pool, const struct pool_node *n)
{
    return pool->only_node != NULL || n->mem_total > 0;
}

static bool has_pending(const struct pool_node *n)
{
    return n->mem_total > 0 && n->npending > 0;
}

/* gpushare's label: decided by the first node with GPUs, > 100 per GPU
 * means MiB. No such node: an empty label, as gpushare prints. */
static const char *unit_label(const struct pool *pool)
{
    for (size_t i = 0; i < pool->nnodes; i++) {
        const struct pool_node *n = pool->nodes[i];
        if (counted(pool, n) && n->mem_total > 0 && n->ngpus > 0)
            return n->mem_total / n->ngpus > 100 ? "MiB" : "GiB";
    }
    return "";
}

static void dashes(struct tabwriter *tw, size_t count)
{
    char *line = malloc(count + 1);
    if (!line) {
        tw->text.failed = true;
        return;
    }
    memset(line, '-', count);
    line[count] = '\n';
    tabwriter_write(tw, line, count + 1);
    free(line);
}

static int finish(struct tabwriter *tw, FILE *out)
{
    int rc = tabwriter_flush(tw, out);
    tabwriter_free(tw);
    return rc;
}

/* One node row of the summary; returns its raw length. */
static size_t summary_row(struct tabwriter *tw, const struct pool_node *n, int max_gpus,
                          bool pending_column, int64_t *used_out)
{
    size_t start = tw->text.len;
    int64_t used = 0;
    tabwriter_printf(tw, "%s\t%s\t", tabwriter_safe(tw, n->name), tabwriter_safe(tw, n->address));
    for (int i = 0; i < max_gpus; i++) {
        if (i < n->ngpus) {
            tabwriter_printf(tw, "%" PRId64 "/%" PRId64 "\t", n->gpus[i].allocated,
                             n->gpus[i].total);
            used += n->gpus[i].allocated;
        } else {
            tabwriter_printf(tw, "0/0\t");
        }
    }
    if (pending_column) {
        if (has_pending(n)) {
            tabwriter_printf(tw, "%" PRId64 "\t", n->pending);
            used += n->pending;
        } else {
            tabwriter_printf(tw, "\t");
        }
    }
    tabwriter_printf(tw, "%" PRId64 "/%" PRId64 "\n", used, n->mem_total);
    *used_out = used;
    return tw->text.failed ? 0 : tw->text.len - start;
}

int render_gpushare_summary(const struct pool *pool, FILE *out)
{
    struct tabwriter tw;
    tabwriter_init(&tw, 2);
    int max_gpus = 0;
    bool pending_column = false;
    for (size_t i = 0; i < pool->nnodes; i++) {
        const struct pool_node *n = pool->nodes[i];
        if (counted(pool, n) && n->ngpus > max_gpus)
            max_gpus = n->ngpus;
        pending_column |= has_pending(n);
    }
    tabwriter_printf(&tw, "NAME\tIPADDRESS\t");
    for (int i = 0; i < max_gpus; i++)
        tabwriter_printf(&tw, "GPU%d(Allocated/Total)\t", i);
    if (pending_column)
        tabwriter_printf(&tw, "PENDING(Allocated)\t");
    tabwriter_printf(&tw, "GPU Memory(%s)\n", unit_label(pool));

    int64_t used_total = 0, mem_total = 0;
    size_t line_len = 0;
    for (size_t i = 0; i < pool->nnodes; i++) {
        const struct pool_node *n = pool->nodes[i];
        if (!listed(pool, n))
            continue;
        int64_t used;
        size_t len = summary_row(&tw, n, max_gpus, pending_column, &used);
        if (line_len == 0)
            line_len = len + 20;
        used_total += used;
        mem_total += n->mem_total;
    }
    dashes(&tw, line_len);
    tabwriter_printf(&tw, "Allocated/Total GPU Memory In Cluster:\n");
    tabwriter_printf(&tw, "%" PRId64 "/%" PRId64 " (%" PRId64 "%%)\t\n", used_total, mem_total,
                     pool_percent(used_total, mem_total));
    return finish(&tw, out);
}

/* The share's amount on GPU k (k == ngpus: the pending column). */
static int64_t share_on(const struct pool_node *n, const struct pool_share *s, int k)
{
    if (s->nparts == 0)
        return k == n->ngpus ? s->amount : 0;
    int64_t sum = 0;
    for (int p = 0; p < s->nparts; p++)
        if (s->gpu[p] == k)
            sum += s->part[p];
    return sum;
}

/* The GPU a share is listed under: its lowest one, or -1 when pending. */
static int share_home(const struct pool_share *s)
{
    int home = s->nparts ? s->gpu[0] : -1;
    for (int p = 1; p < s->nparts; p++)
        if (s->gpu[p] < home)
            home = s->gpu[p];
    return home;
}

static void detail_row(struct tabwriter *tw, const struct pool_node *n, const struct pool_share *s)
{
    int columns = n->ngpus + (has_pending(n) ? 1 : 0);
    tabwriter_printf(tw, "%s\t%s\t", tabwriter_safe(tw, s->name), tabwriter_safe(tw, s->ns));
    for (int k = 0; k < columns; k++)
        tabwriter_printf(tw, "%" PRId64 "\t", share_on(n, s, k));
    tabwriter_printf(tw, "\n");
}

/* The pod rows of one node, GPU by GPU, pending last; returns their length. */
static size_t detail_rows(struct tabwriter *tw, const struct pool_node *n)
{
    size_t start = tw->text.len;
    for (int gpu = 0; gpu < n->ngpus; gpu++)
        for (size_t i = 0; i < n->nshares; i++)
            if (share_home(&n->shares[i]) == gpu)
                detail_row(tw, n, &n->shares[i]);
    for (size_t i = 0; i < n->nshares; i++)
        if (n->shares[i].nparts == 0)
            detail_row(tw, n, &n->shares[i]);
    return tw->text.failed ? 0 : tw->text.len - start;
}

int render_gpushare_details(const struct pool *pool, FILE *out)
{
    struct tabwriter tw;
    tabwriter_init(&tw, 2);
    int64_t used_total = 0, mem_total = 0;
    size_t line_len = 0;
    for (size_t i = 0; i < pool->nnodes; i++) {
        const struct pool_node *n = pool->nodes[i];
        if (!listed(pool, n))
            continue;
        tabwriter_printf(&tw, "\nNAME:\t%s\nIPADDRESS:\t%s\n\n", tabwriter_safe(&tw, n->name),
                         tabwriter_safe(&tw, n->address));
        tabwriter_printf(&tw, "NAME\tNAMESPACE\t");
        for (int g = 0; g < n->ngpus; g++)
            tabwriter_printf(&tw, "GPU%d(Allocated)\t", g);
        if (has_pending(n))
            tabwriter_printf(&tw, "Pending(Allocated)\t");
        tabwriter_printf(&tw, "\n");
        size_t rows = detail_rows(&tw, n);
        if (line_len == 0)
            line_len = rows + 10;
        int64_t used = n->pending;
        for (int g = 0; g < n->ngpus; g++)
            used += n->gpus[g].allocated;
        tabwriter_printf(&tw, "Allocated :\t%" PRId64 " (%" PRId64 "%%)\t\n", used,
                         pool_percent(used, n->mem_total));
        tabwriter_printf(&tw, "Total :\t%" PRId64 " \t\n", n->mem_total);
        dashes(&tw, line_len);
        used_total += used;
        mem_total += n->mem_total;
    }
    tabwriter_printf(&tw, "\n\nAllocated/Total GPU Memory In Cluster:\t");
    tabwriter_printf(&tw, "%" PRId64 "/%" PRId64 " (%" PRId64 "%%)\t\n", used_total, mem_total,
                     pool_percent(used_total, mem_total));
    return finish(&tw, out);
}
