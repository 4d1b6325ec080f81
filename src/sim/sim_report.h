/* sim_report.h -- gpupool-sim's output: a table, or JSON Lines. */
#ifndef GP_SIM_REPORT_H
#define GP_SIM_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "compiler.h"
#include "placement.h"
#include "replay.h"

/* The mean of results[].alloc_pct; count > 0. */
double sim_report_mean(const struct sim_result *results, size_t count);

/* One row per seed, then "mean alloc: P% over N seeds". */
void sim_report_text(FILE *out, enum placement_policy policy, const struct sim_result *results,
                     size_t count);

/* One JSON object per line per seed, then {"summary":true,...}. Returns 0,
 * or -1 when out of memory. */
int sim_report_json(FILE *out, enum placement_policy policy, const struct sim_result *results,
                    size_t count) GP_MUST_USE;

#endif
