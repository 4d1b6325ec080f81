/* kubectl_min.c -- a test-only driver of gp_kube for the integration tests
 * (test/integration/test_kube_client.py). Not a product: every gp_kube call
 * is reachable from the command line and reports in a line protocol the
 * tests parse.
 *
 *   kubectl_min [options] get PATH
 *   kubectl_min [options] list PATH [LIMIT [any] [protobuf] [dump]]
 *       (any: resourceVersion=0; protobuf: KUBE_LIST_PROTOBUF; dump: print
 *       every item as ITEMJSON <json, sorted keys> too)
 *   kubectl_min [options] watch PATH [RV]
 *   kubectl_min [options] reflect PATH [LIMIT]     (stops on "stop" or EOF on stdin)
 *   kubectl_min [options] patch PATH strategic|merge|json BODY
 *   kubectl_min [options] post PATH BODY
 *   kubectl_min [options] bind NAMESPACE NAME NODE [UID]
 *   kubectl_min [options] delete PATH [UID]
 *   kubectl_min [options] writer PATH BODY NODE WAIT_MS
 *       (a kube_writer whose attempt merge-patches PATH with BODY; its
 *       Events are about node NODE, after 2 failures; waits WAIT_MS for
 *       it to be synced, prints WRITER attempts=N failures=N events=N
 *       synced=0|1)
 *   kubectl_min [options] config                   (prints server and namespace)
 *
 * Options: --kubeconfig P --context C --cluster C --user U --in-cluster --sa-dir D
 *   --exec-timeout-ms N --repeat N (get: N GETs, each after the first once a
 *   line arrives on stdin, so a test can rotate credentials in between) --timeout-ms N
 *   --connect-timeout-ms N --attempts N --backoff-ms N --max-backoff-ms N
 *   --watch-timeout-s N --max-body N --stop-after N (watch, list: stop after N events, items)
 *
 * Output lines: OBJECT <json>, ITEM <ns/name> <rv>, LIST_BEGIN, LIST_END <rv>,
 * EVENT <TYPE> <ns/name> <rv>, RETRY <http> <reason> <message>,
 * then RESULT OK|GONE|ERROR|CANCELLED [rv=..] [http=.. reason=.. message=..],
 * and STATS requests=N retries=N peak_body=N json_peak=N json_live=N.
 * json_peak is the high-water mark of memory jansson held (counted through
 * json_set_alloc_funcs), the figure the bounded-memory test checks. */
#include "kube.h"
#include "kube_writer.h"

#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- jansson memory accounting ------------------------------------------ */

static atomic_size_t json_live, json_peak;

struct alloc_header {
    size_t size;
    size_t pad; /* keeps the payload 16-byte aligned */
};

static void *counting_malloc(size_t size)
{
    struct alloc_header *h = malloc(sizeof *h + size);
    if (h == NULL)
        return NULL;
    h->size = size;
    size_t live = atomic_fetch_add(&json_live, size) + size;
    size_t peak = atomic_load(&json_peak);
    while (live > peak && !atomic_compare_exchange_weak(&json_peak, &peak, live))
        ;
    return h + 1;
}

static void counting_free(void *p)
{
    if (p == NULL)
        return;
    struct alloc_header *h = (struct alloc_header *)p - 1;
    atomic_fetch_sub(&json_live, h->size);
    free(h);
}

/* ---- output --------------------------------------------------------------- */

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    pthread_mutex_lock(&out_lock);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
}

static void object_id(json_t *obj, char *out, size_t outlen, const char **rv)
{
    json_t *meta = json_object_get(obj, "metadata");
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    const char *name = json_string_value(json_object_get(meta, "name"));
    *rv = json_string_value(json_object_get(meta, "resourceVersion"));
    if (*rv == NULL)
        *rv = "-";
    if (name == NULL)
        snprintf(out, outlen, "-");
    else
        snprintf(out, outlen, "%s%s%s", ns ? ns : "", ns ? "/" : "", name);
}

static const char *result_name(enum kube_result r)
{
    switch (r) {
    case KUBE_OK:
        return "OK";
    case KUBE_GONE:
        return "GONE";
    case KUBE_CANCELLED:
        return "CANCELLED";
    default:
        return "ERROR";
    }
}

static int report(enum kube_result r, const char *rv, const struct kube_error *err)
{
    if (r == KUBE_OK)
        say("RESULT OK%s%s", rv ? " rv=" : "", rv ? rv : "");
    else
        say("RESULT %s%s%s http=%d reason=%s retry_after_ms=%ld transient=%d message=%s",
            result_name(r), rv ? " rv=" : "", rv ? rv : "", err->http_status, err->reason,
            err->retry_after_ms, kube_error_transient(err), err->message);
    switch (r) {
    case KUBE_OK:
        return 0;
    case KUBE_GONE:
        return 2;
    case KUBE_CANCELLED:
        return 3;
    default:
        return 1;
    }
}

/* ---- callbacks -------------------------------------------------------------- */

static long get_repeat = 1; /* get: GETs, one per line on stdin after the first */
static long stop_after;     /* watch/list: stop after this many events or items (0: never) */
static long events_seen;

static int print_item(json_t *item, void *ctx)
{
    char id[512];
    const char *rv;
    object_id(item, id, sizeof id, &rv);
    say("ITEM %s %s", id, rv);
    if (ctx != NULL) { /* "dump" */
        char *text = json_dumps(item, JSON_COMPACT | JSON_SORT_KEYS);
        say("ITEMJSON %s", text ? text : "(out of memory)");
        counting_free(text); /* jansson's allocator: json_set_alloc_funcs */
    }
    return stop_after > 0 && ++events_seen >= stop_after ? 1 : 0;
}

static int print_event(enum kube_event_type type, json_t *object, void *ctx)
{
    char id[512];
    const char *rv;
    object_id(object, id, sizeof id, &rv);
    say("EVENT %s %s %s", kube_event_type_name(type), id, rv);
    return stop_after > 0 && ++events_seen >= stop_after ? 1 : 0;
}

static int print_list_begin(void *ctx)
{
    say("LIST_BEGIN");
    return 0;
}

static int print_list_end(const char *rv, void *ctx)
{
    say("LIST_END %s", rv);
    return 0;
}

static void print_retry(const struct kube_error *err, void *ctx)
{
    say("RETRY %d %s %s", err->http_status, err->reason, err->message);
}

/* ---- commands ----------------------------------------------------------------- */

struct reflect_job {
    struct kube_client *client;
    const char *path;
    long limit;
    struct kube_cancel *cancel;
    struct kube_error err;
    enum kube_result result;
};

static void *reflect_thread(void *arg)
{
    struct reflect_job *job = arg;
    static const struct kube_reflector_ops ops = {
        .list_begin = print_list_begin,
        .list_item = print_item,
        .list_end = print_list_end,
        .event = print_event,
        .on_error = print_retry,
    };
    job->result =
        kube_reflector_run(job->client, job->path, job->limit, &ops, NULL, job->cancel, &job->err);
    return NULL;
}

static int cmd_reflect(struct kube_client *client, const char *path, long limit)
{
    struct reflect_job job = {.client = client, .path = path, .limit = limit};
    job.cancel = kube_cancel_new();
    pthread_t thread;
    if (job.cancel == NULL || pthread_create(&thread, NULL, reflect_thread, &job) != 0) {
        kube_cancel_free(job.cancel);
        say("RESULT ERROR http=0 reason=InternalError message=cannot start the reflector");
        return 1;
    }
    char line[256];
    while (fgets(line, sizeof line, stdin) != NULL && strncmp(line, "stop", 4) != 0)
        ;
    kube_cancel_fire(job.cancel); /* from this thread, while the reflector blocks */
    pthread_join(thread, NULL);
    kube_cancel_free(job.cancel);
    return report(job.result, NULL, &job.err);
}

static json_t *parse_arg_json(const char *text)
{
    json_error_t jerr;
    json_t *body = json_loads(text, 0, &jerr);
    if (body == NULL)
        fprintf(stderr, "kubectl_min: bad JSON argument: %s\n", jerr.text);
    return body;
}

static void print_object(const json_t *obj)
{
    char *text = json_dumps(obj, JSON_COMPACT);
    say("OBJECT %s", text ? text : "null");
    counting_free(text); /* jansson allocated it with our functions */
}

static int cmd_write(struct kube_client *client, const char *verb, char **args, int nargs)
{
    struct kube_error err = {0};
    json_t *out = NULL;
    int rc;
    if (strcmp(verb, "bind") == 0) {
        if (nargs < 3)
            return 64;
        rc = kube_bind_pod(client, args[0], args[1], nargs > 3 ? args[3] : NULL, args[2], NULL, 0,
                           &err);
        return report(rc == 0 ? KUBE_OK : KUBE_ERROR, NULL, &err);
    }
    bool patch = strcmp(verb, "patch") == 0;
    if (nargs < (patch ? 3 : 2))
        return 64;
    json_t *body = parse_arg_json(args[patch ? 2 : 1]);
    if (body == NULL)
        return 64;
    if (patch) {
        enum kube_patch_type type = strcmp(args[1], "json") == 0    ? KUBE_PATCH_JSON
                                    : strcmp(args[1], "merge") == 0 ? KUBE_PATCH_MERGE
                                                                    : KUBE_PATCH_STRATEGIC;
        rc = kube_patch(client, args[0], type, body, &out, &err);
    } else {
        rc = kube_post(client, args[0], body, &out, &err);
    }
    json_decref(body);
    if (rc == 0) {
        print_object(out);
        json_decref(out);
    }
    return report(rc == 0 ? KUBE_OK : KUBE_ERROR, NULL, &err);
}

struct patch_target {
    struct kube_client *client;
    const char *path;
};

static int patch_attempt(json_t *desired, void *ctx, struct kube_error *err)
{
    const struct patch_target *t = ctx;
    return kube_patch(t->client, t->path, KUBE_PATCH_MERGE, desired, NULL, err);
}

static int cmd_writer(struct kube_client *client, char **args, int nargs)
{
    if (nargs < 5)
        return 64;
    json_t *body = parse_arg_json(args[2]);
    if (body == NULL)
        return 64;
    struct patch_target target = {.client = client, .path = args[1]};
    const struct kube_writer_options wopt = {
        .what = "test state",
        .retry = {.initial_backoff_ms = 20, .max_backoff_ms = 100},
        .event_after = 2,
        .about = {.api_version = "v1", .kind = "Node", .name = args[3]},
        .event_reason = "TestWriteFailed",
        .component = "kubectl_min",
    };
    char err[256];
    struct kube_writer *w =
        kube_writer_start(client, &wopt, body, patch_attempt, &target, err, sizeof err);
    json_decref(body);
    if (w == NULL) {
        say("RESULT ERROR http=0 reason=Writer message=%s", err);
        return 1;
    }
    bool synced = kube_writer_wait_synced(w, atol(args[4]));
    struct kube_writer_stats st;
    kube_writer_stats(w, &st);
    kube_writer_stop(w);
    say("WRITER attempts=%llu failures=%llu events=%llu synced=%d", (unsigned long long)st.attempts,
        (unsigned long long)st.failures, (unsigned long long)st.events, synced ? 1 : 0);
    struct kube_error none = {0};
    return report(synced ? KUBE_OK : KUBE_ERROR, NULL, &none);
}

static int run_command(struct kube_client *client, char **args, int nargs)
{
    const char *verb = args[0];
    struct kube_error err = {0};
    if (strcmp(verb, "config") == 0) {
        say("SERVER %s", kube_client_server(client));
        say("NAMESPACE %s", kube_client_namespace(client));
        return report(KUBE_OK, NULL, &err);
    }
    if (nargs < 2)
        return 64;
    const char *path = args[1];
    if (strcmp(verb, "get") == 0) {
        int rc = 0;
        for (long i = 0; i < get_repeat; i++) {
            char line[64];
            if (i > 0 && fgets(line, sizeof line, stdin) == NULL)
                break;
            json_t *obj = NULL;
            rc = kube_get(client, path, &obj, &err);
            if (rc == 0) {
                print_object(obj);
                json_decref(obj);
            }
            if (get_repeat > 1) /* one RESULT per GET, then the tests' sync point */
                report(rc == 0 ? KUBE_OK : KUBE_ERROR, NULL, &err);
            fflush(stdout);
        }
        return get_repeat > 1 ? (rc == 0 ? 0 : 1)
                              : report(rc == 0 ? KUBE_OK : KUBE_ERROR, NULL, &err);
    }
    if (strcmp(verb, "list") == 0) {
        char rv[KUBE_RV_MAX];
        long limit = nargs > 2 ? atol(args[2]) : 0;
        unsigned flags = KUBE_LIST_CONSISTENT;
        bool dump = false;
        for (int i = 3; i < nargs; i++) {
            flags |= strcmp(args[i], "any") == 0 ? KUBE_LIST_ANY_VERSION : 0;
            flags |= strcmp(args[i], "protobuf") == 0 ? KUBE_LIST_PROTOBUF : 0;
            dump |= strcmp(args[i], "dump") == 0;
        }
        enum kube_result r = kube_list(client, path, limit, flags, print_item,
                                       dump ? (void *)&dump : NULL, rv, &err);
        return report(r, r == KUBE_OK ? rv : NULL, &err);
    }
    if (strcmp(verb, "watch") == 0) {
        char rv[KUBE_RV_MAX] = "";
        if (nargs > 2)
            snprintf(rv, sizeof rv, "%s", args[2]);
        enum kube_result r = kube_watch(client, path, rv, print_event, NULL, NULL, &err);
        return report(r, rv, &err);
    }
    if (strcmp(verb, "reflect") == 0)
        return cmd_reflect(client, path, nargs > 2 ? atol(args[2]) : 0);
    if (strcmp(verb, "delete") == 0) {
        int rc = kube_delete(client, path, nargs > 2 ? args[2] : NULL, &err);
        return report(rc == 0 ? KUBE_OK : KUBE_ERROR, NULL, &err);
    }
    if (strcmp(verb, "writer") == 0)
        return cmd_writer(client, args, nargs);
    return cmd_write(client, verb, args + 1, nargs - 1);
}

int main(int argc, char **argv)
{
    json_set_alloc_funcs(counting_malloc, counting_free);
    struct kube_client_options opt = {0};
    static const struct option longopts[] = {
        {"kubeconfig", required_argument, NULL, 'k'},
        {"context", required_argument, NULL, 'c'},
        {"cluster", required_argument, NULL, 'L'},
        {"user", required_argument, NULL, 'U'},
        {"exec-timeout-ms", required_argument, NULL, 'E'},
        {"repeat", required_argument, NULL, 'R'},
        {"in-cluster", no_argument, NULL, 'i'},
        {"sa-dir", required_argument, NULL, 's'},
        {"timeout-ms", required_argument, NULL, 't'},
        {"connect-timeout-ms", required_argument, NULL, 'C'},
        {"attempts", required_argument, NULL, 'a'},
        {"backoff-ms", required_argument, NULL, 'b'},
        {"max-backoff-ms", required_argument, NULL, 'B'},
        {"watch-timeout-s", required_argument, NULL, 'w'},
        {"max-body", required_argument, NULL, 'm'},
        {"stop-after", required_argument, NULL, 'S'},
        {0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
        switch (ch) {
        case 'k':
            opt.kubeconfig = optarg;
            break;
        case 'c':
            opt.context = optarg;
            break;
        case 'L':
            opt.cluster = optarg;
            break;
        case 'U':
            opt.user = optarg;
            break;
        case 'E':
            opt.exec_timeout_ms = atol(optarg);
            break;
        case 'R':
            get_repeat = atol(optarg);
            break;
        case 'i':
            opt.in_cluster = true;
            break;
        case 's':
            opt.serviceaccount_dir = optarg;
            break;
        case 't':
            opt.timeout_ms = atol(optarg);
            break;
        case 'C':
            opt.connect_timeout_ms = atol(optarg);
            break;
        case 'a':
            opt.retry.max_attempts = atoi(optarg);
            break;
        case 'b':
            opt.retry.initial_backoff_ms = atol(optarg);
            break;
        case 'B':
            opt.retry.max_backoff_ms = atol(optarg);
            break;
        case 'w':
            opt.watch_timeout_s = atol(optarg);
            break;
        case 'm':
            opt.max_body_bytes = (size_t)atol(optarg);
            break;
        case 'S':
            stop_after = atol(optarg);
            break;
        default:
            return 64;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "usage: kubectl_min [options] "
                        "get|list|watch|reflect|patch|post|bind|delete|writer|config ...\n");
        return 64;
    }
    char err[1024];
    struct kube_client *client = kube_client_new(&opt, err, sizeof err);
    if (client == NULL) {
        say("RESULT ERROR http=0 reason=Config message=%s", err);
        return 1;
    }
    int rc = run_command(client, argv + optind, argc - optind);
    if (rc == 64)
        fprintf(stderr, "kubectl_min: missing arguments for %s\n", argv[optind]);
    struct kube_client_stats stats;
    kube_client_stats(client, &stats);
    kube_client_free(client);
    say("STATS requests=%llu retries=%llu peak_body=%zu json_peak=%zu json_live=%zu",
        (unsigned long long)stats.requests, (unsigned long long)stats.retries,
        stats.peak_body_bytes, atomic_load(&json_peak), atomic_load(&json_live));
    return rc;
}
