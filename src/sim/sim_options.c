/* sim_options.c -- gpupool-sim's option table (sim_options.h). */
#include "sim_options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "errmsg.h"
#include "options.h"
#include "replay.h"
#include "trace.h"

#ifndef GP_VERSION
#define GP_VERSION "unknown"
#endif

static int parse_u64(const char *s, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno == ERANGE)
        return -1;
    *out = v;
    return 0;
}

/* --seed and --seeds share one field, so that giving both (or one twice)
 * is caught here rather than by a later check that must know the flags. */
static int claim_seeds(struct sim_seeds *s, char *why, size_t whylen)
{
    if (s->given) {
        snprintf(why, whylen, "give one of --seed and --seeds, once");
        return -1;
    }
    s->given = true;
    return 0;
}

static int seed_parse(void *field, const char *text, bool append, char *why, size_t whylen)
{
    struct sim_seeds *s = field;
    uint64_t v;
    if (parse_u64(text, &v) != 0) {
        snprintf(why, whylen, "want a non-negative integer");
        return -1;
    }
    if (claim_seeds(s, why, whylen) != 0)
        return -1;
    s->first = s->last = v;
    return 0;
}

static int seeds_parse(void *field, const char *text, bool append, char *why, size_t whylen)
{
    struct sim_seeds *s = field;
    const char *dots = strstr(text, "..");
    char head[32];
    size_t len = dots ? (size_t)(dots - text) : 0;
    uint64_t first, last;
    if (dots == NULL || len == 0 || len >= sizeof head) {
        snprintf(why, whylen, "want a range A..B");
        return -1;
    }
    memcpy(head, text, len);
    head[len] = '\0';
    if (parse_u64(head, &first) != 0 || parse_u64(dots + 2, &last) != 0 || first > last ||
        last - first >= SIM_MAX_SEEDS) {
        snprintf(why, whylen, "want a range A..B with A <= B (at most %d seeds)", SIM_MAX_SEEDS);
        return -1;
    }
    if (claim_seeds(s, why, whylen) != 0)
        return -1;
    s->first = first;
    s->last = last;
    return 0;
}

static json_t *seeds_json(const void *field)
{
    const struct sim_seeds *s = field;
    return json_pack("[I, I]", (json_int_t)s->first, (json_int_t)s->last);
}

static const struct option_custom seed_type = {
    .parse = seed_parse, .to_json = seeds_json, .type_name = "a seed"};
static const struct option_custom seeds_type = {
    .parse = seeds_parse, .to_json = seeds_json, .type_name = "a range of seeds"};

static const struct option_value policy_values[] = {
    {.name = "gpupool", .value = PLACEMENT_GPUPOOL},
    {.name = "default", .value = PLACEMENT_GPUPOOL},
    {.name = "binpack", .value = PLACEMENT_BINPACK},
    {.name = "spread", .value = PLACEMENT_SPREAD},
    {.name = NULL},
};

static const struct option_value cores_values[] = {
    {.name = "milli", .value = SIM_CORES_MILLI},
    {.name = "off", .value = SIM_CORES_OFF},
    {.name = "skew", .value = SIM_CORES_SKEW},
    {.name = NULL},
};

static const struct option_value output_values[] = {
    {.name = "text", .value = SIM_OUTPUT_TEXT},
    {.name = "json", .value = SIM_OUTPUT_JSON},
    {.name = NULL},
};

#define FIELD(x) offsetof(struct sim_options, x)
#define STR(x) #x
#define XSTR(x) STR(x)

static const struct option_spec specs[] = {
    {.flag = "nodes",
     .type = OPT_STRING,
     .offset = FIELD(nodes_path),
     .help = "node list, CSV: sn,cpu_milli,memory_mib,gpu,model (required)"},
    {.flag = "pods",
     .type = OPT_STRING,
     .offset = FIELD(pods_path),
     .help = "pod list, CSV: the 11-column or the 5-column openb format (required)"},
    {.flag = "policy",
     .type = OPT_ENUM,
     .offset = FIELD(policy),
     .def = "gpupool",
     .values = policy_values,
     .help = "GPU placement: gpupool (fragmentation-aware; `default` is the same), binpack "
             "(gpushare's best fit) or spread"},
    {.flag = "seed",
     .type = OPT_CUSTOM,
     .offset = FIELD(seeds),
     .custom = &seed_type,
     .help = "one replay with seed N (default: 42)"},
    {.flag = "seeds",
     .type = OPT_CUSTOM,
     .offset = FIELD(seeds),
     .custom = &seeds_type,
     .help = "one replay per seed A..B, and their mean"},
    {.flag = "demand",
     .type = OPT_INT,
     .offset = FIELD(demand_percent),
     .def = XSTR(SIM_DEFAULT_DEMAND_PERCENT),
     .min = 1,
     .max = 10000,
     .help = "GPU demand as a percentage of the cluster's capacity"},
    {.flag = "jobs",
     .type = OPT_INT,
     .offset = FIELD(jobs),
     .def = "2",
     .min = 1,
     .max = SIM_MAX_JOBS,
     .help = "replays run in parallel threads (the output is in seed order all the same)"},
    {.flag = "gpu-cores",
     .type = OPT_ENUM,
     .offset = FIELD(cores),
     .def = "milli",
     .values = cores_values,
     .help = "the second per-GPU dimension, cores (100 per GPU): milli (a share asks "
             "ceil(gpu_milli / 10)), off (none: one dimension), or skew (gpu_milli / 10 times a "
             "factor in [0.5, 1.5) fixed per pod, so cores and units bind apart)"},
    {.flag = "output",
     .alias = {"o"},
     .type = OPT_ENUM,
     .offset = FIELD(output),
     .def = "text",
     .values = output_values,
     .help = "a table (text), or JSON Lines (json): one object per seed, then "
             "{\"summary\":true,...,\"mean_alloc_pct\":...}"},
    {.flag = "help", .alias = {"h"}, .type = OPT_HELP, .help = "show this help"},
    {.flag = "version", .type = OPT_VERSION, .help = "print the version and commit"},
};

static const struct options_table table = {
    .program = "gpupool-sim",
    .version = GP_VERSION,
    .summary = "Replays an openb trace (Alibaba cluster-trace-gpu-v2023) through the gpupool\n"
               "placement engine with the FGD artifact's protocol and reports the share of\n"
               "cluster milli-GPU allocated at the end. --nodes and --pods are required.",
    .specs = specs,
    .count = sizeof specs / sizeof specs[0],
};

enum sim_options_result sim_options_load(struct sim_options *opt, int argc, char **argv,
                                         char **envp, char *err, size_t errlen)
{
    *opt = (struct sim_options){0};
    /* The table names no variable: a replay is a function of its command
     * line alone, which keeps a published figure reproducible. */
    switch (options_load(&table, opt, argc, argv, envp, err, errlen)) {
    case OPTIONS_EXIT:
        return SIM_OPTIONS_EXIT;
    case OPTIONS_ERROR:
        return SIM_OPTIONS_ERROR;
    case OPTIONS_OK:
        break;
    }
    if (opt->nodes_path == NULL || opt->nodes_path[0] == '\0' || opt->pods_path == NULL ||
        opt->pods_path[0] == '\0') {
        gp_errf(err, errlen, "--nodes and --pods are required (see --help)");
        sim_options_free(opt);
        return SIM_OPTIONS_ERROR;
    }
    if (!opt->seeds.given)
        opt->seeds = (struct sim_seeds){.first = 42, .last = 42};
    return SIM_OPTIONS_OK;
}

void sim_options_free(struct sim_options *opt)
{
    options_free(&table, opt);
}
