/* config_file.h -- NVIDIA's `version: v1` schema: the structured parts.
 *
 * The option engine (options.h) walks `flags:` and `imex:` from the option
 * table in config.c; every other top-level key of the file comes here:
 * `version`, `resources.gpus/mig` (name patterns) and `sharing.timeSlicing`
 * / `sharing.mps` (lists of records). Internal to the device plugin's
 * configuration: only config.c includes it.
 * Owner: the fields filled here (gpu_resources, mig_resources,
 * time_slices) belong to the struct gp_config; config_file_free() releases
 * them. */
#ifndef GP_CONFIG_FILE_H
#define GP_CONFIG_FILE_H

#include <jansson.h>

#include "compiler.h"
#include "config.h"
#include "options.h"
#include "yamlcfg.h"

/* options_file_key_fn for the table: `obj` is a struct gp_config. An
 * unknown key is an error naming it. */
int config_file_key(void *obj, const struct options_file *f, const struct ycfg_node *key,
                    const struct ycfg_node *value) GP_MUST_USE;

/* Adds resources.gpus/mig and sharing.timeSlicing to `root`, which already
 * holds empty "resources" and "sharing" objects. 0, or -1 when out of memory. */
int config_file_to_json(json_t *root, const struct gp_config *cfg) GP_MUST_USE;

void config_file_free(struct gp_config *cfg);

#endif
