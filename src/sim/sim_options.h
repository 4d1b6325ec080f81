/* sim_options.h -- gpupool-sim's command line, on the option engine
 * (options.h): the same --help, --version and error wording as every other
 * gpupool program. */
#ifndef GP_SIM_OPTIONS_H
#define GP_SIM_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "placement.h"

#define SIM_MAX_SEEDS 100000
#define SIM_MAX_JOBS 64

/* The seeds to replay: --seed N is the range N..N. */
struct sim_seeds {
    uint64_t first, last;
    bool given; /* by --seed or --seeds: a second one is refused */
};

struct sim_options {
    char *nodes_path; /* owned by the engine: sim_options_free() */
    char *pods_path;
    int policy; /* enum placement_policy */
    struct sim_seeds seeds;
    int demand_percent;
    int jobs;
    int output; /* enum sim_output */
    int cores;  /* enum sim_cores (trace.h) */
};

enum sim_output { SIM_OUTPUT_TEXT, SIM_OUTPUT_JSON };

enum sim_options_result {
    SIM_OPTIONS_OK,
    SIM_OPTIONS_EXIT,  /* --help or --version printed: exit 0 */
    SIM_OPTIONS_ERROR, /* err holds the message: a usage error */
};

/* *opt is zeroed here. On any result but OK nothing is left to free. */
enum sim_options_result sim_options_load(struct sim_options *opt, int argc, char **argv,
                                         char **envp, char *err, size_t errlen) GP_MUST_USE;
void sim_options_free(struct sim_options *opt);

#endif
