/* poolapi_gpus.c -- reader and writer of gpupool.io/gpus (see poolapi_gpus.h). */
#include "poolapi_gpus.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Checks one entry; NULL when it is good, else why not. */
static const char *entry_defect(const json_t *gpu, size_t n, const unsigned char *seen)
{
    json_t *index = json_object_get(gpu, "index"), *mem = json_object_get(gpu, "memory");
    json_t *healthy = json_object_get(gpu, "healthy"), *cores = json_object_get(gpu, "cores");
    json_int_t x = json_integer_value(index);
    if (!json_is_integer(index) || x < 0 || x >= (json_int_t)n || seen[x])
        return "bad or repeated index";
    if (!json_is_integer(mem) || json_integer_value(mem) < 0)
        return "memory must be a non-negative integer";
    if (healthy && !json_is_boolean(healthy))
        return "healthy must be a boolean";
    if (cores && (!json_is_integer(cores) || json_integer_value(cores) < 0 ||
                  json_integer_value(cores) > POOL_GPU_CORES_PER_GPU))
        return "cores must be an integer 0..100";
    return NULL;
}

int poolapi_gpus_parse(const char *text, size_t max_gpus, struct poolapi_gpu **gpus, size_t *count,
                       char *err, size_t errlen)
{
    *gpus = NULL;
    *count = 0;
    json_t *arr = text ? json_loads(text, JSON_REJECT_DUPLICATES, NULL) : NULL;
    size_t i, n = json_array_size(arr);
    const char *why = NULL;
    unsigned char *seen = NULL;
    struct poolapi_gpu *out = NULL;
    if (!json_is_array(arr) || n == 0)
        why = "not a non-empty JSON array";
    else if (n > max_gpus)
        why = "too many GPUs";
    else if (!(seen = calloc(n, 1)) || !(out = calloc(n, sizeof *out)))
        why = "out of memory";
    json_t *gpu;
    json_array_foreach (arr, i, gpu) {
        if (why || (why = entry_defect(gpu, n, seen)) != NULL)
            break;
        size_t x = (size_t)json_integer_value(json_object_get(gpu, "index"));
        const char *model = json_string_value(json_object_get(gpu, "model"));
        seen[x] = 1;
        out[x].index = (unsigned)x;
        out[x].memory = (uint64_t)json_integer_value(json_object_get(gpu, "memory"));
        out[x].healthy = !json_is_false(json_object_get(gpu, "healthy"));
        json_t *cores = json_object_get(gpu, "cores");
        out[x].has_cores = cores != NULL;
        out[x].cores = cores ? (uint32_t)json_integer_value(cores) : POOL_GPU_CORES_PER_GPU;
        out[x].has_model = model != NULL;
        snprintf(out[x].model, sizeof out[x].model, "%s", model ? model : "");
    }
    json_decref(arr);
    free(seen);
    if (why) {
        if (strcmp(why, "too many GPUs") == 0)
            snprintf(err, errlen, "more than %zu GPUs", max_gpus);
        else
            snprintf(err, errlen, "%s", why);
        free(out);
        return -1;
    }
    *gpus = out;
    *count = n;
    return 0;
}

char *poolapi_gpus_format(const struct poolapi_gpu *gpus, size_t n)
{
    json_t *arr = json_array();
    if (arr == NULL)
        return NULL;
    for (size_t g = 0; g < n; g++) {
        json_t *gpu = json_pack("{s:I,s:I,s:s,s:b}", "index", (json_int_t)gpus[g].index, "memory",
                                (json_int_t)gpus[g].memory, "model", gpus[g].model, "healthy",
                                gpus[g].healthy);
        /* An entry short of its cores is dropped, and so reported below. */
        if (gpu && gpus[g].has_cores &&
            json_object_set_new(gpu, "cores", json_integer((json_int_t)gpus[g].cores)) < 0) {
            json_decref(gpu);
            gpu = NULL;
        }
        json_array_append_new(arr, gpu);
    }
    /* An entry json_pack could not build is missing: report out of memory. */
    char *text = json_array_size(arr) == n ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return text;
}
