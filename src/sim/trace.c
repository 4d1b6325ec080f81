/* trace.c -- openb CSV loaders (see trace.h).
 *
 * The files are plain comma-separated values without quoting, so a line is
 * split in place; every field is checked and every error names file:line. */
#include "trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"

#define MAX_FIELDS 16
#define MAX_GPUS_PER_POD 1024 /* beyond any node; still loaded, never fits */

static const char *const node_header[] = {"sn", "cpu_milli", "memory_mib", "gpu", "model"};
static const char *const pod_header[] = {
    "name", "cpu_milli", "memory_mib",    "num_gpu",       "gpu_milli",     "gpu_spec",
    "qos",  "pod_phase", "creation_time", "deletion_time", "scheduled_time"};
#define POD_SHORT_COLUMNS 5
#define POD_LONG_COLUMNS 11

void sim_trace_init(struct sim_trace *trace)
{
    memset(trace, 0, sizeof(*trace));
    placement_ctx_init(&trace->models);
}

void sim_trace_free(struct sim_trace *trace)
{
    for (size_t i = 0; i < trace->node_count; i++)
        free(trace->node_names[i]);
    free(trace->node_names);
    free(trace->nodes);
    free(trace->pods);
    sim_trace_init(trace);
}

uint64_t sim_trace_capacity_milli(const struct sim_trace *trace)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < trace->node_count; i++)
        for (uint32_t g = 0; g < trace->nodes[i].gpu_count; g++)
            sum += trace->nodes[i].gpu_total[g];
    return sum;
}

/* Percent of a GPU in milli-GPU, rounded up: a share never asks fewer
 * cores than its fraction. */
static uint32_t cores_of_milli(uint64_t milli)
{
    uint64_t cores = (milli * SIM_CORES_PER_GPU + SIM_MILLI_PER_GPU - 1) / SIM_MILLI_PER_GPU;
    return cores > SIM_CORES_PER_GPU ? SIM_CORES_PER_GPU : (uint32_t)cores;
}

/* A fixed pseudo-random factor in [0.5, 1.5) for pod row i (splitmix64 of
 * the row, so the same pod has the same factor in every replay). */
static double skew_factor(size_t i)
{
    uint64_t z = (uint64_t)i * UINT64_C(0x9e3779b97f4a7c15) + UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    z ^= z >> 31;
    return 0.5 + (double)(z >> 11) / 9007199254740992.0; /* 2^53 */
}

void sim_trace_set_cores(struct sim_trace *trace, enum sim_cores mode)
{
    for (size_t i = 0; i < trace->pod_count; i++) {
        struct placement_request *req = &trace->pods[i].req;
        if (req->gpu_count == 0 || req->whole) {
            req->cores = 0;
            continue;
        }
        if (mode == SIM_CORES_OFF) {
            req->cores = 0;
        } else if (mode == SIM_CORES_SKEW) {
            double cores =
                (double)req->units * skew_factor(i) * SIM_CORES_PER_GPU / SIM_MILLI_PER_GPU;
            uint64_t rounded = (uint64_t)(cores + 0.5);
            req->cores = rounded < 1                   ? 1
                         : rounded > SIM_CORES_PER_GPU ? SIM_CORES_PER_GPU
                                                       : (uint32_t)rounded;
        } else {
            req->cores = cores_of_milli(req->units);
        }
    }
}

/* ---- line reading and splitting ----------------------------------------- */

struct csv_reader {
    FILE *file;
    const char *path;
    unsigned long line_no;
    char *line;
    size_t cap;
    char *fields[MAX_FIELDS];
    size_t field_count;
    char *err;
    size_t errlen;
};

__attribute__((format(printf, 2, 3))) static int csv_error(struct csv_reader *r, const char *fmt,
                                                           ...)
{
    va_list ap;
    va_start(ap, fmt);
    gp_verrf_at(r->err, r->errlen, r->path, r->line_no, fmt, ap);
    va_end(ap);
    return -1;
}

/* Reads the next non-empty line and splits it. Returns 1 with fields, 0 at
 * end of file, -1 on error. */
static int csv_next(struct csv_reader *r)
{
    for (;;) {
        errno = 0;
        ssize_t len = getline(&r->line, &r->cap, r->file);
        if (len < 0) {
            if (ferror(r->file))
                return csv_error(r, "read error: %s", strerror(errno ? errno : EIO));
            return 0;
        }
        r->line_no++;
        while (len > 0 && (r->line[len - 1] == '\n' || r->line[len - 1] == '\r'))
            r->line[--len] = '\0';
        if (len == 0)
            continue;
        if (strlen(r->line) != (size_t)len)
            return csv_error(r, "NUL byte in line");
        r->field_count = 0;
        char *p = r->line;
        for (;;) {
            if (r->field_count == MAX_FIELDS)
                return csv_error(r, "more than %d columns", MAX_FIELDS);
            r->fields[r->field_count++] = p;
            char *comma = strchr(p, ',');
            if (!comma)
                break;
            *comma = '\0';
            p = comma + 1;
        }
        return 1;
    }
}

static int csv_open(struct csv_reader *r, const char *path, char *err, size_t errlen)
{
    memset(r, 0, sizeof(*r));
    r->path = path;
    r->err = err;
    r->errlen = errlen;
    r->file = fopen(path, "r");
    if (!r->file) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static void csv_close(struct csv_reader *r)
{
    if (r->file)
        fclose(r->file);
    free(r->line);
}

/* Checks the header line: its first `count` names must be `names`, and it
 * must have exactly `count` columns (one of the allowed counts). */
static int csv_header(struct csv_reader *r, const char *const *names, size_t min_count,
                      size_t max_count)
{
    int rc = csv_next(r);
    if (rc <= 0)
        return rc < 0 ? -1 : csv_error(r, "empty file (expected a header line)");
    if (r->field_count != min_count && r->field_count != max_count)
        return csv_error(r, "header has %zu columns, expected %zu%s", r->field_count, min_count,
                         min_count == max_count ? "" : " or more");
    for (size_t i = 0; i < r->field_count; i++)
        if (strcmp(r->fields[i], names[i]) != 0)
            return csv_error(r, "header column %zu is '%s', expected '%s'", i + 1, r->fields[i],
                             names[i]);
    return 0;
}

/* An unsigned decimal integer field, no sign, no blanks, no overflow. */
static int csv_u64(struct csv_reader *r, size_t column, const char *what, uint64_t max,
                   uint64_t *out)
{
    const char *s = r->fields[column];
    if (*s < '0' || *s > '9')
        return csv_error(r, "%s: '%s' is not a non-negative integer", what, s);
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0')
        return csv_error(r, "%s: '%s' is not a non-negative integer", what, s);
    if (errno == ERANGE || v > max)
        return csv_error(r, "%s: %s is out of range (max %llu)", what, s, (unsigned long long)max);
    *out = v;
    return 0;
}

static int grow(void **array, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t next = *cap ? *cap * 2 : 256;
    while (next < need)
        next *= 2;
    void *p = realloc(*array, next * elem);
    if (!p)
        return -1;
    *array = p;
    *cap = next;
    return 0;
}

/* ---- nodes -------------------------------------------------------------- */

static int parse_node(struct csv_reader *r, struct placement_ctx *models,
                      struct placement_node *node)
{
    uint64_t cpu, memory, gpus;
    if (r->field_count != 5)
        return csv_error(r, "%zu columns, expected 5", r->field_count);
    if (r->fields[0][0] == '\0')
        return csv_error(r, "empty node name");
    if (csv_u64(r, 1, "cpu_milli", UINT32_MAX, &cpu) < 0 ||
        csv_u64(r, 2, "memory_mib", UINT32_MAX, &memory) < 0 ||
        csv_u64(r, 3, "gpu", PLACEMENT_MAX_GPUS, &gpus) < 0)
        return -1;
    memset(node, 0, sizeof(*node));
    node->cpu_allocatable = cpu;
    node->memory_allocatable = memory;
    node->gpu_count = (uint32_t)gpus;
    for (uint32_t g = 0; g < node->gpu_count; g++) {
        node->gpu_total[g] = SIM_MILLI_PER_GPU;
        node->cores_total[g] = SIM_CORES_PER_GPU;
    }
    node->model = PLACEMENT_MODEL_NONE;
    if (r->fields[4][0] != '\0') {
        node->model = placement_model_id(models, r->fields[4]);
        if (node->model < 0)
            return csv_error(r, "model '%s': name too long or more than %d models", r->fields[4],
                             PLACEMENT_MAX_MODELS);
    } else if (gpus > 0) {
        return csv_error(r, "GPU node without a model");
    }
    return 0;
}

int sim_load_nodes(struct sim_trace *trace, const char *path, char *err, size_t errlen)
{
    struct csv_reader r;
    if (csv_open(&r, path, err, errlen) < 0)
        return -1;
    struct placement_ctx models = trace->models;
    struct placement_node *nodes = NULL;
    char **names = NULL;
    size_t count = 0, cap = 0, names_cap = 0;
    int rc = csv_header(&r, node_header, 5, 5);
    while (rc == 0) {
        int more = csv_next(&r);
        if (more <= 0) {
            rc = more;
            break;
        }
        if (grow((void **)&nodes, &cap, count + 1, sizeof(*nodes)) < 0 ||
            grow((void **)&names, &names_cap, count + 1, sizeof(*names)) < 0) {
            rc = csv_error(&r, "out of memory");
            break;
        }
        if (parse_node(&r, &models, &nodes[count]) < 0) {
            rc = -1;
            break;
        }
        names[count] = strdup(r.fields[0]);
        if (!names[count]) {
            rc = csv_error(&r, "out of memory");
            break;
        }
        count++;
    }
    if (rc == 0 && count == 0)
        rc = csv_error(&r, "no nodes");
    csv_close(&r);
    if (rc < 0) {
        for (size_t i = 0; i < count; i++)
            free(names[i]);
        free(names);
        free(nodes);
        return -1;
    }
    for (size_t i = 0; i < count; i++)
        nodes[i].name = names[i];
    /* Replace what an earlier call loaded. */
    for (size_t i = 0; i < trace->node_count; i++)
        free(trace->node_names[i]);
    free(trace->node_names);
    free(trace->nodes);
    trace->nodes = nodes;
    trace->node_names = names;
    trace->node_count = count;
    trace->models = models;
    return 0;
}

/* ---- pods --------------------------------------------------------------- */

/* gpu_spec: model names separated by '|'; empty means any model. */
static int parse_spec(struct csv_reader *r, char *spec, struct placement_ctx *models,
                      struct placement_request *req)
{
    if (*spec == '\0')
        return 0;
    for (char *name = spec;;) {
        char *bar = strchr(name, '|');
        if (bar)
            *bar = '\0';
        if (*name == '\0')
            return csv_error(r, "gpu_spec: empty model name");
        if (placement_request_allow_model(models, req, name) < 0)
            return csv_error(r, "gpu_spec: model '%s': name too long or more than %d models", name,
                             PLACEMENT_MAX_MODELS);
        if (!bar)
            return 0;
        name = bar + 1;
    }
}

static int parse_pod(struct csv_reader *r, size_t columns, struct placement_ctx *models,
                     struct sim_pod *pod)
{
    uint64_t cpu, memory, num_gpu, gpu_milli;
    if (r->field_count != columns)
        return csv_error(r, "%zu columns, expected %zu", r->field_count, columns);
    if (r->fields[0][0] == '\0')
        return csv_error(r, "empty pod name");
    if (csv_u64(r, 1, "cpu_milli", UINT32_MAX, &cpu) < 0 ||
        csv_u64(r, 2, "memory_mib", UINT32_MAX, &memory) < 0 ||
        csv_u64(r, 3, "num_gpu", MAX_GPUS_PER_POD, &num_gpu) < 0 ||
        csv_u64(r, 4, "gpu_milli", SIM_MILLI_PER_GPU, &gpu_milli) < 0)
        return -1;
    memset(pod, 0, sizeof(*pod));
    struct placement_request *req = &pod->req;
    req->cpu = cpu;
    req->memory = memory;
    req->gpu_count = (uint32_t)num_gpu;
    if (num_gpu == 0) {
        if (gpu_milli != 0)
            return csv_error(r, "gpu_milli %llu without GPUs (num_gpu is 0)",
                             (unsigned long long)gpu_milli);
    } else if (num_gpu == 1 && gpu_milli < SIM_MILLI_PER_GPU) {
        if (gpu_milli == 0)
            return csv_error(r, "gpu_milli is 0 for a GPU pod (num_gpu is 1)");
        req->units = gpu_milli;
        req->cores = cores_of_milli(gpu_milli);
        pod->demand_milli = gpu_milli;
    } else {
        req->whole = true;
        req->units = SIM_MILLI_PER_GPU;
        pod->demand_milli = num_gpu * SIM_MILLI_PER_GPU;
    }
    if (columns > POD_SHORT_COLUMNS && parse_spec(r, r->fields[5], models, req) < 0)
        return -1;
    return 0;
}

int sim_load_pods(struct sim_trace *trace, const char *path, char *err, size_t errlen)
{
    struct csv_reader r;
    if (csv_open(&r, path, err, errlen) < 0)
        return -1;
    struct placement_ctx models = trace->models;
    struct sim_pod *pods = NULL;
    size_t count = 0, cap = 0;
    int rc = csv_header(&r, pod_header, POD_SHORT_COLUMNS, POD_LONG_COLUMNS);
    size_t columns = r.field_count;
    while (rc == 0) {
        int more = csv_next(&r);
        if (more <= 0) {
            rc = more;
            break;
        }
        if (grow((void **)&pods, &cap, count + 1, sizeof(*pods)) < 0) {
            rc = csv_error(&r, "out of memory");
            break;
        }
        if (parse_pod(&r, columns, &models, &pods[count]) < 0) {
            rc = -1;
            break;
        }
        count++;
    }
    if (rc == 0 && count == 0)
        rc = csv_error(&r, "no pods");
    csv_close(&r);
    if (rc < 0) {
        free(pods);
        return -1;
    }
    free(trace->pods);
    trace->pods = pods;
    trace->pod_count = count;
    trace->models = models;
    return 0;
}
