/* fakenvml.c -- a libnvidia-ml.so.1 that serves a JSON inventory.
 *
 * Exports the real NVML C ABI (the same symbol names and signatures, both
 * the versioned and the unversioned ones) so that a program loads it exactly
 * as it loads the driver's library. See README.md for the inventory format
 * and the control commands tests use to inject XIDs, lost GPUs and errors.
 *
 * A library like NVML is process-global by nature; all of its state lives
 * in one `fake` context guarded by one mutex, so every entry point is
 * thread-safe. Built with -fvisibility=hidden: only NVML symbols are
 * exported and internal calls never go through the PLT, so a second copy
 * of the fake loaded with RTLD_GLOBAL cannot interpose on this one. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda_timeline.h"
#include "nvml_abi.h"

#define EXPORT __attribute__((visibility("default")))

#define FAKE_MAGIC_GPU 0x47505531u
#define FAKE_MAGIC_MIG 0x4d494731u
#define FAKE_MAGIC_SET 0x53455431u
#define FAKE_DEFAULT_MAX_MIGS 7
#define FAKE_NOT_ATTRIBUTED 0xFFFFFFFFu
#define FAKE_XID_GPU_LOST 79
#define FAKE_SUPPORTED_EVENTS                                                                \
    (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState | \
     nvmlEventTypeXidCriticalError | nvmlEventTypeClock)

struct fake_gpu;

/* What an nvmlDevice_t points at: the first member of a GPU or a MIG
 * device, so handles are pointers into the fake's own tables. */
struct nvmlDevice_st {
    unsigned magic;
    struct fake_gpu *gpu; /* the GPU, or the MIG device's parent */
    struct fake_mig *mig; /* NULL for a full GPU */
};

/* What an nvmlGpuInstance_t points at: the GPU instance of a MIG device. */
struct nvmlGpuInstance_st {
    struct fake_mig *mig;
};

struct fake_mig {
    struct nvmlDevice_st handle;
    struct nvmlGpuInstance_st gpu_instance;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    unsigned slot;
    unsigned gi, ci;
    unsigned gi_slices, ci_slices;
    unsigned gi_profile_id; /* NVML_GPU_INSTANCE_PROFILE_*; default: by gi_slices */
    unsigned long long memory_mib;
};

#define FAKE_MAX_PROCESSES 256 /* per GPU; more are refused on stderr */

struct fake_gpu {
    struct nvmlDevice_st handle;
    unsigned index;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned minor;
    unsigned long long memory_mib;
    char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* "00000000:07:00.0" */
    unsigned domain, bus, device;
    unsigned pci_device_id;
    int numa_node; /* < 0: unknown */
    int cc_major, cc_minor;
    int pcie_switch; /* < 0: none */
    int mig_mode;    /* -1 unsupported, 0 disabled, 1 enabled */
    unsigned max_migs;
    struct fake_mig *migs;
    size_t mig_count;
    int link_peer[NVML_NVLINK_MAX_LINKS]; /* GPU index per NVLink, -1 = unused */
    bool has_nvlink;
    bool lost;
    /* Memory repairs (nvmlDeviceGetRemappedRows, ...RetiredPagesPendingStatus). */
    bool remap_pending;
    bool remap_failure;
    bool retired_pages_pending;
    /* Telemetry read by metrics scrapes; `set` control lines change it. */
    unsigned long long memory_used_mib;
    unsigned utilization_gpu, utilization_memory; /* percent */
    unsigned temperature_c;
    unsigned power_mw;
    /* Compute processes (`process` control lines), in the order added. */
    struct fake_process {
        unsigned pid;
        unsigned long long used_mib;
        unsigned sm, mem; /* percent over the last sample period */
    } processes[FAKE_MAX_PROCESSES];
    size_t process_count;
};

struct fake_rule {
    char function[64]; /* without a _vN suffix */
    nvmlReturn_t error;
    int gpu; /* -1: any */
    unsigned after_calls;
    unsigned calls;
};

struct fake_event {
    nvmlDevice_t device;
    unsigned long long type;
    unsigned long long data;
    unsigned gi, ci;
};

struct nvmlEventSet_st {
    unsigned magic;
    unsigned long long *masks; /* per GPU */
    struct fake_event *queue;  /* FIFO: queue[head .. head+count) modulo capacity */
    size_t head, count, capacity;
    int inotify_fd; /* wakes waiters when the control file changes */
    struct nvmlEventSet_st *next;
};

struct fake_context {
    pthread_mutex_t lock;
    int refcount;
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int cuda_driver_version;
    struct fake_gpu *gpus;
    size_t gpu_count;
    struct fake_rule *rules;
    size_t rule_count;
    struct nvmlEventSet_st *sets;
    /* control file: how far it has been read, and a line cut by a read */
    char control_path[PATH_MAX];
    int control_fd; /* -1 until the file exists */
    off_t control_offset;
    char partial[512];
    size_t partial_len;
    char event_log_path[PATH_MAX];
};

static struct fake_context fake = {.lock = PTHREAD_MUTEX_INITIALIZER, .control_fd = -1};

/* ---- error names -------------------------------------------------------------- */

struct error_entry {
    nvmlReturn_t rc;
    const char *name; /* without NVML_ERROR_ */
    const char *text; /* what nvmlErrorString says */
};

static const struct error_entry errors[] = {
    {NVML_SUCCESS, "SUCCESS", "Success"},
    {NVML_ERROR_UNINITIALIZED, "UNINITIALIZED", "Uninitialized"},
    {NVML_ERROR_INVALID_ARGUMENT, "INVALID_ARGUMENT", "Invalid Argument"},
    {NVML_ERROR_NOT_SUPPORTED, "NOT_SUPPORTED", "Not Supported"},
    {NVML_ERROR_NO_PERMISSION, "NO_PERMISSION", "Insufficient Permissions"},
    {NVML_ERROR_ALREADY_INITIALIZED, "ALREADY_INITIALIZED", "Already Initialized"},
    {NVML_ERROR_NOT_FOUND, "NOT_FOUND", "Not Found"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "INSUFFICIENT_SIZE", "Insufficient Size"},
    {NVML_ERROR_INSUFFICIENT_POWER, "INSUFFICIENT_POWER", "Insufficient External Power"},
    {NVML_ERROR_DRIVER_NOT_LOADED, "DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {NVML_ERROR_TIMEOUT, "TIMEOUT", "Timeout"},
    {NVML_ERROR_IRQ_ISSUE, "IRQ_ISSUE", "Interrupt Request Issue"},
    {NVML_ERROR_LIBRARY_NOT_FOUND, "LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {NVML_ERROR_FUNCTION_NOT_FOUND, "FUNCTION_NOT_FOUND", "Function Not Found"},
    {NVML_ERROR_CORRUPTED_INFOROM, "CORRUPTED_INFOROM", "Corrupted infoROM"},
    {NVML_ERROR_GPU_IS_LOST, "GPU_IS_LOST", "GPU is lost"},
    {NVML_ERROR_RESET_REQUIRED, "RESET_REQUIRED", "GPU requires restart"},
    {NVML_ERROR_OPERATING_SYSTEM, "OPERATING_SYSTEM",
     "The operating system has blocked the request."},
    {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "LIB_RM_VERSION_MISMATCH",
     "RM has detected an NVML/RM version mismatch."},
    {NVML_ERROR_IN_USE, "IN_USE", "In use by another client"},
    {NVML_ERROR_MEMORY, "MEMORY", "Insufficient Memory"},
    {NVML_ERROR_NO_DATA, "NO_DATA", "No data"},
    {NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "VGPU_ECC_NOT_SUPPORTED",
     "The requested vgpu operation is not available on target device, because ECC is enabled"},
    {NVML_ERROR_INSUFFICIENT_RESOURCES, "INSUFFICIENT_RESOURCES", "Insufficient resources"},
    {NVML_ERROR_FREQ_NOT_SUPPORTED, "FREQ_NOT_SUPPORTED", "Frequency not supported"},
    {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "ARGUMENT_VERSION_MISMATCH",
     "Argument version mismatch"},
    {NVML_ERROR_DEPRECATED, "DEPRECATED", "Deprecated"},
    {NVML_ERROR_NOT_READY, "NOT_READY", "Not ready"},
    {NVML_ERROR_GPU_NOT_FOUND, "GPU_NOT_FOUND", "GPU not found"},
    {NVML_ERROR_INVALID_STATE, "INVALID_STATE", "Invalid state"},
    {NVML_ERROR_RESET_TYPE_NOT_SUPPORTED, "RESET_TYPE_NOT_SUPPORTED", "Reset type not supported"},
    {NVML_ERROR_UNKNOWN, "UNKNOWN", "Unknown Error"},
};

/* Accepts "GPU_IS_LOST", "NVML_ERROR_GPU_IS_LOST" or "15". */
static int parse_error_name(const char *name, nvmlReturn_t *rc)
{
    if (strncmp(name, "NVML_ERROR_", 11) == 0)
        name += 11;
    else if (strncmp(name, "ERROR_", 6) == 0)
        name += 6;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (strcasecmp(errors[i].name, name) == 0) {
            *rc = errors[i].rc;
            return 0;
        }
    }
    char *end;
    long value = strtol(name, &end, 10);
    if (*name != '\0' && *end == '\0' && value > 0) {
        *rc = (nvmlReturn_t)value;
        return 0;
    }
    return -1;
}

/* ---- small helpers -------------------------------------------------------------- */

static void copy_string(char *dst, size_t dstlen, const char *src)
{
    snprintf(dst, dstlen, "%s", src);
}

/* "nvmlDeviceGetPciInfo_v3" and "DeviceGetPciInfo" both become
 * "nvmlDeviceGetPciInfo", so one rule covers every version. */
static void canonical_function(const char *name, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "%s%s", strncmp(name, "nvml", 4) == 0 ? "" : "nvml", name);
    if (n < 0 || (size_t)n >= outlen) {
        out[0] = '\0'; /* no NVML function has so long a name: match none */
        return;
    }
    char *suffix = strrchr(out, '_');
    if (suffix != NULL && suffix[1] == 'v' && suffix[2] >= '0' && suffix[2] <= '9')
        *suffix = '\0';
}

static struct fake_gpu *find_gpu(const char *uuid_or_index)
{
    for (size_t i = 0; i < fake.gpu_count; i++)
        if (strcasecmp(fake.gpus[i].uuid, uuid_or_index) == 0)
            return &fake.gpus[i];
    char *end;
    unsigned long index = strtoul(uuid_or_index, &end, 10);
    if (*uuid_or_index != '\0' && *end == '\0' && index < fake.gpu_count)
        return &fake.gpus[index];
    return NULL;
}

static struct fake_mig *find_mig(const char *uuid)
{
    for (size_t i = 0; i < fake.gpu_count; i++)
        for (size_t j = 0; j < fake.gpus[i].mig_count; j++)
            if (strcasecmp(fake.gpus[i].migs[j].uuid, uuid) == 0)
                return &fake.gpus[i].migs[j];
    return NULL;
}

/* A handle is valid only if it points into our tables. */
static bool valid_handle(nvmlDevice_t device)
{
    if (device == NULL)
        return false;
    for (size_t i = 0; i < fake.gpu_count; i++) {
        if (device == &fake.gpus[i].handle)
            return true;
        for (size_t j = 0; j < fake.gpus[i].mig_count; j++)
            if (device == &fake.gpus[i].migs[j].handle)
                return true;
    }
    return false;
}

static int set_rule(const char *function, nvmlReturn_t error, int gpu, unsigned after_calls)
{
    struct fake_rule *rules = realloc(fake.rules, (fake.rule_count + 1) * sizeof *rules);
    if (rules == NULL)
        return -1;
    fake.rules = rules;
    struct fake_rule *rule = &fake.rules[fake.rule_count++];
    memset(rule, 0, sizeof *rule);
    canonical_function(function, rule->function, sizeof rule->function);
    rule->error = error;
    rule->gpu = gpu;
    rule->after_calls = after_calls;
    return 0;
}

static void remove_rules(const char *function)
{
    char canonical[64];
    canonical_function(function, canonical, sizeof canonical);
    size_t kept = 0;
    for (size_t i = 0; i < fake.rule_count; i++)
        if (strcmp(fake.rules[i].function, canonical) != 0)
            fake.rules[kept++] = fake.rules[i];
    fake.rule_count = kept;
}

/* The first rule for `function` on GPU gpu_a or gpu_b (-1: none) that has
 * used up its successful calls decides the error. */
static nvmlReturn_t check_rules(const char *function, int gpu_a, int gpu_b)
{
    char canonical[64];
    canonical_function(function, canonical, sizeof canonical);
    for (size_t i = 0; i < fake.rule_count; i++) {
        struct fake_rule *rule = &fake.rules[i];
        if (strcmp(rule->function, canonical) != 0)
            continue;
        if (rule->gpu >= 0 && rule->gpu != gpu_a && rule->gpu != gpu_b)
            continue;
        if (rule->calls < rule->after_calls) {
            rule->calls++;
            continue;
        }
        return rule->error;
    }
    return NVML_SUCCESS;
}

/* ---- events ---------------------------------------------------------------------- */

static int enqueue_event(struct nvmlEventSet_st *set, const struct fake_event *event)
{
    if (set->count == set->capacity) {
        size_t grown = set->capacity ? set->capacity * 2 : 16;
        struct fake_event *queue = malloc(grown * sizeof *queue);
        if (queue == NULL)
            return -1;
        for (size_t i = 0; i < set->count; i++)
            queue[i] = set->queue[(set->head + i) % set->capacity];
        free(set->queue);
        set->queue = queue;
        set->head = 0;
        set->capacity = grown;
    }
    set->queue[(set->head + set->count) % set->capacity] = *event;
    set->count++;
    return 0;
}

static void emit_xid(struct fake_gpu *gpu, unsigned long long xid, unsigned gi, unsigned ci)
{
    struct fake_event event = {&gpu->handle, nvmlEventTypeXidCriticalError, xid, gi, ci};
    for (struct nvmlEventSet_st *set = fake.sets; set != NULL; set = set->next) {
        if ((set->masks[gpu->index] & nvmlEventTypeXidCriticalError) == 0)
            continue;
        if (enqueue_event(set, &event) != 0)
            fprintf(stderr, "fakenvml: out of memory queueing XID %llu\n", xid);
    }
}

static void log_delivered_event(const struct fake_event *event)
{
    if (fake.event_log_path[0] == '\0')
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    char line[256];
    int n = snprintf(line, sizeof line, "%lld %s %llu\n",
                     (long long)now.tv_sec * 1000000000LL + now.tv_nsec, event->device->gpu->uuid,
                     event->data);
    int fd = open(fake.event_log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "fakenvml: %s: %s\n", fake.event_log_path, strerror(errno));
        return;
    }
    if (write(fd, line, (size_t)n) != n)
        fprintf(stderr, "fakenvml: short write to %s\n", fake.event_log_path);
    close(fd);
}

/* ---- control file ---------------------------------------------------------------- */

static void control_xid(char **args, int argc)
{
    if (argc < 3) {
        fprintf(stderr, "fakenvml: usage: xid <uuid|index> <xid> [gi ci]\n");
        return;
    }
    unsigned gi = FAKE_NOT_ATTRIBUTED, ci = FAKE_NOT_ATTRIBUTED;
    struct fake_gpu *gpu = find_gpu(args[1]);
    struct fake_mig *mig = gpu ? NULL : find_mig(args[1]);
    if (mig != NULL) {
        gpu = mig->handle.gpu;
        gi = mig->gi;
        ci = mig->ci;
    }
    if (gpu == NULL) {
        fprintf(stderr, "fakenvml: xid: no GPU %s\n", args[1]);
        return;
    }
    if (argc >= 5) {
        gi = (unsigned)strtoul(args[3], NULL, 10);
        ci = (unsigned)strtoul(args[4], NULL, 10);
    }
    emit_xid(gpu, strtoull(args[2], NULL, 10), gi, ci);
}

static void control_fail(char **args, int argc)
{
    nvmlReturn_t error;
    if (argc < 3 || parse_error_name(args[2], &error) != 0) {
        fprintf(stderr, "fakenvml: usage: fail <nvmlFunction> <ERROR_NAME> [<uuid|index>]\n");
        return;
    }
    int gpu = -1;
    if (argc >= 4) {
        struct fake_gpu *g = find_gpu(args[3]);
        if (g == NULL) {
            fprintf(stderr, "fakenvml: fail: no GPU %s\n", args[3]);
            return;
        }
        gpu = (int)g->index;
    }
    if (set_rule(args[1], error, gpu, 0) != 0)
        fprintf(stderr, "fakenvml: out of memory adding a rule\n");
}

/* remap <gpu> pending|failed|clear, retired-pages <gpu> pending|clear */
static void control_memory(char **args, int argc)
{
    struct fake_gpu *gpu = argc >= 3 ? find_gpu(args[1]) : NULL;
    bool remap = strcmp(args[0], "remap") == 0;
    bool pending = argc >= 3 && strcmp(args[2], "pending") == 0;
    bool failed = argc >= 3 && remap && strcmp(args[2], "failed") == 0;
    bool clear = argc >= 3 && strcmp(args[2], "clear") == 0;
    if (gpu == NULL || !(pending || failed || clear)) {
        fprintf(stderr, "fakenvml: usage: remap <uuid|index> pending|failed|clear, "
                        "retired-pages <uuid|index> pending|clear\n");
        return;
    }
    if (remap) {
        gpu->remap_pending = pending;
        gpu->remap_failure = failed;
    } else {
        gpu->retired_pages_pending = pending;
    }
}

/* set <gpu> memory_used_mib|utilization_gpu|utilization_memory|temperature_c|power_mw <n> */
static void control_set(char **args, int argc)
{
    struct fake_gpu *gpu = argc >= 4 ? find_gpu(args[1]) : NULL;
    char *end = NULL;
    unsigned long long value = argc >= 4 ? strtoull(args[3], &end, 10) : 0;
    if (gpu == NULL || end == args[3] || *end != '\0') {
        fprintf(stderr, "fakenvml: usage: set <uuid|index> <field> <non-negative integer>\n");
        return;
    }
    const char *field = args[2];
    if (strcmp(field, "memory_used_mib") == 0 && value <= gpu->memory_mib)
        gpu->memory_used_mib = value;
    else if (strcmp(field, "utilization_gpu") == 0 && value <= 100)
        gpu->utilization_gpu = (unsigned)value;
    else if (strcmp(field, "utilization_memory") == 0 && value <= 100)
        gpu->utilization_memory = (unsigned)value;
    else if (strcmp(field, "temperature_c") == 0 && value <= 200)
        gpu->temperature_c = (unsigned)value;
    else if (strcmp(field, "power_mw") == 0 && value <= UINT_MAX)
        gpu->power_mw = (unsigned)value;
    else
        fprintf(stderr, "fakenvml: set: unknown field or value out of range: %s %s\n", field,
                args[3]);
}

/* process <gpu> <pid> <used_mib> [<sm%> <mem%>]: adds or replaces that
 * pid's entry; process <gpu> <pid> gone: removes it. */
static void control_process(char **args, int argc)
{
    struct fake_gpu *gpu = argc >= 4 ? find_gpu(args[1]) : NULL;
    char *end = NULL;
    unsigned long pid = argc >= 4 ? strtoul(args[2], &end, 10) : 0;
    if (gpu == NULL || end == args[2] || *end != '\0' || pid == 0 || pid > UINT_MAX) {
        fprintf(stderr, "fakenvml: usage: process <uuid|index> <pid> <used_mib> [<sm%%> "
                        "<mem%%>] | process <uuid|index> <pid> gone\n");
        return;
    }
    size_t i = 0;
    while (i < gpu->process_count && gpu->processes[i].pid != pid)
        i++;
    if (strcmp(args[3], "gone") == 0) {
        if (i < gpu->process_count)
            memmove(&gpu->processes[i], &gpu->processes[i + 1],
                    (gpu->process_count - i - 1) * sizeof gpu->processes[0]);
        gpu->process_count -= i < gpu->process_count;
        return;
    }
    unsigned long long v[3] = {0, 0, 0};
    for (int k = 0; k < 3 && 3 + k < argc; k++) {
        v[k] = strtoull(args[3 + k], &end, 10);
        if (end == args[3 + k] || *end != '\0' || (k > 0 && v[k] > 100)) {
            fprintf(stderr, "fakenvml: process: bad number %s\n", args[3 + k]);
            return;
        }
    }
    if (i == gpu->process_count) {
        if (i == FAKE_MAX_PROCESSES) {
            fprintf(stderr, "fakenvml: process: more than %d processes on one GPU\n",
                    FAKE_MAX_PROCESSES);
            return;
        }
        gpu->process_count++;
    }
    gpu->processes[i] = (struct fake_process){(unsigned)pid, v[0], (unsigned)v[1], (unsigned)v[2]};
}

static void run_control_line(char *line)
{
    char *args[8];
    int argc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(line, " \t\r\n", &save); tok != NULL && argc < 8;
         tok = strtok_r(NULL, " \t\r\n", &save))
        args[argc++] = tok;
    if (argc == 0 || args[0][0] == '#')
        return;
    if (strcmp(args[0], "xid") == 0) {
        control_xid(args, argc);
    } else if (strcmp(args[0], "lost") == 0 || strcmp(args[0], "recover") == 0) {
        struct fake_gpu *gpu = argc >= 2 ? find_gpu(args[1]) : NULL;
        if (gpu == NULL) {
            fprintf(stderr, "fakenvml: %s: no GPU %s\n", args[0], argc >= 2 ? args[1] : "");
            return;
        }
        gpu->lost = strcmp(args[0], "lost") == 0;
        if (gpu->lost)
            emit_xid(gpu, FAKE_XID_GPU_LOST, FAKE_NOT_ATTRIBUTED, FAKE_NOT_ATTRIBUTED);
    } else if (strcmp(args[0], "fail") == 0) {
        control_fail(args, argc);
    } else if (strcmp(args[0], "remap") == 0 || strcmp(args[0], "retired-pages") == 0) {
        control_memory(args, argc);
    } else if (strcmp(args[0], "set") == 0) {
        control_set(args, argc);
    } else if (strcmp(args[0], "process") == 0) {
        control_process(args, argc);
    } else if (strcmp(args[0], "unfail") == 0 && argc >= 2) {
        remove_rules(args[1]);
    } else {
        fprintf(stderr, "fakenvml: unknown control command: %s\n", args[0]);
    }
}

static void run_control_bytes(const char *bytes, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (bytes[i] != '\n') {
            if (fake.partial_len + 1 < sizeof fake.partial)
                fake.partial[fake.partial_len++] = bytes[i];
            continue;
        }
        fake.partial[fake.partial_len] = '\0';
        run_control_line(fake.partial);
        fake.partial_len = 0;
    }
}

/* Runs every complete line appended since the last call. The file stays
 * open once it exists, so a call that finds nothing new costs one fstat
 * (the plugin's start-up makes hundreds of NVML calls). Tests append; a
 * truncated file is read again from the start. */
static void poll_control(void)
{
    if (fake.control_path[0] == '\0')
        return;
    if (fake.control_fd < 0) {
        fake.control_fd = open(fake.control_path, O_RDONLY | O_CLOEXEC);
        if (fake.control_fd < 0)
            return;
        fake.control_offset = 0;
        fake.partial_len = 0;
    }
    struct stat st;
    if (fstat(fake.control_fd, &st) != 0)
        return;
    if (st.st_size < fake.control_offset) {
        fake.control_offset = 0;
        fake.partial_len = 0;
    }
    char buffer[4096];
    while (fake.control_offset < st.st_size) {
        ssize_t n = pread(fake.control_fd, buffer, sizeof buffer, fake.control_offset);
        if (n <= 0)
            break;
        fake.control_offset += n;
        run_control_bytes(buffer, (size_t)n);
    }
}

/* ---- inventory ------------------------------------------------------------------- */

static int json_int(json_t *object, const char *key, long long fallback, long long *out)
{
    json_t *value = json_object_get(object, key);
    if (value == NULL || json_is_null(value)) {
        *out = fallback;
        return 0;
    }
    if (!json_is_integer(value))
        return -1;
    *out = json_integer_value(value);
    return 0;
}

static int json_str(json_t *object, const char *key, const char *fallback, char *out, size_t outlen)
{
    json_t *value = json_object_get(object, key);
    if (value == NULL) {
        if (fallback == NULL)
            return -1;
        copy_string(out, outlen, fallback);
        return 0;
    }
    if (!json_is_string(value))
        return -1;
    copy_string(out, outlen, json_string_value(value));
    return 0;
}

/* A misspelt key would silently fall back to a default; say so. */
static void warn_unknown_keys(json_t *object, const char *where, const char *const *known)
{
    const char *key;
    json_t *value;
    json_object_foreach (object, key, value) {
        bool found = false;
        for (size_t i = 0; known[i] != NULL && !found; i++)
            found = strcmp(key, known[i]) == 0;
        if (!found)
            fprintf(stderr, "fakenvml: %s: unknown key \"%s\" ignored\n", where, key);
    }
}

static const char *const top_keys[] = {
    "driver_version", "cuda_driver_version", "init_error", "gpus", "errors", "comment", NULL};
static const char *const gpu_keys[] = {"uuid",
                                       "name",
                                       "minor",
                                       "memory_mib",
                                       "pci_bus_id",
                                       "numa_node",
                                       "cc",
                                       "pcie_switch",
                                       "mig_mode",
                                       "max_migs",
                                       "pci_device_id",
                                       "nvlinks",
                                       "migs",
                                       "remap_pending",
                                       "remap_failure",
                                       "retired_pages_pending",
                                       "memory_used_mib",
                                       "utilization_gpu",
                                       "utilization_memory",
                                       "temperature_c",
                                       "power_mw",
                                       "comment",
                                       NULL};
static const char *const mig_keys[] = {
    "uuid",      "slot",          "gi",         "ci",      "gi_slices",
    "ci_slices", "gi_profile_id", "memory_mib", "comment", NULL};

/* The plain profile of a GPU instance of `slices` slices (1g -> 1_SLICE ...). */
static long long default_gi_profile(long long slices)
{
    switch (slices) {
    case 2:
        return NVML_GPU_INSTANCE_PROFILE_2_SLICE;
    case 3:
        return NVML_GPU_INSTANCE_PROFILE_3_SLICE;
    case 4:
        return NVML_GPU_INSTANCE_PROFILE_4_SLICE;
    case 6:
        return NVML_GPU_INSTANCE_PROFILE_6_SLICE;
    case 7:
        return NVML_GPU_INSTANCE_PROFILE_7_SLICE;
    case 8:
        return NVML_GPU_INSTANCE_PROFILE_8_SLICE;
    default:
        return NVML_GPU_INSTANCE_PROFILE_1_SLICE;
    }
}

static int parse_mig(json_t *object, struct fake_mig *mig, size_t position, char *why,
                     size_t whylen)
{
    long long gi, ci, gi_slices, ci_slices, memory, slot, profile;
    warn_unknown_keys(object, "migs[]", mig_keys);
    if (json_str(object, "uuid", NULL, mig->uuid, sizeof mig->uuid) != 0 ||
        json_int(object, "gi", -1, &gi) != 0 || json_int(object, "ci", 0, &ci) != 0 ||
        json_int(object, "gi_slices", 1, &gi_slices) != 0 ||
        json_int(object, "ci_slices", -1, &ci_slices) != 0 ||
        json_int(object, "memory_mib", 0, &memory) != 0 ||
        json_int(object, "slot", (long long)position, &slot) != 0 || gi < 0 ||
        json_int(object, "gi_profile_id", default_gi_profile(gi_slices), &profile) != 0 ||
        profile < 0) {
        snprintf(why, whylen, "MIG device %zu: needs uuid, gi (integers)", position);
        return -1;
    }
    mig->gi_profile_id = (unsigned)profile;
    mig->gi = (unsigned)gi;
    mig->ci = (unsigned)ci;
    mig->gi_slices = (unsigned)gi_slices;
    mig->ci_slices = (unsigned)(ci_slices < 0 ? gi_slices : ci_slices);
    mig->memory_mib = (unsigned long long)memory;
    mig->slot = (unsigned)slot;
    return 0;
}

static int parse_mig_mode(json_t *object, int *mode)
{
    char text[32];
    if (json_str(object, "mig_mode", "unsupported", text, sizeof text) != 0)
        return -1;
    if (strcmp(text, "unsupported") == 0)
        *mode = -1;
    else if (strcmp(text, "disabled") == 0)
        *mode = 0;
    else if (strcmp(text, "enabled") == 0)
        *mode = 1;
    else
        return -1;
    return 0;
}

static int parse_gpu(json_t *object, struct fake_gpu *gpu, size_t index, char *why, size_t whylen)
{
    long long minor, memory, numa, pcie_switch, device_id, max_migs;
    gpu->index = (unsigned)index;
    gpu->handle = (struct nvmlDevice_st){FAKE_MAGIC_GPU, gpu, NULL};
    warn_unknown_keys(object, "gpus[]", gpu_keys);
    if (json_str(object, "uuid", NULL, gpu->uuid, sizeof gpu->uuid) != 0 ||
        json_str(object, "name", "NVIDIA A100-SXM4-40GB", gpu->name, sizeof gpu->name) != 0 ||
        json_int(object, "minor", (long long)index, &minor) != 0 ||
        json_int(object, "memory_mib", 40960, &memory) != 0 ||
        json_int(object, "numa_node", -1, &numa) != 0 ||
        json_int(object, "pcie_switch", -1, &pcie_switch) != 0 ||
        json_int(object, "pci_device_id", 0x20B010DE, &device_id) != 0 ||
        json_int(object, "max_migs", FAKE_DEFAULT_MAX_MIGS, &max_migs) != 0 ||
        parse_mig_mode(object, &gpu->mig_mode) != 0) {
        snprintf(why, whylen, "gpus[%zu]: a field has the wrong type or value (uuid is required)",
                 index);
        return -1;
    }
    char bus_id[64];
    char fallback[32];
    snprintf(fallback, sizeof fallback, "00000000:%02zX:00.0", index + 1);
    if (json_str(object, "pci_bus_id", fallback, bus_id, sizeof bus_id) != 0 ||
        sscanf(bus_id, "%x:%x:%x", &gpu->domain, &gpu->bus, &gpu->device) != 3) {
        snprintf(why, whylen, "gpus[%zu]: pci_bus_id must look like 00000000:07:00.0", index);
        return -1;
    }
    /* NVML writes bus ids in upper case with an 8-digit domain. */
    snprintf(gpu->bus_id, sizeof gpu->bus_id, NVML_DEVICE_PCI_BUS_ID_FMT, gpu->domain, gpu->bus,
             gpu->device);
    gpu->minor = (unsigned)minor;
    gpu->memory_mib = (unsigned long long)memory;
    gpu->numa_node = (int)numa;
    gpu->pcie_switch = (int)pcie_switch;
    gpu->pci_device_id = (unsigned)device_id;
    gpu->max_migs = (unsigned)max_migs;
    gpu->remap_pending = json_is_true(json_object_get(object, "remap_pending"));
    gpu->remap_failure = json_is_true(json_object_get(object, "remap_failure"));
    gpu->retired_pages_pending = json_is_true(json_object_get(object, "retired_pages_pending"));
    long long used, util_gpu, util_mem, temp, power;
    if (json_int(object, "memory_used_mib", 0, &used) != 0 ||
        json_int(object, "utilization_gpu", 0, &util_gpu) != 0 ||
        json_int(object, "utilization_memory", 0, &util_mem) != 0 ||
        json_int(object, "temperature_c", 35, &temp) != 0 ||
        json_int(object, "power_mw", 60000, &power) != 0 || used < 0 || used > memory ||
        util_gpu < 0 || util_gpu > 100 || util_mem < 0 || util_mem > 100 || temp < 0 || power < 0 ||
        power > UINT_MAX) {
        snprintf(why, whylen,
                 "gpus[%zu]: telemetry out of range (memory_used_mib <= memory_mib, "
                 "utilization 0-100, temperature_c and power_mw >= 0)",
                 index);
        return -1;
    }
    gpu->memory_used_mib = (unsigned long long)used;
    gpu->utilization_gpu = (unsigned)util_gpu;
    gpu->utilization_memory = (unsigned)util_mem;
    gpu->temperature_c = (unsigned)temp;
    gpu->power_mw = (unsigned)power;
    json_t *cc = json_object_get(object, "cc");
    gpu->cc_major = 8;
    gpu->cc_minor = 0;
    if (json_is_array(cc) && json_array_size(cc) == 2) {
        gpu->cc_major = (int)json_integer_value(json_array_get(cc, 0));
        gpu->cc_minor = (int)json_integer_value(json_array_get(cc, 1));
    }
    for (size_t l = 0; l < NVML_NVLINK_MAX_LINKS; l++)
        gpu->link_peer[l] = -1;
    json_t *migs = json_object_get(object, "migs");
    size_t count = json_is_array(migs) ? json_array_size(migs) : 0;
    if (count == 0)
        return 0;
    gpu->migs = calloc(count, sizeof *gpu->migs);
    if (gpu->migs == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    gpu->mig_count = count;
    for (size_t j = 0; j < count; j++) {
        struct fake_mig *mig = &gpu->migs[j];
        mig->handle = (struct nvmlDevice_st){FAKE_MAGIC_MIG, gpu, mig};
        mig->gpu_instance.mig = mig;
        if (parse_mig(json_array_get(migs, j), mig, j, why, whylen) != 0)
            return -1;
    }
    return 0;
}

/* NVLinks are listed once per pair (either side, or both: the larger
 * count wins) and wired symmetrically onto consecutive link numbers. */
static int wire_nvlinks(json_t *gpus, char *why, size_t whylen)
{
    size_t n = fake.gpu_count;
    unsigned *links = calloc(n > 0 ? n * n : 1, sizeof *links);
    if (links == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    for (size_t a = 0; a < n; a++) {
        json_t *list = json_object_get(json_array_get(gpus, a), "nvlinks");
        for (size_t k = 0; json_is_array(list) && k < json_array_size(list); k++) {
            json_t *entry = json_array_get(list, k);
            long long peer, count;
            if (json_int(entry, "peer", -1, &peer) != 0 ||
                json_int(entry, "links", 1, &count) != 0 || peer < 0 || (size_t)peer >= n ||
                (size_t)peer == a || count < 0) {
                snprintf(why, whylen, "gpus[%zu].nvlinks[%zu]: peer must be another GPU index", a,
                         k);
                free(links);
                return -1;
            }
            size_t b = (size_t)peer;
            unsigned c = (unsigned)count;
            if (links[a * n + b] < c)
                links[a * n + b] = links[b * n + a] = c;
        }
    }
    for (size_t a = 0; a < n; a++) {
        unsigned next = 0;
        for (size_t b = 0; b < n; b++)
            for (unsigned c = 0; c < links[a * n + b] && next < NVML_NVLINK_MAX_LINKS; c++)
                fake.gpus[a].link_peer[next++] = (int)b;
        fake.gpus[a].has_nvlink = next > 0;
    }
    free(links);
    return 0;
}

static int parse_error_rules(json_t *list, char *why, size_t whylen)
{
    for (size_t i = 0; json_is_array(list) && i < json_array_size(list); i++) {
        json_t *entry = json_array_get(list, i);
        char function[64], error_name[64];
        long long gpu, after;
        nvmlReturn_t error;
        if (json_str(entry, "function", NULL, function, sizeof function) != 0 ||
            json_str(entry, "error", NULL, error_name, sizeof error_name) != 0 ||
            parse_error_name(error_name, &error) != 0 || json_int(entry, "gpu", -1, &gpu) != 0 ||
            json_int(entry, "after_calls", 0, &after) != 0 || after < 0) {
            snprintf(why, whylen, "errors[%zu]: needs function and a known error name", i);
            return -1;
        }
        if (set_rule(function, error, (int)gpu, (unsigned)after) != 0) {
            snprintf(why, whylen, "out of memory");
            return -1;
        }
    }
    return 0;
}

static void unload_inventory(void)
{
    while (fake.sets != NULL) {
        struct nvmlEventSet_st *set = fake.sets;
        fake.sets = set->next;
        if (set->inotify_fd >= 0)
            close(set->inotify_fd);
        free(set->masks);
        free(set->queue);
        set->magic = 0;
        free(set);
    }
    for (size_t i = 0; fake.gpus != NULL && i < fake.gpu_count; i++)
        free(fake.gpus[i].migs);
    free(fake.gpus);
    free(fake.rules);
    fake.gpus = NULL;
    fake.gpu_count = 0;
    fake.rules = NULL;
    fake.rule_count = 0;
    fake.control_path[0] = '\0';
    if (fake.control_fd >= 0)
        close(fake.control_fd);
    fake.control_fd = -1;
    fake.control_offset = 0;
    fake.partial_len = 0;
    fake.event_log_path[0] = '\0';
}

static int parse_inventory(json_t *root, nvmlReturn_t *init_error, char *why, size_t whylen)
{
    long long cuda;
    char init_error_name[64] = "";
    if (!json_is_object(root) ||
        json_str(root, "driver_version", "550.54.15", fake.driver_version,
                 sizeof fake.driver_version) != 0 ||
        json_int(root, "cuda_driver_version", 12040, &cuda) != 0 ||
        json_str(root, "init_error", "", init_error_name, sizeof init_error_name) != 0) {
        snprintf(why, whylen, "the top level must be an object with driver_version etc.");
        return -1;
    }
    fake.cuda_driver_version = (int)cuda;
    warn_unknown_keys(root, "inventory", top_keys);
    *init_error = NVML_SUCCESS;
    if (init_error_name[0] != '\0' && parse_error_name(init_error_name, init_error) != 0) {
        snprintf(why, whylen, "init_error: unknown error %s", init_error_name);
        return -1;
    }
    json_t *gpus = json_object_get(root, "gpus");
    if (!json_is_array(gpus)) {
        snprintf(why, whylen, "gpus must be an array");
        return -1;
    }
    fake.gpu_count = json_array_size(gpus);
    fake.gpus = calloc(fake.gpu_count ? fake.gpu_count : 1, sizeof *fake.gpus);
    if (fake.gpus == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < fake.gpu_count; i++)
        if (parse_gpu(json_array_get(gpus, i), &fake.gpus[i], i, why, whylen) != 0)
            return -1;
    if (wire_nvlinks(gpus, why, whylen) != 0)
        return -1;
    return parse_error_rules(json_object_get(root, "errors"), why, whylen);
}

/* Reads FAKE_NVML_INVENTORY; any problem is reported on stderr and makes
 * Init fail the way a machine without a driver does. */
static nvmlReturn_t load_inventory(void)
{
    const char *path = getenv("FAKE_NVML_INVENTORY");
    if (path == NULL || path[0] == '\0') {
        fprintf(stderr, "fakenvml: FAKE_NVML_INVENTORY is not set: behaving as if no driver "
                        "were loaded\n");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    json_error_t error;
    json_t *root = json_load_file(path, 0, &error);
    if (root == NULL) {
        fprintf(stderr, "fakenvml: %s:%d: %s: behaving as if no driver were loaded\n", path,
                error.line, error.text);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    char why[256];
    nvmlReturn_t init_error = NVML_SUCCESS;
    int rc = parse_inventory(root, &init_error, why, sizeof why);
    json_decref(root);
    if (rc != 0) {
        fprintf(stderr, "fakenvml: %s: %s: behaving as if no driver were loaded\n", path, why);
        unload_inventory();
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    const char *control = getenv("FAKE_NVML_CONTROL");
    copy_string(fake.control_path, sizeof fake.control_path, control ? control : "");
    const char *event_log = getenv("FAKE_NVML_EVENT_LOG");
    copy_string(fake.event_log_path, sizeof fake.event_log_path, event_log ? event_log : "");
    if (init_error == NVML_SUCCESS)
        init_error = check_rules("nvmlInit", -1, -1);
    if (init_error != NVML_SUCCESS) {
        unload_inventory();
        return init_error;
    }
    poll_control();
    return NVML_SUCCESS;
}

/* ---- entry checks (lock held) ------------------------------------------------------- */

/* Initialised, with the control file's news applied; no rules checked. */
static nvmlReturn_t ready(void)
{
    if (fake.refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    poll_control();
    return NVML_SUCCESS;
}

static nvmlReturn_t enter(const char *function)
{
    if (fake.refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    poll_control();
    return check_rules(function, -1, -1);
}

static nvmlReturn_t enter_device(const char *function, nvmlDevice_t device)
{
    if (fake.refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    poll_control();
    if (!valid_handle(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (device->gpu->lost)
        return NVML_ERROR_GPU_IS_LOST;
    return check_rules(function, (int)device->gpu->index, -1);
}

static nvmlReturn_t enter_pair(const char *function, nvmlDevice_t a, nvmlDevice_t b)
{
    if (fake.refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    poll_control();
    if (!valid_handle(a) || !valid_handle(b))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (a->gpu->lost || b->gpu->lost)
        return NVML_ERROR_GPU_IS_LOST;
    return check_rules(function, (int)a->gpu->index, (int)b->gpu->index);
}

static void lock(void)
{
    pthread_mutex_lock(&fake.lock);
}

static void unlock(void)
{
    pthread_mutex_unlock(&fake.lock);
}

/* ---- init / system ------------------------------------------------------------------- */

static nvmlReturn_t do_init(void)
{
    lock();
    nvmlReturn_t rc = NVML_SUCCESS;
    if (fake.refcount == 0)
        rc = load_inventory();
    if (rc == NVML_SUCCESS)
        fake.refcount++;
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlInit(void)
{
    return do_init();
}
#ifndef FAKE_NVML_V1_ONLY
EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return do_init();
}
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    return do_init();
}
#endif

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    lock();
    nvmlReturn_t rc = NVML_SUCCESS;
    if (fake.refcount == 0)
        rc = NVML_ERROR_UNINITIALIZED;
    else if (--fake.refcount == 0)
        unload_inventory();
    unlock();
    return rc;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].rc == result)
            return errors[i].text;
    return "Unknown Error";
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    lock();
    nvmlReturn_t rc = enter("nvmlSystemGetDriverVersion");
    if (rc == NVML_SUCCESS && version == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && strlen(fake.driver_version) >= length)
        rc = NVML_ERROR_INSUFFICIENT_SIZE;
    else if (rc == NVML_SUCCESS)
        copy_string(version, length, fake.driver_version);
    unlock();
    return rc;
}

static nvmlReturn_t get_cuda_driver_version(int *version)
{
    lock();
    nvmlReturn_t rc = enter("nvmlSystemGetCudaDriverVersion");
    if (rc == NVML_SUCCESS && version == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS)
        *version = fake.cuda_driver_version;
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    return get_cuda_driver_version(v);
}
#ifndef FAKE_NVML_V1_ONLY
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    return get_cuda_driver_version(v);
}
#endif

/* ---- device lookup --------------------------------------------------------------------- */

static nvmlReturn_t get_count(unsigned int *count)
{
    lock();
    nvmlReturn_t rc = enter("nvmlDeviceGetCount");
    if (rc == NVML_SUCCESS && count == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS)
        *count = (unsigned)fake.gpu_count;
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *c)
{
    return get_count(c);
}
#ifndef FAKE_NVML_V1_ONLY
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *c)
{
    return get_count(c);
}
#endif

static nvmlReturn_t get_handle_by_index(unsigned int index, nvmlDevice_t *device)
{
    lock();
    nvmlReturn_t rc = ready();
    if (rc == NVML_SUCCESS && (device == NULL || index >= fake.gpu_count))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        rc = enter_device("nvmlDeviceGetHandleByIndex", &fake.gpus[index].handle);
    if (rc == NVML_SUCCESS)
        *device = &fake.gpus[index].handle;
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d)
{
    return get_handle_by_index(i, d);
}
#ifndef FAKE_NVML_V1_ONLY
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
    return get_handle_by_index(i, d);
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    lock();
    nvmlReturn_t rc = ready();
    nvmlDevice_t found = NULL;
    if (rc == NVML_SUCCESS && (uuid == NULL || device == NULL))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        for (size_t i = 0; i < fake.gpu_count && found == NULL; i++)
            if (strcmp(fake.gpus[i].uuid, uuid) == 0)
                found = &fake.gpus[i].handle;
        struct fake_mig *mig = found ? NULL : find_mig(uuid);
        if (mig != NULL)
            found = &mig->handle;
        rc = found ? enter_device("nvmlDeviceGetHandleByUUID", found) : NVML_ERROR_NOT_FOUND;
    }
    if (rc == NVML_SUCCESS)
        *device = found;
    unlock();
    return rc;
}

static nvmlReturn_t get_handle_by_bus_id(const char *bus_id, nvmlDevice_t *device)
{
    lock();
    nvmlReturn_t rc = ready();
    unsigned domain, bus, dev;
    if (rc == NVML_SUCCESS &&
        (bus_id == NULL || device == NULL || sscanf(bus_id, "%x:%x:%x", &domain, &bus, &dev) != 3))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        rc = NVML_ERROR_NOT_FOUND;
        for (size_t i = 0; i < fake.gpu_count; i++) {
            struct fake_gpu *g = &fake.gpus[i];
            if (g->domain == domain && g->bus == bus && g->device == dev) {
                rc = enter_device("nvmlDeviceGetHandleByPciBusId", &g->handle);
                if (rc == NVML_SUCCESS)
                    *device = &g->handle;
                break;
            }
        }
    }
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *b, nvmlDevice_t *d)
{
    return get_handle_by_bus_id(b, d);
}
#ifndef FAKE_NVML_V1_ONLY
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *b, nvmlDevice_t *d)
{
    return get_handle_by_bus_id(b, d);
}
#endif

/* ---- device facts ------------------------------------------------------------------------ */

static nvmlReturn_t copy_out(const char *value, char *out, unsigned int length)
{
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) >= length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    copy_string(out, length, value);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetUUID", device);
    if (rc == NVML_SUCCESS)
        rc = copy_out(device->mig ? device->mig->uuid : device->gpu->uuid, uuid, length);
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetName", device);
    if (rc == NVML_SUCCESS)
        rc = copy_out(device->gpu->name, name, length);
    unlock();
    return rc;
}

/* The NVML getters that copy one unsigned value of a device. */
#define FAKE_UINT_GETTER(name, expr)                                 \
    EXPORT nvmlReturn_t name(nvmlDevice_t device, unsigned int *out) \
    {                                                                \
        lock();                                                      \
        nvmlReturn_t rc = enter_device(#name, device);               \
        if (rc == NVML_SUCCESS && out == NULL)                       \
            rc = NVML_ERROR_INVALID_ARGUMENT;                        \
        else if (rc == NVML_SUCCESS)                                 \
            *out = (expr);                                           \
        unlock();                                                    \
        return rc;                                                   \
    }

FAKE_UINT_GETTER(nvmlDeviceGetIndex, device->gpu->index)

FAKE_UINT_GETTER(nvmlDeviceGetMinorNumber, (unsigned int)device->gpu->minor)

static void fill_pci_info(const struct fake_gpu *g, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
             g->domain & 0xFFFFu, g->bus, g->device);
    copy_string(pci->busId, sizeof pci->busId, g->bus_id);
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->device;
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = 0x145F10DE;
}

static nvmlReturn_t get_pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetPciInfo", device);
    if (rc == NVML_SUCCESS && pci == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS)
        fill_pci_info(device->gpu, pci);
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p)
{
    return get_pci_info(d, p);
}
#ifndef FAKE_NVML_V1_ONLY
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p)
{
    return get_pci_info(d, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p)
{
    return get_pci_info(d, p);
}
#endif

static unsigned long long device_memory_bytes(nvmlDevice_t device)
{
    unsigned long long mib = device->mig ? device->mig->memory_mib : device->gpu->memory_mib;
    return mib * 1024ull * 1024ull;
}

/* MIG devices report no use of their own here: telemetry is per GPU. */
static unsigned long long device_used_bytes(nvmlDevice_t device)
{
    return device->mig ? 0 : device->gpu->memory_used_mib * 1024ull * 1024ull;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetMemoryInfo", device);
    if (rc == NVML_SUCCESS && memory == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS)
        *memory = (nvmlMemory_t){device_memory_bytes(device),
                                 device_memory_bytes(device) - device_used_bytes(device),
                                 device_used_bytes(device)};
    unlock();
    return rc;
}

/* Telemetry: full GPUs only (MIG handles answer NOT_SUPPORTED, as the
 * driver does for utilisation and power). */
static nvmlReturn_t enter_telemetry(const char *function, nvmlDevice_t device, const void *out)
{
    nvmlReturn_t rc = enter_device(function, device);
    if (rc == NVML_SUCCESS && out == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && device->mig != NULL)
        rc = NVML_ERROR_NOT_SUPPORTED;
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                  nvmlUtilization_t *utilization)
{
    lock();
    nvmlReturn_t rc = enter_telemetry("nvmlDeviceGetUtilizationRates", device, utilization);
    if (rc == NVML_SUCCESS)
        *utilization =
            (nvmlUtilization_t){device->gpu->utilization_gpu, device->gpu->utilization_memory};
    unlock();
    return rc;
}

/* The real API: *count in = room in infos, out = processes; room too
 * small (or infos NULL with room 0) = INSUFFICIENT_SIZE with the count. */
static nvmlReturn_t running_processes(const char *function, nvmlDevice_t device,
                                      unsigned int *count, nvmlProcessInfo_t *infos)
{
    lock();
    nvmlReturn_t rc = enter_telemetry(function, device, count);
    if (rc == NVML_SUCCESS) {
        const struct fake_gpu *gpu = device->gpu;
        unsigned room = *count;
        *count = (unsigned)gpu->process_count;
        if (room < gpu->process_count)
            rc = NVML_ERROR_INSUFFICIENT_SIZE;
        else if (gpu->process_count > 0 && infos == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        for (size_t i = 0; rc == NVML_SUCCESS && i < gpu->process_count; i++)
            infos[i] = (nvmlProcessInfo_t){gpu->processes[i].pid,
                                           gpu->processes[i].used_mib * 1024ull * 1024ull,
                                           0xFFFFFFFFu, 0xFFFFFFFFu};
    }
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                            unsigned int *count,
                                                            nvmlProcessInfo_t *infos)
{
    return running_processes("nvmlDeviceGetComputeRunningProcesses", device, count, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                            unsigned int *count,
                                                            nvmlProcessInfo_t *infos)
{
    return running_processes("nvmlDeviceGetComputeRunningProcesses", device, count, infos);
}

/* FAKECUDA_TIMELINE: the fake driver's simulated device, whose per-process
 * busy time the utilisation samples report (mapped at the first question). */
static struct fc_tl timeline;
static int timeline_state; /* 0 not looked at, 1 mapped, -1 none */

static bool timeline_serves(const struct fake_gpu *gpu)
{
    if (timeline_state == 0) {
        const char *path = getenv("FAKECUDA_TIMELINE");
        char why[600];
        timeline_state = -1;
        if (path != NULL && *path != '\0') {
            if (fc_tl_open(&timeline, path, why, sizeof why) == 0)
                timeline_state = 1;
            else
                fprintf(stderr, "fakenvml: FAKECUDA_TIMELINE: %s\n", why);
        }
    }
    return timeline_state == 1 &&
           (timeline.f->uuid[0] == '\0' || strcmp(timeline.f->uuid, gpu->uuid) == 0);
}

/* One sample per process that ran on the timeline after lastSeen (CPU time
 * in microseconds, as the driver stamps them): smUtil is the percent of the
 * time since lastSeen (at most a second back) its kernels ran, rounded. */
static nvmlReturn_t timeline_samples(nvmlProcessUtilizationSample_t *samples, unsigned int *count,
                                     unsigned long long last_seen)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long now_us =
        (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull;
    uint64_t now = fc_tl_now();
    unsigned long long span_us =
        last_seen != 0 && last_seen < now_us ? now_us - last_seen : 1000000;
    if (span_us > 1000000)
        span_us = 1000000;
    if (span_us == 0)
        span_us = 1;
    uint64_t from = now - span_us * 1000ull;
    unsigned room = *count, n = 0;
    for (unsigned i = 0; i < FC_TL_PROCS; i++) {
        const struct fc_tl_proc *p = &timeline.f->procs[i];
        if (p->pid == 0 || p->tail_ns <= from)
            continue;
        uint64_t busy = fc_tl_busy_within(p, from, now);
        if (n < room && samples != NULL)
            samples[n] = (nvmlProcessUtilizationSample_t){
                (unsigned)p->pid,
                now_us,
                (unsigned)((busy * 100 + span_us * 500) / (span_us * 1000)),
                0,
                0,
                0};
        n++;
    }
    *count = n;
    if (samples == NULL || room < n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    return n == 0 ? NVML_ERROR_NOT_FOUND : NVML_SUCCESS;
}

/* Samples newer than lastSeen: the fake's samples are always "now", so
 * every process with a sample is returned; NULL samples = the count. With
 * FAKECUDA_TIMELINE, the timeline's processes instead. */
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                    nvmlProcessUtilizationSample_t *samples,
                                                    unsigned int *count,
                                                    unsigned long long lastSeen)
{
    lock();
    nvmlReturn_t rc = enter_telemetry("nvmlDeviceGetProcessUtilization", device, count);
    if (rc == NVML_SUCCESS && timeline_serves(device->gpu)) {
        rc = timeline_samples(samples, count, lastSeen);
    } else if (rc == NVML_SUCCESS) {
        const struct fake_gpu *gpu = device->gpu;
        unsigned room = *count;
        *count = (unsigned)gpu->process_count;
        if (samples == NULL || room < gpu->process_count)
            rc = NVML_ERROR_INSUFFICIENT_SIZE;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long now_us =
            (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull;
        for (size_t i = 0; rc == NVML_SUCCESS && i < gpu->process_count; i++)
            samples[i] = (nvmlProcessUtilizationSample_t){
                gpu->processes[i].pid, now_us, gpu->processes[i].sm, gpu->processes[i].mem, 0, 0};
    }
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                             unsigned int *temp)
{
    lock();
    nvmlReturn_t rc = enter_telemetry("nvmlDeviceGetTemperature", device, temp);
    if (rc == NVML_SUCCESS && sensor != NVML_TEMPERATURE_GPU)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *temp = device->gpu->temperature_c;
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    lock();
    nvmlReturn_t rc = enter_telemetry("nvmlDeviceGetPowerUsage", device, power);
    if (rc == NVML_SUCCESS)
        *power = device->gpu->power_mw;
    unlock();
    return rc;
}

#ifndef FAKE_NVML_V1_ONLY
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetMemoryInfo_v2", device);
    if (rc == NVML_SUCCESS && memory == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && memory->version != nvmlMemory_v2)
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    else if (rc == NVML_SUCCESS)
        *memory = (nvmlMemory_v2_t){nvmlMemory_v2, device_memory_bytes(device), 0,
                                    device_memory_bytes(device) - device_used_bytes(device),
                                    device_used_bytes(device)};
    unlock();
    return rc;
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetCudaComputeCapability", device);
    if (rc == NVML_SUCCESS && (major == NULL || minor == NULL))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS) {
        *major = device->gpu->cc_major;
        *minor = device->gpu->cc_minor;
    }
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetNumaNodeId", device);
    if (rc == NVML_SUCCESS && node == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && device->gpu->numa_node < 0)
        rc = NVML_ERROR_NOT_SUPPORTED;
    else if (rc == NVML_SUCCESS)
        *node = (unsigned)device->gpu->numa_node;
    unlock();
    return rc;
}

/* ---- MIG ------------------------------------------------------------------------------------ */

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
                                         unsigned int *pending)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetMigMode", device);
    if (rc == NVML_SUCCESS && (current == NULL || pending == NULL))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && (device->mig != NULL || device->gpu->mig_mode < 0))
        rc = NVML_ERROR_NOT_SUPPORTED;
    else if (rc == NVML_SUCCESS)
        *current = *pending = (unsigned)device->gpu->mig_mode;
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetMaxMigDeviceCount", device);
    if (rc == NVML_SUCCESS && count == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && (device->mig != NULL || device->gpu->mig_mode < 0))
        rc = NVML_ERROR_NOT_SUPPORTED;
    else if (rc == NVML_SUCCESS)
        *count = device->gpu->max_migs;
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *mig_device)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetMigDeviceHandleByIndex", device);
    if (rc == NVML_SUCCESS && (mig_device == NULL || device->mig != NULL))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && device->gpu->mig_mode < 0)
        rc = NVML_ERROR_NOT_SUPPORTED;
    else if (rc == NVML_SUCCESS && index >= device->gpu->max_migs)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        rc = NVML_ERROR_NOT_FOUND;
        for (size_t j = 0; device->gpu->mig_mode == 1 && j < device->gpu->mig_count; j++) {
            if (device->gpu->migs[j].slot == index) {
                *mig_device = &device->gpu->migs[j].handle;
                rc = NVML_SUCCESS;
                break;
            }
        }
    }
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig_device,
                                                                 nvmlDevice_t *device)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig_device);
    if (rc == NVML_SUCCESS && (device == NULL || mig_device->mig == NULL))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS)
        *device = &mig_device->gpu->handle;
    unlock();
    return rc;
}

FAKE_UINT_GETTER(nvmlDeviceIsMigDeviceHandle, device->mig != NULL)

static nvmlReturn_t get_instance_id(const char *function, nvmlDevice_t device, unsigned int *id,
                                    bool compute)
{
    lock();
    nvmlReturn_t rc = enter_device(function, device);
    if (rc == NVML_SUCCESS && id == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && device->mig == NULL)
        rc = NVML_ERROR_NOT_SUPPORTED;
    else if (rc == NVML_SUCCESS)
        *id = compute ? device->mig->ci : device->mig->gi;
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return get_instance_id("nvmlDeviceGetGpuInstanceId", device, id, false);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return get_instance_id("nvmlDeviceGetComputeInstanceId", device, id, true);
}

/* GPU instance `id` of a (parent) GPU: any of its MIG devices in it. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                 nvmlGpuInstance_t *gpu_instance)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetGpuInstanceById", device);
    if (rc == NVML_SUCCESS && (gpu_instance == NULL || device->mig != NULL))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        rc = NVML_ERROR_NOT_FOUND;
        for (size_t j = 0; j < device->gpu->mig_count; j++)
            if (device->gpu->migs[j].gi == id) {
                *gpu_instance = &device->gpu->migs[j].gpu_instance;
                rc = NVML_SUCCESS;
                break;
            }
    }
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpu_instance,
                                           nvmlGpuInstanceInfo_t *info)
{
    lock();
    nvmlReturn_t rc = NVML_ERROR_INVALID_ARGUMENT;
    struct fake_mig *mig = gpu_instance != NULL ? gpu_instance->mig : NULL;
    if (fake.refcount == 0)
        rc = NVML_ERROR_UNINITIALIZED;
    else if (mig != NULL && info != NULL && valid_handle(&mig->handle))
        rc = enter_device("nvmlGpuInstanceGetInfo", &mig->handle.gpu->handle);
    if (rc == NVML_SUCCESS) {
        memset(info, 0, sizeof *info);
        info->device = &mig->handle.gpu->handle;
        info->id = mig->gi;
        info->profileId = mig->gi_profile_id;
        info->placement.start = mig->slot;
        info->placement.size = mig->gi_slices;
    }
    unlock();
    return rc;
}

static nvmlReturn_t get_attributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetAttributes", device);
    if (rc == NVML_SUCCESS && attributes == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        /* A100-like numbers: 14 SMs per compute slice. */
        const struct fake_mig *mig = device->mig;
        unsigned gi_slices = mig ? mig->gi_slices : 7;
        unsigned ci_slices = mig ? mig->ci_slices : 7;
        memset(attributes, 0, sizeof *attributes);
        attributes->multiprocessorCount = 14 * ci_slices;
        attributes->sharedCopyEngineCount = gi_slices;
        attributes->sharedDecoderCount = gi_slices / 2;
        attributes->sharedJpegCount = gi_slices == 7 ? 1 : 0;
        attributes->sharedOfaCount = gi_slices == 7 ? 1 : 0;
        attributes->gpuInstanceSliceCount = gi_slices;
        attributes->computeInstanceSliceCount = ci_slices;
        attributes->memorySizeMB = mig ? mig->memory_mib : device->gpu->memory_mib;
    }
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t d, nvmlDeviceAttributes_t *a)
{
    return get_attributes(d, a);
}
#ifndef FAKE_NVML_V1_ONLY
EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t *a)
{
    return get_attributes(d, a);
}
#endif

/* ---- topology -------------------------------------------------------------------------------- */

static nvmlGpuTopologyLevel_t common_ancestor(const struct fake_gpu *a, const struct fake_gpu *b)
{
    if (a == b)
        return NVML_TOPOLOGY_INTERNAL;
    if (a->pcie_switch >= 0 && a->pcie_switch == b->pcie_switch)
        return NVML_TOPOLOGY_SINGLE;
    if (a->numa_node >= 0 && a->numa_node == b->numa_node)
        return NVML_TOPOLOGY_NODE;
    return NVML_TOPOLOGY_SYSTEM;
}

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                        nvmlGpuTopologyLevel_t *path)
{
    lock();
    nvmlReturn_t rc = enter_pair("nvmlDeviceGetTopologyCommonAncestor", device1, device2);
    if (rc == NVML_SUCCESS && path == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && (device1->mig != NULL || device2->mig != NULL))
        rc = NVML_ERROR_NOT_SUPPORTED;
    else if (rc == NVML_SUCCESS)
        *path = common_ancestor(device1->gpu, device2->gpu);
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                             nvmlEnableState_t *active)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetNvLinkState", device);
    if (rc == NVML_SUCCESS && (active == NULL || link >= NVML_NVLINK_MAX_LINKS))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && !device->gpu->has_nvlink)
        rc = NVML_ERROR_NOT_SUPPORTED;
    else if (rc == NVML_SUCCESS)
        *active = device->gpu->link_peer[link] >= 0 ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    unlock();
    return rc;
}

static nvmlReturn_t get_nvlink_remote_pci_info(nvmlDevice_t device, unsigned int link,
                                               nvmlPciInfo_t *pci)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetNvLinkRemotePciInfo", device);
    if (rc == NVML_SUCCESS && (pci == NULL || link >= NVML_NVLINK_MAX_LINKS))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && device->gpu->link_peer[link] < 0)
        rc = NVML_ERROR_NOT_SUPPORTED;
    else if (rc == NVML_SUCCESS)
        fill_pci_info(&fake.gpus[device->gpu->link_peer[link]], pci);
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t d, unsigned int l,
                                                     nvmlPciInfo_t *p)
{
    return get_nvlink_remote_pci_info(d, l, p);
}
#ifndef FAKE_NVML_V1_ONLY
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int l,
                                                        nvmlPciInfo_t *p)
{
    return get_nvlink_remote_pci_info(d, l, p);
}
#endif

static bool nvlinked(const struct fake_gpu *a, const struct fake_gpu *b)
{
    for (size_t l = 0; l < NVML_NVLINK_MAX_LINKS; l++)
        if (a->link_peer[l] == (int)b->index)
            return true;
    return false;
}

EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                           nvmlGpuP2PCapsIndex_t index, nvmlGpuP2PStatus_t *status)
{
    lock();
    nvmlReturn_t rc = enter_pair("nvmlDeviceGetP2PStatus", device1, device2);
    if (rc == NVML_SUCCESS && status == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && index == NVML_P2P_CAPS_INDEX_NVLINK)
        *status = nvlinked(device1->gpu, device2->gpu) ? NVML_P2P_STATUS_OK
                                                       : NVML_P2P_STATUS_NOT_SUPPORTED;
    else if (rc == NVML_SUCCESS)
        *status = NVML_P2P_STATUS_OK;
    unlock();
    return rc;
}

/* ---- memory repairs ---------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                              unsigned int *uncRows, unsigned int *isPending,
                                              unsigned int *failureOccurred)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetRemappedRows", device);
    if (rc == NVML_SUCCESS && (!corrRows || !uncRows || !isPending || !failureOccurred))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && device->mig != NULL)
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS) {
        const struct fake_gpu *g = device->gpu;
        *corrRows = 0;
        *uncRows = g->remap_pending || g->remap_failure ? 1 : 0;
        *isPending = g->remap_pending ? 1 : 0;
        *failureOccurred = g->remap_failure ? 1 : 0;
    }
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                           nvmlEnableState_t *isPending)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetRetiredPagesPendingStatus", device);
    if (rc == NVML_SUCCESS && isPending == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && device->mig != NULL)
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS)
        *isPending =
            device->gpu->retired_pages_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    unlock();
    return rc;
}

/* ---- event sets ------------------------------------------------------------------------------- */

static bool valid_set(nvmlEventSet_t set)
{
    for (struct nvmlEventSet_st *s = fake.sets; s != NULL; s = s->next)
        if (s == set && s->magic == FAKE_MAGIC_SET)
            return true;
    return false;
}

/* Watches the control file's directory so that a waiter wakes as soon as
 * a test appends a line (the file itself may not exist yet). */
static int watch_control_dir(void)
{
    if (fake.control_path[0] == '\0')
        return -1;
    char dir[PATH_MAX];
    copy_string(dir, sizeof dir, fake.control_path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        copy_string(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0)
        return -1;
    if (inotify_add_watch(fd, dir, IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO) < 0) {
        fprintf(stderr, "fakenvml: inotify on %s: %s; events will be polled\n", dir,
                strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *out)
{
    lock();
    nvmlReturn_t rc = enter("nvmlEventSetCreate");
    struct nvmlEventSet_st *set = NULL;
    if (rc == NVML_SUCCESS && out == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        set = calloc(1, sizeof *set);
        if (set != NULL)
            set->masks = calloc(fake.gpu_count ? fake.gpu_count : 1, sizeof *set->masks);
        if (set == NULL || set->masks == NULL) {
            free(set);
            rc = NVML_ERROR_MEMORY;
        }
    }
    if (rc == NVML_SUCCESS) {
        set->magic = FAKE_MAGIC_SET;
        set->inotify_fd = watch_control_dir();
        set->next = fake.sets;
        fake.sets = set;
        *out = set;
    }
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceGetSupportedEventTypes", device);
    if (rc == NVML_SUCCESS && types == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS)
        *types = FAKE_SUPPORTED_EVENTS;
    unlock();
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                             nvmlEventSet_t set)
{
    lock();
    nvmlReturn_t rc = enter_device("nvmlDeviceRegisterEvents", device);
    if (rc == NVML_SUCCESS && !valid_set(set))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (rc == NVML_SUCCESS && (device->mig != NULL || (types & ~FAKE_SUPPORTED_EVENTS) != 0))
        rc = NVML_ERROR_NOT_SUPPORTED;
    else if (rc == NVML_SUCCESS)
        set->masks[device->gpu->index] |= types;
    unlock();
    return rc;
}

static long long monotonic_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Takes the oldest queued event; lock held. */
static bool pop_event(struct nvmlEventSet_st *set, nvmlEventData_t *data)
{
    if (set->count == 0)
        return false;
    struct fake_event event = set->queue[set->head];
    set->head = (set->head + 1) % set->capacity;
    set->count--;
    *data = (nvmlEventData_t){event.device, event.type, event.data, event.gi, event.ci};
    log_delivered_event(&event);
    return true;
}

static void sleep_until_change(int inotify_fd, long long wait_ms)
{
    if (inotify_fd < 0) {
        /* No control file to watch: poll it now and then instead. */
        struct timespec nap = {0, (wait_ms > 10 ? 10 : wait_ms) * 1000000L};
        nanosleep(&nap, NULL);
        return;
    }
    struct pollfd pfd = {inotify_fd, POLLIN, 0};
    if (poll(&pfd, 1, wait_ms > INT_MAX ? INT_MAX : (int)wait_ms) > 0) {
        char drain[4096];
        while (read(inotify_fd, drain, sizeof drain) > 0)
            ;
    }
}

static nvmlReturn_t event_set_wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout)
{
    long long deadline = monotonic_ms() + timeout;
    for (;;) {
        lock();
        nvmlReturn_t rc = enter("nvmlEventSetWait");
        if (rc == NVML_SUCCESS && (data == NULL || !valid_set(set)))
            rc = NVML_ERROR_INVALID_ARGUMENT;
        bool delivered = rc == NVML_SUCCESS && pop_event(set, data);
        int inotify_fd = rc == NVML_SUCCESS ? set->inotify_fd : -1;
        unlock();
        if (rc != NVML_SUCCESS || delivered)
            return rc;
        long long left = deadline - monotonic_ms();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        /* The set must not be freed while a thread waits on it, as in NVML. */
        sleep_until_change(inotify_fd, left);
    }
}

EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t s, nvmlEventData_t *d, unsigned int t)
{
    return event_set_wait(s, d, t);
}
#ifndef FAKE_NVML_V1_ONLY
EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t s, nvmlEventData_t *d, unsigned int t)
{
    return event_set_wait(s, d, t);
}
#endif

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    lock();
    nvmlReturn_t rc = enter("nvmlEventSetFree");
    if (rc == NVML_SUCCESS && !valid_set(set))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        for (struct nvmlEventSet_st **link = &fake.sets; *link != NULL; link = &(*link)->next) {
            if (*link == set) {
                *link = set->next;
                break;
            }
        }
        if (set->inotify_fd >= 0)
            close(set->inotify_fd);
        free(set->masks);
        free(set->queue);
        set->magic = 0;
        free(set);
    }
    unlock();
    return rc;
}
