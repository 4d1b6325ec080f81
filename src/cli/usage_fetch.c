/* usage_fetch.c -- parallel, bounded reads of the agents' /metrics (usage_fetch.h). */
#include "usage_fetch.h"

#include "clock.h"
#include "log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One agent's answer: 256 containers on 8 GPUs are ~100 KB of text; a
 * bigger one is an agent gone wrong, not worth the memory. */
#define USAGE_MAX_BODY ((size_t)16 << 20)
/* Prometheus' text format; the node proxy passes Accept on. */
#define USAGE_ACCEPT "text/plain;version=0.0.4;q=1,*/*;q=0.1"

struct fetch {
    const struct usage_fetch_options *opt;
    const char *const *nodes;
    struct node_usage *usage;
    size_t n;
    int64_t deadline_ns;
    atomic_size_t next;
    atomic_size_t failed, bytes;
};

struct worker {
    struct fetch *f;
    struct kube_client *client;
    pthread_t thread;
    bool started;
};

/* direct: http://<address>:<port>/metrics, brackets around an IPv6
 * address. 0, or -1 with u's error set. */
static int get_direct(struct fetch *f, size_t i, char **body, size_t *len)
{
    struct node_usage *u = &f->usage[i];
    const char *address = f->opt->addresses[i];
    if (!address) {
        snprintf(u->error, sizeof u->error, "the Node has no address (status.addresses)");
        return -1;
    }
    bool v6 = strchr(address, ':') != NULL;
    size_t ulen = strlen(address) + 48;
    char *url = malloc(ulen);
    if (!url) {
        snprintf(u->error, sizeof u->error, "out of memory");
        return -1;
    }
    snprintf(url, ulen, "http://%s%s%s:%d/metrics", v6 ? "[" : "", address, v6 ? "]" : "",
             f->opt->port);
    long status = 0;
    char err[192];
    int rc = kube_http_get(url, USAGE_ACCEPT, f->deadline_ns, USAGE_MAX_BODY, f->opt->cancel,
                           &status, body, len, err, sizeof err);
    if (rc != 0)
        snprintf(u->error, sizeof u->error, "%.60s: %.130s", url, err);
    else if (status < 200 || status > 299)
        snprintf(u->error, sizeof u->error, "%.60s: HTTP %ld", url, status);
    free(url);
    return rc == 0 && status >= 200 && status <= 299 ? 0 : -1;
}

/* proxy: through the API server's node proxy. 0, or -1 with u's error set. */
static int get_proxied(struct fetch *f, struct kube_client *client, size_t i, char **body,
                       size_t *len)
{
    struct node_usage *u = &f->usage[i];
    char *escaped = kube_escape(f->nodes[i]);
    size_t plen = escaped ? strlen(escaped) + 64 : 0;
    char *path = escaped ? malloc(plen) : NULL;
    struct kube_error kerr = {0};
    int rc = -1;
    if (!path) {
        snprintf(u->error, sizeof u->error, "out of memory");
    } else {
        snprintf(path, plen, "/api/v1/nodes/%s:%d/proxy/metrics", escaped, f->opt->port);
        rc = kube_get_text_until(client, path, f->deadline_ns, body, len, &kerr);
        if (rc != 0 && kerr.http_status > 0)
            snprintf(u->error, sizeof u->error, "HTTP %d: %.160s", kerr.http_status, kerr.message);
        else if (rc != 0)
            snprintf(u->error, sizeof u->error, "%.190s", kerr.message);
    }
    free(path);
    free(escaped);
    return rc;
}

static void fetch_one(struct fetch *f, struct kube_client *client, size_t i)
{
    struct node_usage *u = &f->usage[i];
    char *body = NULL;
    size_t len = 0;
    int64_t start = clock_now_ns();
    if (f->opt->cancel && kube_cancel_fired(f->opt->cancel)) {
        u->state = USAGE_FAILED;
        snprintf(u->error, sizeof u->error, "cancelled");
        goto out;
    }
    if ((f->opt->addresses ? get_direct(f, i, &body, &len)
                           : get_proxied(f, client, i, &body, &len)) != 0) {
        u->state = USAGE_FAILED;
        goto out;
    }
    if (node_usage_parse(u, body, len) != 0) {
        u->state = USAGE_FAILED;
        snprintf(u->error, sizeof u->error, "out of memory");
    }
    atomic_fetch_add(&f->bytes, len);
out:
    if (u->state == USAGE_FAILED)
        atomic_fetch_add(&f->failed, 1);
    u->fetch_ms = (double)(clock_now_ns() - start) / 1e6;
    log_v(2, "node %s: %s in %.1f ms (%zu bytes)", f->nodes[i],
          u->state == USAGE_OK ? "metrics" : u->error, u->fetch_ms, len);
    free(body);
}

static void *work(void *arg)
{
    struct worker *w = arg;
    struct fetch *f = w->f;
    for (;;) {
        size_t i = atomic_fetch_add(&f->next, 1);
        if (i >= f->n)
            break;
        fetch_one(f, w->client, i);
    }
    return NULL;
}

int usage_fetch(const struct usage_fetch_options *opt, const char *const *nodes, size_t n,
                struct node_usage *usage, struct usage_fetch_stats *stats, char *err, size_t errlen)
{
    int64_t start = clock_now_ns();
    struct fetch f = {.opt = opt,
                      .nodes = nodes,
                      .usage = usage,
                      .n = n,
                      .deadline_ns = start + (int64_t)opt->timeout_ms * 1000000};
    atomic_init(&f.next, 0);
    atomic_init(&f.failed, 0);
    atomic_init(&f.bytes, 0);
    size_t nworkers = (size_t)(opt->workers > 0 ? opt->workers : 1);
    if (nworkers > n)
        nworkers = n;
    *stats = (struct usage_fetch_stats){.requests = n};
    if (n == 0)
        return 0;
    struct worker *workers = calloc(nworkers, sizeof *workers);
    if (!workers) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    struct kube_client_options kopt = opt->client ? *opt->client : (struct kube_client_options){0};
    kopt.max_body_bytes = USAGE_MAX_BODY;
    /* One request per node: the proxy's 503 (agent unreachable) would
     * not change on a retry, and the deadline bounds the whole anyway. */
    kopt.retry = (struct kube_retry_policy){.max_attempts = 1};
    kopt.timeout_ms = opt->timeout_ms;
    size_t started = 0;
    for (size_t i = 0; i < nworkers; i++) {
        workers[i].f = &f;
        /* direct: no API client at all, so no credential to leak */
        if (!opt->addresses && !(workers[i].client = kube_client_new(&kopt, err, errlen)))
            break;
        if (pthread_create(&workers[i].thread, NULL, work, &workers[i]) != 0) {
            snprintf(err, errlen, "cannot start a metrics worker thread");
            break;
        }
        workers[i].started = true;
        started++;
    }
    for (size_t i = 0; i < nworkers; i++)
        if (workers[i].started)
            pthread_join(workers[i].thread, NULL);
    for (size_t i = 0; i < nworkers; i++)
        kube_client_free(workers[i].client);
    free(workers);
    stats->failed = atomic_load(&f.failed);
    stats->bytes = atomic_load(&f.bytes);
    stats->ms = (double)(clock_now_ns() - start) / 1e6;
    log_v(1, "read %zu node agents' metrics (%zu failed, %zu bytes) with %zu workers in %.1f ms", n,
          stats->failed, stats->bytes, started, stats->ms);
    return started > 0 ? 0 : -1;
}
