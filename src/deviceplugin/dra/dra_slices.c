/* dra_slices.c -- the node's ResourceSlices: built from the inventory and
 * the GPUs' health, kept true by a reflector and a kube_writer (see
 * dra_slices.h for the format and the rules). */
#include "dra_slices.h"
#include "kube_writer.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"
#include "node_state.h"

#define SLICES_API "/apis/resource.k8s.io/v1/resourceslices"
#define MIB (1024ULL * 1024ULL)
/* How long a write round waits for the reflector's first LIST before it
 * gives up (and the writer's backoff takes over): the LIST says which
 * slices an earlier run left, to be taken over rather than duplicated. */
#define FIRST_LIST_WAIT_MS 2000
#define REMOVE_ROUNDS 3

int dra_consumable_parse(const char *text, enum dra_consumable *out)
{
    if (text == NULL)
        return -1;
    if (strcmp(text, "auto") == 0)
        *out = DRA_CONSUMABLE_AUTO;
    else if (strcmp(text, "on") == 0)
        *out = DRA_CONSUMABLE_ON;
    else if (strcmp(text, "off") == 0)
        *out = DRA_CONSUMABLE_OFF;
    else
        return -1;
    return 0;
}

/* ---- the devices ------------------------------------------------------------------ */

/* A semantic version (Kubernetes validates version attributes as semver
 * 2.0: three numbers without leading zeros) from NVIDIA's dotted forms,
 * "535.104.05" -> "535.104.5", "8.0" -> "8.0.0". false when text has no
 * leading number. */
static bool semver_of(const char *text, char *out, size_t outlen)
{
    unsigned long part[3] = {0, 0, 0};
    const char *p = text;
    int n = 0;
    while (n < 3 && isdigit((unsigned char)*p)) {
        char *end;
        errno = 0;
        part[n++] = strtoul(p, &end, 10);
        if (errno != 0)
            return false;
        p = end;
        if (*p != '.')
            break;
        p++;
    }
    if (n == 0)
        return false;
    snprintf(out, outlen, "%lu.%lu.%lu", part[0], part[1], part[2]);
    return true;
}

/* The architecture's name, as NVML's nvmlDeviceGetArchitecture reports it
 * through go-nvlib, from the compute capability (the inventory does not
 * read the architecture itself); NULL when unknown. */
static const char *architecture_of(int major, int minor)
{
    switch (major) {
    case 3:
        return "Kepler";
    case 5:
        return "Maxwell";
    case 6:
        return "Pascal";
    case 7:
        return minor >= 5 ? "Turing" : "Volta";
    case 8:
        return minor >= 9 ? "Ada Lovelace" : "Ampere";
    case 9:
        return "Hopper";
    case 10:
    case 12:
        return "Blackwell";
    default:
        return NULL;
    }
}

/* NVML's "00000000:3B:00.0" in the sysfs form Kubernetes' standard
 * attribute uses, "0000:3b:00.0". */
static void pci_bus_id_of(const char *nvml, char *out, size_t outlen)
{
    const char *colon = strchr(nvml, ':');
    const char *start = nvml;
    if (colon != NULL && colon - nvml > 4)
        start = colon - 4; /* the domain's last four digits */
    size_t i = 0;
    for (; start[i] != '\0' && i + 1 < outlen; i++)
        out[i] = (char)tolower((unsigned char)start[i]);
    out[i] = '\0';
}

static int set_string(json_t *attrs, const char *name, const char *value)
{
    return json_object_set_new(attrs, name, json_pack("{s:s}", "string", value));
}

static int set_int(json_t *attrs, const char *name, long long value)
{
    return json_object_set_new(attrs, name, json_pack("{s:I}", "int", (json_int_t)value));
}

static int set_version(json_t *attrs, const char *name, const char *text)
{
    char v[64];
    if (text == NULL || !semver_of(text, v, sizeof v))
        return 0; /* unknown: left out */
    return json_object_set_new(attrs, name, json_pack("{s:s}", "version", v));
}

/* Attributes every device of GPU g carries (MIG devices inherit them). */
static int common_attributes(json_t *attrs, const struct gpu_inventory *inv,
                             const struct gpu_device *g, int cuda_driver_version)
{
    int rc = set_string(attrs, "productName", g->name);
    const char *arch = architecture_of(g->cc_major, g->cc_minor);
    if (arch != NULL)
        rc |= set_string(attrs, "architecture", arch);
    if (g->cc_major > 0) {
        char cc[32];
        snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
        rc |= set_version(attrs, "cudaComputeCapability", cc);
    }
    if (inv->driver_version[0] != '\0')
        rc |= set_version(attrs, "driverVersion", inv->driver_version);
    if (cuda_driver_version > 0) {
        char cuda[32];
        snprintf(cuda, sizeof cuda, "%d.%d", cuda_driver_version / 1000,
                 (cuda_driver_version % 1000) / 10);
        rc |= set_version(attrs, "cudaDriverVersion", cuda);
    }
    if (g->pci_bus_id[0] != '\0') {
        char bus[GPU_BUS_ID_LEN];
        pci_bus_id_of(g->pci_bus_id, bus, sizeof bus);
        rc |= set_string(attrs, "pciBusID", bus);
        rc |= set_string(attrs, "resource.kubernetes.io/pciBusID", bus);
    }
    return rc;
}

/* capacity.memory (and a whole GPU's cores), with request policies when
 * shared. */
static json_t *memory_capacity(unsigned long long bytes, bool consumable, bool with_cores)
{
    char value[32];
    snprintf(value, sizeof value, "%llu", bytes);
    json_t *memory = json_pack("{s:s}", "value", value);
    if (memory != NULL && consumable) {
        /* validRange from 1Mi in 1Mi steps: the default must be one of its
         * values, so a total that is not whole MiB is rounded down. */
        char dflt[32];
        snprintf(dflt, sizeof dflt, "%llu", bytes / MIB * MIB);
        json_object_set_new(memory, "requestPolicy",
                            json_pack("{s:s, s:{s:s, s:s}}", "default", dflt, "validRange", "min",
                                      "1Mi", "step", "1Mi"));
    }
    /* cores: percent of the GPU's compute (docs/dra.md). Its default is 0
     * so a claim asking memory only consumes no compute and the GPU's
     * shares are bounded by memory alone; a claim asking nothing still
     * takes the whole GPU through memory's default. */
    json_t *cores = with_cores ? json_pack("{s:s}", "value", "100") : NULL;
    if (cores != NULL && consumable)
        json_object_set_new(cores, "requestPolicy",
                            json_pack("{s:s, s:{s:s, s:s, s:s}}", "default", "0", "validRange",
                                      "min", "0", "max", "100", "step", "1"));
    json_t *cap = json_pack("{s:o}", "memory", memory);
    /* not for MIG devices: NVML measures no per-process utilisation in them */
    if (cap != NULL && with_cores)
        json_object_set_new(cap, "cores", cores);
    else
        json_decref(cores);
    return cap;
}

static json_t *device_object(const char *name, json_t *attrs, unsigned long long memory,
                             bool consumable, bool with_cores)
{
    json_t *dev = json_pack("{s:s, s:o, s:o}", "name", name, "attributes", attrs, "capacity",
                            memory_capacity(memory, consumable, with_cores));
    if (dev != NULL && consumable)
        json_object_set_new(dev, "allowMultipleAllocations", json_true());
    return dev;
}

json_t *dra_slices_devices(const struct gpu_inventory *inv, const bool *healthy,
                           const bool *mig_healthy, bool consumable, int cuda_driver_version)
{
    json_t *devices = json_array();
    if (devices == NULL)
        return NULL;
    size_t mig_pos = 0; /* of the GPU's first MIG device in mig_healthy */
    for (size_t i = 0; i < inv->count; i++) {
        const struct gpu_device *g = &inv->gpus[i];
        size_t first_mig = mig_pos;
        mig_pos += g->mig_count;
        if (g->lost)
            continue;
        /* A MIG device with a health of its own answers for itself: one
         * failed instance does not take its neighbours out. */
        if ((!g->mig_enabled || mig_healthy == NULL) && healthy != NULL && !healthy[i])
            continue;
        char name[64];
        if (!g->mig_enabled) {
            json_t *attrs = json_object();
            if (attrs == NULL)
                goto oom;
            int rc = set_string(attrs, "type", "gpu") | set_string(attrs, "uuid", g->uuid) |
                     common_attributes(attrs, inv, g, cuda_driver_version) |
                     set_int(attrs, "index", g->index) | set_int(attrs, "minor", g->minor);
            snprintf(name, sizeof name, "gpu-%u", g->index);
            if (rc != 0 ||
                json_array_append_new(
                    devices, device_object(name, attrs, g->memory_bytes, consumable, true)) != 0)
                goto oom;
            continue;
        }
        for (size_t j = 0; j < g->mig_count; j++) {
            const struct mig_device *m = &g->migs[j];
            if (mig_healthy != NULL && !mig_healthy[first_mig + j])
                continue;
            json_t *attrs = json_object();
            if (attrs == NULL)
                goto oom;
            int rc = set_string(attrs, "type", "mig") | set_string(attrs, "uuid", m->uuid) |
                     set_string(attrs, "parentUUID", g->uuid) |
                     set_string(attrs, "profile", m->profile) |
                     common_attributes(attrs, inv, g, cuda_driver_version) |
                     set_int(attrs, "parentIndex", g->index) |
                     set_int(attrs, "parentMinor", g->minor);
            snprintf(name, sizeof name, "gpu-%u-mig-%u-%u", g->index, m->gpu_instance_id,
                     m->compute_instance_id);
            if (rc != 0 ||
                json_array_append_new(
                    devices, device_object(name, attrs, m->memory_bytes, consumable, false)) != 0)
                goto oom;
        }
    }
    return devices;
oom:
    json_decref(devices);
    return NULL;
}

/* ---- the publisher ---------------------------------------------------------------- */

enum { CONSUMABLE_UNKNOWN = -1, CONSUMABLE_NO = 0, CONSUMABLE_YES = 1 };

struct dra_slices {
    struct kube_client *kc; /* borrowed */
    char *driver, *node;
    char *list_path; /* SLICES_API?fieldSelector=spec.nodeName=<node>,spec.driver=<driver> */
    const struct gpu_inventory *inv; /* borrowed */
    int cuda_driver_version;
    size_t per_slice;
    enum dra_consumable mode;

    pthread_mutex_t lock; /* the fields below up to the writer's own */
    pthread_cond_t listed_cond;
    bool *healthy;            /* inv->count */
    bool *mig_healthy;        /* one per MIG device, inventory order; NULL: the GPU's health */
    size_t mig_total;         /* MIG devices in the inventory */
    struct node_state *state; /* followed (dra_slices_follow), borrowed; NULL: none */
    int consumable;           /* CONSUMABLE_*: the server's answer (AUTO) or the option */
    json_t *mirror;           /* name -> slice: the reflector's view plus our own writes */
    /* Names the watch saw deleted. A write's answer can arrive after the
     * watch's DELETED event for the object it wrote (the kubelet deleting
     * right after our write): without this, it would put the deleted slice
     * back into the mirror and the round would think all is well. Names
     * come from generateName and are never reused, so a name here stays
     * dead; a re-list, which sees the truth, empties it. */
    json_t *gone;
    bool listed; /* the reflector's first LIST is in the mirror */
    struct dra_slices_status status;

    /* Only the writer's thread touches these. */
    char *node_uid;
    json_t *written;         /* name -> resourceVersion of what the last round stored */
    json_t *written_devices; /* the desired devices that round wrote */
    int64_t generation;

    struct kube_writer *writer;
    struct kube_cancel *cancel;
    pthread_t reflector;
    bool reflector_started;
};

static bool consumable_now(const struct dra_slices *s)
{
    return s->consumable != CONSUMABLE_NO;
}

/* The desired devices for the current health and consumable mode. */
static json_t *desired_locked(struct dra_slices *s)
{
    return dra_slices_devices(s->inv, s->healthy, s->mig_healthy, consumable_now(s),
                              s->cuda_driver_version);
}

/* resourceVersions are opaque, but every apiserver (and the fake) uses
 * etcd's revision, a decimal number; when both parse, the larger is newer. */
static bool older_than(const json_t *incoming, const json_t *cached)
{
    const char *a = json_string_value(
        json_object_get(json_object_get(incoming, "metadata"), "resourceVersion"));
    const char *b =
        json_string_value(json_object_get(json_object_get(cached, "metadata"), "resourceVersion"));
    if (a == NULL || b == NULL)
        return false;
    char *ea, *eb;
    unsigned long long va = strtoull(a, &ea, 10), vb = strtoull(b, &eb, 10);
    return *ea == '\0' && *eb == '\0' && va < vb;
}

static const char *name_of(const json_t *obj)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
}

static const char *rv_of(const json_t *obj)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
}

/* Puts a slice into the mirror unless the mirror has a newer copy. */
static void mirror_put_locked(struct dra_slices *s, json_t *obj)
{
    const char *name = name_of(obj);
    if (name == NULL || json_object_get(s->gone, name) != NULL)
        return;
    json_t *cached = json_object_get(s->mirror, name);
    if (cached != NULL && older_than(obj, cached))
        return;
    json_object_set(s->mirror, name, obj);
}

/* ---- the reflector: the driver's slices on this node ---- */

struct listing {
    struct dra_slices *s;
    json_t *fresh; /* the LIST being read */
};

static int on_list_begin(void *ctx)
{
    struct listing *l = ctx;
    json_decref(l->fresh);
    l->fresh = json_object();
    return l->fresh != NULL ? 0 : -1;
}

static int on_list_item(json_t *item, void *ctx)
{
    struct listing *l = ctx;
    const char *name = name_of(item);
    return name != NULL ? json_object_set(l->fresh, name, item) : 0;
}

static int on_list_end(const char *rv, void *ctx)
{
    (void)rv;
    struct listing *l = ctx;
    struct dra_slices *s = l->s;
    pthread_mutex_lock(&s->lock);
    json_decref(s->mirror);
    s->mirror = l->fresh;
    l->fresh = NULL;
    json_object_clear(s->gone);
    s->listed = true;
    pthread_cond_broadcast(&s->listed_cond);
    pthread_mutex_unlock(&s->lock);
    kube_writer_kick(s->writer);
    return 0;
}

static int on_event(enum kube_event_type type, json_t *obj, void *ctx)
{
    struct listing *l = ctx;
    struct dra_slices *s = l->s;
    if (type == KUBE_EVENT_BOOKMARK)
        return 0;
    const char *name = name_of(obj);
    if (name == NULL)
        return 0;
    pthread_mutex_lock(&s->lock);
    if (type == KUBE_EVENT_DELETED) {
        json_t *cached = json_object_get(s->mirror, name);
        if (cached == NULL || !older_than(obj, cached)) {
            json_object_del(s->mirror, name);
            json_object_set_new(s->gone, name, json_true());
        }
    } else {
        mirror_put_locked(s, obj);
    }
    pthread_mutex_unlock(&s->lock);
    /* Our own writes come back here too: the round that follows finds the
     * mirror equal to what it wrote and sends nothing. */
    kube_writer_kick(s->writer);
    return 0;
}

static void on_reflector_error(const struct kube_error *err, void *ctx)
{
    struct listing *l = ctx;
    log_warn("ResourceSlices of node %s: watch failed: HTTP %d %s: %s; retrying", l->s->node,
             err->http_status, err->reason, err->message);
}

static void *reflector_main(void *arg)
{
    struct dra_slices *s = arg;
    struct listing l = {.s = s};
    const struct kube_reflector_ops ops = {.list_begin = on_list_begin,
                                           .list_item = on_list_item,
                                           .list_end = on_list_end,
                                           .event = on_event,
                                           .on_error = on_reflector_error};
    struct kube_error err = {0};
    enum kube_result r = kube_reflector_run(s->kc, s->list_path, 0, &ops, &l, s->cancel, &err);
    if (r != KUBE_CANCELLED)
        log_error("ResourceSlices of node %s: the watch stopped: %s: %s", s->node, err.reason,
                  err.message);
    json_decref(l.fresh);
    return NULL;
}

/* ---- the writer's round ---- */

static int ensure_node_uid(struct dra_slices *s, struct kube_error *err)
{
    if (s->node_uid != NULL)
        return 0;
    char *node = kube_escape(s->node);
    if (node == NULL)
        return kube_fail(err, 0, "InternalError", "%s", "out of memory");
    char path[512];
    snprintf(path, sizeof path, "/api/v1/nodes/%s", node);
    free(node);
    json_t *obj = NULL;
    if (kube_get(s->kc, path, &obj, err) != 0)
        return -1;
    const char *uid = json_string_value(json_object_get(json_object_get(obj, "metadata"), "uid"));
    s->node_uid = uid != NULL ? strdup(uid) : NULL;
    json_decref(obj);
    if (s->node_uid == NULL)
        return kube_fail(err, 0, "BadResponse", "node %s has no metadata.uid (or out of memory)",
                         s->node);
    return 0;
}

/* True when the mirror holds exactly the objects the last round stored. */
static bool mirror_is_written_locked(struct dra_slices *s)
{
    if (s->written == NULL || json_object_size(s->mirror) != json_object_size(s->written))
        return false;
    const char *name;
    json_t *obj;
    json_object_foreach (s->mirror, name, obj) {
        const char *rv = json_string_value(json_object_get(s->written, name));
        const char *now = rv_of(obj);
        if (rv == NULL || now == NULL || strcmp(rv, now) != 0)
            return false;
    }
    return true;
}

static json_t *slice_object(struct dra_slices *s, json_t *devices, size_t count, int64_t gen)
{
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%.120s-%.120s-", s->node, s->driver);
    return json_pack("{s:s, s:s, s:{s:s, s:[{s:s, s:s, s:s, s:s, s:b}]}, "
                     "s:{s:s, s:s, s:{s:s, s:I, s:I}, s:o}}",
                     "apiVersion", "resource.k8s.io/v1", "kind", "ResourceSlice", "metadata",
                     "generateName", prefix, "ownerReferences", "apiVersion", "v1", "kind", "Node",
                     "name", s->node, "uid", s->node_uid, "controller", true, "spec", "driver",
                     s->driver, "nodeName", s->node, "pool", "name", s->node, "generation",
                     (json_int_t)gen, "resourceSliceCount", (json_int_t)count, "devices", devices);
}

/* What the server kept of our first devices' allowMultipleAllocations. */
static void learn_consumable(struct dra_slices *s, const json_t *stored, bool *switched_off)
{
    json_t *devices = json_object_get(json_object_get(stored, "spec"), "devices");
    if (json_array_size(devices) == 0)
        return; /* nothing to tell by */
    bool kept =
        json_is_true(json_object_get(json_array_get(devices, 0), "allowMultipleAllocations"));
    pthread_mutex_lock(&s->lock);
    s->consumable = kept ? CONSUMABLE_YES : CONSUMABLE_NO;
    s->status.consumable = kept;
    s->status.consumable_known = true;
    pthread_mutex_unlock(&s->lock);
    if (kept) {
        log_info("ResourceSlices of node %s: the API server keeps allowMultipleAllocations: "
                 "consumable capacity on (GPU memory shares)",
                 s->node);
    } else {
        log_warn("ResourceSlices of node %s: the API server dropped allowMultipleAllocations "
                 "(DRAConsumableCapacity off): publishing whole devices only",
                 s->node);
        *switched_off = true;
    }
}

static int write_round(json_t *desired, void *ctx, struct kube_error *err)
{
    struct dra_slices *s = ctx;
    if (desired == NULL)
        return kube_fail(err, 0, "InternalError", "%s", "no desired devices (out of memory)");

    struct timespec until = clock_timespec_ms(clock_now_ms() + FIRST_LIST_WAIT_MS);
    pthread_mutex_lock(&s->lock);
    while (!s->listed && pthread_cond_timedwait(&s->listed_cond, &s->lock, &until) == 0)
        ;
    bool listed = s->listed;
    bool done = listed && s->written_devices != NULL && json_equal(desired, s->written_devices) &&
                mirror_is_written_locked(s);
    /* The slices now there, to be replaced in place (names kept). */
    json_t *existing = listed ? json_deep_copy(s->mirror) : NULL;
    pthread_mutex_unlock(&s->lock);
    if (!listed)
        return kube_fail(err, 0, "NotListed", "the ResourceSlices of node %s are not listed yet",
                         s->node);
    if (done) {
        json_decref(existing);
        return 0;
    }
    if (existing == NULL)
        return kube_fail(err, 0, "InternalError", "%s", "out of memory");
    int rc = -1;
    json_t *stored = json_object();
    if (stored == NULL || ensure_node_uid(s, err) != 0)
        goto out;

    int64_t gen = s->generation;
    const char *name;
    json_t *obj;
    json_object_foreach (existing, name, obj) {
        json_int_t g = json_integer_value(
            json_object_get(json_object_get(json_object_get(obj, "spec"), "pool"), "generation"));
        if (g > gen)
            gen = g;
    }
    gen++;
    size_t ndev = json_array_size(desired);
    size_t count = ndev == 0 ? 1 : (ndev + s->per_slice - 1) / s->per_slice;
    void *iter = json_object_iter(existing);
    bool switched_off = false;
    for (size_t k = 0; k < count; k++) {
        json_t *part = json_array();
        for (size_t d = k * s->per_slice; part != NULL && d < ndev && d < (k + 1) * s->per_slice;
             d++)
            json_array_append(part, json_array_get(desired, d));
        json_t *slice = part != NULL ? slice_object(s, part, count, gen) : NULL;
        if (slice == NULL) {
            kube_fail(err, 0, "InternalError", "%s", "out of memory");
            goto out;
        }
        json_t *answer = NULL;
        int wrc;
        if (iter != NULL) { /* replace one that is there, guarded by its version */
            const char *old = json_object_iter_key(iter);
            json_t *meta = json_object_get(slice, "metadata");
            json_object_del(meta, "generateName");
            json_object_set_new(meta, "name", json_string(old));
            json_object_set(
                meta, "resourceVersion",
                json_object_get(json_object_get(json_object_iter_value(iter), "metadata"),
                                "resourceVersion"));
            char *escaped = kube_escape(old);
            char path[512];
            snprintf(path, sizeof path, SLICES_API "/%s", escaped ? escaped : "");
            free(escaped);
            wrc = kube_put(s->kc, path, slice, &answer, err);
            iter = json_object_iter_next(existing, iter);
        } else {
            wrc = kube_post(s->kc, SLICES_API, slice, &answer, err);
        }
        json_decref(slice);
        if (wrc != 0) {
            json_decref(answer);
            goto out;
        }
        if (name_of(answer) != NULL && rv_of(answer) != NULL) {
            json_object_set_new(stored, name_of(answer), json_string(rv_of(answer)));
            pthread_mutex_lock(&s->lock);
            mirror_put_locked(s, answer);
            bool ask = s->consumable == CONSUMABLE_UNKNOWN;
            pthread_mutex_unlock(&s->lock);
            if (ask)
                learn_consumable(s, answer, &switched_off);
        }
        json_decref(answer);
    }
    /* Slices beyond the pool's new count (fewer devices, or duplicates). */
    for (; iter != NULL; iter = json_object_iter_next(existing, iter)) {
        const char *old = json_object_iter_key(iter);
        const char *uid = json_string_value(
            json_object_get(json_object_get(json_object_iter_value(iter), "metadata"), "uid"));
        char *escaped = kube_escape(old);
        char path[512];
        snprintf(path, sizeof path, SLICES_API "/%s", escaped ? escaped : "");
        free(escaped);
        if (kube_delete(s->kc, path, uid, err) != 0 && !kube_error_not_found(err))
            goto out;
        pthread_mutex_lock(&s->lock);
        json_object_del(s->mirror, old);
        json_object_set_new(s->gone, old, json_true());
        pthread_mutex_unlock(&s->lock);
    }
    s->generation = gen;
    json_decref(s->written);
    s->written = stored;
    stored = NULL;
    json_decref(s->written_devices);
    s->written_devices = json_incref(desired);
    pthread_mutex_lock(&s->lock);
    s->status.generation = gen;
    s->status.slices = count;
    s->status.devices = ndev;
    s->status.write_rounds++;
    json_t *again = switched_off ? desired_locked(s) : NULL;
    pthread_mutex_unlock(&s->lock);
    log_info("ResourceSlices of node %s: pool generation %" PRId64 ", %zu devices in %zu slices",
             s->node, gen, ndev, count);
    if (again != NULL)
        kube_writer_set(s->writer, again); /* rewritten without the dropped fields */
    rc = 0;
out:
    if (rc != 0) {
        pthread_mutex_lock(&s->lock);
        s->status.write_failures++;
        pthread_mutex_unlock(&s->lock);
    }
    json_decref(stored);
    json_decref(existing);
    return rc;
}

/* ---- life cycle ---- */

static void slices_free(struct dra_slices *s)
{
    kube_cancel_free(s->cancel);
    json_decref(s->mirror);
    json_decref(s->gone);
    json_decref(s->written);
    json_decref(s->written_devices);
    free(s->node_uid);
    free(s->healthy);
    free(s->mig_healthy);
    free(s->driver);
    free(s->node);
    free(s->list_path);
    pthread_cond_destroy(&s->listed_cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* SLICES_API?fieldSelector=spec.nodeName=<node>,spec.driver=<driver>, escaped. */
static char *list_path_of(const char *driver, const char *node)
{
    size_t len = strlen(driver) + strlen(node) + 64;
    char *selector = malloc(len);
    if (selector == NULL)
        return NULL;
    snprintf(selector, len, "spec.nodeName=%s,spec.driver=%s", node, driver);
    char *escaped = kube_escape(selector);
    free(selector);
    if (escaped == NULL)
        return NULL;
    size_t plen = strlen(escaped) + sizeof SLICES_API + 32;
    char *path = malloc(plen);
    if (path != NULL)
        snprintf(path, plen, SLICES_API "?fieldSelector=%s", escaped);
    free(escaped);
    return path;
}

int dra_slices_start(const struct dra_slices_options *opt, const struct gpu_inventory *inv,
                     const bool *healthy, struct dra_slices **out, char *err, size_t errlen)
{
    *out = NULL;
    if (opt->client == NULL || opt->driver == NULL || opt->driver[0] == '\0' || opt->node == NULL ||
        opt->node[0] == '\0') {
        snprintf(err, errlen, "ResourceSlices need an API client, a driver name and a node name");
        return -1;
    }
    if (opt->max_devices_per_slice > DRA_SLICE_MAX_DEVICES) {
        snprintf(err, errlen, "at most %d devices fit in one ResourceSlice, not %zu",
                 DRA_SLICE_MAX_DEVICES, opt->max_devices_per_slice);
        return -1;
    }
    struct dra_slices *s = calloc(1, sizeof *s);
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&s->lock, NULL);
    clock_cond_init(&s->listed_cond);
    s->kc = opt->client;
    s->inv = inv;
    s->cuda_driver_version = opt->cuda_driver_version;
    s->per_slice =
        opt->max_devices_per_slice > 0 ? opt->max_devices_per_slice : DRA_SLICE_MAX_DEVICES;
    s->mode = opt->consumable;
    s->consumable = opt->consumable == DRA_CONSUMABLE_AUTO ? CONSUMABLE_UNKNOWN
                    : opt->consumable == DRA_CONSUMABLE_ON ? CONSUMABLE_YES
                                                           : CONSUMABLE_NO;
    s->status.consumable = s->consumable != CONSUMABLE_NO;
    s->status.consumable_known = s->consumable != CONSUMABLE_UNKNOWN;
    s->driver = strdup(opt->driver);
    s->node = strdup(opt->node);
    s->list_path = list_path_of(opt->driver, opt->node);
    s->healthy = malloc((inv->count > 0 ? inv->count : 1) * sizeof *s->healthy);
    s->mirror = json_object();
    s->gone = json_object();
    s->cancel = kube_cancel_new();
    if (s->driver == NULL || s->node == NULL || s->list_path == NULL || s->healthy == NULL ||
        s->mirror == NULL || s->gone == NULL || s->cancel == NULL) {
        snprintf(err, errlen, "out of memory");
        slices_free(s);
        return -1;
    }
    for (size_t i = 0; i < inv->count; i++) {
        s->healthy[i] = healthy == NULL || healthy[i];
        s->mig_total += inv->gpus[i].mig_count;
    }
    json_t *desired = desired_locked(s); /* no other thread yet */
    char what[300];
    snprintf(what, sizeof what, "ResourceSlices of node %.250s", s->node);
    const struct kube_writer_options wopt = {
        .what = what,
        /* Short first waits: a 409 from a mirror a moment behind is the
         * common failure, and the goal is slices back within a second. */
        .retry = {.initial_backoff_ms = 100, .max_backoff_ms = 30000},
        .about = {.api_version = "v1", .kind = "Node", .name = s->node},
        .event_reason = "ResourceSlicePublishFailed",
        .component = "gpupool-dra-plugin",
        .host = s->node,
    };
    s->writer = desired != NULL
                    ? kube_writer_start(s->kc, &wopt, desired, write_round, s, err, errlen)
                    : NULL;
    if (desired == NULL)
        snprintf(err, errlen, "out of memory");
    json_decref(desired);
    if (s->writer == NULL) {
        slices_free(s);
        return -1;
    }
    int rc = pthread_create(&s->reflector, NULL, reflector_main, s);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the ResourceSlice watch thread: %s", strerror(rc));
        kube_writer_stop(s->writer);
        slices_free(s);
        return -1;
    }
    s->reflector_started = true;
    *out = s;
    return 0;
}

/* Rebuilds the desired devices after the health arrays changed (lock held). */
static void publish_health_locked(struct dra_slices *s)
{
    json_t *desired = desired_locked(s);
    if (desired == NULL) {
        log_error("ResourceSlices of node %s: out of memory building the devices", s->node);
        return;
    }
    kube_writer_set(s->writer, desired); /* an unchanged pool costs one comparison */
}

void dra_slices_health_changed(struct dra_slices *s, const bool *healthy)
{
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->inv->count; i++)
        s->healthy[i] = healthy == NULL || healthy[i];
    free(s->mig_healthy); /* the caller speaks for whole GPUs */
    s->mig_healthy = NULL;
    publish_health_locked(s);
    pthread_mutex_unlock(&s->lock);
}

/* Copies the followed state's health (lock held). */
static void read_state_locked(struct dra_slices *s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->inv->count; i++) {
        const struct gpu_device *g = &s->inv->gpus[i];
        s->healthy[i] = !node_state_gpu_lost(s->state, i) &&
                        node_state_healthy(s->state, i, NODE_STATE_WHOLE_GPU);
        for (size_t j = 0; j < g->mig_count; j++, k++)
            s->mig_healthy[k] = node_state_healthy(s->state, i, (int)j);
    }
}

/* node_state observer: any change, re-read everything (a handful of bools). */
static void on_state_change(void *ctx, const struct node_state_change *change)
{
    struct dra_slices *s = ctx;
    (void)change;
    pthread_mutex_lock(&s->lock);
    if (s->state != NULL && s->mig_healthy != NULL) {
        read_state_locked(s);
        publish_health_locked(s);
    }
    pthread_mutex_unlock(&s->lock);
}

int dra_slices_follow(struct dra_slices *s, struct node_state *state, char *err, size_t errlen)
{
    bool *mig = calloc(s->mig_total > 0 ? s->mig_total : 1, sizeof *mig);
    if (mig == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&s->lock);
    free(s->mig_healthy);
    s->mig_healthy = mig;
    s->state = state;
    read_state_locked(s);
    publish_health_locked(s);
    pthread_mutex_unlock(&s->lock);
    if (node_state_add_observer(state, s, on_state_change) != 0) {
        pthread_mutex_lock(&s->lock);
        s->state = NULL;
        pthread_mutex_unlock(&s->lock);
        snprintf(err, errlen, "cannot observe the GPUs' health: too many observers");
        return -1;
    }
    /* A change between the read above and the registration: read again. */
    on_state_change(s, NULL);
    return 0;
}

static void unfollow(struct dra_slices *s)
{
    pthread_mutex_lock(&s->lock);
    struct node_state *state = s->state;
    s->state = NULL;
    pthread_mutex_unlock(&s->lock);
    if (state != NULL)
        node_state_remove_observer(state, s, on_state_change);
}


bool dra_slices_wait_published(struct dra_slices *s, long timeout_ms)
{
    return kube_writer_wait_synced(s->writer, timeout_ms);
}

void dra_slices_status(struct dra_slices *s, struct dra_slices_status *out)
{
    pthread_mutex_lock(&s->lock);
    *out = s->status;
    pthread_mutex_unlock(&s->lock);
}

int dra_slices_stop(struct dra_slices *s, bool remove, char *err, size_t errlen)
{
    if (s == NULL)
        return 0;
    unfollow(s); /* no observer call from here on */
    kube_cancel_fire(s->cancel);
    if (s->reflector_started)
        pthread_join(s->reflector, NULL);
    kube_writer_stop(s->writer);
    int rc = 0;
    if (remove)
        rc = dra_slices_remove_all(s->kc, s->driver, s->node, err, errlen);
    slices_free(s);
    return rc;
}

struct name_list {
    json_t *names; /* [[name, uid]...] */
};

static int collect_name(json_t *item, void *ctx)
{
    struct name_list *l = ctx;
    json_t *meta = json_object_get(item, "metadata");
    return json_array_append_new(
        l->names, json_pack("[O, O]", json_object_get(meta, "name"), json_object_get(meta, "uid")));
}

int dra_slices_remove_all(struct kube_client *client, const char *driver, const char *node,
                          char *err, size_t errlen)
{
    char *list_path = list_path_of(driver, node);
    if (list_path == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    struct kube_error kerr = {0};
    int rc = -1;
    for (int round = 1; round <= REMOVE_ROUNDS && rc != 0; round++) {
        if (round > 1) {
            struct timespec wait = clock_deadline(
                CLOCK_MONOTONIC, kube_retry_delay_ms(client, NULL, round - 1, &kerr));
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &wait, NULL) == EINTR)
                ;
        }
        struct name_list l = {.names = json_array()};
        if (l.names == NULL) {
            snprintf(kerr.message, sizeof kerr.message, "out of memory");
            break;
        }
        if (kube_list(client, list_path, 0, KUBE_LIST_CONSISTENT, collect_name, &l, NULL, &kerr) !=
            KUBE_OK) {
            json_decref(l.names);
            if (!kube_error_transient(&kerr))
                break;
            continue;
        }
        rc = 0;
        size_t i;
        json_t *pair;
        json_array_foreach (l.names, i, pair) {
            const char *name = json_string_value(json_array_get(pair, 0));
            char *escaped = name != NULL ? kube_escape(name) : NULL;
            char path[512];
            snprintf(path, sizeof path, SLICES_API "/%s", escaped ? escaped : "");
            free(escaped);
            if (name != NULL &&
                kube_delete(client, path, json_string_value(json_array_get(pair, 1)), &kerr) != 0 &&
                !kube_error_not_found(&kerr))
                rc = -1;
            else if (name != NULL)
                log_info("ResourceSlice %s of node %s deleted", name, node);
        }
        json_decref(l.names);
        if (rc != 0 && !kube_error_transient(&kerr))
            break;
    }
    if (rc != 0)
        snprintf(err, errlen, "cannot delete the ResourceSlices of %s on node %s: HTTP %d %s: %s",
                 driver, node, kerr.http_status, kerr.reason, kerr.message);
    free(list_path);
    return rc;
}
