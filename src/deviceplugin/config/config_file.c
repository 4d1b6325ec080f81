/* config_file.c -- NVIDIA's `version: v1` schema walkers (config_file.h).
 *
 * `resources:` and `sharing:` are lists of records rather than options, so
 * they have their own small walkers here instead of rows in the option
 * table. Each walker validates as NVIDIA's Go decoder does and reports
 * `file:line: what` through the option engine's file helpers. */
#include "config_file.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESOURCE_PREFIX "nvidia.com/"
#define SHARED_SUFFIX ".shared"

/* The walk's context: the option engine's file (path, document, error
 * buffer) and the configuration being filled. */
struct file_ctx {
    const struct options_file *f;
    struct gp_config *cfg;
};

#define ferr(fc, n, ...) options_file_error((fc)->f, (n), __VA_ARGS__)

static int check_keys(const struct file_ctx *fc, const struct ycfg_node *map, const char *where)
{
    return options_file_keys(fc->f, map, where);
}

static int want_mapping(const struct file_ctx *fc, const struct ycfg_node *n, const char *where)
{
    return options_file_mapping(fc->f, n, where);
}

static int file_flag_bool(const struct file_ctx *fc, const struct ycfg_node *v, const char *what,
                          bool *out)
{
    return options_file_bool(fc->f, v, what, out);
}

static int parse_long(const char *s, long min, long max, long *out)
{
    return options_parse_long(s, min, max, out);
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

static int file_pattern(const struct file_ctx *fc, const struct ycfg_node *item, const char *where,
                        struct config_resource_pattern *p)
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
        ycfg_pair(fc->f->doc, item, i, &k, &v);
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

static int file_patterns(const struct file_ctx *fc, const struct ycfg_node *list, const char *where,
                         struct config_resource_pattern **out, size_t *count)
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
        if (file_pattern(fc, ycfg_item(fc->f->doc, list, i), item, &p[i]) != 0)
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
        ycfg_pair(fc->f->doc, v, i, &k, &val);
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
    bool memory_limit; /* gpupool's sharing.timeSlicing.memoryLimit */
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

#define DEVICES_WANT \
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
        const struct ycfg_node *item = ycfg_item(fc->f->doc, v, i);
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
        return ferr(fc, v, "invalid value \"%s\" for %s: want an integer >= 2", ycfg_text(v), what);
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
        ycfg_pair(fc->f->doc, item, i, &k, &v);
        const char *key = ycfg_text(k);
        char what[320];
        path_key(what, sizeof what, where, key);
        if (strcmp(key, "name") != 0 && strcmp(key, "rename") != 0 && strcmp(key, "devices") != 0 &&
            strcmp(key, "replicas") != 0)
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
        const struct ycfg_node *item = ycfg_item(fc->f->doc, list, i);
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

static int file_slicing(const struct file_ctx *fc, const struct ycfg_node *v, const char *where,
                        struct slicing *s)
{
    if (want_mapping(fc, v, where) != 0)
        return -1;
    bool have_resources = false;
    for (size_t i = 0; i < ycfg_count(v); i++) {
        const struct ycfg_node *k, *val;
        ycfg_pair(fc->f->doc, v, i, &k, &val);
        const char *key = ycfg_text(k);
        char what[256];
        path_key(what, sizeof what, where, key);
        int rc;
        if (strcmp(key, "renameByDefault") == 0)
            rc = file_flag_bool(fc, val, what, &s->rename_by_default);
        else if (strcmp(key, "failRequestsGreaterThanOne") == 0)
            rc = file_flag_bool(fc, val, what, &s->fail_requests_greater_than_one);
        else if (strcmp(key, "memoryLimit") == 0 && strcmp(where, "sharing.timeSlicing") == 0)
            rc = file_flag_bool(fc, val, what, &s->memory_limit); /* gpupool's extension */
        else if (strcmp(key, "resources") == 0) {
            rc = file_slice_list(fc, val, what, s);
            have_resources = true;
        } else if (strcmp(key, "strategy") == 0) /* NVIDIA knows only the empty one */
            rc =
                ycfg_kind(val) == YCFG_NULL || strcmp(ycfg_text(val), "") == 0
                    ? 0
                    : ferr(fc, val, "invalid value \"%s\" for %s: want \"\"", ycfg_text(val), what);
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
        if (ts->rename[0] == '\0' && snprintf(ts->rename, sizeof ts->rename, "%s%s", ts->name,
                                              SHARED_SUFFIX) >= (int)sizeof ts->rename)
            return ferr(fc, v, "%s: %s%s is longer than 63 characters", where, ts->name,
                        SHARED_SUFFIX);
    }
    return 0;
}

#define BOTH_SHARINGS "sharing.timeSlicing and sharing.mps cannot both be configured"

/* sharing.mps with resources becomes the node's sharing: its replicas are
 * advertised as time-slicing's are (same records), sharing_mps tells the
 * node agent to run the control daemons and Allocate to hand out pipes. */
static int take_mps(const struct file_ctx *fc, const struct ycfg_node *k, struct slicing *s)
{
    struct gp_config *c = fc->cfg;
    if (s->count == 0)
        return 0;
    if (c->time_slice_count > 0 && !c->sharing_mps)
        return ferr(fc, k, "%s", BOTH_SHARINGS);
    free_slices(c->time_slices, c->time_slice_count);
    c->time_slices = s->slices;
    c->time_slice_count = s->count;
    c->rename_by_default = s->rename_by_default;
    c->fail_requests_greater_than_one = s->fail_requests_greater_than_one;
    c->time_slice_memory_limit = false;
    c->sharing_mps = true;
    s->slices = NULL;
    s->count = 0;
    return 0;
}

static int file_sharing(const struct file_ctx *fc, const struct ycfg_node *v)
{
    if (want_mapping(fc, v, "sharing") != 0)
        return -1;
    for (size_t i = 0; i < ycfg_count(v); i++) {
        const struct ycfg_node *k, *val;
        ycfg_pair(fc->f->doc, v, i, &k, &val);
        const char *key = ycfg_text(k);
        struct slicing s = {0};
        int rc;
        if (strcmp(key, "timeSlicing") == 0) {
            struct gp_config *c = fc->cfg;
            if (c->sharing_mps) /* NVIDIA: the two strategies exclude each other */
                return ferr(fc, k, "%s", BOTH_SHARINGS);
            s.slices = c->time_slices;
            s.count = c->time_slice_count;
            rc = file_slicing(fc, val, "sharing.timeSlicing", &s);
            c->time_slices = s.slices;
            c->time_slice_count = s.count;
            c->rename_by_default = s.rename_by_default;
            c->fail_requests_greater_than_one = s.fail_requests_greater_than_one;
            c->time_slice_memory_limit = s.memory_limit;
        } else if (strcmp(key, "mps") == 0) {
            /* NVIDIA's default for MPS: one replica per container, as a
             * share of threads and pinned memory is per client. */
            s.fail_requests_greater_than_one = true;
            rc = file_slicing(fc, val, "sharing.mps", &s);
            rc = rc == 0 ? take_mps(fc, k, &s) : rc;
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

int config_file_key(void *obj, const struct options_file *f, const struct ycfg_node *key,
                    const struct ycfg_node *value)
{
    struct file_ctx ctx = {f, obj};
    const char *name = ycfg_text(key);
    if (strcmp(name, "version") == 0)
        return file_version(&ctx, value);
    if (strcmp(name, "resources") == 0)
        return file_resources(&ctx, value);
    if (strcmp(name, "sharing") == 0)
        return file_sharing(&ctx, value);
    return ferr(&ctx, key, "unknown key \"%s\"", name);
}

void config_file_free(struct gp_config *cfg)
{
    free(cfg->gpu_resources);
    free(cfg->mig_resources);
    free_slices(cfg->time_slices, cfg->time_slice_count);
    cfg->gpu_resources = cfg->mig_resources = NULL;
    cfg->time_slices = NULL;
    cfg->gpu_resource_count = cfg->mig_resource_count = cfg->time_slice_count = 0;
}

/* ------------------------------------------------------------------ */
/* JSON: the same records, NVIDIA's shape.                             */

static json_t *patterns_json(const struct config_resource_pattern *p, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++)
        json_array_append_new(a,
                              json_pack("{s:s,s:s}", "pattern", p[i].pattern, "name", p[i].name));
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

int config_file_to_json(json_t *root, const struct gp_config *cfg)
{
    json_t *res = json_object_get(root, "resources");
    if (cfg->gpu_resource_count > 0)
        json_object_set_new(res, "gpus",
                            patterns_json(cfg->gpu_resources, cfg->gpu_resource_count));
    if (cfg->mig_resource_count > 0)
        json_object_set_new(res, "mig", patterns_json(cfg->mig_resources, cfg->mig_resource_count));
    if (cfg->time_slice_count == 0)
        return 0; /* NVIDIA's schema needs resources whenever a sharing is present */
    json_t *ts = json_pack("{s:b,s:b}", "renameByDefault", cfg->rename_by_default,
                           "failRequestsGreaterThanOne", cfg->fail_requests_greater_than_one);
    if (ts == NULL || json_object_set_new(json_object_get(root, "sharing"),
                                          cfg->sharing_mps ? "mps" : "timeSlicing", ts))
        return -1;
    /* gpupool's extension, shown only when set: NVIDIA's shape otherwise */
    if (cfg->time_slice_memory_limit && json_object_set_new(ts, "memoryLimit", json_true()) != 0)
        return -1;
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < cfg->time_slice_count; i++)
        json_array_append_new(a, slice_json(&cfg->time_slices[i]));
    return a == NULL || json_object_set_new(ts, "resources", a) != 0 ? -1 : 0;
}
