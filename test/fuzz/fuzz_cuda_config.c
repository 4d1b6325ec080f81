/* fuzz_cuda_config.c -- libgpupool-cuda's limit variables: cudacfg_load()
 * on an environment made of the input's lines ("NAME=value"), then
 * cudacfg_limit() and cudacfg_container_limit() for a few ordinals (with
 * CUDA_VISIBLE_DEVICES, the first must never exceed what the second gives
 * some ordinal), cudacfg_sm_limit() for every ordinal (a percent 1..99 or
 * 0, nothing unless ON), and cudacfg_parse_size() on every line's value.
 * Seeds: corpus/cuda_config/. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_config.h"

#define MAX_VARS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *env[MAX_VARS + 1];
    size_t n = 0;
    for (char *line = text; line && n < MAX_VARS;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        env[n++] = line;
        line = nl ? nl + 1 : NULL;
    }
    env[n] = NULL;

    struct cudacfg cfg;
    cudacfg_load(&cfg, env);
    if (cfg.state == CUDACFG_BROKEN && !memchr(cfg.why, '\0', sizeof(cfg.why)))
        abort(); /* the reason must be a string */
    if (cfg.state != CUDACFG_ON && cfg.state != CUDACFG_OFF && cfg.state != CUDACFG_BROKEN)
        abort();
    int64_t most = 0; /* the largest limit of any container ordinal */
    bool unlimited = false;
    for (int ordinal = 0; ordinal < CUDACFG_MAX_DEVICES; ordinal++) {
        int64_t limit = cudacfg_container_limit(&cfg, ordinal, (int64_t)16 << 30);
        if (limit < 0 || (cfg.state != CUDACFG_ON && limit != 0))
            abort(); /* contract: > 0 to enforce, 0 for none; nothing unless ON */
        most = limit > most ? limit : most;
        unlimited = unlimited || limit == 0;
    }
    for (int ordinal = -1; ordinal <= CUDACFG_MAX_DEVICES + 1; ordinal += 13) {
        int64_t limit = cudacfg_limit(&cfg, ordinal, (int64_t)16 << 30);
        if (limit < 0 || (cfg.state != CUDACFG_ON && limit != 0))
            abort();
        if (limit > most || (limit == 0 && ordinal >= 0 && !unlimited && cfg.visible_count >= 0))
            abort(); /* a process ordinal gets some container ordinal's limit, or the smallest */
    }
    for (int ordinal = -1; ordinal <= CUDACFG_MAX_DEVICES; ordinal++) {
        int sm = cudacfg_sm_limit(&cfg, ordinal);
        if (sm < 0 || sm > 99 || (cfg.state != CUDACFG_ON && sm != 0))
            abort(); /* contract: a percent to enforce, 0 for none */
    }
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(env[i], '=');
        int64_t bytes;
        if (cudacfg_parse_size(eq ? eq + 1 : env[i], &bytes) == 0 && bytes < 0)
            abort(); /* a parsed size is never negative */
    }
    free(text);
    return 0;
}
