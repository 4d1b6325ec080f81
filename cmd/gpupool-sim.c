/* gpupool-sim -- replays an openb GPU trace through the placement engine.
 *
 *   gpupool-sim --nodes NODES.csv --pods PODS.csv [--policy P]
 *               [--seed N | --seeds A..B] [--demand PCT] [--jobs N]
 *               [--gpu-cores milli|off|skew] [-o text|json]
 *
 * The options are src/sim/sim_options.c's; a user error (bad flag, missing
 * file) is one "gpupool-sim: ..." line on stderr: exit 2 for the command
 * line, 1 for the run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_batch.h"
#include "sim_options.h"
#include "sim_report.h"
#include "trace.h"

int main(int argc, char **argv, char **envp)
{
    struct sim_options opt;
    char err[1024];
    switch (sim_options_load(&opt, argc, argv, envp, err, sizeof err)) {
    case SIM_OPTIONS_EXIT:
        return 0;
    case SIM_OPTIONS_ERROR:
        fprintf(stderr, "gpupool-sim: %s\n", err);
        return 2;
    case SIM_OPTIONS_OK:
        break;
    }
    struct sim_trace trace;
    sim_trace_init(&trace);
    size_t count = (size_t)(opt.seeds.last - opt.seeds.first) + 1;
    struct sim_result *results = NULL;
    int rc = -1;
    if (sim_load_nodes(&trace, opt.nodes_path, err, sizeof err) < 0 ||
        sim_load_pods(&trace, opt.pods_path, err, sizeof err) < 0)
        goto out;
    sim_trace_set_cores(&trace, (enum sim_cores)opt.cores);
    results = calloc(count, sizeof *results);
    if (results == NULL) {
        snprintf(err, sizeof err, "out of memory");
        goto out;
    }
    if (sim_batch_run(&trace, (enum placement_policy)opt.policy, opt.seeds.first,
                      (unsigned)opt.demand_percent, (unsigned)opt.jobs, results, count, err,
                      sizeof err) < 0)
        goto out;
    if (opt.output == SIM_OUTPUT_JSON) {
        if (sim_report_json(stdout, (enum placement_policy)opt.policy, results, count) < 0) {
            snprintf(err, sizeof err, "out of memory formatting JSON");
            goto out;
        }
    } else {
        sim_report_text(stdout, (enum placement_policy)opt.policy, results, count);
    }
    if (fflush(stdout) != 0) {
        snprintf(err, sizeof err, "writing the output: %s", strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, "gpupool-sim: %s\n", err);
    free(results);
    sim_trace_free(&trace);
    sim_options_free(&opt);
    return rc == 0 ? 0 : 1;
}
