/* gpumem_service.c -- gpu-mem mode at run time (see gpumem_service.h). */
#include "gpumem_service.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "arena.h"
#include "clock.h"
#include "gpumem.h"
#include "gpumem_ledger.h"
#include "isolation.h"
#include "kube.h"
#include "kube_writer.h"
#include "log.h"
#include "plugin.h"
#include "podidentity.h"
#include "podresources.h"
#include "podview.h"
#include "poolapi_demand.h"
#include "poolapi_gpus.h"

#define MAINTENANCE_MS (30 * 1000LL)   /* ledger pruning, lost ASSIGNED patches */
#define REPUBLISH_MS (5 * 60 * 1000LL) /* node status/annotation refresh */
#define RETRY_MIN_MS 200
#define RETRY_MAX_MS 10000
/* Waits between our own retries of a write (kube_retry_delay_ms: doubling
 * with jitter, never shorter than the server's Retry-After). */
static const struct kube_retry_policy write_retry = {.initial_backoff_ms = RETRY_MIN_MS,
                                                     .max_backoff_ms = RETRY_MAX_MS};
#define EVENT_COMPONENT "gpupool-device-plugin"
#define LIST_TIMEOUT_MS 2000
#define RELIST_MS 250 /* re-ask the kubelet while waiting */
#define API_TIMEOUT_MS 10000
/* Region directories of pods gone from the API are removed this often: a
 * directory listing and a view lookup per entry, cheap enough to keep the
 * host tidy within seconds of a deletion. */
#define ISOLATION_SWEEP_MS 2000

struct alloc_item {
    struct plugin_allocation *job; /* parked; answered through plugin.h */
    size_t resource;
    size_t units;
    long long arrived_ms;
    long long arrived_us; /* for the -v 4 timing line */
    long long list_us;    /* time spent in PodResources List */
    struct alloc_item *next;
};

struct assign_task {
    char *ns, *name, *uid;
    int attempts;
    long long due_ms;
    long long first_ms;     /* first attempt: the give-up deadline counts from here */
    char first_error[256];  /* what went wrong first, for the pod's Event */
    struct kube_error last; /* the last failure (Retry-After, message) */
    struct assign_task *next;
};

struct gpumem_service {
    const struct gp_config *cfg;
    const struct gpu_inventory *inv;
    struct plugin_node *node; /* borrowed; we are its allocator */
    struct kube_client *kc;
    struct podview *view;
    struct gpumem_ledger *ledger;   /* allocator thread only */
    struct podresources_client *pr; /* allocator thread only */

    pthread_mutex_t lock; /* everything below */
    pthread_cond_t wake;  /* CLOCK_MONOTONIC */
    atomic_bool stopping;
    struct alloc_item *head, *tail;
    struct assign_task *assigns;
    /* The node's gpu-count capacity and gpupool.io/gpus annotation: state
     * written until it lands, again every REPUBLISH_MS and on every health
     * change (kube_writer.h; its own thread). */
    struct kube_writer *publisher;

    pthread_t allocator, writer;
    bool allocator_started, writer_started;
    bool have_lock;
    bool observing, allocating; /* registered with the node */
};

/* ---- small helpers --------------------------------------------------------- */

static void wait_until(struct gpumem_service *s, long long deadline_ms)
{
    struct timespec ts = clock_timespec_ms(deadline_ms);
    pthread_cond_timedwait(&s->wake, &s->lock, &ts);
}

static void assign_task_free(struct assign_task *t)
{
    free(t->ns);
    free(t->name);
    free(t->uid);
    free(t);
}

static void queue_assign(struct gpumem_service *s, const char *ns, const char *name,
                         const char *uid)
{
    struct assign_task *t = calloc(1, sizeof *t);
    if (t == NULL || (t->ns = strdup(ns)) == NULL || (t->name = strdup(name)) == NULL ||
        (t->uid = strdup(uid)) == NULL) {
        if (t != NULL)
            assign_task_free(t);
        log_error("gpu-mem: out of memory queueing %s=true for pod %s/%s",
                  POOL_ANN_GPU_MEM_ASSIGNED, ns, name);
        return;
    }
    pthread_mutex_lock(&s->lock);
    for (struct assign_task *q = s->assigns; q != NULL; q = q->next) {
        if (strcmp(q->uid, uid) == 0) { /* already queued */
            pthread_mutex_unlock(&s->lock);
            assign_task_free(t);
            return;
        }
    }
    t->due_ms = t->first_ms = clock_now_ms();
    t->next = s->assigns;
    s->assigns = t;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->lock);
}

/* ---- identity sources -------------------------------------------------------- */

static const struct gpumem_pod *view_lookup(void *ctx, const char *ns, const char *name)
{
    struct gpumem_service *s = ctx;
    return podview_find(s->view, ns, name);
}

static unsigned ledger_progress(void *ctx, const char *uid)
{
    struct gpumem_service *s = ctx;
    return gpumem_ledger_get(s->ledger, uid);
}

/* What the allocator keeps of the pod after the view's lock is released. */
struct found_pod {
    char ns[256], name[256], uid[80], idx[POOL_MAX_GPUS * 4];
    bool has_idx, has_pod_units, assigned, repeat, priority_high, priority_bad;
    unsigned long long pod_units, demand;
    unsigned calls;
    unsigned container; /* the call's Allocate ordinal in the pod */
    unsigned cores;     /* that container's gpupool.io/gpu-cores */
};

static void copy_found(const struct gpumem_pod *p, bool repeat, struct found_pod *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->ns, sizeof f->ns, "%s", p->ns);
    snprintf(f->name, sizeof f->name, "%s", p->name);
    snprintf(f->uid, sizeof f->uid, "%s", p->uid);
    f->has_idx = p->idx != NULL;
    if (p->idx != NULL)
        snprintf(f->idx, sizeof f->idx, "%s", p->idx);
    f->has_pod_units = p->has_pod_units;
    f->pod_units = p->pod_units;
    f->assigned = p->assigned;
    f->priority_high = p->priority_high;
    f->priority_bad = p->priority_bad;
    f->repeat = repeat;
    f->calls = gpumem_pod_calls(p);
    /* The pod's demand as the scheduler counts it: the contract's rule
     * (poolapi_demand.h), init containers in spec order. */
    struct poolapi_demand d = {0};
    for (size_t c = 0; c < p->n_containers; c++) {
        if (p->containers[c].init)
            poolapi_demand_add_init(&d, p->containers[c].units, p->containers[c].sidecar);
        else
            poolapi_demand_add_app(&d, p->containers[c].units);
    }
    f->demand = poolapi_demand_total(&d);
}

/* ---- the allocator ------------------------------------------------------------ */

static void answer_error(struct alloc_item *it, enum rpc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void answer_error(struct alloc_item *it, enum rpc_status st, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(msg, sizeof msg, "gpupool %s: ", POOL_RES_GPU_MEM);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    log_error("Allocate %zu units of %s failed: %s", it->units, POOL_RES_GPU_MEM, msg);
    plugin_allocation_fail(it->job, st, msg);
    it->job = NULL;
}

enum find_outcome { FIND_OK, FIND_FAILED, FIND_TIMEOUT, FIND_STOPPED };

/* Asks the kubelet and the view until the pod is certain, no pod can be
 * the one, or the deadline passes. why: the last reason. */
static enum find_outcome find_pod(struct gpumem_service *s, struct alloc_item *it,
                                  struct found_pod *found, char *why, size_t whylen)
{
    long long deadline = it->arrived_ms + s->cfg->allocate_wait_ms;
    struct identity_source src = {.ctx = s, .lookup = view_lookup, .progress = ledger_progress};
    for (;;) {
        if (atomic_load(&s->stopping))
            return FIND_STOPPED;
        struct pr_list list = {0};
        char lerr[512];
        long long t0 = clock_now_us();
        bool listed = podresources_list(s->pr, POOL_RES_GPU_MEM, LIST_TIMEOUT_MS, &list, lerr,
                                        sizeof lerr) == 0;
        it->list_us += clock_now_us() - t0;
        struct identity_decision dec;
        enum identity_result r = IDENTITY_WAIT;
        podview_lock(s->view);
        unsigned long long gen = podview_generation(s->view);
        if (!podview_synced(s->view)) {
            snprintf(why, whylen,
                     "the plugin has not finished listing this node's pods from "
                     "the API server");
        } else if (!listed) {
            snprintf(why, whylen, "cannot ask the kubelet which pod is being admitted (%s): %s",
                     s->cfg->pod_resources_socket, lerr);
        } else {
            r = identify_pod(&src, &list, it->units, &dec);
            if (r == IDENTITY_FOUND) {
                copy_found(dec.pod, dec.repeat, found);
                found->container = dec.container;
                if (dec.container < dec.pod->n_containers)
                    found->cores = dec.pod->containers[dec.container].cores;
            } else
                snprintf(why, whylen, "%s", dec.why);
        }
        long long now = clock_now_ms();
        if (r == IDENTITY_WAIT && now < deadline) {
            long long until = now + RELIST_MS < deadline ? now + RELIST_MS : deadline;
            (void)podview_wait(s->view, gen, until); /* woken by a change or the next re-list */
        }
        podview_unlock(s->view);
        pr_list_free(&list);
        if (r == IDENTITY_FOUND)
            return FIND_OK;
        if (r == IDENTITY_FAIL)
            return FIND_FAILED;
        if (clock_now_ms() >= deadline)
            return FIND_TIMEOUT;
        log_v(2, "Allocate %zu units: waiting: %s", it->units, why);
    }
}

static int check_gpus_usable(struct gpumem_service *s, const struct gpumem_assignment *as,
                             char *why, size_t whylen)
{
    int rc = 0;
    for (size_t i = 0; i < as->gpu_count && rc == 0; i++) {
        if (!node_state_gpu_lost(plugin_node_state(s->node), as->gpus[i]))
            continue;
        const struct gpu_device *g = &s->inv->gpus[as->gpus[i]];
        snprintf(why, whylen,
                 "its GPU %u (%s) is lost (fallen off the bus or not identified by "
                 "NVML)",
                 g->index, g->uuid);
        rc = -1;
    }
    return rc;
}

/* The container's memory limit (--isolation=memory): its region
 * directory, created here so that a failure fails the call before the
 * ledger counts it, and its units split evenly over its GPUs. */
struct limit {
    bool active;
    char dir[4096];
    size_t n;
    unsigned long long bytes[POOL_MAX_GPUS];
    bool priority_high; /* the pod's gpupool.io/priority is "high" */
};

static int prepare_limit(struct gpumem_service *s, const struct found_pod *f, size_t units,
                         const struct gpumem_assignment *as, struct limit *lim, char *err,
                         size_t errlen)
{
    memset(lim, 0, sizeof *lim);
    if (!isolation_active(s->cfg))
        return 0;
    char key[ISOLATION_KEY_LEN], why[8192];
    if (isolation_pod_key(f->uid, f->container, key, sizeof key) != 0) {
        snprintf(err, errlen, "pod UID \"%s\" cannot name a region directory", f->uid);
        return -1;
    }
    if (isolation_container_dir(s->cfg->isolation_dir, key, lim->dir, sizeof lim->dir, why,
                                sizeof why) != 0) {
        snprintf(err, errlen, "no GPU-memory limit can be given to this container (%.900s)", why);
        return -1;
    }
    unsigned long long total = (unsigned long long)units * poolapi_unit_bytes(s->cfg->memory_unit);
    lim->n = as->gpu_count;
    for (size_t i = 0; i < as->gpu_count; i++)
        lim->bytes[i] = isolation_share(total, as->gpu_count);
    lim->priority_high = f->priority_high;
    lim->active = true;
    return 0;
}

static int reply(struct gpumem_service *s, struct alloc_item *it,
                 const struct gpumem_assignment *as, const struct limit *lim, char *err,
                 size_t errlen)
{
    struct arena a = ARENA_INIT;
    int rc = -1;
    struct container_edits edits;
    container_edits_init(&edits, &a);
    if (gpumem_container_edits(plugin_node_edits_options(s->node), s->cfg->memory_unit, s->inv,
                               plugin_node_resource(s->node, it->resource), as, it->units, &edits,
                               err, errlen) != 0)
        goto out;
    if (lim->active && (isolation_add_edits(s->cfg->isolation_dir, lim->dir, lim->bytes, lim->n,
                                            &edits, err, errlen) != 0 ||
                        isolation_add_priority_edits(s->cfg->isolation_dir, lim->priority_high,
                                                     &edits, err, errlen) != 0))
        goto out;
    /* plugin.c encodes and packs the AllocateResponse, as every other reply. */
    if (plugin_allocation_reply(it->job, &edits, err, errlen) != 0)
        goto out;
    it->job = NULL;
    rc = 0;
out:
    arena_free(&a);
    return rc;
}

static void serve_item(struct gpumem_service *s, struct alloc_item *it)
{
    struct found_pod f;
    char why[1024];
    switch (find_pod(s, it, &f, why, sizeof why)) {
    case FIND_STOPPED:
        answer_error(it, RPC_UNAVAILABLE, "the device plugin is stopping");
        return;
    case FIND_FAILED:
        answer_error(it, RPC_FAILED_PRECONDITION, "%s", why);
        return;
    case FIND_TIMEOUT:
        answer_error(it, RPC_DEADLINE_EXCEEDED,
                     "no certain pod for this request of %zu units "
                     "after %d ms: %s",
                     it->units, s->cfg->allocate_wait_ms, why);
        return;
    case FIND_OK:
        break;
    }
    struct gpumem_assignment as;
    if (!f.has_idx) {
        answer_error(it, RPC_FAILED_PRECONDITION,
                     "pod %s/%s requests %s but has no %s "
                     "annotation: no gpupool (or gpushare) scheduler extender placed it; check "
                     "that the scheduler's extender configuration manages %s",
                     f.ns, f.name, POOL_RES_GPU_MEM, POOL_ANN_GPU_MEM_IDX, POOL_RES_GPU_MEM);
        return;
    }
    if (gpumem_parse_idx(f.idx, s->inv, &as, why, sizeof why) != 0 ||
        check_gpus_usable(s, &as, why, sizeof why) != 0) {
        answer_error(it, RPC_FAILED_PRECONDITION, "pod %s/%s: %s", f.ns, f.name, why);
        return;
    }
    if (f.priority_bad) {
        /* Refused rather than run as normal: the pod asked for something
         * this plugin does not give, and a silent downgrade would only show
         * as slowness. */
        answer_error(it, RPC_FAILED_PRECONDITION,
                     "pod %s/%s: annotation %s must be \"%s\" or \"%s\"", f.ns, f.name,
                     POOL_ANN_POD_PRIORITY, POOL_PRIORITY_HIGH, POOL_PRIORITY_NORMAL);
        return;
    }
    as.pod_units = f.has_pod_units ? f.pod_units : f.demand;
    as.container_cores = f.cores;
    struct limit lim;
    if (prepare_limit(s, &f, it->units, &as, &lim, why, sizeof why) != 0) {
        answer_error(it, RPC_INTERNAL, "pod %s/%s: %s", f.ns, f.name, why);
        return;
    }
    unsigned done = gpumem_ledger_get(s->ledger, f.uid);
    if (f.assigned && done == 0)
        done = 1;
    /* Durable before the reply: a restarted plugin must know this call
     * was answered (docs/gpumem.md, "What is durable"). A full or
     * read-only --state-dir does not stop the node from admitting pods:
     * the count is kept in memory and written by the maintenance pass. */
    int saved = f.repeat ? 0 : gpumem_ledger_set(s->ledger, f.uid, done + 1, why, sizeof why);
    if (saved == GPUMEM_LEDGER_UNSAVED) {
        log_error("gpu-mem: pod %s/%s: %s; answering anyway (kept in memory, written again every "
                  "%lld s; a plugin restart before then may not know this call was answered)",
                  f.ns, f.name, why, MAINTENANCE_MS / 1000);
    } else if (saved != 0) {
        answer_error(it, RPC_INTERNAL, "pod %s/%s: cannot record the allocation: %s", f.ns, f.name,
                     why);
        return;
    }
    if (reply(s, it, &as, &lim, why, sizeof why) != 0) {
        answer_error(it, RPC_RESOURCE_EXHAUSTED, "pod %s/%s: %s", f.ns, f.name, why);
        return;
    }
    log_info("Allocate %s: %zu units for pod %s/%s (uid %s), call %u of %u, GPU(s) %s%s",
             POOL_RES_GPU_MEM, it->units, f.ns, f.name, f.uid, f.repeat ? done : done + 1, f.calls,
             as.idx, f.repeat ? " (repeated by the kubelet)" : "");
    if (lim.active)
        log_v(2,
              "Allocate %s: pod %s/%s container %u: region directory %s, limit %llu bytes "
              "on each of %zu GPU(s)",
              POOL_RES_GPU_MEM, f.ns, f.name, f.container, lim.dir, lim.bytes[0], lim.n);
    log_v(4, "Allocate %zu units answered in %lld us, of which %lld us in PodResources List",
          it->units, clock_now_us() - it->arrived_us, it->list_us);
    if (!f.assigned)
        queue_assign(s, f.ns, f.name, f.uid);
}

static bool keep_uid(void *ctx, const char *uid)
{
    struct gpumem_service *s = ctx;
    return podview_has_uid(s->view, uid);
}

/* A region directory stays while its pod exists in the API: a tombstone
 * (deleted, kept for pod identity) no longer runs containers. */
static bool keep_live_uid(void *ctx, const char *uid)
{
    struct gpumem_service *s = ctx;
    const struct gpumem_pod *p = podview_find_uid(s->view, uid);
    return p != NULL && !p->deleted;
}

/* Removes the region directories of pods gone from the API; nothing until
 * the view has listed every pod (at start, a pod not yet seen is not gone). */
static void sweep_regions(struct gpumem_service *s)
{
    if (!isolation_active(s->cfg))
        return;
    podview_lock(s->view);
    if (podview_synced(s->view))
        (void)isolation_prune_pods(s->cfg->isolation_dir, keep_live_uid, s);
    podview_unlock(s->view);
}

/* Ledger entries of pods gone from the API are dropped; pods whose
 * ASSIGNED patch was lost (a crash right after a reply) are patched. */
static void maintenance(struct gpumem_service *s)
{
    struct found_pod *todo = NULL;
    size_t n_todo = 0;
    podview_lock(s->view);
    if (podview_synced(s->view)) {
        size_t dropped = gpumem_ledger_prune(s->ledger, keep_uid, s);
        if (dropped > 0)
            log_v(1, "gpu-mem ledger: dropped %zu pods gone from the API", dropped);
        size_t n = gpumem_ledger_count(s->ledger);
        todo = calloc(n ? n : 1, sizeof *todo);
        for (size_t i = 0; todo != NULL && i < n; i++) {
            const struct gpumem_pod *p = podview_find_uid(s->view, gpumem_ledger_uid(s->ledger, i));
            if (p != NULL && !p->assigned && !p->terminal)
                copy_found(p, false, &todo[n_todo++]);
        }
    }
    podview_unlock(s->view);
    char why[512];
    size_t unsaved = gpumem_ledger_flush(s->ledger, why, sizeof why);
    if (unsaved > 0)
        log_error("gpu-mem ledger: %zu entries still unsaved: %s", unsaved, why);
    for (size_t i = 0; i < n_todo; i++)
        queue_assign(s, todo[i].ns, todo[i].name, todo[i].uid);
    free(todo);
}

static void *allocator_main(void *arg)
{
    struct gpumem_service *s = arg;
    long long next_maintenance = clock_now_ms() + MAINTENANCE_MS;
    long long next_sweep = clock_now_ms();
    for (;;) {
        pthread_mutex_lock(&s->lock);
        long long wake = next_sweep < next_maintenance ? next_sweep : next_maintenance;
        while (!atomic_load(&s->stopping) && s->head == NULL && clock_now_ms() < wake)
            wait_until(s, wake);
        struct alloc_item *it = s->head;
        if (it != NULL) {
            s->head = it->next;
            if (s->head == NULL)
                s->tail = NULL;
        }
        bool stopping = atomic_load(&s->stopping);
        pthread_mutex_unlock(&s->lock);
        if (it != NULL) {
            if (stopping)
                answer_error(it, RPC_UNAVAILABLE, "the device plugin is stopping");
            else
                serve_item(s, it);
            free(it);
            continue;
        }
        if (stopping)
            return NULL;
        if (clock_now_ms() >= next_sweep) {
            sweep_regions(s);
            next_sweep = clock_now_ms() + ISOLATION_SWEEP_MS;
        }
        if (clock_now_ms() >= next_maintenance) {
            maintenance(s);
            next_maintenance = clock_now_ms() + MAINTENANCE_MS;
        }
    }
}

/* ---- the API writer ------------------------------------------------------------ */

static void model_name(const char *name, char *out, size_t len)
{
    size_t i = 0;
    for (; name[i] != '\0' && i + 1 < len; i++)
        out[i] = name[i] == ' ' ? '-' : name[i];
    out[i] = '\0';
}

/* gpupool.io/gpus, written by the contract's writer (poolapi_gpus.h). */
static char *gpus_annotation(struct gpumem_service *s)
{
    struct poolapi_gpu *gpus = calloc(s->inv->count ? s->inv->count : 1, sizeof *gpus);
    if (gpus == NULL)
        return NULL;
    struct node_gpu_state states[s->inv->count + 1];
    node_state_gpus(plugin_node_state(s->node), states, s->inv->count);
    for (size_t g = 0; g < s->inv->count; g++) {
        const struct gpu_device *gpu = &s->inv->gpus[g];
        gpus[g].index = gpu->index;
        gpus[g].memory = gpumem_units(gpu, s->cfg->memory_unit);
        gpus[g].healthy = states[g].healthy;
        gpus[g].has_cores = true; /* every GPU is whole to the scheduler's cores */
        gpus[g].cores = POOL_GPU_CORES_PER_GPU;
        model_name(gpu->name, gpus[g].model, sizeof gpus[g].model);
    }
    char *text = poolapi_gpus_format(gpus, s->inv->count);
    free(gpus);
    return text;
}

/* One publish (kube_writer_fn): the count and cores on the node's status,
 * the per-GPU annotation on the node. The writer logs failures and retries. */
static int publish_node(json_t *desired, void *ctx, struct kube_error *kerr)
{
    struct gpumem_service *s = ctx;
    (void)desired; /* read fresh each time: the GPUs' health changes */
    char path[512], count[24], cores[24];
    snprintf(count, sizeof count, "%zu", s->inv->count);
    /* gpupool.io/gpu-cores beside the count, so that kube-scheduler and the
     * kubelet admit pods asking cores (a node-level extended resource: the
     * extender books it per GPU). */
    snprintf(cores, sizeof cores, "%zu", s->inv->count * POOL_GPU_CORES_PER_GPU);
    char *gpus = gpus_annotation(s);
    json_t *status = json_pack("{s:{s:{s:s,s:s},s:{s:s,s:s}}}", "status", "capacity",
                               POOL_RES_GPU_COUNT, count, POOL_RES_GPU_CORES, cores, "allocatable",
                               POOL_RES_GPU_COUNT, count, POOL_RES_GPU_CORES, cores);
    json_t *meta =
        gpus ? json_pack("{s:{s:{s:s}}}", "metadata", "annotations", POOL_ANN_NODE_GPUS, gpus)
             : NULL;
    int rc = -1;
    if (status == NULL || meta == NULL) {
        kube_fail(kerr, 0, "InternalError", "out of memory publishing the node");
        goto out;
    }
    snprintf(path, sizeof path, "/api/v1/nodes/%s/status", s->cfg->node_name);
    if (kube_patch(s->kc, path, KUBE_PATCH_STRATEGIC, status, NULL, kerr) != 0)
        goto out;
    snprintf(path, sizeof path, "/api/v1/nodes/%s", s->cfg->node_name);
    if (kube_patch(s->kc, path, KUBE_PATCH_STRATEGIC, meta, NULL, kerr) != 0)
        goto out;
    log_info("gpu-mem: published node %s: %s=%s, %s=%s, %s=%s", s->cfg->node_name,
             POOL_RES_GPU_COUNT, count, POOL_RES_GPU_CORES, cores, POOL_ANN_NODE_GPUS, gpus);
    rc = 0;
out:
    json_decref(status);
    json_decref(meta);
    free(gpus);
    return rc;
}

enum assign_outcome { ASSIGN_DONE, ASSIGN_GONE, ASSIGN_RETRY };

/* JSON patch with a UID test: a pod recreated under the same name must
 * not inherit the mark. One request that sets one key: the pod has the mark
 * or not, never a part of it, so repeating it is always safe. A failure
 * is left in t->last. */
static enum assign_outcome patch_assigned(struct gpumem_service *s, struct assign_task *t)
{
    char *ns = kube_escape(t->ns), *name = kube_escape(t->name);
    char path[1024];
    struct kube_error *kerr = &t->last;
    json_t *body = json_pack("[{s:s,s:s,s:s},{s:s,s:s,s:s}]", "op", "test", "path", "/metadata/uid",
                             "value", t->uid, "op", "add", "path",
                             "/metadata/annotations/" POOL_ANN_GPU_MEM_ASSIGNED, "value", "true");
    enum assign_outcome out = ASSIGN_RETRY;
    if (ns == NULL || name == NULL || body == NULL) {
        *kerr = (struct kube_error){.reason = "OutOfMemory", .message = "out of memory"};
        goto done;
    }
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", ns, name);
    if (kube_patch(s->kc, path, KUBE_PATCH_JSON, body, NULL, kerr) == 0) {
        log_v(1, "gpu-mem: pod %s/%s marked %s=true", t->ns, t->name, POOL_ANN_GPU_MEM_ASSIGNED);
        out = ASSIGN_DONE;
    } else if (kerr->http_status == 404 || kerr->http_status == 422) {
        log_info("gpu-mem: pod %s/%s (uid %s) is gone; not marking it %s", t->ns, t->name, t->uid,
                 POOL_ANN_GPU_MEM_ASSIGNED);
        out = ASSIGN_GONE;
    } else {
        log_warn("gpu-mem: cannot mark pod %s/%s %s=true: %s (HTTP %d, %s)", t->ns, t->name,
                 POOL_ANN_GPU_MEM_ASSIGNED, kerr->message, kerr->http_status, kerr->reason);
    }
done:
    free(ns);
    free(name);
    json_decref(body);
    return out;
}

/* Tells the pod's Events what happened to its mark. An Event is a note:
 * when it cannot be posted (the API is what failed) the log says so. */
static void assign_event(struct gpumem_service *s, const struct assign_task *t, bool warning,
                         const char *reason, const char *message)
{
    struct kube_pod_event ev = {.ns = t->ns,
                                .name = t->name,
                                .uid = t->uid,
                                .warning = warning,
                                .reason = reason,
                                .message = message,
                                .component = EVENT_COMPONENT,
                                .host = s->cfg->node_name};
    struct kube_error kerr;
    if (kube_post_pod_event(s->kc, &ev, &kerr) != 0)
        log_warn("gpu-mem: cannot post Event %s for pod %s/%s: %s (HTTP %d)", reason, t->ns,
                 t->name, kerr.message, kerr.http_status);
}

/* After an attempt: done (with an Event when it took retries), retried
 * later, or given up after --api-write-deadline. Returns the task when it
 * is to be queued again, NULL when it was freed. */
static struct assign_task *assign_attempted(struct gpumem_service *s, struct assign_task *t,
                                            enum assign_outcome o)
{
    long long now = clock_now_ms();
    char msg[768];
    if (o == ASSIGN_DONE && t->attempts > 0) {
        snprintf(msg, sizeof msg,
                 "%s=true written by the device plugin after %d failed attempts over %.1f s "
                 "(first: %s)",
                 POOL_ANN_GPU_MEM_ASSIGNED, t->attempts, (double)(now - t->first_ms) / 1000.0,
                 t->first_error);
        log_info("gpu-mem: pod %s/%s: %s", t->ns, t->name, msg);
        assign_event(s, t, false, "GPUMemAssigned", msg);
    }
    if (o != ASSIGN_RETRY) {
        assign_task_free(t);
        return NULL;
    }
    if (t->attempts++ == 0)
        snprintf(t->first_error, sizeof t->first_error, "HTTP %d %.40s: %.180s",
                 t->last.http_status, t->last.reason, t->last.message);
    if (now - t->first_ms >= s->cfg->api_write_deadline_ms) {
        snprintf(
            msg, sizeof msg,
            "device plugin could not write %s=true in %.0f s (%d attempts; last: HTTP %d "
            "%.40s: %.300s); the allocation stands (ledger), the mark is retried from the next "
            "maintenance pass",
            POOL_ANN_GPU_MEM_ASSIGNED, (double)(now - t->first_ms) / 1000.0, t->attempts,
            t->last.http_status, t->last.reason, t->last.message);
        log_error("gpu-mem: giving up on pod %s/%s: %s", t->ns, t->name, msg);
        assign_event(s, t, true, "GPUMemAssignFailed", msg);
        assign_task_free(t);
        return NULL;
    }
    long wait = kube_retry_delay_ms(s->kc, &write_retry, t->attempts, &t->last);
    long long left = t->first_ms + s->cfg->api_write_deadline_ms - now;
    t->due_ms = now + (wait < left ? wait : left); /* the last try comes at the deadline */
    return t;
}

static struct assign_task *take_due_assign(struct gpumem_service *s, long long now,
                                           long long *next_due)
{
    struct assign_task **pp = &s->assigns;
    for (; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->due_ms <= now) {
            struct assign_task *t = *pp;
            *pp = t->next;
            t->next = NULL;
            return t;
        }
        if ((*pp)->due_ms < *next_due)
            *next_due = (*pp)->due_ms;
    }
    return NULL;
}

static void *writer_main(void *arg)
{
    struct gpumem_service *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!atomic_load(&s->stopping)) {
        long long now = clock_now_ms();
        long long next_due = now + REPUBLISH_MS; /* a new task wakes us sooner */
        struct assign_task *t = take_due_assign(s, now, &next_due);
        if (t == NULL) {
            wait_until(s, next_due);
            continue;
        }
        pthread_mutex_unlock(&s->lock);
        t = assign_attempted(s, t, patch_assigned(s, t));
        pthread_mutex_lock(&s->lock);
        if (t != NULL) {
            t->next = s->assigns;
            s->assigns = t;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- public -------------------------------------------------------------------------- */

/* The node's allocator (plugin.h): queues the call for the allocator thread. */
static enum rpc_status service_allocate(void *ctx, struct plugin_allocation *job, size_t resource,
                                        size_t units, char *msg, size_t msglen)
{
    struct gpumem_service *s = ctx;
    struct alloc_item *it = calloc(1, sizeof *it);
    if (it == NULL) {
        snprintf(msg, msglen, "out of memory answering Allocate");
        return RPC_RESOURCE_EXHAUSTED;
    }
    it->resource = resource;
    it->units = units;
    it->arrived_ms = clock_now_ms();
    it->arrived_us = clock_now_us();
    it->job = job;
    if (plugin_allocation_park(job) != 0) {
        free(it);
        snprintf(msg, msglen, "out of memory answering Allocate");
        return RPC_RESOURCE_EXHAUSTED;
    }
    pthread_mutex_lock(&s->lock);
    if (s->tail != NULL)
        s->tail->next = it;
    else
        s->head = it;
    s->tail = it;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return RPC_DEFERRED;
}

/* A GPU state observer: republish gpupool.io/gpus at once. */
static void service_health_changed(void *ctx, const struct node_state_change *change)
{
    struct gpumem_service *s = ctx;
    (void)change;
    kube_writer_kick(s->publisher);
}

static int open_api(struct gpumem_service *s, char *err, size_t errlen)
{
    struct kube_client_options opt = {
        .kubeconfig = s->cfg->kubeconfig && s->cfg->kubeconfig[0] ? s->cfg->kubeconfig : NULL,
        .timeout_ms = API_TIMEOUT_MS,
    };
    char kerr[512];
    s->kc = kube_client_new(&opt, kerr, sizeof kerr);
    if (s->kc == NULL) {
        snprintf(err, errlen,
                 "cannot configure the Kubernetes API client (--kubeconfig, "
                 "KUBECONFIG or the in-cluster service account): %s",
                 kerr);
        return -1;
    }
    return 0;
}

int gpumem_service_start(const struct gp_config *cfg, const struct gpu_inventory *inv,
                         struct plugin_node *node, struct rpc_runtime *rt,
                         struct gpumem_service **out, char *err, size_t errlen)
{
    if (cfg->node_name == NULL || cfg->node_name[0] == '\0') {
        snprintf(err, errlen,
                 "--resource-mode=gpu-mem needs this node's name: set NODE_NAME "
                 "(downward API fieldRef spec.nodeName) or --node-name");
        return -1;
    }
    struct gpumem_service *s = calloc(1, sizeof *s);
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->cfg = cfg;
    s->inv = inv;
    s->node = node;
    clock_cond_init(&s->wake);
    pthread_mutex_init(&s->lock, NULL);
    s->have_lock = true;
    if (gpumem_ledger_open(cfg->state_dir, &s->ledger, err, errlen) != 0 ||
        open_api(s, err, errlen) != 0 ||
        podresources_open(rt, cfg->pod_resources_socket, &s->pr, err, errlen) != 0 ||
        podview_start(s->kc, cfg->node_name, &s->view, err, errlen) != 0)
        goto fail;
    char what[300];
    snprintf(what, sizeof what, "%s capacity and %s annotation of node %.200s", POOL_RES_GPU_COUNT,
             POOL_ANN_NODE_GPUS, cfg->node_name);
    const struct kube_writer_options publish_opt = {
        .what = what,
        .retry = write_retry,
        .resync_ms = REPUBLISH_MS,
        .event_after = -1, /* the log says it; the RBAC has no Event for nodes in mind */
    };
    s->publisher = kube_writer_start(s->kc, &publish_opt, NULL, publish_node, s, err, errlen);
    if (s->publisher == NULL)
        goto fail;
    int rc = pthread_create(&s->allocator, NULL, allocator_main, s);
    if (rc == 0) {
        s->allocator_started = true;
        rc = pthread_create(&s->writer, NULL, writer_main, s);
        s->writer_started = rc == 0;
    }
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the gpu-mem threads: %s", strerror(rc));
        goto fail;
    }
    if (node_state_add_observer(plugin_node_state(node), s, service_health_changed) != 0) {
        snprintf(err, errlen, "cannot observe device health: too many observers");
        goto fail;
    }
    s->observing = true;
    plugin_node_set_allocator(node, &(struct plugin_allocator){s, service_allocate});
    s->allocating = true;
    log_info("gpu-mem mode: node %s, %zu GPUs, unit %s, %zu devices of %s, ledger in %s/gpumem, "
             "pod identity through %s",
             cfg->node_name, inv->count, gpumem_unit_name(cfg->memory_unit),
             plugin_node_resource(node, 0)->device_count, POOL_RES_GPU_MEM, cfg->state_dir,
             cfg->pod_resources_socket);
    *out = s;
    return 0;
fail:
    gpumem_service_stop(s);
    return -1;
}

void gpumem_service_stop(struct gpumem_service *s)
{
    if (s == NULL)
        return;
    /* Nothing reaches us through the node from here on. */
    if (s->allocating)
        plugin_node_set_allocator(s->node, NULL);
    if (s->observing)
        node_state_remove_observer(plugin_node_state(s->node), s, service_health_changed);
    atomic_store(&s->stopping, true);
    if (s->have_lock) {
        pthread_mutex_lock(&s->lock);
        pthread_cond_broadcast(&s->wake);
        pthread_mutex_unlock(&s->lock);
    }
    if (s->view != NULL)
        podview_poke(s->view); /* an allocator waiting for its pod */
    if (s->allocator_started)
        pthread_join(s->allocator, NULL);
    if (s->writer_started)
        pthread_join(s->writer, NULL);
    kube_writer_stop(s->publisher);
    for (struct alloc_item *it = s->head, *next; it != NULL; it = next) {
        next = it->next;
        plugin_allocation_fail(it->job, RPC_UNAVAILABLE, "the device plugin is stopping");
        free(it);
    }
    for (struct assign_task *t = s->assigns, *next; t != NULL; t = next) {
        next = t->next;
        assign_task_free(t);
    }
    podview_stop(s->view);
    podresources_close(s->pr);
    kube_client_free(s->kc);
    gpumem_ledger_close(s->ledger);
    if (s->have_lock) {
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->lock);
    }
    free(s);
}

bool gpumem_service_name_container(void *service, const char *uid, int ordinal, char *ns,
                                   size_t ns_len, char *pod, size_t pod_len, char *container,
                                   size_t container_len)
{
    struct gpumem_service *s = service;
    if (s == NULL || s->view == NULL)
        return false;
    bool found = false;
    podview_lock(s->view);
    const struct gpumem_pod *p = podview_find_uid(s->view, uid);
    if (p != NULL && (ordinal < 0 || (size_t)ordinal < p->n_containers)) {
        snprintf(ns, ns_len, "%s", p->ns);
        snprintf(pod, pod_len, "%s", p->name);
        snprintf(container, container_len, "%s", ordinal < 0 ? "" : p->containers[ordinal].name);
        found = true;
    }
    podview_unlock(s->view);
    return found;
}
