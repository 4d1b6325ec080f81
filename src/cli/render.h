/* render.h -- the inspect outputs of a finished pool (see pool_model.h).
 *
 * gpushare_*: kubectl-inspect-gpushare's tables, byte for byte (column
 * names, cell formats, Go tabwriter alignment, separator lengths, the
 * MiB/GiB label heuristic, truncated percentages, the PENDING(Allocated)
 * column only when some share is pending). Two deliberate differences, for
 * output that gpushare left to chance: nodes are sorted by name and, in the
 * detail view, pods by GPU index (gpushare walks Go maps, in random order).
 * Per-GPU totals come from gpupool.io/gpus when a node has it.
 *
 * table/wide/details/json: gpupool's own views (docs/cli.md).
 *
 * All return 0, or -1 when out of memory or writing failed. */
#ifndef GP_CLI_RENDER_H
#define GP_CLI_RENDER_H

#include "node_usage.h"
#include "pool_model.h"

#include <stdio.h>

#include "compiler.h"

int render_gpushare_summary(const struct pool *pool, FILE *out) GP_MUST_USE;
int render_gpushare_details(const struct pool *pool, FILE *out) GP_MUST_USE;

int render_table(const struct pool *pool, FILE *out) GP_MUST_USE;
/* usage: what the node agents said, usage[i] for pool->nodes[i]; NULL
 * when not read (the USED and SM columns then say "no data"). */
int render_wide(const struct pool *pool, const struct node_usage *usage, FILE *out) GP_MUST_USE;
int render_details(const struct pool *pool, FILE *out) GP_MUST_USE;
int render_json(const struct pool *pool, FILE *out) GP_MUST_USE;

/* top: booked (the pool) beside used (usage, as for render_wide). */
enum top_sort { TOP_SORT_NAME, TOP_SORT_BOOKED, TOP_SORT_USED, TOP_SORT_SM };
int render_top_pods(const struct pool *pool, const struct node_usage *usage, int sort, bool json,
                    bool wide, FILE *out) GP_MUST_USE;
int render_top_gpus(const struct pool *pool, const struct node_usage *usage, int sort, bool json,
                    bool wide, FILE *out) GP_MUST_USE;
/* bytes as "1.5GiB" (from 1 GiB up) or "300MiB". */
void render_bytes(char *buf, size_t len, double bytes);

#endif
