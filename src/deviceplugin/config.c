/* config.c -- NVIDIA-compatible configuration (config.h).
 *
 * Design: ONE table, `options[]`, has a row per option with its flag name
 * and aliases, environment variables, config-file / JSON path, type, field
 * and default. Everything else is generated from it: argv and environment
 * parsing, the `flags:` / `imex:` part of the file walk, defaults, the JSON
 * dump and --help. Only the structured parts of the file (resources.* and
 * sharing.*) have their own small walkers, because they are lists of records
 * rather than options.
 *
 * Order of work in config_load(): defaults, then the file, then the
 * environment, then argv. Each step overwrites only the fields it actually
 * names, so precedence is flag > environment > file > default per field.
 * Every value goes through the same bounded parser whatever its source; only
 * the way an error is worded differs. */
#include "config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "log.h"
#include "yamlcfg.h"

#ifndef GP_VERSION
#define GP_VERSION "unknown"
#endif

#define PROGRAM "gpupool-device-plugin"
#define RESOURCE_PREFIX "nvidia.com/"
#define SHARED_SUFFIX ".shared"
#define NO_FIELD SIZE_MAX
#define FIELD(f) offsetof(struct gp_config, f)
#define WHY_LEN 192

/* Enum fields are written through an int: make sure that is their size. */
static_assert(sizeof(enum mig_strategy) == sizeof(int), "enum size");
static_assert(sizeof(enum device_id_strategy) == sizeof(int), "enum size");
static_assert(sizeof(enum shared_alloc_policy) == sizeof(int), "enum size");
static_assert(sizeof(enum device_discovery_strategy) == sizeof(int), "enum size");

enum opt_type {
    T_STRING,   /* char *, strdup'd */
    T_STRLIST,  /* char *, repeated / comma-separated values joined with ',' */
    T_BOOL,     /* bool */
    T_INT,      /* int in [min, INT_MAX] */
    T_DURATION, /* int milliseconds >= min, Go syntax ("5s", "1m30s", "500ms") */
    T_ENUM,     /* int, one of `values` */
    T_ENUM_SET, /* unsigned bit set of `values`; repeated / comma-separated */
    T_IMEX_IDS, /* size_t count of channel IDs: only [] and [0] are valid */
    T_HELP,     /* action: print usage */
    T_VERSION,  /* action: print version */
};

struct enum_value {
    const char *name;
    int value;
    const char *unsupported; /* non-NULL: a known NVIDIA value gpupool refuses */
};

struct option {
    const char *flag;     /* long name without dashes; NULL = environment only */
    const char *alias[2]; /* further names of the flag */
    const char *env[2];   /* environment variables, first set wins */
    const char *path;     /* dotted config-file / JSON key; NULL = neither */
    bool in_file;         /* path is accepted in the config file (else JSON only) */
    enum opt_type type;
    size_t offset;        /* field in struct gp_config; NO_FIELD = validated, dropped */
    const char *def;      /* default, parsed like any value; NULL = leave zero */
    long min;             /* T_INT, T_DURATION (ms): smallest valid value */
    const struct enum_value *values; /* T_ENUM, T_ENUM_SET */
    const char *help;
};

static const struct enum_value mig_values[] = {
    {"none", MIG_STRATEGY_NONE, NULL},
    {"single", MIG_STRATEGY_SINGLE, NULL},
    {"mixed", MIG_STRATEGY_MIXED, NULL},
    {NULL, 0, NULL},
};
static const struct enum_value list_values[] = {
    {"envvar", DEVICE_LIST_ENVVAR, NULL},
    {"volume-mounts", DEVICE_LIST_VOLUME_MOUNTS, NULL},
    {"cdi-annotations", DEVICE_LIST_CDI_ANNOTATIONS, NULL},
    {"cdi-cri", DEVICE_LIST_CDI_CRI, NULL},
    {NULL, 0, NULL},
};
static const struct enum_value id_values[] = {
    {"uuid", DEVICE_ID_UUID, NULL},
    {"index", DEVICE_ID_INDEX, NULL},
    {NULL, 0, NULL},
};
static const struct enum_value policy_values[] = {
    {"distributed", SHARED_ALLOC_DISTRIBUTED, NULL},
    {"packed", SHARED_ALLOC_PACKED, NULL},
    {NULL, 0, NULL},
};
static const struct enum_value discovery_values[] = {
    {"auto", DEVICE_DISCOVERY_AUTO, NULL},
    {"nvml", DEVICE_DISCOVERY_NVML, NULL},
    {"tegra", 0, "tegra (Jetson) devices are not supported by gpupool"},
    {NULL, 0, NULL},
};

/* The option table. Rows with in_file and no flag are GFD's keys of the
 * shared NVIDIA file: accepted and type-checked, then ignored. */
static const struct option options[] = {
    {"mig-strategy", {0}, {"MIG_STRATEGY"}, "flags.migStrategy", true, T_ENUM,
     FIELD(mig_strategy), "none", 0, mig_values,
     "the desired strategy for exposing MIG devices on GPUs that support it"},
    {"fail-on-init-error", {0}, {"FAIL_ON_INIT_ERROR"}, "flags.failOnInitError", true, T_BOOL,
     FIELD(fail_on_init_error), "true", 0, NULL,
     "fail the plugin if an error is encountered during initialization, otherwise block "
     "indefinitely"},
    {"driver-root", {"nvidia-driver-root"}, {"NVIDIA_DRIVER_ROOT"}, "flags.nvidiaDriverRoot",
     true, T_STRING, FIELD(nvidia_driver_root), "/", 0, NULL,
     "the root path for the NVIDIA driver installation (typically / or /run/nvidia/driver)"},
    {"dev-root", {"nvidia-dev-root"}, {"NVIDIA_DEV_ROOT"}, "flags.nvidiaDevRoot", true, T_STRING,
     FIELD(nvidia_dev_root), "", 0, NULL,
     "the root path for the NVIDIA device nodes; empty = the driver root"},
    {"pass-device-specs", {0}, {"PASS_DEVICE_SPECS"}, "flags.plugin.passDeviceSpecs", true,
     T_BOOL, FIELD(pass_device_specs), "false", 0, NULL,
     "pass the list of DeviceSpecs to the kubelet on Allocate()"},
    {"device-list-strategy", {0}, {"DEVICE_LIST_STRATEGY"}, "flags.plugin.deviceListStrategy",
     true, T_ENUM_SET, FIELD(device_list_strategy), "envvar", 0, list_values,
     "the desired strategy for passing the device list to the underlying runtime; several "
     "may be given (repeated flag or comma-separated)"},
    {"device-id-strategy", {0}, {"DEVICE_ID_STRATEGY"}, "flags.plugin.deviceIDStrategy", true,
     T_ENUM, FIELD(device_id_strategy), "uuid", 0, id_values,
     "the desired strategy for passing device IDs to the underlying runtime"},
    {"gdrcopy-enabled", {0}, {"GDRCOPY_ENABLED"}, "flags.gdrcopyEnabled", true, T_BOOL,
     FIELD(gdrcopy_enabled), "false", 0, NULL,
     "ensure that containers that request NVIDIA GPU resources are started with GDRCopy support"},
    {"gds-enabled", {0}, {"GDS_ENABLED"}, "flags.gdsEnabled", true, T_BOOL, FIELD(gds_enabled),
     "false", 0, NULL,
     "ensure that containers that request NVIDIA GPU resources are started with GPUDirect "
     "Storage support"},
    {"mofed-enabled", {0}, {"MOFED_ENABLED"}, "flags.mofedEnabled", true, T_BOOL,
     FIELD(mofed_enabled), "false", 0, NULL,
     "ensure that containers that request NVIDIA GPU resources are started with MOFED support"},
    {"cdi-annotation-prefix", {0}, {"CDI_ANNOTATION_PREFIX"}, "flags.plugin.cdiAnnotationPrefix",
     true, T_STRING, FIELD(cdi_annotation_prefix), "cdi.k8s.io/", 0, NULL,
     "the prefix to use for CDI container annotation keys"},
    {"nvidia-cdi-hook-path", {"nvidia-ctk-path"}, {"NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"},
     "flags.plugin.nvidiaCTKPath", true, T_STRING, FIELD(nvidia_ctk_path), "/usr/bin/nvidia-ctk",
     0, NULL, "the path to use for NVIDIA CDI hooks in the generated CDI specification"},
    {"driver-root-ctr-path", {"container-driver-root"},
     {"DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"}, "flags.plugin.containerDriverRoot", true,
     T_STRING, FIELD(container_driver_root), "/driver-root", 0, NULL,
     "the path where the NVIDIA driver root is mounted in the container"},
    {"mps-root", {0}, {"MPS_ROOT"}, "flags.mpsRoot", true, T_STRING, FIELD(mps_root), "", 0, NULL,
     "the MPS root path on the host (MPS sharing itself is not supported by gpupool)"},
    {"shared-devices-allocation-policy", {0}, {"SHARED_DEVICES_ALLOCATION_POLICY"},
     "flags.plugin.sharedDevicesAllocationPolicy", true, T_ENUM, FIELD(shared_alloc_policy),
     "distributed", 0, policy_values,
     "how replicas of shared GPUs are preferred: spread over GPUs or packed onto few"},
    {"device-discovery-strategy", {0}, {"DEVICE_DISCOVERY_STRATEGY"},
     "flags.deviceDiscoveryStrategy", true, T_ENUM, FIELD(device_discovery_strategy), "auto", 0,
     discovery_values, "the strategy used to discover devices (gpupool always uses NVML)"},
    {"imex-channel-ids", {0}, {"IMEX_CHANNEL_IDS"}, "imex.channelIDs", true, T_IMEX_IDS,
     FIELD(imex_channel_count), NULL, 0, NULL,
     "IMEX channel IDs to inject into containers; the only valid lists are none and 0"},
    {"imex-required", {0}, {"IMEX_REQUIRED"}, "imex.required", true, T_BOOL,
     FIELD(imex_required), "false", 0, NULL,
     "fail an allocation when a requested IMEX channel cannot be found"},
    {"kubelet-socket", {0}, {"KUBELET_SOCKET"}, "gpupool.kubeletSocket", false, T_STRING,
     FIELD(kubelet_socket), "/var/lib/kubelet/device-plugins/kubelet.sock", 0, NULL,
     "the kubelet's registration socket; its directory holds the plugin sockets; empty = do "
     "not register"},
    {"config-file", {0}, {"CONFIG_FILE"}, "gpupool.configFile", false, T_STRING,
     FIELD(config_file), "", 0, NULL, "the path to a config file (NVIDIA's `version: v1` format)"},
    {"cdi-feature-flags", {0}, {"CDI_FEATURE_FLAGS"}, "gpupool.cdiFeatureFlags", false, T_STRLIST,
     FIELD(cdi_feature_flags), "", 0, NULL,
     "feature flags for CDI specification generation (repeated or comma-separated)"},
    {"cdi-disable-hooks", {0}, {"CDI_DISABLE_HOOKS"}, "gpupool.cdiDisableHooks", false,
     T_STRLIST, FIELD(cdi_disable_hooks), "", 0, NULL,
     "OCI hooks to leave out of generated CDI specifications; `all` drops every hook"},
    {"health-recovery-probes", {0}, {"GP_HEALTH_RECOVERY_PROBES"}, "flags.health.recoveryProbes",
     true, T_INT, FIELD(health_recovery_probes), "3", 0, NULL,
     "gpupool: consecutive good NVML probes that bring an Unhealthy GPU back; 0 = never"},
    {"health-probe-interval", {0}, {"GP_HEALTH_PROBE_INTERVAL"}, "flags.health.probeInterval",
     true, T_DURATION, FIELD(health_probe_interval_ms), "5s", 1, NULL,
     "gpupool: time between recovery probes of an Unhealthy GPU (Go duration: 5s, 500ms)"},
    {"v", {0}, {0}, "gpupool.verbosity", false, T_INT, FIELD(verbosity), "0", 0, NULL,
     "log verbosity (klog -v)"},
    {NULL, {0}, {"DP_DISABLE_HEALTHCHECKS"}, "gpupool.disableHealthchecks", false, T_STRING,
     FIELD(disable_healthchecks), NULL, 0, NULL,
     "`all`, `xids` or a comma-separated list of XIDs that do not make a GPU Unhealthy"},
    {NULL, {0}, {"DP_ENABLE_HEALTHCHECKS"}, "gpupool.enableHealthchecks", false, T_STRING,
     FIELD(enable_healthchecks), NULL, 0, NULL,
     "`all` or a comma-separated list of XIDs that make a GPU Unhealthy even if ignored"},
    /* gpu-feature-discovery's keys of the shared file. */
    {NULL, {0}, {0}, "flags.useNodeFeatureAPI", true, T_BOOL, NO_FIELD, NULL, 0, NULL, NULL},
    {NULL, {0}, {0}, "flags.gfd.oneshot", true, T_BOOL, NO_FIELD, NULL, 0, NULL, NULL},
    {NULL, {0}, {0}, "flags.gfd.noTimestamp", true, T_BOOL, NO_FIELD, NULL, 0, NULL, NULL},
    {NULL, {0}, {0}, "flags.gfd.sleepInterval", true, T_DURATION, NO_FIELD, NULL, 0, NULL, NULL},
    {NULL, {0}, {0}, "flags.gfd.outputFile", true, T_STRING, NO_FIELD, NULL, 0, NULL, NULL},
    {NULL, {0}, {0}, "flags.gfd.machineTypeFile", true, T_STRING, NO_FIELD, NULL, 0, NULL, NULL},
    {"help", {"h"}, {0}, NULL, false, T_HELP, NO_FIELD, NULL, 0, NULL, "show help"},
    {"version", {0}, {0}, NULL, false, T_VERSION, NO_FIELD, NULL, 0, NULL, "print the version"},
};

#define OPTION_COUNT (sizeof options / sizeof options[0])

/* ------------------------------------------------------------------ */
/* Bounded value parsers: 0 and the value, or -1 with `why` filled.    */

static int errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* "want a, b or c" from a value list, unsupported entries left out. */
static void want_values(const struct enum_value *v, char *why, size_t len)
{
    size_t n = 0, k = 0;
    while (v[n].name != NULL)
        n++;
    size_t supported = 0;
    for (size_t i = 0; i < n; i++)
        supported += v[i].unsupported == NULL;
    size_t used = (size_t)snprintf(why, len, "want ");
    for (size_t i = 0; i < n && used < len; i++) {
        if (v[i].unsupported != NULL)
            continue;
        k++;
        const char *sep = k == 1 ? "" : k == supported ? " or " : ", ";
        used += (size_t)snprintf(why + used, len - used, "%s%s", sep, v[i].name);
    }
}

static int parse_bool(const char *s, bool *out)
{
    if (strcasecmp(s, "true") == 0 || strcmp(s, "1") == 0) {
        *out = true;
        return 0;
    }
    if (strcasecmp(s, "false") == 0 || strcmp(s, "0") == 0) {
        *out = false;
        return 0;
    }
    return -1;
}

/* Decimal integer in [min, max]; no blanks, no trailing text. */
static int parse_long(const char *s, long min, long max, long *out)
{
    if (s[0] == '\0' || isspace((unsigned char)s[0]))
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

struct duration_unit {
    const char *name;
    uint64_t ns;
};

static const struct duration_unit duration_units[] = {
    {"ns", 1},
    {"us", 1000},
    {"\xc2\xb5s", 1000}, /* U+00B5 micro sign, as Go accepts */
    {"\xce\xbcs", 1000}, /* U+03BC Greek mu */
    {"ms", 1000000},
    {"s", 1000000000ull},
    {"m", 60000000000ull},
    {"h", 3600000000000ull},
};

/* Longest unit name that starts at s (so "ms" is not read as "m"). */
static const struct duration_unit *duration_unit_at(const char *s, size_t *len)
{
    const struct duration_unit *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < sizeof duration_units / sizeof duration_units[0]; i++) {
        size_t l = strlen(duration_units[i].name);
        if (l > best_len && strncmp(s, duration_units[i].name, l) == 0) {
            best = &duration_units[i];
            best_len = l;
        }
    }
    *len = best_len;
    return best;
}

/* Go's time.ParseDuration syntax, non-negative: ("1.5h", "1m30s", "500ms",
 * "0"), converted to whole milliseconds; at most INT_MAX ms. */
static int parse_duration_ms(const char *s, int *out_ms)
{
    if (strcmp(s, "0") == 0) {
        *out_ms = 0;
        return 0;
    }
    if (*s == '+')
        s++;
    if (*s == '\0')
        return -1;
    const long double limit = (long double)INT_MAX * 1e6L;
    long double total_ns = 0;
    while (*s != '\0') {
        uint64_t whole = 0, frac = 0, scale = 1;
        bool digits = false;
        for (; isdigit((unsigned char)*s); s++, digits = true) {
            if (whole > (UINT64_MAX - 9) / 10)
                return -1;
            whole = whole * 10 + (uint64_t)(*s - '0');
        }
        if (*s == '.') {
            for (s++; isdigit((unsigned char)*s); s++, digits = true)
                if (scale < 1000000000000000000ull) { /* extra digits cannot matter */
                    frac = frac * 10 + (uint64_t)(*s - '0');
                    scale *= 10;
                }
        }
        size_t ulen;
        const struct duration_unit *u = duration_unit_at(s, &ulen);
        if (!digits || u == NULL)
            return -1;
        s += ulen;
        total_ns += (long double)whole * u->ns + (long double)frac / scale * u->ns;
        if (total_ns > limit)
            return -1;
    }
    *out_ms = (int)(total_ns / 1e6L);
    return 0;
}

/* Go-style rendering of whole milliseconds for the JSON dump. */
static void format_duration(int ms, char *buf, size_t len)
{
    if (ms == 0)
        snprintf(buf, len, "0s");
    else if (ms % 3600000 == 0)
        snprintf(buf, len, "%dh", ms / 3600000);
    else if (ms % 60000 == 0)
        snprintf(buf, len, "%dm", ms / 60000);
    else if (ms % 1000 == 0)
        snprintf(buf, len, "%ds", ms / 1000);
    else
        snprintf(buf, len, "%dms", ms);
}

static const struct enum_value *find_value(const struct enum_value *v, const char *name,
                                           size_t len)
{
    for (; v->name != NULL; v++)
        if (strlen(v->name) == len && strncmp(v->name, name, len) == 0)
            return v;
    return NULL;
}

static const char *value_name(const struct enum_value *v, int value)
{
    for (; v->name != NULL; v++)
        if (v->unsupported == NULL && v->value == value)
            return v->name;
    return "?";
}

/* ------------------------------------------------------------------ */
/* Setting one option from text (every source comes through here).     */

/* Scratch storage for NO_FIELD rows: parsed for validation, then dropped. */
union scratch {
    char *s;
    bool b;
    int i;
    unsigned u;
    size_t z;
};

static void *field_of(const struct option *o, struct gp_config *cfg, union scratch *tmp)
{
    return o->offset == NO_FIELD ? (void *)tmp : (char *)cfg + o->offset;
}

static int set_string(char **field, const char *text, bool append)
{
    char *v;
    if (append && *field != NULL && **field != '\0' && *text != '\0') {
        size_t a = strlen(*field), b = strlen(text);
        v = malloc(a + b + 2);
        if (v != NULL) {
            memcpy(v, *field, a);
            v[a] = ',';
            memcpy(v + a + 1, text, b + 1);
        }
    } else {
        v = strdup(append && *field != NULL && *text == '\0' ? *field : text);
    }
    if (v == NULL)
        return -1;
    free(*field);
    *field = v;
    return 0;
}

/* Comma-separated values of a set; on error `why` starts with the
 * offending token (see value_error). */
static int set_enum_set(const struct option *o, unsigned *field, const char *text, bool append,
                        char *why, size_t whylen)
{
    unsigned bits = append ? *field : 0;
    const char *p = text;
    for (;;) {
        size_t len = strcspn(p, ",");
        const struct enum_value *v = find_value(o->values, p, len);
        if (v == NULL || v->unsupported != NULL) {
            char w[WHY_LEN];
            want_values(o->values, w, sizeof w);
            return errf(why, whylen, "%.*s\x1f%s", (int)len, p, w);
        }
        bits |= (unsigned)v->value;
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    *field = bits;
    return 0;
}

/* IMEX channel IDs: NVIDIA only supports the empty list and [0]. */
static int set_imex_ids(size_t *field, const char *text, bool append, char *why, size_t whylen)
{
    size_t count = append ? *field : 0;
    const char *p = text;
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        char tok[32];
        long id;
        if (len == 0 || len >= sizeof tok)
            return errf(why, whylen, "want a list of integers");
        memcpy(tok, p, len);
        tok[len] = '\0';
        if (parse_long(tok, 0, INT_MAX, &id) != 0)
            return errf(why, whylen, "want a list of integers");
        if (id != 0 || ++count > 1)
            return errf(why, whylen, "the only valid channel lists are [] and [0]");
        p += len + (p[len] == ',');
    }
    *field = count;
    return 0;
}

/* Parses `text` into the option's field. On error `why` says what is
 * wanted; for sets it is "<bad token>\x1f<want ...>" (see value_error). */
static int set_option(const struct option *o, struct gp_config *cfg, const char *text,
                      bool append, char *why, size_t whylen)
{
    union scratch tmp = {0};
    void *field = field_of(o, cfg, &tmp);
    long l;
    int rc = 0;
    switch (o->type) {
    case T_STRING:
    case T_STRLIST:
        if (set_string(field, text, o->type == T_STRLIST && append) != 0)
            rc = errf(why, whylen, "out of memory");
        if (o->offset == NO_FIELD)
            free(tmp.s);
        break;
    case T_BOOL:
        if (parse_bool(text, field) != 0)
            rc = errf(why, whylen, "want true or false");
        break;
    case T_INT:
        if (parse_long(text, o->min, INT_MAX, &l) != 0)
            rc = errf(why, whylen, "want an integer >= %ld", o->min);
        else
            *(int *)field = (int)l;
        break;
    case T_DURATION: {
        int ms;
        if (parse_duration_ms(text, &ms) != 0 || ms < o->min)
            rc = errf(why, whylen, "want a duration such as 5s or 500ms%s",
                      o->min > 0 ? " (at least 1ms)" : "");
        else
            *(int *)field = ms;
        break;
    }
    case T_ENUM: {
        const struct enum_value *v = find_value(o->values, text, strlen(text));
        char w[WHY_LEN];
        want_values(o->values, w, sizeof w);
        if (v == NULL)
            rc = errf(why, whylen, "%s", w);
        else if (v->unsupported != NULL)
            rc = errf(why, whylen, "%s (%s)", v->unsupported, w);
        else
            *(int *)field = v->value;
        break;
    }
    case T_ENUM_SET:
        rc = set_enum_set(o, field, text, append, why, whylen);
        break;
    case T_IMEX_IDS:
        rc = set_imex_ids(field, text, append, why, whylen);
        break;
    case T_HELP:
    case T_VERSION:
        break;
    }
    return rc;
}

/* "--mig-strategy (MIG_STRATEGY)", "-v", "DP_DISABLE_HEALTHCHECKS". */
static void option_label(const struct option *o, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    if (o->flag != NULL)
        used = (size_t)snprintf(buf, len, "%s%s%s", strlen(o->flag) == 1 ? "-" : "--", o->flag,
                                o->env[0] != NULL ? " (" : "");
    for (size_t i = 0; i < 2 && o->env[i] != NULL && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", o->env[i]);
    if (o->flag != NULL && o->env[0] != NULL && used < len)
        snprintf(buf + used, len - used, ")");
}

/* Formats a set_option() failure: `invalid value "x" for <what>: <why>`. */
static void value_error(char *err, size_t errlen, const char *prefix, const char *what,
                        const char *text, const char *why)
{
    const char *sep = strchr(why, '\x1f');
    if (sep != NULL) /* a set names its bad token, not the whole value */
        snprintf(err, errlen, "%sinvalid value \"%.*s\" for %s: %s", prefix, (int)(sep - why),
                 why, what, sep + 1);
    else
        snprintf(err, errlen, "%sinvalid value \"%s\" for %s: %s", prefix, text, what, why);
}

static int set_from_cli(const struct option *o, struct gp_config *cfg, const char *text,
                        bool append, char *err, size_t errlen)
{
    char why[WHY_LEN], label[128];
    if (set_option(o, cfg, text, append, why, sizeof why) == 0)
        return 0;
    option_label(o, label, sizeof label);
    value_error(err, errlen, "", label, text, why);
    return -1;
}

/* ------------------------------------------------------------------ */
/* Command line.                                                       */

struct flag_use {
    const struct option *o;
    const char *value;
};

static const struct option *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        const struct option *o = &options[i];
        const char *names[3] = {o->flag, o->alias[0], o->alias[1]};
        for (size_t k = 0; k < 3; k++)
            if (names[k] != NULL && strlen(names[k]) == len && strncmp(names[k], name, len) == 0)
                return o;
    }
    return NULL;
}

static bool takes_value(const struct option *o)
{
    return o->type != T_BOOL && o->type != T_HELP && o->type != T_VERSION;
}

static void append_text(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append_text(char *err, size_t errlen, const char *fmt, ...)
{
    size_t used = strnlen(err, errlen);
    if (used + 1 >= errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + used, errlen - used, fmt, ap);
    va_end(ap);
}

/* urfave/cli syntax: -flag / --flag, `=value` or the next argument, bools
 * without a value mean true. Unknown flags are all collected, so one run
 * names every mistake. `uses` must hold argc entries. */
static int scan_argv(int argc, char **argv, struct flag_use *uses, size_t *n_uses,
                     enum opt_type *action, char *err, size_t errlen)
{
    size_t unknown = 0;
    char names[512] = "";
    *n_uses = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0 || arg[0] != '-' || arg[1] == '\0') {
            int at = strcmp(arg, "--") == 0 ? i + 1 : i;
            if (at < argc)
                return errf(err, errlen, "unexpected argument \"%s\": %s takes no arguments",
                            argv[at], PROGRAM);
            break;
        }
        const char *name = arg + (arg[1] == '-' ? 2 : 1);
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct option *o = find_flag(name, len);
        if (o == NULL) {
            append_text(names, sizeof names, "%s%.*s", unknown++ ? ", " : "",
                        (int)(eq ? (size_t)(eq - arg) : strlen(arg)), arg);
            continue;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (value == NULL && takes_value(o)) {
            if (i + 1 >= argc)
                return errf(err, errlen, "flag needs an argument: %s", arg);
            value = argv[++i];
        }
        if (value != NULL && (o->type == T_HELP || o->type == T_VERSION))
            return errf(err, errlen, "flag takes no value: %.*s", (int)(eq - arg), arg);
        if (o->type == T_HELP || o->type == T_VERSION) {
            if (*action != T_HELP)
                *action = o->type;
            continue;
        }
        uses[(*n_uses)++] = (struct flag_use){o, value ? value : "true"};
    }
    if (unknown > 0)
        return errf(err, errlen, "unknown flag%s: %s (see --help)", unknown > 1 ? "s" : "",
                    names);
    return 0;
}

/* argv values in order; a repeated list flag accumulates, anything else
 * takes its last value (urfave/cli). */
static int apply_flags(struct gp_config *cfg, const struct flag_use *uses, size_t n, char *err,
                       size_t errlen)
{
    bool seen[OPTION_COUNT] = {false};
    for (size_t i = 0; i < n; i++) {
        size_t idx = (size_t)(uses[i].o - options);
        if (set_from_cli(uses[i].o, cfg, uses[i].value, seen[idx], err, errlen) != 0)
            return -1;
        seen[idx] = true;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Environment.                                                        */

static const char *env_lookup(char **envp, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++)
        if (strncmp(envp[i], name, len) == 0 && envp[i][len] == '=')
            return envp[i] + len + 1;
    return NULL;
}

static const char *option_env(const struct option *o, char **envp)
{
    for (size_t i = 0; i < 2 && o->env[i] != NULL; i++) {
        const char *v = env_lookup(envp, o->env[i]);
        if (v != NULL)
            return v;
    }
    return NULL;
}

/* An empty variable is "unset" except for strings, where "" is a value
 * (KUBELET_SOCKET="" means: do not register). */
static int apply_env(struct gp_config *cfg, char **envp, char *err, size_t errlen)
{
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        const struct option *o = &options[i];
        const char *v = option_env(o, envp);
        if (v == NULL || (v[0] == '\0' && o->type != T_STRING))
            continue;
        if (set_from_cli(o, cfg, v, false, err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Config file.                                                        */

struct file_ctx {
    const char *path;
    const struct ycfg_doc *doc;
    struct gp_config *cfg;
    char *err;
    size_t errlen;
};

static int ferr(const struct file_ctx *fc, const struct ycfg_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int ferr(const struct file_ctx *fc, const struct ycfg_node *n, const char *fmt, ...)
{
    int used = snprintf(fc->err, fc->errlen, "%s:%d: ", fc->path, ycfg_line(n));
    if (used < 0 || (size_t)used >= fc->errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fc->err + used, fc->errlen - (size_t)used, fmt, ap);
    va_end(ap);
    return -1;
}

/* Keys must be scalars and unique: libyaml keeps duplicates, and silently
 * taking one of them hides a typo. */
static int check_keys(const struct file_ctx *fc, const struct ycfg_node *map, const char *where)
{
    size_t n = ycfg_count(map);
    for (size_t i = 0; i < n; i++) {
        const struct ycfg_node *k, *v;
        ycfg_pair(fc->doc, map, i, &k, &v);
        if (ycfg_kind(k) != YCFG_SCALAR)
            return ferr(fc, k, "%s: keys must be strings, got %s", where, ycfg_kind_name(k));
        for (size_t j = 0; j < i; j++) {
            const struct ycfg_node *k2, *v2;
            ycfg_pair(fc->doc, map, j, &k2, &v2);
            if (strcmp(ycfg_text(k), ycfg_text(k2)) == 0)
                return ferr(fc, k, "duplicate key \"%s%s%s\" (first at line %d)", where,
                            *where ? "." : "", ycfg_text(k), ycfg_line(k2));
        }
    }
    return 0;
}

/* A section must be a mapping (or empty); its keys are then checked. */
static int want_mapping(const struct file_ctx *fc, const struct ycfg_node *n, const char *where)
{
    if (ycfg_kind(n) == YCFG_NULL)
        return 0;
    if (ycfg_kind(n) != YCFG_MAPPING)
        return ferr(fc, n, "%s: want a mapping, got %s", where, ycfg_kind_name(n));
    return check_keys(fc, n, where);
}

static const char *type_name(enum opt_type t)
{
    switch (t) {
    case T_BOOL:
        return "a bool";
    case T_INT:
        return "an integer";
    case T_DURATION:
        return "a duration";
    case T_ENUM_SET:
        return "a string or a list of strings";
    case T_IMEX_IDS:
        return "a list of integers";
    default:
        return "a string";
    }
}

/* Scalars YAML types as bool or number: a quoted "true" or "4" is a string
 * to NVIDIA's Go decoder too, and is refused the same way. */
static bool needs_plain(enum opt_type t)
{
    return t == T_BOOL || t == T_INT || t == T_IMEX_IDS;
}

static int file_scalar(const struct file_ctx *fc, const struct option *o,
                       const struct ycfg_node *n, bool append)
{
    if (ycfg_kind(n) != YCFG_SCALAR && !(ycfg_kind(n) == YCFG_NULL && o->type == T_STRING))
        return ferr(fc, n, "%s: want %s, got %s", o->path, type_name(o->type), ycfg_kind_name(n));
    if (needs_plain(o->type) && ycfg_quoted(n))
        return ferr(fc, n, "%s: want %s, got a string", o->path, type_name(o->type));
    const char *text = ycfg_kind(n) == YCFG_NULL ? "" : ycfg_text(n);
    bool b;
    /* YAML 1.1 (NVIDIA's decoder) also spells booleans yes/no/on/off. */
    if (o->type == T_BOOL && parse_bool(text, &b) != 0) {
        if (strcasecmp(text, "yes") == 0 || strcasecmp(text, "on") == 0)
            text = "true";
        else if (strcasecmp(text, "no") == 0 || strcasecmp(text, "off") == 0)
            text = "false";
    }
    char why[WHY_LEN], prefix[4096 + 16];
    if (set_option(o, fc->cfg, text, append, why, sizeof why) == 0)
        return 0;
    snprintf(prefix, sizeof prefix, "%s:%d: ", fc->path, ycfg_line(n));
    value_error(fc->err, fc->errlen, prefix, o->path, text, why);
    return -1;
}

/* One option's value: a scalar, or a list for list-typed options. */
static int file_option(const struct file_ctx *fc, const struct option *o,
                       const struct ycfg_node *n)
{
    bool list = o->type == T_ENUM_SET || o->type == T_IMEX_IDS;
    if (ycfg_kind(n) != YCFG_SEQUENCE) {
        if (o->type == T_IMEX_IDS)
            return ferr(fc, n, "%s: want %s, got %s", o->path, type_name(o->type),
                        ycfg_kind_name(n));
        return file_scalar(fc, o, n, false);
    }
    if (!list)
        return ferr(fc, n, "%s: want %s, got a list", o->path, type_name(o->type));
    size_t count = ycfg_count(n);
    if (count == 0 && o->type == T_ENUM_SET)
        return ferr(fc, n, "%s: want at least one strategy", o->path);
    union scratch tmp = {0};
    void *field = field_of(o, fc->cfg, &tmp);
    if (o->type == T_ENUM_SET)
        *(unsigned *)field = 0;
    else
        *(size_t *)field = 0;
    for (size_t i = 0; i < count; i++)
        if (file_scalar(fc, o, ycfg_item(fc->doc, n, i), true) != 0)
            return -1;
    return 0;
}

static const struct option *file_option_at(const char *path)
{
    for (size_t i = 0; i < OPTION_COUNT; i++)
        if (options[i].in_file && strcmp(options[i].path, path) == 0)
            return &options[i];
    return NULL;
}

static bool is_section(const char *path)
{
    size_t len = strlen(path);
    for (size_t i = 0; i < OPTION_COUNT; i++)
        if (options[i].in_file && strncmp(options[i].path, path, len) == 0 &&
            options[i].path[len] == '.')
            return true;
    return false;
}

/* Table-driven part of the file: `flags:` and `imex:` down to their leaves. */
static int file_options(const struct file_ctx *fc, const char *prefix,
                        const struct ycfg_node *key, const struct ycfg_node *value)
{
    char path[256];
    if ((size_t)snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "",
                         ycfg_text(key)) >= sizeof path)
        return ferr(fc, key, "unknown key \"%s\"", ycfg_text(key));
    const struct option *o = file_option_at(path);
    if (o != NULL)
        return file_option(fc, o, value);
    if (!is_section(path))
        return ferr(fc, key, "unknown key \"%s\"", path);
    if (want_mapping(fc, value, path) != 0)
        return -1;
    for (size_t i = 0; i < ycfg_count(value); i++) {
        const struct ycfg_node *k, *v;
        ycfg_pair(fc->doc, value, i, &k, &v);
        if (file_options(fc, path, k, v) != 0)
            return -1;
    }
    return 0;
}

/* "where.key" and "where[i]" for messages; overlong paths are cut short
 * (the return value is checked only to say truncation is fine here). */
static void path_key(char *buf, size_t len, const char *where, const char *key)
{
    if (snprintf(buf, len, "%s.%s", where, key) < 0)
        buf[0] = '\0';
}

static void path_index(char *buf, size_t len, const char *where, size_t i)
{
    if (snprintf(buf, len, "%s[%zu]", where, i) < 0)
        buf[0] = '\0';
}

/* --- resource names ---------------------------------------------- */

static bool dns_label_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* RFC 1123 subdomain: dot-separated labels of [a-z0-9-], alphanumeric at
 * both ends, at most 253 characters. */
static bool is_dns1123_subdomain(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > 253)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool edge = i == 0 || i + 1 == len || s[i - 1] == '.' || s[i + 1] == '.';
        if (c == '.' ? edge : !(dns_label_char(c) || (c == '-' && !edge)))
            return false;
        if (c == '.' && (i == 0 || s[i - 1] == '.'))
            return false;
    }
    return true;
}

/* NVIDIA's rule: prepend "nvidia.com/" unless present; the whole name is at
 * most 63 characters and the rest a DNS-1123 subdomain. */
static int resource_name(const struct file_ctx *fc, const struct ycfg_node *n, const char *what,
                         char out[CONFIG_NAME_LEN])
{
    if (ycfg_kind(n) != YCFG_SCALAR)
        return ferr(fc, n, "%s: want a string, got %s", what, ycfg_kind_name(n));
    const char *in = ycfg_text(n);
    bool qualified = strncmp(in, RESOURCE_PREFIX, strlen(RESOURCE_PREFIX)) == 0;
    char full[512];
    int len = snprintf(full, sizeof full, "%s%s", qualified ? "" : RESOURCE_PREFIX, in);
    if (len < 0 || (size_t)len >= CONFIG_NAME_LEN)
        return ferr(fc, n,
                    "invalid value \"%s\" for %s: the resource name \"%s\" is longer than 63 "
                    "characters",
                    in, what, full);
    if (!is_dns1123_subdomain(full + strlen(RESOURCE_PREFIX)))
        return ferr(fc, n,
                    "invalid value \"%s\" for %s: want a DNS-1123 subdomain after \"%s\" "
                    "(lower-case letters, digits, '-' and '.')",
                    in, what, RESOURCE_PREFIX);
    memcpy(out, full, (size_t)len + 1);
    return 0;
}

/* --- resources.gpus / resources.mig ------------------------------- */

static int file_pattern(const struct file_ctx *fc, const struct ycfg_node *item,
                        const char *where, struct config_resource_pattern *p)
{
    if (ycfg_kind(item) != YCFG_MAPPING)
        return ferr(fc, item, "%s: want a mapping with pattern and name, got %s", where,
                    ycfg_kind_name(item));
    if (check_keys(fc, item, where) != 0)
        return -1;
    bool have_pattern = false, have_name = false;
    char what[256];
    for (size_t i = 0; i < ycfg_count(item); i++) {
        const struct ycfg_node *k, *v;
        ycfg_pair(fc->doc, item, i, &k, &v);
        const char *key = ycfg_text(k);
        path_key(what, sizeof what, where, key);
        if (strcmp(key, "pattern") == 0) {
            if (ycfg_kind(v) != YCFG_SCALAR)
                return ferr(fc, v, "%s: want a string, got %s", what, ycfg_kind_name(v));
            size_t len = strlen(ycfg_text(v));
            if (len == 0 || len >= CONFIG_PATTERN_LEN)
                return ferr(fc, v, "invalid value \"%s\" for %s: want 1 to %d characters",
                            ycfg_text(v), what, CONFIG_PATTERN_LEN - 1);
            memcpy(p->pattern, ycfg_text(v), len + 1);
            have_pattern = true;
        } else if (strcmp(key, "name") == 0) {
            if (resource_name(fc, v, what, p->name) != 0)
                return -1;
            have_name = true;
        } else {
            return ferr(fc, k, "unknown key \"%s\"", what);
        }
    }
    if (!have_pattern || !have_name)
        return ferr(fc, item, "%s: missing required key \"%s\"", where,
                    have_pattern ? "name" : "pattern");
    return 0;
}

static int file_patterns(const struct file_ctx *fc, const struct ycfg_node *list,
                         const char *where, struct config_resource_pattern **out, size_t *count)
{
    if (ycfg_kind(list) == YCFG_NULL)
        return 0;
    if (ycfg_kind(list) != YCFG_SEQUENCE)
        return ferr(fc, list, "%s: want a list, got %s", where, ycfg_kind_name(list));
    size_t n = ycfg_count(list);
    struct config_resource_pattern *p = calloc(n ? n : 1, sizeof *p);
    if (p == NULL)
        return ferr(fc, list, "out of memory");
    free(*out);
    *out = p;
    *count = 0;
    for (size_t i = 0; i < n; i++) {
        char item[256];
        path_index(item, sizeof item, where, i);
        if (file_pattern(fc, ycfg_item(fc->doc, list, i), item, &p[i]) != 0)
            return -1;
        (*count)++;
    }
    return 0;
}

static int file_resources(const struct file_ctx *fc, const struct ycfg_node *v)
{
    if (want_mapping(fc, v, "resources") != 0)
        return -1;
    for (size_t i = 0; i < ycfg_count(v); i++) {
        const struct ycfg_node *k, *val;
        ycfg_pair(fc->doc, v, i, &k, &val);
        const char *key = ycfg_text(k);
        int rc;
        if (strcmp(key, "gpus") == 0)
            rc = file_patterns(fc, val, "resources.gpus", &fc->cfg->gpu_resources,
                               &fc->cfg->gpu_resource_count);
        else if (strcmp(key, "mig") == 0)
            rc = file_patterns(fc, val, "resources.mig", &fc->cfg->mig_resources,
                               &fc->cfg->mig_resource_count);
        else
            rc = ferr(fc, k, "unknown key \"resources.%s\"", key);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* --- sharing.timeSlicing / sharing.mps ----------------------------- */

struct slicing {
    bool rename_by_default;
    bool fail_requests_greater_than_one;
    size_t count;
    struct config_time_slice *slices;
};

static void free_slices(struct config_time_slice *s, size_t n)
{
    for (size_t i = 0; i < n && s != NULL; i++)
        free(s[i].devices);
    free(s);
}

static bool all_digits(const char *s, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)s[i]))
            return false;
    return true;
}

static bool is_hex_uuid(const char *s, size_t len)
{
    static const size_t groups[] = {8, 4, 4, 4, 12};
    size_t pos = 0;
    for (size_t g = 0; g < 5; g++) {
        for (size_t i = 0; i < groups[g]; i++, pos++)
            if (pos >= len || !isxdigit((unsigned char)s[pos]))
                return false;
        if (g < 4 && (pos >= len || s[pos++] != '-'))
            return false;
    }
    return pos == len;
}

/* NVIDIA's device references: "3", "1:0", GPU-<uuid>, MIG-<uuid>,
 * MIG-GPU-<uuid>/<gi>/<ci>. */
static bool is_device_ref(const char *s)
{
    size_t len = strlen(s);
    const char *colon = strchr(s, ':');
    if (all_digits(s, len))
        return true;
    if (colon != NULL && all_digits(s, (size_t)(colon - s)) &&
        all_digits(colon + 1, strlen(colon + 1)))
        return true;
    if (strncmp(s, "GPU-", 4) == 0)
        return is_hex_uuid(s + 4, len - 4);
    if (strncmp(s, "MIG-GPU-", 8) == 0) {
        const char *slash = strchr(s + 8, '/');
        if (slash == NULL || !is_hex_uuid(s + 8, (size_t)(slash - s - 8)))
            return false;
        const char *slash2 = strchr(slash + 1, '/');
        return slash2 != NULL && all_digits(slash + 1, (size_t)(slash2 - slash - 1)) &&
               all_digits(slash2 + 1, strlen(slash2 + 1));
    }
    if (strncmp(s, "MIG-", 4) == 0)
        return is_hex_uuid(s + 4, len - 4);
    return false;
}

#define DEVICES_WANT                                                                         \
    "want all, a count > 0, or a list of GPU indexes, \"gpu:mig\" indexes, GPU-/MIG- UUIDs"

static int file_devices(const struct file_ctx *fc, const struct ycfg_node *v, const char *what,
                        struct config_time_slice *ts)
{
    long count;
    if (ycfg_kind(v) == YCFG_SCALAR) {
        const char *t = ycfg_text(v);
        if (strcmp(t, "all") == 0)
            return 0;
        if (!ycfg_quoted(v) && parse_long(t, 1, INT_MAX, &count) == 0) {
            ts->first_n_devices = (unsigned)count;
            return 0;
        }
        return ferr(fc, v, "invalid value \"%s\" for %s: %s", t, what, DEVICES_WANT);
    }
    if (ycfg_kind(v) != YCFG_SEQUENCE || ycfg_count(v) == 0)
        return ferr(fc, v, "%s: %s, got %s", what, DEVICES_WANT,
                    ycfg_kind(v) == YCFG_SEQUENCE ? "an empty list" : ycfg_kind_name(v));
    size_t n = ycfg_count(v);
    ts->devices = calloc(n, sizeof *ts->devices);
    if (ts->devices == NULL)
        return ferr(fc, v, "out of memory");
    ts->all_devices = false;
    for (size_t i = 0; i < n; i++) {
        const struct ycfg_node *item = ycfg_item(fc->doc, v, i);
        const char *t = ycfg_text(item);
        if (ycfg_kind(item) != YCFG_SCALAR || strlen(t) >= CONFIG_DEVICE_REF_LEN ||
            !is_device_ref(t))
            return ferr(fc, item, "invalid value \"%s\" for %s[%zu]: %s", t, what, i,
                        "want a GPU index, a \"gpu:mig\" index or a GPU-/MIG- UUID");
        memcpy(ts->devices[i], t, strlen(t) + 1);
        ts->device_count++;
    }
    return 0;
}

static int file_slice_key(const struct file_ctx *fc, const char *key, const struct ycfg_node *v,
                          const char *what, struct config_time_slice *ts)
{
    long replicas;
    if (strcmp(key, "name") == 0)
        return resource_name(fc, v, what, ts->name);
    if (strcmp(key, "rename") == 0)
        return resource_name(fc, v, what, ts->rename);
    if (strcmp(key, "devices") == 0)
        return file_devices(fc, v, what, ts);
    if (ycfg_kind(v) != YCFG_SCALAR)
        return ferr(fc, v, "%s: want an integer, got %s", what, ycfg_kind_name(v));
    if (ycfg_quoted(v))
        return ferr(fc, v, "%s: want an integer, got a string", what);
    if (parse_long(ycfg_text(v), 2, INT_MAX, &replicas) != 0)
        return ferr(fc, v, "invalid value \"%s\" for %s: want an integer >= 2", ycfg_text(v),
                    what);
    ts->replicas = (int)replicas;
    return 0;
}

static int file_slice(const struct file_ctx *fc, const struct ycfg_node *item, const char *where,
                      struct config_time_slice *ts)
{
    if (ycfg_kind(item) != YCFG_MAPPING)
        return ferr(fc, item, "%s: want a mapping with name and replicas, got %s", where,
                    ycfg_kind_name(item));
    if (check_keys(fc, item, where) != 0)
        return -1;
    ts->all_devices = true;
    for (size_t i = 0; i < ycfg_count(item); i++) {
        const struct ycfg_node *k, *v;
        ycfg_pair(fc->doc, item, i, &k, &v);
        const char *key = ycfg_text(k);
        char what[320];
        path_key(what, sizeof what, where, key);
        if (strcmp(key, "name") != 0 && strcmp(key, "rename") != 0 &&
            strcmp(key, "devices") != 0 && strcmp(key, "replicas") != 0)
            return ferr(fc, k, "unknown key \"%s\"", what);
        if (file_slice_key(fc, key, v, what, ts) != 0)
            return -1;
    }
    if (ts->name[0] == '\0' || ts->replicas == 0)
        return ferr(fc, item, "%s: missing required key \"%s\"", where,
                    ts->name[0] == '\0' ? "name" : "replicas");
    return 0;
}

static int file_slice_list(const struct file_ctx *fc, const struct ycfg_node *list,
                           const char *where, struct slicing *s)
{
    if (ycfg_kind(list) != YCFG_SEQUENCE || ycfg_count(list) == 0)
        return ferr(fc, list, "%s: want a non-empty list of resources, got %s", where,
                    ycfg_kind(list) == YCFG_SEQUENCE ? "an empty list" : ycfg_kind_name(list));
    size_t n = ycfg_count(list);
    free_slices(s->slices, s->count);
    s->count = 0;
    s->slices = calloc(n, sizeof *s->slices);
    if (s->slices == NULL)
        return ferr(fc, list, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const struct ycfg_node *item = ycfg_item(fc->doc, list, i);
        char at[256];
        path_index(at, sizeof at, where, i);
        s->count++; /* counted first so that a failure frees its devices */
        if (file_slice(fc, item, at, &s->slices[i]) != 0)
            return -1;
        for (size_t j = 0; j < i; j++)
            if (strcmp(s->slices[j].name, s->slices[i].name) == 0)
                return ferr(fc, item, "%s: resource %s is already shared by %s[%zu]", at,
                            s->slices[i].name, where, j);
    }
    return 0;
}

static int file_flag_bool(const struct file_ctx *fc, const struct ycfg_node *v, const char *what,
                          bool *out)
{
    const char *t = ycfg_text(v);
    if (ycfg_kind(v) != YCFG_SCALAR || ycfg_quoted(v))
        return ferr(fc, v, "%s: want a bool, got %s", what, ycfg_kind_name(v));
    if (parse_bool(t, out) == 0)
        return 0;
    if (strcasecmp(t, "yes") == 0 || strcasecmp(t, "on") == 0)
        *out = true;
    else if (strcasecmp(t, "no") == 0 || strcasecmp(t, "off") == 0)
        *out = false;
    else
        return ferr(fc, v, "invalid value \"%s\" for %s: want true or false", t, what);
    return 0;
}

static int file_slicing(const struct file_ctx *fc, const struct ycfg_node *v, const char *where,
                        struct slicing *s)
{
    if (want_mapping(fc, v, where) != 0)
        return -1;
    bool have_resources = false;
    for (size_t i = 0; i < ycfg_count(v); i++) {
        const struct ycfg_node *k, *val;
        ycfg_pair(fc->doc, v, i, &k, &val);
        const char *key = ycfg_text(k);
        char what[256];
        path_key(what, sizeof what, where, key);
        int rc;
        if (strcmp(key, "renameByDefault") == 0)
            rc = file_flag_bool(fc, val, what, &s->rename_by_default);
        else if (strcmp(key, "failRequestsGreaterThanOne") == 0)
            rc = file_flag_bool(fc, val, what, &s->fail_requests_greater_than_one);
        else if (strcmp(key, "resources") == 0) {
            rc = file_slice_list(fc, val, what, s);
            have_resources = true;
        }
        else if (strcmp(key, "strategy") == 0) /* NVIDIA knows only the empty one */
            rc = ycfg_kind(val) == YCFG_NULL || strcmp(ycfg_text(val), "") == 0
                     ? 0
                     : ferr(fc, val, "invalid value \"%s\" for %s: want \"\"", ycfg_text(val),
                            what);
        else
            rc = ferr(fc, k, "unknown key \"%s\"", what);
        if (rc != 0)
            return -1;
    }
    if (ycfg_kind(v) == YCFG_MAPPING && !have_resources)
        return ferr(fc, v, "%s: missing required key \"resources\"", where);
    /* renameByDefault may come after the list, so it is applied last. */
    for (size_t i = 0; i < s->count && s->rename_by_default; i++) {
        struct config_time_slice *ts = &s->slices[i];
        if (ts->rename[0] == '\0' &&
            snprintf(ts->rename, sizeof ts->rename, "%s%s", ts->name, SHARED_SUFFIX) >=
                (int)sizeof ts->rename)
            return ferr(fc, v, "%s: %s%s is longer than 63 characters", where, ts->name,
                        SHARED_SUFFIX);
    }
    return 0;
}

static int file_sharing(const struct file_ctx *fc, const struct ycfg_node *v)
{
    if (want_mapping(fc, v, "sharing") != 0)
        return -1;
    for (size_t i = 0; i < ycfg_count(v); i++) {
        const struct ycfg_node *k, *val;
        ycfg_pair(fc->doc, v, i, &k, &val);
        const char *key = ycfg_text(k);
        struct slicing s = {0};
        int rc;
        if (strcmp(key, "timeSlicing") == 0) {
            struct gp_config *c = fc->cfg;
            s.slices = c->time_slices;
            s.count = c->time_slice_count;
            rc = file_slicing(fc, val, "sharing.timeSlicing", &s);
            c->time_slices = s.slices;
            c->time_slice_count = s.count;
            c->rename_by_default = s.rename_by_default;
            c->fail_requests_greater_than_one = s.fail_requests_greater_than_one;
        } else if (strcmp(key, "mps") == 0) {
            /* Validated like NVIDIA does, then refused if it shares anything. */
            rc = file_slicing(fc, val, "sharing.mps", &s);
            if (rc == 0 && s.count > 0)
                rc = ferr(fc, k, "MPS sharing is not supported by gpupool");
            free_slices(s.slices, s.count);
        } else {
            rc = ferr(fc, k, "unknown key \"sharing.%s\"", key);
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* NVIDIA reads an absent or empty version as v1 and refuses any other. */
static int file_version(const struct file_ctx *fc, const struct ycfg_node *v)
{
    if (ycfg_kind(v) == YCFG_NULL)
        return 0;
    if (ycfg_kind(v) != YCFG_SCALAR)
        return ferr(fc, v, "version: want a string, got %s", ycfg_kind_name(v));
    const char *t = ycfg_text(v);
    if (t[0] == '\0' || strcmp(t, "v1") == 0)
        return 0;
    return ferr(fc, v, "unknown version \"%s\": want v1", t);
}

static int file_root(const struct file_ctx *fc, const struct ycfg_node *root)
{
    if (root == NULL || ycfg_kind(root) == YCFG_NULL)
        return 0; /* an empty file is an empty v1 config */
    if (ycfg_kind(root) != YCFG_MAPPING)
        return ferr(fc, root, "want a mapping at the top level, got %s", ycfg_kind_name(root));
    if (check_keys(fc, root, "") != 0)
        return -1;
    for (size_t i = 0; i < ycfg_count(root); i++) {
        const struct ycfg_node *k, *v;
        ycfg_pair(fc->doc, root, i, &k, &v);
        const char *key = ycfg_text(k);
        int rc;
        if (strcmp(key, "version") == 0)
            rc = file_version(fc, v);
        else if (strcmp(key, "resources") == 0)
            rc = file_resources(fc, v);
        else if (strcmp(key, "sharing") == 0)
            rc = file_sharing(fc, v);
        else
            rc = file_options(fc, "", k, v);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int load_file(struct gp_config *cfg, const char *path, char *err, size_t errlen)
{
    struct ycfg_doc doc;
    if (ycfg_load(path, &doc, err, errlen) != 0)
        return -1;
    struct file_ctx fc = {path, &doc, cfg, err, errlen};
    int rc = file_root(&fc, ycfg_root(&doc));
    ycfg_free(&doc);
    if (rc == 0)
        log_v(1, "loaded config file %s", path);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Load / free.                                                        */

static int apply_defaults(struct gp_config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        const struct option *o = &options[i];
        char why[WHY_LEN];
        if (o->def == NULL || o->offset == NO_FIELD)
            continue;
        if (set_option(o, cfg, o->def, false, why, sizeof why) != 0)
            return errf(err, errlen, "default of %s: %s", o->path ? o->path : o->flag, why);
    }
    return 0;
}

/* --config-file is needed before the other sources are applied. */
static const char *config_file_source(const struct flag_use *uses, size_t n, char **envp)
{
    const char *path = NULL;
    for (size_t i = 0; i < n; i++)
        if (uses[i].o->offset == FIELD(config_file))
            path = uses[i].value;
    if (path == NULL)
        path = env_lookup(envp, "CONFIG_FILE");
    return path;
}

/* Derived values, once every source has been applied. */
static int finish(struct gp_config *cfg, char *err, size_t errlen)
{
    if (cfg->nvidia_dev_root == NULL || cfg->nvidia_dev_root[0] == '\0') {
        char *v = strdup(cfg->nvidia_driver_root ? cfg->nvidia_driver_root : "/");
        if (v == NULL)
            return errf(err, errlen, "out of memory");
        free(cfg->nvidia_dev_root);
        cfg->nvidia_dev_root = v;
    }
    if (cfg->device_list_strategy == 0)
        return errf(err, errlen, "--device-list-strategy (DEVICE_LIST_STRATEGY): want at "
                                 "least one strategy");
    return 0;
}

static void print_version(void)
{
    printf("%s version %s\n", PROGRAM, GP_VERSION);
}

enum config_result config_load(struct gp_config *cfg, int argc, char **argv, char **envp,
                               char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    if (errlen > 0)
        err[0] = '\0';
    struct flag_use *uses = calloc(argc > 0 ? (size_t)argc : 1, sizeof *uses);
    if (uses == NULL) {
        errf(err, errlen, "out of memory");
        return CONFIG_ERROR;
    }
    size_t n_uses = 0;
    enum opt_type action = T_STRING;
    enum config_result result = CONFIG_ERROR;
    const char *file;
    if (scan_argv(argc, argv, uses, &n_uses, &action, err, errlen) != 0)
        goto out;
    if (action == T_HELP || action == T_VERSION) {
        if (action == T_HELP)
            config_print_usage(stdout);
        else
            print_version();
        result = CONFIG_EXIT;
        goto out;
    }
    if (apply_defaults(cfg, err, errlen) != 0)
        goto out;
    file = config_file_source(uses, n_uses, envp);
    if (file != NULL && file[0] != '\0' && load_file(cfg, file, err, errlen) != 0)
        goto out;
    if (apply_env(cfg, envp, err, errlen) != 0 ||
        apply_flags(cfg, uses, n_uses, err, errlen) != 0 || finish(cfg, err, errlen) != 0)
        goto out;
    result = CONFIG_OK;
out:
    free(uses);
    if (result != CONFIG_OK)
        config_free(cfg); /* the caller may or may not free: both are safe */
    return result;
}

void config_free(struct gp_config *cfg)
{
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        const struct option *o = &options[i];
        if ((o->type == T_STRING || o->type == T_STRLIST) && o->offset != NO_FIELD)
            free(*(char **)((char *)cfg + o->offset));
    }
    free(cfg->gpu_resources);
    free(cfg->mig_resources);
    free_slices(cfg->time_slices, cfg->time_slice_count);
    memset(cfg, 0, sizeof *cfg);
}

/* ------------------------------------------------------------------ */
/* JSON and usage, both generated from the table.                      */

/* Object at dotted `path` minus its last component (created on demand);
 * *leaf points at that last component. */
static json_t *json_parent(json_t *root, const char *path, const char **leaf)
{
    json_t *obj = root;
    const char *p = path;
    const char *dot;
    while ((dot = strchr(p, '.')) != NULL) {
        char key[64];
        size_t len = (size_t)(dot - p);
        if (len >= sizeof key)
            return NULL;
        memcpy(key, p, len);
        key[len] = '\0';
        json_t *next = json_object_get(obj, key);
        if (next == NULL) {
            next = json_object();
            if (next == NULL || json_object_set_new(obj, key, next) != 0)
                return NULL;
        }
        obj = next;
        p = dot + 1;
    }
    *leaf = p;
    return obj;
}

static json_t *option_json(const struct option *o, const struct gp_config *cfg)
{
    const void *f = (const char *)cfg + o->offset;
    char buf[32];
    switch (o->type) {
    case T_STRING:
    case T_STRLIST:
        return *(char *const *)f ? json_string(*(char *const *)f) : json_null();
    case T_BOOL:
        return json_boolean(*(const bool *)f);
    case T_INT:
        return json_integer(*(const int *)f);
    case T_DURATION:
        format_duration(*(const int *)f, buf, sizeof buf);
        return json_string(buf);
    case T_ENUM:
        return json_string(value_name(o->values, *(const int *)f));
    case T_ENUM_SET: {
        json_t *a = json_array();
        for (const struct enum_value *v = o->values; a != NULL && v->name != NULL; v++)
            if (*(const unsigned *)f & (unsigned)v->value)
                json_array_append_new(a, json_string(v->name));
        return a;
    }
    case T_IMEX_IDS: {
        json_t *a = json_array();
        if (a != NULL && *(const size_t *)f > 0)
            json_array_append_new(a, json_integer(0));
        return a;
    }
    default:
        return NULL;
    }
}

static json_t *patterns_json(const struct config_resource_pattern *p, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++)
        json_array_append_new(a, json_pack("{s:s,s:s}", "pattern", p[i].pattern, "name",
                                           p[i].name));
    return a;
}

static json_t *slice_json(const struct config_time_slice *ts)
{
    json_t *o = json_pack("{s:s}", "name", ts->name);
    if (o == NULL)
        return NULL;
    if (ts->rename[0] != '\0')
        json_object_set_new(o, "rename", json_string(ts->rename));
    if (ts->device_count > 0) {
        json_t *d = json_array();
        for (size_t i = 0; d != NULL && i < ts->device_count; i++)
            json_array_append_new(d, json_string(ts->devices[i]));
        json_object_set_new(o, "devices", d);
    } else if (ts->first_n_devices > 0) {
        json_object_set_new(o, "devices", json_integer(ts->first_n_devices));
    } else {
        json_object_set_new(o, "devices", json_string("all"));
    }
    json_object_set_new(o, "replicas", json_integer(ts->replicas));
    return o;
}

static int structured_json(json_t *root, const struct gp_config *cfg)
{
    json_t *res = json_object_get(root, "resources");
    if (cfg->gpu_resource_count > 0)
        json_object_set_new(res, "gpus",
                            patterns_json(cfg->gpu_resources, cfg->gpu_resource_count));
    if (cfg->mig_resource_count > 0)
        json_object_set_new(res, "mig",
                            patterns_json(cfg->mig_resources, cfg->mig_resource_count));
    if (cfg->time_slice_count == 0)
        return 0; /* NVIDIA's schema needs resources whenever timeSlicing is present */
    json_t *ts = json_pack("{s:b,s:b}", "renameByDefault", cfg->rename_by_default,
                           "failRequestsGreaterThanOne", cfg->fail_requests_greater_than_one);
    if (ts == NULL || json_object_set_new(json_object_get(root, "sharing"), "timeSlicing", ts))
        return -1;
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < cfg->time_slice_count; i++)
        json_array_append_new(a, slice_json(&cfg->time_slices[i]));
    return a == NULL || json_object_set_new(ts, "resources", a) != 0 ? -1 : 0;
}

char *config_to_json(const struct gp_config *cfg)
{
    /* Created first so that the dump has NVIDIA's key order. */
    json_t *root = json_pack("{s:s,s:{},s:{},s:{},s:{},s:{}}", "version", "v1", "flags",
                             "resources", "sharing", "imex", "gpupool");
    if (root == NULL)
        return NULL;
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        const struct option *o = &options[i];
        const char *leaf;
        if (o->path == NULL || o->offset == NO_FIELD)
            continue;
        json_t *parent = json_parent(root, o->path, &leaf);
        json_t *v = parent ? option_json(o, cfg) : NULL;
        if (v == NULL || json_object_set_new(parent, leaf, v) != 0) {
            json_decref(root);
            return NULL;
        }
    }
    char *out = structured_json(root, cfg) == 0 ? json_dumps(root, JSON_INDENT(2)) : NULL;
    json_decref(root);
    return out;
}

static void print_default(FILE *out, const struct option *o)
{
    if (o->type == T_BOOL || o->type == T_INT || o->type == T_DURATION)
        fprintf(out, " (default: %s)", o->def ? o->def : "unset");
    else if (o->def != NULL && o->def[0] != '\0')
        fprintf(out, " (default: \"%s\")", o->def);
}

void config_print_usage(FILE *out)
{
    fprintf(out,
            "Usage: %s [options]\n\n"
            "A Kubernetes device plugin for NVIDIA GPUs, compatible with NVIDIA's\n"
            "k8s-device-plugin flags, environment variables and config file.\n"
            "Precedence: flag > environment variable > config file > default.\n\n"
            "Options:\n",
            PROGRAM);
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        const struct option *o = &options[i];
        if (o->help == NULL)
            continue;
        const char *names[3] = {o->flag, o->alias[0], o->alias[1]};
        fprintf(out, " ");
        for (size_t k = 0; k < 3 && names[k] != NULL; k++)
            fprintf(out, "%s %s%s%s", k ? "," : "", strlen(names[k]) == 1 ? "-" : "--",
                    names[k], takes_value(o) ? " value" : "");
        for (size_t k = 0; k < 2 && o->env[k] != NULL; k++)
            fprintf(out, "%s$%s", k || o->flag ? (k ? ", " : "  ") : " ", o->env[k]);
        fprintf(out, "\n        %s", o->help);
        if (o->type == T_ENUM || o->type == T_ENUM_SET) {
            char w[WHY_LEN];
            want_values(o->values, w, sizeof w);
            fprintf(out, ": %s", w + strlen("want "));
        }
        print_default(out, o);
        if (o->in_file)
            fprintf(out, " [file: %s]", o->path);
        fprintf(out, "\n");
    }
}
