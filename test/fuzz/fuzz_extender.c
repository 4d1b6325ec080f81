/* fuzz_extender.c -- the extender's request bodies (filter, prioritize,
 * bind) through protocol.c's parsers into the cache and the bind verb, as
 * extender.c's handlers run them, over a cache holding two GPU nodes and
 * two pods.
 *
 * Input: byte 0 chooses (bits 0-1) the verb: 0 filter, 1 prioritize,
 * 2 bind, 3 all three on the same body; bit 2 the placement policy
 * (gpupool, binpack); bits 3-4 make the scripted API's annotation PATCH /
 * Binding POST fail. Then the body; then optional "\n--\n"-separated
 * records, each a Node ('N'), Pod ('P') or ConfigMap ('C') JSON object
 * upserted into the cache before the verb runs (what the watches feed).
 * The bind verb's API calls are scripted (struct bind_api, as the unit
 * tests do): GET answers a pending pod with the request's names and UID. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bind.h"
#include "cache.h"
#include "clock.h"
#include "placement.h"
#include "protocol.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const seed_objects[] = {
    "{\"metadata\":{\"name\":\"n1\"},\"status\":{\"allocatable\":{\"cpu\":\"8\",\"memory\":"
    "\"32Gi\"},\"capacity\":{\"aliyun.com/gpu-mem\":\"32\",\"aliyun.com/gpu-count\":\"2\"}}}",
    "{\"metadata\":{\"name\":\"n2\",\"annotations\":{\"gpupool.io/gpus\":"
    "\"[{\\\"index\\\":0,\\\"memory\\\":16,\\\"model\\\":\\\"A100\\\"}]\"}},\"status\":{"
    "\"allocatable\":{\"cpu\":\"4\",\"memory\":\"16Gi\"},\"capacity\":{\"aliyun.com/gpu-mem\":"
    "\"16\",\"aliyun.com/gpu-count\":\"1\"}}}",
};
static const char *const seed_pods[] = {
    "{\"metadata\":{\"name\":\"run\",\"namespace\":\"default\",\"uid\":\"u-run\",\"annotations\":"
    "{\"ALIYUN_COM_GPU_MEM_IDX\":\"0\",\"ALIYUN_COM_GPU_MEM_POD\":\"8\"}},\"spec\":{\"nodeName\":"
    "\"n1\",\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"aliyun.com/gpu-mem\":"
    "\"8\"}}}]},\"status\":{\"phase\":\"Running\"}}",
    "{\"metadata\":{\"name\":\"p\",\"namespace\":\"default\",\"uid\":\"u-p\"},\"spec\":{"
    "\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"aliyun.com/gpu-mem\":\"4\"}}}]}"
    ",\"status\":{\"phase\":\"Pending\"}}",
};

static unsigned api_flags;

static int get_pod(void *ctx, const char *ns, const char *name, int64_t deadline_ns, json_t **out,
                   struct kube_error *err)
{
    (void)deadline_ns;
    const struct binding_args *args = ctx;
    *out = json_pack("{s:{s:s, s:s, s:s}, s:{s:[{s:s, s:{s:{s:s}}}]}, s:{s:s}}", "metadata", "name",
                     name, "namespace", ns, "uid", args->pod_uid[0] ? args->pod_uid : "u-x", "spec",
                     "containers", "name", "c", "resources", "limits", "aliyun.com/gpu-mem", "2",
                     "status", "phase", "Pending");
    if (!*out) {
        snprintf(err->message, sizeof(err->message), "out of memory");
        return -1;
    }
    return 0;
}

static int create_binding(void *ctx, const char *ns, const char *name, const char *uid,
                          const char *node, const json_t *annotations, int64_t deadline_ns,
                          struct kube_error *err)
{
    (void)ctx, (void)ns, (void)name, (void)uid, (void)node, (void)deadline_ns;
    char *text = annotations ? json_dumps(annotations, JSON_COMPACT) : NULL;
    free(text);
    if (api_flags & 8) { /* a refusal: nothing written */
        err->http_status = 409;
        snprintf(err->message, sizeof(err->message), "conflict");
        return -1;
    }
    if (api_flags & 16) {
        err->http_status = 0; /* no answer: the outcome is unknown */
        snprintf(err->message, sizeof(err->message), "timed out");
        return -1;
    }
    return 0;
}

static void upsert(struct cache *c, char kind, const char *text, size_t len)
{
    char err[512];
    json_error_t jerr;
    if (protocol_json_depth(text, len, PROTOCOL_MAX_DEPTH) < 0)
        return;
    json_t *obj = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!obj)
        return;
    int rc = 0;
    if (kind == 'N')
        rc = cache_node_upsert(c, obj, err, sizeof(err));
    else if (kind == 'P')
        rc = cache_pod_upsert(c, obj, err, sizeof(err));
    else if (kind == 'C')
        rc = cache_configmap_upsert(c, obj, err, sizeof(err));
    (void)rc; /* a refused object is fine: the cache keeps what it had */
    json_decref(obj);
}

static void filter(struct cache *c, const char *body, size_t len, bool prioritize)
{
    struct extender_args args;
    struct cache_query q;
    char err[512];
    size_t n;
    if (protocol_parse_args(body, len, &args, err, sizeof(err)) < 0) {
        free(protocol_filter_error(err, &n));
        return;
    }
    if (cache_query_init(c, &args.facts, !prioritize, prioritize, &q, err, sizeof(err)) < 0) {
        protocol_args_free(&args);
        return;
    }
    if (prioritize) {
        double *scores = calloc(args.count + 1, sizeof(double));
        int *prio = calloc(args.count + 1, sizeof(int));
        if (scores && prio) {
            cache_evaluate(c, &q, args.names, args.count, NULL, NULL, scores);
            placement_scores_to_priorities(scores, args.count, PROTOCOL_MAX_PRIORITY, prio);
            for (size_t i = 0; i < args.count; i++)
                if (prio[i] < 0 || prio[i] > PROTOCOL_MAX_PRIORITY)
                    abort(); /* kube-scheduler accepts 0..MaxExtenderPriority */
            free(protocol_priorities(&args, prio, &n));
        }
        free(scores);
        free(prio);
    } else {
        struct filter_result r;
        protocol_filter_begin(&r, &args);
        cache_evaluate(c, &q, args.names, args.count, protocol_filter_add, &r, NULL);
        char *out = protocol_filter_finish(&r, &n);
        json_error_t jerr;
        json_t *reply = out ? json_loadb(out, n, 0, &jerr) : NULL;
        if (out && !reply)
            abort(); /* the reply is written as text: it must be JSON */
        json_decref(reply);
        free(out);
    }
    cache_query_free(&q);
    protocol_args_free(&args);
}

static void bind(struct cache *c, const char *body, size_t len)
{
    struct binding_args args;
    char err[768];
    if (protocol_parse_binding(body, len, &args, err, sizeof(err)) < 0)
        return;
    const struct bind_api api = {&args, get_pod, create_binding, 0};
    /* A deadline as the server sets it: now + an API timeout. */
    enum bind_result r =
        bind_pod_result(c, &api, &args, clock_now_ns() + 10000000000LL, err, sizeof(err));
    if ((unsigned)r >= BIND_RESULTS || (r != BIND_OK && !err[0]))
        abort(); /* a refusal says why */
    protocol_binding_free(&args);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_quiet();
    if (size == 0)
        return 0;
    unsigned mode = data[0];
    api_flags = mode;
    data++, size--;
    struct cache *c = cache_new((mode & 4) ? PLACEMENT_BINPACK : PLACEMENT_GPUPOOL);
    if (!c)
        return 0;
    cache_nodes_list_begin(c);
    cache_pods_list_begin(c);
    cache_configmaps_list_begin(c);
    for (size_t i = 0; i < sizeof(seed_objects) / sizeof(seed_objects[0]); i++)
        upsert(c, 'N', seed_objects[i], strlen(seed_objects[i]));
    for (size_t i = 0; i < sizeof(seed_pods) / sizeof(seed_pods[0]); i++)
        upsert(c, 'P', seed_pods[i], strlen(seed_pods[i]));
    const uint8_t *body;
    size_t body_len = fz_split(&data, &size, "\n--\n", &body);
    while (size > 0) {
        const uint8_t *rec;
        size_t n = fz_split(&data, &size, "\n--\n", &rec);
        if (n > 0)
            upsert(c, (char)rec[0], (const char *)rec + 1, n - 1);
    }
    cache_nodes_list_end(c);
    cache_pods_list_end(c);
    cache_configmaps_list_end(c);

    const char *b = (const char *)body;
    switch (mode & 3) {
    case 0:
        filter(c, b, body_len, false);
        break;
    case 1:
        filter(c, b, body_len, true);
        break;
    case 2:
        bind(c, b, body_len);
        break;
    default:
        filter(c, b, body_len, false);
        filter(c, b, body_len, true);
        bind(c, b, body_len);
        break;
    }
    json_decref(cache_inspect(c, NULL));
    cache_free(c);
    return 0;
}
