/* fake_nvml_env.h -- helpers for tests that load the fake NVML
 * (test/fakenvml) through the production loader, nvml_open().
 *
 * ctest sets GP_FAKENVML_DIR (<build>/test/fakenvml) and GP_SOURCE_DIR. The
 * fake is found through the driver-root search: <GP_FAKENVML_DIR>/root is a
 * driver root whose usr/lib64 holds libnvidia-ml.so.1. */
#ifndef GP_TEST_FAKE_NVML_ENV_H
#define GP_TEST_FAKE_NVML_ENV_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline const char *fake_env(const char *name)
{
    const char *value = getenv(name);
    if (value == NULL) {
        fprintf(stderr, "%s is not set: run this test through ctest\n", name);
        exit(2);
    }
    return value;
}

/* <GP_FAKENVML_DIR>/root or <GP_FAKENVML_DIR>/v1only/root. */
static inline const char *fake_driver_root(int v1only)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s%s/root", fake_env("GP_FAKENVML_DIR"), v1only ? "/v1only" : "");
    return path;
}

/* test/fakenvml/inventories/<name> in the source tree. */
static inline const char *fake_inventory_path(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/test/fakenvml/inventories/%s", fake_env("GP_SOURCE_DIR"), name);
    return path;
}

static inline json_t *fake_inventory_load(const char *name)
{
    json_error_t error;
    json_t *root = json_load_file(fake_inventory_path(name), 0, &error);
    if (root == NULL) {
        fprintf(stderr, "%s: %s\n", fake_inventory_path(name), error.text);
        exit(2);
    }
    return root;
}

/* Writes `root` to a fresh temporary file and points the fake at it. The
 * returned path must be passed to fake_inventory_remove(). */
static inline char *fake_inventory_use_json(json_t *root)
{
    char *path = strdup("/tmp/gp-fakenvml-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0 || json_dumpfd(root, fd, 0) != 0) {
        perror("writing a temporary inventory");
        exit(2);
    }
    close(fd);
    setenv("FAKE_NVML_INVENTORY", path, 1);
    return path;
}

static inline void fake_inventory_remove(char *path)
{
    unlink(path);
    free(path);
}

/* Points the fake at a stored inventory and clears the run-time knobs. */
static inline void fake_use_inventory(const char *name)
{
    setenv("FAKE_NVML_INVENTORY", fake_inventory_path(name), 1);
    unsetenv("FAKE_NVML_CONTROL");
    unsetenv("FAKE_NVML_EVENT_LOG");
}

/* Adds {"function":f,"gpu":gpu,"error":e,"after_calls":after} to root's
 * "errors"; gpu < 0 means every GPU. */
static inline void fake_add_error(json_t *root, const char *function, int gpu, const char *error,
                                  int after_calls)
{
    json_t *errors = json_object_get(root, "errors");
    if (errors == NULL) {
        errors = json_array();
        json_object_set_new(root, "errors", errors);
    }
    json_t *rule = json_pack("{s:s, s:s, s:i}", "function", function, "error", error, "after_calls",
                             after_calls);
    if (gpu >= 0)
        json_object_set_new(rule, "gpu", json_integer(gpu));
    json_array_append_new(errors, rule);
}

#endif
