/* health.c -- XID health checking with recovery (see health.h). */
#include "health.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "log.h"

/* How long one EventSetWait blocks: also the worst-case delay of a stop. */
#define HEALTH_WAIT_MS 250
#define HEALTH_NOT_ATTRIBUTED 0xFFFFFFFFu

/* NVIDIA's "application error" XIDs: the GPU itself is fine. */
static const unsigned long long default_ignored_xids[] = {13, 31, 43, 45, 68, 109};

struct gpu_state {
    nvmlDevice_t handle;      /* NULL until registered */
    bool registered;          /* events flow for this GPU */
    bool unhealthy;           /* some device carved from it is Unhealthy */
    bool lost;                /* fell off the bus: never recovers */
    int good_probes;
};

struct health_monitor {
    struct nvml *nvml;
    const struct gpu_inventory *inv;
    struct plugin_node *node;
    struct health_policy policy;
    int recovery_probes;
    int probe_interval_ms;
    nvmlEventSet_t set;
    struct gpu_state *gpus;
    pthread_t thread;
    atomic_bool stop;
};

/* ---- policy ------------------------------------------------------------- */

static bool list_contains(const unsigned long long *list, size_t n, unsigned long long xid)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] == xid)
            return true;
    return false;
}

static void list_add(unsigned long long *list, size_t *n, unsigned long long xid)
{
    if (*n < HEALTH_MAX_XIDS && !list_contains(list, *n, xid))
        list[(*n)++] = xid;
}

/* Calls fn for each comma-separated, trimmed token of s. */
static void for_each_token(const char *s, void (*fn)(struct health_policy *, const char *, bool),
                           struct health_policy *p, bool enable)
{
    char token[64];
    while (s != NULL && *s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        while (len > 0 && isspace((unsigned char)*s)) {
            s++;
            len--;
        }
        while (len > 0 && isspace((unsigned char)s[len - 1]))
            len--;
        if (len > 0 && len < sizeof token) {
            memcpy(token, s, len);
            token[len] = '\0';
            fn(p, token, enable);
        } else if (len >= sizeof token) {
            log_warn("ignoring over-long health check entry \"%.*s...\"", 16, s);
        }
        s = end ? end + 1 : NULL;
    }
}

static void apply_token(struct health_policy *p, const char *token, bool enable)
{
    if (strcasecmp(token, "all") == 0 || (!enable && strcasecmp(token, "xids") == 0)) {
        if (enable)
            p->enable_all = true;
        else
            p->disabled = true;
        return;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long xid = strtoull(token, &end, 10);
    if (errno != 0 || end == token || *end != '\0' || token[0] == '-') {
        log_warn("ignoring malformed XID \"%s\" in %s", token,
                 enable ? "DP_ENABLE_HEALTHCHECKS" : "DP_DISABLE_HEALTHCHECKS");
        return;
    }
    if (enable)
        list_add(p->enabled, &p->enabled_count, xid);
    else
        list_add(p->ignored, &p->ignored_count, xid);
}

void health_policy_init(struct health_policy *p, const char *disable, const char *enable)
{
    memset(p, 0, sizeof *p);
    for (size_t i = 0; i < sizeof default_ignored_xids / sizeof default_ignored_xids[0]; i++)
        list_add(p->ignored, &p->ignored_count, default_ignored_xids[i]);
    for_each_token(disable, apply_token, p, false);
    for_each_token(enable, apply_token, p, true);
}

bool health_xid_is_critical(const struct health_policy *p, unsigned long long xid)
{
    if (p->enable_all || list_contains(p->enabled, p->enabled_count, xid))
        return true;
    return !list_contains(p->ignored, p->ignored_count, xid);
}

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void mark_gpu(struct health_monitor *m, size_t gpu, int mig, const char *why)
{
    struct gpu_state *s = &m->gpus[gpu];
    size_t changed = mig == RESOURCE_NO_MIG ? plugin_node_set_gpu_health(m->node, gpu, false)
                                            : plugin_node_set_mig_health(m->node, gpu, mig, false);
    s->unhealthy = true;
    s->good_probes = 0;
    log_warn("GPU %u (%s): %s; %zu devices marked Unhealthy%s", m->inv->gpus[gpu].index,
             m->inv->gpus[gpu].uuid, why, changed,
             s->lost ? " (lost: it will not recover without a restart)" : "");
}

static void mark_all(struct health_monitor *m, const char *why)
{
    size_t changed = plugin_node_set_all_health(m->node, false);
    for (size_t i = 0; i < m->inv->count; i++) {
        m->gpus[i].unhealthy = true;
        m->gpus[i].good_probes = 0;
    }
    log_error("%s; %zu devices marked Unhealthy", why, changed);
}

/* ---- registration ----------------------------------------------------------- */

static void register_gpu(struct health_monitor *m, size_t i)
{
    struct gpu_state *s = &m->gpus[i];
    const struct gpu_device *g = &m->inv->gpus[i];
    unsigned long long supported = 0;
    char why[256];
    nvmlReturn_t rc = m->nvml->DeviceGetHandleByUUID(g->uuid, &s->handle);
    if (rc == NVML_SUCCESS)
        rc = m->nvml->DeviceGetSupportedEventTypes(s->handle, &supported);
    if (rc != NVML_SUCCESS) {
        s->lost = rc == NVML_ERROR_GPU_IS_LOST;
        snprintf(why, sizeof why, "cannot set up health checks: %s",
                 nvml_strerror(m->nvml, rc));
        mark_gpu(m, i, RESOURCE_NO_MIG, why);
        return;
    }
    unsigned long long mask = (nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
                               nvmlEventTypeSingleBitEccError) & supported;
    rc = m->nvml->DeviceRegisterEvents(s->handle, mask, m->set);
    if (rc == NVML_ERROR_NOT_SUPPORTED) {
        log_warn("GPU %u (%s) is too old to support health checking", g->index, g->uuid);
        s->registered = true;
        return;
    }
    if (rc != NVML_SUCCESS) {
        snprintf(why, sizeof why, "cannot register for XID events: %s",
                 nvml_strerror(m->nvml, rc));
        mark_gpu(m, i, RESOURCE_NO_MIG, why);
        return;
    }
    s->registered = true;
}

/* ---- events ------------------------------------------------------------------ */

static long gpu_of_handle(const struct health_monitor *m, nvmlDevice_t h)
{
    for (size_t i = 0; i < m->inv->count; i++)
        if (m->gpus[i].handle == h && h != NULL)
            return (long)i;
    return -1;
}

static int mig_of_event(const struct gpu_device *g, const nvmlEventData_t *ev)
{
    if (!g->mig_enabled || ev->gpuInstanceId == HEALTH_NOT_ATTRIBUTED)
        return RESOURCE_NO_MIG;
    for (size_t j = 0; j < g->mig_count; j++) {
        if (g->migs[j].gpu_instance_id != ev->gpuInstanceId)
            continue;
        if (ev->computeInstanceId == HEALTH_NOT_ATTRIBUTED ||
            g->migs[j].compute_instance_id == ev->computeInstanceId)
            return (int)j;
    }
    return RESOURCE_NO_MIG;
}

static void handle_event(struct health_monitor *m, const nvmlEventData_t *ev)
{
    if ((ev->eventType & nvmlEventTypeXidCriticalError) == 0) {
        log_v(1, "ignoring non-XID NVML event 0x%llx", ev->eventType);
        return;
    }
    unsigned long long xid = ev->eventData;
    long gpu = gpu_of_handle(m, ev->device);
    if (gpu < 0) {
        char why[128];
        snprintf(why, sizeof why, "XID %llu on a device that cannot be identified", xid);
        mark_all(m, why);
        return;
    }
    const struct gpu_device *g = &m->inv->gpus[gpu];
    if (!health_xid_is_critical(&m->policy, xid)) {
        log_info("Skipping XID %llu on GPU %u (%s): application error, not a device failure",
                 xid, g->index, g->uuid);
        return;
    }
    if (xid == HEALTH_XID_GPU_LOST)
        m->gpus[gpu].lost = true;
    char why[64];
    snprintf(why, sizeof why, "XID %llu", xid);
    mark_gpu(m, (size_t)gpu, mig_of_event(g, ev), why);
}

/* ---- recovery ---------------------------------------------------------------- */

/* A device answers correctly when NVML finds it by UUID, reports the same
 * UUID back and can read its memory. */
static nvmlReturn_t probe(struct health_monitor *m, size_t i)
{
    const struct gpu_device *g = &m->inv->gpus[i];
    nvmlDevice_t h = NULL;
    char uuid[GPU_UUID_LEN];
    nvmlMemory_t mem;
    nvmlReturn_t rc = m->nvml->DeviceGetHandleByUUID(g->uuid, &h);
    if (rc == NVML_SUCCESS)
        rc = m->nvml->DeviceGetUUID(h, uuid, sizeof uuid);
    if (rc == NVML_SUCCESS && strcmp(uuid, g->uuid) != 0)
        rc = NVML_ERROR_UNKNOWN;
    if (rc == NVML_SUCCESS)
        rc = m->nvml->DeviceGetMemoryInfo(h, &mem);
    return rc;
}

static void probe_unhealthy(struct health_monitor *m)
{
    for (size_t i = 0; i < m->inv->count; i++) {
        struct gpu_state *s = &m->gpus[i];
        if (!s->unhealthy || s->lost)
            continue;
        nvmlReturn_t rc = probe(m, i);
        if (rc == NVML_ERROR_GPU_IS_LOST) {
            s->lost = true;
            log_warn("GPU %u (%s) is lost: it stays Unhealthy", m->inv->gpus[i].index,
                     m->inv->gpus[i].uuid);
            continue;
        }
        if (rc != NVML_SUCCESS) {
            s->good_probes = 0;
            log_v(1, "GPU %u still failing its health probe: %s", m->inv->gpus[i].index,
                  nvml_strerror(m->nvml, rc));
            continue;
        }
        if (++s->good_probes < m->recovery_probes)
            continue;
        if (!s->registered)
            register_gpu(m, i);
        size_t changed = plugin_node_set_gpu_health(m->node, i, true);
        s->unhealthy = false;
        s->good_probes = 0;
        log_info("GPU %u (%s) answered %d health probes in a row; %zu devices Healthy again",
                 m->inv->gpus[i].index, m->inv->gpus[i].uuid, m->recovery_probes, changed);
    }
}

static bool recovery_pending(const struct health_monitor *m)
{
    if (m->recovery_probes <= 0)
        return false;
    for (size_t i = 0; i < m->inv->count; i++)
        if (m->gpus[i].unhealthy && !m->gpus[i].lost)
            return true;
    return false;
}

static void *health_thread(void *arg)
{
    struct health_monitor *m = arg;
    uint64_t next_probe = now_ms() + (uint64_t)m->probe_interval_ms;
    while (!atomic_load(&m->stop)) {
        unsigned timeout = HEALTH_WAIT_MS;
        bool pending = recovery_pending(m);
        if (pending) {
            uint64_t now = now_ms();
            uint64_t left = next_probe > now ? next_probe - now : 0;
            if (left < timeout)
                timeout = (unsigned)left;
        }
        nvmlEventData_t ev;
        memset(&ev, 0, sizeof ev);
        nvmlReturn_t rc = m->nvml->EventSetWait(m->set, &ev, timeout);
        if (rc == NVML_SUCCESS) {
            handle_event(m, &ev);
        } else if (rc != NVML_ERROR_TIMEOUT) {
            char why[192];
            snprintf(why, sizeof why, "waiting for NVML events failed: %s",
                     nvml_strerror(m->nvml, rc));
            mark_all(m, why);
            /* Do not spin on a broken event set; recovery probes still run. */
            struct timespec pause = {.tv_nsec = HEALTH_WAIT_MS * 1000000L};
            nanosleep(&pause, NULL);
        }
        uint64_t now = now_ms();
        if (!pending) {
            next_probe = now + (uint64_t)m->probe_interval_ms;
        } else if (now >= next_probe) {
            probe_unhealthy(m);
            next_probe = now + (uint64_t)m->probe_interval_ms;
        }
    }
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------------- */

int health_monitor_start(struct nvml *nvml, const struct gpu_inventory *inv,
                         struct plugin_node *node, const struct gp_config *cfg,
                         struct health_monitor **out, char *err, size_t errlen)
{
    *out = NULL;
    struct health_policy policy;
    health_policy_init(&policy, cfg->disable_healthchecks, cfg->enable_healthchecks);
    if (policy.disabled) {
        log_info("Health checks disabled (DP_DISABLE_HEALTHCHECKS=%s)",
                 cfg->disable_healthchecks);
        return 0;
    }
    struct health_monitor *m = calloc(1, sizeof *m);
    struct gpu_state *gpus = calloc(inv->count ? inv->count : 1, sizeof *gpus);
    if (m == NULL || gpus == NULL) {
        free(m);
        free(gpus);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->nvml = nvml;
    m->inv = inv;
    m->node = node;
    m->policy = policy;
    m->recovery_probes = cfg->health_recovery_probes;
    m->probe_interval_ms = cfg->health_probe_interval_ms > 0 ? cfg->health_probe_interval_ms : 1;
    m->gpus = gpus;
    nvmlReturn_t rc = nvml->EventSetCreate(&m->set);
    if (rc != NVML_SUCCESS) {
        /* Unmonitored GPUs are not trusted (NVIDIA's "zombie node", its #1640). */
        snprintf(err, errlen, "nvmlEventSetCreate failed: %s; all devices marked Unhealthy",
                 nvml_strerror(nvml, rc));
        plugin_node_set_all_health(node, false);
        free(gpus);
        free(m);
        return -1;
    }
    for (size_t i = 0; i < inv->count; i++)
        register_gpu(m, i);
    int prc = pthread_create(&m->thread, NULL, health_thread, m);
    if (prc != 0) {
        snprintf(err, errlen, "cannot start the health thread: %s; continuing without health "
                 "checks", strerror(prc));
        nvml->EventSetFree(m->set);
        free(gpus);
        free(m);
        return -1;
    }
    log_info("Health checks started for %zu GPUs (recovery after %d good probes, every %d ms)",
             inv->count, m->recovery_probes, m->probe_interval_ms);
    *out = m;
    return 0;
}

void health_monitor_stop(struct health_monitor *m)
{
    if (m == NULL)
        return;
    atomic_store(&m->stop, true);
    pthread_join(m->thread, NULL);
    m->nvml->EventSetFree(m->set);
    free(m->gpus);
    free(m);
}
