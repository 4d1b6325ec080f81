/* ui_usage.c -- /ui/usage.json: node agents' figures, swept in the background (ui_usage.h). */
#include "ui_usage.h"

#include "buf.h"
#include "clock.h"
#include "log.h"
#include "pool_view.h"
#include "usage_fetch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A sweep's bounds: 32 requests in flight, 10 s for all of them (less when
 * the interval is shorter, so a few dead nodes cannot stretch the cadence). */
#define UI_USAGE_WORKERS 32
#define UI_USAGE_TIMEOUT_MS 10000

struct ui_usage {
    struct kube_client_options client;
    struct cache *cache;
    int port;
    bool direct;
    long interval_ms;
    struct kube_cancel *stop; /* fired by ui_usage_free */
    pthread_mutex_t lock;     /* json, at_ns, refreshing */
    char *json;               /* the last sweep's nodes object, NULL before the first */
    int64_t at_ns;
    bool refreshing, started;
    pthread_t thread;
};

struct ui_usage *ui_usage_new(const struct kube_client_options *client, struct cache *cache,
                              int port, bool direct, long interval_ms)
{
    struct ui_usage *u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    if (!(u->stop = kube_cancel_new())) {
        free(u);
        return NULL;
    }
    u->client = *client;
    u->cache = cache;
    u->port = port;
    u->direct = direct;
    u->interval_ms = interval_ms > 0 ? interval_ms : 1;
    pthread_mutex_init(&u->lock, NULL);
    return u;
}

void ui_usage_free(struct ui_usage *u)
{
    if (!u)
        return;
    kube_cancel_fire(u->stop); /* ends the wait, and the sweep's requests in flight */
    if (u->started)
        pthread_join(u->thread, NULL);
    kube_cancel_free(u->stop);
    pthread_mutex_destroy(&u->lock);
    free(u->json);
    free(u);
}

/* The GPU-sharing nodes' names, from the cache (pool_walk reports GPUs,
 * a node's one after the other). */
struct names {
    char **names;
    char **addresses; /* [i]: names[i]'s, NULL when it has none */
    size_t count, cap;
    bool failed;
};

static void on_gpu(void *ctx, const struct pool_gpu *gpu)
{
    struct names *n = ctx;
    if (n->failed || (n->count > 0 && strcmp(n->names[n->count - 1], gpu->node) == 0))
        return;
    if (n->count == n->cap) {
        size_t cap = n->cap ? n->cap * 2 : 64;
        char **grown = realloc(n->names, cap * sizeof *grown);
        if (grown)
            n->names = grown;
        char **grown_addresses = grown ? realloc(n->addresses, cap * sizeof *grown) : NULL;
        if (grown_addresses)
            n->addresses = grown_addresses;
        if (!grown || !grown_addresses) {
            n->failed = true;
            return;
        }
        n->cap = cap;
    }
    n->names[n->count] = strdup(gpu->node);
    n->addresses[n->count] = gpu->address ? strdup(gpu->address) : NULL;
    if (!n->names[n->count] || (gpu->address && !n->addresses[n->count])) {
        free(n->names[n->count]);
        free(n->addresses[n->count]);
        n->failed = true;
    } else {
        n->count++;
    }
}

/* ",<value>" (with `decimals` digits) or ",null". */
static void put_figure(struct buf *b, unsigned has, int decimals, double v)
{
    if (has)
        buf_printf(b, ",%.*f", decimals, v);
    else
        buf_str(b, ",null");
}

static void put_nodes(struct buf *b, char **names, const struct node_usage *usage, size_t n)
{
    buf_str(b, "{");
    for (size_t i = 0; i < n; i++) {
        const struct node_usage *nu = &usage[i];
        buf_str(b, i ? "," : "");
        buf_json_string(b, names[i]);
        if (nu->state != USAGE_OK) {
            buf_str(b, ":{\"error\":");
            buf_json_string(b, nu->state == USAGE_FAILED ? nu->error : "not read");
            buf_str(b, "}");
            continue;
        }
        buf_str(b, ":{\"gpus\":{");
        bool first = true;
        for (size_t g = 0; g < nu->ngpus; g++) {
            const struct usage_gpu *ug = &nu->gpus[g];
            if (ug->index < 0)
                continue; /* not matched to an index the page knows */
            buf_printf(b, "%s\"%d\":[", first ? "" : ",", ug->index);
            first = false;
            if (ug->has & USAGE_MEM_USED)
                buf_printf(b, "%.0f,", ug->mem_used);
            else
                buf_str(b, "null,");
            if (ug->has & USAGE_SM)
                buf_printf(b, "%.4f]", ug->sm);
            else
                buf_str(b, "null]");
        }
        buf_str(b, "},\"pods\":[");
        for (size_t k = 0; k < nu->npods; k++) {
            const struct usage_pod *p = &nu->pods[k];
            buf_str(b, k ? ",[" : "[");
            buf_json_string(b, p->ns);
            buf_str(b, ",");
            buf_json_string(b, p->name);
            put_figure(b, p->has & USAGE_MEM_USED, 0, p->mem_used);
            put_figure(b, p->has & USAGE_MEM_LIMIT, 0, p->mem_limit);
            put_figure(b, p->has & USAGE_SM, 4, p->sm);
            put_figure(b, p->has & USAGE_MEM_UTIL, 4, p->mem_util);
            put_figure(b, p->has & USAGE_PROC_MEM, 0, p->proc_mem);
            buf_printf(b, ",%u]", p->processes);
        }
        buf_str(b, "]}");
    }
    buf_str(b, "}");
}

/* One sweep of every GPU-sharing node; the snapshot replaced at its end. */
static void sweep(struct ui_usage *u)
{
    struct names names = {0};
    struct pool_totals totals;
    char err[256];
    struct node_usage *usage = NULL;
    struct buf b = {0};
    pthread_mutex_lock(&u->lock);
    u->refreshing = true;
    pthread_mutex_unlock(&u->lock);
    if (pool_walk(u->cache, on_gpu, &names, &totals, err, sizeof err) != 0 || names.failed ||
        !(usage = calloc(names.count ? names.count : 1, sizeof *usage))) {
        log_warn("/ui usage: out of memory");
    } else {
        struct usage_fetch_options fo = {
            .client = &u->client,
            .addresses = u->direct ? (const char *const *)names.addresses : NULL,
            .port = u->port,
            .workers = UI_USAGE_WORKERS,
            .timeout_ms =
                u->interval_ms < UI_USAGE_TIMEOUT_MS ? u->interval_ms : UI_USAGE_TIMEOUT_MS,
            .cancel = u->stop};
        struct usage_fetch_stats st;
        if (usage_fetch(&fo, (const char *const *)names.names, names.count, usage, &st, err,
                        sizeof err) != 0)
            log_warn("/ui usage: node agents not read: %s", err);
        else
            log_v(1, "/ui usage: %zu node agents read %s (%zu failed, %zu bytes) in %.0f ms",
                  st.requests, u->direct ? "directly" : "through the node proxy", st.failed,
                  st.bytes, st.ms);
        put_nodes(&b, names.names, usage, names.count);
    }
    for (size_t i = 0; usage && i < names.count; i++)
        node_usage_free(&usage[i]);
    free(usage);
    for (size_t i = 0; i < names.count; i++) {
        free(names.names[i]);
        free(names.addresses[i]);
    }
    free(names.names);
    free(names.addresses);
    char *json = b.failed || !b.data ? NULL : b.data;
    if (!json)
        buf_free(&b);
    pthread_mutex_lock(&u->lock);
    if (json) {
        free(u->json);
        u->json = json;
    }
    u->at_ns = clock_now_ns();
    u->refreshing = false;
    pthread_mutex_unlock(&u->lock);
}

/* Sweeps once per interval (start to start) until ui_usage_free(). */
static void *loop(void *arg)
{
    struct ui_usage *u = arg;
    do {
        int64_t start = clock_now_ns();
        sweep(u);
        int64_t spent_ms = (clock_now_ns() - start) / 1000000;
        long wait = spent_ms < u->interval_ms ? u->interval_ms - (long)spent_ms : 0;
        if (wait == 0)
            log_v(1, "/ui usage: a sweep took %lld ms, longer than the interval (%ld ms)",
                  (long long)spent_ms, u->interval_ms);
        if (kube_cancel_sleep(u->stop, wait))
            break;
    } while (!kube_cancel_fired(u->stop));
    return NULL;
}

int ui_usage_start(struct ui_usage *u, char *err, size_t errlen)
{
    if (u->started)
        return 0;
    if (pthread_create(&u->thread, NULL, loop, u) != 0) {
        snprintf(err, errlen, "cannot start the node metrics thread");
        return -1;
    }
    u->started = true;
    return 0;
}

char *ui_usage_json(struct ui_usage *u, size_t *len)
{
    struct buf b = {0};
    int64_t now = clock_now_ns();
    pthread_mutex_lock(&u->lock);
    buf_printf(&b,
               "{\"port\":%d,\"from\":\"%s\",\"interval_ms\":%ld,\"age_ms\":%lld,"
               "\"refreshing\":%s,\"nodes\":%s}",
               u->port, u->direct ? "direct" : "proxy", u->interval_ms,
               u->json ? (long long)((now - u->at_ns) / 1000000) : -1LL,
               u->refreshing ? "true" : "false", u->json ? u->json : "{}");
    pthread_mutex_unlock(&u->lock);
    if (b.failed) {
        buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.data;
}
