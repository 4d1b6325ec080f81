/* sim_report.c -- gpupool-sim's output (sim_report.h). The JSON field
 * names are an interface: scripts (bench/, the demo) read them. */
#include "sim_report.h"

#include <inttypes.h>
#include <stdlib.h>

#include <jansson.h>

double sim_report_mean(const struct sim_result *results, size_t count)
{
    double sum = 0.0;
    for (size_t i = 0; i < count; i++)
        sum += results[i].alloc_pct;
    return sum / (double)count;
}

void sim_report_text(FILE *out, enum placement_policy policy, const struct sim_result *results,
                     size_t count)
{
    fprintf(out, "%-8s %6s %7s %7s %12s %14s %8s\n", "policy", "seed", "pods", "failed",
            "alloc_milli", "capacity_milli", "alloc_%");
    for (size_t i = 0; i < count; i++) {
        const struct sim_result *r = &results[i];
        fprintf(out, "%-8s %6" PRIu64 " %7zu %7zu %12" PRIu64 " %14" PRIu64 " %8.2f\n",
                placement_policy_name(policy), r->seed, r->pods, r->failed, r->alloc_milli,
                r->capacity_milli, r->alloc_pct);
    }
    fprintf(out, "mean alloc: %.2f%% over %zu seed%s\n", sim_report_mean(results, count), count,
            count == 1 ? "" : "s");
}

int sim_report_json(FILE *out, enum placement_policy policy, const struct sim_result *results,
                    size_t count)
{
    const char *name = placement_policy_name(policy);
    for (size_t i = 0; i <= count; i++) {
        json_t *o;
        if (i < count) {
            const struct sim_result *r = &results[i];
            o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:f}", "policy", name, "seed",
                          (json_int_t)r->seed, "pods", (json_int_t)r->pods, "failed",
                          (json_int_t)r->failed, "alloc_milli", (json_int_t)r->alloc_milli,
                          "capacity_milli", (json_int_t)r->capacity_milli, "alloc_pct",
                          r->alloc_pct);
        } else {
            o = json_pack("{s:b, s:s, s:I, s:f}", "summary", 1, "policy", name, "seeds",
                          (json_int_t)count, "mean_alloc_pct", sim_report_mean(results, count));
        }
        char *line = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(o);
        if (line == NULL)
            return -1;
        fprintf(out, "%s\n", line);
        free(line);
    }
    return 0;
}
