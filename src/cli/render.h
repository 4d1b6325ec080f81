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

#include "pool_model.h"

#include <stdio.h>

#include "compiler.h"

int render_gpushare_summary(const struct pool *pool, FILE *out) GP_MUST_USE;
int render_gpushare_details(const struct pool *pool, FILE *out) GP_MUST_USE;

int render_table(const struct pool *pool, FILE *out) GP_MUST_USE;
int render_wide(const struct pool *pool, FILE *out) GP_MUST_USE;
int render_details(const struct pool *pool, FILE *out) GP_MUST_USE;
int render_json(const struct pool *pool, FILE *out) GP_MUST_USE;

#endif
