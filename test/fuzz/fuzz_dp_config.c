/* fuzz_dp_config.c -- the device plugin's configuration: NVIDIA's config
 * YAML (yamlcfg.c) through the option engine (options.c) into struct
 * gp_config (config.c, config_file.c), and config_to_json() of the result.
 *
 * Input: a config file (a memfd named by --config-file), unless it starts
 * with "--": then its lines are the command line itself (flags, values,
 * --config-file included), so the option engine's flag parsing is fuzzed
 * too. The environment is empty, so nothing of the fuzzer's leaks in. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz_util.h"

#define MAX_ARGS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_quiet();
    char *argv[MAX_ARGS + 2] = {"gpupool-device-plugin"};
    int argc = 1;
    char *text = NULL;
    if (size >= 2 && memcmp(data, "--", 2) == 0) {
        text = malloc(size + 1);
        if (!text)
            return 0;
        memcpy(text, data, size);
        text[size] = '\0';
        for (char *line = text; line && argc <= MAX_ARGS;) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = '\0';
            argv[argc++] = line;
            line = nl ? nl + 1 : NULL;
        }
    } else {
        argv[argc++] = "--config-file";
        argv[argc++] = (char *)fz_file(data, size);
    }
    argv[argc] = NULL;
    char *envp[] = {NULL};
    struct gp_config cfg;
    char err[1024];
    memset(&cfg, 0, sizeof(cfg));
    enum config_result r = config_load(&cfg, argc, argv, envp, err, sizeof(err));
    if (r == CONFIG_OK) {
        char *json = config_to_json(&cfg);
        if (!json)
            abort();
        free(json);
        config_free(&cfg);
    } else if (r == CONFIG_ERROR && (!memchr(err, '\0', sizeof(err)) || !err[0])) {
        abort(); /* a refusal says why */
    }
    free(text);
    return 0;
}
