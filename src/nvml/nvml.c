/* nvml.c -- dlopen loader for libnvidia-ml.so.1 (see nvml.h). */
#include "nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dl.h"
#include "errmsg.h"
#include "log.h"

/* Where a driver root keeps its libraries, in the order NVIDIA's plugin
 * looks (Debian/Ubuntu multiarch and RHEL layouts). */
static const char *const driver_library_dirs[] = {
    "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
    "/lib64",     "/lib/x86_64-linux-gnu",     "/lib/aarch64-linux-gnu",
};

/* ---- error text --------------------------------------------------------- */

struct nvml_error_text {
    nvmlReturn_t rc;
    const char *name;
    const char *text; /* "<description> (<name>)" */
};

static const struct nvml_error_text error_texts[] = {
    {NVML_SUCCESS, "NVML_SUCCESS", "Success (NVML_SUCCESS)"},
    {NVML_ERROR_UNINITIALIZED, "NVML_ERROR_UNINITIALIZED",
     "Uninitialized (NVML_ERROR_UNINITIALIZED)"},
    {NVML_ERROR_INVALID_ARGUMENT, "NVML_ERROR_INVALID_ARGUMENT",
     "Invalid Argument (NVML_ERROR_INVALID_ARGUMENT)"},
    {NVML_ERROR_NOT_SUPPORTED, "NVML_ERROR_NOT_SUPPORTED",
     "Not Supported (NVML_ERROR_NOT_SUPPORTED)"},
    {NVML_ERROR_NO_PERMISSION, "NVML_ERROR_NO_PERMISSION",
     "Insufficient Permissions (NVML_ERROR_NO_PERMISSION)"},
    {NVML_ERROR_ALREADY_INITIALIZED, "NVML_ERROR_ALREADY_INITIALIZED",
     "Already Initialized (NVML_ERROR_ALREADY_INITIALIZED)"},
    {NVML_ERROR_NOT_FOUND, "NVML_ERROR_NOT_FOUND", "Not Found (NVML_ERROR_NOT_FOUND)"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "NVML_ERROR_INSUFFICIENT_SIZE",
     "Insufficient Size (NVML_ERROR_INSUFFICIENT_SIZE)"},
    {NVML_ERROR_INSUFFICIENT_POWER, "NVML_ERROR_INSUFFICIENT_POWER",
     "Insufficient External Power (NVML_ERROR_INSUFFICIENT_POWER)"},
    {NVML_ERROR_DRIVER_NOT_LOADED, "NVML_ERROR_DRIVER_NOT_LOADED",
     "Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)"},
    {NVML_ERROR_TIMEOUT, "NVML_ERROR_TIMEOUT", "Timeout (NVML_ERROR_TIMEOUT)"},
    {NVML_ERROR_IRQ_ISSUE, "NVML_ERROR_IRQ_ISSUE",
     "Interrupt Request Issue (NVML_ERROR_IRQ_ISSUE)"},
    {NVML_ERROR_LIBRARY_NOT_FOUND, "NVML_ERROR_LIBRARY_NOT_FOUND",
     "NVML Shared Library Not Found (NVML_ERROR_LIBRARY_NOT_FOUND)"},
    {NVML_ERROR_FUNCTION_NOT_FOUND, "NVML_ERROR_FUNCTION_NOT_FOUND",
     "Function Not Found (NVML_ERROR_FUNCTION_NOT_FOUND)"},
    {NVML_ERROR_CORRUPTED_INFOROM, "NVML_ERROR_CORRUPTED_INFOROM",
     "Corrupted infoROM (NVML_ERROR_CORRUPTED_INFOROM)"},
    {NVML_ERROR_GPU_IS_LOST, "NVML_ERROR_GPU_IS_LOST", "GPU is lost (NVML_ERROR_GPU_IS_LOST)"},
    {NVML_ERROR_RESET_REQUIRED, "NVML_ERROR_RESET_REQUIRED",
     "GPU requires reset (NVML_ERROR_RESET_REQUIRED)"},
    {NVML_ERROR_OPERATING_SYSTEM, "NVML_ERROR_OPERATING_SYSTEM",
     "The operating system has blocked the request (NVML_ERROR_OPERATING_SYSTEM)"},
    {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
     "Driver/library version mismatch (NVML_ERROR_LIB_RM_VERSION_MISMATCH)"},
    {NVML_ERROR_IN_USE, "NVML_ERROR_IN_USE", "In use by another client (NVML_ERROR_IN_USE)"},
    {NVML_ERROR_MEMORY, "NVML_ERROR_MEMORY", "Insufficient Memory (NVML_ERROR_MEMORY)"},
    {NVML_ERROR_NO_DATA, "NVML_ERROR_NO_DATA", "No data (NVML_ERROR_NO_DATA)"},
    {NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
     "vGPU operation not available while ECC is enabled (NVML_ERROR_VGPU_ECC_NOT_SUPPORTED)"},
    {NVML_ERROR_INSUFFICIENT_RESOURCES, "NVML_ERROR_INSUFFICIENT_RESOURCES",
     "Insufficient resources (NVML_ERROR_INSUFFICIENT_RESOURCES)"},
    {NVML_ERROR_FREQ_NOT_SUPPORTED, "NVML_ERROR_FREQ_NOT_SUPPORTED",
     "Frequency not supported (NVML_ERROR_FREQ_NOT_SUPPORTED)"},
    {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
     "Argument version mismatch (NVML_ERROR_ARGUMENT_VERSION_MISMATCH)"},
    {NVML_ERROR_DEPRECATED, "NVML_ERROR_DEPRECATED", "Deprecated (NVML_ERROR_DEPRECATED)"},
    {NVML_ERROR_NOT_READY, "NVML_ERROR_NOT_READY", "Not ready (NVML_ERROR_NOT_READY)"},
    {NVML_ERROR_GPU_NOT_FOUND, "NVML_ERROR_GPU_NOT_FOUND",
     "GPU not found (NVML_ERROR_GPU_NOT_FOUND)"},
    {NVML_ERROR_INVALID_STATE, "NVML_ERROR_INVALID_STATE",
     "Invalid state (NVML_ERROR_INVALID_STATE)"},
    {NVML_ERROR_RESET_TYPE_NOT_SUPPORTED, "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED",
     "Reset type not supported (NVML_ERROR_RESET_TYPE_NOT_SUPPORTED)"},
    {NVML_ERROR_UNKNOWN, "NVML_ERROR_UNKNOWN", "Unknown Error (NVML_ERROR_UNKNOWN)"},
};

static const struct nvml_error_text *find_error_text(nvmlReturn_t rc)
{
    for (size_t i = 0; i < sizeof error_texts / sizeof error_texts[0]; i++)
        if (error_texts[i].rc == rc)
            return &error_texts[i];
    return &error_texts[sizeof error_texts / sizeof error_texts[0] - 1];
}

const char *nvml_error_name(nvmlReturn_t rc)
{
    return find_error_text(rc)->name;
}

const char *nvml_strerror(const struct nvml *nvml, nvmlReturn_t rc)
{
    if (nvml != NULL && nvml->ErrorString != NULL) {
        const char *text = nvml->ErrorString(rc);
        if (text != NULL && text[0] != '\0')
            return text;
    }
    return find_error_text(rc)->text;
}

/* ---- loading ------------------------------------------------------------- */

static bool driver_root_is_set(const char *driver_root)
{
    return driver_root != NULL && driver_root[0] != '\0' && strcmp(driver_root, "/") != 0;
}

/* Tries <root><dir>/libnvidia-ml.so.1 for every library dir (dl_open skips
 * the absent ones, so dlerror() is about one that exists but fails), then
 * the bare soname. -1 with what was tried and the last dlerror() in err. */
static int load_library(const char *driver_root, struct dl_library *lib, char *err, size_t errlen)
{
    enum { DIRS = sizeof driver_library_dirs / sizeof driver_library_dirs[0] };
    char paths[DIRS][4096];
    const char *names[DIRS + 1];
    size_t n = 0;
    if (driver_root_is_set(driver_root)) {
        for (size_t i = 0; i < DIRS; i++) {
            int len = snprintf(paths[n], sizeof paths[n], "%s%s/%s", driver_root,
                               driver_library_dirs[i], NVML_LIBRARY_SONAME);
            if (len >= 0 && (size_t)len < sizeof paths[n]) {
                names[n] = paths[n];
                n++;
            }
        }
    }
    names[n++] = NVML_LIBRARY_SONAME;
    char why[GP_ERR_LEN];
    if (dl_open(lib, names, n, RTLD_LAZY | RTLD_GLOBAL, why, sizeof why) == 0)
        return 0;
    /* "tried:" in people's words: the bare soname is the loader's search,
     * and a driver root without the library names the dirs searched. */
    char tried[2048 + 256];
    size_t soname_at = strlen(lib->tried) >= strlen(NVML_LIBRARY_SONAME)
                           ? strlen(lib->tried) - strlen(NVML_LIBRARY_SONAME)
                           : 0;
    snprintf(tried, sizeof tried, "%.*s", (int)soname_at, lib->tried);
    if (driver_root_is_set(driver_root) && tried[0] == '\0')
        snprintf(tried, sizeof tried, "%s/{usr/lib64,usr/lib/*-linux-gnu,lib64,lib/*-linux-gnu}; ",
                 driver_root);
    return gp_errf(err, errlen,
                   "could not load NVML library %s (tried: %sdefault loader path; dlerror: %s): "
                   "is the NVIDIA driver installed, is --driver-root / NVIDIA_DRIVER_ROOT right, "
                   "and is the container runtime configured to expose the driver?",
                   NVML_LIBRARY_SONAME, tried, lib->error);
}

static int bind_symbols(struct nvml *nvml, struct dl_library *lib, char *err, size_t errlen)
{
#define NVML_NAMES(required, ret, name, params, ...) \
    static const char *const name##_names[] = {__VA_ARGS__, NULL};
    NVML_FUNCTIONS(NVML_NAMES)
#undef NVML_NAMES
    const struct dl_symbol table[] = {
#define NVML_SYMBOL(required, ret, name, params, ...) \
    {name##_names, &nvml->name, &nvml->symbols.name, required},
        NVML_FUNCTIONS(NVML_SYMBOL)
#undef NVML_SYMBOL
    };
    const char *missing = NULL;
    char why[GP_ERR_LEN];
    if (dl_bind(lib, table, sizeof table / sizeof table[0], &missing, why, sizeof why) != 0)
        return gp_errf(err, errlen,
                       "NVML library %s has no %s: the NVIDIA driver is too old or the "
                       "library is not NVML",
                       nvml->library_path, missing);
    return 0;
}

int nvml_open(const char *driver_root, struct nvml **out, char *err, size_t errlen)
{
    *out = NULL;
    struct nvml *nvml = calloc(1, sizeof *nvml);
    if (nvml == NULL) {
        snprintf(err, errlen, "out of memory loading NVML");
        return -1;
    }
    struct dl_library lib;
    if (load_library(driver_root, &lib, err, errlen) != 0) {
        free(nvml);
        return -1;
    }
    nvml->library = lib.handle;
    snprintf(nvml->library_path, sizeof nvml->library_path, "%s", lib.path);
    if (bind_symbols(nvml, &lib, err, errlen) != 0) {
        dlclose(nvml->library);
        free(nvml);
        return -1;
    }
    nvmlReturn_t rc = nvml->Init();
    if (rc != NVML_SUCCESS) {
        snprintf(err, errlen,
                 "%s failed: %s (library %s): is the NVIDIA kernel driver loaded and does "
                 "its version match the library?",
                 nvml->symbols.Init, nvml_strerror(nvml, rc), nvml->library_path);
        dlclose(nvml->library);
        free(nvml);
        return -1;
    }
    log_v(1, "loaded NVML from %s (%s, %s, %s)", nvml->library_path, nvml->symbols.Init,
          nvml->symbols.DeviceGetPciInfo, nvml->symbols.EventSetWait);
    *out = nvml;
    return 0;
}

void nvml_close(struct nvml *nvml)
{
    if (nvml == NULL)
        return;
    nvmlReturn_t rc = nvml->Shutdown();
    if (rc != NVML_SUCCESS)
        log_warn("nvmlShutdown failed: %s", nvml_strerror(nvml, rc));
    if (dlclose(nvml->library) != 0) {
        const char *why = dlerror();
        log_warn("dlclose(%s) failed: %s", nvml->library_path, why ? why : "unknown error");
    }
    free(nvml);
}
