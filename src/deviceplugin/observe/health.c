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

#include "clock.h"
#include "log.h"
#include "plugin_metrics.h"

/* How long one EventSetWait (or pause) blocks: also the worst-case delay
 * of a stop. */
#define HEALTH_WAIT_MS 250
/* Retries of a monitoring set-up or an event wait that failed: the delay
 * doubles per failure, from ... */
#define HEALTH_RETRY_MIN_MS 250
/* ... up to this. */
#define HEALTH_RETRY_MAX_MS 30000
#define HEALTH_NOT_ATTRIBUTED 0xFFFFFFFFu
#define HEALTH_WHY_LEN 160

/* NVIDIA's "application error" XIDs: the GPU itself is fine. */
static const unsigned long long default_ignored_xids[] = {13, 31, 43, 45, 68, 109};

/* A GPU's devices are Healthy when it is watched (its events flow), not
 * unhealthy and not lost. */
struct gpu_state {
    nvmlDevice_t handle; /* NULL until registered */
    bool registered;     /* events registered (or the GPU cannot have any) */
    bool watched;        /* what its devices last showed about monitoring */
    bool unhealthy;      /* an XID: recovery probes bring it back */
    bool lost;           /* fell off the bus: never recovers */
    int good_probes;
    char probe_why[HEALTH_WHY_LEN]; /* last failed probe's reason, logged once */
};

struct health_monitor {
    struct nvml *nvml;
    const struct gpu_inventory *inv;
    struct node_state *state;       /* what the node's servers advertise */
    struct plugin_metrics *metrics; /* XID counters; NULL = off */
    struct health_policy policy;
    int recovery_probes;
    int probe_interval_ms;
    nvmlEventSet_t set;  /* NULL until nvmlEventSetCreate succeeds */
    bool wait_failing;   /* nvmlEventSetWait fails: nothing is watched */
    bool started;        /* "Health checks started" was logged */
    int retry_ms;        /* delay before the next retry */
    uint64_t next_retry; /* CLOCK_MONOTONIC ms of the next set-up / wait retry */
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

static void mark_gpu(struct health_monitor *m, size_t gpu, int mig, const char *why)
{
    struct gpu_state *s = &m->gpus[gpu];
    size_t changed = mig == NODE_STATE_WHOLE_GPU
                         ? node_state_set_gpu_health(m->state, gpu, false)
                         : node_state_set_mig_health(m->state, gpu, mig, false);
    s->unhealthy = true;
    s->good_probes = 0;
    s->probe_why[0] = '\0';
    if (s->lost)
        node_state_set_gpu_lost(m->state, gpu);
    log_warn("GPU %u (%s): %s; %zu GPU/MIG devices marked Unhealthy%s", m->inv->gpus[gpu].index,
             m->inv->gpus[gpu].uuid, why, changed,
             s->lost ? " (lost: it will not recover without a restart)" : "");
}

static void mark_all(struct health_monitor *m, const char *why)
{
    size_t changed = node_state_set_all_health(m->state, false);
    for (size_t i = 0; i < m->inv->count; i++) {
        m->gpus[i].unhealthy = true;
        m->gpus[i].good_probes = 0;
        m->gpus[i].probe_why[0] = '\0';
    }
    log_error("%s; %zu GPU/MIG devices marked Unhealthy", why, changed);
}

/* ---- monitoring state ------------------------------------------------------- */

static bool is_watched(const struct health_monitor *m, size_t i)
{
    return m->set != NULL && m->gpus[i].registered && !m->wait_failing;
}

/* Shows a change in whether GPU i is watched on its devices: an unwatched
 * GPU is not trusted (NVIDIA's "zombie node", its #1640), and becomes
 * Healthy again as soon as it is watched, unless an XID keeps it down. */
static void update_watched(struct health_monitor *m, size_t i)
{
    struct gpu_state *s = &m->gpus[i];
    bool watched = is_watched(m, i);
    if (s->lost || s->watched == watched)
        return;
    s->watched = watched;
    const struct gpu_device *g = &m->inv->gpus[i];
    if (!watched) {
        size_t changed = node_state_set_gpu_health(m->state, i, false);
        log_v(1, "GPU %u (%s) is not monitored; %zu GPU/MIG devices marked Unhealthy", g->index,
              g->uuid, changed);
    } else if (!s->unhealthy) {
        size_t changed = node_state_set_gpu_health(m->state, i, true);
        log_info("GPU %u (%s) is monitored again; %zu GPU/MIG devices Healthy", g->index, g->uuid,
                 changed);
    }
}

static void update_all_watched(struct health_monitor *m)
{
    for (size_t i = 0; i < m->inv->count; i++)
        update_watched(m, i);
}

static bool all_registered(const struct health_monitor *m)
{
    if (m->set == NULL)
        return false;
    for (size_t i = 0; i < m->inv->count; i++)
        if (!m->gpus[i].registered && !m->gpus[i].lost)
            return false;
    return true;
}

/* Sets the next retry and doubles the delay after it. Returns the delay. */
static int schedule_retry(struct health_monitor *m)
{
    int delay = m->retry_ms;
    m->next_retry = (uint64_t)clock_now_ms() + (uint64_t)delay;
    m->retry_ms = delay * 2 < HEALTH_RETRY_MAX_MS ? delay * 2 : HEALTH_RETRY_MAX_MS;
    return delay;
}

static void log_started(struct health_monitor *m)
{
    if (m->started)
        return;
    m->started = true;
    log_info("Health checks started for %zu GPUs (recovery after %d good probes, every %d ms)",
             m->inv->count, m->recovery_probes, m->probe_interval_ms);
}

/* ---- registration ----------------------------------------------------------- */

/* Returns true when GPU i's events flow (or it is too old to have any).
 * On failure `why` says what failed; a lost GPU is marked as such. */
static bool register_gpu(struct health_monitor *m, size_t i, char *why, size_t whylen)
{
    struct gpu_state *s = &m->gpus[i];
    const struct gpu_device *g = &m->inv->gpus[i];
    unsigned long long supported = 0;
    nvmlReturn_t rc = m->nvml->DeviceGetHandleByUUID(g->uuid, &s->handle);
    if (rc == NVML_SUCCESS)
        rc = m->nvml->DeviceGetSupportedEventTypes(s->handle, &supported);
    if (rc == NVML_ERROR_GPU_IS_LOST) {
        s->lost = true;
        mark_gpu(m, i, NODE_STATE_WHOLE_GPU, "lost while setting up health checks");
        return false;
    }
    if (rc != NVML_SUCCESS) {
        snprintf(why, whylen, "GPU %u (%s): cannot set up health checks: %s", g->index, g->uuid,
                 nvml_strerror(m->nvml, rc));
        return false;
    }
    unsigned long long mask = (nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
                               nvmlEventTypeSingleBitEccError) &
                              supported;
    rc = m->nvml->DeviceRegisterEvents(s->handle, mask, m->set);
    if (rc == NVML_ERROR_NOT_SUPPORTED) {
        log_warn("GPU %u (%s) is too old to support health checking", g->index, g->uuid);
        s->registered = true;
        return true;
    }
    if (rc != NVML_SUCCESS) {
        snprintf(why, whylen, "GPU %u (%s): cannot register for XID events: %s", g->index, g->uuid,
                 nvml_strerror(m->nvml, rc));
        return false;
    }
    s->registered = true;
    return true;
}

/* Creates the event set and registers every GPU not yet registered.
 * Returns true when monitoring is complete; otherwise `why` names the
 * first failure. Devices of unwatched GPUs are Unhealthy meanwhile. */
static bool set_up_monitoring(struct health_monitor *m, char *why, size_t whylen)
{
    why[0] = '\0';
    if (m->set == NULL) {
        nvmlReturn_t rc = m->nvml->EventSetCreate(&m->set);
        if (rc != NVML_SUCCESS) {
            m->set = NULL;
            snprintf(why, whylen, "nvmlEventSetCreate failed: %s", nvml_strerror(m->nvml, rc));
            update_all_watched(m);
            return false;
        }
    }
    bool complete = true;
    for (size_t i = 0; i < m->inv->count; i++) {
        struct gpu_state *s = &m->gpus[i];
        if (s->registered || s->lost)
            continue;
        char gpu_why[HEALTH_WHY_LEN + 64];
        if (!register_gpu(m, i, gpu_why, sizeof gpu_why) && !s->lost) {
            complete = false;
            if (why[0] == '\0')
                snprintf(why, whylen, "%s", gpu_why);
        }
    }
    update_all_watched(m);
    return complete;
}

/* One retry of an incomplete set-up, when its time has come. */
static void retry_set_up(struct health_monitor *m)
{
    char why[HEALTH_WHY_LEN * 2];
    if (all_registered(m) || (uint64_t)clock_now_ms() < m->next_retry)
        return;
    if (set_up_monitoring(m, why, sizeof why)) {
        m->retry_ms = HEALTH_RETRY_MIN_MS;
        log_info("Health monitoring set up after retrying");
        log_started(m);
        return;
    }
    int delay = schedule_retry(m);
    log_warn("Health checks not ready: %s; unmonitored devices stay Unhealthy; retrying in %d ms",
             why, delay);
}

/* ---- events ------------------------------------------------------------------ */

static long gpu_of_handle(const struct health_monitor *m, nvmlDevice_t h)
{
    for (size_t i = 0; i < m->inv->count; i++)
        if (m->gpus[i].handle == h && h != NULL)
            return (long)i;
    return -1;
}

/* The MIG device an XID is attributed to, or NODE_STATE_WHOLE_GPU for the whole
 * GPU. node_state_set_mig_health() also marks the GPU where it is served
 * whole (--mig-strategy none on a MIG-enabled GPU), so the attribution
 * never drops an event. */
static int mig_of_event(const struct gpu_device *g, const nvmlEventData_t *ev)
{
    if (!g->mig_enabled || ev->gpuInstanceId == HEALTH_NOT_ATTRIBUTED)
        return NODE_STATE_WHOLE_GPU;
    for (size_t j = 0; j < g->mig_count; j++) {
        if (g->migs[j].gpu_instance_id != ev->gpuInstanceId)
            continue;
        if (ev->computeInstanceId == HEALTH_NOT_ATTRIBUTED ||
            g->migs[j].compute_instance_id == ev->computeInstanceId)
            return (int)j;
    }
    return NODE_STATE_WHOLE_GPU;
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
    metrics_count_xid(m->metrics, g, xid);
    if (!health_xid_is_critical(&m->policy, xid)) {
        log_info("Skipping XID %llu on GPU %u (%s): application error, not a device failure", xid,
                 g->index, g->uuid);
        return;
    }
    if (xid == HEALTH_XID_GPU_LOST)
        m->gpus[gpu].lost = true;
    char why[64];
    snprintf(why, sizeof why, "XID %llu", xid);
    mark_gpu(m, (size_t)gpu, mig_of_event(g, ev), why);
}

/* nvmlEventSetWait failed: nothing is watched until it works again. The
 * retries back off so that a broken event set costs one log line per
 * retry, not one every HEALTH_WAIT_MS. */
static void wait_failed(struct health_monitor *m, nvmlReturn_t rc)
{
    bool first = !m->wait_failing;
    m->wait_failing = true;
    update_all_watched(m);
    int delay = schedule_retry(m);
    if (first)
        log_error("waiting for NVML events failed: %s; all devices Unhealthy until it works; "
                  "retrying in %d ms",
                  nvml_strerror(m->nvml, rc), delay);
    else
        log_warn("waiting for NVML events still fails: %s; retrying in %d ms",
                 nvml_strerror(m->nvml, rc), delay);
}

static void wait_works(struct health_monitor *m)
{
    if (!m->wait_failing)
        return;
    m->wait_failing = false;
    m->retry_ms = HEALTH_RETRY_MIN_MS;
    log_info("waiting for NVML events works again");
    update_all_watched(m);
}

/* ---- recovery ---------------------------------------------------------------- */

enum probe_result { PROBE_GOOD, PROBE_BAD, PROBE_LOST };

static bool probe_call_failed(nvmlReturn_t rc)
{
    /* Old drivers and GPUs without the feature: that check does not apply. */
    return rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_SUPPORTED &&
           rc != NVML_ERROR_FUNCTION_NOT_FOUND;
}

/* Memory the driver still has to repair: a pending row remap (applied at
 * the next GPU reset) or pending page retirement means the GPU is not fit
 * for new work yet, though it answers. */
static enum probe_result probe_memory(struct health_monitor *m, nvmlDevice_t h, char *why,
                                      size_t whylen)
{
    nvmlReturn_t rc = NVML_ERROR_FUNCTION_NOT_FOUND;
    unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
    if (m->nvml->DeviceGetRemappedRows != NULL)
        rc = m->nvml->DeviceGetRemappedRows(h, &corrected, &uncorrected, &pending, &failed);
    if (rc == NVML_SUCCESS && (pending || failed)) {
        snprintf(why, whylen, "%s (%u rows remapped for uncorrectable errors)",
                 failed ? "a row remapping failed" : "a row remapping is pending", uncorrected);
        return PROBE_BAD;
    }
    if (rc == NVML_ERROR_GPU_IS_LOST)
        return PROBE_LOST;
    if (probe_call_failed(rc)) {
        snprintf(why, whylen, "nvmlDeviceGetRemappedRows: %s", nvml_strerror(m->nvml, rc));
        return PROBE_BAD;
    }
    nvmlEnableState_t retired_pending = NVML_FEATURE_DISABLED;
    rc = NVML_ERROR_FUNCTION_NOT_FOUND;
    if (m->nvml->DeviceGetRetiredPagesPendingStatus != NULL)
        rc = m->nvml->DeviceGetRetiredPagesPendingStatus(h, &retired_pending);
    if (rc == NVML_SUCCESS && retired_pending == NVML_FEATURE_ENABLED) {
        snprintf(why, whylen, "retired pages are pending");
        return PROBE_BAD;
    }
    if (rc == NVML_ERROR_GPU_IS_LOST)
        return PROBE_LOST;
    if (probe_call_failed(rc)) {
        snprintf(why, whylen, "nvmlDeviceGetRetiredPagesPendingStatus: %s",
                 nvml_strerror(m->nvml, rc));
        return PROBE_BAD;
    }
    return PROBE_GOOD;
}

/* A device answers correctly when NVML finds it by UUID, reports the same
 * UUID back, can read its memory and has no memory repair pending. */
static enum probe_result probe(struct health_monitor *m, size_t i, char *why, size_t whylen)
{
    const struct gpu_device *g = &m->inv->gpus[i];
    nvmlDevice_t h = NULL;
    char uuid[GPU_UUID_LEN];
    nvmlMemory_t mem;
    const char *what = "nvmlDeviceGetHandleByUUID";
    nvmlReturn_t rc = m->nvml->DeviceGetHandleByUUID(g->uuid, &h);
    if (rc == NVML_SUCCESS) {
        what = "nvmlDeviceGetUUID";
        rc = m->nvml->DeviceGetUUID(h, uuid, sizeof uuid);
    }
    if (rc == NVML_SUCCESS && strcmp(uuid, g->uuid) != 0) {
        snprintf(why, whylen, "NVML reports UUID %s for it", uuid);
        return PROBE_BAD;
    }
    if (rc == NVML_SUCCESS) {
        what = "nvmlDeviceGetMemoryInfo";
        rc = m->nvml->DeviceGetMemoryInfo(h, &mem);
    }
    if (rc == NVML_ERROR_GPU_IS_LOST)
        return PROBE_LOST;
    if (rc != NVML_SUCCESS) {
        snprintf(why, whylen, "%s: %s", what, nvml_strerror(m->nvml, rc));
        return PROBE_BAD;
    }
    return probe_memory(m, h, why, whylen);
}

static void probe_failed(struct health_monitor *m, size_t i, const char *why)
{
    struct gpu_state *s = &m->gpus[i];
    s->good_probes = 0;
    /* Once per reason: a GPU that stays bad for hours logs one line. */
    if (strcmp(s->probe_why, why) == 0) {
        log_v(1, "GPU %u still fails its health probe: %s", m->inv->gpus[i].index, why);
        return;
    }
    snprintf(s->probe_why, sizeof s->probe_why, "%s", why);
    log_info("GPU %u (%s) fails its health probe: %s; it stays Unhealthy", m->inv->gpus[i].index,
             m->inv->gpus[i].uuid, why);
}

static void probe_unhealthy(struct health_monitor *m)
{
    for (size_t i = 0; i < m->inv->count; i++) {
        struct gpu_state *s = &m->gpus[i];
        if (!s->unhealthy || s->lost)
            continue;
        char why[HEALTH_WHY_LEN];
        enum probe_result r = probe(m, i, why, sizeof why);
        if (r == PROBE_LOST) {
            s->lost = true;
            node_state_set_gpu_lost(m->state, i);
            log_warn("GPU %u (%s) is lost: it stays Unhealthy", m->inv->gpus[i].index,
                     m->inv->gpus[i].uuid);
            continue;
        }
        if (r == PROBE_BAD) {
            probe_failed(m, i, why);
            continue;
        }
        if (++s->good_probes < m->recovery_probes)
            continue;
        s->unhealthy = false;
        s->good_probes = 0;
        s->probe_why[0] = '\0';
        if (!s->watched) {
            log_info("GPU %u (%s) answered %d health probes in a row; Healthy once it is "
                     "monitored again",
                     m->inv->gpus[i].index, m->inv->gpus[i].uuid, m->recovery_probes);
            continue;
        }
        size_t changed = node_state_set_gpu_health(m->state, i, true);
        log_info(
            "GPU %u (%s) answered %d health probes in a row; %zu GPU/MIG devices Healthy again",
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

/* ---- thread -------------------------------------------------------------------- */

static unsigned until(uint64_t deadline, uint64_t now, unsigned timeout)
{
    uint64_t left = deadline > now ? deadline - now : 0;
    return left < timeout ? (unsigned)left : timeout;
}

static void pause_ms(unsigned ms)
{
    struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

/* One wait for an event, or a pause while there is no working event set. */
static void wait_once(struct health_monitor *m, unsigned timeout)
{
    bool retry_due = (uint64_t)clock_now_ms() >= m->next_retry;
    if (m->set == NULL || (m->wait_failing && !retry_due)) {
        pause_ms(timeout);
        return;
    }
    nvmlEventData_t ev;
    memset(&ev, 0, sizeof ev);
    nvmlReturn_t rc = m->nvml->EventSetWait(m->set, &ev, timeout);
    if (rc == NVML_SUCCESS || rc == NVML_ERROR_TIMEOUT)
        wait_works(m);
    if (rc == NVML_SUCCESS)
        handle_event(m, &ev);
    else if (rc != NVML_ERROR_TIMEOUT)
        wait_failed(m, rc);
}

static void *health_thread(void *arg)
{
    struct health_monitor *m = arg;
    uint64_t next_probe = (uint64_t)clock_now_ms() + (uint64_t)m->probe_interval_ms;
    while (!atomic_load(&m->stop)) {
        retry_set_up(m);
        uint64_t now = (uint64_t)clock_now_ms();
        unsigned timeout = HEALTH_WAIT_MS;
        bool pending = recovery_pending(m);
        if (pending)
            timeout = until(next_probe, now, timeout);
        if (!all_registered(m) || m->wait_failing)
            timeout = until(m->next_retry, now, timeout);
        wait_once(m, timeout);
        now = (uint64_t)clock_now_ms();
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
                         struct node_state *state, struct plugin_metrics *metrics,
                         const struct gp_config *cfg, struct health_monitor **out, char *err,
                         size_t errlen)
{
    *out = NULL;
    struct health_policy policy;
    health_policy_init(&policy, cfg->disable_healthchecks, cfg->enable_healthchecks);
    if (policy.disabled) {
        log_info("Health checks disabled (DP_DISABLE_HEALTHCHECKS=%s)", cfg->disable_healthchecks);
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
    m->state = state;
    m->metrics = metrics;
    m->policy = policy;
    m->recovery_probes = cfg->health_recovery_probes;
    m->probe_interval_ms = cfg->health_probe_interval_ms > 0 ? cfg->health_probe_interval_ms : 1;
    m->retry_ms = HEALTH_RETRY_MIN_MS;
    m->gpus = gpus;
    for (size_t i = 0; i < inv->count; i++) {
        /* The inventory could not identify it: already Unhealthy and lost. */
        gpus[i].lost = inv->gpus[i].lost;
        gpus[i].unhealthy = inv->gpus[i].lost;
        gpus[i].watched = true; /* what the devices show at start: Healthy */
    }
    /* The first attempt runs before the servers start, so that their first
     * snapshot already shows unmonitored GPUs Unhealthy. */
    char why[HEALTH_WHY_LEN * 2];
    bool complete = set_up_monitoring(m, why, sizeof why);
    if (!complete) {
        int delay = schedule_retry(m);
        log_error("Health checks not ready: %s; unmonitored devices are Unhealthy until that "
                  "works; retrying in %d ms",
                  why, delay);
    }
    int prc = pthread_create(&m->thread, NULL, health_thread, m);
    if (prc != 0) {
        snprintf(err, errlen,
                 "cannot start the health thread: %s; continuing without health "
                 "checks",
                 strerror(prc));
        if (m->set != NULL)
            nvml->EventSetFree(m->set);
        free(gpus);
        free(m);
        return -1;
    }
    if (complete)
        log_started(m);
    *out = m;
    return 0;
}

void health_monitor_stop(struct health_monitor *m)
{
    if (m == NULL)
        return;
    atomic_store(&m->stop, true);
    pthread_join(m->thread, NULL);
    if (m->set != NULL)
        m->nvml->EventSetFree(m->set);
    free(m->gpus);
    free(m);
}
