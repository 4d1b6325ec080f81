/* nvml.c -- dlopen loader for libnvidia-ml.so.1 (see nvml.h). */
#include "nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* Where a driver root keeps its libraries, in the order NVIDIA's plugin
 * looks (Debian/Ubuntu multiarch and RHEL layouts). */
static const char *const driver_library_dirs[] = {
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
};

/* ---- error text --------------------------------------------------------- */

struct nvml_error_text {
    nvmlReturn_t rc;
    const char *name;
    const char *text;  /* "<description> (<name>)" */
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

/* Appends to a "tried: a; b" list, truncating quietly: the list is only
 * there to help a human, never parsed. */
static void append_tried(char *tried, size_t triedlen, const char *what)
{
    size_t used = strlen(tried);
    const char *separator = used ? "; " : "";
    size_t room = triedlen - used - 1;
    size_t separator_len = strlen(separator);
    size_t what_len = strlen(what);
    if (used + 1 >= triedlen || separator_len + what_len > room)
        return;
    memcpy(tried + used, separator, separator_len);
    memcpy(tried + used + separator_len, what, what_len + 1);
}

static bool driver_root_is_set(const char *driver_root)
{
    return driver_root != NULL && driver_root[0] != '\0' && strcmp(driver_root, "/") != 0;
}

/* Tries <root><dir>/libnvidia-ml.so.1 for every library dir, then the bare
 * soname. Returns the handle or NULL with the attempts in `tried` and the
 * last dlerror() in `last_error`. */
static void *load_library(const char *driver_root, char *path, size_t pathlen, char *tried,
                          size_t triedlen, char *last_error, size_t errorlen)
{
    if (driver_root_is_set(driver_root)) {
        for (size_t i = 0; i < sizeof driver_library_dirs / sizeof driver_library_dirs[0]; i++) {
            int n = snprintf(path, pathlen, "%s%s/%s", driver_root, driver_library_dirs[i],
                             NVML_LIBRARY_SONAME);
            if (n < 0 || (size_t)n >= pathlen)
                continue;
            /* Skipping absent files keeps dlerror() about the one that
             * exists but fails (wrong architecture, missing dependency). */
            if (access(path, F_OK) != 0)
                continue;
            append_tried(tried, triedlen, path);
            void *library = dlopen(path, RTLD_LAZY | RTLD_GLOBAL);
            if (library != NULL)
                return library;
            const char *why = dlerror();
            snprintf(last_error, errorlen, "%s", why ? why : "unknown error");
        }
        char note[4200];
        snprintf(note, sizeof note, "%s/{usr/lib64,usr/lib/*-linux-gnu,lib64,lib/*-linux-gnu}",
                 driver_root);
        if (tried[0] == '\0')
            append_tried(tried, triedlen, note);
    }
    snprintf(path, pathlen, "%s", NVML_LIBRARY_SONAME);
    append_tried(tried, triedlen, "default loader path");
    void *library = dlopen(path, RTLD_LAZY | RTLD_GLOBAL);
    if (library == NULL) {
        const char *why = dlerror();
        snprintf(last_error, errorlen, "%s", why ? why : "unknown error");
    }
    return library;
}

/* Binds the first symbol of `candidates` (newest first) that the library
 * exports. */
static void *bind_symbol(void *library, const char *const *candidates, const char **bound)
{
    for (size_t i = 0; candidates[i] != NULL; i++) {
        void *fn = dlsym(library, candidates[i]);
        if (fn != NULL) {
            *bound = candidates[i];
            return fn;
        }
    }
    *bound = NULL;
    return NULL;
}

static int bind_symbols(struct nvml *nvml, char *err, size_t errlen)
{
#define NVML_BIND(required, ret, name, params, ...)                                         \
    do {                                                                                    \
        static const char *const candidates[] = {__VA_ARGS__, NULL};                        \
        void *fn = bind_symbol(nvml->library, candidates, &nvml->symbols.name);             \
        /* POSIX guarantees that object and function pointers convert. */                   \
        memcpy(&nvml->name, &fn, sizeof fn);                                                \
        if (fn == NULL && (required)) {                                                     \
            snprintf(err, errlen,                                                           \
                     "NVML library %s has no %s: the NVIDIA driver is too old or the "      \
                     "library is not NVML",                                                 \
                     nvml->library_path, candidates[0]);                                    \
            return -1;                                                                      \
        }                                                                                   \
    } while (0);
    NVML_FUNCTIONS(NVML_BIND)
#undef NVML_BIND
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
    char tried[2048] = "";
    char last_error[1024] = "";
    nvml->library = load_library(driver_root, nvml->library_path, sizeof nvml->library_path,
                                 tried, sizeof tried, last_error, sizeof last_error);
    if (nvml->library == NULL) {
        snprintf(err, errlen,
                 "could not load NVML library %s (tried: %s; dlerror: %s): is the NVIDIA driver "
                 "installed, is --driver-root / NVIDIA_DRIVER_ROOT right, and is the container "
                 "runtime configured to expose the driver?",
                 NVML_LIBRARY_SONAME, tried, last_error);
        free(nvml);
        return -1;
    }
    if (bind_symbols(nvml, err, errlen) != 0) {
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
