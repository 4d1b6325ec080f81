/* ui_usage.c -- /ui/usage.json: node agents' figures, read on demand (ui_usage.h). */
#include "ui_usage.h"

#include "buf.h"
#include "clock.h"
#include "log.h"
#include "pool_view.h"
#include "usage_fetch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A sweep's bounds: 32 requests in flight, 10 s for all of them. */
#define UI_USAGE_WORKERS 32
#define UI_USAGE_TIMEOUT_MS 10000

struct ui_usage {
    struct kube_client_options client;
    struct cache *cache;
    int port;
    long max_age_ms;
    pthread_mutex_t lock;
    char *json; /* the last sweep's nodes object, NULL before the first */
    int64_t at_ns;
    bool refreshing, started;
    pthread_t thread;
};

struct ui_usage *ui_usage_new(const struct kube_client_options *client, struct cache *cache,
                              int port, long max_age_ms)
{
    struct ui_usage *u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    u->client = *client;
    u->cache = cache;
    u->port = port;
    u->max_age_ms = max_age_ms;
    pthread_mutex_init(&u->lock, NULL);
    return u;
}

void ui_usage_free(struct ui_usage *u)
{
    if (!u)
        return;
    if (u->started)
        pthread_join(u->thread, NULL);
    pthread_mutex_destroy(&u->lock);
    free(u->json);
    free(u);
}

/* The GPU-sharing nodes' names, from the cache (pool_walk reports GPUs,
 * a node's one after the other). */
struct names {
    char **names;
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
        if (!grown) {
            n->failed = true;
            return;
        }
        n->names = grown;
        n->cap = cap;
    }
    if (!(n->names[n->count] = strdup(gpu->node)))
        n->failed = true;
    else
        n->count++;
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

static void *sweep(void *arg)
{
    struct ui_usage *u = arg;
    struct names names = {0};
    struct pool_totals totals;
    char err[256];
    struct node_usage *usage = NULL;
    struct buf b = {0};
    if (pool_walk(u->cache, on_gpu, &names, &totals, err, sizeof err) != 0 || names.failed ||
        !(usage = calloc(names.count ? names.count : 1, sizeof *usage))) {
        log_warn("/ui usage: out of memory");
    } else {
        struct usage_fetch_options fo = {.client = &u->client,
                                         .port = u->port,
                                         .workers = UI_USAGE_WORKERS,
                                         .timeout_ms = UI_USAGE_TIMEOUT_MS};
        struct usage_fetch_stats st;
        if (usage_fetch(&fo, (const char *const *)names.names, names.count, usage, &st, err,
                        sizeof err) != 0)
            log_warn("/ui usage: node agents not read: %s", err);
        else
            log_v(1, "/ui usage: %zu node agents read (%zu failed) in %.0f ms", st.requests,
                  st.failed, st.ms);
        put_nodes(&b, names.names, usage, names.count);
    }
    for (size_t i = 0; usage && i < names.count; i++)
        node_usage_free(&usage[i]);
    free(usage);
    for (size_t i = 0; i < names.count; i++)
        free(names.names[i]);
    free(names.names);
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
    return NULL;
}

char *ui_usage_json(struct ui_usage *u, size_t *len)
{
    struct buf b = {0};
    int64_t now = clock_now_ns();
    pthread_mutex_lock(&u->lock);
    if (!u->refreshing && (!u->json || now - u->at_ns > (int64_t)u->max_age_ms * 1000000)) {
        if (u->started) /* the last sweep has ended (refreshing is false): reap it */
            pthread_join(u->thread, NULL);
        u->started = pthread_create(&u->thread, NULL, sweep, u) == 0;
        u->refreshing = u->started;
        if (!u->started)
            log_warn("/ui usage: cannot start a thread");
    }
    buf_printf(&b, "{\"port\":%d,\"age_ms\":%lld,\"refreshing\":%s,\"nodes\":%s}", u->port,
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
