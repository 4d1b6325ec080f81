/* sim_batch.h -- one replay per seed, on a pool of threads. */
#ifndef GP_SIM_BATCH_H
#define GP_SIM_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "placement.h"
#include "replay.h"
#include "trace.h"

/* Replays seeds first..first+count-1 on up to `jobs` threads; results[i]
 * is seed first+i whatever the thread timing. Returns 0, or -1 with err
 * naming the first seed that failed. */
int sim_batch_run(const struct sim_trace *trace, enum placement_policy policy, uint64_t first,
                  unsigned demand_percent, unsigned jobs, struct sim_result *results, size_t count,
                  char *err, size_t errlen) GP_MUST_USE;

#endif
