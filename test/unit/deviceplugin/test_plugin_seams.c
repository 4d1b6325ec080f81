/* test_plugin_seams -- plugin_node's interfaces (registrations, observers
 * of its GPU state, the allocator hook, locked accessors) and the transport serving a method
 * table that is not the DevicePlugin's, through real unix sockets. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "api.pb-c.h"
#include "fixtures.h"
#include "plugin.h"
#include "rpc.h"
#include "rpc_test_client.h"

#define TIMEOUT_MS 5000

/* ---- recorders ----------------------------------------------------------------- */

struct trace {
    pthread_mutex_t lock;
    char order[16]; /* one letter per health observer call */
    size_t devices[16];
    int allocations;
    double last_seconds;
    bool last_ok;
    char last_resource[64];
};

static void trace_append(struct trace *t, char c, size_t devices)
{
    pthread_mutex_lock(&t->lock);
    size_t n = strlen(t->order);
    if (n + 1 < sizeof t->order) {
        t->order[n] = c;
        t->devices[n] = devices;
    }
    pthread_mutex_unlock(&t->lock);
}

static struct trace *trace_of(void *ctx)
{
    return *(struct trace **)ctx;
}

/* Two observers with contexts of their own, both writing into one trace. */
struct observer {
    struct trace *t;
    char letter;
};

static void on_health(void *ctx, const struct node_state_change *change)
{
    struct observer *o = ctx;
    trace_append(o->t, o->letter, change->changed);
}

static void on_allocate(void *ctx, const char *resource, double seconds, bool ok)
{
    struct trace *t = trace_of(ctx);
    pthread_mutex_lock(&t->lock);
    t->allocations++;
    t->last_seconds = seconds;
    t->last_ok = ok;
    snprintf(t->last_resource, sizeof t->last_resource, "%s", resource);
    pthread_mutex_unlock(&t->lock);
}

struct world {
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct plugin_node node;
    struct trace trace;
    struct trace *trace_ptr; /* the allocate observer's context */
};

static int setup(void **state)
{
    struct world *w = calloc(1, sizeof *w);
    if (w == NULL)
        return -1;
    fixture_inventory(&w->inv, 4, 0);
    fixture_config(&w->cfg);
    pthread_mutex_init(&w->trace.lock, NULL);
    w->trace_ptr = &w->trace;
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    struct world *w = *state;
    plugin_node_free(&w->node);
    free(w->cfg.time_slices);
    fixture_inventory_free(&w->inv);
    pthread_mutex_destroy(&w->trace.lock);
    free(w);
    return 0;
}

static void start(struct world *w)
{
    char err[256];
    assert_int_equal(plugin_node_init(&w->node, &w->cfg, &w->inv, err, sizeof err), 0);
}

/* Observers of the node's GPU state come after the node's own, in order;
 * by the time they run the node already advertises the change. */
struct advertised {
    struct observer o;
    struct plugin_node *node;
    size_t healthy_seen;
};

static void on_health_check_node(void *ctx, const struct node_state_change *change)
{
    struct advertised *a = ctx;
    a->healthy_seen = plugin_node_healthy_devices(a->node, 0);
    on_health(&a->o, change);
}

static void test_health_observers_in_order(void **state)
{
    struct world *w = *state;
    start(w);
    struct node_state *s = plugin_node_state(&w->node);
    struct advertised a = {{&w->trace, 'a'}, &w->node, 0};
    struct observer b = {&w->trace, 'b'};
    assert_int_equal(node_state_add_observer(s, &a, on_health_check_node), 0);
    assert_int_equal(node_state_add_observer(s, &b, on_health), 0);

    assert_int_equal(node_state_set_gpu_health(s, 2, false), 1);
    assert_string_equal(w->trace.order, "ab");
    assert_int_equal(w->trace.devices[0], 1);
    assert_int_equal(a.healthy_seen, 3); /* the node observed first */
    /* No change, no call. */
    assert_int_equal(node_state_set_gpu_health(s, 2, false), 0);
    assert_string_equal(w->trace.order, "ab");

    node_state_remove_observer(s, &a, on_health_check_node);
    node_state_remove_observer(s, &a, on_health_check_node); /* not registered: no-op */
    assert_int_equal(node_state_set_gpu_health(s, 2, true), 1);
    assert_string_equal(w->trace.order, "abb");
    assert_int_equal(plugin_node_healthy_devices(&w->node, 0), 4);

    /* The node's own observer holds one slot. */
    struct observer more[NODE_STATE_MAX_OBSERVERS];
    size_t added = 0;
    for (size_t i = 0; i < NODE_STATE_MAX_OBSERVERS; i++)
        if (node_state_add_observer(s, &more[i], on_health) == 0)
            added++;
    assert_int_equal(added, NODE_STATE_MAX_OBSERVERS - 2);
}

static void test_accessors(void **state)
{
    struct world *w = *state;
    start(w);
    struct node_state *s = plugin_node_state(&w->node);
    assert_int_equal(plugin_node_resource_count(&w->node), 1);
    assert_string_equal(plugin_node_resource(&w->node, 0)->name, "nvidia.com/gpu");
    assert_ptr_equal(plugin_node_resources(&w->node)->resources, plugin_node_resource(&w->node, 0));
    assert_int_equal(plugin_node_healthy_devices(&w->node, 0), 4);

    assert_int_equal(node_state_set_gpu_health(s, 1, false), 1);
    node_state_set_gpu_lost(s, 3);
    assert_false(node_state_gpu_lost(s, 1));
    assert_true(node_state_gpu_lost(s, 3));
    assert_false(node_state_gpu_lost(s, 99));
    assert_int_equal(plugin_node_healthy_devices(&w->node, 0), 3);

    struct node_gpu_state g[4];
    node_state_gpus(s, g, 4);
    assert_true(g[0].healthy && !g[0].lost);
    assert_true(!g[1].healthy && !g[1].lost);
    assert_true(g[2].healthy && !g[2].lost);
    assert_true(!g[3].healthy && g[3].lost); /* lost: never healthy */
}

/* A MIG device's change reaches that MIG device's resource device and not
 * its sibling (mixed strategy: only MIG devices are served on GPU 0). */
static void test_mig_change_reaches_its_device(void **state)
{
    struct world *w = *state;
    fixture_mig(&w->inv, 0, 2, "3g.20gb");
    w->cfg.mig_strategy = MIG_STRATEGY_MIXED;
    start(w);
    const struct resource *mig = plugin_node_resource(&w->node, 1);
    assert_string_equal(mig->name, "nvidia.com/mig-3g.20gb");
    assert_int_equal(plugin_node_healthy_devices(&w->node, 1), 2);
    assert_int_equal(node_state_set_mig_health(plugin_node_state(&w->node), 0, 1, false), 2);
    assert_int_equal(plugin_node_healthy_devices(&w->node, 1), 1);
    assert_int_equal(plugin_node_healthy_devices(&w->node, 0), 3); /* GPUs 1-3 */
    assert_int_equal(node_state_set_gpu_health(plugin_node_state(&w->node), 0, true), 2);
    assert_int_equal(plugin_node_healthy_devices(&w->node, 1), 2);
}

static enum rpc_status allocate(struct world *w, size_t n_ids, char **ids, char *msg, size_t msglen)
{
    V1beta1__ContainerAllocateRequest c = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    V1beta1__ContainerAllocateRequest *cp = &c;
    V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
    c.n_devices_ids = n_ids;
    c.devices_ids = ids;
    req.n_container_requests = 1;
    req.container_requests = &cp;
    uint8_t buf[4096];
    size_t len = protobuf_c_message_pack(&req.base, buf);
    struct rpc_handlers h = plugin_node_handlers(&w->node, 0);
    struct rpc_buf resp = {0};
    enum rpc_status st = h.unary(h.ctx, NULL, PLUGIN_ALLOCATE, buf, len, &resp, msg, msglen);
    free(resp.data);
    return st;
}

/* Whole-GPU mode answers at once and is observed at once. */
static void test_allocate_observer_whole_gpu(void **state)
{
    struct world *w = *state;
    start(w);
    char msg[256];
    char *good[] = {w->inv.gpus[0].uuid}, *bad[] = {"GPU-nope"};
    assert_int_equal(allocate(w, 1, good, msg, sizeof msg), RPC_OK); /* nobody listens */
    assert_int_equal(plugin_node_add_allocate_observer(&w->node, &w->trace_ptr, on_allocate), 0);
    assert_int_equal(allocate(w, 1, good, msg, sizeof msg), RPC_OK);
    assert_int_equal(w->trace.allocations, 1);
    assert_true(w->trace.last_ok);
    assert_string_equal(w->trace.last_resource, "nvidia.com/gpu");
    assert_int_equal(allocate(w, 1, bad, msg, sizeof msg), RPC_INVALID_ARGUMENT);
    assert_int_equal(w->trace.allocations, 2);
    assert_false(w->trace.last_ok);
    plugin_node_remove_allocate_observer(&w->node, &w->trace_ptr, on_allocate);
    assert_int_equal(allocate(w, 1, good, msg, sizeof msg), RPC_OK);
    assert_int_equal(w->trace.allocations, 2);
}

/* ---- the allocator hook, through a real server ------------------------------------ */

struct fake_allocator {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    struct plugin_allocation *held;
    size_t units;
    bool refuse;
};

static enum rpc_status fake_allocate(void *ctx, struct plugin_allocation *job, size_t resource,
                                     size_t units, char *msg, size_t msglen)
{
    struct fake_allocator *a = ctx;
    assert_int_equal(resource, 0);
    if (a->refuse) {
        snprintf(msg, msglen, "refused");
        return RPC_FAILED_PRECONDITION;
    }
    if (plugin_allocation_park(job) != 0) {
        snprintf(msg, msglen, "cannot park");
        return RPC_RESOURCE_EXHAUSTED;
    }
    pthread_mutex_lock(&a->lock);
    a->held = job;
    a->units = units;
    pthread_cond_broadcast(&a->changed);
    pthread_mutex_unlock(&a->lock);
    return RPC_DEFERRED;
}

struct caller {
    struct rpc_runtime *rt;
    const char *path;
    uint8_t req[512];
    size_t len;
    int rc, status;
    struct rpc_buf resp;
    char msg[256];
};

static void *call_allocate(void *arg)
{
    struct caller *c = arg;
    c->rc = rpc_test_call(c->rt, c->path, "/v1beta1.DevicePlugin/Allocate", c->req, c->len,
                          TIMEOUT_MS, &c->resp, &c->status, c->msg, sizeof c->msg);
    return NULL;
}

/* gpu-mem mode: the registered allocator parks the call; the allocate
 * observers hear of it when it is answered, with the time it really took
 * (review 2(a): the histogram used to time only the parking). */
static void test_deferred_allocate_is_timed_to_its_answer(void **state)
{
    struct world *w = *state;
    w->cfg.resource_mode = RESOURCE_MODE_GPU_MEM;
    for (size_t g = 0; g < w->inv.count; g++)
        w->inv.gpus[g].memory_bytes = 2ull << 30;
    start(w);
    struct fake_allocator fa = {.held = NULL};
    pthread_mutex_init(&fa.lock, NULL);
    pthread_cond_init(&fa.changed, NULL);
    plugin_node_set_allocator(&w->node, &(struct plugin_allocator){&fa, fake_allocate});
    assert_int_equal(plugin_node_add_allocate_observer(&w->node, &w->trace_ptr, on_allocate), 0);

    char dir[] = "/tmp/gp-seams-XXXXXX", path[96], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/gpumem.sock", dir);
    struct rpc_runtime *rt = NULL;
    struct rpc_server *srv = NULL;
    assert_int_equal(rpc_runtime_start(&rt, err, sizeof err), 0);
    struct rpc_handlers h = plugin_node_handlers(&w->node, 0);
    assert_int_equal(rpc_server_start(rt, path, &h, &srv, err, sizeof err), 0);

    const struct resource *res = plugin_node_resource(&w->node, 0);
    char *ids[] = {(char *)res->devices[0].id, (char *)res->devices[1].id};
    V1beta1__ContainerAllocateRequest creq = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    V1beta1__ContainerAllocateRequest *cp = &creq;
    V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
    creq.n_devices_ids = 2;
    creq.devices_ids = ids;
    req.n_container_requests = 1;
    req.container_requests = &cp;
    struct caller c = {.rt = rt, .path = path};
    c.len = protobuf_c_message_pack(&req.base, c.req);

    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, call_allocate, &c), 0);
    pthread_mutex_lock(&fa.lock);
    while (fa.held == NULL)
        pthread_cond_wait(&fa.changed, &fa.lock);
    pthread_mutex_unlock(&fa.lock);
    assert_int_equal(fa.units, 2);
    usleep(50 * 1000);
    assert_int_equal(w->trace.allocations, 0); /* parked: not observed yet */

    struct arena ea = ARENA_INIT;
    struct container_edits edits;
    container_edits_init(&edits, &ea);
    assert_int_equal(container_edits_set_env(&edits, "ALIYUN_COM_GPU_MEM_IDX", "0"), 0);
    assert_int_equal(plugin_allocation_reply(fa.held, &edits, err, sizeof err), 0);
    arena_free(&ea); /* encoded and packed: the edits are no longer needed */
    pthread_join(t, NULL);
    assert_int_equal(c.rc, 0);
    V1beta1__AllocateResponse *out =
        v1beta1__allocate_response__unpack(NULL, c.resp.len, c.resp.data);
    assert_non_null(out);
    assert_int_equal(out->n_container_responses, 1); /* encoded and packed by plugin.c */
    assert_int_equal(out->container_responses[0]->n_envs, 1);
    assert_string_equal(out->container_responses[0]->envs[0]->value, "0");
    v1beta1__allocate_response__free_unpacked(out, NULL);
    free(c.resp.data);
    pthread_mutex_lock(&w->trace.lock);
    assert_int_equal(w->trace.allocations, 1);
    assert_true(w->trace.last_ok);
    assert_true(w->trace.last_seconds >= 0.05);
    assert_string_equal(w->trace.last_resource, "aliyun.com/gpu-mem");
    pthread_mutex_unlock(&w->trace.lock);

    /* An error answer through the handle is observed as a failure. */
    fa.held = NULL;
    c.resp = (struct rpc_buf){0};
    assert_int_equal(pthread_create(&t, NULL, call_allocate, &c), 0);
    pthread_mutex_lock(&fa.lock);
    while (fa.held == NULL)
        pthread_cond_wait(&fa.changed, &fa.lock);
    pthread_mutex_unlock(&fa.lock);
    plugin_allocation_fail(fa.held, RPC_FAILED_PRECONDITION, "no pod");
    pthread_join(t, NULL);
    assert_int_equal(c.rc, -1);
    assert_int_equal(c.status, RPC_FAILED_PRECONDITION);
    assert_string_equal(c.msg, "no pod");
    assert_int_equal(w->trace.allocations, 2);
    assert_false(w->trace.last_ok);

    /* An allocator that refuses without parking: answered at once. */
    fa.refuse = true;
    call_allocate(&c);
    assert_int_equal(c.rc, -1);
    assert_int_equal(c.status, RPC_FAILED_PRECONDITION);
    assert_string_equal(c.msg, "refused");
    assert_int_equal(w->trace.allocations, 3);

    rpc_server_stop(srv);
    rpc_runtime_stop(rt);
    plugin_node_set_allocator(&w->node, NULL);
    rmdir(dir);
    pthread_cond_destroy(&fa.changed);
    pthread_mutex_destroy(&fa.lock);
}

/* ---- a service that is not the DevicePlugin ---------------------------------------- */

static const struct rpc_method ECHO_METHODS[] = {
    {"/test.v1.Echo/Say", RPC_METHOD_UNARY},
};

static enum rpc_status echo_unary(void *ctx, struct rpc_call *call, size_t method,
                                  const uint8_t *req, size_t len, struct rpc_buf *resp, char *msg,
                                  size_t msglen)
{
    (void)ctx;
    (void)call;
    (void)msg;
    (void)msglen;
    assert_int_equal(method, 0);
    resp->data = malloc(len + 4);
    if (resp->data == NULL)
        return RPC_RESOURCE_EXHAUSTED;
    memcpy(resp->data, "say:", 4);
    memcpy(resp->data + 4, req, len);
    resp->len = len + 4;
    return RPC_OK;
}

static void test_transport_serves_any_table(void **state)
{
    (void)state;
    char dir[] = "/tmp/gp-seams-XXXXXX", path[96], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/echo.sock", dir);
    struct rpc_runtime *rt = NULL;
    struct rpc_server *srv = NULL;
    assert_int_equal(rpc_runtime_start(&rt, err, sizeof err), 0);

    /* A stream method needs a snapshot handler: refused before serving. */
    static const struct rpc_method STREAM_ONLY[] = {{"/test.v1.Echo/Watch", RPC_METHOD_STREAM}};
    struct rpc_handlers bad = {.methods = STREAM_ONLY, .method_count = 1, .unary = echo_unary};
    assert_int_equal(rpc_server_start(rt, path, &bad, &srv, err, sizeof err), -1);
    assert_non_null(strstr(err, "/test.v1.Echo/Watch"));

    struct rpc_handlers h = {.methods = ECHO_METHODS, .method_count = 1, .unary = echo_unary};
    assert_int_equal(rpc_server_start(rt, path, &h, &srv, err, sizeof err), 0);
    struct rpc_client *client = NULL;
    assert_int_equal(rpc_client_open(rt, path, &client, err, sizeof err), 0);
    struct rpc_buf resp = {0};
    assert_int_equal(rpc_client_call(client, "/test.v1.Echo/Say", (const uint8_t *)"hi", 2,
                                     TIMEOUT_MS, true, &resp, err, sizeof err),
                     0);
    assert_int_equal(resp.len, 6);
    assert_memory_equal(resp.data, "say:hi", 6);
    free(resp.data);

    /* The DevicePlugin is not served here. */
    assert_int_equal(rpc_client_call(client, "/v1beta1.DevicePlugin/Allocate", (const uint8_t *)"",
                                     0, TIMEOUT_MS, true, NULL, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "Allocate failed: UNIMPLEMENTED (12)"));

    rpc_client_close(client);
    rpc_server_stop(srv);
    rpc_runtime_stop(rt);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_health_observers_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_accessors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mig_change_reaches_its_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocate_observer_whole_gpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deferred_allocate_is_timed_to_its_answer, setup,
                                        teardown),
        cmocka_unit_test(test_transport_serves_any_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
