/* nodelabels.c -- GFD-compatible node labels (see nodelabels.h). */
#include "nodelabels.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube.h"
#include "kube_writer.h"
#include "log.h"

#define LABEL_VALUE_MAX 63
#define RETRY_MIN_MS 1000L
#define RETRY_MAX_MS 60000L
#define API_TIMEOUT_MS 5000L

/* ---- values ------------------------------------------------------------------- */

/* A label value: [A-Za-z0-9._-], at most 63, alphanumeric at both ends. */
static void label_safe(const char *in, char *out, size_t outlen)
{
    size_t n = 0;
    for (; *in != '\0' && n + 1 < outlen && n < LABEL_VALUE_MAX; in++) {
        char c = *in;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        out[n++] = ok ? c : '-';
    }
    out[n] = '\0';
    while (n > 0 &&
           !((out[n - 1] >= 'a' && out[n - 1] <= 'z') || (out[n - 1] >= 'A' && out[n - 1] <= 'Z') ||
             (out[n - 1] >= '0' && out[n - 1] <= '9')))
        out[--n] = '\0';
}

static int set_str(json_t *labels, const char *prefix, const char *suffix, const char *value)
{
    char key[256], safe[LABEL_VALUE_MAX + 1];
    snprintf(key, sizeof key, "%s%s%s", prefix, suffix ? "." : "", suffix ? suffix : "");
    label_safe(value, safe, sizeof safe);
    return json_object_set_new(labels, key, json_string(safe));
}

static int set_num(json_t *labels, const char *prefix, const char *suffix, long long value)
{
    char text[32];
    snprintf(text, sizeof text, "%lld", value);
    return set_str(labels, prefix, suffix, text);
}

/* GFD's architecture names by CUDA compute capability. */
static const char *arch_family(int major, int minor)
{
    switch (major) {
    case 1:
        return "tesla";
    case 2:
        return "fermi";
    case 3:
        return "kepler";
    case 5:
        return "maxwell";
    case 6:
        return "pascal";
    case 7:
        return minor < 5 ? "volta" : "turing";
    case 8:
        return minor < 9 ? "ampere" : "ada-lovelace";
    case 9:
        return "hopper";
    case 10:
    case 12:
        return "blackwell";
    default:
        return "undefined";
    }
}

/* The time-slicing entry of a resource, or NULL. */
static const struct config_time_slice *slicing_of(const struct gp_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->time_slice_count; i++)
        if (strcmp(cfg->time_slices[i].name, name) == 0 && cfg->time_slices[i].replicas > 1)
            return &cfg->time_slices[i];
    return NULL;
}

/* product, count, replicas and sharing-strategy of one resource; parts of
 * the product are joined with '-'. sharing = false: never shared (the
 * whole GPU of a MIG-enabled card). */
static int base_labels(json_t *labels, const struct gp_config *cfg, const char *resource,
                       const char *product, long long count, bool sharing)
{
    const struct config_time_slice *ts = sharing ? slicing_of(cfg, resource) : NULL;
    char name[256];
    snprintf(name, sizeof name, "%s%s", product, ts && ts->rename[0] == '\0' ? "-SHARED" : "");
    for (char *p = name; *p; p++)
        if (*p == ' ')
            *p = '-';
    int rc = set_str(labels, resource, "product", name);
    rc |= set_num(labels, resource, "count", count);
    rc |= set_num(labels, resource, "replicas", !sharing ? 0 : ts ? ts->replicas : 1);
    rc |= set_str(labels, resource, "sharing-strategy",
                  ts == NULL         ? "none"
                  : cfg->sharing_mps ? "mps"
                                     : "time-slicing");
    return rc;
}

/* The model most GPUs have (lowest index on a tie): its first GPU. */
static const struct gpu_device *main_model(const struct gpu_inventory *inv, long long *count)
{
    const struct gpu_device *best = NULL;
    *count = 0;
    for (size_t i = 0; i < inv->count; i++) {
        if (inv->gpus[i].lost)
            continue;
        long long n = 0;
        for (size_t j = 0; j < inv->count; j++)
            n += !inv->gpus[j].lost && strcmp(inv->gpus[j].name, inv->gpus[i].name) == 0;
        if (n > *count) {
            *count = n;
            best = &inv->gpus[i];
        }
    }
    return best;
}

static int gpu_labels(json_t *labels, const struct gp_config *cfg, const struct gpu_device *g,
                      long long count)
{
    int rc = base_labels(labels, cfg, POOL_LABEL_NODE_GPU_PREFIX, g->name, count, !g->mig_enabled);
    if (g->memory_bytes > 0)
        rc |= set_num(labels, POOL_LABEL_NODE_GPU_PREFIX, "memory",
                      (long long)(g->memory_bytes >> 20));
    if (g->cc_major > 0) {
        rc |= set_str(labels, POOL_LABEL_NODE_GPU_PREFIX, "family",
                      arch_family(g->cc_major, g->cc_minor));
        rc |= set_num(labels, POOL_LABEL_NODE_GPU_PREFIX, "compute.major", g->cc_major);
        rc |= set_num(labels, POOL_LABEL_NODE_GPU_PREFIX, "compute.minor", g->cc_minor);
    }
    return rc;
}

/* One MIG profile's labels under `resource` (nvidia.com/gpu for single,
 * nvidia.com/mig-<profile> for mixed). */
static int mig_labels(json_t *labels, const struct gp_config *cfg, const char *resource,
                      const struct gpu_device *parent, const struct mig_device *mig,
                      long long count)
{
    char product[256];
    snprintf(product, sizeof product, "%s-MIG-%s", parent->name, mig->profile);
    int rc = base_labels(labels, cfg, resource, product, count, true);
    rc |= set_num(labels, resource, "memory", (long long)(mig->memory_bytes >> 20));
    rc |= set_num(labels, resource, "slices.gi", mig->gpu_instance_slices);
    rc |= set_num(labels, resource, "slices.ci", mig->compute_instance_slices);
    return rc;
}

static long long count_profile(const struct gpu_inventory *inv, const char *profile)
{
    long long n = 0;
    for (size_t i = 0; i < inv->count; i++)
        for (size_t j = 0; j < inv->gpus[i].mig_count; j++)
            n += strcmp(inv->gpus[i].migs[j].profile, profile) == 0;
    return n;
}

/* "1g.10gb+me" -> "nvidia.com/mig-1g.10gb.me", as the resource is named. */
static void mig_resource(const char *profile, char *out, size_t outlen)
{
    snprintf(out, outlen, "nvidia.com/mig-%s", profile);
    for (char *p = out; *p; p++)
        if (*p == '+')
            *p = '.';
}

static int mixed_labels(json_t *labels, const struct gp_config *cfg,
                        const struct gpu_inventory *inv)
{
    int rc = 0;
    for (size_t i = 0; i < inv->count; i++) {
        for (size_t j = 0; j < inv->gpus[i].mig_count; j++) {
            const struct mig_device *mig = &inv->gpus[i].migs[j];
            char resource[CONFIG_NAME_LEN + 16], key[CONFIG_NAME_LEN + 32];
            mig_resource(mig->profile, resource, sizeof resource);
            snprintf(key, sizeof key, "%s.count", resource);
            if (json_object_get(labels, key) != NULL)
                continue; /* this profile is done */
            rc |= mig_labels(labels, cfg, resource, &inv->gpus[i], mig,
                             count_profile(inv, mig->profile));
        }
    }
    return rc;
}

/* Single: every MIG-enabled GPU non-empty, none MIG-disabled, one
 * profile; otherwise GFD's "INVALID" labels. */
static int single_labels(json_t *labels, const struct gp_config *cfg,
                         const struct gpu_inventory *inv)
{
    const struct gpu_device *first = NULL;
    const struct mig_device *profile = NULL;
    bool valid = true;
    long long migs = 0;
    for (size_t i = 0; i < inv->count; i++) {
        const struct gpu_device *g = &inv->gpus[i];
        if (g->lost)
            continue;
        if (!g->mig_enabled) {
            valid = false;
            continue;
        }
        if (first == NULL)
            first = g;
        if (g->mig_count == 0)
            valid = false;
        for (size_t j = 0; j < g->mig_count; j++, migs++) {
            if (profile == NULL)
                profile = &g->migs[j];
            else if (strcmp(profile->profile, g->migs[j].profile) != 0)
                valid = false;
        }
    }
    if (first == NULL)
        return 0; /* no MIG-enabled GPU: the same as none */
    if (valid && profile != NULL)
        return mig_labels(labels, cfg, POOL_LABEL_NODE_GPU_PREFIX, first, profile, migs);
    char product[256];
    snprintf(product, sizeof product, "%s-MIG-INVALID", first->name);
    int rc = set_str(labels, POOL_LABEL_NODE_GPU_PREFIX, "product", product);
    rc |= set_num(labels, POOL_LABEL_NODE_GPU_PREFIX, "count", 0);
    rc |= set_num(labels, POOL_LABEL_NODE_GPU_PREFIX, "replicas", 0);
    rc |= set_num(labels, POOL_LABEL_NODE_GPU_PREFIX, "memory", 0);
    return rc;
}

int nodelabels_build(const struct gp_config *cfg, const struct gpu_inventory *inv, json_t **out,
                     char *err, size_t errlen)
{
    *out = NULL;
    json_t *labels = json_object();
    if (labels == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    long long count = 0;
    const struct gpu_device *g = main_model(inv, &count);
    int rc = 0;
    if (g != NULL) {
        bool mig_capable = false;
        for (size_t i = 0; i < inv->count; i++)
            mig_capable |= inv->gpus[i].mig_capable;
        rc |= gpu_labels(labels, cfg, g, count);
        rc |= set_str(labels, "nvidia.com/mig.capable", NULL, mig_capable ? "true" : "false");
        if (cfg->mig_strategy != MIG_STRATEGY_NONE)
            rc |= set_str(labels, "nvidia.com/mig.strategy", NULL,
                          cfg->mig_strategy == MIG_STRATEGY_SINGLE ? "single" : "mixed");
        if (cfg->mig_strategy == MIG_STRATEGY_SINGLE)
            rc |= single_labels(labels, cfg, inv);
        else if (cfg->mig_strategy == MIG_STRATEGY_MIXED)
            rc |= mixed_labels(labels, cfg, inv);
    }
    if (rc != 0) {
        json_decref(labels);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *out = labels;
    return 0;
}

/* ---- the patch ------------------------------------------------------------------- */

static int compare_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

json_t *nodelabels_patch(const json_t *labels, const json_t *node)
{
    json_t *set = json_deep_copy(labels);
    json_t *patch = json_pack("{s:{s:o,s:{}}}", "metadata", "labels", set, "annotations");
    if (patch == NULL)
        return NULL;
    json_t *meta = json_object_get(patch, "metadata");
    json_t *patch_labels = json_object_get(meta, "labels");
    /* Keys we wrote last time and do not write now are removed (null). */
    const char *owned = json_string_value(json_object_get(
        json_object_get(json_object_get(node, "metadata"), "annotations"), POOL_ANN_NODE_LABELS));
    for (const char *p = owned; p != NULL && *p != '\0';) {
        size_t len = strcspn(p, ",");
        char key[256];
        if (len > 0 && len < sizeof key) {
            memcpy(key, p, len);
            key[len] = '\0';
            if (json_object_get(labels, key) == NULL)
                json_object_set_new(patch_labels, key, json_null());
        }
        p += len + (p[len] == ',');
    }
    /* The ownership list, sorted for a stable annotation. */
    size_t n = json_object_size(labels), i = 0, total = 1;
    const char **keys = calloc(n + 1, sizeof *keys);
    if (keys == NULL) {
        json_decref(patch);
        return NULL;
    }
    const char *key;
    json_t *value;
    json_object_foreach ((json_t *)labels, key, value) {
        keys[i++] = key;
        total += strlen(key) + 1;
    }
    qsort(keys, n, sizeof *keys, compare_keys);
    char *list = calloc(total, 1);
    if (list != NULL) {
        for (i = 0; i < n; i++) {
            if (i > 0)
                strcat(list, ",");
            strcat(list, keys[i]);
        }
    }
    free(keys);
    if (list == NULL || json_object_set_new(json_object_get(meta, "annotations"),
                                            POOL_ANN_NODE_LABELS, json_string(list)) != 0) {
        free(list);
        json_decref(patch);
        return NULL;
    }
    free(list);
    return patch;
}

/* ---- the writer ------------------------------------------------------------------- */

struct node_labeler {
    struct kube_client *kc;
    struct kube_writer *writer; /* holds the labels as its desired state */
    char *path;                 /* /api/v1/nodes/<node> */
    char *node;
};

/* One attempt (kube_writer_fn): read the node (for the keys we own), patch it. */
static int write_labels(json_t *labels, void *ctx, struct kube_error *kerr)
{
    struct node_labeler *l = ctx;
    json_t *node = NULL;
    if (kube_get(l->kc, l->path, &node, kerr) != 0)
        return -1;
    json_t *patch = nodelabels_patch(labels, node);
    json_decref(node);
    if (patch == NULL) {
        snprintf(kerr->message, sizeof kerr->message, "out of memory");
        return -1;
    }
    int rc = kube_patch(l->kc, l->path, KUBE_PATCH_MERGE, patch, NULL, kerr);
    json_decref(patch);
    if (rc == 0)
        log_info("Node labels written to node %s (%zu labels)", l->node, json_object_size(labels));
    return rc;
}

static void labeler_free(struct node_labeler *l)
{
    kube_client_free(l->kc);
    free(l->path);
    free(l->node);
    free(l);
}

int nodelabels_start(const struct gp_config *cfg, const struct gpu_inventory *inv,
                     struct node_labeler **out, char *err, size_t errlen)
{
    *out = NULL;
    if (cfg->node_name == NULL || cfg->node_name[0] == '\0') {
        snprintf(err, errlen, "--node-labels needs this node's name (--node-name or NODE_NAME)");
        return -1;
    }
    struct node_labeler *l = calloc(1, sizeof *l);
    if (l == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    json_t *labels = NULL;
    if (nodelabels_build(cfg, inv, &labels, err, errlen) != 0) {
        labeler_free(l);
        return -1;
    }
    struct kube_client_options opt = {
        .kubeconfig = cfg->kubeconfig && cfg->kubeconfig[0] ? cfg->kubeconfig : NULL,
        .timeout_ms = API_TIMEOUT_MS,
        /* One try per call: the writer retries, and stays cancellable. */
        .retry = {.max_attempts = 1},
    };
    char kerr[512];
    l->node = strdup(cfg->node_name);
    l->kc = kube_client_new(&opt, kerr, sizeof kerr);
    if (l->kc == NULL) {
        snprintf(err, errlen,
                 "cannot configure the Kubernetes API client (--kubeconfig, "
                 "KUBECONFIG or the in-cluster service account): %s",
                 kerr);
        labeler_free(l);
        return -1;
    }
    char *escaped = kube_escape(cfg->node_name);
    size_t len = escaped ? strlen(escaped) + sizeof "/api/v1/nodes/" : 0;
    l->path = escaped ? malloc(len) : NULL;
    if (l->path != NULL)
        snprintf(l->path, len, "/api/v1/nodes/%s", escaped);
    free(escaped);
    if (l->node == NULL || l->path == NULL) {
        snprintf(err, errlen, "out of memory");
        json_decref(labels);
        labeler_free(l);
        return -1;
    }
    /* The labels are state: retried until they land, with jittered backoff
     * and the server's Retry-After (kube_writer.h). No Event: the labels
     * need only nodes get/patch, and a plugin without `create events`
     * would log a refusal for each. */
    char what[300];
    snprintf(what, sizeof what, "node labels of %.250s", l->node);
    const struct kube_writer_options wopt = {
        .what = what,
        .retry = {.initial_backoff_ms = RETRY_MIN_MS, .max_backoff_ms = RETRY_MAX_MS},
        .event_after = -1,
    };
    l->writer = kube_writer_start(l->kc, &wopt, labels, write_labels, l, err, errlen);
    json_decref(labels);
    if (l->writer == NULL) {
        labeler_free(l);
        return -1;
    }
    *out = l;
    return 0;
}

void nodelabels_stop(struct node_labeler *l)
{
    if (l == NULL)
        return;
    kube_writer_stop(l->writer);
    labeler_free(l);
}
