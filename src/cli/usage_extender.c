/* usage_extender.c -- top's figures from the extender's /ui/usage.json (usage_extender.h). */
#include "usage_extender.h"

#include "clock.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fetch(struct kube_client *client, const char *path, int64_t deadline, json_t **doc,
                 char *err, size_t errlen)
{
    for (;;) {
        struct kube_error kerr = {0};
        if (kube_get_until(client, path, deadline, doc, &kerr) != 0) {
            snprintf(err, errlen, "%s", kerr.message);
            return -1;
        }
        json_t *age = json_object_get(*doc, "age_ms");
        if (!json_is_integer(age) || json_integer_value(age) >= 0)
            return 0;
        json_decref(*doc);
        *doc = NULL;
        if (clock_now_ns() + 200 * 1000000LL >= deadline) {
            snprintf(err, errlen,
                     "the extender's first sweep of the node agents did not end in time");
            return -1;
        }
        struct timespec ts = {.tv_nsec = 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static double num(const json_t *v, bool *has)
{
    *has = json_is_number(v);
    return *has ? json_number_value(v) : 0;
}

/* One node's entry into u. -1 when out of memory. */
static int fill(struct node_usage *u, const json_t *entry)
{
    u->state = USAGE_OK;
    const char *error = json_string_value(json_object_get(entry, "error"));
    if (error) {
        u->state = USAGE_FAILED;
        snprintf(u->error, sizeof u->error, "%.150s (the extender's last sweep)", error);
        return 0;
    }
    const char *key;
    json_t *value;
    json_object_foreach (json_object_get(entry, "gpus"), key, value) {
        char *end;
        long index = strtol(key, &end, 10);
        if (end == key || *end || index < 0 || index >= 1 << 20 || json_array_size(value) < 2)
            continue;
        char uuid[32];
        snprintf(uuid, sizeof uuid, "index-%ld", index); /* usage.json names GPUs by index */
        struct usage_gpu *g = node_usage_add_gpu(u, uuid, (int)index);
        if (!g)
            return -1;
        bool has;
        g->mem_used = num(json_array_get(value, 0), &has);
        g->has |= has ? USAGE_MEM_USED : 0;
        g->sm = num(json_array_get(value, 1), &has);
        g->has |= has ? USAGE_SM : 0;
    }
    size_t i;
    json_array_foreach (json_object_get(entry, "pods"), i, value) {
        const char *ns = json_string_value(json_array_get(value, 0));
        const char *name = json_string_value(json_array_get(value, 1));
        if (!ns || !name || json_array_size(value) < 8)
            continue;
        struct usage_pod *p = node_usage_add_pod(u, ns, name);
        if (!p)
            return -1;
        static const unsigned bits[] = {USAGE_MEM_USED, USAGE_MEM_LIMIT, USAGE_SM, USAGE_MEM_UTIL,
                                        USAGE_PROC_MEM};
        double *fields[] = {&p->mem_used, &p->mem_limit, &p->sm, &p->mem_util, &p->proc_mem};
        for (size_t f = 0; f < 5; f++) {
            bool has;
            *fields[f] = num(json_array_get(value, 2 + f), &has);
            p->has |= has ? bits[f] : 0;
        }
        json_int_t procs = json_integer_value(json_array_get(value, 7));
        p->processes = procs > 0 && procs < 1 << 30 ? (unsigned)procs : 0;
    }
    return 0;
}

int usage_from_extender(struct kube_client *client, const char *service, long timeout_ms,
                        const char *const *nodes, size_t n, struct node_usage *usage, char *err,
                        size_t errlen)
{
    char ns[256], rest[512];
    const char *slash = strchr(service, '/');
    if (!slash || slash == service || (size_t)(slash - service) >= sizeof ns ||
        strlen(slash + 1) >= sizeof rest || !slash[1]) {
        snprintf(err, errlen, "--extender-service: want NAMESPACE/NAME:PORT, got \"%s\"", service);
        return -1;
    }
    memcpy(ns, service, (size_t)(slash - service));
    ns[slash - service] = '\0';
    snprintf(rest, sizeof rest, "%s", slash + 1);
    /* NAME:PORT: each escaped, the colon kept (the API server splits on it). */
    char *colon = strchr(rest, ':');
    if (colon)
        *colon = '\0';
    char *ens = kube_escape(ns), *erest = kube_escape(rest);
    char *eport = kube_escape(colon ? colon + 1 : "");
    size_t plen =
        (ens ? strlen(ens) : 0) + (erest ? strlen(erest) : 0) + (eport ? strlen(eport) : 0) + 64;
    char *path = ens && erest && eport ? malloc(plen) : NULL;
    json_t *doc = NULL;
    int rc = -1;
    if (!path) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    snprintf(path, plen, "/api/v1/namespaces/%s/services/%s%s%s/proxy/ui/usage.json", ens, erest,
             colon ? ":" : "", eport);
    int64_t start = clock_now_ns();
    if (fetch(client, path, start + (int64_t)timeout_ms * 1000000, &doc, err, errlen) != 0)
        goto out;
    const json_t *all = json_object_get(doc, "nodes");
    for (size_t i = 0; i < n; i++) {
        const json_t *entry = json_object_get(all, nodes[i]);
        if (!entry) {
            usage[i].state = USAGE_NOT_READ; /* the caller may ask its agent */
            snprintf(usage[i].error, sizeof usage[i].error,
                     "not in the extender's sweep (not a GPU-sharing node?)");
        } else if (fill(&usage[i], entry) != 0) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
    }
    log_v(1, "read the extender's sweep (%lld ms old) in %.1f ms",
          (long long)json_integer_value(json_object_get(doc, "age_ms")),
          (double)(clock_now_ns() - start) / 1e6);
    rc = 0;
out:
    json_decref(doc);
    free(path);
    free(ens);
    free(erest);
    free(eport);
    return rc;
}
